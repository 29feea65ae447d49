"""What the key-table tests share: a fix that sets one concept, written into the file, read back by the parser."""

from __future__ import annotations

from typing import Any

import yaml
from vramlens.formats import parse_document
from vramlens.formats.render import apply_edits, render_change


def value_a_fix_writes(text: str, path: str, fmt: str, concept: str, value: Any, keys: tuple[str, ...]) -> Any:
    """Apply the fix that sets `concept` to `value` to `text` (a `fmt` file at `path`), check that the parser reads
    `value` back from the written file, and return what the written file holds at `keys`."""
    plan = parse_document(text, path).plan
    assert plan is not None and plan.format == fmt, plan and plan.format
    before = getattr(plan, concept)
    assert before is None or before.value != value, "the change must change something"
    written = apply_edits(text, render_change(text, plan, {concept: value}).edits, path)
    again = parse_document(written, path).plan
    assert getattr(again, concept).value == value, written
    node = yaml.safe_load(written)  # JSON is YAML
    for part in keys:
        assert isinstance(node, dict) and part in node, (keys, written)
        node = node[part]
    return node
