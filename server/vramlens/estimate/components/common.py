"""Shared by every component: bytes per dtype, a block's canonical linears, and how the step runs them (linears
transformers' modelling code fuses, autocast's fp32 stream, compiled blocks, unsloth's kernels, the plan as
transformers loads it)."""

from __future__ import annotations

from vramlens.knowledge import versions
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.resolved import ResolvedPlan

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "uint8": 1}

# A block's canonical linears (the plan's LoRA target names): attention, then the MLP (gated, or fc1/fc2)
ATTN_LINEARS = ("q", "k", "v", "o")
MLP_LINEARS = ("gate", "up", "down", "fc1", "fc2")


def has_linear(arch, name: str) -> bool:
    """Whether the block has the canonical linear `name`: gate/up/down in a gated MLP, fc1/fc2 in an ungated one."""
    gated = arch.mlp in ("swiglu", "geglu")
    if name in ("gate", "up", "down"):
        return gated
    if name in ("fc1", "fc2"):
        return not gated
    return True


def linear_out_features(arch, name: str) -> int:
    """Output width of the block's canonical linear `name` (0 for a name that is no block linear)."""
    return {
        "q": arch.q_dim,
        "k": arch.kv_dim,
        "v": arch.kv_dim,
        "o": arch.hidden,
        "gate": arch.intermediate,
        "up": arch.intermediate,
        "fc1": arch.intermediate,
        "down": arch.hidden,
        "fc2": arch.hidden,
    }.get(name, 0)


def linear_in_features(arch, name: str) -> int:
    """Input width of the block's canonical linear `name`."""
    return {"o": arch.q_dim, "down": arch.intermediate, "fc2": arch.intermediate}.get(name, arch.hidden)


# Families whose modelling code computes q|k|v with one linear and applies RoPE to the q and k sliced from its
# output: transformers 5.24 models/phi3/modeling_phi3.py `qkv_proj`; Qwen-1's remote code (Qwen/Qwen-7B on the Hub,
# modeling_qwen.py `QWenAttention`: `c_attn`, h → 3·h, `mixed_x_layer.split(self.split_size, dim=2)`), ChatGLM2/3's
# (THUDM/chatglm3-6b modeling_chatglm.py `SelfAttention.query_key_value`, split into grouped q, k, v) and Baichuan2's
# (baichuan-inc/Baichuan2-7B-Base modeling_baichuan.py `Attention.W_pack`, h → 3·h; 13B's ALiBi has no RoPE) and
# InternLM2's (internlm/internlm2-chat-7b modeling_internlm2.py `InternLM2Attention.wqkv`, grouped). A LoRA
# target among q, k, v adapts the whole fused linear, and V is a view of the q|k|v output, so what attention keeps
# holds all of it. Phi-4-multimodal's decoder attention is Phi-3's (models/phi4_multimodal `Phi4MultimodalAttention`).
HF_ROPE_QKV = {"phi3", "qwen", "chatglm", "baichuan", "internlm2", "phi4_multimodal"}
# Families whose MLP computes gate|up with one linear: transformers 5.24 models/phi3/modeling_phi3.py
# `gate_up_proj`, models/granitemoehybrid/modeling_granitemoehybrid.py `GraniteMoeHybridMLP` (input_linear, chunked
# in two), ChatGLM2/3's remote code (THUDM/chatglm3-6b modeling_chatglm.py `MLP.dense_h_to_4h`), GLM and GLM-4 and
# the language models of their vision variants (models/glm/modeling_glm.py and models/glm4/modeling_glm4.py
# `gate_up_proj`, chunked in two as Phi-3's; glm4v, glm46v, glm_image, glm_ocr, glmga build the same MLP), and
# Phi-4-multimodal's decoder (models/phi4_multimodal); a LoRA target among gate and up adapts the whole fused linear.
# tests/estimate/test_fused_linears.py holds this list to transformers' own builds (knowledge/data/inventories).
HF_FUSED_GATE_UP = {
    "phi3",
    "granitemoehybrid",
    "chatglm",
    "glm",
    "glm4",
    "glm4v",
    "glm4v_text",
    "glm46v",
    "glm_image",
    "glm_image_text",
    "glm_ocr",
    "glm_ocr_text",
    "glmga",
    "phi4_multimodal",
}


# Families whose q|k|v come from one `c_attn` linear with no rotary embedding (transformers 5.24 models/gpt2 Conv1D
# `c_attn`, models/gpt_bigcode nn.Linear `c_attn`, h → h + 2·kv; models/openai Conv1D `c_attn`, h → 3·h): one LoRA
# adapter (one cast or dropout of the input) for q, k and v; q, k and v stay views of its output, which attention
# keeps anyway.
HF_C_ATTN_FAMILIES = {"gpt2", "gpt_bigcode", "openai-gpt"}


# Families whose transformers modelling code computes q|k|v with one linear (besides HF_ROPE_QKV and
# HF_C_ATTN_FAMILIES): transformers 5.24 models/falcon/modeling_falcon.py, models/gpt_neox/modeling_gpt_neox.py and
# models/bloom/modeling_bloom.py `query_key_value`; models/mpt/modeling_mpt.py `Wqkv`,
# models/codegen/modeling_codegen.py `qkv_proj`, models/gpt_neox_japanese/modeling_gpt_neox_japanese.py and
# models/persimmon/modeling_persimmon.py `query_key_value`; models/dbrx/modeling_dbrx.py `Wqkv`.
HF_ONE_QKV_LINEAR = {"falcon", "gpt_neox", "bloom", "mpt", "codegen", "gpt_neox_japanese", "persimmon", "dbrx"}


# Megatron-core computes q|k|v with one linear and a gated MLP's gate|up with one (megatron/core/transformer/
# attention.py core_v0.15.0 `SelfAttention.linear_qkv`, mlp.py `MLP.linear_fc1`: 2 × ffn wide under
# gated_linear_unit; the experts' too, moe/experts.py): Megatron-SWIFT's LoRA on `linear_qkv` or `linear_fc1` (ms-swift
# v4.0.0 swift/megatron/tuners/lora.py `LoraParallelLinear` over the fused module) is one adapter over each
MEGATRON_FUSED_GROUPS = (("q", "k", "v"), ("gate", "up"))


def fused_groups(rp: ResolvedPlan) -> tuple[tuple[str, ...], ...]:
    """Canonical linears the model's code computes with one nn.Linear (or Conv1D): q|k|v (`HF_C_ATTN_FAMILIES`,
    `HF_ONE_QKV_LINEAR`, `HF_ROPE_QKV`) and gate|up (`HF_FUSED_GATE_UP`) of transformers' families, both in every
    Megatron-core model (`MEGATRON_FUSED_GROUPS`); a LoRA target among them adapts the whole fused linear (one
    lora_A of in × r, one lora_B of r × the fused width)."""
    if rp.strategy == "megatron":
        return MEGATRON_FUSED_GROUPS
    if rp.framework not in HF_MODEL_FRAMEWORKS:
        return ()
    family = rp.arch.family
    out: tuple[tuple[str, ...], ...] = ()
    if family in HF_C_ATTN_FAMILIES | HF_ONE_QKV_LINEAR | HF_ROPE_QKV:
        out += (("q", "k", "v"),)
    if family in HF_FUSED_GATE_UP:
        out += (("gate", "up"),)
    return out


def fsdp_16bit_compute(rp: ResolvedPlan) -> bool:
    """FSDP's mixed precision computes the step with 16-bit parameters: each unit's fp32 shard is cast to
    `param_dtype` and all-gathered, and the module's parameters *are* those 16-bit unsharded tensors while it runs
    (torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_param.py `init_dtype_attrs` / `all_gather_inputs`:
    the shard `.to(param_dtype)`, `to_unsharded` sets the module's parameter to the unsharded 16-bit tensor;
    FSDP1 torch/distributed/fsdp/_flat_param.py `_use_unsharded_flat_param` views the 16-bit `_full_param_padded`).
    Every parameter of the unit is gathered so, LoRA adapters included: the embedding returns 16-bit, the norms
    return `weight * x.to(input_dtype)` in 16-bit, and the residual stream is 16-bit, as in a 16-bit step. Autocast,
    when it runs too (accelerate 1.15 accelerator.py `prepare_model` wraps the forward in autocast whenever
    mixed_precision is set, FSDP or not; verl's dp_actor.py), meets 16-bit weights and casts nothing."""
    return rp.fsdp_mixed_precision and rp.compute_dtype != "fp32"


def compute_weight_dtype(rp: ResolvedPlan) -> str:
    """The dtype the parameters have while the step computes with them: the 16-bit `param_dtype` under FSDP's
    mixed precision (`fsdp_16bit_compute`), else the parameters' own dtype."""
    return rp.compute_dtype if fsdp_16bit_compute(rp) else rp.weight_dtype


def adapter_computes_fp32(rp: ResolvedPlan) -> bool:
    """Whether the adapters compute with fp32 weights (peft's `autocast_adapter_dtype`): not under FSDP's mixed
    precision, which gathers them in 16-bit with the rest of the unit (`fsdp_16bit_compute`), so peft's
    `_cast_input_dtype(x, lora_A.weight.dtype)` (peft 0.21.2 src/peft/tuners/lora/layer.py) casts nothing."""
    return rp.adapter_fp32 and not fsdp_16bit_compute(rp)


def fp32_residual(rp: ResolvedPlan) -> bool:
    """Whether the residual stream between blocks is fp32 while the matmuls run in 16-bit: AMP over fp32
    weights, or a k-bit model whose embeddings and norms prepare_model_for_kbit_training upcast to fp32. Not under
    FSDP's mixed precision, whose blocks compute with 16-bit parameters (`fsdp_16bit_compute`)."""
    if rp.compute_dtype == "fp32" or fsdp_16bit_compute(rp):
        return False
    return rp.amp or bool(rp.quant_bits and rp.kbit_upcast)


def mlp_bytes(rp: ResolvedPlan) -> int:
    """Bytes per element of the MLP's hidden activations. A k-bit model whose norms prepare_model_for_kbit_training
    upcast to fp32 feeds fp32 into its 4-bit linears, and bitsandbytes returns the input's dtype
    (bitsandbytes 0.50 `nn/modules.py` Linear4bit.forward: `matmul_4bit(...).to(inp_dtype)`): gate, up and
    act(gate) are fp32. AMP's nn.Linear returns 16-bit under autocast."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    if rp.quant_bits and rp.kbit_upcast and not rp.amp and c == 2:
        return 4
    return c


def unsloth_kernels(rp: ResolvedPlan) -> bool:
    """Whether unsloth's fused LoRA autograd functions run the block (unsloth/kernels/fast_lora.py, applied by
    FastLanguageModel.get_peft_model to gated MLPs when LoRA has no dropout)."""
    return (
        rp.fused_lora
        and rp.peft != "none"
        and rp.lora_dropout <= 0
        and rp.arch.mlp in ("swiglu", "geglu")
        and not rp.arch.is_moe
    )


def compiled_block(rp: ResolvedPlan) -> bool:
    """The blocks run under torch.compile: AOTAutograd's min-cut partitioner (`min_cut_rematerialization_partition`
    in torch/_functorch/partitioners.py, the partitioner inductor uses) decides what the forward keeps. It never
    recomputes matmuls or attention, so their outputs that backward needs stay; pointwise work between them (norm
    upcasts and normalisation, activation functions, casts) is recomputed from those and from each block's input,
    and identical casts of one tensor are computed once. Checked against the partitioner on transformers' Llama
    layer (tests/trace/test_compile_partitioner.py). unsloth's LoRA kernels are autograd functions of their own and
    keep what they save either way."""
    return rp.compile and not unsloth_kernels(rp)


def amp_fp32_stream(rp: ResolvedPlan) -> bool:
    """AMP over fp32 weights (autocast, not compiled): the residual stream, the norms and their weights are fp32; only
    the autocast ops (matmuls, SDPA) run in 16-bit, each casting its own fp32 input (`amp_input_casts`). Not under
    FSDP's mixed precision, whose blocks compute with 16-bit parameters (`fsdp_16bit_compute`)."""
    return rp.amp and rp.compute_dtype != "fp32" and not compiled_block(rp) and not fsdp_16bit_compute(rp)


# Families whose linears are an `nn.Linear` subclass of their own (transformers 5.24 models/falcon/modeling_falcon.py
# `class FalconLinear(nn.Linear)`), which transformers 5's bitsandbytes integration does not quantize (`as_loaded`)
OWN_LINEAR_FAMILIES = {"falcon"}


def as_loaded(rp: ResolvedPlan) -> ResolvedPlan:
    """The plan as transformers loads it. From transformers 5, `replace_with_bnb_linear` swaps only modules whose type
    is exactly `nn.Linear` (or GPT-2's Conv1D) for bitsandbytes layers (transformers 5.24
    integrations/bitsandbytes.py: `isinstance(module, Conv1D) or type(module) is nn.Linear`; 4.x tested
    `isinstance(module, nn.Linear)`): Falcon's `FalconLinear(nn.Linear)` stays 16-bit, no weight is 4-bit, and
    peft's `prepare_model_for_kbit_training` then casts every 16-bit parameter to fp32 (peft 0.21.2
    src/peft/utils/other.py), so the model trains as LoRA over fp32 weights. The Trainer's 16-bit autocast still
    runs the step (bf16/fp16 training arguments: transformers 5.24 trainer.py hands `mixed_precision` to accelerate,
    whose `prepare_model` wraps the model's forward in `get_mixed_precision_context_manager`, accelerate 1.15
    accelerator.py): `FalconLinear.forward`'s `input @ self.weight.T` is an autocast
    matmul, so each linear casts its fp32 input and its frozen fp32 weight to 16 bits and returns 16 bits, while the
    LayerNorm output and the residual stream stay fp32 (layer_norm runs in fp32 under autocast, and `dropout_add`
    adds the 16-bit attention + MLP sum to the fp32 residual): the step is LoRA under AMP, not a pure fp32 step."""
    tv = rp.version_of("transformers")
    if not (
        rp.quant_bits == 4
        and rp.framework in HF_MODEL_FRAMEWORKS
        and rp.arch.family in OWN_LINEAR_FAMILIES
        and versions.at_least(tv[0] if tv else None, (5, 0, 0))
    ):
        return rp
    changes: dict = {"quant_bits": None, "peft": "lora" if rp.peft == "qlora" else rp.peft}
    if rp.kbit_upcast:
        # 16-bit compute: autocast over the upcast weights (AMP); fp32 compute: a plain fp32 step
        changes.update(weight_dtype="fp32", amp=rp.compute_dtype != "fp32")
    return rp.with_changes(**changes)
