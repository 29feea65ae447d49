"""Is a span or an LSP range inside a document?

Parser spans count code points on lines split at "\\n" (a "\\r\\n" or lone "\\r" ends a line too, as in LSP);
LSP ranges count in the client's position encoding (UTF-16 here). A position may sit at the very end of a
line (column = line length) and, when the text ends with a line break, at column 0 of the empty last line.
"""

from __future__ import annotations

from typing import Any, Iterator

from pydantic import BaseModel
from vramlens.text import LINE_BREAK, code_units
from vramlens.text import apply_lsp_edits as _apply


def lsp_lines(text: str) -> list[str]:
    """The lines an LSP client sees (line breaks: \\n, \\r\\n, \\r), without their breaks."""
    return LINE_BREAK.split(text)


def utf16_len(s: str) -> int:
    return code_units(s)


class Doc:
    """One document's lines, for position checks in code points and UTF-16 units."""

    def __init__(self, text: str):
        self.text = text
        self.lines = lsp_lines(text)
        self._u16: dict[int, int] = {}

    def line_len(self, line: int, utf16: bool) -> int:
        if not utf16:
            return len(self.lines[line])
        if line not in self._u16:
            self._u16[line] = utf16_len(self.lines[line])
        return self._u16[line]

    def position_problem(self, line: int, col: int, utf16: bool) -> str | None:
        if line < 0 or col < 0:
            return f"negative position {line}:{col}"
        if line >= len(self.lines):
            return f"line {line} past the last line ({len(self.lines) - 1})"
        n = self.line_len(line, utf16)
        if col > n:
            return f"column {col} past the end of line {line} (length {n})"
        return None

    def range_problem(self, start: tuple[int, int], end: tuple[int, int], utf16: bool) -> str | None:
        for pos in (start, end):
            if (p := self.position_problem(pos[0], pos[1], utf16)) is not None:
                return p
        if start > end:
            return f"range starts after it ends ({start} > {end})"
        return None

    def span_problem(self, span: Any) -> str | None:
        return self.range_problem((span.start_line, span.start_col), (span.end_line, span.end_col), utf16=False)

    def lsp_range_problem(self, rng: dict) -> str | None:
        s, e = rng["start"], rng["end"]
        return self.range_problem((s["line"], s["character"]), (e["line"], e["character"]), utf16=True)


def spans(obj: Any, _depth: int = 0) -> Iterator[Any]:
    """Every `vramlens.plan.Span` inside a plan, issue list, finding or fix (pydantic models, dataclasses,
    lists, dicts)."""
    from vramlens.plan import Span

    if _depth > 12 or obj is None or isinstance(obj, (str, int, float, bool)):
        return
    if isinstance(obj, Span):
        yield obj
        return
    if isinstance(obj, BaseModel):
        for name in type(obj).model_fields:
            yield from spans(getattr(obj, name), _depth + 1)
        return
    if isinstance(obj, dict):
        for v in obj.values():
            yield from spans(v, _depth + 1)
        return
    if isinstance(obj, (list, tuple)):
        for v in obj:
            yield from spans(v, _depth + 1)
        return
    fields = getattr(obj, "__dataclass_fields__", None)
    if fields:
        for name in fields:
            if name in ("fix_source",):
                continue
            yield from spans(getattr(obj, name, None), _depth + 1)


def apply_lsp_edits(text: str, edits: list[dict]) -> str:
    """Apply LSP TextEdits (UTF-16 ranges) the way an editor does; raises ValueError on overlap, a range
    outside the document or a position inside a surrogate pair."""
    return _apply(
        text,
        [
            (
                (e["range"]["start"]["line"], e["range"]["start"]["character"]),
                (e["range"]["end"]["line"], e["range"]["end"]["character"]),
                e["newText"],
            )
            for e in edits
        ],
        strict=True,
    )
