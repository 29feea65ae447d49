"""DeepSpeed ZeRO-2/ZeRO-3 steps with the config's own sizes (reduce_bucket_size, stage3_prefetch_bucket_size,
stage3_param_persistence_threshold, stage3_max_live_parameters, stage3_max_reuse_distance), traced by DeepSpeed's
own engine (`vramlens.trace.zero`, which hands the plan's sizes to `deepspeed.initialize`), and the estimator's
per-rank figures held to them as tests/trace/test_zero_trace.py holds the HF Trainer's "auto" sizes.
The table: `python tests/trace/test_zero_sizes_trace.py`.
"""

from __future__ import annotations

import pytest
from test_zero_trace import ARCH, TOLERANCE, ZERO_BF16, single_gpu
from trace_plans import LORA, plan
from vramlens.estimate import allocated_peak, estimate
from vramlens.trace import zero
from vramlens.trace.config import step_config

# (ranks, peft, checkpointing, stage, sizes); the model: 2.74M elements, 558k a block, h² = 65,536
ROWS = [
    # ZeRO-2's reduce buckets in the checkpointed backward, 15× the "auto" h²: one by DeepSpeed's default, two
    # under overlap_comm (its double buffer)
    (2, "lora", True, 2, {"zero_reduce_bucket": 10**6}),
    (2, "full", True, 2, {"zero_reduce_bucket": 10**6, "zero_overlap_comm": True}),
    (2, "full", True, 2, {"zero_reduce_bucket": 10**6, "zero_overlap_comm": False}),
    (2, "full", True, 2, {"zero_reduce_bucket": 8192}),
    # ZeRO-3's reduce bucket, made with the optimizer and kept
    (4, "full", False, 3, {"zero_reduce_bucket": 10**6}),
    # nothing prefetched, nothing kept for a later use: each module's parameters only while it runs
    (4, "full", False, 3, {"zero3_prefetch_bucket": 0, "zero3_max_live_params": 0, "zero3_max_reuse_distance": 0}),
    # a live limit of about two blocks, each parameter released after its use
    (4, "full", True, 3, {"zero3_max_live_params": 1_200_000, "zero3_max_reuse_distance": 0}),
    # a prefetch bucket of two blocks
    (4, "full", False, 3, {"zero3_prefetch_bucket": 10**6}),
    # no parameter kept whole (the norms partitioned too), then every one kept whole
    (4, "full", False, 3, {"zero3_persistence_threshold": 0}),
    (4, "full", False, 3, {"zero3_persistence_threshold": 10**6}),
    (2, "lora", True, 3, {"zero3_persistence_threshold": 10**6}),
]


def row(world: int, peft: str, ckpt: bool, stage: int, sizes: dict) -> dict:
    rp = plan(
        arch=ARCH,
        strategy="deepspeed",
        world_size=world,
        zero_stage=stage,
        grad_checkpointing=ckpt,
        **ZERO_BF16,
        **(LORA if peft == "lora" else {}),
        **sizes,
    )
    traced = zero.run(step_config(rp), stage)
    est = estimate(rp, limits=False)
    peak = allocated_peak(rp)
    t1, e1, phase1 = single_gpu(peft, ckpt)
    if est.phase != phase1:
        t1 = e1  # the single-GPU error is in another phase than the ZeRO estimate's peak
    return {
        "traced": traced["peak_bytes"],
        "estimate": peak,
        "raw_error": peak / traced["peak_bytes"] - 1,
        "error": (peak - traced["peak_bytes"] - (e1 - t1)) / traced["peak_bytes"],
        "step_error": est.phases["optimizer-step"] / traced["phases"]["optimizer-step"] - 1,
        # the backward, where ZeRO-2's reduce buckets live (the peak can be the step's)
        "backward_error": max(v for k, v in est.phases.items() if k in ("forward-backward", "recompute"))
        / traced["phases"]["forward-backward"]
        - 1,
    }


def test_the_trace_runs_the_plans_sizes():
    (sizes,) = [r[4] for r in ROWS if r[4].get("zero3_max_live_params") == 0]
    rp = plan(arch=ARCH, strategy="deepspeed", world_size=4, zero_stage=3, **ZERO_BF16, **sizes)
    z = zero.ds_config(step_config(rp), 3)["zero_optimization"]
    assert z["stage3_prefetch_bucket_size"] == z["stage3_max_live_parameters"] == z["stage3_max_reuse_distance"] == 0
    assert z["reduce_bucket_size"] == ARCH.hidden**2  # not the plan's: the HF Trainer's "auto"
    assert z["overlap_comm"] is True  # DeepSpeed's default for ZeRO-3
    for overlap, expected in ((None, False), (True, True), (False, False)):
        rp2 = plan(arch=ARCH, strategy="deepspeed", world_size=2, zero_stage=2, zero_overlap_comm=overlap, **ZERO_BF16)
        assert zero.ds_config(step_config(rp2), 2)["zero_optimization"]["overlap_comm"] is expected


@pytest.mark.parametrize("world,peft,ckpt,stage,sizes", ROWS, ids=lambda v: str(v))
def test_estimate_holds_to_the_zero_trace_with_explicit_sizes(world, peft, ckpt, stage, sizes):
    """The peak (the single-GPU step's own error at these shapes taken out, as test_zero_trace.py `row`) and the
    optimizer step, where ZeRO-3 gathers its persistent parameters again after the update."""
    r = row(world, peft, ckpt, stage, sizes)
    assert abs(r["error"]) <= TOLERANCE and abs(r["step_error"]) <= TOLERANCE, r
    if stage == 2:
        assert abs(r["backward_error"]) <= TOLERANCE, r


if __name__ == "__main__":  # the table: python tests/trace/test_zero_sizes_trace.py
    for key in ROWS:
        r = row(*key)
        print(
            f"{key} traced {r['traced'] / 2**20:.2f} MiB, estimate {r['estimate'] / 2**20:.2f} MiB, "
            f"raw {r['raw_error']:+.1%}, sharded {r['error']:+.1%}, step {r['step_error']:+.1%}, "
            f"backward {r['backward_error']:+.1%}",
            flush=True,
        )
