"""Show or clear the local calibration: what exact traces and probes measured, and which estimates it scales.

`vramlens calibration list` prints one row per record: the model, its settings key, the factor it scales the
allocated memory by (measured ÷ estimated, bounded to 0.8–1.25), its source (an exact trace or a probe), when it was
measured, and why a record is ignored. `vramlens calibration clear KEY…` removes the records of those settings
keys (a prefix of at least 4 characters), `--model ID` every record of one model, `--all` every record.

Exit codes: 0 done, 2 nothing selected to clear or an unknown key.
"""

from __future__ import annotations

import json
import sys

EXIT_USAGE = 2
MIN_KEY = 4


def add_arguments(p):
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="the records and the factor each applies")
    ls.add_argument("--format", choices=["text", "json"], default="text")
    cl = sub.add_parser("clear", help="remove records: by settings key, by model, or all")
    cl.add_argument("keys", nargs="*", metavar="KEY", help="settings keys from `vramlens calibration list`")
    cl.add_argument("--model", help="every record of this model (as listed)")
    cl.add_argument("--all", action="store_true", help="every record")


def run(args) -> int:
    from vramlens import calibration

    path = calibration.calibration_path()
    if path is None:
        print("vramlens: calibration is off (VRAMLENS_CALIBRATION=off)", file=sys.stderr)
        return 0
    if args.action == "list":
        rows = calibration.listing()
        if args.format == "json":
            json.dump({"file": str(path), "records": rows}, sys.stdout, indent=2)
            print()
        else:
            print(render_list(rows, str(path)))
        return 0
    if not (args.keys or args.model or args.all):
        print(
            "vramlens: say what to clear: KEY… (from `vramlens calibration list`), --model ID or --all", file=sys.stderr
        )
        return EXIT_USAGE
    short = [k for k in args.keys if len(k) < MIN_KEY]
    if short:
        print(f"vramlens: a key needs at least {MIN_KEY} characters: {', '.join(short)}", file=sys.stderr)
        return EXIT_USAGE
    if args.all:
        removed = calibration.clear()
    else:
        known = {row["key"] for row in calibration.listing()}
        unknown = [k for k in args.keys if not any(key.startswith(k) for key in known)]
        if unknown:
            print(
                f"vramlens: no calibration record has the key {', '.join(unknown)} (see `vramlens calibration list`)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        removed = calibration.clear(keys=tuple(args.keys), model=args.model)
    print(f"removed {removed} calibration record(s) from {path}")
    return 0


def render_list(rows: list[dict], path: str) -> str:
    if not rows:
        return f"no calibration records ({path})"
    lines = [
        f"calibration records ({path}):",
        f"  {'model':<36} {'key':<12} {'factor':>7}  {'source':<6} {'recorded':<10}  applies",
    ]
    for r in rows:
        applies = "yes" if r["ignored"] is None else f"no: {r['ignored']}"
        raw = "" if abs(r["ratio"] - r["factor"]) < 5e-4 else f" (measured ×{r['ratio']:.3f}, bounded)"
        lines.append(
            f"  {str(r['model']):<36} {r['key']:<12} ×{r['factor']:<6.3f}  {str(r['source']):<6} "
            f"{str(r['recorded'] or '')[:10]:<10}  {applies}{raw}"
        )
    return "\n".join(lines)
