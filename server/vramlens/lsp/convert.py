"""Between vramlens' results and LSP types: spans to ranges, findings to diagnostics, fixes to edits.

Spans count characters as Python does (code points); the client counts in its negotiated position
encoding (UTF-16 unless it offered UTF-8/32). pygls' position codec converts, line by line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import TextDocument

from vramlens.text import UTF16, LineIndex

if TYPE_CHECKING:
    from vramlens.plan import Span
    from vramlens.rules import Finding

SOURCE = "vramlens"

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "info": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}


class Lines:
    """A document's lines for position conversions (`vramlens.text.LineIndex` in the client's encoding)."""

    def __init__(self, doc: TextDocument):
        self.doc = doc
        self.index = LineIndex(doc.source)
        encoding = doc.position_codec.encoding
        self.encoding = str(getattr(encoding, "value", encoding) or UTF16)

    def position(self, line: int, col: int) -> types.Position:
        line, units = self.index.position(line, col, self.encoding)
        return types.Position(line=line, character=units)

    def range(self, span: Span | None) -> types.Range:
        if span is None:
            return types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
        return types.Range(
            start=self.position(span.start_line, span.start_col), end=self.position(span.end_line, span.end_col)
        )

    def end_of_line(self, line: int) -> types.Position:
        return self.position(line, len(self.index.line(line)))

    def line(self, line: int) -> str:
        """The text of a line, without its break ("" past the end)."""
        return self.index.line(line)

    def server_position(self, pos: types.Position) -> tuple[int, int]:
        """A client position as (line, code-point column)."""
        return pos.line, self.index.column(pos.line, pos.character, self.encoding)


def severity(finding_severity: str, rule_id: str, overrides: dict[str, str]) -> types.DiagnosticSeverity | None:
    """The LSP severity for a finding after the user's per-rule overrides; None = rule switched off."""
    override = overrides.get(rule_id)
    if override == "off":
        return None
    word = override or finding_severity
    return _SEVERITY.get(word, types.DiagnosticSeverity.Warning)


def span_uri(span: Span | None, doc: TextDocument) -> str:
    """The URI of the file a span points into (the document itself unless it names another file)."""
    if span is None or span.file in ("", doc.path):
        return doc.uri
    return from_fs_path(str(Path(span.file))) or doc.uri


def related_information(
    finding: "Finding", lines: Lines, doc: TextDocument, diag_range: types.Range
) -> list[types.DiagnosticRelatedInformation]:
    """`Finding.related` as related information."""
    out = []
    for item in finding.related:
        span, message = item.span, item.message
        uri = span_uri(span, doc)
        if uri != doc.uri:
            rng = types.Range(
                start=types.Position(line=span.start_line, character=span.start_col),
                end=types.Position(line=span.end_line, character=span.end_col),
            )
        else:
            rng = lines.range(span)
        out.append(types.DiagnosticRelatedInformation(location=types.Location(uri=uri, range=rng), message=message))
    return out


def workspace_edit(
    edits_by_uri: dict[str, list[types.TextEdit]], versions: dict[str, int | None], document_changes: bool
) -> types.WorkspaceEdit:
    """`changes` or `documentChanges`, as the client prefers."""
    if document_changes:
        return types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=versions.get(uri)),
                    edits=list(edits),
                )
                for uri, edits in edits_by_uri.items()
            ]
        )
    return types.WorkspaceEdit(changes={uri: list(edits) for uri, edits in edits_by_uri.items()})
