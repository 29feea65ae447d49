"""Saved activations: one block's sub-layers (norms, attention, MLP, linear inputs, adapters, residual dropouts) summed
per layer, and the layers of the stack."""

from __future__ import annotations

from vramlens.estimate.components import liger
from vramlens.estimate.components.adapters import dora_per_token
from vramlens.estimate.components.attention import (
    attention_per_token,
    cross_attention_per_token,
    first_attention_keeps_nothing,
)
from vramlens.estimate.components.common import MLP_LINEARS, amp_fp32_stream
from vramlens.estimate.components.gemma3n import gemma3n
from vramlens.estimate.components.gemma3n import kv_adapters_per_token as gemma3n_kv_adapters
from vramlens.estimate.components.gemma3n import layer_per_token as gemma3n_layer
from vramlens.estimate.components.linears import linear_inputs_per_token
from vramlens.estimate.components.llama4 import attention_extra_per_token as llama4_attention_extra
from vramlens.estimate.components.llama4 import llama4
from vramlens.estimate.components.llama4 import moe_per_token as llama4_moe
from vramlens.estimate.components.mixers import (
    deltanet_frozen,
    deltanet_per_token,
    first_layer_is_deltanet,
    first_layer_is_short_conv,
    short_conv_layers,
    short_conv_per_token,
)
from vramlens.estimate.components.mlp import dense_layer_plan, mlp_keeps_per_token, mlp_per_token
from vramlens.estimate.components.norms import (
    SHARED_NORM_INPUT,
    first_block_input_frozen,
    input_needs_no_grad,
    norms_per_token,
    qk_norms_per_token,
)
from vramlens.estimate.components.ssm import (
    first_layer_is_mamba,
    jamba_mixer_per_token,
    mamba2_block_per_token,
    mamba2_layer_flags,
    mamba2_mixer_frozen,
    mamba2_mixer_per_token,
    mamba_layer_per_token,
    mamba_mixer_frozen,
    nemotron_h_per_token,
)
from vramlens.estimate.components.t5 import hf_t5, t5_block_extras, t5_cross_attention_per_token
from vramlens.estimate.shapes import is_mamba
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.knowledge.models import norms_per_layer
from vramlens.resolved import ResolvedPlan

# Residual dropouts per block on by default (GPT2Config and GPTBigCodeConfig resid_pdrop = 0.1: after attention and
# after the MLP).
RESIDUAL_DROPOUTS = {
    "gpt2": 2,
    "gpt_bigcode": 2,
    "bert": 2,
    "roberta": 2,
    "deberta-v2": 2,
    "t5": 2,
}


def residual_dropouts_per_token(rp: ResolvedPlan) -> int:
    """The residual dropouts the family's config enables by default (`RESIDUAL_DROPOUTS`), each keeping a 1-byte mask
    per element (CUDA native_dropout)."""
    return (RESIDUAL_DROPOUTS.get(rp.arch.family, 0) * rp.arch.hidden) if rp.framework in HF_MODEL_FRAMEWORKS else 0


def activations_per_token(rp: ResolvedPlan, kept: dict | None = None) -> tuple[float, float]:
    """Saved activations per token: (all layers without checkpointing, one layer), in bytes. `kept`, when given,
    receives "down_input": what one layer keeps of the down projection's input (for `backward_block_per_token`).

    HF Llama-style block in 16-bit with SDPA/flash (traced; docs/memory-model.md, "Activations"):
      norms: each RMSNorm keeps its fp32 input (4h) and the normalised 16-bit value (2h); its weighted
             output (2h) is the input of the following linears (`norms_per_token`);
      attention: q after RoPE (2q), K and V (2·kv_eff each, kv_eff = q with repeat_kv), SDPA output (2q),
             fp32 logsumexp (4·heads); eager adds fp32 softmax + 16-bit probabilities (6·heads·s)
             (`attention_per_token`);
      gated MLP: gate, up, act(gate) (2I each) and the product, the input of down (2I) (`mlp_per_token`).
    GELU MLP blocks (GPT-2/BERT/T5): LayerNorm keeps its 16-bit input; fc1 output and GELU output (2I each).
    The linears' inputs, as the weights and adapters that train keep them: `linear_inputs_per_token`; DoRA's
    products: `dora_per_token`; residual dropouts' masks: `residual_dropouts_per_token`. A Mamba block:
    `mamba_layer_per_token`.
    """
    arch = rp.arch
    if is_mamba(arch) or (arch.family == "mamba2" and mamba2_mixer_per_token(rp)):
        one = mamba_layer_per_token(rp) if is_mamba(arch) else mamba2_block_per_token(rp)
        if kept is not None:
            kept.update(down_input=0.0, through_attention=one, down_adapter_copy=0.0, mlp=0.0, after_attention=0.0)
        return arch.layers * one, one
    if arch.family == "nemotron_h" and nemotron_h_per_token(rp)[0]:
        # Nemotron-H: each layer one block of one kind (estimate/components/ssm.py `nemotron_h_block_bytes`)
        total, one = nemotron_h_per_token(rp)
        if kept is not None:
            kept.update(down_input=0.0, through_attention=one, down_adapter_copy=0.0, mlp=0.0, after_attention=0.0)
        return total, one
    h = arch.hidden
    amp = amp_fp32_stream(rp)
    # Liger's RMSNorm and SwiGLU/GeGLU kernels save other tensors than transformers' layers (`liger`)
    norm_keep = liger.norms_per_token(rp, norms_per_token(rp), qk_norms_per_token(rp))
    attn = attention_per_token(rp)
    mlp_internal = liger.mlp_per_token(rp, mlp_per_token(rp))
    lin = linear_inputs_per_token(rp)
    per_layer = norm_keep + attn + mlp_internal + lin.total + dora_per_token(rp)
    per_layer += residual_dropouts_per_token(rp)
    mixer = mamba2_mixer_per_token(rp) if arch.family == "falcon_h1" else 0.0  # beside attention, same norm
    per_layer += mixer
    dense = dense_layer_plan(rp)
    # a MoE model's dense layers keep a dense MLP's activations in place of the MoE block's (`dense_layer_plan`)
    dense_delta = (
        mlp_keeps_per_token(dense) - (mlp_internal + lin.mlp + dora_per_token(rp, MLP_LINEARS))
        if dense is not None
        else 0.0
    )
    if arch.block == "encoder-decoder" and hf_t5(rp):
        enc = arch.encoder_layers or arch.layers
        one_norm = norm_keep / max(norms_per_layer(arch), 1)
        enc_layer = per_layer + t5_block_extras(rp, norms=2)
        cross = t5_cross_attention_per_token(rp, one_norm, attn, lin.qkv_adapters, lin.o)
        per_layer = enc_layer + cross  # the decoder's block, the largest one
        total_layers = enc * enc_layer + arch.layers * per_layer
    elif arch.block == "encoder-decoder":
        enc = arch.encoder_layers or arch.layers
        cross = cross_attention_per_token(rp)
        total_layers = enc * per_layer + arch.layers * (per_layer + cross)
    elif short_conv_layers(rp):
        # LFM2: the short-convolution layers keep their mixer's activations in place of the attention's
        n_conv = short_conv_layers(rp)
        attention_part = attn + lin.qkv + lin.o + qk_norms_per_token(rp)
        conv_layer = per_layer - attention_part + short_conv_per_token(rp)
        total_layers = (arch.layers - n_conv) * per_layer + n_conv * conv_layer
        if first_layer_is_short_conv(rp) and input_needs_no_grad(rp):
            # nothing before the MLP's adapters needs a gradient in layer 0: its norms and conv keep nothing
            total_layers -= short_conv_per_token(rp) + norm_keep - qk_norms_per_token(rp)
    elif deltanet_per_token(rp):
        # Qwen3-Next: its gated DeltaNet layers keep their mixer's activations in place of the attention's
        n_linear = dict(arch.layer_kinds).get("linear attention", 0)
        attention_part = attn + lin.qkv + lin.o + qk_norms_per_token(rp)
        delta = deltanet_per_token(rp)
        total_layers = arch.layers * per_layer + n_linear * (delta - attention_part)
        if first_layer_is_deltanet(rp) and input_needs_no_grad(rp) and deltanet_frozen(rp):
            # layer 0's norm and mixer read the frozen embeddings' output and train nothing: they keep nothing
            total_layers -= delta + norm_keep / max(norms_per_layer(arch), 1)
        if n_linear:
            per_layer = max(per_layer, per_layer - attention_part + delta)  # a checkpointed step recomputes the larger
    elif jamba_mixer_per_token(rp):
        # Jamba: its Mamba layers keep their mixer's activations in place of the attention's
        n_ssm = dict(arch.layer_kinds).get("state space", 0)
        attention_part = attn + lin.qkv + lin.o + qk_norms_per_token(rp)
        jamba = jamba_mixer_per_token(rp)
        if kept is not None:
            kept["attention_layer"] = per_layer  # an attention layer with a MoE block (`jamba_backward_change`)
        total_layers = arch.layers * per_layer + n_ssm * (jamba - attention_part)
        if first_layer_is_mamba(rp) and input_needs_no_grad(rp) and mamba_mixer_frozen(rp):
            # layer 0's norm and mixer read the frozen embeddings' output and train nothing: they keep nothing
            total_layers -= jamba + norm_keep / max(norms_per_layer(arch), 1)
        if n_ssm:
            per_layer = max(per_layer, per_layer - attention_part + jamba)  # a checkpointed step recomputes the larger
    elif mamba2_layer_flags(rp):
        # Bamba, Granite-4 hybrids: their Mamba-2 layers keep the mixer's activations in place of the attention's
        flags = mamba2_layer_flags(rp)
        n_ssm = sum(flags)
        attention_part = attn + lin.qkv + lin.o + qk_norms_per_token(rp)
        ssd = mamba2_mixer_per_token(rp)
        total_layers = arch.layers * per_layer + n_ssm * (ssd - attention_part)
        if flags[0] and input_needs_no_grad(rp) and mamba2_mixer_frozen(rp):
            # layer 0's norm and mixer read the frozen embeddings' output and train nothing: they keep nothing
            total_layers -= ssd + norm_keep / max(norms_per_layer(arch), 1)
        if n_ssm:
            per_layer = max(per_layer, per_layer - attention_part + ssd)  # a checkpointed step recomputes the larger
    elif gemma3n(rp):
        # Gemma-3n: AltUp, LAuReL, the per-layer-input gate, q/k/v norms and shared K/V around each block's attention
        # and MLP (`gemma3n.layer_per_token`; what the model keeps outside its blocks: `final_norm_per_token`)
        kv_adapters = gemma3n_kv_adapters(rp, lin)
        mlp_keeps = mlp_internal + lin.mlp + dora_per_token(rp, MLP_LINEARS)
        attn_linears = lin.total - lin.mlp - lin.o
        dora_attn = dora_per_token(rp) - dora_per_token(rp, MLP_LINEARS)
        frozen_first = input_needs_no_grad(rp)
        parts = dict(qkv=attn_linears, o=lin.o + dora_attn, mlp=mlp_keeps, kv_adapters=kv_adapters)
        total_layers = sum(gemma3n_layer(rp, i, grad_in=i > 0 or not frozen_first, **parts) for i in range(arch.layers))
        # a checkpointed step recomputes the largest block, its input needing a gradient
        per_layer = max(gemma3n_layer(rp, i, grad_in=True, **parts) for i in range(arch.layers))
    else:
        total_layers = arch.layers * per_layer
        if mixer and input_needs_no_grad(rp) and mamba2_mixer_frozen(rp):
            # layer 0's mixer reads the frozen embeddings' output and trains nothing: autograd saves nothing in it
            total_layers -= mixer
        if first_attention_keeps_nothing(rp):
            # MLA with no adapter before o: the first block keeps nothing up to o's input (its first norm included)
            total_layers -= attn + lin.qkv + norm_keep / max(norms_per_layer(arch), 1)
        elif first_block_input_frozen(rp) and amp:
            # the first block's norm reads the frozen embeddings' output: it keeps no fp32 input
            total_layers -= (2 if arch.family in SHARED_NORM_INPUT else 1) * 4 * h
    if llama4(rp) and arch.is_moe:
        # Llama-4's MoE blocks (`llama4.moe_per_token`) in place of the generic MoE count, in every layer; the dense
        # layers' delta is then taken from that
        moe_delta = llama4_moe(rp, lin.mlp) - (mlp_internal + lin.mlp + dora_per_token(rp, MLP_LINEARS))
        total_layers += arch.layers * moe_delta
        per_layer += moe_delta
        dense_delta -= moe_delta if dense is not None else 0.0
    if dense_delta:
        total_layers += arch.dense_layers * dense_delta
        per_layer = max(per_layer, per_layer + dense_delta)  # a checkpointed step recomputes the larger
    if llama4(rp):
        # Llama-4's q/k L2 norms and chunked attention (`llama4.attention_extra_per_token`), layer by layer
        extras = [llama4_attention_extra(rp, i) for i in range(arch.layers)]
        total_layers += sum(extras)
        per_layer += max(extras, default=0.0)
    tp = max(rp.tensor_parallel, 1)
    # Tensor parallelism splits what lies between a column-parallel linear and its row-parallel partner (attention
    # heads, the MLP's intermediate width); without sequence parallelism the rest is replicated on every rank: the
    # norms, the residual stream and the column-parallel linears' input (torch 2.13 torch/distributed/tensor/
    # parallel/style.py `ColwiseParallel._prepare_input_fn` makes its input a Replicate DTensor, `RowwiseParallel`
    # all-reduces its Partial output to Replicate; the tensor-parallel plan of torch's tutorial, docs.pytorch.org/
    # tutorials/intermediate/TP_tutorial.html, before it adds SequenceParallel). Measured against the sharded trace
    # (trace/sharded.py; tests/trace/test_sharded_tp_trace.py).
    one_norm = norm_keep / max(norms_per_layer(arch), 1)
    col_inputs = lin.qkv + (lin.mlp - lin.down)
    rep = norm_keep + col_inputs + residual_dropouts_per_token(rp) if tp > 1 and not rp.sequence_parallel else 0.0

    def split(x: float, replicated: float = 0.0) -> float:
        replicated = min(replicated, x) if rep else 0.0
        return replicated + (x - replicated) / tp

    if kept is not None:
        kept["down_input"] = lin.down / tp
        # what a block keeps up to its attention's output
        kept["through_attention"] = split(lin.qkv + attn, lin.qkv)
        kept["down_adapter_copy"] = lin.down_copy / tp
        kept["mlp"] = split(mlp_internal + lin.mlp + dora_per_token(rp, MLP_LINEARS), lin.mlp - lin.down)
        # what a block keeps past its attention's output (o's adapter input, the MLP, a second norm): freed by the
        # block's backward before its attention's own backward runs
        kept["after_attention"] = split(max(per_layer - lin.qkv - attn - one_norm, 0), rep - lin.qkv - one_norm)
    return split(total_layers, arch.layers * rep), split(per_layer, rep)
