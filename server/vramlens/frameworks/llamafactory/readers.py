"""How the LLaMA-Factory keys with logic are read (the key tables, `keys.py`, say which key each reader serves).

Classic = HF `Seq2SeqTrainingArguments` keys + LLaMA-Factory's model/data/finetuning arguments
(`src/llamafactory/hparams/` at LLaMA-Factory ff6d4d12; docs/config-sources.md). LLaMA-Factory loads the file with
OmegaConf, which follows YAML 1.1 like PyYAML for the values that matter here. The v1 schema (`examples/v1/`) has
`model`, `micro_batch_size` and `*_config: {name: ...}` blocks.
"""

from __future__ import annotations

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.knowledge.liger import DEFAULT_KERNELS as LIGER_KERNELS
from vramlens.knowledge.liger import DEFAULT_KERNELS_NOTE as LIGER_KERNELS_NOTE

FINETUNING = {"lora": "lora", "oft": "other", "freeze": "freeze", "full": "none"}
FLASH_ATTN = {
    "auto": None,
    "disabled": "eager",
    "off": "eager",
    "sdpa": "sdpa",
    "fa2": "flash_attention_2",
    "fa3": "flash_attention_3",
}
# LLaMA-Factory optimizer switches → an optimizer name the knowledge base understands
OPTIMIZER_SWITCHES = {
    "use_galore": "galore_adamw",
    "use_apollo": "apollo_adamw",
    "use_badam": "badam",
    "use_adam_mini": "adam_mini",
    "use_muon": "muon",
}
# mcore_adapter's Megatron arguments (LLaMA-Factory examples/megatron/*.yaml) → plan concepts: (concept, kind)
MEGATRON_KEYS = {
    "tensor_model_parallel_size": ("tensor_parallel", "int"),
    "pipeline_model_parallel_size": ("pipeline_parallel", "int"),
    "virtual_pipeline_model_parallel_size": ("virtual_pipeline", "int"),
    "context_parallel_size": ("context_parallel", "int"),
    "expert_model_parallel_size": ("expert_parallel", "int"),
    "expert_tensor_parallel_size": ("expert_tensor_parallel", "int"),
    "sequence_parallel": ("sequence_parallel", "bool"),
    "use_distributed_optimizer": ("distributed_optimizer", "bool"),
    "recompute_method": ("recompute_method", "choice"),
    "recompute_num_layers": ("recompute_layers", "int"),
}


def finetuning_type(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip().lower()
    if w not in FINETUNING:
        return b.unknown(s, "finetuning type", FINETUNING)
    b.set("peft_method", FINETUNING[w], s)


def lora_target(b: PlanBuilder, s: Setting) -> None:
    t = hf._targets(s.value)
    if t:
        b.set("lora_targets", t, s)


def flash_attn(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None:
        return
    if isinstance(v, bool):  # early 2024: a boolean
        if v:
            b.set("attn_impl", "flash_attention_2", s, note="`flash_attn: true` (LLaMA-Factory before 2024-05)")
        return b.remember(s)
    w = str(v).strip().lower()
    if w not in FLASH_ATTN:
        return b.unknown(s, "`flash_attn` value", FLASH_ATTN)
    impl = FLASH_ATTN[w]
    if impl is None:
        return b.remember(s)
    b.set("attn_impl", impl, s)


def disable_gc(b: PlanBuilder, s: Setting) -> None:
    b.set_bool(
        "grad_checkpointing",
        s,
        invert=True,
        note="LLaMA-Factory checkpoints unless `disable_gradient_checkpointing: true`",
    )


def quant_bit(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    bits = to_int(s.value)
    if bits not in (2, 3, 4, 8):
        return b.unknown(s, "quantization bit width", suggestion=None, hint="expected 2, 3, 4 or 8")
    b.set("quant_bits", bits, s)


def quant_type(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip().lower()
    if w not in ("nf4", "fp4"):
        return b.unknown(s, "quantization type", ("nf4", "fp4"))
    if b.plan.quant_type is None or b.plan.quant_type.value in ("nf4", "fp4"):
        b.set("quant_type", w, s, override=True)


def pure_bf16(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("weight_dtype", "bf16", s, note="`pure_bf16`: bf16 weights and optimizer states, no autocast")
        b.set("amp_dtype", "none", s, override=True)
        b.set(
            "trainable_fp32",
            False,
            s,
            override=True,
            note="`pure_bf16`: trainable weights stay in bf16 (no fp32 upcast)",
        )
    else:
        b.remember(s)


def freeze_list(concept: str):
    """`freeze_trainable_modules` / `freeze_extra_modules`: comma-separated module names ("all": every module)."""

    def handler(b: PlanBuilder, s: Setting) -> None:
        raw = s.value if isinstance(s.value, list) else str(s.value or "").split(",")
        names = [str(n).strip() for n in raw if str(n).strip()]
        if names:
            b.set(concept, names, s)

    return handler


def freeze_layers(b: PlanBuilder, s: Setting) -> None:
    v = to_int(s.value)
    if v is None or v == 0:
        return b.unknown(
            s,
            "number of trainable layers",
            suggestion=None,
            hint="a positive (last n) or negative (first n) whole number",
        )
    b.set("trained_layers", abs(v), s, note=f"the {'last' if v > 0 else 'first'} {abs(v)} layer(s) train")
    b.set("trained_where", "last" if v > 0 else "first", s)


def llama_pro(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set(
            "peft_method",
            "freeze",
            s,
            note="LLaMA-Pro trains only the expanded blocks (`freeze_trainable_layers` of them)",
        )
    else:
        b.remember(s)


def optimizer_switch(name: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value):
            b.set("optimizer", name, s, override=True, note=f"`{s.key}` replaces the trainer's optimizer")

    return handler


def liger(b: PlanBuilder, s: Setting) -> None:
    """`enable_liger_kernel` (hiyouga/LLaMA-Factory ff6d4d12 src/llamafactory/model/model_utils/liger_kernel.py
    `apply_liger_kernel`): the model type's `apply_liger_kernel_to_<model>()` with Liger's defaults, its RMSNorm, RoPE
    and SwiGLU kernels besides the fused loss (what they save: estimate/components/liger.py)."""
    if to_bool(s.value):
        b.set("loss_impl", "fused", s, note="Liger kernels incl. fused linear cross-entropy")
        b.set("fused_kernels", list(LIGER_KERNELS), s, note=LIGER_KERNELS_NOTE)


def megatron(concept: str, kind: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if s.value is None:
            return
        b.set("dist_strategy", "megatron", s)
        if kind == "int":
            b.set_int(concept, s, minimum=1)
        elif kind == "bool":
            b.set_bool(concept, s)
        elif str(s.value).strip().lower() in ("uniform", "block"):
            b.set(concept, str(s.value).strip().lower(), s)
        else:
            b.unknown(s, "recompute method", ("uniform", "block"))

    return handler


def recompute(b: PlanBuilder, s: Setting) -> None:
    """Megatron `recompute_granularity`: `full` checkpoints whole layers; `selective` recomputes only the core
    attention (its scores, softmax and dropout not stored: `components.megatron_core_attention_per_token`)."""
    w = str(s.value).strip().lower() if s.value is not None else ""
    if w not in ("full", "selective"):
        return b.unknown(s, "recompute granularity", ("full", "selective")) if w else None
    b.set("dist_strategy", "megatron", s)
    b.set("grad_checkpointing", w == "full", s, override=True, note=f"Megatron recompute_granularity `{w}`")
    if w == "selective":
        b.set(
            "selective_recompute",
            "core_attention",
            s,
            override=True,
            note="Megatron selective recompute: the core attention",
        )


# --- v1 schema -----------------------------------------------------------------------------------


def v1_section(read):
    """A v1 `*_config` block, read with its nested entries."""
    return lambda b, s, nested: read(b, s, nested.get(s.key, []))


def _named(s: Setting, kids: list[Setting]) -> tuple[str | None, dict[str, Setting]]:
    if not isinstance(s.value, dict):
        return None, {}
    entries = {k.key: k for k in kids} or {str(k): s.child(k, v) for k, v in s.value.items()}
    name = s.value.get("name")
    return (str(name).strip().lower() if name is not None else None), entries


def v1_dist(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
    name, e = _named(s, kids)
    if name is None:
        return
    where = e.get("name", s)
    if name in ("fsdp", "fsdp2"):
        b.set("dist_strategy", "fsdp", where)
        b.set("zero_stage", 3, where, note=f"`{name}` shards parameters, gradients and optimizer states")
    elif name == "deepspeed":
        b.set("dist_strategy", "deepspeed", where)
        cf = e.get("config_file")
        if cf is not None and isinstance(cf.value, str) and cf.value.strip():
            b.reference("deepspeed", cf.value.strip(), cf)
    else:
        b.unknown(where, "distribution backend", ("fsdp2", "deepspeed"))


def v1_peft(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
    name, e = _named(s, kids)
    if name is None:
        return
    where = e.get("name", s)
    if name != "lora":
        b.set("peft_method", "other", where)
        return
    b.set("peft_method", "lora", where)
    if "r" in e:
        b.set_int("lora_r", e["r"], minimum=1)
    if "lora_alpha" in e:
        b.set_float("lora_alpha", e["lora_alpha"])
    if "lora_dropout" in e:
        b.set_float("lora_dropout", e["lora_dropout"])
    if "target_modules" in e:
        lora_target(b, e["target_modules"])


def v1_quant(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
    name, e = _named(s, kids)
    if name is None:
        return
    if "quantization_bit" in e:
        quant_bit(b, e["quantization_bit"])
        if b.plan.quant_bits is not None and name in ("bnb", "auto"):
            b.set("quant_type", "nf4" if b.plan.quant_bits.value == 4 else "int8", e["quantization_bit"])


def v1_kernel(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
    name, e = _named(s, kids)
    if name == "liger_kernel":
        b.set("loss_impl", "fused", e.get("name", s), note="Liger kernels incl. fused linear cross-entropy")
