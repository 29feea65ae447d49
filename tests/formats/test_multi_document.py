"""YAML files of several `---` documents: each document is read alone and its findings stay on its own lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vramlens.analysis import Settings, analyze

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "yaml"


def test_each_document_is_analysed_and_findings_land_in_their_document():
    path = FIXTURES / "two_runs.yaml"
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    second = lines.index("---") + 1
    a = analyze(text, str(path), Settings())
    assert len(a.documents) == 2
    first, other = a.documents
    assert first.plan.model_id.value == "Qwen/Qwen2.5-0.5B" and first.estimate.fits
    assert other.plan.model_id.value == "meta-llama/Llama-3.1-8B" and not other.estimate.fits
    oom = [f for f in a.findings if f.rule_id == "VL001"]
    assert oom and all(f.span.start_line >= second for f in oom)  # on the second document, not the first
    assert not any(f.rule_id == "VL016" for f in a.findings)
    assert other.resolution.resolved.gpu.name.startswith("A100")  # the file's directive applies to both
    assert a.estimate is first.estimate


def test_documents_that_are_not_training_configs_are_passed_over():
    path = FIXTURES / "with_other_documents.yaml"
    a = analyze(path.read_text(encoding="utf-8"), str(path), Settings())
    assert a.plan is not None and a.plan.model_id.value == "meta-llama/Llama-3.1-8B"
    assert a.plan.micro_batch.span.start_line == 7
    assert not any(f.rule_id == "VL016" for f in a.findings)


def test_estimate_cli_prints_one_estimate_per_document():
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(FIXTURES / "two_runs.yaml"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [d["file"].rsplit(" ", 2)[-2:] for d in data] == [["(document", "1)"], ["(document", "2)"]]
    assert [d["model"]["id"] for d in data] == ["Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.1-8B"]


def test_check_prints_an_estimate_per_document():
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", str(FIXTURES / "two_runs.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "two_runs.yaml (document 1): peak" in out.stdout and "two_runs.yaml (document 2): peak" in out.stdout
    assert out.returncode == 1  # the second document does not fit


def test_check_json_lists_each_document_estimate():
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", str(FIXTURES / "two_runs.yaml"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    entry = json.loads(out.stdout)["files"][0]
    assert [d["model"]["id"] for d in entry["documents"]] == ["Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.1-8B"]
