"""A catalog importer's data file is what its script makes from the commit the file records (`--check`), run against
the bare mirror of the source repository; skipped with a reason where the mirror or that commit is absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def assert_reproduced(script: Path, mirror: Path, sha: str, *options: str) -> None:
    has = subprocess.run(["git", f"--git-dir={mirror}", "cat-file", "-e", f"{sha}^{{commit}}"], check=False)
    if has.returncode != 0:
        pytest.skip(f"the mirror {mirror} does not hold {sha}")
    out = subprocess.run(
        [sys.executable, str(script), *options, "--git-dir", str(mirror), "--commit", sha, "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
