"""Every model_type of the installed transformers, read as a user's config.json would be: the parameter count and the
layer kinds vramlens gives (`knowledge.models.arch_from_hf_config`, then `param_count`) equal what transformers' own
classes build from that config on the meta device.

The default run checks a fixed sample (the language models vramlens is most used for, and a deterministic slice of
the rest); `VRAMLENS_ALL_MODEL_TYPES=1` checks every model_type with an inventory. A model_type that cannot be built
is recorded with its reason in the inventories' "skipped" (scripts/dump_model_inventories.py); any other model_type
with a model class must have an inventory.
"""

from __future__ import annotations

import json

import pytest
from test_inventory import ALL, _meta_build, _variant, dump, sample  # noqa: F401  (the fixture)
from vramlens.knowledge import inventory
from vramlens.knowledge.models import arch_from_hf_config, param_count


def _selected() -> list[str]:
    return sample(inventory._data()["models"])


# model_types where what vramlens reports from a config.json is not yet what transformers builds from it, and why
# (from a VRAMLENS_ALL_MODEL_TYPES=1 run); the list may only shrink: a model_type that comes out exact fails here
# until it is taken off
KNOWN = {
    # its language model does not build from text_config alone
    **dict.fromkeys(
        ("aimv2", "align", "altclip", "blip", "mllama"), "its language model does not build from text_config alone"
    ),
    # config.json not read: no reading of its sizes (encoder-decoders, audio, Nemotron-H)
    **dict.fromkeys(
        (
            "aimv2_vision_model",
            "audio-spectrogram-transformer",
            "audioflamingo3_encoder",
            "bigbird_pegasus",
            "blt",
            "encoder-decoder",
            "ernie4_5_vl_moe",
            "fsmt",
            "kosmos-2",
            "kosmos-2.5",
            "musicgen",
            "musicgen_melody",
            "trocr",
            "xlm",
            "dac",
            "deimv2",
            "superpoint",
            "t5gemma2",
            "vision-encoder-decoder",
        ),
        "config.json not read",
    ),
    # labelled approximate: a quantity of the inventory does not follow its formula
    **dict.fromkeys(
        (
            "albert",
            "audioflamingo3",
            "bailing_hybrid",
            "chameleon",
            "ctrl",
            "dbrx",
            "deepseek_v4",
            "dots3_note",
            "dots3_note_text",
            "emu3",
            "ernie4_5_moe",
            "evolla",
            "flint",
            "gemma4",
            "gemma4_text",
            "gemma4_unified",
            "gemma4_unified_assistant",
            "gemma4_unified_text",
            "git",
            "glmasr",
            "granite_speech",
            "idefics",
            "inkling2",
            "inkling2_loop",
            "inkling2_loop_text",
            "inkling2_text",
            "inkling_mm_model",
            "inkling_text",
            "kimi_linear",
            "mimo_v2_flash",
            "moss_transcribe_diarize",
            "phi4_multimodal",
            "qwen3_next",
            "zamba2",
            "udop",
        ),
        "labelled approximate",
    ),
    # a dedicated formula is kept where the inventory differs from it by more than 5 %
    **dict.fromkeys(
        (
            "bart",
            "falcon",
            "florence2",
            "llama4",
            "llama4_text",
            "marian",
            "mbart",
            "pegasus",
            "qwen2_moe",
            "qwen3_moe",
            "recurrent_gemma",
        ),
        "a dedicated formula is kept where the inventory differs from it by more than 5 %",
    ),
    # encoder: the family formula (its head depends on the task)
    **dict.fromkeys(("bert", "camembert", "electra", "roberta", "modernbert", "xlm-roberta"), "encoder"),
    # composite whose language model's model_type has no inventory: sized from the config's sizes
    **dict.fromkeys(
        ("pix2struct", "step3p7", "glm5_next", "mistral_large4"),
        "composite whose language model's model_type has no inventory",
    ),
    # count differs (an interplay of fields the reference builds do not separate)
    **dict.fromkeys(("cpmant",), "count differs (an interplay of fields the reference builds do not separate)"),
}


def _user_config(cfg, model_type: str) -> dict:
    """What save_pretrained writes: the values that differ from the config class's defaults, and the model_type."""
    return {**json.loads(cfg.to_json_string(use_diff=True)), "model_type": model_type}


def test_every_model_type_with_a_class_is_inventoried_or_skipped_with_a_reason(dump):  # noqa: F811
    """No model_type of the installed transformers is left out silently: each language model (a causal-LM or
    image-text-to-text class; with VRAMLENS_ALL_MODEL_TYPES=1 every model_type with a model class) has an
    inventory, or is recorded as not building, with the error."""
    from transformers.models.auto import modeling_auto as ma
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from vramlens.trace.inventory import model_class

    data = inventory._data()
    language = {*ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, *ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES}
    types = sorted(CONFIG_MAPPING_NAMES) if ALL else sorted(language & set(CONFIG_MAPPING_NAMES))
    missing = [t for t in types if t not in data["models"] and t not in data["skipped"] and model_class(t)]
    assert not missing, f"{len(missing)} model_types neither inventoried nor skipped: {missing[:20]}"
    assert all(isinstance(r, str) and r for r in data["skipped"].values())
    assert not set(data["models"]) & set(data["skipped"])


@pytest.mark.parametrize("model_type", _selected())
def test_config_json_counts_as_transformers_builds_it(dump, model_type):  # noqa: F811
    """0 % error on the parameter count and the same layer kinds, for a config of other sizes than the inventory
    was measured on (sizes doubled in turn, an odd layer count); a model_type with an inventory is never reported
    as "every layer sized as attention"."""
    with dump.quiet_and_quick():
        for config in _variant(dump, model_type):
            try:
                cfg, expected, kinds = _meta_build(dump, model_type, config)
            except Exception as error:  # this variant does not build: the next one
                reason = f"{type(error).__name__}: {error}"
                continue
            break
        else:
            pytest.fail(f"{model_type} has an inventory and no longer builds: {reason}")
    written = _user_config(cfg, model_type)
    arch = arch_from_hf_config(written, f"org/{model_type}")
    text = getattr(cfg, "text_config", None)
    if isinstance(written.get("vision_config"), dict) and text is not None and arch is not None:
        # a VLM: its language model is counted from text_config (the vision tower is sized apart, `vision_params`),
        # so the reference is transformers' build of that text_config alone
        with dump.quiet_and_quick():
            try:
                text_cfg, text_model = dump.build(type(text), text.to_dict())
            except Exception:  # no reference for what vramlens counts
                text_cfg = text_model = None
            if text_model is not None:
                quantities = dump.measure(text_model, text_cfg)[0]
                kinds = {k[1]: v for k, v in quantities.items() if k[0] == "k" and k[1] != "other"}
                expected = sum(p.numel() for p in text_model.parameters())
                tied = getattr(cfg, "tie_word_embeddings", getattr(text, "tie_word_embeddings", True))
                if text_model.get_output_embeddings() is None and tied is False:
                    # a base text model: the untied head is the outer model's (`…ForConditionalGeneration.lm_head`,
                    # text hidden × vocabulary, no bias)
                    expected += text.hidden_size * text.vocab_size
            else:
                expected = -1
    exact = (
        arch is not None
        and "every layer sized as attention" not in arch.approximate
        and (param_count(arch), dict(arch.layer_kinds)) == (expected, kinds)
    )
    if model_type in KNOWN:
        if not exact:
            pytest.xfail(KNOWN[model_type])
        pytest.fail(f"{model_type} is exact now: take it off KNOWN")
    assert arch is not None, f"{model_type}: config.json not read"
    assert "every layer sized as attention" not in arch.approximate
    assert (param_count(arch), dict(arch.layer_kinds)) == (expected, kinds)
