"""State-space layers: what a Mamba block keeps for backward and its backward's temporaries."""

from __future__ import annotations

import math
from typing import NamedTuple

from vramlens.estimate.components.common import mlp_bytes
from vramlens.estimate.components.linears import adapter_input
from vramlens.estimate.components.quant import (
    kbit_autocast,
    kbit_mamba2_mixer_bytes,
    kbit_mamba2_recompute_bytes,
)
from vramlens.estimate.shapes import targeted
from vramlens.resolved import ResolvedPlan


def _mamba_adapter_keeps(rp: ResolvedPlan, name: str, width: int) -> float:
    """What a LoRA adapter on a Mamba mixer's linear keeps per token: its input (in the adapter's dtype: PEFT casts
    it, `_cast_input_dtype` in peft src/peft/tuners/lora/layer.py; a dropped copy and a 1-byte mask under
    lora_dropout) and lora_A's output, which lora_B keeps. 0 when the linear is not adapted. Under autocast (AMP, or
    a k-bit model's fp32 stream: `linears.adapter_input`) lora_A runs in 16 bits: it keeps its own 16-bit cast of the
    input, and its output, which lora_B keeps, is 16-bit."""
    if rp.peft == "none" or not any(l.name == name for l in targeted(rp.arch, rp.lora_targets)):
        return 0.0
    _, a = adapter_input(rp)
    return (a + 1 if rp.lora_dropout > 0 else a) * width + a * rp.lora_r


def mamba_layer_bytes(rp: ResolvedPlan, kernels: bool = True) -> tuple[float, float, float]:
    """What one Mamba block (transformers 5.24 models/mamba/modeling_mamba.py `MambaBlock`) keeps for backward, in
    16-bit: (bytes per token, per sequence, per layer).

    Both take the block's RMSNorm (fp32 input and 1/rms; the normalised 16-bit value when its weight trains) and
    in_proj's input (when in_proj trains or is adapted). Then, with I the mixer width, N the state size, R the
    time-step rank, K the conv kernel:
    - `kernels` (transformers' training path when mamba_ssm is installed: `MambaMixer.forward` calls
      `mamba_inner_fn`, mamba_ssm/ops/selective_scan_interface.py `MambaInnerFn.forward`, checkpoint_lvl 1, which
      recomputes the conv output and Δ in backward): xz (2I), x_dbl (R + 2N), contiguous B and C (2N), the scan
      output (I), and the scan's fp32 chunk states (2N·I per 2048 positions of each sequence). x_proj, dt_proj and
      out_proj run from their raw weights inside the kernel: adapters on them are never called.
    - the torch path (`MambaMixer.forward` without mamba_ssm, `mamba_selective_scan`'s recurrent loop; measured with
      saved-tensor hooks, tests/trace/test_hybrid_layers.py): in_proj's output (2I), the padded conv output
      (I·(L + K − 1)/L), its SiLU output twice (x_proj's flattened input; the `hidden_states * D` operand when D
      trains), x_proj's output (R + 2N), dt_proj's output and its softplus (2I), fp32 copies of x (4I) and B (4N),
      the fp32 discretised A and B (8·I·N), every step's state in fp32 (saved by the next step) and 16-bit (saved
      by the output matmul) (4 + 2)·I·N, silu(z) (I), the fp32 scan output (4I) and out_proj's input (I, when
      out_proj trains); dt_proj is applied as `dt_proj.weight @ time_step`, so its adapter is never called.
    Per layer: the fp32 A = −exp(A_log) (4·I·N, and exp's output again when A_log trains) and D (4I); the kernel
    also keeps Δ's fp32 bias (4I)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    h, i, n, r, k = arch.hidden, arch.ssm_inner, arch.ssm_state, arch.ssm_dt_rank, arch.ssm_conv
    full = rp.peft == "none"
    norm = 4 * h + 4 + (c * h if full else 0)
    in_proj = c * h if full else _mamba_adapter_keeps(rp, "in_proj", h)
    per_layer = 4 * i * n + 4 * i + (4 * i * n if full else 0)
    if kernels:
        chunks = math.ceil(rp.seq_len / 2048)
        return norm + in_proj + c * (3 * i + r + 4 * n), 8 * i * n * chunks, per_layer + 4 * i  # + Δ's fp32 bias
    # x_proj's input is the SiLU output flattened to (B·L, I): a copy, but a view of it in a micro-batch of one
    # sequence, where it is the same storage as D's operand
    x_proj = (c * i if rp.micro_batch != 1 else 0) if full else _mamba_adapter_keeps(rp, "x_proj", i)
    per_token = (
        norm
        + in_proj
        + x_proj
        + c * (6 * i + r + 2 * n)
        + 8 * i
        + 4 * n
        + (12 + c) * i * n
        + (2 * c * i if full else 0)
    )  # D's operand and out_proj's input
    return per_token, c * i * (k - 1) + (c - 4) * i * n, per_layer


def mamba_layer_per_token(rp: ResolvedPlan, kernels: bool = True) -> float:
    """`mamba_layer_bytes` spread over the micro-batch's tokens."""
    per_token, per_seq, per_layer = mamba_layer_bytes(rp, kernels)
    s = max(rp.seq_len, 1)
    return per_token + per_seq / s + per_layer / (s * max(rp.micro_batch, 1))


def mamba_backward_per_token(rp: ResolvedPlan) -> float:
    """The backward temporaries of one Mamba mixer per token, 16-bit, as mamba_ssm's `MambaInnerFn.backward` makes
    them (mamba_ssm/ops/selective_scan_interface.py): the recomputed conv output and Δ (2I), dxz (2I), dout_y (I),
    the scan's dconv1d_out, dΔ and out_z (3I) and dx_dbl (R + 2N)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    return c * (8 * arch.ssm_inner + arch.ssm_dt_rank + 2 * arch.ssm_state)


# Mamba-2 (SSD) mixers: transformers 5.24 models/mamba2/modeling_mamba2.py `Mamba2Mixer` and the same mixer inside
# Falcon-H1 (models/falcon_h1/modeling_falcon_h1.py `FalconH1Mixer`), Bamba (models/bamba/modeling_bamba.py
# `BambaMixer`), Granite-4's hybrids (models/granitemoehybrid/modeling_granitemoehybrid.py
# `GraniteMoeHybridMambaLayer`) and Nemotron-H (models/nemotron_h/modeling_nemotron_h.py `NemotronHMamba2Mixer`):
# the last three are `Mamba2Mixer.forward` line for line, with the same `mamba2_chunk_scan`, `causal_conv1d_fn` and
# gated RMSNorm, under their own config names. Read from the model's config.json. The config keys of each
# model_type: (heads, head_dim, groups, state, conv kernel, chunk, expand) and their defaults (Mamba2Config,
# FalconH1Config, BambaConfig, GraniteMoeHybridConfig, NemotronHConfig; head_dim "auto" is intermediate / heads,
# Falcon-H1's `mamba_d_ssm` overrides expand · hidden; Nemotron-H's mixer is heads · head_dim wide, whatever
# `expand` says).
_MAMBA2_KEYS = {
    "mamba2": ("num_heads", "head_dim", "n_groups", "state_size", "conv_kernel", "chunk_size", "expand"),
    "falcon_h1": (
        "mamba_n_heads",
        "mamba_d_head",
        "mamba_n_groups",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_chunk_size",
        "mamba_expand",
    ),
}
_BAMBA_KEYS = (
    "mamba_n_heads",
    "mamba_d_head",
    "mamba_n_groups",
    "mamba_d_state",
    "mamba_d_conv",
    "mamba_chunk_size",
    "mamba_expand",
)
_MAMBA2_KEYS["bamba"] = _MAMBA2_KEYS["granitemoehybrid"] = _BAMBA_KEYS
_MAMBA2_KEYS["nemotron_h"] = (
    "mamba_num_heads",
    "mamba_head_dim",
    "n_groups",
    "ssm_state_size",
    "conv_kernel",
    "chunk_size",
    "expand",
)
_MAMBA2_DEFAULTS = {
    "mamba2": (128, 64, 8, 128, 4, 256, 2),
    "falcon_h1": (128, None, 1, 256, 4, 256, 2),
    "bamba": (128, None, 1, 256, 4, 256, 2),
    "granitemoehybrid": (128, None, 1, 256, 4, 256, 2),
    "nemotron_h": (128, 64, 8, 128, 4, 128, 2),
}
# Hybrids whose decoder layer holds a Mamba-2 mixer in place of attention (its own input norm, then the MLP):
# `BambaDecoderLayer`, `GraniteMoeHybridDecoderLayer`. Which layers are Mamba layers: `layer_types`
# ("linear_attention" for a Mamba layer in 5.24; "mamba" in older configs, which the config classes remap), or
# Bamba's `attn_layer_indices` (every other layer); every layer when the config says neither.
MAMBA2_IN_PLACE_OF_ATTENTION = frozenset({"bamba", "granitemoehybrid"})

# Which path a Mamba-2 mixer's training forward takes. `Mamba2Mixer.forward` calls
# `mamba2_split_conv1d_scan_combined`, which `use_kernel_func_from_hub_with_fallback` maps to mamba_ssm's fused
# kernel when mamba_ssm is importable on CUDA (or a Hub kernel is loaded), and to a stub that returns None otherwise:
# the mixer then runs the torch path (`causal_conv1d_fn`, `mamba2_chunk_scan`). The estimate assumes the torch path
# and says so (knowledge/models.py `MAMBA2_PATH_NOTE`): it is what a plain `pip install transformers` trains with,
# and the path the real-library trace checks. The fused kernel's own saved tensors (mamba_ssm
# `MambaSplitConv1dScanCombinedFn`) are not modelled.


class Mamba2Sizes(NamedTuple):
    inner: int  # I = heads · head_dim
    heads: int  # H
    head_dim: int  # P
    groups: int  # G
    state: int  # N
    conv: int  # K
    chunk: int  # Q
    gated_norm: bool  # the scan output goes through `MambaRMSNormGated` (Mamba-2; Falcon-H1 with mamba_rms_norm)


def mamba2_sizes(rp: ResolvedPlan) -> Mamba2Sizes | None:
    """The Mamba-2 mixer's sizes from the model's config.json (`ModelArch.hf_config_json`), or None when the model
    has no Mamba-2 mixer this module reads."""
    import json

    family = rp.arch.family
    if family not in _MAMBA2_KEYS or not rp.arch.hf_config_json:
        return None
    config = json.loads(rp.arch.hf_config_json)
    values = [config.get(k, d) for k, d in zip(_MAMBA2_KEYS[family], _MAMBA2_DEFAULTS[family])]
    heads, head_dim, groups, state, conv, chunk, expand = values
    inner = config.get("mamba_d_ssm") if family == "falcon_h1" else None
    inner = inner or int(expand * rp.arch.hidden)
    if not isinstance(head_dim, int):  # Falcon-H1's "auto"
        head_dim = inner // max(heads, 1)
    gated = family != "falcon_h1" or bool(config.get("mamba_rms_norm", False))
    return Mamba2Sizes(heads * head_dim, heads, head_dim, groups, state, conv, chunk, gated)


def ssd_chunk_scan_bytes(rp: ResolvedPlan, z: Mamba2Sizes) -> tuple[float, float, float]:
    """What transformers' torch chunk scan keeps for backward (transformers 5.24 models/mamba2/modeling_mamba2.py
    `mamba2_chunk_scan`, autograd's saved tensors at each op; measured with saved-tensor hooks,
    tests/trace/test_hybrid_layers.py): (bytes per position, per sequence, per layer). With L positions padded to
    Lp (a multiple of the chunk Q), per sequence:
    - Δ: softplus's and clamp's 16-bit inputs (2·c·H·L), fp32 copies of Δ for x·Δ and, when A_log trains, for A·Δ
      (4·H·L each);
    - x: its fp32 copy (4·I·L), padded for the D residual when D trains (4·I·Lp), discretised x as the L·x einsum
      and, with more than one chunk, the chunk-state einsum lay it out (4·I·Lp each: with one chunk both einsums
      read the same layout);
    - the intra-chunk decay L = exp(segsum(A)) and G = C·Bᵀ, each (H, Q) per position, fp32, and the masked
      M = G·L laid out for its einsum (3 · 4·H·Q·Lp);
    - B and C repeated to H heads, in fp32: C and B for G, B for B·decay and B·decay for the states, C for the
      state output (5 · 4·H·N·Lp); the decays exp(A_cumsum) in and out (2 · 4·H·Lp); C·states (4·I·Lp);
    - the chunk states: (C + 1) states (P, N) per head for the inter-chunk einsum and C for the output one
      (4·I·N·(2C + 1); with one chunk the output einsum reads a view of the C + 1), and the chunk-to-chunk decay
      4·H·(C + 1)².
    Per layer: A = −exp(A_log) (4H, and exp's output when A_log trains) and the four segsum masks (2Q² + 2(C+1)²
    bytes)."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    i, h, n, q = z.inner, z.heads, z.state, z.chunk
    s = max(rp.seq_len, 1)
    chunks = math.ceil(s / q)
    sp = chunks * q
    full = rp.peft == "none"
    per_seq = (
        (2 * c * h + (8 if full else 4) * h + 4 * i) * s
        + (4 * i if full else 0) * sp  # D's operand
        + (4 * i if chunks > 1 else 0) * sp  # discretised x as the chunk-state einsum lays it out
        + (4 * i + 12 * h * q + 20 * h * n + 8 * h + 4 * i) * sp
        + 4 * i * n * (chunks + 1 + (chunks if chunks > 1 else 2))
        + 4 * h * (chunks + 1) ** 2
    )
    per_layer = 4 * h + (4 * h if full else 0) + 2 * q * q + 2 * (chunks + 1) ** 2
    return 0.0, per_seq, per_layer


def mamba2_mixer_bytes(rp: ResolvedPlan, z: Mamba2Sizes) -> tuple[float, float, float]:
    """What one Mamba-2 mixer keeps for backward on transformers' torch path (`MAMBA2_PATH_NOTE`): (bytes per token,
    per sequence, per layer), its input norm apart. transformers 5.24 `Mamba2Mixer.forward` / `FalconH1Mixer.forward`:
    in_proj's input (c·h, when in_proj trains; an adapter's copy otherwise), in_proj's output z|xBC|Δ (its storage
    is the depthwise conv's input: c·(2I + 2GN + H); Falcon-H1 scales it by `mup_vector` first, which keeps the
    product instead), the conv output before the slice to the sequence (c·(I + 2GN) · (L + K − 1) per sequence,
    SiLU's input), the chunk scan (`ssd_chunk_scan_bytes`), then the gate:
    - `MambaRMSNormGated` (Mamba-2): z in fp32 (SiLU's input), the fp32 scan output and silu(z), their product
      (pow's input), 1/rms per group (4G) and the normalised value when its weight trains (4I);
    - Falcon-H1 without mamba_rms_norm, `scan_output * silu(gate)`: the fp32 scan output and the 16-bit silu(z);
    the scan output is a view of the chunk scan's padded output: 4·I·Lp per sequence;
    and out_proj's 16-bit input (c·I, when out_proj trains)."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    h = rp.arch.hidden
    if kbit_autocast(rp):  # a 4-bit model's fp32 stream under autocast (estimate/components/quant.py)
        return kbit_mamba2_mixer_bytes(
            rp, z, _mamba_adapter_keeps(rp, "in_proj", h), _mamba_adapter_keeps(rp, "out_proj", z.inner)
        )
    i, g, n, k = z.inner, z.groups, z.state, z.conv
    full = rp.peft == "none"
    conv_dim = i + 2 * g * n
    per_token: float = c * (i + conv_dim + z.heads)
    per_token += c * h if full else _mamba_adapter_keeps(rp, "in_proj", h)
    if z.gated_norm:
        per_token += 4 * i * 3 + 4 * g + (4 * i if full else 0)
    else:
        per_token += c * i
    per_token += c * i if full else _mamba_adapter_keeps(rp, "out_proj", i)
    _, scan_seq, scan_layer = ssd_chunk_scan_bytes(rp, z)
    s = max(rp.seq_len, 1)
    per_seq = c * conv_dim * (s + k - 1) + scan_seq + 4 * i * math.ceil(s / z.chunk) * z.chunk  # the scan output
    per_layer = scan_layer + (c * (i + conv_dim + z.heads) if rp.arch.family == "falcon_h1" else 0)  # mup_vector
    return per_token, per_seq, per_layer


def mamba2_mixer_per_token(rp: ResolvedPlan) -> float:
    """`mamba2_mixer_bytes` spread over the micro-batch's tokens (0 for a model without a Mamba-2 mixer)."""
    z = mamba2_sizes(rp)
    if z is None:
        return 0.0
    per_token, per_seq, per_layer = mamba2_mixer_bytes(rp, z)
    s = max(rp.seq_len, 1)
    return per_token + per_seq / s + per_layer / (s * max(rp.micro_batch, 1))


def mamba2_block_per_token(rp: ResolvedPlan) -> float:
    """One Mamba-2 block (transformers 5.24 `Mamba2Block`: RMSNorm, then the mixer) per token: the norm's fp32 input
    and 1/rms, the normalised 16-bit value when its weight trains, and `mamba2_mixer_per_token`."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    h = rp.arch.hidden
    return 4 * h + 4 + (c * h if rp.peft == "none" else 0) + mamba2_mixer_per_token(rp)


def mamba2_mixer_frozen(rp: ResolvedPlan) -> bool:
    """Whether nothing in a Mamba-2 mixer trains (an adapter run that adapts none of its linears): in a block whose
    input needs no gradient, autograd then saves nothing in it."""
    return rp.peft != "none" and not any(
        _mamba_adapter_keeps(rp, name, rp.arch.hidden) for name in ("in_proj", "out_proj")
    )


def mamba2_layer_flags(rp: ResolvedPlan) -> list[bool]:
    """Which layers of a Bamba or Granite-4 hybrid stack are Mamba-2 layers (`MAMBA2_IN_PLACE_OF_ATTENTION`), in
    order; empty for any other model."""
    import json

    arch = rp.arch
    if arch.family not in MAMBA2_IN_PLACE_OF_ATTENTION or not arch.hf_config_json:
        return []
    config = json.loads(arch.hf_config_json)
    types = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(types, list) and len(types) == arch.layers:
        return [t in ("linear_attention", "mamba") for t in types]
    attention = config.get("attn_layer_indices") if arch.family == "bamba" else None
    attention = set(attention) if isinstance(attention, list) else set()
    return [i not in attention for i in range(arch.layers)]


def jamba_mixer_bytes(rp: ResolvedPlan) -> tuple[float, float, float] | None:
    """What one Jamba Mamba mixer keeps for backward on transformers' torch path (transformers 5.24
    models/jamba/modeling_jamba.py `JambaMambaMixer.forward`, `mamba_selective_scan`'s recurrent loop): (bytes per
    token, per sequence, per layer), or None for a model without one; measured with saved-tensor hooks,
    tests/trace/test_hybrid_layers.py. It is Mamba's mixer (`mamba_layer_bytes`, torch path, its block norm apart:
    Jamba's decoder layer has its own) with RMSNorms on Δ, B and C, each keeping its fp32 input and 1/rms, and the
    normalised 16-bit value when its weight trains. The torch path is assumed as for Mamba-2 (knowledge/models.py
    `MAMBA2_PATH_NOTE`): `mamba_inner_fn` is the kernel's when mamba_ssm is importable on CUDA, `use_mamba_kernels`
    no longer chooses (deprecated, "has no effect" in 5.24)."""
    import json

    arch = rp.arch
    if arch.family != "jamba" or not arch.hf_config_json:
        return None
    config = json.loads(arch.hf_config_json)
    h = arch.hidden
    rank = config.get("mamba_dt_rank", "auto")
    r = math.ceil(h / 16) if rank == "auto" else int(rank)
    n = int(config.get("mamba_d_state", 16))
    sizes = dict(
        ssm_inner=int(config.get("mamba_expand", 2) * h), ssm_state=n, ssm_conv=int(config.get("mamba_d_conv", 4))
    )
    mamba = rp.model_copy(update={"arch": arch.model_copy(update=dict(sizes, family="mamba", ssm_dt_rank=r))})
    per_token, per_seq, per_layer = mamba_layer_bytes(mamba, kernels=False)
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    per_token -= 4 * h + 4 + (c * h if full else 0)  # the block norm: the decoder layer's own
    width = r + 2 * n
    per_token += 4 * width + 3 * 4 + (c * width if full else 0)
    # x_proj's output is not kept (Mamba keeps it through C, a view of it): the output matmul keeps the normalised C,
    # and `dt_proj.weight @ time_step` the normalised Δ when dt_proj trains; B is kept as its fp32 copy alone
    per_token -= c * width - c * n - (c * r if full else 0)
    # out_proj's input is the 16-bit cast of the fp32 scan output, a tensor of its own: an adapter on out_proj keeps
    # it (or its own cast), which Mamba's 16-bit scan output shares
    per_token += 0 if full else _mamba_adapter_keeps(rp, "out_proj", mamba.arch.ssm_inner)
    return per_token, per_seq, per_layer


def jamba_mixer_sizes(rp: ResolvedPlan) -> tuple[int, int] | None:
    """A Jamba Mamba mixer's width I (`mamba_expand` · hidden) and state size N (`mamba_d_state`), JambaConfig's
    defaults 2 and 16 (transformers 5.24 models/jamba/configuration_jamba.py); None for a model without one."""
    import json

    if rp.arch.family != "jamba" or not rp.arch.hf_config_json:
        return None
    config = json.loads(rp.arch.hf_config_json)
    return int(config.get("mamba_expand", 2) * rp.arch.hidden), int(config.get("mamba_d_state", 16))


def jamba_mixer_backward_bytes(rp: ResolvedPlan) -> tuple[float, float, float] | None:
    """What one Jamba Mamba mixer's backward holds at its peak beyond what the mixer keeps (`jamba_mixer_bytes`), its
    weights' gradients apart: (bytes per token, per sequence, per layer, each may be negative), or None for a model
    without one. Measured on the real mixer (tests/trace/test_mamba1_mixer.py). transformers 5.24
    models/jamba/modeling_jamba.py `mamba_selective_scan`'s recurrent loop reads `discrete_A[:, :, index]` and
    `deltaB_u[:, :, index]` at every step: each step's backward turns the gradient of that slice into a zero tensor
    of the whole (B, I, L, N) fp32 shape (aten `select_backward`), and autograd sums them into the gradient of
    discrete_A and of deltaB_u. The peak is at the second step from the end, when deltaB_u's first two slice
    gradients are summed out of place: both, their sum and discrete_A's first slice gradient, four fp32 (B, I, L, N)
    tensors (16·I·N per token). The gradients made before it are live: the stacked scan output's, the conv output's
    from the D term and the gate z's (c·I each per token), the state's (4·I·N per sequence) and C's summed slice
    gradients (c·N per token). Freed by then (their nodes have run): the fp32 scan output (4I) and silu(z) (c·I)
    the gate's product kept, out_proj's input (c·I, when out_proj trains; its adapter's copy when adapted), the SiLU
    output D's product kept (c·I, when D trains and the micro-batch has more than one sequence: with one, x_proj's
    input is a view of it and still holds it), D's fp32 copy (4I per layer) and the last two steps' states (4·I·N in
    fp32, 2·c·I·N in 16-bit, per sequence)."""
    sizes = jamba_mixer_sizes(rp)
    if sizes is None:
        return None
    i, n = sizes
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    per_token: float = 16 * i * n + 3 * c * i + c * n - 4 * i - c * i
    if full:
        per_token -= c * i + (c * i if rp.micro_batch != 1 else 0)
    else:
        per_token -= _mamba_adapter_keeps(rp, "out_proj", i)
    return per_token, 4 * i * n - (4 * i * n + 2 * c * i * n), -4 * i


def _spread(rp: ResolvedPlan, parts: tuple[float, float, float] | None) -> float:
    """(bytes per token, per sequence, per layer) spread over the micro-batch's tokens; 0 for no parts."""
    if parts is None:
        return 0.0
    per_token, per_seq, per_layer = parts
    s = max(rp.seq_len, 1)
    return per_token + per_seq / s + per_layer / (s * max(rp.micro_batch, 1))


def jamba_mixer_backward_per_token(rp: ResolvedPlan) -> float:
    """`jamba_mixer_backward_bytes` spread over the micro-batch's tokens (0 for a model without a Jamba mixer)."""
    return _spread(rp, jamba_mixer_backward_bytes(rp))


def jamba_mixer_grads(rp: ResolvedPlan) -> int:
    """The gradients one Jamba Mamba mixer's backward has made at its peak (`jamba_mixer_backward_bytes`): when its
    weights train, out_proj's weight (its backward ran first) and D's, still the fp32 sum of its product's gradient
    (4I); in an adapter run, out_proj's adapter's (r·(I + h) in the adapter's dtype, when out_proj is adapted)."""
    sizes = jamba_mixer_sizes(rp)
    if sizes is None:
        return 0
    i, h = sizes[0], rp.arch.hidden
    if rp.peft == "none":
        w = 4 if rp.weight_dtype == "fp32" else 2
        return w * i * h + 4 * i
    if not any(l.name == "out_proj" for l in targeted(rp.arch, rp.lora_targets)):
        return 0
    a = 4 if rp.adapter_fp32 or rp.compute_dtype == "fp32" else 2
    return a * rp.lora_r * (i + h)


def jamba_layer_pattern(rp: ResolvedPlan) -> list[tuple[bool, bool]]:
    """Jamba's layers in order as (Mamba layer, MoE layer): attention where i % `attn_layer_period` ==
    `attn_layer_offset`, experts where i % `expert_layer_period` == `expert_layer_offset` (JambaConfig
    `layers_block_type` and `layers_num_experts`, defaults 8, 4, 2, 1: transformers 5.24
    models/jamba/configuration_jamba.py); empty for any other model."""
    import json

    if rp.arch.family != "jamba" or not rp.arch.hf_config_json:
        return []
    config = json.loads(rp.arch.hf_config_json)
    ap, ao = max(int(config.get("attn_layer_period", 8)), 1), int(config.get("attn_layer_offset", 4))
    ep, eo = max(int(config.get("expert_layer_period", 2)), 1), int(config.get("expert_layer_offset", 1))
    moe = int(config.get("num_experts", 16)) > 1
    return [(i % ap != ao, moe and i % ep == eo) for i in range(rp.arch.layers)]


def jamba_mixer_per_token(rp: ResolvedPlan) -> float:
    """`jamba_mixer_bytes` spread over the micro-batch's tokens (0 for a model without a Jamba mixer)."""
    return _spread(rp, jamba_mixer_bytes(rp))


def mamba_mixer_frozen(rp: ResolvedPlan) -> bool:
    """Whether nothing in a Jamba Mamba mixer trains (an adapter run that adapts none of its linears)."""
    return rp.peft != "none" and not any(
        _mamba_adapter_keeps(rp, name, rp.arch.hidden) for name in ("in_proj", "x_proj", "dt_proj", "out_proj")
    )


def first_layer_is_mamba(rp: ResolvedPlan) -> bool:
    """Whether Jamba's layer 0 is a Mamba layer: every layer but those at `attn_layer_offset` modulo
    `attn_layer_period` (JambaConfig defaults 4 and 8: transformers 5.24 models/jamba/configuration_jamba.py)."""
    import json

    if rp.arch.family != "jamba" or not rp.arch.hf_config_json:
        return False
    config = json.loads(rp.arch.hf_config_json)
    return int(config.get("attn_layer_offset", 4)) % max(int(config.get("attn_layer_period", 8)), 1) != 0


# Nemotron-H: every decoder layer is ONE block of one kind (transformers 5.24 models/nemotron_h/modeling_nemotron_h.py
# `NemotronHBlock`: `NemotronHRMSNorm`, then `MIXER_TYPES[config.layers_block_type[i]]` — a Mamba-2 mixer
# ("linear_attention"), attention without rotary embeddings ("full_attention"), a relu² MLP ("mlp", `NemotronHMLP`:
# down_proj(relu(up_proj(x))²), no gate) or a MoE ("moe", `NemotronHMoE`) — then the residual add). Which layers are
# which: knowledge/inventory.py `nemotron_h_layers` (the list, or `hybrid_override_pattern`).
NEMOTRON_H_KINDS = ("linear_attention", "full_attention", "mlp", "moe")


def nemotron_h_layers(rp: ResolvedPlan) -> list[str]:
    """The kind of each layer of a Nemotron-H stack, in order; empty for any other model."""
    import json

    from vramlens.knowledge.inventory import nemotron_h_layers as listed

    arch = rp.arch
    if arch.family != "nemotron_h" or not arch.hf_config_json:
        return []
    kinds = listed(json.loads(arch.hf_config_json)) or []
    return kinds if len(kinds) == arch.layers and all(k in NEMOTRON_H_KINDS for k in kinds) else []


def nemotron_h_norm_per_token(rp: ResolvedPlan, trains: bool) -> float:
    """What a block's `NemotronHRMSNorm` keeps per token: its fp32 input (pow's and the product's operand), 1/rms
    (4), and, when its weight trains, the normalised fp32 value (the weight is multiplied in fp32: `self.weight.to(
    torch.float32) * hidden_states`); the fp32 copy of the weight that product keeps is per layer
    (`nemotron_h_block_bytes`). `trains`: whether anything in the block needs its output's gradient."""
    if not trains:
        return 0.0
    h = rp.arch.hidden
    return 4 * h + 4 + (4 * h if rp.peft == "none" else 0)


def _nemotron_h_mlp(rp: ResolvedPlan, width: int) -> float:
    """`NemotronHMLP` per token: relu's output, which square reads (c·I: relu and square keep one storage; fp32 in a
    k-bit model, whose 4-bit up_proj returns its fp32 input's dtype: `common.mlp_bytes`), down's input (c·I when its
    weight trains; an adapter's copy otherwise) and up's input (c·h, or an adapter's copy)."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    h = rp.arch.hidden
    if rp.peft == "none":
        return c * width + c * width + c * h
    return mlp_bytes(rp) * width + _mamba_adapter_keeps(rp, "fc2", width) + _mamba_adapter_keeps(rp, "fc1", h)


def _nemotron_h_moe(rp: ResolvedPlan) -> float:
    """`NemotronHMoE` per token, as its torch loop runs (`NemotronHExperts.forward`): the router's fp32 input and
    sigmoid scores (4h + 8E), each routed copy's gathered input (c·h), relu output and down's input (2·c·I_e) and
    output weighted by its score (c·h), per chosen expert; the shared expert as a `NemotronHMLP` of its width."""
    import json

    arch = rp.arch
    config = json.loads(arch.hf_config_json) if arch.hf_config_json else {}
    c = 2 if rp.compute_dtype != "fp32" else 4
    h = arch.hidden
    k = max(arch.experts_per_token, 1)
    width = int(config.get("moe_intermediate_size", arch.moe_intermediate or arch.intermediate))
    shared = int(config.get("moe_shared_expert_intermediate_size", width))
    experts = max(arch.num_experts, 1)
    routed = k * (2 * c * h + 2 * c * width) if rp.peft == "none" else k * c * width
    return 4 * h + 8 * experts + routed + _nemotron_h_mlp(rp, shared)


def _adapters_reading(rp: ResolvedPlan, names: tuple[str, ...], width: int) -> float:
    """What the adapters of several linears reading one input keep (`_mamba_adapter_keeps` each): peft casts the
    input to an fp32 adapter's dtype once per adapter, a copy each; a 16-bit adapter without dropout reads the
    input itself, one storage for all."""
    kept = [_mamba_adapter_keeps(rp, name, width) for name in names]
    c = 2 if rp.compute_dtype != "fp32" else 4
    shared = not rp.adapter_fp32 and rp.lora_dropout <= 0
    readers = sum(1 for k in kept if k)
    return sum(kept) - (c * width * (readers - 1) if shared and readers > 1 else 0)


def nemotron_h_block_trains(rp: ResolvedPlan, kind: str) -> bool:
    """Whether anything in a Nemotron-H block of `kind` trains: its weights, or an adapter on one of its linears (a
    MoE block's router and experts always count as training)."""
    if rp.peft == "none":
        return True
    adapted = {l.name for l in targeted(rp.arch, rp.lora_targets) if not l.expert}
    if kind == "linear_attention":
        return not mamba2_mixer_frozen(rp)
    if kind == "full_attention":
        return bool(adapted & {"q", "k", "v", "o"})
    if kind == "mlp":
        return bool(adapted & {"fc1", "fc2"})
    return True


def nemotron_h_block_bytes(rp: ResolvedPlan, kind: str, first: bool = False) -> tuple[float, float]:
    """What one Nemotron-H block of `kind` keeps for backward: (bytes per token, per layer). `first`: a block whose
    input needs no gradient in an adapter run with frozen embeddings (layer 0, whose input is the embeddings' output,
    and each later one while the blocks before it train nothing, `nemotron_h_block_trains`): a block none of whose
    parameters train then keeps nothing. Measured with saved-tensor hooks, tests/trace/test_nemotron_h.py."""
    from vramlens.estimate.components.attention import attention_per_token
    from vramlens.estimate.components.linears import linear_inputs_per_token
    from vramlens.estimate.components.norms import input_needs_no_grad

    arch = rp.arch
    full = rp.peft == "none"
    trains = nemotron_h_block_trains(rp, kind)
    if kind == "linear_attention":
        mixer = mamba2_mixer_per_token(rp)
    elif kind == "full_attention":
        # no rotary embedding: q, K and V reach SDPA as views of their projections' outputs; o's input is the
        # kernel's output, which `attention_per_token` counts
        if full:
            mixer = attention_per_token(rp) + linear_inputs_per_token(rp).qkv
        else:
            mixer = attention_per_token(rp) + _adapters_reading(rp, ("q", "k", "v"), arch.hidden)
            mixer += _mamba_adapter_keeps(rp, "o", arch.q_dim)
    elif kind == "mlp":
        mixer = _nemotron_h_mlp(rp, arch.intermediate)
    else:
        mixer = _nemotron_h_moe(rp)
    if first and input_needs_no_grad(rp):
        # the block's input needs no gradient: its norm keeps nothing, and a block that trains nothing keeps nothing
        return (mixer if trains else 0.0), 0.0
    return nemotron_h_norm_per_token(rp, True) + mixer, 4 * arch.hidden


def nemotron_h_per_token(rp: ResolvedPlan) -> tuple[float, float]:
    """(all layers, the largest one) of a Nemotron-H stack per token: `nemotron_h_block_bytes` of each layer's
    kind; (0, 0) for any other model."""
    kinds = nemotron_h_layers(rp)
    if not kinds:
        return 0.0, 0.0
    spread = max(rp.seq_len, 1) * max(rp.micro_batch, 1)
    total, largest = 0.0, 0.0
    no_grad_in = True  # no gradient reaches this block's input: nothing before it trains
    for i, kind in enumerate(kinds):
        per_token, per_layer = nemotron_h_block_bytes(rp, kind, first=no_grad_in)
        no_grad_in = no_grad_in and not nemotron_h_block_trains(rp, kind)
        total += per_token + per_layer / spread
        if i:
            largest = max(largest, per_token + per_layer / spread)
    return total, max(largest, total if len(kinds) == 1 else 0.0)


def mamba2_norm_backward_per_token(rp: ResolvedPlan) -> float:
    """What a Mamba-2 mixer's backward makes beside its saved tensors at its peak, per token (0 for a model without
    a gated Mamba-2 mixer): the peak is in the gated RMSNorm's backward (transformers 5.24
    models/mamba2/modeling_mamba2.py `MambaRMSNormGated.forward`, and Nemotron-H's `NemotronHRMSNormGated`, fp32
    over the mixer's I channels; measured with the trace's live-storage tracker, tests/trace/test_nemotron_h.py):
    with its weights training, out_proj's 16-bit input gradient and three fp32 I-wide gradients ((c + 12)·I); with
    them frozen, five fp32 I-wide gradients (20·I)."""
    z = mamba2_sizes(rp)
    if z is None or not z.gated_norm:
        return 0.0
    c = 2 if rp.compute_dtype != "fp32" else 4
    return (c + 12) * z.inner if rp.peft == "none" else 20 * z.inner


def mamba2_recompute_peak_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token of one checkpointed Mamba-2 block (Mamba-2's `Mamba2Block`, Nemotron-H's Mamba-2
    `NemotronHBlock`) of a k-bit model (`quant.kbit_autocast`) at the end of its recomputed chunk scan
    (`quant.kbit_mamba2_recompute_bytes`), which is where its backward peaks; 0 elsewhere. Beside the mixer: the
    block norm's fp32 output (in_proj's input, held by the block's forward until the mixer returns) and 1/rms
    (4h + 4), and the gradient of the block's output in the fp32 residual stream (4h), waiting for the mixer's
    backward."""
    z = mamba2_sizes(rp)
    if z is None or not z.gated_norm or not kbit_autocast(rp) or not rp.grad_checkpointing:
        return 0.0
    h = rp.arch.hidden
    mixer = kbit_mamba2_recompute_bytes(
        rp, z, _mamba_adapter_keeps(rp, "in_proj", h), _mamba_adapter_keeps(rp, "out_proj", z.inner)
    )
    return 4 * h + 4 + _spread(rp, mixer) + 4 * h


def nemotron_h_backward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token of one checkpointed Nemotron-H block at its backward peak, the largest over the kinds its
    stack holds (0 for any other model): the recomputed block (`nemotron_h_block_bytes`) and what its backward makes
    beside it. A Mamba-2 block peaks in its gated RMSNorm's backward (`mamba2_norm_backward_per_token`); an MLP
    block: relu²'s gradients (2·c·I); attention: SDPA's q, K and V gradients."""
    kinds = nemotron_h_layers(rp)
    if not kinds:
        return 0.0
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    spread = max(rp.seq_len, 1) * max(rp.micro_batch, 1)
    peak = 0.0
    for kind in set(kinds):
        per_token, per_layer = nemotron_h_block_bytes(rp, kind)
        if kind == "linear_attention":
            extra = mamba2_norm_backward_per_token(rp)
            # a k-bit model's block peaks earlier, at the end of its recomputed chunk scan
            extra = max(extra, mamba2_recompute_peak_per_token(rp) - per_token - per_layer / spread)
        elif kind == "full_attention":
            extra = c * (arch.q_dim + 2 * arch.kv_dim)
        else:
            extra = 2 * c * arch.intermediate
        peak = max(peak, per_token + per_layer / spread + extra)
    return peak
