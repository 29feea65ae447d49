"""Activations of layers that are not attention, against the real library at small shapes: what transformers'
Mamba block keeps for backward (saved-tensor hooks on a real `MambaBlock`, torch path), full and LoRA, with and
without checkpointing; the linears LoRA can reach in it (peft's own injection); and how a Mamba config.json is
labelled. Skips with a reason where torch, transformers or peft are not installed."""

from __future__ import annotations

import warnings

import pytest
from trace_plans import LORA, need, plan
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.estimate.shapes import shapes, targeted
from vramlens.knowledge.models import arch_from_hf_config

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")


def mamba_config(**sizes) -> dict:
    base = dict(
        model_type="mamba",
        hidden_size=40,
        num_hidden_layers=1,
        vocab_size=64,
        state_size=8,
        intermediate_size=96,
        time_step_rank=4,
        conv_kernel=4,
    )
    base.update(sizes)
    return base


def saved_bytes(fn, model) -> int:
    """Bytes of the distinct storages autograd saves while `fn` runs, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def real_block(config: dict, lora: tuple[str, ...] = (), adapter_fp32: bool = True):
    """Layer 0 of a real `MambaForCausalLM` in bf16 (LoRA on `lora` via peft) and the model holding it."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    keys = {k: v for k, v in config.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("mamba", **keys)).to(torch.bfloat16)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(r=LORA["lora_r"], lora_alpha=16, lora_dropout=0.0, target_modules=list(lora)),
            autocast_adapter_dtype=adapter_fp32,
        )
        return model.base_model.model.backbone.layers[0], model
    return model.backbone.layers[0], model


SHAPES = [
    dict(),
    dict(hidden_size=64, intermediate_size=128, state_size=16, time_step_rank=8, conv_kernel=2),
    dict(hidden_size=48, intermediate_size=144, state_size=4, time_step_rank=3, conv_kernel=3),
]
RUNS = [(2, 3), (1, 8), (3, 5)]  # (sequences, positions)


@pytest.mark.parametrize("sizes", SHAPES, ids=["small", "wide-state", "narrow-state"])
@pytest.mark.parametrize("method", ["full", "lora-16bit", "lora-fp32"])
def test_mamba_block_keeps_what_the_estimate_says(sizes, method):
    """A Mamba block on transformers' torch path keeps, for backward, the bytes `mamba_layer_bytes` counts: per token,
    per sequence (the padded conv output, the recurrence's first and last states) and per layer (A, D)."""
    config = mamba_config(**sizes)
    arch = arch_from_hf_config(config, "tiny-mamba")
    lora = method != "full"
    changes = dict(LORA, lora_targets=("all-linear",), adapter_fp32=method == "lora-fp32") if lora else {}
    names = tuple(l.name for l in targeted(arch, ("all-linear",))) if lora else ()
    block, model = real_block(config, names, adapter_fp32=method == "lora-fp32")
    for batch, positions in RUNS:
        x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = saved_bytes(lambda: block(x), model)
        rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **changes)
        est = C.mamba_layer_per_token(rp, kernels=False) * batch * positions
        assert est == pytest.approx(real, rel=0.005), (batch, positions)


def test_checkpointed_mamba_block_keeps_its_input():
    config = mamba_config()
    arch = arch_from_hf_config(config, "tiny-mamba")
    block, model = real_block(config)
    x = torch.randn(2, 6, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    real = saved_bytes(lambda: torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False), model)
    rp = plan(arch=arch, seq_len=6, micro_batch=2, grad_checkpointing=True)
    assert C.block_input_per_token(rp) * 12 == real


@pytest.mark.parametrize("sizes", SHAPES[:2], ids=["small", "wide-state"])
def test_all_linear_lora_adapts_what_peft_adapts(sizes):
    """ "all-linear" on a Mamba model: in_proj, x_proj and dt_proj get adapters; peft refuses out_proj and conv1d.
    The adapters the estimate counts are the ones peft makes (trainable parameters equal)."""
    config = mamba_config(**sizes, num_hidden_layers=2)
    arch = arch_from_hf_config(config, "tiny-mamba")
    adapted = targeted(arch, ("all-linear",))
    assert sorted(l.name for l in adapted) == ["dt_proj", "in_proj", "x_proj"]
    _, model = real_block(config, tuple(l.name for l in adapted))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == sum(l.count * LORA["lora_r"] * (l.in_features + l.out_features) for l in adapted)
    # the mixer's linears, conv, A and D, the norms and the embedding add up to what transformers builds
    assert shapes(arch).total == sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)


def test_mamba_estimate_follows_the_kernels_and_says_so():
    arch = arch_from_hf_config(mamba_config(hidden_size=256, intermediate_size=512, num_hidden_layers=4), "m")
    assert "sized as attention" not in arch.approximate
    assert "mamba_ssm" in arch.approximate and "not traced" in arch.approximate
    rp = plan(arch=arch, seq_len=1024, micro_batch=2)
    _, one = C.activations_per_token(rp)
    assert one == C.mamba_layer_per_token(rp, kernels=True)
    # the kernel keeps no per-step states: far less than the torch path, which keeps (12 + 2)·I·N per token
    assert one * 4 < C.mamba_layer_per_token(rp, kernels=False)
    assert estimate(rp, limits=False).allocated_bytes > 0


def test_hybrids_not_modelled_still_say_sized_as_attention():
    falcon_h1 = dict(
        model_type="falcon_h1",
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=256,
        vocab_size=500,
        mamba_d_state=16,
    )
    arch = arch_from_hf_config(falcon_h1, "tiny-falcon-h1")
    assert "sized as attention" in arch.approximate
