"""Value vocabularies the formats accept, for "unknown value — did you mean" checks (VL015).

Sources (commits and files in docs/config-sources.md): transformers `OptimizerNames` in
`src/transformers/training_args.py` at 00349ae8, axolotl `CustomSupportedOptimizers` in
`src/axolotl/utils/schemas/enums.py`, LLaMA-Factory `src/llamafactory/hparams/`, accelerate
`src/accelerate/utils/dataclasses.py`, litgpt `litgpt/args.py`; attention spellings from each of them.
Optimizer names come from the knowledge base's catalog (`knowledge.optimizers`), which records which names each
format accepts.
"""

from __future__ import annotations

from typing import Callable, Literal

from vramlens.formats.settings import PlanBuilder, Setting, closest
from vramlens.knowledge import optimizers
from vramlens.plan import IssueKind

# Which optimizer names each format's setting accepts, from the catalog's one table of spellings
# (knowledge/data/optimizers.yaml: hf_names, axolotl_names, class_paths). Looked up on first use.
ACCEPTED_OPTIMIZERS: dict[str, Callable[[], tuple[str, ...]]] = {
    "hf": optimizers.hf_names,  # TrainingArguments `optim` (transformers, TRL, LLaMA-Factory)
    "axolotl": optimizers.axolotl_names,  # axolotl `optimizer`
    "class": optimizers.class_paths,  # torchtune `_component_`, litgpt `class_path` (any importable class works)
}
# Removed from transformers but still found in older configs (adamw_hf until v4.32 was the default).
HF_OPTIMIZERS_REMOVED = ("adamw_hf",)

HF_ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
AXOLOTL_ATTENTION = HF_ATTENTION + ("xformers", "sage", "fp8")


def suggest_optimizer(name: str, choices: tuple[str, ...]) -> str | None:
    hint = next(iter(optimizers.suggest_optimizer(name)), None)
    if hint and (not choices or hint in choices):
        return hint
    return closest(name, choices)


def check_optimizer(b: PlanBuilder, s: Setting, accepted: Literal["hf", "axolotl", "class"] = "hf") -> None:
    """Warn (VL015) when an optimizer name is not one the format accepts."""
    choices = ACCEPTED_OPTIMIZERS[accepted]()
    name = str(s.value).strip()
    if name in choices:
        return
    if name in HF_OPTIMIZERS_REMOVED:
        b.issue(
            IssueKind.UNKNOWN_VALUE,
            f"optimizer `{name}` was removed from transformers (the default before v4.32); "
            f"current versions reject it — use `adamw_torch`",
            s,
            suggestion="adamw_torch",
        )
        return
    if accepted == "class":
        # any importable class works; only a near miss of a known one is worth a warning
        near = closest(name, choices, cutoff=0.85)
        if near and near != name:
            b.unknown(s, "optimizer class", suggestion=near)
        return
    b.unknown(s, "optimizer", suggestion=suggest_optimizer(name, choices))
