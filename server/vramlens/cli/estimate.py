"""Estimate the peak GPU memory of one training step for each config file.

Exit codes: 0 estimates printed (whether or not they fit — `vramlens check` is the gate), 2 nothing could
be estimated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vramlens.cli.paths import iter_config_files, read_config_text


def add_arguments(p):
    from vramlens.cli.project import add_settings_flags

    p.add_argument("paths", nargs="+", help="config files or folders")
    add_settings_flags(p)
    p.add_argument("--format", choices=["text", "json"], default="text")


def run(args) -> int:
    from vramlens.analysis import split_yaml_documents
    from vramlens.calibration import calibrate
    from vramlens.cli.project import report, settings_for
    from vramlens.estimate import estimate
    from vramlens.formats import parse_document
    from vramlens.report import estimate_json, render_text
    from vramlens.resolve import ResolveError, resolve
    from vramlens.settings import SettingsError

    results, errors = [], 0
    files = list(iter_config_files(args.paths))
    if not files:
        print("vramlens: no files found", file=sys.stderr)
        return 2
    workspace = Path.cwd()
    documents = []  # (file, label, text): a multi-document YAML file gives one per document
    for f in files:
        try:
            text = read_config_text(f, errors="replace")
        except OSError as exc:
            print(f"{f}: cannot read: {exc}", file=sys.stderr)
            errors += 1
            continue
        split = split_yaml_documents(text, str(f))
        if split is None:
            documents.append((f, str(f), text))
        else:
            documents.extend((f, f"{f} (document {n})", view) for n, view in enumerate(split.views, 1))
            if split.skipped:
                print(f"{f}: {split.skipped_message()}", file=sys.stderr)
    for f, label, text in documents:
        try:
            settings = settings_for(f, args)
        except SettingsError as exc:
            return report(exc)
        parsed = parse_document(text, str(f), workspace=workspace, releases=settings.framework_versions)
        if parsed.plan is None:
            if parsed.issues:
                print(f"{label}: {parsed.issues[0].message}", file=sys.stderr)
                errors += 1
            elif len(files) == 1 and label == documents[-1][1] and not results:
                print(f"{f}: not a training config", file=sys.stderr)  # (after its last document)
                errors += 1
            continue
        try:
            res = calibrate(resolve(parsed.plan, settings))
        except ResolveError as exc:
            if parsed.plan.model_id is None and len(documents) > 1:
                continue  # a partial config (DeepSpeed/accelerate) that another file references
            print(f"{label}: {exc}", file=sys.stderr)
            errors += 1
            continue
        est = estimate(res.resolved)
        if args.format == "json":
            results.append(estimate_json(label, parsed.plan, res, est))
        else:
            print(render_text(label, parsed.plan, res, est))
            print()
    if args.format == "json":
        json.dump(results[0] if len(results) == 1 and len(documents) == 1 else results, sys.stdout, indent=2)
        print()
    if not results and args.format == "json" and errors:
        return 2
    if errors and not results and args.format == "text":
        return 2
    return 0
