"""Model catalog and lookup: hub ids, aliases, local config.json folders and the offline HF cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vramlens.knowledge.models import (
    all_models,
    arch_from_hf_config,
    lookup_model,
    param_count,
    suggest_model,
)

REQUIRED_IDS = [
    "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-13b-hf",
    "meta-llama/Llama-2-70b-hf",
    "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B",
    "meta-llama/Llama-3.2-1B",
    "meta-llama/Llama-3.2-3B",
    "meta-llama/Llama-3.3-70B-Instruct",
    "mistralai/Mistral-7B-v0.1",
    "mistralai/Mistral-7B-v0.3",
    "mistralai/Mistral-Nemo-Base-2407",
    "mistralai/Mixtral-8x7B-v0.1",
    "mistralai/Mixtral-8x22B-v0.1",
    "Qwen/Qwen2-0.5B",
    "Qwen/Qwen2-1.5B",
    "Qwen/Qwen2-7B",
    "Qwen/Qwen2-72B",
    "Qwen/Qwen2.5-0.5B",
    "Qwen/Qwen2.5-1.5B",
    "Qwen/Qwen2.5-3B",
    "Qwen/Qwen2.5-7B",
    "Qwen/Qwen2.5-14B",
    "Qwen/Qwen2.5-32B",
    "Qwen/Qwen2.5-72B",
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B",
    "google/gemma-2b",
    "google/gemma-7b",
    "google/gemma-2-2b",
    "google/gemma-2-9b",
    "google/gemma-2-27b",
    "google/gemma-3-1b-pt",
    "google/gemma-3-4b-pt",
    "google/gemma-3-12b-pt",
    "google/gemma-3-27b-pt",
    "microsoft/phi-2",
    "microsoft/Phi-3-mini-4k-instruct",
    "microsoft/Phi-3-medium-4k-instruct",
    "microsoft/Phi-3.5-mini-instruct",
    "microsoft/phi-4",
    "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/deepseek-llm-7b-base",
    "allenai/OLMo-2-1124-7B",
    "allenai/OLMo-2-1124-13B",
    "openai-community/gpt2",
    "openai-community/gpt2-medium",
    "openai-community/gpt2-large",
    "openai-community/gpt2-xl",
    "google-bert/bert-base-uncased",
    "google-bert/bert-large-uncased",
    "FacebookAI/roberta-base",
    "FacebookAI/roberta-large",
    "google-t5/t5-small",
    "google-t5/t5-base",
    "google-t5/t5-large",
    "google/flan-t5-base",
    "HuggingFaceTB/SmolLM2-135M",
    "HuggingFaceTB/SmolLM2-360M",
    "HuggingFaceTB/SmolLM2-1.7B",
    "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T",
    "openai/gpt-oss-20b",
]


def test_catalog_covers_the_popular_models() -> None:
    models = all_models()
    assert len(models) >= 60
    ids = {m.id for m in models}
    assert not set(REQUIRED_IDS) - ids
    assert all(m.source for m in models)


@pytest.mark.parametrize("model", [m for m in all_models() if m.params_b], ids=lambda m: m.id)
def test_parameter_count_from_shapes_matches_the_published_size(model) -> None:
    computed = (param_count(model) + model.vision_params) / 1e9  # a VLM: language model + vision tower
    assert computed == pytest.approx(model.params_b, rel=0.02)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),
        ("META-LLAMA/meta-llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
        ("unsloth/llama-3-8b-bnb-4bit", "meta-llama/Meta-Llama-3-8B"),
        ("unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit", "meta-llama/Llama-3.1-8B"),
        ("llama3_1_8b", "meta-llama/Llama-3.1-8B"),
        ("torchtune.models.llama3_1.qlora_llama3_1_8b", "meta-llama/Llama-3.1-8B"),
        ("torchtune.models.qwen2_5.lora_qwen2_5_7b_instruct", "Qwen/Qwen2.5-7B"),
        ("qwen2_5_7b_base", "Qwen/Qwen2.5-7B"),  # torchtune builder
        ("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),  # litgpt name
        ("checkpoints/meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B"),  # litgpt checkpoint_dir
        ("Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-7B"),
        ("gpt2", "openai-community/gpt2"),
        ("bert-base-uncased", "google-bert/bert-base-uncased"),
    ],
)
def test_aliases_and_framework_names_resolve(name: str, expected: str) -> None:
    model = lookup_model(name)
    assert model is not None and model.id == expected


def test_architecture_facts_that_change_memory() -> None:
    qwen = lookup_model("Qwen/Qwen2.5-7B")
    assert qwen.attn_bias and not qwen.tied_embeddings and qwen.kv_dim == 512
    assert lookup_model("Qwen/Qwen2.5-0.5B").tied_embeddings
    gemma = lookup_model("google/gemma-7b")
    assert gemma.mlp == "geglu" and gemma.q_dim == 4096 != gemma.hidden
    mixtral = lookup_model("mistralai/Mixtral-8x7B-v0.1")
    assert mixtral.is_moe and (mixtral.num_experts, mixtral.experts_per_token) == (8, 2)
    t5 = lookup_model("t5-base")
    assert t5.block == "encoder-decoder" and t5.encoder_layers == t5.layers == 12
    gpt2 = lookup_model("gpt2")
    assert (gpt2.norm, gpt2.mlp) == ("layernorm", "gelu") and gpt2.attn_bias


def _write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


QWEN2_TINY = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
}


def test_local_folder_relative_to_the_workspace(tmp_path: Path) -> None:
    _write_config(tmp_path / "models" / "my-qwen", QWEN2_TINY)
    model = lookup_model("models/my-qwen", workspace=tmp_path)
    assert model is not None
    assert (model.family, model.hidden, model.layers, model.kv_heads) == ("qwen2", 512, 6, 2)
    assert model.attn_bias and not model.tied_embeddings and model.stored_dtype == "bf16"
    assert lookup_model(str(tmp_path / "models" / "my-qwen"), workspace=tmp_path) is not None  # absolute path
    assert lookup_model(str(tmp_path / "models" / "my-qwen" / "config.json"), workspace=tmp_path) is not None
    assert lookup_model("models/missing", workspace=tmp_path) is None


def test_local_multimodal_config_uses_the_text_config(tmp_path: Path) -> None:
    config = {
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "num_hidden_layers": 34,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "vocab_size": 262208,
        },
        "vision_config": {"hidden_size": 1152},
        "torch_dtype": "bfloat16",
    }
    model = lookup_model("gemma3", workspace=_write_config(tmp_path / "gemma3", config).parent)
    assert model is not None
    assert (model.hidden, model.layers, model.head_dim, model.mlp) == (2560, 34, 256, "geglu")
    assert model.tied_embeddings  # transformers' default when the key is absent


def test_local_t5_and_gpt2_keys(tmp_path: Path) -> None:
    t5 = {
        "model_type": "t5",
        "d_model": 512,
        "d_ff": 1024,
        "num_layers": 8,
        "num_decoder_layers": 8,
        "num_heads": 6,
        "d_kv": 64,
        "vocab_size": 32128,
        "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False,
    }
    model = arch_from_hf_config(t5, "local/t5")
    assert (model.block, model.encoder_layers, model.layers, model.mlp, model.q_dim) == (
        "encoder-decoder",
        8,
        8,
        "geglu",
        384,
    )
    assert param_count(model) == param_count(lookup_model("google/flan-t5-small"))
    gpt2 = {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_inner": None,
        "vocab_size": 50257,
        "n_positions": 1024,
    }
    model = arch_from_hf_config(gpt2, "local/gpt2")
    assert (model.intermediate, model.norm, model.tied_embeddings) == (3072, "layernorm", True)
    assert param_count(model) == param_count(lookup_model("gpt2"))


def test_gpt_bigcode_is_multi_query_unless_told_otherwise() -> None:
    """StarCoder's config.json (bigcode/starcoder): one K/V head, so 15.5 B parameters, not the 18.4 B of the same
    shapes with full-head K/V (the fused c_attn is h × (h + 2·head_dim))."""
    starcoder = {
        "model_type": "gpt_bigcode",
        "n_embd": 6144,
        "n_head": 48,
        "n_inner": 24576,
        "n_layer": 40,
        "n_positions": 8192,
        "vocab_size": 49152,
        "activation_function": "gelu_pytorch_tanh",
        "multi_query": True,
    }
    model = arch_from_hf_config(starcoder, "bigcode/starcoder")
    assert (model.n_kv_heads, model.kv_dim, model.mlp, model.norm) == (1, 128, "gelu", "layernorm")
    assert 15.4e9 < param_count(model) < 15.6e9
    assert arch_from_hf_config({k: v for k, v in starcoder.items() if k != "multi_query"}, "x").n_kv_heads == 1
    assert arch_from_hf_config({**starcoder, "multi_query": False}, "x").n_kv_heads == 48


def test_local_deepseek_and_moe_configs_map_expert_keys() -> None:
    config = {
        "model_type": "deepseek_v2",
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 102400,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "moe_intermediate_size": 1408,
        "first_k_dense_replace": 1,
        "tie_word_embeddings": False,
    }
    model = arch_from_hf_config(config, "local/dsv2")
    assert param_count(model) == param_count(lookup_model("deepseek-ai/DeepSeek-V2-Lite"))


def test_unreadable_or_non_model_json_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json", encoding="utf-8")
    _write_config(tmp_path / "notamodel", {"foo": 1})
    assert lookup_model("broken", workspace=tmp_path) is None
    assert lookup_model("notamodel", workspace=tmp_path) is None


def _fake_hub_cache(root: Path, repo_id: str, config: dict, commit: str = "0123abcd") -> None:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    _write_config(repo / "snapshots" / commit, config)


def test_hf_hub_cache_is_searched_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hub"
    _fake_hub_cache(cache, "acme/tiny-qwen-chat", QWEN2_TINY)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    model = lookup_model("acme/tiny-qwen-chat")
    assert model is not None and model.id == "acme/tiny-qwen-chat"
    assert (model.hidden, model.layers) == (512, 6)
    assert "config.json" in model.source
    assert lookup_model("ACME/Tiny-Qwen-Chat") is not None  # hub ids are case-insensitive
    assert lookup_model("acme/not-downloaded") is None


def test_hf_home_is_used_when_no_hub_cache_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_hub_cache(tmp_path / "hfhome" / "hub", "acme/other", QWEN2_TINY)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert lookup_model("acme/other") is not None


def test_unknown_models_get_suggestions() -> None:
    assert lookup_model("acme/never-heard-of-it") is None
    assert lookup_model("") is None
    assert "meta-llama/Meta-Llama-3-8B" in suggest_model("meta-llama/Meta-Llama-3-8b-Instrct")
    assert suggest_model("Qwen/Qwen2.5-7B-Instuct")[0] == "Qwen/Qwen2.5-7B"


GROUND_TRUTH = Path(__file__).resolve().parents[2] / ".." / "shared" / "calibration" / "ground-truth.jsonl"


def test_every_calibration_model_is_in_the_catalog_with_the_same_shapes() -> None:
    if not GROUND_TRUTH.is_file():
        pytest.skip("shared/calibration/ground-truth.jsonl is not beside the repository")
    fields = ("hidden", "layers", "heads", "intermediate", "vocab")
    for line in GROUND_TRUTH.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        model = lookup_model(case["model"])
        assert model is not None, case["model"]
        shapes = case.get("arch") or {}
        assert {f: shapes[f] for f in fields if f in shapes} == {f: getattr(model, f) for f in fields if f in shapes}
        if shapes.get("kv_heads"):
            assert model.n_kv_heads == shapes["kv_heads"], case["model"]


def test_bloom_config_json_reads_n_embed_and_the_embedding_layernorm() -> None:
    """bigscience/bloom-560m's config.json names its width `n_embed` (BloomConfig pops it into hidden_size) and has no
    MLP width (4 × hidden); the word-embedding LayerNorm is one more norm: 559,214,592 parameters as the catalog."""
    bloom = {
        "model_type": "bloom",
        "n_embed": 1024,
        "n_layer": 24,
        "num_attention_heads": 16,
        "vocab_size": 250880,
        "seq_length": 2048,
    }
    model = arch_from_hf_config(bloom, "bigscience/bloom-560m")
    assert (model.hidden, model.layers, model.heads, model.intermediate) == (1024, 24, 16, 4096)
    assert model.norm == "layernorm" and model.mlp == "gelu" and model.attn_bias and model.mlp_bias
    assert param_count(model) == 559_214_592
