"""The objective in the editor: the hovers and the estimate notification."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_editor import Editor

pytestmark = pytest.mark.asyncio(loop_scope="module")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "objectives"


async def hover_text(editor: Editor, uri: str, needle: str, offset: int) -> str:
    pos = editor.position_of(uri, needle, offset)
    hover = await editor.hover(uri, pos.line, pos.character)
    assert hover is not None, needle
    return hover.contents.value


async def test_hover_on_the_model_of_a_dpo_recipe_names_the_objective_and_the_reference(editor: Editor):
    uri = editor.open(
        FIXTURES / "trl_dpo_full.yaml",
        text="# vramlens: gpu=H100-80GB\n" + (FIXTURES / "trl_dpo_full.yaml").read_text(),
    )
    est = await editor.estimate(uri)
    assert est["objective"] == "dpo" and est["components_gib"]["reference"] == 14.96
    text = await hover_text(editor, uri, "meta-llama/Llama-3.1-8B-Instruct", 4)
    assert "objective: **dpo**" in text and "reference: a frozen copy" in text
    assert "reference model (frozen copy)" in text


async def test_hover_on_axolotl_rl_compares_the_run_with_the_same_step_as_sft(editor: Editor):
    uri = editor.open(FIXTURES / "axolotl_dpo.yaml")
    est = await editor.estimate(uri)
    assert est["objective"] == "dpo" and est["phase"] == "reference-forward"
    text = await hover_text(editor, uri, "rl:", 1)
    assert "training objective: `rl` = `dpo`" in text and "the PEFT base (adapters disabled)" in text
    assert "| the same step as SFT |" in text
