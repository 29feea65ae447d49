"""How long `analysis.analyze` takes on typical configs: the work the editor does on every keystroke.

For each example config, runs the whole pipeline (parse → resolve → estimate with the max-batch and
max-sequence search → rules) repeatedly after one warm-up call, and prints p50/p90 wall time in
milliseconds, the CPU time (wall time on a busy machine includes waiting for a core) and the median of
each stage. Fixes are computed lazily (on a code-action request, not on a keystroke); their
cost is printed separately: the first access to every finding's fixes, "make it fit" search included.

    python benchmarks/analyze_speed.py [--runs 200] [FILES...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from vramlens.analysis import Settings, analyze

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FILES = [
    ("examples/llama3-8b-full-adamw-a100-40gb.yaml", "A100-40GB"),  # predicted OOM: VL001 and fixes
    ("examples/llama3-8b-qlora-a10g.yaml", "A10G"),  # axolotl QLoRA that fits
    ("examples/sft_lora.py", None),  # Python TrainingArguments(...)
    ("examples/launch_full_ft.sh", None),  # torchrun launch line
]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def bench(path: Path, gpu: str | None, runs: int) -> None:
    text = path.read_text(encoding="utf-8")
    settings = Settings(gpu=gpu, workspace=ROOT)
    first = analyze(text, str(path), settings)  # warm-up: catalogs load once per process
    totals: list[float] = []
    cpu: list[float] = []
    stages: dict[str, list[float]] = {}
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        a = analyze(text, str(path), settings)
        totals.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        for stage, ms in a.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    t0 = time.perf_counter()
    n_fixes = sum(len(f.fixes) for f in analyze(text, str(path), settings).findings)
    fix_ms = (time.perf_counter() - t0) * 1000
    stage_text = "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in stages.items())
    print(
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}  (gpu {gpu or 'from file/default'}, "
        f"{len(first.findings)} findings)"
    )
    print(
        f"  analyze  p50 {percentile(totals, 0.5):7.2f} ms   p90 {percentile(totals, 0.9):7.2f} ms   "
        f"max {max(totals):7.2f} ms   (CPU time p50 {percentile(cpu, 0.5):.2f} ms, p90 {percentile(cpu, 0.9):.2f} ms)"
    )
    print(f"           median per stage, ms: {stage_text}")
    print(f"  fixes    {fix_ms:7.2f} ms for {n_fixes} fixes (analysis included, computed once on request)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    targets = [(Path(f), None) for f in args.files] or [(ROOT / f, gpu) for f, gpu in DEFAULT_FILES]
    for path, gpu in targets:
        if path.exists():
            bench(path, gpu, args.runs)


if __name__ == "__main__":
    main()
