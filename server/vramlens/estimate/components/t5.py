"""transformers' T5 (encoder-decoder): what its blocks, stacks, relative position bias and loss keep beyond the
Llama-style count, and the weights its quantizer leaves unquantized."""

from __future__ import annotations

from vramlens.estimate.components.adapters import dora_per_token
from vramlens.estimate.components.common import ATTN_LINEARS, fp32_residual, mlp_bytes
from vramlens.estimate.shapes import shapes
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.resolved import ResolvedPlan


def hf_t5(rp: ResolvedPlan) -> bool:
    """The step runs transformers' T5 (T5ForConditionalGeneration, transformers 5.24 models/t5/modeling_t5.py)."""
    return rp.arch.family == "t5" and rp.arch.block == "encoder-decoder" and rp.framework in HF_MODEL_FRAMEWORKS


def t5_block_extras(rp: ResolvedPlan, norms: int, mlp: bool = True) -> float:
    """Bytes per token a T5 block keeps beyond the Llama-style count (transformers 5.24 models/t5/modeling_t5.py):
    - T5LayerNorm computes `hidden_states * torch.rsqrt(variance)` from its 16-bit input (the fp32 upcast only feeds
      the variance), so the input is kept too (c·h per norm) unless the residual stream is fp32 already;
    - T5LayerFF's dropout (config `dropout_rate` 0.1) between the activation and `wo`: a 1-byte mask of d_ff;
    - gated-gelu (T5 v1.1, Flan-T5) is gelu_new written out in torch ops (activations.py NewGELUActivation): 0.5·x,
      tanh(…) and 1 + tanh(…) are kept besides x and the activation. Under AMP CUDA's autocast runs its `pow` in fp32
      (autocast_mode.h `AT_FORALL_FP32`), so x's fp32 cast, tanh, 1 + tanh and the activation are fp32 (4·d_ff each,
      replacing 16-bit x and the activation) beside the 16-bit 0.5·x.
    The residual dropouts' masks are `RESIDUAL_DROPOUTS` (two per encoder block; the cross-attention adds one)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    out = float(norms * c * arch.hidden) if c == 2 and not fp32_residual(rp) else 0.0
    if mlp:
        inter = arch.intermediate
        out += inter
        if arch.mlp in ("geglu", "swiglu"):
            m = mlp_bytes(rp)
            out += ((16 - m) if rp.amp and m == 2 else 3 * m) * inter
    return out


def t5_cross_attention_per_token(
    rp: ResolvedPlan, norm: float, attention: float, qkv_inputs: float, o_input: float
) -> float:
    """What a T5 decoder block's cross-attention sub-layer keeps per token: its norm (`norm`, one of the block's
    norms), attention over the encoder's output (`attention`, as the self-attention's), the q/k/v linears' inputs as
    the self-attention's adapters keep them (`qkv_inputs`; k and v read the encoder's output: `t5_global_per_token`
    counts it once where they share it), o's adapter's copy of its input (`o_input`), DoRA's on q, k, v, o, and the
    residual dropout's mask."""
    return (
        norm
        + attention
        + qkv_inputs
        + o_input
        + dora_per_token(rp, ATTN_LINEARS)
        + rp.arch.hidden
        + t5_block_extras(rp, norms=1, mlp=False)
    )


def t5_global_per_token(rp: ResolvedPlan) -> float:
    """What T5 keeps per token outside its blocks (transformers 5.24 models/t5/modeling_t5.py T5Stack): each stack's
    embedding dropout (a 1-byte mask; its output is the first norm's input, counted there) and final
    T5LayerNorm + dropout: the norm's fp32 upcast, its 16-bit input (16-bit residual), its normalised value when its
    weight trains, the dropout's mask, and the dropout's output where a linear keeps it — the encoder's, read by
    every cross-attention's k and v (once, where their weights train or 16-bit adapters keep it; fp32 or autocast
    adapters keep casts of their own, counted in the blocks), the decoder's, the LM head's input when the head
    trains."""
    arch = rp.arch
    h = arch.hidden
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    sixteen = c == 2 and not fp32_residual(rp)
    trains = (4 if rp.amp else c) if full else 0
    per_norm = 4 * h + (c * h if sixteen else 0) + trains * h + h
    targets = set(rp.lora_targets)
    kv_adapted = "all-linear" in targets or bool(targets & {"k", "v"})
    shared = not full and not rp.adapter_fp32 and not fp32_residual(rp) and rp.lora_dropout <= 0 and kv_adapted
    enc_out = c * h if (full and not rp.amp) or shared else 0
    head_in = c * h if full or "lm_head" in rp.modules_to_save else 0
    return 2 * h + 2 * per_norm + enc_out + head_in


def t5_bias_bytes(rp: ResolvedPlan) -> int:
    """Bytes of T5's relative position bias the step keeps, whatever the batch (transformers 5.24: the first block of
    each stack computes `position_bias` (1, heads, q, k) and every block reuses it; integrations/sdpa_attention.py
    `create_position_bias_mask` makes a contiguous copy per self-attention call, causal-masked with `torch.where` in
    the decoder, which SDPA keeps as its additive mask (CUDA's memory-efficient kernel saves `attn_bias`); the
    cross-attention's bias is one zeros tensor in the query's dtype). A trained bias embedding keeps its bucket
    indices (int64, per stack) and the decoder's `where` its causal condition. A padded batch's mask is merged into
    the bias with `torch.where` (boolean (batch, 1, q, k) masks from `create_bidirectional_mask`, kept once each):
    the encoder's self-attentions and every cross-attention then keep a (batch, heads, q, k) bias each. Checkpointed,
    the blocks keep none of these: the two stacks' bias tensors (weight dtype, fp32 when upcast), the zeros and the
    boolean masks stay referenced instead."""
    if not hf_t5(rp):
        return 0
    arch = rp.arch
    s2 = rp.seq_len**2
    c = 2 if rp.compute_dtype != "fp32" else 4
    enc = arch.encoder_layers or arch.layers
    b = rp.micro_batch * rp.sequences_per_example
    padded = rp.attn_mask and not rp.packing
    masks = 2 * b * s2 if padded else 0
    if rp.grad_checkpointing:
        pb = 4 if fp32_residual(rp) or rp.weight_dtype == "fp32" else c
        return 2 * arch.heads * s2 * pb + arch.heads * s2 * c + masks
    if padded:
        out = (enc * b + arch.layers + arch.layers * b) * arch.heads * s2 * c + masks
    else:
        out = (enc + arch.layers + 1) * arch.heads * s2 * c
    if rp.peft == "none":
        out += 2 * 8 * s2 + arch.layers * s2
    return out


def keep_in_fp32_params(rp: ResolvedPlan) -> int:
    """Parameters of linears a quantized model keeps unquantized: transformers' bitsandbytes quantizer leaves the
    model's `_keep_in_fp32_modules` out (quantizers/base.py `get_modules_to_not_convert`, transformers 5.24): T5's
    `wo` (T5PreTrainedModel `_keep_in_fp32_modules = ["wo"]`), which prepare_model_for_kbit_training then upcasts
    with the other unquantized weights."""
    if not rp.quant_bits or not hf_t5(rp):
        return 0
    return sum(lin.params for lin in shapes(rp.arch).linears if lin.name in ("down", "fc2"))


def t5_loss_per_token(rp: ResolvedPlan, backward: bool) -> float:
    """T5ForConditionalGeneration's loss, `CrossEntropyLoss()(lm_logits.view(-1, V), labels.view(-1))` on the LM
    head's output as it is (transformers 5.24 models/t5/modeling_t5.py; no fp32 upcast as in ForCausalLMLoss): the
    log-softmax output, then in backward the NLL's gradient and the logits' gradient, 3 × 2 bytes per logit in
    16-bit. Under autocast (AMP, or a k-bit model's fp32 head) CUDA runs the log-softmax with an fp32 output
    (autocast_mode.h `AT_FORALL_FP32_SET_OPT_DTYPE`) and its backward writes the 16-bit gradient directly
    (`half_to_float`): 4 + 4 + 2. In the forward: the logits and the log-softmax output. + the logits when the loop
    keeps them."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    lsm = 4 if c == 2 and (rp.amp or fp32_residual(rp)) else c
    per = (2 * lsm + c) if backward else (c + lsm)
    if backward and rp.keep_logits:
        per += c
    return per * rp.arch.vocab
