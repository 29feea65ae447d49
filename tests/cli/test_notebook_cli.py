"""`vramlens check` and `estimate` on Jupyter notebooks: positions in cells, SARIF regions in the .ipynb file,
a folder walk that finds notebooks, and `--fix` that leaves them alone."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "notebooks"
COLAB = "unsloth_llama3_1_8b_colab.ipynb"


def vramlens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramlens", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd)


def test_check_text_names_the_cell(tmp_path: Path):
    shutil.copy(FIXTURES / COLAB, tmp_path / COLAB)
    out = vramlens("check", str(tmp_path), "--gpu", "T4")
    assert out.returncode == 1, out.stderr
    assert f"{tmp_path / COLAB}:cell 3:8:5: error VL001" in out.stdout      # the folder walk found the notebook
    assert f"{tmp_path / COLAB}:cell 6:19:16: warning VL015" in out.stdout


def test_check_sarif_regions_are_positions_in_the_ipynb_file():
    path = FIXTURES / COLAB
    out = vramlens("check", str(path), "--gpu", "T4", "--format", "sarif")
    lines = path.read_text(encoding="utf-8").split("\n")
    results = json.loads(out.stdout)["runs"][0]["results"]
    oom = next(r for r in results if r["ruleId"] == "VL001")
    region = oom["locations"][0]["physicalLocation"]["region"]
    assert lines[region["startLine"] - 1][region["startColumn"] - 1:].startswith('model_name = \\"unsloth/')
    assert oom["properties"] == {"notebookCell": 3, "cellLine": 8, "cellColumn": 5}


def test_fix_does_not_write_notebooks(tmp_path: Path):
    path = tmp_path / "bang.ipynb"
    shutil.copy(FIXTURES / "bang_command.ipynb", path)
    before = path.read_bytes()
    out = vramlens("check", str(path), "--gpu", "T4", "--fix")
    assert "not fixed: --fix does not write notebooks" in out.stdout
    assert path.read_bytes() == before


def test_estimate_reads_a_notebook():
    out = vramlens("estimate", str(FIXTURES / COLAB), "--gpu", "T4", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["format"] == "notebook" and data["model"]["id"] == "unsloth/Meta-Llama-3.1-8B"
