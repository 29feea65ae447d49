"""A family that writes its sizes in sub-configs (DBRX's `attn_config` and `ffn_config`) is read with them: its
K/V heads, experts, experts per token and expert width, as transformers builds the model from them."""

from __future__ import annotations

import pytest
from vramlens.knowledge.models import arch_from_hf_config

DBRX_BASE = {  # databricks/dbrx-base config.json (sizes as published)
    "model_type": "dbrx",
    "architectures": ["DbrxForCausalLM"],
    "d_model": 6144,
    "n_heads": 48,
    "n_layers": 40,
    "max_seq_len": 32768,
    "vocab_size": 100352,
    "tie_word_embeddings": False,
    "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
    "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4},
}


def test_dbrx_is_read_with_its_nested_sizes():
    arch = arch_from_hf_config(DBRX_BASE, "databricks/dbrx-base")
    assert arch is not None
    assert (arch.kv_heads, arch.num_experts, arch.experts_per_token) == (8, 16, 4)
    assert arch.moe_intermediate == 10752 and arch.hidden == 6144 and arch.layers == 40


def test_dbrx_count_is_the_published_total():
    """132 B parameters (Databricks' model card: 132B total, 36B active) — transformers' own build on `meta`."""
    pytest.importorskip("transformers")
    arch = arch_from_hf_config(DBRX_BASE, "databricks/dbrx-base")
    assert arch.params_total == pytest.approx(131.6e9, rel=0.005)
    assert not arch.approximate
