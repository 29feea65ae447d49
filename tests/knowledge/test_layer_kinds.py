"""Layer kinds read from transformers' own module classes (trace/inventory.py `measure`) are what the modeling files
build in each layer, whatever the model's own name says: a model named for its mixture of experts, its recurrence or
its linear attention (`Qwen2Moe…`, `NllbMoe…`, `RecurrentGemma…`, `KimiLinear…`, `Rwkv…`) has dense MLPs and
attention layers all the same, and a routed expert is one whatever its own class. The user-visible note of a
Kimi-Linear estimate counts its delta-rule layers as the linear-attention ones."""

from __future__ import annotations

import pytest
from vramlens.knowledge import inventory, models

_TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_SMALL = {"hidden_size": 64, "intermediate_size": 128, "vocab_size": 256, "num_attention_heads": 4, **_TOKENS}


def _kimi_linear(cfg, i: int) -> set[str]:
    # transformers 5.24 models/kimi_linear/modeling_kimi_linear.py `KimiLinearDecoderLayer`: `KimiLinearAttention`
    # (MLA) where layer_types[i] is "full_attention", else `KimiLinearDeltaAttention` (Kimi delta attention); a
    # `KimiLinearMoE` (fused `KimiLinearExperts`) where mlp_layer_types[i] is "sparse", else a `KimiLinearMLP`
    attention = "attention" if cfg.layer_types[i] == "full_attention" else "linear attention"
    return {attention, "moe fused" if cfg.mlp_layer_types[i] == "sparse" else "dense mlp"}


def _recurrent_gemma(cfg, i: int) -> set[str]:
    # models/recurrent_gemma/modeling_recurrent_gemma.py `RecurrentGemmaDecoderLayer`: `TEMPORAL_BLOCK_CLASSES`
    # maps "linear_attention" to `RecurrentGemmaRecurrentBlock` (the RG-LRU), "sliding_attention" to
    # `RecurrentGemmaAttention` (local attention over attention_window_size); every layer's `RecurrentGemmaMlp`
    block = cfg.layers_block_type[i]
    return {"linear attention" if block == "linear_attention" else "sliding attention", "dense mlp"}


def _qwen2_moe(cfg, i: int) -> set[str]:
    # models/qwen2_moe/modeling_qwen2_moe.py `Qwen2MoeDecoderLayer`: `Qwen2MoeSparseMoeBlock` (fused
    # `Qwen2MoeExperts`, its shared expert a `Qwen2MoeMLP`) unless i is in mlp_only_layers or not a
    # decoder_sparse_step-th layer, where the layer's MLP is a dense `Qwen2MoeMLP`
    sparse = i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0
    return {"attention", "moe fused" if sparse else "dense mlp"}


def _rwkv(cfg, i: int) -> set[str]:
    # models/rwkv/modeling_rwkv.py `RwkvBlock`: `RwkvSelfAttention` (time mixing, a per-channel decayed sum:
    # linear attention) and `RwkvFeedForward` (channel mixing, an MLP) in every block
    return {"linear attention", "dense mlp"}


def _nllb_moe(cfg, i: int) -> set[str]:
    # models/nllb_moe/modeling_nllb_moe.py `NllbMoeEncoder`: layer i is sparse where (i + 1) % encoder_sparse_step
    # == 0, its `NllbMoeSparseMLP` holding `NllbMoeExperts` (a ModuleDict of `NllbMoeDenseActDense`, one per
    # expert); the other layers' MLP is a dense `NllbMoeDenseActDense`
    return {"attention", "moe per-expert" if (i + 1) % cfg.encoder_sparse_step == 0 else "dense mlp"}


CASES = {
    "kimi_linear": (
        {
            **_SMALL,
            "num_hidden_layers": 6,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "first_k_dense_replace": 1,
            "linear_attn_config": {
                "head_dim": 16,
                "num_heads": 4,
                "short_conv_kernel_size": 4,
                "full_attn_layers": [3, 6],
                "kda_layers": [1, 2, 4, 5],
            },
        },
        _kimi_linear,
    ),
    "recurrent_gemma": ({**_SMALL, "num_hidden_layers": 5, "lru_width": 64}, _recurrent_gemma),
    "qwen2_moe": (
        {
            **_SMALL,
            "num_hidden_layers": 6,
            "num_key_value_heads": 2,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
            "mlp_only_layers": [0, 3],
        },
        _qwen2_moe,
    ),
    "nllb-moe": (
        {
            **_TOKENS,
            "vocab_size": 256,
            "d_model": 64,
            "encoder_layers": 4,
            "decoder_layers": 4,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "num_experts": 4,
            "encoder_sparse_step": 2,
            "decoder_sparse_step": 2,
            "decoder_start_token_id": 2,
        },
        _nllb_moe,
    ),
    "rwkv": (
        {"hidden_size": 64, "vocab_size": 256, "num_hidden_layers": 3, "bos_token_id": 0, "eos_token_id": 0},
        _rwkv,
    ),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_layer_kinds_are_the_modules_the_modeling_file_builds(model_type):
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig
    from vramlens.trace.inventory import measure, model_class

    fields, kinds_of_layer = CASES[model_type]
    cfg = AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = model_class(model_type, type(cfg))._from_config(cfg)
    q, info = measure(model, cfg)
    expected: dict[str, set[int]] = {}
    for i in range(cfg.num_hidden_layers):
        for kind in kinds_of_layer(cfg, i):
            expected.setdefault(kind, set()).add(i)
    assert len(expected) > 1  # the layers are of more than one kind: a misread shows
    assert {k[1]: info["where"][k] for k in q if k[0] == "k"} == expected


def test_a_kimi_linear_estimate_names_its_delta_attention_layers_as_the_linear_attention_ones():
    pytest.importorskip("transformers")
    from transformers import AutoConfig

    if inventory.version() != __import__("transformers").__version__:
        pytest.skip(f"inventories are of transformers {inventory.version()}")
    cfg = AutoConfig.for_model("kimi_linear")
    linear = cfg.layer_types.count("linear_attention")  # `KimiLinearDeltaAttention` layers
    full = cfg.layer_types.count("full_attention")  # `KimiLinearAttention` (MLA) layers
    assert linear and full and linear != full
    arch = models.arch_from_hf_config(cfg.to_dict(), "moonshotai/Kimi-Linear-48B-A3B-Instruct")
    assert arch is not None
    kinds = dict(arch.layer_kinds)
    assert (kinds["linear attention"], kinds["attention"]) == (linear, full)
    note = f"activations and LoRA targets of the {linear} linear attention layers sized as attention"
    assert note in arch.approximate
