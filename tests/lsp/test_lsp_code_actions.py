"""Code actions in a real session, as VS Code and Neovim ask for them: one action per distinct change, each title
saying what it does, each action saying whether it is a safe or an unsafe fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from lsp_editor import Editor, edits_of
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

# A new user's config: QLoRA Mistral-7B, batch 16 × 4096, bf16, on a T4.
QLORA_T4 = """# vramlens: gpu=T4
model_name_or_path: mistralai/Mistral-7B-v0.1
torch_dtype: bfloat16
load_in_4bit: true
use_peft: true
lora_r: 16
lora_alpha: 32
lora_target_modules: all-linear
bf16: true
per_device_train_batch_size: 16
max_length: 4096
output_dir: out
"""


def _change(action: types.CodeAction) -> str:
    """What an action does to the files, independent of its title."""
    edits = edits_of(action.edit) if action.edit is not None else {}
    return json.dumps(
        {
            uri: sorted(
                (e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character, e.new_text)
                for e in es
            )
            for uri, es in sorted(edits.items())
        }
    )


async def _all_actions(editor: Editor, tmp_path: Path) -> tuple[str, list[types.CodeAction]]:
    path = tmp_path / "qlora.yaml"
    path.write_text(QLORA_T4, encoding="utf-8")
    uri = editor.open(path)
    diagnostics = await editor.diagnostics(uri)
    assert {"VL001", "VL005"} <= {d.code for d in diagnostics}, [d.code for d in diagnostics]
    # Neovim's `vim.lsp.buf.code_action()` over the whole buffer: every diagnostic, no `only`
    return uri, await editor.code_actions(uri, diagnostics)


async def test_one_action_per_distinct_change_with_a_title_that_says_it(editor: Editor, tmp_path: Path):
    uri, actions = await _all_actions(editor, tmp_path)
    enabled = [a for a in actions if a.edit is not None]
    titles = [a.title for a in actions]
    assert len(set(map(_change, enabled))) == len(enabled), titles
    assert len(set(titles)) == len(titles), titles
    # the micro-batch trade alone makes it fit, a safe fix; a fastest plan that also takes Liger's kernels (another
    # package) is offered beside it as an unsafe fix, never instead of it
    fits = [a for a in actions if "Make it fit" in a.title]
    assert [a.title for a in fits if a.data["applicability"] == "safe" and "Liger" not in a.title], titles
    assert all(a.data["applicability"] == "unsafe" for a in fits if "Liger" in a.title), titles
    assert sum("PYTORCH_CUDA_ALLOC_CONF" in t for t in titles) == 1, titles
    assert not any(t.startswith("Halve") for t in titles), titles

    # the safe "make it fit" here is the micro-batch trade: its title names the old and new values, and it does that
    fit = next(a for a in fits if a.data["applicability"] == "safe")
    trade = re.search(r"micro-batch from 16 to (\d+) and raise gradient accumulation from 1 to (\d+)", fit.title)
    assert trade and int(trade[1]) < 16 and int(trade[1]) * int(trade[2]) == 16, fit.title  # same global batch
    original = editor.texts[uri]
    editor.apply(fit.edit)
    text = editor.texts[uri]
    assert f"per_device_train_batch_size: {trade[1]}\n" in text, text
    assert f"gradient_accumulation_steps: {trade[2]}\n" in text, text
    assert "VL001" not in {d.code for d in await editor.diagnostics(uri)}
    editor.replace_all(uri, original)


async def test_each_action_says_whether_it_is_a_safe_or_an_unsafe_fix(editor: Editor, tmp_path: Path):
    _, actions = await _all_actions(editor, tmp_path)
    for a in actions:
        assert isinstance(a.data, dict) and a.data.get("applicability") in ("safe", "unsafe"), (a.title, a.data)
        assert a.title.endswith("(unsafe fix)") == (a.data["applicability"] == "unsafe"), a.title
    by_title = {re.sub(r" → .*", "", a.title): a for a in actions}
    # one fix switches every bf16 setting of the file (weights and AMP) to fp16
    assert by_title["Use fp16 throughout: fp16 mixed precision, fp16 weights"].data["applicability"] == "unsafe"
    fits = [a for a in actions if "Make it fit" in a.title]
    assert [a.data["applicability"] for a in fits if "Liger" not in a.title] == ["safe"], [a.title for a in fits]
    assert all(a.data["applicability"] == "unsafe" for a in fits if "Liger" in a.title), [a.title for a in fits]
    # only a safe "make it fit" is a fix-all source action (which editors may apply on save)
    unsafe_fix_all = [a for a in actions if a.kind == "source.fixAll.vramlens" and a.data["applicability"] != "safe"]
    assert not unsafe_fix_all


async def test_only_fix_all_gets_the_safe_make_it_fit(editor: Editor, tmp_path: Path):
    path = tmp_path / "qlora.yaml"
    path.write_text(QLORA_T4, encoding="utf-8")
    uri = editor.open(path)
    diagnostics = await editor.diagnostics(uri)
    actions = await editor.code_actions(uri, diagnostics, only=["source.fixAll"])
    assert [a.kind for a in actions] == ["source.fixAll.vramlens"], [a.title for a in actions]
    assert actions[0].data["applicability"] == "safe" and "Make it fit" in actions[0].title
