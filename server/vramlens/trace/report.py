"""A traced step → the estimator's `Estimate` and the CLI's JSON contract. Pure Python (no torch).

The trace measures the allocated level (what `torch.cuda.max_memory_allocated` reports). The reserved and
device levels come from the estimator's allocator model (`vramlens.estimate.allocator`) applied to the traced
peak and its breakdown, exactly as the estimator applies it to its own allocated figure.
"""
from __future__ import annotations

import copy

from vramlens.estimate import allocator
from vramlens.estimate.result import COMPONENTS, GIB, Estimate
from vramlens.resolved import ResolvedPlan

ALLOCATOR_NOTE = ("reserved and device levels: the estimator's allocator model applied to the traced "
                  "allocated peak and breakdown")


def _g(n: int | float) -> float:
    return round(n / GIB, 2)


def to_estimate(rp: ResolvedPlan, raw: dict) -> Estimate:
    allocated = int(raw["peak_bytes"])
    parts = {k: int(raw["components"].get(k, 0)) for k in COMPONENTS if k not in ("allocator", "cuda_context")}
    reserved = allocator.reserved_bytes(rp, allocated, parts)
    context = allocator.context_bytes(rp)
    device = reserved + context
    parts["allocator"] = reserved - allocated
    parts["cuda_context"] = context
    usable = int(rp.gpu.usable_gib * GIB)
    low, high = allocator.device_range(rp, allocated, device)
    acts = parts.get("activations", 0) + parts.get("logits", 0)
    assumptions = list(raw.get("assumptions", [])) + allocator.assumptions(rp) + [ALLOCATOR_NOTE]
    assumptions += [f"not traced: {x}" for x in raw.get("not_traced", [])]
    return Estimate(
        allocated_bytes=allocated, reserved_bytes=reserved, device_bytes=device, low_bytes=low, high_bytes=high,
        components={k: int(parts.get(k, 0)) for k in COMPONENTS}, phase=raw["phase"],
        phases={k: int(v) for k, v in raw["phases"].items()}, usable_bytes=usable, fits=device <= usable,
        headroom_bytes=usable - device, max_micro_batch=None, max_seq_len=None,
        params_total=int(raw["params_total"]), params_trainable=int(raw["params_trainable"]),
        activation_bytes_per_sample=int(acts / max(rp.micro_batch, 1)), assumptions=tuple(assumptions))


# backends that run the real libraries' code (trace.worker `real_backends`); their versions are the trace's to show
REAL_BACKENDS = ("transformers", "torchtune")


def timeline_json(raw: dict) -> list[dict]:
    return [{"step": t["step"], "micro": t.get("micro"), "phase": t["phase"], "after_gib": _g(t["after_bytes"]),
             "peak_gib": _g(t["peak_bytes"]), "after_bytes": t["after_bytes"], "peak_bytes": t["peak_bytes"]}
            for t in raw["timeline"]]


def trace_extras(raw: dict) -> dict:
    """Fields a trace adds to the estimate contract."""
    return {
        "timeline": timeline_json(raw),
        "exact": not raw.get("not_traced"),
        "trace": {
            "peak_at": raw["peak_at"], "allocated_bytes": raw["peak_bytes"],
            "components_bytes": raw["components"], "phases_bytes": raw["phases"],
            "persistent_bytes": raw["persistent"], "steps": raw["steps"], "ops": raw["ops"],
            "seconds": raw["seconds"], "torch": raw["torch"], "bitsandbytes": raw.get("bitsandbytes"),
            "not_traced": raw.get("not_traced", []),
            "backend": raw.get("backend", "synthetic"),
            "versions": raw.get("versions", {"torch": raw["torch"]}),
            "fallback_reason": raw.get("fallback_reason"),
        },
    }


def result_json(rp: ResolvedPlan, raw: dict) -> dict:
    """What `TraceClient.trace` returns: the estimate contract without the file-level fields
    (file, format, sources), plus the trace's own fields and the full `Estimate` in bytes."""
    from vramlens.report import estimate_fields

    est = to_estimate(rp, raw)
    out = estimate_fields(rp, est)
    out.update(trace_extras(raw))
    out["estimate"] = est.model_dump()
    return out


def estimate_from_result(result: dict) -> Estimate:
    """The `Estimate` inside a `TraceClient.trace` result (for surfaces that render estimates)."""
    return Estimate.model_validate(result["estimate"])


def trace_extras_from_result(result: dict) -> dict:
    """The trace's own fields of a `TraceClient.trace` result (to add to `report.estimate_json`)."""
    out = {k: copy.deepcopy(result[k]) for k in ("timeline", "exact", "trace")}
    out["cached"] = bool(result.get("cached"))
    return out
