"""Catalog entries from InternLM/xtuner's model configs (scripts/import_catalog_xtuner.py), and the readings of a
published config.json they rely on: Qwen-MoE's `mlp_only_layers`, the `num_experts` spelling of Qwen3-VL-MoE's
expert count, and a VLM's untied output head."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts_module import load_script
from vramlens.knowledge import models
from vramlens.knowledge.models import arch_from_hf_config, param_count

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog_xtuner.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_xtuner.json"
MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "InternLM+xtuner" / "repo"


def _script():
    return load_script("import_catalog_xtuner")


def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def _entry(model_id: str) -> dict:
    return next(m for m in _data()["models"] if m["id"] == model_id)


def test_every_entry_is_found_by_its_names_cites_xtuner_and_is_the_size_its_name_states():
    data = _data()
    assert data["generated_by"] == "scripts/import_catalog_xtuner.py"
    assert len(data["models"]) >= 4
    stated_size = _script().stated_size
    for entry in data["models"]:
        for name in (entry["id"], *entry["aliases"]):
            arch = models.lookup_model(name)
            assert arch is not None and arch.id == entry["id"], name
        assert entry["source"].startswith("InternLM/xtuner ") and "`" in entry["source"]
        total = (param_count(arch) + arch.vision_params) / 1e9
        assert total == pytest.approx(stated_size(entry["id"]), rel=_script().SIZE_TOLERANCE), entry["id"]


def test_checkpoints_the_catalog_already_holds_agree_with_xtuner():
    """Qwen3-VL-8B-Instruct (models.yaml, from its published config.json) is rebuilt from xtuner's config with no
    shape that differs: the field mapping reproduces a published config."""
    checked = {c["id"]: c for c in _data()["checked"]}
    assert checked["Qwen/Qwen3-VL-8B-Instruct"]["differs"] == {}
    assert "Qwen/Qwen3-VL-8B-Instruct" not in {m["id"] for m in _data()["models"]}


def test_qwen3_vl_moe_is_an_moe_model_with_every_layer_routed():
    arch = models.lookup_model("Qwen/Qwen3-VL-30B-A3B-Thinking")
    text = _entry("Qwen/Qwen3-VL-30B-A3B-Instruct")["config"]["text_config"]
    assert arch is not None and arch.is_moe and not arch.approximate
    assert (arch.num_experts, arch.experts_per_token, arch.moe_intermediate) == (
        text["num_experts"],
        text["num_experts_per_tok"],
        text["moe_intermediate_size"],
    )
    assert arch.dense_layers == 0 and arch.vision_params > 0


def test_a_qwen3_vl_moe_config_counts_the_experts_it_states():
    """Qwen3VLMoeTextConfig reads `num_experts` as `num_local_experts` (transformers 5.24 `attribute_map`): a
    published config.json's `num_experts` sets the count the parameters are built with, not the class default."""
    config = copy.deepcopy(_entry("Qwen/Qwen3-VL-30B-A3B-Instruct")["config"])
    text = config["text_config"]
    fewer = copy.deepcopy(config)
    fewer["text_config"]["num_experts"] = text["num_experts"] // 2
    full, half = arch_from_hf_config(config, "a"), arch_from_hf_config(fewer, "b")
    assert full is not None and half is not None
    experts = (
        text["num_hidden_layers"] * (text["num_experts"] // 2) * 3 * text["hidden_size"] * text["moe_intermediate_size"]
    )
    router = text["num_hidden_layers"] * (text["num_experts"] // 2) * text["hidden_size"]
    assert param_count(full) - param_count(half) == experts + router


def test_an_untied_vlm_counts_its_output_head():
    """Qwen3VLMoeForConditionalGeneration's `lm_head` is vocab × hidden on top of the text model (untied)."""
    config = copy.deepcopy(_entry("Qwen/Qwen3-VL-30B-A3B-Instruct")["config"])
    tied = copy.deepcopy(config)
    tied["tie_word_embeddings"] = tied["text_config"]["tie_word_embeddings"] = True
    untied_arch, tied_arch = arch_from_hf_config(config, "a"), arch_from_hf_config(tied, "b")
    assert untied_arch is not None and tied_arch is not None and not untied_arch.tied_embeddings
    text = config["text_config"]
    assert param_count(untied_arch) - param_count(tied_arch) == text["vocab_size"] * text["hidden_size"]


@pytest.mark.parametrize("model_type", ["qwen2_moe", "qwen3_moe"])
def test_mlp_only_layers_are_dense_layers(model_type):
    """Qwen2-MoE / Qwen3-MoE build a dense MLP in the layers `mlp_only_layers` names (transformers 5.24
    models/qwen3_moe/modeling_qwen3_moe.py `Qwen3MoeDecoderLayer`)."""
    config = {
        "model_type": model_type,
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 1000,
        "decoder_sparse_step": 1,
    }
    every = arch_from_hf_config({**config, "mlp_only_layers": []}, "a")
    two = arch_from_hf_config({**config, "mlp_only_layers": [0, 5]}, "b")
    stepped = arch_from_hf_config({**config, "mlp_only_layers": [1], "decoder_sparse_step": 2}, "c")
    assert every is not None and two is not None and stepped is not None
    assert (every.dense_layers, two.dense_layers) == (0, 2)
    assert stepped.dense_layers == 5  # layers 0, 2, 4, 6 off the step, and layer 1 named
    assert param_count(two) < param_count(every)


@pytest.mark.skipif(not MIRROR.exists(), reason="no InternLM/xtuner mirror")
def test_check_mode_agrees_with_the_data_file():
    commit = _data()["source"].rsplit(" ", 1)[-1]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--git-dir", str(MIRROR), "--commit", commit, "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
