"""Pipeline stages: the layers and parameters each rank holds and the micro-batches whose activations are in flight
(1F1B, interleaved). Megatron-LM's layouts are counted in `megatron`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramlens.estimate.shapes import shapes
from vramlens.resolved import ResolvedPlan


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline rank: what it holds of the model and how many micro-batches' activations are in flight."""

    name: str  # "first", "last" or "only"
    dense_params: int  # non-expert parameters on this rank, before tensor parallelism
    expert_params: int  # routed-expert parameters on this rank, before expert parallelism
    layers: int  # decoder layers on this rank
    in_flight: float  # micro-batches whose activations it holds at once (1F1B / interleaved)
    embedding: bool
    head: bool


def stage_layers(rp: ResolvedPlan) -> int:
    """Decoder layers on one pipeline rank: an even split (Megatron-core requires layers divisible by PP unless the
    first/last stage are sized apart, `--decoder-first-pipeline-num-layers`)."""
    return math.ceil(rp.arch.layers / max(rp.pipeline_parallel, 1))


def in_flight_microbatches(rp: ResolvedPlan, rank: int) -> float:
    """Micro-batches whose activations pipeline rank `rank` holds at its peak. 1F1B (megatron/core/pipeline_parallel/
    schedules.py `forward_backward_pipelining_without_interleaving`: `num_warmup_microbatches = pp - rank - 1`, then one
    more forward before the first backward): min(M, pp − rank). Interleaved with V chunks per rank
    (`forward_backward_pipelining_with_interleaving`: `(pp - rank - 1) * 2 + (V - 1) * pp` warm-up chunk forwards + 1),
    each chunk 1/V of the rank's layers; for rank 0 that is pp·(1 + (pp − 1)/(pp·V)), theoretical_memory_usage's
    `interleaved_schedule_memory_penalty`. M = micro-batches per step (gradient accumulation)."""
    pp = max(rp.pipeline_parallel, 1)
    m = max(rp.grad_accum, 1)
    if pp == 1:
        return 1.0
    v = max(rp.virtual_pipeline, 1)
    if v == 1:
        return float(min(m, pp - rank))
    chunks = min(m * v, (pp - rank - 1) * 2 + (v - 1) * pp + 1)
    return chunks / v


def stages(rp: ResolvedPlan) -> list[Stage]:
    """The first and the last pipeline rank (the middle ones hold less than the first: the same layers, fewer
    micro-batches in flight, no embedding). The first holds the word embeddings, the last the output layer and the
    final norm; with tied embeddings the last keeps its own copy of the embedding for the output layer
    (megatron/core/models/common/language_module/language_module.py `setup_embeddings_and_output_layer`)."""
    s = shapes(rp.arch)
    arch = rp.arch
    expert_total = sum(l.params for l in s.linears if l.expert)
    per_layer_dense = (s.total - s.embed_params - s.lm_head_params - expert_total) / max(arch.layers, 1)
    per_layer_expert = expert_total / max(arch.layers - arch.dense_layers, 1) if expert_total else 0
    pp = max(rp.pipeline_parallel, 1)
    n = stage_layers(rp)
    scalar = rp.scalar_head
    head = 0 if scalar else s.embed_params if arch.tied_embeddings else s.lm_head_params
    moe_first = min(max(n - arch.dense_layers, 0), n) if expert_total else 0
    moe_last = min(n, arch.layers - arch.dense_layers) if expert_total else 0
    first = Stage(
        "only" if pp == 1 else "first",
        int(n * per_layer_dense + s.embed_params + (s.lm_head_params if pp == 1 and not scalar else 0)),
        int(moe_first * per_layer_expert),
        n,
        in_flight_microbatches(rp, 0),
        True,
        pp == 1,
    )
    if pp == 1:
        return [first]
    last = Stage(
        "last",
        int(n * per_layer_dense + head),
        int(moe_last * per_layer_expert),
        n,
        in_flight_microbatches(rp, pp - 1),
        False,
        True,
    )
    return [first, last]


def pipeline_stage_share(rp: ResolvedPlan) -> float:
    """The busiest pipeline rank's share of the model's parameters (1 without pipeline parallelism)."""
    if rp.pipeline_parallel <= 1:
        return 1.0
    total = max(shapes(rp.arch).total, 1)
    return min(max(st.dense_params + st.expert_params for st in stages(rp)) / total, 1.0)
