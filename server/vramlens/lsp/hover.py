"""Hover: what the setting under the cursor costs now, its alternatives and where its value came from;
on the model, the whole memory budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from vramlens import markup
from vramlens.lsp.convert import Lines

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer


def hover(ls: "VramlensServer", params: types.HoverParams) -> types.Hover | None:
    from vramlens import explain

    uri = params.text_document.uri
    result = ls.analyzer.current(uri)
    doc = ls.document(uri)
    plan = result.plan if result is not None else None
    if result is None or doc is None or plan is None:
        return None
    lines = Lines(doc)
    line, col = lines.server_position(params.position)
    concept = explain.concept_at(plan, result.path, line, col)
    ctx = None
    if concept is None:
        # a multi-document YAML file: the document under the cursor explains itself
        for sub in getattr(result.analysis, "documents", None) or ():
            if sub is not result.analysis and sub.plan is not None and sub.plan is not plan:
                concept = explain.concept_at(sub.plan, result.path, line, col)
                if concept is not None:
                    plan = sub.plan
                    ctx = result.extra.setdefault(f"explain:{id(sub)}", explain.context(sub, result.path, None))
                    break
    if concept is None:
        return None
    ctx = ctx or ls.explain_context(result)
    if ctx is None:
        error = result.error
        if not error:
            return None
        value = f"**vramlens** · no estimate: {markup.text(error)}"
    else:
        value = explain.hover_markdown(ctx, concept)
    sourced = getattr(plan, concept, None)
    span = sourced.span if sourced is not None and sourced.span is not None else plan.model_span_hint
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value),
        range=lines.range(span) if span is not None else None,
    )
