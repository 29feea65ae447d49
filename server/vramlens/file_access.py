"""Which other files vramlens may read while it analyses a document.

A config names other files: a DeepSpeed JSON, a base config, a launcher's config, a local model folder.
In a repository opened in an editor those names were written by whoever wrote the repository, so they
are followed only into the workspace (without a workspace: the document's folder, or the current
directory) and the local Hugging Face cache — never into `../../etc/passwd`, an absolute path elsewhere,
or through a symlink that leads out. Paths are compared after resolving `..` and symlinks.

A check on a path holds only until the path changes: a folder on the way can be swapped for a link out between
the check and the open. So a file is found with `resolved_inside` (the path as the check saw it) and read with
`read_checked(..., roots=...)`, which checks the file it actually opened; a swap then costs the read, never
brings another file's content in.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from vramlens.knowledge.hf_cache import hub_cache_dirs

# Linux PATH_MAX (include/uapi/linux/limits.h): no longer path names a file open() can reach (ENAMETOOLONG).
# Checked before resolving, which costs a system call per component (`m/` × 40,000 took seconds).
MAX_PATH_CHARS = 4096


def expand_user(name: str | Path) -> Path:
    """`~/x` and `~user/x` expanded; a name whose user does not exist (`~0`) stays as written."""
    try:
        return Path(name).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        return Path(name)


def _real(path: Path) -> Path | None:
    if len(str(path)) > MAX_PATH_CHARS:
        return None
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte in the name
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
    base = _real(base_folder(workspace, document))
    return ([base] if base is not None else []) + cache_roots()


def cache_roots() -> list[Path]:
    """The Hugging Face hub caches that exist, symlinks resolved."""
    return [r for r in (_real(p) for p in hub_cache_dirs()) if r is not None]


def inside(path: Path, roots: list[Path]) -> bool:
    """Whether `path`, with `..` and symlinks resolved, lies in one of `roots`."""
    return resolved_inside(path, roots) is not None


def resolved_inside(path: Path, roots: list[Path] | None) -> Path | None:
    """`path` with `..` and symlinks resolved, if that lies in one of `roots` (any resolvable path when `roots`
    is None); else None. What it returns is where the file was when checked: read it with
    `read_checked(..., roots=roots)`, which checks the file it opens, not this path again."""
    real = _real(path)
    if real is None or (roots is not None and not _within(real, roots)):
        return None
    return real


def _within(real: Path, roots: list[Path]) -> bool:
    """Whether the already-resolved `real` lies in one of `roots` (resolved too: never resolved again here, so a
    link swapped in after the check cannot change the answer)."""
    return any(real.is_relative_to(root) for root in roots)


def refusal(what: str, target: str, workspace: Path | None) -> str:
    """Why a file was not read, for an issue on the reference."""
    where = "the workspace" if workspace is not None else "this file's folder"
    return (
        f"{what} `{target}` is outside {where}; vramlens reads other files only inside {where} and the "
        f"local Hugging Face cache, so it was not read"
    )


def user_cache_home() -> Path:
    """The user's cache folder for files vramlens writes and later trusts (calibration):
    `$XDG_CACHE_HOME` only when it is absolute and not under the current directory (a relative value is
    relative to wherever the server or CLI was started, usually a repository), else `~/.cache`
    (XDG Base Directory spec: "If an implementation encounters a relative path in any of these variables it
    should consider the path invalid and ignore it",
    https://specifications.freedesktop.org/basedir-spec/0.8/)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if base and os.path.isabs(base) and not under_current_folder(Path(base)):
        return Path(base)
    return Path.home() / ".cache"


def under_current_folder(path: Path) -> bool:
    """Whether `path` (symlinks resolved) is the current directory or inside it — where the server or CLI
    was started, which in an editor or a shell is usually the repository being worked on."""
    here, there = _real(Path.cwd()), _real(path)
    if here is None or there is None:
        return True
    return there == here or here in there.parents


class NotReadable(OSError):
    """A file refused by `read_checked`: not a regular file, too large, or not the file that was checked."""


def read_checked(path: Path, max_bytes: int, expect: Path | None = None, roots: list[Path] | None = None) -> bytes:
    """The bytes of `path`, read only if what was *opened* is a regular file of at most `max_bytes` and, when
    given, is the file `expect` (a path already checked, symlinks resolved: compared as it is, not resolved
    again) and lies inside `roots`.

    Open first, check after: the checks are on the open descriptor (fstat; its real path from
    /proc/self/fd on Linux, F_GETPATH on macOS, else the device and inode of `expect`), so a symlink — the file's
    own or a folder's on the way — swapped between a workspace check and the read cannot bring another file's
    content in. Opened with
    O_NONBLOCK and O_NOCTTY, so a FIFO or a terminal never blocks, and /dev/zero or /dev/stdin is refused
    by fstat before anything is read. Raises OSError (NotReadable for a refusal)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotReadable(f"{path}: not a regular file")
        if st.st_size > max_bytes:
            raise NotReadable(f"{path}: {st.st_size:,} bytes, more than the {max_bytes:,} read")
        if expect is not None or roots is not None:
            opened = _opened_path(fd, st, expect)
            if opened is None:
                raise NotReadable(f"{path}: changed while it was being read")
            if expect is not None and opened != Path(os.path.abspath(expect)):
                raise NotReadable(f"{path}: changed while it was being read")
            if roots is not None and not _within(opened, [r for r in map(_real, roots) if r is not None]):
                raise NotReadable(f"{path}: leads outside the folders that may be read")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:  # grew after fstat
            raise NotReadable(f"{path}: more than the {max_bytes:,} bytes read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _opened_path(fd: int, st: os.stat_result, expect: Path | None) -> Path | None:
    """The real path of the open file `fd`: /proc/self/fd/N on Linux (proc(5)); F_GETPATH on macOS (fcntl(2));
    elsewhere `expect` when it is the same device and inode."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
    try:
        import fcntl

        if hasattr(fcntl, "F_GETPATH"):  # macOS; MAXPATHLEN is 1024 (sys/param.h)
            return Path(os.fsdecode(fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024)).split(b"\0", 1)[0]))
    except (ImportError, OSError):
        pass
    if expect is None:
        return None
    try:
        there = os.stat(expect)
    except OSError:
        return None
    return _real(expect) if (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino) else None


def read_text_checked(
    path: Path, max_bytes: int, expect: Path | None = None, roots: list[Path] | None = None, errors: str = "replace"
) -> str:
    """`read_checked`, decoded as UTF-8."""
    return read_checked(path, max_bytes, expect, roots).decode("utf-8", errors)
