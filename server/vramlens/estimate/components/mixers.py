"""Token mixers that are not attention, in stacks that mix them with attention layers: LFM2's gated short
convolutions, Qwen3-Next's gated DeltaNet (linear attention). A layer of such a kind keeps its own mixer's activations
in place of the attention's (its norms and MLP are the block's)."""

from __future__ import annotations

import math
from typing import NamedTuple

from vramlens.estimate import shapes
from vramlens.estimate.components.common import mlp_bytes
from vramlens.estimate.components.linears import adapter_input
from vramlens.estimate.components.quant import kbit_autocast, kbit_deltanet_bytes
from vramlens.knowledge.models import DELTANET_FAMILIES
from vramlens.resolved import ResolvedPlan


def short_conv_layers(rp: ResolvedPlan) -> int:
    """How many layers of the stack are short convolutions (`estimate.shapes.short_conv_layers`)."""
    return shapes.short_conv_layers(rp.arch)


def first_layer_is_short_conv(rp: ResolvedPlan) -> bool:
    """Whether layer 0 is a short convolution (LFM2's `layer_types`, which start with "conv" in the published
    configs: LiquidAI/LFM2-1.2B config.json)."""
    import json

    if not short_conv_layers(rp) or not rp.arch.hf_config_json:
        return False
    kinds = json.loads(rp.arch.hf_config_json).get("layer_types") or []
    return bool(kinds) and kinds[0] == "conv"


def short_conv_per_token(rp: ResolvedPlan) -> float:
    """What one LFM2 short-convolution mixer keeps for backward per token (transformers 5.24
    models/lfm2/modeling_lfm2.py `Lfm2ShortConv.forward` and its `causal_conv1d_fn`; measured with saved-tensor hooks
    on the real module, tests/trace/test_new_architectures.py): in_proj's output B|C|x (3h: `B * x` and `C * conv`
    keep views of it), `B * x` (h: the depthwise conv1d keeps its input even with a frozen weight: aten's
    convolution saves input and weight together), the conv output before the slice to the sequence, L + K − 1
    positions of each sequence (the `C * out` product keeps the sliced view; causal-conv1d's CUDA kernel returns
    the L positions alone, K − 1 fewer per sequence), and the inputs of in_proj and out_proj when they train (or
    their adapters' copies). In a k-bit model the conv weight is fp32 (prepare_model_for_kbit_training) and so is
    the stream it convolves: these are fp32 (`mlp_bytes`)."""
    arch = rp.arch
    h = arch.hidden
    c = 2 if rp.compute_dtype != "fp32" else 4
    m = mlp_bytes(rp)
    k = _conv_kernel(rp)
    s = max(rp.seq_len, 1)
    keeps = m * (3 * h + h + h * (s + k - 1) / s)
    if rp.peft == "none":
        return keeps + 2 * c * h  # in_proj's and out_proj's inputs
    if "all-linear" in rp.lora_targets:
        _, a = adapter_input(rp)
        keeps += 2 * (a * h + a * rp.lora_r)  # each adapter's own copy of its input and lora_A's output
    return keeps


def _conv_kernel(rp: ResolvedPlan) -> int:
    """The conv kernel width (`conv_L_cache`, Lfm2Config default 3)."""
    import json

    if rp.arch.hf_config_json:
        k = json.loads(rp.arch.hf_config_json).get("conv_L_cache")
        if isinstance(k, int) and k > 0:
            return k
    return 3


class DeltaNetSizes(NamedTuple):
    key_heads: int
    value_heads: int
    key_dim: int  # per head
    value_dim: int  # per head
    conv: int
    chunk: int


# `torch_chunk_gated_delta_rule`'s default chunk (transformers 5.24 models/qwen3_next/modeling_qwen3_next.py)
DELTANET_CHUNK = 64


def deltanet_sizes(rp: ResolvedPlan) -> DeltaNetSizes | None:
    """The gated DeltaNet sizes of Qwen3-Next or Qwen3.5 from its config.json (`Qwen3NextConfig` names and defaults,
    which `Qwen3_5TextConfig` and `Qwen3_5MoeTextConfig` share), or None."""
    import json

    if rp.arch.family not in DELTANET_FAMILIES or not rp.arch.hf_config_json:
        return None
    config = json.loads(rp.arch.hf_config_json)
    return DeltaNetSizes(
        int(config.get("linear_num_key_heads", 16)),
        int(config.get("linear_num_value_heads", 32)),
        int(config.get("linear_key_head_dim", 128)),
        int(config.get("linear_value_head_dim", 128)),
        int(config.get("linear_conv_kernel_dim", 4)),
        DELTANET_CHUNK,
    )


def deltanet_bytes(rp: ResolvedPlan, z: DeltaNetSizes) -> tuple[float, float, float]:
    """What one gated DeltaNet mixer keeps for backward on transformers' torch path (transformers 5.24
    models/qwen3_next/modeling_qwen3_next.py `Qwen3NextGatedDeltaNet.forward`, `torch_chunk_gated_delta_rule`,
    `Qwen3NextRMSNormGated`; measured with saved-tensor hooks, tests/trace/test_hybrid_layers.py): (bytes per
    token, per sequence, per layer). H value heads of dk (keys, queries repeated to H heads) and dv, L positions
    padded to Lp (chunks of Q = 64), C chunks:
    - per token: in_proj's input (c·h, when it trains), the conv's input q|k|v (c·(2·Hk·dk + H·dv)), β = sigmoid
      (c·H), softplus's input and, when A_log trains, output (4H each), the l2-normalised q and k's fp32 inputs and
      1/norm (2 · 4·H·(dk + 1)); the gated norm's fp32 input, 1/rms, the 16-bit normalised value (when its weight
      trains) and weighted value, the gate z in fp32 and silu(z) (4·H·dv · 3 + 4H + c·H·dv · 2), out_proj's input
      (c·H·dv, when it trains);
    - per sequence: the conv output before the slice (c·conv width · (L + K − 1)); padded to Lp: β, V and K in fp32
      (4·H·(1 + dv + dk)), k·β (4·H·dk), the pairwise decay, K·kβᵀ, Q·Kᵀ and the masked products (5 · 4·H·Q), q
      (4·H·dk), exp(cum_decay) for kβ, q and k (3 · 4H), the triangular solves' outputs (4·H·(dv + dk)), the
      decayed k, and q (with more than one chunk), the new values (4·H·(dk + dv) + 4·H·dk); the chunk-by-chunk
      states (C · 4·H·dk·dv) and decays (4·H·C);
    - per layer: A (4H, and exp's output when A_log trains) and the Q² mask.
    In a k-bit model under autocast the mixer reads an fp32 stream and keeps 16-bit casts instead
    (`quant.kbit_deltanet_bytes`)."""
    h = rp.arch.hidden
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    hv, dk, dv, q = z.value_heads, z.key_dim, z.value_dim, z.chunk
    conv_width = 2 * z.key_heads * dk + hv * dv
    s = max(rp.seq_len, 1)
    chunks = math.ceil(s / q)
    sp = chunks * q
    per_token = (
        (c * h if full else 0)
        + c * conv_width
        + c * hv
        + (8 if full else 4) * hv
        + 2 * 4 * hv * (dk + 1)
        + 4 * hv * dv * 3
        + 4 * hv
        + c * hv * dv * (2 if full else 1)
        + (c * hv * dv if full else 0)
    )
    padded = (
        4 * hv * (1 + dv + dk)
        + 4 * hv * dk
        + 5 * 4 * hv * q
        + 4 * hv * dk
        + 3 * 4 * hv
        + 4 * hv * (dv + dk)
        + 4 * hv * dk * (2 if chunks > 1 else 1)
        + 4 * hv * dv
    )
    per_seq = c * conv_width * (s + z.conv - 1) + padded * sp + chunks * 4 * hv * dk * dv + 4 * hv * chunks
    per_layer = 4 * hv + (4 * hv if full else 0) + q * q
    if kbit_autocast(rp):  # a 4-bit model's fp32 stream under autocast (estimate/components/quant.py)
        return kbit_deltanet_bytes(rp, z, (per_token, per_seq, per_layer))
    return per_token, per_seq, per_layer


def deltanet_per_token(rp: ResolvedPlan) -> float:
    """`deltanet_bytes` spread over the micro-batch's tokens (0 for a model without gated DeltaNet layers)."""
    z = deltanet_sizes(rp)
    if z is None:
        return 0.0
    per_token, per_seq, per_layer = deltanet_bytes(rp, z)
    s = max(rp.seq_len, 1)
    return per_token + per_seq / s + per_layer / (s * max(rp.micro_batch, 1))


def first_layer_is_deltanet(rp: ResolvedPlan) -> bool:
    """Whether layer 0 of a Qwen3-Next or Qwen3.5 stack is a gated DeltaNet layer (`layer_types`; their configs'
    default pattern puts full attention at every `full_attention_interval`-th layer, 4, so layer 0 is linear
    attention)."""
    import json

    if rp.arch.family not in DELTANET_FAMILIES or not rp.arch.hf_config_json:
        return False
    kinds = json.loads(rp.arch.hf_config_json).get("layer_types") or ["linear_attention"]
    return kinds[0] == "linear_attention"


def deltanet_frozen(rp: ResolvedPlan) -> bool:
    """Whether nothing in a gated DeltaNet mixer trains: an adapter run whose targets name none of its linears
    (in_proj_qkvz, in_proj_ba, out_proj: only "all-linear" reaches them)."""
    return rp.peft != "none" and "all-linear" not in rp.lora_targets
