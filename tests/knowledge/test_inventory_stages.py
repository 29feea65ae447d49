"""Hierarchical backbones (scripts/dump_model_inventories.py `_Stages`, knowledge/inventory.py `_stages_numel`): a
parameter sized stage by stage, by its stage's index and its entries of per-stage lists, is counted as transformers
builds it from a config.json with other lists than the inventory was measured on; a per-stage list that moves
parameters no formula reads it in makes the count approximate."""

from __future__ import annotations

import json

import pytest
from test_inventory import dump  # noqa: F401  (the fixture)
from vramlens.knowledge import inventory

# published sizes, lists unlike the config classes' defaults: Swin-B (microsoft/swin-base-patch4-window12-384),
# Donut's Swin encoder (naver-clova-ix/donut-base), SegFormer-B2 (nvidia/mit-b2), GLPN-NYU (vinvino02/glpn-nyu)
REAL = {
    "swin": {"embed_dim": 128, "depths": [2, 2, 18, 2], "num_heads": [4, 8, 16, 32], "window_size": 12},
    "maskformer-swin": {"embed_dim": 128, "depths": [2, 2, 18, 2], "num_heads": [4, 8, 16, 32], "window_size": 12},
    "donut-swin": {"embed_dim": 128, "depths": [2, 2, 14, 2], "num_heads": [4, 8, 16, 32], "window_size": 10},
    "segformer": {
        "hidden_sizes": [64, 128, 320, 512],
        "depths": [3, 4, 6, 3],
        "num_attention_heads": [1, 2, 5, 8],
        "decoder_hidden_size": 768,
    },
    "glpn": {"hidden_sizes": [64, 128, 320, 512], "depths": [3, 8, 27, 3], "num_attention_heads": [1, 2, 5, 8]},
}


def _built(dump, model_type: str, sizes: dict) -> tuple[dict, int]:  # noqa: F811
    """What save_pretrained writes for the config class's defaults with `sizes`, and transformers' meta build of it."""
    from transformers import AutoConfig

    config = {**AutoConfig.for_model(model_type).to_dict(), **sizes}
    with dump.quiet_and_quick():
        cfg, model = dump.build(type(AutoConfig.for_model(model_type)), config)
    written = {**json.loads(cfg.to_json_string(use_diff=True)), "model_type": model_type}
    return written, sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", sorted(REAL))
def test_stages_count_as_transformers_builds_them(dump, model_type):  # noqa: F811
    """Swin's stages int(embed_dim * 2**i) wide and depths[i] deep with (2 * window_size - 1)**2-row position tables
    (transformers 5.24 models/swin/modeling_swin.py `SwinEncoder`), SegFormer's and GLPN's hidden_sizes[i] wide with
    a sequence-reduction convolution where sr_ratios[i] > 1 and a first patch embedding that reads num_channels
    (models/segformer/modeling_segformer.py): 0 % error, nothing approximate."""
    written, expected = _built(dump, model_type, REAL[model_type])
    built = inventory.build(written, model_type)
    assert built is not None
    assert (built.total, built.approximate) == (expected, "")


def test_the_first_block_of_each_stage_is_counted_apart(dump):  # noqa: F811
    """BiT's first layer in each stage reads the previous stage's width (in_channels, embedding_size in the first
    stage) and the others the stage's own (transformers 5.24 models/bit/modeling_bit.py `BitStage`,
    `BitPreActivationBottleneckLayer`): fitted apart (scripts/dump_model_inventories.py `_lead_pattern`), a
    ResNetV2-101 (timm `resnetv2_101x1_bitm`: depths [3, 4, 23, 3]) is counted exactly, nothing approximate."""
    written, expected = _built(dump, "bit", {"depths": [3, 4, 23, 3]})
    built = inventory.build(written, "bit")
    assert built is not None
    assert (built.total, built.approximate) == (expected, "")


@pytest.mark.parametrize("embedding_size", [128, 256])
def test_a_projection_built_where_the_widths_differ(dump, embedding_size):  # noqa: F811
    """ResNet's shortcut projection (a 1x1 convolution and a norm) is built in a stage's first block only where it
    changes width or stride (transformers 5.24 models/resnet/modeling_resnet.py `ResNetBottleNeckLayer`,
    `ResNetShortCut`): in every stage but the first (stride 2), in the first only where embedding_size !=
    hidden_sizes[0] (256 by default): fitted as a condition on the two (scripts/dump_model_inventories.py
    `_Stages._unequal_options`, knowledge/inventory.py `left_out_where_equal`), counted exactly with a stem as wide
    as the first stage, nothing approximate."""
    written, expected = _built(dump, "resnet", {"embedding_size": embedding_size})
    built = inventory.build(written, "resnet")
    assert built is not None
    assert (built.total, built.approximate) == (expected, "")
    unless = {"of": ["embedding_size", "hidden_sizes[s]"], "first_only": True}
    values = {"embedding_size": 64}
    assert inventory.left_out_where_equal(unless, inventory.stage_values(values, {"hidden_sizes": [64, 128]}, 0), 0)
    assert not inventory.left_out_where_equal(unless, inventory.stage_values(values, {"hidden_sizes": [64, 64]}, 1), 1)
    # RT-DETR's ResNet: an average pool before the shortcut in every stage but the first (transformers 5.24
    # models/rt_detr/modeling_rt_detr_resnet.py `RTDetrResNetBottleNeckLayer`)
    assert inventory.stages_chosen(["but_first"], {}, 4) == [1, 2, 3]


def test_a_list_no_formula_reads_is_labelled(dump):  # noqa: F811
    """FocalNet's focal convolutions: focal_levels[i] per layer, kernels focal_factor * k + focal_windows[i]
    (transformers 5.24 models/focalnet/modeling_focalnet.py `FocalNetModulation`), counted at the lists measured;
    another focal_levels is said to be approximate, the config class's is not."""
    written, _ = _built(dump, "focalnet", {"focal_levels": [3, 3, 3, 3]})
    assert "focal_levels" in inventory.build(written, "focalnet").approximate
    assert "focal_levels" not in inventory.build({"model_type": "focalnet"}, "focalnet").approximate


def test_stage_rules_and_first_stage():
    """The stages a stage entry counts (every one, all but the last, the last, where a list's entry is above one),
    the entries of the stage and the one before it, and the first stage's own formula."""
    lists = {"depths": [2, 2, 6, 2], "sr_ratios": [8, 4, 2, 1]}
    assert inventory.stages_chosen(["all"], lists, 4) == [0, 1, 2, 3]
    assert inventory.stages_chosen(["but_last"], lists, 4) == [0, 1, 2]
    assert inventory.stages_chosen(["last"], lists, 4) == [3]
    assert inventory.stages_chosen(["above_one", "sr_ratios"], lists, 4) == [0, 1, 2]
    values = inventory.stage_values({"embed_dim": 96}, {"hidden_sizes": [32, 64, 160]}, 2)
    assert values == {"embed_dim": 96, "hidden_sizes[s]": 160, "hidden_sizes[s-1]": 64, inventory.STAGE_POWER: 4}
    # SegFormer's patch embeddings: hidden_sizes[i] x (num_channels, else hidden_sizes[i - 1]) x 3 x 3
    entry = {
        "list": "hidden_sizes",
        "in": ["all"],
        "n": [[1, {}]],
        "shape": [[[1, {"hidden_sizes[s]": 1}]], [[1, {"hidden_sizes[s-1]": 1}]], [[3, {}]], [[3, {}]]],
        "first": {
            "n": [[1, {}]],
            "shape": [[[1, {"hidden_sizes[s]": 1}]], [[1, {"num_channels": 1}]], [[3, {}]], [[3, {}]]],
        },
    }
    config = {"hidden_sizes": [32, 64, 160]}
    got = inventory._stages_numel(entry, config, {"num_channels": 3}, {"hidden_sizes": [1, 1]})
    assert got == 9 * (32 * 3 + 64 * 32 + 160 * 64)
