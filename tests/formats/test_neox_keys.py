"""The GPT-NeoX key table (formats.neox.KEYS) is the one place its keys are spelled: a fix writes each concept
where the parser reads it (in the file's `-` or `_` spelling), and the JSON Schema is generated from the table."""
from __future__ import annotations

import pytest
import yaml

from vramlens.formats import deepspeed, neox, parse_document
from vramlens.formats.render import apply_edits, render_change
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


def _path(concept: str) -> tuple[str, ...]:
    return deepspeed.key_for(concept).path if concept == "zero_stage" else neox.key_for(concept).path


@pytest.mark.parametrize("text, sep", [(NEOX, "_"), (HYPHENS, "-")], ids=["underscores", "hyphens"])
@pytest.mark.parametrize("concept, value", CHANGES)
def test_a_fix_writes_each_concept_where_the_parser_reads_it(tmp_path, text, sep, concept, value):
    path = str(tmp_path / "neox.yml")
    plan = parse_document(text, path).plan
    assert plan is not None and plan.format == "gpt-neox", plan and plan.format
    assert getattr(plan, concept).value != value
    result = render_change(text, plan, {concept: value})
    written_text = apply_edits(text, result.edits, path)
    node = yaml.safe_load(written_text)
    keys = _path(concept)
    top = keys[0] if concept == "zero_stage" else keys[0].replace("_", sep)
    node = node[top]
    for part in keys[1:]:
        node = node[part]
    assert node == value, written_text
    again = parse_document(written_text, path).plan
    assert getattr(again, concept).value == value, written_text


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
