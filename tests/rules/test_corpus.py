"""Every real config of the shared corpus goes through the whole analysis without an internal error, and every
finding, related location and fix edit lies inside the document it is reported on."""

from __future__ import annotations

import logging

import pytest
from shared_data import CORPUS, need
from vramlens.analysis import Settings, analyze
from vramlens.text import LineIndex

FILES = sorted(
    p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json", ".md", ".sh", ".py")
)


def _inside(span, idx: LineIndex) -> bool:
    """The span lies in the text, lines and columns counted as editors count them (`vramlens.text`)."""
    if (span.start_line, span.start_col) > (span.end_line, span.end_col):
        return False
    return all(
        0 <= line < len(idx) and 0 <= col <= len(idx.line(line))
        for line, col in ((span.start_line, span.start_col), (span.end_line, span.end_col))
    )


def test_the_corpus_is_there():
    need(CORPUS)
    assert len(FILES) > 100, CORPUS


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_analysis_of_corpus_file(path, caplog):
    text = path.read_text(encoding="utf-8", errors="replace")
    idx = LineIndex(text)
    with caplog.at_level(logging.ERROR, logger="vramlens"):
        a = analyze(text, str(path), Settings(workspace=CORPUS.parent, gpu="A100-40GB"))
        fixes = [fix for f in a.findings for fix in f.fixes]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    for f in a.findings:
        assert "internal error" not in f.message and "could not run" not in f.message, f.message
        assert f.span.file == str(path)
        assert _inside(f.span, idx), (f.rule_id, f.span)
        for rel in f.related:
            if rel.span.file == str(path):
                assert _inside(rel.span, idx), (f.rule_id, rel)
    for fix in fixes:
        for edit in fix.edits:
            assert edit.span.file in ("", str(path)) and _inside(edit.span, idx), (fix.title, edit)
