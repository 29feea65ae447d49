"""Objectives beyond SFT: frozen reference, reward and teacher models, no-grad forwards, a rollout's KV cache, PPO's
value model."""

from __future__ import annotations

from vramlens.estimate.components.activations import activations_per_token
from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.components.gradients import gradients_offloaded
from vramlens.estimate.components.logits import swift_dpo_per_logit, swift_dpo_rows
from vramlens.estimate.components.parameters import Params
from vramlens.estimate.components.sharding import shard_factor
from vramlens.estimate.shapes import shapes
from vramlens.resolved import ResolvedPlan


def model_weights(rp: ResolvedPlan, arch, params: int | None = None, dtype: str | None = None) -> int:
    """A frozen, non-quantized copy of a model on this rank, in `dtype` (None: the weight dtype): a DPO/KTO
    reference, a reward model, a distillation teacher (`params`: its parameter count when not `arch`'s causal LM's).
    TRL prepares these with DeepSpeed/FSDP in evaluation mode (trl 1.16.0 dpo_trainer.py
    `prepare_deepspeed`/`prepare_fsdp`), so ZeRO-3/FULL_SHARD shard them like the policy."""
    if rp.offload_params:
        return 0
    n = shapes(arch).total if params is None else params
    return int(n * DTYPE_BYTES[dtype or rp.weight_dtype] * shard_factor(rp, "weights"))


def scalar_head_params(arch) -> int:
    """A reward or value model's parameters: the causal LM's backbone with a one-wide score head in place of its
    vocabulary head (transformers 5.24 `…ForSequenceClassification` / `…ForTokenClassification` with num_labels=1:
    `score = nn.Linear(hidden_size, 1)`, as TRL's reward and value models and verl's critic load them; OpenRLHF
    openrlhf/models/model.py `_get_reward_model`/`_get_critic_model`: the base model and a `value_head` of
    hidden_size × 1; torchtune's PPO value model: `output` of embed_dim × 1). A tied head is the embedding, which
    stays."""
    s = shapes(arch)
    return s.total - s.lm_head_params + arch.hidden


def value_params(rp: ResolvedPlan) -> int:
    """The value (critic) model's parameters: the named critic's own shapes (`ResolvedPlan.value_arch`) or the
    policy's backbone, with its score head."""
    return scalar_head_params(rp.value_arch or rp.arch)


def reward_weights(rp: ResolvedPlan) -> int:
    """The frozen reward model on this rank: its own shapes where the config names one the catalog knows
    (`ResolvedPlan.reward_arch`), else the policy's backbone, with its score head."""
    arch = rp.reward_arch or rp.arch
    return model_weights(rp, arch, scalar_head_params(arch))


def reference_weights(rp: ResolvedPlan) -> int:
    """The frozen reference copy on this rank: the named reference's own shapes (`ResolvedPlan.reference_arch`) or
    the policy's, in its own dtype where it has one."""
    return model_weights(rp, rp.reference_arch or rp.arch, dtype=rp.reference_dtype)


def teacher_weights(rp: ResolvedPlan) -> int:
    """The distillation teacher on this rank: as the student's strategy prepares it (`model_weights`), or by its own
    DeepSpeed setup where the config gives one (ResolvedPlan.teacher_sharding: ms-swift `teacher_deepspeed`)."""
    assert rp.teacher is not None
    dtype = rp.teacher_dtype or rp.weight_dtype
    if rp.teacher_sharding is None:
        return model_weights(rp, rp.teacher, dtype=dtype)
    if rp.teacher_sharding == "zero3_offload":
        return 0
    whole = shapes(rp.teacher).total * DTYPE_BYTES[dtype]
    return int(whole / max(rp.world_size, 1)) if rp.teacher_sharding == "zero3" else int(whole)


def no_grad_forward(rp: ResolvedPlan, tokens: int, arch=None) -> int:
    """Transient memory of a forward under torch.no_grad (reference log-probs, teacher logits): nothing is saved for
    backward, so about one block's activations are alive at a time, plus the logits and their fp32 log-softmax
    (16-bit logits + fp32 = 6 bytes per logit; a chunked or fused head keeps only a chunk)."""
    arch = arch or rp.arch
    _, one_layer = (
        activations_per_token(rp.with_changes(arch=arch)) if arch is not rp.arch else activations_per_token(rp)
    )
    head = {"fused": 0.0, "chunked": 2.0}.get(rp.loss_impl, 6.0) * arch.vocab
    if arch is rp.arch and swift_dpo_rows(rp):
        head = swift_dpo_per_logit(rp, "reference") * arch.vocab  # 16-bit logits, one row's log-softmax at a time
    return int(tokens * (one_layer + head))


def rollout_sequences(rp: ResolvedPlan) -> int:
    """The sequences a rollout generates at once on this rank: the framework's own generation batch where it sizes
    one, else the micro-batch's examples × their generations."""
    return rp.generation_batch or rp.micro_batch * rp.generations_per_example


def kv_cache(rp: ResolvedPlan) -> int:
    """The KV cache of `generate()` for the rollout batch: sequences × (prompt + completion) × layers × K and V ×
    kv_dim in the compute dtype, plus one decoding step's fp32 logits per sequence."""
    arch = rp.arch
    cb = DTYPE_BYTES[rp.compute_dtype]
    per_token = arch.layers * 2 * arch.kv_dim * cb
    tp = max(rp.tensor_parallel, 1)
    sequences = rollout_sequences(rp)
    return int(sequences * (rp.generation_len * per_token / tp + 4 * arch.vocab))


def value_model(rp: ResolvedPlan, p: Params) -> int:
    """PPO's value model: a policy-sized backbone with a scalar head that trains like the policy (its weights,
    gradients and optimizer state; torchtune ppo_full_finetune_single_device.py, TRL PPOTrainer). The policy's
    optimizer settings apply to it: torchtune builds one optimizer over both models' parameters and, with
    `optimizer_in_bwd`, registers the per-parameter step on both (`_setup_optimizer`, recipes/
    ppo_full_finetune_single_device.py at 010eab0), so no gradient stays resident; paged states are outside the
    allocator (`value_model_paged_state`)."""
    n = value_params(rp)
    w = model_weights(rp, rp.value_arch or rp.arch, n)
    if rp.peft != "none":
        return w + int(p.trainable_bytes * 3)  # adapters, their gradients, states in the same order
    # under ZeRO-Offload its gradients go to the CPU as the policy's: one DeepSpeed configuration serves both
    # (OpenRLHF's strategy; TRL's one engine)
    offloaded = rp.optimizer_in_bwd or gradients_offloaded(rp)
    grads = 0.0 if offloaded else DTYPE_BYTES[rp.weight_dtype] * shard_factor(rp, "gradients")
    return w + int(n * grads) + (0 if rp.optimizer.paged else _value_state(rp, n))


def value_model_state(rp: ResolvedPlan) -> int:
    """The value model's optimizer state on the GPU, within `value_model` (none of it when paged or under PEFT, whose
    adapter states `value_model` counts with the adapters)."""
    if not rp.value_model or rp.peft != "none" or rp.optimizer.paged:
        return 0
    return _value_state(rp, value_params(rp))


def value_model_paged_state(rp: ResolvedPlan) -> int:
    """The value model's optimizer states when the optimizer is a paged one (unified memory, like the policy's)."""
    if not rp.value_model or rp.peft != "none" or not rp.optimizer.paged:
        return 0
    return _value_state(rp, value_params(rp))


def _value_state(rp: ResolvedPlan, n: int) -> int:
    """The value model's optimizer state, as the policy's (`optimizer_state`): TRL trains both through one engine
    (trl v0.18.0 trainer/ppo_trainer.py `PolicyAndValueWrapper`), so under DeepSpeed's mixed precision its
    parameters too get fp32 master weights and fp32 states (deepspeed v0.16.4 deepspeed/runtime/zero/stage3.py
    `_create_fp32_partitions`, stage_1_and_2.py `single_partition_of_fp32_groups`)."""
    if rp.offload_optimizer:
        return 0  # on the CPU with the policy's (`optimizer_state`)
    opt = rp.optimizer
    state_b = opt.state_bytes if opt.state_bytes is not None else DTYPE_BYTES[rp.weight_dtype]
    per_param = opt.states * state_b
    if rp.master_weights:
        per_param = 4 + opt.states * (opt.state_bytes if opt.state_bytes is not None else 4)
    return int(n * per_param * shard_factor(rp, "optimizer"))
