"""DeepSpeed ZeRO's per-rank memory as DeepSpeed's own code holds it (deepspeed v0.16.4 runtime/zero/stage3.py,
stage_1_and_2.py) and TRL's PPO under ZeRO-3 (trl v0.18.0 trainer/ppo_trainer.py)."""

import pytest
from vramlens.estimate import estimate
from vramlens.estimate.components import scalar_head_params
from vramlens.estimate.shapes import shapes
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan

LLAMA3_8B = ModelArch(
    id="meta-llama/Meta-Llama-3-8B",
    family="llama",
    hidden=4096,
    layers=32,
    heads=32,
    kv_heads=8,
    intermediate=14336,
    vocab=128256,
)
H100 = GpuSpec(name="H100", memory_gib=79.2, usable_gib=79.2, bf16=True)
ADAMW = OptimizerSpec(name="adamw_torch_fused", states=2)
N = shapes(LLAMA3_8B).total
# the value model: the backbone with a one-wide score head in place of the vocabulary head
N_VALUE = scalar_head_params(LLAMA3_8B)


def plan(**kw) -> ResolvedPlan:
    base = dict(
        arch=LLAMA3_8B,
        optimizer=ADAMW,
        gpu=H100,
        seq_len=256,
        micro_batch=1,
        optimizer_impl="fused",
        weight_dtype="bf16",
        compute_dtype="bf16",
        attn_mask=False,
        grad_checkpointing=True,
        strategy="deepspeed",
        master_weights=True,
        set_to_none=True,
        grad_accum=1,
    )
    base.update(kw)
    return ResolvedPlan(**base)


def ppo(**kw) -> ResolvedPlan:
    return plan(
        zero_stage=3,
        world_size=8,
        objective="ppo",
        reference="copy",
        reward_model=True,
        value_model=True,
        generation="generate",
        generations_per_example=1,
        generation_len=1024,
        **kw,
    )


def test_zero3_gradient_partition_outlives_zero_grad():
    """ZeRO-3's flat gradient buffer stays allocated through the rollout, after zero_grad(set_to_none=True)."""
    est = estimate(ppo(), limits=False)
    assert est.phase == "generation"
    assert est.components["gradients"] == pytest.approx(N * 2 / 8, rel=0.01)


@pytest.mark.parametrize("stage, elements", [(1, N / 2), (2, N / 2), (3, 1e9)])
def test_step_makes_an_fp32_gradient_copy(stage, elements):
    """The step flattens the 16-bit gradient partition and casts it to fp32 (ZeRO-3: one sub-group of 1e9)."""
    est = estimate(plan(zero_stage=stage, world_size=2), limits=False)
    assert est.phase == "optimizer-step"
    assert est.components["temporaries"] == pytest.approx(elements * 6, rel=0.01)


def test_value_model_gets_master_weights():
    """The value model trains in the policy's engine: fp32 master weights and fp32 Adam states (12 B/param)."""
    est = estimate(ppo(), limits=False)
    weights, grads, states = 2, 2, 12
    assert est.components["value_model"] == pytest.approx(N_VALUE * (weights + grads + states) / 8, rel=0.01)


def test_ppo_rollout_gathers_the_value_model_too():
    """TRL gathers every parameter of PolicyAndValueWrapper to generate: two models' worth, less this rank's shards."""
    est = estimate(ppo(), limits=False)
    gathered = (N + N_VALUE) * 2 * (1 - 1 / 8)
    assert est.components["temporaries"] >= gathered
    without_value = estimate(ppo().with_changes(value_model=False), limits=False)
    assert est.components["temporaries"] - without_value.components["temporaries"] == pytest.approx(
        N_VALUE * 2 * (1 - 1 / 8), rel=0.01
    )
