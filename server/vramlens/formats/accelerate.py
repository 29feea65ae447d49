"""accelerate config files (`accelerate launch --config_file x.yaml`), YAML or JSON.

They say how many processes run, with which precision and which sharding (`src/accelerate/utils/dataclasses.py`
at accelerate 16cb6eb8; docs/config-sources.md): `distributed_type`, `num_processes` (all nodes), `mixed_precision`,
`deepspeed_config` (inline keys or `deepspeed_config_file`), `fsdp_config`, `parallelism_config`.
They name no model: a plan from one is merged into the training config it launches.
YAML 1.1 turns an unquoted `NO`/`no` into false, which accelerate then misreads; that is reported.
"""

from __future__ import annotations

from typing import Any, Callable

from vramlens.formats import deepspeed, hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.frameworks.keys import Key
from vramlens.plan import IssueKind, Severity, TrainingPlan

ACCELERATE_KEYS = frozenset(
    {
        "distributed_type",
        "num_processes",
        "mixed_precision",
        "compute_environment",
        "machine_rank",
        "num_machines",
        "downcast_bf16",
        "main_training_function",
        "rdzv_backend",
        "same_network",
        "tpu_env",
        "tpu_use_cluster",
        "tpu_use_sudo",
        "use_cpu",
        "deepspeed_config",
        "fsdp_config",
        "gpu_ids",
        "parallelism_config",
        "fp8_config",
        "megatron_lm_config",
        "dynamo_backend",
        "dynamo_config",
        "enable_cpu_affinity",
        "main_process_ip",
        "main_process_port",
    }
)
DISTRIBUTED_TYPES = {
    "NO": "none",
    "MULTI_GPU": "ddp",
    "FSDP": "fsdp",
    "DEEPSPEED": "deepspeed",
    "MEGATRON_LM": "megatron",
    "MULTI_CPU": "none",
    "MULTI_NPU": "ddp",
    "MULTI_XPU": "ddp",
    "MULTI_MLU": "ddp",
    "MULTI_MUSA": "ddp",
    "MULTI_SDAA": "ddp",
    "MULTI_HPU": "ddp",
    "XLA": "none",
    "TP": "ddp",
}
MIXED_PRECISION = {"no": "none", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}
OFFLOAD_DEVICES = ("none", "cpu", "nvme")


def detect(data: Any, keys: set[str]) -> float:
    hits = len(keys & ACCELERATE_KEYS)
    if "distributed_type" in keys and hits >= 2:
        return 1.0
    if "compute_environment" in keys and hits >= 3:
        return 0.95
    return 0.0


def _quote_warning(b: PlanBuilder, s: Setting, word: str) -> None:
    b.issue(
        IssueKind.INVALID_VALUE,
        f"unquoted `{word}` is read by YAML as the boolean false; write `{s.key}: '{word}'`",
        s,
        severity=Severity.WARNING,
        suggestion=f"'{word}'",
    )


def _enum(b: PlanBuilder, s: Setting, concept: str, table: dict, label: str, word: str, off: str) -> None:
    """A closed-vocabulary value whose "off" word (`NO`, `no`) YAML 1.1 reads as the boolean false."""
    v = s.value
    if v is None:
        return
    if v is False:
        _quote_warning(b, s, word)
        return b.set(concept, off, s, note=f"`{word}` (read by YAML as false)")
    w = str(v).strip()
    w = w.upper() if word.isupper() else w.lower()
    if w not in table:
        return b.unknown(s, label, table)
    b.set(concept, table[w], s)


def _distributed_type(b: PlanBuilder, s: Setting) -> None:
    _enum(b, s, "dist_strategy", DISTRIBUTED_TYPES, "distributed type", "NO", "none")


def _mixed_precision(b: PlanBuilder, s: Setting) -> None:
    _enum(b, s, "amp_dtype", MIXED_PRECISION, "mixed precision", "no", "none")


def _zero_stage(b: PlanBuilder, e: Setting) -> None:
    stage = b.set_int("zero_stage", e)
    if stage is not None and not 0 <= stage <= 3:
        b.issue(IssueKind.INVALID_VALUE, f"ZeRO stage must be 0, 1, 2 or 3, got {stage}", e)
    b.set("dist_strategy", "deepspeed", e)


def _offload_device(concept: str) -> Callable[[PlanBuilder, Setting], None]:
    def read(b: PlanBuilder, e: Setting) -> None:
        w = str(e.value).strip().lower()
        if w not in OFFLOAD_DEVICES:
            return b.unknown(e, "offload device", OFFLOAD_DEVICES)
        b.set(concept, w != "none", e)

    return read


def _deepspeed_file(b: PlanBuilder, e: Setting) -> None:
    if isinstance(e.value, str) and e.value.strip():
        b.set("dist_strategy", "deepspeed", e)
        b.reference("deepspeed", e.value.strip(), e)


# One accelerate key vramlens reads (`frameworks.keys.Key`): the parser dispatches on this table, the fixes' writer
# (`formats.render_yaml`) writes each concept at its `path`, the JSON Schema describes the keys from it.
# accelerate config reference: https://huggingface.co/docs/accelerate/package_reference/cli#accelerate-launch and
# accelerate/commands/config/config_args.py (ClusterConfig, at 16cb6eb8).
KEYS: tuple[Key, ...] = (
    Key(
        ("distributed_type",),
        "dist_strategy",
        _distributed_type,
        description="How the GPUs cooperate; quote NO (`'NO'`): unquoted it is the boolean false.",
    ),
    Key(
        ("num_processes",),
        "world_size",
        lambda b, s: b.set_int(
            "world_size", s, minimum=1, note="accelerate `num_processes`: processes on all machines"
        ),
        description="Processes (GPUs) on all machines: the divisor for ZeRO/FSDP sharding.",
    ),
    Key(
        ("mixed_precision",),
        "amp_dtype",
        _mixed_precision,
        description="Autocast precision; quote 'no' (unquoted it is false).",
    ),
    Key(("deepspeed_config", "zero_stage"), "zero_stage", _zero_stage),
    Key(("deepspeed_config", "offload_optimizer_device"), "offload_optimizer", _offload_device("offload_optimizer")),
    Key(("deepspeed_config", "offload_param_device"), "offload_params", _offload_device("offload_params")),
    Key(
        ("deepspeed_config", "gradient_accumulation_steps"),
        "grad_accum",
        lambda b, e: b.set_int("grad_accum", e, minimum=1),
    ),
    Key(("deepspeed_config", "deepspeed_config_file"), None, _deepspeed_file),
    *(
        Key(("deepspeed_config", k), None, lambda b, e: b.remember(e))
        for k in ("zero3_init_flag", "zero3_save_16bit_model", "gradient_clipping", "deepspeed_multinode_launcher")
    ),
)
BY_PATH: dict[tuple[str, ...], Key] = {k.path: k for k in KEYS}
# What the sections hold (the JSON Schema's descriptions); their entries are read by the functions below.
SECTIONS: dict[str, str] = {
    "deepspeed_config": "zero_stage (0–3), offload_optimizer_device / offload_param_device (none|cpu|nvme), "
    "or deepspeed_config_file.",
    "fsdp_config": "fsdp_sharding_strategy / fsdp_reshard_after_forward, fsdp_offload_params, "
    "fsdp_activation_checkpointing, fsdp_state_dict_type.",
    "parallelism_config": "tp/cp/sp/dp sizes: tensor and sequence parallelism divide weights and activations.",
}


def key_for(concept: str) -> Key:
    """The key a fix writes a concept at (the first in the table that carries it)."""
    return next(k for k in KEYS if k.concept == concept)


def _deepspeed_entry(b: PlanBuilder, e: Setting) -> None:
    key = BY_PATH.get(("deepspeed_config", str(e.key)))
    if key is not None and key.read is not None and e.value is not None:
        key.read(b, e)


def _parallelism_entry(b: PlanBuilder, e: Setting) -> None:
    k = str(e.key).removeprefix("parallelism_config_")
    if k == "tp_size":
        b.set_int("tensor_parallel", e, minimum=1)
    elif k in ("cp_size", "sp_size"):
        n = e.value
        if n is not None and (b.plan.context_parallel is None or b.plan.context_parallel.value == 1):
            b.set_int(
                "context_parallel",
                e,
                minimum=1,
                override=True,
                note="sequence parallelism splits the sequence like context parallelism" if k == "sp_size" else None,
            )
    elif k in ("dp_shard_size", "dp_replicate_size", "sp_backend", "sp_attn_implementation"):
        b.remember(e)
        if k == "dp_replicate_size" and (to_int(e.value) or 0) > 1:
            # accelerate ParallelismConfig: FSDP shards over the dp_shard_size (× cp) ranks of each of
            # dp_replicate_size replicas (HSDP, the `dp_replicate` mesh dimension)
            b.set("dp_replicas", to_int(e.value), e, note="HSDP: FSDP shards within each of dp_replicate_size replicas")


def _megatron_entry(b: PlanBuilder, e: Setting) -> None:
    k = e.key
    if k == "megatron_lm_tp_degree":
        b.set_int("tensor_parallel", e, minimum=1)
    elif k == "megatron_lm_pp_degree":
        b.set_int("pipeline_parallel", e, minimum=1)
    elif k == "megatron_lm_recompute_activations" and to_bool(e.value):
        b.set("grad_checkpointing", True, e)


def take_checkpointing(plan: TrainingPlan, config: TrainingPlan) -> None:
    """Checkpointing the accelerate config turns on holds whatever the training script's `gradient_checkpointing`
    says: accelerate wraps the layers itself (accelerate 1.15 accelerator.py `_prepare_fsdp2`: `if
    self.state.fsdp_plugin.activation_checkpointing: model = fsdp2_apply_ac(...)`; `prepare_model` (FSDP1): `if
    fsdp_plugin.activation_checkpointing: apply_activation_checkpointing(...)`, the plugin read from the config's
    `fsdp_activation_checkpointing`), beside the trainer's own `gradient_checkpointing_enable`."""
    on = config.grad_checkpointing
    if on is None or not on.value:
        return
    plan.grad_checkpointing = on
    if config.ckpt_reentrant is not None:
        plan.ckpt_reentrant = config.ckpt_reentrant


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    nested = hf.nested_index(settings)
    strategy = str(data.get("distributed_type", "")).upper() if isinstance(data, dict) else ""
    for s in settings:
        if len(s.path) != 1:
            continue
        k = s.key
        key = BY_PATH.get((str(k),))
        if key is not None and key.read is not None:
            key.read(b, s)
        elif k == "downcast_bf16" and s.value is False and isinstance(data, dict):
            pass  # `no` / false both mean "do not downcast"
        elif k == "use_cpu" and to_bool(s.value):
            b.issue(
                IssueKind.ASSUMED, "`use_cpu: true`: training runs on the CPU, not the GPU", s, severity=Severity.INFO
            )
        elif k == "deepspeed_config":
            entries = hf.kids(s, nested, b)
            for e in entries:
                _deepspeed_entry(b, e)
            if isinstance(s.value, dict) and "deepspeed_config_file" not in s.value:
                # the config accelerate builds from these keys writes no ZeRO size (accelerate 1.15
                # utils/dataclasses.py `DeepSpeedPlugin.__post_init__`): DeepSpeed's defaults hold
                deepspeed.left_to_deepspeed(b, {"stage": s.value.get("zero_stage")}, s, "accelerate's DeepSpeed plugin")
        elif k == "fsdp_config":
            if strategy not in ("", "FSDP"):
                b.remember(s)
                continue
            for e in hf.kids(s, nested, b):
                if not hf.fsdp_config_entry(b, e):
                    b.remember(e)
            if strategy == "FSDP" and b.plan.zero_stage is None:
                b.set("zero_stage", 3, s, note="FSDP without a sharding strategy → FULL_SHARD")
        elif k == "parallelism_config":
            for e in hf.kids(s, nested, b):
                _parallelism_entry(b, e)
        elif k == "megatron_lm_config":
            for e in hf.kids(s, nested, b):
                _megatron_entry(b, e)
        elif k in ("dynamo_backend",) and s.value not in (None, False) and str(s.value).strip().upper() != "NO":
            b.set("compile", True, s, note=f"dynamo backend `{s.value}`")
        elif k == "dynamo_config" and isinstance(s.value, dict):
            backend = s.value.get("dynamo_backend")
            if backend not in (None, False) and str(backend).strip().upper() != "NO":
                b.set("compile", True, s, note=f"dynamo backend `{backend}`")
        elif k in ("num_machines", "gpu_ids", "fp8_config"):
            b.remember(s)
