"""Milliseconds per new plan of the two reserved-level models (`estimate/allocator.py`): the slack factor on the
allocated peak (the default) and the caching-allocator replay of the step sequence (`VRAMLENS_RESERVED_MODEL=replay`).

For each plan (models of 16 to 80 blocks × full / LoRA / QLoRA / DoRA × with and without gradient checkpointing),
times `allocator.reserved_bytes` with its cache emptied before every call (a plan the editor has not seen), split
into building the step's events and replaying them, both allocator settings, best of `--repeat` runs. Prints the
replay's cost as a multiple of the slack model's in the same run (no timing is asserted anywhere).

    python benchmarks/reserved_model_speed.py [--models meta-llama/Llama-3.1-70B,...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["VRAMLENS_CALIBRATION"] = "off"

import trace_vs_estimate as grid_plans  # noqa: E402  (benchmarks/trace_vs_estimate.py: plans as the grids build them)
from vramlens.estimate import _phases, allocator  # noqa: E402
from vramlens.estimate import components as C  # noqa: E402
from vramlens.trace.allocator_replay import AllocatorSettings, replay  # noqa: E402

MODELS = ["meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"]
MODES = {
    "full": {},
    "LoRA": grid_plans.LORA,
    "QLoRA": grid_plans.QLORA,
    "DoRA": dict(grid_plans.LORA, peft="dora"),
}


def best_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=lambda text: text.split(","), default=MODELS)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(
        f"{'model':<22} {'layers':>6} {'mode':<6} {'ckpt':<5} {'exp':<5} {'events':>6} {'slack ms':>9} "
        f"{'events ms':>9} {'replay ms':>9} {'total ms':>9} {'÷ slack':>8}"
    )
    totals: list[float] = []
    for model in args.models:
        for mode, settings in MODES.items():
            for ckpt in (False, True):
                plan = grid_plans.make_plan(model, 2048, 2, dict(settings, grad_checkpointing=ckpt, attn_mask=False))
                for expandable in (False, True):
                    rp = C.as_loaded(plan.with_changes(expandable_segments=expandable))
                    phase_totals, phases, _, _ = _phases(rp)
                    parts = phases[max(phase_totals, key=phase_totals.get)]
                    allocated = phase_totals[max(phase_totals, key=phase_totals.get)]
                    events = allocator.step_sequence(rp, parts)
                    if events is None:
                        continue
                    conf = AllocatorSettings(expandable_segments=expandable)
                    slack = best_ms(lambda: allocator._slack_reserved(rp, allocated, parts), args.repeat)
                    build = best_ms(lambda: allocator.step_sequence(rp, parts), args.repeat)
                    run = best_ms(lambda: replay(events, conf), args.repeat)

                    def new_plan() -> None:
                        allocator._cached_slack.cache_clear()
                        allocator._cached_slack(rp, tuple(sorted(parts.items())))

                    total = best_ms(new_plan, args.repeat)
                    totals.append(total)
                    print(
                        f"{model.split('/')[-1]:<22} {rp.arch.layers:>6} {mode:<6} {str(ckpt):<5} {str(expandable):<5} "
                        f"{len(events):>6} {slack:>9.3f} {build:>9.1f} {run:>9.1f} {total:>9.1f} "
                        f"{total / max(slack, 1e-6):>8.0f}"
                    )
    if totals:
        s = sorted(totals)
        print(f"replay model per new plan: median {s[len(s) // 2]:.1f} ms, from {s[0]:.1f} to {s[-1]:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
