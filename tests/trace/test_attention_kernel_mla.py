"""SDPA whose value heads differ in size from its query/key heads (MLA: DeepSeek-V2/V3 `v_head_dim` ≠
`qk_nope_head_dim + qk_rope_head_dim`) as CUDA runs it: flash declines unequal head sizes, the memory-efficient kernel
takes them (torch 2.13 sdp_utils.cpp `check_head_dim_size_mem_efficient`) and keeps its output and an fp32
logsumexp, where the CPU would run math and keep the s×s probabilities. `vramlens.trace.hf.efficient_attention_as_cuda`
runs that kernel's aten op in the trace; a tiny DeepSeek-V3 step allocates the same bytes under fake tensors as on
real CPU tensors."""

from __future__ import annotations

import math

import pytest
from trace_plans import need

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")

import torch.nn.functional as F  # noqa: E402
from test_hf_attention_kernels import saved_bytes  # noqa: E402
from test_new_architectures import row_plan  # noqa: E402
from vramlens.trace import engine, hf  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

BF16 = torch.bfloat16


def qkv(dqk: int = 48, dv: int = 32, s: int = 64, dtype=BF16, heads: int = 4):
    def t(d):
        return torch.randn(2, heads, s, d, dtype=dtype, requires_grad=True)

    return t(dqk), t(dqk), t(dv)


@pytest.mark.parametrize("dtype", [BF16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_kernel_keeps_output_and_logsumexp_and_computes_attention(dtype, causal):
    s = 80  # not a multiple of 32: the logsumexp is padded to 96 rows, as CUDA's kernel pads it
    q, k, v = qkv(s=s, dtype=dtype)
    out = hf.efficient_attention_as_cuda(q, k, v, is_causal=causal)
    assert out is not None and out.grad_fn.name() == "ScaledDotProductEfficientAttentionBackward0"
    saved = [out.grad_fn._saved_output, out.grad_fn._saved_log_sumexp]
    assert saved[0].shape == (2, 4, s, 32) and saved[0].dtype == dtype
    assert saved[1].shape == (2, 4, math.ceil(s / 32) * 32) and saved[1].dtype == torch.float32
    # values and gradients are attention's (torch's math kernel as the reference)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == BF16 else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, ref, **tol)
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, **tol)


def test_shim_keeps_no_probabilities_where_cuda_keeps_none():
    """Through `sdpa_as_cuda_kernel` (models that call SDPA themselves) and through transformers' `AttentionInterface`
    SDPA (`BiasGradAsCuda`, what DeepSeek-V3 calls): the CPU's math would keep the 16-bit probabilities and more;
    CUDA's memory-efficient kernel keeps q, k, v, the output and the logsumexp (~1.3 MiB here)."""
    original = getattr(F.scaled_dot_product_attention, "original", F.scaled_dot_product_attention)
    s = 512
    q, k, v = qkv(s=s)
    probs = 2 * 2 * 4 * s * s  # 16-bit probabilities: 4 MiB
    assert saved_bytes(original(q, k, v, is_causal=True)) > probs
    kept = 2 * (q.numel() + k.numel() + 2 * v.numel()) + 4 * 2 * 4 * s
    assert saved_bytes(hf.sdpa_as_cuda_kernel(original)(q, k, v, is_causal=True)) < 1.05 * kept
    with hf.BiasGradAsCuda():
        assert saved_bytes(original(q, k, v, is_causal=True)) < 1.05 * kept
    # no grad wanted: no logsumexp either (attention.cpp `should_compute_logsumexp`)
    with torch.no_grad():
        assert hf.efficient_attention_as_cuda(q, k, v, is_causal=True).grad_fn is None


def test_calls_cuda_would_run_otherwise_are_left_alone():
    """Unequal head sizes take CUDA's memory-efficient kernel where its checks pass, where the CPU takes math; other
    calls run unchanged."""
    q, k, v = qkv()
    assert hf.cuda_sdpa_backend(q, k, v, None, is_causal=True) == "efficient"
    assert torch._fused_sdp_choice(q, k, v, None, 0.0, True, scale=None, enable_gqa=False) == 0  # CPU: MATH
    assert hf.efficient_attention_as_cuda(q, k, v, is_causal=True) is not None
    # head sizes must be multiples of 8 in 16-bit, of 4 in fp32 (`minimum_gemm_alignment`)
    assert hf.efficient_attention_as_cuda(*qkv(dv=36), is_causal=True) is None  # CUDA's math
    assert hf.efficient_attention_as_cuda(*qkv(dv=36, dtype=torch.float32), is_causal=True) is not None
    q, k, v = qkv(dv=48)
    assert hf.efficient_attention_as_cuda(q, k, v, is_causal=True) is None  # equal head sizes: flash
    q, k, v = qkv()
    mask = torch.ones(2, 1, 64, 64, dtype=torch.bool).tril()
    assert hf.efficient_attention_as_cuda(q, k, v, mask) is None  # a mask: CUDA converts and pads it first


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_deepseek_v3_step_fake_equals_real(mode, monkeypatch):
    """A tiny DeepSeek-V3 (q/k heads 48, value heads 32): the fake step allocates what the real step does, and no
    layer keeps attention probabilities (the step as the CPU's math kernel would run it holds more, by at least
    the 16-bit probabilities of both layers)."""
    if mode != "full":
        need("peft")
    cfg = step_config(row_plan("deepseek_v3", mode, False, seq_len=128, micro_batch=2))
    assert hf.unsupported(cfg) is None
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["peak_bytes"] == real["peak_bytes"] > 0
    monkeypatch.setattr(hf, "efficient_attention_as_cuda", lambda *a, **k: None)
    as_cpu_math = engine.run(cfg, backend="transformers")
    assert as_cpu_math["peak_bytes"] - fake["peak_bytes"] >= 2 * 2 * 2 * 4 * 128 * 128
