"""SDPA as CUDA's dispatcher runs it (`vramlens.trace.hf.sdpa_as_cuda_kernel`): the kernel choice pinned against torch's
own selection rules, the shimmed call keeping what that kernel keeps, and a whole Falcon step (which calls SDPA itself)
giving the same bytes under fake tensors as on real CPU tensors."""

from __future__ import annotations

import pytest
from trace_plans import LORA, plan

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
pytest.importorskip("transformers", reason="transformers not installed (the trace extra)")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from vramlens.knowledge import versions  # noqa: E402
from vramlens.knowledge.schema import ModelArch  # noqa: E402
from vramlens.trace import engine, hf  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

BF16 = torch.bfloat16
# falcon-7b's attention at a small sequence length: 71 query heads, one K/V head, head dim 64
FALCON_MQA = ModelArch(
    id="tiny-falcon",
    family="falcon",
    mlp="gelu",
    norm="layernorm",
    hidden=71 * 8,
    layers=2,
    heads=71,
    kv_heads=1,
    intermediate=4 * 71 * 8,
    vocab=500,
    tied_embeddings=True,
)


def qkv(hq: int, hk: int, s: int = 64, d: int = 64, dtype=BF16):
    def t(h):
        return torch.randn(2, h, s, d, dtype=dtype, requires_grad=True)

    return t(hq), t(hk), t(hk)


def test_cuda_choice_falcon_7b_multi_query_with_a_mask_is_math():
    """Falcon-7B hands SDPA one K/V head for 71 query heads, no enable_gqa, and its always-built causal mask: flash
    declines the mask, and every fused kernel declines unequal head counts without enable_gqa (torch 2.13
    sdp_utils_cpp.h `check_batch_size_and_num_heads_dense`). The CPU dispatcher runs the same check."""
    q, k, v = qkv(71, 1)
    mask = torch.ones(2, 1, 64, 64, dtype=torch.bool).tril()
    assert hf.cuda_sdpa_backend(q, k, v, mask) == "math"
    assert hf.cuda_sdpa_backend(q, k, v, None, is_causal=True) == "math"  # without a mask too
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14):
        # the CPU dispatcher ran the same check up to torch 2.13; torch 2.14's CPU flash kernel takes this case, so
        # it no longer cross-checks the CUDA choice
        assert torch._fused_sdp_choice(q, k, v, mask, 0.0, False, scale=None, enable_gqa=False) == 0  # CPU: MATH


def test_cuda_choice_fused_cases():
    q, k, v = qkv(8, 8)
    mask = torch.ones(2, 1, 64, 64, dtype=torch.bool).tril()
    assert hf.cuda_sdpa_backend(q, k, v, None, is_causal=True) == "flash"
    assert hf.cuda_sdpa_backend(q, k, v, mask) == "efficient"  # Falcon-40B: K/V broadcast first
    assert hf.cuda_sdpa_backend(q, k, v, None, 0.1, True) == "flash"  # dropout: fused on CUDA
    g, gk, gv = qkv(8, 2)
    assert hf.cuda_sdpa_backend(g, gk, gv, None, is_causal=True, enable_gqa=True) == "flash"
    # grouped K/V under a mask: flash takes no mask, and the memory-efficient kernel reads grouped K/V only from torch
    # 2.14 (knowledge/versions.py MEM_EFFICIENT_GQA_FROM), judged by the torch the trace runs on
    reads_gqa = versions.at_least(torch.__version__, versions.MEM_EFFICIENT_GQA_FROM, "torch")
    assert hf.cuda_sdpa_backend(g, gk, gv, mask, enable_gqa=True) == ("efficient" if reads_gqa else "math")
    fp32 = [t.detach().float().requires_grad_() for t in (g, gk, gv)]
    assert hf.cuda_sdpa_backend(*fp32, None, is_causal=True, enable_gqa=True) == ("efficient" if reads_gqa else "math")
    assert hf.cuda_sdpa_backend(*qkv(8, 8, d=512), None, is_causal=True) == "efficient"


def saved_bytes(out) -> int:
    seen, total, stack = set(), 0, [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for name in dir(fn):
            if name.startswith("_saved_"):
                t = getattr(fn, name)
                if isinstance(t, torch.Tensor):
                    total += t.numel() * t.element_size()
        stack += [f for f, _ in fn.next_functions]
    return total


def test_shim_keeps_what_the_cuda_kernel_keeps():
    """With dropout the CPU would run math (the s×s probabilities and a dropout mask); CUDA drops inside its fused
    kernel. The shim keeps no s×s tensor there, and keeps the math kernel's fp32 probabilities for Falcon-7B."""
    original = getattr(F.scaled_dot_product_attention, "original", F.scaled_dot_product_attention)
    sdpa = hf.sdpa_as_cuda_kernel(original)
    s = 512
    q, k, v = qkv(8, 8, s=s)
    probs = 4 * 2 * 8 * s * s  # fp32 probabilities: 16 MiB here
    assert saved_bytes(original(q, k, v, dropout_p=0.1, is_causal=True)) > probs  # the CPU's math
    fused = saved_bytes(sdpa(q, k, v, dropout_p=0.1, is_causal=True))
    assert fused < probs / 2  # q, k, v, output, logsumexp: ~4 MiB
    q, k, v = qkv(71, 1, s=s)
    assert saved_bytes(sdpa(q, k, v, is_causal=True)) > 71 / 8 * probs  # fp32, 71 heads


@pytest.mark.parametrize("changes", [dict(), dict(LORA, lora_targets=("q", "o", "fc1", "fc2"))], ids=["full", "lora"])
def test_falcon_step_fake_equals_real(changes):
    pytest.importorskip("peft")
    cfg = step_config(plan(arch=FALCON_MQA, seq_len=64, attn_mask=False, **changes))
    assert hf.unsupported(cfg) is None
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["peak_bytes"] == real["peak_bytes"] > 0
    # the math kernel's fp32 probabilities (2 sequences × 71 heads × 64²) are in the trace, twice over the layers
    assert fake["peak_bytes"] > 2 * 4 * 2 * 71 * 64 * 64


TINY_BLOOM = ModelArch(
    id="tiny-bloom",
    family="bloom",
    mlp="gelu",
    norm="layernorm",
    hidden=128,
    layers=2,
    heads=4,
    intermediate=512,
    vocab=500,
    tied_embeddings=True,
    attn_bias=True,
    mlp_bias=True,
)


@pytest.mark.parametrize("changes", [dict(), dict(LORA, lora_targets=("q", "o", "fc1", "fc2"))], ids=["full", "lora"])
def test_bloom_step_fake_equals_real(changes):
    """BLOOM's ALiBi attention (baddbmm over the ALiBi bias, fp32 softmax, bmm), its custom GELU autograd function
    and the embedding LayerNorm: the fake step allocates what the real step does; the estimate counts the eager
    attention's probabilities (fp32 softmax output + 16-bit copy): within 5 % of it at these tiny shapes (the
    grid's bloom-560m/1b7 rows at 2 × 2048: within 3 %, benchmarks/results/trace_real_alibi_vs_estimate.txt)."""
    pytest.importorskip("peft")
    from vramlens.estimate import estimate

    rp = plan(arch=TINY_BLOOM, seq_len=256, attn_mask=False, attn_impl="eager", repeat_kv=True, **changes)
    cfg = step_config(rp)
    assert hf.unsupported(cfg) is None
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["peak_bytes"] == real["peak_bytes"] > 0
    assert abs(estimate(rp, limits=False).allocated_bytes / fake["peak_bytes"] - 1) < 0.05
