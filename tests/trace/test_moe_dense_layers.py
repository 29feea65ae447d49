"""The dense layers of MoE models, against the real library at small shapes: what a dense layer's MLP keeps for
backward (saved-tensor hooks on the real module), full and under LoRA as peft adapts it: DeepSeek-V3's
`first_k_dense_replace` layers (peft moves the MLP target names to the fused experts: the dense MLP is not adapted)
and Llama-4's layers between MoE layers (`interleave_moe_layer_step`: adapted). Skips with a reason where torch,
transformers or peft are not installed."""

from __future__ import annotations

import warnings

import pytest
from test_hybrid_layers import saved_bytes
from tiny_configs import TINY_CONFIGS
from trace_plans import LORA, need, plan
from vramlens.estimate import components as C
from vramlens.knowledge.models import arch_from_hf_config

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")

# the MLP targets as the real-library grid writes them (benchmarks/trace_vs_estimate.py LORA: q, k, v, o, gate, up,
# down), in transformers' module names
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def real_model(model_type: str, lora: bool):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    keys = {k: v for k, v in TINY_CONFIGS[model_type].items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **keys)).to(torch.bfloat16)
        model.train()
        if not lora:
            return model, model.model
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(r=LORA["lora_r"], lora_alpha=16, lora_dropout=0.0, target_modules=list(TARGETS)),
            autocast_adapter_dtype=True,
        )
    return model, model.base_model.model.model


def mlp_of(layer):
    return layer.mlp if hasattr(layer, "mlp") else layer.feed_forward


@pytest.mark.parametrize("model_type", ["deepseek_v3", "llama4_text"])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_dense_layer_keeps_a_dense_mlp(model_type, method):
    """Layer 0 of the tiny DeepSeek-V3 and Llama-4 is dense: its MLP keeps what a dense MLP of `intermediate` keeps
    (`mlp_keeps_per_token` of `dense_layer_plan`), far less than the MoE layer it was sized as before."""
    config = TINY_CONFIGS[model_type]
    arch = arch_from_hf_config(config, f"tiny-{model_type}")
    lora = method == "lora"
    model, inner = real_model(model_type, lora)
    dense_mlp = mlp_of(inner.layers[0])
    assert "MoE" not in type(dense_mlp).__name__ and "Moe" not in type(dense_mlp).__name__
    batch, positions = 2, 64
    x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    real = saved_bytes(lambda: dense_mlp(x), model)
    rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **(dict(LORA, adapter_fp32=True) if lora else {}))
    dense = C.dense_layer_plan(rp)
    assert dense is not None and dense.arch.intermediate == dense_mlp.down_proj.in_features
    adapted = [m for m in ("gate_proj", "up_proj", "down_proj") if hasattr(getattr(dense_mlp, m), "lora_A")]
    # DeepSeek-V3: peft 0.21.2 moves gate/up/down_proj to the fused experts' parameters; Llama-4's it adapts
    assert adapted == ([] if model_type == "deepseek_v3" or not lora else ["gate_proj", "up_proj", "down_proj"])
    lora_a_outputs = len(adapted) * 4 * LORA["lora_r"]  # each fp32 lora_A's output, which lora_B keeps
    assert C.mlp_keeps_per_token(dense) * batch * positions + lora_a_outputs * batch * positions == real
    # the MoE layer's MLP keeps more than the dense one: sizing the dense layers as MoE layers overstated them
    assert C.mlp_keeps_per_token(dense) < C.mlp_keeps_per_token(rp)


def test_models_without_dense_layers_have_no_dense_plan():
    for model_type in ("gpt_oss", "qwen3_next", "lfm2"):
        rp = plan(arch=arch_from_hf_config(TINY_CONFIGS[model_type], f"tiny-{model_type}"))
        assert C.dense_layer_plan(rp) is None
