"""Find a model's `config.json` in the local Hugging Face hub cache, offline.

Layout (huggingface_hub): `<cache>/models--<org>--<name>/refs/main` holds the commit hash of the `main` ref and
`<cache>/models--<org>--<name>/snapshots/<hash>/config.json` the file (a symlink into `blobs/`). The cache
directory is `$HF_HUB_CACHE`, else the legacy `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, else
`$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`; all that exist are searched in that order.
"""

from __future__ import annotations

import os
from pathlib import Path


def _candidates() -> list[Path]:
    env = os.environ
    candidates: list[Path] = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            candidates.append(Path(env[var]).expanduser())
    if env.get("HF_HOME"):
        candidates.append(Path(env["HF_HOME"]).expanduser() / "hub")
    if env.get("XDG_CACHE_HOME"):
        candidates.append(Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub")
    candidates.append(Path.home() / ".cache" / "huggingface" / "hub")
    return candidates


def default_hub_cache() -> Path:
    """Where a download goes: the first candidate, as huggingface_hub chooses it (existing or not)."""
    return _candidates()[0]


def hub_cache_dirs() -> list[Path]:
    """Candidate hub cache directories that exist, most specific first."""
    seen: list[Path] = []
    for path in _candidates():
        if path not in seen and path.is_dir():
            seen.append(path)
    return seen


# The Hub refuses a repository name over 96 characters (huggingface_hub utils/_validators.py `validate_repo_id`,
# REPO_ID_REGEX), so no cache holds one; looking one up would only build a folder name past NAME_MAX (ENAMETOOLONG).
MAX_REPO_NAME_CHARS = 96


def _repo_dir(cache: Path, repo_id: str) -> Path | None:
    folder = "models--" + repo_id.replace("/", "--")
    exact = cache / folder
    try:
        if exact.is_dir():
            return exact
    except OSError:  # a name the file system cannot hold (ENAMETOOLONG) is in no cache
        return None
    wanted = folder.lower()  # hub ids are case-insensitive; the cache keeps the spelling first used
    try:
        for entry in os.scandir(cache):
            if entry.name.lower() == wanted and entry.is_dir():
                return Path(entry.path)
    except OSError:
        return None
    return None


def _snapshot_config(repo: Path) -> Path | None:
    snapshots = repo / "snapshots"
    try:
        ref = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        ref = ""
    if ref and (config := snapshots / ref / "config.json").is_file():
        return config
    try:
        found = [p for p in snapshots.glob("*/config.json") if p.is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def cached_config_path(repo_id: str) -> Path | None:
    """Path of `config.json` for hub id `org/name` in the local cache, or None (never downloads)."""
    repo_id = repo_id.strip().strip("/")
    if (
        repo_id.count("/") != 1
        or any(part in ("", ".", "..") for part in repo_id.split("/"))
        or len(repo_id.split("/")[1]) > MAX_REPO_NAME_CHARS
    ):
        return None
    for cache in hub_cache_dirs():
        if (repo := _repo_dir(cache, repo_id)) and (config := _snapshot_config(repo)):
            return config
    return None
