"""A fix for a file the document names (a TRL YAML's `deepspeed: ds.json`) edits that file's URI in the
workspace edit, not the document (in the editor)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lsp_editor import edits_of, start
from pytest_lsp import LanguageClient


@pytest.mark.parametrize("profile", ["visual-studio-code", "neovim"])
async def test_an_edit_for_the_deepspeed_json_names_the_json(bare_client: LanguageClient, tmp_path: Path, profile: str):
    """The micro-batch of the TRL YAML lives in its ds.json: the workspace edit of "make it fit" edits ds.json
    and writes nothing of the JSON's change into the YAML."""
    editor = await start(bare_client, profile, tmp_path, initialization_options={"trusted": True})
    config, ds = tmp_path / "train.yaml", tmp_path / "ds.json"
    yaml_text = (
        "# vramlens: gpu=L4\nmodel_name_or_path: mistralai/Mistral-7B-v0.1\nuse_peft: true\n"
        "torch_dtype: bfloat16\nbf16: true\nmax_length: 4096\ndeepspeed: ds.json\noutput_dir: out\n"
    )
    config.write_text(yaml_text, encoding="utf-8")
    ds.write_text(
        '{\n  "train_micro_batch_size_per_gpu": 16,\n  "gradient_accumulation_steps": 1\n}\n', encoding="utf-8"
    )
    uri = editor.open(config)
    diagnostics = await editor.diagnostics(uri)
    assert "VL001" in {d.code for d in diagnostics}, [d.message for d in diagnostics]
    actions = await editor.code_actions(uri, diagnostics)
    fit = next(a for a in actions if "Make it fit" in a.title and a.data["applicability"] == "safe")
    assert "from 16 to 2" in fit.title, fit.title
    edits = edits_of(fit.edit)
    ds_uri = ds.resolve().as_uri()
    assert ds_uri in edits, list(edits)
    assert all("batch" not in e.new_text and not e.new_text.strip().isdigit() for e in edits.get(uri, [])), edits
    assert editor.open(ds) == ds_uri
    editor.apply(fit.edit)
    data = json.loads(editor.texts[ds_uri])
    assert (data["train_micro_batch_size_per_gpu"], data["gradient_accumulation_steps"]) == (2, 8)
    assert editor.texts[uri].startswith(yaml_text)
