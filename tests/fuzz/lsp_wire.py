"""A small LSP client over stdio for fuzz, load and security tests: raw JSON-RPC frames, so a test sees
exactly what the server sends (every answer, every notification, when it arrived) and can send what an
editor would never send.

    with Server(workspace=path) as s:
        s.initialize()
        s.open(uri, text)
        s.request("textDocument/hover", {...})
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

SERVE = [sys.executable, "-m", "vramlens", "serve", "--stdio"]
ANSWER_TIMEOUT_S = 60.0  # an answer later than this counts as "never answered" (a hang)

CAPABILITIES = {
    "general": {"positionEncodings": ["utf-16"]},
    "workspace": {
        "configuration": True,
        "workspaceEdit": {"documentChanges": True},
        "didChangeConfiguration": {"dynamicRegistration": True},
        "codeLens": {"refreshSupport": True},
        "inlayHint": {"refreshSupport": True},
    },
    "window": {"workDoneProgress": True},
    "textDocument": {
        "synchronization": {"didSave": True},
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "completion": {"completionItem": {"snippetSupport": False}},
        "codeAction": {
            "codeActionLiteralSupport": {
                "codeActionKind": {"valueSet": ["quickfix", "refactor", "refactor.rewrite", "source"]}
            },
            "resolveSupport": {"properties": ["edit"]},
            "disabledSupport": True,
        },
        "codeLens": {},
        "inlayHint": {},
        "publishDiagnostics": {"relatedInformation": True, "versionSupport": True},
    },
}


class ServerError(Exception):
    """The server died, answered with an error, or did not answer in time."""


class Server:
    """One `vramlens serve` process and what it has sent."""

    def __init__(
        self,
        workspace: Path | None = None,
        settings: dict | None = None,
        env: dict | None = None,
        command: list[str] | None = None,
        initialization_options: dict | None = None,
    ):
        self.workspace = workspace
        self.settings = settings if settings is not None else {"gpu": "A100-80GB"}
        self.initialization_options = initialization_options
        self.command = command or SERVE
        self.env = env
        self._ids = itertools.count(1)
        self._answers: dict[int, dict] = {}
        self._cond = threading.Condition()
        self.notifications: list[tuple[float, dict]] = []
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        self.versions: dict[str, int] = {}
        self.texts: dict[str, str] = {}
        self.proc: subprocess.Popen | None = None
        self._write_lock = threading.Lock()

    # ---- process -----------------------------------------------------------------------------------

    def start(self) -> "Server":
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=str(self.workspace) if self.workspace else None,
        )
        threading.Thread(target=self._read, daemon=True, name="lsp-reader").start()
        threading.Thread(target=self._drain_stderr, daemon=True, name="lsp-stderr").start()
        return self

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.alive:
            try:
                self.request("shutdown", None, timeout=10)
                self.notify("exit", None)
                self.proc.wait(timeout=10)
            except (ServerError, OSError, subprocess.TimeoutExpired):
                pass
        if self.alive:
            self.proc.kill()
            self.proc.wait()

    def rss_mib(self) -> float:
        """Resident memory of the server process (Linux /proc)."""
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    # ---- wire --------------------------------------------------------------------------------------

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode("ascii")  # ensure_ascii: lone surrogates travel as escapes
        with self._write_lock:
            try:
                self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise ServerError(f"server is gone: {exc}; stderr: {self.stderr_tail()}") from None

    def write_bytes(self, data: bytes) -> None:
        """Raw bytes on the server's stdin (frames no editor would send)."""
        with self._write_lock:
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise ServerError(f"server is gone: {exc}; stderr: {self.stderr_tail()}") from None

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self._cond:
                        self._cond.notify_all()
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            message = json.loads(out.read(length))
            now = time.perf_counter()
            if "method" in message and "id" in message:
                self._answer_server_request(message)
            elif "method" in message:
                with self._cond:
                    self.notifications.append((now, message))
                    self._cond.notify_all()
            else:
                with self._cond:
                    message["_received"] = now
                    self._answers[message["id"]] = message
                    self._cond.notify_all()

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def stderr_tail(self, n: int = 30) -> str:
        return "".join(list(self.stderr)[-n:])

    def _answer_server_request(self, message: dict) -> None:
        method = message["method"]
        result: Any = None
        if method == "workspace/configuration":
            result = [
                self.settings if (item.get("section") == "vramlens") else None for item in message["params"]["items"]
            ]
        self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def send(self, method: str, params: Any) -> int:
        """Send a request; `wait(id)` gets its answer."""
        rid = next(self._ids)
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def wait(self, rid: int, timeout: float = ANSWER_TIMEOUT_S) -> dict:
        """The whole answer message (with `_received`, the time it arrived)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while rid not in self._answers:
                if not self.alive:
                    raise ServerError(f"server exited ({self.proc.returncode}); stderr: {self.stderr_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ServerError(f"no answer to request {rid} within {timeout:.0f} s")
                self._cond.wait(min(left, 0.5))
            return self._answers.pop(rid)

    def request(self, method: str, params: Any, timeout: float = ANSWER_TIMEOUT_S) -> Any:
        answer = self.wait(self.send(method, params), timeout)
        if "error" in answer:
            raise ServerError(f"{method} answered with an error: {answer['error']}")
        return answer.get("result")

    def wait_for(self, match: Callable[[dict], bool], timeout: float = ANSWER_TIMEOUT_S, after: int = 0) -> dict:
        """The first notification (from index `after`) that `match`es."""
        deadline = time.monotonic() + timeout
        i = after
        with self._cond:
            while True:
                while i < len(self.notifications):
                    if match(self.notifications[i][1]):
                        return self.notifications[i][1]
                    i += 1
                if not self.alive:
                    raise ServerError(f"server exited; stderr: {self.stderr_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ServerError("expected notification did not arrive")
                self._cond.wait(min(left, 0.5))

    # ---- an editor's moves -------------------------------------------------------------------------

    def initialize(self) -> dict:
        root = self.workspace.resolve().as_uri() if self.workspace else None
        params = {
            "processId": os.getpid(),
            "rootUri": root,
            "capabilities": CAPABILITIES,
            "workspaceFolders": [{"uri": root, "name": "ws"}] if root else None,
            "initializationOptions": self.initialization_options,
        }
        result = self.request("initialize", params)
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str, language: str = "yaml") -> None:
        self.versions[uri] = 1
        self.texts[uri] = text
        self.notify(
            "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}}
        )

    def change(self, uri: str, new_text: str, incremental: bool = True) -> None:
        """Send the edit that turns the current text into `new_text` (one range change, as an editor does)."""
        old = self.texts[uri]
        self.versions[uri] += 1
        self.texts[uri] = new_text
        if incremental:
            change = minimal_change(old, new_text)
        else:
            change = {"text": new_text}
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": self.versions[uri]}, "contentChanges": [change]},
        )

    def close(self, uri: str) -> None:
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        self.versions.pop(uri, None)
        self.texts.pop(uri, None)

    def diagnostics(self, uri: str, version: int, after: int = 0, timeout: float = ANSWER_TIMEOUT_S) -> dict:
        return self.wait_for(
            lambda m: (
                m["method"] == "textDocument/publishDiagnostics"
                and m["params"]["uri"] == uri
                and m["params"].get("version") == version
            ),
            timeout,
            after,
        )


def _position(text: str, offset: int) -> dict:
    """LSP position (UTF-16) of a code-point offset."""
    from vramlens.text import LineIndex

    idx = LineIndex(text)
    line, units = idx.position(*idx.pos(offset))
    return {"line": line, "character": units}


def minimal_change(old: str, new: str) -> dict:
    """One incremental change (range in the old text) from `old` to `new`: common prefix and suffix kept.
    Never splits a "\\r\\n" pair, which would put a range boundary between the two characters of a line break."""
    a = 0
    n = min(len(old), len(new))
    while a < n and old[a] == new[a]:
        a += 1
    b = 0
    while b < n - a and old[len(old) - 1 - b] == new[len(new) - 1 - b]:
        b += 1
    while a > 0 and old[a - 1] == "\r" and (a < len(old) and old[a] == "\n"):
        a -= 1
    end = len(old) - b
    while end < len(old) and end > 0 and old[end - 1] == "\r" and old[end] == "\n":
        end += 1
        b -= 1
    return {"range": {"start": _position(old, a), "end": _position(old, end)}, "text": new[a : len(new) - b]}
