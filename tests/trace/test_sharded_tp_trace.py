"""FSDP2 with tensor parallelism traced as rank 0 of a dp_shard × tp mesh under torch's fake process group
(`vramlens.trace.sharded`: torchtitan's Llama tensor-parallel plan, then `fully_shard` over the data-parallel mesh),
and the estimator's per-rank figures held to it.

The rows: a small Llama (4 layers, 8 query and 4 K/V heads) full fine-tune in bf16, AdamW, FULL_SHARD over 2
data-parallel ranks × tensor parallel 2 and 4, checkpointing off and on; the plan says `tensor_parallel`, `strategy`
fsdp, `zero_stage` 3, `world_size` = the data-parallel ranks and `gpu_count` = dp × tp. Without sequence parallelism
the norms, the residual stream and the column-parallel linears' inputs are whole on every rank; at tensor parallel 4
each rank has one K/V head, and HF's `repeat_kv` is then a view.
The table: `python tests/trace/test_sharded_tp_trace.py`.
Skips with a reason where torch or transformers are missing (CI installs the trace extra).
"""

from __future__ import annotations

import sys

import pytest
from trace_plans import LORA, TINY_LLAMA, need, plan
from vramlens.estimate import allocated_peak

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")

import torch  # noqa: E402
from vramlens.trace import engine, sharded  # noqa: E402
from vramlens.trace.config import PARALLELISM_NOTE, step_config  # noqa: E402

if not torch.distributed.is_available():
    pytest.skip("torch built without distributed support", allow_module_level=True)

ARCH = TINY_LLAMA.model_copy(update={"id": "tiny-llama-tp", "layers": 4, "kv_heads": 4})
TOLERANCE = 0.03
DP = 2


def tp_plan(tp: int, ckpt: bool, **changes):
    return plan(
        arch=ARCH,
        strategy="fsdp",
        world_size=DP,
        zero_stage=3,
        tensor_parallel=tp,
        gpu_count=DP * tp,
        grad_checkpointing=ckpt,
        weight_dtype="bf16",
        **changes,
    )


def trace(rp, real: bool = False, **kw) -> dict:
    return engine.run(step_config(rp), backend="fsdp", real=real, **kw)


def row(tp: int, ckpt: bool) -> dict:
    rp = tp_plan(tp, ckpt)
    traced, est = trace(rp)["peak_bytes"], allocated_peak(rp)
    return {"tp": tp, "ckpt": ckpt, "traced": traced, "estimate": est, "error": est / traced - 1}


ROWS = [
    (2, False),
    (4, True),
    pytest.param(2, True, marks=pytest.mark.slow),
    pytest.param(4, False, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("tp,ckpt", ROWS, ids=lambda v: str(v))
def test_estimate_holds_to_the_tp_trace(tp, ckpt):
    """The per-rank allocated peak of FSDP2 + TP, estimated, within 3 % of the traced step."""
    r = row(tp, ckpt)
    assert abs(r["error"]) <= TOLERANCE, r


def test_activations_replicated_without_sequence_parallel():
    """From TP 2 to TP 4 the traced peak falls by less than half of what the activations were: the norms and the
    column-parallel inputs stay whole on every rank. The estimate falls by as much as the trace."""
    t2, t4 = (trace(tp_plan(tp, False))["peak_bytes"] for tp in (2, 4))
    e2, e4 = (allocated_peak(tp_plan(tp, False)) for tp in (2, 4))
    assert (e2 - e4) == pytest.approx(t2 - t4, rel=0.05)


@pytest.mark.slow
def test_fake_trace_matches_real_cpu_tensors():
    """The dp × tp step under fake tensors allocates what the same step on real CPU tensors allocates."""
    rp = tp_plan(4, True)
    fake, real = trace(rp), trace(rp, real=True)
    assert fake["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=1e-3)
    assert fake["phases"]["optimizer-step"] == pytest.approx(real["phases"]["optimizer-step"], rel=1e-3)


@pytest.mark.slow
def test_tracker_sees_what_the_cpu_allocator_allocates():
    """DTensor runs its local ops inside its own dispatch, where the tracker's mode is off the stack: the tracker
    counts the outputs it sees. On real CPU tensors the profiler's allocator events (every allocation, whoever made
    it) reach the same peak, so nothing DTensor allocates inside an op is missed."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        r = trace(tp_plan(2, False), real=True, steps=2)
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()
    )
    cur = peak = 0
    for e in events:
        cur += e.nbytes()
        peak = max(peak, cur)
    assert peak == pytest.approx(r["peak_bytes"], rel=0.01)  # the tracker rounds each block to 512 bytes


def test_plans_the_tp_trace_does_not_cover_say_why():
    for rp, words in (
        (tp_plan(2, False, sequence_parallel=True), "sequence"),
        (tp_plan(2, False, **LORA), "adapters"),
        (tp_plan(3, False), "not divisible"),
    ):
        why = sharded.unsupported(step_config(rp))
        assert why is not None and words in why, (rp.tensor_parallel, why)
    assert sharded.unsupported(step_config(tp_plan(2, False))) is None


def test_worker_traces_the_tp_mesh_and_says_so():
    """An FSDP + TP plan is traced on the dp × tp mesh: the report no longer lists tensor parallelism as not traced,
    and names the mesh it ran."""
    import threading

    from vramlens.trace import worker

    cfg = step_config(tp_plan(4, True))
    raw = worker.run_backends(cfg, {"backend": "auto"}, lambda *a: None, threading.Event())
    assert raw["backend"] == "fsdp"
    assert PARALLELISM_NOTE not in raw["not_traced"]
    assert any("2 × 4 (dp_shard × tp) mesh" in a for a in raw["assumptions"])


if __name__ == "__main__":  # the table: python tests/trace/test_sharded_tp_trace.py
    print(f"{'dp':>3} {'tp':>3} {'ckpt':5} {'traced MiB':>10} {'estimate MiB':>12} {'error':>7}")
    for tp, ckpt in [(2, False), (2, True), (4, False), (4, True)]:
        r = row(tp, ckpt)
        print(
            f"{DP:>3} {tp:>3} {str(ckpt):5} {r['traced'] / 2**20:>10.2f} {r['estimate'] / 2**20:>12.2f} "
            f"{r['error']:>+7.1%}",
            file=sys.stdout,
            flush=True,
        )
