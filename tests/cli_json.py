"""`vramlens estimate --format json` run as a user runs it, in a subprocess: the first file's report."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def estimate_json(
    path: Path | str,
    *flags: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    offline: bool = True,
    timeout: int = 180,
) -> dict:
    """The JSON report of `path` (its first file when the CLI reports several), run from `cwd` with `env` (this
    process's environment when None), with `--offline` unless told otherwise."""
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", *(["--offline"] if offline else []), *flags]
        + [str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=dict(env) if env is not None else None,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data
