"""Code lens on the line naming the model: the predicted peak against the GPU; running the exact trace
when trace support is installed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from vramlens.lsp.convert import Lines

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer

RUN_TRACE = "vramlens.runTrace"


def code_lens(ls: "VramlensServer", params: types.CodeLensParams) -> list[types.CodeLens]:
    from vramlens import explain

    uri = params.text_document.uri
    result = ls.analyzer.current(uri)
    doc = ls.document(uri)
    plan = result.plan if result is not None else None
    if plan is None or doc is None:
        return []
    span = explain.model_span(plan, result.path)
    if span is None:
        return []
    ctx = ls.explain_context(result)
    if ctx is not None:
        title = "vramlens: " + explain.lens_title(ctx)
    else:
        error = result.error
        title = f"vramlens: no estimate — {error}" if error else "vramlens: no estimate"
    if ctx is not None and ls.commands.trace_available():
        suffix = "" if ctx.exact_gib is not None else " · run exact trace"
        command = types.Command(title=title + suffix, command=RUN_TRACE, arguments=[uri])
    else:
        command = types.Command(title=title, command="")
    rng = Lines(doc).range(span)
    return [types.CodeLens(range=types.Range(start=rng.start, end=rng.start), command=command)]
