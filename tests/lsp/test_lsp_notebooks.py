"""Notebooks through LSP notebook document sync: findings land on the cell they belong to, at the cell's own
line, the same findings and peak `vramlens check` / `vramlens estimate` print for the .ipynb file, and they follow
edits of a cell and go away when the notebook closes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_editor import FIXTURES, TIMEOUT_S, Editor, edits_of, plain
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

NOTEBOOKS = sorted((FIXTURES / "notebooks").glob("*.ipynb"))


class Notebook:
    """One notebook opened in the editor: its cells as VS Code names them (`vscode-notebook-cell:` URIs)."""

    def __init__(self, editor: Editor, path: Path):
        self.editor = editor
        self.uri = path.resolve().as_uri()
        data = json.loads(path.read_text(encoding="utf-8"))
        self.cells: list[tuple[str, str, str]] = []        # (kind, uri, text)
        for i, cell in enumerate(data["cells"]):
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            # the fragment is percent-encoded as VS Code sends it; the server must match it to the cell
            uri = f"vscode-notebook-cell:{path.resolve().as_posix()}#W{i}sZmlsZQ%3D%3D"
            self.cells.append((cell["cell_type"], uri, src))
        self.version = 1
        self.cell_versions = {uri: 1 for _, uri, _ in self.cells}

    def open(self) -> None:
        cells = [types.NotebookCell(kind=types.NotebookCellKind.Code if k == "code" else types.NotebookCellKind.Markup,
                                    document=uri) for k, uri, _ in self.cells]
        docs = [types.TextDocumentItem(uri=uri, language_id="python" if k == "code" else "markdown", version=1,
                                       text=text) for k, uri, text in self.cells]
        self.editor.client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(uri=self.uri, notebook_type="jupyter-notebook", version=1,
                                                     cells=cells),
            cell_text_documents=docs))

    def edit_cell(self, index: int, old: str, new: str) -> None:
        kind, uri, text = self.cells[index]
        start = text.index(old)
        line = text[:start].count("\n")
        col = start - (text.rfind("\n", 0, start) + 1)
        self.cells[index] = (kind, uri, text.replace(old, new, 1))
        self.version += 1
        self.cell_versions[uri] += 1
        rng = types.Range(start=types.Position(line, col), end=types.Position(line, col + len(old)))
        self.editor.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=self.version, uri=self.uri),
            change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
                types.NotebookDocumentCellContentChanges(
                    document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.cell_versions[uri]),
                    changes=[types.TextDocumentContentChangePartial(range=rng, text=new)])]))))

    def close(self) -> None:
        self.editor.client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=self.uri),
            cell_text_documents=[types.TextDocumentIdentifier(uri=uri) for _, uri, _ in self.cells]))

    def code_cell_uris(self) -> list[str]:
        return [uri for kind, uri, _ in self.cells if kind == "code"]

    async def diagnostics(self) -> dict[str, list[types.Diagnostic]]:
        """Each code cell's diagnostics for its current version. Cells' diagnostics are pushed whether or not the
        client pulls (vscode-languageclient pulls only for text tabs); a pull for a cell answers nothing, so an
        editor that does both shows each finding once."""
        client = self.editor.client
        out = {}
        for uri in self.code_cell_uris():
            if self.editor.pulls:
                report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
                    text_document=types.TextDocumentIdentifier(uri=uri)))
                assert list(report.items) == []
            version = self.cell_versions[uri]

            def published(uri=uri, version=version):
                for p in reversed(client.published):
                    if p.uri == uri and p.version == version:
                        return list(p.diagnostics)
                return None
            out[uri] = await self.editor._until(published, f"diagnostics of {uri} v{version}")
        return out

    async def estimate(self) -> dict:
        """The latest `vramlens/estimate` for the notebook (sent after each analysis)."""
        await self.diagnostics()
        return await self.editor._until(
            lambda: next((e for e in reversed(self.editor.client.estimates) if e["uri"] == self.uri), None),
            f"estimate of {self.uri}")


def _cli(command: str, path: Path) -> dict:
    """`vramlens check|estimate --format json` on the .ipynb file (the GPU left to the default, as in the editor)."""
    out = subprocess.run([sys.executable, "-m", "vramlens", command, str(path), "--format", "json"],
                         capture_output=True, text=True, timeout=TIMEOUT_S * 6)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
async def test_notebook_findings_are_on_their_cells_as_check_reports_them(editor: Editor, path: Path):
    nb = Notebook(editor, path)
    nb.open()
    try:
        per_cell = await nb.diagnostics()
        seen = set()
        cell_numbers = {uri: i + 1 for i, (_, uri, _) in enumerate(nb.cells)}
        for uri, diags in per_cell.items():
            for d in diags:
                seen.add((d.code, cell_numbers[uri], d.range.start.line + 1, d.range.start.character + 1))
        check = _cli("check", path)["files"][0]
        expected = {(f["rule"], f["cell"], f["start"]["line"], f["start"]["column"]) for f in check["findings"]}
        assert check["format"] == "notebook" and expected
        assert seen == expected
        assert not any(d.code == "VL016" for ds in per_cell.values() for d in ds)

        est = await nb.estimate()
        cli = _cli("estimate", path)
        assert est["peak"]["device_gib"] == pytest.approx(cli["peak"]["device_gib"], abs=0.011)
    finally:
        nb.close()


async def test_unsloth_colab_notebook_edit_and_close(editor: Editor):
    path = FIXTURES / "notebooks" / "unsloth_llama3_1_8b_colab.ipynb"
    nb = Notebook(editor, path)
    nb.open()
    try:
        per_cell = await nb.diagnostics()
        config_cell = next(i for i, (_, _, text) in enumerate(nb.cells) if "SFTConfig(" in text)
        uri = nb.cells[config_cell][1]
        # `bf16 = is_bfloat16_supported()` is only known at run time: a setting not read, said on that line of that cell
        unknown = [d for d in per_cell[uri] if d.code == "VL021"]
        bf16_line = nb.cells[config_cell][2].split("\n").index(
            next(line for line in nb.cells[config_cell][2].split("\n") if "bf16 = " in line))
        assert any(d.range.start.line == bf16_line for d in unknown), [plain(d.range) for d in unknown]
        before = await nb.estimate()

        # hovering the model name in its cell explains the notebook's budget
        model_cell = next(i for i, (_, _, text) in enumerate(nb.cells) if "from_pretrained(" in text)
        text = nb.cells[model_cell][2]
        line = text.split("\n").index(next(x for x in text.split("\n") if "model_name = " in x))
        col = text.split("\n")[line].index("model_name")
        found = await editor.client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=nb.cells[model_cell][1]), position=types.Position(line, col)))
        assert found is not None and "GiB" in found.contents.value
        assert found.range is None or found.range.start.line == line

        # the code lens sits on the model line of that cell; inlay hints stay within their cells
        lenses = await editor.client.text_document_code_lens_async(types.CodeLensParams(
            text_document=types.TextDocumentIdentifier(uri=nb.cells[model_cell][1])))
        assert [lens.range.start.line for lens in lenses] == [line]
        assert "GiB" in lenses[0].command.title
        shown = 0
        for _, cell_uri, cell_text in nb.cells:
            if cell_uri not in nb.code_cell_uris():
                continue
            n = len(cell_text.split("\n"))
            hints = await editor.client.text_document_inlay_hint_async(types.InlayHintParams(
                text_document=types.TextDocumentIdentifier(uri=cell_uri),
                range=types.Range(start=types.Position(0, 0), end=types.Position(n, 0))))
            assert all(0 <= h.position.line < n for h in hints or [])
            shown += len(hints or [])
        assert shown > 0

        # quick fixes in a cell edit that cell (the notebook's own text), at the cell's lines
        actions = await editor.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(0, 0), end=types.Position(30, 0)),
            context=types.CodeActionContext(diagnostics=per_cell[uri])))
        assert actions is not None
        edits = [e for a in actions if isinstance(a, types.CodeAction) and a.edit is not None
                 for e in edits_of(a.edit).items()]
        assert all(cell_uri in nb.code_cell_uris() for cell_uri, _ in edits), edits

        nb.edit_cell(config_cell, "per_device_train_batch_size = 2", "per_device_train_batch_size = 16")
        after = await nb.diagnostics()
        est = await editor._until(lambda: next(
            (e for e in reversed(editor.client.estimates) if e["uri"] == nb.uri
             and e["peak"]["device_gib"] > before["peak"]["device_gib"] + 1), None), "the estimate after the edit")
        assert est["phase"]
        assert any(d.code == "VL021" for d in after[uri])
    finally:
        nb.close()
    # pushed diagnostics are cleared on close
    def cleared():
        last = {}
        for p in editor.client.published:
            last[p.uri] = p.diagnostics
        return True if all(not last.get(u, []) for u in nb.code_cell_uris()) else None
    await editor._until(cleared, "cleared cell diagnostics")


async def test_quick_fix_in_a_notebook_cell_edits_that_cell(editor: Editor, tmp_path: Path):
    # at 8192 tokens the notebook's full fine-tune does not fit the assumed A100-80GB (at 2048 TRL's fused `nll`
    # head keeps it at 33 GiB)
    path = tmp_path / "bang_command.ipynb"
    path.write_text((FIXTURES / "notebooks" / "bang_command.ipynb").read_text(encoding="utf-8")
                    .replace("--max_length 2048", "--max_length 8192"), encoding="utf-8")
    nb = Notebook(editor, path)
    nb.open()
    try:
        per_cell = await nb.diagnostics()
        uri, diags = next((u, ds) for u, ds in per_cell.items() if any(d.code == "VL001" for d in ds))
        oom = next(d for d in diags if d.code == "VL001")
        actions = await editor.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=oom.range,
            context=types.CodeActionContext(diagnostics=[oom])))
        fixes = [a for a in actions or [] if isinstance(a, types.CodeAction) and a.edit is not None]
        halve = next(a for a in fixes if a.title.startswith("Make it fit with safe fixes only: lower the micro-batch"))
        cell_text = next(text for _, u, text in nb.cells if u == uri)
        changed = edits_of(halve.edit)
        assert list(changed) == [uri]
        for e in changed[uri]:
            line = cell_text.split("\n")[e.range.start.line]
            assert line[e.range.start.character:e.range.end.character] in ("64", "1"), (line, e)
    finally:
        nb.close()



async def test_a_notebook_opened_as_json_text_gets_findings_at_file_positions_and_no_edits(editor: Editor,
                                                                                           tmp_path: Path):
    path = tmp_path / "bang_command.ipynb"           # out of memory on the assumed GPU at 8192 tokens
    path.write_text((FIXTURES / "notebooks" / "bang_command.ipynb").read_text(encoding="utf-8")
                    .replace("--max_length 2048", "--max_length 8192"), encoding="utf-8")
    text = path.read_text(encoding="utf-8")
    uri = editor.open(path, language_id="json")
    diagnostics = await editor.diagnostics(uri)
    oom = next(d for d in diagnostics if d.code == "VL001")
    line = text.split("\n")[oom.range.start.line]
    assert "--per_device_train_batch_size 64" in line or "trl/scripts/sft.py" in line, line
    actions = await editor.code_actions(uri, [oom])
    assert not [a for a in actions if a.edit is not None]          # cell-text edits never land on the JSON
