"""Norms: what one block's norms keep for backward, the final norm before the LM head, and blocks whose attention and
MLP read one normalised input."""

from __future__ import annotations

from vramlens.estimate.components.common import amp_fp32_stream, compiled_block, fp32_residual
from vramlens.estimate.components.gemma3n import gemma3n
from vramlens.estimate.components.gemma3n import outside_per_token as gemma3n_outside_per_token
from vramlens.estimate.components.logits import head_trains
from vramlens.estimate.components.t5 import hf_t5, t5_global_per_token
from vramlens.estimate.shapes import QK_NORM_FAMILIES
from vramlens.knowledge.models import DELTANET_FAMILIES, norms_per_layer
from vramlens.resolved import ResolvedPlan

# Families whose RMSNorm multiplies the normalised value by its weight in fp32 and casts afterwards (transformers
# 5.24 models/gemma/modeling_gemma.py, gemma2, gemma3 `output * (1.0 + self.weight.float())` then
# `output.type_as(x)`; models/olmo2/modeling_olmo2.py, olmo3, gpt_oss `(self.weight * hidden_states).to(input_dtype)`;
# qwen3_next, qwen3_5 (models/qwen3_5/modeling_qwen3_5.py `Qwen3_5RMSNorm`: `output * (1.0 +
# self.weight.float())`, then `type_as`; qwen3_5_moe the same) and vaultgemma as Gemma;
# Llama instead casts first: `self.weight * hidden_states.to(input_dtype)`): a trained norm weight's gradient
# keeps the fp32 normalised value (4 bytes per element, not the 16-bit 2).
FP32_NORM_WEIGHT_FAMILIES = {
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "olmo2",
    "olmo3",
    "gpt_oss",
    *DELTANET_FAMILIES,
    "vaultgemma",
}


def fp32_norm_weights(rp: ResolvedPlan) -> bool:
    """Whether the model's RMSNorm applies its weight in fp32 (`FP32_NORM_WEIGHT_FAMILIES`). torchtune's own
    `RMSNorm` does for every family: `F.rms_norm(x.float(), ..., weight=self.scale).to(x.dtype)` (torchtune 0.6.1
    modules/rms_norm.py), and an fp32 input with a 16-bit weight cannot take torch's fused kernel on any device
    (torch 2.13 aten/src/ATen/native/layer_norm.cpp `rms_norm_symint`: "Mismatch dtype between input and weight ...
    Cannot dispatch to fused implementation"), so the composite runs and keeps the fp32 normalised value for the
    weight's gradient."""
    return rp.arch.family in FP32_NORM_WEIGHT_FAMILIES or (rp.framework == "torchtune" and rp.arch.norm == "rmsnorm")


# Families whose block feeds its two norms the same input (transformers 5.24 models/gpt_neox/modeling_gpt_neox.py
# GPTNeoXLayer.forward with `use_parallel_residual`: `self.input_layernorm(hidden_states)` and
# `self.post_attention_layernorm(hidden_states)`): one copy of it is kept for both.
SHARED_NORM_INPUT = {"gpt_neox"}


def norms_per_token(rp: ResolvedPlan) -> float:
    """What one block's norms keep per token (its q/k norms included), in bytes.

    RMSNorm upcasts: its fp32 input (4h) is kept; the normalised 16-bit value (c·h) only when the norm's weight trains
    (full fine-tuning; traced: LoRA keeps 4h less per layer than full FT, docs/memory-model.md). Under AMP the input
    is already fp32 and the normalised value stays fp32 (`hidden_states.to(input_dtype)` is a no-op, transformers 5.24
    models/llama/modeling_llama.py LlamaRMSNorm): the weight's gradient keeps 4h. Families whose norm multiplies by
    the weight in fp32 keep the fp32 normalised value in any dtype (`FP32_NORM_WEIGHT_FAMILIES`). Compiled
    (`compiled_block`), the partitioner keeps each norm's 16-bit input and its fp32 1/rms (LayerNorm: mean and 1/std)
    and recomputes the upcast and the normalised value in backward."""
    arch = rp.arch
    h = arch.hidden
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    compiled = compiled_block(rp)
    amp = amp_fp32_stream(rp)
    fp32_norm_weight = fp32_norm_weights(rp)
    norm_trains = (4 if amp or fp32_norm_weight else c) if full else 0
    if compiled:
        stats = 4 if arch.norm == "rmsnorm" else 8
        norm_keep = norms_per_layer(arch) * (c * h + stats)
    elif arch.norm == "rmsnorm":
        n_norms = norms_per_layer(arch)
        norm_keep = n_norms * ((4 + norm_trains) if c == 2 else 8) * h
    else:
        # LayerNorm keeps its input: the fp32 residual stream under AMP (layer_norm is an fp32 autocast op) and in a
        # k-bit model whose stream prepare_model_for_kbit_training made fp32 (each norm reads its own fp32 tensor,
        # except where a parallel block feeds both of its norms the same one: `SHARED_NORM_INPUT`)
        if amp:
            norm_keep = norms_per_layer(arch) * 4 * h
        elif fp32_residual(rp):
            norm_keep = (1 if arch.family in SHARED_NORM_INPUT else norms_per_layer(arch)) * 4 * h
        else:
            norm_keep = norms_per_layer(arch) * c * h
    return norm_keep + qk_norms_per_token(rp)


def qk_norms_per_token(rp: ResolvedPlan) -> float:
    """What the q/k norms of one attention layer keep per token (part of `norms_per_token`): their fp32 inputs and,
    when they train, the normalised q and k; compiled, the 16-bit inputs and the fp32 1/rms per head."""
    arch = rp.arch
    if arch.family not in QK_NORM_FAMILIES:
        return 0.0
    q, heads = arch.q_dim, arch.heads
    c = 2 if rp.compute_dtype != "fp32" else 4
    if compiled_block(rp):
        return c * (q + arch.kv_dim) + 4 * (heads + arch.n_kv_heads)
    qk_norm_trains = (4 if fp32_norm_weights(rp) else c) if rp.peft == "none" else 0
    return (4 + qk_norm_trains) * (q + arch.kv_dim)


def final_norm_per_token(rp: ResolvedPlan) -> float:
    """The final norm before the LM head, per token. An RMSNorm keeps what a block's norm keeps: its fp32 input (4h)
    and, when its weight trains, the normalised value (c·h; 4h where it stays fp32: AMP's fp32 stream,
    `FP32_NORM_WEIGHT_FAMILIES`); and the LM head keeps its input, the norm's output in the compute dtype (autocast's
    16-bit cast of it under AMP), only when the head's weight trains (`head_trains`: `F.linear` saves its input for
    the weight's gradient, torch 2.14 tools/autograd/derivatives.yaml `mm`; transformers 5.24
    models/llama/modeling_llama.py `LlamaRMSNorm.forward`: `hidden_states.to(torch.float32)`, then
    `self.weight * hidden_states.to(input_dtype)`, which saves the normalised value only for the weight's gradient).
    A frozen norm under a frozen head (adapters) keeps its fp32 input alone; full fine-tuning in 16 bits keeps
    4h + 2h + 2h (docs/memory-model.md). A LayerNorm's: 8h. Compiled, its 16-bit input and fp32 1/rms
    (`compiled_block`)."""
    if rp.arch.block == "encoder":
        return 0
    if hf_t5(rp):
        return t5_global_per_token(rp)
    c = 2 if rp.compute_dtype != "fp32" else 4
    h = rp.arch.hidden
    if compiled_block(rp):
        return c * h + 4
    if gemma3n(rp):
        # Gemma-3n keeps more around its blocks: the AltUp copies, the per-layer inputs (`gemma3n.outside_per_token`)
        return 8 * h + gemma3n_outside_per_token(rp)
    if rp.arch.norm != "rmsnorm":
        return 8 * h
    normalised = (4 if amp_fp32_stream(rp) or fp32_norm_weights(rp) else c) if rp.peft == "none" else 0
    head_input = c if head_trains(rp) else 0
    return (4 + normalised + head_input) * h


def parallel_block(arch) -> bool:
    """Attention and MLP read the same normalised input (one shared norm: phi, falcon-7b; or two norms of the same
    input: `SHARED_NORM_INPUT`)."""
    return norms_per_layer(arch) == 1 or arch.family in SHARED_NORM_INPUT


def input_needs_no_grad(rp: ResolvedPlan) -> bool:
    """Whether the first block's input needs no gradient: adapters with frozen embeddings, not checkpointed
    (`first_block_input_frozen` says when, and what autograd then saves)."""
    if rp.peft == "none" or rp.grad_checkpointing:
        return False
    trained = set(rp.modules_to_save) | set(rp.lora_targets) | set(rp.trained_extra)
    return "embed" not in trained and rp.arch.block == "decoder"


def first_block_input_frozen(rp: ResolvedPlan) -> bool:
    """Whether the first block's input needs no gradient under AMP over fp32 weights: an adapter model whose
    embeddings are frozen and not checkpointed (transformers' `enable_input_require_grads` is called for
    checkpointing only: the Trainer's `gradient_checkpointing_enable` and peft 0.21.2 utils/other.py
    `prepare_model_for_kbit_training` under `use_gradient_checkpointing`). Autograd saves nothing for an op none of
    whose inputs needs a gradient: the first norm keeps no input, and a frozen linear reading its output keeps no
    16-bit cast of its weight (`mm` saves the weight only for the input's gradient, torch 2.13
    tools/autograd/derivatives.yaml). The adapters' own matmuls keep their inputs as in every block."""
    if rp.peft == "none" or rp.grad_checkpointing or not rp.amp or rp.compute_dtype == "fp32":
        return False
    trained = set(rp.modules_to_save) | set(rp.lora_targets) | set(rp.trained_extra)
    return "embed" not in trained and rp.arch.block == "decoder"
