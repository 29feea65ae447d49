"""`vramlens check --fix`: apply a config's fixes to the files they name, then write those files back safely.

Which fixes: the safe ones (`Fix.safe`, see `vramlens.fixes`); with `--unsafe-fixes` the unsafe ones too — ruff's
fix levels (https://docs.astral.sh/ruff/linter/#fix-safety). "Make it fit" for a predicted OOM goes first.

Where: every edit names its file (`TextEdit.span.file`). An edit for a referenced file — a DeepSpeed JSON named by
`deepspeed: ds.json` — is applied to that file, never to the config; when that file may not be written (outside
the checked folder, not a regular file, unreadable) the whole fix is left out and the output says why. A fix is
kept only if every file it changed still parses.

How it writes (`write_if_unchanged`): only if the file is still what was read (size, mtime and content compared
just before the replace), through a temporary file in the same folder and `os.replace`, keeping the file's mode and
its line breaks (text inserted into a CRLF file gets CRLF). A path that is a symlink is written at its target only
when the target lies inside the checked folder.
"""
from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from vramlens import file_access
from vramlens.cli.paths import MAX_FILE_BYTES
from vramlens.text import apply_edits, line_ending, with_line_ending

MAX_FIX_ROUNDS = 8


class NotWritten(OSError):
    """Why a file was not written (it changed since it was read, or it leads outside the checked folder)."""


@dataclass
class ReadFile:
    """One file as --fix read it: its real path, text, and the stat taken before the read."""

    path: Path
    text: str
    st: os.stat_result


@dataclass
class FixOutcome:
    applied: list[str] = field(default_factory=list)         # titles of the fixes written
    not_applied: list[str] = field(default_factory=list)     # "<title>: <why>"
    written: list[Path] = field(default_factory=list)        # real paths written
    not_written: list[str] = field(default_factory=list)     # "<path>: <why>"
    text: str | None = None                                  # the config's new text, when it was written
    analysis: object | None = None                           # its analysis with every written change


def real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def stat_before_read(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def writable_reason(path: Path, root: Path) -> str | None:
    """None when --fix may write `path` (symlinks resolved): a regular file inside the checked folder `root`."""
    target = real(path)
    if not file_access.inside(target, [real(root)]):
        return f"{path} leads outside the checked folder {root}" if target != Path(os.path.abspath(path)) \
            else f"{path} is outside the checked folder {root}"
    try:
        if not stat.S_ISREG(os.stat(target).st_mode):
            return f"{path} is not a regular file"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return None


def read_for_fix(path: Path, root: Path) -> ReadFile:
    """A file a fix edits (not the config itself): checked, stat'ed, then read. Raises NotWritten or OSError."""
    why = writable_reason(path, root)
    if why is not None:
        raise NotWritten(why)
    target = real(path)
    st = os.stat(target)
    data = file_access.read_checked(target, MAX_FILE_BYTES, expect=target)
    try:
        return ReadFile(target, data.decode("utf-8"), st)
    except UnicodeDecodeError:
        raise NotWritten(f"{path} is not UTF-8 text") from None


def write_if_unchanged(original: ReadFile, new_text: str, root: Path) -> None:
    """Replace `original.path` with `new_text` atomically, only if the file is still `original` (see the module
    docstring). Raises NotWritten or OSError."""
    path = original.path
    why = writable_reason(path, root) or _changed_since(original)
    if why is not None:
        raise NotWritten(why)
    current = file_access.read_checked(path, MAX_FILE_BYTES, expect=path)
    if current != original.text.encode("utf-8"):
        raise NotWritten(f"{path} changed on disk since it was read; run the check again")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".vramlens-fix")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(new_text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), stat.S_IMODE(original.st.st_mode))
        if (why := _changed_since(original)) is not None:       # one more look just before the replace
            raise NotWritten(why)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def choose_fix(analysis, tried: set[str], unsafe: bool):
    """The next fix to apply: "make it fit" for a predicted OOM, then the other fixes of error findings, then the
    rest — each only when its level is allowed and it has edits."""
    def allowed(fix) -> bool:
        return bool(fix.edits) and fix.title not in tried and (fix.safe or unsafe)

    findings = list(analysis.findings)
    for finding in findings:
        if finding.rule_id == "VL001":
            for fix in finding.fixes:
                if fix.id in ("make-it-fit", "make-it-fit-safe") and allowed(fix):
                    return fix
    for finding in sorted(findings, key=lambda f: f.severity != "error"):
        for fix in finding.fixes:
            if allowed(fix):
                return fix
    return None


def _parses(analysis) -> bool:
    return analysis.plan is not None and not any(f.rule_id == "VL016" for f in analysis.findings)


def fix_file(path: Path, config: ReadFile, analysis, settings, root: Path, unsafe: bool) -> FixOutcome:
    """Apply fixes to the config at `path` (read as `config`) and the files its fixes edit; write what changed."""
    from vramlens.analysis import analyze

    out = FixOutcome()
    own = {"", str(path)}
    files: dict[Path, ReadFile] = {config.path: config}
    texts: dict[Path, str] = {config.path: config.text}

    def settings_with(overlay: dict[Path, str]):
        return settings.model_copy(update={"read_file": lambda p: overlay.get(real(Path(p)))})

    tried: set[str] = set()
    for _ in range(MAX_FIX_ROUNDS):
        fix = choose_fix(analysis, tried, unsafe)
        if fix is None:
            break
        tried.add(fix.title)
        by_file: dict[Path, list] = {}
        for e in fix.edits:
            target = config.path if e.span.file in own else real(Path(e.span.file))
            by_file.setdefault(target, []).append(e)
        problem, new_texts = None, {}
        for target, edits in by_file.items():
            if target not in files:
                try:
                    files[target] = read_for_fix(Path(next(e.span.file for e in edits)), root)
                    texts[target] = files[target].text
                except OSError as exc:
                    problem = f"not applied: {exc}"
                    break
            text = texts[target]
            eol = line_ending(text)
            try:
                new_texts[target] = apply_edits(text, [type(e)(span=e.span, new_text=with_line_ending(e.new_text, eol))
                                                       for e in edits])
            except ValueError as exc:
                problem = f"not applied: its edits to {target.name} overlap ({exc})"
                break
        if problem is None:
            candidate = {**texts, **new_texts}
            new_analysis = analyze(candidate[config.path], str(path), settings_with(candidate))
            if not _parses(new_analysis):
                problem = f"not applied: {path.name} would no longer parse"
            for target in new_texts:
                if problem is None and target != config.path and not _parses(
                        analyze(candidate[target], str(target), settings_with(candidate))):
                    problem = f"not applied: {target.name} would no longer parse"
        if problem is not None:
            out.not_applied.append(f"{fix.title}: {problem}")
            continue
        texts, analysis = candidate, new_analysis
        out.applied.append(fix.title)

    changed = [t for t, text in texts.items() if text != files[t].text]
    if not changed:
        return out
    # Check every file first and write none when one cannot be written: a fix half-written (the config edited,
    # its DeepSpeed JSON not) would be worse than none.
    for target in changed:
        why = writable_reason(target if target != config.path else path, root) or _changed_since(files[target])
        if why is not None:
            out.not_written.append(why)
    if out.not_written:
        out.not_applied.extend(f"{title}: not written: {'; '.join(out.not_written)}" for title in out.applied)
        out.applied = []
        return out
    for target in changed:
        try:
            write_if_unchanged(files[target], texts[target], root)
        except OSError as exc:
            out.not_written.append(str(exc))
            continue
        out.written.append(target)
    if out.not_written:                      # what is on disk now is what the report is about
        texts = {t: (texts[t] if t in out.written else files[t].text) for t in texts}
        analysis = analyze(texts[config.path], str(path), settings_with(texts))
    out.text = texts[config.path]
    out.analysis = analysis
    return out


def _changed_since(original: ReadFile) -> str | None:
    try:
        now = os.lstat(original.path)
    except OSError as exc:
        return f"{original.path}: {exc.strerror or exc}"
    if not stat.S_ISREG(now.st_mode) or (now.st_size, now.st_mtime_ns) != (original.st.st_size,
                                                                           original.st.st_mtime_ns):
        return f"{original.path} changed on disk since it was read; run the check again"
    return None
