"""resolve: TrainingPlan → ResolvedPlan. Fills what the file leaves out with the framework's defaults,
looks up the model, GPU and optimizer, and records every choice it had to make.

The result keeps provenance beside the numbers (`Resolution.sources`), so the surfaces can say
"micro batch 8 — transformers default", while the estimator only ever sees the `ResolvedPlan`.

`resolve()` runs one stage per module, each returning a typed part the later stages read:
model → gpu → precision → adapters → optimizer → distribution → trained precision → sequence → versions →
assemble (the `ResolvedPlan`) → vision → objective. How a framework differs from the generic run is asked of its
hooks (`vramlens.frameworks.hooks.hooks_for`), never tested by name here.
"""

from __future__ import annotations

from vramlens.frameworks.hooks import hooks_for
from vramlens.knowledge import frameworks
from vramlens.plan import TrainingPlan
from vramlens.resolve.adapters import LORA_NAME_MAP, AdapterPart, normalize_targets, resolve_adapters
from vramlens.resolve.assemble import build_plan
from vramlens.resolve.common import (
    ASSUMED_SEQ_LEN,
    CHOOSE_GPU,
    DEFAULT_GPU,
    FUSED_KERNELS,
    PREQUANTIZED_NOTES,
    Approximate,
    Context,
    Resolution,
    ResolveError,
    approximate_reasons,
    comment_gpu_phrase,
    gpu_assumption,
    no_bf16_note,
    shown_compute_dtype,
)
from vramlens.resolve.distribution import DistributionPart, resolve_distribution
from vramlens.resolve.gpu import GpuPart, _world, resolve_gpu
from vramlens.resolve.model import (
    NO_MODEL,
    ModelPart,
    arch_from_sizes,
    expanded_arch,
    hub_lookup,
    no_model_message,
    resolve_model,
)
from vramlens.resolve.objective import ONLINE, PAIRED, distill_fields, objective_fields
from vramlens.resolve.optimizer import OptimizerPart, resolve_optimizer
from vramlens.resolve.precision import (
    PrecisionPart,
    TrainedPrecisionPart,
    resolve_precision,
    resolve_trained_precision,
)
from vramlens.resolve.sequence import SequencePart, resolve_sequence
from vramlens.resolve.versions import VersionsPart, resolve_versions
from vramlens.resolve.vision import (
    DYNAMIC_RESOLUTION,
    IMAGE_KEYS,
    MLLM_TEMPLATES,
    TEXT_PATH_VLM_FAMILIES,
    images_per_sequence,
    vision_fields,
)
from vramlens.settings import Settings

__all__ = [
    "ASSUMED_SEQ_LEN",
    "CHOOSE_GPU",
    "DEFAULT_GPU",
    "DYNAMIC_RESOLUTION",
    "FUSED_KERNELS",
    "IMAGE_KEYS",
    "LORA_NAME_MAP",
    "MLLM_TEMPLATES",
    "NO_MODEL",
    "ONLINE",
    "PAIRED",
    "PREQUANTIZED_NOTES",
    "TEXT_PATH_VLM_FAMILIES",
    "AdapterPart",
    "Approximate",
    "DistributionPart",
    "GpuPart",
    "ModelPart",
    "OptimizerPart",
    "PrecisionPart",
    "Resolution",
    "ResolveError",
    "SequencePart",
    "Settings",
    "TrainedPrecisionPart",
    "VersionsPart",
    "_world",
    "approximate_reasons",
    "arch_from_sizes",
    "comment_gpu_phrase",
    "expanded_arch",
    "gpu_assumption",
    "hub_lookup",
    "images_per_sequence",
    "no_bf16_note",
    "no_model_message",
    "normalize_targets",
    "objective_fields",
    "resolve",
    "shown_compute_dtype",
]


def resolve(plan: TrainingPlan, settings: Settings | None = None) -> Resolution:
    settings = settings or Settings()
    fw_key, fw_label, defaults = frameworks.defaults_for(
        plan.framework,
        plan.objective.value if plan.objective is not None else None,
        settings,
        plan.framework_release,
        plan.installs,
    )
    ctx = Context(plan, settings, fw_key, fw_label, defaults, hooks_for(fw_key), assumptions=list(plan.read_notes))

    model = resolve_model(ctx)
    gpu = resolve_gpu(ctx)
    precision = resolve_precision(ctx, model.arch, gpu.gpu)
    adapters = resolve_adapters(ctx, model.arch)
    optimizer = resolve_optimizer(ctx, model.arch)
    dist = resolve_distribution(ctx, gpu)
    weights = resolve_trained_precision(ctx, precision, adapters, optimizer, dist)
    sequence = resolve_sequence(ctx, model.arch, dist.dp)
    versions = resolve_versions(ctx, model.arch, adapters, dist, weights, sequence)

    rp = build_plan(ctx, model, gpu, adapters, optimizer, dist, weights, sequence, versions)
    rp = rp.with_changes(**vision_fields(ctx, model.arch, adapters.peft, versions), **adapters.plan_fields)
    if adapters.quant_bits and rp.quant_type in PREQUANTIZED_NOTES:
        ctx.assumptions.append(Approximate(PREQUANTIZED_NOTES[rp.quant_type]))
    rp = rp.with_changes(**objective_fields(plan, rp, ctx.hooks, settings, ctx.sources, ctx.assumptions, ctx.defaults))
    if rp.teacher is not None:
        rp = rp.with_changes(**distill_fields(ctx))
    rp = rp.with_changes(unmodelled=tuple(plan.unmodelled), approximate=approximate_reasons(plan, ctx.assumptions))
    return Resolution(rp, ctx.sources, ctx.assumptions)  # uncalibrated: `calibration.calibrate` is the next stage
