"""The DeepSpeed key table (formats.deepspeed.KEYS) is the one place its keys are spelled: a fix writes each
concept where the parser reads it, and the JSON Schema lists the table's top-level keys."""
from __future__ import annotations

import json

import pytest

from vramlens.formats import deepspeed, parse_document
from vramlens.formats.render import apply_edits, render_change
from vramlens.formats.schemas import schema_for

DS = '{\n  "train_micro_batch_size_per_gpu": 2,\n  "zero_optimization": {"stage": 1}\n}\n'
CHANGES = [("micro_batch", 4), ("grad_accum", 8), ("global_batch", 64), ("zero_stage", 3),
           ("offload_optimizer", True), ("offload_params", True)]


@pytest.mark.parametrize("concept, value", CHANGES)
def test_a_fix_writes_each_concept_where_the_parser_reads_it(tmp_path, concept, value):
    path = str(tmp_path / "ds_config.json")
    plan = parse_document(DS, path).plan
    assert plan is not None and plan.format == "deepspeed"
    result = render_change(DS, plan, {concept: value})
    text = apply_edits(DS, result.edits, path)
    node = json.loads(text)
    for part in deepspeed.key_for(concept).path[:-1]:
        node = node[part]
    written = node[deepspeed.key_for(concept).path[-1]]
    assert written == ("cpu" if value is True else value), text
    again = parse_document(text, path).plan
    assert getattr(again, concept).value == value, text


def test_the_schema_lists_the_tables_top_level_keys():
    properties = schema_for("deepspeed")["properties"]
    assert list(properties) == list(deepspeed.SECTIONS)
    for key in deepspeed.KEYS:
        assert key.path[0] in properties, key.path
    assert properties["train_micro_batch_size_per_gpu"]["anyOf"][0]["type"] == "integer"
