"""Which GPU? Every catalog GPU (and GPU count, for sharded runs) the run fits on, fastest first.

Each row is the config's own step on that GPU (vramlens.estimate.gpu_choices, which the editor's GPU picker
shows too): its peak against the GPU's usable memory and its predicted tokens per second per GPU and for the
run. Runs that shard (ZeRO/FSDP) are tried on 1, 2, 4 and 8 GPUs of each kind; others on the count they name.

Exit codes: 0 a table was printed (even when no GPU fits), 2 the file could not be estimated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vramlens.cli.paths import read_config_text


def add_arguments(p):
    from vramlens.cli.project import add_settings_flags

    p.add_argument("path", help="a config file")
    add_settings_flags(p)
    p.add_argument("--all", action="store_true", help="also list the GPUs it does not fit on")
    p.add_argument("--format", choices=["text", "json"], default="text")


def run(args) -> int:
    from vramlens.calibration import calibrate
    from vramlens.cli.project import report, settings_for
    from vramlens.estimate.gpu_choices import gpu_choices
    from vramlens.formats import parse_document
    from vramlens.knowledge.gpus import usable_text
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
    table = gpu_choices(rp)
    shown = table if args.all else [r for r in table if r["fits"]]
    # the model as the file names it (an "-Instruct" id resolves to its base model's catalog entry)
    model = parsed.plan.model_id.value if parsed.plan.model_id is not None else rp.arch.id
    if args.format == "json":
        json.dump({"file": str(path), "model": model, "gpus": shown}, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"{path}: {model}, micro-batch {rp.micro_batch} × {rp.seq_len} tokens: fits "
        f"{sum(r['fits'] for r in table)} of {len(table)} GPU choices (fastest first)"
    )
    if not shown:
        print("  no GPU in the catalog fits this run as configured (try `vramlens check --fix`, or --all)")
        return 0
    print(
        f"  {'GPU':<18} {'×':>2}  {'peak / usable GiB':>18}  {'tokens/s per GPU':>16}  {'run tokens/s':>12}  "
        f"{'step s':>7}  {'MFU':>4}  bound"
    )
    for r in shown:
        mark = "" if r["fits"] else "  (does not fit)"
        print(
            f"  {r['gpu']:<18} {r['count']:>2}  {r['peak_gib']:>8.1f} / {usable_text(r['usable_gib']):<7}  "
            f"{r['tokens_per_s']:>16,.0f}  {r['run_tokens_per_s']:>12,.0f}  {r['step_s']:>7.2f}  "
            f"{r['mfu']:>4.0%}  {r['bound']}{mark}"
        )
    return 0
