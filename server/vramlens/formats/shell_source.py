"""Files a shell script reads in: `source FILE` / `. FILE`, and the workspace scripts it runs (`bash x.sh`,
`sh x.sh`, `sbatch x.sh`).

A launch script often keeps its settings in another file (Megatron-LM examples/academic_paper_scripts/sc21:
`run_figure_11.sh` sets TP/PP/sizes, `. \\`pwd\\`/CONFIG.sh` builds MEGATRON_PARAMS from them, `. \\`pwd\\`/SBATCH.sh`
runs `sbatch … SRUN.sh`, whose `srun … sh -c "${CMD}"` runs `python pretrain_gpt.py ${MEGATRON_PARAMS}`). Such a
file, when it lies inside the workspace, is read by the same reader as the script (never run): its text is laid
after the script's own, its commands are read where the `source` stands, with the variables set so far, and every
span made in it names that file (`SourcedIndex`). A script run with `bash`/`sh`/`sbatch` is read the same way; the
variables it sets are dropped when it returns, as a child process's are.

The target is found as bash finds it when the script is run from its own folder: a literal or variable path,
`\\`pwd\\``/`$(pwd)`/`$PWD` (the script's folder), `$(dirname $0)`, `$(dirname "${BASH_SOURCE[0]}")`,
`$(cd "$(dirname "$0")" && pwd)`, `$(dirname "$(readlink -f "$0")")` (the folder of `$0`: the script being run, which a
sourced file shares; of `BASH_SOURCE`: the file the line is in). A relative path is looked for in the script's
folder, the folder of the file the line is in, then the workspace root. The same idioms name the config file a
launch passes (`--config "$SCRIPT_DIR/ray_grpo_colocate.yaml"`, `Sourcing.path_word`). Depth-limited (MAX_DEPTH),
each file at most once (cycle-safe), MAX_FILES files and MAX_CHARS characters in all, only inside the workspace
(`file_access.base_folder`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vramlens import file_access
from vramlens.formats import shell
from vramlens.plan import Span
from vramlens.text import LineIndex

MAX_DEPTH = 4  # `source` inside a sourced file inside …
MAX_FILES = 16  # files read in per script
MAX_CHARS = 400_000  # characters read in per script
_SCRIPT_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch")
_RUNNERS = frozenset({"bash", "sh", "zsh", "dash", "sbatch"})  # programs that run a script file
_LONE_CR = re.compile(r"\r(?!\n)")

# `$(…)` / `` `…` `` bodies that name a folder: `pwd`, and the folder of `$0` / `${BASH_SOURCE[0]}`
_PWD = re.compile(r"\s*pwd(?:\s+-[LP])?\s*")
_DIRNAME = re.compile(
    r"""\s*(?:cd\s+)?(?:realpath\s+|readlink\s+-[ef]\s+)?["']?\$?\(?\s*dirname\s+["']?"""
    r"""(?:\$\(\s*(?:readlink\s+-[ef]|realpath)\s+["']?)?"""
    r"""(?P<ref>\$0|\$\{0\}|\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE)["']?\s*\)?["']?\s*\)?["']?"""
    r"""(?P<up>(?:/\.\.)*)["']?\s*(?:(?:&&|;)\s*pwd(?:\s+-[LP])?)?\s*""",
)


@dataclass
class _File:
    path: Path  # resolved
    base: int  # where its text starts in the combined text
    end: int
    index: LineIndex
    zero: Path  # the folder of `$0` while it runs
    depth: int = 1  # files read in on the way to it


class SourcedIndex(LineIndex):
    """The script's own LineIndex, whose spans past its own text name the file read in there."""

    __slots__ = ("files",)

    def __init__(self, text: str, file: str = "", first_line: int = 0):
        super().__init__(text, file, first_line)
        self.files: list[_File] = []

    def span(self, start: int, end: int) -> Span:
        own = len(self.text)
        if start <= own:
            return super().span(start, min(end, own))
        for f in self.files:
            if f.base <= start <= f.end:
                return f.index.span(start - f.base, min(end, f.end) - f.base)
        return super().span(own, own)


@dataclass
class Sourcing:
    """What one script's analysis reads in; `index` is the script's LineIndex."""

    path: str
    workspace: Path | None = None
    read_file: object = None  # the editor's open buffers (formats.ParseContext.read_file)
    index: SourcedIndex | None = None
    notes: list[str] = field(default_factory=list)
    seen: set[Path] = field(default_factory=set)
    chars: int = 0
    _restore: dict[int, dict] = field(default_factory=dict)  # id(marker command) → the caller's variables
    # `source` lines whose file is named by a value only known when the script runs: (the line's words, where, why)
    unread: list[tuple[str, Span, str]] = field(default_factory=list)

    def make_index(self, text: str, first_line: int) -> SourcedIndex:
        self.index = SourcedIndex(text, self.path, first_line)
        me = self._real(Path(self.path))
        if me is not None:
            self.seen.add(me)
        return self.index

    # -- where a line is ----------------------------------------------------------------------------

    def _roots(self) -> list[Path]:
        base = file_access._real(file_access.base_folder(self.workspace, self.path))
        return [base] if base is not None else []

    def _real(self, p: Path) -> Path | None:
        return file_access.resolved_inside(p, self._roots())

    def _file_at(self, offset: int) -> _File | None:
        for f in self.index.files if self.index is not None else ():
            if f.base <= offset <= f.end:
                return f
        return None

    def _dirs(self, offset: int) -> tuple[Path, Path, Path]:
        """(the script's folder — where it is taken to run —, the folder of `$0`, the folder of the line's file)."""
        top = Path(self.path).parent
        f = self._file_at(offset)
        return (top, f.zero, f.path.parent) if f is not None else (top, top, top)

    # -- the statement ------------------------------------------------------------------------------

    def own(self, cmd: shell.Command) -> bool:
        """Whether `cmd` is written in the script itself (not in a file read in)."""
        return self.index is None or cmd.start <= len(self.index.text)

    def restore(self, cmd: shell.Command) -> dict | None:
        """The caller's variables, at the marker that ends a script run as a child (`bash x.sh`); else None."""
        return self._restore.pop(id(cmd), None)

    def enter(
        self,
        text: str,
        cmd: shell.Command,
        head: str | None,
        rest: list[shell.Word],
        env: dict,
        prefix: dict,
        ex: shell.Expander,
    ) -> tuple[str, list[shell.Command]] | None:
        """For `source F` / `. F` / `bash F` / `sbatch … F` naming a workspace file: (the text with F laid after it,
        F's commands to read now); None for any other command (or a file that cannot be read)."""
        prog = (head or "").rsplit("/", 1)[-1]
        child = prog in _RUNNERS
        if not (head in (".", "source") or child) or len(rest) < 2 or self.index is None:
            return None
        if child:
            target = next(
                (
                    w
                    for w in rest[1:]
                    if shell.raw_text(text, w).strip("'\"").lower().endswith(_SCRIPT_SUFFIXES)
                    and not shell.raw_text(text, w).startswith("-")
                ),
                None,
            )
            if target is None:
                return None
        else:
            target = rest[1]
        top, zero, here = self._dirs(cmd.start)
        name = self._target(text, target, {**env, **prefix}, ex, top, zero, here, 0)
        if not name:
            known = {**env, **prefix}
            if not child and (why := self._unknown(text, target, known, ex, (top, zero, here))):
                parent = self._file_at(cmd.start)
                where = f"`{head} {shell.raw_text(text, target)}` in `{self._name(parent.path) if parent else 'it'}`"
                self.unread.append((where, self.index.span(cmd.start, cmd.end), why))
            return None
        found = self._find(name, top, here)
        if found is None:
            return None
        if found in self.seen or len(self.seen) > MAX_FILES:
            return None
        parent = self._file_at(cmd.start)
        depth = (parent.depth if parent is not None else 0) + 1
        if depth > MAX_DEPTH:
            return None
        body = self._read(found)
        if body is None or self.chars + len(body) > MAX_CHARS:
            return None
        self.seen.add(found)
        self.chars += len(body)
        body = _LONE_CR.sub("\n", body)
        base = len(text) + 1
        text = text + "\n" + body
        end = len(text)
        entry = _File(found, base, end, LineIndex(body, str(found)), found.parent if child else zero, depth)
        self.index.files.append(entry)
        commands = shell._Scanner(text, end).run(base)
        for c in commands:
            c.depth = cmd.depth
        line = self.index.span(cmd.start, cmd.end).start_line + 1
        where = self._name(parent.path) if parent is not None else "this script"
        how = "runs" if child else "sources"
        self.notes.append(
            f"read `{self._name(found)}`, which {where} {how} (line {line}), with the variables set so far"
        )
        if child:  # the child sees the command's `NAME=value` prefixes; the caller's variables come back after it
            marker = shell.Command([], end, end)
            self._restore[id(marker)] = dict(env)
            commands.append(marker)
            env.update(prefix)
        return text, commands

    def _unknown(self, text: str, w: shell.Word, env: dict, ex: shell.Expander, dirs: tuple[Path, Path, Path]) -> str:
        """Which variables of a `source` word are only known when the script runs, and where each was set
        (`MLM_MODEL_CFG=${1}`: the script's first argument); "" when none is."""
        said: list[str] = []
        for p in w.parts:
            if p[0] != shell.VAR or p[1] in ("PWD", "0") or any(p[1] in s for s in said):
                continue
            var = env.get(p[1])
            top, zero, here = dirs
            if (
                var is not None
                and var.value is not None
                or self._target(text, _Parts([p]), env, ex, top, zero, here, 0)
            ):
                continue
            if var is None or var.word is None:
                said.append(f"`{p[1]}` is not set in the script")
                continue
            assigned = shell.raw_text(text, var.word)
            where = self.index.span(var.word.start, var.word.end) if self.index is not None else None
            at = f", line {where.start_line + 1} of `{Path(where.file).name}`" if where is not None else ""
            value = assigned.split("=", 1)[-1].strip("\"'{}$")
            arg = f" (the script's command-line argument `${value}`)" if value.isdigit() else ""
            said.append(f"`{p[1]}` is set by `{assigned}`{at}{arg}")
        return "; ".join(said)

    def path_word(self, text: str, w: shell.Word, env: dict) -> str | None:
        """The file a command's word names with the folder idioms above (`"$SCRIPT_DIR/x.yaml"` after
        `SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"`): relative to the script's folder when it lies
        there, absolute otherwise; None when a part of it is only known when the script runs."""
        top, zero, here = self._dirs(w.start)
        name = self._target(text, w, env, shell.Expander(), top, zero, here, 0)
        if not name:
            return None
        path = Path(name)
        if not path.is_absolute():
            return name
        try:
            return str(path.relative_to(top)) if path.is_relative_to(top) else name
        except ValueError:
            return name

    def _name(self, p: Path) -> str:
        for root in self._roots():
            if p.is_relative_to(root):
                return str(p.relative_to(root))
        return p.name

    def _target(self, text, w, env, ex, top: Path, zero: Path, here: Path, depth: int) -> str | None:
        """The path a `source` word names, with the folder idioms above worked out; None when unknown."""
        if depth > 3:
            return None
        out: list[str] = []
        for p in w.parts:
            kind = p[0]
            if kind == shell.LIT:
                out.append(p[1])
            elif kind == shell.CMD:
                d = self._folder(p[1], top, zero, here)
                if d is None:
                    return None
                out.append(str(d))
            elif kind == shell.VAR:
                name, op = p[1], p[2]
                var = env.get(name)
                if var is not None and var.value is not None and not op:
                    out.append(var.value)
                elif name == "PWD" and var is None and not op:
                    out.append(str(top))
                elif var is not None and var.word is not None and not op:
                    value = self._assigned(text, var.word, env, ex, top, zero, here, depth)
                    if value is None:
                        return None
                    out.append(value)
                else:
                    v = ex.parts([p], env)
                    if v is None:
                        return None
                    out.append(v)
            else:
                return None
        return "".join(out)

    def _assigned(self, text, w, env, ex, top, zero, here, depth) -> str | None:
        """`DIR=$(dirname "$0")`: the value of an assignment word whose expansion ran a command."""
        parts = w.parts
        if not parts or parts[0][0] != shell.LIT:
            return None
        m = shell._ASSIGN.match(parts[0][1])
        if m is None:
            return None
        first = (shell.LIT, parts[0][1][m.end() :], parts[0][2] + m.end(), parts[0][3])
        rest = [first] + list(parts[1:]) if first[1] else list(parts[1:])
        return self._target(text, _Parts(rest), env, ex, top, zero, here, depth + 1)

    @staticmethod
    def _folder(raw: str, top: Path, zero: Path, here: Path) -> Path | None:
        body = raw[2:-1] if raw.startswith("$(") else raw[1:-1] if raw.startswith("`") else raw
        if _PWD.fullmatch(body):
            return top
        m = _DIRNAME.fullmatch(body)
        if m is None:
            return None
        folder = here if "BASH_SOURCE" in m.group("ref") else zero
        for _ in range(m.group("up").count("..")):
            folder = folder.parent
        return folder

    def _find(self, name: str, top: Path, here: Path) -> Path | None:
        t = file_access.expand_user(name)
        candidates = [t] if t.is_absolute() else [top / t, here / t]
        if not t.is_absolute() and self.workspace is not None:
            candidates.append(Path(self.workspace) / t)
        for c in candidates:
            if len(str(c)) > file_access.MAX_PATH_CHARS:
                continue
            real = self._real(c)
            try:
                if real is not None and real.is_file():
                    return real
            except (OSError, ValueError):
                continue
        return None

    def _read(self, path: Path) -> str | None:
        if self.read_file is not None:
            try:
                text = self.read_file(path)  # type: ignore[operator]
            except (OSError, ValueError):
                text = None
            if text is not None:
                return text
        try:
            return file_access.read_text_checked(path, MAX_CHARS, roots=self._roots())
        except OSError:
            return None


class _Parts:
    """A stand-in word: just its parts (an assignment's value after `NAME=`)."""

    def __init__(self, parts: list):
        self.parts = parts


def for_context(ctx, path: str) -> Sourcing | None:
    """A Sourcing for a script read with a workspace context (formats.ParseContext); None without a path."""
    if ctx is None or not path:
        return None
    return Sourcing(path=path, workspace=getattr(ctx, "workspace", None), read_file=getattr(ctx, "read_file", None))


def command_words(
    text: str, rest: list[shell.Word], head: str | None, env: dict, ex: shell.Expander
) -> tuple[str | None, list[shell.Word]]:
    """`$CMD` as a command's first word, holding a command line (`CMD="python -u pretrain_gpt.py ${PARAMS}"; … sh -c
    "${CMD}"`, Megatron-LM sc21/SRUN.sh): bash splits it into words (bash 5.2 manual, "Word Splitting"), the first
    of which is the program. (head, the command's words) with the value's words in its place; as given otherwise."""
    if head is not None and not any(c in head for c in " \t\n") or not rest:
        return head, rest
    parts = rest[0].parts
    if len(parts) != 1 or parts[0][0] != shell.VAR or parts[0][2] or text[rest[0].start] == '"':
        return head, rest
    var = env.get(parts[0][1])
    if var is not None and var.words_range is None and var.fields and var.fields[0].value:
        # a value worked out as it was assigned (`LAUNCH_SCRIPT="torchrun --nproc_per_node=$((ETP * EP * PP))"`,
        # Megatron-LM examples/post_training/modelopt/conf/arguments.sh): `$X` splits into its fields where used
        return var.fields[0].value, rest
    if var is None or var.words_range is None:
        return head, rest
    if var.refs and any(env.get(n) is not v for n, v in var.refs.items()):
        return head, rest  # a variable it named was assigned since: its value as assigned, in one piece
    words = shell._spliced_words(text, var.words_range, ex)
    if not words:
        return head, rest
    return ex.parts(words[0].parts, env, (words[0].start, words[0].end)), words + rest[1:]
