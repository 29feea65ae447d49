"""Attention: what one block's attention keeps for backward (fused SDPA/flash kernels, eager, SDPA's math kernel,
DeBERTa-v2's disentangled attention), a decoder's cross-attention, and the padding mask."""

from __future__ import annotations

from vramlens.estimate.components.common import HF_ROPE_QKV, amp_fp32_stream, mlp_bytes
from vramlens.estimate.components.linears import o_keeps_attention_output
from vramlens.estimate.components.norms import input_needs_no_grad
from vramlens.estimate.components.vision import image_block_mask
from vramlens.estimate.shapes import targeted
from vramlens.knowledge import versions
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.knowledge.models import DELTANET_FAMILIES
from vramlens.knowledge.versions import MEM_EFFICIENT_GQA_FROM
from vramlens.resolved import ResolvedPlan

# Families whose transformers modelling code calls SDPA directly with K/V of fewer heads and no `enable_gqa`
# (`sdpa_math`); grep of transformers 5.24 models/ for `scaled_dot_product_attention(`: of the causal LMs only Falcon
DIRECT_SDPA_FAMILIES = {"falcon"}


# Families whose eager attention takes the softmax in the scores' dtype, with no fp32 upcast (transformers 5.24
# models/bert/modeling_bert.py `eager_attention_forward`: `nn.functional.softmax(attn_weights, dim=-1)`; roberta the
# same; models/deberta_v2/modeling_deberta_v2.py DisentangledSelfAttention.forward).
SOFTMAX_IN_INPUT_DTYPE = {"bert", "roberta", "deberta-v2"}
# Causal-LM families whose configs drop the attention probabilities by default (`attn_pdrop` 0.1, transformers 5.24
# models/gpt2/configuration_gpt2.py, models/gpt_bigcode/configuration_gpt_bigcode.py): eager attention's dropout
# makes its own copy of the probabilities, also in fp32
PROBABILITY_DROPOUT = {"gpt2", "gpt_bigcode"}
# Families whose eager attention adds a learned sink logit per head to the softmax (gpt-oss `GptOssAttention.sinks`)
SINK_SOFTMAX = {"gpt_oss"}
# Families whose attention gates its output by the sigmoid of a second half of q_proj (transformers 5.24
# models/qwen3_next/modeling_qwen3_next.py `Qwen3NextAttention.forward`, models/qwen3_5 and qwen3_5_moe the same:
# `query_states, gate = torch.chunk(self.q_proj(...).view(..., head_dim * 2), 2, dim=-1)`, then
# `attn_output = attn_output * torch.sigmoid(gate)` before o_proj)
OUTPUT_GATED_ATTENTION = set(DELTANET_FAMILIES)


# BertConfig and RobertaConfig also drop attention probabilities by default (hidden_dropout_prob and
# attention_probs_dropout_prob = 0.1, transformers models/bert/configuration_bert.py, models/roberta/
# configuration_roberta.py; BertSelfOutput and BertOutput drop after their dense layers).
ATTENTION_DROPOUTS = {"bert", "roberta", "deberta-v2"}


# DeBERTa-v2/v3 disentangled attention (transformers 5.24 models/deberta_v2/modeling_deberta_v2.py, run eager: the
# class has no SDPA path): family -> relative-position buckets of the catalog's configs (microsoft/deberta-v3-*
# config.json `position_buckets` 256, so 2 × 256 relative embeddings are attended).
DISENTANGLED_ATTENTION = {"deberta-v2": 256}


def kept_kv_width(rp: ResolvedPlan) -> int:
    """Width of the K and V that attention keeps: the query width when HF's `repeat_kv` expands grouped K/V for SDPA
    or eager attention, else kv_dim. A tensor-parallel rank with one K/V head of its own gets a view from `repeat_kv`
    (`expand` then `reshape` over a size-1 head dim: transformers 5.24 integrations/sdpa_attention.py `repeat_kv`), so
    attention keeps its K and V unrepeated."""
    arch = rp.arch
    one_local_kv_head = rp.tensor_parallel > 1 and arch.n_kv_heads // rp.tensor_parallel == 1
    return arch.q_dim if (rp.repeat_kv and rp.attn_impl in ("sdpa", "eager") and not one_local_kv_head) else arch.kv_dim


def attention_per_token(rp: ResolvedPlan) -> float:
    """What one block's attention keeps per token, in bytes (traced; docs/memory-model.md, "Activations"): q after
    RoPE (c·q), K and V (c·kv_eff each, `kept_kv_width`), the kernel's output (c·q) and its fp32 logsumexp (4·heads).
    Eager attention adds the fp32 softmax and the 16-bit probabilities (6·heads·s), SDPA's math kernel keeps fp32 q,
    K, V and probabilities instead (`sdpa_math`), and DeBERTa-v2's disentangled attention its relative-position
    scores (`disentangled_per_token`). o's input is the kernel's output, kept here (`o_keeps_attention_output`)."""
    arch = rp.arch
    q, heads = arch.q_dim, arch.heads
    kv_eff = kept_kv_width(rp)
    c = 2 if rp.compute_dtype != "fp32" else 4
    s = rp.seq_len // max(rp.context_parallel, 1)
    amp = amp_fp32_stream(rp)
    attn: float = c * q + 2 * c * kv_eff + c * q + 4 * heads
    mha = arch.kv_dim == q
    hf_fused = rp.arch.family in HF_ROPE_QKV and rp.framework in HF_MODEL_FRAMEWORKS
    # a k-bit model's linears return fp32 (their input's dtype, `mlp_bytes`): autocast then hands SDPA 16-bit copies
    # of q, k and v (scaled_dot_product_attention is an autocast op), and no view of the fused output reaches it
    qkv_fp32 = mlp_bytes(rp) == 4 and c == 2
    if arch.kv_lora_rank:
        attn = mla_per_token(rp, c, qkv_fp32)
    elif (rp.fused_qkv or hf_fused) and mha and not qkv_fp32:
        attn += c * (q + arch.kv_dim)  # V is a view of the fused q|k|v output, which SDPA keeps whole
    if rp.attn_impl == "eager":
        # fp32 softmax output + 16-bit probabilities (`eager_attention_forward`, transformers modeling_llama.py).
        # BERT/RoBERTa/DeBERTa-v2 take the softmax in the scores' own dtype and drop the probabilities: the softmax
        # output (c; fp32 under autocast, where softmax is an fp32 op) and the dropped copy the matmul keeps (c)
        upcast = arch.family not in SOFTMAX_IN_INPUT_DTYPE or amp
        if arch.family in SINK_SOFTMAX and rp.framework in HF_MODEL_FRAMEWORKS:
            # gpt-oss: one sink logit per head beside the s scores, the max subtracted and the softmax taken in the
            # scores' dtype (transformers 5.24 models/gpt_oss/modeling_gpt_oss.py `eager_attention_forward`):
            # softmax keeps its (s + 1)-wide output, which the probability-times-V matmul reads as a view, and
            # `max` its int64 indices. In a k-bit model the sinks are fp32 (prepare_model_for_kbit_training): the
            # concatenation and the softmax are fp32, and autocast's matmul with V keeps a 16-bit cast of the scores
            kbit = qkv_fp32 and not amp
            attn += (4 if amp or kbit else c) * heads * (s + 1) + 8 * heads + (c * heads * s if kbit else 0)
        else:
            # in an fp32 step the softmax output is the probabilities: `.to(query.dtype)` returns it unchanged and
            # dropout with p = 0 returns its input (torch aten/src/ATen/native/Dropout.cpp `dropout`)
            cast = 0 if upcast and c == 4 and arch.family not in PROBABILITY_DROPOUT else c
            attn += ((4 if upcast else c) + cast) * heads * s
        if arch.family == "gemma2":
            # attention soft-capping before the softmax: tanh keeps its 16-bit output (transformers 5.24
            # models/gemma2/modeling_gemma2.py eager_attention_forward: `/ softcap`, `tanh`, `* softcap`)
            attn += c * heads * s
        if arch.family in ATTENTION_DROPOUTS and rp.framework in HF_MODEL_FRAMEWORKS:
            # dropout on the probabilities keeps its 1-byte mask (CUDA native_dropout); its output is what the
            # probability-times-V matmul keeps, counted above (SDPA drops inside the kernel and keeps no mask)
            attn += heads * s
    elif sdpa_math(rp):
        # SDPA's math kernel (no fused kernel takes the call, `sdpa_math`): q, K and V upcast to fp32 (intermediates
        # in fp32 unless torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp), q and K scaled (a copy each), K
        # and V broadcast over the query heads (a copy each: `matmul`'s broadcast of one K/V head, or under
        # `enable_gqa` `repeat_interleave` in `pre_process_group_query_attention_input`), the fp32 probabilities,
        # and the output in the inputs' dtype, which the kernel itself does not keep: o's matmul keeps it for its
        # weight's gradient (below: not when o is frozen)
        # (torch aten/src/ATen/native/transformers/attention.cpp `_scaled_dot_product_attention_math`)
        attn = 4 * q + 2 * 4 * q + 4 * heads * s + c * q
    if sdpa_math(rp) and rp.peft != "none" and not o_keeps_attention_output(rp):
        # the math kernel keeps q, K, V and the probabilities, not its output (fused kernels keep it for their own
        # backward): a frozen o keeps nothing (a 4-bit one of bitsandbytes < 0.43.2 keeps its input), and o's
        # adapter keeps its own cast of the output (`o_input_per_token`), so SDPA's 16-bit output is freed (traced:
        # Falcon-7B's LoRA/QLoRA blocks keep 2·h bytes a token less)
        attn -= c * q
    if arch.family in DISENTANGLED_ATTENTION and rp.framework in HF_MODEL_FRAMEWORKS:
        attn += disentangled_per_token(rp, c, amp)
    if arch.family in OUTPUT_GATED_ATTENTION and rp.framework in HF_MODEL_FRAMEWORKS:
        # the output gate: sigmoid keeps its output, and the product keeps the attention output it multiplies (the
        # contiguous copy `sdpa_attention_forward` returns, not the kernel's own saved output); a k-bit model's
        # q_proj returns fp32, so its gate and sigmoid are fp32 (the product, fp32 too, is o_proj's input)
        attn += (4 if qkv_fp32 else c) * q + c * q
    return attn


def mla_per_token(rp: ResolvedPlan, c: int, qkv_fp32: bool) -> float:
    """What DeepSeek's multi-head latent attention keeps per token besides its linears' inputs
    (`linear_inputs_per_token`) and the block's two norms (transformers 5.24 models/deepseek_v3/modeling_deepseek_v3.py
    `DeepseekV3Attention.forward`, RoPE interleaved or not):
      - q_a_layernorm and kv_a_layernorm (RMSNorms over the q and K/V latents): each its fp32 input and fp32 1/rms,
        and the normalised 16-bit value when its weight trains, as the block's norms (`norms_per_token`);
      - the RoPE halves: `q_rot · cos` and `k_rot · cos` keep only cos and sin (one pair per step, not per layer), and
        `torch.cat` nothing; the kv_a output itself is not kept;
      - the attention call's q (nope | rope per head, `torch.cat`) and K (`expand_kv`'s `new_empty`: k_nope and the
        broadcast k_rot per head), c · heads · (nope + rope) each; V is a view of kv_b's output, whose whole
        storage (k_nope and v per head) the kernel's saved V holds, or under autocast over a k-bit model's fp32
        linears the 16-bit copy of V alone that autocast hands SDPA;
      - the kernel's output (c · heads · v, also o_proj's input) and fp32 logsumexp (4 · heads): with value heads of
        another width than q/k heads CUDA's flash kernel declines and the memory-efficient one runs (torch 2.13
        aten/src/ATen/native/transformers/cuda/sdp_utils.cpp `check_head_dim_size_flash`; its derivative saves q,
        K, V, output and logsumexp, tools/autograd/derivatives.yaml `_scaled_dot_product_efficient_attention`)."""
    arch = rp.arch
    heads, rank, qr = arch.heads, arch.kv_lora_rank or 0, arch.q_lora_rank or 0
    nope, rope, v = arch.mla_head_dims
    amp = amp_fp32_stream(rp)
    trains = (4 if amp else c) if rp.peft == "none" else 0
    latent_norms = sum((4 + trains) * width + 4 for width in (qr, rank) if width)
    value = c * heads * (v if qkv_fp32 else nope + v)
    return latent_norms + 2 * c * heads * (nope + rope) + value + c * heads * v + 4 * heads


def first_attention_keeps_nothing(rp: ResolvedPlan) -> bool:
    """Whether the first block's multi-head latent attention keeps nothing for backward: its input needs no gradient
    (`input_needs_no_grad`: frozen embeddings, adapters, no checkpointing) and no adapter sits on a linear before o
    (MLA has no k_proj or v_proj, so LoRA on q, k, v, o reaches only o there; q_proj only without q_lora_rank).
    Autograd saves nothing for an op none of whose inputs needs a gradient (torch 2.13 torch/csrc/autograd: no
    grad_fn is recorded): the block's first norm, the latent norms, the attention kernel and the linears' inputs
    up to o; o's adapter keeps its own input (`o_input_per_token`)."""
    if not rp.arch.kv_lora_rank or not input_needs_no_grad(rp):
        return False
    before_o = {"q", "q_a", "q_b", "kv_a", "kv_b"}
    return not any(l.name in before_o for l in targeted(rp.arch, rp.lora_targets))


def cross_attention_per_token(rp: ResolvedPlan) -> float:
    """What a decoder block's cross-attention sub-layer keeps per token outside transformers' T5
    (`t5_cross_attention_per_token`): its norm's fp32 input and normalised value ((4 + c)·h) and an attention over
    the encoder's output as `attention_per_token`'s fused-kernel count (q, K, V, output, logsumexp)."""
    arch = rp.arch
    h, q, heads = arch.hidden, arch.q_dim, arch.heads
    kv_eff = kept_kv_width(rp)
    c = 2 if rp.compute_dtype != "fp32" else 4
    return c * q + 2 * c * kv_eff + c * q + 4 * heads + (4 + c) * h


def sdpa_math(rp: ResolvedPlan) -> bool:
    """Whether the model's SDPA call runs torch's math kernel on CUDA. Falcon calls
    `torch.nn.functional.scaled_dot_product_attention` itself (transformers 5.24 models/falcon/modeling_falcon.py
    `FalconAttention.forward`), with the always-built causal mask and, under multi-query attention (falcon-7b:
    one K/V head, `new_decoder_architecture` off), K and V of one head and no `enable_gqa`. Every fused kernel then
    declines: flash takes no mask (`check_for_attn_mask`), and flash, memory-efficient and cuDNN all require equal
    query and K/V head counts unless `enable_gqa` is set (`check_batch_size_and_num_heads_dense`, torch 2.13
    include/ATen/native/transformers/sdp_utils_cpp.h), so `select_sdp_backend` falls back to math (torch
    aten/src/ATen/native/transformers/cuda/sdp_utils.cpp). The 40B/180B layout broadcasts K/V to every head first
    and keeps a fused kernel. fp32 attention with grouped K/V takes math too (`fp32_grouped_sdpa`)."""
    a = rp.arch
    direct_mqa = (
        rp.attn_impl == "sdpa"
        and rp.framework in HF_MODEL_FRAMEWORKS
        and a.family in DIRECT_SDPA_FAMILIES
        and a.n_kv_heads == 1 < a.heads
    )
    return direct_mqa or fp32_grouped_sdpa(rp)


def fp32_grouped_sdpa(rp: ResolvedPlan) -> bool:
    """Whether transformers' SDPA hands torch fp32 q, K and V with grouped K/V, which CUDA runs on the math kernel.
    With no mask and head dims of at most 256, transformers passes grouped K/V as they are, with `enable_gqa`
    (transformers 5.24 integrations/sdpa_attention.py `use_gqa_in_sdpa`; the plan's `repeat_kv` is off). Every fused
    kernel then declines an fp32 call (torch 2.13 aten/src/ATen/native/transformers/cuda/sdp_utils.cpp,
    `can_use_flash_attention`, `can_use_cudnn_attention`, `can_use_mem_efficient_attention`): flash and cuDNN take
    only fp16/bf16, and the memory-efficient kernel, which takes fp32, no grouped K/V before
    `MEM_EFFICIENT_GQA_FROM`. `select_sdp_backend` falls back to math, which keeps the fp32 probabilities of every
    head (B·H·S² · 4 bytes a layer). Under AMP autocast hands SDPA 16-bit q, K and V (an autocast op), which flash
    takes."""
    a = rp.arch
    torch = rp.version_of("torch")
    return (
        rp.attn_impl == "sdpa"
        and rp.framework in HF_MODEL_FRAMEWORKS
        and a.family not in DIRECT_SDPA_FAMILIES
        and rp.compute_dtype == "fp32"
        and not rp.repeat_kv
        and not a.kv_lora_rank
        and a.n_kv_heads < a.heads
        and a.d_head <= 256
        and not versions.at_least(torch[0] if torch else None, MEM_EFFICIENT_GQA_FROM, "torch")
    )


def sdpa_math_backward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token live at the backward of one attention on the math kernel besides its saved tensors: the
    gradient of the fp32 probabilities and the softmax backward's output (two query-heads × s fp32 matrices)."""
    if not sdpa_math(rp):
        return 0.0
    return 2 * 4 * rp.arch.heads * (rp.seq_len // max(rp.context_parallel, 1)) / max(rp.tensor_parallel, 1)


def disentangled_per_token(rp: ResolvedPlan, c: int, amp: bool) -> float:
    """What DeBERTa-v2's `DisentangledSelfAttention` keeps per token beyond a BERT block's eager attention, in bytes
    (transformers 5.24 models/deberta_v2/modeling_deberta_v2.py, share_att_key and pos_att_type c2p|p2c as in the
    DeBERTa-v3 configs):
      - the key both as itself (the p2c product's input) and scaled (`key_layer.transpose(-1, -2) / scale`, the q·kᵀ
        product's input): one more key-sized copy, c·h;
      - the c2p and p2c scores against the 2·buckets relative positions, before `torch.gather` picks the s × s
        entries: gather keeps its source for backward (torch 2.13 tools/autograd/derivatives.yaml `gather`:
        `gather_backward(grad, self, dim, index, sparse_grad)`), 2 × c·heads·2·buckets;
      - the relative-position keys and queries (`query_proj`/`key_proj` of the relative embeddings, repeated over
        the batch for `torch.bmm`), 2 × c·h·2·buckets per sequence: ÷ s per token;
      - the inverted boolean mask `masked_fill` keeps, b·s² bytes: s per token.
    Per layer, not per token: the two int64 gather indices (s² each, clamped relative positions shared by the
    batch) and the dropped relative embeddings `pos_dropout` makes (1-byte mask + the copy the projections read:
    c, or under autocast one 16-bit cast per projection of the fp32 LayerNorm output), spread over the tokens."""
    arch = rp.arch
    h, heads = arch.hidden, arch.heads
    s = max(rp.seq_len // max(rp.context_parallel, 1), 1)
    span2 = 2 * DISENTANGLED_ATTENTION[arch.family]
    tokens = max(rp.micro_batch * s, 1)
    per_token = c * arch.kv_dim + 2 * c * heads * span2 + 2 * c * h * span2 / s + s
    per_layer = 2 * 8 * s * s + (1 + (2 * c if amp else c)) * span2 * h
    return per_token + per_layer / tokens


def attention_mask_bytes(rp: ResolvedPlan) -> tuple[int, int]:
    """(once per step, saved per layer) bytes of the padding/causal mask.

    HF builds one 4-D mask when the batch is padded: boolean for SDPA (b·s² bytes), additive 16-bit for eager.
    SDPA turns a boolean mask into an additive one in the query dtype on every call, and the memory-efficient
    kernel saves it for backward: 2·b·s² bytes per layer (trace_vs_estimate note 4). Packing and flash
    attention pass no mask."""
    if not image_block_mask(rp) and (rp.packing or not rp.attn_mask) or rp.attn_impl not in ("eager", "sdpa"):
        return 0, 0
    bss = rp.micro_batch * rp.seq_len**2
    if rp.attn_impl == "eager":
        return 2 * bss, 0
    if not rp.repeat_kv:
        return 0, 0
    return bss, 2 * bss
