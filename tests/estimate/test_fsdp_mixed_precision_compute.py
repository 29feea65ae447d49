"""FSDP's mixed precision (param_dtype bf16 over fp32 sharded parameters): every unit computes with its 16-bit
gathered parameters, LoRA adapters included, so what the blocks keep for backward is what a 16-bit step keeps, not
what autocast over fp32 weights keeps (an fp32 residual stream and fp32 adapters casting their inputs). The parameters,
gradients and optimizer state at rest stay the fp32 shards."""

from __future__ import annotations

import pytest
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.knowledge.gpus import gpu_by_name
from vramlens.knowledge.optimizers import lookup_optimizer
from vramlens.knowledge.schema import ModelArch
from vramlens.resolved import ResolvedPlan

LLAMA = ModelArch(
    id="llama-like", family="llama", hidden=2048, layers=8, heads=16, kv_heads=4, intermediate=5632, vocab=32000
)
LORA = dict(peft="lora", lora_r=16, lora_alpha=32.0, lora_targets=("q", "k", "v", "o", "gate", "up", "down"))


def _plan(**changes) -> ResolvedPlan:
    base: dict = dict(
        arch=LLAMA,
        optimizer=lookup_optimizer("adamw_torch"),
        optimizer_impl="fused",
        gpu=gpu_by_name("A100-80GB"),
        seq_len=2048,
        micro_batch=2,
        strategy="fsdp",
        zero_stage=3,
        world_size=8,
        weight_dtype="fp32",
        compute_dtype="bf16",
        amp=True,
        fsdp_mixed_precision=True,
    )
    base.update(changes)
    return ResolvedPlan(**base)


def _sixteen_bit(rp: ResolvedPlan) -> ResolvedPlan:
    """The same step on bf16 parameters with bf16 adapters and no autocast."""
    return rp.with_changes(weight_dtype="bf16", amp=False, fsdp_mixed_precision=False, adapter_fp32=False)


@pytest.mark.parametrize("peft", [{}, LORA], ids=["full", "lora"])
def test_blocks_keep_what_a_16bit_step_keeps(peft):
    mp = _plan(**peft)
    assert C.activations_per_token(mp) == C.activations_per_token(_sixteen_bit(mp))
    # autocast over the fp32 weights themselves (no FSDP mixed precision) keeps the fp32 stream: more
    assert C.activations_per_token(mp.with_changes(fsdp_mixed_precision=False))[0] > C.activations_per_token(mp)[0]


def test_lora_adapters_compute_in_16bit_under_fsdp_mixed_precision():
    """peft's fp32 adapters are gathered in bf16 with the unit: no adapter casts its input to fp32."""
    mp = _plan(**LORA)
    assert C.adapter_input(mp) == (False, 2)
    assert C.adapter_input(mp.with_changes(fsdp_mixed_precision=False)) == (True, 2)  # autocast: 16-bit casts
    assert C.adapter_input(mp.with_changes(weight_dtype="bf16", amp=False, fsdp_mixed_precision=False)) == (True, 4)


def test_state_at_rest_stays_the_fp32_shards():
    """Only the computing dtype changes: weights, gradients and AdamW state are sized as fp32 shards either way."""
    mp, amp = estimate(_plan(**LORA), limits=False), estimate(_plan(**LORA, fsdp_mixed_precision=False), limits=False)
    for key in ("weights", "adapters", "optimizer"):
        assert mp.components[key] == amp.components[key], key
    assert mp.components["activations"] < amp.components["activations"]
