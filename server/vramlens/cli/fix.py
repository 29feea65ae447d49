"""`vramlens check --fix`: apply a config's fixes to the files they name, then write those files back safely.

Which fixes: the safe ones (`Fix.safe`, see `vramlens.fixes`); with `--unsafe-fixes` the unsafe ones too — ruff's
fix levels (https://docs.astral.sh/ruff/linter/#fix-safety). "Make it fit" for a predicted OOM goes first.

Where: every edit names its file (`TextEdit.span.file`). An edit for a referenced file — a DeepSpeed JSON named by
`deepspeed: ds.json` — is applied to that file, never to the config; when that file may not be written (outside
the checked folder, not a regular file, unreadable) the whole fix is left out and the output says why. A fix is
kept only if every file it changed still parses.

How it writes (`write_all`): every file of the fixes or none. Each file is checked (still what was read: size,
mtime and content) and its new text written to a temporary file in its own folder, beside a copy of what it holds
now; only when every file is staged are they replaced, one `os.replace` each (atomic on POSIX:
https://docs.python.org/3/library/os.html#os.replace), each checked once more just before. When a write fails (a
read-only folder, a full disk) or a file changes meanwhile, the files already replaced get their copies back, so
every file is left as it was, and the output names the file and why (exit 2 when the system refused the write).
Files keep their mode and their line breaks (text inserted into a CRLF file gets CRLF). A path that is a symlink is
written at its target only when the target lies inside the checked folder.

Which fixes it leaves and says so (`FixOutcome.not_applied`): one its level allows that has no edits (the format
cannot express it; the reason is the fix's note), and a memory fix that leaves the run out of memory yet costs
something — speed (a smaller micro-batch when the peak is the optimizer step), another package, or a change to how
it trains: each is listed with why. "Make it fit" and the free fixes (same speed, safe) are applied.
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


class WriteFailed(OSError):
    """A file of the fixes could not be written (the system refused it, or it changed meanwhile): `path` names it,
    the message says why."""

    def __init__(self, path: Path, message: str):
        super().__init__(message)
        self.path = path


@dataclass
class ReadFile:
    """One file as --fix read it: its real path, text, and the stat taken before the read."""

    path: Path
    text: str
    st: os.stat_result


@dataclass
class FixOutcome:
    applied: list[str] = field(default_factory=list)  # titles of the fixes written
    not_applied: list[str] = field(default_factory=list)  # "<title>: <why>"
    written: list[Path] = field(default_factory=list)  # real paths written
    not_written: list[str] = field(default_factory=list)  # "<path>: <why>"
    failed: list[tuple[str, str]] = field(default_factory=list)  # (file, why) a write failed: nothing written
    text: str | None = None  # the config's new (analysed) text, when it was written
    file_text: str | None = None  # the config file's new text, when it was written
    analysis: object | None = None  # its analysis with every written change


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
        return (
            f"{path} leads outside the checked folder {root}"
            if target != Path(os.path.abspath(path))
            else f"{path} is outside the checked folder {root}"
        )
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


def write_all(changes: list[tuple[ReadFile, str]], root: Path) -> None:
    """Replace each `ReadFile` with its new text, all or none (see the module docstring). Raises WriteFailed when a
    file cannot be written or changed since it was read; every file is then as it was, unless putting one back
    failed too, which its message says (with where the file's old text is kept)."""
    staged: list[tuple[ReadFile, str, str]] = []  # (file, temporary file with its new text, copy of its old)
    replaced: list[tuple[ReadFile, str]] = []  # (file, copy of its old text)
    try:
        for original, new_text in changes:
            _check_unchanged(original, root)
            staged.append(_stage(original, new_text))
        for original, new, old in staged:
            if (why := _changed_since(original)) is not None:  # one more look just before the replace
                raise WriteFailed(original.path, why)
            try:
                os.replace(new, original.path)
            except OSError as exc:
                raise WriteFailed(original.path, f"cannot write {original.path}: {exc.strerror or exc}") from None
            replaced.append((original, old))
    except BaseException as exc:
        kept = _restore(replaced)
        _remove(path for _, new, old in staged for path in (new, old) if path not in kept)
        if kept and isinstance(exc, WriteFailed):
            raise WriteFailed(exc.path, f"{exc}; and putting back failed: " + "; ".join(kept.values())) from None
        raise
    _remove(old for _, _, old in staged)


def _check_unchanged(original: ReadFile, root: Path) -> None:
    why = writable_reason(original.path, root) or _changed_since(original)
    try:
        same = why is None and file_access.read_checked(
            original.path, MAX_FILE_BYTES, expect=original.path
        ) == original.text.encode("utf-8")
    except OSError as exc:
        why = f"cannot read {original.path}: {exc.strerror or exc}"
    else:
        why = why or (None if same else f"{original.path} changed on disk since it was read; run the check again")
    if why is not None:
        raise WriteFailed(original.path, why)


def _stage(original: ReadFile, new_text: str) -> tuple[ReadFile, str, str]:
    """(file, temporary file with `new_text`, temporary copy of the file as it is), both in the file's folder
    with its mode, the copy with its times too."""
    new = _temp_copy(original, new_text.encode("utf-8"))
    try:
        return original, new, _temp_copy(original, original.text.encode("utf-8"), keep_times=True)
    except BaseException:
        _remove([new])
        raise


def _temp_copy(original: ReadFile, data: bytes, keep_times: bool = False) -> str:
    path = original.path
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".vramlens-fix")
    except OSError as exc:
        raise WriteFailed(path, f"cannot write {path}: its folder takes no new file ({exc.strerror or exc})") from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, stat.S_IMODE(original.st.st_mode))
            os.fsync(fd)
        finally:
            os.close(fd)
        if keep_times:
            os.utime(tmp, ns=(original.st.st_atime_ns, original.st.st_mtime_ns))
    except OSError as exc:
        _remove([tmp])
        raise WriteFailed(path, f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        _remove([tmp])
        raise
    return tmp


def _restore(replaced: list[tuple[ReadFile, str]]) -> dict[str, str]:
    """Put back the files already replaced; {copy kept: why} for any that could not be."""
    kept: dict[str, str] = {}
    for original, old in reversed(replaced):
        try:
            os.replace(old, original.path)
        except OSError as exc:
            kept[old] = f"{original.path} could not be put back ({exc.strerror or exc}): its old text is in {old}"
    return kept


def _remove(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:  # already gone; or a leftover temporary file, the outcome is reported either way
            pass


def partial_cost(fix, analysis) -> str | None:
    """Why --fix leaves a memory fix that does not make the run fit although it costs something: speed (a smaller
    micro-batch when the peak is the optimizer step), another package or a change to what or how it trains
    (unsafe). Such a fix is offered, and applied only by hand; a free one (same speed, safe) is applied. None
    when --fix may apply it."""
    from vramlens import fixes_objective
    from vramlens.fixes import MEMORY_FIX_IDS

    before, after = analysis.estimate, fix.estimate_after
    if fix.id not in MEMORY_FIX_IDS | set(fixes_objective.FIX_IDS) or before is None or after is None or after.fits:
        return None
    if (
        before.throughput is not None
        and after.throughput is not None
        and after.throughput.tokens_per_s < before.throughput.tokens_per_s * 0.995
    ):
        return "it costs speed and the run still does not fit"
    if not fix.safe:
        return "it changes how the run trains or needs another package, and the run still does not fit"
    return None


def skipped(analysis, tried: set[str], unsafe: bool) -> list[str]:
    """ "<title>: not applied: <why>" for each fix --fix would take at its level but left: one without edits (the
    format cannot express it) or a costly half measure (`partial_cost`)."""
    out: dict[str, str] = {}
    for finding in analysis.findings:
        for fix in finding.fixes:
            if fix.title in tried or fix.title in out or not (fix.safe or unsafe):
                continue
            if not fix.edits:
                out[fix.title] = f"not applied: it cannot be written into this file: {fix.note or 'make it by hand'}"
            elif (why := partial_cost(fix, analysis)) is not None:
                out[fix.title] = f"not applied: {why}"
    return [f"{title}: {why}" for title, why in out.items()]


def choose_fix(analysis, tried: set[str], unsafe: bool):
    """The next fix to apply: "make it fit" for a predicted OOM, then the other fixes of error findings, then the
    rest — each only when its level is allowed, it has edits, and it is not a costly half measure
    (`partial_cost`)."""

    def allowed(fix) -> bool:
        return (
            bool(fix.edits) and fix.title not in tried and (fix.safe or unsafe) and partial_cost(fix, analysis) is None
        )

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


def fix_file(
    path: Path,
    config: ReadFile,
    analysis,
    settings,
    root: Path,
    unsafe: bool,
    *,
    analysed_text: str | None = None,
    encode=None,
) -> FixOutcome:
    """Apply fixes to the config at `path` (read as `config`) and the files its fixes edit; write what changed.

    A config analysed as other text than the file's own (a notebook: its cells' text, see
    `vramlens.formats.notebook`) passes that text as `analysed_text` and `encode(new analysed text)`, which gives
    the file's new text, or None when it cannot (then nothing is written and the output says why)."""
    from vramlens.analysis import analyze

    out = FixOutcome()
    own = {"", str(path)}
    files: dict[Path, ReadFile] = {config.path: config}
    texts: dict[Path, str] = {config.path: config.text if analysed_text is None else analysed_text}
    originals = dict(texts)

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
                new_texts[target] = apply_edits(
                    text, [type(e)(span=e.span, new_text=with_line_ending(e.new_text, eol)) for e in edits]
                )
            except ValueError as exc:
                problem = f"not applied: its edits to {target.name} overlap ({exc})"
                break
        if problem is None:
            candidate = {**texts, **new_texts}
            new_analysis = analyze(candidate[config.path], str(path), settings_with(candidate))
            if not _parses(new_analysis):
                problem = f"not applied: {path.name} would no longer parse"
            for target in new_texts:
                if (
                    problem is None
                    and target != config.path
                    and not _parses(analyze(candidate[target], str(target), settings_with(candidate)))
                ):
                    problem = f"not applied: {target.name} would no longer parse"
        if problem is not None:
            out.not_applied.append(f"{fix.title}: {problem}")
            continue
        texts, analysis = candidate, new_analysis
        out.applied.append(fix.title)

    for target, file in files.items():
        originals.setdefault(target, file.text)
    changed = [t for t, text in texts.items() if text != originals[t]]
    if not changed:
        out.not_applied.extend(skipped(analysis, tried, unsafe))
        return out
    on_disk = dict(texts)
    if encode is not None and config.path in changed:
        on_disk[config.path] = encode(texts[config.path])
        if on_disk[config.path] is None:
            out.not_applied.extend(
                f"{title}: not written: {path.name}'s JSON layout could not be kept, so it is "
                f"left as it is; make this change in its cell"
                for title in out.applied
            )
            out.applied = []
            return out
    # Every file or none: a fix half-written (the config edited, its DeepSpeed JSON not) would be worse than none.
    for target in changed:
        why = writable_reason(target if target != config.path else path, root) or _changed_since(files[target])
        if why is not None:
            out.not_written.append(why)
    if not out.not_written:
        try:
            write_all([(files[t], on_disk[t]) for t in changed], root)
        except WriteFailed as exc:
            out.failed.append((str(exc.path), str(exc)))
            out.not_written.append(str(exc))
    if out.not_written:
        out.not_applied.extend(
            f"{title}: not written, no file was changed: {'; '.join(out.not_written)}" for title in out.applied
        )
        out.applied = []
        return out
    out.written = changed
    out.text = texts[config.path]
    out.file_text = on_disk[config.path] if config.path in out.written else None
    out.analysis = analysis
    out.not_applied.extend(skipped(analysis, tried, unsafe))
    return out


def _changed_since(original: ReadFile) -> str | None:
    try:
        now = os.lstat(original.path)
    except OSError as exc:
        return f"{original.path}: {exc.strerror or exc}"
    if not stat.S_ISREG(now.st_mode) or (now.st_size, now.st_mtime_ns) != (
        original.st.st_size,
        original.st.st_mtime_ns,
    ):
        return f"{original.path} changed on disk since it was read; run the check again"
    return None
