"""Catalog entries from alibaba/Pai-Megatron-Patch's Qwen2.5-VL size table and vision tower config
(scripts/import_catalog_pai.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from importer_check import assert_reproduced
from scripts_module import load_script
from vramlens.knowledge import models

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog_pai.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_pai.json"
MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "alibaba+Pai-Megatron-Patch" / "repo"

# the shape of examples/qwen2_5_vl/run_mcore_qwen.sh's size blocks
SIZES = """
if [ $MODEL_SIZE = 3B ]; then

NUM_LAYERS=36 # num_hidden_layers
HIDDEN_SIZE=2048 # hidden_size
VOCAB_SIZE=151936
tie_option="" # tie_word_embeddings

elif [ $MODEL_SIZE = 72B ]; then

NUM_LAYERS=80
HIDDEN_SIZE=8192
VOCAB_SIZE=152064
tie_option=" \\
        --untie-embeddings-and-output-weights \\
        "

fi
if [ $AC = full ]; then
    NUM_LAYERS=1
fi
"""
# the shape of megatron_patch/model/qwen2_5_vl/transformer_config.py get_vision_model_config
VISION = """
def get_vision_model_config(args, config):
    if config.num_layers in[28, 36]:
        config.ffn_hidden_size = 3420
    else:
        config.ffn_hidden_size = 3456
    if parallel_state.get_virtual_pipeline_model_parallel_world_size() is not None:
        config.num_layers = 32 * parallel_state.get_virtual_pipeline_model_parallel_world_size() # depth
    else:
        config.num_layers = 32 # depth
    config.num_attention_heads = 16 # num_heads
    config.hidden_size = 1280 # hidden_size
    config.kv_channels = config.hidden_size // config.num_attention_heads
    config.fullatt_block_indexes = [7, 15, 23, 31]
    return config
"""


def _script():
    return load_script("import_catalog_pai")


def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_size_blocks_are_read_without_running_the_script():
    blocks = _script().size_blocks(SIZES)
    assert list(blocks) == ["3B", "72B"]  # the `if [ $AC = full ]` block is no size
    assert blocks["3B"] == {"NUM_LAYERS": "36", "HIDDEN_SIZE": "2048", "VOCAB_SIZE": "151936", "tie_option": ""}
    assert "--untie-embeddings-and-output-weights" in blocks["72B"]["tie_option"]


def test_the_vision_tower_and_its_width_rule_map_to_config_json_fields():
    script = _script()
    vision = script.vision_config(VISION)
    fields = {"depth": 32, "num_heads": 16, "hidden_size": 1280, "fullatt_block_indexes": [7, 15, 23, 31]}
    assert vision == (fields, [28, 36], 3420, 3456)
    blocks = script.size_blocks(SIZES)
    small, large = (script.hf_config(blocks[s], vision) for s in ("3B", "72B"))
    assert small["tie_word_embeddings"] and not large["tie_word_embeddings"]
    assert small["vision_config"]["intermediate_size"] == 3420 and large["vision_config"]["intermediate_size"] == 3456
    assert large["vision_config"]["out_hidden_size"] == large["hidden_size"] == 8192
    assert (large["num_hidden_layers"], large["vocab_size"]) == (80, 152064)


def test_the_sizes_the_catalog_has_agree_exactly_and_the_others_are_written():
    """3B and 7B are hand entries from their published config.json: the table and vision config reproduce them,
    language model and vision tower, so the 32B and 72B written by the same mapping are read as published."""
    data = _data()
    assert {r["id"] for r in data["checked"]} >= {"Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"}
    assert all(not r["differs"] for r in data["checked"])
    for record in data["checked"]:
        known = models.lookup_model(record["id"])
        assert known is not None and known.id == record["catalog"]
    sha = data["source"].rsplit(" ", 1)[-1]
    written = {m["id"]: m for m in data["models"]}
    assert set(written) == {"Qwen/Qwen2.5-VL-32B-Instruct", "Qwen/Qwen2.5-VL-72B-Instruct"}
    for model_id, entry in written.items():
        arch = models.lookup_model(model_id)
        assert arch is not None and arch.id == model_id and arch.source == entry["source"]
        assert entry["source"].startswith(f"alibaba/Pai-Megatron-Patch {sha[:12]} ")
        assert arch.vision_params > 0 and not arch.approximate and not arch.tied_embeddings
        built, stated, _ = _script().tr.sized(model_id, arch)
        assert stated and abs(built / stated - 1) <= _script().tr.SIZE_TOLERANCE


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Pai-Megatron-Patch mirror")
def test_data_file_is_what_the_script_makes_from_the_recorded_commit():
    sha = _data()["source"].rsplit(" ", 1)[-1]
    assert_reproduced(SCRIPT, MIRROR, sha)
