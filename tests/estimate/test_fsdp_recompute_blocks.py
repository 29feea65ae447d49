"""Which FSDP a plan runs, and what FSDP holds block by block in a checkpointed backward (components/buffers.py
`fsdp_unit_adapters`, `fsdp_recompute_block`). The figures are held to the sharded trace in
tests/trace/test_sharded_trace.py."""

from __future__ import annotations

import pytest
from test_versions import FSDP_LORA, resolved
from vramlens.estimate import _phases
from vramlens.estimate import components as C
from vramlens.knowledge import gpus, models, optimizers
from vramlens.resolved import ResolvedPlan


def sharded(**changes) -> ResolvedPlan:
    base = dict(
        arch=models.lookup_model("mistralai/Mistral-7B-v0.1"),
        optimizer=optimizers.lookup_optimizer("adamw_torch"),
        gpu=gpus.lookup_gpu("A100-80GB")[0],
        micro_batch=1,
        seq_len=2048,
        grad_checkpointing=True,
        strategy="fsdp",
        zero_stage=3,
        world_size=8,
        gpu_count=8,
    )
    base.update(changes)
    return ResolvedPlan(**base)


@pytest.mark.parametrize("version", [1, 2])
def test_the_config_names_the_fsdp_the_plan_runs(tmp_path, version):
    r = resolved(tmp_path, FSDP_LORA + f"  fsdp_version: {version}\n").resolved
    assert r.fsdp_version == version
    assert C.fsdp_version(r.with_changes(world_size=8)) == version  # across 8 ranks: what the estimate and trace run
    unstated = resolved(tmp_path, FSDP_LORA).resolved
    assert unstated.fsdp_version == 0


def test_fsdp2_gathers_a_blocks_adapters_with_it():
    """`fully_shard` on a block takes peft's lora_A/lora_B with the base weights, in their own dtype; FSDP1 under the
    HF Trainer wraps them in units of their own."""
    lora = dict(peft="lora", lora_r=16, lora_alpha=32.0, lora_targets=("q", "k", "v", "o", "gate", "up", "down"))
    one, two = sharded(fsdp_version=1, **lora), sharded(fsdp_version=2, **lora)
    p = C.params(two)
    per_block = p.trainable / two.arch.layers * p.trainable_dtype_bytes
    assert C.fsdp_unit_bytes(two) - C.fsdp_unit_bytes(one) == pytest.approx(per_block)
    assert C.fsdp_root_unsharded(two) - C.fsdp_root_unsharded(one) == pytest.approx(per_block, abs=1)


def test_the_checkpointed_backward_holds_no_gradient_shard_of_the_root_or_the_block_running():
    """A full fine-tune's recompute phase under FSDP: the LM head's gradient is unsharded in the root until the
    embedding's backward ends, so its shard is not counted beside it, and the lowest block holds no prefetched unit;
    FSDP2 keeps the block above's reduce-scatter input while the next block runs, FSDP1 does not."""
    rp = sharded(fsdp_version=2)
    totals, phases, p, _ = _phases(rp)
    G = C.gradients(rp, p)
    s = C.shapes(rp.arch)
    shard = s.layer_params * 2 / rp.world_size
    # at most the L − 1 blocks' shards below the top: never the LM head's shard, never the running block's
    assert phases["recompute"]["gradients"] <= round((rp.arch.layers - 1) * shard) + 1
    assert phases["recompute"]["gradients"] < G - s.lm_head_params * 2 / rp.world_size
    one = _phases(rp.with_changes(fsdp_version=1))[0]
    held = s.layer_params * 2  # bf16: the reduce-scatter input is the block's unsharded gradient's size
    assert totals["recompute"] - one["recompute"] == pytest.approx(held, rel=1e-6)
