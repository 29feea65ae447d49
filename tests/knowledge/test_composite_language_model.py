"""A composite's language model counted from its text_config: the head's tie as transformers 5.24 decides it (the
composite's own config), and an omni thinker's language model counted as the thinker builds it."""

from __future__ import annotations

import json

import pytest
from test_inventory import dump  # noqa: F401  (the fixture)
from vramlens.knowledge.models import arch_from_hf_config, param_count

TEXT = {
    "model_type": "qwen3_vl_moe_text",
    "hidden_size": 64,
    "intermediate_size": 160,
    "moe_intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 1000,
}
VISION = {"model_type": "qwen3_vl_moe_vision", "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4}


@pytest.mark.parametrize(
    ("outer", "text", "tied"),
    [
        # Qwen3VLMoeConfig's default (False) decides, not Qwen3VLMoeTextConfig's (True)
        (None, True, False),
        (None, None, False),
        (True, False, True),
        (False, True, False),
    ],
)
def test_a_vlm_head_is_tied_by_the_composite_config(outer, text, tied):
    """transformers 5.24 modeling_utils.py `get_expanded_tied_weights_keys` reads `self.config.tie_word_embeddings`
    of `Qwen3VLMoeForConditionalGeneration`: the outer config's flag, its class default where config.json has none."""
    config = {"model_type": "qwen3_vl_moe", "text_config": dict(TEXT), "vision_config": VISION}
    if outer is not None:
        config["tie_word_embeddings"] = outer
    if text is not None:
        config["text_config"]["tie_word_embeddings"] = text
    arch = arch_from_hf_config(config, "org/qwen3-vl-moe")
    assert arch is not None and arch.tied_embeddings is tied
    assert dict(arch.params_by_kind).get("lm-head", 0) == (0 if tied else TEXT["vocab_size"] * TEXT["hidden_size"])


@pytest.mark.parametrize("model_type", ["qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"])
def test_an_omni_thinker_counts_its_language_model_as_built(dump, model_type):  # noqa: F811
    """The thinker's language model (transformers 5.24 `Qwen2_5OmniThinkerTextModel`, `Qwen3OmniMoeThinkerTextModel`,
    which no auto mapping names) is counted as transformers builds it, with the thinker's untied head; the audio
    tower is said to be left out."""
    from transformers import AutoConfig

    with dump.quiet_and_quick():
        config_cls = type(AutoConfig.for_model(model_type))
        thinker = config_cls.from_dict(dump.tiny(config_cls().to_dict()))
        text_cfg, text_model = dump.build(type(thinker.text_config), thinker.text_config.to_dict())
    expected = sum(p.numel() for p in text_model.parameters())
    if not thinker.tie_word_embeddings:
        expected += text_cfg.hidden_size * text_cfg.vocab_size  # `…ThinkerForConditionalGeneration.lm_head`
    written = {**json.loads(thinker.to_json_string(use_diff=True)), "model_type": model_type}
    arch = arch_from_hf_config(written, f"org/{model_type}")
    assert arch is not None
    assert "every layer sized as attention" not in arch.approximate
    assert "audio tower not counted" in arch.approximate
    assert param_count(arch) == expected
    assert arch.vision_params > 0
