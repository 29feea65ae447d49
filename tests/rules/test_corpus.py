"""Every real config of the shared corpus goes through the whole analysis without an internal error, and every
finding, related location and fix edit lies inside the document it is reported on."""
from __future__ import annotations

import logging

import pytest

from shared_data import CORPUS, need
from vramlens.analysis import Settings, analyze

FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json", ".md", ".sh",
                                                                               ".py"))


def _inside(span, lines: list[str]) -> bool:
    if span.start_line > span.end_line or (span.start_line == span.end_line and span.start_col > span.end_col):
        return False
    if not lines:
        return span.start_line == span.end_line == 0 and span.start_col == span.end_col == 0
    for line, col in ((span.start_line, span.start_col), (span.end_line, span.end_col)):
        if line < 0 or col < 0:
            return False
        if line > len(lines) or (line < len(lines) and col > len(lines[line])) or (line == len(lines) and col):
            return False
    return True


def test_the_corpus_is_there():
    need(CORPUS)
    assert len(FILES) > 100, CORPUS


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_analysis_of_corpus_file(path, caplog):
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    with caplog.at_level(logging.ERROR, logger="vramlens"):
        a = analyze(text, str(path), Settings(workspace=CORPUS.parent, gpu="A100-40GB"))
        fixes = [fix for f in a.findings for fix in f.fixes]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    for f in a.findings:
        assert "internal error" not in f.message and "could not run" not in f.message, f.message
        assert f.span.file == str(path)
        assert _inside(f.span, lines), (f.rule_id, f.span)
        for rel in f.related:
            if rel.span.file == str(path):
                assert _inside(rel.span, lines), (f.rule_id, rel)
    for fix in fixes:
        for edit in fix.edits:
            assert edit.span.file in ("", str(path)) and _inside(edit.span, lines), (fix.title, edit)
