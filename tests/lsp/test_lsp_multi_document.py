"""A YAML file of several `---` documents in the editor: each document's findings on its own lines, and a hover
in any document explains that document's run."""

from __future__ import annotations

import pytest
from lsp_editor import FIXTURES, Editor

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_multi_document_yaml_findings_and_hovers_per_document(editor: Editor):
    path = FIXTURES / "yaml" / "two_runs.yaml"
    uri = editor.open(path)
    diagnostics = await editor.diagnostics(uri)
    text = path.read_text()
    second = text.split("\n").index("---") + 1
    assert [d.range.start.line >= second for d in diagnostics if d.code == "VL001"] == [True]
    found = await editor.hover(uri, text.split("\n").index("micro_batch_size: 16"), 0)
    assert found is not None and "GiB" in found.contents.value
