"""Layer kinds of models with more than one stack of blocks, and the count of models with no vocabulary: what
vramlens reads from a config.json equals transformers' meta build of it (tests/knowledge/test_inventory.py)."""

from __future__ import annotations

import pytest
from test_inventory import _meta_build, dump  # noqa: F401  (the fixture)
from vramlens.knowledge.models import GENERIC_NOTE, arch_from_hf_config, param_count


@pytest.mark.parametrize(("audio", "text"), [(3, 9), (12, 5), (6, 6)])
def test_the_layers_counted_are_those_of_the_longest_stack(dump, audio, text):  # noqa: F811
    """AudioFlamingo3 holds an audio encoder's layers beside its language model's (transformers 5.24
    models/audioflamingo3/modeling_audioflamingo3.py): the layers by kind are those of the deeper stack, the audio
    tower where both are as deep (the shorter name), as trace/inventory.py `measure` counts them."""
    config = {
        "model_type": "audioflamingo3",
        "audio_config": {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4},
        "text_config": {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4},
    }
    config["audio_config"]["num_hidden_layers"] = audio
    config["text_config"]["num_hidden_layers"] = text
    config["text_config"].update(num_key_value_heads=2, vocab_size=256, model_type="qwen2")
    config["audio_config"]["model_type"] = "audioflamingo3_encoder"
    with dump.quiet_and_quick():
        _, expected, kinds = _meta_build(dump, "audioflamingo3", config)
    arch = arch_from_hf_config(config, "org/audioflamingo3")
    assert dict(arch.layer_kinds) == kinds
    assert param_count(arch) == expected


def test_a_model_with_no_vocabulary_is_counted_from_its_inventory(dump):  # noqa: F811
    """An audio encoder's config.json (no vocabulary: no language model) is read: the parameters transformers
    builds, and what the estimate does not model said, never as layers sized as attention."""
    config = {
        "model_type": "audioflamingo3_encoder",
        "hidden_size": 96,
        "intermediate_size": 320,
        "num_attention_heads": 4,
        "num_hidden_layers": 5,
    }
    with dump.quiet_and_quick():
        _, expected, kinds = _meta_build(dump, "audioflamingo3_encoder", config)
    arch = arch_from_hf_config(config, "org/audio-encoder")
    assert param_count(arch) == expected
    assert dict(arch.layer_kinds) == kinds
    assert "AudioFlamingo3Encoder is not a language model" in arch.approximate
    assert GENERIC_NOTE not in arch.approximate
