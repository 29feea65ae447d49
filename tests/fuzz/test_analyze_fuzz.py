"""The whole pipeline and the rules (`analysis.analyze`) on broken real configs: no internal error, every
finding inside the document, and every offered fix applies as text."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bounds import Doc, spans
from fuzzing import count, fuzz_settings, hang_guard
from seeds import documents

from vramlens.analysis import Settings, analyze
from vramlens.formats import parse_document
from vramlens.text import apply_edits

settings_strategy = st.builds(
    Settings,
    gpu=st.sampled_from([None, None, "A100-40GB", "8xH100", "T4", "RTX 4090", "MI300X", "no-such-gpu", ""]),
    gpu_count=st.sampled_from([None, 1, 8, 65536]),
    headroom=st.sampled_from([0.0, 0.1, 0.5, 0.9]),
    severity=st.sampled_from([{}, {"VL001": "off"}, {"VL004": "hint", "VL015": "error"}]),
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "ds.json").write_text('{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    return ws


def check(text: str, path: str, analysis) -> None:
    assert analysis.error is None or "internal error" not in analysis.error, analysis.error
    internal = [f.message for f in analysis.findings if "internal error" in f.message]
    assert not internal, internal
    doc = Doc(text)
    for finding in analysis.findings:
        for span in spans([finding.span, *finding.related]):
            if span.file in ("", path):
                assert doc.span_problem(span) is None, (finding.rule_id, span, doc.span_problem(span))
    for finding in analysis.findings[:4]:
        for fix in finding.fixes:
            for span in spans([e.span for e in fix.edits]):
                if span.file in ("", path):
                    assert doc.span_problem(span) is None, (fix.title, span, doc.span_problem(span))
            fixed = apply_edits(text, [e for e in fix.edits if e.span.file in ("", path)])
            assert isinstance(fixed, str)
            parse_document(fixed, path)            # the fixed text is still something the parsers take


@fuzz_settings(3500)
@given(doc=documents(max_mutations=3), settings=settings_strategy)
def test_analyze_mutated_configs(workspace: Path, doc, settings: Settings):
    name, text = doc
    path = str(workspace / name)
    settings = settings.model_copy(update={"workspace": workspace})      # Settings are immutable
    with hang_guard(name):
        analysis = analyze(text, path, settings)
        check(text, path, analysis)
    count("analyze")
