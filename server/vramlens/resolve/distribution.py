"""Distribution stage: the parallelism of the run — data parallel ranks, ZeRO/FSDP sharding, tensor, context and
pipeline parallelism, and Megatron-core's layout settings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramlens.knowledge.deepspeed import ZERO_SIZE_DEFAULTS
from vramlens.knowledge.hybridep import nvlink_ranks
from vramlens.knowledge.pipelining import SINGLE_STAGE_SCHEDULES, stage_split
from vramlens.knowledge.schema import GpuSpec
from vramlens.plan import Origin, Sourced
from vramlens.resolve.common import Context
from vramlens.resolve.gpu import GpuPart, _world


@dataclass(frozen=True)
class DistributionPart:
    strategy: str  # "none", "ddp", "deepspeed", "fsdp", "megatron"
    zero: Any  # ZeRO stage (FSDP: 3 for FULL_SHARD)
    world: int  # processes in the run
    count: int  # GPUs per node
    tp: Any
    cp: Any
    pp: Any
    dp: int
    shard_ranks: int  # the ranks ZeRO/FSDP shard over
    devices: int = 1  # GPUs each process spreads the model over (device_map); count = world × devices per node


def resolve_distribution(ctx: Context, gpu: GpuPart) -> DistributionPart:
    plan, settings, val, sources = ctx.plan, ctx.settings, ctx.val, ctx.sources
    count, count_given = gpu.count, gpu.count_given
    strategy = val("dist_strategy") or "none"
    zero = val("zero_stage") or 0
    world, count = _world(plan, settings, gpu, sources, ctx.assumptions)
    devices, world = _devices_per_process(ctx, strategy, world, count, count_given)
    tp = val("tensor_parallel") or 1
    cp = val("context_parallel") or 1
    pp = val("pipeline_parallel") or 1
    if world == 1 and count_given is None and not any(k in sources for k in ("world_size", "gpu_count")):
        world, count = _fewest_gpus(ctx, int(tp), int(cp), int(pp), world, count)
    dp = max(1, int(world) // max(1, int(tp) * int(cp) * int(pp)))
    if strategy == "none" and dp > 1:
        strategy = "ddp"
    # FSDP2 shards over the data-parallel and context-parallel ranks together: the context-parallel ranks compute
    # gradients of the same weights, so the sharding mesh folds them in (torchtitan v0.2.2
    # torchtitan/distributed/parallel_dims.py `build_mesh`: "fsdp: ... This includes dp_shard and cp", used by
    # models/llama3/infra/parallelize.py `apply_fsdp`; NeMo AutoModel v0.5.0 components/distributed/mesh_utils.py
    # `get_fsdp_dp_mesh` → the `dp_shard_cp` mesh; accelerate 1.15 parallelism_config.py `fsdp_dim_names` →
    # `dp_shard_cp`). Megatron's distributed optimizer folds them in itself (components.megatron_dp). DeepSpeed's
    # ZeRO shards over the sequence-data-parallel group, the data- and sequence-parallel ranks together (DeepSpeed
    # v0.19.5 deepspeed/utils/groups.py `_get_sequence_data_parallel_group`: "the process group for zero sharding
    # and gradient allreduce must be across both dimensions of data and sequence parallelism"; with no `mpu` that
    # is the whole world, as under ms-swift's and axolotl's Ulysses/ring attention, which pass none).
    shard_ranks = dp * int(cp) if strategy in ("fsdp", "deepspeed") else dp
    if strategy in ("deepspeed", "fsdp") and int(zero or 0) > 0 and shard_ranks == 1:
        ctx.assumptions.append(
            f"{'ZeRO' if strategy == 'deepspeed' else 'FSDP'} sharding with one GPU shards nothing: "
            "set the GPU count (launcher flag, `# vramlens: gpu=... count=N`, or --num-gpus)"
        )
    _hybridep_domains(ctx, gpu.gpu, count)
    return DistributionPart(strategy, zero, world, count, tp, cp, pp, dp, shard_ranks, devices)


def _hybridep_domains(ctx: Context, gpu: GpuSpec, count: int) -> None:
    """HybridEP over an expert-parallel group wider than the GPUs that reach each other over NVLink: its inter-node
    coordinator joins the NVLink buffers (DeepEP 42144303 csrc/hybrid_ep/hybrid_ep.cu: `internode_coordinator.
    allocate_buffers` when the group spans nodes); its RDMA buffers are counted (knowledge.hybridep
    `internode_bytes`), its DOCA GPU-verbs queue pairs (buffer/internode_doca.cu: `doca_gpu_verbs` QPs of depth
    3 × tokens + 1 per block and peer domain) are named."""
    ep = int(ctx.val("expert_parallel") or 1)
    if ctx.val("dist_strategy") == "megatron":  # the flex dispatcher's group: expert TP × EP (components.dispatch)
        ep *= int(ctx.val("expert_tensor_parallel") or ctx.val("tensor_parallel") or 1)
    domain = nvlink_ranks(gpu, count)
    if ctx.val("ep_dispatch") != "hybridep" or ep <= domain:
        return
    ctx.unmodelled(
        ctx.plan.ep_dispatch,
        "dispatcher",
        "hybridep",
        f"HybridEP's inter-node queue pairs (DOCA GPU verbs) for the {ep}-GPU expert-parallel group over "
        f"{ep // domain} NVLink domains of {domain} {gpu.name} GPUs",
        "its NVLink and RDMA buffers counted, the queue pairs not",
    )


def _fewest_gpus(ctx: Context, tp: int, cp: int, pp: int, world: int, count: int) -> tuple[int, int]:
    """No GPU count anywhere (file, settings, this machine) and a layout that needs more than one GPU: the fewest it
    runs on, an assumption every view names. Expert parallelism takes its ranks from the data- and context-parallel
    ones, which must be a multiple of it (NeMo AutoModel v0.5.0 components/distributed/mesh_utils.py: "non_pp_size
    must be a multiple of ep_size"; torchtitan parallel_dims.py `_validate`; Megatron-core parallel_state.py
    `initialize_model_parallel`: the world a multiple of expert TP × EP × PP)."""
    ep = int(ctx.val("expert_parallel") or 1)
    etp = int(ctx.val("expert_tensor_parallel") or tp)
    fewest = tp * cp * pp * (ep // math.gcd(ep, cp))
    fewest = math.lcm(fewest, etp * ep * pp)
    if fewest <= max(world, 1):
        return world, count
    layout = " × ".join(
        f"{name} {n}" for name, n in (("tp", tp), ("cp", cp), ("pp", pp), ("ep", ep), ("expert tp", etp)) if n > 1
    )
    ctx.sources["world_size"] = Sourced(
        value=fewest, origin=Origin.ASSUMED, note=f"no GPU count given: the fewest GPUs {layout} runs on"
    )
    ctx.assumptions.append(
        f"no GPU count given: taken as {fewest}, the fewest GPUs the parallel layout ({layout}) runs on — set it "
        "with a launcher flag, `# vramlens: gpu=... count=N` or --num-gpus"
    )
    return fewest, fewest


def _devices_per_process(
    ctx: Context, strategy: str, world: int, count: int, count_given: str | None
) -> tuple[int, int]:
    """(GPUs per process, processes) of a model spread over several GPUs by `device_map` (naive model parallelism).
    The plan gives the GPUs per process (ms-swift: visible GPUs // processes per node), or 0 for "every GPU the
    process sees" (`from_pretrained(..., device_map="auto")`), resolved here against the GPU count. ZeRO-3/FSDP shard
    instead (ms-swift passes no device_map then and refuses DeepSpeed/FSDP with one: v3.5.0
    swift/llm/argument/train_args.py `_init_deepspeed`: "DeepSpeed is not compatible with `device_map`")."""
    src = ctx.plan.devices_per_process
    if src is None or src.value is None:
        return 1, world
    given = int(src.value)
    if strategy in ("deepspeed", "fsdp", "megatron"):
        if given != 1:
            ctx.assumptions.append(
                f"device_map over several GPUs is ignored under {strategy}: the engine places the model itself"
            )
        return 1, world
    if given == 0:  # every visible GPU: one process unless a launcher starts several
        procs = int(ctx.plan.world_size.value) if ctx.plan.world_size is not None and ctx.plan.world_size.value else 1
        per = max(1, count // max(procs, 1))
        if per < 2:
            return 1, world
        world = procs
    else:
        per = given
        if count_given == "setting":  # the settings' GPU count: all GPUs, spread `per` to a process
            world = max(1, count // per)
    if per != given:
        ctx.sources["devices_per_process"] = src.model_copy(
            update={"value": per, "note": f"device_map over the {count} visible GPUs of one process"}
        )
    before = ctx.sources.get("world_size")
    if before is None or before.value != world:
        ctx.sources["world_size"] = Sourced(
            value=world, origin=Origin.DERIVED, note=f"{count} GPUs, {per} per process (device_map)"
        )
    return per, world


# Frameworks whose step fills "auto" from the model's hidden size before DeepSpeed reads the config: transformers'
# Trainer (5.24 integrations/deepspeed.py `HfTrainerDeepSpeedConfig.trainer_config_finalize`: reduce_bucket_size
# h², under ZeRO-3 stage3_prefetch_bucket_size 0.9·h² and stage3_param_persistence_threshold 10·h; the live limit
# and the reuse distance it leaves to DeepSpeed) and those built on it (TRL, axolotl, LLaMA-Factory, ms-swift;
# unsloth runs TRL's trainers); accelerate's `prepare` fills the same three (accelerate 1.15 accelerator.py
# `_prepare_deepspeed`). OpenRLHF writes "auto" into the config it hands `deepspeed.initialize` itself
# (openrlhf/utils/deepspeed/deepspeed_utils.py `get_train_ds_config`, v0.6.0 and 3c3be623): nothing fills it.
AUTO_FILLED = frozenset({"transformers", "trl", "axolotl", "llamafactory", "ms-swift", "unsloth"})
AUTO_UNFILLED = frozenset({"openrlhf"})


def zero_sizes(ctx: Context) -> dict[str, int | bool | None]:
    """The ResolvedPlan's ZeRO sizes: each the number the config writes; "auto" as the framework's step fills it
    (None: the HF Trainer's fill, the estimator's own default) or, where nothing fills it, DeepSpeed's default. A
    framework not known to do either is taken to fill it as the HF Trainer does, and the assumptions say so."""
    out: dict[str, int | bool | None] = {}
    unknown = []
    for name, (key, deepspeed_default) in ZERO_SIZE_DEFAULTS.items():
        v = ctx.val(name)
        if v is None or isinstance(v, int):
            out[name] = v
        elif ctx.fw_key in AUTO_UNFILLED:
            out[name] = deepspeed_default
            note = f"`auto`, which nothing fills: DeepSpeed's default {deepspeed_default:,}"
            ctx.sources[name] = ctx.sources[name].model_copy(update={"value": deepspeed_default, "note": note})
        else:
            out[name] = None
            if ctx.fw_key not in AUTO_FILLED:
                unknown.append(key)
    overlap = ctx.val("zero_overlap_comm")
    out["zero_overlap_comm"] = None if overlap is None else bool(overlap)
    if unknown:
        ctx.assumptions.append(
            f"DeepSpeed `auto` ({', '.join(unknown)}) taken as the HF Trainer and accelerate fill it from the hidden "
            "size; a config passed to `deepspeed.initialize` as it is gets DeepSpeed's defaults"
        )
    return out


def _megatron_layout(val) -> dict:
    """The Megatron-core layout settings of the plan, as ResolvedPlan fields (their defaults when unset)."""
    out: dict[str, object] = {
        "virtual_pipeline": int(val("virtual_pipeline") or 1),
        "pipeline_schedule": str(val("pipeline_schedule") or "1F1B"),
        "expert_parallel": int(val("expert_parallel") or 1),
        "ep_dispatch": str(val("ep_dispatch") or ""),
        "sequence_parallel": bool(val("sequence_parallel")),
        "distributed_optimizer": bool(val("distributed_optimizer")),
        "cross_entropy_fusion": bool(val("cross_entropy_fusion")),
        "grad_buffer_dtype": str(val("grad_buffer_dtype") or "fp32"),
        "recompute_layers": int(val("recompute_layers") or 1),
        "precision_aware_optimizer": bool(val("precision_aware_optimizer")),
    }
    if val("fp8_recipe"):
        out["fp8_recipe"] = str(val("fp8_recipe"))
    for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        if val(name) in ("fp32", "fp16", "bf16", "fp8"):
            out[name] = str(val(name))
    if val("expert_tensor_parallel"):
        out["expert_tensor_parallel"] = int(val("expert_tensor_parallel"))
    if val("recompute_method") in ("uniform", "block"):
        out["recompute_method"] = val("recompute_method")
    if val("optimizer_offload_fraction") is not None:
        out["optimizer_offload_fraction"] = float(val("optimizer_offload_fraction"))
    for name in ("first_stage_layers", "last_stage_layers"):
        if val(name) is not None:
            out[name] = int(val(name))
    return out


def pipeline_split(ctx: Context, layers: int, pp: int) -> dict:
    """The ResolvedPlan's `stage_split` (and `virtual_pipeline` where the split sets the stage count) for torch's
    pipelining, where the framework's reader gave its split: the layers of each stage outright (`stage_layers`, their
    count the stages), else the framework's rule (knowledge.pipelining `stage_split`) with its weights and, given
    the layers per stage, ceil((layers + weights) / layers per stage) stages (torchtitan b5bcd76
    torchtitan/distributed/pipeline_parallel.py `_get_pipeline_metadata`; NeMo AutoModel
    components/distributed/pipelining/functional.py `calculate_virtual_stages`, no weights). A split the framework
    refuses is reported and the layers taken as evenly split. Empty where the plan gives no split (Megatron-core's
    layouts: `first_stage_layers`, `last_stage_layers`)."""
    val = ctx.val
    given, lps, firsts = val("stage_layers"), val("layers_per_stage"), val("stage_boundaries")
    weights = val("stage_input_weight"), val("stage_output_weight")
    if pp <= 1 or (given is None and not firsts and lps is None and weights == (None, None)):
        return {}
    if given is None and firsts:
        cuts = [0, *(int(n) for n in firsts), layers]
        given = [b - a for a, b in zip(cuts, cuts[1:])]
        if min(given) <= 0:
            ctx.assumptions.append(
                f"the pipeline split points ({', '.join(map(str, cuts[1:-1]))}) leave a stage without layers of the "
                f"model's {layers}: estimated with an even split"
            )
            return {}
    single = (val("pipeline_schedule") or "1F1B") in SINGLE_STAGE_SCHEDULES
    if given is not None:
        counts = tuple(int(n) for n in given)
        if len(counts) % pp or (single and len(counts) != pp) or sum(counts) != layers:
            ctx.assumptions.append(
                f"the {len(counts)} pipeline stages given ({sum(counts)} layers) do not fit {pp} ranks of the "
                f"model's {layers} layers: estimated with an even split"
            )
            return {}
        return {"stage_split": counts, "virtual_pipeline": len(counts) // pp}
    iw, ow = (int(w or 0) for w in weights)
    v = 1 if single else int(val("virtual_pipeline") or 2)
    if lps is not None and int(lps) > 0:
        n = math.ceil((layers + iw + ow) / int(lps))
        rounding = val("stage_count_rounding")
        if n % pp and rounding == "up":  # NeMo AutoModel `calculate_virtual_stages(round_to_pp_multiple=...)`
            n += pp - n % pp
        elif n % pp and rounding == "down":
            n -= n % pp
        if n % pp or (single and n != pp) or (not single and n < 2 * pp):
            ctx.assumptions.append(
                f"{n} pipeline stages of {lps} layers do not fit {pp} ranks under the schedule (the framework "
                f"refuses it): estimated with {v} stage{'s' if v > 1 else ''} per rank"
            )
        else:
            v = n // pp
    try:
        return {"stage_split": stage_split(layers, pp * v, iw, ow), "virtual_pipeline": v}
    except ValueError as e:
        ctx.assumptions.append(f"the framework refuses the pipeline split ({e}): estimated with an even split")
        return {}
