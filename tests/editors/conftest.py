"""Shared pieces of the real-editor tiers (code-server in Chromium, headless Neovim).

The tools live in .tools/ (scripts/install-editor-tools.sh puts them there) or on PATH (apt).
A missing tool skips the tier on a developer machine; under CI it is a failure, because the CI
command runs the installer first.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from editor_tools import EXTENSION, NODE24, OOM_EXAMPLES, VSCE, OomExample, require_command, require_file


@pytest.fixture(scope="session")
def oom_example() -> OomExample:
    for example in OOM_EXAMPLES:
        if example.path.is_file():
            return example
    pytest.fail(f"none of the OOM examples {[e.name for e in OOM_EXAMPLES]} is in examples/", pytrace=False)


@pytest.fixture(scope="session")
def vsix() -> Path:
    """The extension's .vsix: $VRAMLENS_VSIX if given, else built now with `npm run package`."""
    given = os.environ.get("VRAMLENS_VSIX")
    if given:
        path = Path(given).resolve()
        assert path.is_file(), f"VRAMLENS_VSIX={given} does not exist"
        return path
    require_file(VSCE, "the extension's npm dependencies")
    npm = require_command("npm", "npm")
    env = dict(os.environ, PATH=f"{NODE24.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    t0 = time.monotonic()
    proc = subprocess.run([npm, "run", "package"], cwd=EXTENSION, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"npm run package failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    path = EXTENSION / "vramlens-linux-x64.vsix"
    assert path.is_file(), proc.stdout[-2000:]
    print(f"built {path.name} ({path.stat().st_size / 2**20:.1f} MiB) in {time.monotonic() - t0:.1f} s")
    return path
