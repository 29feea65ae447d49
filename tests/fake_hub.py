"""A Hugging Face Hub on loopback for tests: serves `config.json` files (and 401 / 403 / 404 answers) the way
the Hub's `resolve` endpoint does, so vramlens' lookup (knowledge/hub.py) talks to it through `HF_ENDPOINT`, as
would huggingface_hub.

`FakeHub.repos` maps a repo id to a config dict (served as config.json), to `{"files": {name: dict}}` (e.g. a
PEFT adapter's adapter_config.json), or to an HTTP status for the refusals:
401 with `X-Error-Code: RepoNotFound` (the Hub's answer for a private repository without a token), 403 with
`X-Error-Code: GatedRepo` (a gated repository the token has no access to), 404 `RepoNotFound`.
`FakeHub.requests` records every path asked for (tests check that nothing else was fetched).

Hostile answers, for the bounds on a lookup: `Huge(size)` serves a config.json of `size` bytes (with or without a
Content-Length), `Drip(interval)` one byte every `interval` seconds, in the body or in the headers.
`/api/agent-harnesses` answers as the Hub does (huggingface_hub >= 2.4 asks for it); any other path gets 404.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True)
class Huge:
    """A config.json of `size` bytes: a small model config padded with spaces. `announce`: send its length in
    Content-Length (a client can refuse it before reading); otherwise the body ends when the connection closes."""

    size: int
    announce: bool = True


@dataclass(frozen=True)
class Drip:
    """One byte every `interval` seconds, without end: in the body of a 200 answer (`where="body"`, after a
    Content-Length of `length`), or in its headers (`where="headers"`: the status line, then a header that never
    ends)."""

    interval: float = 1.0
    where: str = "body"
    length: int = 10_000


_HUGE_HEAD = (
    b'{"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 12, '
    b'"intermediate_size": 2816, "vocab_size": 32000, "pad": "'
)


class FakeHub:
    def __init__(self, repos: dict[str, Any]):
        self.repos = repos
        self.requests: list[tuple[str, str]] = []
        self.hung_up: list[str] = []
        """Paths whose (hostile) answer the client stopped reading before it ended."""
        self.closing = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

            def _answer(self, body: bool):
                hub.requests.append((self.command, self.path))
                path = self.path.split("?", 1)[0].lstrip("/")
                if path == "api/agent-harnesses":  # what huggingface_hub >= 2.4 asks for its User-Agent
                    return self._json(200, {"standardEnvVars": ["AI_AGENT"], "harnesses": {}}, body)
                repo, sep, rest = path.partition("/resolve/")
                if not sep:
                    return self._error(404, "RepoNotFound")
                _, _, filename = rest.partition("/")
                entry = hub.repos.get(repo)
                if isinstance(entry, int):
                    code = {401: "RepoNotFound", 403: "GatedRepo", 404: "RepoNotFound"}.get(entry)
                    return self._error(entry, code)
                if entry is None:
                    return self._error(404, "RepoNotFound")
                if isinstance(entry, (Huge, Drip)):
                    return self._hostile(entry, body, filename)
                files = entry["files"] if "files" in entry else {"config.json": entry}
                if filename not in files:
                    return self._error(404, "EntryNotFound")
                data = json.dumps(files[filename]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha1(data).hexdigest() + '"')
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _hostile(self, entry: Huge | Drip, body: bool, filename: str):
                if filename != "config.json":
                    return self._error(404, "EntryNotFound")
                try:
                    if isinstance(entry, Drip) and entry.where == "headers":
                        self.wfile.write(
                            b"HTTP/1.0 200 OK\r\nX-Repo-Commit: " + COMMIT.encode() + b'\r\nETag: "hostile"\r\nX-Pad: '
                        )
                        while not hub.closing.wait(entry.interval):
                            self.wfile.write(b"a")
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("X-Repo-Commit", COMMIT)
                    self.send_header("ETag", '"hostile"')
                    size = entry.size if isinstance(entry, Huge) else entry.length
                    if not isinstance(entry, Huge) or entry.announce:
                        self.send_header("Content-Length", str(size))
                    self.end_headers()
                    if not body:
                        return
                    if isinstance(entry, Drip):
                        while not hub.closing.wait(entry.interval):
                            self.wfile.write(b" ")
                        return
                    self.wfile.write(_HUGE_HEAD)
                    left, chunk = size - len(_HUGE_HEAD) - 2, b" " * (1 << 20)
                    while left > 0 and not hub.closing.is_set():
                        self.wfile.write(chunk[:left])
                        left -= len(chunk)
                    self.wfile.write(b'"}')
                except OSError:  # the client hung up: what a bounded client does
                    hub.hung_up.append(self.path)

            def _json(self, status: int, value: Any, body: bool):
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _error(self, status: int, code: str | None):
                data = json.dumps({"error": code or "error"}).encode()
                self.send_response(status)
                if code:
                    self.send_header("X-Error-Code", code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def env(self, tmp_path) -> dict[str, str]:
        """Environment for a process that should use this Hub, with an empty cache and no stored token (nothing
        else: no switch that would hide a request a user's run makes)."""
        return {"HF_ENDPOINT": self.url, "HF_HUB_CACHE": str(tmp_path / "hub-cache"), "HF_HOME": str(tmp_path / "hf")}


# config.json of real models, as published on the Hub (shapes only: keys the estimate reads)
QWEN2_VL_7B = {
    "architectures": ["Qwen2VLForConditionalGeneration"],
    "model_type": "qwen2_vl",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 32768,
    "vision_config": {
        "depth": 32,
        "embed_dim": 1280,
        "mlp_ratio": 4,
        "num_heads": 16,
        "in_channels": 3,
        "hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}
ZEPHYR_7B = {  # a fine-tune of Mistral-7B-v0.1 (alignment-handbook/zephyr-7b-sft-full)
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 32768,
}
MAMBA_2_8B = {  # state-spaces/mamba-2.8b-hf: no attention at all
    "architectures": ["MambaForCausalLM"],
    "model_type": "mamba",
    "hidden_size": 2560,
    "num_hidden_layers": 64,
    "vocab_size": 50280,
    "state_size": 16,
    "expand": 2,
    "conv_kernel": 4,
    "tie_word_embeddings": True,
}
