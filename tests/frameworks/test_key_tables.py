"""The frameworks' key tables against the concept registry and the fixes: every concept a fix changes has a writer,
or an explicit "cannot be set here", in every format read from a key table; every key carries a registered concept;
every top-level key has a property in the format's JSON Schema."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from vramlens.formats import schemas
from vramlens.frameworks import concepts
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.axolotl import keys as axolotl
from vramlens.frameworks.llamafactory import keys as llamafactory
from vramlens.frameworks.torchtune import keys as torchtune
from vramlens.frameworks.transformers import keys as transformers
from vramlens.plan import PLAN_CONCEPTS

ROOT = Path(__file__).resolve().parents[2]
FIX_CODE = [
    ROOT / "server" / "vramlens" / "fixes.py",
    ROOT / "server" / "vramlens" / "fixes_objective.py",
    *sorted((ROOT / "rules").glob("vl*.py")),
]
TABLES = {
    "axolotl": axolotl.KEYS,
    "llamafactory": llamafactory.KEYS,
    "llamafactory-v1": llamafactory.KEYS_V1,
    "torchtune": torchtune.KEYS,
    "hf": transformers.KEYS,
    "trl": transformers.KEYS_TRL,
}


def fix_concepts() -> set[str]:
    """The plan concepts the fixes change: the concept keys of the change dicts in the fix code, and the concepts a
    rule lists for its fix (`_CONCEPTS = (("amp_dtype", ...), ...)`)."""
    found: set[str] = set()
    for path in FIX_CODE:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                found |= {k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in PLAN_CONCEPTS}
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_CONCEPTS" for t in node.targets):
                for item in getattr(node.value, "elts", []):
                    first = item.elts[0] if isinstance(item, ast.Tuple) and item.elts else item
                    if isinstance(first, ast.Constant) and first.value in PLAN_CONCEPTS:
                        found.add(first.value)
    return found


def unwritten(table: key_table.Table, wanted: set[str]) -> set[str]:
    """The concepts of `wanted` that `table` neither writes nor declares it cannot write."""
    return wanted - set(key_table.writers(table))


def test_the_fix_code_is_read():
    found = fix_concepts()
    # one concept of each way a fix names what it changes: a fixer candidate, an objective fix, a rule's set-value
    assert {"grad_checkpointing", "num_generations", "eval_batch", "amp_dtype"} <= found, found


@pytest.mark.parametrize("fmt", sorted(TABLES))
def test_every_fix_concept_has_a_writer_or_a_reason(fmt):
    assert not unwritten(TABLES[fmt], fix_concepts()), fmt


def test_a_table_with_a_missing_writer_is_caught():
    table = tuple(
        dataclasses.replace(e, write=False) if isinstance(e, key_table.Key) and e.concept == "micro_batch" else e
        for e in axolotl.KEYS
    )
    assert unwritten(table, fix_concepts()) == {"micro_batch"}


@pytest.mark.parametrize("fmt", sorted(TABLES))
def test_every_concept_is_in_the_registry(fmt):
    named = {e.concept for e in TABLES[fmt] if e.concept is not None}
    assert named <= set(concepts.CONCEPTS), named - set(concepts.CONCEPTS)


@pytest.mark.parametrize("fmt", sorted(TABLES))
def test_the_schema_describes_every_top_level_key(fmt):
    props = schemas.schema_for(fmt)["properties"]
    top = [k for k in key_table.keys(TABLES[fmt]) if len(k.path) == 1]
    assert top and all(k.path[0] in props and props[k.path[0]]["description"] == k.description for k in top), fmt


@pytest.mark.parametrize("fmt", sorted(TABLES))
def test_a_key_is_spelled_once_and_a_concept_written_once(fmt):
    dispatch = key_table.by_name(TABLES[fmt])  # raises on a name in the table twice
    assert dispatch
    assert key_table.writers(TABLES[fmt])  # raises on a concept with two writers
    with pytest.raises(ValueError):
        key_table.by_name(TABLES[fmt] + (next(iter(dispatch.values())),))
