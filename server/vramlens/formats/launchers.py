"""Command-line vocabularies of training programs that take their settings as flags: OpenRLHF, ms-swift run
through a launcher, and PEFT's SFT example script. `formats.shell` recognises the command and hands each
flag to the handlers here; what the program does when a flag is absent is applied afterwards, with its source.

OpenRLHF (`python -m openrlhf.cli.train_sft|train_dpo|train_rm|train_kto|train_ppo_ray|…`, `deepspeed --module
openrlhf.cli.…`, `torchrun … openrlhf/cli/train_sft.py`, `ray job submit … -- python3 -m openrlhf.cli.train_ppo_ray`,
where `--actor_num_gpus_per_node` is the actor's own GPU group): flags and defaults from openrlhf/cli/train_sft.py
(OpenRLHF commit f2afba47: `--micro_train_batch_size` 8, `--train_batch_size` 128 global, `--max_len` 2048,
`--zero_stage` 2, `--bf16`, `--flash_attn`, `--gradient_checkpointing`, `--adam_offload`, `--lora_rank` 0,
`--lora_alpha` 16, `--lora_dropout` 0, `--target_modules` all-linear, `--load_in_4bit`, `--packing_samples`,
`--ring_attn_size`); later releases spell precision `--param_dtype bf16|fp16` and attention
`--attn_implementation`. The model is loaded by openrlhf/models/actor.py (commit 01b8a23d): bf16 with `--bf16`
(else the checkpoint's dtype), FlashAttention-2 with `--flash_attn` (else eager), 4-bit NF4 with double
quantization under `--load_in_4bit`, LoRA through PEFT when `--lora_rank` > 0. DeepSpeed runs the step
(openrlhf/utils/deepspeed/deepspeed_utils.py `get_train_ds_config`: ZeRO stage, bf16, Adam states offloaded
to the CPU with `--adam_offload`).

ms-swift through a launcher (`torchrun … swift/cli/sft.py`, `accelerate launch … swift/cli/sft.py`,
`python -m swift.cli.sft`): the same flags as `swift sft|pt|rlhf` (the entry points in swift/cli/).

PEFT's SFT example (huggingface/peft examples/sft/train.py and utils.py, commit 493e7539 / 93288afb): model
flags beside SFTConfig's — `--use_peft_lora`, `--lora_r` (64), `--lora_alpha` (16), `--lora_dropout` (0.1),
`--lora_target_modules` (q,k,v,o,down,up,gate projections), `--use_4bit_quantization`, `--use_nested_quant`,
`--bnb_4bit_compute_dtype` (float16), `--bnb_4bit_quant_type` (nf4), `--bnb_4bit_quant_storage_dtype`,
`--use_8bit_quantization`, `--use_flash_attn` (else eager), `--use_reentrant`; the model is loaded with
`torch_dtype=quant_storage_dtype or torch.float32` — fp32 weights unless 4-bit, so `--bf16 True` is AMP.
"""
from __future__ import annotations

import re
from typing import Callable

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.plan import IssueKind, Origin, Severity

OPENRLHF_CLI = "openrlhf/cli/train_sft.py (OpenRLHF f2afba47)"
OPENRLHF_ACTOR = "openrlhf/models/actor.py (OpenRLHF 01b8a23d)"
PEFT_EXAMPLE = "PEFT examples/sft/utils.py (93288afb)"

_OPENRLHF_MODULE = re.compile(r"openrlhf[./]cli[./](\w+)")
_SWIFT_SCRIPT = re.compile(r"(?:^|/)swift/cli/(sft|pt|rlhf)\.py$")
_SWIFT_MODULE = re.compile(r"swift\.cli\.(sft|pt|rlhf)$")


def program(script: str, module: bool) -> tuple[str, str] | None:
    """(tool, subcommand) of a script or module a launcher runs, for the programs read here."""
    m = _OPENRLHF_MODULE.search(script)
    if m:
        return "openrlhf", m.group(1)
    m = (_SWIFT_MODULE if module else _SWIFT_SCRIPT).search(script)
    if m:
        return "swift", m.group(1)
    return None


# --- OpenRLHF --------------------------------------------------------------------------------------

def _bf16(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("amp_dtype", "bf16", s, note="DeepSpeed bf16 (fp32 master weights in the optimizer)")
        b.set("weight_dtype", "bf16", s, note=f"the model is loaded in bf16 ({OPENRLHF_ACTOR})")


def _param_dtype(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower()
    if v in ("bf16", "fp16"):
        b.set("amp_dtype", v, s)
        b.set("weight_dtype", v, s)
    else:
        b.unknown(s, "parameter dtype", ("bf16", "fp16"))


def _zero_stage(b: PlanBuilder, s: Setting) -> None:
    stage = to_int(s.value)
    if stage is None or not 0 <= stage <= 3:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be 0, 1, 2 or 3, got {s.value!r}", s)
    b.set("dist_strategy", "deepspeed", s)
    b.set("zero_stage", stage, s)


def _adam_offload(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("dist_strategy", "deepspeed", s)
        b.set("offload_optimizer", True, s, note="Adam states on the CPU (DeepSpeed offload_optimizer)")


def _lora_rank(b: PlanBuilder, s: Setting) -> None:
    r = to_int(s.value)
    if r is None:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be a whole number, got {s.value!r}", s)
    if r > 0:
        b.set("peft_method", "lora", s)
        b.set("lora_r", r, s)
    else:
        b.set("peft_method", "none", s, note="`--lora_rank 0`: full fine-tuning")


def _load_in_4bit(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        note = f"NF4 with double quantization ({OPENRLHF_ACTOR})"
        b.set("quant_bits", 4, s, note=note)
        b.set("quant_type", "nf4", s, note=note)
        b.set("quant_double", True, s, note=note)
        b.set("quant_compute_dtype", "bf16", s, note=note)


def _flash(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("attn_impl", "flash_attention_2", s)


def _micro(b: PlanBuilder, s: Setting) -> None:
    b.set_int("micro_batch", s, minimum=1)


def _global(b: PlanBuilder, s: Setting) -> None:
    b.set_int("global_batch", s, minimum=1, note="OpenRLHF `--train_batch_size` is the global batch")


def _seq(b: PlanBuilder, s: Setting) -> None:
    b.set_int("seq_len", s, minimum=1)


def _ring(b: PlanBuilder, s: Setting) -> None:
    b.set_int("context_parallel", s, minimum=1)


def _packing(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("packing", True, s)


def _actor_gpus(b: PlanBuilder, s: Setting) -> None:
    n = to_int(s.value)
    if n is not None and n >= 1:
        note = "OpenRLHF (Ray): the actor trains on its own group of GPUs; the estimate is for one of them"
        b.set("gpu_count", n, s, note=note)
        b.set("world_size", n, s, note=note)


def _via(name: str) -> Callable[[PlanBuilder, Setting], None]:
    return lambda b, s: hf.HANDLERS[name](b, s)


OPENRLHF_HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    "pretrain": _via("model_name_or_path"),
    "micro_train_batch_size": _micro, "train_batch_size": _global, "max_len": _seq,
    "zero_stage": _zero_stage, "bf16": _bf16, "param_dtype": _param_dtype,
    "flash_attn": _flash, "attn_implementation": _via("attn_implementation"),
    "gradient_checkpointing": _via("gradient_checkpointing"), "adam_offload": _adam_offload,
    "lora_rank": _lora_rank, "lora_alpha": _via("lora_alpha"), "lora_dropout": _via("lora_dropout"),
    "target_modules": _via("lora_target_modules"), "load_in_4bit": _load_in_4bit,
    "packing_samples": _packing, "ring_attn_size": _ring, "use_liger_kernel": _via("use_liger_kernel"),
    "actor_num_gpus_per_node": _actor_gpus,
}


def openrlhf_defaults(b: PlanBuilder) -> None:
    """What OpenRLHF's training entry points do when a flag is absent (beyond knowledge.frameworks' table)."""
    plan = b.plan
    if plan.dist_strategy is None:
        b.set("dist_strategy", "deepspeed", origin=Origin.DEFAULT, framework="openrlhf",
              note=f"OpenRLHF trains through DeepSpeed ({OPENRLHF_CLI})")
    if plan.zero_stage is None:
        b.set("zero_stage", 2, origin=Origin.DEFAULT, framework="openrlhf", note=f"`--zero_stage` 2 ({OPENRLHF_CLI})")
    if plan.peft_method is not None and plan.peft_method.value == "lora" and plan.lora_targets is None:
        b.set("lora_targets", ["all-linear"], origin=Origin.DEFAULT, framework="openrlhf",
              note=f"`--target_modules` all-linear ({OPENRLHF_CLI})")
    if plan.quant_bits is not None and plan.peft_method is None:
        b.issue(IssueKind.CONFLICTING_SETTINGS, "`--load_in_4bit` without `--lora_rank`: OpenRLHF trains a 4-bit model only through LoRA adapters",
                severity=Severity.INFO)


# --- PEFT's SFT example ------------------------------------------------------------------------------

def _use_peft_lora(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("peft_method", "lora", s)


def _use_8bit(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("quant_bits", 8, s)
        b.set("quant_type", "int8", s)


def _reentrant(b: PlanBuilder, s: Setting) -> None:
    v = to_bool(s.value)
    if v is not None:
        b.set("ckpt_reentrant", v, s)


PEFT_EXAMPLE_HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    "use_peft_lora": _use_peft_lora,
    "use_4bit_quantization": _via("load_in_4bit"),
    "use_8bit_quantization": _use_8bit,
    "use_nested_quant": _via("bnb_4bit_use_double_quant"),
    "bnb_4bit_quant_storage_dtype": _via("bnb_4bit_quant_storage"),
    "use_reentrant": _reentrant,
}
PEFT_EXAMPLE_FLAGS = frozenset(PEFT_EXAMPLE_HANDLERS) | {"use_flash_attn", "use_unsloth", "chat_template_format"}
PEFT_EXAMPLE_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "up_proj", "gate_proj"]


def peft_example_defaults(b: PlanBuilder) -> None:
    """PEFT's examples/sft: the model flags' defaults and how the model is loaded, where no flag says."""
    plan = b.plan

    def default(concept: str, value, note: str) -> None:
        if getattr(plan, concept) is None:
            b.set(concept, value, origin=Origin.DEFAULT, framework="peft-examples", note=f"{note} ({PEFT_EXAMPLE})")

    lora = plan.peft_method is not None and plan.peft_method.value in ("lora", "qlora")
    if lora:
        default("lora_r", 64, "`--lora_r` 64")
        default("lora_alpha", 16.0, "`--lora_alpha` 16")
        default("lora_dropout", 0.1, "`--lora_dropout` 0.1")
        default("lora_targets", PEFT_EXAMPLE_TARGETS, "`--lora_target_modules` all attention and MLP projections")
    if plan.quant_bits is not None and plan.quant_bits.value == 4:
        default("quant_type", "nf4", "`--bnb_4bit_quant_type` nf4")
        default("quant_double", False, "`--use_nested_quant` off")
        default("quant_compute_dtype", "fp16", "`--bnb_4bit_compute_dtype` float16")
    else:
        default("weight_dtype", "fp32", "the model is loaded with torch_dtype float32 unless 4-bit")
    default("attn_impl", "eager", "eager attention unless `--use_flash_attn`")
