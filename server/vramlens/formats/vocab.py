"""Value vocabularies the formats accept, for "unknown value — did you mean" checks (VL015).

Sources: research/config-vocabulary.md §2.4 (attention), §3.1 (transformers `OptimizerNames` at
commit 00349ae8), §3.2 (axolotl custom optimizers), §4.4 (LLaMA-Factory), §4.7 (accelerate), §4.8
(litgpt). The knowledge base (`knowledge.optimizers`) is asked first when it is installed; these
lists are what the config formats themselves accept.
"""
from __future__ import annotations

from vramlens.formats.settings import PlanBuilder, Setting, closest
from vramlens.knowledge import optimizers
from vramlens.plan import IssueKind

HF_OPTIMIZERS = (
    "adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused", "adamw_apex_fused",
    "adafactor", "adamw_anyprecision", "adamw_torch_4bit", "adamw_torch_8bit", "ademamix", "sgd", "adagrad",
    "adamw_bnb_8bit", "adamw_8bit", "ademamix_8bit", "lion_8bit", "lion_32bit", "paged_adamw_32bit",
    "paged_adamw_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit",
    "rmsprop", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit", "galore_adamw", "galore_adamw_8bit",
    "galore_adafactor", "galore_adamw_layerwise", "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise",
    "lomo", "adalomo", "grokadamw", "schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd",
    "apollo_adamw", "apollo_adamw_layerwise", "stable_adamw",
)
# Removed from transformers but still found in older configs (adamw_hf until v4.32 was the default).
HF_OPTIMIZERS_REMOVED = ("adamw_hf",)

AXOLOTL_OPTIMIZERS = HF_OPTIMIZERS + (
    "optimi_adamw", "ao_adamw_4bit", "ao_adamw_8bit", "ao_adamw_fp8", "adopt_adamw", "came_pytorch", "muon",
    "dion", "sinkgd", "flash_adamw", "flash_adam", "flash_sgd", "flash_sgdw", "flash_lion", "q_galore_adamw8bit",
)

# torchtune / litgpt name optimizers by class path; these are the common ones (config-vocabulary §3.4).
CLASS_OPTIMIZERS = (
    "torch.optim.AdamW", "torch.optim.Adam", "torch.optim.SGD", "bitsandbytes.optim.PagedAdamW",
    "bitsandbytes.optim.PagedAdamW8bit", "bitsandbytes.optim.PagedAdamW32bit", "bitsandbytes.optim.AdamW8bit",
    "bitsandbytes.optim.AdamW", "bitsandbytes.optim.Adam8bit", "bitsandbytes.optim.PagedLion8bit",
    "torchao.prototype.low_bit_optim.AdamW8bit", "torchao.prototype.low_bit_optim.AdamW4bit",
    "torchao.prototype.low_bit_optim.CPUOffloadOptimizer", "torchao.optim.AdamW8bit", "torchao.optim.AdamW4bit",
    "torchao.optim.CPUOffloadOptimizer",
)

HF_ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
AXOLOTL_ATTENTION = HF_ATTENTION + ("xformers", "sage", "fp8")


def suggest_optimizer(name: str, choices=HF_OPTIMIZERS) -> str | None:
    hint = next(iter(optimizers.suggest_optimizer(name)), None)
    if hint and (not choices or hint in choices):
        return hint
    return closest(name, choices)


def check_optimizer(b: PlanBuilder, s: Setting, choices=HF_OPTIMIZERS) -> None:
    """Warn (VL015) when an optimizer name is not one the format accepts."""
    name = str(s.value).strip()
    if name in choices:
        return
    if name in HF_OPTIMIZERS_REMOVED:
        b.issue(IssueKind.UNKNOWN_VALUE, f"optimizer `{name}` was removed from transformers (the default before v4.32); "
                f"current versions reject it — use `adamw_torch`", s, suggestion="adamw_torch")
        return
    if choices is CLASS_OPTIMIZERS:
        # any importable class works; only a near miss of a known one is worth a warning
        near = closest(name, choices, cutoff=0.85)
        if near and near != name:
            b.unknown(s, "optimizer class", suggestion=near)
        return
    b.unknown(s, "optimizer", suggestion=suggest_optimizer(name, choices))
