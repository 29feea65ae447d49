"""Paths and helpers shared by the real-editor tiers (imported by conftest.py and the tests)."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools"
EXTENSION = REPO / "vscode-extension"
EXAMPLES = REPO / "examples"
ARTIFACTS = REPO / "tests" / "artifacts"
INSTALL_HINT = "run scripts/install-editor-tools.sh"

NODE24 = TOOLS / "node24" / "node_modules" / "node" / "bin" / "node"
CODE_SERVER = TOOLS / "code-server" / "node_modules" / ".bin" / "code-server"
PLAYWRIGHT_CORE = TOOLS / "playwright" / "node_modules" / "playwright-core"
VSCE = EXTENSION / "node_modules" / "@vscode" / "vsce" / "vsce"


def missing_tool(what: str) -> None:
    """Skip (developer machine) or fail (CI) because `what` is not installed."""
    message = f"{what} is not installed ({INSTALL_HINT})"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        missing_tool(f"{what} ({path.relative_to(REPO) if path.is_relative_to(REPO) else path})")
    return path


def require_command(name: str, what: str) -> str:
    found = shutil.which(name)
    if not found:
        missing_tool(f"{what} (`{name}` on PATH)")
    return found


@dataclass(frozen=True)
class OomExample:
    """An example config in examples/ that does not fit its GPU."""

    name: str
    gpu: str
    #: The setting whose line must carry the VL001 error (the one that dominates the peak).
    dominant_key: str
    #: The key naming the model (its hover shows the budget table).
    model_key: str = "base_model"

    @property
    def path(self) -> Path:
        return EXAMPLES / self.name

    def line_of(self, key: str) -> int:
        """0-based line of the first `key:` mapping entry (or `--key` flag) in the file."""
        pattern = re.compile(rf"^\s*(?:-\s+)?{re.escape(key)}\s*:|--{re.escape(key)}\b")
        for i, line in enumerate(self.path.read_text().splitlines()):
            if pattern.search(line):
                return i
        raise AssertionError(f"{key!r} not found in {self.name}")

    def dominant_line(self) -> int:
        return self.line_of(self.dominant_key)

    def model_line(self) -> int:
        return self.line_of(self.model_key)


# OOM examples the tiers open, best first (the first one present in examples/ is used).
OOM_EXAMPLES = [
    OomExample(
        "llama3-8b-full-adamw-a100-40gb.yaml",
        gpu="A100-40GB",
        dominant_key="per_device_train_batch_size",
        model_key="model_name_or_path",
    ),
]
