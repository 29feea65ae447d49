"""Inlay hints: the GiB a memory-relevant line costs, at its end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from vramlens.lsp.convert import Lines

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer


def inlay_hints(ls: "VramlensServer", params: types.InlayHintParams) -> list[types.InlayHint]:
    from vramlens import explain

    uri = params.text_document.uri
    result = ls.analyzer.current(uri)
    doc = ls.document(uri)
    ctx = ls.explain_context(result) if result is not None else None
    if ctx is None or doc is None:
        return []
    lines = Lines(doc)
    first, last = params.range.start.line, params.range.end.line
    hints = []
    for span, label in explain.inlay_labels(ctx):
        line = span.end_line
        if not first <= line <= last:
            continue
        hints.append(types.InlayHint(position=lines.end_of_line(line), label=label, padding_left=True))
    return hints
