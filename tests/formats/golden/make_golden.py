"""Regenerate corpus_plans.jsonl: what the parser reads from every shared-corpus config.

    python tests/formats/golden/make_golden.py

Run it after an intended parser change, then read the diff line by line against the corpus files:
the golden table is only worth something if every value in it has been checked by eye.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parents[2] / ".." / "shared" / "corpus"


def record(path: Path) -> dict:
    from vramlens.formats import parse_document
    from vramlens.rules.registry import owner_of

    text = path.read_text(encoding="utf-8", errors="replace")
    result = parse_document(text, str(path))
    rel = path.relative_to(CORPUS).as_posix()
    plan = result.plan
    if plan is None:
        return {"file": rel, "format": None}
    settings = {}
    for name, s in plan.settings().items():
        where = s.value_span or s.span
        entry = {"value": s.value, "key": s.key, "origin": s.origin.value}
        if where is not None:
            entry["line"] = where.start_line + 1
            if Path(where.file) != path:
                entry["in"] = Path(where.file).name if not where.file.startswith("preset:") else where.file
        settings[name] = entry
    return {
        "file": rel,
        "format": plan.format,
        "framework": plan.framework,
        "settings": settings,
        "references": [
            {"kind": r.kind, "target": r.target, "found": r.resolved_path is not None} for r in plan.references
        ],
        "issues": sorted({f"{owner_of(i.kind).id}:{i.severity.value}" for i in plan.issues}),
    }


def corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))


def main() -> int:
    out = HERE / "corpus_plans.jsonl"
    lines = [json.dumps(record(p), sort_keys=True) for p in corpus_files()]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out}: {len(lines)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
