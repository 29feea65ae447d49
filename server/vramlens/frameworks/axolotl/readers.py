"""How the axolotl keys with logic are read (the key table, `keys.py`, says which key each reader serves).

Defaults and meanings: `src/axolotl/utils/schemas/` at axolotl 067b021c (docs/config-sources.md). axolotl reads
the file with `yaml.safe_load`, so YAML 1.1 applies (`2e-5` is a string its schema converts).
"""

from __future__ import annotations

from vramlens.formats import hf
from vramlens.formats.moe_experts import read_experts_implementation, read_target_parameters
from vramlens.formats.settings import PlanBuilder, Setting, is_auto, to_bool, to_float, to_int
from vramlens.formats.vocab import AXOLOTL_ATTENTION, check_optimizer
from vramlens.frameworks import irrelevant
from vramlens.knowledge.peft_methods import EXPERT_PARAMETERS_UNFUSED

# legacy boolean attention flags, in axolotl's priority order (xformers > sage > flex > flash > sdp > eager)
LEGACY_ATTENTION = (
    ("xformers_attention", "xformers"),
    ("sage_attention", "other"),
    ("flex_attention", "flex_attention"),
    ("flash_attention", "flash_attention_2"),
    ("sdp_attention", "sdpa"),
    ("eager_attention", "eager"),
)

LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"
# The Liger plugin's switches (axolotl/integrations/liger/args.py) → the kernel each swaps in
# (ResolvedPlan.fused_kernels)
LIGER_KERNELS = {
    "liger_rms_norm": "rms_norm",
    "liger_glu_activation": "swiglu",
    "liger_swiglu": "swiglu",
    "liger_rope": "rope",
}


def remember(b: PlanBuilder, s: Setting) -> None:
    b.remember(s)


# axolotl's LoRA kernels (src/axolotl/kernels/lora.py, "credit to unsloth"; applied by
# src/axolotl/monkeypatch/lora_kernels.py): LoRA_QKV saves the input once for q, k and v, LoRA_O its input, LoRA_MLP
# the input and the gate and up outputs (the activation and the down projection's input recomputed in backward),
# each casting the fp32 adapters to the activations' dtype inside: what unsloth's fast_lora.py autograd functions
# keep (ResolvedPlan.fused_lora, components.unsloth_kernels). With dropout they also save the dropped input.
LORA_KERNELS = ("lora_qkv_kernel", "lora_o_kernel", "lora_mlp_kernel")


def lora_kernels(b: PlanBuilder, top: list[Setting]) -> None:
    """The three kernels on, without LoRA dropout: fused LoRA as unsloth's; some of them, or with dropout: named as
    not modelled."""
    on = {s.key: s for s in top if s.key in LORA_KERNELS and to_bool(s.value)}
    if not on:
        return
    dropout = b.plan.lora_dropout is not None and (to_float(b.plan.lora_dropout.value) or 0.0) > 0
    if len(on) == len(LORA_KERNELS) and not dropout:
        first = on["lora_qkv_kernel"]
        b.set("fused_lora", True, first, note="axolotl's LoRA kernels on q/k/v, o and the MLP (what unsloth's keep)")
        b.plan.read_alongside.extend(s.key for s in on.values() if s is not first)
        return
    why = "with LoRA dropout" if dropout else "on some of the linears only"
    for s in on.values():
        b.unmodelled(s, f"axolotl's fused LoRA kernel `{s.key}` {why}", "estimated as PEFT's LoRA layers")


def gradient_checkpointing(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None:
        return
    if isinstance(v, str) and v.strip().lower() in ("offload", "offload_disk"):
        b.set("grad_checkpointing", True, s, note=f"`{v}`: checkpointing with the checkpoints moved off the GPU")
        b.set("activation_offload", True, s, note=f"`gradient_checkpointing: {v}` offloads checkpointed activations")
        return
    b.set_bool("grad_checkpointing", s)


def activation_offloading(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None:
        return
    if isinstance(v, str) and v.strip().lower() in ("legacy", "disk", "hidden_states"):
        return b.set("activation_offload", True, s, note=f"activation offloading mode `{v}`")
    b.set_bool("activation_offload", s)


def adapter(b: PlanBuilder, s: Setting) -> None:
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


def optimizer(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        check_optimizer(b, s, "axolotl")
        b.set("optimizer", s.value.strip(), s)


def attn(b: PlanBuilder, s: Setting) -> None:
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


def targets(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v is None or v == []:
        return
    if isinstance(v, str) and not any(c in v for c in ",") and any(c in v for c in "[]().*\\|+"):
        return b.set("lora_targets", [v.strip()], s, note="a regular expression over module names")
    t = hf._targets(v)
    if t:
        b.set("lora_targets", t, s)


def target_linear(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("lora_targets", ["all-linear"], s, override=True, note="`lora_target_linear: true` → every linear layer")


def dtype_flag(dtype: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value):
            b.set("weight_dtype", dtype, s, note=f"axolotl loads the model in {dtype}")

    return handler


def load_in_8bit(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("quant_bits", 8, s)
        b.set("quant_type", "int8", s)


def gptq(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("quant_bits", 4, s, note="GPTQ pre-quantized weights")
        b.set("quant_type", "gptq", s, override=True)


def quantize_moe_experts(b: PlanBuilder, s: Setting) -> None:
    """axolotl 067b021c src/axolotl/monkeypatch/moe_quant.py `patch_moe_quantization_on_load`: every 3-D parameter
    with "expert" in its name is quantized as it loads (bitsandbytes `replace_parameter_4bit` with `load_in_4bit`,
    row-wise int8 with `load_in_8bit`) and dequantized by a parametrization on access. utils/schemas/config.py
    `check_quantize_moe_experts` requires load_in_4bit or load_in_8bit; without either the setting changes nothing."""
    b.set_bool("experts_quantized", s)


def lora_target_parameters(b: PlanBuilder, s: Setting) -> None:
    """peft `LoraConfig.target_parameters` (axolotl src/axolotl/loaders/adapter.py passes the list), with axolotl's
    matching patch that lets gate_proj/up_proj name the fused gate_up_proj (`EXPERT_PARAMETERS_UNFUSED`)."""
    read_target_parameters(b, s, EXPERT_PARAMETERS_UNFUSED)


experts_implementation = read_experts_implementation  # handed to from_pretrained (loaders/model.py)


def embeddings_skip_upcast(b: PlanBuilder, s: Setting) -> None:
    """axolotl 067b021c src/axolotl/loaders/model.py `_configure_embedding_dtypes` (no fp32 conversion of the embedding
    modules under load_in_4bit) and loaders/patch_manager.py `_apply_adapter_patches` (`patch_peft_prep_code`:
    prepare_model_for_kbit_training without the embeddings' upcast)."""
    b.set_bool("embeddings_skip_upcast", s)


def compile_(b: PlanBuilder, s: Setting) -> None:
    if is_auto(s.value):
        # axolotl utils/schemas/config.py `check_torch_compile_auto`: `auto` compiles on torch 2.5.1 and newer
        return b.set("compile", True, s, note="`torch_compile: auto`: compiled on torch ≥ 2.5.1")
    b.set_bool("compile", s)


def plugins(b: PlanBuilder, s: Setting) -> None:
    """`plugins:` is kept for hovers; what the listed plugins change is read by dialect.cut_cross_entropy (the
    Cut Cross-Entropy switch), by their own keys (Liger's) and named by plugins.check (the others)."""
    b.remember(s)


def cce_switch(b: PlanBuilder, s: Setting) -> None:
    """`cut_cross_entropy`: read with the plugin list by dialect.cut_cross_entropy (the switch alone does nothing)."""
    b.remember(s)


def liger_flce(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "fused", s, note="Liger fused linear cross-entropy")


def chunked_ce(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "chunked", s)


def fsdp_version(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    b.set("dist_strategy", "fsdp", s)
    if str(s.value).strip() in ("1", "2"):
        b.set("fsdp_version", int(str(s.value).strip()), s)
    else:
        b.remember(s)


def unfrozen(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, list) and s.value:
        b.set("peft_method", "freeze", s, note="only the parameters matching `unfrozen_parameters` train")


def model_class(b: PlanBuilder, s: Setting) -> None:
    """`type_of_model: AutoModelForSequenceClassification` (axolotl loads the model with this class)."""
    head = hf.task_head_of_class(str(s.value or "").strip())
    if head is not None:
        b.set("task_head", head, s)
    else:
        b.remember(s)


def global_batch(b: PlanBuilder, s: Setting) -> None:
    b.set_int("global_batch", s, minimum=1, note="axolotl `batch_size` is the total batch")


def fp8(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("amp_dtype", "fp8", s, note="torchao float8 training")


def qat(b: PlanBuilder, s: Setting) -> None:
    """`qat:` (axolotl 067b021c utils/schemas/quantization.py `QATConfig`; utils/quantization.py
    `prepare_model_for_qat`: torchao `quantize_` with a QATConfig swaps the linears for fake-quantized ones): named as
    not modelled with the layouts it fake-quantizes to."""
    b.remember(s)
    if not isinstance(s.value, dict) or not s.value:
        return
    weight = str(s.value.get("weight_dtype") or "int8").lower()  # QATConfig: weight_dtype int8, group_size 32
    act = s.value.get("activation_dtype")
    group = to_int(s.value.get("group_size")) or 32
    # utils/quantization.py `get_quantization_config`: int4 weights alone → Int4WeightOnlyConfig(group_size,
    # version=2); with int8 activations → Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, PerGroup)
    found = {("int4", None): "int4-weight", ("int4", "int8"): "int8-dynamic-int4"}.get(
        (weight, str(act).lower() if act is not None else None)
    )
    if found is not None:
        b.set("qat", f"{found}:{group}", s, note="torchao fake-quantized linears")
        # read into the layout (`quantize_embedding`, the embedding's own fake quantization, stays named)
        b.plan.read_alongside.extend(("weight_dtype", "activation_dtype", "group_size", "fake_quant_after_n_steps"))
        return
    entry = irrelevant.NOT_MODELLED["qat.weight_dtype"]  # the section's entry (the layout is not measured)
    layouts = ", ".join(
        f"{what} {s.value[k]}"
        for k, what in (("weight_dtype", "weights"), ("activation_dtype", "activations"))
        if s.value.get(k) is not None
    )
    b.unmodelled(s, entry[0] + (f": {layouts}" if layouts else ""), entry[1])


def liger_kernel(b: PlanBuilder, s: Setting) -> None:
    """A Liger plugin switch (`liger_rms_norm`, ...): kept for hovers; when on, its kernel runs at the speed
    estimate/throughput.py `elementwise_bytes` models."""
    b.remember(s)
    if to_bool(s.value):
        kernels = list(b.plan.fused_kernels.value) if b.plan.fused_kernels is not None else []
        b.set("fused_kernels", kernels + [LIGER_KERNELS[s.key]], s, override=True, note="Liger plugin kernels")


def legacy_flag(b: PlanBuilder, s: Setting) -> None:
    """A legacy boolean attention flag: read with the others, in axolotl's priority order, by `legacy_attention`."""


def gpu(b: PlanBuilder, s: Setting) -> None:
    from vramlens.formats.hints import _lookup

    if s.value is None or s.value == "":
        return
    hit = _lookup(str(s.value))
    if hit is None:
        choices = ("l40s", "a100-40gb", "a100-80gb", "a10g", "h100", "t4", "l4")
        return b.unknown(s, "cloud GPU", choices)
    b.set("gpu_name", hit[0], s, note=hit[2])
