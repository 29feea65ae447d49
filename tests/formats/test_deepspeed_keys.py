"""The DeepSpeed key table (formats.deepspeed.KEYS) is the one place its keys are spelled: a fix writes each
concept where the parser reads it, and the JSON Schema lists the table's top-level keys."""

from __future__ import annotations

import pytest
from key_tables import value_a_fix_writes
from vramlens.formats import deepspeed
from vramlens.formats.schemas import schema_for

DS = '{\n  "train_micro_batch_size_per_gpu": 2,\n  "zero_optimization": {"stage": 1}\n}\n'
CHANGES = [
    ("micro_batch", 4),
    ("grad_accum", 8),
    ("global_batch", 64),
    ("zero_stage", 3),
    ("offload_optimizer", True),
    ("offload_params", True),
]


@pytest.mark.parametrize("concept, value", CHANGES)
def test_a_fix_writes_each_concept_where_the_parser_reads_it(tmp_path, concept, value):
    written = value_a_fix_writes(
        DS, str(tmp_path / "ds_config.json"), "deepspeed", concept, value, deepspeed.key_for(concept).path
    )
    assert written == ("cpu" if value is True else value)


def test_the_schema_lists_the_tables_top_level_keys():
    properties = schema_for("deepspeed")["properties"]
    assert list(properties) == list(deepspeed.SECTIONS)
    for key in deepspeed.KEYS:
        assert key.path[0] in properties, key.path
    assert properties["train_micro_batch_size_per_gpu"]["anyOf"][0]["type"] == "integer"
