"""A traced peak becomes an estimate with the estimator's allocator model on top (no torch needed)."""

from __future__ import annotations

from trace_plans import GPU, plan
from vramlens.estimate import allocator
from vramlens.estimate.result import GIB
from vramlens.trace.report import result_json, to_estimate

RAW = {
    "peak_bytes": 60 * GIB,
    "phase": "forward-backward",
    "peak_at": "backward through the loss",
    "components": {"weights": 15 * GIB, "optimizer": 30 * GIB, "activations": 12 * GIB, "logits": 3 * GIB},
    "phases": {"forward-backward": 60 * GIB, "optimizer-step": 59 * GIB},
    "persistent": {"weights": 15 * GIB, "optimizer": 30 * GIB},
    "timeline": [{"step": 0, "micro": 0, "phase": "fwd", "after_bytes": 40 * GIB, "peak_bytes": 41 * GIB}],
    "steps": 1,
    "params_total": 8_000_000_000,
    "params_trainable": 8_000_000_000,
    "ops": 26000,
    "seconds": 3.1,
    "torch": "2.13.0+cpu",
    "assumptions": [],
    "not_traced": [],
    "backend": "transformers",
}


def test_device_level_is_the_allocator_model_over_the_traced_peak():
    rp = plan()
    est = to_estimate(rp, RAW)
    assert est.allocated_bytes == 60 * GIB
    assert est.reserved_bytes == allocator.reserved_bytes(rp, 60 * GIB, RAW["components"])
    assert est.device_bytes == est.reserved_bytes + allocator.context_bytes(rp)
    assert sum(est.components.values()) == est.device_bytes
    assert est.fits == (est.device_bytes <= GPU.usable_gib * GIB)
    assert any("allocator model" in a for a in est.assumptions)


def test_expandable_segments_lower_the_reserved_level_of_the_same_trace():
    plain = to_estimate(plan(), RAW)
    expandable = to_estimate(plan(expandable_segments=True), RAW)
    assert expandable.allocated_bytes == plain.allocated_bytes
    assert expandable.reserved_bytes < plain.reserved_bytes


def test_partial_trace_is_not_called_exact():
    raw = dict(RAW, not_traced=["deepspeed across 8 ranks (one unsharded replica traced)"])
    out = result_json(plan(), raw)
    assert out["exact"] is False
    assert any("not traced: deepspeed" in a for a in out["assumptions"])
    assert result_json(plan(), RAW)["exact"] is True
    assert out["timeline"][0]["after_gib"] == 40.0


def _replays(capped: bool = False) -> dict:
    def one(reserved_gib: float) -> dict:
        return {
            "peak_reserved": int(reserved_gib * GIB),
            "peak_allocated": 60 * GIB,
            "fragmentation": int((reserved_gib - 60) * GIB),
            "peak_segments": 40,
            "end_reserved": int(reserved_gib * GIB),
        }

    return {"events": 9000, "capped": capped, "default": one(66.5), "expandable_segments": one(60.25)}


def test_reserved_level_is_the_replay_of_the_traced_sequence_when_the_trace_recorded_one():
    raw = dict(RAW, allocator_replay=_replays())
    plain = to_estimate(plan(), raw)
    assert plain.reserved_bytes == 60 * GIB + int(6.5 * GIB)
    assert plain.device_bytes == plain.reserved_bytes + allocator.context_bytes(plan())
    assert sum(plain.components.values()) == plain.device_bytes
    assert any("replayed through the caching allocator's rules (default)" in a for a in plain.assumptions)
    assert not any("allocator model applied" in a for a in plain.assumptions)
    expandable = to_estimate(plan(expandable_segments=True), raw)
    assert expandable.reserved_bytes == 60 * GIB + int(0.25 * GIB)
    assert any("(expandable_segments:True)" in a for a in expandable.assumptions)


def test_a_capped_replay_falls_back_to_the_allocator_model_and_says_so():
    raw = dict(RAW, allocator_replay=_replays(capped=True))
    est = to_estimate(plan(), raw)
    assert est.reserved_bytes == allocator.reserved_bytes(plan(), 60 * GIB, RAW["components"])
    assert any("allocator model applied" in a for a in est.assumptions)
