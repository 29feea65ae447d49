"""DeepSpeed ZeRO's sizes from the plan (ResolvedPlan.zero_*) in its buffers (components.buffers): the reduce
bucket, ZeRO-3's prefetch bucket, live limit, reuse distance and persistence threshold. None is the HF Trainer's
"auto" fill. The traced counterpart: tests/trace/test_zero_sizes_trace.py."""

from test_zero_step_buffers import SMALL, plan
from vramlens.estimate import components as C
from vramlens.estimate.shapes import shapes

H = SMALL.hidden


def buffers(**kw) -> dict[str, int]:
    rp = plan(SMALL, **kw)
    return C.zero_step_buffers(rp, C.params(rp))


def test_none_is_the_hf_trainers_auto_fill():
    auto = dict(
        zero_reduce_bucket=H * H,
        zero3_prefetch_bucket=int(0.9 * H * H),
        zero3_persistence_threshold=10 * H,
        zero3_max_live_params=10**9,
        zero3_max_reuse_distance=10**9,
    )
    for stage in (2, 3):
        assert buffers(zero_stage=stage, grad_checkpointing=True, **auto) == buffers(
            zero_stage=stage, grad_checkpointing=True
        )


def test_the_reduce_bucket_is_the_plans():
    # ZeRO-3: one bucket of 16-bit elements, kept; ZeRO-2: in the backward, one by DeepSpeed's default, overlap_comm's
    # two when the config turns it on
    assert buffers(zero_reduce_bucket=10**6)["optimizer-step"] == 2 * 10**6
    z2 = buffers(zero_stage=2, grad_checkpointing=True, zero_reduce_bucket=10**6)
    assert z2["recompute"] - z2["optimizer-step"] == 2 * 10**6
    z2 = buffers(zero_stage=2, grad_checkpointing=True, zero_reduce_bucket=10**6, zero_overlap_comm=True)
    assert z2["recompute"] - z2["optimizer-step"] == 2 * 2 * 10**6


def test_nothing_prefetched_or_kept_leaves_the_lm_head_at_the_loss():
    at_loss = buffers(zero3_prefetch_bucket=0, zero3_max_live_params=0, zero3_max_reuse_distance=0)
    norms = (2 * SMALL.layers + 1) * H * 2  # kept whole (10·h)
    assert at_loss["forward-backward"] == 2 * H * H + norms + shapes(SMALL).lm_head_params * 2


def test_parameters_under_the_threshold_are_held_whole():
    """A threshold above every parameter keeps the whole model on each rank beside its partitions; the step
    partitions them for the update and gathers them again after it."""
    rp = plan(SMALL, zero3_persistence_threshold=10**7)
    whole = buffers(zero3_persistence_threshold=10**7)
    total = shapes(SMALL).total * 2
    assert whole["forward-backward"] == 2 * H * H + total  # nothing gathered beside: everything is whole
    temps = C.optimizer_temporaries(rp, C.params(rp)) + C.zero_step_grad_copy(rp, C.params(rp))
    assert whole["optimizer-step"] == 2 * H * H + max(0, total - temps)
    none = buffers(zero3_persistence_threshold=0)  # the norms gathered with their blocks: nothing whole
    assert none["optimizer-step"] == 2 * H * H
