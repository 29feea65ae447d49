"""Project settings checked into a repository: `.vramlens.toml` or `pyproject.toml [tool.vramlens]`.

The same keys as the editor's `vramlens` settings section, so a team pins its target GPU once for
every editor and for `vramlens check` in CI::

    # pyproject.toml                     # .vramlens.toml (no table header needed)
    [tool.vramlens]                      gpu = "A100-40GB"
    gpu = "A100-40GB"                    gpu-count = 1
    gpu-count = 1                        headroom = 0.1
    headroom = 0.1                       [severity]
    severity = { VL004 = "off" }         VL004 = "off"

Keys may be written `gpu-count`, `gpu_count` or `gpuCount`. The file nearest to the document wins
(`.vramlens.toml` before `pyproject.toml` in the same folder); the search stops at the workspace root.
TOML is read with `tomllib` (Python 3.11+) or `tomli` when installed; without either, project files are
skipped with one warning.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None

log = logging.getLogger(__name__)

FILE_NAMES = (".vramlens.toml", "pyproject.toml")

# canonical (editor setting) name -> accepted spellings in a project file
_KEYS = {
    "gpu": ("gpu",),
    "gpuCount": ("gpu-count", "gpu_count", "gpucount"),
    "headroom": ("headroom",),
    "severity": ("severity",),
    "frameworkVersions": ("framework-versions", "framework_versions", "frameworkversions"),
    "trace": ("trace",),                     # [trace] python = "…": the interpreter `vramlens trace` runs
}
_SPELLING = {spelling: canonical for canonical, spellings in _KEYS.items() for spelling in spellings}


@dataclass(frozen=True)
class WorkspaceConfig:
    """Settings read from one project file."""

    path: Path
    """The file they came from."""
    values: dict[str, Any] = field(default_factory=dict)
    """Recognised settings under their editor names (`gpu`, `gpuCount`, `headroom`, `severity`, `frameworkVersions`)."""
    unknown: tuple[str, ...] = ()
    """Keys the file sets that vramlens does not know (shown as a warning, never an error)."""


_warned_no_toml = False
_cache: dict[Path, tuple[float, WorkspaceConfig | None]] = {}


def _normalize(table: dict[str, Any], path: Path) -> WorkspaceConfig:
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in table.items():
        canonical = _SPELLING.get(re.sub(r"\s+", "", str(key)).lower())
        if canonical is None:
            unknown.append(str(key))
        else:
            values[canonical] = value
    return WorkspaceConfig(path, values, tuple(unknown))


def read_config_file(path: Path) -> WorkspaceConfig | None:
    """The vramlens settings in one file; None when it has none or cannot be read."""
    global _warned_no_toml
    if _toml is None:
        if not _warned_no_toml:
            log.warning("project settings in %s ignored: reading TOML needs Python 3.11+ or the `tomli` package", path)
            _warned_no_toml = True
        return None
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    cached = _cache.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    try:
        data = _toml.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:   # TOMLDecodeError is a ValueError
        log.warning("cannot read %s: %s", path, exc)
        result = None
    else:
        if path.name == "pyproject.toml":
            table = data.get("tool", {}).get("vramlens")
            result = _normalize(table, path) if isinstance(table, dict) else None
        else:
            result = _normalize(data, path)
    _cache[path] = (mtime, result)
    return result


def find_workspace_config(document: Path, root: Path | None = None) -> WorkspaceConfig | None:
    """The project settings that apply to `document`: the nearest `.vramlens.toml` or `pyproject.toml`
    with a `[tool.vramlens]` table, looking in the document's folder and its parents up to `root`
    (inclusive; up to the filesystem root when `root` is None)."""
    folder = document.parent if document.suffix or not document.is_dir() else document
    root = root.resolve() if root is not None else None
    try:
        folder = folder.resolve()
    except OSError:
        return None
    for current in (folder, *folder.parents):
        for name in FILE_NAMES:
            candidate = current / name
            if candidate.is_file() and (config := read_config_file(candidate)) is not None:
                return config
        if root is not None and current == root:
            break
        if root is not None and root not in current.parents:
            break   # the document is outside the workspace: only its own folder counts
    return None
