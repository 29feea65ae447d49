"""DeepSpeed ZeRO-2/ZeRO-3 buffers at the training step's moments (components.zero_step_buffers): ZeRO-3's gathered
parameters as its parameter coordinator keeps them (deepspeed 0.19.8 runtime/zero/partitioned_param_coordinator.py),
ZeRO-2's reduce buckets and gradient partition (runtime/zero/stage_1_and_2.py). The traced counterpart:
tests/trace/test_zero_trace.py."""

import pytest
from vramlens.estimate import components as C
from vramlens.estimate.components.buffers import (
    ZERO3_MAX_REUSE_DISTANCE,
    zero3_gathered,
    zero3_prefetch_bucket,
    zero3_reduce_bucket,
    zero3_trace,
)
from vramlens.estimate.shapes import shapes
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan

LLAMA3_8B = ModelArch(
    id="meta-llama/Meta-Llama-3-8B",
    family="llama",
    hidden=4096,
    layers=32,
    heads=32,
    kv_heads=8,
    intermediate=14336,
    vocab=128256,
)
SMALL = ModelArch(
    id="small-llama", family="llama", hidden=256, layers=4, heads=8, kv_heads=2, intermediate=512, vocab=1000
)


def plan(arch: ModelArch, **kw) -> ResolvedPlan:
    base = dict(
        arch=arch,
        optimizer=OptimizerSpec(name="adamw_torch_fused", states=2),
        gpu=GpuSpec(name="H100", memory_gib=79.2, usable_gib=79.2, bf16=True),
        seq_len=256,
        micro_batch=1,
        weight_dtype="bf16",
        compute_dtype="bf16",
        master_weights=True,
        strategy="deepspeed",
        zero_stage=3,
        world_size=8,
    )
    base.update(kw)
    return ResolvedPlan(**base)


@pytest.mark.parametrize("ckpt", [False, True])
def test_small_model_stays_gathered_whole_at_the_loss(ckpt):
    """Under 1e9 elements (stage3_max_live_parameters, stage3_max_reuse_distance) every parameter above the
    persistence threshold (10·h: the norms stay whole) is gathered at the loss: prefetched ahead, kept for its
    backward. The norms' whole copies are held beside their partitions, in every phase but the optimizer step's
    update (tests/trace/test_zero_sizes_trace.py: a threshold above every parameter adds the whole model)."""
    rp = plan(SMALL, grad_checkpointing=ckpt)
    s = shapes(SMALL)
    gathered = (s.embed_params + s.lm_head_params + s.linear_params) * 2
    norms = (2 * SMALL.layers + 1) * SMALL.hidden * 2
    buffers = C.zero_step_buffers(rp, C.params(rp))
    assert buffers["forward-backward"] == zero3_reduce_bucket(rp) + gathered + norms
    assert buffers["optimizer-step"] == zero3_reduce_bucket(rp)


def test_8b_holds_the_live_limit_and_keeps_no_block_for_its_backward():
    """Llama-3-8B: the prefetch runs ahead until 1e9 elements are gathered (overshooting by at most the LM head, the
    largest parameter); without prefetching only the LM head is still gathered at the loss: between any block's
    forward and its backward lie the LM head's forward and backward, more than 1e9 elements."""
    rp = plan(LLAMA3_8B)
    trace = zero3_trace(rp, C.params(rp))
    head = shapes(LLAMA3_8B).lm_head_params
    at_loss = zero3_gathered(trace, zero3_prefetch_bucket(rp), 10**9, ZERO3_MAX_REUSE_DISTANCE)[trace.loss] / 2
    assert 10**9 <= at_loss <= 10**9 + head
    no_prefetch = zero3_gathered(trace, 0, 10**9, ZERO3_MAX_REUSE_DISTANCE)
    assert no_prefetch[trace.loss] == pytest.approx(head * 2)


def test_zero2_buckets_live_in_the_backward_only():
    """ZeRO-2's reduce buckets (two under overlap_comm) exist from the first gradient to the end of the backward; its
    gradient partition holds the parameter across its end whole: at 4 ranks of the small model, rank 0's partition
    ends in the first block's down_proj, 3,648 of its 131,072 elements in it."""
    rp = plan(SMALL, zero_stage=2, world_size=4, grad_checkpointing=True, zero_overlap_comm=True)
    buffers = C.zero_step_buffers(rp, C.params(rp))
    s = shapes(SMALL)
    end = s.total / 4
    before_down = s.embed_params + sum(l.params for l in s.linears if l.name != "down") / SMALL.layers
    down = 512 * 256
    assert 0 < end - before_down < down
    overhang = int((before_down + down - end) * 2)
    assert buffers == {"forward-backward": 0, "recompute": 2 * 256**2 * 2 + overhang, "optimizer-step": overhang}
