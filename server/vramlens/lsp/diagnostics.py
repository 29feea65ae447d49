"""Diagnostics (push and pull) and the `vramlens/estimate` notification, from an analysis result."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import TextDocument

from vramlens.lsp import notebooks
from vramlens.lsp.convert import SOURCE, Lines, related_information, severity
from vramlens.lsp.documents import Result

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer
    from vramlens.plan import Span
    from vramlens.rules import Finding

log = logging.getLogger(__name__)

ESTIMATE_NOTIFICATION = "vramlens/estimate"
GIB = 1 << 30


def _rule_doc(rule_id: str) -> types.CodeDescription | None:
    """A link to the rule's page (installed with the rule set)."""
    # imported here, not at the top: the server answers `initialize` before the analysis pipeline loads
    from vramlens.rules import rule_by_id
    from vramlens.rules.docs import page_uri

    rule = rule_by_id(rule_id)
    return types.CodeDescription(href=page_uri(rule)) if rule is not None else None


def findings(result: Result) -> list["Finding"]:
    return list(result.analysis.findings) if result.analysis is not None else []


def _anchor(finding: "Finding", result: Result) -> "Span | None":
    """The span to show a finding at in this document: its own, or where the document refers to the
    other file it points into (a DeepSpeed JSON), or the model line."""
    span = finding.span
    if span.file in ("", result.path):
        return span
    plan = result.analysis.plan if result.analysis is not None else None
    if plan is not None:
        for ref in plan.references:
            if ref.span is not None and ref.resolved_path and Path(ref.resolved_path).name == Path(span.file).name:
                return ref.span
        if plan.model_span_hint is not None:
            return plan.model_span_hint
        if plan.model_id is not None and plan.model_id.span is not None:
            return plan.model_id.span
    return None


def to_diagnostics(result: Result, doc: TextDocument) -> list[types.Diagnostic]:
    """The LSP diagnostics of one analysis; rules switched off in the settings are left out."""
    overrides = result.settings.values.severity if result.settings is not None else {}
    lines = Lines(doc)
    out: list[types.Diagnostic] = []
    for index, finding in enumerate(findings(result)):
        rule_id = finding.rule_id
        level = severity(finding.severity, rule_id, overrides)
        if level is None:
            continue
        rng = lines.range(_anchor(finding, result))
        related = related_information(finding, lines, doc, rng)
        span = finding.span
        if span.file not in ("", result.path):
            related.insert(
                0,
                types.DiagnosticRelatedInformation(
                    location=types.Location(
                        uri=from_fs_path(span.file) or doc.uri,
                        range=types.Range(
                            start=types.Position(line=span.start_line, character=span.start_col),
                            end=types.Position(line=span.end_line, character=span.end_col),
                        ),
                    ),
                    message=f"in {Path(span.file).name}",
                ),
            )
        out.append(
            types.Diagnostic(
                range=rng,
                severity=level,
                code=rule_id,
                code_description=_rule_doc(rule_id),
                source=SOURCE,
                message=finding.message,
                related_information=related or None,
                data={"uri": doc.uri, "version": result.version, "edit": result.edit, "index": index, "rule": rule_id},
            )
        )
    return out


def publish(ls: "VramlensServer", result: Result) -> None:
    doc = ls.document(result.uri)
    if doc is None or not ls.analyzer.is_current(result):
        return  # a newer version is on its way; never show stale positions
    if ls.workspace.get_notebook_document(notebook_uri=result.uri) is not None:
        return notebooks.publish(ls, result.uri, doc.source, to_diagnostics(result, doc))
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=result.uri, version=result.version, diagnostics=to_diagnostics(result, doc))
    )


def clear(ls: "VramlensServer", uri: str) -> None:
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


async def pull(ls: "VramlensServer", params: types.DocumentDiagnosticParams) -> types.DocumentDiagnosticReport:
    uri = params.text_document.uri
    await ls.wait_for_settings()
    nb = ls.workspace.get_notebook_document(cell_uri=uri)
    if nb is not None:
        # a cell's findings are pushed (see VramlensServer._on_result); pulling them too would show them twice
        ls.analyzer.current(nb.uri)
        return types.RelatedFullDocumentDiagnosticReport(items=[])
    result = ls.analyzer.current(uri)
    doc = ls.document(uri)
    if result is None or doc is None:
        return types.RelatedFullDocumentDiagnosticReport(items=[])
    result_id = f"{result.version}:{result.edit}:{result.generation}"
    if params.previous_result_id == result_id:
        return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
    return types.RelatedFullDocumentDiagnosticReport(items=to_diagnostics(result, doc), result_id=result_id)


def _g(n: float) -> float:
    return round(n / GIB, 2)


def estimate_payload(result: Result, exact_gib: float | None) -> dict | None:
    """The `vramlens/estimate` notification (interfaces.md); None when there is no estimate."""
    analysis = result.analysis
    if analysis is None or analysis.estimate is None or analysis.resolution is None:
        return None
    est, res = analysis.estimate, analysis.resolution
    rp = res.resolved
    return {
        "uri": result.uri,
        "version": result.version,
        "gpu": {
            "name": rp.gpu.name,
            "count": rp.gpu_count,
            "usable_gib": round(rp.gpu.usable_gib, 2),
            "assumed": res.gpu_assumed,
        },
        "peak": {
            "allocated_gib": _g(est.allocated_bytes),
            "reserved_gib": _g(est.reserved_bytes),
            "device_gib": _g(est.device_bytes),
        },
        "components_gib": {k: _g(v) for k, v in est.components.items()},
        "phase": est.phase,
        "objective": est.objective,
        "fits": bool(est.fits),
        "headroom_gib": _g(est.headroom_bytes),
        "exact_gib": exact_gib,
        "approximate": est.is_approximate,
        "approximate_reasons": list(est.approximate),
    }


def no_estimate_reason(result: Result) -> str:
    analysis = result.analysis
    if analysis is None:
        return "the analysis failed (see the vramlens log)"
    if analysis.error:
        return analysis.error
    if analysis.plan is None:
        return "not a training config"
    return "no estimate"


def notify_estimate(ls: "VramlensServer", result: Result) -> None:
    """After every analysis: the estimate, or, when this version has none, {uri, version, reason}, so that a
    client drops the figure it showed for an earlier version (a config that no longer parses, say)."""
    payload = estimate_payload(result, ls.exact_gib(result))
    if payload is None:
        payload = {"uri": result.uri, "version": result.version, "reason": no_estimate_reason(result)}
    ls.protocol.notify(ESTIMATE_NOTIFICATION, payload)
