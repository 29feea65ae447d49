"""The MLP sub-layer (dense, or routed and shared experts): what one block's MLP keeps of its hidden activations."""

from __future__ import annotations

from vramlens.estimate.components.common import compiled_block, mlp_bytes, unsloth_kernels
from vramlens.estimate.components.experts import (
    GATED_SHARED_EXPERT,
    expert_bytes,
    expert_lora,
    expert_parameters,
    expert_passes,
    experts_adaptable,
)
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.resolved import ResolvedPlan

# Families whose default activation is transformers' NewGELUActivation ("gelu_new": `0.5 * x * (1 + tanh(√(2/π) ·
# (x + 0.044715 · x³)))` in separate torch ops, transformers 5.24 activations.py; GPT2Config.activation_function and
# PhiConfig.hidden_act default to it).
GELU_TANH_FAMILIES = {"gpt2", "phi"}
# MoE families whose experts' gate is a clamped SwiGLU with a sigmoid and an (up + 1) factor (gpt-oss)
CLAMPED_SWIGLU = {"gpt_oss"}


def mlp_per_token(rp: ResolvedPlan) -> float:
    """What one block's MLP keeps of its hidden activations per token, in bytes, its linears' inputs aside
    (`linear_inputs_per_token`): a gated MLP's gate, up and act(gate) (an ungated one's act input), in the MLP's dtype
    (`mlp_bytes`). A mixture-of-experts block keeps them for each chosen expert with h-sized pieces around them, the
    router's fp32 logits, and its shared experts'; unsloth's LoRA_MLP keeps e = X·G and g = X·U only."""
    arch = rp.arch
    h = arch.hidden
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    gated = arch.mlp in ("swiglu", "geglu")
    m = mlp_bytes(rp)
    compiled = compiled_block(rp)
    if arch.is_moe:
        k = expert_passes(rp)
        inter = arch.moe_intermediate or arch.intermediate
        # each expert's gate, up and act(gate) (an ungated one's act input) in the MLP's dtype (`mlp_bytes`: fp32
        # out of 4-bit linears fed fp32), and h-sized pieces around it
        mlp_internal = k * ((3 if gated else 1) * m * inter + 3 * c * h) + 4 * arch.num_experts
        eb = expert_bytes(rp)
        if not full and not experts_adaptable(rp):
            # frozen experts run by grouped_mm keep their gate|up output, act(gate) and the down output (scaled
            # by the routing weights), not their gathered inputs (transformers 5.24 integrations/moe.py), in the
            # experts' dtype (`expert_bytes`)
            mlp_internal = k * (((3 if gated else 2) * inter + h) * eb) + 4 * arch.num_experts
        if arch.family in CLAMPED_SWIGLU and rp.framework in HF_MODEL_FRAMEWORKS:
            # gpt-oss's gate: clamp(gate), clamp(up) (both keep their input: gate|up, counted above),
            # gate · sigmoid(α·gate) (the clamped gate and the sigmoid), (up + 1) · glu (both): three I-wide tensors
            # per chosen expert beyond a SwiGLU's act(gate) (transformers 5.24 models/gpt_oss/modeling_gpt_oss.py
            # `GptOssExperts._apply_gate`)
            mlp_internal += 3 * k * inter * (m if full or experts_adaptable(rp) else eb)
        adapted = {e.name for e in expert_parameters(rp)}
        # an adapted expert parameter's W' needs a gradient, so its grouped_mm also keeps its input: the gathered
        # tokens for gate|up, the act(gate)·up product for down (torch derivatives.yaml `_grouped_mm`)
        if "gate_up" in adapted:
            mlp_internal += k * h * eb
        if "down" in adapted:
            mlp_internal += k * inter * eb
        if arch.shared_experts:
            si = (arch.shared_expert_intermediate or inter) * arch.shared_experts
            mlp_internal += (6 if gated else 2) * si
            if arch.family in GATED_SHARED_EXPERT and not full and not experts_adaptable(rp) and not adapted:
                # the shared expert's output scaled by sigmoid(shared_expert_gate(x)): the product keeps both
                # (transformers 5.24 models/qwen3_5_moe/modeling_qwen3_5_moe.py `Qwen3_5MoeSparseMoeBlock.forward`),
                # beside frozen routed experts that no adapter reaches, whose own h-sized pieces the count above
                # leaves out
                mlp_internal += c * h + c
    else:
        inter = arch.intermediate
        # gate, up and act(gate); compiled, act(gate) is recomputed from the gate output
        mlp_internal = (3 if gated and not compiled else 2 if gated else 1) * m * inter
        if arch.family in GELU_TANH_FAMILIES and not gated and rp.framework in HF_MODEL_FRAMEWORKS and not compiled:
            # gelu_new written out in torch ops keeps x, tanh(...), 0.5·x and 1 + tanh(...): three more than GELU
            mlp_internal += 3 * m * inter
    if unsloth_kernels(rp):
        # unsloth/kernels/fast_lora.py LoRA_MLP saves e = X·G and g = X·U (h = f(e)·g is recomputed in backward)
        mlp_internal = 2 * c * inter
    return mlp_internal


def dense_layer_plan(rp: ResolvedPlan) -> ResolvedPlan | None:
    """The plan of a MoE model's dense layers, as one of them runs (None when every layer is a MoE layer): an MLP
    `intermediate` wide whose gate/up/down are nn.Linear modules that LoRA's targets reach, with no router, routed
    or shared experts. DeepSeek-V2/V3's first `first_k_dense_replace` layers (transformers 5.24
    models/deepseek_v3/modeling_deepseek_v3.py `DeepseekV3DecoderLayer`: `DeepseekV3MLP(config)` where `layer_idx <
    config.first_k_dense_replace`), Llama-4's layers outside `moe_layers` (models/llama4/modeling_llama4.py
    `Llama4TextDecoderLayer`: `Llama4TextMLP(config, intermediate_size=config.intermediate_size_mlp)`; the config's
    default `moe_layers` is every `interleave_moe_layer_step`-th layer), Qwen2-MoE's outside `decoder_sparse_step`
    (models/qwen2_moe/modeling_qwen2_moe.py `Qwen2MoeDecoderLayer`). `ModelArch.dense_layers` counts them and
    `ModelArch.intermediate` is their width (`knowledge.models._dense_layers`)."""
    arch = rp.arch
    if not arch.is_moe or not 0 < arch.dense_layers < arch.layers:
        return None
    dense = arch.model_copy(update={"num_experts": 0, "shared_experts": 0, "dense_layers": 0})
    update: dict = {"arch": dense}
    if rp.peft != "none" and expert_lora(rp) == "parameters":
        # peft rewrites the MLP names of such a family's targets to its fused expert parameters (peft 0.21.2
        # utils/transformers_weight_conversion.py `_convert_peft_config_moe`: gate_proj/up_proj/down_proj leave
        # target_modules for target_parameters, "all-linear" resolved first): no dense MLP linear is adapted
        mlp = {"gate", "up", "down", "fc1", "fc2"}
        targets = rp.lora_targets
        if "all-linear" in targets:
            targets = ("q", "k", "v", "o", "q_a", "q_b", "kv_a", "kv_b")
        update["lora_targets"] = tuple(t for t in targets if t not in mlp)
    return rp.model_copy(update=update)


def mlp_keeps_per_token(rp: ResolvedPlan) -> float:
    """What one block's MLP keeps per token in all: its hidden activations (`mlp_per_token`) and its linears' and
    adapters' inputs (`linear_inputs_per_token`), DoRA's products on them; for a MoE model's dense layers, pass
    `dense_layer_plan(rp)`."""
    from vramlens.estimate.components.adapters import dora_per_token
    from vramlens.estimate.components.common import MLP_LINEARS
    from vramlens.estimate.components.linears import linear_inputs_per_token

    return mlp_per_token(rp) + linear_inputs_per_token(rp).mlp + dora_per_token(rp, MLP_LINEARS)
