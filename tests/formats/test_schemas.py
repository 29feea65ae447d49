"""The checked-in JSON Schemas are generated from the pydantic models and accept every corpus config."""

from __future__ import annotations

import json

import jsonschema
import yaml
from vramlens.formats import parse_document, schemas


def test_checked_in_schemas_are_up_to_date():
    stale = [
        name
        for name, text in schemas.render_all().items()
        if not (schemas.SCHEMA_DIR / name).is_file() or (schemas.SCHEMA_DIR / name).read_text() != text
    ]
    assert not stale, f"regenerate with `python -m vramlens.formats.schemas`: {stale}"


def test_schemas_describe_memory_and_stay_permissive():
    for fmt in schemas.FORMATS:
        schema = schemas.schema_for(fmt)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["additionalProperties"] is True
        props = schema["properties"]
        assert props and all(p.get("description") for p in props.values()), fmt
    validator = jsonschema.Draft202012Validator(schemas.schema_for("axolotl"))
    assert validator.is_valid({"micro_batch_size": 2, "some_future_key": {"x": 1}, "deepspeed": None})
    assert not validator.is_valid({"micro_batch_size": 0})
    assert "optimizer" in schemas.schema_for("axolotl")["properties"]


def test_enumerated_values_are_offered_at_the_top_of_a_property():
    props = schemas.schema_for("accelerate")["properties"]
    assert "FSDP" in props["distributed_type"]["enum"] and None in props["distributed_type"]["enum"]


def test_every_corpus_config_validates_against_its_formats_schema(corpus):
    checked = 0
    for path in sorted(corpus.rglob("*")):
        if path.suffix not in (".yaml", ".yml", ".json"):
            continue
        text = path.read_text(encoding="utf-8")
        plan = parse_document(text, str(path)).plan
        if plan is None or plan.format not in schemas.FORMATS:
            continue
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        errors = list(jsonschema.Draft202012Validator(schemas.schema_for(plan.format)).iter_errors(data))
        assert not errors, (path.name, [e.message for e in errors[:3]])
        checked += 1
    assert checked >= 150


def test_accelerate_enums_are_the_values_the_parser_reads():
    from vramlens.formats import accelerate
    from vramlens.formats.schemas import schema_for

    props = schema_for("accelerate")["properties"]
    assert props["distributed_type"]["anyOf"][0]["enum"] == list(accelerate.DISTRIBUTED_TYPES)
    assert props["mixed_precision"]["anyOf"][0]["enum"] == list(accelerate.MIXED_PRECISION)


def test_litgpt_enums_are_the_values_the_parser_reads():
    from vramlens.formats import litgpt
    from vramlens.formats.schemas import schema_for

    props = schema_for("litgpt")["properties"]
    assert props["precision"]["anyOf"][0]["enum"] == list(litgpt.PRECISION)
    assert props["quantize"]["anyOf"][0]["enum"] == list(litgpt.QUANTIZE)
