"""The litgpt key table (formats.litgpt.KEYS) is the one place its keys are spelled: a fix writes each concept
where the parser reads it, and the JSON Schema is generated from the table."""

from __future__ import annotations

import pytest
from key_tables import value_a_fix_writes
from vramlens.formats import litgpt
from vramlens.formats.schemas import schema_for

CONFIG = """checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf
out_dir: out/finetune/lora
precision: bf16-true
devices: 1
num_nodes: 1
lora_r: 8
lora_alpha: 16
lora_dropout: 0.05
lora_query: true
lora_key: false
lora_value: true
lora_projection: false
lora_mlp: false
lora_head: false
train:
  save_interval: 200
  log_interval: 1
  global_batch_size: 16
  micro_batch_size: 1
  max_seq_length: 512
"""
# concept, value set, what the file holds at the key afterwards
CHANGES = [
    ("micro_batch", 2, 2),
    ("seq_len", 1024, 1024),
    ("lora_r", 32, 32),
    ("lora_alpha", 64.0, 64),
    ("lora_dropout", 0.1, 0.1),
    ("quant_bits", 4, "bnb.nf4"),
]


@pytest.mark.parametrize("concept, value, written", CHANGES)
def test_a_fix_writes_each_concept_where_the_parser_reads_it(tmp_path, concept, value, written):
    assert (
        value_a_fix_writes(CONFIG, str(tmp_path / "lora.yaml"), "litgpt", concept, value, litgpt.key_for(concept).path)
        == written
    )


def test_the_schema_is_the_tables_top_level_keys():
    properties = schema_for("litgpt")["properties"]
    top = [key for key in litgpt.KEYS if len(key.path) == 1]
    assert list(properties) == [key.path[0] for key in top]
    for key in top:
        assert properties[key.path[0]]["description"] == key.description
    assert "bnb.nf4" in str(properties["quantize"]) and "bf16-true" in str(properties["precision"])
    assert properties["lora_r"]["anyOf"][0] == {"minimum": 1, "type": "integer"}
