"""Fuzz tests: helpers on sys.path, and the number of inputs tried in the terminal summary."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzzing import COUNTS, PROFILE  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if COUNTS:
        total = sum(COUNTS.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items()))
        terminalreporter.write_line(f"fuzz inputs ({PROFILE} profile): {total} — {parts}")
