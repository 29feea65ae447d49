"""Every supported format, opened in one long-lived session per client: diagnostics and an estimate,
never an internal error."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest
from lsp_editor import CORPUS, EXAMPLES, FIXTURES, Editor
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _documents() -> list[Path]:
    """Every example, two configs of each corpus family, every Python/shell/Markdown fixture."""
    files = sorted(p for p in EXAMPLES.iterdir() if p.is_file())
    families = CORPUS.iterdir() if CORPUS.is_dir() else ()  # a plain clone has no ../shared
    for family in sorted(p for p in families if p.is_dir()):
        files += sorted(p for p in family.iterdir() if p.suffix in (".yaml", ".yml", ".json"))[:2]
    if FIXTURES.is_dir():
        files += sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".py", ".sh", ".md"))
    return files


DOCUMENTS = _documents()


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
async def test_every_format_gets_diagnostics_and_an_estimate(editor: Editor, path: Path):
    uri = editor.open(path)
    diagnostics = await editor.diagnostics(uri)
    assert all(d.source == "vramlens" and re.fullmatch(r"VL\d{3}", str(d.code)) for d in diagnostics)
    for d in diagnostics:  # the rule's page, which the editor opens from the code
        page = Path(url2pathname(urlparse(d.code_description.href).path))
        assert page.is_file() and page.name == f"{d.code}.md", d.code_description.href
    assert not any("internal error" in d.message for d in diagnostics), [d.message for d in diagnostics]
    codes = {d.code for d in diagnostics}
    estimates = [e for e in editor.client.estimates if e["uri"] == uri and "peak" in e]
    if estimates:
        est = estimates[-1]
        assert est["fits"] == ("VL001" not in codes)
        assert abs(sum(est["components_gib"].values()) - est["peak"]["device_gib"]) < 0.1


async def test_a_merge_config_gets_a_note_and_no_estimate(editor: Editor):
    """A LLaMA-Factory merge/export config names a model and looks like a config, but trains nothing: an
    information note (VL018), no estimate, never a predicted out-of-memory error."""
    uri = editor.open(FIXTURES / "not_training" / "llamafactory_merge_lora.yaml")
    diagnostics = await editor.diagnostics(uri)
    assert [(d.code, d.severity) for d in diagnostics] == [("VL018", types.DiagnosticSeverity.Information)]
    assert "not a training run" in diagnostics[0].message
    sent = await editor.estimate_notification(uri)
    assert "peak" not in sent
