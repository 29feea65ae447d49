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
    config, assumed = _script().nemotron_h_config(flags)
    assert assumed == []
    assert (config["mamba_num_heads"], config["mamba_head_dim"]) == (2 * 1024 // 64, 64)
    assert config["head_dim"] == 1024 // 8 and config["num_key_value_heads"] == 8
    assert (config["ssm_state_size"], config["n_groups"], config["conv_kernel"]) == (128, 8, 4)
    assert config["num_hidden_layers"] == 4 and config["tie_word_embeddings"] is False


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
