"""`vramlens check --fix` writes "make it fit" and the safe quick fixes into the file, which then passes."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vramlens.formats import parse_document
from vramlens.plan import IssueKind

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3-8b-full-adamw-a100-40gb.yaml"

pytest.importorskip("vramlens.formats.render", reason="fixes need formats.render to write edits")


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramlens", "check", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_fix_makes_the_oom_example_pass(tmp_path):
    config = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, config)
    before = config.read_text(encoding="utf-8")
    assert check(config.name, "--gpu", "A100-40GB", cwd=tmp_path).returncode == 1

    fixed = check(config.name, "--gpu", "A100-40GB", "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "fixed: Make it fit" in fixed.stdout
    after = config.read_text(encoding="utf-8")
    assert after != before
    # comments and untouched settings survive
    assert "# Full fine-tune of Llama-3-8B" in after and "learning_rate: 2.0e-05" in after

    again = check(config.name, "--gpu", "A100-40GB", cwd=tmp_path)
    assert again.returncode == 0, again.stdout
    parsed = parse_document(after, str(config))
    assert parsed.plan is not None and not [i for i in parsed.issues if i.kind == IssueKind.UNREADABLE]


def test_fix_leaves_a_config_that_already_passes_alone(tmp_path):
    config = tmp_path / "ok.yaml"
    text = ("model_name_or_path: Qwen/Qwen2.5-0.5B\ntorch_dtype: bfloat16\nbf16: true\n"
            "per_device_train_batch_size: 1\nmax_length: 512\noutput_dir: out\n"
            "env:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n")
    config.write_text(text, encoding="utf-8")
    r = check("ok.yaml", "--fix", cwd=tmp_path)
    assert r.returncode == 0 and config.read_text(encoding="utf-8") == text
