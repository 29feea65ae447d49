"""Where the shared data beside the repository is (`../shared`: the config corpus, measured results) and how a
test that needs it skips, with the reason, in a plain clone that does not have it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
CORPUS = SHARED / "corpus"
GROUND_TRUTH = SHARED / "calibration" / "ground-truth.jsonl"


def need(path: Path) -> Path:
    """`path`, or skip the test: it needs the shared data that is not beside this repository."""
    if not path.exists():
        pytest.skip(f"needs ../shared beside the repository ({path.resolve()} is absent)")
    return path
