"""Parsers on broken real configs: no exception, no hang, every span inside the document it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from bounds import Doc, spans
from fuzzing import count, fuzz_settings, hang_guard
from hypothesis import given
from hypothesis import strategies as st
from seeds import documents, multi_documents, override_commands, seeds
from vramlens.formats import parse_document
from vramlens.formats.yaml_doc import MAX_DOCUMENTS_CHARS, MAX_YAML_DOCUMENTS, split_documents


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A workspace with files the seeds refer to (a DeepSpeed JSON, an accelerate config) and one symlink
    that leads out of it."""
    ws = tmp_path_factory.mktemp("ws")
    (ws / "ds.json").write_text('{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}')
    (ws / "accelerate.yaml").write_text("distributed_type: FSDP\nnum_processes: 8\nmixed_precision: bf16\n")
    outside = tmp_path_factory.mktemp("outside") / "secret.json"
    outside.write_text('{"zero_optimization": {"stage": 2}}')
    (ws / "link.json").symlink_to(outside)
    return ws


def check_plan(text: str, path: str, result) -> None:
    doc = Doc(text)
    things = list(result.issues)
    if result.plan is not None:
        things.append(result.plan)
    for span in spans(things):
        if span.file not in ("", path):
            continue  # points into a referenced file
        problem = doc.span_problem(span)
        assert problem is None, f"{span}: {problem}"


def test_every_seed_parses(workspace: Path):
    """The unmutated seeds themselves (every corpus file) parse, with spans inside the document."""
    assert len(seeds()) > 100
    for seed in seeds():
        path = str(workspace / seed.name)
        with hang_guard(seed.name):
            result = parse_document(seed.text, path, workspace=workspace)
        check_plan(seed.text, path, result)
    count("parse", len(seeds()))


@fuzz_settings(10500)
@given(doc=documents())
def test_mutated_configs_parse(workspace: Path, doc):
    name, text = doc
    path = str(workspace / name)
    with hang_guard(name):
        result = parse_document(text, path, workspace=workspace)
    check_plan(text, path, result)
    count("parse")


@fuzz_settings(2500)
@given(name=st.sampled_from(["x.yaml", "x.json", "x.py", "x.sh", "x.md", "x"]), text=st.text(max_size=400))
def test_random_text_parses(workspace: Path, name: str, text: str):
    path = str(workspace / name)
    with hang_guard(name):
        result = parse_document(text, path, workspace=workspace)
    check_plan(text, path, result)
    count("parse")


@fuzz_settings(600)
@given(doc=override_commands())
def test_yaml_and_json_values_on_a_command_line_parse(workspace: Path, doc):
    """`key=value` overrides (LLaMA-Factory, torchtune) and JSON arguments: alias chains, deep nestings, odd scalars,
    quoted or escaped. A value the bounded loader refuses is a VL015 naming its setting."""
    name, text = doc
    path = str(workspace / name)
    with hang_guard(name):
        result = parse_document(text, path, workspace=workspace)
    check_plan(text, path, result)
    issues = list(result.issues) + (list(result.plan.issues) if result.plan is not None else [])
    for issue in issues:
        if " is not read: " in issue.message:
            assert issue.message.startswith("`"), issue.message  # names the setting
    count("parse command-line values")


@fuzz_settings(300)
@given(doc=multi_documents())
def test_multi_document_files_split_within_the_budgets_and_parse(workspace: Path, doc):
    """A YAML stream of many documents: at most MAX_YAML_DOCUMENTS views, MAX_DOCUMENTS_CHARS in all, each at the
    file's own line numbers; the first document left out is placed inside the file; each view parses."""
    name, text = doc
    path = str(workspace / name)
    with hang_guard(name):
        docs = split_documents(text)
        if docs is None:
            return
        assert 1 <= len(docs.views) <= MAX_YAML_DOCUMENTS
        assert len(docs.views) == 1 or sum(len(v) for v in docs.views) <= MAX_DOCUMENTS_CHARS
        lines = text.split("\n")
        for view in docs.views:
            assert view.count("\n") == len(lines) - 1  # every line where it is in the file
            check_plan(view, path, parse_document(view, path, workspace=workspace))
        if docs.skipped:
            span = docs.skipped_span
            assert 0 <= span.start_line < len(lines) and span.end_col <= len(lines[span.start_line])
            assert str(len(docs.views) + 1) in docs.skipped_message()
    count("parse documents")
