"""Expert parallelism under FSDP2 (components/sharding.py `fsdp_block_params`, `fsdp_expert_gather_share`), as NeMo
AutoModel's MoE parallelizer lays it out (nemo_automodel/components/moe/parallelizer.py `apply_ep`, `apply_fsdp` at
v0.3.0–v0.5.0): each rank keeps 1 / (dp·cp) of the routed experts at rest, as without it, but a block's all-gathers
make only the rank's num_experts / ep of them; with ep = dp·cp the experts are not FSDP-sharded and none is
gathered."""

from __future__ import annotations

import pytest
from vramlens.estimate import _phases, allocated_peak
from vramlens.estimate import components as C
from vramlens.knowledge import gpus, models, optimizers
from vramlens.resolved import ResolvedPlan


def sharded(**changes) -> ResolvedPlan:
    base = dict(
        arch=models.lookup_model("Qwen/Qwen3-30B-A3B"),
        optimizer=optimizers.lookup_optimizer("adamw_torch"),
        gpu=gpus.lookup_gpu("H100-SXM")[0],
        micro_batch=2,
        seq_len=4096,
        grad_checkpointing=True,
        strategy="fsdp",
        fsdp_version=2,
        zero_stage=3,
        world_size=64,
        gpu_count=8,
    )
    base.update(changes)
    return ResolvedPlan(**base)


def experts_per_block(rp: ResolvedPlan) -> float:
    """One MoE block's routed expert stacks, from the architecture itself: gate, up and down of every expert."""
    arch = rp.arch
    return arch.num_experts * 3 * arch.hidden * arch.moe_intermediate


@pytest.mark.parametrize("stage", [3, 2])
def test_a_block_gathers_its_own_experts_only(stage):
    """ep 8 over 64 FSDP ranks (ep_shard 8): the gathered block and its unsharded gradients are smaller by 7/8 of
    the block's experts; SHARD_GRAD_OP keeps every block gathered, so by that times the layers."""
    one, ep = sharded(zero_stage=stage), sharded(zero_stage=stage, expert_parallel=8)
    pg = C.fsdp_gather_bytes(one)
    saved = experts_per_block(one) * (1 - 1 / 8) * pg
    assert C.fsdp_unit_bytes(one) - C.fsdp_unit_bytes(ep) == pytest.approx(saved)
    blocks = one.arch.layers if stage == 2 else 1
    assert C.fsdp_root_unsharded(one) - C.fsdp_root_unsharded(ep) == pytest.approx(blocks * saved, abs=2)
    p = C.params(one)
    assert C.fsdp_backward_working_set(one, p) - C.fsdp_backward_working_set(ep, p) >= saved
    assert allocated_peak(one) - allocated_peak(ep) >= blocks * saved


def test_sharded_states_are_those_of_the_whole_fsdp_world():
    """At rest a rank keeps 1 / (ep · ep_shard) = 1 / (dp·cp) of the experts: weights, gradients and optimizer state
    as without expert parallelism."""
    one, ep = sharded(), sharded(expert_parallel=8)
    _, phases_one, _, _ = _phases(one)
    _, phases_ep, _, _ = _phases(ep)
    for what in ("weights", "optimizer"):
        assert phases_ep["optimizer-step"][what] == phases_one["optimizer-step"][what]
    assert C.gradients(ep, C.params(ep)) == C.gradients(one, C.params(one))


def test_experts_over_every_fsdp_rank_are_not_gathered():
    """ep = dp·cp (ep_shard 1): `apply_fsdp` does not `fully_shard` the experts and leaves them out of the block's
    unit; the block gathers its dense parameters alone."""
    one, ep = sharded(world_size=8), sharded(world_size=8, expert_parallel=8)
    assert C.fsdp_expert_gather_share(ep) == 0.0
    dense = C.shapes(one.arch).layer_params - experts_per_block(one)
    assert C.fsdp_unit_bytes(ep) == pytest.approx(dense * C.fsdp_gather_bytes(ep))


def test_expert_parallel_outside_fsdp_leaves_the_block_whole():
    """DeepSpeed's ZeRO-3 gathers each block whole whatever the plan says of experts (Megatron's expert
    parallelism is its own path: components/megatron.py)."""
    zero3 = sharded(strategy="deepspeed", zero_stage=3)
    assert C.fsdp_expert_gather_share(zero3.with_changes(expert_parallel=8)) == 1.0
    assert C.gathered_layer_bytes(zero3.with_changes(expert_parallel=8), C.params(zero3)) == C.gathered_layer_bytes(
        zero3, C.params(zero3)
    )


def test_pipeline_stages_hold_their_own_experts_unsharded():
    """torch's pipelining under FSDP2 keeps each stage's parameters and accumulated gradients unsharded
    (estimate `_torch_pipeline_stages`): of the experts, the rank's own. SHARD_GRAD_OP, full fine-tuning, pp 2."""
    one = sharded(zero_stage=2, pipeline_parallel=2, grad_accum=8)
    ep = one.with_changes(expert_parallel=8)
    s = C.shapes(one.arch)
    assert C.fsdp_model_params(one) == s.total
    experts = experts_per_block(one) * one.arch.layers
    assert C.fsdp_model_params(one) - C.fsdp_model_params(ep) == pytest.approx(experts * (1 - 1 / 8))
    # each rank holds about half of the model's experts, their unsharded copy and gradients, 7/8 of which go
    assert allocated_peak(one) - allocated_peak(ep) > experts / 2 * (1 - 1 / 8) * 2 * C.fsdp_gather_bytes(one) * 0.9
