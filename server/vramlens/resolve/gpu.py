"""GPU stage: the GPU and how many — the settings win, then the file (a name, a `# vramlens: gpu=…` directive, a
comment), then detection, else DEFAULT_GPU, an assumption every view names — and the run's process count."""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.knowledge.schema import GpuSpec
from vramlens.plan import Origin, Sourced, TrainingPlan
from vramlens.resolve.common import (
    CHOOSE_GPU,
    DEFAULT_GPU,
    Approximate,
    Context,
    ResolveError,
    comment_gpu_phrase,
)
from vramlens.settings import Settings


@dataclass(frozen=True)
class GpuPart:
    gpu: GpuSpec
    count: int  # GPUs per node
    count_given: str | None  # "setting", "file", or None when no count was named


def resolve_gpu(ctx: Context) -> GpuPart:
    gpu, count, count_given = _gpu(ctx.plan, ctx.settings, ctx.sources, ctx.assumptions)
    return GpuPart(gpu, count, count_given)


def _gpu(
    plan: TrainingPlan, settings: Settings, sources: dict, assumptions: list[str]
) -> tuple[GpuSpec, int, str | None]:
    from vramlens.knowledge import gpus

    count = None
    spec = None
    if settings.gpu:
        found = gpus.lookup_gpu(settings.gpu)
        if found is None:
            hints = gpus.suggest_gpu(settings.gpu)
            hint = hints[0] if hints else None
            raise ResolveError(
                f"unknown GPU `{settings.gpu}`" + (f" — did you mean `{hint}`?" if hint else ""), "gpu_name", hint
            )
        spec, count = found[0], found[1]
        sources["gpu_name"] = Sourced(value=spec.name, origin=Origin.SETTING)
    elif plan.gpu_name is not None:
        found = gpus.lookup_gpu(plan.gpu_name.value)
        if found is not None:
            spec, count = found[0], found[1]
            sources["gpu_name"] = plan.gpu_name
            if plan.gpu_name.origin == Origin.ASSUMED and plan.gpu_name.key == "comment":
                assumptions.append(
                    f"GPU {spec.name} {comment_gpu_phrase(plan.gpu_name)}: a comment is not a setting — {CHOOSE_GPU}"
                )
    if spec is None:
        default = gpus.lookup_gpu(DEFAULT_GPU)
        assert default is not None  # DEFAULT_GPU is in the catalog
        spec, count = default[0], default[1]
        sources["gpu_name"] = Sourced(value=spec.name, origin=Origin.ASSUMED, note=f"no GPU named; {CHOOSE_GPU}")
        assumptions.append(
            f"no GPU named in the config or settings (and none detected): assumed {spec.name} — {CHOOSE_GPU}"
        )
    if sources["gpu_name"].origin == Origin.ASSUMED or not count or count <= 1:
        given = None  # a GPU name without a count ("A100", not "8xA100")
    else:
        given = "setting" if sources["gpu_name"].origin == Origin.SETTING else "file"
    if settings.gpu_count:
        count = settings.gpu_count
        given = "setting"
        sources["gpu_count"] = Sourced(value=count, origin=Origin.SETTING)
    elif plan.gpu_count is not None and given != "setting":
        count = plan.gpu_count.value
        given = "file"
        sources["gpu_count"] = plan.gpu_count
    elif given is None and settings.machine_gpu_count and plan.world_size is None:
        count = settings.machine_gpu_count
        sources["gpu_count"] = Sourced(value=count, origin=Origin.SETTING, note="GPUs on this machine (nvidia-smi)")
    count = max(1, int(count or 1))
    return spec, count, given


def _world(
    plan: TrainingPlan,
    settings: Settings,
    gpu: GpuPart,
    sources: dict,
    assumptions: list[str],
) -> tuple[int, int]:
    """(processes in the run, GPUs per node). The settings' count (`--num-gpus`, `gpu = "8xH100"`) wins over
    what the file's launcher says, keeping its number of machines; a process count from the file (accelerate
    `num_processes`, `torchrun --nproc_per_node`, `deepspeed --num_gpus`, `CUDA_VISIBLE_DEVICES`) with no GPU
    count of its own is taken as that many GPUs on one machine; a node count alone, `_nodes_world`."""
    count, count_given = gpu.count, gpu.count_given
    world_file = plan.world_size.value if plan.world_size is not None else None
    nodes = int(plan.node_count.value) if plan.node_count is not None and plan.node_count.value else 1
    if nodes > 1:
        sources["node_count"] = plan.node_count
    if not world_file and nodes > 1:
        return _nodes_world(plan, gpu.gpu, nodes, count, count_given, sources, assumptions)
    if count_given == "setting":
        nodes = 1
        if world_file and plan.gpu_count is not None and plan.gpu_count.value:
            nodes = max(1, int(world_file) // int(plan.gpu_count.value))
        world = count * nodes
        if world_file and world != world_file:
            sources["world_size"] = Sourced(
                value=world, origin=Origin.SETTING, note=f"{count} GPUs per node from the settings × {nodes} node(s)"
            )
        return world, count
    if world_file:
        sources["world_size"] = plan.world_size
        if nodes > 1 and int(world_file) % nodes == 0 and count * nodes != int(world_file):
            # the processes of the whole run (a `N GPUs` comment counts them all) over the nodes the file states
            count = int(world_file) // nodes
            sources["gpu_count"] = Sourced(
                value=count, origin=Origin.DERIVED, note=f"{world_file} processes over the run's {nodes} nodes"
            )
        elif count_given is None:
            count = int(world_file)
            sources["gpu_count"] = Sourced(
                value=count, origin=Origin.DERIVED, note="the launcher's process count, on one machine"
            )
        return int(world_file), count
    return count, count


def _nodes_world(
    plan: TrainingPlan,
    gpu: GpuSpec,
    nodes: int,
    count: int,
    count_given: str | None,
    sources: dict,
    assumptions: list[str],
) -> tuple[int, int]:
    """A run that states its nodes and not its GPUs per node: the GPU count given elsewhere (settings, file, this
    machine) per node, else the GPUs of one node of the card's reference system (`GpuSpec.node_gpus`: DGX H100's 8,
    a GB200 NVL72 compute tray's 4), an assumption every view names; a card without one runs one GPU a node, and
    the estimate says it is approximate."""
    said = plan.node_count.note if plan.node_count is not None and plan.node_count.note else f"{nodes} nodes"
    if count_given is not None or "gpu_count" in sources:
        note = f"{said} × {count} GPUs per node"
    elif gpu.node_gpus:
        count = gpu.node_gpus
        sources["gpu_count"] = Sourced(
            value=count, origin=Origin.ASSUMED, note=f"GPUs of one {gpu.name} node ({gpu.node_source})"
        )
        note = f"{said} × {count} GPUs per node"
        assumptions.append(
            f"GPUs per node not stated: taken as {count}, one node of {gpu.name}'s reference system "
            f"({gpu.node_source}) — {nodes * count} GPUs; set the count per node with `--num-gpus`"
        )
    else:
        count = 1
        note = f"{said} × 1 GPU per node"
        assumptions.append(
            Approximate(
                f"GPUs per node not stated, and {gpu.name} has no reference node size: estimated with one GPU on "
                f"each of the {nodes} nodes (set the count per node with `--num-gpus`)"
            )
        )
    sources["world_size"] = Sourced(value=nodes * count, origin=Origin.DERIVED, note=note)
    return nodes * count, count
