"""ZeRO/FSDP working sets: gathered (unsharded) parameters, reduce-scatter inputs and communication buckets."""

from __future__ import annotations

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.components.parameters import Params, params, quantized_bytes_per_param
from vramlens.estimate.components.sharding import (
    fsdp1_adapter_units,
    fsdp_gather_bytes,
    fsdp_gathers_16bit,
    fsdp_sharded,
    fsdp_version,
    shard_factor,
)
from vramlens.estimate.components.trained import counted_layers
from vramlens.estimate.shapes import shapes
from vramlens.knowledge.models import norms_per_layer
from vramlens.resolved import ResolvedPlan


def gathered_layer_bytes(rp: ResolvedPlan, p: Params) -> int:
    """Bytes of one block's parameters as FSDP / ZeRO-3 gather them. A 4-bit model keeps its quantized weights
    packed in the storage dtype (`bnb_4bit_quant_storage`), and the gather moves that storage as it is: the
    packed payload and its constants, not a 16-bit copy (bitsandbytes docs/source/fsdp_qlora.md, "Quantized data
    storage"; the weights are dequantized one linear at a time inside `Linear4bit.forward`)."""
    if not rp.quant_bits:
        return int(p.layer_bytes / max(rp.tensor_parallel, 1))
    s = shapes(rp.arch)
    norms = norms_per_layer(rp.arch) * rp.arch.hidden
    packed, consts = quantized_bytes_per_param(rp)
    cb = DTYPE_BYTES[rp.compute_dtype]
    return int((s.layer_params - norms) * (packed + consts) + norms * cb)


def fsdp_root_unsharded(rp: ResolvedPlan) -> int:
    """FSDP's unsharded parameters at the end of the forward, held into the backward.

    The root unit's: FULL_SHARD frees every other unit after its forward but not the root's ("Do not free the root's
    parameters in the post-forward for `FULL_SHARD` with the intention that they are immediately used for backward
    computation", torch 2.4 torch/distributed/fsdp/_runtime_utils.py `_post_forward_reshard`; FSDP2 likewise: "For
    the root, do not reshard after forward", torch 2.13 distributed/fsdp/_fully_shard/_fsdp_state.py `_lazy_init`).
    With transformer-layer auto-wrap the root holds the token embeddings, the final norm and the LM head. A trained
    LM head's unsharded gradient stays too: the root's gradients are reduce-scattered when the whole root unit's
    backward has run, after the embedding's (FSDP2 `FSDPParamGroup.post_backward` from the root's
    `RegisterPostBackwardFunction`; FSDP1 `_post_backward_hook` on the flat parameter's AccumulateGrad).
    SHARD_GRAD_OP keeps every block's unsharded parameters from its forward to its backward (FSDP1
    `_should_free_in_backward`/no post-forward reshard; FSDP2 `reshard_after_forward=False`); under FULL_SHARD the
    root's own pre-backward, when the loss's backward starts, prefetches the last block (torch 2.13
    distributed/fsdp/_fully_shard/_fsdp_param_group.py `pre_backward` → `_backward_prefetch`, the group that ran
    its forward last; FSDP1 _runtime_utils.py `_pre_backward_hook` → `_prefetch_handle`, BACKWARD_PRE).
    Measured against the sharded trace (trace.sharded, tests/trace/test_sharded_trace.py)."""
    if not fsdp_sharded(rp):
        return 0
    s = shapes(rp.arch)
    pg = fsdp_gather_bytes(rp)
    head = 0 if rp.scalar_head else s.lm_head_params
    out = float((s.embed_params + head) * pg)
    if rp.peft == "none" and rp.trained_layers is None:
        out += (head or s.embed_params) * pg  # the LM head's (or the tied embedding's) gradient
    # tensor parallelism shards the embeddings and the output projection before FSDP does (`shard_factor`;
    # torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py `apply_tp`: "tok_embeddings" RowwiseParallel,
    # "output" ColwiseParallel): what FSDP gathers of them on a rank is that rank's slice
    out /= max(rp.tensor_parallel, 1)
    blocks = counted_layers(rp) if rp.zero_stage < 3 else 1
    return int(out + blocks * fsdp_unit_bytes(rp))


def fsdp_unit_bytes(rp: ResolvedPlan) -> float:
    """One block's unsharded parameters as FSDP gathers them: in `fsdp_gather_bytes`, or a 4-bit model's packed
    storage (`gathered_layer_bytes`)."""
    if rp.quant_bits:
        return gathered_layer_bytes(rp, params(rp))
    return shapes(rp.arch).layer_params * fsdp_gather_bytes(rp) / max(rp.tensor_parallel, 1) + fsdp_unit_adapters(rp)


def fsdp_unit_adapters(rp: ResolvedPlan) -> float:
    """A block's adapters as FSDP2 gathers them with the block: `fully_shard` on a decoder block takes every
    parameter under it not already in a unit, peft's lora_A and lora_B with the base weights (torch 2.14
    distributed/fsdp/_fully_shard/_fully_shard.py `fully_shard` → _fsdp_init.py `_get_managed_states`), each
    all-gathered in the mixed-precision `param_dtype`, else in its own dtype (fp32 adapters beside 16-bit weights:
    4 bytes; _fsdp_param.py `init_dtype_attrs`). FSDP1 under the HF Trainer gathers them in units of their own
    (`fsdp1_adapter_units`), in the same dtype: FULL_SHARD one linear at a time, resharded after its forward and
    again after its backward (not counted with the block); SHARD_GRAD_OP frees no unit after its forward (torch 2.14
    distributed/fsdp/_runtime_utils.py `_post_forward_reshard`: only FULL_SHARD and HYBRID_SHARD free the unsharded
    flat parameter), so a block's adapter units stay gathered from their forward to their backward, as the block
    does."""
    if rp.peft == "none" or fsdp_version(rp) == 0 or fsdp1_adapter_units(rp) and rp.zero_stage >= 3:
        return 0.0
    p = params(rp)
    adapter_bytes = DTYPE_BYTES[rp.compute_dtype] if fsdp_gathers_16bit(rp) else p.trainable_dtype_bytes
    return p.trainable / max(counted_layers(rp), 1) * adapter_bytes / max(rp.tensor_parallel, 1)


def fsdp_backward_working_set(rp: ResolvedPlan, p: Params) -> int:
    """What a block's backward adds under FSDP beyond `fsdp_root_unsharded`: its gathered parameters, the next
    unit's, prefetched (BACKWARD_PRE, the default: torch 2.13 distributed/fsdp/_fully_shard/_fsdp_state.py
    `_pre_backward` → `FSDPParamGroup._backward_prefetch`; FSDP1 `_prefetch_handle`), and its unsharded gradients;
    then, after the block is resharded, the reduce-scatter: the unsharded gradients copied into a reduce-dtype
    input of the whole unit (fp32 under mixed precision) and its output shard (FSDP2 _fsdp_collectives.py
    `foreach_reduce`: `reduce_scatter_input` allocated before `unsharded_grads.clear()`, then `reduce_output`;
    FSDP1 _runtime_utils.py `_reduce_grad`: `unsharded_grad.to(reduce_dtype)`, `new_sharded_grad`). The larger of
    the two moments. The prefetched unit, and SHARD_GRAD_OP's gathered blocks, are in `fsdp_root_unsharded`."""
    if not fsdp_sharded(rp):
        return 0
    s = shapes(rp.arch)
    pg = fsdp_gather_bytes(rp)
    rb = 4 if rp.fsdp_mixed_precision else pg
    unit = fsdp_unit_bytes(rp)
    full = rp.peft == "none" and rp.trained_layers is None
    # a block's unsharded gradients are those of the rank's tensor-parallel slice, as its gathered parameters are
    grads = (s.layer_params / max(rp.tensor_parallel, 1) if full else p.trainable / max(counted_layers(rp), 1)) * pg
    reduce_in = grads / pg * rb * (1 + 1 / rp.world_size)
    if rp.zero_stage >= 3:
        return int(max(unit + grads, grads + reduce_in))
    return int(max(grads, grads + reduce_in - unit))


def fsdp_recompute_block(
    rp: ResolvedPlan, p: Params, *, recompute: int, ckpt_all: int, ckpt_one: int, grad_shards: int
) -> tuple[int, int, int] | None:
    """FSDP's checkpointed backward, block by block: (buffers, gradients, checkpoints) where block k's backward
    holds the most; None when the plan is not FSDP-sharded over several blocks.

    While block k (of L, the top one first) is recomputed and runs its backward, rank 0 holds, beside the root unit
    (`fsdp_root_unsharded` without its blocks) and `recompute`, the block's activations at their peak:
      - the sharded gradients of the L − 1 − k blocks above, made by their reduce-scatters (`grad_shards` is every
        block's; the root's trained weights reduce-scatter after the embedding's backward, at the end, their
        unsharded gradient being in the root until then: FSDP2 `FSDPParamGroup.post_backward` from the root's
        `RegisterPostBackwardFunction`; FSDP1 `_post_backward_hook` on the root's flat parameter);
      - the checkpoints of blocks 0..k (each freed when its block's backward ends);
      - FULL_SHARD: block k − 1 prefetched (none below block 0: the root is gathered already; torch 2.14
        distributed/fsdp/_fully_shard/_fsdp_param_group.py `_backward_prefetch`); SHARD_GRAD_OP: blocks 0..k − 1
        still gathered from the forward (each resharded after its own backward). FSDP1 with the adapters in units
        of their own (`fsdp1_adapter_units`) under FULL_SHARD prefetches block k − 1 later: a unit's pre-backward
        prefetches the unit whose forward ended just before its own (torch 2.14 distributed/fsdp/_runtime_utils.py
        `_get_handle_to_prefetch` → _exec_order_utils.py `get_handle_to_backward_prefetch`, the post-forward
        order), and block k's forward ends after its adapters', so block k's pre-backward prefetches its last
        adapter (r × its width) and block k − 1 is gathered only at the pre-backward of block k's first adapter
        (q's lora_A), whose backward is among the block's last: the recomputed activations are freed by then,
        and that moment holds the two blocks and the block's unsharded gradients;
      - FSDP2: block k + 1's reduce-scatter input, kept until this block's reduce-scatter starts
        (`post_backward`: `reduce_scatter_states`, at most `reduce_scatter_max_input_buffers` = 1 in flight);
      - the block itself at the largest of its moments: its gathered parameters, its unsharded gradients and its
        recomputed activations at their peak; or, once it is resharded and its activations freed, its unsharded
        gradients with the reduce-scatter's input and output (`fsdp_backward_working_set`); or FSDP1's late
        prefetch of block k − 1 above.
    The live set is linear in k between its ends and the blocks next to them, so those four are compared."""
    layers = counted_layers(rp)
    if not fsdp_sharded(rp) or layers < 2 or rp.arch.block not in ("decoder", "encoder"):
        return None
    s = shapes(rp.arch)
    tp = max(rp.tensor_parallel, 1)
    pg = fsdp_gather_bytes(rp)
    rb = 4 if rp.fsdp_mixed_precision else pg
    unit = fsdp_unit_bytes(rp)
    full = rp.peft == "none" and rp.trained_layers is None
    unsharded = (s.layer_params / tp if full else p.trainable / layers) * pg
    reduce_in = unsharded / pg * rb
    shard = grad_shards / layers
    if full:  # the root's trained weights' shares are not made until the end of the backward
        shard = s.layer_params * grad_shards / max(p.trainable, 1)
    root = fsdp_root_unsharded(rp) - (layers if rp.zero_stage < 3 else 1) * unit
    stage3 = rp.zero_stage >= 3
    held_rs = reduce_in if fsdp_version(rp) == 2 else 0.0
    late_prefetch = stage3 and fsdp1_adapter_units(rp)

    def live(k: int) -> tuple[float, float, float]:
        below = unit if k >= 1 else 0.0  # FULL_SHARD's prefetched block k − 1
        gathered = (0.0 if late_prefetch else below) if stage3 else k * unit
        own = max(
            unit + unsharded + recompute + (held_rs if k < layers - 1 else 0.0),
            unsharded + reduce_in * (1 + 1 / rp.world_size),
            unit + unsharded + (below if late_prefetch else 0.0),
        )
        ckpts = ckpt_one + k * (ckpt_all - ckpt_one) / (layers - 1)
        return root + gathered + own - recompute, (layers - 1 - k) * shard, ckpts

    candidates = [live(k) for k in sorted({0, 1, layers - 2, layers - 1})]
    buffers, grads, ckpts = max(candidates, key=sum)
    return int(buffers), int(grads), int(ckpts)


def zero_buffers(rp: ResolvedPlan, p: Params) -> int:
    """Communication buffers and the unsharded working set held through the step.

    FSDP keeps no buffer of its own between units: its unsharded parameters and reduce-scatter buffers are made per
    unit (`fsdp_root_unsharded`, `fsdp_backward_working_set`), and NCCL's buffers are outside torch's allocator
    (the device level: estimate/allocator.py). With parameter offload FSDP gathers one block (plus one prefetched).
    DeepSpeed reduce/all-gather buckets default to 5e8 elements; HF "auto" sets reduce_bucket_size to h²
    and stage3_prefetch_bucket_size to 0.9·h²
    (`trainer_config_finalize` in src/transformers/integrations/deepspeed.py). DDP keeps a 25 MiB bucket view of
    gradients (`bucket_cap_mb`)."""
    if rp.world_size <= 1 and not rp.offload_params:
        return 0
    h2 = rp.arch.hidden**2
    layer_bytes = gathered_layer_bytes(rp, p)
    if rp.strategy == "fsdp":
        return 2 * layer_bytes if rp.offload_params else 0
    if rp.strategy == "deepspeed":
        out = 2 * h2 * 2  # reduce bucket (auto = h²), 16-bit, double-buffered
        if rp.zero_stage >= 3 or rp.offload_params:
            out += 2 * layer_bytes + int(0.9 * h2) * 2
        return out
    if rp.strategy in ("ddp", "none") and rp.world_size > 1:
        return 25 * 2**20 * 2
    return 0


# DeepSpeed's default `zero_optimization.sub_group_size` (deepspeed v0.16.4 deepspeed/runtime/zero/config.py
# `sub_group_size: int = Field(pp_int(1e9))`; ms-swift's swift/config/zero3.json writes the same 1e9)
ZERO3_SUB_GROUP_SIZE = 10**9


def zero3_persistent_gradients(rp: ResolvedPlan) -> bool:
    """ZeRO-3 keeps every rank's gradient partition in one flat buffer made when the optimizer is set up and never
    freed: `grad_partitions_flat_buffer = torch.zeros(sum(p.partition_numel() ...))` in `_setup_for_real_optimizer`;
    `zero_grad(set_to_none=True)` only drops the parameters' `.grad` views (deepspeed v0.16.4
    deepspeed/runtime/zero/stage3.py). The gradients are resident through every phase, the rollout included.
    ZeRO-1/2 free theirs after each step (stage_1_and_2.py `_release_ipg_buffers`: `grads_in_partition = None`)."""
    return rp.strategy == "deepspeed" and rp.zero_stage >= 3 and rp.world_size > 1 and not rp.offload_optimizer


def zero_step_grad_copy(rp: ResolvedPlan, p: Params, extra_trainable: int = 0) -> int:
    """The fp32 gradient ZeRO hands its optimizer at the step, beside the 16-bit gradient partition.

    ZeRO-1/2 flatten the rank's whole partition of a parameter group and cast it to the master weights' dtype
    (deepspeed v0.16.4 deepspeed/runtime/zero/stage_1_and_2.py `step`: `self.flatten(self.averaged_gradients[i])
    .to(self.single_partition_of_fp32_groups[i].dtype)`), ZeRO-3 one sub-group of at most `sub_group_size`
    elements at a time (stage3.py `_prepare_fp32_grad_for_sub_group`, `_create_fp16_sub_groups`). The 16-bit
    flattened copy and the fp32 one are alive together for a moment; the fp32 one through the optimizer's update
    (`_release_sub_group` / `single_partition_of_fp32_groups[i].grad = None`). `extra_trainable`: parameters
    trained by the same engine besides the policy's (PPO's value model in TRL's `PolicyAndValueWrapper`)."""
    if rp.strategy != "deepspeed" or rp.zero_stage < 1 or rp.offload_optimizer or not rp.master_weights:
        return 0
    if rp.optimizer_in_bwd or rp.optimizer.layerwise:
        return 0
    elements = (p.trainable + extra_trainable) * shard_factor(rp, "optimizer")
    if rp.zero_stage >= 3:
        elements = min(elements, ZERO3_SUB_GROUP_SIZE)
    grad_b = p.trainable_dtype_bytes
    return int(elements * (4 + (grad_b if grad_b != 4 else 0)))
