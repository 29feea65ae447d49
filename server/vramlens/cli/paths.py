"""Finding config files under the paths given on the command line."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable, Iterator

CONFIG_SUFFIXES = {".yaml", ".yml", ".json", ".toml", ".py", ".sh", ".bash", ".md", ".markdown", ".mdx", ".ipynb"}
MAX_FILE_BYTES = 20_000_000  # far above any training config; a larger file is refused before it is read
SKIP_DIRS = {".git", "node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache", ".tools", "build", "dist"}


def iter_config_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    """Files named directly are always yielded; folders are walked for candidate config files, sorted."""
    for p in map(Path, paths):
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                for name in sorted(files):
                    if Path(name).suffix.lower() in CONFIG_SUFFIXES and _regular(Path(root) / name):
                        yield Path(root) / name
        else:
            yield p


def _regular(path: Path) -> bool:
    """A regular file (after symlinks): `x.yaml` linked to /dev/zero, a FIFO or /dev/stdin is passed over."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_config_text(path: Path, errors: str = "strict") -> str:
    """A file named on the command line or found by walking: only a regular file of at most MAX_FILE_BYTES,
    never blocking (a FIFO or a terminal is refused, not waited on). Raises OSError with the reason."""
    from vramlens import file_access

    return file_access.read_text_checked(Path(path), MAX_FILE_BYTES, errors=errors)
