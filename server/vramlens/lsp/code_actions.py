"""Code actions: the quick fixes of each vramlens diagnostic, and the "Make it fit" source action.

A fix is a plan change the analysis has already re-estimated and rendered into text edits in the
document's own format (`Fix.edits`); here those edits become a WorkspaceEdit, each edit under the URI of
the file its span names (a DeepSpeed JSON the config references is edited as that file). Fixes that cannot be
written into this file (`Fix.note` says where instead) are offered disabled, with the note as reason,
when the client can show disabled actions.

One action per distinct change (`vramlens.fixes.change_key`): a fix offered by two diagnostics (the allocator
setting of VL001 and VL004) is one action carrying both; the "Make it fit" source action is not repeated when its
change is already a quick fix in the list. Each action carries its applicability, as ruff's
(https://docs.astral.sh/ruff/linter/#fix-safety): `data.applicability` is "safe" or "unsafe", and an unsafe fix's
title ends in "(unsafe fix)". Only a safe "Make it fit" is a `source.fixAll` action (editors may run those on save);
an unsafe one is `source.vramlens.makeItFit`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import TextDocument

from vramlens import file_access
from vramlens.lsp.convert import SOURCE, Lines, workspace_edit

if TYPE_CHECKING:
    from vramlens.fixes import Fix
    from vramlens.formats.render import TextEdit
    from vramlens.lsp.documents import Result
    from vramlens.lsp.server import VramlensServer
    from vramlens.rules import Finding

log = logging.getLogger(__name__)

MAKE_IT_FIT = "source.fixAll.vramlens"
MAKE_IT_FIT_UNSAFE = "source.vramlens.makeItFit"
UNSAFE_SUFFIX = " (unsafe fix)"
MAKE_IT_FIT_TITLE = "vramlens: Make it fit"
MAKE_IT_FIT_RULES = ("VL001", "VL002")  # predicted OOM, tight fit
GIB = 1 << 30


def _kind_allowed(kind: str, only: Iterable[str] | None) -> bool:
    if not only:
        return True
    return any(kind == o or kind.startswith(o + ".") for o in only)


def _finding_for(result: Result, diag: types.Diagnostic) -> "Finding | None":
    """The finding behind a diagnostic the client sent back."""
    found = list(result.analysis.findings) if result.analysis is not None else []
    data = diag.data if isinstance(diag.data, dict) else {}
    index = data.get("index")
    if (
        data.get("version") == result.version
        and data.get("edit") == result.edit
        and isinstance(index, int)
        and 0 <= index < len(found)
    ):
        if found[index].rule_id == diag.code:
            return found[index]
    same_rule = [f for f in found if f.rule_id == diag.code]
    for f in same_rule:
        if f.span.start_line == diag.range.start.line:
            return f
    return same_rule[0] if len(same_rule) == 1 else None


def fix_title(fix: "Fix") -> str:
    """The fix's title, with the new predicted peak when the title does not say it already, and "(unsafe fix)"
    when it changes what or how the run trains."""
    title = fix.title or "vramlens fix"
    after = fix.estimate_after
    if after is not None and "GiB" not in title:
        title += f" → peak {after.device_bytes / GIB:.1f} GiB"
    if not fix.safe:
        title += UNSAFE_SUFFIX
    return title


class EditBuilder:
    """Turns `formats.render.TextEdit`s (spans in code points) into LSP edits per URI."""

    def __init__(self, ls: "VramlensServer", doc: TextDocument, result: Result):
        self.ls, self.doc, self.result = ls, doc, result
        self._lines: dict[str, Lines] = {doc.uri: Lines(doc)}

    def _target(self, file: str) -> tuple[str, Lines | None]:
        if file in ("", self.result.path):
            return self.doc.uri, self._lines[self.doc.uri]
        uri = from_fs_path(str(Path(file))) or file
        if uri not in self._lines:
            other = self.ls.workspace.text_documents.get(uri)
            if other is None:
                from vramlens.formats.references import MAX_REFERENCED_BYTES  # loaded with the analysis

                try:  # the file the analysis read (it passed the workspace check there), read the same way
                    text = file_access.read_text_checked(
                        Path(file), MAX_REFERENCED_BYTES, expect=Path(file), errors="strict"
                    )
                except (OSError, UnicodeDecodeError):
                    return uri, None
                other = TextDocument(uri, text, position_codec=self.doc.position_codec)
            self._lines[uri] = Lines(other)
        return uri, self._lines[uri]

    def build(
        self, edits: Iterable["TextEdit"]
    ) -> tuple[dict[str, list[types.TextEdit]], dict[str, int | None]] | None:
        by_uri: dict[str, list[types.TextEdit]] = {}
        for edit in edits:
            uri, lines = self._target(edit.span.file)
            if lines is None:
                return None
            by_uri.setdefault(uri, []).append(types.TextEdit(range=lines.range(edit.span), new_text=edit.new_text))
        versions = {
            uri: (d.version if (d := self.ls.workspace.text_documents.get(uri)) is not None else None) for uri in by_uri
        }
        return by_uri, versions


def _action(
    ls: "VramlensServer",
    builder: EditBuilder,
    fix: "Fix",
    kind: str,
    diagnostics: list[types.Diagnostic] | None,
    preferred: bool,
) -> types.CodeAction | None:
    edits = list(fix.edits)
    title = fix_title(fix)
    built = builder.build(edits) if edits else None
    data = {"applicability": fix.applicability, "fix": fix.id or None}
    if not built:
        note = fix.note
        if note and ls.client_supports_disabled_actions():
            return types.CodeAction(
                title=title,
                kind=kind,
                diagnostics=diagnostics,
                data=data,
                disabled=types.CodeActionDisabled(reason=str(note)),
            )
        return None
    by_uri, versions = built
    return types.CodeAction(
        title=title,
        kind=kind,
        diagnostics=diagnostics,
        is_preferred=preferred or None,
        data=data,
        edit=workspace_edit(by_uri, versions, ls.client_supports_document_changes()),
    )


def make_it_fit_fix(result: Result) -> "Fix | None":
    """The analysis' combined fix for a predicted OOM or a tight fit, as a source action: the safe one when there is
    one (`make-it-fit`, or `make-it-fit-safe` beside an unsafe fastest plan), else the unsafe one."""
    found = (
        fix
        for finding in (result.analysis.findings if result.analysis is not None else [])
        if finding.rule_id in MAKE_IT_FIT_RULES
        for fix in finding.fixes
        if fix.id in ("make-it-fit", "make-it-fit-safe")
    )
    first = None
    for fix in found:  # fixes are computed as they are reached (each costs estimates): stop at a safe one
        if fix.safe:
            return fix
        first = first or fix
    return first


def code_actions(ls: "VramlensServer", params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    result = ls.analyzer.current(uri)
    doc = ls.document(uri)
    if result is None or doc is None or result.analysis is None:
        return []
    from vramlens.fixes import change_key  # with the analysis, after the initialize answer (it imports pydantic)

    only = params.context.only
    builder = EditBuilder(ls, doc, result)
    actions: list[types.CodeAction] = []
    by_change: dict[tuple, types.CodeAction] = {}
    if _kind_allowed(types.CodeActionKind.QuickFix, only):
        for diag in params.context.diagnostics:
            if diag.source != SOURCE:
                continue
            finding = _finding_for(result, diag)
            if finding is None:
                continue
            for i, fix in enumerate(finding.fixes):
                key = change_key(fix)
                if key in by_change:  # the same change offered by another diagnostic: one action
                    same = by_change[key]
                    same.diagnostics = [*(same.diagnostics or []), diag]
                    continue
                action = _action(ls, builder, fix, types.CodeActionKind.QuickFix, [diag], preferred=i == 0)
                if action is not None:
                    by_change[key] = action
                    actions.append(action)
    fit = make_it_fit_fix(result)
    kind = (MAKE_IT_FIT if fit.safe else MAKE_IT_FIT_UNSAFE) if fit is not None else MAKE_IT_FIT
    if fit is not None and change_key(fit) not in by_change and _kind_allowed(kind, only):
        action = _action(ls, builder, fit, kind, None, preferred=False)
        if action is not None:
            if action.title.lower().startswith("make it fit"):
                action.title = "vramlens: " + action.title
            else:
                action.title = f"{MAKE_IT_FIT_TITLE}: {action.title}"
            actions.append(action)
    return actions
