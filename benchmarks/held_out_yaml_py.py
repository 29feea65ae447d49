"""Held-out sources for the YAML and Python frameworks: TRL, torchtune, axolotl, LLaMA-Factory, and a model
repository's own finetune scripts (Qwen) (a plug-in of `held_out.py`: its `FRAMEWORKS` are added to the run)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from held_out import Check, Framework, Source, stated

# --- a script's or a page's own values: the block the plan read ------------------------------------------------

_FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w.\-]*)(?:[ \t]*=[ \t]*|[ \t]+)(?!--)([^\s\\;|&]+)")
_BARE_FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w.\-]*)(?=[ \t]*(?:\\|$|--))", re.M)
_KWARG = re.compile(r"(?<![\w-])([A-Za-z_]\w*)\s*=\s*(\"[^\"\n]*\"|'[^'\n]*'|-?\d[\w.\-]*|True|False)(?![\w.(])")


def _edge(line: str) -> bool:
    t = line.strip()
    return not t or t.startswith(("```", '"""', "'''", "#"))


def _block(lines: list[str], line: int) -> str:
    """The lines around a 0-based line up to a blank line, a fence, a string quote or a comment: the one command or
    call the plan read, when a script's usage or a docs page shows several."""
    first = last = line
    while first > 0 and not _edge(lines[first - 1]):
        first -= 1
    while last + 1 < len(lines) and not _edge(lines[last + 1]):
        last += 1
    return "\n".join(lines[first : last + 1])


def torchtune_stated(path: Path, plan: Any) -> dict[str, Any]:
    """A torchtune config's values, with `batch_size` as the sequences of one backward pass of its recipe: the PPO
    recipe's `ppo_batch_size // gradient_accumulation_steps` (recipes/ppo_full_finetune_single_device.py
    `_ppo_backward_batch_size`), the GRPO recipe's `batch_size × grpo_samples` (recipes/dev/
    grpo_full_finetune_distributed.py `grpo_step` runs the whole trajectory)."""
    values = stated(path)

    def whole(key: str) -> int | None:
        try:
            return int(str(values.get(key)))
        except ValueError:
            return None

    ppo, ga, samples, batch = (
        whole(k) for k in ("ppo_batch_size", "gradient_accumulation_steps", "grpo_samples", "batch_size")
    )
    if ppo:
        values["batch_size"] = ppo // (ga or 1)
    elif samples and batch:
        values["batch_size"] = batch * samples
    return values


def block_stated(path: Path, plan: Any) -> dict[str, Any]:
    """YAML and shell files as `held_out.stated`; a Python script or a Markdown page: the `--flag value` words and
    `key=value` keywords of the block where the plan's model is named (none when it names none)."""
    if path.suffix not in (".py", ".md", ".ipynb"):
        return stated(path)
    span = plan.model_id.span if plan is not None and plan.model_id is not None else None
    if span is None or span.file != str(path):
        return {}
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    if not 0 <= span.start_line < len(lines):
        return {}
    text = _block(lines, span.start_line)
    out: dict[str, Any] = {}
    for m in _BARE_FLAG.finditer(text):
        out.setdefault(m.group(1).replace("-", "_"), "true")
    for pattern in (_FLAG, _KWARG):
        for m in pattern.finditer(text):
            out[m.group(1).replace("-", "_")] = m.group(2).strip("\"'")
    return out


HF_CHECKS = [
    Check(("model_name_or_path", "model"), "model_id", "model"),
    Check(("per_device_train_batch_size",), "micro_batch"),
    Check(("gradient_accumulation_steps",), "grad_accum"),
    Check(("lora_r",), "lora_r"),
    Check(("lora_alpha",), "lora_alpha", "float"),
    Check(("load_in_4bit",), "quant_bits", "map:true=4"),
    Check(("load_in_8bit",), "quant_bits", "map:true=8"),
    Check(("gradient_checkpointing",), "grad_checkpointing", "bool"),
    Check(("packing",), "packing", "bool"),
    Check(("optim",), "optimizer", "text"),
]
TRL_SOURCES = (
    "examples/scripts/*.py",
    "trl/scripts/*.py",
    "examples/cli_configs/*.yaml",
    "docs/source/*.md",
    "docs/source/*.mdx",
)
TRL_EXCLUDE = ("*/__init__.py", "trl/scripts/utils.py", "trl/scripts/_hf_argparser.py", "trl/scripts/env.py")

FRAMEWORKS: list[Framework] = [
    Framework(
        "trl",
        [Source("huggingface+trl", rev, TRL_SOURCES, TRL_EXCLUDE) for rev in ("v0.12.2", "v0.19.1", "HEAD")],
        HF_CHECKS,
        stated=block_stated,
    ),
    Framework(
        "torchtune",
        [
            Source("pytorch+torchtune", rev, ("recipes/configs/*.yaml",))
            for rev in ("v0.1.1", "v0.3.1", "v0.6.1", "HEAD")
        ],
        [
            Check(("batch_size",), "micro_batch"),
            Check(("gradient_accumulation_steps",), "grad_accum"),
            Check(("tokenizer.max_seq_len", "dataset.max_seq_len"), "seq_len"),
            Check(("model.lora_rank",), "lora_r"),
            Check(("model.lora_alpha",), "lora_alpha", "float"),
            Check(("enable_activation_checkpointing",), "grad_checkpointing", "bool"),
            Check(("dataset.packed",), "packing", "bool"),
            Check(("compile",), "compile", "bool"),
            Check(("dtype",), "weight_dtype", "text"),
        ],
        stated=torchtune_stated,
    ),
    Framework(
        "axolotl",
        [
            Source("axolotl-ai-cloud+axolotl", rev, ("examples/*.yml", "examples/*.yaml"))
            for rev in ("v0.5.2", "v0.9.2", "HEAD")
        ],
        [
            Check(("base_model",), "model_id", "model"),
            Check(("micro_batch_size",), "micro_batch"),
            Check(("gradient_accumulation_steps",), "grad_accum"),
            Check(("sequence_len",), "seq_len"),
            Check(("lora_r",), "lora_r"),
            Check(("lora_alpha",), "lora_alpha", "float"),
            Check(("load_in_4bit",), "quant_bits", "map:true=4"),
            Check(("load_in_8bit",), "quant_bits", "map:true=8"),
            Check(("gradient_checkpointing",), "grad_checkpointing", "bool"),
            Check(("sample_packing",), "packing", "bool"),
            Check(("optimizer",), "optimizer", "text"),
        ],
    ),
    Framework(
        "llamafactory",
        [
            Source("hiyouga+LLaMA-Factory", rev, ("examples/*.yaml", "examples/*.sh"))
            for rev in ("v0.6.3", "v0.8.3", "v0.9.5", "HEAD")
        ],
        [
            Check(("model_name_or_path",), "model_id", "model"),
            Check(("per_device_train_batch_size",), "micro_batch"),
            Check(("gradient_accumulation_steps",), "grad_accum"),
            Check(("cutoff_len",), "seq_len"),
            Check(("lora_rank",), "lora_r"),
            Check(("lora_alpha",), "lora_alpha", "float"),
            Check(("quantization_bit",), "quant_bits"),
            Check(("optim",), "optimizer", "text"),
        ],
    ),
    Framework(
        "qwen",  # a model repository's own finetune scripts, read by finetune.py's own argument definitions
        [Source("QwenLM+Qwen", "HEAD", ("finetune/*.sh", "finetune.py"))],
        [
            Check(("model_name_or_path",), "model_id", "model"),
            Check(("per_device_train_batch_size",), "micro_batch"),
            Check(("gradient_accumulation_steps",), "grad_accum"),
            Check(("model_max_length",), "seq_len"),
        ],
    ),
]
