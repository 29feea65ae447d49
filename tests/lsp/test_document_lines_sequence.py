"""An open document's `lines` (vramlens.lsp.documents replaces pygls' tuple of `str.splitlines(True)`) behave as the
sequence of lines they stand for: `index`, `count`, `in`, slices and reversal as on a tuple of the same lines."""

from __future__ import annotations

import pytest
import vramlens.lsp.documents  # noqa: F401  (installs the replacement of TextDocument.lines)
from pygls.workspace import TextDocument
from vramlens.text import LineIndex

TEXTS = [
    "model: a\nlr: 1\nmodel: a\n",
    "a\r\nb\rc\nb\r",  # every line break editors know, a line repeated
    "x\fy\n\n\nz",  # a form feed is not a line break for LSP; blank lines; no final break
    "only",
    "",
]


def _editor_lines(text: str) -> tuple[str, ...]:
    """The lines with their breaks as an editor (LSP) splits them: at \\n, \\r\\n and \\r only."""
    out, start, i = [], 0, 0
    while i < len(text):
        if text[i] == "\r" and text[i + 1 : i + 2] == "\n":
            out.append(text[start : i + 2])
            start = i = i + 2
            continue
        if text[i] in "\r\n":
            out.append(text[start : i + 1])
            start = i + 1
        i += 1
    if start < len(text):
        out.append(text[start:])
    return tuple(out)


@pytest.mark.parametrize("text", TEXTS)
def test_document_lines_are_a_sequence_of_lines(text):
    lines = TextDocument("file:///w/train.yaml", text).lines
    expected = _editor_lines(text)
    assert tuple(lines) == expected
    assert len(lines) == len(expected)
    assert lines[::-1] == list(expected[::-1])
    assert list(reversed(lines)) == list(expected[::-1])
    for line in set(expected):
        assert line in lines
        assert lines.index(line) == expected.index(line)
        assert lines.count(line) == expected.count(line)
    with pytest.raises(ValueError):
        lines.index("not a line of the text\n")


def test_lines_with_breaks_index_from_a_position():
    lines = LineIndex("a\nb\na\nb\n").with_breaks()
    assert lines.index("b\n") == 1
    assert lines.index("b\n", 2) == 3
    assert lines.index("a\n", 1, 3) == 2
