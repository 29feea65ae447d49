"""vramlens.text: the one place lines, offsets, LSP positions and edits are decided — checked against what an
editor does (LSP's line breaks and UTF-16 positions, clamping past the end of a line)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from vramlens.formats.render import TextEdit
from vramlens.plan import Span
from vramlens.text import LineIndex, apply_edits, apply_lsp_edits, code_units, line_ending, text_lines

# text with every kind of line break and characters outside the BMP (two UTF-16 units each)
TEXTS = st.lists(st.sampled_from(list("ab: \t") + ["\n", "\r\n", "\r", "é", "😀", "\x0c", "\u2028"]), max_size=40).map(
    "".join
)


def edit(sl: int, sc: int, el: int, ec: int, new: str, file: str = "") -> TextEdit:
    return TextEdit(span=Span(file=file, start_line=sl, start_col=sc, end_line=el, end_col=ec), new_text=new)


def test_a_column_past_the_end_of_its_line_never_eats_the_line_break():
    """The rule `check --fix` and the tests disagreed on: the end of the line, as LSP says."""
    text = "a: 1\r\nbb: 22\nc: 3"
    assert apply_edits(text, [edit(0, 3, 0, 99, "9")]) == "a: 9\r\nbb: 22\nc: 3"
    assert apply_edits(text, [edit(1, 4, 1, 40, "7")]) == "a: 1\r\nbb: 7\nc: 3"
    assert apply_edits(text, [edit(9, 0, 9, 0, "\nd: 4")]) == text + "\nd: 4"  # past the last line: the end


def test_edits_go_only_to_the_file_they_name():
    text = "x: 1\n"
    edits = [edit(0, 3, 0, 4, "2", "/w/train.yaml"), edit(0, 3, 0, 4, "16", "/w/ds.json")]
    assert apply_edits(text, edits, "/w/train.yaml") == "x: 2\n"
    assert apply_edits(text, edits, "/w/other.yaml") == text


def test_lines_break_where_editors_break_them():
    text = "a\x0cb\r\nc\rd\u2028e\n"
    assert text_lines(text) == ["a\x0cb", "c", "d\u2028e"]
    idx = LineIndex(text)
    assert len(idx) == 4 and idx.line(3) == ""  # a final break starts an empty last line
    assert list(idx.with_breaks()) == ["a\x0cb\r\n", "c\r", "d\u2028e\n"]
    assert line_ending(text) == "\r\n" and line_ending("no break") == "\n"


def test_utf16_positions():
    idx = LineIndex("x😀y = 1\n")
    assert idx.position(0, 2) == (0, 3)  # after the emoji: 1 + 2 UTF-16 units
    assert idx.position(0, 2, "utf-8") == (0, 5)
    assert idx.column(0, 3) == 2 and idx.column(0, 99) == len("x😀y = 1")
    assert apply_lsp_edits("x😀y\n", [((0, 3), (0, 4), "Z")]) == "x😀Z\n"


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.data())
def test_offsets_positions_and_back(text: str, data):
    idx = LineIndex(text)
    offset = data.draw(st.integers(0, len(text)))
    if text[offset - 1 : offset + 1] == "\r\n":  # inside a CRLF there is no position
        offset -= 1
    line, col = idx.pos(offset)
    assert idx.offset(line, col) == offset
    lsp_line, units = idx.position(line, col)
    assert units == code_units(idx.line(line)[:col])
    assert idx.offset_at(lsp_line, units) == offset


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.data())
def test_span_edits_and_lsp_edits_agree(text: str, data):
    """The same edit, given as a span (code points) or as an LSP range (UTF-16), gives the same text."""
    idx = LineIndex(text)
    a, b = sorted(data.draw(st.integers(0, len(text))) for _ in range(2))
    if text[a - 1 : a + 1] == "\r\n":
        a -= 1
    if text[b - 1 : b + 1] == "\r\n":
        b -= 1
    (sl, sc), (el, ec) = idx.pos(a), idx.pos(b)
    new = data.draw(st.sampled_from(["", "z", "\n", "😀"]))
    by_span = apply_edits(text, [edit(sl, sc, el, ec, new)])
    assert by_span == text[:a] + new + text[b:]
    assert apply_lsp_edits(text, [(idx.position(sl, sc), idx.position(el, ec), new)], strict=True) == by_span
