"""Pipeline stages traced as one pipeline rank under torch's fake process group (`vramlens.trace.pipeline`: a small
transformers Llama cut as torchtitan cuts it, run by torch's own `PipelineStage` and `Schedule1F1B`, `ScheduleGPipe`
or `ScheduleInterleaved1F1B`), and the estimator's per-rank figures held to them.

The grid: 8 layers × pipeline degree 2 and 4 × the first and the last rank × M = 4 and 8 micro-batches ×
checkpointing off and on, a full fine-tune in bf16 with AdamW, under 1F1B, GPipe and Interleaved1F1B (two stages per
rank). The plan says `pipeline_parallel`, `pipeline_schedule`, `virtual_pipeline`, `grad_accum` = M and torchtitan's
layout (the embeddings and the output modules each weigh a layer: `stage_split`, the layers of every stage, from
`pipeline.stage_layers`). `row` gives the raw error (estimate / traced peak of the rank − 1) and the error the
pipeline adds: the raw error less the estimate's error on the same model's step on one GPU
(torchtitan's step without pipeline parallelism, `pipeline.run` with pp = 1), as tests/trace/test_sharded_trace.py
defines it. Rows within ±3 % pass (`held`).
The table: `python tests/trace/test_pipeline_trace.py [--fast]`.
Skips with a reason where torch, transformers or torch.distributed are missing (CI installs the trace extra).
"""

from __future__ import annotations

import functools
import itertools
import sys

import pytest
from trace_plans import TINY_LLAMA, need, plan
from vramlens.estimate import allocated_peak, pipeline_rank_peak

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")

import torch  # noqa: E402
from vramlens.trace import pipeline  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

if not torch.distributed.is_available():
    pytest.skip("torch built without distributed support", allow_module_level=True)

ARCH = TINY_LLAMA.model_copy(update={"id": "tiny-llama-8", "layers": 8})
TOLERANCE = 0.03


# torchtitan's model takes no padding mask (causal SDPA) and SDPA reads grouped K/V natively
TORCHTITAN = dict(weight_dtype="bf16", attn_mask=False, repeat_kv=False)


def pp_plan(pp: int, m: int, ckpt: bool, schedule: str = "1F1B", **changes):
    """The plan of a torchtitan pipeline: its schedule, the stages per rank, and the layers of every stage as the
    trace cuts them (`stage_split`)."""
    v = len(pipeline.rank_stages(0, pp, schedule))
    split = pipeline.stage_layers(ARCH.layers, pp * v)
    return plan(
        arch=ARCH,
        pipeline_parallel=pp,
        pipeline_schedule=schedule,
        virtual_pipeline=v,
        grad_accum=m,
        grad_checkpointing=ckpt,
        stage_split=tuple(len(s) for s in split),
        **TORCHTITAN,
        **changes,
    )


def trace(rp, rank: int, real: bool = False) -> dict:
    return pipeline.run(
        step_config(rp), rp.pipeline_parallel, rank, rp.grad_accum, schedule=rp.pipeline_schedule, real=real
    )


@functools.cache
def single_gpu(ckpt: bool) -> tuple[int, int]:
    """(traced peak, estimated peak) of the same model's step on one GPU, one micro-batch: torchtitan's step
    without pipeline parallelism, on the same model code and loss (`pipeline.run` with pp = 1)."""
    rp = plan(arch=ARCH, grad_checkpointing=ckpt, **TORCHTITAN)
    return pipeline.run(step_config(rp), 1, 0, 1)["peak_bytes"], allocated_peak(rp)


def row(pp: int, rank: int, m: int, ckpt: bool, schedule: str = "1F1B") -> dict:
    rp = pp_plan(pp, m, ckpt, schedule)
    traced, est = trace(rp, rank)["peak_bytes"], pipeline_rank_peak(rp, rank)
    t1, e1 = single_gpu(ckpt)
    return {
        "schedule": schedule,
        "pp": pp,
        "rank": rank,
        "m": m,
        "ckpt": ckpt,
        "traced": traced,
        "estimate": est,
        "raw_error": est / traced - 1,
        "error": (est - traced - (e1 - t1)) / traced,
    }


GRID = [
    (pp, rank, m, ckpt, "1F1B")
    for pp, m, ckpt in itertools.product((2, 4), (4, 8), (False, True))
    for rank in (0, pp - 1)
]
# GPipe and Interleaved1F1B (two stages per rank, unequal: `test_interleaved_last_rank_holds_its_unequal_stages`)
GRID += [
    (pp, rank, m, ckpt, "GPipe")
    for pp, m, ckpt in itertools.product((2, 4), (4, 8), (False, True))
    for rank in (0, pp - 1)
]
GRID += [
    (pp, rank, m, ckpt, "Interleaved1F1B")
    for pp, m, ckpt in itertools.product((2, 4), (4, 8), (False, True))
    for rank in (0, pp - 1)
]
FAST = [
    (2, 0, 4, False, "1F1B"),
    (4, 3, 4, False, "1F1B"),
    (4, 0, 8, True, "1F1B"),
    (2, 1, 4, True, "GPipe"),
    (4, 0, 8, False, "GPipe"),
    (2, 0, 4, False, "Interleaved1F1B"),
    (4, 0, 8, True, "Interleaved1F1B"),
]


def held(r: dict) -> float:
    """The error a row is held to: the pipeline's (the single-GPU error taken out) without checkpointing, the raw
    error with it. The single-GPU checkpointed step's estimate is 1.6 % high at these shapes (its recompute phase,
    every gradient of the whole model alive), an error in bytes of the whole model that a rank holding a share of
    its layers and gradients does not carry (`test_single_gpu_error_overcorrects_checkpointed_ranks`)."""
    return r["raw_error"] if r["ckpt"] else r["error"]


@pytest.mark.parametrize("pp,rank,m,ckpt,schedule", FAST, ids=lambda v: str(v))
def test_estimate_holds_to_the_pipeline_trace(pp, rank, m, ckpt, schedule):
    """A pipeline rank's allocated peak, estimated, within 3 % of the traced step."""
    r = row(pp, rank, m, ckpt, schedule)
    assert abs(held(r)) <= TOLERANCE, r


# the interleaved last rank's loss with every micro-batch in flight (`test_interleaved_last_rank_second_loss`)
SECOND_LOSS = (4, 3, 4, True, "Interleaved1F1B")


@pytest.mark.slow
@pytest.mark.parametrize(
    "pp,rank,m,ckpt,schedule", [k for k in GRID if k not in FAST and k != SECOND_LOSS], ids=lambda v: str(v)
)
def test_pipeline_grid(pp, rank, m, ckpt, schedule):
    r = row(pp, rank, m, ckpt, schedule)
    assert abs(held(r)) <= TOLERANCE, r


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="M = 4 forwards of the last rank's first stage in flight at every loss: the loss's second backward runs "
    "beside the output layer's gradients from the first (no steady state), which the second-backward phase counts "
    "for the rank's forwards but not for its loss under an interleaved schedule: -4 %",
)
def test_interleaved_last_rank_second_loss():
    r = row(*SECOND_LOSS)
    assert abs(held(r)) <= TOLERANCE, r


@pytest.mark.slow
def test_interleaved_last_rank_holds_its_unequal_stages():
    """torchtitan weighs the output modules as a layer, so the model's last stage holds fewer layers (none of the 8
    at pp = 4 × 2 stages) and the last rank's in-flight forwards, all but one of its first stage, hold more than
    the average of its stages: the estimate counts the layers of the forwards alive in the rank's own order."""
    r = row(4, 3, 8, False, "Interleaved1F1B")
    assert abs(held(r)) <= TOLERANCE, r


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="the single-GPU checkpointed reference's own error (+1.6 %, 0.63 MiB: its recompute phase with every "
    "gradient of the 8-layer model) is taken out of a last rank of a quarter its size",
)
def test_single_gpu_error_overcorrects_checkpointed_ranks():
    r = row(4, 3, 4, True)
    assert abs(r["error"]) <= TOLERANCE, r


def test_receive_buffers_grow_with_the_micro_batches():
    """A stage that is not the first keeps one activation receive buffer per micro-batch for the whole step (torch
    2.14 pipelining/stage.py `_setup_forward_recv_info`), while 1F1B's last rank holds one micro-batch's activations
    whatever M: from M = 4 to M = 8 the last rank's peak grows by four hidden states, in the trace and the estimate."""
    t4, t8 = (trace(pp_plan(4, m, False), 3)["peak_bytes"] for m in (4, 8))
    e4, e8 = (pipeline_rank_peak(pp_plan(4, m, False), 3) for m in (4, 8))
    buffers = 4 * 2 * 128 * ARCH.hidden * 2  # four micro-batches of 2 × 128 tokens, bf16
    assert t8 - t4 == pytest.approx(buffers, rel=0.02)
    assert e8 - e4 == pytest.approx(t8 - t4, rel=0.02)


def test_the_estimate_is_the_busiest_ranks():
    """The plan's estimate is its busiest rank's: the first rank of 1F1B (two micro-batches in flight at pp = 2),
    within 3 % of that rank's traced peak; every GPU of the plan was estimated as holding the whole model's
    activations before."""
    rp = pp_plan(2, 4, False)
    traced = max(trace(rp, rank)["peak_bytes"] for rank in (0, 1))
    assert allocated_peak(rp) == max(pipeline_rank_peak(rp, rank) for rank in (0, 1))
    assert allocated_peak(rp) == pytest.approx(traced, rel=TOLERANCE)


def test_stage_split_is_torchtitans():
    """torchtitan's default split weighs the embeddings and the output modules as one layer each."""
    assert [len(s) for s in pipeline.stage_layers(8, 2)] == [4, 4]
    assert [len(s) for s in pipeline.stage_layers(8, 4)] == [2, 3, 2, 1]
    assert pipeline.rank_stages(1, 4, "Interleaved1F1B") == [1, 5]


@pytest.mark.slow
def test_fake_trace_matches_real_cpu_tensors():
    """The rank's step under fake tensors allocates what the same step on real CPU tensors allocates."""
    rp = pp_plan(2, 4, True)
    for rank in (0, 1):
        fake, real = trace(rp, rank), trace(rp, rank, real=True)
        assert fake["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=1e-3)


if __name__ == "__main__":  # the table: python tests/trace/test_pipeline_trace.py [--fast]
    keys = FAST if "--fast" in sys.argv else GRID
    print(
        f"{'schedule':15} {'pp':>3} {'rank':>4} {'M':>3} {'ckpt':5} {'traced MiB':>10} {'estimate MiB':>12} "
        f"{'raw':>7} {'pipeline':>8}"
    )
    for key in keys:
        r = row(*key)
        print(
            f"{r['schedule']:15} {r['pp']:>3} {r['rank']:>4} {r['m']:>3} {str(r['ckpt']):5} "
            f"{r['traced'] / 2**20:>10.2f} "
            f"{r['estimate'] / 2**20:>12.2f} {r['raw_error']:>+7.1%} {r['error']:>+8.1%}",
            flush=True,
        )
