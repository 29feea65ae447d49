"""Files read from disk: the CLI walks only regular files and never blocks; a project file linked out of its
folder is not read; what is read is the file that was checked (open first, then check the opened file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens import file_access

ROOT = Path(__file__).resolve().parents[2]
OOM_EXAMPLE = ROOT / "examples" / "llama3-8b-full-adamw-a100-40gb.yaml"
NO_GPU_CONFIG = "\n".join(line for line in OOM_EXAMPLE.read_text().splitlines() if "vramlens:" not in line) + "\n"


def _cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.PIPE,
    )


@pytest.mark.parametrize("command", ["check", "estimate"])
def test_walking_a_folder_passes_over_devices_fifos_and_stdin(tmp_path, command):
    (tmp_path / "train.yaml").write_text(NO_GPU_CONFIG)
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "stdin.yaml").symlink_to("/dev/stdin")
    os.mkfifo(tmp_path / "fifo.yaml")
    out = _cli(command, str(tmp_path), cwd=tmp_path)  # before: MemoryError on /dev/zero, or a hang on the FIFO
    assert "MemoryError" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert "train.yaml" in out.stdout
    assert "zero.yaml" not in out.stdout and "fifo.yaml" not in out.stdout


def test_a_fifo_named_on_the_command_line_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")
    out = _cli("check", str(tmp_path / "fifo.yaml"), cwd=tmp_path, timeout=30)
    assert out.returncode == 2 and "not a regular file" in out.stdout + out.stderr


def test_a_project_file_linked_outside_its_folder_is_not_read(tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    (repo / "train.yaml").write_text(NO_GPU_CONFIG)
    (outside / "settings.toml").write_text('gpu = "T4"\n')

    def gpu() -> str:
        out = _cli("estimate", "train.yaml", "--format", "json", cwd=repo)
        result = json.loads(out.stdout)
        return (result[0] if isinstance(result, list) else result)["gpu"]["name"]

    (repo / ".vramlens.toml").write_text('gpu = "T4"\n')
    assert gpu() == "T4"  # a project file of its own is read
    (repo / ".vramlens.toml").unlink()
    (repo / ".vramlens.toml").symlink_to(outside / "settings.toml")
    out = _cli("estimate", "train.yaml", "--format", "json", cwd=repo)
    assert out.returncode == 2 and "T4" not in out.stdout  # not read, and the command says so
    assert ".vramlens.toml" in out.stderr and "not read" in out.stderr, out.stderr


def test_the_file_read_is_the_file_checked(tmp_path):
    """A link checked while it led into the workspace and swapped to lead out before the read: the opened
    file is not the checked one, so nothing is read."""
    workspace, outside = tmp_path / "ws", tmp_path / "secret"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 4}')
    (outside / "ds.json").write_text('{"secret": 1}')
    link = workspace / "link.json"
    link.symlink_to(workspace / "ds.json")
    checked = link.resolve()
    assert file_access.read_text_checked(link, 1000, expect=checked).startswith('{"train')
    link.unlink()
    link.symlink_to(outside / "ds.json")  # swapped after the check
    with pytest.raises(file_access.NotReadable):
        file_access.read_text_checked(link, 1000, expect=checked)
    with pytest.raises(file_access.NotReadable):
        file_access.read_text_checked(link, 1000, roots=[workspace.resolve()])
    big = workspace / "big.json"
    big.write_bytes(b" " * 2000)
    with pytest.raises(file_access.NotReadable):
        file_access.read_text_checked(big, 1000)


def _swap_to_outside(folder: Path, outside: Path) -> None:
    """`folder` (a real folder) becomes a link to `outside`, as a repository could make it between two steps."""
    folder.rename(folder.with_name("was-" + folder.name))
    folder.symlink_to(outside, target_is_directory=True)


@pytest.mark.parametrize("how", ["find then read", "expect", "model folder"])
def test_a_folder_swapped_for_a_link_after_the_check_is_not_read_through(tmp_path, how):
    """The check passed on `ws/sub/…` while `sub` was a folder; `sub` then became a link out. What was
    opened is outside, so nothing is read — whichever way the file was found (a reference, a model folder) or
    checked (the resolved path, `expect`)."""
    from types import SimpleNamespace

    from vramlens.formats import references
    from vramlens.knowledge import models

    ws, outside = tmp_path / "ws", tmp_path / "secret"
    for folder, body in ((ws / "sub", '{"gradient_accumulation_steps": 3}'), (outside, '{"secret": 1}')):
        folder.mkdir(parents=True)
        (folder / "ds.json").write_text(body)
        (folder / "config.json").write_text(
            json.dumps(
                {
                    "model_type": "llama",
                    "hidden_size": 64,
                    "num_attention_heads": 4,
                    "num_hidden_layers": 2,
                    "intermediate_size": 128,
                    "vocab_size": 1000,
                    "secret": folder == outside,
                }
            )
        )
    doc = str(ws / "train.yaml")
    if how == "find then read":
        found, refused = references.find("sub/ds.json", doc, ws)
        assert found is not None and not refused
        _swap_to_outside(ws / "sub", outside)
        assert references._read(found, SimpleNamespace(read_file=None, workspace=ws, path=doc)) is None
    elif how == "expect":
        checked = (ws / "sub" / "ds.json").resolve()
        _swap_to_outside(ws / "sub", outside)
        with pytest.raises(file_access.NotReadable):
            file_access.read_text_checked(checked, 1000, expect=checked)
    else:
        config, roots = models._local_config("sub", ws)
        _swap_to_outside(ws / "sub", outside)
        assert (
            models.read_config_file(config, roots)
            == f"it could not be read ({config}: leads outside the folders that may be read)"
        )
