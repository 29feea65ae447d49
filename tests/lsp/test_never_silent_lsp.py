"""The editor names what the estimate does not model and says when it is approximate, as the command line does:
a VL024 warning on each unmodelled setting, "≈" and the reasons in the hover and the code lens, `approximate` in the
`vramlens/estimate` notification."""

from __future__ import annotations

import re

import pytest
from lsp_editor import FIXTURES, Editor
from lsprotocol import types

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
NEVER_SILENT = FIXTURES / "never_silent"


def plain_text(hover: types.Hover) -> str:
    value = hover.contents.value if isinstance(hover.contents, types.MarkupContent) else str(hover.contents)
    return re.sub(r"\\(.)", r"\1", value).replace("`", "").replace("**", "")


@IN_MODULE_LOOP
@pytest.mark.parametrize(
    "fixture,lines,model_needle",
    [
        # Liger's RMSNorm and SwiGLU are modelled from Liger's source: one approximate reason, no warning
        ("axolotl_kernels.yaml", {"tiled_mlp": 9, "lora_qkv_kernel": 11}, "base_model"),
        ("hf_liger.yaml", {}, "model_name_or_path"),
    ],
)
async def test_unmodelled_settings_are_warned_and_the_estimate_is_approximate(
    editor: Editor, fixture, lines, model_needle
):
    path = NEVER_SILENT / fixture
    uri = editor.open(path)
    sent = await editor.estimate(uri)
    liger = [r for r in sent["approximate_reasons"] if r.startswith("Liger kernels' saved tensors read from")]
    assert sent["approximate"] is True and len(liger) == 1, sent
    assert len(sent["approximate_reasons"]) == len(lines) + len(liger), sent
    diagnostics = [d for d in await editor.diagnostics(uri) if d.code == "VL024"]
    assert {d.range.start.line for d in diagnostics} == set(lines.values()), diagnostics
    for d in diagnostics:
        key = next(k for k, line in lines.items() if line == d.range.start.line)
        assert d.message.startswith(f"not modelled: {key} (") and " — estimated " in d.message, d.message
        assert d.severity == types.DiagnosticSeverity.Warning

    pos = editor.position_of(uri, model_needle)
    text = plain_text(await editor.hover(uri, pos.line, pos.character))
    assert "Peak ≈ " in text and "approximate:" in text, text
    for key in lines:
        assert f"not modelled: {key} (" in text, text

    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    titles = [lens.command.title for lens in lenses if lens.command is not None]
    assert any(t.startswith("vramlens: peak ≈ ") and "approximate" in t for t in titles), titles


@IN_MODULE_LOOP
async def test_a_fully_read_config_has_no_approximate_label_in_the_editor(editor: Editor):
    uri = editor.open(NEVER_SILENT / "exact.yaml")
    sent = await editor.estimate(uri)
    assert sent["approximate"] is False and sent["approximate_reasons"] == []
    assert not [d for d in await editor.diagnostics(uri) if d.code == "VL024"]
    pos = editor.position_of(uri, "model_name_or_path")
    text = plain_text(await editor.hover(uri, pos.line, pos.character))
    assert "Peak ≈" not in text and "approximate" not in text, text
