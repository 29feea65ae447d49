"""Project settings checked into a repository: `.vramlens.toml` or `pyproject.toml [tool.vramlens]`.

The same keys as the editor's `vramlens` settings section, so a team pins its target GPU once for
every editor and for `vramlens check` in CI::

    # pyproject.toml                     # .vramlens.toml (no table header needed)
    [tool.vramlens]                      gpu = "A100-40GB"
    gpu = "A100-40GB"                    gpu-count = 1
    gpu-count = 1                        headroom = 0.1
    headroom = 0.1                       [severity]
    severity = { VL004 = "off" }         VL004 = "off"

Keys may be written `gpu-count`, `gpu_count` or `gpuCount` (the fields of `vramlens.settings.Settings`, which
validates them as it validates every other source). The file nearest to the document wins
(`.vramlens.toml` before `pyproject.toml` in the same folder); the search stops at the workspace root.
TOML is read with `tomllib` (Python 3.11+) or `tomli` when installed, within the bounds of
`vramlens.toml_reading` (size, nesting); without either, project files are skipped with one warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramlens import toml_reading

log = logging.getLogger(__name__)

FILE_NAMES = (".vramlens.toml", "pyproject.toml")


@dataclass(frozen=True)
class ProjectSettings:
    """What one project file says, validated by the settings model."""

    path: Path
    """The file they came from."""
    values: dict[str, Any] = field(default_factory=dict)
    """The settings it sets (field name → value), ready to merge (`vramlens.settings.merge`)."""
    problems: tuple[str, ...] = ()
    """Values the model refused, one line each, naming the key and what is allowed."""
    unknown: tuple[str, ...] = ()
    """Keys the file sets that vramlens does not know (shown as a warning, never an error)."""


MAX_PROJECT_FILE_BYTES = 1_000_000  # a .vramlens.toml or pyproject.toml is a few KB

_warned_no_toml = False


def _folder(path: Path) -> Path:
    """The real folder a project file was found in (the file itself may not lead out of it)."""
    try:
        return Path(path).absolute().parent.resolve()
    except (OSError, RuntimeError):
        return Path(path).absolute().parent


_cache: dict[Path, tuple[float, ProjectSettings | None]] = {}


def _read(table: Any, path: Path) -> ProjectSettings:
    from vramlens.settings import read_source

    unknown: list[str] = []
    values, problems = read_source(table, str(path), unknown=unknown)
    return ProjectSettings(path, values, tuple(problems), tuple(unknown))


def read_config_file(path: Path) -> ProjectSettings | None:
    """The vramlens settings in one file; None when it has none or cannot be read."""
    global _warned_no_toml
    if not toml_reading.AVAILABLE:
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
    # a project file is read like a referenced config: a regular file of bounded size, and (symlinks resolved on
    # the opened file) inside the folder it was found in — not a link to a file elsewhere; nested within bounds
    read = toml_reading.read(path, MAX_PROJECT_FILE_BYTES, roots=[_folder(path)])
    data = read.data
    if data is None:
        log.warning("project settings in %s ignored: %s", path, read.problem)
        # a broken pyproject.toml may not concern vramlens; a broken .vramlens.toml does
        result = (
            None if path.name == "pyproject.toml" else ProjectSettings(path, problems=(read.problem or "not read",))
        )
    else:
        if path.name == "pyproject.toml":
            tool = data.get("tool")
            table = tool.get("vramlens") if isinstance(tool, dict) else None
            result = _read(table, path) if isinstance(table, dict) else None
        else:
            result = _read(data, path)
    _cache[path] = (mtime, result)
    return result


def find_workspace_config(document: Path, root: Path | None = None) -> ProjectSettings | None:
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
            break  # the document is outside the workspace: only its own folder counts
    return None
