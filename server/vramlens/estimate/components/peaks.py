"""Peaks inside one block beyond what it keeps: a checkpointed block's backward or its recomputed forward, attention
backward on SDPA's math kernel, what the last block's backward has freed, DeBERTa-v2's attention scores in the
forward."""

from __future__ import annotations

from vramlens.estimate.components.activations import activations_per_token
from vramlens.estimate.components.adapters import adalora_mlp_backward_per_token
from vramlens.estimate.components.attention import DISENTANGLED_ATTENTION, sdpa_math, sdpa_math_backward_per_token
from vramlens.estimate.components.common import (
    DTYPE_BYTES,
    HF_FUSED_GATE_UP,
    MLP_LINEARS,
    compiled_block,
    fp32_residual,
    mlp_bytes,
    unsloth_kernels,
)
from vramlens.estimate.components.experts import (
    expert_bytes,
    expert_loop,
    expert_passes,
    fused_experts,
    recomputed_experts_forward_per_token,
)
from vramlens.estimate.components.gemma3n import gemma3n
from vramlens.estimate.components.gemma3n import recompute_peak_per_token as gemma3n_recompute_peak
from vramlens.estimate.components.linears import linear_inputs_per_token
from vramlens.estimate.components.llama4 import recomputed_moe_forward_per_token as llama4_recomputed_moe_forward
from vramlens.estimate.components.mlp import dense_layer_plan, mlp_keeps_per_token
from vramlens.estimate.components.norms import final_norm_per_token, norms_per_token
from vramlens.estimate.components.ssm import (
    jamba_layer_pattern,
    jamba_mixer_backward_per_token,
    jamba_mixer_grads,
    jamba_mixer_per_token,
    mamba2_norm_backward_per_token,
    mamba2_recompute_peak_per_token,
    mamba_backward_per_token,
    nemotron_h_backward_per_token,
)
from vramlens.estimate.shapes import is_mamba, shapes
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.knowledge.models import norms_per_layer
from vramlens.resolved import ResolvedPlan


def attention_backward_freed(rp: ResolvedPlan, tokens: int) -> int:
    """Bytes the forward-backward set no longer holds when the last block's math-kernel attention runs its backward.
    Autograd runs the nodes created last first: the loss, the LM head (its 16-bit copy under autocast), the final
    norm, then the last block's o projection and MLP (created after the attention in the forward, in a sequential
    block and in Falcon's parallel one, whose `mlp_output += attention_output` adds the attention output after the
    MLP ran; transformers 5.24 models/falcon/modeling_falcon.py FalconDecoderLayer), and each node frees what it
    saved once it ran. Under AMP the frozen o and MLP weights' 16-bit casts, which their
    matmuls kept for the input gradient, go with them. In an adapter model the base weights are frozen, so this
    backward creates no weight-sized gradient in their place; full fine-tuning has by then made the gradients of the
    head (the embedding's when tied), the final norm and the last block's o projection, MLP and post-attention norm
    (each parameter's AccumulateGrad runs once its node has), which are taken off what was freed."""
    if not sdpa_math(rp) or rp.grad_checkpointing:
        return 0
    kept: dict = {}
    activations_per_token(rp, kept)
    freed = (kept["after_attention"] + final_norm_per_token(rp)) * tokens
    s = shapes(rp.arch)
    if rp.amp:
        after = [lin for lin in s.linears if lin.name in ("o",) + MLP_LINEARS and not lin.expert]
        freed += sum(lin.params for lin in after) * 2 / max(rp.arch.layers, 1)
    if rp.amp or fp32_residual(rp) and not rp.kbit_embeddings_16bit:
        freed += (s.lm_head_params or s.embed_params) * 2  # the head's copy (`autocast_weight_cache`)
    if rp.peft == "none":
        block = [lin for lin in s.linears if lin.name in ("o",) + MLP_LINEARS and not lin.expert]
        made = sum(lin.params for lin in block) / max(rp.arch.layers, 1) + (s.lm_head_params or s.embed_params)
        freed -= (made + 2 * rp.arch.hidden) * DTYPE_BYTES[rp.weight_dtype]  # + the two norms' weights
    return int(freed)


def disentangled_forward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token the forward holds at its peak beyond every block's saved activations (no checkpointing), for
    DeBERTa-v2 (transformers 5.24 models/deberta_v2/modeling_deberta_v2.py). The peak is in the last block's
    attention, with the rest of that block (output projection, norms, MLP) not made yet, at one of two points:
      - in `disentangled_attention_bias`, at `score += p2c_att / scale`: the content scores, the gathered c2p scores
        and the bias so far, the gathered p2c scores and their scaled copy are alive (5 × c·heads·s; the
        probabilities, their mask and the attention output not made yet);
      - at the probabilities' matmul: `DisentangledSelfAttention.forward` still holds the masked scores and the
        relative bias `rel_att` in its locals (2 × c·heads·s; under autocast also the fp32 dropped probabilities
        before their 16-bit cast, 4·heads·s) and the boolean mask (s).
    Through the whole forward the encoder holds its fp32 (b, 1, s, s) attention mask (`get_attention_mask` of the
    all-ones mask `DebertaV2Model.forward` makes) and the int64 relative positions (s² for the batch).
    `DebertaV2Model.forward` asks its encoder for every layer's output (`output_hidden_states=True`) and holds the
    list until it returns: under autocast each is an fp32 LayerNorm output no 16-bit linear keeps (4h per layer),
    under PEFT one the frozen linears do not keep (c·h per layer)."""
    arch = rp.arch
    if arch.family not in DISENTANGLED_ATTENTION or rp.grad_checkpointing or rp.framework not in HF_MODEL_FRAMEWORKS:
        return 0.0
    c = 2 if rp.compute_dtype != "fp32" else 4
    amp = rp.amp and c == 2 and not compiled_block(rp)
    _, one_layer = activations_per_token(rp)
    outputs = arch.layers * (4 * arch.hidden if amp else c * arch.hidden if rp.peft != "none" else 0)
    return disentangled_attention_peak(rp) - one_layer + outputs


def disentangled_attention_peak(rp: ResolvedPlan) -> float:
    """Bytes per token a DeBERTa-v2 block holds at its attention's peak while it runs forward (in the forward, or
    recomputed under checkpointing): what it keeps through its attention, the larger of the two transient sets
    (`disentangled_forward_per_token`), and the encoder's fp32 attention mask and int64 relative positions (a
    checkpointed block's inputs, held by the checkpoint through backward)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    amp = rp.amp and c == 2 and not compiled_block(rp)
    s = rp.seq_len // max(rp.context_parallel, 1)
    heads = arch.heads
    kept: dict = {}
    activations_per_token(rp, kept)
    through = kept["through_attention"]
    probabilities = ((4 if amp else c) + c + 1) * heads * s + s  # softmax output, dropped copy, masks
    at_bias = through - probabilities - c * arch.q_dim + 5 * c * heads * s
    at_matmul = through + (2 * c + (4 if amp else 0)) * heads * s
    masks = 4 * s + 8 * s / max(rp.micro_batch, 1)
    return max(at_bias, at_matmul) + masks


def backward_block_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token of one checkpointed block at its backward peak: its recomputed activations plus the gradients
    of the gated MLP's hidden state (the product's gradient and one for each factor, in the MLP's dtype; two for
    an ungated MLP). Traced with the real libraries (Mistral-7B QLoRA, checkpointed): the live set at the peak is
    these, the block's incoming gradient already consumed by the down projection's backward — which has also
    freed what the down projection kept of its input (autograd frees a node's saved tensors when it runs; seen in
    the real trace at 2 × 2048: the adapter's 16-bit cast of the product is gone at the peak). An adapter that
    keeps its own copy of the product in another dtype (fp32 adapters outside autocast) peaks inside the down
    projection's backward instead: its input copy is still held while the product's gradient is made in the copy's
    dtype, cast back and added to the base layer's (traced at small shapes, tests/trace/
    test_real_library_estimate.py). Under DoRA the block peaks earlier, while the down projection's weight norm is
    recomputed (its `eye`-sized temporaries, `dora_weight_norm_transient`) with the product still alive. An adapter
    block whose code holds more while it is recomputed peaks in that forward (`recomputed_forward_per_token`)."""
    arch = rp.arch
    kept: dict = {}
    _, one_layer = activations_per_token(rp, kept)
    if is_mamba(arch):
        return one_layer + mamba_backward_per_token(rp)
    if nemotron_h_backward_per_token(rp):
        return nemotron_h_backward_per_token(rp) / max(rp.tensor_parallel, 1)
    if arch.family == "mamba2" and mamba2_norm_backward_per_token(rp):
        # a recomputed Mamba-2 block peaks in its gated norm's backward (no MLP in it)
        # (a k-bit model's earlier, at the end of its recomputed chunk scan: `mamba2_recompute_peak_per_token`)
        peak = max(one_layer + mamba2_norm_backward_per_token(rp), mamba2_recompute_peak_per_token(rp))
        return peak / max(rp.tensor_parallel, 1)
    tp = max(rp.tensor_parallel, 1)
    jamba = jamba_mixer_backward_per_token(rp)
    if jamba:
        # a recomputed Jamba Mamba layer peaks in its mixer's backward, its MLP's backward done: its input norm, the
        # mixer's saved tensors and the scan's backward (`jamba_mixer_backward_bytes`), or in the MLP's backward
        mixer = norms_per_token(rp) / max(norms_per_layer(arch), 1) + jamba_mixer_per_token(rp) + jamba
        return max(_mlp_backward_block_per_token(rp, kept, one_layer), mixer / tp)
    if gemma3n(rp):
        # a recomputed Gemma-3n block peaks at the end of its recomputed forward (`gemma3n.recompute_peak_per_token`)
        return max(_mlp_backward_block_per_token(rp, kept, one_layer), gemma3n_recompute_peak(rp, one_layer))
    # a MoE block whose recomputed forward holds more than its backward (gpt-oss's experts, Llama-4's MoE block)
    return max(
        _mlp_backward_block_per_token(rp, kept, one_layer),
        recomputed_forward_per_token(rp),
        recomputed_experts_forward_per_token(rp, one_layer),
        llama4_recomputed_moe_forward(rp, one_layer),
    )


# Families whose model scales the embedding output out of place, the embedding's own output staying alive beside the
# scaled one (the first block's checkpointed input) through the backward (traced with the real libraries), and whose
# MLP or block output is scaled before the residual add, so that its gradient is a tensor of its own: transformers
# 5.24 models/falcon_h1/modeling_falcon_h1.py (`FalconH1Model.forward`: `embed_tokens(input_ids) *
# embedding_multiplier`; `FalconH1MLP.forward`: `down_proj(y) * down_multiplier`) and models/granitemoehybrid/
# modeling_granitemoehybrid.py (`GraniteMoeHybridModel.forward`: `inputs_embeds * embedding_multiplier`;
# `GraniteMoeHybridDecoderLayer.forward`: `residual + hidden_states * residual_multiplier`).
SCALED_EMBEDDING = frozenset({"falcon_h1", "granitemoehybrid"})
SCALED_BLOCK_OUTPUT = frozenset({"falcon_h1", "granitemoehybrid"})


def recomputed_forward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token of the top checkpointed block's recomputed forward at its peak, inside its MLP's down projection
    or its first linear, in an adapter model on transformers (0 elsewhere). transformers 5.24 checkpoints with
    `use_reentrant=False` (modeling_utils.py `gradient_checkpointing_enable`), and torch's non-reentrant checkpoint
    recomputes a block only when the first backward node that needs one of its saved tensors runs (torch 2.13
    torch/utils/checkpoint.py `_checkpoint_hook`, its `unpack_hook`). Alive then, beside the block's saved tensors
    made so far:
      - the gradients of the nodes that save nothing, already run: the block output's (the residual stream's dtype),
        the base layer's share when it is a tensor of its own (a multiplier on the MLP or block output,
        `SCALED_BLOCK_OUTPUT`, or a cast to the output's dtype), and the adapter branch's scaled gradient in the
        adapter's dtype (peft 0.21.2 tuners/lora/layer.py `Linear.forward`: `lora_B(lora_A(dropout(x))) * scaling`);
      - what the decoder layer's code holds in its locals: the 16-bit residual (its norm keeps an fp32 copy, not it),
        and on Falcon-H1 the scaled mixer and attention outputs (`mamba_hidden_states * ssm_out_multiplier`,
        `attention_hidden_states * attn_out_multiplier`, held until the layer returns);
      - the MLP's product, when the adapter keeps a copy of it in its own dtype and nothing keeps the product itself;
      - the down projection's forward transients: under 4-bit, bitsandbytes 0.50.2 nn/modules.py
        `Linear4bit.forward` casts the input to the compute dtype, runs the gemm and casts the output back to the
        input's dtype (the adapter's copy of the input not made yet); otherwise the base layer's output, the
        adapter's copy made (peft 0.21.2 tuners/lora/bnb.py `Linear4bit.forward`, tuners/lora/layer.py);
      - the embedding's output where the model scales it out of place (`SCALED_EMBEDDING`)."""
    arch = rp.arch
    if (
        rp.peft not in ("lora", "qlora")
        or not rp.grad_checkpointing
        or rp.framework not in HF_MODEL_FRAMEWORKS
        or unsloth_kernels(rp)
        or arch.is_moe
        or arch.block != "decoder"
    ):
        return 0.0
    kept: dict = {}
    _, one_layer = activations_per_token(rp, kept)
    if not kept["down_input"]:
        return 0.0
    h, inter = arch.hidden, arch.intermediate
    c = 2 if rp.compute_dtype != "fp32" else 4
    m = mlp_bytes(rp)
    r = 4 if fp32_residual(rp) or c == 4 else 2
    copy = kept["down_adapter_copy"]
    a = copy / inter if copy else m  # the adapter's dtype: that of its copy of the down projection's input
    scaled = arch.family in SCALED_BLOCK_OUTPUT
    waiting = r * h + (m * h if scaled or m != r else 0) + a * h
    locals_ = (2 * h if r == 2 else 0) + ((r + c) * h if arch.family == "falcon_h1" else 0)
    product = m * inter if copy else 0
    if rp.quant_bits == 4:
        at_down = one_layer - copy + product + (c * inter if m != c else 0) + c * h + (m * h if m != c else 0)
    else:
        at_down = one_layer + product + m * h
    # inside the MLP's first linear (one gate|up linear where the family fuses them, else up or gate), before the
    # rest of the MLP is made: its output, the adapter's output scaled and their sum (peft 0.21.2 tuners/lora/
    # layer.py `Linear.forward`: `result + lora_B(lora_A(dropout(x))) * scaling`); a 4-bit layer's output is
    # cloned and the adapter's output cast to its dtype before the add (tuners/lora/bnb.py `Linear4bit.forward`:
    # `result.clone()`, `output.to(expected_dtype)`, `result + output`): three outputs in the layer's dtype
    fused = arch.family in HF_FUSED_GATE_UP
    width = inter * (2 if fused else 1)
    lin = linear_inputs_per_token(rp)
    first_copy = (lin.mlp - lin.down) / (1 if fused else 2)
    out = 3 * m * width if rp.quant_bits == 4 else (m + a + max(a, m)) * width
    in_first = one_layer - kept["mlp"] + first_copy + out
    embedding = r * h if arch.family in SCALED_EMBEDDING else 0
    return (max(at_down, in_first) + waiting + locals_ + embedding) / max(rp.tensor_parallel, 1)


def jamba_backward_change(rp: ResolvedPlan, tokens: int) -> tuple[int, int] | None:
    """Jamba without recompute: the step peaks in the backward of its highest Mamba layer's mixer
    (`jamba_mixer_backward_bytes`). Returns how the activations differ there from the end of the forward, and the
    gradients made by then in a run that trains the base weights; None for any other model. Freed by then: the loss
    and logits, the final norm, every layer above (attention layers), and that layer's pre-MLP norm and MLP or MoE
    block (transformers 5.24 models/jamba/modeling_jamba.py `JambaMambaDecoderLayer.forward`: the mixer runs before
    them, so its backward runs after theirs). Made by then: the LM head's, the final norm's, the layers above's, that
    layer's MLP's and norm's, out_proj's and D's gradients (`jamba_mixer_grads`)."""
    pattern = jamba_layer_pattern(rp)
    if not pattern or not any(m for m, _ in pattern) or not jamba_mixer_backward_per_token(rp):
        return None
    arch = rp.arch
    kept: dict = {}
    activations_per_token(rp, kept)
    top = max(i for i, (mamba, _) in enumerate(pattern) if mamba)
    dense = dense_layer_plan(rp)
    dense_mlp = mlp_keeps_per_token(dense) if dense is not None else kept["mlp"]
    one_norm = norms_per_token(rp) / max(norms_per_layer(arch), 1)
    above = sum(
        kept.get("attention_layer", 0.0) + (0.0 if moe else dense_mlp - kept["mlp"]) for _, moe in pattern[top + 1 :]
    )
    ffn = kept["mlp"] if pattern[top][1] else dense_mlp
    change = (jamba_mixer_backward_per_token(rp) - final_norm_per_token(rp) - above - ffn - one_norm) * tokens
    if rp.peft != "none":
        return int(change), jamba_mixer_grads(rp)
    h = arch.hidden
    s = shapes(arch)
    w = 4 if rp.weight_dtype == "fp32" else 2
    moe_ffn = arch.num_experts * 3 * h * (arch.moe_intermediate or arch.intermediate) + h * arch.num_experts
    made = (s.lm_head_params or s.embed_params) + h + (len(pattern) - 1 - top) * s.layer_params
    made += (moe_ffn if pattern[top][1] else 3 * h * arch.intermediate) + h
    return int(change), int(made * w + jamba_mixer_grads(rp))


def _mlp_backward_block_per_token(rp: ResolvedPlan, kept: dict, one_layer: float) -> float:
    """`backward_block_per_token` of a block that peaks in its MLP's backward."""
    arch = rp.arch
    tp = max(rp.tensor_parallel, 1)
    inter = (arch.moe_intermediate or arch.intermediate) * (expert_passes(rp) if arch.is_moe else 1)
    gated = arch.mlp in ("swiglu", "geglu")
    m = mlp_bytes(rp)
    # routed experts run one after another (`expert_loop`): the MLP's backward temporaries are one expert's, for its
    # share of the token-expert pairs (1/E of them with balanced routing)
    share = 1 / arch.num_experts if expert_loop(rp) else 1.0
    temps = (3 if gated else 2) * m * inter * share + adalora_mlp_backward_per_token(rp)
    if fused_experts(rp):
        # a grouped_mm MoE block's backward starts with token-expert-pair-sized gradients (k·h each, the experts'
        # dtype): the per-token sum's gradient expanded into a copy, and the un-permute's backward (`index`'s
        # backward: zeros, then index_put), before any expert's backward runs (transformers 5.24 integrations/moe.py
        # `grouped_mm_experts_forward`: `weighted_out[inv_perm]`, `.view(num_tokens, num_top_k, hidden_dim).sum(1)`)
        temps = max(temps, 3 * expert_passes(rp) * arch.hidden * expert_bytes(rp))
    if unsloth_kernels(rp):
        # unsloth/kernels/fast_lora.py LoRA_MLP.backward: DW = dY·Wᵀ is the one new MLP-wide tensor; the SwiGLU
        # backward kernel (kernels/swiglu.py `swiglu_DWf_DW_dfg_kernel`) writes h, df and de over DW, e and g
        temps = (2 if rp.compute_dtype != "fp32" else 4) * inter
    # DeBERTa-v2: the recomputed block's attention holds its score-sized temporaries (`disentangled_attention_peak`)
    recomputed = (
        disentangled_attention_peak(rp) / tp
        if arch.family in DISENTANGLED_ATTENTION and rp.framework in HF_MODEL_FRAMEWORKS
        else 0.0
    )
    if rp.peft == "dora" or unsloth_kernels(rp):
        return max(one_layer + temps / tp, recomputed)
    after_down = max(one_layer - kept["down_input"] + temps / tp, recomputed)
    copy = kept["down_adapter_copy"]
    # inside the down projection's backward: the product's gradient from the base layer (m·I), and from an adapter
    # with its own copy, that copy's gradient and its cast back to the product's dtype
    at_down = one_layer + (m * inter + (copy + m * inter if copy else 0.0)) * share / tp
    return max(after_down, at_down)


def math_attention_block_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token of one checkpointed block inside its attention's backward on SDPA's math kernel (0 when the
    attention runs a fused kernel): the recomputed block less what its MLP kept (the MLP's backward ran first and
    freed it), plus the backward's two fp32 probability-sized temporaries (`sdpa_math_backward_per_token`)."""
    if not sdpa_math(rp):
        return 0.0
    kept: dict = {}
    _, one_layer = activations_per_token(rp, kept)
    return one_layer - kept["mlp"] + sdpa_math_backward_per_token(rp)
