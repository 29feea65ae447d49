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
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args], capture_output=True, text=True, timeout=180, cwd=cwd
    )


def oom_notebook(folder: Path) -> Path:
    """The Colab notebook (which fits a T4 as published) with a micro-batch of 32 instead of 2: no longer fits."""
    path = folder / COLAB
    text = (FIXTURES / COLAB).read_text(encoding="utf-8")
    assert text.count("per_device_train_batch_size = 2,") == 1
    path.write_text(
        text.replace("per_device_train_batch_size = 2,", "per_device_train_batch_size = 32,"), encoding="utf-8"
    )
    return path


def test_the_published_colab_notebook_fits_a_t4():
    out = vramlens("check", str(FIXTURES / COLAB), "--gpu", "T4")
    assert out.returncode == 0 and "fits" in out.stdout and "VL001" not in out.stdout, out.stdout


def test_check_text_names_the_cell(tmp_path: Path):
    oom_notebook(tmp_path)
    out = vramlens("check", str(tmp_path), "--gpu", "T4")
    assert out.returncode == 1, out.stderr
    assert f"{tmp_path / COLAB}:cell 6:13:9: error VL001" in out.stdout  # the folder walk found the notebook
    assert f"{tmp_path / COLAB}:cell 6:19:16: information VL021" in out.stdout


def test_check_sarif_regions_are_positions_in_the_ipynb_file(tmp_path: Path):
    path = oom_notebook(tmp_path)
    out = vramlens("check", str(path), "--gpu", "T4", "--format", "sarif")
    lines = path.read_text(encoding="utf-8").split("\n")
    results = json.loads(out.stdout)["runs"][0]["results"]
    oom = next(r for r in results if r["ruleId"] == "VL001")
    region = oom["locations"][0]["physicalLocation"]["region"]
    assert lines[region["startLine"] - 1][region["startColumn"] - 1 :].startswith("per_device_train_batch_size = 32")
    assert oom["properties"] == {"notebookCell": 6, "cellLine": 13, "cellColumn": 9}


def test_fix_rewrites_only_the_changed_cell_lines(tmp_path: Path):
    path = tmp_path / "bang.ipynb"
    shutil.copy(FIXTURES / "bang_command.ipynb", path)
    before = path.read_text(encoding="utf-8").split("\n")
    out = vramlens("check", str(path), "--gpu", "T4", "--fix")
    assert "fixed: Make it fit" in out.stdout, out.stdout
    after = path.read_text(encoding="utf-8").split("\n")
    added = [line for line in after if line not in before]
    assert [line for line in before if line not in after] == [
        '    "    --per_device_train_batch_size 64 --gradient_accumulation_steps 1 \\\\\\n",'
    ]
    assert '    "    --per_device_train_batch_size 8 --gradient_accumulation_steps 8 \\\\\\n",' in added
    # the allocator setting becomes `%env` (each `!` runs its own shell: an `export` would be lost)
    assert '    "%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\\n",' in added and len(added) == 2
    json.loads("\n".join(after))  # still a notebook
    again = vramlens("check", str(path), "--gpu", "T4")
    assert "error VL001" not in again.stdout


def test_fix_leaves_a_notebook_whose_layout_it_cannot_keep(tmp_path: Path):
    path = tmp_path / "odd.ipynb"
    data = json.loads((FIXTURES / "bang_command.ipynb").read_text(encoding="utf-8"))
    path.write_text(json.dumps(data, indent=3).replace("\n", "\r\n"), encoding="utf-8")
    before = path.read_bytes()
    out = vramlens("check", str(path), "--gpu", "T4", "--fix")
    assert "not written: odd.ipynb's JSON layout could not be kept" in out.stdout, out.stdout
    assert path.read_bytes() == before


def test_estimate_reads_a_notebook():
    out = vramlens("estimate", str(FIXTURES / COLAB), "--gpu", "T4", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["format"] == "notebook" and data["model"]["id"] == "unsloth/Meta-Llama-3.1-8B"
