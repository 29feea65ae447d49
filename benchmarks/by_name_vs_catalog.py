"""How close a model estimated from its series and the size its name states (`models.series_by_name`) comes to the
real one: leave-one-out over the catalog.

For every catalog model whose id states a size, in a series whose catalog holds at least two other sizes: the
catalog's models at that size are hidden, the rule (`models.from_series`) answers from the others, and its parameter
count and the estimated peak (allocated) of two fixed plans are compared with the real catalog entry's:

  lora  LoRA r16 on q/k/v/o/gate/up/down, bf16 weights, batch 1 × 2048, AdamW, gradient checkpointing off
  full  full fine-tuning, bf16 weights, AdamW (torch, states in bf16), batch 1 × 2048

Prints one row a model (or the rule's reason for no answer), then the error distribution: median and 90th
percentile of |estimated / real − 1|, and the share within ±10 %.

    python benchmarks/by_name_vs_catalog.py [--out benchmarks/results/by_name_vs_catalog.txt]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from vramlens.estimate import estimate
from vramlens.knowledge import gpus, models, optimizers
from vramlens.knowledge.schema import ModelArch
from vramlens.resolved import ResolvedPlan

GPU = "H100-80GB"
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
PLANS = {
    "lora": {
        "peft": "lora",
        "lora_r": 16,
        "lora_alpha": 32.0,
        "lora_targets": LORA_TARGETS,
    },
    "full": {},
}


def peak(arch: ModelArch, plan: str) -> int:
    gpu = gpus.lookup_gpu(GPU)
    optimizer = optimizers.lookup_optimizer("adamw_torch")
    assert gpu is not None and optimizer is not None
    rp = ResolvedPlan(arch=arch, optimizer=optimizer, gpu=gpu[0], micro_batch=1, seq_len=2048, **PLANS[plan])
    return estimate(rp, limits=False).allocated_bytes


def rows() -> list[tuple[str, float, ModelArch, models.BySeries]]:
    """(series, size, real model, the rule's answer with that size hidden) for every model the benchmark covers."""
    out = []
    for series, members in sorted(models._series_members().items()):
        sizes = sorted({s for s, _ in members})
        for size, real in members:
            if len([s for s in sizes if s != size]) < 2:
                continue
            others = [(s, m) for s, m in members if s != size]
            refused = models.name_refusal(real.id) or ("a mixture of experts" if real.is_moe else "")
            answer = models.BySeries(refused=refused) if refused else models.from_series(real.id, series, size, others)
            out.append((series, size, real, answer))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure() -> tuple[list[str], dict[str, list[float]], list[str]]:
    """(table lines, signed errors estimated / real − 1 by measure, models the rule gave no answer for and why)."""
    head = f"{'model':52} {'real B':>8} {'est B':>8} {'params':>7} {'lora':>7} {'full':>7}"
    lines = [head + "  hidden × layers (real → estimated)"]
    errors: dict[str, list[float]] = {"params": [], "lora": [], "full": []}
    refused = []
    for _, _, real, answer in rows():
        if answer.arch is None:
            refused.append(f"{real.id:52} no answer: {answer.refused}")
            continue
        est = answer.arch
        row = {"params": (models.param_count(est), models.param_count(real))}
        row.update({plan: (peak(est, plan), peak(real, plan)) for plan in PLANS})
        for k, (e, r) in row.items():
            errors[k].append(e / r - 1)
        shapes = f"{real.hidden}×{real.layers} → {est.hidden}×{est.layers}"
        cells = " ".join(f"{row[k][0] / row[k][1] - 1:+7.1%}" for k in errors)
        lines.append(f"{real.id:52} {row['params'][1] / 1e9:8.3f} {row['params'][0] / 1e9:8.3f} {cells}  {shapes}")
    return lines, errors, refused


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the table here")
    args = ap.parse_args(argv)
    lines, errors, refused = measure()
    lines += ["", f"no answer ({len(refused)}):", *refused, ""]
    lines.append(f"{len(errors['params'])} models answered with their size hidden; |estimated / real − 1|:")
    for k, v in errors.items():
        a = [abs(x) for x in v]
        within = sum(x <= 0.10 for x in a) / len(a)
        lines.append(
            f"  {k:7} median {statistics.median(a):6.1%}   p90 {percentile(a, 0.9):6.1%}   "
            f"max {max(a):6.1%}   within ±10 %: {within:6.1%}"
        )
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
