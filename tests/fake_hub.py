"""A Hugging Face Hub on loopback for tests: serves `config.json` files (and 401 / 403 / 404 answers) the way
the Hub's `resolve` endpoint does, so `huggingface_hub.hf_hub_download` talks to it through `HF_ENDPOINT`.

`FakeHub.repos` maps a repo id to a config dict (served as config.json), to `{"files": {name: dict}}` (e.g. a
PEFT adapter's adapter_config.json), or to an HTTP status for the refusals:
401 with `X-Error-Code: RepoNotFound` (the Hub's answer for a private repository without a token), 403 with
`X-Error-Code: GatedRepo` (a gated repository the token has no access to), 404 `RepoNotFound`.
`FakeHub.requests` records every path asked for (tests check that nothing else was fetched).
"""
from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repos: dict[str, Any]):
        self.repos = repos
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):      # quiet
                pass

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

            def _answer(self, body: bool):
                hub.requests.append((self.command, self.path))
                path = self.path.split("?", 1)[0].lstrip("/")
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
        self.server.shutdown()
        self.server.server_close()

    def env(self, tmp_path) -> dict[str, str]:
        """Environment for a process that should use this Hub, with an empty cache and no stored token."""
        return {"HF_ENDPOINT": self.url, "HF_HUB_CACHE": str(tmp_path / "hub-cache"), "HF_HOME": str(tmp_path / "hf"),
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}


# config.json of real models, as published on the Hub (shapes only: keys the estimate reads)
QWEN2_VL_7B = {
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 32768,
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_channels": 3,
                      "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
}
ZEPHYR_7B = {   # a fine-tune of Mistral-7B-v0.1 (alignment-handbook/zephyr-7b-sft-full)
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 32768,
}
MAMBA_2_8B = {  # state-spaces/mamba-2.8b-hf: no attention at all
    "architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 2560, "num_hidden_layers": 64,
    "vocab_size": 50280, "state_size": 16, "expand": 2, "conv_kernel": 4, "tie_word_embeddings": True,
}
