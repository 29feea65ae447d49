"""Each rule's documentation page is in the repository (rules/docs/), says what the rule module says, and is
what diagnostics link to."""

from __future__ import annotations

from pathlib import Path

from vramlens.rules import all_rules
from vramlens.rules.docs import docs_dir, page, page_path, page_uri

ROOT = Path(__file__).resolve().parents[2]


def test_every_rule_has_its_page_in_the_repository_matching_the_rule_module():
    for rule in all_rules():
        path = ROOT / "rules" / "docs" / f"{rule.id}.md"
        assert path.is_file(), f"{path} is missing: run python scripts/rule_docs.py"
        assert path.read_text(encoding="utf-8") == page(rule), f"{path} is stale: run python scripts/rule_docs.py"


def test_no_page_without_a_rule():
    pages = sorted(p.stem for p in (ROOT / "rules" / "docs").glob("*.md"))
    assert pages == [rule.id for rule in all_rules()]


def test_the_link_is_a_file_uri_of_the_page():
    for rule in all_rules():
        assert page_path(rule).parent == docs_dir()
        assert page_uri(rule) == page_path(rule).as_uri() and page_path(rule).is_file()
        text = page_path(rule).read_text(encoding="utf-8")
        assert text.startswith(f"# {rule.id} `{rule.name}`: {rule.title}")
        assert rule.why.strip() in text
