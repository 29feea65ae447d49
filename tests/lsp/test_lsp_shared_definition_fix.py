"""In the editor, a fix that would change a YAML anchor another setting also uses is not offered as an edit: it is
offered disabled with the reason (a client that shows disabled actions) or not at all, and no action edits the
anchor's line. A merged section gets its override instead (the anchor stays as it was)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lsp_editor import Editor, edits_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

SHARED_BATCH = """# vramlens: gpu=A100-80GB
model_name_or_path: mistralai/Mistral-7B-v0.1
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: &bs 32
per_device_eval_batch_size: *bs
max_length: 4096
output_dir: out
"""
ANCHOR_LINE = 4

MERGED = """# vramlens: gpu=A100-80GB
defaults: &d
  per_device_train_batch_size: 32
  max_length: 4096
eval_defaults:
  <<: *d
model_name_or_path: mistralai/Mistral-7B-v0.1
<<: *d
torch_dtype: bfloat16
bf16: true
output_dir: out
"""


def _inserts_a_line_before(e) -> bool:
    return e.range.start == e.range.end and e.range.start.character == 0 and e.new_text.endswith("\n")


async def _actions(editor: Editor, tmp_path: Path, text: str):
    path = tmp_path / "sft.yaml"
    path.write_text(text, encoding="utf-8")
    uri = editor.open(path)
    diagnostics = await editor.diagnostics(uri)
    assert "VL001" in {d.code for d in diagnostics}, [d.code for d in diagnostics]
    return uri, await editor.code_actions(uri, diagnostics)


async def test_a_fix_of_a_shared_scalar_anchor_is_disabled_with_the_reason(editor: Editor, tmp_path: Path):
    uri, actions = await _actions(editor, tmp_path, SHARED_BATCH)
    for a in actions:
        for es in (edits_of(a.edit) if a.edit is not None else {}).values():
            # a new line inserted before the anchor's leaves it as it is; nothing may change the anchor's line itself
            assert all(e.range.start.line != ANCHOR_LINE or _inserts_a_line_before(e) for e in es), (a.title, es)
    micro = [a for a in actions if "micro-batch" in a.title]
    caps = editor.client.capabilities.text_document
    shows_disabled = bool(caps and caps.code_action and caps.code_action.disabled_support)
    assert bool(micro) == shows_disabled, [a.title for a in actions]  # offered disabled, or not at all
    for a in micro:
        assert a.edit is None and a.disabled is not None and "`&bs`" in a.disabled.reason, (a.title, a.disabled)


async def test_a_merged_section_gets_an_override_and_the_anchor_stays(editor: Editor, tmp_path: Path):
    uri, actions = await _actions(editor, tmp_path, MERGED)
    fit = next(a for a in actions if "Make it fit" in a.title and "micro-batch" in a.title and a.edit is not None)
    editor.apply(fit.edit)
    data = yaml.safe_load(editor.texts[uri])
    assert data["defaults"]["per_device_train_batch_size"] == 32
    assert data["eval_defaults"]["per_device_train_batch_size"] == 32
    assert data["per_device_train_batch_size"] < 32
    assert "VL001" not in {d.code for d in await editor.diagnostics(uri)}
