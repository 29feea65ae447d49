"""Remote-code models (`auto_map`) are never built: the ones whose layers are written from their published modeling
file are counted by construction; any other is approximate and says why."""

from vramlens.knowledge.models import arch_from_hf_config, param_count

# Qwen/Qwen-7B config.json (Hugging Face Hub), the sizing keys
QWEN_7B = {
    "architectures": ["QWenLMHeadModel"],
    "auto_map": {
        "AutoConfig": "configuration_qwen.QWenConfig",
        "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel",
    },
    "model_type": "qwen",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "intermediate_size": 22016,
    "vocab_size": 151936,
    "kv_channels": 128,
    "no_bias": True,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
}


def test_qwen1_mlp_is_half_its_intermediate_size():
    """modeling_qwen.py QWenMLP: w1, w2 are hidden × intermediate_size / 2 — 7.72 B parameters for Qwen-7B (the model
    card's 7.7 B), not the 12 B a reading of intermediate_size as the MLP width gives."""
    arch = arch_from_hf_config(QWEN_7B, "Qwen/Qwen-7B")
    assert arch.intermediate == 11008
    assert param_count(arch) == 7_721_324_544
    assert arch.approximate == ""


def test_qwen1_other_sizes_scale_the_same_way():
    small = {
        **QWEN_7B,
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 11008,
        "kv_channels": 128,
    }
    arch = arch_from_hf_config(small, "Qwen/Qwen-1_8B")
    per_layer = 2048 * 3 * 2048 + 3 * 2048 + 2048 * 2048 + 3 * 2048 * 5504 + 2 * 2048
    assert param_count(arch) == 24 * per_layer + 2 * 151936 * 2048 + 2048


def test_other_remote_code_models_are_approximate_and_say_why():
    # internlm/internlm2_5-7b-chat config.json (Hugging Face Hub), the sizing keys: InternLM2's own modeling file
    internlm2 = {
        "auto_map": {"AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
        "model_type": "internlm2",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 92544,
    }
    arch = arch_from_hf_config(internlm2, "internlm/internlm2_5-7b-chat")
    assert "remote code: not built" in arch.approximate
