"""Hybrid models whose config.json need not write which layer is of which kind: the config class computes its layer
lists from other fields (a checkpoint's own spelling, a group size, a repeated pattern, per-layer overrides), and
the parameter count from the bundled inventory (`knowledge.inventory.build`) equals what transformers builds from
that config.json on the meta device."""

from __future__ import annotations

import json

import pytest
from vramlens.knowledge import inventory
from vramlens.knowledge.models import arch_from_hf_config, param_count

_TOKENS = {"pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2}
_SMALL_MOE = {"hidden_size": 128, "moe_intermediate_size": 64, "vocab_size": 512}

CASES = {
    # the checkpoint's spelling: delta-attention sizes and 1-indexed full-attention layers in linear_attn_config
    "kimi_linear written as the checkpoint": (
        "kimi_linear",
        {
            **_SMALL_MOE,
            **_TOKENS,
            "intermediate_size": 256,
            "num_experts": 4,
            "num_hidden_layers": 9,
            "num_attention_heads": 4,
            "first_k_dense_replace": 2,
            "linear_attn_config": {
                "head_dim": 32,
                "num_heads": 4,
                "short_conv_kernel_size": 4,
                "full_attn_layers": [2, 5, 9],
                "kda_layers": [1, 3, 4, 6, 7, 8],
            },
        },
    ),
    "kimi_linear without layer lists": (
        "kimi_linear",
        {**_SMALL_MOE, **_TOKENS, "intermediate_size": 256, "num_experts": 4, "num_hidden_layers": 10},
    ),
    "bailing_hybrid by layer_group_size": (
        "bailing_hybrid",
        {
            **_SMALL_MOE,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "intermediate_size": 256,
            "num_experts": 4,
            "num_hidden_layers": 9,
            "num_attention_heads": 4,
            "head_dim": 32,
            "layer_group_size": 4,
            "first_k_dense_replace": 3,
        },
    ),
    "inkling_text by local_layer_ids": (
        "inkling_text",
        {**_SMALL_MOE, "n_routed_experts": 4, "num_hidden_layers": 7, "local_layer_ids": [0, 2, 3]},
    ),
    "inkling2_text, every sixth layer full": (
        "inkling2_text",
        {**_SMALL_MOE, "n_routed_experts": 4, "num_hidden_layers": 20, "eos_token_id": 1},
    ),
    # RecurrentGemma: block_types repeated over the layers, the default layer count
    "recurrent_gemma, 26 layers": ("recurrent_gemma", {}),
    "recurrent_gemma, another block pattern": (
        "recurrent_gemma",
        {"num_hidden_layers": 7, "block_types": ["recurrent", "attention"]},
    ),
    # Gemma-4: the full-attention layers' head size from global_head_dim, written back as per_layer_config
    "gemma4_text, full-attention layers of another head size": (
        "gemma4_text",
        {"num_hidden_layers": 13, "global_head_dim": 256, "head_dim": 128},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_layers_the_config_class_computes_are_counted_as_it_builds_them(case):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    if transformers.__version__ != inventory.version():
        pytest.skip(f"inventories are of transformers {inventory.version()}, {transformers.__version__} is installed")
    from transformers import AutoConfig
    from vramlens.trace.inventory import model_class

    def builds(config: dict) -> int:
        cfg = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
        with torch.device("meta"):
            model = model_class(model_type, type(cfg))._from_config(cfg)
        return sum(p.numel() for p in model.parameters())

    model_type, written = CASES[case]
    # the config.json as a person writes it, and as save_pretrained writes it (Gemma-4: per_layer_config)
    saved = {**json.loads(AutoConfig.for_model(model_type, **written).to_json_string(use_diff=True))}
    for config in ({**written, "model_type": model_type}, {**saved, "model_type": model_type}):
        expected = builds(config)
        built = inventory.build(config, model_type)
        assert built is not None and built.approximate == ""
        assert built.total == expected
        arch = arch_from_hf_config(config, f"org/{model_type}")
        assert arch is not None and param_count(arch) == expected
