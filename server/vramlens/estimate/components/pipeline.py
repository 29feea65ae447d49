"""Pipeline stages: the layers and parameters each rank holds and the micro-batches whose activations are in flight
(1F1B, interleaved). Megatron-LM's layouts are counted in `megatron`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.shapes import shapes
from vramlens.knowledge.pipelining import V_SCHEDULES, rank_stage_ids
from vramlens.resolved import ResolvedPlan


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline rank: what it holds of the model and how many micro-batches' activations are in flight."""

    name: str  # "first", "last", "only", "middle" or, under the framework's own split, "rank N"
    dense_params: int  # non-expert parameters on this rank, before tensor parallelism
    expert_params: int  # routed-expert parameters on this rank, before expert parallelism
    layers: int  # decoder layers on this rank
    in_flight: float  # micro-batches whose activations it holds at once (1F1B / interleaved)
    embedding: bool
    head: bool
    vision_params: int = 0  # a VLM's vision tower and projector on this rank, whole (not split by TP or EP)
    loss_in_flight: float | None = None  # micro-batches in flight at the loss's backward, where fewer than in_flight
    bare_stages: int = 0  # of the rank's stages, those with no decoder layer (the norm and the output alone)


def stage_layers(rp: ResolvedPlan) -> int:
    """Decoder layers on one pipeline rank: an even split (Megatron-core requires layers divisible by PP unless the
    first/last stage are sized apart, `--decoder-first-pipeline-num-layers`)."""
    return math.ceil(rp.arch.layers / max(rp.pipeline_parallel, 1))


def stage_layer_counts(rp: ResolvedPlan) -> tuple[int, int, int]:
    """Decoder layers on the (first, middle, last) pipeline ranks. With `--decoder-first-pipeline-num-layers` /
    `--decoder-last-pipeline-num-layers` those stages hold the given counts and the other stages split the rest
    evenly (Megatron-LM 7cdba422 megatron/core/transformer/transformer_block.py `get_num_layers_to_build`:
    `layers_to_distribute // pipeline_stages_left`, 0 when no stage is left); otherwise every stage holds
    `stage_layers`."""
    pp = max(rp.pipeline_parallel, 1)
    first, last = rp.first_stage_layers, rp.last_stage_layers
    if pp == 1 or (first is None and last is None):
        n = stage_layers(rp)
        return n, n, n
    rest = rp.arch.layers - (first or 0) - (last or 0)
    left = pp - (first is not None) - (last is not None)
    middle = math.ceil(max(rest, 0) / left) if left > 0 else 0
    return (
        middle if first is None else min(max(first, 0), rp.arch.layers),
        middle,
        middle if last is None else min(max(last, 0), rp.arch.layers),
    )


def torch_schedule_in_flight(schedule: str, pp: int, v: int, m: int, rank: int) -> int:
    """Stage forwards (chunks) pipeline rank `rank` holds at once under torch's schedule `schedule`: the peak over the
    rank's `pipeline_order` (torch 2.14 torch/distributed/pipelining/schedules.py) of forwards run whose activations
    are still kept — freed by the full backward (B), or by the weight backward (W) where the backward is split:
    `stage_backward_input` computes the input gradients with `retain_graph=True` (pipelining/_backward.py), so the
    graph's saved tensors live until `stage_backward_weight`. `pp` ranks, `v` stages per rank, `m` micro-batches.
    - GPipe: every forward before the first backward: m.
    - 1F1B (`Schedule1F1B._get_pipeline_order`): pp − 1 − rank warm-up forwards, then one forward, one backward:
      min(m, pp − rank).
    - LoopedBFS: every micro-batch of every local stage, then the backwards: v·m.
    - Interleaved1F1B (`_get_warmup_ops`, multiply_factor 2, then `_get_1f1b_rank_ops`: forward, then backward):
      warm-up (v − 1)·per_round + 2·(pp − 1 − rank) forwards, then one more, at most v·m; per_round =
      m // max(1, m // pp) (`microbatches_per_round`).
    - InterleavedZeroBubble (multiply_factor 1; a rank's weight backwards trail its input backwards by `rank`
      steps, `num_1f1b_microbatches = rank`): (v − 1)·per_round + pp − 1 − rank warm-up forwards, then rank + 1
      more before the first weight backward: (v − 1)·per_round + pp, at most v·m.
    - ZBVZeroBubble (two stages per rank, I and W back to back in its steady state): 2·(pp − rank) − 1 forwards
      of the first stage, rank pairs of both, then one of the second before its first backward: 2·pp, with fewer
      micro-batches m + 1 + rank (the absent ones dropped from the order), at most 2·m.
    - DualPipeV: (pp − rank − 1)·2 + 2·(rank + 1) forwards, then pp − rank − 1 rounds of I, W, F keeping their count,
      then its overlapped F+B pairs, each a forward before a backward: 2·pp + 1 (it requires m ≥ 2·pp)."""
    if schedule == "GPipe":
        return m
    if schedule == "LoopedBFS":
        return v * m
    if schedule == "Interleaved1F1B":
        per_round = m // max(1, m // pp)
        return min((v - 1) * per_round + 2 * (pp - 1 - rank) + 1, v * m)
    if schedule == "InterleavedZeroBubble":
        per_round = m // max(1, m // pp)
        return min((v - 1) * per_round + pp, v * m)
    if schedule == "ZBVZeroBubble":
        return min(2 * pp, m + 1 + rank, 2 * m)
    if schedule == "DualPipeV":
        return 2 * pp + 1
    return min(m, pp - rank)  # 1F1B


def torch_rank_ops(schedule: str, pp: int, v: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """The computations pipeline rank `rank` runs under torch's multi-stage schedule `schedule` (LoopedBFS,
    Interleaved1F1B, InterleavedZeroBubble), in order, as (kind, local stage, micro-batch): kind "F" a forward, "B" a
    full backward, "I" an input backward, "W" a weight backward; local stage k is the rank's stage rank + k·pp. As
    torch 2.14 torch/distributed/pipelining/schedules.py writes each rank's `pipeline_order`, less its idle steps
    (the bubbles `ScheduleInterleavedZeroBubble._add_bubbles_to_actions` adds move no action past another):
    - LoopedBFS (`ScheduleLoopedBFS._calculate_single_rank_operations`): every micro-batch's forward of each local
      stage in turn, then the backwards, the last stage first, the micro-batches in reverse;
    - Interleaved1F1B and InterleavedZeroBubble (their `_calculate_single_rank_operations`, `_get_warmup_ops`,
      `_get_1f1b_rank_ops`): warm-up forwards ((v − 1)·per_round + f·(pp − 1 − rank), f = 2 and 1, at most v·m),
      then a forward and a backward per step, then the remaining backwards; the forward of step s runs local stage
      (s // per_round) mod v, the backward local stage v − 1 − ((s − warm-up) // per_round) mod v; per_round =
      m // max(1, m // pp). The zero-bubble one splits each backward into I and W, the W of the backward
      `rank` backwards earlier after each I from the (warm-up + rank)-th step on, the rest at the end."""
    if schedule == "LoopedBFS":
        fwd = [("F", k, i) for k in range(v) for i in range(m)]
        return fwd + [("B", k, i) for k in reversed(range(v)) for i in reversed(range(m))]
    zero_bubble = schedule == "InterleavedZeroBubble"
    per_round = m // max(1, m // pp)
    warmup = min((v - 1) * per_round + (1 if zero_bubble else 2) * (pp - 1 - rank), m * v)
    total = m * v + warmup  # warm-up, one forward and one backward per step, cool-down
    next_mb = {"F": [0] * v, "B": [0] * v, "W": [0] * v}
    ops: list[tuple[str, int, int]] = []
    backwards: list[int] = []  # the local stage of each backward run, for its weight backward

    def run(kind: str, k: int, name: str | None = None) -> None:
        ops.append((name or kind, k, next_mb[kind][k]))
        next_mb[kind][k] += 1

    for step in range(total):
        if step < m * v:  # a forward: warm-up or one forward, one backward
            run("F", (step // per_round) % v)
        if step >= warmup:
            k = v - 1 - ((step - warmup) // per_round) % v
            run("B", k, "I" if zero_bubble else "B")
            backwards.append(k)
            if zero_bubble and step - warmup >= rank:
                run("W", backwards[sum(next_mb["W"])])
    while zero_bubble and sum(next_mb["W"]) < len(backwards):
        run("W", backwards[sum(next_mb["W"])])
    return ops


def torch_schedule_held_layers(
    schedule: str, pp: int, m: int, rank: int, stage_layers: tuple[int, ...]
) -> tuple[float, float]:
    """The most decoder layers' worth of stage forwards pipeline rank `rank` holds at once, and what it holds when
    the loss's backward runs (the backward of the model's last stage, on the last rank): the peak over the rank's
    `torch_rank_ops` of the layers of its forwards still kept (freed by their full or weight backward),
    `stage_layers` the layers of each of the rank's stages (local order). Single-stage schedules hold one stage's
    forwards, `torch_schedule_in_flight` of them; the V ones (ZBVZeroBubble, DualPipeV) are counted as equal halves
    of the rank's layers: their rank holds stages r and 2·pp − 1 − r, which torchtitan's split (`stage_split`)
    makes equal but on the first rank (a layer fewer on each of its two, both light) and for the remainder's
    one-layer differences. Counted alike, the loss's backward runs at the peak."""
    v = len(stage_layers)
    if schedule not in ("LoopedBFS", "Interleaved1F1B", "InterleavedZeroBubble") or v == 1:
        n = torch_schedule_in_flight(schedule, pp, v, m, rank) * sum(stage_layers) / v
        return n, n
    held = peak = at_loss = 0
    for kind, k, _ in torch_rank_ops(schedule, pp, v, m, rank):
        if kind == "F":
            held += stage_layers[k]
            peak = max(peak, held)
        elif rank == pp - 1 and k == v - 1 and kind in ("B", "I"):
            at_loss = max(at_loss, held)
        if kind in ("B", "W"):
            held -= stage_layers[k]
    return float(peak), float(at_loss)


def in_flight_microbatches(rp: ResolvedPlan, rank: int) -> float:
    """Micro-batches whose activations pipeline rank `rank` holds at its peak, in whole-rank units (one micro-batch
    through every layer of the rank). M = micro-batches per step (gradient accumulation).
    torch's own schedules (torchtitan): `torch_schedule_in_flight` stage forwards, each 1/V of the rank's layers.
    Megatron-core's: 1F1B (megatron/core/pipeline_parallel/schedules.py
    `forward_backward_pipelining_without_interleaving`: `num_warmup_microbatches = pp - rank - 1`, then one more
    forward before the first backward): min(M, pp − rank). Interleaved with V chunks per rank
    (`forward_backward_pipelining_with_interleaving`: `(pp - rank - 1) * 2 + (V - 1) * pp` warm-up chunk forwards + 1),
    each chunk 1/V of the rank's layers; for rank 0 that is pp·(1 + (pp − 1)/(pp·V)), theoretical_memory_usage's
    `interleaved_schedule_memory_penalty`."""
    pp = max(rp.pipeline_parallel, 1)
    m = max(rp.grad_accum, 1)
    if pp == 1:
        return 1.0
    v = max(rp.virtual_pipeline, 1)
    if rp.pipeline_schedule == "1F1B" and v > 1:
        chunks = min(m * v, (pp - rank - 1) * 2 + (v - 1) * pp + 1)
        return chunks / v
    if (own := rank_stage_layers(rp, rank)) and sum(own):
        return torch_schedule_held_layers(rp.pipeline_schedule, pp, m, rank, own)[0] / sum(own)
    return torch_schedule_in_flight(rp.pipeline_schedule, pp, v, m, rank) / v


def loss_in_flight(rp: ResolvedPlan) -> float | None:
    """Micro-batches (whole-rank units) the last pipeline rank holds when its loss's backward runs, where that is
    fewer than its peak (`in_flight_microbatches`): a multi-stage schedule of the framework's uneven stages whose
    peak is a forward of a heavier stage (`torch_schedule_held_layers`). None where the loss runs at the peak."""
    pp, m = max(rp.pipeline_parallel, 1), max(rp.grad_accum, 1)
    own = rank_stage_layers(rp, pp - 1)
    if pp == 1 or not sum(own):
        return None
    peak, at_loss = torch_schedule_held_layers(rp.pipeline_schedule, pp, m, pp - 1, own)
    return at_loss / sum(own) if at_loss < peak else None


def rank_stage_layers(rp: ResolvedPlan, rank: int) -> tuple[int, ...]:
    """The decoder layers of each stage pipeline rank `rank` runs (its local order), from the plan's split of the
    layers over the stages (`stage_split`: the framework's own cut); empty without one."""
    pp, v = max(rp.pipeline_parallel, 1), max(rp.virtual_pipeline, 1)
    if len(rp.stage_split) != pp * v:
        return ()
    return tuple(rp.stage_split[i] for i in rank_stage_ids(rp.pipeline_schedule, pp, v, rank))


def head_in_flight(rp: ResolvedPlan) -> int:
    """Micro-batches whose logits and loss the rank with the output layer holds at once: every one where a
    schedule runs all forwards before any backward (GPipe, LoopedBFS: the loss is computed in the last stage's
    forward, stage.py `_maybe_compute_loss`, and kept for its backward), one where it runs its last stage's backward
    right after that stage's forward (1F1B and the interleaved ones)."""
    if rp.pipeline_parallel > 1 and rp.pipeline_schedule in ("GPipe", "LoopedBFS"):
        return max(rp.grad_accum, 1)
    return 1


def stages(rp: ResolvedPlan) -> list[Stage]:
    """The first and the last pipeline rank, and the second when more than two stages hold more layers than the
    first (uneven stages, `stage_layer_counts`; with an even split the middle ones hold less than the first: the
    same layers, fewer micro-batches in flight, no embedding); every rank where the plan gives the framework's split
    of the layers over the stages (`stage_split`: any rank may hold the most). The first holds the word embeddings,
    the last the output layer and the final norm; with tied embeddings the last keeps its own copy of the embedding
    for the output layer (megatron/core/models/common/language_module/language_module.py
    `setup_embeddings_and_output_layer`). A VLM's vision tower and projector are on the first stage, whole on every
    tensor-parallel rank: Megatron-SWIFT builds them from the Hugging Face model's modules, not as Megatron parallel
    layers, and only where `pre_process` holds (ms-swift v4.0.0 swift/megatron/model/mm_gpt_model.py
    `MultimodalGPTModel.__init__`: `if pre_process and self.megatron_model_meta.visual_cls is not None: self.visual =
    ...visual_cls(config)`; mm_gpts/utils.py `HuggingFaceModule.__init__` takes the HF model's `visual`)."""
    s = shapes(rp.arch)
    arch = rp.arch
    expert_total = sum(l.params for l in s.linears if l.expert)
    per_layer_dense = (s.total - s.embed_params - s.lm_head_params - expert_total) / max(arch.layers, 1)
    per_layer_expert = expert_total / max(arch.layers - arch.dense_layers, 1) if expert_total else 0
    pp = max(rp.pipeline_parallel, 1)
    n_first, n_middle, n_last = stage_layer_counts(rp)
    scalar = rp.scalar_head
    head = 0 if scalar else s.embed_params if arch.tied_embeddings else s.lm_head_params

    def moe_layers(start: int, n: int) -> int:
        """MoE layers among the stage's `n` layers from layer `start` (the leading dense layers come first)."""
        return max(min(start + n, arch.layers) - max(start, arch.dense_layers), 0) if expert_total else 0

    first = Stage(
        "only" if pp == 1 else "first",
        int(n_first * per_layer_dense + s.embed_params + (s.lm_head_params if pp == 1 and not scalar else 0)),
        int(moe_layers(0, n_first) * per_layer_expert),
        n_first,
        in_flight_microbatches(rp, 0),
        True,
        pp == 1,
        arch.vision_params,
    )
    if pp == 1:
        return [first]
    if len(rp.stage_split) == pp * max(rp.virtual_pipeline, 1):
        # the framework's own cut (torch's pipelining): every rank, its stages' layers from the split, the embeddings
        # on the rank with the model's first stage, the output layer on the one with its last (on the same rank, a
        # tied output layer is the embedding itself)
        v = max(rp.virtual_pipeline, 1)
        starts = [sum(rp.stage_split[:i]) for i in range(pp * v)]
        out = []
        for rank in range(pp):
            ids = rank_stage_ids(rp.pipeline_schedule, pp, v, rank)
            n = sum(rp.stage_split[i] for i in ids)
            emb, out_layer = 0 in ids, pp * v - 1 in ids
            out.append(
                Stage(
                    "first" if rank == 0 else "last" if rank == pp - 1 else f"rank {rank}",
                    int(
                        n * per_layer_dense
                        + (s.embed_params if emb else 0)
                        + (head if out_layer and not (emb and arch.tied_embeddings) else 0)
                    ),
                    int(sum(moe_layers(starts[i], rp.stage_split[i]) for i in ids) * per_layer_expert),
                    n,
                    in_flight_microbatches(rp, rank),
                    emb,
                    out_layer,
                    arch.vision_params if emb else 0,
                    loss_in_flight(rp) if rank == pp - 1 else None,
                    sum(1 for i in ids if rp.stage_split[i] == 0),
                )
            )
        return out
    if rp.pipeline_schedule in V_SCHEDULES:
        # the V: the first rank holds the first and the last stage, the embeddings and the output layer; the last
        # rank the two stages at the turn (torch 2.14 schedules.py `generate_rank_to_stage_mapping(style="v")`)
        both = Stage(
            "first",
            # a tied output layer is the embedding itself, here on the same rank
            int(n_first * per_layer_dense + s.embed_params + (0 if arch.tied_embeddings else head)),
            int(moe_layers(0, n_first) * per_layer_expert),
            n_first,
            in_flight_microbatches(rp, 0),
            True,
            True,
            arch.vision_params,
        )
        turn = Stage(
            "last",
            int(n_last * per_layer_dense),
            int(moe_layers(arch.layers // 2, n_last) * per_layer_expert),
            n_last,
            in_flight_microbatches(rp, pp - 1),
            False,
            False,
        )
        return [both, turn]
    last = Stage(
        "last",
        int(n_last * per_layer_dense + head),
        int(moe_layers(arch.layers - n_last, n_last) * per_layer_expert),
        n_last,
        in_flight_microbatches(rp, pp - 1),
        False,
        True,
    )
    out = [first, last]
    if pp > 2 and n_middle > n_first:
        out.insert(
            1,
            Stage(
                "middle",
                int(n_middle * per_layer_dense),
                int(moe_layers(n_first, n_middle) * per_layer_expert),
                n_middle,
                in_flight_microbatches(rp, 1),
                False,
                False,
            ),
        )
    return out


def pipeline_stage_share(rp: ResolvedPlan) -> float:
    """The busiest pipeline rank's share of the model's parameters (1 without pipeline parallelism)."""
    if rp.pipeline_parallel <= 1:
        return 1.0
    total = max(shapes(rp.arch).total, 1)
    return min(max(st.dense_params + st.expert_params for st in stages(rp)) / total, 1.0)


# --- torch's own pipelining (torch.distributed.pipelining, as torchtitan runs it) ----------------------------------
# torch 2.14 torch/distributed/pipelining/stage.py and schedules.py; torchtitan b5bcd76
# torchtitan/distributed/pipeline_parallel.py (`pipeline_llm`, `_build_pipeline_schedule`) and trainer.py
# (`pp_forward_backward_step`: `return_outputs=False`).


@dataclass(frozen=True, slots=True)
class PipelineTokens:
    """What one micro-batch keeps, per token, for the stage terms of `torch_pipeline_phases` (bytes)."""

    layer: float  # one decoder layer's saved activations (its checkpointed input under checkpointing)
    hidden: float  # one hidden state in the compute dtype: a stage's output and the receive buffers
    input_saved: bool  # a layer keeps its input (checkpointing): a stage's first layer keeps the receive buffer
    recompute: float  # one layer recomputed and its backward (checkpointing), else 0
    head: float  # the last stage's final norm and logits/loss at the loss, per token of the micro-batch
    head_kept: float = 0.0  # what a micro-batch whose backward has not run keeps of `head` (GPipe, LoopedBFS)


def torch_pipeline_loss_per_token(rp: ResolvedPlan) -> float:
    """The last stage's logits and loss at the loss's backward, per token: the stage's output logits in the compute
    dtype, which the stage holds for its backward (stage.py `forward_one_chunk`: `fwd_cache`), and torchtitan's
    loss on them (torchtitan b5bcd76 torchtitan/components/loss.py `cross_entropy_loss`: `cross_entropy(pred.float(),
    labels, reduction="sum")`): the fp32 copy feeds `log_softmax`, which keeps its fp32 output; its backward makes
    the NLL gradient and the log-softmax gradient, fp32 each, while the output is alive: c + 3 × 4 bytes per logit."""
    if rp.scalar_head:
        return 0.0
    return rp.arch.vocab * (DTYPE_BYTES[rp.compute_dtype] + 3 * 4)


def torch_pipeline_loss_kept_per_token(rp: ResolvedPlan) -> float:
    """What the last stage keeps of a micro-batch's logits and loss between its forward and its backward, per token:
    the output logits in the compute dtype (`fwd_cache`) and `log_softmax`'s fp32 output, which its backward reads
    (the fp32 copy it was computed from is not kept): c + 4 bytes per logit (`torch_pipeline_loss_per_token`)."""
    if rp.scalar_head:
        return 0.0
    return rp.arch.vocab * (DTYPE_BYTES[rp.compute_dtype] + 4)


def torch_pipeline_phases(
    rp: ResolvedPlan, st: Stage, state: dict[str, int], per: PipelineTokens
) -> dict[str, dict[str, int]]:
    """The phases of one rank of a torch.distributed.pipelining run, from the whole model's state on one GPU
    (`state`: weights, gradients, optimizer, optimizer-step temporaries, buffers — sharded as the plan's FSDP shards
    them, if it does) and what one micro-batch keeps (`per`). The rank runs V = `virtual_pipeline` stages (one for
    GPipe and 1F1B). By construction from torch's pipelining:
    - the rank holds its stages' parameters, their gradients and optimizer state (the share of `st`);
    - it keeps the activations of `st.in_flight` micro-batches (`in_flight_microbatches`: whole-rank units of the
      schedule's stage forwards), each stage forward keeping its layers' saved tensors and, but on the model's last
      stage, its output, which the stage holds for the backward (stage.py `forward_one_chunk`:
      `self.fwd_cache[fwd_chunk_id] = (output_tuple, flatten_input_tensors)`);
    - a stage that is not the model's first keeps one activation receive buffer per micro-batch for the whole step
      and computes on it in place (`_setup_forward_recv_info`: `buffer=_make_tensor_from_meta(meta, self.device)`
      for every chunk; `_retrieve_recv_activations`: `info.buffer.requires_grad_(...)`), so its first layer's input
      is that buffer; a stage that is not the model's last keeps one gradient receive buffer per micro-batch
      (`_create_grad_recv_info`);
    - the gradients exist beside the in-flight micro-batches once a backward has run before a forward, when M >
      `in_flight`; with M = `in_flight` the first backward begins with every micro-batch in flight and no gradient,
      the second with one stage forward fewer and that stage's gradients;
    - the rank with the last stage adds its final norm and the loss of one micro-batch at its backward, and what
      the others in flight at the output keep of theirs (`head_in_flight`; with `return_outputs=False` the schedule
      keeps no output chunk: stage.py `if self.is_last and save_forward_output: self.output_chunks.append(output)`).
    Checkpointing keeps each layer's input per micro-batch and recomputes one layer in the backward.
    Under FSDP (`state` has `accumulated`: the whole model's unsharded gradients, `gathered`: its unsharded
    parameters, `gather_transient`: what FSDP gathers for one block) the schedule runs every backward but the
    step's last without gradient sync or resharding (torch 2.14 pipelining/stage.py `backward_maybe_with_nosync`:
    `set_requires_gradient_sync(False)`, `set_reshard_after_backward(False)`; `perform_reduce_grad` at the end): the
    rank accumulates its stages' gradients unsharded and, unless FSDP reshards after the forward, keeps their
    parameters unsharded; the sharded gradients exist at the optimizer step only."""
    total = max(state.get("params", 0), 1)
    share = (st.dense_params + st.expert_params) / total
    m = max(rp.grad_accum, 1)
    v = max(rp.virtual_pipeline, 1) if rp.pipeline_parallel > 1 else 1
    tok = rp.micro_batch * rp.sequences_per_example * rp.seq_len
    first, last = int(st.embedding), int(st.head)
    # per micro-batch through the rank's V stages: their layers, the outputs of those that are not the model's last,
    # less the inputs that are receive buffers (checkpointing keeps each layer's input; a stage with no layer keeps
    # none: its receive buffer feeds the final norm, counted with the head)
    bufs_saved = v - first - st.bare_stages if per.input_saved else 0
    held = st.layers * per.layer + ((v - last) - bufs_saved) * per.hidden
    recv = ((v - first) + (v - last)) * m * per.hidden * tok
    w, g, o = (int(state[k] * share) for k in ("weights", "gradients", "optimizer"))
    steady = m > st.in_flight  # a backward ran before the peak's forward
    g_held = g if steady else 0
    gathered = 0
    if accumulated := int(state.get("accumulated", 0) * share):
        # FSDP: the stage's unsharded gradients once a backward has run; its unsharded parameters throughout when
        # they are not resharded after the forward (`reshard_after_forward=False`), else FSDP's gathers of one
        # block (`state`): each forward reshards what the backward before it left unsharded
        g_held = accumulated if steady else 0
        if rp.zero_stage < 3:
            gathered = int(state.get("gathered", 0) * share)
        else:
            gathered = state.get("gather_transient", 0)
    base = {
        "weights": w,
        "optimizer": o,
        "optimizer_paged": int(state.get("optimizer_paged", 0) * share),
        "buffers": state.get("buffers", 0) + int(recv),
    }
    fb = {**base, "buffers": base["buffers"] + gathered, "gradients": g_held}
    acts = int(tok * held * st.in_flight)
    heads = head_in_flight(rp) if st.head else 0
    logits = int(tok * (per.head + (heads - 1) * per.head_kept)) if st.head else 0
    forward_backward = {**fb, "activations": acts, "logits": logits}
    if st.head and st.loss_in_flight is not None:
        # the rank's peak of activations is a forward with no micro-batch at the loss; the loss's backward runs
        # with fewer in flight
        forward_backward = max(
            {**fb, "activations": acts, "logits": 0},
            {**fb, "activations": int(tok * held * st.loss_in_flight), "logits": logits},
            key=lambda ph: sum(ph.values()),
        )
    out = {
        "forward-backward": forward_backward,
        "optimizer-step": {**base, "gradients": g, "temporaries": int(state.get("temporaries", 0) * share)},
    }
    if per.recompute:
        out["recompute"] = {**fb, "activations": acts + int(tok * per.recompute)}
    if m <= st.in_flight and st.in_flight > 1:
        # every micro-batch was in flight at the first backward. The second runs with one stage forward fewer and
        # the gradients of the stage that ran it; with several stages per rank, the backwards of the rank's first
        # stage run last (the schedules run a rank's later stages' backwards first: `backward_stage_index`,
        # LoopedBFS `reversed(stage_indices)`): its second one with M − 1 micro-batches in flight beside every
        # gradient. On the rank with the output layer the loss's backward and a layer's recompute run one after the
        # other.
        grads = accumulated or g
        fsdp = {"buffers": base["buffers"] + (int(state.get("gathered", 0) * share) if accumulated else 0)}
        kept = int(tok * (heads - 2) * per.head_kept) if heads > 1 else 0
        loss = int(tok * per.head) if heads > 1 else 0
        fewer = int(tok * held * (st.in_flight - 1 / v))
        second = {**base, **fsdp, "gradients": grads // v, "activations": fewer, "logits": kept}
        out["second-backward"] = max(
            {**second, "logits": kept + loss},
            {**second, "activations": fewer + int(tok * per.recompute)},
            key=lambda ph: sum(ph.values()),
        )
        if v > 1:
            first_stage = int(tok * held * (min(m, st.in_flight * v) - 1) / v)
            out["last-backward"] = {
                **base,
                **fsdp,
                "gradients": grads,
                "activations": first_stage + int(tok * per.recompute),
            }
    return out


# --- device_map: one process, its model's layers spread over several GPUs (naive model parallelism) ---------------
# accelerate 1.15.0 src/accelerate/utils/modeling.py, as transformers' `from_pretrained(device_map="auto")` runs it
# (modeling_utils `_get_device_map`: `get_balanced_memory`, then `infer_auto_device_map`; ms-swift's MP + DDP patch
# calls the same two over each process's GPUs: v4.0.0 swift/model/patcher.py `_infer_auto_device_map_patch`).


def device_map_devices(rp: ResolvedPlan) -> list[Stage]:
    """What each of a process's `devices_per_process` GPUs holds under accelerate's balanced device map, by
    construction. `get_balanced_memory`: every GPU but the last may take `model size // n` plus a buffer of 1.25 ×
    the larger of one no-split block and the mean leaf module (`buffer = int(1.25 * max(buffer, mean_leaves))`); the
    last GPU keeps its whole memory. `infer_auto_device_map` then fills the GPUs in module order (embeddings, the
    blocks, the final norm, the LM head), never splitting a block, and keeps the largest remaining layer's size free
    on the first GPU (`main_devices = [gpus[0], "cpu"]`: `current_max_size - max_layer_size`). A head tied to the
    embeddings is placed with them (`get_module_size_with_ties`), so it runs — with the logits and the loss — on the
    first GPU. Sizes are counted at one dtype, as accelerate counts them (quantized models at the target dtype)."""
    s = shapes(rp.arch)
    n = max(rp.devices_per_process, 1)
    layers = max(rp.arch.layers, 1)
    tied = rp.arch.tied_embeddings or s.lm_head_params == 0
    embed, head = s.embed_params, 0 if tied else s.lm_head_params
    block = max((s.total - embed - head) / layers, 1.0)
    per_gpu = s.total // n + int(1.25 * block)
    modules: list[tuple[str, float]] = [("embed", embed)] + [("block", block)] * layers + [("head", head)]
    used = [0.0] * n
    held = [[0, False, False] for _ in range(n)]  # layers, embedding, head
    device = 0
    for i, (kind, size) in enumerate(modules):
        while device < n - 1:
            # the largest layer still to place (a tied head counts nothing: its weight is the embedding's, and
            # `compute_module_sizes` counts a shared tensor once)
            reserve = max((sz for _, sz in modules[i + 1 :]), default=0.0) if device == 0 else 0.0
            if used[device] + size <= per_gpu - reserve:
                break
            device += 1
        used[device] += size
        if kind == "block":
            held[device][0] += 1
        elif kind == "embed":
            held[device][1] = True
            held[device][2] = held[device][2] or tied
        else:
            held[device][2] = held[device][2] or not tied
    out = []
    for d, (k, emb, hd) in enumerate(held):
        out.append(Stage(f"GPU {d}", int(used[d]), 0, int(k), 1.0, bool(emb), bool(hd)))
    return out


# the phases' components and what each scales with on one GPU of the map
_WEIGHT_PARTS = ("weights", "quant_constants", "reference", "reward_model", "value_model", "teacher")
_TRAINED_PARTS = ("adapters", "gradients", "optimizer", "optimizer_paged")
_HEAD_PARTS = ("logits", "teacher_logits")


def device_map_phases(
    rp: ResolvedPlan,
    phases: dict[str, dict[str, int]],
    block_activations: dict[str, int],
    embed_bytes: int,
    head_bytes: int,
) -> tuple[dict[str, dict[str, int]], Stage]:
    """The phases of the busiest GPU of a device map, from the phases of the whole model on one GPU. The forward runs
    the GPUs one after another and the backward back, so each GPU holds its own blocks' weights, gradients and
    optimizer states and every saved activation of its blocks for the whole step; the logits and the loss live on the
    GPU with the LM head. `block_activations`: what one more block adds to each phase's activations (the rest — one
    block's recompute or attention transients, the final norm — stays whole on every GPU). `embed_bytes`/`head_bytes`:
    the embedding's and the untied head's weights as held (16-bit beside quantized blocks)."""
    devs = device_map_devices(rp)
    layers = max(rp.arch.layers, 1)
    total_params = max(sum(st.dense_params for st in devs), 1)
    peft = rp.peft != "none"
    best: tuple[int, dict[str, dict[str, int]], Stage] | None = None
    for st in devs:
        act = st.layers / layers
        trained = act if peft else st.dense_params / total_params
        out: dict[str, dict[str, int]] = {}
        for name, parts in phases.items():
            new = {}
            for k, v in parts.items():
                if k in ("weights", "quant_constants"):
                    v = _weight_share(
                        v, st, layers, embed_bytes if k == "weights" else 0, head_bytes if k == "weights" else 0
                    )
                elif k in _WEIGHT_PARTS:
                    v = int(v * st.dense_params / total_params)
                elif k in _TRAINED_PARTS:
                    v = int(v * trained)
                elif k in _HEAD_PARTS:
                    v = v if st.head else 0
                elif k == "activations":
                    v = max(int(v - block_activations.get(name, 0) * (layers - st.layers)), 0)
                elif k == "temporaries" and name == "optimizer-step":
                    v = int(v * trained)
                elif k == "temporaries" and name == "end-of-backward":
                    v = v if st.embedding else 0  # the embedding's second gradient
                new[k] = v
            out[name] = new
        peak = max(sum(p.values()) - p.get("optimizer_paged", 0) for p in out.values())
        if best is None or peak > best[0]:
            best = (peak, out, st)
    assert best is not None
    return best[1], best[2]


def _weight_share(total: int, st: Stage, layers: int, embed_bytes: int, head_bytes: int) -> int:
    """A GPU's weights: its blocks' share of the blocks' bytes, plus the embedding and the head where they are."""
    blocks = max(total - embed_bytes - head_bytes, 0)
    return int(blocks * st.layers / layers + (embed_bytes if st.embedding else 0) + (head_bytes if st.head else 0))


def device_map_note(rp: ResolvedPlan, peak: Stage) -> str:
    """The estimate's assumption: how the layers are spread and which GPU is the peak."""
    devs = device_map_devices(rp)
    spread = ", ".join(
        f"{st.name}: {st.layers} blocks" + (" + embeddings" if st.embedding else "") + (" + LM head" if st.head else "")
        for st in devs
    )
    return (
        f"device_map over {len(devs)} GPUs per process (accelerate's balanced placement; {spread}); the figure is "
        f"{peak.name}'s, the busiest: its blocks' weights, gradients, optimizer states and saved activations"
        + (", and the logits and loss" if peak.head else "")
    )
