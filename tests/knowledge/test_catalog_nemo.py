"""Catalog entries from NeMo 2's per-size config dataclasses and Megatron-Bridge's per-size providers
(scripts/import_catalog_nemo.py: the classes read with `ast`, the Hub id from the recipe or docstring that names it).
Fixtures: tests/fixtures/nemo/8cfedd72 (SOURCE beside them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from scripts_module import load_script
from vramlens.knowledge import models
from vramlens.knowledge.models import arch_from_hf_config, param_count

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data"
NEMO = ROOT / "tests" / "fixtures" / "nemo" / "8cfedd72"
MIRRORS = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror"))


def _script():
    return load_script("import_catalog_nemo")


def _fixture_index():
    """The fixture files indexed as the importer indexes NeMo's (model files under the models folder)."""
    script = _script()
    index = script.ClassIndex()
    for path in sorted((NEMO / "model").glob("*.py")):
        index.add(f"{script.MODELS}/{path.name}", path.read_text(encoding="utf-8"))
    sources = {p.name: p.read_text(encoding="utf-8") for p in (NEMO / "recipes").glob("*.py")}
    return index, sources


def _data(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------ reading NeMo


def test_a_recipe_names_the_checkpoint_its_config_class_builds():
    """recipes/starcoder2_7b.py: `model()` is `starcoder2_model(version=NAME)`, whose `NAME == "starcoder2_7b"` branch
    configures Starcoder2Config7B; `finetune_recipe` fine-tunes "bigcode/starcoder2-7b". deepseek_v2_lite.py passes
    its `resume_path` parameter, whose default is the id."""
    index, sources = _fixture_index()
    hf_id, cls, why = _script().recipe_model("starcoder2_7b.py", sources, index)
    assert (hf_id, cls and _script().name_of(cls), why) == ("bigcode/starcoder2-7b", "Starcoder2Config7B", "")
    hf_id, cls, why = _script().recipe_model("deepseek_v2_lite.py", sources, index)
    assert (hf_id, cls and _script().name_of(cls)) == ("deepseek-ai/DeepSeek-V2-Lite", "DeepSeekV2LiteConfig")


def test_config_fields_are_the_literal_defaults_over_the_base_classes():
    """Starcoder2Config7B states its sizes over Starcoder2Config's (LayerNorm, biases, untied head); a default that is
    not a literal (`activation_func = F.gelu`) is not read; DeepSeek-V2-Lite's `moe_layer_freq` is a
    `field(default_factory=lambda: [0] + [1] * 26)`: one dense layer."""
    index, _ = _fixture_index()
    fields = index.fields(index.lookup("Starcoder2Config7B"))
    assert (fields["num_layers"], fields["hidden_size"], fields["ffn_hidden_size"]) == (32, 4608, 18432)
    assert (fields["num_attention_heads"], fields["num_query_groups"]) == (36, 4)
    assert fields["add_bias_linear"] is True and fields["share_embeddings_and_output_weights"] is False
    assert "activation_func" not in fields
    lite = index.fields(index.lookup("DeepSeekV2LiteConfig"))
    assert lite["moe_layer_freq"] == [0] + [1] * 26


def test_base_classes_follow_python_method_resolution_order():
    """A provider over `MLATransformerConfig` and a GPT provider takes MLA's `multi_latent_attention = True`, not the
    plain TransformerConfig's False that both inherit (C3 order, as dataclass defaults resolve)."""
    index = _script().ClassIndex()
    index.add("core.py", "class T:\n    mla: bool = False\n    heads: int = 8\nclass MLA(T):\n    mla: bool = True\n")
    index.add(
        "own.py",
        "from core import MLA as CoreMLA, T as CoreT\nclass T(CoreT):\n    pass\nclass MLA(T, CoreMLA):\n    pass\n",
    )
    index.add("gpt.py", "from own import T\nclass GPT(T):\n    heads: int = 16\n")
    index.add("prov.py", "from own import MLA\nfrom gpt import GPT\nclass P(MLA, GPT):\n    pass\n")
    assert index.fields("prov.py::P") == {"mla": True, "heads": 16}


def test_megatron_fields_become_the_config_json_they_describe():
    """num_query_groups → num_key_value_heads, kv_channels → head_dim, MLA sizes only with multi_latent_attention,
    routed experts under the model_type's own key, DeepSeek's shared experts counted in experts' widths and its
    leading dense layers from moe_layer_freq."""
    fields = {"num_layers": 27, "hidden_size": 2048, "num_attention_heads": 16, "ffn_hidden_size": 10944}
    fields |= {"multi_latent_attention": True, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64}
    fields |= {"v_head_dim": 128, "num_moe_experts": 64, "moe_router_topk": 6, "moe_ffn_hidden_size": 1408}
    fields |= {"moe_shared_expert_intermediate_size": 2816, "moe_layer_freq": [0] + [1] * 26, "vocab_size": 102400}
    config = _script().hf_config(fields, "deepseek_v2")
    assert config["n_routed_experts"] == 64 and config["n_shared_experts"] == 2
    assert config["first_k_dense_replace"] == 1 and config["qk_nope_head_dim"] == 128
    assert config["num_key_value_heads"] == 16
    plain = _script().hf_config({**fields, "multi_latent_attention": False}, "deepseek_v2")
    assert "kv_lora_rank" not in plain


# ------------------------------------------------------------------------------------------------ the data files


def test_every_entry_maps_and_is_found_under_its_id():
    for name in ("models_imported_nemo.json", "models_imported_bridge.json"):
        data = _data(name)
        assert data["generated_by"].startswith("scripts/import_catalog_nemo.py")
        assert data["models"]
        for entry in data["models"]:
            assert entry["source"] and entry["config"]["model_type"]
            arch = models.lookup_model(entry["id"])
            assert arch is not None and arch.source.startswith(entry["source"][:40]), entry["id"]


def test_starcoder2_7b_is_read_as_nemo_states_it_and_says_its_vocabulary_is_assumed():
    """bigcode/starcoder2-7b was not in the catalog: NeMo's Starcoder2Config7B gives its layers; the vocabulary is the
    tokenizer's (not in the config), so the entry says so."""
    arch = models.lookup_model("bigcode/starcoder2-7b")
    assert arch is not None and arch.family == "starcoder2"
    assert (arch.layers, arch.hidden, arch.heads, arch.n_kv_heads, arch.intermediate) == (32, 4608, 36, 4, 18432)
    assert "vocabulary" in arch.approximate
    assert abs(param_count(arch) / 7e9 - 1) < 0.1


def test_llama_nemotron_nano_takes_the_vocabulary_of_the_llama_its_config_extends():
    """Llama31NemotronNano8BConfig(Llama31Config8B) states no vocabulary; NeMo's llama31_8b recipe names
    meta-llama/Llama-3.1-8B for that base, whose vocabulary (128256) the entry takes, and says so."""
    arch = models.lookup_model("nvidia/Llama-3.1-Nemotron-Nano-8B-v1")
    base = models.lookup_model("meta-llama/Llama-3.1-8B")
    assert arch is not None and base is not None and arch.vocab == base.vocab
    assert "Llama-3.1-8B" in arch.approximate
    assert param_count(arch) == param_count(base)


def test_a_vlm_provider_holding_only_the_language_model_is_approximate():
    arch = models.lookup_model("mistralai/Ministral-3-3B-Base-2512")
    assert arch is not None and "vision tower" in arch.approximate


def test_comparisons_with_the_catalog_hold_where_the_class_states_the_field():
    """Where NeMo and the catalog both state a checkpoint, they agree on the layers (the differences recorded are
    tied embeddings NeMo leaves untied for Qwen2's small sizes, and gpt-oss's expert biases): most agree exactly."""
    checked = _data("models_imported_nemo.json")["checked"]
    assert len(checked) >= 30
    agree = [c for c in checked if not c["differs"]]
    assert len(agree) >= 0.8 * len(checked)
    for c in checked:
        assert set(c["differs"]) <= {"tied_embeddings", "mlp_bias"}, c


def test_glm_bridge_comparison_records_the_attention_biases():
    """Megatron-Bridge's GLM-4.5 providers state `add_qkv_bias = True` (GLM-4.5's config.json: attention_bias true);
    the comparison records it against the catalog's entry from slime's flags."""
    by_id = {c["id"]: c for c in _data("models_imported_bridge.json")["checked"]}
    assert "zai-org/GLM-4.5-Air" in by_id
    assert set(by_id["zai-org/GLM-4.5-Air"]["differs"]) <= {"attn_bias"}


def test_deepseek_v2_is_multi_latent_attention_from_its_nemo_config():
    """DeepSeekV2Config (MLATransformerConfig): q_lora_rank 1536, kv_lora_rank 512, 160 routed experts + 2 shared,
    one dense layer; its count is transformers' DeepseekV2 build from the same config."""
    entry = next(e for e in _data("models_imported_nemo.json")["models"] if e["id"] == "deepseek-ai/DeepSeek-V2")
    arch = models.lookup_model("deepseek-ai/DeepSeek-V2")
    assert arch is not None and arch.kv_lora_rank == 512 and arch.q_lora_rank == 1536
    assert arch.num_experts == 160 and arch.shared_experts == 2 and arch.dense_layers == 1
    built = arch_from_hf_config(entry["config"], "x")
    assert built is not None and param_count(built) == param_count(arch)
    assert abs(param_count(arch) / 236e9 - 1) < 0.05  # DeepSeek-V2: 236B total parameters (its model card)


@pytest.mark.skipif(
    not ((MIRRORS / "NVIDIA+NeMo" / "repo").exists() and (MIRRORS / "NVIDIA-NeMo+Megatron-Bridge" / "repo").exists()),
    reason="no NeMo / Megatron-Bridge mirror under the mirrors folder",
)
def test_data_files_are_what_the_sources_give_now():
    args = ["--check", "--git-dir", str(MIRRORS / "NVIDIA+NeMo" / "repo")]
    args += ["--megatron-git-dir", str(MIRRORS / "NVIDIA+Megatron-LM" / "repo")]
    args += ["--bridge-git-dir", str(MIRRORS / "NVIDIA-NeMo+Megatron-Bridge" / "repo")]
    assert _script().main(args) == 0
