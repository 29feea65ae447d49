"""The accelerate key table (formats.accelerate.KEYS) is the one place its keys are spelled: a fix writes each
concept where the parser reads it, and the JSON Schema describes the keys from it."""

from __future__ import annotations

import pytest
from key_tables import value_a_fix_writes
from vramlens.formats import accelerate
from vramlens.formats.schemas import schema_for

CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  gradient_accumulation_steps: 1
  offload_optimizer_device: none
  offload_param_device: none
  zero_stage: 2
machine_rank: 0
main_training_function: main
mixed_precision: fp16
num_machines: 1
num_processes: 2
"""
CHANGES = [
    ("world_size", 8),
    ("amp_dtype", "bf16"),
    ("zero_stage", 3),
    ("offload_optimizer", True),
    ("offload_params", True),
    ("grad_accum", 4),
]


@pytest.mark.parametrize("concept, value", CHANGES)
def test_a_fix_writes_each_concept_where_the_parser_reads_it(tmp_path, concept, value):
    written = value_a_fix_writes(
        CONFIG, str(tmp_path / "accelerate_config.yaml"), "accelerate", concept, value, accelerate.key_for(concept).path
    )
    assert written == ("cpu" if value is True else value)


def test_every_read_key_is_in_the_table_once():
    paths = [key.path for key in accelerate.KEYS]
    assert len(paths) == len(set(paths))
    for key in accelerate.KEYS:
        assert key.path[0] in accelerate.ACCELERATE_KEYS, key.path


def test_the_schema_describes_the_keys_from_the_table():
    properties = schema_for("accelerate")["properties"]
    for concept in ("dist_strategy", "world_size", "amp_dtype"):
        key = accelerate.key_for(concept)
        assert properties[key.path[0]]["description"] == key.description
    for section, text in accelerate.SECTIONS.items():
        assert properties[section]["description"] == text
    assert "DEEPSPEED" in str(properties["distributed_type"])
