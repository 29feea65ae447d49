"""What the editor's output channel shows: the server's stderr. A `$/cancelRequest` for a request that was already
answered (editors send many: VS Code cancels hovers and code actions as the cursor moves) leaves no line there,
while a real problem (a refused setting) still does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_message(stream) -> dict:
    length = None
    while True:
        line = stream.readline()
        assert line, "the server closed stdout"
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return json.loads(stream.read(length))


def answer_to(proc: subprocess.Popen, request_id: int) -> dict:
    while True:
        message = read_message(proc.stdout)
        if message.get("id") == request_id and "method" not in message:
            return message


def test_cancel_of_an_answered_request_is_not_logged_but_real_warnings_are(tmp_path: Path):
    config = tmp_path / "train.yaml"
    config.write_text("model_name_or_path: gpt2\nper_device_train_batch_size: 1\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vramlens", "serve", "--stdio"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        send = lambda m: (proc.stdin.write(frame(m)), proc.stdin.flush())  # noqa: E731
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "processId": None,
                    "rootUri": tmp_path.as_uri(),
                    "capabilities": {},
                    "initializationOptions": {"vramlens": {"headroom": "lots"}},
                },
            }
        )  # a refused value: a real warning
        answer_to(proc, 1)
        send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {
                        "uri": config.as_uri(),
                        "languageId": "yaml",
                        "version": 1,
                        "text": config.read_text(),
                    }
                },
            }
        )
        for request_id in range(2, 7):
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "textDocument/hover",
                    "params": {"textDocument": {"uri": config.as_uri()}, "position": {"line": 1, "character": 3}},
                }
            )
            answer_to(proc, request_id)
            send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": request_id}})  # too late
        send({"jsonrpc": "2.0", "id": 99, "method": "shutdown", "params": None})
        answer_to(proc, 99)
        send({"jsonrpc": "2.0", "method": "exit", "params": None})
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = stderr.decode()
    assert "Cancel notification" not in log, log
    assert "headroom" in log, f"the refused setting was not logged:\n{log}"
