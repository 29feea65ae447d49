"""Notebooks in the editor (LSP 3.17 notebook document sync): one analysis per notebook, findings on the cells.

The client syncs a notebook (`notebookDocument/didOpen|didChange|didClose`) with its code cells as text
documents (pygls keeps both in the workspace). The notebook is analysed as one document, its cell text
(`formats.notebook.CellText`, the same text `vramlens check` builds from the .ipynb file, so both give the
same answer) under the notebook's URI; diagnostics are then split by cell and published on each cell's URI,
with lines counted in that cell. A cell is never analysed on its own.

Each analysis publishes only the cells whose diagnostics changed since their last publish (an empty list once
for a cell whose diagnostics went away): a notebook of many cells edited in one of them costs a notification per
changed cell, not one per cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

import attrs
from lsprotocol import types
from pygls.workspace import TextDocument

if TYPE_CHECKING:
    from vramlens.formats.notebook import CellText
    from vramlens.lsp.server import VramlensServer

# Jupyter notebooks (VS Code's and other clients' type name); Python cells and cells whose own language is shell
# (a `%%bash` cell switched to Shell): the cells the server reads, as `formats.notebook` reads the .ipynb file.
CELL_LANGUAGES = [types.NotebookCellLanguage(language=lang) for lang in ("python", "shellscript", "bash")]
SYNC_OPTIONS = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithNotebook(notebook="jupyter-notebook", cells=CELL_LANGUAGES),
        types.NotebookDocumentFilterWithNotebook(
            notebook=types.NotebookDocumentFilterNotebookType(notebook_type="jupyter-notebook", pattern="**/*.ipynb"),
            cells=CELL_LANGUAGES,
        ),
    ]
)


@dataclass
class NotebookState:
    """What the server remembers of one open notebook between analyses."""

    key: tuple = ()
    """(notebook version, each cell's URI and version) the revision was counted for."""
    revision: int = 0
    """Bumped on every change of the notebook or a cell's text: the version its analyses carry."""
    published: dict[str, list[types.Diagnostic]] = field(default_factory=dict)
    """Cell URI → the non-empty diagnostics last published on it (`_shown`); a cell not in it shows none."""


def is_cell(ls: "VramlensServer", uri: str) -> bool:
    """Is this text document a cell of an open notebook?"""
    return ls.workspace.get_notebook_document(cell_uri=uri) is not None


def code_cells(ls: "VramlensServer", nb: types.NotebookDocument) -> list[tuple[int, str, TextDocument]]:
    """(place in the notebook from 1, cell URI, its text document) for each code cell the client synced."""
    out = []
    for number, cell in enumerate(nb.cells, 1):
        if cell.kind != types.NotebookCellKind.Code:
            continue
        doc = ls.workspace.text_documents.get(unquote(cell.document))  # pygls keys documents by unquoted URI
        if doc is not None:
            out.append((number, cell.document, doc))
    return out


def _join(cells: list[tuple[int, str, TextDocument]]) -> CellText:
    from vramlens.formats.notebook import CellText

    return CellText.join(
        [doc.source for _, _, doc in cells],
        [n for n, _, _ in cells],
        [doc.language_id or "python" for _, _, doc in cells],
    )


def state(ls: "VramlensServer", uri: str) -> NotebookState:
    return ls.notebook_states.setdefault(uri, NotebookState())


def document(ls: "VramlensServer", uri: str) -> TextDocument | None:
    """The notebook as one text document (its cell text) under the notebook's URI; None if not open."""
    nb = ls.workspace.get_notebook_document(notebook_uri=uri)
    if nb is None:
        return None
    cells = code_cells(ls, nb)
    st = state(ls, uri)
    key = (nb.version, tuple((cell_uri, doc.version) for _, cell_uri, doc in cells))
    if key != st.key:
        st.key, st.revision = key, st.revision + 1
    return TextDocument(
        uri,
        source=_join(cells).text,
        version=st.revision,
        language_id="python",
        position_codec=ls.workspace.position_codec,
    )


def split(
    ls: "VramlensServer", notebook_uri: str, text: str, diagnostics: list[types.Diagnostic]
) -> dict[str, list[types.Diagnostic]] | None:
    """The notebook's diagnostics (cell-text positions) per cell URI (positions in the cell); every code
    cell has an entry, empty when nothing is on it. None when the cells changed since `text` was built."""
    from vramlens.formats.notebook import CellText

    nb = ls.workspace.get_notebook_document(notebook_uri=notebook_uri)
    if nb is None:
        return None
    cells = code_cells(ls, nb)
    ct = CellText.parse(text)
    uris = [cell_uri for _, cell_uri, _ in cells]
    if len(uris) != len(ct.starts):
        return None  # the cells changed since this text was built: publish nothing stale
    out: dict[str, list[types.Diagnostic]] = {u: [] for u in uris}
    for d in diagnostics:
        index, rng = _cell_range(ct, d.range)
        related = None
        if d.related_information:
            related = []
            for info in d.related_information:
                loc = info.location
                if loc.uri == notebook_uri:
                    i, r = _cell_range(ct, loc.range)
                    loc = types.Location(uri=uris[i], range=r)
                related.append(types.DiagnosticRelatedInformation(location=loc, message=info.message))
        data = dict(d.data) if isinstance(d.data, dict) else d.data
        if isinstance(data, dict):
            data["uri"] = uris[index]
            data["notebook"] = notebook_uri
        out[uris[index]].append(
            types.Diagnostic(
                range=rng,
                severity=d.severity,
                code=d.code,
                code_description=d.code_description,
                source=d.source,
                message=d.message,
                related_information=related,
                data=data,
                tags=d.tags,
            )
        )
    return out


def _cell_range(ct: CellText, rng: types.Range) -> tuple[int, types.Range]:
    """A cell-text range → (cell index, the range in that cell, clipped to it)."""
    index, line = ct.locate(rng.start.line)
    start, end = ct.cell_lines(index) if ct.starts else (0, rng.end.line + 1)
    if rng.start.line < start:  # on the marker line: the cell's start
        return index, types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
    start_pos = types.Position(line=line, character=rng.start.character)
    if rng.end.line < end:
        end_pos = types.Position(line=rng.end.line - start, character=rng.end.character)
    else:  # runs past the cell: to the start of its last line
        end_pos = types.Position(line=max(line, end - 1 - start), character=0)
    return index, types.Range(start=start_pos, end=end_pos)


# Keys of a diagnostic's `data` that name the analysis it came from (`diagnostics.to_diagnostics`), not what it
# says: they change on every analysis, so they do not make a cell's diagnostics "changed". A code action asked
# with an older analysis' data finds its finding by rule and line instead (`code_actions._finding_for`).
ANALYSIS_KEYS = ("version", "edit", "index")


def _shown(diagnostics: list[types.Diagnostic]) -> list[types.Diagnostic]:
    """The diagnostics as the editor shows them: without the analysis' identity in `data`."""
    out = []
    for d in diagnostics:
        if isinstance(d.data, dict) and any(k in d.data for k in ANALYSIS_KEYS):
            d = attrs.evolve(d, data={k: v for k, v in d.data.items() if k not in ANALYSIS_KEYS})
        out.append(d)
    return out


def publish(ls: "VramlensServer", notebook_uri: str, text: str, diagnostics: list[types.Diagnostic]) -> None:
    """Publish the cells whose diagnostics differ from their last publish: new or changed ones, and an empty list
    for a cell that had some and has none now (or left the notebook)."""
    st = state(ls, notebook_uri)
    per_cell = split(ls, notebook_uri, text, diagnostics)
    if per_cell is None:
        return  # a newer analysis of the new cells follows
    for uri in [u for u in st.published if u not in per_cell]:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        del st.published[uri]
    for uri, items in per_cell.items():
        shown = _shown(items)
        if shown == st.published.get(uri, []):
            continue
        doc = ls.workspace.text_documents.get(unquote(uri))
        ls.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=doc.version if doc is not None else None, diagnostics=items)
        )
        if shown:
            st.published[uri] = shown
        else:
            st.published.pop(uri, None)


def clear(ls: "VramlensServer", params: types.DidCloseNotebookDocumentParams) -> None:
    """The notebook closed: an empty list for each cell that shows diagnostics."""
    st = ls.notebook_states.pop(params.notebook_document.uri, None)
    for uri in st.published if st is not None else ():
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def _cell_of(ls: "VramlensServer", cell_uri: str):
    """(notebook, its code cells, their cell text, this cell's index) for a cell URI; None if not in an open
    notebook."""
    nb = ls.workspace.get_notebook_document(cell_uri=cell_uri)
    if nb is None:
        return None
    cells = code_cells(ls, nb)
    index = next((i for i, (_, uri, _) in enumerate(cells) if unquote(uri) == unquote(cell_uri)), None)
    if index is None:
        return None
    return nb, cells, _join(cells), index


def _shift(rng: types.Range, lines: int) -> types.Range:
    return types.Range(
        start=types.Position(line=rng.start.line + lines, character=rng.start.character),
        end=types.Position(line=rng.end.line + lines, character=rng.end.character),
    )


def cell_hover(ls: "VramlensServer", params: types.HoverParams, hover) -> types.Hover | None:
    """A hover in a cell: asked of the notebook's analysis at the cell-text position, its range put back in the cell."""
    found = _cell_of(ls, params.text_document.uri)
    if found is None:
        return None
    nb, cells, ct, index = found
    start = ct.starts[index]
    answer = hover(
        ls,
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=nb.uri),
            position=types.Position(line=params.position.line + start, character=params.position.character),
        ),
    )
    if answer is None or answer.range is None:
        return answer
    i, rng = _cell_range(ct, answer.range)
    return types.Hover(contents=answer.contents, range=rng if i == index else None)


def cell_code_actions(ls: "VramlensServer", params: types.CodeActionParams, code_actions) -> list[types.CodeAction]:
    """Quick fixes in a cell: computed on the notebook's analysis, their edits split onto the cells they change."""
    from vramlens.lsp.convert import workspace_edit

    found = _cell_of(ls, params.text_document.uri)
    if found is None:
        return []
    nb, cells, ct, index = found
    start = ct.starts[index]
    shifted = [
        types.Diagnostic(
            range=_shift(d.range, start),
            message=d.message,
            severity=d.severity,
            code=d.code,
            source=d.source,
            data=d.data,
        )
        for d in params.context.diagnostics
    ]
    actions = code_actions(
        ls,
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=nb.uri),
            range=_shift(params.range, start),
            context=types.CodeActionContext(diagnostics=shifted, only=params.context.only),
        ),
    )
    uris = [uri for _, uri, _ in cells]
    versions = {uri: doc.version for _, uri, doc in cells}
    out = []
    for action in actions:
        if action.edit is not None:
            by_cell: dict[str, list[types.TextEdit]] = {}
            edits = list((action.edit.changes or {}).get(nb.uri, []))
            for change in action.edit.document_changes or ():
                if isinstance(change, types.TextDocumentEdit) and unquote(change.text_document.uri) == unquote(nb.uri):
                    edits.extend(change.edits)
            for e in edits:
                i, rng = _cell_range(ct, e.range)
                by_cell.setdefault(uris[i], []).append(types.TextEdit(range=rng, new_text=e.new_text))
            action.edit = workspace_edit(by_cell, versions, ls.client_supports_document_changes())
        if action.diagnostics:
            action.diagnostics = list(params.context.diagnostics)
        out.append(action)
    return out


def is_notebook_file(path: str, text: str) -> bool:
    """An .ipynb file opened as a plain (JSON) text document, not through notebook sync."""
    from vramlens.formats.notebook import is_notebook

    return is_notebook(path) and text.lstrip().startswith("{")


def as_file_positions(analysis, json_text: str):
    """The analysis of an .ipynb opened as JSON text: its findings moved to where their cell lines sit in the file
    (or to the file's start when the layout is not one source line per JSON line), without fixes (their edits are
    cell-text edits) and without the plan (hovers, lenses and hints would point into the cells' text)."""
    import dataclasses

    from vramlens.formats.notebook import CellText, document_text, json_positions

    if analysis is None:
        return None
    cells = CellText.parse(document_text(json_text, analysis.path))
    position = json_positions(json_text, cells)

    def moved(span):
        start = position(span.start_line, span.start_col) if position and span is not None else None
        if start is None:
            return span.model_copy(update={"start_line": 0, "start_col": 0, "end_line": 0, "end_col": 0})
        end = position(span.end_line, span.end_col) if span.end_line == span.start_line else None
        end = end or start
        return span.model_copy(
            update={"start_line": start[0], "start_col": start[1], "end_line": end[0], "end_col": end[1]}
        )

    findings = [
        dataclasses.replace(
            f,
            span=moved(f.span),
            fix_source=None,
            related=[dataclasses.replace(r, span=moved(r.span)) for r in f.related],
        )
        for f in analysis.findings
    ]
    return dataclasses.replace(analysis, plan=None, findings=findings)


def cell_inlay_hints(ls: "VramlensServer", params: types.InlayHintParams, inlay_hints) -> list[types.InlayHint]:
    """Inlay hints in a cell: the notebook's hints that fall on this cell's lines, at the cell's positions."""
    found = _cell_of(ls, params.text_document.uri)
    if found is None:
        return []
    nb, cells, ct, index = found
    start, end = ct.cell_lines(index)
    hints = inlay_hints(
        ls,
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=nb.uri), range=_shift(params.range, start)
        ),
    )
    out = []
    for hint in hints:
        if start <= hint.position.line < end:
            hint.position = types.Position(line=hint.position.line - start, character=hint.position.character)
            out.append(hint)
    return out


def cell_code_lens(ls: "VramlensServer", params: types.CodeLensParams, code_lens) -> list[types.CodeLens]:
    """The code lens on the model line, in the cell that names the model."""
    found = _cell_of(ls, params.text_document.uri)
    if found is None:
        return []
    nb, cells, ct, index = found
    out = []
    for lens in code_lens(ls, types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=nb.uri))):
        i, rng = _cell_range(ct, lens.range)
        if i == index and rng.start.line >= 0:
            lens.range = rng
            if lens.command is not None and lens.command.arguments:
                lens.command.arguments = [nb.uri]  # a trace runs for the notebook
            out.append(lens)
    return out
