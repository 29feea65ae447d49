"""Which other files vramlens may read while it analyses a document.

A config names other files: a DeepSpeed JSON, a base config, a launcher's config, a local model folder.
In a repository opened in an editor those names were written by whoever wrote the repository, so they
are followed only into the workspace (without a workspace: the document's folder, or the current
directory) and the local Hugging Face cache — never into `../../etc/passwd`, an absolute path elsewhere,
or through a symlink that leads out. Paths are compared after resolving `..` and symlinks.
"""
from __future__ import annotations

from pathlib import Path

from vramlens.knowledge.hf_cache import hub_cache_dirs

# Linux PATH_MAX (include/uapi/linux/limits.h): no longer path names a file open() can reach (ENAMETOOLONG).
# Checked before resolving, which costs a system call per component (`m/` × 40,000 took seconds).
MAX_PATH_CHARS = 4096


def _real(path: Path) -> Path | None:
    if len(str(path)) > MAX_PATH_CHARS:
        return None
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError, ValueError):   # a symlink loop, a NUL byte in the name
        return None


def base_folder(workspace: Path | None, document: str | None = None) -> Path:
    """The folder a document's references may lead into: the workspace, else the document's folder (when
    its path is a real absolute path), else the current directory."""
    if workspace is not None:
        return Path(workspace)
    if document:
        doc = Path(document)
        if doc.is_absolute():
            return doc.parent
    return Path.cwd()


def allowed_roots(workspace: Path | None, document: str | None = None) -> list[Path]:
    """Folders whose files may be read: `base_folder` and the Hugging Face caches, symlinks resolved."""
    roots = [base_folder(workspace, document), *hub_cache_dirs()]
    return [r for r in (_real(p) for p in roots) if r is not None]


def inside(path: Path, roots: list[Path]) -> bool:
    """Whether `path`, with `..` and symlinks resolved, lies in one of `roots`."""
    real = _real(path)
    return real is not None and any(real.is_relative_to(root) for root in roots)


def refusal(what: str, target: str, workspace: Path | None) -> str:
    """Why a file was not read, for an issue on the reference."""
    where = "the workspace" if workspace is not None else "this file's folder"
    return (f"{what} `{target}` is outside {where}; vramlens reads other files only inside {where} and the "
            f"local Hugging Face cache, so it was not read")
