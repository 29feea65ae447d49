"""`vramlens check --fix` writes the files of its fixes all or none. Here the fix edits the config (the allocator
setting) and the DeepSpeed JSON it names (the micro-batch): when the JSON cannot be written — its folder is
read-only, the disk is full, it became a folder meanwhile — the config is left exactly as it was too, and the run
says which file and why (text and JSON) and exits 2."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = (
    "model_name_or_path: mistralai/Mistral-7B-v0.1\nuse_peft: true\ntorch_dtype: bfloat16\nbf16: true\n"
    "max_length: 4096\ndeepspeed: cfg/ds.json\noutput_dir: out\n"
)
DS_JSON = (
    '{\n  "train_micro_batch_size_per_gpu": 16,\n  "gradient_accumulation_steps": 1,\n'
    '  "zero_optimization": {"stage": 2}\n}\n'
)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "train.yaml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "cfg" / "ds.json").write_text(DS_JSON, encoding="utf-8")
    return tmp_path


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under `root` (temporary files included) with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def as_it_was(root: Path) -> bool:
    return files_of(root) == {"train.yaml": CONFIG.encode(), str(Path("cfg", "ds.json")): DS_JSON.encode()}


def check_fix(root: Path, fmt: str = "text") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "check", "train.yaml", "--gpu", "L4", "--fix", "--format", fmt],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_both_files_are_written_when_both_can_be(project):
    r = check_fix(project)
    assert r.returncode == 0 and "fixed 2 file(s)" in r.stdout, r.stdout + r.stderr
    assert json.loads((project / "cfg" / "ds.json").read_text())["train_micro_batch_size_per_gpu"] < 16
    assert "PYTORCH_CUDA_ALLOC_CONF" in (project / "train.yaml").read_text()
    assert sorted(files_of(project)) == ["cfg/ds.json", "train.yaml"]  # no temporary file left


def _read_only(folder: Path) -> bool:
    """Make `folder` refuse new files, as a read-only folder or mount does; False when this machine cannot (root
    ignores the mode bits; `chattr +i` needs a file system and capability that allow it)."""
    os.chmod(folder, 0o555)
    probe = folder / ".probe"
    try:
        probe.touch()
    except PermissionError:
        return True
    probe.unlink()
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return True
    os.chmod(folder, 0o755)
    return False


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_read_only_folder_for_the_second_file_leaves_both_files_as_they_were(project, fmt):
    folder = project / "cfg"
    if not _read_only(folder):
        pytest.skip("this machine cannot make a folder read-only")
    try:
        r = check_fix(project, fmt)
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
        os.chmod(folder, 0o755)
    assert r.returncode == 2, r.stdout + r.stderr
    assert as_it_was(project)
    ds = str((folder / "ds.json").resolve())
    if fmt == "json":
        entry = json.loads(r.stdout)["files"][0]
        assert entry["fixed"] == [] and entry["not_written"][0]["file"] == ds, entry
        assert "its folder takes no new file" in entry["not_written"][0]["reason"]
        assert any("no file was changed" in x for x in entry["not_applied"]), entry
        assert json.loads(r.stdout)["summary"]["files_fixed"] == 0
    else:
        assert f"not written: cannot write {ds}: its folder takes no new file" in r.stdout, r.stdout
        assert "fixed: " not in r.stdout and "fixed 1 file(s)" not in r.stdout, r.stdout


# -- failures met while the files are being replaced (in-process, the system call made to fail) ------------------


def run_fix(project: Path, monkeypatch, capsys) -> tuple[int, dict]:
    from vramlens.cli import main

    monkeypatch.chdir(project)
    rc = main(["check", "train.yaml", "--gpu", "L4", "--fix", "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)["files"][0]


def _is_json_tmp(path) -> bool:
    return Path(str(path)).name.startswith(".ds.json.")


@pytest.mark.parametrize("call", ["os.write", "os.replace"])
def test_a_full_disk_on_the_second_file_leaves_the_first_unchanged(project, monkeypatch, capsys, call):
    """ENOSPC while the JSON's new text is written (os.write), or when it replaces the JSON (os.replace) — after
    the config was already replaced: the config gets its old text back."""
    ds = (project / "cfg" / "ds.json").resolve()
    real_write, real_replace = os.write, os.replace

    def write(fd, data):
        if _is_json_tmp(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def replace(src, dst, **kw):
        if Path(dst) == ds:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_replace(src, dst, **kw)

    if call == "os.write":
        if not os.path.isdir("/proc/self/fd"):
            pytest.skip("needs /proc/self/fd to tell which file is written")
        monkeypatch.setattr(os, "write", write)
    else:
        monkeypatch.setattr(os, "replace", replace)
    rc, entry = run_fix(project, monkeypatch, capsys)
    assert rc == 2, entry
    assert as_it_was(project), files_of(project)
    assert entry["fixed"] == [] and entry["not_written"] == [
        {"file": str(ds), "reason": f"cannot write {ds}: {os.strerror(errno.ENOSPC)}"}
    ], entry


def test_a_file_replaced_by_a_folder_midway_leaves_the_other_unchanged(project, monkeypatch, capsys):
    """The JSON becomes a folder right after the config was replaced: the JSON is not written over, and the
    config gets its old text back."""
    ds = (project / "cfg" / "ds.json").resolve()
    config = (project / "train.yaml").resolve()
    real_replace = os.replace

    def replace(src, dst, **kw):
        real_replace(src, dst, **kw)
        if Path(dst) == config and ds.is_file():
            ds.unlink()
            ds.mkdir()

    monkeypatch.setattr(os, "replace", replace)
    rc, entry = run_fix(project, monkeypatch, capsys)
    assert rc == 2, entry
    assert (project / "train.yaml").read_text(encoding="utf-8") == CONFIG
    assert ds.is_dir() and not any(ds.iterdir())
    assert sorted(files_of(project)) == ["train.yaml"]  # no temporary file left
    assert entry["not_written"][0]["file"] == str(ds) and "changed on disk" in entry["not_written"][0]["reason"]
