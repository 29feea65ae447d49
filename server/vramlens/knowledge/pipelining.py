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


def stage_split(layers: int, stages: int, input_weight: int = 1, output_weight: int = 1) -> tuple[int, ...]:
    """The decoder layers of each of `stages` pipeline stages, in model order, as torchtitan cuts a model
    (torchtitan b5bcd76 torchtitan/distributed/pipeline_parallel.py `_generate_llm_fqn_per_model_part`, the same at
    v0.2.0 … v0.2.2): the embeddings count as `input_weight` layers on the first stage and the final norm and output
    as `output_weight` on the last (`pipeline_parallel_first_stage_less_layers`,
    `pipeline_parallel_last_stage_less_layers`, default 1 each); the layers and the weights are split evenly, the
    first `extra` stages one more, and each stage takes its share less its weights from the next layers. NeMo
    AutoModel's split is this one with both weights 0 (components/distributed/pipelining/functional.py
    `generate_hf_model_fqn_per_model_part`: `num_layers // num_stages`, the first `num_layers % num_stages` stages
    one more, the embeddings and the head added beside). Raises ValueError where torchtitan does: more stages than
    weighted layers, or a weight above a stage's share."""
    if stages < 1:
        raise ValueError("Number of stages must be at least 1")
    if stages == 1:
        return (layers,)
    effective = layers + input_weight + output_weight
    if stages > effective:
        raise ValueError(f"Number of stages ({stages}) cannot be greater than effective layers ({effective})")
    per, extra = divmod(effective, stages)
    if input_weight > per or output_weight > per:
        raise ValueError(
            f"a stage's share of {per} weighted layers is below its weight ({input_weight}, {output_weight})"
        )
    out, taken = [], 0
    for s in range(stages):
        n = per + (s < extra) - (input_weight if s == 0 else 0) - (output_weight if s == stages - 1 else 0)
        n = min(max(n, 0), layers - taken)
        out.append(n)
        taken += n
    return tuple(out)


def rank_stage_ids(schedule: str, pp: int, v: int, rank: int) -> tuple[int, ...]:
    """The stages pipeline rank `rank` of `pp` runs, `v` of them: looped, rank + k·pp (torch 2.14 schedules.py
    `generate_rank_to_stage_mapping(style="loop")`; torchtitan `_get_pp_rank_to_stage_indices_mapping`), or in a V
    for the V schedules: rank and 2·pp − 1 − rank."""
    if schedule in V_SCHEDULES and v == 2:
        return (rank, 2 * pp - 1 - rank)
    return tuple(rank + k * pp for k in range(v))
