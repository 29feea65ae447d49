"""The whole pipeline and the rules (`analysis.analyze`) on broken real configs, and on configs beside broken pin
files and project settings: no internal error, every finding inside the document, and every offered fix applies
as text."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from bounds import Doc, spans
from fuzzing import count, fuzz_settings, hang_guard
from hypothesis import given
from hypothesis import strategies as st
from project_files import project_files
from seeds import documents
from vramlens.analysis import Settings, analyze
from vramlens.formats import parse_document
from vramlens.settings import merge
from vramlens.text import apply_edits
from vramlens.workspace_config import find_workspace_config

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
            parse_document(fixed, path)  # the fixed text is still something the parsers take


@fuzz_settings(3500)
@given(doc=documents(max_mutations=3), settings=settings_strategy)
def test_analyze_mutated_configs(workspace: Path, doc, settings: Settings):
    name, text = doc
    path = str(workspace / name)
    settings = settings.model_copy(update={"workspace": workspace})  # Settings are immutable
    with hang_guard(name):
        analysis = analyze(text, path, settings)
        check(text, path, analysis)
    count("analyze")


@fuzz_settings(400)
@given(files=project_files(), doc=documents(max_mutations=1))
def test_analyze_beside_broken_pin_and_project_files(files, doc):
    """Pin files and project settings of any shape (wrong types, nesting thousands of levels deep, random text)
    beside a config: read as the editor and the command line read them, then the config analysed."""
    name, text = doc
    with tempfile.TemporaryDirectory() as folder, hang_guard(name):
        ws = Path(folder)  # a new folder each time: nothing read before is cached for it
        for file, content in files:
            (ws / file).write_bytes(content.encode("utf-8", "surrogatepass"))
        path = str(ws / name)
        project = find_workspace_config(Path(path), ws)
        settings = merge([project.values if project is not None else {}], workspace=ws)
        analysis = analyze(text, path, settings)
        check(text, path, analysis)
    count("analyze beside pin and project files")
