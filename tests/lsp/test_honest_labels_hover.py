"""The editor's hover says what the command line says about where values came from: a GPU read from a comment is
an assumption named as such (a file name in a comment names none), the defaults carry the objective's own config
class, a plain Trainer script's sequence length is an assumption, bf16 on a GPU without it is emulated, and a
GPU's usable memory reads as the CLI's."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from lsp_editor import FIXTURES, Editor
from lsprotocol import types

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
LABELS = FIXTURES / "labels"


def cli_json(path, *flags: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(path), "--format", "json", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


async def budget_hover(editor: Editor, path, needle: str) -> str:
    uri = editor.open(path)
    await editor.estimate(uri)
    pos = editor.position_of(uri, needle)
    hover = await editor.hover(uri, pos.line, pos.character)
    assert hover is not None, needle
    value = hover.contents.value if isinstance(hover.contents, types.MarkupContent) else str(hover.contents)
    return re.sub(r"\\(.)", r"\1", value).replace("`", "").replace("**", "")


@IN_MODULE_LOOP
async def test_a_gpu_from_a_comment_is_named_as_an_assumption_in_the_hover(editor: Editor):
    said = cli_json(LABELS / "prose_comment.yaml")["gpu"]["assumption"].replace("`", "")
    text = await budget_hover(editor, LABELS / "prose_comment.yaml", "model_name_or_path")
    assert "on L4" in text and f"L4 is assumed: {said}." in text, text
    assert "no GPU named" not in text

    text = await budget_hover(editor, LABELS / "file_name_comment.yaml", "model_name_or_path")
    assert "A100-80GB is assumed: no GPU named" in text and "T4" not in text, text


@IN_MODULE_LOOP
async def test_the_hover_names_the_objective_s_config_class(editor: Editor):
    text = await budget_hover(editor, FIXTURES / "objectives" / "trl_dpo_peft.yaml", "model_name_or_path")
    assert "defaults of TRL 1.x (DPOConfig/ModelConfig)" in text and "SFTConfig" not in text, text


@IN_MODULE_LOOP
async def test_a_plain_trainer_script_s_sequence_length_is_an_assumption_in_the_hover(editor: Editor):
    text = await budget_hover(editor, LABELS / "plain_trainer.py", "Qwen/Qwen2.5")
    assert "no sequence-length setting (the script's tokenization decides): assumed 2048 tokens" in text, text
    assert "sequence length 2048" not in text.split("assumptions:")[0], text


@IN_MODULE_LOOP
async def test_bf16_on_a_t4_reads_as_emulated_and_the_usable_memory_as_the_cli_s(editor: Editor):
    text = await budget_hover(editor, LABELS / "t4_qlora.py", "bf16=True")
    assert "compute dtype: bf16 (emulated)" in text and "PyTorch emulates it" in text, text
    text = await budget_hover(editor, LABELS / "t4_qlora.py", "Qwen/Qwen2.5")
    assert "of 14.6 GiB usable on T4" in text, text
    path = FIXTURES / "objectives" / "trl_dpo_peft.yaml"
    uri = editor.open(path)
    await editor.estimate(uri)
    text = await budget_hover(editor, path, "model_name_or_path")
    assert "GiB of 79.2 GiB usable on A100-80GB" in text and "79.1" not in text, text
