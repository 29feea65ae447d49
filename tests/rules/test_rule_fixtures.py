"""Every rule against its fixture folder `tests/rules/fixtures/VL0xx/`: `triggers.*` is a config with the
rule's problem, `clean.*` the same config without it; where the rule offers a fix, applying it to
`triggers.*` makes the finding go away, and `fixed.*` (when present) is the exact text the fix writes.
`case.json` may give analysis settings (`"settings"`) and packages to treat as not installed (`"without"`).
Every file of the folder is copied beside the config, so a referenced file is found exactly when the
folder has it. A rule without a fixture folder fails here.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from vramlens.analysis import Analysis, Settings, analyze
from vramlens.formats.render import apply_edits
from vramlens.rules import all_rules

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RULE_IDS = [rule.id for rule in all_rules()]
WITH_FIX = [rule.id for rule in all_rules() if rule.fixes]


def _config(rule_id: str, stem: str) -> Path | None:
    found = sorted((FIXTURES / rule_id).glob(f"{stem}.*"))
    return found[0] if found else None


def _analyse(rule_id: str, stem: str, tmp_path: Path, monkeypatch, text: str | None = None) -> Analysis:
    folder = FIXTURES / rule_id
    case = json.loads((folder / "case.json").read_text(encoding="utf-8")) if (folder / "case.json").is_file() else {}
    for package in case.get("without", ()):
        monkeypatch.setitem(sys.modules, package, None)  # an environment without the package
    for f in folder.iterdir():
        if f.is_file() and f.name != "case.json":
            shutil.copy(f, tmp_path / f.name)
    source = _config(rule_id, stem)
    assert source is not None, f"{folder} has no {stem}.* config"
    path = tmp_path / source.name
    if text is not None:
        path.write_text(text, encoding="utf-8")
    return analyze(
        path.read_text(encoding="utf-8"), str(path), Settings(**case.get("settings", {}), workspace=tmp_path)
    )


def _of(analysis: Analysis, rule_id: str) -> list:
    return [f for f in analysis.findings if f.rule_id == rule_id]


def test_every_rule_has_a_fixture_folder_and_no_folder_is_stray():
    folders = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    assert folders == RULE_IDS


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_the_rule_fires_on_its_triggering_config(rule_id, tmp_path, monkeypatch):
    analysis = _analyse(rule_id, "triggers", tmp_path, monkeypatch)
    assert _of(analysis, rule_id), [(f.rule_id, f.message) for f in analysis.findings]


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_the_rule_is_silent_on_its_clean_config(rule_id, tmp_path, monkeypatch):
    analysis = _analyse(rule_id, "clean", tmp_path, monkeypatch)
    assert analysis.plan is not None, analysis.error
    assert not _of(analysis, rule_id), [f.message for f in _of(analysis, rule_id)]


@pytest.mark.parametrize("rule_id", WITH_FIX)
def test_the_rules_fix_removes_the_finding(rule_id, tmp_path, monkeypatch):
    analysis = _analyse(rule_id, "triggers", tmp_path, monkeypatch)
    (finding, *_) = _of(analysis, rule_id)
    with_edits = [fix for fix in finding.fixes if fix.edits]
    assert with_edits, f"{rule_id} offers no fix with edits here: {[(x.title, x.note) for x in finding.fixes]}"
    fix = next((x for x in with_edits if x.preferred), with_edits[0])
    text = Path(analysis.path).read_text(encoding="utf-8")
    fixed = apply_edits(text, fix.edits, analysis.path)
    expected = _config(rule_id, "fixed")
    if expected is not None:
        assert fixed == expected.read_text(encoding="utf-8"), fix.title
    after = _analyse(rule_id, "triggers", tmp_path, monkeypatch, text=fixed)
    assert after.plan is not None and not _of(after, rule_id), (fix.title, [f.message for f in _of(after, rule_id)])
