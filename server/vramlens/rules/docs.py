"""Each rule's documentation page: `rules/docs/VL001.md` in the repository, installed with the rule set
(`vramlens_rules/docs/`), written from the rule's own fields (title, severity, fixes, `why`) by
`python scripts/rule_docs.py`. The LSP diagnostic's `codeDescription.href` and SARIF's `helpUri` are the
page's `file://` URI: the project declares no web address, and a local page opens without a network.
"""

from __future__ import annotations

from pathlib import Path

from vramlens.fixes import FIX_IDS
from vramlens.rules.model import Rule
from vramlens.rules.registry import all_rules, rules_package_dir


def docs_dir() -> Path:
    """The folder of the rule pages, beside the rule modules (installed or in a source checkout)."""
    return rules_package_dir() / "docs"


def page_path(rule: Rule) -> Path:
    return docs_dir() / f"{rule.id}.md"


def page_uri(rule: Rule) -> str:
    """The `file://` URI of the rule's page."""
    return page_path(rule).as_uri()


def page(rule: Rule) -> str:
    """The Markdown page of one rule."""
    lines = [
        f"# {rule.id} `{rule.name}`: {rule.title}",
        "",
        f"Default severity: **{rule.severity}**. Switch it off or change it with the `vramlens.severity` "
        f"setting (`{rule.id}=off`), `--severity {rule.id}=off` on the command line, or "
        f"`# vramlens: ignore[{rule.id}]` on the line.",
        "",
        rule.why.strip(),
        "",
    ]
    if rule.fixes:
        lines += ["## Fixes", ""] + [f"- `{fix}`: {FIX_IDS[fix]}" for fix in rule.fixes] + [""]
    return "\n".join(lines)


def write_pages(folder: Path | None = None) -> list[Path]:
    """Write every rule's page (the generator behind `scripts/rule_docs.py`)."""
    folder = folder or docs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for rule in all_rules():
        path = folder / f"{rule.id}.md"
        path.write_text(page(rule), encoding="utf-8")
        written.append(path)
    return written
