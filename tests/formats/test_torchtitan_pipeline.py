"""torchtitan's pipeline parallelism read into the plan: the schedule (torch's names, case-insensitive), the stages each
rank runs (two for a multi-stage schedule unless the config sizes them), and FSDP composed with the stages: each rank
holds its stages' share of the sharded state and only its stages' in-flight activations."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.estimate import estimate
from vramlens.formats import parse_document
from vramlens.resolve import Settings, resolve

TITAN = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan"


def titan(version: str = "v0.2.2", **parallelism) -> object:
    """llama3_8b.toml with `[parallelism]` keys set (strings written as TOML strings)."""
    text = (TITAN / version / "llama3_8b.toml").read_text(encoding="utf-8")
    lines = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in parallelism.items())
    for k in parallelism:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(f"{k} ")) + "\n"
    text = text.replace("[parallelism]\n", f"[parallelism]\n{lines}")
    plan = parse_document(text, "/run/llama3_8b.toml").plan
    assert plan is not None
    return plan


def value(plan, name: str):
    s = getattr(plan, name)
    return None if s is None else s.value


def unmodelled(plan) -> set[str]:
    return {u.key for u in plan.unmodelled}


def per_gpu(plan, gpus: int = 8):
    rp = resolve(plan, Settings(gpu="H100-80GB", gpu_count=gpus)).resolved
    return estimate(rp, limits=False)


@pytest.mark.parametrize(
    "written, schedule, stages",
    [
        ("1F1B", "1F1B", None),
        ("gpipe", "GPipe", None),
        ("interleaved1f1b", "Interleaved1F1B", 2),
        ("LoopedBFS", "LoopedBFS", 2),
        ("InterleavedZeroBubble", "InterleavedZeroBubble", 2),
        ("ZBVZeroBubble", "ZBVZeroBubble", 2),
        ("DualPipeV", "DualPipeV", 2),
    ],
)
def test_schedule_and_stages_per_rank_are_read(written, schedule, stages):
    plan = titan(pipeline_parallel_degree=4, pipeline_parallel_schedule=written)
    assert value(plan, "pipeline_schedule") == schedule
    assert value(plan, "virtual_pipeline") == stages
    assert "pipeline_parallel_degree" not in unmodelled(plan)


def test_an_unknown_schedule_is_said():
    """torch's `get_schedule_class` raises on a name it does not know."""
    plan = titan(pipeline_parallel_degree=2, pipeline_parallel_schedule="ZeroBubble1F1B")
    assert any("unknown pipeline schedule" in i.message for i in plan.issues)
    assert value(plan, "pipeline_schedule") is None


def test_layers_per_stage_is_named_not_modelled():
    """`pipeline_parallel_layers_per_stage` sizes the stages from the model's layers: estimated with two per rank."""
    plan = titan(
        pipeline_parallel_degree=2, pipeline_parallel_schedule="Interleaved1F1B", pipeline_parallel_layers_per_stage=4
    )
    assert "pipeline_parallel_layers_per_stage" in unmodelled(plan)
    assert value(plan, "virtual_pipeline") == 2


def test_split_points_give_the_stages():
    """v0.1.0: one stage per split point plus one, over the pipeline ranks."""
    plan = titan(
        "v0.1.0",
        pipeline_parallel_degree=2,
        pipeline_parallel_schedule="Interleaved1F1B",
        pipeline_parallel_split_points=["layers.8", "layers.16", "layers.24", "layers.28", "layers.30"],
    )
    assert value(plan, "virtual_pipeline") == 3


def test_fsdp_ranks_hold_their_stages_activations():
    """FSDP over the data-parallel ranks and pipeline stages compose (torch's schedules run the FSDP-wrapped stage
    module): a rank keeps the activations of its stage's in-flight micro-batches — local_batch_size 1 is one
    micro-batch through a quarter of the layers at pp = 4, not every layer's — and FSDP shards what the stage holds."""
    common = dict(pipeline_parallel_degree=4, pipeline_parallel_schedule="1F1B", pipeline_parallel_microbatch_size=1)
    sharded = per_gpu(titan(data_parallel_shard_degree=2, **common))
    replicated = per_gpu(titan(data_parallel_shard_degree=1, data_parallel_replicate_degree=2, **common))
    whole = per_gpu(titan(data_parallel_shard_degree=8))
    assert sharded.components["activations"] < 0.5 * whole.components["activations"]
    assert sharded.components["optimizer"] < 0.6 * replicated.components["optimizer"]
