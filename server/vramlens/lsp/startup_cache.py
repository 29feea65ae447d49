"""A persistent cache of the code that attrs and cattrs generate, so the server answers `initialize` sooner.

Why: `import lsprotocol.types` defines ~570 attrs classes, and attrs writes the source of each class's
`__init__`/`__eq__`/`__repr__`... and hands it to `compile()` (attr/_make.py, `_compile_and_eval`); pygls'
cattrs converter does the same for every message type it structures or unstructures for the first time
(cattrs/gen). Measured on a 2-core machine, that compiling is about 0.2 s of the ~0.4 s the import takes,
and it produces the same code objects on every start.

What: while installed, the module-level name `compile` in those library modules points at a function that
looks the code object up by a digest of (mode, filename, source) and compiles only on a miss, with the
`__future__` flags of the library module it stands in for, so the code object is the one the library's own
call would make. The code objects are kept with `marshal` in the user cache directory
(`$XDG_CACHE_HOME/vramlens`, else `~/.cache/vramlens`), in a file named after the Python implementation and
version and the attrs/cattrs/lsprotocol versions, headed by the interpreter's bytecode magic number and a
CRC-32 of the rest: the same mechanism as `__pycache__` for ordinary modules, read only when the file and
its folder belong to this user and no one else can write them. Only code that the libraries generated in
this process, from source they generated, is ever looked up, so a stale entry is simply never hit.

Failure modes: a missing, unreadable or corrupt file is ignored (everything compiles, as without the cache);
a cache directory that cannot be written is ignored too; if the library internals this relies on are not
there (a newer attrs that no longer calls `compile` from that module, say), nothing is hooked and the
server starts at its normal speed. The file is written atomically (temporary file, then rename), off the
event loop and after the `initialize` answer, never on its critical path.
"""
from __future__ import annotations

import __future__
import builtins
import hashlib
import importlib
import importlib.util
import logging
import marshal
import os
import stat
import sys
import threading
import time
import zlib
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Callable

from vramlens import file_access

log = logging.getLogger("vramlens.lsp.startup_cache")

# The library modules whose generated code goes through the cache, each with one of its functions that
# calls `compile` by its global name: if that function does not, the module's internals have changed
# and it is left alone.
HOOKS: tuple[tuple[str, str], ...] = (
    ("attr._make", "_compile_and_eval"),
    ("cattrs.gen", "make_dict_structure_fn_from_attrs"),
    ("cattrs.gen.typeddicts", "make_dict_structure_fn"),
)
VERSIONED = ("attrs", "cattrs", "lsprotocol")     # distributions named in the cache file's name
FORMAT = b"vramlens-codecache-1\n"   # then the bytecode magic number, a CRC-32 of the payload, the payload
MAX_ENTRIES = 20_000      # a bound on the file, far above what a session generates (~1,000 code objects)


def cache_dir() -> Path:
    return file_access.user_cache_home() / "vramlens"


def _distribution_versions(names: tuple[str, ...]) -> str:
    """`attrs26.1.0-cattrs26.2.1-...` from the installed dist-info folders next to the packages (cheaper
    than importlib.metadata, which costs ~20 ms to import here)."""
    parts = []
    listings: dict[str, list[str]] = {}
    for name in names:
        version = "unknown"
        spec = importlib.util.find_spec("attr" if name == "attrs" else name)
        if spec is not None and spec.origin:
            folder = str(Path(spec.origin).parent.parent)
            if folder not in listings:
                try:
                    listings[folder] = os.listdir(folder)
                except OSError:
                    listings[folder] = []
            prefix = name.replace("-", "_") + "-"
            for entry in listings[folder]:
                if entry.startswith(prefix) and entry.endswith(".dist-info"):
                    version = entry[len(prefix):-len(".dist-info")]
                    break
        parts.append(f"{name}{version}")
    return "-".join(parts)


def cache_file(folder: Path | None = None) -> Path:
    impl = sys.implementation
    tag = f"{impl.name}-{impl.version.major}.{impl.version.minor}.{impl.version.micro}"
    return (folder or cache_dir()) / f"codecache-{tag}-{_distribution_versions(VERSIONED)}.marshal"


def _future_flags(module: ModuleType) -> int:
    """The compiler flags of the `from __future__ import ...` statements in `module` (what a plain
    `compile()` called from inside it inherits)."""
    flags = 0
    for name in __future__.all_feature_names:
        feature = getattr(__future__, name)
        if module.__dict__.get(name) is feature:
            flags |= feature.compiler_flag
    return flags


def _private(path: Path) -> bool:
    """Owned by this user, not a symlink, and with no access at all for group or others: a 0700 folder and
    a 0600 file, which is what `save` creates (mkdir 0700, mkstemp 0600). A git checkout gives 0644 files in
    0755 folders, so a cache file shipped in a repository (with XDG_CACHE_HOME pointed into it) is never
    loaded; neither is one another user could have planted in a shared folder. Raises OSError when `path`
    is missing."""
    if not hasattr(os, "getuid"):
        return True
    st = os.lstat(path)
    return (st.st_uid == os.getuid() and not stat.S_ISLNK(st.st_mode)
            and not st.st_mode & 0o077)


class CodeCache:
    """Code objects by digest. Counts what was reused, what was compiled for the first time (`compiled`),
    and what was compiled again because a generated function's source differs from the one on file
    (`rebuilt`: attrs puts `hash()` of a string, which differs in each process, into the `__hash__` of
    frozen classes; one such class, cattrs' AttributeOverride, is defined on every start)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reused = 0
        self.compiled = 0
        self.rebuilt = 0
        self.hooked: list[str] = []
        self._entries: dict[bytes, CodeType] = {}
        self._used: dict[bytes, CodeType] = {}
        self._by_filename: dict[str, bytes] = {}      # the entry for each generated "file" name
        self._saved_compiled = 0
        self._hooks: list[tuple[ModuleType, Callable[..., Any]]] = []
        self._lock = threading.Lock()

    # ---- file ----------------------------------------------------------------------------------

    def load(self) -> None:
        try:
            if (file_access.under_current_folder(self.path.parent) or not _private(self.path.parent)
                    or not _private(self.path)):
                log.info("startup cache %s: not private to this user, ignored", self.path)
                return
            data = self.path.read_bytes()
        except OSError:
            return
        header = FORMAT + importlib.util.MAGIC_NUMBER
        if not data.startswith(header):
            log.info("startup cache %s: not this format or Python, ignored", self.path)
            return
        payload = data[len(header) + 4:]
        if data[len(header):len(header) + 4] != zlib.crc32(payload).to_bytes(4, "little"):
            log.info("startup cache %s: damaged, ignored", self.path)
            return
        try:
            entries = marshal.loads(payload)
        except (ValueError, EOFError, TypeError) as exc:
            log.info("startup cache %s unreadable (%s), ignored", self.path, exc)
            return
        if isinstance(entries, dict):
            self._entries = {k: v for k, v in entries.items() if isinstance(k, bytes) and isinstance(v, CodeType)}
            self._by_filename = {v.co_filename: k for k, v in self._entries.items() if v.co_filename}

    def save(self) -> bool:
        """Write the file, if anything was compiled for the first time since the last write: what it held
        plus what this process compiled (only what this process used, past MAX_ENTRIES). Atomic: readers
        see the old file or the new one, never half of one."""
        with self._lock:
            if self.compiled == self._saved_compiled:
                return False
            compiled = self.compiled
            entries = dict(self._entries)
            if len(entries) > MAX_ENTRIES:
                entries = dict(self._used)
        import tempfile

        try:
            payload = marshal.dumps(entries)
            data = FORMAT + importlib.util.MAGIC_NUMBER + zlib.crc32(payload).to_bytes(4, "little") + payload
            if file_access.under_current_folder(self.path.parent):
                raise ValueError("inside the folder the server was started in")
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._remove_stale_temporaries()
            fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except (OSError, ValueError) as exc:
            log.info("startup cache not written to %s: %s", self.path, exc)
            return False
        with self._lock:
            self._saved_compiled = compiled
        log.info("startup cache: %d code objects written to %s", len(entries), self.path)
        return True

    def _remove_stale_temporaries(self) -> None:
        """A process stopped while writing leaves its temporary file behind: clear those older than an hour."""
        for tmp in self.path.parent.glob(self.path.name + ".*.tmp"):
            try:
                if time.time() - tmp.stat().st_mtime > 3600:
                    tmp.unlink()
            except OSError:
                pass

    def save_in_background(self) -> None:
        threading.Thread(target=self.save, daemon=True, name="vramlens-startup-cache").start()

    # ---- hooks ---------------------------------------------------------------------------------

    def _compiler(self, module: ModuleType) -> Callable[..., Any]:
        flags = _future_flags(module)
        real = builtins.compile

        def compile(source, filename, mode, *args, **kwargs):     # noqa: A001 - stands in for the builtin
            if args or kwargs or not isinstance(source, str) or not isinstance(filename, str):
                return real(source, filename, mode, *args, **kwargs)
            key = hashlib.blake2b(f"{mode}\0{filename}\0{source}".encode("utf-8", "surrogatepass"),
                                  digest_size=20).digest()
            code = self._entries.get(key)
            if code is None:
                code = real(source, filename, mode, flags, True)
                self._entries[key] = code
                previous = self._by_filename.get(filename) if filename else None
                if previous is not None and previous not in self._used:
                    # the same function as on file, generated differently this time: replace it
                    self._entries.pop(previous, None)
                    self._used.pop(previous, None)
                    self.rebuilt += 1
                else:
                    self.compiled += 1
                if filename:
                    self._by_filename[filename] = key
            else:
                self.reused += 1
            self._used[key] = code
            return code

        return compile

    def install(self) -> bool:
        """Hook every library module whose internals are as expected; True if any was."""
        for module_name, function_name in HOOKS:
            try:
                module = importlib.import_module(module_name)
            except Exception:
                continue
            fn = getattr(module, function_name, None)
            code = getattr(fn, "__code__", None)
            if code is None or "compile" not in code.co_names or "compile" in module.__dict__:
                log.info("startup cache: %s.%s is not as expected, not hooked", module_name, function_name)
                continue
            hook = self._compiler(module)
            module.compile = hook        # type: ignore[attr-defined] - shadows the builtin in that module only
            self._hooks.append((module, hook))
            self.hooked.append(module_name)
        return bool(self._hooks)

    def uninstall(self) -> None:
        for module, hook in self._hooks:
            if module.__dict__.get("compile") is hook:
                del module.compile      # type: ignore[attr-defined]
        self._hooks.clear()

    def summary(self) -> str:
        return (f"{self.reused} generated code objects reused, {self.compiled} compiled, {self.rebuilt} rebuilt "
                f"(hooked: {', '.join(self.hooked) or 'nothing'}; file {self.path})")


_active: CodeCache | None = None


def install(folder: Path | None = None) -> CodeCache | None:
    """Load the cache file and hook attrs/cattrs; None (and nothing hooked) if that is not possible.
    Call it before `lsprotocol.types` is imported."""
    global _active
    if _active is not None:
        return _active
    try:
        cache = CodeCache(cache_file(folder))
        cache.load()            # first: importing cattrs.gen (below) already defines attrs classes
        if not cache.install():
            return None
    except Exception:
        log.warning("startup cache disabled", exc_info=True)
        return None
    _active = cache
    return cache


def active() -> CodeCache | None:
    return _active
