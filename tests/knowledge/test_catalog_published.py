"""Catalog entries that hold a model's published config.json (`config:` in knowledge/data/models.yaml): each is found
by its id, every alias and the names of its quantized checkpoints (the lookup strips the quantization suffix), and
the parameter count the catalog reads from the held config (language model + vision tower, `vision_params`) equals
the count of transformers' own model class built from that config on the meta device."""

from __future__ import annotations

import pytest
from vramlens.knowledge.data import load
from vramlens.knowledge.models import lookup_model, param_count

HELD = [e for e in load("models.yaml")["models"] if "config" in e]

# published quantized checkpoints -> the entry they are sized by
QUANTIZED = {
    "Qwen/Qwen1.5-7B-Chat-AWQ": "Qwen/Qwen1.5-7B-Chat",
    "Qwen/Qwen1.5-7B-Chat-GPTQ-Int8": "Qwen/Qwen1.5-7B-Chat",
    "Qwen/Qwen1.5-72B-Chat-GPTQ-Int4": "Qwen/Qwen1.5-72B-Chat",
}


@pytest.mark.parametrize("entry", HELD, ids=lambda e: e["id"])
def test_found_by_id_and_every_alias(entry: dict) -> None:
    for name in (entry["id"], *entry.get("aliases", ())):
        found = lookup_model(name)
        assert found is not None and found.id == entry["id"], name


@pytest.mark.parametrize(("name", "model_id"), sorted(QUANTIZED.items()))
def test_quantized_checkpoint_names_find_the_entry(name: str, model_id: str) -> None:
    found = lookup_model(name)
    assert found is not None and found.id == model_id, name


@pytest.mark.parametrize("entry", HELD, ids=lambda e: e["id"])
def test_parameter_count_equals_transformers_meta_build(entry: dict) -> None:
    torch = pytest.importorskip("torch", reason="the reference build needs torch")
    transformers = pytest.importorskip("transformers", reason="the reference build needs transformers")
    held = dict(entry["config"])
    (architecture,) = held.pop("architectures")
    config = transformers.AutoConfig.for_model(held.pop("model_type"), **held)
    with torch.device("meta"):
        model = getattr(transformers, architecture)._from_config(config)
    arch = lookup_model(entry["id"])
    assert arch is not None
    assert param_count(arch) + arch.vision_params == sum(p.numel() for p in model.parameters())
