"""In the editor, a workspace whose TOML files (`.vramlens.toml`, `pyproject.toml`, `uv.lock`, `poetry.lock`) nest
thousands of levels deep or hold pins of the wrong type: every config is still analysed (an estimate and
diagnostics for each), with the settings those files would have set left out."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_editor import EXAMPLES, start
from pytest_lsp import LanguageClient

OOM_EXAMPLE = EXAMPLES / "llama3-8b-full-adamw-a100-40gb.yaml"
DEEP = "[" * 2_000 + "]" * 2_000
WORKSPACES = {
    "deep .vramlens.toml": {".vramlens.toml": f'gpu = "A10G"\nx = {DEEP}\n'},
    "deep dotted keys in .vramlens.toml": {".vramlens.toml": 'gpu = "A10G"\n' + "x" + ".x" * 2_000 + " = 1\n"},
    "deep pyproject.toml": {"pyproject.toml": f'[tool.vramlens]\ngpu = "A10G"\nx = {DEEP}\n'},
    "deep lock files": {"uv.lock": f"x = {DEEP}\n", "poetry.lock": "x = " + "{ a = " * 2_000 + "1" + "}" * 2_000},
    "malformed pins": {
        "pyproject.toml": "[project]\ndependencies = 5\noptional-dependencies = [1]\n",
        "environment.yml": "dependencies:\n  - pip: 5\n",
        "uv.lock": "package = 'x'\n",
    },
}


@pytest.mark.parametrize("case", list(WORKSPACES))
async def test_every_config_is_analysed_beside_hostile_toml(bare_client: LanguageClient, tmp_path: Path, case: str):
    for name, text in WORKSPACES[case].items():
        (tmp_path / name).write_text(text)
    config = tmp_path / "train.yaml"
    config.write_text(OOM_EXAMPLE.read_text().replace("# vramlens: gpu=A100-40GB\n", ""))
    nested = tmp_path / "team" / "train.yaml"
    nested.parent.mkdir()
    nested.write_text(OOM_EXAMPLE.read_text())
    editor = await start(bare_client, "visual-studio-code", tmp_path)
    for path in (config, nested):
        uri = editor.open(path)
        estimate = await editor.estimate(uri)
        assert estimate["gpu"]["name"] != "A10G"  # the refused file's setting is not used
        assert "VL001" in {d.code for d in await editor.diagnostics(uri)}  # the OOM example's finding
