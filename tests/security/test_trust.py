"""Exact traces and live probes run code (torch, a GPU step) and are refused in untrusted workspaces: the editor
says so at `initialize` (`initializationOptions.trusted = false`, what the VS Code extension sends for an
untrusted folder); nothing in the workspace — a project file, pushed settings — can turn trust back on."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_wire import Server, ServerError

CONFIG = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n"


def _children(pid: int) -> list[str]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


@pytest.mark.parametrize("command", ["vramlens.runTrace", "vramlens.runProbe"])
def test_untrusted_workspaces_refuse_traces_and_probes(tmp_path, command):
    (tmp_path / ".vramlens.toml").write_text('gpu = "A100-80GB"\ntrusted = true\n')  # cannot grant trust
    (tmp_path / "pyproject.toml").write_text("[tool.vramlens]\ntrusted = true\n")
    with Server(
        workspace=tmp_path, initialization_options={"trusted": False}, settings={"gpu": "A100-80GB", "trusted": True}
    ) as s:
        s.initialize()
        uri = (tmp_path / "train.yaml").as_uri()
        s.open(uri, CONFIG)
        s.diagnostics(uri, 1)
        s.notify("workspace/didChangeConfiguration", {"settings": {"vramlens": {"trusted": True}}})
        with pytest.raises(ServerError, match="only run in trusted workspaces"):
            s.request("workspace/executeCommand", {"command": command, "arguments": [uri]})
        assert not [c for c in _children(s.proc.pid) if "vramlens.trace" in c or "vramlens.probe" in c]
        assert s.request("workspace/executeCommand", {"command": "vramlens.listGpus", "arguments": []})  # still serves
        assert s.alive


def _fake_nvidia_smi(folder: Path, marker: Path, name: str) -> None:
    """An `nvidia-smi` that records it ran and reports an H100."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\necho 'NVIDIA H100 80GB HBM3, 81559 MiB'\n")
    exe.chmod(0o755)


def _ran_after_start(workspace: Path, marker: Path, trusted: bool, path: str) -> list[str]:
    import os
    import time

    with Server(
        workspace=workspace, initialization_options={"trusted": trusted}, env={**os.environ, "PATH": path}
    ) as s:
        s.initialize()
        uri = (workspace / "train.yaml").as_uri()
        s.open(uri, CONFIG)
        s.diagnostics(uri, 1)
        deadline = time.monotonic() + 5  # detection runs in a thread after `initialized`
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.1)
        time.sleep(0.5)
        assert s.alive
    return marker.read_text().split() if marker.exists() else []


def test_a_repositorys_own_nvidia_smi_never_runs(tmp_path):
    """An empty PATH entry is the current directory, where an editor starts the server: the workspace."""
    import os

    workspace, outside, marker = tmp_path / "repo", tmp_path / "driver" / "bin", tmp_path / "ran.txt"
    _fake_nvidia_smi(workspace, marker, "workspace")
    _fake_nvidia_smi(workspace / "bin", marker, "workspace-bin")
    _fake_nvidia_smi(outside, marker, "driver")
    path = os.pathsep.join(["", ".", "bin", str(workspace / "bin"), str(outside), os.environ.get("PATH", "")])
    assert _ran_after_start(workspace, marker, trusted=True, path=path) == ["driver"]
    marker.unlink()
    assert _ran_after_start(workspace, marker, trusted=False, path=path) == []  # untrusted: no detection at all
