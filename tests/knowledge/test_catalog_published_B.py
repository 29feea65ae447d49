"""Catalog entries that hold a model's published config.json (models.yaml `config:`): each is found by its hub id and
every alias, and its parameter count equals the count of the model class transformers builds from that same config
(on the meta device)."""

from __future__ import annotations

import pytest
from vramlens.knowledge.data import load
from vramlens.knowledge.models import lookup_model, param_count

# hub id -> the aliases its entry lists (the spellings whose config is the same)
ENTRIES = {
    "01-ai/Yi-6B": (),
    "01-ai/Yi-34B": (),
    "nvidia/Nemotron-Mini-4B-Instruct": ("AI-ModelScope/Nemotron-Mini-4B-Instruct",),
    "ai21labs/Jamba-v0.1": (),
    "trl-internal-testing/tiny-random-LlamaForCausalLM": (),
}


def _entry(model_id: str) -> dict:
    return next(e for e in load("models.yaml")["models"] if e["id"] == model_id)


@pytest.mark.parametrize("model_id", ENTRIES)
def test_found_by_id_and_every_alias(model_id: str) -> None:
    for name in (model_id, *ENTRIES[model_id]):
        arch = lookup_model(name)
        assert arch is not None, name
        assert arch.id == model_id


@pytest.mark.parametrize("model_id", ENTRIES)
def test_count_equals_the_class_transformers_builds_from_the_config(model_id: str) -> None:
    torch = pytest.importorskip("torch", reason="the reference build needs torch")
    transformers = pytest.importorskip("transformers", reason="the reference build needs transformers")
    config = _entry(model_id)["config"]
    cfg = transformers.AutoConfig.for_model(
        config["model_type"], **{k: v for k, v in config.items() if k != "model_type"}
    )
    with torch.device("meta"):
        model = getattr(transformers, config["architectures"][0])._from_config(cfg)
    built = sum(p.numel() for p in model.parameters())
    arch = lookup_model(model_id)
    assert arch is not None
    assert param_count(arch) == built
