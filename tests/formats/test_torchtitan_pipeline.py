"""torchtitan's pipeline parallelism read into the plan: the schedule (torch's names, case-insensitive), the stages each
rank runs (two for a multi-stage schedule unless the config sizes them), and FSDP composed with the stages: each rank
holds its stages' share of the sharded state and only its stages' in-flight activations."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.estimate import allocated_peak, estimate, pipeline_rank_peak
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


def resolved(plan, gpus: int = 8):
    return resolve(plan, Settings(gpu="H100-80GB", gpu_count=gpus)).resolved


def test_default_split_weighs_the_embeddings_and_the_output_as_a_layer():
    """Llama-3.1-8B's 32 layers over 4 stages, the embeddings and the output modules a layer each (34 weighted, the
    first two stages one more): torchtitan's `_generate_llm_fqn_per_model_part(4, 32)` cuts 8, 9, 8, 7 layers."""
    plan = titan(pipeline_parallel_degree=4, pipeline_parallel_schedule="1F1B")
    assert value(plan, "stage_input_weight") == value(plan, "stage_output_weight") == 1
    assert resolved(plan).stage_split == (8, 9, 8, 7)
    interleaved = resolved(titan(pipeline_parallel_degree=4, pipeline_parallel_schedule="Interleaved1F1B"))
    assert interleaved.stage_split == (4, 5, 4, 4, 4, 4, 4, 3)


def test_first_stage_less_layers_moves_the_split():
    """`pipeline_parallel_first_stage_less_layers = 2`: 35 weighted layers, 9 a stage less the weights:
    `_generate_llm_fqn_per_model_part(4, 32, 2, 1)` cuts 7, 9, 9, 7."""
    plan = titan(
        pipeline_parallel_degree=4, pipeline_parallel_schedule="1F1B", pipeline_parallel_first_stage_less_layers=2
    )
    assert value(plan, "stage_input_weight") == 2
    assert "pipeline_parallel_first_stage_less_layers" not in unmodelled(plan)
    assert resolved(plan).stage_split == (7, 9, 9, 7)


def test_every_rank_of_an_uneven_split_is_estimated():
    """At default weights the second rank holds 9 of 1F1B's layers, one more than the first: every rank is
    estimated with its own stages' layers and the plan's figure is the busiest rank's."""
    rp = resolved(titan(pipeline_parallel_degree=4, pipeline_parallel_schedule="1F1B"))
    assert rp.stage_split == (8, 9, 8, 7)
    ranks = [pipeline_rank_peak(rp, r) for r in range(4)]
    assert len(set(ranks)) == 4
    assert allocated_peak(rp) == max(ranks)
    assert allocated_peak(rp) != allocated_peak(rp.with_changes(stage_split=()))


def test_layers_per_stage_sets_the_stages():
    """`pipeline_parallel_layers_per_stage = 3`: ceil((32 + 1 + 1) / 3) = 12 stages, six on each of 2 ranks
    (`_get_pipeline_metadata`); a count of stages the ranks do not divide is refused by torchtitan, said, and
    estimated with two stages per rank."""
    plan = titan(
        pipeline_parallel_degree=2, pipeline_parallel_schedule="Interleaved1F1B", pipeline_parallel_layers_per_stage=3
    )
    assert "pipeline_parallel_layers_per_stage" not in unmodelled(plan)
    rp = resolved(plan)
    assert rp.virtual_pipeline == 6
    # `_generate_llm_fqn_per_model_part(12, 32)`: 34 weighted layers, 2 a stage and the first 10 stages one more
    assert rp.stage_split == (2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1)
    odd = resolve(
        titan(
            pipeline_parallel_degree=2,
            pipeline_parallel_schedule="Interleaved1F1B",
            pipeline_parallel_layers_per_stage=4,
        ),
        Settings(gpu="H100-80GB", gpu_count=8),
    )
    assert odd.resolved.virtual_pipeline == 2
    assert any("9 pipeline stages" in str(a) for a in odd.assumptions)


def test_module_names_per_stage_give_the_split():
    """`module_fqns_per_model_part` names each stage's modules: its `layers.N` entries are the stage's layers."""
    parts = [["tok_embeddings"] + [f"layers.{i}" for i in range(10)]]
    parts += [[f"layers.{i}" for i in range(10, 20)], [f"layers.{i}" for i in range(20, 28)]]
    parts += [[f"layers.{i}" for i in range(28, 32)] + ["norm", "output"]]
    plan = titan(pipeline_parallel_degree=4, pipeline_parallel_schedule="1F1B", module_fqns_per_model_part=parts)
    assert value(plan, "stage_layers") == [10, 10, 8, 4]
    assert resolved(plan).stage_split == (10, 10, 8, 4)


def test_split_points_give_the_stages():
    """v0.1.0: one stage per split point plus one, over the pipeline ranks, each stage the layers from its split
    point up to the next (models/llama3/infra/pipeline.py `pipeline_llama_manual_split`)."""
    plan = titan(
        "v0.1.0",
        pipeline_parallel_degree=2,
        pipeline_parallel_schedule="Interleaved1F1B",
        pipeline_parallel_split_points=["layers.8", "layers.16", "layers.24", "layers.28", "layers.30"],
    )
    assert value(plan, "virtual_pipeline") == 3
    assert value(plan, "stage_boundaries") == [8, 16, 24, 28, 30]
    rp = resolved(plan)
    assert rp.stage_split == (8, 8, 8, 4, 2, 2) and rp.virtual_pipeline == 3


@pytest.mark.parametrize("points", [["layers.16", "layers.8"], ["norm"], ["layers.0"]])
def test_split_points_that_name_no_stage_boundary_are_said(points):
    plan = titan(
        "v0.1.0", pipeline_parallel_degree=2, pipeline_parallel_schedule="1F1B", pipeline_parallel_split_points=points
    )
    assert value(plan, "stage_boundaries") is None
    assert any("pipeline_parallel_split_points" in i.message for i in plan.issues)


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


def test_hsdp_shards_within_each_replica():
    """data_parallel_shard_degree 4 × data_parallel_replicate_degree 2 over 8 GPUs: `fully_shard` on the
    (dp_replicate, dp_shard_cp) mesh shards within 4 GPUs (torchtitan parallel_dims.py), so a GPU keeps what plain
    FSDP over 4 GPUs keeps, twice what FSDP over all 8 does."""
    hsdp_plan = titan(data_parallel_shard_degree=4, data_parallel_replicate_degree=2)
    assert value(hsdp_plan, "dp_replicas") == 2 and not [u for u in hsdp_plan.unmodelled if "HSDP" in u.what]
    hsdp = per_gpu(hsdp_plan)
    four = per_gpu(titan(data_parallel_shard_degree=4), gpus=4)
    eight = per_gpu(titan(data_parallel_shard_degree=8))
    assert hsdp.components["optimizer"] == pytest.approx(four.components["optimizer"], rel=0.01)
    assert hsdp.components["optimizer"] == pytest.approx(2 * eight.components["optimizer"], rel=0.01)
