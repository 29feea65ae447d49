"""torch.distributed.pipelining's schedules, by the names torchtitan builds them with (torch 2.14
torch/distributed/pipelining/schedules.py `get_schedule_class`; torchtitan v0.1.0 torchtitan/distributed/pipeline.py,
v0.2.x and main torchtitan/distributed/pipeline_parallel.py). The single-stage ones (`PipelineScheduleSingle`) run one
stage per rank, the multi-stage ones several, and the V ones place a rank's two stages in a V
(`generate_rank_to_stage_mapping(style="v")`: rank r holds stages r and 2·pp − 1 − r)."""

SINGLE_STAGE_SCHEDULES = ("1F1B", "GPipe")
MULTI_STAGE_SCHEDULES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
TORCH_SCHEDULES = SINGLE_STAGE_SCHEDULES + MULTI_STAGE_SCHEDULES


def schedule_named(name: str) -> str | None:
    """The schedule `name` spells, matched as `get_schedule_class` matches it (case-insensitively); None if torch has
    no schedule of that name."""
    return {n.lower(): n for n in TORCH_SCHEDULES}.get(name.strip().lower())
