"""`vramlens estimate --format json --offline` run as a user runs it, in a subprocess: the first file's report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def estimate_json(path: Path | str, *flags: str, cwd: Path | None = None) -> dict:
    """The JSON report of `path` (its first file when the CLI reports several), run from `cwd`."""
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", *flags, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data
