"""A traced step → the estimator's `Estimate` and the CLI's JSON contract. Pure Python (no torch).

The trace measures the allocated level (what `torch.cuda.max_memory_allocated` reports). The reserved level is
the traced allocation sequence replayed through the caching allocator's rules (`trace.allocator_replay`, recorded
by the worker for the default settings and for `expandable_segments:True`): what the replay holds cached above its
own allocated peak is added to the traced peak. A trace made before the replay was recorded, or one whose sequence
was capped, falls back to the estimator's allocator model (`vramlens.estimate.allocator`) applied to the traced
peak and its breakdown, and says so. The device level adds the CUDA context to the reserved level.

A trace is exact only when the whole step ran on the real libraries (`REAL_BACKENDS`) at the versions the plan
assumes: `not_traced` lists everything else — the synthetic stand-in and why, another objective than the config's
(one supervised step stands in for DPO, GRPO, …: the trace then gives no fit verdict), a library version other than
the one the plan assumes, sharding, offload, … — and `title` names what the trace was in its first words.
"""

from __future__ import annotations

import copy

from vramlens.estimate import allocator
from vramlens.estimate.result import COMPONENTS, GIB, Estimate
from vramlens.knowledge.gpus import usable_bytes
from vramlens.resolved import ResolvedPlan

ALLOCATOR_NOTE = (
    "reserved and device levels: the estimator's allocator model applied to the traced allocated peak and breakdown"
)
REPLAY_NOTE = (
    "reserved level: the traced allocations and frees replayed through the caching allocator's rules "
    "({settings}); device level: that plus the CUDA context"
)


def _g(n: int | float) -> float:
    return round(n / GIB, 2)


def to_estimate(rp: ResolvedPlan, raw: dict) -> Estimate:
    allocated = int(raw["peak_bytes"])
    parts = {k: int(raw["components"].get(k, 0)) for k in COMPONENTS if k not in ("allocator", "cuda_context")}
    replay = allocator_replay(raw, rp)
    if replay is not None and not replay["capped"]:
        cached = max(int(replay["reserved_bytes"]) - int(replay["allocated_bytes"]), 0)
        reserved, level_note = allocated + cached, REPLAY_NOTE.format(settings=replay["settings"])
    else:
        reserved, level_note = allocator.reserved_bytes(rp, allocated, parts), ALLOCATOR_NOTE
    context = allocator.context_bytes(rp)
    device = reserved + context
    parts["allocator"] = reserved - allocated
    parts["cuda_context"] = context
    usable = usable_bytes(rp.gpu)
    low, high = allocator.device_range(rp, allocated, device)
    acts = parts.get("activations", 0) + parts.get("logits", 0)
    assumptions = list(raw.get("assumptions", [])) + allocator.assumptions(rp) + [level_note]
    assumptions += [f"not traced: {x}" for x in raw.get("not_traced", [])]
    return Estimate(
        objective=rp.objective,
        allocated_bytes=allocated,
        reserved_bytes=reserved,
        device_bytes=device,
        low_bytes=low,
        high_bytes=high,
        components={k: int(parts.get(k, 0)) for k in COMPONENTS},
        phase=raw["phase"],
        phases={k: int(v) for k, v in raw["phases"].items()},
        usable_bytes=usable,
        fits=device <= usable,
        headroom_bytes=usable - device,
        max_micro_batch=None,
        max_seq_len=None,
        params_total=int(raw["params_total"]),
        params_trainable=int(raw["params_trainable"]),
        activation_bytes_per_sample=int(acts / max(rp.micro_batch, 1)),
        assumptions=tuple(assumptions),
        unmodelled=rp.unmodelled,
        approximate=rp.approximate + _stand_in(raw),
    )


def _stand_in(raw: dict) -> tuple[str, ...]:
    """The approximate reason of a step that did not run on the real libraries (the synthetic stand-in)."""
    if raw.get("backend", "synthetic") in REAL_BACKENDS:
        return ()
    return (
        f"trace ran the synthetic stand-in, not the real libraries: "
        f"{raw.get('fallback_reason') or 'the synthetic model'}",
    )


# backends that run the real libraries' code (trace.worker `real_backends`); their versions are the trace's to show
REAL_BACKENDS = ("transformers", "torchtune")
SYNTHETIC_PREFIX = "real libraries not used: "  # the `not_traced` entry of a step run on the synthetic model
ASSUMED_VERSION = "the newest release vramlens knows"  # environment.versions' source when nothing names one


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split("+")[0].split(".")[:2])


def version_gaps(rp: ResolvedPlan, raw: dict) -> list[str]:
    """The libraries the traced step ran at another version than the plan assumes (a pin, frameworkVersions):
    compared by major.minor, for the libraries whose code ran the step."""
    backend = raw.get("backend")
    if backend not in REAL_BACKENDS:
        return []
    ran = raw.get("versions") or {}
    used = ["torch", backend]
    if rp.peft != "none" and backend == "transformers":
        used.append("peft")
    if rp.quant_bits or rp.optimizer.library == "bitsandbytes":
        used.append("bitsandbytes")
    out = []
    for package in used:
        assumed, traced = rp.version_of(package), ran.get(package)
        if assumed is None or traced is None or assumed[1] == ASSUMED_VERSION:
            continue
        if _minor(assumed[0]) != _minor(traced):
            out.append(f"{package} {assumed[0]} ({assumed[1]}): the trace ran {package} {traced}")
    return out


def timeline_json(raw: dict) -> list[dict]:
    return [
        {
            "step": t["step"],
            "micro": t.get("micro"),
            "phase": t["phase"],
            "after_gib": _g(t["after_bytes"]),
            "peak_gib": _g(t["peak_bytes"]),
            "after_bytes": t["after_bytes"],
            "peak_bytes": t["peak_bytes"],
        }
        for t in raw["timeline"]
    ]


def title(exact: bool, raw: dict, objective_gap: str | None) -> str:
    """What the trace was, in the first words of every view: "exact trace (transformers 5.2)", "synthetic
    stand-in, approximate: …", "SFT step only — the DPO objective's … were not traced", "partial trace"."""
    backend = raw.get("backend", "synthetic")
    if exact:
        return f"exact trace ({backend} {(raw.get('versions') or {}).get(backend) or ''})".replace(" )", ")")
    words = []
    if backend not in REAL_BACKENDS:
        words.append(f"synthetic stand-in, approximate: {raw.get('fallback_reason') or 'the synthetic model'}")
    if objective_gap:
        words.append(objective_gap)
    return "; ".join(words) or "partial trace (see what was not traced)"


def allocator_replay(raw: dict, rp: ResolvedPlan) -> dict | None:
    """The caching-allocator replay of the traced sequence for the plan's allocator settings (None for a result
    made before the trace recorded one)."""
    replays = raw.get("allocator_replay")
    if not replays:
        return None
    key = "expandable_segments" if rp.expandable_segments else "default"
    r = replays[key]
    return {
        "settings": "expandable_segments:True" if rp.expandable_segments else "default",
        "reserved_bytes": r["peak_reserved"],
        "allocated_bytes": r["peak_allocated"],
        "fragmentation_bytes": r["fragmentation"],
        "segments": r["peak_segments"],
        "end_reserved_bytes": r["end_reserved"],
        "events": replays["events"],
        "capped": replays["capped"],
        "note": (
            f"replayed the first {replays['events']:,} allocations and frees only: the sequence was capped"
            if replays["capped"]
            else None
        ),
    }


def trace_extras(raw: dict, rp: ResolvedPlan) -> dict:
    """Fields a trace of `rp` adds to the estimate contract."""
    from vramlens.trace.config import objective_not_traced

    gap = objective_not_traced(rp)
    gaps = version_gaps(rp, raw)
    not_traced = [x for x in raw.get("not_traced", []) if x != gap] + ([gap] if gap else []) + gaps
    exact = raw.get("backend", "synthetic") in REAL_BACKENDS and not not_traced
    replay = allocator_replay(raw, rp)
    stated = {gap} | {x for x in not_traced if x.startswith(SYNTHETIC_PREFIX)}
    return {
        "timeline": timeline_json(raw),
        "exact": exact,
        "not_traced": not_traced,
        "trace": {
            "title": title(exact, raw, gap),
            "also_not_traced": [x for x in not_traced if x not in stated],  # what the title does not say
            "objective_traced": gap is None,
            "peak_at": raw["peak_at"],
            "allocated_bytes": raw["peak_bytes"],
            "reserved_replay_bytes": (replay or {}).get("reserved_bytes"),
            "allocator_replay": replay,
            "components_bytes": raw["components"],
            "phases_bytes": raw["phases"],
            "persistent_bytes": raw["persistent"],
            "steps": raw["steps"],
            "ops": raw["ops"],
            "seconds": raw["seconds"],
            "torch": raw["torch"],
            "bitsandbytes": raw.get("bitsandbytes"),
            "not_traced": not_traced,
            "backend": raw.get("backend", "synthetic"),
            "versions": raw.get("versions", {"torch": raw["torch"]}),
            "fallback_reason": raw.get("fallback_reason"),
            "flops": raw.get("flops"),  # FlopCounterMode's count of the step (trace.flops); None before it
        },
    }


def result_json(rp: ResolvedPlan, raw: dict) -> dict:
    """What `TraceClient.trace` returns: the estimate contract without the file-level fields
    (file, format, sources), plus the trace's own fields and the full `Estimate` in bytes."""
    from vramlens.report import estimate_fields

    est = to_estimate(rp, raw)
    out = estimate_fields(rp, est)
    out.update(trace_extras(raw, rp))
    if not out["trace"]["objective_traced"]:
        out["fits"] = None  # a stand-in step of another objective: no fit verdict from the trace
    out["estimate"] = est.model_dump()
    return out


def estimate_from_result(result: dict) -> Estimate:
    """The `Estimate` inside a `TraceClient.trace` result (for surfaces that render estimates)."""
    return Estimate.model_validate(result["estimate"])


def trace_extras_from_result(result: dict) -> dict:
    """The trace's own fields of a `TraceClient.trace` result (to add to `report.estimate_json`)."""
    out = {k: copy.deepcopy(result[k]) for k in ("timeline", "exact", "not_traced", "trace")}
    out["cached"] = bool(result.get("cached"))
    return out
