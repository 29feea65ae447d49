"""The extension's unit tests (vscode-extension/test/*.test.ts, node:test): the order in which it chooses the
Python that runs the server, without an editor. Needs Node 24 and the extension's npm packages
(scripts/install-editor-tools.sh)."""

from __future__ import annotations

import os
import subprocess

from editor_tools import EXTENSION, NODE24, require_command, require_file


def test_extension_unit_tests_pass() -> None:
    require_file(NODE24, "Node 24")
    require_file(EXTENSION / "node_modules" / "esbuild", "the extension's npm dependencies")
    npm = require_command("npm", "npm")
    env = dict(os.environ, PATH=f"{NODE24.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([npm, "test"], cwd=EXTENSION, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"npm test failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert "# fail 0" in proc.stdout or "ℹ fail 0" in proc.stdout, proc.stdout[-3000:]
