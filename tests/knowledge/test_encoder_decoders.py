"""Encoder-decoders counted as transformers builds them: a model_type with a seq2seq class is that class (not its
decoder alone); a composite config (`encoder` and `decoder` sub-configs) is read from its decoder's sizes and
counted whole; and the inventory's formulas for what such models hold (a ViT's position embeddings, a speech
encoder's convolutions of different shapes, a head tied inside the decoder)."""

from __future__ import annotations

import json

import pytest
from test_inventory import _meta_build, dump  # noqa: F401  (the fixture)
from vramlens.knowledge import inventory
from vramlens.knowledge.models import arch_from_hf_config, param_count

# facebook/bart-large's config.json sizes (Hugging Face Hub)
BART_LARGE = {
    "model_type": "bart",
    "d_model": 1024,
    "encoder_layers": 12,
    "decoder_layers": 12,
    "encoder_attention_heads": 16,
    "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "decoder_ffn_dim": 4096,
    "vocab_size": 50265,
    "max_position_embeddings": 1024,
}


def _bert(hidden: int, layers: int, **extra) -> dict:
    return {
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "intermediate_size": 2 * hidden,
        "vocab_size": 512,
        **extra,
    }


def _decoder(hidden: int, layers: int, **extra) -> dict:
    """A BERT decoder as `EncoderDecoderConfig.from_encoder_decoder_configs` writes it (transformers 5.24
    models/encoder_decoder/configuration_encoder_decoder.py: is_decoder and add_cross_attention set)."""
    return _bert(hidden, layers, is_decoder=True, add_cross_attention=True, **extra)


def _written(model_type: str, **sizes) -> dict:
    """A sub-config as save_pretrained writes it: every field, those the config class computes included (ViT's
    pooler_output_size, wav2vec2's output_hidden_size: the hidden size where left out)."""
    from transformers import AutoConfig

    return {**AutoConfig.for_model(model_type, **sizes).to_dict(), "model_type": model_type}


def _counted(config: dict):
    arch = arch_from_hf_config(json.loads(json.dumps(config)), f"org/{config['model_type']}")
    assert arch is not None, f"{config['model_type']}: config.json not read"
    return arch


def test_the_inventory_of_an_encoder_decoder_is_its_seq2seq_class():
    """BART's, Marian's, Pegasus's inventories are of the whole model, not of `…ForCausalLM` (the decoder alone)."""
    models = inventory._data()["models"]
    assert models["bart"]["class"] == "BartForConditionalGeneration"
    assert models["marian"]["class"] == "MarianMTModel"
    assert models["pegasus"]["class"] == "PegasusForConditionalGeneration"


def test_bart_large_counts_encoder_and_decoder(dump):  # noqa: F811
    from vramlens.trace.inventory import model_class

    assert model_class("bart").__name__ == "BartForConditionalGeneration"
    arch = _counted(BART_LARGE)
    with dump.quiet_and_quick():
        _, expected, kinds = _meta_build(dump, "bart", BART_LARGE)
    assert (arch.block, arch.encoder_layers, arch.layers) == ("encoder-decoder", 12, 12)
    assert param_count(arch) == expected == 406_291_456  # the published "406M"
    assert dict(arch.layer_kinds) == kinds


def _composite(model_type: str) -> dict:
    if model_type == "encoder-decoder":  # EncoderDecoderModel of two BERTs of other sizes than the defaults
        return {"model_type": model_type, "encoder": _bert(128, 3), "decoder": _decoder(128, 5)}
    return {  # VisionEncoderDecoderModel: the outer config says untied, the decoder ties its own head
        "model_type": model_type,
        "tie_word_embeddings": False,
        "encoder": _written(
            "vit",
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=192,
            image_size=64,
            patch_size=8,
        ),
        "decoder": _decoder(128, 3, tie_word_embeddings=True),
    }


@pytest.mark.parametrize("model_type", ["encoder-decoder", "vision-encoder-decoder"])
def test_a_composite_encoder_decoder_is_read_from_its_decoder_and_counted_whole(dump, model_type):  # noqa: F811
    config = _composite(model_type)
    arch = _counted(config)
    with dump.quiet_and_quick():
        _, expected, _ = _meta_build(dump, config["model_type"], config)
    assert arch.block == "encoder-decoder"
    assert (arch.hidden, arch.layers) == (128, config["decoder"]["num_hidden_layers"])
    assert arch.encoder_layers == config["encoder"]["num_hidden_layers"]
    assert param_count(arch) == expected
    assert "every layer sized as attention" not in arch.approximate


def test_a_sub_config_of_another_model_than_the_inventorys_is_approximate():
    """The composite's inventory is of BERT + BERT: a GPT-2 decoder is not what it counts, and that is said."""
    gpt2 = {"model_type": "gpt2", "n_embd": 128, "n_layer": 3, "n_head": 4, "vocab_size": 512}
    arch = _counted({"model_type": "encoder-decoder", "encoder": _bert(128, 3), "decoder": gpt2})
    assert "decoder is gpt2" in arch.approximate


def test_an_encoder_of_another_width_than_the_decoder_is_approximate():
    """The projection between them (`enc_to_dec_proj`) is built only where the widths differ; the reference build
    has them equal."""
    arch = _counted({"model_type": "encoder-decoder", "encoder": _bert(96, 3), "decoder": _decoder(128, 3)})
    assert "encoder.hidden_size differs from decoder.hidden_size" in arch.approximate


def test_a_decoder_without_cross_attention_is_approximate():
    """The inventory is measured with the decoder's cross-attention (`decoder.add_cross_attention`): a config.json
    without it builds fewer parameters, and that is said."""
    arch = _counted(
        {"model_type": "encoder-decoder", "encoder": _bert(128, 3), "decoder": _bert(128, 3, add_cross_attention=False)}
    )
    assert "decoder.add_cross_attention=false" in arch.approximate


def test_a_decoder_that_writes_decoder_sizes_is_read(dump):  # noqa: F811
    """TrOCR's decoder writes `decoder_layers`, `decoder_attention_heads`, `decoder_ffn_dim` only."""
    config = {
        "model_type": "trocr",
        "d_model": 128,
        "decoder_layers": 3,
        "decoder_attention_heads": 4,
        "decoder_ffn_dim": 256,
        "vocab_size": 512,
    }
    arch = _counted(config)
    with dump.quiet_and_quick():
        _, expected, _ = _meta_build(dump, "trocr", config)
    assert (arch.hidden, arch.layers, arch.heads) == (128, 3, 4)
    assert param_count(arch) == expected


def test_a_product_of_powers_plus_a_constant_is_fitted(dump):  # noqa: F811
    """A ViT's position embeddings: (image_size / patch_size)² + 1, from the base build (224 / 16: 197) and the
    builds with one field doubled (785, 50)."""
    candidates = dump._product_plus_constant(
        197,
        {"image_size": 785, "patch_size": 50, "hidden_size": 197},
        {"image_size": 224, "patch_size": 16, "hidden_size": 64},
    )
    assert [[1, {"image_size": 2, "patch_size": -2}], [1, {}]] in candidates


def test_occurrences_of_different_shapes_are_counted_by_their_total(dump):  # noqa: F811
    """wav2vec2's feature encoder (a first convolution of one input channel, then 512 → 512) in a speech
    encoder-decoder: the pattern's total, not its occurrences times one shape."""
    pattern = "encoder.feature_extractor.conv_layers.{i}.conv.weight"
    config = {
        "model_type": "speech-encoder-decoder",
        "encoder": _written(
            "wav2vec2", hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=192
        ),
        "decoder": _decoder(128, 3, tie_word_embeddings=True),
    }
    built = inventory.build(config, "speech-encoder-decoder")
    assert pattern not in built.approximate
    from transformers import AutoConfig

    with dump.quiet_and_quick():
        _, model = dump.build(type(AutoConfig.for_model("speech-encoder-decoder")), config)
    convs = sum(p.numel() for n, p in model.named_parameters() if dump._INDEX.sub(".{i}", n) == pattern)
    entry = next(e for e in inventory._data()["models"]["speech-encoder-decoder"]["params"] if e["p"] == pattern)
    assert round(inventory._eval(entry["total"], {})) == convs  # conv_dim, conv_kernel: the defaults
