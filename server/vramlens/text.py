"""Lines, offsets and positions of a text, and applying edits to it: the one module that decides them.

Every part of vramlens that turns text into lines, a (line, column) into an offset, a span into an LSP position,
or applies edits uses this module, so the parser, the fixer, the CLI's `--fix`, the language server and the tests
count the same way:

- Lines break at "\\n", "\\r\\n" and a lone "\\r", as editors do and as LSP defines them ("Text Documents",
  LSP 3.17: https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#textDocuments).
  `str.splitlines` also breaks at \\v, \\f, \\x1c-\\x1e, \\x85, U+2028 and U+2029, which would shift every later line.
  A text that ends with a line break has an empty last line (a position may sit there).
- Spans (`plan.Span`) count columns in code points, as Python indexes strings; LSP positions count code units of
  the negotiated position encoding: UTF-16 unless the client offered UTF-8 or UTF-32 ("Position", LSP 3.17).
- One clamping rule, LSP's: a column past the end of its line means the end of that line (before its break);
  a line past the last line means the end of the text. An edit therefore never eats a line break it did not name.
"""

from __future__ import annotations

import bisect
import re
from array import array
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol, Sequence

if TYPE_CHECKING:
    from vramlens.plan import Span

LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ODD_BREAKS = re.compile("[\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def text_lines(text: str, keepends: bool = False) -> list[str]:
    """The lines spans count: `text.splitlines(keepends)`, but breaking only at \\n, \\r\\n and \\r (no empty last
    line after a final break, as `splitlines`)."""
    if not _ODD_BREAKS.search(text):
        return text.splitlines(keepends)
    lines = _LINE.findall(text)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


def iter_text_lines(text: str) -> Iterator[str]:
    """`text_lines(text)` one line at a time (a 10 MB file need not become half a million strings to find its
    first line)."""
    start = 0
    for m in LINE_BREAK.finditer(text):
        yield text[start : m.start()]
        start = m.end()
    if start < len(text):
        yield text[start:]


def line_ending(text: str) -> str:
    """The text's line break: its first one ("\\n" when it has none)."""
    m = LINE_BREAK.search(text)
    return m.group() if m else "\n"


def with_line_ending(new_text: str, eol: str) -> str:
    """`new_text` with each of its line breaks written as `eol` (text inserted into a CRLF file stays CRLF)."""
    if eol == "\n" and "\r" not in new_text:
        return new_text
    return LINE_BREAK.sub(eol, new_text)


# -- code units ------------------------------------------------------------------------------------


def code_units(s: str, encoding: str = UTF16) -> int:
    """The length of `s` in code units of an LSP position encoding."""
    if encoding == UTF32:
        return len(s)
    if encoding == UTF8:
        return len(s.encode("utf-8", "surrogatepass"))
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def column_of_units(line: str, units: int, encoding: str = UTF16, strict: bool = False) -> int:
    """The code-point column `units` code units into `line` (no line break). Past the end: the end of the line
    (`strict`: ValueError). Inside a character (half a surrogate pair): the next character (`strict`: ValueError)."""
    if units < 0:
        raise ValueError(f"negative column {units}")
    if encoding == UTF32 or line.isascii():
        if units > len(line) and strict:
            raise ValueError(f"column {units} past the end of the line (length {len(line)})")
        return min(units, len(line))
    count = 0
    for i, ch in enumerate(line):
        if count >= units:
            if count > units and strict:
                raise ValueError(f"column {units} splits a character")
            return i
        count += code_units(ch, encoding)
    if count != units and strict:
        raise ValueError(f"column {units} past the end of the line or inside its last character")
    return len(line)


# -- lines of one text -----------------------------------------------------------------------------


class LineIndex:
    """(line, column) ↔ offset for one text, and LSP positions. Lines are numbered from `first_line` (a Markdown
    code block starts mid-file); columns count code points. Spans it makes name `file`."""

    __slots__ = ("text", "file", "first", "starts")

    def __init__(self, text: str, file: str = "", first_line: int = 0):
        self.text = text
        self.file = file
        self.first = first_line
        starts = array("q", [0])
        starts.extend(m.end() for m in LINE_BREAK.finditer(text))
        self.starts = starts

    def __len__(self) -> int:
        """How many lines LSP counts (a final line break starts an empty last line)."""
        return len(self.starts)

    def _end(self, i: int) -> int:
        """Offset of the end of line i (0-based in this text), before its line break."""
        if i + 1 >= len(self.starts):
            return len(self.text)
        end = self.starts[i + 1]
        return end - 2 if self.text.startswith("\r\n", end - 2) else end - 1

    def line(self, line: int) -> str:
        """The text of a line without its break ("" past the last line)."""
        i = line - self.first
        if not 0 <= i < len(self.starts):
            return ""
        return self.text[self.starts[i] : self._end(i)]

    def line_start(self, line: int) -> int:
        return self.starts[line - self.first]

    def pos(self, offset: int) -> tuple[int, int]:
        """The (line, column) of an offset."""
        i = bisect.bisect_right(self.starts, offset) - 1
        return i + self.first, offset - self.starts[i]

    def span(self, start: int, end: int) -> "Span":
        from vramlens.plan import Span

        a, b = self.pos(start)
        c, d = self.pos(end)
        return Span(file=self.file, start_line=a, start_col=b, end_line=c, end_col=d)

    def offset(self, line: int, col: int) -> int:
        """The offset of (line, column), clamped as the module docstring says."""
        i = line - self.first
        if i < 0:
            return 0
        if i >= len(self.starts):
            return len(self.text)
        return min(self.starts[i] + max(col, 0), self._end(i))

    # -- LSP positions ------------------------------------------------------------------------------

    def position(self, line: int, col: int, encoding: str = UTF16) -> tuple[int, int]:
        """(line, code units) of a code-point (line, column), clamped: past the last line is the end of the text."""
        i = line - self.first
        if i >= len(self.starts):
            i = len(self.starts) - 1
            col = self._end(i) - self.starts[i]
        text = self.line(i + self.first)
        return i + self.first, code_units(text[: max(0, min(col, len(text)))], encoding)

    def column(self, line: int, units: int, encoding: str = UTF16, strict: bool = False) -> int:
        """The code-point column of an LSP position's `character` on `line`."""
        return column_of_units(self.line(line), units, encoding, strict)

    def offset_at(self, line: int, units: int, encoding: str = UTF16, strict: bool = False) -> int:
        """The offset of an LSP position; `strict` raises ValueError for a position outside the text instead of
        clamping it."""
        i = line - self.first
        if strict and not 0 <= i < len(self.starts):
            raise ValueError(f"line {line} is not in the text ({len(self.starts)} lines)")
        if i >= len(self.starts):
            return len(self.text)
        return self.offset(line, self.column(line, units, encoding, strict))

    def with_breaks(self) -> "LinesWithBreaks":
        """The lines as `str.splitlines(True)` lists them (pygls' `TextDocument.lines`), sliced on demand."""
        return LinesWithBreaks(self)


class LinesWithBreaks(Sequence[str]):
    """A text's lines, each with its break, without an empty last line after a final break."""

    __slots__ = ("_index", "n")

    def __init__(self, index: LineIndex):
        self._index = index  # not `index`: that would hide `Sequence.index(value)`
        n = len(index.starts)
        self.n = n - 1 if n > 1 and index.starts[-1] == len(index.text) else n
        if n == 1 and not index.text:
            self.n = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        starts, text = self._index.starts, self._index.text
        return text[starts[i] : starts[i + 1] if i + 1 < len(starts) else len(text)]


# -- applying edits --------------------------------------------------------------------------------


class SpanEdit(Protocol):
    span: "Span"
    new_text: str


def apply_offset_edits(text: str, edits: Iterable[tuple[int, int, str]]) -> str:
    """Replace [start, end) offsets with new text; edits apply in order of their start (edits at the same
    offset in the order given). ValueError when two overlap."""
    ordered = sorted(((a, b, i, new) for i, (a, b, new) in enumerate(edits)), key=lambda t: (t[0], t[2]))
    out, pos = [], 0
    for a, b, _, new in ordered:
        if a < pos or b < a:
            raise ValueError(f"overlapping or reversed edits at offset {a}")
        out.append(text[pos:a])
        out.append(new)
        pos = b
    out.append(text[pos:])
    return "".join(out)


def apply_edits(text: str, edits: Iterable[SpanEdit], file: str | None = None) -> str:
    """The text after the span edits (`formats.render.TextEdit`) that belong to `file` (all of them when None);
    ValueError when two overlap."""
    chosen = [e for e in edits if file is None or e.span.file == file]
    if not chosen:
        return text
    idx = LineIndex(text)
    return apply_offset_edits(
        text,
        [
            (idx.offset(e.span.start_line, e.span.start_col), idx.offset(e.span.end_line, e.span.end_col), e.new_text)
            for e in chosen
        ],
    )


def apply_lsp_edits(
    text: str,
    edits: Iterable[tuple[tuple[int, int], tuple[int, int], str]],
    encoding: str = UTF16,
    strict: bool = False,
) -> str:
    """Apply LSP text edits, given as ((line, character), (line, character), new_text), the way an editor does;
    `strict` raises ValueError for a position outside the text or inside a character instead of clamping."""
    idx = LineIndex(text)
    return apply_offset_edits(
        text,
        [
            (
                idx.offset_at(*start, encoding=encoding, strict=strict),
                idx.offset_at(*end, encoding=encoding, strict=strict),
                new,
            )
            for start, end, new in edits
        ],
    )
