"""Shell launch scripts: `torchrun … train.py --flag value`, `accelerate launch`, `deepspeed`,
`llamafactory-cli train cfg.yaml key=value`, `tune run … --config NAME`, `axolotl train cfg.yml`,
`trl sft`, `swift sft`, with env prefixes, `export` lines and simple `VAR=value` variables.

The script is tokenized (never run) into commands of words; each word keeps its exact character
range, so every flag and value carries a span for hovers and edits. Variables assigned earlier in
the script expand (bash arrays and quoted argument lists split into their words where used unquoted,
integer `$((…))` is worked out, the commands of a `bash -c "…"` string are read where they stand, and an
option-parsing loop's `MODEL=$1` keeps the default, noted as assumed); anything computed at run time
(`$(…)`, undefined `$VAR`, backticks) is unknown and records nothing. The first command that launches
training becomes the plan (a launcher or training CLI; a plain `python script.py --flags` only when the script
has none); config files it names (`--config x.yaml`, `llamafactory-cli train x.yaml`, `--deepspeed ds.json`,
`accelerate launch --config_file acc.yaml`) are read through `formats.parse_document` and merged
under the command line, which wins as it does in the real tools.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Callable

from vramlens import environment
from vramlens.formats import accelerate, deepspeed, hf, launchers, megatron, moe_experts, purpose, verl
from vramlens.formats.settings import PlanBuilder, Setting, shown, to_bool, to_float, to_int
from vramlens.knowledge import deepspeed as deepspeed_presets
from vramlens.plan import IssueKind, Origin, ParseIssue, Reference, Severity, Sourced, Span, TrainingPlan
from vramlens.text import LineIndex

MAX_SHELL_CHARS = 2_000_000
# `x \  # note` ends a command at the comment (bash 5.2 manual, "Comments"); the next line's words are a new command
COMMENT_CUT = "a `#` comment ends the command above"
# a hydra override (`algorithm.pf_ppo.weight_pow=2.0`) as a command's first word: not an assignment to bash (a name
# has no dots), so a line of them after a cut command runs as a command of its own, not as the launch's arguments
_DOTTED_OVERRIDE = re.compile(r"[+~]?[A-Za-z_]\w*(?:\.\w+)+=")
MAX_ARGS = 2_000  # arguments of the training command read; real launch lines have well under 100
MAX_WORDS = 2 * MAX_ARGS + 100
# Variable expansion: `V1="$V0 $V0"`, `V2="$V1 $V1"`, … doubles a value per line, so 60 lines of a script
# would expand to exabytes. A value longer than Linux's limit on one argument or environment string
# (MAX_ARG_STRLEN, 32 pages = 131,072 bytes: include/uapi/linux/binfmts.h) could not reach the training
# program anyway; past it, or once a script has expanded MAX_EXPANDED_CHARS in all, a value is unknown.
MAX_VALUE_CHARS = 131_072
MAX_EXPANDED_CHARS = 4 * MAX_SHELL_CHARS
_LONE_CR = re.compile(r"\r(?!\n)")


def apply_hf_key(b: PlanBuilder, name: str, s: Setting) -> bool:
    """Apply one HF/TRL argument (by its canonical `name`; `s.key` keeps the spelling as written)."""
    handler = hf.HANDLERS.get(name)
    if handler is not None:
        handler(b, s)
        return True
    dict_handler = getattr(hf, "DICT_HANDLERS", {}).get(name)
    if dict_handler is not None:
        dict_handler(b, s, None)
        return True
    return False


def is_hf_key(name: str) -> bool:
    return name in hf.HANDLERS or name in getattr(hf, "DICT_HANDLERS", {})


def _via(name: str) -> Callable[[PlanBuilder, Setting], None]:
    return lambda b, s: apply_hf_key(b, name, s)


# --- positions -----------------------------------------------------------------------------------

# --- tokenizer -----------------------------------------------------------------------------------
# shlex.split() would unquote words correctly but reports no offsets, and it knows nothing of `$VAR`,
# `$(…)`, heredocs or `2>&1`. The scanner below keeps every word's character range and splits a
# word into parts (literal text, variable, command substitution) so that expansion can happen later
# with the variables known at that point of the script. Plain runs are matched with one regex, so
# the per-character Python loop only runs inside quotes and expansions.

# One token after optional blanks and `\`-newlines: (1) newline (2) comment (3) operator (4) a plain word
# (5) a word with quotes or expansions that are closed, both ending at a blank or operator (the word's
# parts are worked out only if someone asks) (7) a lone `\` at the end; no group: an unclosed quote or
# other oddity, read by the careful scanner. Group 6 (`w`) is the word of (5), taken whole through a
# lookahead: when no blank or operator follows it, the regex does not retry every split of it (which
# took exponential time on a long word followed by a backquote). `_BORING` takes its runs the same way.
_TOKEN = re.compile(
    r"(?:[ \t\r\f\v]|\\\r?\n)*(?:(\n)|(#[^\n]*)|(&&|\|\||;;|\|&|>>|&>|>&|<<<|<<-|<<|[;&|()<>])"
    r"|([^\s'\"\\;&|<>()`$]+)(?=[\s;&|<>()]|\Z)"
    r"|((?=(?P<w>(?:[^\s'\"\\;&|<>()`$]+|'[^']*'|\"(?:[^\"\\`$]|\\.|\$(?![({]))*\"|\\[^\n]|\$\{[^}\n\"'$]*\}"
    r"|\$(?![({])[A-Za-z_0-9@*#?$!-]?)+))(?P=w))(?=[\s;&|<>()]|\Z)"
    r"|(\\\Z)|(?=.))",
    re.S,
)
# A whole line that is one simple command (quotes closed on the line; no escapes, separators,
# parentheses, heredocs or input redirections) whose first word is neither an assignment nor a
# program that may start training: nothing on it can matter, so it is skipped without tokenizing.
_BORING = re.compile(
    r"(?![ \t]*(?:[A-Za-z_][A-Za-z0-9_]*\+?=|\S*(?:torchrun|accelerate|deepspeed|llamafactory-cli|lmf|tune|axolotl|"
    r"trl|swift|ray|srun|bash|sh|zsh|dash|python[0-9.]*|uv|poetry|pipenv|pdm|hatch|env|nohup|time|exec|command|builtin|if|then|else|elif|do|"
    r"docker|pip3?|"  # environment set-up, which says the script does not train (formats/purpose.py)
    r"megatron|"  # Megatron-SWIFT's `megatron sft|pt|rlhf` at the start of a line
    r"source|\.|sbatch|"  # a file read in or a script run (formats/shell_source.py)
    r"while|until|for|select|case|fi|done|esac|export|declare|typeset|local|readonly|unset|[{}!])(?:[ \t]|$)))"
    r"[ \t]*(?=[^\s#$-])(?:(?=([^\n;&|()'\"\\`<]+))\1|'[^'\n]*'|\"[^\"\n\\`]*\")*\n",
    re.M,
)
_PLAIN = re.compile(r"[^\s'\"\\;&|<>()`$]+")
_DQ_PLAIN = re.compile(r"[^\"\\$`]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ELEMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[(?:[@*]|[0-9]{1,6})\])")
_SEPARATORS = frozenset({"&&", "||", ";;", "|&", ";", "&", "|", "(", ")", "\n"})
_REDIRECTS = frozenset({">>", "&>", ">&", ">", "<", "<<<"})

LIT, VAR, CMD, ARR = "s", "v", "c", "a"
_ARRAY_HEAD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")  # `NAME=(` / `NAME+=(`: a bash array assignment


class Word:
    """One shell word: its raw character range (quotes included) and, worked out on first use, its
    parts: (LIT, text, raw_start, quoted) | (VAR, name, op, arg, raw) | (CMD, raw) | (ARR, element words) (the
    `( … )` of `NAME=( … )`; op of a VAR is `[@]`, `[*]` or `[N]` for `${NAME[@]}` …)."""

    __slots__ = ("start", "end", "_parts", "_src")

    def __init__(self, start: int, end: int, parts: list | None, src: str | None = None):
        self.start = start
        self.end = end
        self._parts = parts
        self._src = src

    @property
    def parts(self) -> list:
        if self._parts is None:
            self._parts = _Scanner(self._src, self.end)._word(self.start)[0].parts
        return self._parts

    def plain_prefix(self) -> str:
        """The leading unquoted literal text (for `NAME=value` and `--key=value` detection)."""
        p = self.parts[0] if self.parts else None
        return p[1] if p is not None and p[0] == LIT and not p[3] else ""


@dataclass(slots=True)
class Command:
    words: list[Word]
    start: int
    end: int
    ended_by_comment: bool = False  # a `#` comment ended it right after a `\` continuation
    heredocs: list = field(default_factory=list)  # (start, end) of each here-document body it reads
    depth: int = 0  # levels of `bash -c "…"` it is inside


class _Scanner:
    def __init__(self, text: str, end: int | None = None):
        self.text = text
        self.n = len(text) if end is None else end
        self.commands: list[Command] = []
        self.comments: list[tuple[int, int]] = []

    def run(self, start: int = 0) -> list[Command]:
        text, n = self.text, self.n
        token, boring = _TOKEN.match, _BORING.match
        i = start
        words: list[Word] = []
        heredocs: list[tuple[str, bool]] = []
        skip_next_word = False  # redirect target
        heredoc_next = None  # "<<" or "<<-" waiting for its delimiter word
        while i < n:
            m = token(text, i, n)
            if m is None:
                break
            kind = m.lastindex
            if kind == 4:  # a plain word (the common case)
                i = m.end()
                word = Word(m.start(4), i, [(LIT, m.group(4), m.start(4), False)])
                if i < n and text[i] == "(" and _ARRAY_HEAD.fullmatch(m.group(4)):
                    word, i = self._array(word, i)
            elif kind == 1:  # newline
                self._end(words, m.start(1), False)
                words = []
                i = m.end()
                # a redirection's target is on its own line: `DIR=<path to data>` (a placeholder in Megatron-LM
                # core_r0.8.0 examples/multimodal/combine_mistral_clip.sh) ends with a `>` that has none, and the
                # next line's first word is a command (bash stops there with a syntax error)
                skip_next_word = False
                if heredocs:
                    body = i
                    i = self._skip_heredocs(i, heredocs)
                    if self.commands and len(heredocs) == 1:
                        self.commands[-1].heredocs.append((body, self._body_end(body, i)))
                    heredocs = []
                b = boring(text, i, n)
                while b is not None:  # whole lines that cannot matter
                    i = b.end()
                    b = boring(text, i, n)
                continue
            elif kind == 2:  # comment
                a, i = m.start(2), m.end()
                self.comments.append((a, i))
                if words and "\\\n" in text[words[0].start : a].replace("\r", ""):
                    self._end(words, a, True)
                    words = []
                continue
            elif kind == 3:  # operator
                op = m.group(3)
                i = m.end()
                if op in ("<<", "<<-"):
                    heredoc_next = op
                elif op in _REDIRECTS:
                    skip_next_word = True
                elif op in _SEPARATORS:
                    self._end(words, m.start(3), False)
                    words = []
                continue
            elif kind == 5:  # quotes or expansions: parts on demand
                i = m.end()
                word = Word(m.start(5), i, None, text)
            elif kind == 7:  # a lone trailing backslash at end of file
                break
            else:  # quotes, `$`, escapes: the careful scanner
                word, i = self._word(m.end())
                if not word.parts:  # only `\`-newlines (a trailing `\` at the end)
                    i = max(i, word.start + 1)
                    continue
            if heredoc_next is not None:
                delim = "".join(p[1] for p in word.parts if p[0] == LIT)
                heredocs.append((delim, heredoc_next == "<<-"))
                heredoc_next = None
                continue
            if skip_next_word:
                skip_next_word = False
                continue
            if i < n and text[i] in "<>" and text[word.start : i].isdigit():
                continue  # the `2` of `2>&1`
            if len(words) < MAX_WORDS:  # a command of a million words keeps its first MAX_WORDS
                words.append(word)
        self._end(words, n, False)
        return self.commands

    def _array(self, head: Word, i: int) -> tuple[Word, int]:
        """`NAME=( … )` (`i` at the "("): one word whose parts are the name and the element words, read up to the
        closing ")" across newlines and comments; the first MAX_WORDS + 1 elements are kept."""
        text, n = self.text, self.n
        elements: list[Word] = []
        j = i + 1
        while j < n:
            m = _TOKEN.match(text, j, n)
            if m is None:
                break
            kind = m.lastindex
            if kind in (1, 2):  # newlines and comments between elements
                j = m.end()
                continue
            if kind == 3:  # ")" ends the array (another operator: bash's error)
                j = m.end() if m.group(3) == ")" else m.start(3)
                break
            if kind == 4:
                w, j = Word(m.start(4), m.end(), [(LIT, m.group(4), m.start(4), False)]), m.end()
            elif kind == 5:
                w, j = Word(m.start(5), m.end(), None, text), m.end()
            elif kind == 7:
                break
            else:
                w, j = self._word(m.end())
                if not w.parts:
                    j = max(j, w.start + 1)
                    continue
            if len(elements) <= MAX_WORDS:
                elements.append(w)
        return Word(head.start, j, head.parts + [(ARR, elements)]), j

    def _end(self, words: list[Word], at: int, by_comment: bool) -> None:
        if words:
            self.commands.append(Command(words, words[0].start, words[-1].end, by_comment))

    def _body_end(self, body: int, after: int) -> int:
        """The end of a here-document body: the start of its delimiter line (or the end of the text)."""
        if after >= self.n:
            return self.n
        j = self.text.rfind("\n", body, max(body, after - 1))
        return body if j < 0 else j + 1

    def _skip_heredocs(self, i: int, heredocs: list[tuple[str, bool]]) -> int:
        text = self.text
        for delim, strip_tabs in heredocs:
            while i < self.n:
                j = text.find("\n", i)
                j = self.n if j < 0 else j
                line = text[i:j].rstrip("\r")
                i = j + 1
                if (line.lstrip("\t") if strip_tabs else line) == delim:
                    break
        return min(i, self.n)

    def _word(self, i: int) -> tuple[Word, int]:
        text, n = self.text, self.n
        start = i
        parts: list = []
        while i < n:
            c = text[i]
            m = _PLAIN.match(text, i)
            if m:
                parts.append((LIT, m.group(), i, False))
                i = m.end()
                continue
            if c == "'":
                j = text.find("'", i + 1)
                j = n if j < 0 else j
                parts.append((LIT, text[i + 1 : j], i, True))
                i = j + 1
            elif c == '"':
                i = self._double_quoted(i, parts)
            elif c == "\\":
                if text.startswith("\r\n", i + 1):
                    i += 3
                elif i + 1 < n and text[i + 1] == "\n":
                    i += 2
                else:
                    parts.append((LIT, text[i + 1 : i + 2], i, True))
                    i += 2
            elif c == "$":
                i = self._dollar(i, parts)
            elif c == "`":
                j = text.find("`", i + 1)
                j = n if j < 0 else j
                parts.append((CMD, text[i : j + 1]))
                i = j + 1
            else:
                break  # whitespace or an operator ends the word
        return Word(start, min(i, n), parts), min(i, n)

    def _double_quoted(self, i: int, parts: list) -> int:
        text, n = self.text, self.n
        i += 1
        buf: list[str] = []
        buf_start = i - 1
        while i < n:
            m = _DQ_PLAIN.match(text, i)
            if m:
                buf.append(m.group())
                i = m.end()
                continue
            c = text[i]
            if c == '"':
                i += 1
                break
            if c == "\\":
                nxt = text[i + 1 : i + 2]
                if nxt == "\n":
                    i += 2
                    continue
                buf.append(nxt if nxt in '"\\$`' else "\\" + nxt)
                i += 2
            elif c == "$" or c == "`":
                if buf:
                    parts.append((LIT, "".join(buf), buf_start, True))
                    buf = []
                if c == "$":
                    i = self._dollar(i, parts)
                else:
                    j = text.find("`", i + 1)
                    j = n if j < 0 else j
                    parts.append((CMD, text[i : j + 1]))
                    i = j + 1
                buf_start = i
        if buf or not parts or parts[-1][0] != LIT:
            parts.append((LIT, "".join(buf), buf_start, True))
        return i

    def _dollar(self, i: int, parts: list) -> int:
        text, n = self.text, self.n
        nxt = text[i + 1 : i + 2]
        if nxt == "(":
            j = self._matching_paren(i + 1)
            parts.append((CMD, text[i:j]))
            return j
        if nxt == "{":
            j = self._brace_end(i + 2)
            inner = text[i + 2 : j]
            m = _ELEMENT.fullmatch(inner)
            if m:  # ${NAME[@]}, ${NAME[*]}, ${NAME[0]}
                parts.append((VAR, m.group(1), m.group(2), "", text[i : j + 1]))
                return j + 1
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])(?:(:?[-=+?])(.*))?", inner, re.S)
            if m:
                parts.append((VAR, m.group(1), m.group(2) or "", m.group(3) or "", text[i : j + 1]))
            else:
                parts.append((CMD, text[i : j + 1]))
            return j + 1
        if nxt == "'":  # $'…' (ANSI-C quoting): read literally
            j = text.find("'", i + 2)
            j = n if j < 0 else j
            parts.append((LIT, text[i + 2 : j], i, True))
            return j + 1
        m = _NAME.match(text, i + 1)
        if m:
            parts.append((VAR, m.group(), "", "", text[i : m.end()]))
            return m.end()
        if nxt and nxt in "0123456789@*#?$!-":
            parts.append((VAR, nxt, "", "", text[i : i + 2]))
            return i + 2
        parts.append((LIT, "$", i, False))
        return i + 1

    def _brace_end(self, i: int) -> int:
        """`i` just after "${": the offset of its closing "}", past nested `${…}` and quotes in the operand, as in
        verl's `MODEL_PATH=${MODEL_PATH:-"${RAY_DATA_HOME}/models/Qwen3-8B"}` (bash: the word of `${X:-word}` is
        expanded with its quotes and parameter expansions); the end of the text when unclosed."""
        text, n = self.text, self.n
        depth, quoted = 1, False
        while i < n:
            c = text[i]
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = not quoted
            elif c == "'" and not quoted:
                j = text.find("'", i + 1)
                i = n if j < 0 else j
            elif c == "$" and text.startswith("{", i + 1):
                depth += 1
                i += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        return n

    def _matching_paren(self, i: int) -> int:
        """`i` is at "(": the offset after its matching ")" (quotes inside are skipped)."""
        text, n = self.text, self.n
        depth = 0
        while i < n:
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            elif c in "'\"":
                j = text.find(c, i + 1)
                i = n if j < 0 else j
            elif c == "\\":
                i += 1
            i += 1
        return n


def tokenize(text: str) -> tuple[list[Command], list[tuple[int, int]]]:
    """Commands (lists of words) and comment ranges of a shell script."""
    sc = _Scanner(text)
    return sc.run(), sc.comments


def words_in(text: str, start: int, end: int) -> list[Word]:
    """The words of text[start:end] (a here-document body) as an unquoted `$VAR` word-splits them: every
    command's words in order, at their offsets in `text`."""
    return [w for cmd in _Scanner(text, end).run(start) for w in cmd.words]


# --- expansion -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Var:
    value: str | None  # None: not known without running the script
    word: Word | None = None  # the assignment word
    value_range: tuple[int, int] | None = None
    stmt_range: tuple[int, int] | None = None  # the whole statement (`export X=v`)
    exported: bool = False
    words_range: tuple[int, int] | None = None  # text whose words `$X` stands for (a heredoc read into X)
    elements: list | None = None  # a bash array's elements (Args, expanded when it was assigned)
    refs: dict | None = None  # for a quoted list value: the variables its words named, as they were then
    fields: list | None = None  # the words (Args) an unquoted `$X` splits into, worked out when it was assigned


class Expander:
    """Expands words against the script's variables within a budget: a value longer than MAX_VALUE_CHARS,
    or any value once MAX_EXPANDED_CHARS have been produced in all, is unknown (None), never truncated."""

    def __init__(self) -> None:
        self.spent = 0
        self.capped: list[tuple[int, int]] = []  # ranges of the words whose value went over a limit
        self.heredoc_words: dict[tuple[int, int], list] = {}  # here-document range → its words (tokenized once)
        self.spliced = 0  # here-document and array words spliced into commands so far
        self.over = False  # the last array value asked for was over MAX_VALUE_CHARS

    def parts(self, parts: list, env: dict[str, Var], where: tuple[int, int] | None = None) -> str | None:
        out: list[str] = []
        size = 0
        for p in parts:
            kind = p[0]
            if kind == LIT:
                v = p[1]
            elif kind == CMD and p[1].startswith("$((") and p[1].endswith("))"):
                v = arithmetic(p[1][3:-2], env)  # verl's `max_prompt_length=$((1024 * 2))`
                if v is None:
                    return None
            elif kind == VAR:
                v = self._var(p, env)
                if v is None:
                    if self.over and where is not None:
                        self.capped.append(where)
                    self.over = False
                    return None
            else:
                return None
            size += len(v)
            if size > MAX_VALUE_CHARS or self.spent + size > MAX_EXPANDED_CHARS:
                if where is not None:
                    self.capped.append(where)
                return None
            out.append(v)
        self.spent += size
        return "".join(out)

    def _var(self, p: tuple, env: dict[str, Var]) -> str | None:
        _, name, op, arg, _raw = p
        var = env.get(name)
        if op[:1] == "[":
            return self._element(var, op)
        if var is not None and var.value is not None:
            if op == ":+" or op == "+":
                return self._default(arg, env)
            return var.value
        if var is not None and var.value is None:
            return None
        if op in (":-", "-", ":=", "="):
            return self._default(arg, env)
        if var is None and name == "HOME":  # the login shell's home folder, which `~` names too
            return "~"
        return None

    def append(self, old: str | None, new: str | None, where: tuple[int, int]) -> str | None:
        """`X+=value`: the copy counts against the same limits as an expansion."""
        if old is None or new is None:
            return None
        if len(old) + len(new) > MAX_VALUE_CHARS or self.spent + len(old) > MAX_EXPANDED_CHARS:
            self.capped.append(where)
            return None
        self.spent += len(old)
        return old + new

    def _element(self, var: Var | None, op: str) -> str | None:
        """`${A[@]}` / `${A[*]}` (the elements joined by spaces, their sizes summed before joining) or `${A[N]}`; a
        plain variable is an array of one."""
        if var is None:
            return None
        elements = var.elements if var.elements is not None else [Arg(var.word, var.value)]
        if op not in ("[@]", "[*]"):
            k = int(op[1:-1])
            if k < len(elements):
                return elements[k].value
            return "" if len(elements) <= MAX_WORDS else None  # past the elements kept: not known
        if any(a.value is None for a in elements):
            return None
        if sum(len(a.value) + 1 for a in elements) > MAX_VALUE_CHARS:
            self.over = True
            return None
        return " ".join(a.value for a in elements)

    def _default(self, arg: str, env: dict[str, Var]) -> str | None:
        if "$(" in arg or "`" in arg:
            return None
        out: list[str] = []
        size = 0
        pos = 0
        arg = arg.strip("'\"")
        for m in _SIMPLE_REF.finditer(arg):
            name = m.group(1) or m.group(2)
            var = env.get(name)
            if var is None and name == "HOME":
                var = Var("~")
            if var is None or var.value is None:
                return None
            out += (arg[pos : m.start()], var.value)
            size += m.start() - pos + len(var.value)
            if size > MAX_VALUE_CHARS:
                return None
            pos = m.end()
        out.append(arg[pos:])
        return "".join(out)


MAX_ARITH_CHARS = 1_000  # an arithmetic expansion longer than this is not worked out (real ones: a few words)
_ARITH_TOKEN = re.compile(r"\s*(?:(\d+)|\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?|(\*\*|[-+*/%()]))")


def arithmetic(expr: str, env: dict[str, Var]) -> str | None:
    """`$(( … ))` of integers and known integer variables with + - * / % ** and parentheses, as bash works it out
    (bash 5.2 manual, "Shell Arithmetic": 64-bit integers, division truncated toward zero); None for anything else
    (other operators, an unknown or non-integer variable, a result outside 64 bits)."""
    if len(expr) > MAX_ARITH_CHARS:
        return None
    tokens: list = []
    i = 0
    while i < len(expr.rstrip()):
        m = _ARITH_TOKEN.match(expr, i)
        if m is None:
            return None
        if m.group(1) is not None:
            if len(m.group(1)) > 19 or (len(m.group(1)) > 1 and m.group(1)[0] == "0"):
                return None  # past 64 bits, or octal
            tokens.append(int(m.group(1)))
        elif m.group(2) is not None:
            var = env.get(m.group(2))
            value = var.value.strip() if var is not None and var.value is not None else ""
            if not re.fullmatch(r"-?[1-9][0-9]{0,18}|0", value):
                return None
            tokens.append(int(value))
        else:
            tokens.append(m.group(3))
        i = m.end()
    pos = 0
    limit = 1 << 63

    def expr_(level: int) -> int | None:  # level 0: + -, 1: * / %, 2: **, 3: unary and atoms
        nonlocal pos
        if level == 3:
            if pos >= len(tokens):
                return None
            t = tokens[pos]
            pos += 1
            if isinstance(t, int):
                return t
            if t in ("-", "+"):
                v = expr_(3)
                return None if v is None else (-v if t == "-" else v)
            if t == "(":
                v = expr_(0)
                if v is None or pos >= len(tokens) or tokens[pos] != ")":
                    return None
                pos += 1
                return v
            return None
        left = expr_(level + 1)
        ops = {0: ("+", "-"), 1: ("*", "/", "%"), 2: ("**",)}[level]
        while left is not None and pos < len(tokens) and tokens[pos] in ops:
            op = tokens[pos]
            pos += 1
            right = expr_(level + 1 if level < 2 else 2)
            if right is None:
                return None
            if op in ("/", "%") and right == 0 or op == "**" and not (0 <= right <= 63 and abs(left) < limit):
                return None
            if op == "+":
                left += right
            elif op == "-":
                left -= right
            elif op == "*":
                left *= right
            elif op == "/":
                left = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
            elif op == "%":
                left = left - right * (abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1))
            else:
                left **= right
            if not -limit <= left < limit:
                return None
        return left

    if len(tokens) > MAX_ARITH_CHARS or tokens.count("(") > 64:
        return None
    value = expr_(0)
    return str(value) if value is not None and pos == len(tokens) else None


def expand_parts(parts: list, env: dict[str, Var]) -> str | None:
    """A word's value with a fresh budget (for a single word; a script's analysis shares one Expander)."""
    return Expander().parts(parts, env)


_SIMPLE_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def raw_text(text: str, w: Word) -> str:
    return text[w.start : w.end]


# --- commands ------------------------------------------------------------------------------------

_RESERVED = frozenset(
    {
        "if",
        "then",
        "else",
        "elif",
        "do",
        "while",
        "until",
        "!",
        "{",
        "}",
        "time",
        "fi",
        "done",
        "esac",
        "exec",
        "nohup",
        "command",
        "builtin",
    }
)
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=")
_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?")
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".jsonc")
# first words of a command that may start training (programs and the wrappers in front of them)
_HEADS = (
    frozenset(
        {
            "torchrun",
            "accelerate",
            "deepspeed",
            "llamafactory-cli",
            "lmf",
            "tune",
            "axolotl",
            "trl",
            "swift",
            "megatron",
            "uv",
            "poetry",
            "pipenv",
            "pdm",
            "hatch",
            "env",
            "ray",
            "srun",
        }
    )
    | _RESERVED
)


@dataclass(slots=True)
class Arg:
    """One word of a command, expanded."""

    word: Word
    value: str | None  # None: unknown at parse time

    @property
    def text(self) -> str:
        return self.value if self.value is not None else ""


@dataclass
class Launch:
    """A command that starts training, taken apart."""

    tool: str  # torchrun, deepspeed, accelerate, python, llamafactory, torchtune, axolotl, trl, swift
    command: Command
    args: list[Arg]  # every word after env prefixes
    env_prefix: dict[str, Var]  # NAME=value words before the program
    launcher_flags: list[tuple[str, Arg, list[Arg]]] = field(default_factory=list)  # (name, flag word, values)
    script: Arg | None = None  # the training script / module / recipe
    script_args_start: int = 0  # index in `args` where the script's own arguments begin
    script_args_end: int | None = None  # index where they end (axolotl `--`), None = end
    subcommand: str | None = None
    launcher: str | None = None  # torchrun/accelerate/deepspeed/python when `tool` is the program it runs


def _strip_wrappers(args: list[Arg]) -> list[Arg]:
    """Drop `nohup`, `time`, `uv run`, `env A=b` … in front of the real program."""
    i = 0
    while i < len(args):
        t = args[i].text
        if t in _RESERVED:
            i += 1
        elif t in ("uv", "poetry", "pipenv", "pdm", "hatch") and i + 1 < len(args) and args[i + 1].text == "run":
            i += 2
            if i < len(args) and args[i].text.startswith("-"):
                # `uv run --extra ssm python -m torch.distributed.run …` (Megatron-LM main examples/mimo/scripts):
                # the run's own options, then the program (the first word that names one, as for srun)
                k = next(
                    (k for k in range(i, len(args)) if _SRUN_PROGRAM.fullmatch(args[k].text.rsplit("/", 1)[-1])),
                    None,
                )
                if k is None:
                    break
                i = k
        elif t == "env":
            i += 1
        elif (
            t.rsplit("/", 1)[-1] == "ray"
            and i + 2 < len(args)
            and args[i + 1].text == "job"
            and args[i + 2].text == "submit"
        ):
            # `ray job submit --address … --runtime-env-json '…' -- python3 -m openrlhf.cli.train_ppo_ray …`
            # (OpenRLHF's PPO scripts): the entrypoint follows `--`
            k = next((k for k in range(i + 3, len(args)) if args[k].text == "--"), None)
            if k is None:
                break
            i = k + 1
        elif t.rsplit("/", 1)[-1] == "srun":
            # `srun [options] torchrun …` (slurm): its options' values are not told apart from the program, so the
            # program is the first word that names one
            k = next(
                (k for k in range(i + 1, len(args)) if _SRUN_PROGRAM.fullmatch(args[k].text.rsplit("/", 1)[-1])), None
            )
            if k is None:
                break
            i = k
        else:
            break
    return args[i:]


# torchrun's own flags (torch 2.13 and 2.14 torch/distributed/run.py `get_args_parser`): the `check_env` ones take no
# value, every `env` one and the plain typed ones take one (`-r/--redirects` and `-t/--tee` too: `--tee 3`)
_SRUN_PROGRAM = re.compile(r"torchrun|accelerate|deepspeed|llamafactory-cli|tune|axolotl|trl|swift|python[0-9.]*")
_TORCHRUN_BARE = frozenset({"standalone", "module", "m", "no_python", "run_path", "virtual_local_rank"})
_TORCHRUN_VALUED = frozenset(
    {
        "nnodes",
        "nproc_per_node",
        "rdzv_backend",
        "rdzv_endpoint",
        "rdzv_id",
        "rdzv_conf",
        "max_restarts",
        "monitor_interval",
        "start_method",
        "event_log_handler",
        "role",
        "log_dir",
        "redirects",
        "r",
        "tee",
        "t",
        "local_ranks_filter",
        "duplicate_stdout_filters",
        "duplicate_stderr_filters",
        "node_rank",
        "master_addr",
        "master_port",
        "local_addr",
        "logs_specs",
        "numa_binding",
        "signals_to_handle",
        "shutdown_timeout",
        # torch 2.14 torch/distributed/run.py: `--log-line-prefix-template` and `--print-completion` (a value each)
        "log_line_prefix_template",
        "print_completion",
    }
)
_ACCELERATE_BARE = frozenset(
    {
        "multi_gpu",
        "multi-gpu",
        "use_deepspeed",
        "use-deepspeed",
        "use_fsdp",
        "use-fsdp",
        "use_megatron_lm",
        "cpu",
        "debug",
        "quiet",
        "q",
        "no_python",
        "module",
        "m",
        "tpu",
        "same_network",
        "use_xpu",
        "fsdp_use_orig_params",
        "fsdp_sync_module_states",
        "fsdp_cpu_ram_efficient_loading",
        "zero3_init_flag",
        "enable_cpu_affinity",
    }
)
_DEEPSPEED_BARE = frozenset(
    {
        "no_python",
        "module",
        "no_local_rank",
        "force_multi",
        "autotuning",
        "no_ssh_check",
        "enable_each_rank_log",
        "bind_cores_to_rank",
        "elastic_training",
    }
)


def _flag_name(t: str) -> str:
    return t.lstrip("-").split("=", 1)[0]


def _norm(name: str) -> str:
    return name.replace("-", "_")


def _parse_launcher(args: list[Arg], i: int, bare: frozenset, valued: frozenset = frozenset()) -> tuple[list, int]:
    """Launcher flags from `args[i]` up to the script; returns (flags, index of the script). A flag in `bare` takes no
    value, one in `valued` always takes the next word; any other takes the next word unless it looks like a flag or
    the script."""
    flags = []
    while i < len(args):
        a = args[i]
        t = a.text
        if a.value is None and a.word.parts and a.word.parts[0][0] == LIT and "=" in a.word.parts[0][1]:
            t = a.word.parts[0][1]  # `--nproc_per_node=$1`: a flag whose value is only known when the script runs
        if not t.startswith("-") or t == "-" or t == "--":
            break
        name = _norm(_flag_name(t))
        if "=" in t:
            flags.append((name, a, [a]))
            i += 1
            continue
        if name in bare:
            flags.append((name, a, []))
            i += 1
            if name in ("m", "module"):
                break
            continue
        nxt = args[i + 1] if i + 1 < len(args) else None
        if nxt is not None and (name in valued or not nxt.text.startswith("-") and not nxt.text.endswith(".py")):
            flags.append((name, a, [nxt]))
            i += 2
        else:
            flags.append((name, a, []))
            i += 1
    return flags, i


def classify(args: list[Arg], env_prefix: dict[str, Var], cmd: Command) -> Launch | None:
    """Recognise a training launch; None for any other command."""
    args = _strip_wrappers(args)
    if not args or args[0].value is None:
        return None
    prog = args[0].text.rsplit("/", 1)[-1]
    sub = args[1].text if len(args) > 1 else ""
    if prog == "torchrun":
        return _script_launch("torchrun", args, 1, _TORCHRUN_BARE, env_prefix, cmd)
    if _PYTHON.fullmatch(prog):
        return _python_launch(args, env_prefix, cmd)
    if prog == "accelerate" and sub == "launch":
        return _script_launch("accelerate", args, 2, _ACCELERATE_BARE, env_prefix, cmd)
    if prog == "deepspeed":
        return _script_launch("deepspeed", args, 1, _DEEPSPEED_BARE, env_prefix, cmd)
    if prog in ("llamafactory-cli", "lmf") and sub == "train":
        launch = Launch("llamafactory", cmd, args, env_prefix, subcommand=sub, script_args_start=2)
        return launch
    if prog == "tune" and sub == "run":
        flags, j = _parse_launcher(args, 2, frozenset())
        launch = Launch("torchtune", cmd, args, env_prefix, launcher_flags=flags, subcommand=sub)
        if j < len(args):
            launch.script = args[j]
            j += 1
        launch.script_args_start = j
        return launch
    if prog == "axolotl" and sub == "train":
        launch = Launch("axolotl", cmd, args, env_prefix, subcommand=sub, script_args_start=2)
        for k in range(2, len(args)):
            if args[k].text == "--":
                launch.script_args_end = k
                flags, _ = _parse_launcher(args, k + 1, _TORCHRUN_BARE, _TORCHRUN_VALUED)
                launch.launcher_flags = flags
                break
        return launch
    if prog == "trl" and sub in (
        "sft",
        "dpo",
        "grpo",
        "kto",
        "reward",
        "rloo",
        "orpo",
        "cpo",
        "ppo",
        "gkd",
        "online_dpo",
        "xpo",
        "nash_md",
        "bco",
        "prm",
    ):
        return Launch("trl", cmd, args, env_prefix, subcommand=sub, script_args_start=2)
    # ms-swift 2.x also trains through `swift dpo|orpo|simpo` (v2.2.0–v2.6.1 swift/cli/main.py `ROUTE_MAPPING`: each
    # runs swift/cli/rlhf.py with `--rlhf_type <subcommand>` put first; v2.0.x had its own swift/cli/dpo.py)
    if prog == "swift" and sub in ("sft", "pt", "rlhf", "dpo", "orpo", "simpo"):
        return Launch("swift", cmd, args, env_prefix, subcommand=sub, script_args_start=2)
    if megatron.is_program(prog, sub, None):
        return Launch("megatron", cmd, args, env_prefix, subcommand=sub, script_args_start=2)
    return None


def _script_launch(tool, args, i, bare, env_prefix, cmd) -> Launch | None:
    flags, j = _parse_launcher(args, i, bare, _TORCHRUN_VALUED if tool == "torchrun" else frozenset())
    launch = Launch(tool, cmd, args, env_prefix, launcher_flags=flags)
    module = any(n in ("m", "module") for n, _, _ in flags)
    if j >= len(args):
        return launch if tool != "python" else None
    launch.script = _named(args[j])
    launch.script_args_start = j + 1
    return _retarget_module(launch, args[j].text) if module else _retarget_script(launch)


def _python_launch(args: list[Arg], env_prefix, cmd) -> Launch | None:
    i = 1
    while i < len(args):
        t = args[i].text
        if t == "-m" and i + 1 < len(args):
            mod = args[i + 1].text
            if mod in ("torch.distributed.run", "torch.distributed.launch"):
                return _script_launch("torchrun", args, i + 2, _TORCHRUN_BARE, env_prefix, cmd)
            if mod in ("accelerate.commands.launch",):
                return _script_launch("accelerate", args, i + 2, _ACCELERATE_BARE, env_prefix, cmd)
            if mod == "deepspeed.launcher.runner":
                return _script_launch("deepspeed", args, i + 2, _DEEPSPEED_BARE, env_prefix, cmd)
            launch = Launch("python", cmd, args, env_prefix, script=args[i + 1], script_args_start=i + 2)
            return _retarget_module(launch, mod)
        if t in ("-c",):
            return None
        if t in ("-X", "-W"):
            i += 2
            continue
        if t.startswith("-"):
            i += 1
            continue
        launch = Launch("python", cmd, args, env_prefix, script=_named(args[i]), script_args_start=i + 1)
        return _retarget_script(launch)
    return None


def _named(a: Arg) -> Arg:
    """A script word whose folder only is unknown (`${MEGATRON_CODE_DIR}/pretrain_gpt.py`, the folder a placeholder
    such as `<megatron source code directory>`): its name is known, `…/pretrain_gpt.py`."""
    if a.value is not None or not a.word.parts:
        return a
    last = a.word.parts[-1]
    if last[0] == LIT and last[1].startswith("/") and last[1].endswith(".py") and "$" not in last[1]:
        return Arg(a.word, "…" + last[1])
    return a


def _retarget_module(launch: Launch, module: str) -> Launch:
    found = launchers.program(module, module=True)
    if found is not None:
        launch.launcher = launch.tool
        launch.tool, launch.subcommand = found
        return launch
    if module.startswith("axolotl.cli"):
        launch.tool = "axolotl"
    elif module.startswith("llamafactory"):
        launch.tool = "llamafactory"
    elif module.startswith("trl"):
        launch.tool = "trl"
    elif module.startswith("swift"):
        launch.tool = "swift"
    elif verl.is_trainer_module(module):
        launch.tool = "verl"
    elif megatron.is_program(
        "", "", module.replace(".", "/") + ".py", [a.text for a in launch.args[launch.script_args_start :] if a.text]
    ):
        # `python -m torch.distributed.run … -m examples.mimo.pretrain_mimo --num-layers …` (Megatron-LM main)
        launch.launcher, launch.tool = launch.tool, "megatron"
    else:
        launch.subcommand = launch.subcommand or launch.tool
    return launch


def _retarget_script(launch: Launch) -> Launch:
    found = (
        launchers.program(
            launch.script.text, module=False, flags=[a.text for a in launch.args[launch.script_args_start :]]
        )
        if launch.script
        else None
    )
    if found is not None:
        launch.launcher = launch.tool
        launch.tool, launch.subcommand = found
        return launch
    if launch.script and megatron.is_program(
        "", "", launch.script.text, [a.text for a in launch.args[launch.script_args_start :] if a.text]
    ):
        launch.launcher, launch.tool = launch.tool, "megatron"
        return launch
    name = PurePosixPath(launch.script.text).name if launch.script else ""
    if verl.is_trainer_script(name):
        launch.launcher, launch.tool = launch.tool, "verl"
        return launch
    if name in ("train_bash.py",) or "llamafactory" in launch.script.text:
        # LLaMA-Factory ≤ 0.7's entry script (src/train_bash.py: `run_exp()`, its arguments parsed by
        # HfArgumentParser into its own dataclasses), run by `python` or under a launcher (its v0.6.3
        # examples/lora_multi_gpu/single_node.sh: `accelerate launch --config_file … ../../src/train_bash.py`)
        if launch.tool == "python":
            launch.tool = "llamafactory"
        elif launch.tool in ("accelerate", "deepspeed", "torchrun"):
            launch.launcher, launch.tool = launch.tool, "llamafactory"
    return launch


# Entry scripts a framework's later releases removed: (tool, script name) -> (the newest release that has it, why).
# LLaMA-Factory's src/train_bash.py is there up to v0.7.0; v0.7.1 runs src/train.py (and 0.8.0 `llamafactory-cli`).
REMOVED_ENTRY_SCRIPTS = {
    ("llamafactory", "train_bash.py"): (
        "0.7.0",
        "`train_bash.py` is LLaMA-Factory's entry script up to 0.7.0 (0.7.1 runs src/train.py)",
    ),
}


def _entry_release(launch: Launch) -> tuple[str, str] | None:
    name = PurePosixPath(launch.script.text).name if launch.script else ""
    return REMOVED_ENTRY_SCRIPTS.get((launch.tool, name))


# --- flag → plan mapping -------------------------------------------------------------------------


def _peft_method(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower() if s.value is not None else ""
    method = PEFT_METHODS.get(v)
    if method is None:
        return b.issue(IssueKind.UNKNOWN_VALUE, f"unknown tuner type {s.value!r} for `{s.key}`", s)
    b.set("peft_method", method, s)
    if method == "qlora":
        b.set("quant_bits", 4, s)


PEFT_METHODS = {
    "lora": "lora",
    "qlora": "qlora",
    "dora": "dora",
    "full": "none",
    "freeze": "freeze",
    "longlora": "lora",
    "adalora": "adalora",
    "galore": "galore",
    "oft": "oft",
    "boft": "boft",
    "adapter": "adapter",
    "llamapro": "llamapro",
    "vera": "vera",
    "ia3": "ia3",
    "lisa": "lisa",
    # ms-swift 3.x/4.x swift/llm/argument/base_args/base_args.py `get_supported_tuners`
    "fourierft": "fourierft",
    "reft": "reft",
    "bone": "bone",
    "loha": "loha",
    "lokr": "lokr",
}


def _quant_bits(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower()
    if v in ("float8", "fp8"):
        return b.remember(s)
    bits = to_int(v)
    if bits is None or bits not in (1, 2, 3, 4, 8, 16, 32):
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be 2, 3, 4 or 8, got {s.value!r}", s)
    if bits in (16, 32):
        return
    b.set("quant_bits", bits, s)
    b.set("quant_type", "nf4" if bits == 4 else "int8" if bits == 8 else f"int{bits}", s)


def _q_lora(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("quant_bits", 4, s)
        b.set("quant_type", "nf4", s)
        b.set("peft_method", "qlora", s)


def _lora_enable(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("peft_method", "lora", s)


def _flash_attn(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower()
    word = {
        "auto": None,
        "disabled": "eager",
        "off": "eager",
        "fa2": "flash_attention_2",
        "fa3": "flash_attention_3",
        "sdpa": "sdpa",
        "eager": "eager",
    }
    if v in word:
        if word[v]:
            b.set("attn_impl", word[v], s)
        return
    flag = to_bool(v)
    if flag:
        b.set("attn_impl", "flash_attention_2", s)
    elif flag is None:
        hf._attn(b, s)


def _use_flash_attn(b: PlanBuilder, s: Setting) -> None:
    """`--use_flash_attn true|false`: FlashAttention-2, or eager attention when it is false. ms-swift 2.x sets
    `_attn_implementation = 'eager'` on false and leaves transformers' default when the flag is absent
    (modelscope/ms-swift v2.4.0 swift/llm/utils/model.py `get_model_tokenizer_with_flash_attn`); open-instruct and
    peft's example scripts load eager attention unless the flag is set."""
    flag = to_bool(s.value)
    if flag is None:
        return _flash_attn(b, s)
    b.set("attn_impl", "flash_attention_2" if flag else "eager", s)


def _disable_gc(b: PlanBuilder, s: Setting) -> None:
    b.set_bool("grad_checkpointing", s, invert=True)


def _seq_parallel(b: PlanBuilder, s: Setting) -> None:
    b.set_int("context_parallel", s, minimum=1)


def _model_flag(b: PlanBuilder, s: Setting) -> None:
    hf._model(b, s)


def _mixed_precision(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower()
    if v in ("bf16", "fp16", "fp8"):
        b.set("amp_dtype", v, s)
    elif v == "no":
        b.set("amp_dtype", "none", s)


def _swift_deepspeed(b: PlanBuilder, s: Setting) -> None:
    """`--deepspeed zero2`: a preset name is the file ms-swift ships under that name, read whole
    (`knowledge.deepspeed.preset`: 3.x/4.x zero0 … zero3_offload from swift/config/; 1.x/2.x default-zero2,
    default-zero3, zero2-offload, zero3-offload from swift/llm/ds_config/, v2.4.0 swift/llm/utils/argument.py
    `deepspeed_mapping`); anything else is a path, as the HF flag takes it."""
    name = s.value.strip() if isinstance(s.value, str) else ""
    known = None if "/" in name or name.endswith(".json") else deepspeed_presets.preset(name.lower())
    if known is None:
        return apply_hf_key(b, "deepspeed", s)
    source, contents = known
    deepspeed.apply_dict(b, contents, s, note=f"ms-swift DeepSpeed preset `{name}` ({source})")


# ms-swift 3.12+ `--fsdp fsdp2` names its preset fsdp2.json (`_init_fsdp`: v3.12.0 swift/llm/argument/train_args.py
# with swift/llm/fsdp_config/fsdp2.json; 4.x 3602360a swift/arguments/sft_args.py with swift/config/fsdp2.json):
# `"fsdp": "full_shard auto_wrap"` and fsdp_config `fsdp_version: 2`, `reshard_after_forward: true`, `state_dict_type:
# SHARDED_STATE_DICT`, `activation_checkpointing: true` — checkpointing accelerate applies to the layers whatever
# `--gradient_checkpointing` says (the preset's own note: "do NOT use --gradient_checkpointing")
SWIFT_FSDP2 = "ms-swift FSDP preset `fsdp2` (fsdp2.json, ms-swift 3.12.0 to 4.x)"


def _swift_fsdp(b: PlanBuilder, s: Setting) -> None:
    if not (isinstance(s.value, str) and s.value.strip().lower() == "fsdp2"):
        return apply_hf_key(b, "fsdp", s)
    b.set("dist_strategy", "fsdp", s, note=SWIFT_FSDP2)
    b.set("zero_stage", 3, s, note=f"{SWIFT_FSDP2}: full_shard")
    b.set("fsdp_version", 2, s, note=SWIFT_FSDP2)
    b.set("fsdp_state_dict_type", "SHARDED_STATE_DICT", s, note=SWIFT_FSDP2)
    note = f"{SWIFT_FSDP2}: FSDP's activation checkpointing (non-reentrant)"
    b.set("grad_checkpointing", True, s, note=note, override=True)
    b.set("ckpt_reentrant", False, s, note=note, override=True)


# Flag names beyond the HF/TRL table: ms-swift (`swift/arguments/`), LLaMA-Factory (`src/llamafactory/hparams/`),
# FastChat/LLaVA (`fastchat/train/train.py`), qlora.py (artidoro/qlora); commits in docs/config-sources.md.
EXTRA_HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    "lora_rank": _via("lora_r"),
    "lora_target": _via("lora_target_modules"),
    "target_modules": _via("lora_target_modules"),
    "modules_to_save": _via("lora_modules_to_save"),
    "additional_target": _via("lora_modules_to_save"),
    "cutoff_len": _via("max_seq_length"),
    "attn_impl": _via("attn_implementation"),
    "flash_attn": _flash_attn,
    "use_flash_attn": _use_flash_attn,
    "quant_bits": _quant_bits,
    "quantization_bit": _quant_bits,
    "bits": _quant_bits,
    "double_quant": _via("bnb_4bit_use_double_quant"),
    "double_quantization": _via("bnb_4bit_use_double_quant"),
    "quant_type": _via("bnb_4bit_quant_type"),
    "quantization_type": _via("bnb_4bit_quant_type"),
    "train_type": _peft_method,
    "tuner_type": _peft_method,
    "sft_type": _peft_method,
    "finetuning_type": _peft_method,
    "q_lora": _q_lora,
    "lora_enable": _lora_enable,
    "disable_gradient_checkpointing": _disable_gc,
    "enable_liger_kernel": _via("use_liger_kernel"),
    "sequence_parallel_size": _seq_parallel,
    **launchers.PEFT_EXAMPLE_HANDLERS,
}


def _swift_attn(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower()
    if v == "flash_attn":  # ms-swift's spelling of FlashAttention-2
        return b.set("attn_impl", "flash_attention_2", s)
    apply_hf_key(b, "attn_implementation", s)


# ms-swift's image budget and tower freezing (swift/llm/argument/base_args/template_args.py `max_pixels`,
# tuner_args.py `freeze_vit`): kept for the resolver, which sizes and freezes a VLM's vision tower from them; its
# validation set (base_args/data_args.py `val_dataset`, `split_dataset_ratio`; 1.x/2.x `dataset_test_ratio`) and
# `predict_with_generate`: kept for whether and how the run evaluates (resolve/evaluation.py)
SWIFT_REMEMBERED = (
    "max_pixels",
    "freeze_vit",
    "val_dataset",
    "split_dataset_ratio",
    "dataset_test_ratio",
    "predict_with_generate",
)


# ms-swift 4.x `--tuner_type lora_llm` (swift/tuner_plugin/lora_llm.py `LoRALLMTuner.prepare_model`, v4.0.0 to
# v4.5.2): LoRA (`lora_rank`, `lora_alpha`) on the language model's linear layers only — `get_multimodal_target_regex`
# (swift/utils/transformers_utils.py) with its defaults freeze_vit=True, freeze_aligner=True, whatever
# `--target_modules` says — and the vision tower and aligner (projector/merger) set `requires_grad_(True)`: trained
# in full beside the adapters (examples/train/multimodal/lora_llm_full_vit/sft.sh)
SWIFT_LORA_LLM = "swift/tuner_plugin/lora_llm.py (ms-swift v4.0.0, 5e853413)"


# ms-swift's own tuners (3.x/4.x swift/llm/argument/base_args/base_args.py `get_supported_tuners`, 1.x/2.x
# `sft_type`); any other `train_type` names an entry a plugin adds to `swift.plugin.extra_tuners` (v3.5.0
# swift/plugin/tuner.py; swift/llm/train/tuner.py looks `args.train_type` up there)
SWIFT_PLUGIN_TUNER = "a tuner from `swift.plugin.extra_tuners` (an --external_plugins file registers it; not read)"


def _swift_tuner(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower()
    if v and v not in PEFT_METHODS and v != "lora_llm" and v.isidentifier():  # `custom`, `dummy`, a plugin's name
        b.set("peft_method", "none", s, note=SWIFT_PLUGIN_TUNER)
        return b.unmodelled(s, SWIFT_PLUGIN_TUNER, "estimated as a full fine-tune, the most it could train")
    if v != "lora_llm":
        return _peft_method(b, s)
    b.set("peft_method", "lora", s, note=f"`lora_llm`: LoRA on the language model ({SWIFT_LORA_LLM})")
    b.set(
        "lora_targets",
        ["all-linear"],
        s,
        override=True,
        note=f"`lora_llm` targets every linear layer of the language model, not the vision tower ({SWIFT_LORA_LLM})",
    )
    b.remember(s)  # the vision stage trains the tower and aligner in full (resolve/vision.py)


def _swift_quant_bit(b: PlanBuilder, s: Setting) -> None:
    # ms-swift 1.x/2.x `quantization_bit: Literal[0, 4, 8] = 0` (swift/llm/utils/argument.py v1.7.3): 0 = none
    if to_int(s.value) != 0:
        _quant_bits(b, s)


# ms-swift's `--target_regex` (and 2.x's `--lora_target_regex`) replaces the LoRA targets, whatever
# `--target_modules` says: v3/v4 swift/arguments/tuner_args.py `if self.target_regex: self.target_modules =
# self.target_regex`; v2.6.1 swift/llm/tuner.py `'target_modules': args.target_regex or args.target_modules` (with
# swift/llm/utils/argument.py taking `lora_target_regex` as `target_regex`). peft matches it against module paths
# (resolve/adapters.py `regex_targets`).
SWIFT_TARGET_REGEX = (
    "`{key}` replaces --target_modules (ms-swift swift/arguments/tuner_args.py, v2.6.1 swift/llm/tuner.py)"
)


def _swift_target_regex(b: PlanBuilder, s: Setting) -> None:
    pattern = str(s.value).strip() if s.value is not None else ""
    if not pattern or pattern.lower() == "none":
        return b.remember(s)
    b.set("lora_targets", [pattern], s, override=True, note=SWIFT_TARGET_REGEX.format(key=s.key))


def _swift_frozen_share(b: PlanBuilder, s: Setting) -> None:
    """ms-swift's `--freeze_parameters_ratio` (0 to 1; a full fine-tune only): the resolver turns the share into the
    layers that stay trainable (resolve/adapters.py `frozen_share_layers`)."""
    v = to_float(s.value)
    if v is None or not 0 <= v <= 1:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be a number from 0 to 1, got {s.value!r}", s)
    if v > 0:
        b.set("frozen_share", v, s)
    else:
        b.remember(s)


SWIFT_HANDLERS = {
    "model": launchers.swift_model_path,
    "freeze_parameters_ratio": _swift_frozen_share,
    # ms-swift 3.x/4.x `--target_parameters` goes to peft's LoraConfig as it is (swift/pipelines/train/tuner.py)
    "target_parameters": moe_experts.read_target_parameters,
    # swift/arguments/base_args/model_args.py `experts_impl`, handed to from_pretrained as experts_implementation
    "experts_impl": moe_experts.read_experts_implementation,
    "target_regex": _swift_target_regex,
    "lora_target_regex": _swift_target_regex,
    "deepspeed": _swift_deepspeed,
    "fsdp": _swift_fsdp,
    "attn_impl": _swift_attn,
    "quantization_bit": _swift_quant_bit,
    "quant_bits": _swift_quant_bit,
    **launchers.SWIFT_METHOD_HANDLERS,
    **{k: PlanBuilder.remember for k in SWIFT_REMEMBERED},
    "tuner_type": _swift_tuner,
    "train_type": _swift_tuner,
}
TRL_CLI_HANDLERS = {"model": _model_flag}


def _megatron_swift_tuner(b: PlanBuilder, s: Setting) -> None:
    """`--tuner_type lora_llm` under Megatron-SWIFT: LoRA on the language model, the vision tower and aligner trained
    in full (ms-swift v4.6.0 swift/megatron/utils/utils.py `prepare_mcore_model` → `_prepare_full_vit`), as the
    `swift` command's; `full` and `lora` are the Megatron reader's."""
    if str(s.value).strip().lower() == "lora_llm":
        return _swift_tuner(b, s)
    run = megatron.handler(_norm(s.key))
    if run is not None:
        run(b, s)


# Megatron-SWIFT's tuner arguments (`MegatronTunerMixin`: ms-swift v3.12.6 swift/megatron/argument/megatron_args.py,
# v4.6.0 swift/megatron/arguments/megatron_args.py) go to ms-swift's own LoraConfig as the `swift` command's do
# (swift/megatron/utils/utils.py `prepare_adapter`: `target_modules`, `modules_to_save`, `lora_alpha`,
# `lora_dropout`; `target_regex` replaces `target_modules`); the Megatron reader takes the rest of the command line
MEGATRON_SWIFT_HANDLERS = {
    "target_modules": _via("lora_target_modules"),
    "target_regex": _swift_target_regex,
    "modules_to_save": _via("lora_modules_to_save"),
    "lora_alpha": _via("lora_alpha"),
    "lora_dropout": _via("lora_dropout"),
    "tuner_type": _megatron_swift_tuner,
    "train_type": _megatron_swift_tuner,
}

# Boolean flags (for `--no_X` negation and bare `--X`).
_BOOL_KEYS = frozenset(
    {
        "bf16",
        "fp16",
        "tf32",
        "gradient_checkpointing",
        "packing",
        "padding_free",
        "use_peft",
        "use_dora",
        "use_rslora",
        "load_in_4bit",
        "load_in_8bit",
        "torch_compile",
        "use_liger_kernel",
        "activation_offloading",
        "remove_unused_columns",
        "use_flash_attention_2",
        "use_flash_attn",
        "q_lora",
        "lora_enable",
        "double_quant",
        "use_bnb_nested_quant",
        "do_train",
        "do_eval",
        "disable_gradient_checkpointing",
        "enable_liger_kernel",
        "bnb_4bit_use_double_quant",
        "group_by_length",
        "auto_find_batch_size",
        "dataloader_pin_memory",
        "use_liger",
        "use_peft_lora",
        "use_4bit_quantization",
        "use_8bit_quantization",
        "use_nested_quant",
        "use_reentrant",
    }
)


def handler_for(tool: str, name: str):
    n = _norm(name)
    if tool == "swift" and n in SWIFT_HANDLERS:
        return SWIFT_HANDLERS[n]
    if tool == "trl" and n in TRL_CLI_HANDLERS:
        return TRL_CLI_HANDLERS[n]
    if tool == "openrlhf" and n in launchers.OPENRLHF_HANDLERS:
        return launchers.OPENRLHF_HANDLERS[n]
    if tool == "megatron":
        return MEGATRON_SWIFT_HANDLERS.get(n) or megatron.handler(n)
    if is_hf_key(n):
        return _via(n)
    return EXTRA_HANDLERS.get(n)


def is_known_key(name: str) -> bool:
    n = _norm(name)
    return is_hf_key(n) or n in EXTRA_HANDLERS or n in hf.TRAINING_ARGUMENT_KEYS or n in hf.TRL_KEYS or n in _BOOL_KEYS


# --- the parse -----------------------------------------------------------------------------------


@dataclass
class ShellScript:
    """What the renderer and the Markdown reader need besides the plan."""

    text: str
    index: LineIndex
    commands: list[Command]
    launch: Launch | None
    env: dict[str, Var]  # variables at the launch command
    purpose: tuple[str, Span] | None = None  # no launch, but a command that does something else (formats.purpose)
    flag_args: list[tuple[str, Arg, list[Arg]]] = field(default_factory=list)  # the script's own flags
    # variables whose default the caller may override (an option-parsing loop's `MODEL=$1`) → what was assumed
    defaults: dict[str, tuple] = field(default_factory=dict)
    branch_notes: dict[str, str] = field(default_factory=dict)  # variables an `if` of unknown outcome sets → assumed
    sourcing: Any = None  # the formats.shell_source.Sourcing it was read with (the script's folder, files read in)
    # libraries its own `pip install` commands pin: package → (version, where) (environment.pip_install_pins)
    installs: dict[str, tuple[str, str]] = field(default_factory=dict)


class _Reader:
    def __init__(self, script: "ShellScript", builder: PlanBuilder):
        self.text = script.text
        self.b = builder
        self.idx = script.index

    # spans
    def sp(self, start: int, end: int) -> Span:
        return self.idx.span(start, end)

    def wsp(self, w: Word) -> Span:
        return self.idx.span(w.start, w.end)


def _assign(
    text: str, w: Word, env: dict[str, Var], ex: Expander, stmt: tuple[int, int], exported: bool
) -> tuple[str, Var] | None:
    """A `NAME=value`, `NAME+=value`, `NAME=( … )` or `NAME+=( … )` word → (name, the variable it leaves)."""
    m = _ASSIGN.match(w.plain_prefix())
    if not m:
        return None
    name = m.group(1)
    first = w.parts[0]
    cut = m.end()
    vr = (first[2] + cut, w.end)
    old = env.get(name) if m.group().endswith("+=") else None
    if w.parts[-1][0] == ARR:
        # bash expands the elements as it assigns them (bash 5.2 manual, "Arrays")
        elements = _args(text, w.parts[-1][1], env, ex)
        if old is not None:
            before = old.elements if old.elements is not None else [Arg(old.word, old.value)] if old.word else []
            elements = before + elements
        elements = elements[: MAX_WORDS + 1]  # more than a launch line reads (collect_args says so)
        return name, Var(elements[0].value if elements else "", w, vr, stmt, exported, elements=elements)
    value = ex.parts([(LIT, first[1][cut:], first[2] + cut, False)] + w.parts[1:], env, (w.start, w.end))
    if old is not None:
        return name, Var(ex.append(old.value, value, (w.start, w.end)), w, vr, stmt, exported)
    var = Var(value, w, vr, stmt, exported, words_range=_list_value(text, name, *vr))
    if var.words_range is not None:
        var.refs = {p[1]: env.get(p[1]) for p in w.parts if p[0] == VAR}
    else:
        var.fields = _fields(text, w, [(LIT, first[1][cut:], first[2] + cut, False)] + w.parts[1:], env, ex)
    return name, var


def _list_value(text: str, name: str, start: int, end: int) -> tuple[int, int] | None:
    """`X="--nproc_per_node 8 --nnodes $NNODES"` (Qwen's `DISTRIBUTED_ARGS`): a quoted value of several words, which
    an unquoted `$X` splits into those words (bash 5.2 manual, "Word Splitting"); the range of its words, read as a
    here-document's are. None for one word, other quoting, or a value that names `X` itself."""
    raw = text[start:end]
    if len(raw) < 3 or not any(c in raw for c in " \t\n"):
        return None
    if raw[0] == "'" and raw[-1] == "'" and not any(c in raw[1:-1] for c in "'\"\\$`"):
        return start + 1, end - 1
    if (
        raw[0] == '"'
        and _Scanner(text, end)._double_quoted(start, parts := []) == end
        and not any(p[0] == CMD or p[0] == VAR and p[1] == name for p in parts)
    ):
        return start + 1, end - 1
    return None


def _fields(text: str, w: Word, parts: list, env: dict[str, Var], ex: Expander) -> list[Arg] | None:
    """The words an unquoted `$X` splits into when `X` was assigned `parts` (the value after `X=`), for a value that
    joins list values or holds blanks but is not one quoted list `_list_value` reads: verl's
    examples/gspo_trainer/run_qwen30b_gspo.sh `ACTOR_CONFIG="$ACTOR_CONFIG $ACTOR_MEGATRON_CONFIG"` … `$ACTOR_CONFIG`.
    bash expands the value once, as it assigns it, and splits its result at blanks where it is used unquoted
    (bash 5.2 manual, "Shell Parameters", "Word Splitting"). A part not known without running the script (`$DATA_HOME`
    unset) stays inside its word as a placeholder: that word's value is unknown, the others are read. None when
    no word splitting can happen (one word, nothing named that splits) or for a value not worked out here."""
    chunks: list[tuple[list[tuple[str | None, tuple[int, int] | None, Word | None]], bool, bool]] = []
    cursor = w.start
    splits = False
    for p in parts:
        kind = p[0]
        if kind == LIT:
            lit = p[1]
            base = p[2] + (
                1 if p[3] and text[p[2] : p[2] + 1] in ("'", '"') and text[p[2] : p[2] + len(lit)] != lit else 0
            )
            pieces = []
            for m in re.finditer(r"[^ \t\n]+", lit):
                a = base + m.start()
                pieces.append(
                    (m.group(), (a, a + len(m.group())) if text[a : a + len(m.group())] == m.group() else None, None)
                )
            if pieces and (len(pieces) > 1 or lit[:1].isspace() or lit[-1:].isspace()) or not pieces and lit:
                splits = True
            chunks.append((pieces, lit[:1].isspace(), lit[-1:].isspace()))
            continue
        if kind == ARR:
            return None
        raw = p[4] if kind == VAR else p[1]
        at = text.find(raw, cursor, w.end)
        where = (at, at + len(raw)) if at >= 0 else None
        cursor = where[1] if where is not None else cursor
        var = env.get(p[1]) if kind == VAR and not p[2] else None
        listed = _list_fields(text, var, env, ex) if var is not None else None
        if listed is not None:
            splits = True
            chunks.append(([(a.value, None, a.word) for a in listed], True, True))
            continue
        v = ex.parts([p], env) if kind == VAR or p[1].startswith("$((") else None
        if v is None:
            chunks.append(([(None, where, None)], False, False))
            continue
        pieces = [(m.group(), where, None) for m in re.finditer(r"[^ \t\n]+", v)]
        splits = splits or len(pieces) > 1 or v[:1].isspace() or v[-1:].isspace()
        chunks.append((pieces, v[:1].isspace(), v[-1:].isspace()))
    if not splits:
        return None
    out: list[Arg] = []
    cur: list | None = None  # the word being built: [value, range, word]

    def close() -> None:
        nonlocal cur
        if cur is not None and len(out) <= MAX_WORDS:
            value, where, word = cur
            if word is None:
                a, b = where if where is not None else (w.start, w.end)
                word = Word(a, b, [(LIT, text[a:b], a, True)])
            out.append(Arg(word, value))
        cur = None

    for pieces, lead, trail in chunks:
        if lead:
            close()
        for k, (value, where, word) in enumerate(pieces):
            if k > 0:
                close()
            if cur is None:
                cur = [value, where, word]
                continue
            joined = (
                (cur[1][0], where[1]) if cur[1] is not None and where is not None and cur[1][1] == where[0] else None
            )
            cur = [None if cur[0] is None or value is None else cur[0] + value, joined, None if joined else w]
        if trail:
            close()
    close()
    return out


def _list_fields(text: str, var: Var, env: dict[str, Var], ex: Expander) -> list[Arg] | None:
    """The words `$X` splits into where X holds a list (a quoted list of words, or a value `_fields` split)."""
    if var.fields is not None:
        if ex.spliced + len(var.fields) > MAX_SPLICED_WORDS:
            return None
        ex.spliced += len(var.fields)
        return var.fields
    if var.words_range is None or var.refs and any(env.get(n) is not v for n, v in var.refs.items()):
        return None
    words = _spliced_words(text, var.words_range, ex)
    return None if words is None else _args(text, words, env, ex, 1)


# --- control flow --------------------------------------------------------------------------------

_OPENS = frozenset({"if", "case", "while", "until", "for", "select"})
_CLOSES = frozenset({"fi", "esac", "done"})
_LEADING = frozenset({"then", "do", "else", "elif", "!", "{", "}"})
_ARG_REF = re.compile(r"\$\{?#?([A-Za-z_][A-Za-z0-9_]*|[1-9@*])")
# a `case` arm's pattern: after `in` or a previous arm's `;;`, up to its `)` (`-m | --model )`, `m)`, `--lr=*)`)
_CASE_ARM = re.compile(r"(?:\bin\s|;;&?|;&)\s*\(?([^()\n;]*?)\)")
_ARM_WINDOW = 2_000  # characters before an assignment searched for its arm (real arms: a few lines)


# --- conditions --------------------------------------------------------------------------------------------------

_THEN = re.compile(r"[;\n]\s*then\b")
_JOIN = re.compile(r"\s(&&|\|\|)\s")
_COMPARE = re.compile(r"<=|>=|==|!=|<|>")
_INT_TESTS = {
    "-eq": lambda a, b: a == b,
    "-ne": lambda a, b: a != b,
    "-lt": lambda a, b: a < b,
    "-gt": lambda a, b: a > b,
    "-le": lambda a, b: a <= b,
    "-ge": lambda a, b: a >= b,
}
MAX_CONDITION_CHARS = 500  # a longer `if` condition is not worked out (real ones: a test of a word or two)


def condition_text(text: str, at: int) -> str | None:
    """The condition of the `if`/`elif` whose keyword ends at `at`: the text up to its `; then` / `⏎ then`."""
    m = _THEN.search(text, at, at + MAX_CONDITION_CHARS)
    return text[at : m.start()].strip() if m else None


def decide(cond: str, env: dict[str, Var]) -> bool | None:
    """Whether an `if` condition holds, where the script's known values decide it: `[ … ]`, `[[ … ]]` and `test`
    comparing words (`=`, `==`, `!=`, `-z`, `-n`, `-eq` …; bash 5.2 manual, "Bash Conditional Expressions") and
    `(( … ))` comparing integers ("Shell Arithmetic"), joined by `&&`, `||` and `!`. None when anything it reads
    is not known without running the script (a file test, a command's status, a variable the caller sets)."""
    whole = cond.startswith("[[") and cond.endswith("]]") and cond.count("[[") == 1 and cond.count("]]") == 1
    pieces = _JOIN.split(cond[2:-2] if whole else cond)
    value = _decide_one(pieces[0], env, whole)
    for k in range(1, len(pieces) - 1, 2):
        right = _decide_one(pieces[k + 1], env, whole)
        if pieces[k] == "&&":
            value = False if value is False or right is False else None if value is None or right is None else True
        else:
            value = True if value is True or right is True else None if value is None or right is None else False
    return value


def _decide_one(piece: str, env: dict[str, Var], inside_double: bool) -> bool | None:
    piece = piece.strip()
    negate = False
    while piece.startswith("! "):
        negate, piece = not negate, piece[2:].strip()
    value: bool | None
    if inside_double:
        value = _decide_test(piece, env, True)
    elif piece.startswith("((") and piece.endswith("))"):
        value = _decide_arith(piece[2:-2], env)
    elif piece.startswith("[[") and piece.endswith("]]"):
        value = _decide_test(piece[2:-2], env, True)
    elif piece.startswith("[") and piece.endswith("]"):
        value = _decide_test(piece[1:-1], env, False)
    elif piece.startswith("test "):
        value = _decide_test(piece[5:], env, False)
    else:
        return None  # a command: its status is not known
    return None if value is None else value != negate


def _decide_arith(expr: str, env: dict[str, Var]) -> bool | None:
    m = _COMPARE.search(expr)
    if m is None:
        v = arithmetic(expr, env)
        return None if v is None else v != "0"
    if _COMPARE.search(expr, m.end()) is not None:
        return None
    a, b = arithmetic(expr[: m.start()], env), arithmetic(expr[m.end() :], env)
    if a is None or b is None:
        return None
    x, y = int(a), int(b)
    return {"<=": x <= y, ">=": x >= y, "==": x == y, "!=": x != y, "<": x < y, ">": x > y}[m.group()]


def _decide_test(inner: str, env: dict[str, Var], double: bool) -> bool | None:
    words = words_in(inner, 0, len(inner))
    ops: list[str] = []
    for w in words:
        raw = inner[w.start : w.end]
        v = expand_parts(w.parts, env)
        if v is None:
            return None
        if v == "" and raw[:1] not in "'\"" and not double:
            continue  # an unquoted empty expansion is no word at all in `[ … ]`
        if double and w is words[-1] and len(words) == 3 and raw[:1] not in "'\"" and any(c in v for c in "*?["):
            return None  # a `[[ x == pattern ]]` match
        ops.append(v)
    if len(ops) == 1:
        return ops[0] != ""
    if len(ops) == 2:
        if ops[0] == "-z":
            return ops[1] == ""
        if ops[0] == "-n":
            return ops[1] != ""
        if ops[0] == "!":
            return ops[1] == ""
        return None  # a file test (`-f`, `-d`), `-v` …
    if len(ops) == 3:
        a, op, b = ops
        if op in ("=", "=="):
            return a == b
        if op == "!=":
            return a != b
        if op in _INT_TESTS and re.fullmatch(r"-?\d{1,18}", a) and re.fullmatch(r"-?\d{1,18}", b):
            return _INT_TESTS[op](int(a), int(b))
    return None


@dataclass
class _Branch:
    """An open `if`: which of its branches runs. `state`: "run" (its condition holds), "skip" (it does not, or an
    earlier branch ran) or "maybe" (not known: the first such branch is the one read)."""

    cond: str
    state: str
    chosen: bool  # a branch was taken: the later ones are skipped
    by_choice: bool = False  # it was taken without knowing its condition
    assigned: dict[str, str | None] = field(default_factory=dict)  # set in the branch taken by choice → value
    kept: dict[str, str] = field(default_factory=dict)  # set there, but its value before the `if` stays → that value
    others: dict[str, list[str]] = field(default_factory=dict)  # what the branches not taken would set
    # a `case`: its subject's value (None: not known), and whether the next command is an arm's pattern
    case: bool = False
    subject: str | None = None
    expect: bool = False
    in_patterns: bool = False  # after an arm's first pattern, before its `)`
    decided: bool = False  # the arm being read is decided (a pattern of it matched, or an earlier arm was taken)


def branch_note(name: str, cond: str, value: str | None, others: list[str], kept: bool) -> str:
    """What was assumed for a variable an `if` (or `case`: `cond` "case WORD in") of unknown outcome sets."""
    is_case = cond.startswith("case ") and cond.endswith(" in")
    shown_cond = cond if len(cond) <= 60 else cond[:59] + "…"
    construct = shown_cond if is_case else f"if {shown_cond}"
    part, which = ("arm", "which arm runs") if is_case else ("branch", "which branch runs")
    alts = ", ".join(f"`{o if len(o) <= 60 else o[:59] + '…'}`" for o in dict.fromkeys(others[:4]))
    shown = value if value is not None and len(value) <= 80 else (value or "")[:79] + "…"
    if kept:
        unknown = which if is_case else "whether that branch runs"
        return (
            f"{name}={shown}, its value before `{construct}`; {unknown} is not known before the script runs "
            f"(it would set {alts})"
        )
    return f"{name}={shown}, from the first {part} of `{construct}`; {which} is not known before the script runs" + (
        f" (the others set {alts})" if alts else ""
    )


class _Flow:
    """What the script's control flow means for its assignments. A script run without arguments never enters its
    option-parsing loop (`while [[ "$1" != "" ]]; do case $1 in -m) shift; MODEL=$1 ;; … esac; shift; done`,
    `while getopts m: opt; do case $opt in m) MODEL=$OPTARG ;; esac; done`), so an assignment from the caller's
    arguments made only under a condition leaves the default in place; what was assumed is kept in `defaults`."""

    def __init__(self, text: str):
        self.text = text
        self.blocks: list[tuple[str, int]] = []  # open if/case/loop: (keyword, offset)
        self.arg_names = set("123456789@*") | {"OPTARG"}  # names that hold the caller's arguments
        self.defaults: dict[str, tuple[str, int, int | None]] = {}  # name → (default, where, its `case`)
        self.prev_end = 0
        self.conditional = False  # the command being read may not run
        self.frames: list[_Branch | None] = []  # one for each of `blocks`: an `if`'s branches, else None
        self.branch_notes: dict[str, str] = {}  # a variable an `if` of unknown outcome sets → what was assumed

    def enter(self, cmd: Command, env: dict[str, Var] | None = None) -> int:
        """Open and close blocks at `cmd`'s leading keywords; the index of its first word after `then`, `do` …
        An `if` whose condition `env` decides runs that branch only (bash 5.2 manual, "Conditional Constructs");
        one it does not decide is read as the first launch sees it: its first branch, with the values set before
        it kept (see `branch_keeps`)."""
        words, text = cmd.words, self.text
        gap = text[self.prev_end : cmd.start]
        self.conditional = bool(self.blocks) or gap.rstrip(" \t\\\n").endswith(("&&", "||"))
        self.prev_end = max(self.prev_end, cmd.end)
        top = self.frames[-1] if self.frames else None
        if top is not None and top.case:
            if ";;" in gap or ";&" in gap:
                top.expect = True
            if top.expect and words and raw_text(text, words[0]) not in _CLOSES and self._pattern(top, cmd, words, env):
                return len(words)
        j = 0
        while j < len(words):
            t = raw_text(text, words[j])
            if t in _OPENS:
                self.blocks.append((t, cmd.start))
                frame = self._branch(words[j], env, None) if t == "if" else None
                if t == "case":
                    frame = self._case(words[j + 1 :], env)
                self.frames.append(frame)
                if t == "for" and j + 1 < len(words):
                    self._for(words[j + 1 :])
                if t == "while" and len(words) > j + 3 and raw_text(text, words[j + 1]) == "getopts":
                    self.arg_names.add(raw_text(text, words[j + 3]))  # `while getopts m:b: opt`: `opt` too
                if frame is not None and frame.case and len(words) > j + 3:  # `case $X in a) …` on one line
                    if self._pattern(frame, cmd, words[j + 3 :], env):
                        return len(words)
                break
            if t in _CLOSES and self.blocks:
                self.blocks.pop()
                frame = self.frames.pop() if self.frames else None
                if frame is not None:
                    self._close(frame)
            elif t in ("elif", "else") and self.frames and self.frames[-1] is not None:
                self.frames[-1] = self._branch(words[j], env, self.frames[-1]) if t == "elif" else self._else()
            elif t not in _LEADING and t not in _CLOSES:
                break
            j += 1
        return j

    def _for(self, words: list[Word]) -> None:
        """`for a in "$@"` (or a bare `for a`): `a` holds the caller's arguments."""
        texts = [raw_text(self.text, w) for w in words[:64]]
        if _NAME.fullmatch(texts[0]) and (
            len(texts) == 1
            or texts[1] == "in"
            and texts[2:]
            and all(t.strip('"') in ("$@", "${@}", "$*", "${*}") for t in texts[2:])
        ):
            self.arg_names.add(texts[0])

    def _branch(self, kw: Word, env: dict[str, Var] | None, prev: "_Branch | None") -> "_Branch":
        """The `if`/`elif` branch whose keyword is `kw`."""
        cond = condition_text(self.text, kw.end) or ""
        if prev is not None and prev.chosen:
            prev.state = "skip"  # an earlier branch ran, or was the one read: it keeps what it assigned
            return prev
        if prev is None and self.mode() == "skip":
            return _Branch(cond, "skip", True)  # the whole `if` does not run
        value = decide(cond, env) if cond and env is not None else None
        if value is None:
            return _Branch(cond, "maybe", True, by_choice=True)
        return _Branch(cond, "run" if value else "skip", value)

    def _case(self, words: list[Word], env: dict[str, Var] | None) -> "_Branch | None":
        """`case WORD in`: its arms are branches (bash 5.2 manual, "Conditional Constructs": the first arm whose
        pattern matches WORD runs, the others do not). A `case` on the caller's arguments (`case $1 in`, an
        option-parsing loop's) stays as it was: a script run without arguments enters none of its arms, which
        `keeps_default` reads."""
        if len(words) < 2 or raw_text(self.text, words[1]) != "in" or self.from_args(words[0]):
            return None
        cond = f"case {raw_text(self.text, words[0])} in"
        if self.mode() == "skip":
            return _Branch(cond, "skip", True, case=True)
        subject = expand_parts(words[0].parts, env) if env is not None else None
        return _Branch(cond, "skip", False, case=True, subject=subject, expect=True)

    def _pattern(self, frame: "_Branch", cmd: Command, words: list[Word], env: dict[str, Var] | None) -> bool:
        """Whether `words` (of `cmd`) are a pattern of the `case` arm that starts here; an arm's last pattern,
        followed by `)`, decides whether the arm runs."""
        after = self.text[cmd.end : cmd.end + 64].lstrip(" \t")[:1]
        if after not in (")", "|"):
            return False
        if not frame.in_patterns:  # the arm's first pattern
            frame.state, frame.decided = "skip", frame.chosen  # an earlier arm ran, or was the one read
        frame.in_patterns = frame.expect = after == "|"
        if frame.decided:
            return True
        match = _case_match(self.text, words, frame.subject, env) if frame.subject is not None else None
        if match is True:
            frame.state, frame.chosen, frame.decided = "run", True, True
        elif match is None:
            frame.state, frame.chosen, frame.by_choice, frame.decided = "maybe", True, True, True
        return True

    def _else(self) -> "_Branch":
        frame = self.frames[-1]
        assert frame is not None
        if frame.chosen:
            frame.state = "skip"
            return frame
        return _Branch(frame.cond, "run", True)

    def mode(self) -> str:
        """Whether the command being read runs: "run", "skip" (a branch not taken) or "maybe" (the branch read of
        an `if` whose outcome is not known)."""
        states = {f.state for f in self.frames if f is not None}
        return "skip" if "skip" in states else "maybe" if "maybe" in states else "run"

    def skipped(self, words: list[Word]) -> None:
        """A command of a branch not read: what its assignments would set, for the note on the branch read."""
        frame = next((f for f in reversed(self.frames) if f is not None and f.state == "skip"), None)
        if frame is None or not frame.by_choice:
            return
        for w in words[:8]:
            m = _ASSIGN.match(w.plain_prefix())
            if m is None:
                if raw_text(self.text, w) in ("export", "declare", "local", "readonly"):
                    continue
                break
            frame.others.setdefault(m.group(1), []).append(self.text[w.start + m.end() : w.end])

    def branch_keeps(self, name: str, var: Var, old: Var | None) -> bool:
        """`name=…` in the branch read of an `if` of unknown outcome: True when `name` had a known, non-empty value
        before the `if` (that value is what a run that skips the branch sees, and it stays); else the branch's value
        is taken (a list emptied before the `if` and filled in each branch takes the first branch's)."""
        if self.mode() != "maybe":
            self.branch_notes.pop(name, None)
            return False
        frames = [f for f in self.frames if f is not None and f.state == "maybe"]
        owner = next((f for f in frames if name in f.assigned), None)
        if owner is not None:  # set earlier in the branch read: this follows it
            owner.assigned[name] = var.value
            return False
        raw = self.text[var.value_range[0] : var.value_range[1]] if var.value_range else var.value or ""
        owner = next((f for f in frames if name in f.kept), None)
        if owner is None and old is not None and (old.value or old.elements):  # an empty `X=()`/`X=""` is no value
            owner = frames[-1]
            owner.kept[name] = old.value
        if owner is not None:
            owner.others.setdefault(name, []).append(raw)
            return True
        frames[-1].assigned[name] = var.value
        return False

    def _close(self, frame: "_Branch") -> None:
        if not frame.by_choice:
            return
        for name, value in frame.assigned.items():
            if name in frame.others:
                self.branch_notes[name] = branch_note(name, frame.cond, value, frame.others[name], False)
        for name, value in frame.kept.items():
            self.branch_notes[name] = branch_note(name, frame.cond, value, frame.others.get(name, []), True)

    def finish(self) -> dict[str, str]:
        for frame in self.frames:
            if frame is not None:
                self._close(frame)
        return self.branch_notes

    def from_args(self, w: Word) -> bool:
        for p in w.parts:
            if p[0] == VAR and p[1] in self.arg_names:
                return True
            if p[0] == CMD and any(m.group(1) in self.arg_names for m in _ARG_REF.finditer(p[1])):
                return True
        return False

    def keeps_default(self, name: str, var: Var, old: Var | None, cmd: Command) -> bool:
        """True when `name=…` (in `cmd`) takes a caller's argument under a condition and `name` has a known default:
        the default stays, and the assumption is recorded."""
        if not (
            self.conditional
            and var.word is not None
            and self.from_args(var.word)
            and old is not None
            and old.value is not None
        ):
            self.defaults.pop(name, None)
            return False
        case = next((start for kw, start in reversed(self.blocks) if kw == "case"), None)
        self.defaults[name] = (old.value, var.word.start, case)
        return True


def _case_match(text: str, words: list[Word], subject: str, env: dict[str, Var] | None) -> bool | None:
    """Whether a `case` pattern matches `subject` (bash 5.2 manual, "Pattern Matching": `*`, `?` and `[…]` outside
    quotes; quoted text matches itself); None when the pattern is not known or not read here."""
    rx = []
    for w in words:
        for p in w.parts:
            if p[0] == LIT and p[3]:
                rx.append(re.escape(p[1]))
            elif p[0] == LIT:
                if "[" in p[1] or "\\" in p[1]:
                    return None
                rx.append(re.escape(p[1]).replace(r"\*", ".*").replace(r"\?", "."))
            elif p[0] == VAR and env is not None and (v := expand_parts([p], env)) is not None:
                rx.append(re.escape(v))
            else:
                return None
    return None if not rx else bool(re.fullmatch("".join(rx), subject, re.S)) or False


def default_note(text: str, name: str, kept: tuple[str, int, int | None]) -> str:
    """What was assumed for a default kept by `_Flow` (worked out only for the variables a launch uses):
    "MODEL=Qwen/Qwen-7B, the script's default; `-m` or `--model` overrides it"."""
    value, at, case = kept
    value = value if len(value) <= 80 else value[:79] + "…"
    options = _case_options(text, at, case)
    by = " or ".join(f"`{o}`" for o in options) if options else "an argument given to the script"
    return f"{name}={value}, the script's default; {by} overrides it"


def _case_options(text: str, at: int, case: int | None) -> list[str]:
    """The options of the `case` arm that `at` lies in: `-m | --model )` → ["-m", "--model"], getopts' `m)` → ["-m"]."""
    if case is None:
        return []
    arm = None
    for arm in _CASE_ARM.finditer(text, max(case, at - _ARM_WINDOW), at):
        pass
    if arm is None:
        return []
    out = []
    for o in arm.group(1).split("|"):
        o = o.strip().strip("'\"").removesuffix("*")
        if o and o != "?":
            out.append(o if o.startswith("-") else "-" + o if len(o) == 1 else o)
    return out[:4]


# `bash -c "…"` (slurm's `srun … bash -c "cd /x; torchrun … -m ${training_commands}"`): the quoted script's commands
# are read where they stand, at most MAX_INLINE_DEPTH levels deep
MAX_INLINE_DEPTH = 3
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})


def _inline_commands(text: str, cmd: Command, words: list[Word]) -> list[Command]:
    """The commands of the script string given to `bash -c` anywhere in `cmd` (`srun … bash -c "…"`,
    `nohup bash -c '…'`), with their offsets in `text`; [] for any other command or a string not written out."""
    if cmd.depth >= MAX_INLINE_DEPTH:
        return []
    for k, w in enumerate(words[:-2]):
        if raw_text(text, w).rsplit("/", 1)[-1] not in _SHELLS:
            continue
        j = k + 1
        while j < len(words) - 1 and raw_text(text, words[j])[:1] in "-+":
            t = raw_text(text, words[j])
            j += 1
            if not t.startswith("--") and "c" in t:
                body = words[j]
                raw = raw_text(text, body)
                quote = raw[:1]
                if (
                    quote == "'"
                    and raw.count("'") == 2
                    and raw.endswith("'")
                    or (quote == '"' and _Scanner(text, body.end)._double_quoted(body.start, []) == body.end)
                ):
                    inner = _Scanner(text, body.end - 1).run(body.start + 1)
                    for c in inner:
                        c.depth = cmd.depth + 1
                    return inner
                return []
        return []
    return []


def _cvd_count(value: str | None) -> int | None:
    if value is None:
        return None
    ids = [x for x in value.replace(" ", "").split(",") if x]
    return len(ids) or None


def analyze(
    text: str,
    path: str,
    first_line: int = 0,
    trains: Callable[[str], bool] | None = None,
    sourcing: Any = None,
) -> tuple[ShellScript, list[ParseIssue]]:
    """Tokenize a script, run its variable assignments in order and find the training launch. `trains`: whether a
    Python script a `python` command runs is known to train (its imports or argument definitions say so, or it
    is the script whose usage examples these are); such a command is a launch whatever flags it passes.
    `sourcing` (a formats.shell_source.Sourcing): the workspace files it sources or runs are read where they stand."""
    if "\r" in text:
        # A lone \r ends a line for the editor and for LSP positions (vramlens.text), so it ends one here too,
        # as \r\n does: bash reads neither as a line break, but a script saved with either is read as it is
        # shown. One character for one: every offset and span stays the same.
        text = _LONE_CR.sub("\n", text)
    idx = LineIndex(text, path, first_line) if sourcing is None else sourcing.make_index(text, first_line)
    commands, _comments = tokenize(text)
    env: dict[str, Var] = {}
    ex = Expander()
    issues: list[ParseIssue] = []
    launch: Launch | None = None  # a launcher or training CLI: the first one wins
    weak: tuple[Launch, dict] | None = None  # a plain `python script.py --flags`: used when there is no launcher
    candidates: set[int] = set()
    other: tuple[str, Span] | None = None  # the first command that runs something other than training
    setup: tuple[str, Span] | None = None  # the first environment set-up command (`pip install`, `docker build`)
    installs: dict[str, tuple[str, str]] = {}  # what its `pip install` commands pin (ShellScript.installs)
    runs = False  # a command runs python or a launcher
    programs = False  # a command of the script's own runs a program (not only sets, exports or prints variables)
    assigned: dict[str, tuple[int, int]] = {}  # variables the script's own lines set -> their statement's range
    prev: Command | None = None
    flow = _Flow(text)
    pending = commands[::-1]  # a `bash -c "…"` command's own commands are read after it
    while pending:
        cmd = pending.pop()
        if (
            prev is not None
            and prev.ended_by_comment
            and id(prev) in candidates
            and cmd.words
            and (raw_text(text, cmd.words[0]).startswith("-") or _DOTTED_OVERRIDE.match(raw_text(text, cmd.words[0])))
        ):
            issues.append(
                ParseIssue(
                    kind=IssueKind.NOT_READ,
                    message=f"{COMMENT_CUT}: bash runs these flags as a separate command "
                    "and the training run never sees them",
                    span=idx.span(cmd.start, cmd.end),
                    severity=Severity.WARNING,
                )
            )
        prev = cmd
        if launch is not None:
            continue
        if sourcing is not None and (saved := sourcing.restore(cmd)) is not None:
            env = saved  # a script run as a child returned: its variables go with it
            continue
        words = cmd.words[flow.enter(cmd, env) :]
        if flow.mode() == "skip":  # a branch that does not run, or not the one read
            flow.skipped(words)
            continue
        inner = _inline_commands(text, cmd, words)
        if inner:
            pending.extend(inner[::-1])
            continue
        prefix: dict[str, Var] = {}
        k = 0
        while k < len(words):
            a = _assign(text, words[k], env, ex, (words[k].start, words[k].end), True)
            if a is None:
                break
            prefix[a[0]] = a[1]
            k += 1
        rest = words[k:]
        own = sourcing is None or sourcing.own(cmd)
        if not rest:
            if own:
                assigned.update(dict.fromkeys(prefix, (cmd.start, cmd.end)))
            for name, var in prefix.items():
                old = env.get(name)
                var.exported = bool(old and old.exported)
                if not flow.keeps_default(name, var, old, cmd) and not flow.branch_keeps(name, var, old):
                    env[name] = var
            continue
        head = ex.parts(rest[0].parts, env, (rest[0].start, rest[0].end))
        if head is None or head.rsplit("/", 1)[-1] not in _HEADS:
            from vramlens.formats import shell_source

            head, rest = shell_source.command_words(text, rest, head, env, ex)
        if sourcing is not None and (read_in := sourcing.enter(text, cmd, head, rest, env, prefix, ex)):
            text, more = read_in  # `source F`, `bash F`: F's commands are read next, with these variables
            flow.text = text
            pending.extend(more[::-1])
            continue
        if head in ("export", "declare", "typeset", "local", "readonly") and k == 0:
            exporting = head == "export"
            for w in rest[1:]:
                t = raw_text(text, w)
                if t.startswith("-"):
                    exporting = exporting or "x" in t
                    continue
                a = _assign(text, w, env, ex, (cmd.start, w.end), exporting)
                if a is not None and own:
                    assigned[a[0]] = (cmd.start, cmd.end)
                if a is not None:
                    old = env.get(a[0])
                    if not flow.keeps_default(a[0], a[1], old, cmd) and not flow.branch_keeps(a[0], a[1], old):
                        env[a[0]] = a[1]
                elif _NAME.fullmatch(t):
                    if t in env:
                        env[t].exported = env[t].exported or exporting
                    else:
                        env[t] = Var(None, w, None, (cmd.start, w.end), exporting)
            continue
        if head == "unset":
            for w in rest[1:]:
                env.pop(raw_text(text, w), None)
                flow.defaults.pop(raw_text(text, w), None)
            continue
        if head == "read" and cmd.heredocs:  # `[IFS=] read -r -d '' VAR <<EOF … EOF`
            names = [
                raw_text(text, w)
                for w in rest[1:]
                if not raw_text(text, w).startswith("-") and raw_text(text, w) not in ("''", '""')
            ]
            if names and _NAME.fullmatch(names[-1]):
                a, b_ = cmd.heredocs[0]
                read_into = Var(
                    ex.parts(_heredoc_parts(text, a, b_), env, (a, b_)),
                    rest[-1],
                    (a, b_),
                    (cmd.start, cmd.end),
                    False,
                    words_range=(a, b_),
                )
                if not flow.branch_keeps(names[-1], read_into, env.get(names[-1])):
                    env[names[-1]] = read_into
            continue
        prog = (head or "").rsplit("/", 1)[-1]
        programs = programs or (own and _runs_program(text, rest))
        if sourcing is not None and not sourcing.own(cmd) and prog not in _HEADS and not _PYTHON.fullmatch(prog):
            continue  # what a file read in does besides training (`pip install`, `echo`) is not this script's purpose
        if prog in purpose.SETUP_HEADS:  # `pip install`, `docker build`: counted only when nothing else runs
            words = [raw_text(text, w) for w in rest]
            if setup is None and (what := purpose.setup_purpose(words)) is not None:
                setup = (what, idx.span(cmd.start, cmd.end))
            where = f"`{prog} install` in {PurePosixPath(path).name} line {idx.span(cmd.start, cmd.end).start_line + 1}"
            for name, version in environment.pip_install_pins(words).items():
                installs.setdefault(name, (version, where))
            continue
        runs = runs or bool(_PYTHON.fullmatch(prog)) or (prog in _HEADS and prog not in _RESERVED)
        if other is None and prog in purpose.COMMAND_HEADS:
            what = purpose.command_purpose([ex.parts(w.parts, env, (w.start, w.end)) or "" for w in rest[:8]])
            if what is not None:
                other = (what, idx.span(cmd.start, cmd.end))
                continue
        if prog not in _HEADS and not (
            _PYTHON.fullmatch(prog) and (_may_train(text, rest) or _names_script(text, rest, trains))
        ):
            # `python llm_infer.py --ckpt_dir …` (ms-swift 2.x examples/pytorch/llm/scripts/*/infer.sh): no training
            # flag, and the script is one a framework runs for something other than training
            if other is None and _PYTHON.fullmatch(prog) and (what := _python_purpose(text, rest)) is not None:
                other = (what, idx.span(cmd.start, cmd.end))
            continue  # not a launch: its words need no expansion
        merged = dict(env)
        merged.update(prefix)
        args = _args(text, rest, merged, ex)
        found = classify(args, prefix, cmd)
        if found is None:
            continue
        if found.script is not None:
            what = (
                purpose.module_purpose(found.script.text)
                or purpose.script_purpose(found.script.text)
                or launchers.not_training(found.tool, found.subcommand)
            )
            if what is not None:
                other = other or (what, idx.span(cmd.start, cmd.end))
                continue
        candidates.add(id(cmd))
        if found.tool != "python" or _known_trainer(found, trains):
            launch, env = found, merged
        elif weak is None and _trains(found):
            weak = (found, merged)
    if launch is None and weak is not None:
        launch, env = weak
    if launch is None and other is None:  # Megatron flags kept in variables for a launch script to `source`
        launch = megatron.fragment_launch(text, env, ex)
        if launch is None and (definition := megatron.fragment_purpose(text, env, ex)) is not None:
            other = (definition[0], idx.span(*definition[1]))
    if other is None and setup is not None and not runs:
        other = setup
    if launch is None and other is None and assigned and not programs:
        other = _settings_file(text, assigned, idx)
    if ex.capped:
        start, end = ex.capped[0]
        issues.append(
            ParseIssue(
                kind=IssueKind.NOT_READ,
                message=f"a variable here expands to more than {MAX_VALUE_CHARS:,} characters (or the script's "
                f"expansions to more than {MAX_EXPANDED_CHARS:,} in all); its value is treated as unknown "
                f"({len(ex.capped):,} such value{'s' if len(ex.capped) != 1 else ''})",
                span=idx.span(start, end),
                severity=Severity.WARNING,
            )
        )
    script = ShellScript(
        text,
        idx,
        commands,
        launch,
        env,
        purpose=other if launch is None else None,
        defaults=flow.defaults,
        branch_notes=flow.finish(),
        sourcing=sourcing,
        installs=installs,
    )
    return script, issues


# builtins that set, test or print variables, or leave the script: a script whose own commands are only these (and
# assignments) runs no program; the words of a compound command in front of its first command
_QUIET = frozenset({"echo", "printf", "[", "[[", "test", "set", "shopt", ":", "true", "false", "exit", "return"})
_COMPOUND = frozenset({"if", "then", "else", "elif", "fi", "while", "until", "do", "done", "esac", "!", "{", "}"})


def _runs_program(text: str, words: list[Word]) -> bool:
    """Whether a command runs a program: its first word after `if`/`then`/… is not one of the `_QUIET` builtins."""
    for w in words:
        t = raw_text(text, w)
        if t not in _COMPOUND:
            return t.rsplit("/", 1)[-1] not in _QUIET
    return False


_FLAG_WORD = re.compile(r"(?<![^\s\"'(])--[A-Za-z]")


def _settings_file(text: str, assigned: dict[str, tuple[int, int]], idx: LineIndex) -> tuple[str, Span] | None:
    """A script that only sets variables and runs no program (Megatron-LM main examples/post_training/modelopt/conf/
    moonshotai/kimi_k2_instruct.sh: `HF_MODEL_CKPT=…`, `TP=8`, `EP=64`, which conf/arguments.sh `source`s as
    conf/${MLM_MODEL_CFG}.sh): settings for a launch script to `source`, not a run of its own. None when a variable
    holds a command line's flags (a Megatron `MODEL_ARGS`): part of a launch, which the flags' reader judges
    (`megatron.fragment_launch`, `megatron.fragment_purpose`)."""
    if any(_FLAG_WORD.search(text, a, b) for a, b in assigned.values()):
        return None
    names = list(assigned)
    shown = ", ".join(f"`{n}`" for n in names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    what = f"a file of settings ({shown}) for a launch script to `source`; it runs no command"
    start = min(a for a, _ in assigned.values())
    end = max(b for _, b in assigned.values())
    return what, idx.span(start, end)


def _args(text: str, words: list[Word], env: dict[str, Var], ex: "Expander", depth: int = 0) -> list[Arg]:
    """The command's words expanded; an unquoted `$X` that holds a list of words (a here-document read into X,
    OpenRLHF's `read -r -d '' training_commands <<EOF … EOF; deepspeed --module $training_commands`) becomes
    those words, each with its own range in the here-document."""
    out: list[Arg] = []
    for w in words:
        spliced = _splice(text, w, env, ex, depth)
        if spliced is not None:
            out.extend(spliced)
        else:
            out.append(Arg(w, ex.parts(w.parts, env, (w.start, w.end))))
    return out


def _element_words(text: str, a: Arg) -> list[str | None]:
    """An array element's words when an unquoted `${A[@]}` splits it: its value's words; for an element holding a
    value not known before the run (`"--data-cache-path ${PWD}/cache"`), its written words, each one that expands a
    variable unknown (None), so the flags beside it are still read."""
    if a.value is not None:
        return list(a.value.split())
    if a.word is None:
        return [None]
    raw = text[a.word.start : a.word.end].strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        raw = raw[1:-1]
    return [None if "$" in piece or "`" in piece else piece for piece in raw.split()] or [None]


def _splice(text: str, w: Word, env: dict[str, Var], ex: "Expander", depth: int = 0) -> list[Arg] | None:
    """The words that `w` stands for when it is a list: `"${ARGS[@]}"` or an unquoted `${ARGS[*]}` (the array's
    elements, as OpenRLHF's `deepspeed --module openrlhf.cli.train_sft "${ARGS[@]}"`), or an unquoted `$X` holding
    a here-document's words or a quoted list (whose own `$Y` words split in turn, MAX_SPLICE_DEPTH deep); None for
    any other word. Spliced words count toward MAX_SPLICED_WORDS per script."""
    parts = w.parts
    if not parts or parts[0][0] != VAR or any(p[0] != LIT or p[1] for p in parts[1:]):
        return None
    _, name, op, _, _ = parts[0]
    var = env.get(name)
    if var is None:
        return None
    if op == "[@]" or (op == "[*]" and text[w.start] != '"'):
        if var.elements is None:
            return None
        if ex.spliced + len(var.elements) > MAX_SPLICED_WORDS:
            ex.capped.append((w.start, w.end))
            return [Arg(w, None)]
        ex.spliced += len(var.elements)
        if text[w.start] == '"':
            return list(var.elements)
        # unquoted, each element is split at blanks (bash 5.2 manual, "Word Splitting"): Megatron-LM's
        # examples/llama/train_llama3_8b_h100_fp8.sh `ARGS+=("--vocab-size 128256")` … `${ARGS[@]}`
        return [Arg(a.word, piece) for a in var.elements for piece in _element_words(text, a)]
    if not op and len(parts) == 1 and var.fields is not None:
        if ex.spliced + len(var.fields) > MAX_SPLICED_WORDS:
            ex.capped.append((w.start, w.end))
            return [Arg(w, None)]
        ex.spliced += len(var.fields)
        return list(var.fields)
    if op or len(parts) != 1 or var.words_range is None or depth >= MAX_SPLICE_DEPTH:
        return None
    if var.refs and any(env.get(n) is not v for n, v in var.refs.items()):
        return None  # a variable it named was assigned since: its value as assigned, in one piece
    spliced = _spliced_words(text, var.words_range, ex)
    if spliced is None:
        return None
    return _args(text, spliced, env, ex, depth + 1)


MAX_SPLICE_DEPTH = 8  # `$A` whose words name `$B` whose words name `$C` …
MAX_SPLICED_WORDS = 100_000  # words of here-documents and arrays spliced into commands and arrays per script
# (real ones: a few dozen)


def _spliced_words(text: str, where: tuple[int, int], ex: "Expander") -> list[Word] | None:
    """The words of a here-document, tokenized once per script; None (unknown) past MAX_WORDS words in it or
    MAX_SPLICED_WORDS spliced in all, so a script that expands a large one on every line stays linear."""
    words = ex.heredoc_words.get(where)
    if words is None:
        words = ex.heredoc_words[where] = words_in(text, *where)[: MAX_WORDS + 1]
    if len(words) > MAX_WORDS or ex.spliced + len(words) > MAX_SPLICED_WORDS:
        return None
    ex.spliced += len(words)
    return words


def _heredoc_parts(text: str, a: int, b: int) -> list:
    """A here-document body as one literal (its `\\`-newlines joined), for the variable's plain value."""
    return [(LIT, text[a:b].replace("\\\n", " "), a, True)]


def _value_of_unknown_flag(prev: str | None) -> bool:
    """Whether a word is the value of a `--flag` no training program defines (`python prep.py --out data.json`): a
    file it names is the script's own input or output, not a training config."""
    if prev is None or not prev.startswith("--") or "=" in prev:
        return False
    n = _norm(_flag_name(prev.strip("'\"")))
    if "config" in n or "cfg" in n or "yaml" in n:  # `--config cfg.yaml`, `--config_file`, `--cfg`: a config file
        return False
    return not is_known_key(n[3:] if n.startswith("no_") else n)


def _may_train(text: str, words: list[Word]) -> bool:
    """A quick look at a `python …` command's raw words: any training flag or config file at all?"""
    prev = None
    for w in words[1:]:
        t = text[w.start : w.end]
        if t.startswith("--"):
            n = _norm(_flag_name(t.strip("'\"")))
            if is_known_key(n[3:] if n.startswith("no_") else n):
                return True
        elif (t.strip("'\"").lower().endswith(CONFIG_SUFFIXES) and not _value_of_unknown_flag(prev)) or t.startswith(
            ("-m", "$")
        ):
            return True
        prev = t
    return False


def _python_purpose(text: str, words: list[Word]) -> str | None:
    """What a `python [options] script.py …` command does when the script is a known non-training entry point."""
    for w in words[1:]:
        t = text[w.start : w.end].strip("'\"")
        if t in ("-m", "-c"):
            return None
        if not t.startswith("-"):
            return launchers.script_not_training(t) if t.endswith(".py") else None
    return None


def _names_script(text: str, words: list[Word], trains: Callable[[str], bool] | None) -> bool:
    """A `python …` command whose raw words name a `.py` file `trains` knows to train."""
    if trains is None:
        return False
    for w in words[1:]:
        t = text[w.start : w.end].strip("'\"")
        if t.endswith(".py") and trains(t):
            return True
    return False


def _known_trainer(launch: Launch, trains: Callable[[str], bool] | None) -> bool:
    """A plain `python [-i|-u|…] script.py …` (no flag need be known) of a script `trains` knows to train."""
    if trains is None or launch.tool != "python" or launch.script is None or not launch.script.text:
        return False
    return launch.script.text.endswith(".py") and trains(launch.script.text)


def _trains(launch: Launch) -> bool:
    """A plain `python script.py` counts when it passes training arguments or a config file (not as the value of a
    flag no training program defines)."""
    prev = None
    for a in launch.args[launch.script_args_start :]:
        t = a.text
        if t.startswith("--"):
            n = _norm(_flag_name(t))
            n = n[3:] if n.startswith("no_") else n
            if is_known_key(n) and n not in hf.MODEL_KEYS:
                return True
        elif t.lower().endswith(CONFIG_SUFFIXES) and not _value_of_unknown_flag(prev):
            return True
        prev = t
    return False


def parse_shell(text: str, ctx) -> TrainingPlan | None:
    """`formats.TEXT_PARSERS` entry for .sh/.bash files."""
    return parse_script(text, ctx, fmt="shell")


def parse_script(text: str, ctx, fmt: str = "shell", path: str | None = None) -> TrainingPlan | None:
    if len(text) > MAX_SHELL_CHARS:
        return None
    path = path or ctx.path
    from vramlens.formats import shell_source

    sourcing = shell_source.for_context(ctx, path)
    script, issues = analyze(text, path, trains=_workspace_trainer(ctx), sourcing=sourcing)
    from vramlens.formats import torchtitan

    if (titan := torchtitan.from_script(script, ctx, path)) is not None:  # a torchtitan launch: its TOML job config
        titan.issues.extend(issues)
        return titan
    if script.launch is None and script.purpose is not None:
        b = PlanBuilder(path, fmt, None)
        what, where = script.purpose
        b.plan.purpose = Sourced(value=what, origin=Origin.FILE, span=where)
        return b.plan
    if script.launch is None:
        return None
    b = PlanBuilder(path, fmt, None)
    b.plan.issues.extend(issues)
    if sourcing is not None:
        b.plan.read_notes.extend(sourcing.notes)
    # before the plan is built: a pinned framework release decides which of its releases the flags are read as
    b.plan.installs = {**getattr(ctx, "installs", {}), **script.installs}
    build_plan(b, script, ctx)
    b.plan.format = fmt
    if b.plan.model_id is None and sourcing is not None and sourcing.unread:
        # the model's flags may be in a file the script sources by a name only known when it runs (Megatron-LM
        # examples/post_training/modelopt/conf/arguments.sh `source "${SCRIPT_DIR}/conf/${MLM_MODEL_CFG}.sh"`)
        line, where, why = sourcing.unread[0]
        b.plan.issues.insert(
            0,
            ParseIssue(
                kind=IssueKind.NOT_READ,
                message=f"`model` is only known when the script runs: {line} is not read ({why}); it is not read",
                span=where,
                severity=Severity.INFO,
            ),
        )
    elif (
        b.plan.model_id is None
        and not any(f"arch.{k}" in b.plan.extra for k in ("num_layers", "n_layer", "hidden_size", "n_embd"))
        and (spliced := _unset_splices(script))
    ):
        # the launch line's flags come in a variable the script never sets (Megatron-LM sc21/SRUN.sh `python -u
        # pretrain_gpt.py ${MEGATRON_PARAMS}`, exported by SBATCH.sh, built in CONFIG.sh)
        names = ", ".join(f"`${{{n}}}`" for n, _ in spliced)
        b.plan.issues.insert(
            0,
            ParseIssue(
                kind=IssueKind.NOT_READ,
                message=f"`model` is only known when the script runs: the launch line takes its flags from {names}, "
                "which this script does not set (the script that runs it or the environment does); it is not read",
                span=spliced[0][1],
                severity=Severity.INFO,
            ),
        )
    return b.plan


def _unset_splices(script: ShellScript) -> list[tuple[str, Span]]:
    """The variables a launch line splices in as whole words after its script (`… pretrain_gpt.py ${PARAMS}`)
    that the script never sets: (name, where) each."""
    launch = script.launch
    if launch is None:
        return []
    out: list[tuple[str, Span]] = []
    args = launch.args[launch.script_args_start :] if launch.script is not None else []
    for k, a in enumerate(args):
        parts = a.word.parts if a.word is not None and a.value is None else []
        if len(parts) != 1 or parts[0][0] != VAR or parts[0][2] or parts[0][1] in script.env:
            continue
        if parts[0][1] in set("123456789@*"):
            continue  # the caller's own arguments (`"$@"`): extra flags, read as a run without them
        if k and args[k - 1].text.startswith("-") and "=" not in args[k - 1].text:
            continue  # the value of a flag (`--data-path ${DATA}`), not flags of its own
        if a.word is not None:
            out.append((parts[0][1], script.index.span(a.word.start, a.word.end)))
    return out


# A Python script that trains: it imports a trainer or training arguments (transformers `Trainer`,
# `TrainingArguments`, `Seq2SeqTrainer`; TRL's `SFTTrainer`/`GRPOConfig`…; accelerate-style loops call
# `.backward(`). Read as text, never run.
_TRAINER_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?:trl|transformers|peft|swift|llamafactory|openrlhf)\b[^\n]*\bimport\b[^\n]*"
    r"\b\w*(?:Trainer|TrainingArguments|Config)\b|from[ \t]+trl\b[^\n]*\bimport[ \t]*\([^)]*\b\w*(?:Trainer|Config)\b)"
    r"|\.backward\(",
    re.MULTILINE,
)


def _workspace_trainer(ctx) -> Callable[[str], bool] | None:
    """Whether a `.py` file a `python` command runs is, in the workspace, a script that trains (see
    _TRAINER_IMPORT); the file is looked up as the script a launch runs (`formats.references.read_launched`)."""
    if ctx is None or not getattr(ctx, "path", None):
        return None
    seen: dict[str, bool] = {}

    def trains(target: str) -> bool:
        if target not in seen:
            from vramlens.formats import references

            seen[target] = False
            if "$" not in target:
                text = references.read_launched(target, ctx).text
                seen[target] = bool(text and _TRAINER_IMPORT.search(text))
        return seen[target]

    return trains


def build_plan(b: PlanBuilder, script: ShellScript, ctx) -> None:
    launch = script.launch
    r = _Reader(script, b)
    tool = launch.tool
    if script.defaults:  # the defaults the launch line uses (`MODEL=… ;; $MODEL`)
        used = {p[1] for a in launch.args for p in a.word.parts if p[0] == VAR}
        b.plan.read_notes.extend(
            default_note(script.text, name, kept) for name, kept in script.defaults.items() if name in used
        )
    if script.branch_notes:  # the values the launch line uses that an `if` of unknown outcome sets
        used = {p[1] for a in launch.args for p in a.word.parts if p[0] == VAR}
        b.plan.read_notes.extend(note for name, note in script.branch_notes.items() if name in used)
    if tool == "verl":  # hydra `key=value` overrides (formats.verl), the allocator from the environment
        _env_settings(r, launch, script.env)
        return verl.apply_launch(b, r, script, ctx)
    framework = {
        "llamafactory": "llamafactory",
        "torchtune": "torchtune",
        "axolotl": "axolotl",
        "trl": "trl",
        "swift": "ms-swift",
        "openrlhf": "openrlhf",
    }.get(tool)
    if tool == "megatron":
        framework = megatron.framework(launch)
    from vramlens.formats import openinstruct

    oi_kind = openinstruct.script_kind(launch.script.text if launch.script else None)
    if oi_kind is not None:
        framework = openinstruct.FRAMEWORK
    config_refs: list[tuple[str, Arg, str]] = []  # (kind, arg, target)

    _launcher_settings(r, launch, script.env, config_refs)

    sa = collect_args(script)
    flags, overrides = sa.flags, sa.overrides
    if sa.truncated:
        b.issue(
            IssueKind.NOT_READ,
            f"the training command has more than {MAX_ARGS:,} arguments; only the first {MAX_ARGS:,} are read",
            severity=Severity.INFO,
        )
    config_refs.extend(("config", a, a.text) for a in sa.positional_configs)
    script.flag_args = flags

    settings: list[Setting] = []
    for name, flag, vals in flags:
        s = _flag_setting(r, name, flag, vals)
        if s is None:
            continue
        n = _norm(name)
        if tool == "openrlhf":  # OpenRLHF's dotted flags → the flags they replaced
            s.path = (launchers.openrlhf_flag(n),)
        if n in ("config", "config_file", "config_path") and s.unresolved and len(vals) == 1 and vals[0] is not flag:
            # `--config "$SCRIPT_DIR/x.yaml"` after `SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"`
            # (ms-swift examples/ray/grpo/run_colocate.sh): the script's own folder, as `source` lines find it
            if script.sourcing is not None and (
                found := script.sourcing.path_word(script.text, vals[0].word, script.env)
            ):
                s.value, s.unresolved = found, False
        if n in ("config", "config_file", "config_path") and isinstance(s.value, str):
            if tool == "torchtune":
                config_refs.append(("torchtune-config", vals[0] if vals else flag, s.value))
            else:
                config_refs.append(("config", vals[0] if vals else flag, s.value))
            continue
        settings.append(s)
    settings = _last_of_each(b, settings)

    if tool in ("axolotl", "llamafactory", "torchtune"):
        for s in settings:
            s.key = s.path[-1]  # the YAML spelling, which the dialect reads
        read = [s for s in (_override_setting(r, k, a, eq) for k, a, eq in overrides) if s is not None]
        # `key=value` overrides go to OmegaConf (LLaMA-Factory `read_args`: OmegaConf.from_cli; torchtune
        # `_merge_yaml_and_cli_args`: OmegaConf.from_dotlist), which also keeps a key's last value
        apply_dialect(b, framework, settings + _last_of_each(b, read, "OmegaConf keeps the last"), ctx, tool)
    else:
        for s in settings:
            if oi_kind is None or not openinstruct.apply_flag(b, s):
                _apply_flag(b, tool, s)
        if oi_kind is None:  # a workspace script read by its own argument definitions
            from vramlens.formats import script_arguments

            script_arguments.apply(b, launch, settings, ctx)
        if tool == "openrlhf":
            launchers.openrlhf_defaults(b, {_norm(name) for name, _, _ in flags}, launch.subcommand)
        elif tool == "swift":
            launchers.swift_finish(b, settings)
        elif tool == "megatron":
            megatron.finish(b, settings, launch)
        elif any(s.path[0] in launchers.PEFT_EXAMPLE_FLAGS for s in settings):
            launchers.peft_example_defaults(b)
    from vramlens.formats import objective

    objective.apply_launch(
        b,
        tool,
        launch.subcommand,
        launch.script.text if launch.script else None,
        [s for s in settings if not s.unresolved],
    )
    if launch.script is not None and (kind := launchers.swift_diffusion_script(launch.script.text)) is not None:
        from vramlens.formats import model_kind

        named = next((s for s in settings if s.path and s.path[0] in ("model", "model_id_or_path")), None)
        said = f"`--{named.path[0]} {named.value}`" if named is not None else f"`{launch.script.text}`"
        model_kind.set_other_kind(b, named, "a diffusion model", f"{said} trains {kind}")

    if framework is None:
        keys = {s.path[0] for s in settings}
        if tool in ("torchrun", "accelerate", "deepspeed", "python") and (
            keys & (hf.TRAINING_ARGUMENT_KEYS | hf.TRL_KEYS) or any(is_hf_key(k) for k in keys)
        ):
            framework = "trl" if hf.looks_like_trl(keys) else "transformers"
    b.plan.framework = framework

    _gpu_count(r, launch, script.env)
    if tool == "megatron":
        megatron.implied_world_size(b, settings)
    _env_settings(r, launch, script.env)
    if oi_kind is not None:
        openinstruct.apply_launch(b, oi_kind, settings)

    from vramlens.formats.references import follow_references

    follow_references(b, ctx)
    for kind, arg, target in config_refs:
        _follow_config(b, r, kind, arg, target, ctx)
    if b.plan.framework is None:
        b.plan.framework = "custom" if tool == "python" and not settings else "transformers"
    from vramlens.frameworks import recognise

    recognise.apply(
        b,
        settings,
        getattr(ctx, "workspace", None),
        tool=tool,
        at_most=_entry_release(launch),
        told=getattr(ctx, "releases", None),
    )
    if launch.script is not None and b.plan.model_id is None:
        from vramlens.formats import script_arguments

        script_arguments.explain_no_model(b, launch, r.wsp(launch.script.word), ctx)


@dataclass
class ScriptArgs:
    """The training script's own arguments (after the launcher's)."""

    flags: list[tuple[str, Arg, list[Arg]]]  # (name as written, flag word, value words)
    overrides: list[tuple[str, Arg, int]]  # `key=value` words (LLaMA-Factory, torchtune), `=` offset
    positional_configs: list[Arg]  # `cfg.yaml` given positionally
    last: Arg | None  # the last word of the script's arguments
    truncated: bool = False  # more than MAX_ARGS arguments: the rest were not read


def collect_args(script: ShellScript) -> ScriptArgs:
    launch = script.launch
    tool = launch.tool
    args = launch.args
    end = launch.script_args_end if launch.script_args_end is not None else len(args)
    i = launch.script_args_start
    out = ScriptArgs([], [], [], args[end - 1] if 0 < end <= len(args) else None)
    while i < end:
        if len(out.flags) + len(out.overrides) >= MAX_ARGS:
            out.truncated = True
            break
        a = args[i]
        t = a.text
        if t.startswith("--") and len(t) > 2:
            name = _flag_name(t)
            if "=" in t:
                out.flags.append((name, a, [a]))
                i += 1
                continue
            vals = []
            j = i + 1
            while j < end and not _looks_like_flag(args[j].text):
                if tool in ("llamafactory", "torchtune") and "=" in args[j].text:
                    break
                vals.append(args[j])
                j += 1
            out.flags.append((name, a, vals))
            i = j
            continue
        if tool in ("llamafactory", "torchtune") and "=" in t and not t.startswith("-"):
            out.overrides.append((t.split("=", 1)[0], a, raw_text(script.text, a.word).find("=")))
        elif a.value is not None and t.lower().endswith(CONFIG_SUFFIXES) and not t.startswith("-"):
            out.positional_configs.append(a)
        elif (
            a.value is None
            and script.sourcing is not None
            and raw_text(script.text, a.word).strip("'\"").lower().endswith(CONFIG_SUFFIXES)
            and (found := script.sourcing.path_word(script.text, a.word, script.env))
        ):
            out.positional_configs.append(Arg(a.word, found))  # `swift sft "$SCRIPT_DIR/sft.yaml"`
        i += 1
    return out


def _looks_like_flag(t: str) -> bool:
    if not t.startswith("-") or t == "-":
        return False
    return not re.fullmatch(r"-\d+(?:\.\d*)?(?:e-?\d+)?", t)


def _split_values(vals: list[Arg]) -> tuple[Any, bool]:
    """Flag values → a scalar or a list; unknown if any word is unknown."""
    if any(v.value is None for v in vals):
        return None, True
    if len(vals) == 1:
        return vals[0].value, False
    out = []
    for v in vals:
        out.extend(p.strip().strip("'\"") for p in v.value.split(","))
    return [p for p in out if p], False


def _flag_setting(r: _Reader, name: str, flag: Arg, vals: list[Arg]) -> Setting | None:
    text = r.text
    w = flag.word
    if vals and vals[0] is flag:  # --key=value in one word
        raw = raw_text(text, w)
        eq = raw.find("=")
        first = w.parts[0]
        if first[0] == LIT and not first[3] and "=" in first[1]:
            vspan = r.sp(w.start + eq + 1, w.end)
        else:  # "--key=value" quoted as a whole
            vspan = r.wsp(w)
        value = flag.text.split("=", 1)[1] if flag.value is not None else None
        return Setting(
            key=name,
            path=(_norm(name),),
            value=value,
            span=r.wsp(w),
            value_span=vspan,
            key_span=r.sp(w.start, w.start + eq),
            unresolved=flag.value is None,
        )
    key = name
    kspan = r.wsp(w)
    if not vals:
        return Setting(key=key, path=(_norm(key),), value=True, span=kspan, value_span=None, key_span=kspan)
    if len(vals) > 1 and _takes_one_value(name):
        # argparse gives a one-value option its next word; the words after it are left over, and the program stops
        # on them (HfArgumentParser: "Some specified arguments are not used")
        extra = " ".join(v.text for v in vals[1:])[:80]
        r.b.issue(
            IssueKind.INVALID_VALUE,
            f"`--{name}` takes one value: `{extra}` after it is not its value, and the program stops on words it "
            "does not take; the first is read",
            span=r.sp(vals[1].word.start, vals[-1].word.end) if vals[-1].word.end >= vals[1].word.start else kspan,
        )
        vals = vals[:1]
    value, unknown = _split_values(vals)
    # the span runs to the last value word that follows the one before it: words of an expanded array are placed
    # where the array is written, so values spliced from two expansions (`"${ARGS[@]}" ${ARGS[0]}`) may lie before
    # the flag
    last = vals[0].word
    for v in vals[1:]:
        if v.word.start < last.end:
            break
        last = v.word
    return Setting(
        key=key,
        path=(_norm(key),),
        value=value,
        span=r.sp(w.start, last.end) if last.end >= w.end else kspan,
        value_span=r.sp(vals[0].word.start, last.end),
        key_span=kspan,
        unresolved=unknown,
    )


def _unknown_issue(b: PlanBuilder, s: Setting, what: str = "") -> None:
    b.issue(
        IssueKind.NOT_READ,
        f"`{s.key}` is set from a value only known when the script runs"
        f"{' (' + what + ')' if what else ''}; it is not read, so the framework default is shown",
        s,
        severity=Severity.INFO,
    )


def _takes_one_value(name: str) -> bool:
    """Whether the plan concept an option sets is a single value (a number, a switch, a dtype, a model), which
    argparse gives one word."""
    from vramlens.frameworks import concepts

    c = concepts.match(_norm(name))
    return c is not None and c.type in ("int", "float", "bool", "dtype", "model")


def _last_of_each(b: PlanBuilder, settings: list[Setting], rule: str = "argparse keeps the last") -> list[Setting]:
    """One setting per flag, the last one written: argparse stores each occurrence over the one before (its "store"
    action; HfArgumentParser, Megatron-LM's, OpenRLHF's and ms-swift's parsers are argparse), so a flag repeated
    later on the line (an override appended to a script's arguments) is the one the run uses."""
    last = {s.path: s for s in settings}
    if len(last) == len(settings):
        return settings
    given = collections.Counter(s.path for s in settings)
    for path, s in last.items():
        if (n := given[path]) > 1:
            value = s.value if isinstance(s.value, str) else shown(s.value)
            b.plan.read_notes.append(f"`{s.key}` is given {n} times: {rule}, {value}")
    return [s for s in settings if last[s.path] is s]


def _apply_flag(b: PlanBuilder, tool: str, s: Setting) -> None:
    n = s.path[0]
    handler = handler_for(tool, n)
    if handler is None and n.startswith("no_") and is_known_key(n[3:]):
        n = n[3:]  # HfArgumentParser's `--no_X` for a True-default bool
        handler = handler_for(tool, n)
        v = to_bool(s.value)
        s.value = (not v) if v is not None else s.value
        s.path = (n,)
    if handler is None:
        if is_known_key(n) and not s.unresolved:
            b.remember(s)
        return
    if s.unresolved:
        return _unknown_issue(b, s)
    handler(b, s)


def _override_setting(r: _Reader, key: str, a: Arg, eq: int) -> Setting | None:
    """A `key=value` override; None when its value is YAML vramlens does not read (a VL015 says why)."""
    from vramlens.formats.yaml_doc import YamlError

    w = a.word
    value = a.text.split("=", 1)[1] if a.value is not None else None
    value_span = r.sp(w.start + eq + 1, w.end)
    if isinstance(value, str):
        try:
            value = _yaml_value(value)
        except YamlError as exc:
            r.b.issue(IssueKind.INVALID_VALUE, f"`{key}` is not read: {exc}", span=value_span)
            return None
    path = tuple(_norm(p) for p in key.lstrip("~").split("."))
    return Setting(
        key=key.split(".")[-1],
        path=path,
        value=value,
        span=r.wsp(w),
        value_span=value_span,
        key_span=r.sp(w.start, w.start + eq),
        unresolved=a.value is None,
    )


def _yaml_value(v: str) -> Any:
    """An override's value as the tool reads it: LLaMA-Factory (`read_args`, `OmegaConf.from_cli`) and torchtune
    (`_merge_yaml_and_cli_args`, `OmegaConf.from_dotlist`) hand `key=value` words to OmegaConf, which loads each
    value with its PyYAML SafeLoader subclass (omegaconf 2.4.0, `BaseContainer.merge_with_dotlist`), so a list or
    mapping is YAML flow text, aliases included. Read here with the bounded loader
    (`formats.yaml_doc.load_value`): raises YamlError when the value is not YAML or is over its bounds."""
    s = v.strip()
    if s[:1] in ("[", "{") or s.lower() in ("null", "~"):
        from vramlens.formats.yaml_doc import load_value

        return load_value(s)
    return v


def apply_dialect(b: PlanBuilder, name: str | None, settings: list[Setting], ctx, tool: str) -> None:
    """Command-line overrides of a YAML-configured tool go through that tool's YAML dialect."""
    from vramlens import formats

    known = [s for s in settings if not s.unresolved]
    for s in settings:
        if s.unresolved and (is_hf_key(s.path[-1]) or s.path[-1] in EXTRA_HANDLERS):
            _unknown_issue(b, s)
    dialect = next((d for d in formats.YAML_DIALECTS if d.name == name), None)
    if dialect is None:
        for s in known:
            if len(s.path) == 1:
                _apply_flag(b, tool, s)
        return
    data: dict = {}
    for s in known:
        node = data
        for p in s.path[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = node[p] = {}
            node = nxt
        node[s.path[-1]] = s.value
    fmt = b.plan.format
    dialect.apply(b, data, known, ctx)
    b.plan.format = fmt


def _launcher_settings(r: _Reader, launch: Launch, env: dict[str, Var], config_refs: list) -> None:
    b = r.b
    for name, flag, vals in launch.launcher_flags:
        s = _flag_setting(r, name, flag, vals)
        if s is None or s.unresolved:
            continue
        if name in ("config_file", "config") and isinstance(s.value, str):
            config_refs.append(
                (
                    "accelerate" if (launch.launcher or launch.tool) == "accelerate" else "config",
                    vals[0] if vals else flag,
                    s.value,
                )
            )
        elif name == "deepspeed_config_file" and isinstance(s.value, str):
            b.set("dist_strategy", "deepspeed", s)
            b.reference("deepspeed", s.value, s)
        elif name == "mixed_precision":
            _mixed_precision(b, s)
        elif name in ("use_deepspeed",):
            b.set("dist_strategy", "deepspeed", s)
        elif name == "zero_stage":
            b.set_int("zero_stage", s)
        elif name in ("use_fsdp",):
            b.set("dist_strategy", "fsdp", s)
        elif name == "offload_optimizer_device" and isinstance(s.value, str):
            b.set("offload_optimizer", s.value.lower() in ("cpu", "nvme"), s)
        elif name == "offload_param_device" and isinstance(s.value, str):
            b.set("offload_params", s.value.lower() in ("cpu", "nvme"), s)
        elif name == "gradient_accumulation_steps":
            b.set_int("grad_accum", s, minimum=1)


def _gpu_count(r: _Reader, launch: Launch, env: dict[str, Var]) -> None:
    b = r.b
    nproc: tuple[int, Setting] | None = None
    nnodes: int | None = None
    for name, flag, vals in launch.launcher_flags:
        if name in ("nproc_per_node", "num_gpus", "num_processes", "include", "nnodes", "num_nodes", "num_machines"):
            s = _flag_setting(r, name, flag, vals)
            if s is None or s.unresolved:
                if s is not None and name in ("nproc_per_node", "num_gpus", "num_processes"):
                    _unknown_issue(b, s)
                continue
            if name == "include":
                hosts = [h for h in str(s.value).split("@") if h]
                counts = [len([g for g in h.split(":", 1)[1].split(",") if g]) for h in hosts if ":" in h]
                if counts:
                    nproc = (counts[0], s)
                    if len(hosts) > 1:
                        nnodes = len(hosts)
                continue
            n = to_int(s.value)
            if n is None:
                continue
            if name in ("nnodes", "num_nodes", "num_machines"):
                nnodes = n
            elif name == "num_processes":
                nproc = (n, s)
            else:
                nproc = (n, s)
    if nproc is not None and (launch.launcher or launch.tool) == "accelerate" and nnodes and nnodes > 1:
        total, s = nproc
        b.set("world_size", total, s, note="accelerate `--num_processes` counts processes on all machines")
        b.set("gpu_count", max(1, total // nnodes), s, note=f"{total} processes on {nnodes} machines")
        return
    if nproc is None:
        for var_name in ("NPROC_PER_NODE",):
            var = env.get(var_name)
            if var is not None and var.value is not None and (var.exported or var_name in launch.env_prefix):
                n = to_int(var.value)
                if n:
                    nproc = (n, _var_setting(r, var_name, var))
        if nnodes is None:
            var = env.get("NNODES")
            if var is not None and var.value is not None:
                nnodes = to_int(var.value)
    if nproc is None:
        var = env.get("CUDA_VISIBLE_DEVICES")
        if var is not None and var.value is not None and (var.exported or "CUDA_VISIBLE_DEVICES" in launch.env_prefix):
            n = _cvd_count(var.value)
            if n:
                nproc = (n, _var_setting(r, "CUDA_VISIBLE_DEVICES", var))
        elif var is not None and var.value is None and var.word is not None:
            _unknown_issue(b, _var_setting(r, "CUDA_VISIBLE_DEVICES", var))
    if nproc is None:
        return
    n, s = nproc
    if launch.tool == "swift" and _swift_device_map(r, launch, env, n, s, nnodes):
        return
    b.set("gpu_count", n, s)
    if s.key == "CUDA_VISIBLE_DEVICES":
        if launch.tool == "swift" and launch.launcher in (None, "python") and n > 1:
            b.set("world_size", 1, s, note="ms-swift without NPROC_PER_NODE runs one process over the visible GPUs")
    elif nnodes and nnodes > 1:
        b.set("world_size", n * nnodes, s, note=f"{n} GPUs per node × {nnodes} nodes", origin=Origin.DERIVED)
    else:
        b.set("world_size", n, s)  # the command line's process count wins over a config file's


def _swift_device_map(r: _Reader, launch: Launch, env: dict[str, Var], n: int, s: Setting, nnodes: int | None) -> bool:
    """ms-swift with more visible GPUs than processes per node loads the model with `device_map='auto'` over each
    process's GPUs (naive model parallelism; with several processes, "MP + DDP"): `is_mp()` is
    `device_count // local_world_size >= 2` (swift/utils/torch_utils.py at v2.4.0, swift/utils/env.py at v3.5.0 and
    v4.0.0), and `get_default_device_map` then returns 'auto' (v2.4.0 swift/llm/sft.py, v3.5.0
    swift/llm/model/register.py, v4.0.0 swift/model/utils.py). Sets the GPU count (all visible GPUs), the processes and
    the GPUs per process; False when each process has one GPU."""
    var = env.get("CUDA_VISIBLE_DEVICES")
    if var is None or var.value is None or not (var.exported or "CUDA_VISIBLE_DEVICES" in launch.env_prefix):
        return False
    visible = _cvd_count(var.value) or 0
    if s.key == "CUDA_VISIBLE_DEVICES":
        if launch.launcher not in (None, "python"):
            return False
        procs = 1  # `swift sft` / `python llm_sft.py` without NPROC_PER_NODE: one process
    else:
        procs = n
    if procs < 1 or visible % procs or visible // procs < 2:
        return False
    b, cvd, per = r.b, _var_setting(r, "CUDA_VISIBLE_DEVICES", var), visible // procs
    b.set("gpu_count", visible, cvd)
    nodes = nnodes if nnodes and nnodes > 1 else 1
    runs = "one process" if procs == 1 else f"{procs} processes (NPROC_PER_NODE)"
    b.set("world_size", procs * nodes, s, note=f"ms-swift runs {runs} per node over the visible GPUs")
    b.set(
        "devices_per_process",
        per,
        cvd,
        note=f"CUDA_VISIBLE_DEVICES={var.value} with {runs}: ms-swift spreads the model over {per} GPUs per process "
        "(device_map)",
    )
    return True


def _var_setting(r: _Reader, name: str, var: Var) -> Setting:
    w = var.word
    stmt = var.stmt_range or (w.start, w.end)
    vr = var.value_range or (w.start, w.end)
    return Setting(
        key=name,
        path=(name,),
        value=var.value,
        span=r.sp(*stmt),
        value_span=r.sp(*vr),
        key_span=r.sp(w.start, w.start + len(name)),
        unresolved=var.value is None,
    )


ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF")


# ms-swift reads its image budget from the environment too (swift/utils/env.py `get_env_args`: the upper-cased argument
# name; `MAX_PIXELS=1003520 swift sft …` in its README): `MAX_PIXELS`, and `IMAGE_MAX_TOKEN_NUM` (image tokens after the
# 2 × 2 merge) for the processors of qwen-vl-utils ≥ 0.0.14. Kept under these names; the resolver takes the
# tightest cap. `CELOSS_PARALLEL_SIZE`: the chunk of its sequence-parallel cross-entropy (v4.0.0
# swift/trainers/utils.py `per_token_loss_func_sp`).
SWIFT_ENV_VARS = ("MAX_PIXELS", "IMAGE_MAX_TOKEN_NUM", "CELOSS_PARALLEL_SIZE")


def _env_settings(r: _Reader, launch: Launch, env: dict[str, Var]) -> None:
    b = r.b
    for name in SWIFT_ENV_VARS if launch.tool == "swift" else ():
        var = env.get(name)
        if (
            var is not None
            and var.word is not None
            and var.value is not None
            and (var.exported or name in launch.env_prefix)
        ):
            b.remember(_var_setting(r, name, var))
    for name in ALLOC_VARS:
        var = env.get(name)
        if var is None or var.word is None or not (var.exported or name in launch.env_prefix):
            continue
        s = _var_setting(r, name, var)
        if var.value is None:
            _unknown_issue(b, s)
            continue
        b.set("alloc_conf", var.value, s)
        break


def _follow_config(b: PlanBuilder, r: _Reader, kind: str, arg: Arg, target: str, ctx) -> None:
    """Read a config file named on the command line and merge it under the command-line values."""
    from vramlens import file_access, formats
    from vramlens.formats import references

    span = r.wsp(arg.word)
    ref = Reference(kind=kind, target=target, span=span)
    b.plan.references.append(ref)
    looks_like_file = target.lower().endswith(CONFIG_SUFFIXES)
    found, refused = references.find(target, ctx.path, ctx.workspace)
    if found is None and refused:
        b.issue(
            IssueKind.REFERENCE,
            file_access.refusal("config file", target, ctx.workspace),
            span=span,
            severity=Severity.WARNING,
        )
        return
    if found is None:
        if kind == "torchtune-config" and not looks_like_file:
            b.issue(
                IssueKind.NOT_READ,
                f"`{target}` names a config packaged with torchtune; it is not read here, so only the "
                "command-line values count",
                span=span,
                severity=Severity.INFO,
            )
            return
        b.issue(
            IssueKind.REFERENCE,
            f"config file `{target}` not found (looked next to this file"
            f"{' and in the workspace root' if ctx.workspace else ''})",
            span=span,
            severity=Severity.ERROR,
        )
        return
    ref.resolved_path = str(found)
    if getattr(ctx, "depth", 0) >= references.MAX_DEPTH:
        return
    text = references._read(found, ctx)
    if text is None:
        return
    result = formats.parse_document(
        text, str(found), workspace=ctx.workspace, read_file=ctx.read_file, releases=getattr(ctx, "releases", None)
    )
    for issue in result.issues:
        b.plan.issues.append(
            ParseIssue(kind=issue.kind, message=f"in `{target}`: {issue.message}", span=span, severity=issue.severity)
        )
    sub = result.plan
    if sub is None:
        if not result.issues:
            b.issue(
                IssueKind.REFERENCE,
                f"`{target}` is not a training config vramlens can read",
                span=span,
                severity=Severity.INFO,
            )
        return
    merge_under(b.plan, sub, take_framework=kind in ("config", "torchtune-config"))
    if kind == "accelerate":
        accelerate.take_checkpointing(b.plan, sub)


def merge_under(plan: TrainingPlan, sub: TrainingPlan, take_framework: bool = True) -> None:
    """Copy `sub`'s values into `plan` where `plan` has none (`plan` wins, as the command line does) or only a
    default its reader filled in (`swift rlhf` → dpo, Megatron-SWIFT's global batch 16), which gives way to a value
    the config states: the config's keys are arguments too (ms-swift swift/utils/utils.py `parse_args`, v3.5.0 …
    v4.5.2)."""
    for name, value in sub.settings().items():
        mine = getattr(plan, name)
        if mine is None or (mine.origin == Origin.DEFAULT and value.origin == Origin.FILE):
            setattr(plan, name, value)
    if plan.model_span_hint is None:
        plan.model_span_hint = sub.model_span_hint
    plan.references.extend(sub.references)
    plan.issues.extend(sub.issues)
    for k, v in sub.extra.items():
        plan.extra.setdefault(k, v)
    if take_framework and sub.framework and (plan.framework in (None, "transformers")):
        plan.framework = sub.framework
