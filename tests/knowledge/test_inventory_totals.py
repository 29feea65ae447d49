"""Totals of occurrences of different shapes (scripts/dump_model_inventories.py `entry["total"]`): a fit that can be
no number of parameters is recorded as not scaled exactly, and a config.json counted with it is labelled
approximate."""

from __future__ import annotations

from test_inventory import dump  # noqa: F401  (the fixture)
from vramlens.knowledge import inventory
from vramlens.knowledge.models import arch_from_hf_config


def test_a_total_fitted_as_no_count_is_rejected(dump):  # noqa: F811
    """transformers 5.24 models/lw_detr/modeling_lw_detr.py `LwDetrModel.__init__`: group_detr (13)
    `LwDetrMLPPredictionHead(d_model, d_model, 4, num_layers=3)`, weights 13 · (2 · d_model² + 4 · d_model); builds
    at d_model 256 and 512 alone fit it as 20020 · d_model − 3407872, below zero under d_model 171 (fails before the
    check: the reference builds moved d_model only by doubling). A fit that stays a count where a field is halved
    is kept, negative coefficients included."""
    fields = {"d_model": 256}
    assert not dump._countable([[20020, {"d_model": 1}], [-3407872, {}]], fields)
    assert not dump._countable([[26, {"d_model": 1}], [[1, 2], {}]], fields)  # a half parameter
    assert dump._countable([[26, {"d_model": 1}], [52, {}]], fields)  # the biases: 13 · (d_model + d_model + 4)
    # a layer count less the dense ones (DeepSeek-V3's first_k_dense_replace): a negative coefficient is no reason
    assert dump._countable([[1, {"layers": 1}], [-1, {"dense": 1}]], {"layers": 8, "dense": 1})


def test_every_bundled_total_exact_or_labelled(dump):  # noqa: F811
    """No total the bundled inventories count as exact is one that no model of the kind could have."""
    wrong = [
        (model_type, entry["p"])
        for model_type, inv in inventory._data()["models"].items()
        for entry in inv["params"]
        if "total" in entry
        and entry.get("exact") is not False
        and not dump._countable(entry["total"], {f: v[0] for f, v in inv["fields"].items()})
    ]
    assert not wrong, wrong


def test_lw_detr_reads_as_approximate():
    """LW-DETR's enc_out_bbox_embed heads (`test_a_total_fitted_as_no_count_is_rejected`): its count from a
    config.json says that it is approximate, and which parameters are, at its own sizes and at others."""
    for config in ({"model_type": "lw_detr"}, {"model_type": "lw_detr", "d_model": 128}):
        arch = arch_from_hf_config(config, "org/lw_detr")
        assert arch is not None
        assert "enc_out_bbox_embed" in arch.approximate
