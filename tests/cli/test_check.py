"""`vramlens check` as CI and pre-commit run it: a subprocess, its output and its exit code."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

OOM = """
model_name_or_path: meta-llama/Meta-Llama-3-8B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: 4
gradient_accumulation_steps: 8
max_length: 2048
optim: adamw_torch
output_dir: out
"""

FITS = """
model_name_or_path: Qwen/Qwen2.5-0.5B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: 2
gradient_accumulation_steps: 4
gradient_checkpointing: true
max_length: 1024
output_dir: out
env:
  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True
"""


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "check", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def test_a_config_that_fits_passes(tmp_path):
    write(tmp_path, "ok.yaml", FITS)
    r = check("ok.yaml", "--gpu", "A100-40GB", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok.yaml: peak" in r.stdout and "fits" in r.stdout
    assert "0 error(s)" in r.stdout


def test_a_predicted_oom_fails_with_its_line_and_fixes(tmp_path):
    write(tmp_path, "oom.yaml", OOM)
    r = check("oom.yaml", "--gpu", "A100-40GB", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "oom.yaml:7:1: error VL001 [predicted-oom] Predicted peak" in r.stdout  # line 7 is `optim:`
    assert "fix: Make it fit" in r.stdout


def test_severity_off_and_overrides(tmp_path):
    write(tmp_path, "oom.yaml", OOM)
    r = check("oom.yaml", "--gpu", "A100-40GB", "--severity", "VL001=warning,VL004=off", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning VL001" in r.stdout and "VL004" not in r.stdout


def test_project_settings_apply_and_flags_win(tmp_path):
    write(tmp_path, "oom.yaml", OOM)
    write(tmp_path, ".vramlens.toml", 'gpu = "A100-40GB"\n[severity]\nVL001 = "warning"\n')
    r = check("oom.yaml", cwd=tmp_path)
    assert r.returncode == 0 and "A100-40GB" in r.stdout and "warning VL001" in r.stdout
    r = check("oom.yaml", "--severity", "VL001=error", cwd=tmp_path)
    assert r.returncode == 1


def test_usage_errors_exit_2(tmp_path):
    assert check("missing.yaml", cwd=tmp_path).returncode == 2
    write(tmp_path, "ok.yaml", FITS)
    bad = check("ok.yaml", "--severity", "VL001=loud", cwd=tmp_path)
    assert bad.returncode == 2 and "--severity" in bad.stderr
    assert (
        subprocess.run(
            [sys.executable, "-m", "vramlens", "check"], cwd=tmp_path, capture_output=True, timeout=60
        ).returncode
        == 2
    )


def test_an_unreadable_config_named_on_the_command_line_exits_2(tmp_path):
    write(tmp_path, "broken.yaml", "model_name_or_path: x\nper_device_train_batch_size: [1\n")
    r = check("broken.yaml", cwd=tmp_path)
    assert r.returncode == 2
    assert "VL016" in r.stdout


def test_folders_are_walked_and_non_configs_skipped(tmp_path):
    write(tmp_path, "configs/oom.yaml", OOM)
    write(tmp_path, "configs/ok.yml", FITS)
    write(tmp_path, "configs/notes.md", "# Notes\n\nNothing to train here.\n")
    write(tmp_path, "configs/ci.yaml", "jobs:\n  test:\n    runs-on: ubuntu-latest\n")
    write(tmp_path, "configs/helm.yaml", "name: {{ .Values.name }\n")  # broken, but not ours
    write(tmp_path, "configs/node_modules/pkg/oom.yaml", OOM)
    write(tmp_path, "configs/.git/oom.yaml", OOM)
    r = check("configs", "--gpu", "A100-40GB", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "configs/oom.yaml:7:1: error VL001" in r.stdout
    assert "node_modules" not in r.stdout and ".git" not in r.stdout
    assert "ci.yaml" not in r.stdout and "helm.yaml" not in r.stdout and "notes.md" not in r.stdout
    verbose = check("configs", "--gpu", "A100-40GB", "-v", cwd=tmp_path)
    assert "ci.yaml: skipped: not a training config" in verbose.stdout
    assert "helm.yaml: skipped" in verbose.stdout


def test_json_output(tmp_path):
    write(tmp_path, "oom.yaml", OOM)
    write(tmp_path, "ok.yaml", FITS)
    r = check("oom.yaml", "ok.yaml", "--gpu", "A100-40GB", "--format", "json", cwd=tmp_path)
    assert r.returncode == 1
    data = json.loads(r.stdout)
    files = {Path(f["path"]).name: f for f in data["files"]}
    oom = files["oom.yaml"]
    assert oom["estimate"]["fits"] is False and oom["estimate"]["gpu"]["name"] == "A100-40GB"
    first = next(f for f in oom["findings"] if f["rule"] == "VL001")
    assert first["severity"] == "error" and first["start"] == {"line": 7, "column": 1}
    assert first["fixes"][0]["id"] == "make-it-fit" and first["fixes"][0]["peak_gib"] < 39.5 * 0.9
    assert files["ok.yaml"]["estimate"]["fits"] is True
    assert {f["severity"] for f in files["ok.yaml"]["findings"]} <= {"information"}  # at most VL003
    assert data["summary"]["error"] >= 1 and data["summary"]["files_checked"] == 2
