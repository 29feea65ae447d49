"""The estimator's reserved level against the caching-allocator replay of the real-library trace, row by row.

For each plan of the real-library grid (`trace_vs_estimate.py --real`: transformers/peft/bitsandbytes under fake
tensors), traces one step (`vramlens.trace.engine`, backend "transformers"), replays its allocation and free
sequence through the caching allocator (`vramlens.trace.allocator_replay`, default settings and
`expandable_segments:True`) and prints the estimate's reserved level ÷ the replay's, the share of rows within ±3 %,
and the estimate before the allocator model was built from the step's tensors (`allocator._slack_reserved`).
Then the published runs that state both the allocated and the reserved level (benchmarks/data/published_rows.jsonl,
shared/calibration/ground-truth.jsonl), estimate against measurement at each level.

    python benchmarks/reserved_vs_replay.py [--quick] [--grid main] [--rows 0,1,2] [--out FILE]

Calibration is switched off so the estimate is the formula's own; the replayed reserved model is switched on
(`VRAMLENS_RESERVED_MODEL=replay`). Needs torch, transformers, peft (and
bitsandbytes for the QLoRA rows).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ["VRAMLENS_CALIBRATION"] = "off"
os.environ["VRAMLENS_RESERVED_MODEL"] = "replay"  # the allocator model under comparison (estimate/allocator.py)

import published  # noqa: E402  (benchmarks/published.py: the plans of the published rows)
import trace_vs_estimate as grid_plans  # noqa: E402  (benchmarks/trace_vs_estimate.py: the real-library grid)
from vramlens.estimate import GIB, _phases, allocator, estimate  # noqa: E402
from vramlens.estimate import components as C  # noqa: E402

TOLERANCE = 0.03
GROUND_TRUTH = grid_plans.GROUND_TRUTH


def slack_reserved(rp, allocated: int) -> int:
    """The reserved level of the slack model the allocator replay replaced, for the before/after columns."""
    totals, phases, _, _ = _phases(rp)
    phase = max(totals, key=totals.get)
    return allocator._slack_reserved(C.as_loaded(rp), allocated, phases[phase])


def share(ratios: list[float]) -> str:
    n = sum(abs(r - 1) <= TOLERANCE for r in ratios)
    return f"{n}/{len(ratios)} = {n / max(len(ratios), 1):.0%}"


def published_pairs() -> list[tuple[str, float, float | None, object]]:
    """(id, allocated GiB, reserved GiB or None when only stated as "similar", plan) of published runs that state
    both levels."""
    out = []
    for row in published.load_rows():
        text = f"{row.get('published', '')} {row.get('note', '')}".lower()
        if "allocated" in text and "reserved" in text and row["measure"] in ("allocated", "reserved"):
            stated = re.findall(r"([\d.]+)\s*(?:gb|gib)?\s*(?:peak memory )?reserved", text)
            reserved = float(stated[0]) * 1e9 / GIB if stated else None
            allocated = row["measured_bytes"] / GIB if row["measure"] == "allocated" else None
            if allocated is not None:
                out.append((row["id"], allocated, reserved, published.plan_from_row(row)))
    if GROUND_TRUTH.exists():
        for row in map(json.loads, GROUND_TRUTH.read_text().splitlines()):
            if row.get("measured_reserved_gib") and row.get("measured_gib"):
                out.append((row["id"], row["measured_gib"], row["measured_reserved_gib"], None))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the quick grid's small models only")
    ap.add_argument("--grid", default="main", choices=sorted(grid_plans.GRIDS))
    ap.add_argument("--rows", type=lambda text: {int(x) for x in text.split(",")}, help="only these grid rows")
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    args = ap.parse_args()
    from vramlens.trace import engine, hf
    from vramlens.trace.config import step_config

    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    traced_with = {k: x for k, x in hf.versions().items() if x}
    say("reserved level (GiB): estimate against the caching-allocator replay of the real-library trace; ")
    say("  " + ", ".join(f"{k} {x}" for k, x in traced_with.items()))
    say(
        f"{'#':>3} {'setting':<16} {'model':<24} {'alloc':>7} {'replay':>7} {'est':>7} {'est÷rep':>7} "
        f"{'before':>7} | {'exp rep':>7} {'exp est':>7} {'est÷rep':>7} {'before':>7}"
    )
    after, before, after_x, before_x = [], [], [], []
    for i, (label, model, seq, batch, settings) in enumerate(grid_plans.real_grid(args.quick, args.grid)):
        if args.rows and i not in args.rows:
            continue
        rp = grid_plans.make_plan(model, seq, batch, settings, traced_with)
        cfg = step_config(rp)
        reason = hf.unsupported(cfg)
        if reason is None:
            try:
                raw = engine.run(cfg, backend="transformers")
            except Exception as exc:  # noqa: BLE001 - a row the real backend cannot trace
                reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        if reason is not None:
            say(f"{i:>3} {label:<16} {model.split('/')[-1]:<24} not traced: {reason}")
            continue
        rep = raw["allocator_replay"]
        if rep["capped"]:
            say(f"{i:>3} {label:<16} {model.split('/')[-1]:<24} the recorded sequence was capped: not compared")
            continue
        cols = []
        for expandable, ratios, old in ((False, after, before), (True, after_x, before_x)):
            plan = rp.with_changes(expandable_segments=expandable)
            est = estimate(plan, limits=False)
            replayed = rep["expandable_segments" if expandable else "default"]["peak_reserved"]
            ratios.append(est.reserved_bytes / replayed)
            old.append(slack_reserved(plan, est.allocated_bytes) / replayed)
            cols.append((replayed, est.reserved_bytes, ratios[-1], old[-1]))
        (r0, e0, q0, b0), (r1, e1, q1, b1) = cols
        say(
            f"{i:>3} {label:<16} {model.split('/')[-1]:<24} {raw['peak_bytes'] / GIB:>7.2f} {r0 / GIB:>7.2f} "
            f"{e0 / GIB:>7.2f} {q0:>7.3f} {b0:>7.3f} | {r1 / GIB:>7.2f} {e1 / GIB:>7.2f} {q1:>7.3f} {b1:>7.3f}"
            f"{'' if abs(q0 - 1) <= TOLERANCE else '  ← >3 %'}"
        )
    say()
    if after:
        say(f"default allocator: estimate within ±3 % of the replay {share(after)} (before: {share(before)})")
        say(f"expandable_segments:True: within ±3 % {share(after_x)} (before: {share(before_x)})")
        s = sorted(after)
        say(f"estimate ÷ replay (default): median {s[len(s) // 2]:.3f}, from {s[0]:.3f} to {s[-1]:.3f}")
    say()
    say("published runs stating both the allocated and the reserved level (GiB):")
    pairs = published_pairs()
    for run_id, allocated, reserved, plan in pairs:
        if plan is None:
            say(f"  {run_id}: measured allocated {allocated:.2f}, reserved {reserved:.2f} (no plan to estimate)")
            continue
        est = estimate(plan, limits=False)
        res = f"{reserved:.2f}" if reserved is not None else "'similar' (no figure)"
        say(
            f"  {run_id}: allocated measured {allocated:.2f} estimate {est.allocated_bytes / GIB:.2f} "
            f"({est.allocated_bytes / GIB / allocated - 1:+.1%}); reserved measured {res} estimate "
            f"{est.reserved_bytes / GIB:.2f} (before {slack_reserved(plan, est.allocated_bytes) / GIB:.2f})"
        )
    if not pairs:
        say("  none")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
