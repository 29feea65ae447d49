"""Show what vramlens reads from a config: every setting, where it was written, and the defaults it fills in.

vramlens plan train.yaml                 # text table
vramlens plan train.yaml --format json   # the plan as JSON (spans 0-based, end exclusive)
vramlens plan --write-schemas            # regenerate schemas/*.schema.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vramlens.rules.registry import owner_of


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="*", help="config files")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--workspace", help="workspace root for resolving referenced files (default: current folder)")
    p.add_argument("--gpu", help='GPU for resolving defaults, e.g. "A100-40GB"')
    p.add_argument("--no-resolve", action="store_true", help="only what the file says; no framework defaults")
    p.add_argument(
        "--write-schemas",
        nargs="?",
        const="",
        metavar="DIR",
        help="write the JSON Schemas of the supported formats (default: the repository's schemas/)",
    )


def _span_text(span) -> str:
    if span is None:
        return "-"
    where = f"{span.start_line + 1}:{span.start_col + 1}-{span.end_line + 1}:{span.end_col + 1}"
    return where


def _source(v, doc: str) -> str:
    if v.origin.value == "file":
        where = _span_text(v.value_span or v.span)
        if v.span is not None and v.span.file and Path(v.span.file) != Path(doc):
            where = f"{Path(v.span.file).name}:{where}"
        return f"{where} ({v.key})" if v.key else where
    return v.origin.value + (f" [{v.framework}]" if v.framework else "")


def _issue_json(issue) -> dict:
    """A parse issue with the id of the rule that reports it."""
    return {**issue.model_dump(mode="json", exclude_none=True), "rule": owner_of(issue.kind).id}


def _plan_json(path: str, result, resolution) -> dict:
    plan = result.plan
    out: dict = {
        "file": path,
        "format": plan.format if plan else None,
        "framework": plan.framework if plan else None,
        "training_config": plan is not None,
    }
    if plan is None:
        out["issues"] = [_issue_json(i) for i in result.issues]
        return out
    out["settings"] = {k: v.model_dump(mode="json", exclude_none=True) for k, v in plan.settings().items()}
    if resolution is not None:
        out["defaults"] = {
            k: v.model_dump(mode="json", exclude_none=True)
            for k, v in resolution.sources.items()
            if k not in out["settings"]
        }
        out["assumptions"] = list(resolution.assumptions)
    out["references"] = [r.model_dump(mode="json", exclude_none=True) for r in plan.references]
    out["issues"] = [_issue_json(i) for i in plan.issues]
    out["extra"] = {k: v.model_dump(mode="json", exclude_none=True) for k, v in plan.extra.items()}
    return out


def _print_text(path: str, result, resolution, error: str | None) -> None:
    plan = result.plan
    if plan is None:
        why = "; ".join(i.message for i in result.issues) or "no known config format"
        print(f"{path}: not a training config ({why})")
        return
    print(f"{path}: {plan.format} (defaults: {plan.framework or 'transformers'})")
    rows = [(k, repr(v.value), _source(v, path), v.note or "") for k, v in plan.settings().items()]
    if resolution is not None:
        rows += [
            (k, repr(v.value), _source(v, path), v.note or "")
            for k, v in resolution.sources.items()
            if getattr(plan, k, None) is None
        ]
    w0 = max((len(r[0]) for r in rows), default=8)
    w1 = min(48, max((len(r[1]) for r in rows), default=8))
    for name, value, where, note in rows:
        value = value if len(value) <= w1 else value[: w1 - 1] + "…"
        print(f"  {name:<{w0}}  {value:<{w1}}  {where}" + (f"  — {note}" if note else ""))
    for r in plan.references:
        print(f"  → {r.kind} {r.target}: {r.resolved_path or 'not found'}")
    for i in plan.issues:
        print(
            f"  ! {i.severity.value} {owner_of(i.kind).id} {_span_text(i.span)}: {i.message}"
            + (f" (suggestion: {i.suggestion})" if i.suggestion else "")
        )
    if resolution is not None:
        for a in resolution.assumptions:
            print(f"  ~ {a}")
    if error:
        print(f"  (defaults not resolved: {error})")


def run(args) -> int:
    if args.write_schemas is not None:
        from vramlens.formats import schemas

        out = Path(args.write_schemas) if args.write_schemas else schemas.SCHEMA_DIR
        for p in schemas.write_schemas(out):
            print(p)
        if not args.paths:
            return 0
    if not args.paths:
        print("vramlens plan: give a config file (or --write-schemas)", file=sys.stderr)
        return 2
    from vramlens.cli.paths import read_config_text
    from vramlens.formats import parse_document
    from vramlens.resolve import ResolveError, resolve
    from vramlens.settings import Settings

    workspace = Path(args.workspace).resolve() if args.workspace else Path.cwd()
    outputs = []
    status = 0
    for path in args.paths:
        try:
            text = read_config_text(Path(path), errors="replace")
        except OSError as exc:
            print(f"{path}: {exc.strerror or exc}", file=sys.stderr)
            status = 1
            continue
        result = parse_document(text, str(Path(path).resolve()), workspace=workspace)
        resolution, error = None, None
        if result.plan is not None and not args.no_resolve:
            try:
                resolution = resolve(result.plan, Settings(gpu=args.gpu, workspace=workspace))
            except ResolveError as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - showing the plan matters more than the defaults
                error = f"{type(exc).__name__}: {exc}"
        if args.format == "json":
            data = _plan_json(path, result, resolution)
            if error:
                data["resolve_error"] = error
            outputs.append(data)
        else:
            _print_text(path, result, resolution, error)
    if args.format == "json":
        print(json.dumps(outputs[0] if len(outputs) == 1 else outputs, indent=2))
    return status
