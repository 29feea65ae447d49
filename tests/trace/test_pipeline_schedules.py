"""The estimator's count of in-flight micro-batches per pipeline rank (`components.pipeline.torch_schedule_in_flight`,
arithmetic) held to torch's own schedules: every schedule torchtitan builds by name is built by torch 2.14 for a grid of
pipeline degrees (2–8), stages per rank (1 for the single-stage schedules, 2 for the V ones, 2–4 for the others) and
micro-batches (1–16), under torch's fake process group, and each rank's `pipeline_order` (the actions it runs: stage,
F/B/I/W, micro-batch) is replayed: the peak of forwards whose activations are still kept — freed by the full backward
(B) or, where the backward is split, by the weight backward (W: `stage_backward_input` retains the graph). The cells
torch refuses (Schedule1F1B with fewer micro-batches than stages, the interleaved ones with micro-batches not a
multiple of their rounds, DualPipeV with fewer than 2 × pp) are skipped as torch skips them: it raises.
Skips where torch or torch.distributed are missing (CI installs the trace extra)."""

from __future__ import annotations

import logging
import random

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
if not torch.distributed.is_available():
    pytest.skip("torch built without distributed support", allow_module_level=True)

from torch import nn  # noqa: E402
from torch.distributed.pipelining import PipelineStage  # noqa: E402
from torch.distributed.pipelining.schedules import (  # noqa: E402
    PipelineScheduleSingle,
    _ComputationType,
    generate_rank_to_stage_mapping,
    get_schedule_class,
)
from vramlens.estimate.components.pipeline import (  # noqa: E402
    torch_rank_ops,
    torch_schedule_held_layers,
    torch_schedule_in_flight,
)
from vramlens.knowledge.pipelining import TORCH_SCHEDULES, V_SCHEDULES  # noqa: E402
from vramlens.trace.sharded import fake_process_group  # noqa: E402

PP = range(2, 9)
MICROBATCHES = range(1, 17)


def stages_per_rank(schedule: str) -> tuple[int, ...]:
    if issubclass(get_schedule_class(schedule), PipelineScheduleSingle):
        return (1,)
    return (2,) if schedule in V_SCHEDULES else (2, 3, 4)


def pipeline_order(schedule: str, pp: int, v: int, m: int) -> dict[int, list]:
    """torch's `pipeline_order` of every rank, built as rank 0 of a fake group of `pp` (identity stages with static
    metadata: the order does not depend on the stages' modules)."""
    fake_process_group(pp, 0)
    n = pp * v
    ids = generate_rank_to_stage_mapping(pp, n, style="v" if schedule in V_SCHEDULES else "loop")[0]
    x = torch.empty(1, 2, device="meta")
    stages = [PipelineStage(nn.Identity(), i, n, torch.device("cpu"), input_args=x, output_args=x) for i in ids]
    cls = get_schedule_class(schedule)
    sched = cls(stages[0], n_microbatches=m) if v == 1 else cls(stages, n_microbatches=m)
    return sched.pipeline_order


def peak_in_flight(actions: list, m: int) -> int:
    """The most stage forwards a rank holds at once over its actions (an overlapped F+B runs its forward, then its
    backward: schedules.py `_PipelineScheduleRuntime._step_microbatches`). Actions of micro-batches the step does not
    have (1F1B's order lists pp − 1 − rank warm-up forwards whatever M) are not run."""
    held = peak = 0
    for a in actions:
        if a is None:
            continue
        for b in a.sub_actions if a.sub_actions is not None else (a,):
            if b.microbatch_index is None or b.microbatch_index >= m:
                continue
            if b.computation_type == _ComputationType.FORWARD:
                held += 1
                peak = max(peak, held)
            elif b.computation_type in (_ComputationType.FULL_BACKWARD, _ComputationType.BACKWARD_WEIGHT):
                held -= 1
    return peak


@pytest.fixture(autouse=True)
def _quiet():
    # torch logs a warning for every bubble it adds to a zero-bubble order
    logging.getLogger("torch.distributed.pipelining").setLevel(logging.ERROR)
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("schedule", TORCH_SCHEDULES)
def test_in_flight_rule_is_torchs_schedule(schedule):
    """For every cell torch builds, every rank's peak from its `pipeline_order` equals the estimator's rule."""
    checked, wrong = 0, []
    for v in stages_per_rank(schedule):
        for pp in PP:
            for m in MICROBATCHES:
                try:
                    order = pipeline_order(schedule, pp, v, m)
                except ValueError:
                    continue  # torch refuses the cell
                for rank in range(pp):
                    torch_peak = peak_in_flight(order[rank], m)
                    rule = torch_schedule_in_flight(schedule, pp, v, m, rank)
                    checked += 1
                    if rule != torch_peak:
                        wrong.append((pp, v, m, rank, torch_peak, rule))
    assert checked > 100
    assert not wrong, f"(pp, stages per rank, M, rank, torch, rule): {wrong[:10]}"


def test_schedule_names_are_torchs():
    """The schedules the plan names are the ones torch's `get_schedule_class` builds, single-stage where torch's are."""
    for name in TORCH_SCHEDULES:
        assert get_schedule_class(name).__name__.lower().endswith(name.lower())
    singles = {n for n in TORCH_SCHEDULES if issubclass(get_schedule_class(n), PipelineScheduleSingle)}
    assert singles == {"1F1B", "GPipe"}


# the multi-stage schedules whose rank order the estimator writes out (the V ones are counted: `stages_per_rank`)
ORDERED = ("LoopedBFS", "Interleaved1F1B", "InterleavedZeroBubble")
KIND = {
    _ComputationType.FORWARD: "F",
    _ComputationType.FULL_BACKWARD: "B",
    _ComputationType.BACKWARD_INPUT: "I",
    _ComputationType.BACKWARD_WEIGHT: "W",
}


def held_layers(actions: list, rank: int, pp: int, v: int, m: int, layers: tuple[int, ...]) -> tuple[int, int]:
    """(the most layers of stage forwards a rank holds at once, what it holds when the model's last stage runs its
    backward) over its actions, each forward weighing its stage's layers (`layers`, local order)."""
    held = peak = at_loss = 0
    for a in actions:
        if a is None or a.microbatch_index is None or a.microbatch_index >= m:
            continue
        k = (a.stage_index - rank) // pp
        if a.computation_type == _ComputationType.FORWARD:
            held += layers[k]
            peak = max(peak, held)
        elif a.stage_index == pp * v - 1 and a.computation_type != _ComputationType.BACKWARD_WEIGHT:
            at_loss = max(at_loss, held)
        if a.computation_type in (_ComputationType.FULL_BACKWARD, _ComputationType.BACKWARD_WEIGHT):
            held -= layers[k]
    return peak, at_loss


@pytest.mark.parametrize("schedule", ORDERED)
def test_rank_order_is_torchs(schedule):
    """Every rank's computations, in order, are torch's `pipeline_order` less its idle steps."""
    checked, wrong = 0, []
    for v in (2, 3, 4):
        for pp in PP:
            for m in MICROBATCHES:
                try:
                    order = pipeline_order(schedule, pp, v, m)
                except ValueError:
                    continue
                for rank in range(pp):
                    theirs = [
                        (KIND[a.computation_type], (a.stage_index - rank) // pp, a.microbatch_index)
                        for a in order[rank]
                        if a is not None
                    ]
                    checked += 1
                    if theirs != torch_rank_ops(schedule, pp, v, m, rank):
                        wrong.append((pp, v, m, rank))
    assert checked > 100
    assert not wrong, f"(pp, stages per rank, M, rank): {wrong[:10]}"


@pytest.mark.parametrize("schedule", ORDERED)
def test_uneven_stages_held_layers_are_torchs(schedule):
    """With uneven stages (random layers, 0–5, per stage) the layers a rank holds at its peak and at the loss's
    backward equal the replay of torch's `pipeline_order` weighted by each stage's layers; the count of forwards
    times the mean stage (the rule for equal stages) misses many, but under LoopedBFS, which holds every forward."""
    rng = random.Random(0)
    checked, wrong, count_rule_wrong = 0, [], 0
    for v in (2, 3, 4):
        for pp in (2, 3, 4, 6, 8):
            for m in (1, 2, 3, 4, 6, 8, 12, 16):
                try:
                    order = pipeline_order(schedule, pp, v, m)
                except ValueError:
                    continue
                for rank in range(pp):
                    layers = tuple(rng.randint(0, 5) for _ in range(v))
                    torch_held = held_layers(order[rank], rank, pp, v, m, layers)
                    rule = torch_schedule_held_layers(schedule, pp, m, rank, layers)
                    checked += 1
                    if rule != (torch_held[0], torch_held[1] if rank == pp - 1 else 0):
                        wrong.append((pp, v, m, rank, layers, torch_held, rule))
                    count_rule_wrong += (
                        torch_schedule_in_flight(schedule, pp, v, m, rank) * sum(layers) / v != (torch_held[0])
                    )
    assert checked > 100
    assert not wrong, f"(pp, stages per rank, M, rank, layers, torch, rule): {wrong[:5]}"
    if schedule != "LoopedBFS":
        assert count_rule_wrong > checked // 4, (count_rule_wrong, checked)
