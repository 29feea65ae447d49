"""A pure fp32 step (fp32 weights, no autocast) on transformers' SDPA and eager attention, as CUDA runs it.

With no padding mask transformers hands SDPA grouped K/V as they are (`enable_gqa`, transformers 5.24
integrations/sdpa_attention.py `use_gqa_in_sdpa`). No fused CUDA kernel takes that call in fp32 before torch 2.14
(flash and cuDNN take only 16-bit inputs, the memory-efficient kernel no grouped K/V: torch 2.13
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp), so it runs the math kernel, which keeps every head's fp32
probabilities (`components.attention.fp32_grouped_sdpa`). Eager attention in fp32 keeps its probabilities once: the
fp32 softmax output is already in the query's dtype.

The CPU trace cannot see the first on its own: the CPU's flash kernel takes fp32 grouped K/V, so a plain trace keeps
what a fused kernel keeps. The trace checks here run the step under `sdpa_kernel([SDPBackend.MATH])`, the kernel CUDA's
dispatcher picks for it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from vramlens.estimate import GIB, estimate
from vramlens.estimate import components as C
from vramlens.knowledge import gpus as gpu_kb
from vramlens.knowledge import models as model_kb
from vramlens.knowledge import optimizers as opt_kb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from trace_plans import TINY_LLAMA, plan  # noqa: E402

# transformers' SDPA with no padding mask (grouped K/V passed natively), torch 2.11
FP32 = dict(
    weight_dtype="fp32",
    compute_dtype="fp32",
    attn_impl="sdpa",
    repeat_kv=False,
    attn_mask=False,
    versions=(("torch", "2.11.0", "the run"),),
)


def llama_1b_fp32(**changes):
    """Llama-3.2-1B, micro batch 2 × 1024 tokens, pure fp32, torch.optim.AdamW with its defaults (foreach), H200."""
    base = dict(
        FP32,
        arch=model_kb.lookup_model("meta-llama/Llama-3.2-1B"),
        optimizer=opt_kb.lookup_optimizer("adamw_torch"),
        optimizer_impl="foreach",
        gpu=gpu_kb.lookup_gpu("H200")[0],
        seq_len=1024,
        micro_batch=2,
    )
    return plan(**{**base, **changes})


def test_fp32_grouped_attention_keeps_the_math_kernel_s_probabilities():
    """The measured step (H200, torch 2.11, transformers 5.17: 27.4 GiB allocated at its peak) peaks in the
    forward-backward with 16 layers × 2 × 32 heads × 1024² fp32 probabilities (4 GiB) kept; counted as a fused
    kernel it came to 23.0 GiB, peaking at the optimizer step."""
    rp = llama_1b_fp32()
    assert C.sdpa_math(rp)
    est = estimate(rp, limits=False)
    assert est.phase == "forward-backward"
    assert est.allocated_bytes / GIB == pytest.approx(27.4, rel=0.015)
    # the same step where CUDA's memory-efficient kernel reads grouped K/V keeps no probabilities
    fused = estimate(llama_1b_fp32(versions=(("torch", "2.14.1", "the run"),)), limits=False)
    a = rp.arch
    probabilities = a.layers * rp.micro_batch * a.heads * rp.seq_len**2 * 4
    kept = est.phases["forward-backward"] - fused.phases["forward-backward"]
    assert kept == pytest.approx(probabilities, rel=0.1)


@pytest.mark.parametrize(
    "changes",
    [
        dict(amp=True, compute_dtype="bf16"),  # autocast hands SDPA 16-bit q, K, V: flash
        dict(attn_mask=True, repeat_kv=True),  # a padding mask: K/V repeated to every head, memory-efficient
        dict(versions=(("torch", "2.14.1", "the run"),)),  # memory-efficient reads grouped K/V
        dict(arch=TINY_LLAMA.model_copy(update={"kv_heads": 8})),  # no grouped K/V: memory-efficient
        dict(arch=TINY_LLAMA.model_copy(update={"head_dim": 288})),  # head dim > 256: K/V repeated
    ],
    ids=["amp", "padding-mask", "torch-2.14", "mha", "head-dim-288"],
)
def test_fused_kernel_where_cuda_takes_one(changes):
    assert C.sdpa_math(plan(**FP32))
    assert not C.sdpa_math(plan(**{**FP32, **changes}))


# the real-library trace (transformers under fake tensors)


@pytest.fixture
def math_kernel():
    pytest.importorskip("transformers", reason="transformers not installed (the trace extra)")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


def traced_peak(rp) -> int:
    from trace_plans import trace_step

    return trace_step(rp)["peak_bytes"]


@pytest.mark.parametrize("seq_len", [128, 512])
def test_fp32_sdpa_estimate_matches_the_math_kernel_trace(math_kernel, seq_len):
    """Two tiny Llama blocks with grouped K/V in fp32: the estimate against the trace on the math kernel. At 512
    tokens the step peaks in the last block's attention backward, after the loss, the head and that block's MLP have
    freed what they kept and full fine-tuning has made their gradients (`components.peaks.attention_backward_freed`).
    The CPU's own choice (flash, which keeps no probabilities) traces at least 5 % lower, which is why the
    real-library tables, traced with the CPU's choice, sit below the estimate on such rows."""
    rp = plan(**FP32, seq_len=seq_len)
    with math_kernel:
        traced = traced_peak(rp)
    assert estimate(rp, limits=False).allocated_bytes / traced == pytest.approx(1.0, abs=0.02)
    assert traced_peak(rp) < 0.95 * traced


def test_fp32_eager_attention_keeps_its_probabilities_once():
    """Eager attention in fp32: `softmax(..., dtype=torch.float32).to(query.dtype)` returns the softmax output itself
    and dropout at p = 0 its input, so the probability-times-V matmul keeps the softmax's own output (transformers 5.24
    models/llama/modeling_llama.py `eager_attention_forward`); counted twice before (+5 % at these shapes)."""
    pytest.importorskip("transformers", reason="transformers not installed (the trace extra)")
    rp = plan(**{**FP32, "attn_impl": "eager", "repeat_kv": True})
    assert estimate(rp, limits=False).allocated_bytes / traced_peak(rp) == pytest.approx(1.0, abs=0.02)


def test_trace_runs_math_where_cuda_would(math_kernel, monkeypatch):
    """The real-library trace runs transformers' own SDPA call on the kernel CUDA would pick (`trace.hf.
    sdpa_as_cuda_kernel`): with a torch whose memory-efficient kernel reads no grouped K/V (before 2.14), an fp32
    step with grouped K/V traces as the math kernel does, without being told to; with one that reads it, as the CPU's
    fused kernel does (which keeps what CUDA's memory-efficient kernel keeps)."""
    from vramlens.trace import hf

    rp = plan(**FP32, seq_len=512)
    with math_kernel:
        forced = traced_peak(rp)
    monkeypatch.setattr(hf, "_mem_efficient_reads_gqa", lambda: False)
    assert traced_peak(rp) == forced
    monkeypatch.setattr(hf, "_mem_efficient_reads_gqa", lambda: True)
    assert traced_peak(rp) < 0.95 * forced
