"""The command line's settings as a user meets them: the project file and the flags go through one
validation (the server's), a refused value names the file or flag, the key and what is allowed and exits 2;
`trace` and `probe` read the same project settings as `estimate`; an assumed GPU is said so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n"


def vramlens(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.yaml").write_text(CONFIG)
    return tmp_path


BAD_FILES = {
    "negative headroom": ("headroom = -3\n", "`headroom` = -3", "0 to 0.9"),
    "infinite headroom": ("headroom = inf\n", "`headroom` = inf", "finite"),
    "huge gpu count": ("gpu-count = 1e9\n", "`gpu-count` = 1000000000.0", "1 to 65536"),
    "gpu as a number": ("gpu = 40\n", "`gpu` = 40", "GPU name"),
    "bad severity": ('[severity]\nVL004 = "loud"\n', "`severity.VL004`", "error, warning, information, hint, off"),
    "not TOML": ('gpu = "A10G\n', "not valid TOML", ""),
}


@pytest.mark.parametrize("command", ["estimate", "check", "trace", "probe"])
@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_a_bad_project_value_names_file_key_and_allowed_values_exit_2(project: Path, command: str, case: str):
    text, key, allowed = BAD_FILES[case]
    (project / ".vramlens.toml").write_text(text)
    out = vramlens(command, "train.yaml", cwd=project)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert ".vramlens.toml" in out.stderr and key in out.stderr and allowed in out.stderr, out.stderr


def test_the_same_values_in_pyproject_are_refused_too(project: Path):
    (project / "pyproject.toml").write_text("[tool.vramlens]\nheadroom = 2.5\n")
    out = vramlens("check", "train.yaml", cwd=project)
    assert out.returncode == 2 and "pyproject.toml" in out.stderr and "`headroom` = 2.5" in out.stderr


@pytest.mark.parametrize(
    "flags, shown",
    [
        (["--headroom", "-3"], "`--headroom` = -3"),
        (["--headroom", "inf"], "`--headroom` = inf"),
        (["--headroom", "nan"], "`--headroom` = nan"),
        (["--num-gpus", "1000000000"], "`--num-gpus` = 1000000000"),
        (["--num-gpus", "0"], "`--num-gpus` = 0"),
    ],
)
@pytest.mark.parametrize("command", ["estimate", "check", "trace"])
def test_flags_are_validated_like_the_server_validates_settings(project: Path, command: str, flags, shown):
    out = vramlens(command, "train.yaml", *flags, cwd=project)
    assert out.returncode == 2 and shown in out.stderr and "allowed" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_trace_and_probe_read_the_project_file_like_estimate(project: Path):
    """A project's settings reach every command: an unknown GPU there stops trace and probe as it stops
    estimate (before, trace and probe ignored `.vramlens.toml`)."""
    (project / ".vramlens.toml").write_text('gpu = "NoSuchGPU-1"\n')
    for command in ("estimate", "trace", "probe"):
        out = vramlens(command, "train.yaml", cwd=project)
        assert out.returncode == 2 and "unknown GPU `NoSuchGPU-1`" in out.stderr, (command, out.stderr)


def test_no_gpu_named_says_which_was_assumed_and_how_to_choose(project: Path):
    text = vramlens("estimate", "train.yaml", cwd=project)
    assert text.returncode == 0
    assert "assumed: no GPU named" in text.stdout and "--gpu" in text.stdout and "# vramlens: gpu=" in text.stdout
    data = json.loads(vramlens("estimate", "train.yaml", "--format", "json", cwd=project).stdout)
    assert data["gpu"]["name"] == "A100-80GB" and data["gpu"]["assumed"] is True
    check = vramlens("check", "train.yaml", cwd=project)
    assert "assumed: no GPU named" in check.stdout and "--gpu" in check.stdout
    checked = json.loads(vramlens("check", "train.yaml", "--format", "json", cwd=project).stdout)
    assert checked["files"][0]["estimate"]["gpu"]["assumed"] is True


@pytest.mark.parametrize("how", ["flag", "project file", "comment"])
def test_a_named_gpu_is_not_assumed(project: Path, how: str):
    args = ["estimate", "train.yaml", "--format", "json"]
    if how == "flag":
        args.append("--gpu=T4")
    elif how == "project file":
        (project / ".vramlens.toml").write_text('gpu = "T4"\n')
    else:
        (project / "train.yaml").write_text("# vramlens: gpu=T4\n" + CONFIG)
    data = json.loads(vramlens(*args, cwd=project).stdout)
    assert data["gpu"] == {**data["gpu"], "name": "T4", "assumed": False}
    assert "assumed: no GPU named" not in vramlens("estimate", "train.yaml", *args[3:], cwd=project).stdout
