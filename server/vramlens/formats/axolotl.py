"""axolotl YAML (`axolotl train config.yml`), including legacy keys, and axolotl cloud configs.

Defaults and meanings: `src/axolotl/utils/schemas/` at axolotl 067b021c (docs/config-sources.md). axolotl reads
the file with `yaml.safe_load`, so YAML 1.1 applies (`2e-5` is a string its schema converts).
Legacy spellings still accepted (with a deprecation warning by axolotl) are read too: boolean
attention flags, `fsdp: [full_shard, ...]` with `fsdp_`-prefixed `fsdp_config`, `base_model_config`.
"""

from __future__ import annotations

from typing import Any

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, is_auto, to_bool
from vramlens.formats.vocab import AXOLOTL_ATTENTION, check_optimizer
from vramlens.plan import IssueKind, Severity

AXOLOTL_KEYS = frozenset(
    {
        "base_model",
        "micro_batch_size",
        "sequence_len",
        "sample_packing",
        "num_epochs",
        "lora_target_linear",
        "adapter",
        "dataset_prepared_path",
        "val_set_size",
        "saves_per_epoch",
        "evals_per_epoch",
        "lr_scheduler",
        "special_tokens",
        "wandb_project",
        "wandb_entity",
        "wandb_watch",
        "wandb_log_model",
        "eval_sample_packing",
        "pad_to_sequence_len",
        "lora_model_dir",
        "base_model_config",
        "is_llama_derived_model",
        "train_on_inputs",
        "flash_attention",
        "xformers_attention",
        "sdp_attention",
        "chat_template",
        "plugins",
        "strict",
        "fsdp_version",
        "unfrozen_parameters",
        "liger_fused_linear_cross_entropy",
        "tokenizer_type",
        "eot_tokens",
        "lora_fan_in_fan_out",
        "model_type",
        "rl",
        "datasets",
        "activation_offloading",
    }
)
CLOUD_KEYS = frozenset(
    {
        "gpu",
        "gpu_count",
        "node_count",
        "provider",
        "secrets",
        "volumes",
        "branch",
        "dockerfile_commands",
        "memory",
        "timeout",
        "memory_preprocess",
        "timeout_preprocess",
    }
)

# legacy boolean attention flags, in axolotl's priority order (xformers > sage > flex > flash > sdp > eager)
LEGACY_ATTENTION = (
    ("xformers_attention", "xformers"),
    ("sage_attention", "other"),
    ("flex_attention", "flex_attention"),
    ("flash_attention", "flash_attention_2"),
    ("sdp_attention", "sdpa"),
    ("eager_attention", "eager"),
)

CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"


def detect(data: Any, keys: set[str]) -> float:
    hits = len(keys & AXOLOTL_KEYS)
    if "base_model" in keys and hits >= 3:
        return 1.0 if hits >= 5 else 0.95  # ahead of the HF dialect, whose keys it shares
    if hits >= 4 and ("micro_batch_size" in keys or "sequence_len" in keys):
        return 0.92
    return 0.0


def detect_cloud(data: Any, keys: set[str]) -> float:
    if "gpu" in keys and len(keys & CLOUD_KEYS) >= 2 and not keys & AXOLOTL_KEYS:
        return 0.8
    return 0.0


def _gradient_checkpointing(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None:
        return
    if isinstance(v, str) and v.strip().lower() in ("offload", "offload_disk"):
        b.set("grad_checkpointing", True, s, note=f"`{v}`: checkpointing with the checkpoints moved off the GPU")
        b.set("activation_offload", True, s, note=f"`gradient_checkpointing: {v}` offloads checkpointed activations")
        return
    b.set_bool("grad_checkpointing", s)


def _activation_offloading(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None:
        return
    if isinstance(v, str) and v.strip().lower() in ("legacy", "disk", "hidden_states"):
        return b.set("activation_offload", True, s, note=f"activation offloading mode `{v}`")
    b.set_bool("activation_offload", s)


def _adapter(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None or v == "":
        return
    w = str(v).strip().lower()
    if w in ("lora", "qlora"):
        b.set("peft_method", w, s, override=True)  # an adapter wins over `unfrozen_parameters`
        if w == "qlora":
            b.set("quant_bits", 4, s, note="axolotl QLoRA loads the base model in 4-bit NF4")
            b.set("quant_type", "nf4", s)
    elif w in ("llama-adapter", "ia3", "vera", "oft"):
        b.set("peft_method", "other", s)
    else:
        b.unknown(s, "adapter", ("lora", "qlora"))


def _optimizer(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        check_optimizer(b, s, "axolotl")
        b.set("optimizer", s.value.strip(), s)


def _attn(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip()
    if w in AXOLOTL_ATTENTION:
        return b.set(
            "attn_impl",
            w
            if w in ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention", "xformers")
            else "other",
            s,
        )
    if "/" in w:
        return b.set("attn_impl", hf.normalize_attn(w) or "other", s, note=f"hub kernel `{w}`")
    # axolotl rejects the short forms (flash, fa2, flex, sdp)
    short = hf.normalize_attn(w)
    b.unknown(
        s, "attention implementation", AXOLOTL_ATTENTION, suggestion=short if short in AXOLOTL_ATTENTION else None
    )
    if short is not None:
        b.set("attn_impl", short, s)


def _targets(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None or v == []:
        return
    if isinstance(v, str) and not any(c in v for c in ",") and any(c in v for c in "[]().*\\|+"):
        return b.set("lora_targets", [v.strip()], s, note="a regular expression over module names")
    t = hf._targets(v)
    if t:
        b.set("lora_targets", t, s)


def _target_linear(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("lora_targets", ["all-linear"], s, override=True, note="`lora_target_linear: true` → every linear layer")


def _dtype_flag(dtype: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value):
            b.set("weight_dtype", dtype, s, note=f"axolotl loads the model in {dtype}")

    return handler


def _load_in_8bit(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("quant_bits", 8, s)
        b.set("quant_type", "int8", s)


def _gptq(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("quant_bits", 4, s, note="GPTQ pre-quantized weights")
        b.set("quant_type", "gptq", s, override=True)


def _compile(b: PlanBuilder, s: Setting) -> None:
    if is_auto(s.value):
        return b.remember(s)
    b.set_bool("compile", s)


def _plugins(b: PlanBuilder, s: Setting) -> None:
    plugins = s.value if isinstance(s.value, list) else []
    for p in plugins:
        if str(p).strip() == CCE_PLUGIN:
            b.set("loss_impl", "fused", s, note="Cut Cross-Entropy plugin: no full logits tensor")
    b.remember(s)


def _liger_flce(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "fused", s, note="Liger fused linear cross-entropy")


def _chunked_ce(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "chunked", s)


def _fsdp_version(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    b.set("dist_strategy", "fsdp", s)
    if str(s.value).strip() in ("1", "2"):
        b.set("fsdp_version", int(str(s.value).strip()), s)
    else:
        b.remember(s)


def _unfrozen(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, list) and s.value:
        b.set("peft_method", "freeze", s, note="only the parameters matching `unfrozen_parameters` train")


def _model_class(b: PlanBuilder, s: Setting) -> None:
    """`type_of_model: AutoModelForSequenceClassification` (axolotl loads the model with this class)."""
    head = hf.task_head_of_class(str(s.value or "").strip())
    if head is not None:
        b.set("task_head", head, s)
    else:
        b.remember(s)


def _int(concept: str, minimum: int = 1):
    return lambda b, s: b.set_int(concept, s, minimum=minimum)


def _gpu(b: PlanBuilder, s: Setting) -> None:
    from vramlens.formats.hints import _lookup

    if s.value is None or s.value == "":
        return
    hit = _lookup(str(s.value))
    if hit is None:
        choices = ("l40s", "a100-40gb", "a100-80gb", "a10g", "h100", "t4", "l4")
        return b.unknown(s, "cloud GPU", choices)
    b.set("gpu_name", hit[0], s, note=hit[2])


HANDLERS = {
    "base_model": hf._model,
    "base_model_config": hf._model,
    "micro_batch_size": _int("micro_batch"),
    "gradient_accumulation_steps": _int("grad_accum"),
    "batch_size": lambda b, s: b.set_int("global_batch", s, minimum=1, note="axolotl `batch_size` is the total batch"),
    "eval_batch_size": _int("eval_batch"),
    "sequence_len": _int("seq_len"),
    "sample_packing": lambda b, s: b.set_bool("packing", s),
    "gradient_checkpointing": _gradient_checkpointing,
    "activation_offloading": _activation_offloading,
    "attn_implementation": _attn,
    "torch_compile": _compile,
    "torch_compile_mode": hf._compile_mode,
    "optimizer": _optimizer,
    "adapter": _adapter,
    "peft_use_dora": hf._dora,
    "lora_r": _int("lora_r"),
    "lora_alpha": hf._float("lora_alpha"),
    "lora_dropout": hf._float("lora_dropout"),
    "lora_target_modules": _targets,
    "lora_target_linear": _target_linear,
    "lora_modules_to_save": hf._targets_handler("modules_to_save"),
    "load_in_4bit": hf._load_in(4),
    "load_in_8bit": _load_in_8bit,
    "gptq": _gptq,
    "bf16": hf._amp("bf16"),
    "fp16": hf._amp("fp16"),
    "bfloat16": _dtype_flag("bf16"),
    "float16": _dtype_flag("fp16"),
    "torch_dtype": hf._dtype,
    "fsdp": hf._fsdp,
    "fsdp_version": _fsdp_version,
    "tensor_parallel_size": _int("tensor_parallel"),
    "context_parallel_size": _int("context_parallel"),
    "sequence_parallel_degree": _int("context_parallel"),
    "plugins": _plugins,
    "liger_fused_linear_cross_entropy": _liger_flce,
    "cut_cross_entropy": _liger_flce,
    "chunked_cross_entropy": _chunked_ce,
    "unfrozen_parameters": _unfrozen,
    "lisa_n_layers": hf._lisa_layers,
    "num_labels": hf._num_labels,
    "type_of_model": _model_class,
    "model_type": _model_class,
    "gpu": _gpu,
    "gpu_count": _int("gpu_count"),
    "fp8": lambda b, s: b.set("amp_dtype", "fp8", s, note="torchao float8 training") if to_bool(s.value) else None,
}
REMEMBER = {
    "tf32",
    "pad_to_sequence_len",
    "eval_sample_packing",
    "rl",
    "tiled_mlp",
    "dp_shard_size",
    "dp_replicate_size",
    "model_quantization_config",
    "experimental_skip_move_to_device",
    "lora_mlp_kernel",
    "lora_qkv_kernel",
    "lora_o_kernel",
    "liger_rms_norm",
    "liger_glu_activation",
    "liger_rope",
    "liger_layer_norm",
    "low_cpu_mem_usage",
    "gpu_memory_limit",
    "max_memory",
    "device_map",
    "num_epochs",
    "is_llama_derived_model",
    "node_count",
    "use_kernels",
    "sample_packing_eff_est",
    "processor_type",
    "image_size",
    "image_resize_algorithm",
}


# Switches axolotl reads that change activation memory or speed and that the estimate has no formula for
# (axolotl/utils/schemas/config.py, axolotl 0.12): key → (what it is, how the estimate treats it).
# The Liger plugin's switches (axolotl/integrations/liger/args.py) → the kernel each swaps in (ResolvedPlan.fused_kernels)
LIGER_KERNELS = {"liger_rms_norm": "rms_norm", "liger_glu_activation": "swiglu", "liger_rope": "rope"}
NOT_MODELLED = {
    "tiled_mlp": ("TiledMLP, the MLP run over sequence tiles", "estimated with the whole sequence through the MLP"),
    "lora_mlp_kernel": ("axolotl's fused LoRA MLP kernel", "estimated as PEFT's LoRA layers"),
    "lora_qkv_kernel": ("axolotl's fused LoRA QKV kernel", "estimated as PEFT's LoRA layers"),
    "lora_o_kernel": ("axolotl's fused LoRA output kernel", "estimated as PEFT's LoRA layers"),
    "liger_rms_norm": (
        "the memory of Liger's RMSNorm kernel",
        "estimated as transformers' RMSNorm's (its run time is modelled)",
    ),
    "liger_glu_activation": (
        "the memory of Liger's SwiGLU kernel",
        "estimated as transformers' MLP's (its run time is modelled)",
    ),
    "liger_rope": (
        "the memory of Liger's RoPE kernel",
        "estimated as transformers' rotary embedding's (its run time is modelled)",
    ),
    "liger_layer_norm": ("Liger's LayerNorm kernel", "estimated as PyTorch's LayerNorm"),
    "use_kernels": ("kernels from the Hugging Face kernels hub", "estimated with transformers' own layers"),
}


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    top = [s for s in settings if len(s.path) == 1]
    nested = hf.nested_index(settings)
    keys = {s.key for s in top if s.value is not None}
    if "base_model" in keys and "base_model_config" in keys:
        top = [s for s in top if s.key != "base_model_config"]
    for s in top:
        handler = HANDLERS.get(s.key)
        if handler is not None:
            handler(b, s)
        elif s.key == "deepspeed":
            hf._deepspeed(b, s, nested)
        elif s.key == "fsdp_config":
            hf._fsdp_config(b, s, nested)
        elif s.key == "gradient_checkpointing_kwargs":
            hf._ckpt_kwargs(b, s, nested)
        elif s.key in REMEMBER:
            b.remember(s)
        if s.key in NOT_MODELLED and to_bool(s.value):
            b.unmodelled(s, *NOT_MODELLED[s.key])
        if s.key in LIGER_KERNELS and to_bool(s.value):
            # the Liger plugin's kernels run at the speed estimate/throughput.py `elementwise_bytes` models
            kernels = list(b.plan.fused_kernels.value) if b.plan.fused_kernels is not None else []
            b.set("fused_kernels", kernels + [LIGER_KERNELS[s.key]], s, override=True, note="Liger plugin kernels")
    _legacy_attention(b, top)
    if b.plan.peft_method is None and b.plan.quant_bits is not None:
        # load_in_4bit without `adapter` — axolotl refuses to train quantized weights in full
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            "`load_in_4bit`/`load_in_8bit` without `adapter: lora|qlora`: quantized weights cannot be fully fine-tuned",
            severity=Severity.WARNING,
        )
    if (
        b.plan.peft_method is not None
        and b.plan.peft_method.value == "lora"
        and b.plan.quant_bits is not None
        and b.plan.quant_bits.value == 4
        and b.plan.quant_bits.key == "load_in_4bit"
    ):
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            "`adapter: lora` with `load_in_4bit: true`: axolotl expects `adapter: qlora` for 4-bit",
            span=b.plan.peft_method.value_span,
            severity=Severity.INFO,
            suggestion="qlora",
        )


def _legacy_attention(b: PlanBuilder, top: list[Setting]) -> None:
    legacy = dict(LEGACY_ATTENTION)
    flags = {s.key: s for s in top if s.key in legacy}
    on = [(k, impl) for k, impl in LEGACY_ATTENTION if k in flags and to_bool(flags[k].value)]
    for k, s in flags.items():
        b.remember(s)
    if not on:
        return
    key, impl = on[0]
    s = flags[key]
    if b.plan.attn_impl is not None and b.plan.attn_impl.key == "attn_implementation":
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            f"`{key}: true` together with `attn_implementation`: axolotl refuses both; remove `{key}`",
            s,
            severity=Severity.ERROR,
        )
        return
    b.set("attn_impl", impl, s, note=f"legacy flag `{key}` (axolotl maps it to `attn_implementation: {impl}`)")


def apply_cloud(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    for s in settings:
        if len(s.path) != 1:
            continue
        if s.key == "gpu":
            _gpu(b, s)
        elif s.key == "gpu_count":
            b.set_int("gpu_count", s, minimum=1)
        elif s.key in ("node_count", "provider"):
            b.remember(s)
    nodes = data.get("node_count") if isinstance(data, dict) else None
    if b.plan.gpu_count is not None and isinstance(nodes, int) and nodes > 1:
        b.set("world_size", b.plan.gpu_count.value * nodes, note=f"{b.plan.gpu_count.value} GPUs × {nodes} nodes")
