"""ms-swift's YAML/JSON configs: `swift sft examples/yaml/deepspeed/sft.yaml`, `swift sft --config sft.yaml`,
`megatron rlhf --config ray_grpo_colocate.yaml` (ms-swift v3.x/v4.x examples/yaml/, examples/ray/). Their keys are
the command line's arguments (swift/utils/utils.py `parse_args`, v3.5.0 … v4.5.2: a lone `.yaml`/`.json` argument or
`--config` is loaded and its keys become the arguments), so they are read through the command line's handlers —
`model: Qwen/Qwen2.5-7B-Instruct` is the model, while `model_name: swift-bot` / `model_author: swift` are the
self-cognition names the run teaches (swift/llm/argument/base_args/model_args.py, data_args.py), not a model."""

from __future__ import annotations

from typing import Any

from vramlens.formats.settings import PlanBuilder, Setting, to_float
from vramlens.plan import Origin

# Arguments only ms-swift defines (swift/llm/argument/: `tuner_type` 4.x, `train_type` 3.x, `sft_type` 1.x/2.x,
# `model_author`/`split_dataset_ratio` data args, `rlhf_type`, `attn_impl`, `quant_bits`), with a model argument
MS_SWIFT_KEYS = frozenset(
    {
        "tuner_type",
        "train_type",
        "sft_type",
        "model_author",
        "split_dataset_ratio",
        "rlhf_type",
        "attn_impl",
        "quant_bits",
    }
)
MODEL_KEYS = frozenset({"model", "model_type", "model_id_or_path"})


# Megatron-SWIFT's own arguments (swift/megatron/argument/megatron_args.py, v3.5.0 … v4.5.2): a config with them is
# one `megatron sft|pt|rlhf --config` loads, whose keys take Megatron's handlers (formats/megatron.py)
MEGATRON_KEYS = frozenset(
    {
        "micro_batch_size",
        "global_batch_size",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "expert_model_parallel_size",
        "context_parallel_size",
        "recompute_granularity",
        "train_iters",
        "lr_warmup_fraction",
        "lr_warmup_iters",
        "attention_backend",
        "cross_entropy_loss_fusion",
    }
)


def detect(data: Any, keys: set[str]) -> float:
    """1.0 for a mapping with an argument only ms-swift defines beside a model argument; 0.0 otherwise."""
    return 1.0 if isinstance(data, dict) and keys & MS_SWIFT_KEYS and keys & MODEL_KEYS else 0.0


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx: Any) -> None:
    from vramlens.formats import launchers, megatron, objective, shell

    top = [s for s in settings if len(s.path) == 1 and isinstance(s.path[0], str)]  # a YAML key may be a number
    top = _with_train_group(data, top, settings)
    keys = {str(s.path[0]) for s in top}
    if keys & MEGATRON_KEYS:
        b.plan.framework = megatron.SWIFT_FRAMEWORK
        for s in top:
            if megatron.handler(str(s.path[0])) is not None:
                shell._apply_flag(b, "megatron", s)
            else:
                shell._apply_flag(b, "swift", s)
    else:
        for s in top:
            shell._apply_flag(b, "swift", s)
        launchers.swift_finish(b, top)
    objective.apply_swift(b, {s.path[0]: s for s in top if not s.unresolved})
    # the online-RL arguments (max_completion_length, num_generations, use_vllm, vllm_*, beta, sleep_level) as the
    # command line's are read (formats/objective.py `apply_launch`)
    _ray_rollout(b, data, settings)
    objective.apply_hf_keys(b, [s for s in top if not s.unresolved])


def _with_train_group(data: Any, top: list[Setting], settings: list[Setting]) -> list[Setting]:
    """A Ray config's `train:` group (`megatron rlhf --use_ray true --config ray_grpo_colocate.yaml`): its keys are
    the trainer's arguments over the shared ones; `gpus` (a Ray-only key: the group's GPU count) is not an argument
    (ms-swift swift/ray/megatron/driver_utils.py `parse_ray_yaml` pops the `train`/`rollout`/`teacher` groups and
    `_RAY_ONLY_KEYS`; pipeline.py `merge_group_dict(shared_config, group)`, commit 3602360a)."""
    group = data.get("train") if isinstance(data, dict) else None
    if not isinstance(group, dict) or "gpus" not in group:
        return top
    own = [
        Setting(s.key, (s.path[1],), s.value, s.span, s.value_span, s.key_span, s.unresolved)
        for s in settings
        if len(s.path) == 2 and s.path[0] == "train" and isinstance(s.path[1], str) and s.path[1] != "gpus"
    ]
    names = {s.path[0] for s in own}
    return [s for s in top if s.path[0] not in names and s.path[0] != "train"] + own


def _ray_rollout(b: PlanBuilder, data: Any, settings: list[Setting]) -> None:
    """A Ray config's rollout placement (ms-swift 3602360a swift/ray/megatron/driver_utils.py `parse_ray_yaml`):
    vLLM runs on the trainer's GPUs when `colocate_groups` puts `train` and `rollout` in one group (they must then
    hold the same GPUs: `_validate_colocate_groups`), else on GPUs of its own; the `rollout` group's
    `vllm_gpu_memory_utilization` is that engine's share, and `sleep_level` (`RayConfig`: 1 when the config sets
    none) puts it to sleep while the policy trains."""
    if not isinstance(data, dict) or not isinstance(data.get("rollout"), dict):
        return
    groups = data.get("colocate_groups")
    by_path = {tuple(s.path): s for s in settings if not s.unresolved}
    colocated = isinstance(groups, list) and any(
        isinstance(g, list) and "train" in g and "rollout" in g for g in groups
    )
    where = by_path.get(("colocate_groups",)) or by_path.get(("rollout",))
    b.set("generation", "vllm-colocate" if colocated else "vllm-server", where)
    share = by_path.get(("rollout", "vllm_gpu_memory_utilization"))
    if share is not None and to_float(share.value) is not None:
        b.set("vllm_memory_share", to_float(share.value), share)
    if colocated and ("sleep_level",) not in by_path:
        b.set(
            "generation_sleeps",
            True,
            note="ms-swift's Ray driver puts the colocated engine to sleep (level 1) when the config sets no "
            "sleep_level",
            origin=Origin.DEFAULT,
            framework="ms-swift",
        )
