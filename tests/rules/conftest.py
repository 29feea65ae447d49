"""Helpers for rule tests: write a config into tmp_path and analyse it as the editor and `check` would."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from vramlens.analysis import Analysis, Settings, analyze


class Analyser:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path

    def __call__(self, text: str, name: str = "train.yaml", **settings) -> Analysis:
        path = self.tmp_path / name
        text = textwrap.dedent(text).lstrip("\n")
        path.write_text(text, encoding="utf-8")
        settings.setdefault("workspace", self.tmp_path)
        return analyze(text, str(path), Settings(**settings))

    # helpers the tests use through the fixture (test modules do not import each other)
    @staticmethod
    def ids(analysis: Analysis) -> list[str]:
        return rule_ids(analysis)

    @staticmethod
    def only(analysis: Analysis, rule_id: str):
        return only(analysis, rule_id)

    @staticmethod
    def line_of(analysis: Analysis, needle: str) -> int:
        return line_of(analysis, needle)


@pytest.fixture
def run(tmp_path) -> Analyser:
    return Analyser(tmp_path)


def rule_ids(analysis: Analysis) -> list[str]:
    return [f.rule_id for f in analysis.findings]


def only(analysis: Analysis, rule_id: str):
    found = [f for f in analysis.findings if f.rule_id == rule_id]
    assert len(found) == 1, f"expected one {rule_id}, got {[(f.rule_id, f.message) for f in analysis.findings]}"
    return found[0]


def line_of(analysis: Analysis, needle: str) -> int:
    """0-based line of the first line of the analysed file that contains `needle`."""
    text = Path(analysis.path).read_text(encoding="utf-8")
    for i, line in enumerate(text.splitlines()):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {analysis.path}")
