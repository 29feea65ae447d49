"""Vision-language composites read from a config.json: the language model counted from `text_config` where a class
of transformers builds it alone, the whole composite where none does (knowledge/models.py `_by_construction`); each
count equals transformers' meta build (tests/knowledge/test_inventory.py)."""

from __future__ import annotations

import pytest
from test_inventory import _meta_build, dump  # noqa: F401  (the fixture)
from vramlens.knowledge.models import WHOLE_COMPOSITE_NOTE, arch_from_hf_config, param_count

TEXT = {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4, "vocab_size": 256}
VISION = {"hidden_size": 32, "intermediate_size": 96, "num_attention_heads": 4}


def test_a_language_sub_config_builds_as_the_causal_lm_mapped_for_its_class():
    """`mllama_text_model` is named by no auto mapping; transformers 5.24 maps `MllamaForCausalLM`, whose
    config_class is `MllamaTextConfig`, under `mllama`: that is the class its config builds."""
    pytest.importorskip("transformers")
    from vramlens.trace.inventory import model_class

    assert model_class("mllama_text_model").__name__ == "MllamaForCausalLM"
    assert model_class("emu3_text_model").__name__ == "Emu3ForCausalLM"
    assert model_class("align_text_model") is None  # a text encoder no causal LM takes


def test_mllama_language_model_counts_its_cross_attention_layers(dump):  # noqa: F811
    """Mllama's language model (`MllamaForCausalLM`: self-attention layers and gated cross-attention layers with
    their own norms and gates) counts as transformers builds it; the vision tower stays apart (`vision_params`)."""
    text = {**TEXT, "num_hidden_layers": 5, "num_key_value_heads": 2, "cross_attention_layers": [1, 3]}
    text.update(pad_token_id=1, bos_token_id=2, eos_token_id=3, tie_word_embeddings=False)  # as Llama-3.2-Vision
    config = {
        "model_type": "mllama",
        "text_config": {**text, "model_type": "mllama_text_model"},
        "vision_config": {
            **dict(hidden_size=32, intermediate_size=96, attention_heads=4, image_size=56, patch_size=14),
            **dict(num_hidden_layers=2, num_global_layers=1, vision_output_dim=64, model_type="mllama_vision_model"),
        },
    }
    with dump.quiet_and_quick():
        _, expected, kinds = _meta_build(dump, "mllama_text_model", {**text, "model_type": "mllama_text_model"})
    arch = arch_from_hf_config(config, "org/mllama")
    assert (param_count(arch), dict(arch.layer_kinds)) == (expected, kinds)
    assert arch.vision_params > 0


@pytest.mark.parametrize(
    ("model_type", "text_type", "vision_type"),
    [("blip", "blip_text_model", "blip_vision_model"), ("altclip", "altclip_text_model", "altclip_vision_model")],
)
def test_a_composite_whose_text_config_builds_nothing_alone_is_counted_whole(
    dump,  # noqa: F811
    model_type,
    text_type,
    vision_type,
):
    """BLIP's text decoder (`BlipTextLMHeadModel`) and AltCLIP's text encoder are built only inside their
    composites: the count is the whole build, vision tower included (so none beside it), and says what is not
    modelled."""
    config = {
        "model_type": model_type,
        "text_config": {**TEXT, "num_hidden_layers": 3, "model_type": text_type},
        "vision_config": {**VISION, "num_hidden_layers": 5, "model_type": vision_type},
    }
    with dump.quiet_and_quick():
        _, expected, kinds = _meta_build(dump, model_type, config)
    arch = arch_from_hf_config(config, f"org/{model_type}")
    assert (param_count(arch), dict(arch.layer_kinds)) == (expected, kinds)
    assert arch.vision_params == 0
    assert WHOLE_COMPOSITE_NOTE in arch.approximate
