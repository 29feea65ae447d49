"""analyze: text → parse → resolve → calibrate → estimate → rules, in one call that never raises for bad input.

The LSP server (on every change) and `vramlens check` call only this and convert what it returns:
a parse error or an unknown model or GPU is a finding (VL016 / VL017) on the document, not an exception,
and anything unexpected becomes a finding too, with its traceback in the log. Fixes are computed lazily
(`Finding.fixes`), since each needs another estimate and diagnostics on a keystroke do not pay for them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vramlens.calibration import calibrate
from vramlens.estimate import Estimate, estimate
from vramlens.fixes import Fix, Fixer
from vramlens.formats import parse_document
from vramlens.formats.notebook import document_text, is_notebook
from vramlens.plan import IssueKind, ParseIssue, Severity, TrainingPlan
from vramlens.resolve import Resolution, ResolveError, resolve
from vramlens.rules import Finding, Related, RuleContext, run_rules
from vramlens.settings import Settings

if TYPE_CHECKING:
    from vramlens.formats.yaml_doc import Documents

__all__ = ["Analysis", "Settings", "Finding", "Fix", "Related", "analyze", "too_large"]

log = logging.getLogger(__name__)

# Larger documents are not read at all (twice the largest parser's own bound, formats.yaml_doc.MAX_YAML_BYTES and
# formats.shell.MAX_SHELL_CHARS: 2 MB, so a file just past those still gets the parser's own message). The
# server drops such a document's text and does not analyse its edits (lsp.server).
MAX_DOCUMENT_CHARS = 4_000_000


@dataclass
class Analysis:
    """Everything one run of the pipeline learned about a document."""

    path: str
    plan: TrainingPlan | None = None
    """None when the text is not a training config (then `findings` is empty unless it could not be read)."""
    resolution: Resolution | None = None
    estimate: Estimate | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    """Why there is no estimate (parse error, unknown model or GPU, internal error); None when there is one."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Milliseconds spent in each stage: parse, resolve, estimate, rules."""
    documents: list["Analysis"] = field(default_factory=list)
    """A multi-document YAML file: each document's own analysis (the fields above are the first estimated one's)."""


def analyze(text: str, path: str | Path, settings: Settings | None = None) -> Analysis:
    """Run the whole pipeline and the rules over one document. Never raises."""
    settings = settings or Settings()
    path = str(path)
    if is_notebook(path):
        # a notebook's JSON (its outputs can weigh megabytes; formats.notebook bounds it) → its cell text, which
        # every span points into; the document bound below is then the code's
        text = document_text(text, path)
    if len(text) > MAX_DOCUMENT_CHARS:
        return too_large(path, len(text))
    try:
        documents = split_yaml_documents(text, path)
        if documents is not None:
            return _analyze_documents(documents, text, path, settings)
        return _analyze(text, path, settings)
    except Exception as exc:  # a bug, not bad input: report it on the document and keep the server alive
        log.exception("analysis of %s failed", path)
        return Analysis(
            path=path, findings=[_internal_error(text, path, exc)], error=f"internal error: {type(exc).__name__}: {exc}"
        )


def _analyze(text: str, path: str, settings: Settings) -> Analysis:
    result = Analysis(path=path)
    t0 = time.perf_counter()
    parsed = parse_document(
        text, path, workspace=settings.workspace, read_file=settings.read_file, releases=settings.framework_versions
    )
    t1 = time.perf_counter()
    result.timings_ms["parse"] = (t1 - t0) * 1000
    plan = parsed.plan
    result.plan = plan
    ctx = RuleContext(
        text=text,
        path=path,
        plan=plan,
        parse_issues=list(parsed.issues) + (list(plan.issues) if plan is not None else []),
        headroom=settings.headroom,
        framework_versions=dict(settings.framework_versions),
    )
    if plan is None:
        result.error = parsed.issues[0].message if parsed.issues else None
        result.findings = run_rules(ctx, settings.severity)
        result.timings_ms["rules"] = (time.perf_counter() - t1) * 1000
        return result

    # From here on a failure (a bug) keeps what the earlier stages found: the plan still serves hovers and
    # completion, and the rules that need only the plan still run.
    internal: list[Finding] = []
    resolution = None
    try:
        resolution = calibrate(resolve(plan, settings))
    except ResolveError as exc:
        ctx.resolve_error = exc
        result.error = str(exc)
    except Exception as exc:
        log.exception("resolving %s failed", path)
        internal.append(_internal_error(text, path, exc))
        result.error = f"internal error: {type(exc).__name__}: {exc}"
    t2 = time.perf_counter()
    result.timings_ms["resolve"] = (t2 - t1) * 1000
    if resolution is not None:
        result.resolution = ctx.resolution = resolution
        try:
            est = estimate(resolution.resolved)
        except Exception as exc:
            log.exception("estimating %s failed", path)
            internal.append(_internal_error(text, path, exc))
            result.error = f"internal error: {type(exc).__name__}: {exc}"
        else:
            result.estimate = ctx.estimate = est
            ctx.fixer = Fixer(text, plan, resolution.resolved, est, settings)
    t3 = time.perf_counter()
    result.timings_ms["estimate"] = (t3 - t2) * 1000
    result.findings = internal + run_rules(ctx, settings.severity)
    result.timings_ms["rules"] = (time.perf_counter() - t3) * 1000
    return result


def split_yaml_documents(text: str, path: str) -> Documents | None:
    """The documents of a YAML file of several, within the budgets; None for other files and single documents."""
    from vramlens.formats import NOT_YAML_SUFFIXES, TEXT_PARSERS

    suffix = Path(path).suffix.lower()
    if suffix in TEXT_PARSERS or suffix in NOT_YAML_SUFFIXES or suffix == ".json":
        return None
    from vramlens.formats.yaml_doc import split_documents

    return split_documents(text)


def _analyze_documents(documents: Documents, text: str, path: str, settings: Settings) -> Analysis:
    """Each document of a multi-document YAML file analysed alone; findings stay on their document's lines.
    The analysis shown for the file (plan, estimate) is the first document's that has an estimate. Documents past
    the budgets of formats.yaml_doc are not analysed: a VL021 at the first of them says how many and why."""
    results = [_analyze(view, path, settings) for view in documents.views]
    primary = next((r for r in results if r.estimate is not None), None) or next(
        (r for r in results if r.plan is not None), results[0]
    )
    out = Analysis(
        path=path,
        plan=primary.plan,
        resolution=primary.resolution,
        estimate=primary.estimate,
        error=primary.error,
        timings_ms=dict(primary.timings_ms),
    )
    seen = set()
    for r in results:
        for f in r.findings:
            key = (f.rule_id, f.span.start_line, f.span.start_col, f.message)
            if key not in seen:  # a file-wide finding (a directive's) comes once, not per document
                seen.add(key)
                out.findings.append(f)
    if documents.skipped and documents.skipped_span is not None:  # set together (split_documents)
        skipped = documents.skipped_span.model_copy(update={"file": path})
        issue = ParseIssue(
            kind=IssueKind.NOT_READ, message=documents.skipped_message(), severity=Severity.INFO, span=skipped
        )
        # through the rules, over the whole text, so the user's severity setting and suppressions apply
        ctx = RuleContext(text=text, path=path, parse_issues=[issue])
        out.findings += [
            f
            for f in run_rules(ctx, settings.severity)
            if f.rule_id == "VL021" and f.span.start_line == skipped.start_line
        ]
    out.documents = results
    return out


def too_large(path: str | Path, size: int) -> Analysis:
    """The analysis of a document past MAX_DOCUMENT_CHARS: one VL016 saying so, nothing read."""
    path = str(path)
    message = (
        f"file is too large to analyse ({size / 1e6:.1f} MB; vramlens reads documents up to "
        f"{MAX_DOCUMENT_CHARS / 1e6:g} MB), so it is not read and its edits are not analysed"
    )
    finding = Finding(
        rule_id="VL016",
        severity="error",
        name="unreadable-config",
        span=RuleContext(text="", path=path).first_line(),
        message=message,
    )
    return Analysis(path=path, findings=[finding], error=message)


def _internal_error(text: str, path: str, exc: Exception) -> Finding:
    ctx = RuleContext(text=text, path=path)
    return Finding(
        rule_id="VL016",
        severity="error",
        name="unreadable-config",
        span=ctx.first_line(),
        message=f"vramlens could not analyse this file (internal error: {type(exc).__name__}: {exc}); please report it",
    )
