"""Check training configs for predicted out-of-memory and other memory problems (for CI and pre-commit).

Folders are walked for candidate files (.yaml .yml .json .py .sh .md .ipynb); files that are not training configs
are skipped (listed with -v). Project settings (`.vramlens.toml` or `[tool.vramlens]` in pyproject.toml)
apply; command-line flags win over them.

`--fix` applies the safe fixes and writes each edit into the file it names (a fix for the DeepSpeed JSON a config
names goes into that JSON); `--unsafe-fixes` adds the fixes that change what or how it trains (`vramlens.fixes`
and `vramlens.cli.fix` say which and how files are written).

Exit codes: 0 no finding at error level, 1 findings at error level, 2 usage error, a refused setting (flag or
project file), a named file that cannot be read, or a file --fix could not write (nothing of its fixes is
written). JSON and SARIF positions are 1-based lines and columns (SARIF endColumn is exclusive).
In a notebook (.ipynb) a position is in a code cell: text `path:cell N:line:col`, JSON `"cell": N` with lines
counted in that cell; SARIF regions are positions in the .ipynb file itself (one source line per JSON line, as
Jupyter writes it; else the cell's lines), with `properties.notebookCell`/`cellLine`/`cellColumn`. `--fix` rewrites
a notebook's cell sources only when its JSON layout is reproduced exactly (else it says so and writes nothing).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

SEVERITY_ORDER = ("error", "warning", "information", "hint")
SARIF_LEVEL = {"error": "error", "warning": "warning", "information": "note", "hint": "note"}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def add_arguments(p):
    from vramlens.cli.project import add_settings_flags

    p.add_argument("paths", nargs="+", help="config files or folders")
    add_settings_flags(p)
    p.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    p.add_argument(
        "--fix",
        action="store_true",
        help='apply the safe fixes ("make it fit" for a predicted OOM first) to the files they edit, '
        "write them, re-check",
    )
    p.add_argument(
        "--unsafe-fixes",
        action="store_true",
        help="with --fix, also apply the unsafe fixes: those that change what or how it trains (fp16 "
        "instead of bf16, LoRA/QLoRA instead of the full model, 8-bit optimizer states, ...)",
    )
    p.add_argument(
        "--severity",
        action="append",
        default=[],
        metavar="RULE=LEVEL",
        help="set a rule's severity: error, warning, information, hint or off "
        "(e.g. --severity VL004=off; repeatable, comma-separated)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list skipped files and every fix offered")


@dataclass
class FileResult:
    path: Path
    explicit: bool  # named on the command line (not found by walking a folder)
    analysis: object | None = None  # vramlens.analysis.Analysis
    text: str = ""
    skipped: str | None = None  # why it was not checked
    unreadable: str | None = None  # why it could not be read (exit 2 when explicit)
    root: Path | None = None  # the checked folder: the folder named, or a named file's folder
    applied: list[str] = field(default_factory=list)  # titles of fixes written by --fix
    cells: object | None = None  # a notebook's code cells (formats.notebook.CellText); spans point into them
    file_position: object | None = None  # a notebook: (cell-text line, col) -> (line, col) in the .ipynb file, if known
    file_text: str | None = None  # a notebook: the .ipynb file's own text (`text` is its cells)
    not_applied: list[str] = field(default_factory=list)  # "<title>: <why>" for fixes --fix left out
    written: list[Path] = field(default_factory=list)  # real paths --fix wrote (the config, a file it names)
    write_failed: list[tuple[str, str]] = field(default_factory=list)  # (file, why) --fix could not write: exit 2

    @property
    def findings(self) -> list:
        return self.analysis.findings if self.analysis is not None and self.skipped is None else []


def _parse_severity(values: list[str]) -> dict[str, str]:
    from vramlens.rules import normalize_severity, rule_by_id

    out: dict[str, str] = {}
    for item in ",".join(values).split(","):
        if not item.strip():
            continue
        code, sep, level = item.partition("=")
        if not sep or rule_by_id(code.strip()) is None or normalize_severity(level) is None:
            raise ValueError(f"bad --severity {item.strip()!r}: expected RULE=LEVEL, e.g. VL004=off")
        out[rule_by_id(code.strip()).id] = normalize_severity(level)
    return out


def _files(paths: list[str]) -> list[tuple[Path, bool, Path]]:
    """(file, named on the command line, the checked folder it belongs to)."""
    from vramlens.cli.paths import iter_config_files

    out: list[tuple[Path, bool, Path]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend((f, False, p) for f in iter_config_files([p]))
        else:
            out.append((p, True, p.parent))
    return out


def _check_file(
    path: Path, explicit: bool, root: Path, args, cli_severity: dict[str, str], fix: bool = True
) -> FileResult:
    from vramlens.analysis import analyze
    from vramlens.cli.fix import stat_before_read
    from vramlens.cli.paths import read_config_text
    from vramlens.cli.project import settings_for
    from vramlens.formats import looks_like_training_config, notebook

    result = FileResult(path, explicit, root=root)
    st = stat_before_read(path)
    try:
        result.text = read_config_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        result.unreadable = f"cannot read: {exc}"
        result.skipped = result.unreadable
        return result
    settings = settings_for(path, args, cli_severity)
    if notebook.is_notebook(str(path)):
        file_text = result.file_text = result.text
        result.text = notebook.document_text(file_text, str(path))
        result.cells = notebook.CellText.parse(result.text)
        result.file_position = notebook.json_positions(file_text, result.cells)
    analysis = analyze(result.text, str(path), settings)
    result.analysis = analysis
    if analysis.plan is None:
        unreadable = [f for f in analysis.findings if f.rule_id == "VL016"]
        if unreadable and (explicit or looks_like_training_config(result.text)):
            result.unreadable = unreadable[0].message
        else:
            result.skipped = "not a training config" + (f" ({analysis.error})" if analysis.error else "")
        return result
    _drop_no_model_notice(analysis)
    if args.fix and fix and st is not None:
        _fix(result, settings, st, args.unsafe_fixes)
    return result


def _drop_no_model_notice(analysis) -> None:
    """A partial config (a DeepSpeed JSON, an accelerate file) names no model: it is checked through the
    configs that use it, and only problems in its own text are reported."""
    from vramlens.resolve import NO_MODEL

    if analysis.plan is not None and analysis.plan.model_id is None and analysis.error in (None, NO_MODEL):
        analysis.findings = [f for f in analysis.findings if f.rule_id != "VL017"]


def _fix(result: FileResult, settings, st, unsafe: bool) -> None:
    from vramlens.cli.fix import ReadFile, fix_file, real
    from vramlens.formats import notebook as nb

    notebook = result.cells is not None
    outcome = fix_file(
        result.path,
        ReadFile(real(result.path), result.file_text if notebook else result.text, st),
        result.analysis,
        settings,
        result.root or result.path.parent,
        unsafe,
        analysed_text=result.text if notebook else None,
        encode=partial(nb.write_cells, result.file_text) if notebook else None,
    )
    result.applied, result.not_applied = outcome.applied, outcome.not_applied
    result.written, result.write_failed = outcome.written, outcome.failed
    if outcome.analysis is not None:
        result.text, result.analysis = outcome.text or result.text, outcome.analysis
        _drop_no_model_notice(result.analysis)
        if notebook and outcome.file_text is not None:  # positions in the rewritten .ipynb file
            result.file_text = outcome.file_text
            result.cells = nb.CellText.parse(result.text)
            result.file_position = nb.json_positions(outcome.file_text, result.cells)


# -- output ----------------------------------------------------------------------------------------


def _summary(results: list[FileResult]) -> dict:
    counts = {s: 0 for s in SEVERITY_ORDER}
    for r in results:
        for f in r.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
    checked = sum(1 for r in results if r.skipped is None)
    approximate = sum(
        1
        for r in results
        if r.skipped is None
        and any(d.estimate is not None and d.estimate.is_approximate for d in _estimated(r.analysis))
    )
    return {
        "files_checked": checked,
        "files_skipped": len(results) - checked,
        **counts,
        "approximate": approximate,
        "files_fixed": len({p for r in results for p in r.written}),
    }  # a config and the JSON it names: 2


def _estimated(analysis) -> list:
    """The analyses with an estimate: each document of a multi-document file, or the file's own."""
    if analysis is None:
        return []
    documents = getattr(analysis, "documents", None) or ()
    return [d for d in documents if d.estimate is not None] if len(documents) > 1 else [analysis]


def _estimate_line(analysis) -> str | None:
    est = analysis.estimate
    if est is None:
        return None
    rp = analysis.resolution.resolved
    from vramlens.report import approximate_line, assumed_gpu_note, peak_mark

    verdict = "fits" if est.fits else "does NOT fit"
    approximate = approximate_line(est)
    return (
        f"peak {peak_mark(est)}{est.device_bytes / 2**30:.1f} GiB of {est.usable_bytes / 2**30:.1f} GiB usable on "
        f"{rp.gpu.name} — {verdict}{assumed_gpu_note(analysis.resolution)}"
        + (f"\n  {approximate}" if approximate else "")
    )


def _print_text(results: list[FileResult], verbose: bool) -> None:
    out = sys.stdout
    for r in results:
        if r.skipped is not None:
            if verbose or (r.unreadable and r.explicit):
                print(f"{r.path}: skipped: {r.skipped}", file=out)
            continue
        documents = [d for d in getattr(r.analysis, "documents", None) or () if d.estimate is not None]
        if len(documents) > 1:  # a multi-document YAML file: one estimate per run
            for n, d in enumerate(r.analysis.documents, 1):
                if d.estimate is not None:
                    print(f"{r.path} (document {n}): {_estimate_line(d)}", file=out)
        else:
            line = _estimate_line(r.analysis)
            if line or r.findings or verbose:
                print(f"{r.path}: {line or 'no estimate'}", file=out)
        for title in r.applied:
            print(f"  fixed: {title}", file=out)
        for written in r.written:
            if written != Path(os.path.realpath(r.path)):
                print(f"  wrote {written} (a file this config names)", file=out)
        for why in r.not_applied:
            print(f"  {why}", file=out)
        for _file, why in r.write_failed:
            print(f"  not written: {why}; every file is left as it was", file=out)
        for f in r.findings:
            cell, span = _cell_span(r, f.span)
            where = f"cell {cell + 1}:" if cell is not None else ""
            print(
                f"{r.path}:{where}{span.start_line + 1}:{span.start_col + 1}: {f.severity} {f.rule_id} "
                f"[{f.name}] {f.message}",
                file=out,
            )
            if f.severity == "error" or verbose:
                for fix in f.fixes:
                    print(f"    fix: {fix.title}{_fix_mark(fix)}", file=out)
    s = _summary(results)
    print(
        f"{s['files_checked']} config(s) checked, {s['files_skipped']} skipped: {s['error']} error(s), "
        f"{s['warning']} warning(s), {s['information'] + s['hint']} note(s)"
        + (f"; {s['approximate']} estimate(s) approximate" if s["approximate"] else "")
        + (f"; fixed {s['files_fixed']} file(s)" if s["files_fixed"] else ""),
        file=out,
    )


def _fix_mark(fix) -> str:
    """Whether --fix applies a fix; for one it cannot write, its level and where to make it instead."""
    if fix.edits:
        return " (safe: applies with --fix)" if fix.safe else " (unsafe: applies with --fix --unsafe-fixes)"
    return f" ({fix.applicability}; --fix cannot write it here: {fix.note or 'make it by hand'})"


def _cell_span(r: FileResult, span):
    """(cell index or None, the span in that cell) for a span of this file."""
    if r.cells is None or span.file not in ("", str(r.path)):
        return None, span
    from vramlens.formats.notebook import cell_span

    index, span = cell_span(r.cells, span)
    return r.cells.numbers[index] - 1 if r.cells.numbers else index, span


def _pos(line: int, col: int) -> dict:
    return {"line": line + 1, "column": col + 1}


def _fix_json(fix, path: str) -> dict:
    """A fix; an edit for another file than the config (a DeepSpeed JSON it names) says which in `file`."""
    est = fix.estimate_after
    return {
        "id": fix.id,
        "title": fix.title,
        "changes": fix.changes,
        "safe": fix.safe,
        "applicability": fix.applicability,
        "peak_gib": round(est.device_bytes / 2**30, 2) if est is not None else None,
        "fits": fix.fits,
        "edits": [
            {
                "start": _pos(e.span.start_line, e.span.start_col),
                "end": _pos(e.span.end_line, e.span.end_col),
                "new_text": e.new_text,
                **({"file": e.span.file} if e.span.file not in ("", path) else {}),
            }
            for e in fix.edits
        ],
        "note": fix.note,
    }


def _json(results: list[FileResult]) -> dict:
    from vramlens.report import estimate_json

    files = []
    for r in results:
        entry: dict = {"path": str(r.path), "skipped": r.skipped}
        a = r.analysis
        if r.skipped is None and a is not None:
            entry.update(
                {
                    "format": a.plan.format if a.plan is not None else None,
                    "estimate": estimate_json(str(r.path), a.plan, a.resolution, a.estimate) if a.estimate else None,
                    "error": a.error,
                    "findings": [
                        {
                            "rule": f.rule_id,
                            "name": f.name,
                            "severity": f.severity,
                            "message": f.message,
                            **_json_position(r, f.span),
                            "related": [
                                {
                                    "file": rel.span.file,
                                    "start": _pos(rel.span.start_line, rel.span.start_col),
                                    "message": rel.message,
                                }
                                for rel in f.related
                            ],
                            "fixes": [_fix_json(x, str(r.path)) for x in f.fixes],
                        }
                        for f in r.findings
                    ],
                    "fixed": r.applied,
                    "not_applied": r.not_applied,
                    "not_written": [{"file": file, "reason": why} for file, why in r.write_failed],
                }
            )
            if len(a.documents) > 1:  # a multi-document YAML file: each document's estimate
                entry["documents"] = [
                    estimate_json(str(r.path), d.plan, d.resolution, d.estimate) if d.estimate is not None else None
                    for d in a.documents
                ]
        files.append(entry)
    return {"version": 1, "files": files, "summary": _summary(results)}


def _file_span(r: FileResult, span, cell_span):
    """Where a notebook finding sits in the .ipynb file (SARIF regions are file positions); the cell's own lines
    when the file's layout is not one source line per JSON line."""
    if r.file_position is None or span.file not in ("", str(r.path)):
        return cell_span
    start = r.file_position(span.start_line, span.start_col)
    end = r.file_position(span.end_line, span.end_col) if span.end_line == span.start_line else None
    if start is None:
        return cell_span
    end = end or (start[0], start[1])
    return span.model_copy(
        update={"start_line": start[0], "start_col": start[1], "end_line": end[0], "end_col": end[1]}
    )


def _json_position(r: FileResult, span) -> dict:
    cell, span = _cell_span(r, span)
    out = {"cell": cell + 1} if cell is not None else {}
    out.update(start=_pos(span.start_line, span.start_col), end=_pos(span.end_line, span.end_col))
    return out


def _region(span) -> dict:
    return {
        "startLine": span.start_line + 1,
        "startColumn": span.start_col + 1,
        "endLine": span.end_line + 1,
        "endColumn": span.end_col + 1,
    }


def _uri(path: Path, root: Path) -> tuple[str, bool]:
    """(uri, relative to %SRCROOT%)."""
    try:
        return path.resolve().relative_to(root).as_posix(), True
    except ValueError:
        return path.resolve().as_uri(), False


def _artifact(path: Path, root: Path) -> dict:
    uri, relative = _uri(path, root)
    return {"uri": uri, **({"uriBaseId": "%SRCROOT%"} if relative else {})}


def _location(path: Path, span, root: Path) -> dict:
    return {"physicalLocation": {"artifactLocation": _artifact(path, root), "region": _region(span)}}


def _sarif(results: list[FileResult]) -> dict:
    from vramlens import __version__
    from vramlens.rules import all_rules
    from vramlens.rules.docs import page_uri

    root = Path.cwd().resolve()
    rules = list(all_rules())
    index = {r.id: i for i, r in enumerate(rules)}
    descriptors = [
        {
            "id": r.id,
            "name": r.name,
            "shortDescription": {"text": r.title},
            "fullDescription": {"text": r.why.strip()},
            "help": {"text": r.why.strip()},
            "helpUri": page_uri(r),
            "defaultConfiguration": {"level": SARIF_LEVEL[r.severity]},
            "properties": {"fixes": list(r.fixes)},
        }
        for r in rules
    ]
    out_results = []
    for r in results:
        for f in r.findings:
            cell, span = _cell_span(r, f.span)
            res = {
                "ruleId": f.rule_id,
                "ruleIndex": index[f.rule_id],
                "level": SARIF_LEVEL[f.severity],
                "message": {"text": f.message},
                "locations": [_location(r.path, _file_span(r, f.span, span), root)],
            }
            if cell is not None:
                res["properties"] = {
                    "notebookCell": cell + 1,
                    "cellLine": span.start_line + 1,
                    "cellColumn": span.start_col + 1,
                }
            related = []
            for i, rel in enumerate(f.related, start=1):
                loc = _location(Path(rel.span.file) if rel.span.file else r.path, rel.span, root)
                related.append({"id": i, **loc, "message": {"text": rel.message}})
            if related:
                res["relatedLocations"] = related
            fixes = []
            for fix in f.fixes if r.cells is None else ():
                by_file: dict[Path, list] = {}
                for e in fix.edits:  # an edit may target a referenced file (a DeepSpeed JSON)
                    by_file.setdefault(Path(e.span.file) if e.span.file else r.path, []).append(e)
                if not by_file:
                    continue
                fixes.append(
                    {
                        "description": {"text": fix.title},
                        "properties": {"applicability": fix.applicability},
                        "artifactChanges": [
                            {
                                "artifactLocation": _artifact(file, root),
                                "replacements": [
                                    {"deletedRegion": _region(e.span), "insertedContent": {"text": e.new_text}}
                                    for e in edits
                                ],
                            }
                            for file, edits in by_file.items()
                        ],
                    }
                )
            if fixes:
                res["fixes"] = fixes
            out_results.append(res)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "vramlens",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": descriptors,
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": root.as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "results": out_results,
            }
        ],
    }


def run(args) -> int:
    try:
        cli_severity = _parse_severity(args.severity)
    except ValueError as exc:
        print(f"vramlens check: {exc}", file=sys.stderr)
        return 2
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        print(f"vramlens check: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    from vramlens.cli.project import report
    from vramlens.settings import SettingsError

    try:
        results = []
        for path, explicit, root in _files(args.paths):
            results.append(_check_file(path, explicit, root, args, cli_severity))
        written = {p for r in results for p in r.written}
        for i, r in enumerate(results):  # a file another file's fix wrote (its DeepSpeed JSON) is checked again
            if r.skipped is None and not r.written and Path(os.path.realpath(r.path)) in written:
                again = _check_file(r.path, r.explicit, r.root or r.path.parent, args, cli_severity, fix=False)
                again.applied, again.not_applied = r.applied, r.not_applied
                results[i] = again
    except SettingsError as exc:  # a refused flag or project-file value: nothing is checked with it
        return report(exc)

    if args.format == "json":
        json.dump(_json(results), sys.stdout, indent=2)
        print()
    elif args.format == "sarif":
        json.dump(_sarif(results), sys.stdout, indent=2)
        print()
    else:
        _print_text(results, args.verbose)
    if args.verbose and args.format != "text":
        for r in results:
            if r.skipped is not None:
                print(f"{r.path}: skipped: {r.skipped}", file=sys.stderr)

    if any(r.unreadable and r.explicit for r in results):
        for r in results:
            if r.unreadable and r.explicit and args.format != "text":
                print(f"{r.path}: {r.unreadable}", file=sys.stderr)
        return 2
    if any(r.write_failed for r in results):  # --fix could not write a file: nothing of that fix was written
        if args.format != "text":
            for r in results:
                for _file, why in r.write_failed:
                    print(f"{r.path}: not written: {why}", file=sys.stderr)
        return 2
    return 1 if any(f.severity == "error" for r in results for f in r.findings) else 0
