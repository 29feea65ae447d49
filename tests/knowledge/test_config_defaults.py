"""A config.json as `save_pretrained` writes it leaves out every value equal to its config class's default
(transformers 5.24 configuration_utils.py `PreTrainedConfig.to_json_string(use_diff=True)`), also inside its
sub-configs: the sizes left out are read as those defaults (knowledge/inventory.py `with_defaults`), as transformers
reads them."""

from __future__ import annotations

import pytest
from test_inventory import _meta_build, dump  # noqa: F401  (the fixture)
from vramlens.knowledge.models import arch_from_hf_config, param_count


def test_a_vlm_config_json_that_writes_no_sizes_is_read_as_its_class_defaults():
    """PaliGemma's config.json (PaliGemma-3B's sizes are `PaliGemmaConfig`'s defaults, its outer `hidden_size` the
    projector's width) is its language model at the defaults of `PaliGemmaConfig.text_config`."""
    transformers = pytest.importorskip("transformers")

    text = transformers.PaliGemmaConfig().text_config
    arch = arch_from_hf_config({"model_type": "paligemma", "hidden_size": 4096}, "org/paligemma")
    assert arch is not None
    assert (arch.hidden, arch.layers, arch.heads, arch.vocab, arch.intermediate) == (
        text.hidden_size,
        text.num_hidden_layers,
        text.num_attention_heads,
        text.vocab_size,
        text.intermediate_size,
    )
    written = arch_from_hf_config({"model_type": "paligemma", "text_config": text.to_dict()}, "org/paligemma")
    assert written is not None and param_count(arch) == param_count(written)


def test_a_model_built_around_a_vlm_is_read_as_that_vlm_and_says_what_it_leaves_out():
    """ColPali (transformers 5.24 models/colpali/modeling_colpali.py `ColPaliForRetrieval`: `self.vlm` from
    `config.vlm_config`, and an embedding projection) is read as its PaliGemma; the count says it leaves out the
    projection."""
    pytest.importorskip("transformers")
    arch = arch_from_hf_config({"model_type": "colpali", "vlm_config": {"model_type": "paligemma"}}, "org/colpali")
    paligemma = arch_from_hf_config({"model_type": "paligemma"}, "org/paligemma")
    assert arch is not None and paligemma is not None
    assert param_count(arch) == param_count(paligemma)
    assert "the parameters colpali adds to it are not" in arch.approximate


def test_a_token_type_vocabulary_is_no_vocabulary(dump):  # noqa: F811
    """CANINE hashes characters (`num_hash_buckets`) and writes only `type_vocab_size` (google/canine-s's config.json
    writes it, 16): counted from its inventory, as transformers builds it, and said to be no language model."""
    with dump.quiet_and_quick():
        _, expected, _ = _meta_build(dump, "canine", {})
    arch = arch_from_hf_config({"model_type": "canine", "type_vocab_size": 16}, "org/canine")
    assert arch is not None
    assert param_count(arch) == expected
    assert "CanineModel is not a language model" in arch.approximate
