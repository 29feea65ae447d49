"""LLaMA-Factory YAML (`llamafactory-cli train cfg.yaml`): the classic schema and the "v1" schema.

Classic = HF `Seq2SeqTrainingArguments` keys + LLaMA-Factory's model/data/finetuning arguments
(`src/llamafactory/hparams/` at LLaMA-Factory ff6d4d12; docs/config-sources.md). LLaMA-Factory loads the file with
OmegaConf, which follows YAML 1.1 like PyYAML for the values that matter here. Memory-relevant
defaults that surprise: LoRA unless `finetuning_type` says otherwise, gradient checkpointing ON
unless `disable_gradient_checkpointing: true`, `lora_alpha` = 2 × rank, `cutoff_len` 2048 (1024
before 2024-11). The v1 schema (`examples/v1/`) has `model`, `micro_batch_size` and
`*_config: {name: ...}` blocks.
"""

from __future__ import annotations

from typing import Any

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.plan import IssueKind, Origin, Severity

LF_KEYS = frozenset(
    {
        "stage",
        "finetuning_type",
        "cutoff_len",
        "template",
        "lora_target",
        "lora_rank",
        "quantization_bit",
        "quantization_method",
        "plot_loss",
        "overwrite_cache",
        "max_samples",
        "flash_attn",
        "disable_gradient_checkpointing",
        "pure_bf16",
        "use_galore",
        "use_apollo",
        "use_badam",
        "use_adam_mini",
        "use_muon",
        "enable_liger_kernel",
        "val_size",
        "dataset_dir",
        "neat_packing",
        "use_unsloth",
        "additional_target",
        "freeze_trainable_layers",
        "use_llama_pro",
        "pref_beta",
        "pref_loss",
        "ddp_timeout",
        "infer_backend",
        "double_quantization",
        "quantization_type",
        "use_reentrant_gc",
        "shift_attn",
        "rope_scaling",
        "tensor_model_parallel_size",
    }
)
V1_KEYS = frozenset(
    {
        "model_class",
        "dist_config",
        "peft_config",
        "kernel_config",
        "quant_config",
        "train_dataset",
        "sample_backend",
        "micro_batch_size",
        "cutoff_len",
    }
)

FINETUNING = {"lora": "lora", "oft": "other", "freeze": "freeze", "full": "none"}
FLASH_ATTN = {
    "auto": None,
    "disabled": "eager",
    "off": "eager",
    "sdpa": "sdpa",
    "fa2": "flash_attention_2",
    "fa3": "flash_attention_3",
}
QUANT_METHODS = ("bnb", "hqq", "eetq", "gptq", "awq", "aqlm", "quanto", "mxfp4", "fp8")
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


def detect(data: Any, keys: set[str]) -> float:
    hits = len(keys & LF_KEYS)
    if hits >= 2 and ("stage" in keys or "finetuning_type" in keys or "cutoff_len" in keys):
        return 1.0 if hits >= 3 else 0.95  # ahead of the HF dialect, whose keys it shares
    return 0.0


def detect_v1(data: Any, keys: set[str]) -> float:
    if not isinstance(data.get("model"), str):
        return 0.0
    hits = len(keys & V1_KEYS)
    return min(1.0, 0.5 + 0.1 * hits) if hits >= 2 else 0.0


def _finetuning_type(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip().lower()
    if w not in FINETUNING:
        return b.unknown(s, "finetuning type", FINETUNING)
    b.set("peft_method", FINETUNING[w], s)


def _lora_target(b: PlanBuilder, s: Setting) -> None:
    t = hf._targets(s.value)
    if t:
        b.set("lora_targets", t, s)


def _flash_attn(b: PlanBuilder, s: Setting) -> None:
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


def _disable_gc(b: PlanBuilder, s: Setting) -> None:
    b.set_bool(
        "grad_checkpointing",
        s,
        invert=True,
        note="LLaMA-Factory checkpoints unless `disable_gradient_checkpointing: true`",
    )


def _quant_bit(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    bits = to_int(s.value)
    if bits not in (2, 3, 4, 8):
        return b.unknown(s, "quantization bit width", suggestion=None, hint="expected 2, 3, 4 or 8")
    b.set("quant_bits", bits, s)


def _quant_method(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip().lower()
    if w not in QUANT_METHODS:
        return b.unknown(s, "quantization method", QUANT_METHODS)
    if w != "bnb":
        b.set("quant_type", w, s, override=True)
    else:
        b.remember(s)


def _quant_type(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip().lower()
    if w not in ("nf4", "fp4"):
        return b.unknown(s, "quantization type", ("nf4", "fp4"))
    if b.plan.quant_type is None or b.plan.quant_type.value in ("nf4", "fp4"):
        b.set("quant_type", w, s, override=True)


def _pure_bf16(b: PlanBuilder, s: Setting) -> None:
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


def _freeze_list(concept: str):
    """`freeze_trainable_modules` / `freeze_extra_modules`: comma-separated module names ("all": every module)."""

    def handler(b: PlanBuilder, s: Setting) -> None:
        raw = s.value if isinstance(s.value, list) else str(s.value or "").split(",")
        names = [str(n).strip() for n in raw if str(n).strip()]
        if names:
            b.set(concept, names, s)

    return handler


def _freeze_layers(b: PlanBuilder, s: Setting) -> None:
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


def _llama_pro(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set(
            "peft_method",
            "freeze",
            s,
            note="LLaMA-Pro trains only the expanded blocks (`freeze_trainable_layers` of them)",
        )
    else:
        b.remember(s)


def _optimizer_switch(name: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value):
            b.set("optimizer", name, s, override=True, note=f"`{s.key}` replaces the trainer's optimizer")

    return handler


def _liger(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "fused", s, note="Liger kernels incl. fused linear cross-entropy")


def _megatron(concept: str, kind: str):
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


def _recompute(b: PlanBuilder, s: Setting) -> None:
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


HANDLERS = {
    "model_name_or_path": hf._model,
    "finetuning_type": _finetuning_type,
    "lora_rank": lambda b, s: b.set_int("lora_r", s, minimum=1),
    "lora_alpha": hf._float("lora_alpha"),
    "lora_dropout": hf._float("lora_dropout"),
    "lora_target": _lora_target,
    "additional_target": hf._targets_handler("modules_to_save"),
    "use_dora": hf._dora,
    "cutoff_len": lambda b, s: b.set_int("seq_len", s, minimum=1),
    "packing": lambda b, s: b.set_bool("packing", s),
    "neat_packing": lambda b, s: b.set_bool("packing", s),
    "flash_attn": _flash_attn,
    "disable_gradient_checkpointing": _disable_gc,
    "use_reentrant_gc": lambda b, s: b.set_bool("ckpt_reentrant", s),
    "quantization_bit": _quant_bit,
    "quantization_method": _quant_method,
    "quantization_type": _quant_type,
    "double_quantization": lambda b, s: b.set_bool("quant_double", s),
    "pure_bf16": _pure_bf16,
    "enable_liger_kernel": _liger,
    "freeze_trainable_layers": _freeze_layers,
    "freeze_trainable_modules": _freeze_list("trained_modules"),
    "freeze_extra_modules": _freeze_list("trained_extra"),
    "use_llama_pro": _llama_pro,
    "galore_rank": lambda b, s: b.set_int("optimizer_rank", s, minimum=1),
    "apollo_rank": lambda b, s: b.set_int("optimizer_rank", s, minimum=1),
    "galore_target": hf._targets_handler("optimizer_targets"),
    "apollo_target": hf._targets_handler("optimizer_targets"),
    "recompute_granularity": _recompute,
    **{k: _optimizer_switch(v) for k, v in OPTIMIZER_SWITCHES.items()},
    **{k: _megatron(*v) for k, v in MEGATRON_KEYS.items()},
}
REMEMBER = {
    "stage",
    "template",
    "use_unsloth",
    "use_unsloth_gc",
    "shift_attn",
    "use_rslora",
    "pissa_init",
    "galore_layerwise",
    "apollo_layerwise",
    "badam_mode",
    "ref_model",
    "upcast_layernorm",
    "upcast_lmhead_output",
    "freeze_vision_tower",
    "image_max_pixels",
    "image_min_pixels",
    "image_resolution",
}


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    top = [s for s in settings if len(s.path) == 1]
    rest: list[Setting] = []
    for s in top:
        handler = HANDLERS.get(s.key)
        if handler is not None:
            handler(b, s)
        elif s.key in REMEMBER:
            b.remember(s)
        else:
            rest.append(s)
    hf.apply(b, rest + [s for s in settings if len(s.path) > 1])  # the HF training arguments
    keys = {s.key for s in top if s.value is not None}
    _derive(b, data, keys, top)


def _derive(b: PlanBuilder, data: dict, keys: set[str], top: list[Setting]) -> None:
    plan = b.plan
    by_key = {s.key: s for s in top}
    if plan.optimizer is not None and plan.optimizer.value == "galore_adamw" and to_bool(data.get("galore_layerwise")):
        b.set(
            "optimizer",
            "galore_adamw_layerwise",
            by_key.get("use_galore"),
            override=True,
            note="`use_galore` + `galore_layerwise`",
        )
    if plan.optimizer is not None and plan.optimizer.value == "apollo_adamw" and to_bool(data.get("apollo_layerwise")):
        b.set(
            "optimizer",
            "apollo_adamw_layerwise",
            by_key.get("use_apollo"),
            override=True,
            note="`use_apollo` + `apollo_layerwise`",
        )
    if plan.optimizer is not None and plan.optimizer.value == "badam":
        b.set(
            "trainable_fp32",
            False,
            by_key.get("use_badam"),
            override=True,
            note="BAdam keeps the trainable weights in 16-bit (no fp32 upcast)",
        )
        full = plan.peft_method is None or plan.peft_method.value == "none"
        if full and str(data.get("badam_mode", "layer")).strip().lower() == "layer":
            # BAdam (arXiv:2404.02827) through LLaMA-Factory train/trainer_utils.py `_create_badam_optimizer`:
            # BlockOptimizer over one decoder layer at a time (embedding and LM head not in any block), gradients and
            # Adam states only for the active block
            b.set(
                "peft_method",
                "freeze",
                by_key.get("use_badam"),
                override=True,
                origin=Origin.DERIVED,
                note="BAdam (layer mode) trains one block at a time",
            )
            b.set(
                "trained_layers",
                1,
                by_key.get("use_badam"),
                origin=Origin.DERIVED,
                note="BAdam's active block: one decoder layer",
            )
            b.set(
                "trained_where",
                "rotating",
                by_key.get("use_badam"),
                override=True,
                origin=Origin.DERIVED,
                note="BAdam switches the active block in turn (`badam_switch_mode`)",
            )
    if to_bool(data.get("use_llama_pro")) and (plan.peft_method is None or plan.peft_method.value == "freeze"):
        # LLaMA-Factory 01d87b82 src/llamafactory/model/adapter.py `_setup_freeze_tuning`: with use_llama_pro the
        # trained layers are every `num_layers // freeze_trainable_layers`-th one (the expanded blocks)
        b.set(
            "trained_where",
            "spread",
            by_key.get("use_llama_pro"),
            override=True,
            origin=Origin.DERIVED,
            note="LLaMA-Pro trains the expanded blocks, spread evenly through the model",
        )
    _unsloth(b, data, by_key)
    # lora_alpha: None → 2 × lora_rank
    if plan.lora_alpha is None and plan.lora_r is not None:
        b.set(
            "lora_alpha",
            float(2 * plan.lora_r.value),
            origin=Origin.DERIVED,
            framework="llamafactory",
            note="LLaMA-Factory: lora_alpha unset → 2 × lora_rank",
        )
    # packing: None → True for pre-training
    if plan.packing is None and str(data.get("stage", "")).strip() == "pt":
        b.set(
            "packing",
            True,
            by_key.get("stage"),
            origin=Origin.DERIVED,
            note="LLaMA-Factory packs sequences by default for `stage: pt`",
        )
    if plan.quant_bits is not None and plan.quant_type is None and plan.quant_bits.value in (4, 8):
        b.set(
            "quant_type",
            "nf4" if plan.quant_bits.value == 4 else "int8",
            origin=Origin.DERIVED,
            framework="llamafactory",
            note="bitsandbytes is LLaMA-Factory's default quantization method",
        )
    if "cutoff_len" not in keys:
        b.issue(
            IssueKind.ASSUMED,
            "no `cutoff_len`: LLaMA-Factory's default is 2048 since 2024-11 (1024 before); vramlens uses 2048",
            severity=Severity.INFO,
        )


def _unsloth(b: PlanBuilder, data: dict, by_key: dict[str, Setting]) -> None:
    """`use_unsloth`: the model is loaded and wrapped by unsloth's FastLanguageModel with
    `use_gradient_checkpointing="unsloth"` whatever `disable_gradient_checkpointing` says (LLaMA-Factory ff6d4d12
    src/llamafactory/model/model_utils/unsloth.py `_get_unsloth_kwargs`, `get_unsloth_peft_model`): every decoder
    layer is checkpointed and its saved input offloaded to the CPU (unslothai/unsloth 0050c73e
    unsloth/models/_utils.py `Unsloth_Offloaded_Gradient_Checkpointer`). `use_unsloth_gc` uses that checkpoint
    function for LLaMA-Factory's own checkpointing (model/model_utils/checkpointing.py `_gradient_checkpointing_enable`
    with `use_unsloth_gc`). unsloth's Triton kernels are modelled for speed, not for memory."""
    plan = b.plan
    use, gc = by_key.get("use_unsloth"), by_key.get("use_unsloth_gc")
    if use is not None and to_bool(use.value):
        note = 'unsloth checkpoints every layer (`use_gradient_checkpointing="unsloth"`)'
        b.set("grad_checkpointing", True, use, override=True, note=note)
        b.set(
            "activation_offload",
            True,
            use,
            override=True,
            note="unsloth's offloaded gradient checkpointing keeps each layer's input on the CPU",
        )
        # unsloth's patched model runs its Triton RMSNorm, RoPE, SwiGLU and cross-entropy kernels (unslothai/unsloth
        # 0050c73e unsloth/models/llama.py: fast_rms_layernorm, fast_rope_embedding, kernels/swiglu.py,
        # fast_cross_entropy_loss): their speed is modelled (estimate/throughput.py `elementwise_bytes`)
        b.set(
            "fused_kernels",
            ["rms_norm", "rope", "swiglu", "cross_entropy"],
            use,
            note="unsloth's Triton RMSNorm, RoPE, SwiGLU and cross-entropy kernels",
        )
        b.unmodelled(
            use,
            "the memory of unsloth's fused LoRA and Triton kernels (what they save for backward)",
            "estimated with transformers' layers' memory (their run time and the offloaded checkpointing are modelled)",
        )
    elif gc is not None and to_bool(gc.value) and (plan.grad_checkpointing is None or plan.grad_checkpointing.value):
        b.set(
            "activation_offload",
            True,
            gc,
            override=True,
            note="unsloth's offloaded checkpoint function keeps each layer's input on the CPU",
        )


# --- v1 schema -----------------------------------------------------------------------------------


def apply_v1(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    nested = hf.nested_index(settings)
    for s in settings:
        if len(s.path) != 1:
            continue
        k = s.key
        if k == "model":
            hf._model(b, s)
        elif k == "micro_batch_size":
            b.set_int("micro_batch", s, minimum=1)
        elif k == "gradient_accumulation_steps":
            b.set_int("grad_accum", s, minimum=1)
        elif k == "cutoff_len":
            b.set_int("seq_len", s, minimum=1)
        elif k in ("bf16", "fp16"):
            hf.HANDLERS[k](b, s)
        elif k == "dist_config":
            _v1_dist(b, s, nested.get(k, []))
        elif k == "peft_config":
            _v1_peft(b, s, nested.get(k, []))
        elif k == "quant_config":
            _v1_quant(b, s, nested.get(k, []))
        elif k == "kernel_config":
            _v1_kernel(b, s, nested.get(k, []))
        elif k in ("model_class", "train_dataset"):
            b.remember(s)
    if b.plan.peft_method is None:
        b.set(
            "peft_method",
            "none",
            origin=Origin.DERIVED,
            framework="llamafactory",
            note="v1 schema without `peft_config`: full fine-tuning",
        )


def _named(s: Setting, kids: list[Setting]) -> tuple[str | None, dict[str, Setting]]:
    if not isinstance(s.value, dict):
        return None, {}
    entries = {k.key: k for k in kids} or {str(k): s.child(k, v) for k, v in s.value.items()}
    name = s.value.get("name")
    return (str(name).strip().lower() if name is not None else None), entries


def _v1_dist(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
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


def _v1_peft(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
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
        _lora_target(b, e["target_modules"])


def _v1_quant(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
    name, e = _named(s, kids)
    if name is None:
        return
    if "quantization_bit" in e:
        _quant_bit(b, e["quantization_bit"])
        if b.plan.quant_bits is not None and name in ("bnb", "auto"):
            b.set("quant_type", "nf4" if b.plan.quant_bits.value == 4 else "int8", e["quantization_bit"])


def _v1_kernel(b: PlanBuilder, s: Setting, kids: list[Setting]) -> None:
    name, e = _named(s, kids)
    if name == "liger_kernel":
        b.set("loss_impl", "fused", e.get("name", s), note="Liger kernels incl. fused linear cross-entropy")
