"""Which GPU? Every catalog GPU (and GPU count, for sharded runs) the run fits on, fastest first.

Each row is the config's own step on that GPU: its peak against the GPU's usable memory and its predicted
tokens per second per GPU and for the run. Runs that shard (ZeRO/FSDP) are tried on 1, 2, 4 and 8 GPUs of each
kind; others on the count they name.

Exit codes: 0 a table was printed (even when no GPU fits), 2 the file could not be estimated.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from vramlens.cli.paths import read_config_text

COUNTS = (1, 2, 4, 8)


def add_arguments(p):
    from vramlens.cli.project import add_settings_flags

    p.add_argument("path", help="a config file")
    add_settings_flags(p)
    p.add_argument("--all", action="store_true", help="also list the GPUs it does not fit on")
    p.add_argument("--format", choices=["text", "json"], default="text")


def rows(rp) -> list[dict]:
    """The run on every catalog GPU with a known speed (and every count, when it shards)."""
    from vramlens.estimate import estimate
    from vramlens.knowledge.gpus import all_gpus

    sharded = rp.strategy in ("deepspeed", "fsdp") and (rp.zero_stage >= 1 or rp.strategy == "fsdp")
    counts = COUNTS if sharded else (max(rp.world_size, rp.gpu_count, 1),)
    out = []
    for gpu in all_gpus():
        if gpu.memory_gbs is None:
            continue
        for n in counts:
            changes = {"gpu": gpu, "gpu_count": n}
            if sharded or rp.strategy != "none":
                changes["world_size"] = n
            est = estimate(rp.with_changes(**changes))
            t = est.throughput
            if t is None:
                continue
            out.append({"gpu": gpu.name, "count": n, "peak_gib": round(est.device_bytes / 2**30, 2),
                        "usable_gib": gpu.usable_gib, "fits": est.fits, "tight": est.tight,
                        "tokens_per_s": round(t.tokens_per_s, 1), "run_tokens_per_s": round(t.run_tokens_per_s, 1),
                        "step_s": round(t.step_s, 4), "mfu": round(t.mfu, 4), "bound": t.bound})
    out.sort(key=lambda r: (not r["fits"], -r["run_tokens_per_s"], r["count"]))
    return out


def run(args) -> int:
    from vramlens.calibration import calibrate
    from vramlens.cli.project import report, settings_for
    from vramlens.formats import parse_document
    from vramlens.resolve import ResolveError, resolve
    from vramlens.settings import SettingsError

    path = Path(args.path)
    try:
        parsed = parse_document(read_config_text(path, errors="replace"), str(path), workspace=Path.cwd())
    except OSError as exc:
        print(f"{path}: cannot read: {exc}", file=sys.stderr)
        return 2
    if parsed.plan is None:
        print(f"{path}: {parsed.issues[0].message if parsed.issues else 'not a training config'}", file=sys.stderr)
        return 2
    try:
        settings = settings_for(path, args)
    except SettingsError as exc:
        return report(exc)
    try:
        rp = calibrate(resolve(parsed.plan, settings)).resolved
    except ResolveError as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    table = rows(rp)
    shown = table if args.all else [r for r in table if r["fits"]]
    if args.format == "json":
        json.dump({"file": str(path), "gpus": shown}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{path}: {rp.arch.id}, micro-batch {rp.micro_batch} × {rp.seq_len} tokens: fits "
          f"{sum(r['fits'] for r in table)} of {len(table)} GPU choices (fastest first)")
    if not shown:
        print("  no GPU in the catalog fits this run as configured (try `vramlens check --fix`, or --all)")
        return 0
    print(f"  {'GPU':<18} {'×':>2}  {'peak / usable GiB':>18}  {'tokens/s per GPU':>16}  {'run tokens/s':>12}  "
          f"{'step s':>7}  {'MFU':>4}  bound")
    for r in shown:
        mark = "" if r["fits"] else "  (does not fit)"
        print(f"  {r['gpu']:<18} {r['count']:>2}  {r['peak_gib']:>8.1f} / {r['usable_gib']:<7.1f}  "
              f"{r['tokens_per_s']:>16,.0f}  {r['run_tokens_per_s']:>12,.0f}  {r['step_s']:>7.2f}  "
              f"{r['mfu']:>4.0%}  {r['bound']}{mark}")
    return 0
