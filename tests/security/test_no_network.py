"""No network at run time: the CLI and the language server run with every non-Unix socket, connection and name
lookup refused by an audit hook (a `sitecustomize` on PYTHONPATH), and do all their work — including model
names that only a hub could resolve and remote references — without trying one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lsp_wire import SERVE, Server

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
from shared_data import CORPUS  # noqa: E402

SITECUSTOMIZE = textwrap.dedent("""
    import os, socket, sys

    LOG = os.environ["VRAMLENS_NETWORK_LOG"]

    def _refuse(what):
        with open(LOG, "a", encoding="utf-8") as fh:
            fh.write(what + "\\n")
        raise OSError("network access blocked by the vramlens test harness: " + what)

    def _hook(event, args):
        if event == "socket.__new__" and args[1] not in (socket.AF_UNIX, -1):
            _refuse(f"socket({args[1]!r})")
        elif (
            event in ("socket.connect", "socket.sendto", "socket.bind")
            and getattr(args[0], "family", None) != socket.AF_UNIX
        ):
            _refuse(f"{event}({args[1]!r})")
        elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
                       "socket.gethostbyaddr", "urllib.Request"):
            _refuse(f"{event}({args[0]!r})")

    sys.addaudithook(_hook)
""")


@pytest.fixture
def offline(tmp_path: Path) -> tuple[dict, Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "network.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "VRAMLENS_NETWORK_LOG": str(log),
    }
    # the harness works: a socket in this environment is refused and logged
    probe = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', 9))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode != 0 and "blocked by the vramlens test harness" in probe.stderr
    log.unlink()
    return env, log


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for f in EXAMPLES.iterdir():
        (ws / f.name).write_bytes(f.read_bytes())
    (ws / "remote.yaml").write_text(
        "model_name_or_path: some-org/not-in-any-catalog-7b\nper_device_train_batch_size: 4\n"
        "deepspeed: https://example.invalid/ds_config.json\n"
    )
    (ws / "hub.py").write_text(
        "from transformers import AutoConfig, TrainingArguments\n"
        "AutoConfig.from_pretrained('meta-llama/Llama-3.1-8B')\n"
        "TrainingArguments(per_device_train_batch_size=2, hub_model_id='x/y', push_to_hub=True)\n"
    )
    return ws


def test_the_cli_needs_no_network(offline, tmp_path):
    env, log = offline
    ws = _workspace(tmp_path)
    corpus = [str(p) for p in sorted(CORPUS.glob("*/*"))[:60]] if CORPUS.is_dir() else []
    for args in (
        ["check", "--gpu", "A100-40GB", "."],
        ["check", "--format", "sarif", "."],
        ["estimate", "--format", "json", *[p.name for p in sorted(ws.iterdir())]],
        ["plan", "--format", "json", "remote.yaml", "hub.py"],
        ["check", *corpus],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "vramlens", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=300
        )
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        assert out.returncode in (0, 1, 2), (args, out.returncode, out.stderr[-2000:])
    assert not log.exists(), log.read_text()


def test_the_server_needs_no_network(offline, tmp_path):
    env, log = offline
    ws = _workspace(tmp_path)
    with Server(workspace=ws, env=env, command=SERVE) as s:
        s.initialize()
        assert s.request("workspace/executeCommand", {"command": "vramlens.listGpus", "arguments": []})
        for path in sorted(ws.iterdir()):
            uri = path.as_uri()
            lang = {".py": "python", ".sh": "shellscript", ".json": "json"}.get(path.suffix, "yaml")
            mark = len(s.notifications)
            s.open(uri, path.read_text(), lang)
            diags = s.diagnostics(uri, 1, after=mark)["params"]["diagnostics"]
            whole = {"start": {"line": 0, "character": 0}, "end": {"line": 50, "character": 0}}
            s.request(
                "textDocument/codeAction",
                {"textDocument": {"uri": uri}, "range": whole, "context": {"diagnostics": diags}},
            )
            s.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 2}})
            s.request("textDocument/codeLens", {"textDocument": {"uri": uri}})
            s.request("textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": whole})
            s.request(
                "textDocument/completion", {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 0}}
            )
        assert s.alive
    assert not log.exists(), log.read_text()
