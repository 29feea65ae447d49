"""The LLaMA-Factory YAML dialects (`llamafactory-cli train cfg.yaml`): the classic hparams and the v1 layout. How the
parser recognises them and reads them with the key tables (`keys.py`), plus the defaults and rules that take several
keys together.

Memory-relevant defaults that surprise: LoRA unless `finetuning_type` says otherwise, gradient checkpointing ON
unless `disable_gradient_checkpointing: true`, `lora_alpha` = 2 × rank, `cutoff_len` 2048 (1024 before 2024-11)
(`src/llamafactory/hparams/` at LLaMA-Factory ff6d4d12; docs/config-sources.md).
"""

from __future__ import annotations

from typing import Any

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.llamafactory.keys import KEYS, KEYS_V1
from vramlens.plan import IssueKind, Origin, Severity

DISPATCH = key_table.by_name(KEYS)
DISPATCH_V1 = key_table.by_name(KEYS_V1)

# Keys that say "LLaMA-Factory" (recognition only; what is read is the key tables)
SIGNATURE = frozenset(
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
SIGNATURE_V1 = frozenset(
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


# v1 keys the classic hparams never had: a config with `model:` and two of them is a v1 config even where it keeps
# keys both layouts share (`template`, `cutoff_len`, `flash_attn` in examples/v1/ at v0.9.5)
V1_ONLY = SIGNATURE_V1 - SIGNATURE - {"micro_batch_size"}


def detect(data: Any, keys: set[str]) -> float:
    if isinstance(data.get("model"), str) and len(keys & V1_ONLY) >= 2:
        return 0.0
    hits = len(keys & SIGNATURE)
    if hits >= 2 and ("stage" in keys or "finetuning_type" in keys or "cutoff_len" in keys):
        return 1.0 if hits >= 3 else 0.95  # ahead of the HF dialect, whose keys it shares
    return 0.0


def detect_v1(data: Any, keys: set[str]) -> float:
    if not isinstance(data.get("model"), str):
        return 0.0
    hits = len(keys & SIGNATURE_V1)
    return min(1.0, 0.5 + 0.1 * hits) if hits >= 2 else 0.0


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    top = [s for s in settings if len(s.path) == 1]
    mine = [s for s in top if s.key in DISPATCH]
    key_table.read(DISPATCH, b, mine, {})
    rest = [s for s in top if s.key not in DISPATCH]
    hf.apply(b, rest + [s for s in settings if len(s.path) > 1])  # the HF training arguments
    keys = {s.key for s in top if s.value is not None}
    _derive(b, data, keys, top)


def _fp8(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    """`fp8: true` (hiyouga/LLaMA-Factory ff6d4d12 src/llamafactory/train/fp8_utils.py `create_fp8_kwargs`):
    accelerate's FP8 with torchao's `Float8LinearConfig.from_recipe_name("rowwise")` on the linears (not the
    embedding, the LM head or a layer whose sizes are not multiples of 16) for `fp8_backend` auto or torchao;
    Transformer Engine's `FP8RecipeKwargs(backend="TE", fp8_format="HYBRID")` for te."""
    fp8 = by_key.get("fp8")
    if fp8 is None or not to_bool(fp8.value):
        return
    chosen = by_key.get("fp8_backend")
    backend = str(chosen.value if chosen is not None and chosen.value is not None else "auto").strip().lower()
    if backend == "te":
        b.unmodelled(
            fp8,
            "FP8 training with Transformer Engine (accelerate's FP8RecipeKwargs, HYBRID format)",
            "estimated with bf16 linears",
        )
    else:
        b.set("float8_linears", True, fp8, note="accelerate FP8: torchao float8 linears (rowwise recipe)")
    # `fp8_enable_fsdp_float8_all_gather` is only logged there: the rowwise recipe's config leaves torchao's
    # `enable_fsdp_float8_all_gather` off, so FSDP gathers the weights in bf16 either way
    b.plan.read_alongside.append("fp8_enable_fsdp_float8_all_gather")


def _derive(b: PlanBuilder, data: dict, keys: set[str], top: list[Setting]) -> None:
    plan = b.plan
    by_key = {s.key: s for s in top}
    _fp8(b, by_key)
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
    top = [s for s in settings if len(s.path) == 1]
    key_table.read(DISPATCH_V1, b, top, hf.nested_index(settings))
    if b.plan.peft_method is None:
        b.set(
            "peft_method",
            "none",
            origin=Origin.DERIVED,
            framework="llamafactory",
            note="v1 schema without `peft_config`: full fine-tuning",
        )
