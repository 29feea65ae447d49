"""Where each setting of an estimate came from, in the words every view uses (CLI text and JSON, hover).

One table of setting names (`CONCEPT_TITLES`), one way to show a value (`show_value`), and one list of the
framework defaults that were applied (`applied_defaults`): the CLI's "defaults applied" lines, the JSON
`sources` entries and the hover's "defaults of …" line are all built from these, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Mapping

from vramlens.plan import Origin, Sourced

CONCEPT_TITLES = {
    "micro_batch": "micro batch per GPU",
    "global_batch": "global batch",
    "grad_accum": "gradient accumulation",
    "seq_len": "sequence length",
    "packing": "sample packing",
    "eval_batch": "evaluation batch",
    "grad_checkpointing": "gradient checkpointing",
    "ckpt_reentrant": "reentrant checkpointing",
    "activation_offload": "activation offloading",
    "attn_impl": "attention implementation",
    "compile": "torch.compile",
    "loss_impl": "loss implementation",
    "fused_kernels": "fused kernels",
    "float8_linears": "float8 linears",
    "float8_all_gather": "float8 all-gather",
    "qat": "quantization-aware training",
    "optimizer": "optimizer",
    "optimizer_impl": "optimizer implementation",
    "optimizer_in_bwd": "optimizer in backward",
    "zero_grad_set_to_none": "zero_grad(set_to_none)",
    "peft_method": "PEFT method",
    "lora_r": "LoRA rank",
    "lora_alpha": "LoRA alpha",
    "lora_dropout": "LoRA dropout",
    "lora_targets": "LoRA target modules",
    "modules_to_save": "fully trained modules",
    "quant_bits": "weight quantization",
    "quant_type": "quantization type",
    "quant_double": "double quantization",
    "quant_storage_dtype": "quantized storage dtype",
    "quant_compute_dtype": "quantized compute dtype",
    "dist_strategy": "distribution strategy",
    "zero_stage": "ZeRO / FSDP sharding stage",
    "offload_optimizer": "optimizer offload",
    "offload_params": "parameter offload",
    "offload_params_idle": "parameters offloaded between updates",
    "precision_aware_optimizer": "precision-aware optimizer",
    "main_params_dtype": "master weight dtype",
    "exp_avg_dtype": "Adam first moment dtype",
    "exp_avg_sq_dtype": "Adam second moment dtype",
    "offload_optimizer_idle": "optimizer state offloaded between updates",
    "world_size": "data-parallel ranks",
    "tensor_parallel": "tensor parallel",
    "context_parallel": "context parallel",
    "pipeline_parallel": "pipeline parallel",
    "devices_per_process": "GPUs per process (device_map)",
    "fsdp_state_dict_type": "FSDP state-dict type",
    "alloc_conf": "PYTORCH_CUDA_ALLOC_CONF",
    "gpu_name": "GPU",
    "gpu_count": "GPU count",
    "node_count": "nodes",
    "weight_dtype": "weight dtype",
    "amp_dtype": "mixed precision",
    "model_id": "model",
    "objective": "training objective",
    "reference_free": "reference-free loss",
    "precompute_ref": "precomputed reference log-probs",
    "ref_model_id": "reference model",
    "prompt_len": "prompt length",
    "completion_len": "completion length",
    "num_generations": "generations per prompt",
    "generation": "generation",
    "vllm_memory_share": "vLLM memory share",
    "reward_model_id": "reward model",
    "generation_sleeps": "generation engine released while the policy trains",
    "generation_eager": "generation engine without CUDA graphs (enforce_eager)",
    "ref_dtype": "reference model dtype",
    "ref_offload": "reference model offloaded to the CPU",
    "fsdp_mixed_precision": "FSDP mixed precision (16-bit gathered parameters)",
    "value_model": "value model",
    "critic_model_id": "critic model",
    "teacher_model_id": "teacher model",
    "teacher_dtype": "teacher model dtype",
    "trained_layers": "trained layers",
    "trained_modules": "trained modules in those layers",
    "trained_extra": "trained modules outside the layers",
    "trained_where": "which layers train",
    "trainable_fp32": "fp32 upcast of trainable weights",
    "optimizer_rank": "optimizer projection rank",
    "optimizer_targets": "matrices with projected optimizer states",
    "optimizer_proj_bits": "bits of the optimizer's projection matrices",
    "added_layers": "decoder blocks added",
    "task_head": "model head",
}


def title(concept: str) -> str:
    return CONCEPT_TITLES.get(concept, concept.replace("_", " "))


def show_value(value: Any) -> str:
    """A setting's value as text: true/false, comma-separated lists, enum values."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (list, tuple)):
        return ", ".join(show_value(v) for v in value) or "none"
    return str(value)


def json_value(value: Any) -> Any:
    """A setting's value for JSON: scalars as they are, lists as lists, anything else as its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return show_value(value)


def default_phrase(s: Sourced) -> str:
    return f"default of {s.framework}" if s.framework else "framework default"


@dataclass(frozen=True)
class AppliedDefault:
    concept: str
    title: str
    value: str  # as shown (show_value)
    source: str  # "default of TRL 1.x (SFTConfig/ModelConfig)"


def applied_defaults(sources: Mapping[str, Sourced]) -> list[AppliedDefault]:
    """The framework defaults the estimate used for settings the file does not give, in resolution order."""
    return [
        AppliedDefault(k, title(k), show_value(s.value), default_phrase(s))
        for k, s in sources.items()
        if s.origin == Origin.DEFAULT
    ]


def by_source(defaults: Iterable[AppliedDefault]) -> list[tuple[str, list[AppliedDefault]]]:
    """The defaults grouped by whose default they are, in order of first appearance."""
    groups: dict[str, list[AppliedDefault]] = {}
    for d in defaults:
        groups.setdefault(d.source, []).append(d)
    return list(groups.items())
