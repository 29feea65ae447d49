"""Security tests: the fuzz helpers (the stdio LSP client) and the hostile documents on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "fuzz")]
