"""Published config.json files of encoders and older language models, counted as transformers builds the class
their `architectures` names (on the meta device): the task head an encoder's config.json names, ELECTRA's embedding
projection (built only where embedding_size differs from hidden_size), CTRL's two feed-forward linears, CpmAnt's
untied head, XLM's `emb_dim`."""

from __future__ import annotations

import pytest
from vramlens.knowledge.models import arch_from_hf_config, param_count

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# sizes as the published config.json files write them
BERT_BASE = {  # google-bert/bert-base-uncased
    "model_type": "bert",
    "architectures": ["BertForMaskedLM"],
    "hidden_size": 768,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}
ELECTRA_SMALL_GENERATOR = {  # google/electra-small-generator: embeddings narrower than the layers
    "model_type": "electra",
    "architectures": ["ElectraForMaskedLM"],
    "embedding_size": 128,
    "hidden_size": 256,
    "intermediate_size": 1024,
    "max_position_embeddings": 512,
    "num_attention_heads": 4,
    "num_hidden_layers": 12,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}
# google/electra-base-generator: embeddings wider than the layers; an ELECTRA whose embeddings are as wide as its
# layers builds no projection
ELECTRA_BASE_GENERATOR = {**ELECTRA_SMALL_GENERATOR, "embedding_size": 768, "intermediate_size": 1024}
ELECTRA_AS_WIDE = {**ELECTRA_SMALL_GENERATOR, "embedding_size": 256}
CTRL = {  # Salesforce/ctrl
    "model_type": "ctrl",
    "architectures": ["CTRLLMHeadModel"],
    "dff": 8192,
    "n_embd": 1280,
    "n_head": 16,
    "n_layer": 48,
    "n_positions": 50000,
    "vocab_size": 246534,
}
CPMANT = {  # openbmb/cpm-ant-10b, with 4 of its 48 layers
    "model_type": "cpmant",
    "architectures": ["CpmAntForCausalLM"],
    "dim_ff": 10240,
    "dim_head": 128,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 4,
    "prompt_length": 32,
    "prompt_types": 32,
    "segment_types": 32,
    "vocab_size": 30720,
}
XLM = {  # FacebookAI/xlm-mlm-en-2048
    "model_type": "xlm",
    "architectures": ["XLMWithLMHeadModel"],
    "emb_dim": 2048,
    "max_position_embeddings": 512,
    "n_heads": 16,
    "n_langs": 1,
    "n_layers": 12,
    "vocab_size": 30145,
}


def _built(config: dict, name: str) -> int:
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
    with torch.device("meta"):
        model = getattr(transformers, name)._from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "config",
    [BERT_BASE, ELECTRA_SMALL_GENERATOR, ELECTRA_BASE_GENERATOR, ELECTRA_AS_WIDE, CTRL, CPMANT, XLM],
    ids=["bert", "electra-small", "electra-base", "electra-equal", "ctrl", "cpmant", "xlm"],
)
def test_config_json_counts_the_class_it_names(config):
    arch = arch_from_hf_config(config, f"org/{config['model_type']}")
    assert arch is not None
    assert param_count(arch) == _built(config, config["architectures"][0])
    assert not arch.approximate


@pytest.mark.parametrize("head", ["BertForSequenceClassification", "BertForPreTraining", None])
def test_an_encoder_head_the_inventory_does_not_count_is_said(head):
    """A config.json naming a head other than the one counted (or none) says which head was counted."""
    config = {**BERT_BASE, "architectures": [head] if head else None}
    arch = arch_from_hf_config(config, "org/bert")
    assert arch is not None
    assert param_count(arch) == _built(BERT_BASE, "BertForMaskedLM")
    assert "task head" in arch.approximate and "BertLMHeadModel" in arch.approximate
    if head:
        assert head in arch.approximate


def test_a_field_that_builds_parameters_the_reference_lacks_is_said():
    """XLM builds `lang_embeddings` only where n_langs > 1 (transformers 5.24 models/xlm/modeling_xlm.py
    `XLMModel.__init__`); its inventory is measured with one language (FacebookAI/xlm-mlm-enfr-1024 has two)."""
    arch = arch_from_hf_config({**XLM, "n_langs": 2}, "org/xlm")
    assert arch is not None
    assert "n_langs" in arch.approximate
