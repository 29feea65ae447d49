"""Catalog entries that hold a model's published config.json (`config:` in knowledge/data/models.yaml): each id and
alias finds its entry, and the parameter count the catalog reads from the held config equals the count of
transformers' own model class built from that config on the meta device."""

from __future__ import annotations

import pytest
from vramlens.knowledge.data import load
from vramlens.knowledge.models import lookup_model, param_count

# hub id -> other spellings with the same config.json
ENTRIES: dict[str, tuple[str, ...]] = {
    "Salesforce/xgen-7b-8k-base": (),
}


def _held_config(model_id: str) -> dict:
    entry = next(e for e in load("models.yaml")["models"] if e["id"] == model_id)
    return entry["config"]


@pytest.mark.parametrize("model_id", sorted(ENTRIES))
def test_id_and_aliases_find_the_entry(model_id: str) -> None:
    for name in (model_id, *ENTRIES[model_id]):
        found = lookup_model(name)
        assert found is not None, name
        assert found.id == model_id


@pytest.mark.parametrize("model_id", sorted(ENTRIES))
def test_parameter_count_equals_transformers_meta_build(model_id: str) -> None:
    torch = pytest.importorskip("torch", reason="the reference build needs torch")
    transformers = pytest.importorskip("transformers", reason="the reference build needs transformers")
    held = dict(_held_config(model_id))
    (architecture,) = held.pop("architectures")
    config = transformers.AutoConfig.for_model(**held)
    with torch.device("meta"):
        model = getattr(transformers, architecture)(config)
    built = sum(p.numel() for p in model.parameters())
    assert param_count(lookup_model(model_id)) == built
