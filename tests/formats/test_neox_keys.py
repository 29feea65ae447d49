"""The GPT-NeoX key table (formats.neox.KEYS) is the one place its keys are spelled: a fix writes each concept
where the parser reads it (in the file's `-` or `_` spelling), and the JSON Schema is generated from the table."""

from __future__ import annotations

import pytest
from key_tables import value_a_fix_writes
from vramlens.formats import deepspeed, neox, parse_document
from vramlens.formats.schemas import schema_for

NEOX = """{
  "pipe_parallel_size": 1,
  "model_parallel_size": 1,
  "num_layers": 24,
  "hidden_size": 2048,
  "num_attention_heads": 16,
  "seq_length": 2048,
  "max_position_embeddings": 2048,
  "pos_emb": "rotary",
  "norm": "layernorm",
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "checkpoint_activations": false,
  "zero_optimization": {"stage": 1},
  "precision": "fp16",
}
"""
HYPHENS = NEOX.replace("_", "-").replace('"zero-optimization"', '"zero_optimization"')
CHANGES = [("micro_batch", 2), ("grad_accum", 8), ("grad_checkpointing", True), ("seq_len", 1024), ("zero_stage", 3)]


@pytest.mark.parametrize("text, sep", [(NEOX, "_"), (HYPHENS, "-")], ids=["underscores", "hyphens"])
@pytest.mark.parametrize("concept, value", CHANGES)
def test_a_fix_writes_each_concept_where_the_parser_reads_it(tmp_path, text, sep, concept, value):
    keys = (
        deepspeed.key_for(concept).path
        if concept == "zero_stage"
        else tuple(k.replace("_", sep) for k in neox.key_for(concept).path)
    )
    assert value_a_fix_writes(text, str(tmp_path / "neox.yml"), "gpt-neox", concept, value, keys) == value


def test_the_schema_is_the_table():
    properties = schema_for("gpt-neox")["properties"]
    assert list(properties) == [key.path[0] for key in neox.KEYS]
    for key in neox.KEYS:
        assert properties[key.path[0]]["description"] == key.description
    assert "bfloat16" in str(properties["precision"])
    assert properties["pipe_parallel_size"]["anyOf"][0] == {"minimum": 0, "type": "integer"}


def test_the_model_shape_is_kept_from_the_table():
    plan = parse_document(NEOX, "neox.yml").plan
    for key in neox.KEYS:
        if key.kind == "shape" and f'"{key.path[0]}"' in NEOX:
            assert plan.extra[f"arch.{key.path[0]}"].value is not None, key.path
    assert plan.extra["arch.num_layers"].value == 24
