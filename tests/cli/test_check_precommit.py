"""The pre-commit hook runs `vramlens check` on the staged config files pre-commit passes it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_hook_definition_runs_check_on_configs(tmp_path):
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "vramlens-check" and hook["language"] == "python"
    files = re.compile(hook["files"])
    assert files.search("configs/train.yaml") and files.search("ds.json") and files.search("launch.sh")
    assert files.search("train_configs/llama3_8b.toml") and files.search("finetune.ipynb")
    assert not files.search("README.txt") and not files.search("model.safetensors")

    (tmp_path / "oom.yaml").write_text(
        "model_name_or_path: meta-llama/Meta-Llama-3-8B\ntorch_dtype: bfloat16\nbf16: true\n"
        "per_device_train_batch_size: 4\nmax_length: 2048\noptim: adamw_torch\noutput_dir: out\n",
        encoding="utf-8",
    )
    (tmp_path / "notes.md").write_text("# notes\n", encoding="utf-8")
    entry = shlex.split(hook["entry"])
    assert entry[0] == "vramlens"
    cmd = [
        sys.executable,
        "-m",
        "vramlens",
        *entry[1:],
        *hook.get("args", []),
        "--gpu",
        "A100-40GB",
        "oom.yaml",
        "notes.md",
    ]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "VL001" in r.stdout
