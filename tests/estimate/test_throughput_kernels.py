"""The step-time model's kernels and communication: what switching on a faster attention kernel, Triton kernels,
torch.compile, float8 linears or context parallelism does to tokens/s, as ratios a user would notice."""

from __future__ import annotations

import pytest
from vramlens.estimate.throughput import throughput
from vramlens.knowledge.gpus import gpu_by_name
from vramlens.knowledge.models import lookup_model
from vramlens.knowledge.optimizers import lookup_optimizer
from vramlens.resolved import ResolvedPlan


def _plan(model: str = "meta-llama/Llama-3.1-8B", gpu: str = "A100-80GB", seq: int = 4096, **kw) -> ResolvedPlan:
    base = {
        "arch": lookup_model(model),
        "framework": "transformers",
        "weight_dtype": "bf16",
        "compute_dtype": "bf16",
        "micro_batch": 1,
        "seq_len": seq,
        "grad_checkpointing": True,
        "attn_impl": "flash_attention_2",
        "attn_mask": False,
        "optimizer": lookup_optimizer("adamw_torch"),
        "gpu": gpu_by_name(gpu),
    }
    return ResolvedPlan(**{**base, **kw})


def _speedup(slow: ResolvedPlan, fast: ResolvedPlan) -> float:
    return throughput(fast).tokens_per_s / throughput(slow).tokens_per_s


@pytest.mark.parametrize(
    "model,gpu", [("meta-llama/Llama-3.1-8B", "A100-80GB"), ("meta-llama/Llama-3.2-1B", "H100-SXM")]
)
def test_flash_attention_beats_eager_on_long_sequences_not_short(model, gpu):
    long_ = _speedup(_plan(model, gpu, 16384, attn_impl="eager"), _plan(model, gpu, 16384))
    short = _speedup(_plan(model, gpu, 256, attn_impl="eager"), _plan(model, gpu, 256))
    assert long_ > 1.3  # the s×s scores written and read dominate at 16k
    assert long_ > short + 0.2
    assert 0.85 < short < 1.2  # at 256 tokens attention is a small share either way


@pytest.mark.parametrize("seq", [4096, 16384])
def test_sdpa_runs_flash_without_a_mask_and_the_slower_kernel_with_one(seq):
    fa2 = throughput(_plan(seq=seq)).tokens_per_s
    packed = throughput(_plan(seq=seq, attn_impl="sdpa", attn_mask=False)).tokens_per_s
    padded = throughput(_plan(seq=seq, attn_impl="sdpa", attn_mask=True)).tokens_per_s
    assert packed == pytest.approx(fa2, rel=0.01)  # SDPA's flash backend is FlashAttention-2
    assert padded < packed / 1.1  # memory-efficient kernel, and no causal block skipping


def test_flash_attention_3_only_helps_on_hopper():
    assert (
        _speedup(_plan(gpu="H100-SXM", seq=16384), _plan(gpu="H100-SXM", seq=16384, attn_impl="flash_attention_3"))
        > 1.1
    )
    assert _speedup(_plan(seq=16384), _plan(seq=16384, attn_impl="flash_attention_3")) == pytest.approx(1.0)


@pytest.mark.parametrize("gpu,mb", [("A100-80GB", 4), ("H100-SXM", 2), ("RTX 4090", 1)])
def test_liger_and_unsloth_kernels_speed_up_the_memory_bound_ops(gpu, mb):
    plain = _plan(gpu=gpu, micro_batch=mb)
    kernels = _plan(gpu=gpu, micro_batch=mb, fused_kernels=("rms_norm", "rope", "swiglu", "cross_entropy"))
    gain = _speedup(plain, kernels)
    assert 1.04 < gain < 1.3
    # each kernel adds its share
    norms_only = _plan(gpu=gpu, micro_batch=mb, fused_kernels=("rms_norm",))
    assert 1.0 < _speedup(plain, norms_only) < gain


def test_a_fused_linear_cross_entropy_is_faster_than_the_fp32_loss_on_a_large_vocabulary():
    # Gemma's 256k vocabulary: the logits' fp32 upcast and gradient are a visible share of the step
    plain = _plan("google/gemma-2-2b", micro_batch=4, seq=2048)
    fused = _speedup(plain, plain.model_copy(update={"loss_impl": "fused"}))
    triton_ce = _speedup(plain, plain.model_copy(update={"fused_kernels": ("cross_entropy",)}))
    assert 1.005 < triton_ce < fused < 1.1  # the fused loss never writes the logits; the Triton one skips fp32


@pytest.mark.parametrize("gpu", ["A100-80GB", "H100-SXM"])
def test_torch_compile_fuses_the_elementwise_ops(gpu):
    eager = _plan(gpu=gpu, micro_batch=2, grad_checkpointing=False, selective_recompute="op")
    gain = _speedup(eager, eager.model_copy(update={"compile": True}))
    assert 1.08 < gain < 1.35  # torchtitan's Table 1 on 8 H100: 6,667 / 5,762 = 1.16


def test_float8_linears_speed_up_hopper_and_not_ampere():
    h100 = _plan(gpu="H100-SXM", micro_batch=2, seq=8192, compile=True)
    gain = _speedup(h100, h100.model_copy(update={"float8_linears": True}))
    assert 1.15 < gain < 1.6  # fp8 rate twice bf16, less the casts and the bf16 attention
    a100 = _plan(micro_batch=2, seq=8192, compile=True)
    assert _speedup(a100, a100.model_copy(update={"float8_linears": True})) == pytest.approx(1.0)


def test_context_parallel_pays_for_attention_over_the_whole_sequence():
    # torchtitan's Table 2: doubling the sequence while doubling CP lowers tokens/s per GPU (3,890 → 2,540)
    common = {"gpu": "H100-SXM", "strategy": "fsdp", "zero_stage": 3, "compile": True}
    cp1 = throughput(_plan(seq=32768, world_size=8, gpu_count=8, **common)).tokens_per_s
    cp2 = throughput(_plan(seq=65536, context_parallel=2, world_size=4, gpu_count=8, **common)).tokens_per_s
    cp4 = throughput(_plan(seq=131072, context_parallel=4, world_size=2, gpu_count=8, **common)).tokens_per_s
    assert 0.5 < cp2 / cp1 < 0.8
    assert cp4 / cp2 < 0.8


def test_selective_op_checkpointing_recomputes_half_the_matmuls():
    none = _plan(gpu="H100-SXM", grad_checkpointing=False)
    op = none.model_copy(update={"selective_recompute": "op"})
    full = none.model_copy(update={"grad_checkpointing": True})
    t_none, t_op, t_full = (throughput(p).tokens_per_s for p in (none, op, full))
    assert t_full < t_op < t_none
    assert 1.05 < t_none / t_op < t_none / t_full


def test_bf16_on_a_t4_is_emulated_and_fp16_runs_on_its_tensor_cores():
    bf16 = _plan("meta-llama/Llama-3.2-1B", "T4", 1024, attn_impl="sdpa", attn_mask=True)
    fp16 = bf16.model_copy(update={"compute_dtype": "fp16", "weight_dtype": "fp16"})
    assert _speedup(bf16, fp16) > 4  # 65 vs 8.1 TFLOPS, less the memory-bound share
