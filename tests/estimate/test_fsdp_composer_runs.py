"""FSDP with mixed precision as Composer runs it (llm-foundry's published MPT runs): the bf16 step FSDP's gathered
parameters compute with an fp32 master shard, and flash-attn's cross-entropy kernel over the bf16 logits. Runs that
ran are not estimated out of memory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from vramlens.estimate import estimate
from vramlens.knowledge.gpus import gpu_by_name
from vramlens.knowledge.optimizers import lookup_optimizer
from vramlens.knowledge.schema import ModelArch
from vramlens.resolved import ResolvedPlan

REPO = Path(__file__).resolve().parents[2]
MPT_LIKE = ModelArch(
    id="mpt-like",
    family="mpt",
    mlp="gelu",
    norm="layernorm",
    hidden=1024,
    layers=8,
    heads=16,
    intermediate=4096,
    vocab=50368,
    tied_embeddings=True,
)


def _plan(**changes) -> ResolvedPlan:
    base: dict = dict(
        arch=MPT_LIKE,
        optimizer=lookup_optimizer("adamw_torch"),
        optimizer_impl="fused",
        gpu=gpu_by_name("A100-80GB"),
        seq_len=2048,
        micro_batch=4,
        weight_dtype="bf16",
        compute_dtype="bf16",
        master_weights=True,
        strategy="fsdp",
        zero_stage=3,
        world_size=8,
    )
    base.update(changes)
    return ResolvedPlan(**base)


def test_flash_attn_cross_entropy_holds_the_16bit_logits_and_their_gradient():
    """flash-attn's CrossEntropyLoss saves the bf16 logits and writes a bf16 gradient beside them: two bf16 logit
    tensors at the loss's backward, where the standard loss's fp32 upcast and log-softmax hold several times more."""
    base = _plan()
    xent = estimate(base.model_copy(update={"loss_impl": "xentropy"}))
    standard = estimate(base)
    tokens = 4 * 2048
    two_bf16_logits = 2 * 2 * tokens * MPT_LIKE.vocab
    assert xent.components["logits"] == pytest.approx(two_bf16_logits, rel=0.01)
    assert standard.components["logits"] > 2.5 * xent.components["logits"]
    assert xent.allocated_bytes < standard.allocated_bytes


def _foundry_rows():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import throughput as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return bench, bench.FOUNDRY + bench.FOUNDRY_NODES


def test_llm_foundry_published_runs_are_not_estimated_out_of_memory():
    """llm-foundry's benchmarking README lists MPT 125M-70B runs that ran (their throughput is published) on
    A100-40GB, A100-80GB and H100-80GB under Composer's FSDP: none is estimated above the GPU's usable memory at
    the allocated level, and none of the checkpointed ones (30B and 70B among them) at the device level."""
    bench, rows = _foundry_rows()
    over = []
    for row in rows:
        e = estimate(bench.foundry_plan(row))
        if e.allocated_bytes > e.usable_bytes or (row[6] and e.device_bytes > e.usable_bytes):
            over.append((row[:7], round(e.device_bytes / e.usable_bytes, 2)))
    assert not over, over
