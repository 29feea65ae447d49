"""State-space layers: what a Mamba block keeps for backward and its backward's temporaries."""

from __future__ import annotations

import math

from vramlens.estimate.shapes import targeted
from vramlens.resolved import ResolvedPlan


def _mamba_adapter_keeps(rp: ResolvedPlan, name: str, width: int) -> float:
    """What a LoRA adapter on a Mamba mixer's linear keeps per token: its input (in the adapter's dtype: PEFT casts
    it, `_cast_input_dtype` in peft src/peft/tuners/lora/layer.py; a dropped copy and a 1-byte mask under
    lora_dropout) and lora_A's output, which lora_B keeps. 0 when the linear is not adapted."""
    if rp.peft == "none" or not any(l.name == name for l in targeted(rp.arch, rp.lora_targets)):
        return 0.0
    c = 2 if rp.compute_dtype != "fp32" else 4
    a = 4 if rp.adapter_fp32 else c
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
