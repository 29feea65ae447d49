"""The MLP sub-layer (dense, or routed and shared experts): what one block's MLP keeps of its hidden activations."""

from __future__ import annotations

from vramlens.estimate.components.common import compiled_block, mlp_bytes, unsloth_kernels
from vramlens.estimate.components.experts import expert_bytes, expert_parameters, expert_passes, experts_adaptable
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
