"""What a bitsandbytes 4-bit model with peft's k-bit preparation changes in the layers that are not attention + MLP:
which of their linears are quantized, and what their mixers keep once the stream they read is fp32.

peft's `prepare_model_for_kbit_training` casts every parameter that is not 4-bit to fp32 (peft 0.21.2
src/peft/utils/other.py): the embeddings, the norms, a Mamba-2 mixer's conv1d, A_log, D and dt_bias. The norms then
return fp32 (their weight is fp32), and bitsandbytes' `Linear4bit.forward` casts its input to the compute dtype and
returns `matmul_4bit(...).to(inp_dtype)` (bitsandbytes 0.50.2 nn/modules.py): every linear fed the fp32 stream
returns fp32. The Trainer runs the step under the compute dtype's autocast (accelerate 1.15 `prepare_model`), so the
convolutions and the einsums' batched matmuls cast their operands to 16 bits and keep those copies for backward, where
a 16-bit step keeps its fp32 upcasts."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from vramlens.estimate.shapes import shapes
from vramlens.knowledge.models import SPLIT_DELTANET_PROJECTIONS
from vramlens.resolved import ResolvedPlan

if TYPE_CHECKING:
    from vramlens.estimate.components.mixers import DeltaNetSizes
    from vramlens.estimate.components.ssm import Mamba2Sizes


def kbit_autocast(rp: ResolvedPlan) -> bool:
    """A 4-bit model whose non-quantized parameters peft upcast to fp32, run under 16-bit autocast: its stream is fp32
    and its 4-bit linears return fp32 (module docstring)."""
    return bool(rp.quant_bits == 4 and rp.kbit_upcast and rp.compute_dtype != "fp32")


def mixer_linear_params(rp: ResolvedPlan) -> int:
    """Weights of nn.Linear modules the block shapes (`estimate.shapes`) leave among the other parameters and that
    transformers' bitsandbytes integration quantizes (transformers 5.24 integrations/bitsandbytes.py
    `replace_with_bnb_linear` swaps every `type(module) is nn.Linear` but the LM head): Falcon-H1's Mamba-2 mixer in
    every layer, in_proj h → 2·I + 2·G·N + H and out_proj I → h (transformers 5.24
    models/falcon_h1/modeling_falcon_h1.py `FalconH1Mixer.__init__`: `nn.Linear(self.hidden_size, projection_size)`,
    `nn.Linear(self.intermediate_size, self.hidden_size)`)."""
    arch = rp.arch
    if arch.family != "falcon_h1" or not arch.hf_config_json:
        return 0
    if any(l.name in ("in_proj", "out_proj") for l in shapes(arch).linears):
        return 0  # already among the block's linears
    from vramlens.estimate.components.ssm import mamba2_sizes

    z = mamba2_sizes(rp)
    if z is None:
        return 0
    layers = int(json.loads(arch.hf_config_json).get("num_hidden_layers", arch.layers))
    h = arch.hidden
    return layers * (h * (2 * z.inner + 2 * z.groups * z.state + z.heads) + z.inner * h)


def kbit_mamba2_mixer_bytes(
    rp: ResolvedPlan, z: Mamba2Sizes, in_adapter: float, out_adapter: float
) -> tuple[float, float, float]:
    """What one Mamba-2 mixer keeps for backward on transformers' torch path in a k-bit model under autocast
    (`kbit_autocast`): (bytes per token, per sequence, per layer), its input norm apart; `in_adapter`/`out_adapter`
    are what LoRA adapters on in_proj/out_proj keep (0 when not adapted). transformers 5.24
    models/mamba2/modeling_mamba2.py `Mamba2Mixer.torch_forward` (and Bamba's, Granite-4's, Falcon-H1's copies), with
    c the 16-bit size:
    - in_proj's output z|xBC|Δ in fp32 (the 4-bit linear's `.to(inp_dtype)`; Falcon-H1 keeps its `mup_vector`
      product instead, as large): 4·(2I + 2GN + H) per token;
    - the depthwise conv under autocast: its input cast (c·(I + 2GN) per token), its output before the slice to the
      sequence (c·(I + 2GN)·(L + K − 1) per sequence, SiLU's input) and its weight's cast (c·(I + 2GN)·K per layer);
      `causal_conv1d_fn` returns `out.to(hidden_states.dtype)`, an fp32 copy (4·(I + 2GN) per token) of which x, B
      and C are views (`.float()` then copies nothing);
    - the gate: `MambaRMSNormGated` keeps silu(z) and its product with the scan output (pow's input) in fp32, z
      itself being a view of in_proj's output, and 1/rms per group (4G); Falcon-H1 without mamba_rms_norm keeps the
      fp32 silu(z) (4I);
    - the chunk scan (`mamba2_chunk_scan`): Δ after dt_bias, softplus and clamp, all fp32 (3·4·H per position);
      each einsum's batched matmul keeps 16-bit casts of its operands and returns 16 bits: discretised x for the L·x
      and the chunk-state einsums (2 · c·I·Lp), C and B for G, B·decay, C for the output (4 · c·H·N·Lp), M = G·L
      (c·H·Q·Lp); L = exp(segsum(A)) stays fp32 (4·H·Q·Lp) and G is 16-bit (c·H·Q·Lp), M's product keeps both; B
      repeated to H heads, padded, fp32 for B·decay (4·H·N·Lp); the decays in and out (2 · 4·H·Lp); C·states in
      16 bits (c·I·Lp); the chunk states in 16 bits (c·I·N for the C + 1 states of the inter-chunk einsum, and the C
      the output one reads: a view of the C + 1 with one chunk); the chunk-to-chunk decay in fp32 and its cast
      ((4 + c)·H·(C + 1)²); the fp32 scan output (4·I·Lp);
    - per layer: A = −exp(A_log) (4H) and the four segsum masks (2Q² + 2(C + 1)² bytes).
    Checked against the real-library trace of the Falcon-H1, Bamba and Granite-4 tiny configs
    (tests/trace/test_hybrid_qlora.py)."""
    c = 2
    i, g, n, k, q, heads = z.inner, z.groups, z.state, z.conv, z.chunk, z.heads
    conv_dim = i + 2 * g * n
    per_token = 4 * (i + conv_dim + heads) + c * conv_dim + 4 * conv_dim + in_adapter + out_adapter
    per_token += 2 * 4 * i + 4 * g if z.gated_norm else 4 * i
    s = max(rp.seq_len, 1)
    chunks = math.ceil(s / q)
    sp = chunks * q
    per_seq = (
        c * conv_dim * (s + k - 1)
        + 3 * 4 * heads * s
        + (2 * c * i + (4 + 2 * c) * heads * q + (4 * c + 4) * heads * n + 2 * 4 * heads + c * i + 4 * i) * sp
        + c * i * n * (chunks + 1 + (chunks if chunks > 1 else 2))
        + (4 + c) * heads * (chunks + 1) ** 2
    )
    per_layer = 4 * heads + 2 * q * q + 2 * (chunks + 1) ** 2 + c * conv_dim * k
    if rp.arch.family == "falcon_h1":
        per_layer += c * (i + conv_dim + heads)  # the mup_vector the product keeps, as `mamba2_mixer_bytes` counts
    return per_token, per_seq, per_layer


def kbit_deltanet_bytes(
    rp: ResolvedPlan, z: DeltaNetSizes, bytes16: tuple[float, float, float]
) -> tuple[float, float, float]:
    """What one Qwen3-Next (or Qwen3.5) gated DeltaNet mixer keeps for backward in a k-bit model under autocast
    (`kbit_autocast`), from what it keeps in a 16-bit step (`bytes16`, `mixers.deltanet_bytes`): (bytes per token,
    per sequence, per layer). transformers 5.24 models/qwen3_next/modeling_qwen3_next.py
    `Qwen3NextGatedDeltaNet.forward`, `causal_conv1d_fn`, `torch_chunk_gated_delta_rule`, `Qwen3NextRMSNormGated`;
    in_proj_qkvz and in_proj_ba return fp32 (bitsandbytes 0.50.2 nn/modules.py `Linear4bit.forward`), so the mixer's
    stream is fp32, and autocast casts the operands of the conv and of every matmul to 16 bits (c) and returns 16
    bits. Against the 16-bit step:
    - per token: β = sigmoid(b) is fp32 (4H, not cH), and so is the gated norm's weighted value, read by the product
      with silu(z) (4·H·dv, not c·H·dv);
    - per padded position: the two chunk products K·kβᵀ and Q·Kᵀ come out of their matmuls in 16 bits, and the
      masked product with the pairwise decay keeps those (2·c·H·Q, not 2·4·H·Q), with the matmuls' casts of kβ, q
      and Kᵀ twice (4·c·H·dk); the chunk loop's matmuls keep 16-bit casts of each chunk's slice where a 16-bit step
      keeps views of the whole fp32 tensors: the intra-chunk attention (c·H·Q, not 4·H·Q), each chunk's v_new twice
      (2·c·H·dv, not its fp32 4·H·dv), the decayed keys (c·H·dk, not 4·H·dk), and past the first chunk (whose state
      is zeros, needing no gradient) the decayed queries and k_cumdecay (2·c·H·dk, where a 16-bit step keeps the
      fp32 q, 4·H·dk, k_cumdecay being the solve's saved output in both);
    - with as many key heads as value heads (no `repeat_interleave`), the l2 norms read q and k as views of the
      conv's fp32 output (4·(2·Hk·dk + H·dv), not 2·4·H·dk) and silu reads z as a view of in_proj_qkvz's fp32 output
      (4·(2·Hk·dk + 2·H·dv), not its fp32 copy 4·H·dv);
    - per sequence: the recurrent state cast twice a chunk (2·C·c·H·dk·dv); the last chunk's state update, whose
      new state the forward discards (`output_final_state` False), frees what it saved with that branch of the graph:
      its casts of the decayed keys and of v_new (c·H·Q·(dk + dv)), and the fp32 state it decays (4·H·dk·dv), which
      a 16-bit step keeps for the last chunk's matmuls;
    - per layer: the conv weight's cast (c·conv width·K).
    Measured with saved-tensor hooks on the real mixer with bitsandbytes 4-bit linears
    (tests/trace/test_qwen3_next_kbit.py)."""
    c = 2
    per_token16, per_seq16, per_layer16 = bytes16
    hv, dk, dv, q = z.value_heads, z.key_dim, z.value_dim, z.chunk
    s = max(rp.seq_len, 1)
    chunks = math.ceil(s / q)
    sp = chunks * q
    per_token = per_token16 + (4 - c) * hv + (4 - c) * hv * dv
    width = 2 * z.key_heads * dk + hv * dv
    if z.key_heads == hv:
        # no repeat to the value heads: the l2 norms read views of the conv's fp32 output, and silu reads z as a view
        # of in_proj_qkvz's fp32 output, where a 16-bit step keeps fp32 copies of q, k and z (Qwen3.5's z is
        # in_proj_z's own fp32 output, as large as that copy)
        per_token += 4 * width - 2 * 4 * hv * dk
        if rp.arch.family not in SPLIT_DELTANET_PROJECTIONS:
            per_token += 4 * (2 * z.key_heads * dk + 2 * hv * dv) - 4 * hv * dv
    padded = (
        -2 * (4 - c) * hv * q  # the two 16-bit chunk products
        + 4 * c * hv * dk  # their matmuls' casts
        - (4 - c) * hv * q  # the intra-chunk attention, per chunk in 16 bits
        + 2 * c * hv * dv
        - 4 * hv * dv  # v_new, cast twice
        + c * hv * dk
        - 4 * hv * dk  # the decayed keys
    )
    later = (chunks - 1) * q * 2 * c * hv * dk - (4 * hv * dk * sp if chunks > 1 else 0)
    per_seq = per_seq16 + padded * sp + later + 2 * chunks * c * hv * dk * dv
    # the last chunk's state update, whose state is discarded: freed with its branch of the graph
    per_seq -= c * hv * q * (dk + dv) + 4 * hv * dk * dv
    per_layer = per_layer16 + c * width * z.conv
    return per_token, per_seq, per_layer


def kbit_mamba2_recompute_bytes(
    rp: ResolvedPlan, z: Mamba2Sizes, in_adapter: float, out_adapter: float
) -> tuple[float, float, float]:
    """What one gated Mamba-2 mixer of a checkpointed k-bit block holds at the peak of its recomputed forward, which
    is its backward's peak: (bytes per token, per sequence, per layer), its input norm apart. torch's non-reentrant
    checkpoint recomputes the block when the first node needing its saved tensors runs (torch 2.13
    torch/utils/checkpoint.py `_checkpoint_hook`): out_proj's 4-bit matmul has run its backward by then (bitsandbytes
    0.50.2 autograd/_functions.py `MatMul4Bit` keeps its weight on ctx, not as a saved tensor), and the gated norm's
    product is the first node to unpack one. The recomputed forward peaks at the end of `mamba2_chunk_scan`
    (transformers 5.24 models/mamba2/modeling_mamba2.py; Nemotron-H's copy is the same), whose locals are alive
    beside what the mixer keeps up to there (`kbit_mamba2_mixer_bytes` less the gate's silu(z), product and 1/rms):
    - per padded position: `D_residual` and the padded discretised x (2 · 4·I), the padded A·Δ and its cumsum
      (2 · 4·H), C repeated to H heads and padded (4·H·N), M = G·L in fp32 (4·H·Q: its einsum keeps a 16-bit cast),
      Y_diag in 16 bits (c·I), B·decay in fp32 (4·H·N), Y_off and Y_diag + Y_off in fp32 (2 · 4·I; the contiguous
      copy is the scan output the mixer keeps);
    - per sequence: the zero initial state (c·I·N) and the inter-chunk einsum's output (c·I·N·(C + 1)), of which
      the chunk states are views;
    - out_proj's input gradient, cast back to the fp32 input's dtype (4·I per token).
    Traced with the real libraries at small shapes (tests/estimate/test_kbit_mamba2_recompute.py)."""
    c = 2
    i, h, n, q, g = z.inner, z.heads, z.state, z.chunk, z.groups
    per_token, per_seq, per_layer = kbit_mamba2_mixer_bytes(rp, z, in_adapter, out_adapter)
    per_token -= 2 * 4 * i + 4 * g  # the gate's tensors: made after the scan
    per_token += 4 * i  # out_proj's input gradient
    chunks = math.ceil(max(rp.seq_len, 1) / q)
    sp = chunks * q
    per_seq += (16 * i + c * i + 8 * h + 8 * h * n + 4 * h * q) * sp + c * i * n * (chunks + 2)
    return per_token, per_seq, per_layer
