"""Liger-Kernel's RMSNorm, RoPE and SwiGLU/GeGLU kernels: what their autograd functions save for backward, in place
of what transformers' own layers keep (its fused linear cross-entropy: `logits.liger_head_bytes`).

Read from linkedin/Liger-Kernel ead96b6 (liger-kernel 0.8.2), src/liger_kernel/ops/ (Triton does not run on the CPU, so
these are code-read, not traced):
  rms_norm.py `LigerRMSNormFunction.forward`: `Y = torch.empty(...)` (the output, read by the next linears) and
      `RSTD = torch.empty(n_rows, dtype=float32)` in the "llama" and "gemma" casting modes (every patched family's);
      `ctx.save_for_backward(X, RSTD)` (W too when it trains: a parameter, no new memory). X is the norm's input
      itself, the residual stream in its own dtype: no fp32 copy and no normalised value for the weight's gradient
      (transformers' `LlamaRMSNorm` keeps both; `norms.norms_per_token`).
  swiglu.py `LigerSiLUMulFunction.forward` / geglu.py `LigerGELUMulFunction.forward`: `c = torch.empty_like(a)`
      (the down projection's input) and `ctx.save_for_backward(a, b)`, the gate's and the up projection's outputs;
      act(gate) is recomputed in backward (transformers' MLP keeps it: `mlp.mlp_per_token`). `ensure_contiguous`
      makes the fused gate_up projection's two halves (`LigerPhi3SwiGLUMLP`) contiguous copies, the same two
      tensors' worth.
  rope.py `LigerRopeFunction.forward`: rotates q and k in place and saves `cos, sin` only, as transformers'
      `apply_rotary_pos_emb` (whose products save cos and sin for q's and k's gradients): no change.
Which modules each model type gets: `knowledge.liger`. Liger's LayerNorm is not counted (`layer_norm.py` saves X, W,
B, Mean and RSTD, what PyTorch's LayerNorm keeps, less its fp32 upcast)."""

from __future__ import annotations

from vramlens.estimate.components.common import compiled_block, fp32_residual, mlp_bytes, unsloth_kernels
from vramlens.estimate.components.norms import norms_per_token as transformers_norms_per_token
from vramlens.estimate.components.norms import qk_norms_per_token
from vramlens.knowledge.liger import liger_glu, liger_rms_norm
from vramlens.knowledge.models import norms_per_layer
from vramlens.resolved import ResolvedPlan

RSTD_BYTES = 4  # the fp32 1/rms per row (rms_norm.py: `rstd_dtype = torch.float32` in the llama and gemma modes)


def _eager(rp: ResolvedPlan) -> bool:
    """Liger's kernels as their autograd functions run them: not under torch.compile (the partitioner's model,
    `compiled_block`) and not beside unsloth's own fused LoRA functions."""
    return rp.liger_kernels and not compiled_block(rp) and not unsloth_kernels(rp)


def rms_norm_runs(rp: ResolvedPlan) -> bool:
    """Liger's RMSNorm replaces the model's (`knowledge.liger.RMS_NORM_MODEL_TYPES`)."""
    arch = rp.arch
    return _eager(rp) and "rms_norm" in rp.fused_kernels and arch.norm == "rmsnorm" and liger_rms_norm(arch.family)


def glu_runs(rp: ResolvedPlan) -> bool:
    """Liger's SwiGLU/GeGLU replaces the dense gated MLP's activation and product (`knowledge.liger.GLU_MODEL_TYPES`);
    mixture-of-experts blocks keep transformers' count."""
    arch = rp.arch
    return (
        _eager(rp)
        and "swiglu" in rp.fused_kernels
        and arch.mlp in ("swiglu", "geglu")
        and not arch.is_moe
        and liger_glu(arch.family)
    )


def rms_norm_per_token(rp: ResolvedPlan) -> float:
    """What one Liger RMSNorm saves per token: its input X, in the residual stream's dtype (fp32 under AMP or in a
    k-bit model whose stream is upcast), and the fp32 1/rms."""
    x = 4 if (fp32_residual(rp) or rp.compute_dtype == "fp32") else 2
    return x * rp.arch.hidden + RSTD_BYTES


def norms_per_token(rp: ResolvedPlan, transformers_bytes: float, qk_norms: float = 0.0) -> float:
    """One block's norms under Liger: each of its `norms_per_layer` RMSNorms saves `rms_norm_per_token`; the q/k
    norms (`qk_norms`, part of `transformers_bytes`) stay transformers' (the instance patch the trainers run leaves
    them). `transformers_bytes` when Liger's RMSNorm does not run."""
    if not rms_norm_runs(rp):
        return transformers_bytes
    return norms_per_layer(rp.arch) * rms_norm_per_token(rp) + qk_norms


def final_norm_per_token(rp: ResolvedPlan, transformers_bytes: float) -> float:
    """The final norm under Liger: transformers' count (`norms.final_norm_per_token`) with what one of its block's
    RMSNorms keeps (the fp32 input; the normalised value when the weight trains: `norms.norms_per_token`) in place
    of what Liger's saves (`rms_norm_per_token`); `transformers_bytes` when Liger's RMSNorm does not run."""
    if not rms_norm_runs(rp):
        return transformers_bytes
    one_norm = (transformers_norms_per_token(rp) - qk_norms_per_token(rp)) / max(norms_per_layer(rp.arch), 1)
    return transformers_bytes - one_norm + rms_norm_per_token(rp)


def mlp_per_token(rp: ResolvedPlan, transformers_bytes: float) -> float:
    """A dense gated MLP's hidden activations under Liger: the gate's and up's outputs (`a`, `b`), in the MLP's dtype
    (`mlp_bytes`), no act(gate); `transformers_bytes` when Liger's SwiGLU/GeGLU does not run."""
    if not glu_runs(rp):
        return transformers_bytes
    return 2 * mlp_bytes(rp) * rp.arch.intermediate
