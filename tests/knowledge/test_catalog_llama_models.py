"""Catalog entries from Meta's table of Llama checkpoints, meta-llama/llama-models `models/sku_list.py`
(scripts/import_catalog_llama_models.py): `arch_args` mapped to a LlamaForCausalLM config.json as the reference
implementation builds the model."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from importer_check import assert_reproduced
from scripts_module import load_script
from vramlens.knowledge import models
from vramlens.knowledge.schema import ModelArch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog_llama_models.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_llama_models.json"
MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "meta-llama+llama-models" / "repo"


def _script():
    return load_script("import_catalog_llama_models")


def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("dim", "multiplier", "multiple_of", "width"),
    [
        (4096, 1.3, 1024, 14336),  # Llama-3-8B's intermediate_size
        (8192, 1.3, 4096, 28672),  # Llama-3-70B's
        (16384, 1.2, 4096, 53248),  # Llama-3.1-405B's
        (2048, 1.5, 256, 8192),  # Llama-3.2-1B's
        (3072, 1.0, 256, 8192),  # Llama-3.2-3B's
    ],
)
def test_the_mlp_width_is_the_reference_feed_forward_s(dim, multiplier, multiple_of, width):
    args = {"dim": dim, "ffn_dim_multiplier": multiplier, "multiple_of": multiple_of}
    assert _script().ffn_width(args) == width


def test_the_table_is_read_with_its_constants_helpers_and_merges_without_running_it():
    source = """
VOCAB = 128256
def small() -> dict:
    return {"dim": 2048, "n_layers": 16, "vocab_size": VOCAB}
def family():
    return [
        Model(core_model_id=CoreModelId.a, huggingface_repo="org/A-1B", arch_args=small()),
        Model(core_model_id=CoreModelId.b, huggingface_repo="org/B-1B-INT4",
              quantization_format=CheckpointQuantizationFormat.int4,
              arch_args={**small(), "quantization_args": {"group_size": 256}}),
    ]
"""
    read = _script().sku_models(source)
    assert [(m["repo"], m["core"], m["format"]) for m in read] == [
        ("org/A-1B", "a", "bf16"),
        ("org/B-1B-INT4", "b", "int4"),
    ]
    assert read[0]["args"] == {"dim": 2048, "n_layers": 16, "vocab_size": 128256}
    assert read[1]["args"]["quantization_args"] == {"group_size": 256} and read[1]["args"]["vocab_size"] == 128256
    with pytest.raises(ValueError):  # anything else is not evaluated
        _script().sku_models('Model(core_model_id=X.a, huggingface_repo="o/m", arch_args=make(1))')
    assert ast.parse(source)  # the text is parsed, never imported


def test_every_entry_maps_cites_the_commit_and_fits_the_size_its_name_states():
    data = _data()
    sha = data["source"].rsplit(" ", 1)[-1]
    assert len(sha) == 40 and data["models"]
    script = _script()
    for entry in data["models"]:
        arch = models.lookup_model(entry["id"])
        assert arch is not None and arch.id == entry["id"] and arch.source == entry["source"], entry["id"]
        assert entry["source"].startswith(f"meta-llama/llama-models {sha[:12]} models/sku_list.py ")
        assert not arch.approximate and arch.family == "llama" and not arch.tied_embeddings
        built, stated, _ = script.tr.sized(entry["id"], arch)
        assert stated and abs(built / stated - 1) <= script.tr.SIZE_TOLERANCE


def test_cross_checks_hold_and_what_the_catalog_contradicts_is_not_written():
    """Each checkpoint the catalog has was compared with it. The table gives Llama 2 7B Llama 3's grouped-query heads
    and MLP width: its chat model, with the same arguments, is left out rather than written with them."""
    data = _data()
    script = _script()
    checked = {r["id"]: r for r in data["checked"]}
    for record in data["checked"]:
        known = models.lookup_model(record["id"])
        assert known is not None and known.id == record["catalog"], record["id"]
        ours = ModelArch(id=record["id"], **{k: record[k] for k in script.tr.FIELDS})
        assert script.tr._compare(ours, known) == {k: list(v) for k, v in record["differs"].items()}, record["id"]
    assert checked["meta-llama/Llama-2-7b"]["differs"]["kv_heads"] == [8, 32]
    assert not checked["meta-llama/Llama-3.1-8B"]["differs"]
    written = {m["id"] for m in data["models"]}
    assert "meta-llama/Llama-2-7b-chat" not in written and not written & set(checked)
    chat = models.lookup_model("meta-llama/Llama-2-7b-chat")
    assert chat is None or (chat.kv_heads or chat.heads) == 32  # read as Llama-2-7b (every head its own K/V)


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no llama-models mirror")
def test_data_file_is_what_the_script_makes_from_the_recorded_commit():
    sha = _data()["source"].rsplit(" ", 1)[-1]
    assert_reproduced(SCRIPT, MIRROR, sha)
