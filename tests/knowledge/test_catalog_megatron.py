"""Nemotron-H hybrids from Megatron-LM's ModelOpt model arguments (scripts/import_catalog_megatron.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts_module import load_script
from vramlens.knowledge import models
from vramlens.knowledge.models import param_count

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog_megatron.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_megatron.json"
MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "NVIDIA+Megatron-LM" / "repo"


def _script():
    return load_script("import_catalog_megatron")


def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_every_entry_is_a_nemotron_h_hybrid_found_by_its_names_and_the_size_its_name_states():
    data = _data()
    assert data["generated_by"] == "scripts/import_catalog_megatron.py"
    assert len(data["models"]) >= 2
    for entry in data["models"]:
        for name in (entry["id"], *entry.get("aliases", ())):
            arch = models.lookup_model(name)
            assert arch is not None and arch.id == entry["id"], name
        assert arch.family == "nemotron_h" and arch.hf_config_json
        assert entry["source"].startswith("NVIDIA/Megatron-LM ") and entry["source"].endswith(".sh MODEL_ARGS")
        pattern = entry["config"]["hybrid_override_pattern"]
        assert arch.layers == len(pattern)
        assert arch.is_moe == ("E" in pattern)
        size = _script().stated_size(entry["id"])
        if size is not None:
            assert param_count(arch) / 1e9 == pytest.approx(size, rel=_script().SIZE_TOLERANCE), entry["id"]


def test_a_vocabulary_the_flags_do_not_state_is_said_to_be_assumed():
    for entry in _data()["models"]:
        arch = models.lookup_model(entry["id"])
        assert arch is not None
        assumed = "vocabulary not in the Megatron arguments" in arch.approximate
        assert assumed == ("approximate" in entry), entry["id"]


def test_flags_read_a_model_args_string_over_continued_lines():
    text = 'X=1\nMODEL_ARGS=" \\\n    --hidden-size 2688 \\\n    --squared-relu \\\n    --num-experts 128 \\\n"\n'
    assert _script().flags(text) == {"hidden-size": "2688", "squared-relu": True, "num-experts": "128"}


def test_nemotron_h_config_takes_megatrons_defaults_for_what_the_flags_leave_out():
    """Without --mamba-num-heads, Megatron's MambaMixer builds expand (2) · hidden_size // mamba_head_dim heads;
    without --kv-channels, heads are hidden_size // num_attention_heads wide; without --mamba-state-dim and
    --mamba-num-groups, TransformerConfig's 128 and 8."""
    flags = {"hybrid-layer-pattern": "M*M-", "hidden-size": "1024", "num-attention-heads": "8"}
    flags |= {"ffn-hidden-size": "4096", "padded-vocab-size": "32000", "untie-embeddings-and-output-weights": True}
    flags |= {"disable-bias-linear": True, "normalization": "RMSNorm"}  # as every ModelOpt hybrid file states
    config, assumed, left_out = _script().nemotron_h_config(flags)
    assert assumed == [] and left_out is None
    assert (config["mamba_num_heads"], config["mamba_head_dim"]) == (2 * 1024 // 64, 64)
    assert config["head_dim"] == 1024 // 8 and config["num_key_value_heads"] == 8
    assert (config["ssm_state_size"], config["n_groups"], config["conv_kernel"]) == (128, 8, 4)
    assert config["num_hidden_layers"] == 4 and config["tie_word_embeddings"] is False


def test_the_importer_writes_the_config_the_run_reader_builds():
    """One builder (formats/megatron_hybrid.py `nemotron_h_config`) with megatron-core's defaults (d98e8a64): GELU
    MLPs without --squared-relu (`TransformerConfig.activation_func` F.gelu), top-2 routing without
    --moe-router-topk (`moe_router_topk` 2), float32 parameters without --bf16 (model_parallel_config.py
    `params_dtype`). Before, the importer wrote silu and needed --moe-router-topk."""
    from vramlens.formats import megatron_hybrid as mh

    flags = {"hybrid-layer-pattern": "M-ME", "hidden-size": "1024", "num-attention-heads": "8", "num-experts": "4"}
    flags |= {"ffn-hidden-size": "4096", "padded-vocab-size": "32000", "normalization": "RMSNorm"}
    config, _, left_out = _script().nemotron_h_config(flags | {"disable-bias-linear": True})
    assert left_out is None
    sizes = _script().sizes_of(flags | {"disable-bias-linear": True})
    assert config == mh.nemotron_h_config("M-ME", sizes, mh.mamba_sizes(1024, {}))
    assert config["mlp_hidden_act"] == "gelu" and config["num_experts_per_tok"] == 2
    assert config["dtype"] == "float32" and not config["use_bias"] and not config["mlp_bias"]


def test_a_file_whose_biases_the_config_cannot_hold_is_left_out():
    """Linear biases (megatron-core builds them without --disable-bias-linear; transformers' NemotronHAttention has
    none, and the Nemotron-H count is measured without MLP biases) and LayerNorm biases (the default
    `--normalization`): such a file is left out with the reason rather than written short of them."""
    flags = {"hybrid-layer-pattern": "M*M-", "hidden-size": "1024", "num-attention-heads": "8"}
    config, _, left_out = _script().nemotron_h_config(flags | {"normalization": "RMSNorm"})
    assert config is None and "biases" in left_out
    config, _, left_out = _script().nemotron_h_config(flags | {"disable-bias-linear": True})
    assert config is None and "biases" in left_out
    config, _, left_out = _script().nemotron_h_config(flags | {"disable-bias-linear": True, "normalization": "RMSNorm"})
    assert config is not None and left_out is None


@pytest.mark.skipif(not MIRROR.exists(), reason="no NVIDIA/Megatron-LM mirror")
def test_check_mode_agrees_with_the_data_file():
    commit = _data()["source"].rsplit(" ", 1)[-1]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--git-dir", str(MIRROR), "--commit", commit, "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
