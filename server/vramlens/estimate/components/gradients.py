"""Gradients of the trainable parameters."""

from __future__ import annotations

from vramlens.estimate.components.parameters import Params
from vramlens.estimate.components.sharding import shard_factor
from vramlens.resolved import ResolvedPlan


def gradients_offloaded(rp: ResolvedPlan) -> bool:
    """ZeRO-Offload moves the gradients to the CPU as they are reduced."""
    return rp.strategy == "deepspeed" and rp.offload_optimizer


def gradients(rp: ResolvedPlan, p: Params) -> int:
    """One gradient per trainable parameter in the parameter's dtype (docs/memory-model.md); sharded from ZeRO-2."""
    if rp.optimizer_in_bwd or rp.optimizer.layerwise:
        return 0  # the step runs per parameter inside backward
    if gradients_offloaded(rp):
        return 0
    return int(p.trainable * p.trainable_dtype_bytes * shard_factor(rp, "gradients"))
