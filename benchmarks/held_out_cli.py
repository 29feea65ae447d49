"""Held-out sources for the command-line frameworks: OpenRLHF, verl, torchtitan, Megatron-LM, NeMo AutoModel,
ms-swift (a plug-in of `held_out.py`: its `FRAMEWORKS` are added to the run)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from held_out import Check, Framework, Source, stated

_TITAN_FN = re.compile(r"^def ([a-z]\w*)\(\) -> \w*Trainer\.Config:\n(.*?)(?=^def |\Z)", re.M | re.S)
_TITAN_INT = re.compile(r"\b(\w+)=(\d+)(?: \* (\d+))?,")


def torchtitan_stated(path: Path, plan: Any) -> dict[str, Any]:
    """A torchtitan main config_registry.py's first config function, as its text states it (regular expressions,
    independent of the reader): `key=<int>` / `key=<int> * <int>` keywords, under the job config's names (the micro
    batch in rows: num_tokens_per_microbatch_per_dp_rank // max_context_length), and the checkpointing class. Other
    files: the generic reading."""
    if path.suffix != ".py":
        return stated(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    m = _TITAN_FN.search(text)
    if m is None:
        return {}
    body = m.group(2)
    ints = {k: int(a) * int(b or 1) for k, a, b in _TITAN_INT.findall(body)}
    out: dict[str, Any] = {}
    if "max_context_length" in ints:
        out["training.seq_len"] = ints["max_context_length"]
        if "num_tokens_per_microbatch_per_dp_rank" in ints:
            out["training.local_batch_size"] = (
                ints["num_tokens_per_microbatch_per_dp_rank"] // ints["max_context_length"]
            )
    for key in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree"):
        if key in ints:
            out[f"parallelism.{key}"] = ints[key]
    if "activation_checkpoint=FullAC" in body:
        out["activation_checkpoint.mode"] = "full"
    elif "activation_checkpoint=None" in body:
        out["activation_checkpoint.mode"] = "none"
    return out


def verl_stated(path: Path, plan: Any) -> dict[str, Any]:
    """A verl file's own values (the generic reading), without `ppo_micro_batch_size_per_gpu` when the file turns
    `actor_rollout_ref.actor.use_dynamic_bsz` on: verl then splits each mini-batch by
    `ppo_max_token_len_per_gpu` tokens and never reads the per-GPU micro-batch size (verl
    verl/workers/actor/dp_actor.py `update_policy`: `prepare_dynamic_batch(mini_batch, max_token_len=...)` if
    `use_dynamic_bsz` else `mini_batch.split(ppo_micro_batch_size_per_gpu)`; megatron_actor.py the same); nor
    `model.enable_gradient_checkpointing` under the Megatron workers, which never read it (v0.3.0.post1
    verl/workers/megatron_workers.py `_build_model_optimizer` takes it and leaves it unused; from v0.4.1 Megatron-Core
    recomputes by `override_transformer_config.recompute_granularity` only)."""
    values = stated(path)
    if str(values.get("actor_rollout_ref.actor.use_dynamic_bsz", "")).strip().lower() in ("true", "1"):
        values.pop("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", None)
    if plan.dist_strategy is not None and plan.dist_strategy.value == "megatron":
        values.pop("actor_rollout_ref.model.enable_gradient_checkpointing", None)
    return values


def openrlhf_stated(path: Path, plan: Any) -> dict[str, Any]:
    """An OpenRLHF script's own values (the generic reading), without the micro-batch flags when it turns dynamic
    batching on: the replay buffer then packs micro-batches up to `--train_max_tokens_per_gpu` tokens and never
    reads `--micro_train_batch_size` (OpenRLHF v0.9.0 and 2026 HEAD openrlhf/trainer/ppo_utils/replay_buffer.py,
    utils/seqlen_balancing.py `get_minimum_num_micro_batch_size`)."""
    values = stated(path)
    if any(
        str(values.get(k, "")).strip().lower() in ("true", "1")
        for k in ("use_dynamic_batch", "train.dynamic_batch_enable")
    ):
        values.pop("micro_train_batch_size", None)
        values.pop("train.micro_batch_size", None)
    return values


def nemo_stated(path: Path, plan: Any) -> dict[str, Any]:
    """A NeMo AutoModel recipe's own values (the generic reading), with pipeline parallelism the micro-batch the
    schedule runs in place of the local batch: `pp_microbatch_size` (default 1; NeMo AutoModel
    components/distributed/pipelining/functional.py `build_pipeline_schedule`: `n_microbatches = local_batch_size //
    microbatch_size`)."""
    values = stated(path)
    try:
        pp = int(str(values.get("distributed.pp_size", 1)))
    except ValueError:
        pp = 1
    if pp > 1 and "step_scheduler.local_batch_size" in values:
        values["step_scheduler.local_batch_size"] = values.get("distributed.pipeline.pp_microbatch_size", 1)
    return values


MEGATRON_CHECKS = [
    Check(("micro-batch-size", "micro_batch_size"), "micro_batch"),
    Check(("seq-length", "max_length", "seq_length"), "seq_len"),
    Check(("tensor-model-parallel-size", "tensor_model_parallel_size"), "tensor_parallel"),
    Check(("pipeline-model-parallel-size", "pipeline_model_parallel_size"), "pipeline_parallel"),
    Check(("expert-model-parallel-size", "expert_model_parallel_size"), "expert_parallel"),
    Check(("context-parallel-size", "context_parallel_size"), "context_parallel"),
    Check(("use-distributed-optimizer", "use_distributed_optimizer"), "distributed_optimizer", "bool"),
    Check(("sequence-parallel", "sequence_parallel"), "sequence_parallel", "bool"),
]

# ms-swift's commands that do not train (swift/cli/main.py `ROUTE_MAPPING` at v2.4.0 … v4.5.2; `megatron export`
# converts checkpoints) and 1.x/2.x's example inference entry point: a script often trains, then runs one of these on
# the checkpoint it wrote (`swift infer --model output/…/checkpoint-xxx`), whose flags are not the run's
_SWIFT_NOT_TRAINING = re.compile(
    r"\b(?:swift\s+(?:infer|export|eval|deploy|merge[-_]lora|app|app[-_]ui|web[-_]ui|sample|rollout)"
    r"|megatron\s+export)\b|\bllm_infer\.py\b"
)
_SWIFT_REGISTRY = Path(__file__).resolve().parents[1] / "server/vramlens/knowledge/data/ms_swift_model_types.json"


def swift_stated(path: Path, plan: Any) -> dict[str, Any]:
    """An ms-swift script's values from its training commands only (a non-training command's lines are left out),
    and a ModelScope model id as the Hugging Face id ms-swift's own registry pairs it with (swift/llm/utils/model.py
    v1.7.3/v2.6.1 `register_model(…, 'modelscope/Llama-2-13b-chat-ms', …, hf_model_id='meta-llama/…')`: the same
    weights under their Hub name)."""
    import json
    import tempfile

    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".sh":
        return stated(path)
    kept = [ln for ln in re.sub(r"\\\n", " ", text).splitlines() if not _SWIFT_NOT_TRAINING.search(ln)]
    with tempfile.TemporaryDirectory() as tmp:
        filtered = Path(tmp) / path.name
        filtered.write_text("\n".join(kept) + "\n", encoding="utf-8")
        values = stated(filtered)
    types = json.loads(_SWIFT_REGISTRY.read_text(encoding="utf-8"))["types"].values()
    hub = {t["model_id"]: t["hf_model_id"] for t in types if t.get("model_id") and t.get("hf_model_id")}
    for key in ("model", "model_id_or_path"):
        if isinstance(values.get(key), str) and values[key] in hub:
            values[key] = hub[values[key]]
    return values


FRAMEWORKS: list[Framework] = [
    Framework(
        "openrlhf",
        [
            Source("OpenRLHF+OpenRLHF", rev, ("examples/scripts/*.sh",))
            for rev in ("v0.3.0", "v0.6.0", "v0.8.0", "v0.9.0", "v0.10.0", "HEAD")
        ],
        [
            Check(("pretrain", "model.model_name_or_path"), "model_id", "model"),
            Check(("micro_train_batch_size", "train.micro_batch_size"), "micro_batch"),
            Check(("zero_stage", "ds.zero_stage"), "zero_stage"),
            Check(("lora_rank", "lora.rank", "ds.lora.rank"), "lora_r"),
            Check(("load_in_4bit", "ds.load_in_4bit", "model.load_in_4bit"), "quant_bits", "map:true=4"),
            Check(
                ("gradient_checkpointing", "ds.gradient_checkpointing", "model.gradient_checkpointing"),
                "grad_checkpointing",
                "bool",
            ),
            Check(("packing_samples", "ds.packing_samples", "data.packing_samples"), "packing", "bool"),
        ],
        openrlhf_stated,
    ),
    Framework(
        "verl",
        [
            Source("volcengine+verl", rev, ("examples/*.sh", "examples/*.yaml"))
            for rev in ("v0.3.0.post1", "v0.5.0", "v0.6.1", "HEAD")
        ],
        [
            Check(("actor_rollout_ref.model.path",), "model_id", "model"),
            Check(("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",), "micro_batch"),
            Check(("actor_rollout_ref.model.enable_gradient_checkpointing",), "grad_checkpointing", "bool"),
            Check(("actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora.rank"), "lora_r"),
            Check(("actor_rollout_ref.rollout.gpu_memory_utilization",), "vllm_memory_share", "float"),
            Check(("actor_rollout_ref.rollout.n",), "num_generations"),
            Check(("actor_rollout_ref.actor.megatron.tensor_model_parallel_size",), "tensor_parallel"),
            Check(("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",), "pipeline_parallel"),
            Check(("actor_rollout_ref.actor.megatron.context_parallel_size",), "context_parallel"),
            Check(("actor_rollout_ref.actor.megatron.expert_model_parallel_size",), "expert_parallel"),
            Check(("actor_rollout_ref.actor.megatron.expert_tensor_parallel_size",), "expert_tensor_parallel"),
            Check(("model.partial_pretrain",), "model_id", "model"),
            Check(("data.micro_batch_size_per_gpu",), "micro_batch"),
        ],
        verl_stated,
    ),
    Framework(
        "torchtitan",
        [
            Source("pytorch+torchtitan", "v0.1.0", ("*.toml", "run_train.sh"), ("pyproject.toml", "*/tests/*")),
            Source("pytorch+torchtitan", "v0.2.0", ("*.toml", "run_train.sh"), ("pyproject.toml", "*/tests/*")),
            Source("pytorch+torchtitan", "HEAD", ("*config_registry.py", "run_train.sh"), ("*/tests/*",)),
        ],
        [
            Check(("training.batch_size", "training.local_batch_size"), "micro_batch"),
            Check(("training.seq_len",), "seq_len"),
            Check(("parallelism.tensor_parallel_degree",), "tensor_parallel"),
            Check(("parallelism.pipeline_parallel_degree",), "pipeline_parallel"),
            Check(("parallelism.context_parallel_degree",), "context_parallel"),
            Check(("parallelism.expert_parallel_degree",), "expert_parallel"),
            Check(("activation_checkpoint.mode",), "grad_checkpointing", "map:none=false,full=true"),
        ],
        torchtitan_stated,
    ),
    Framework(
        "megatron",
        [
            Source("NVIDIA+Megatron-LM", rev, ("examples/*.sh",))
            for rev in ("refs/tags/core_r0.8.0", "core_v0.13.0", "HEAD")
        ],
        MEGATRON_CHECKS,
    ),
    Framework(
        "nemo_automodel",
        [Source("NVIDIA-NeMo+Automodel", rev, ("examples/*.yaml",)) for rev in ("v0.2.0", "v0.3.0", "v0.4.0", "HEAD")],
        [
            Check(("model.pretrained_model_name_or_path",), "model_id", "model"),
            Check(("step_scheduler.local_batch_size",), "micro_batch"),
            Check(("distributed.tp_size",), "tensor_parallel"),
            Check(("distributed.pp_size",), "pipeline_parallel"),
            Check(("distributed.cp_size",), "context_parallel"),
            Check(("distributed.ep_size",), "expert_parallel"),
            Check(("peft.dim",), "lora_r"),
        ],
        nemo_stated,
    ),
    Framework(
        "ms-swift",
        [
            Source("modelscope+ms-swift", rev, ("examples/*.sh",), context=("examples/*.yaml", "examples/*.json"))
            for rev in ("v1.5.0", "v2.4.0", "v3.5.0", "v4.0.0", "HEAD")
        ],
        [
            Check(("model", "model_id_or_path"), "model_id", "model"),
            Check(("per_device_train_batch_size", "batch_size", "micro_batch_size"), "micro_batch"),
            Check(("lora_rank",), "lora_r"),
            Check(("quant_bits", "quantization_bit"), "quant_bits", "map:4=4,8=8,0=none"),
            Check(("tensor_model_parallel_size",), "tensor_parallel"),
            Check(("pipeline_model_parallel_size",), "pipeline_parallel"),
            Check(("expert_model_parallel_size",), "expert_parallel"),
        ],
        swift_stated,
    ),
]
