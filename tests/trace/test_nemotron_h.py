"""Nemotron-H against the real library at small shapes: every decoder layer is ONE block of one kind (transformers
5.24 models/nemotron_h/modeling_nemotron_h.py `NemotronHBlock`: a Mamba-2 mixer, attention without rotary embeddings,
a relu² MLP or a MoE, behind one RMSNorm), read from `layers_block_type` or `hybrid_override_pattern`. What each
block keeps for backward (saved-tensor hooks), the checkpointed Mamba-2 block's backward peak (the trace's
live-storage tracker), the LoRA adapters peft makes, and the real-library grid's rows. Skips with a reason where
torch, transformers or peft are not installed."""

from __future__ import annotations

import math
import warnings

import pytest
from test_hybrid_layers import saved_bytes
from tiny_configs import TINY_CONFIGS
from trace_plans import LORA, assert_estimate_matches_trace, need, plan
from vramlens.estimate import components as C
from vramlens.knowledge.models import arch_from_hf_config
from vramlens.resolve.adapters import normalize_targets

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")

# LoRA targets as peft module names: q, k, v, o reach attention, up_proj and down_proj the relu² MLP
ADAPTED = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
SIZES = [{}, dict(mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=32, intermediate_size=192, chunk_size=32)]


def real_model(config: dict, lora: bool):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("nemotron_h", **keys)).to(torch.bfloat16)
    model.train()
    if not lora:
        return model, model.model.layers
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=LORA["lora_r"], lora_alpha=16, lora_dropout=0.0, target_modules=ADAPTED))
    return model, model.base_model.model.model.layers


@pytest.mark.parametrize("sizes", SIZES, ids=["tiny", "narrow"])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_each_block_keeps_what_the_estimate_says(sizes, method):
    """Each kind of Nemotron-H block (Mamba-2, attention, relu² MLP), fully trained and under LoRA on q, k, v, o,
    up and down, keeps the bytes `nemotron_h_block_bytes` counts for it: the norm's fp32 input and normalised value
    (the weight multiplies in fp32), the mixer's own tensors, the adapters' fp32 input copies. Before, every layer
    was sized as an attention + gated-MLP block."""
    config = dict(TINY_CONFIGS["nemotron_h"], **sizes)
    arch = arch_from_hf_config(config, "tiny-nemotron-h")
    model, layers = real_model(config, method == "lora")
    # the plan's targets as the resolver reads peft's names: up_proj and down_proj are the ungated MLP's fc1 and fc2
    changes = dict(LORA, lora_targets=normalize_targets(ADAPTED, arch)[0]) if method == "lora" else {}
    for batch, positions in [(2, 128), (1, 100)]:
        rp = plan(arch=arch, seq_len=positions, micro_batch=batch, attn_mask=False, repeat_kv=False, **changes)
        seen = set()
        for layer in layers:
            if layer.block_type in seen:
                continue
            seen.add(layer.block_type)
            x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                real = saved_bytes(lambda: layer(x), model)
            per_token, per_layer = C.nemotron_h_block_bytes(rp, layer.block_type)
            assert per_token * batch * positions + per_layer == pytest.approx(real, rel=0.01), layer.block_type
        assert seen == {"linear_attention", "full_attention", "mlp"}


@pytest.mark.parametrize("sizes", SIZES, ids=["tiny", "narrow"])
@pytest.mark.parametrize("method", ["full", "frozen"])
def test_checkpointed_mamba_block_backward_peak(sizes, method):
    """A recomputed Mamba-2 block's backward peaks in its gated RMSNorm's backward: the live storage there, over the
    block's saved tensors and its output gradient, is what `nemotron_h_backward_per_token` adds (±3 % of the peak)."""
    from vramlens.trace.tracker import LiveBytes

    config = dict(TINY_CONFIGS["nemotron_h"], **sizes, layers_block_type=["linear_attention"])
    arch = arch_from_hf_config(config, "tiny-nemotron-h")
    model, layers = real_model(config, False)
    for p in model.parameters():
        p.requires_grad_(method == "full")
    batch, positions = 2, 256
    x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    with warnings.catch_warnings(), LiveBytes() as live:
        warnings.simplefilter("ignore")
        y = layers[0](x)
        grad = torch.randn_like(y)
        live.reset_peak()
        y.backward(grad)
        peak = live.peak - 2 * x.numel()  # x is an input, counted by the caller
    rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **(LORA if method == "frozen" else {}))
    assert C.nemotron_h_layers(rp) == ["linear_attention"]
    estimated = C.nemotron_h_backward_per_token(rp) * batch * positions + 2 * y.numel()  # + the output gradient
    assert estimated == pytest.approx(peak, rel=0.03)


def test_layers_read_from_the_pattern():
    """A config.json that writes the layers as `hybrid_override_pattern` (as NVIDIA's published Nemotron-H configs
    do) beside a `num_hidden_layers` the config class ignores: the stack is the pattern, one layer per character."""
    config = {k: v for k, v in TINY_CONFIGS["nemotron_h"].items() if k != "layers_block_type"}
    config.update(hybrid_override_pattern="M-*-M-M*", num_hidden_layers=3)
    arch = arch_from_hf_config(config, "tiny-nemotron-h")
    assert arch.layers == 8
    assert dict(arch.layer_kinds) == {"state space": 3, "attention": 2, "dense mlp": 3}
    rp = plan(arch=arch)
    assert C.nemotron_h_layers(rp)[:3] == ["linear_attention", "mlp", "full_attention"]
    assert "sized as attention" not in arch.approximate and "torch path" in arch.approximate


# rows of the hybrids grid (benchmarks/trace_vs_estimate.py --grid hybrids): full and LoRA, with and without
# checkpointing (before: 0.72, 0.74, 1.40 and 0.77 of the real-library trace)
ROWS = [("full", False), ("full", True), ("lora", False), ("lora", True)]


@pytest.mark.parametrize("mode,ckpt", ROWS, ids=["full", "full-ckpt", "lora", "lora-ckpt"])
def test_estimate_follows_the_real_library_trace(mode, ckpt):
    from test_new_architectures import row_plan

    rp = row_plan("nemotron_h", mode, ckpt)
    traced = assert_estimate_matches_trace(rp)
    if mode == "lora":
        # the adapters peft makes: q, k, v, o in the attention layer, none in a mixer; the grid's gate, up and down
        # are a gated MLP's, which the relu² MLP is not (as in GPT-2's rows)
        assert C.params(rp).adapter_params == traced["params_trainable"]
    assert math.isclose(C.params(rp).total, traced["params_total"]) or mode == "lora"


def test_llama_target_names_adapt_what_peft_adapts():
    """The target list written for Llama-style models on Nemotron-H: q/k/v/o_proj reach attention, up_proj and
    down_proj the ungated MLP (its canonical fc1 and fc2), gate_proj nothing; the estimate's adapters are the ones
    peft makes. Before, the MLP was read as gated (SwiGLU) and gate_proj as its gate."""
    config = dict(TINY_CONFIGS["nemotron_h"])
    arch = arch_from_hf_config(config, "tiny-nemotron-h")
    assert arch.mlp == "relu"
    names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    targets = normalize_targets(names, arch)[0]
    assert targets == ("q", "k", "v", "o", "fc1", "fc2")
    from peft import LoraConfig, get_peft_model

    model, _ = real_model(config, False)
    model = get_peft_model(model, LoraConfig(r=LORA["lora_r"], lora_alpha=16, target_modules=names))
    made = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert C.params(plan(arch=arch, **dict(LORA, lora_targets=targets))).adapter_params == made
