"""ZeRO/FSDP working sets: gathered (unsharded) parameters, reduce-scatter inputs and communication buckets."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.components.experts import lora_linears
from vramlens.estimate.components.optimizer import optimizer_temporaries
from vramlens.estimate.components.parameters import Params, params, quantized_bytes_per_param
from vramlens.estimate.components.sharding import (
    fsdp1_adapter_units,
    fsdp_block_params,
    fsdp_gather_bytes,
    fsdp_gathers_16bit,
    fsdp_sharded,
    fsdp_version,
    shard_factor,
    shard_ranks,
)
from vramlens.estimate.components.trained import counted_layers
from vramlens.estimate.shapes import shapes
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.knowledge.models import norms_per_layer
from vramlens.resolved import ResolvedPlan


def gathered_layer_bytes(rp: ResolvedPlan, p: Params) -> int:
    """Bytes of one block's parameters as FSDP / ZeRO-3 gather them. A 4-bit model keeps its quantized weights
    packed in the storage dtype (`bnb_4bit_quant_storage`), and the gather moves that storage as it is: the
    packed payload and its constants, not a 16-bit copy (bitsandbytes docs/source/fsdp_qlora.md, "Quantized data
    storage"; the weights are dequantized one linear at a time inside `Linear4bit.forward`). FSDP gathers a rank's
    tensor-parallel slice of the block, and of its routed experts only the rank's own (`fsdp_block_params`)."""
    if not rp.quant_bits:
        return int(fsdp_block_params(rp) * DTYPE_BYTES[rp.compute_dtype])
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
    blocks = counted_layers(rp) if rp.zero_stage < 3 else 1
    return int(fsdp_root_unit(rp, gradient=True) + blocks * fsdp_unit_bytes(rp))


def fsdp_root_unit(rp: ResolvedPlan, gradient: bool) -> float:
    """The root unit's unsharded parameters (the token embeddings and the LM head) and, with `gradient`, a trained
    LM head's unsharded gradient (`fsdp_root_unsharded`)."""
    s = shapes(rp.arch)
    pg = fsdp_gather_bytes(rp)
    head = 0 if rp.scalar_head else s.lm_head_params
    out = float((s.embed_params + head) * pg)
    if gradient and rp.peft == "none" and rp.trained_layers is None:
        out += (head or s.embed_params) * pg  # the LM head's (or the tied embedding's) gradient
    # tensor parallelism shards the embeddings and the output projection before FSDP does (`shard_factor`;
    # torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py `apply_tp`: "tok_embeddings" RowwiseParallel,
    # "output" ColwiseParallel): what FSDP gathers of them on a rank is that rank's slice
    return out / max(rp.tensor_parallel, 1)


def fsdp_loss_forward_unsharded(rp: ResolvedPlan) -> int | None:
    """FSDP2's unsharded parameters and all-gather output while the LM head and the loss run their forward; None
    for other plans.

    In the forward each unit's all-gather output (the flat buffer the collective writes, its whole unit in the
    gather dtype: `fsdp_unit_bytes`) outlives its copy-out into the unsharded parameters, kept for the next unit's
    all-gather to overlap with ("Defer free to allow for overlap of this copy-out with next all-gather collective",
    torch 2.14 distributed/fsdp/_fully_shard/_fsdp_param_group.py `wait_for_unshard`: `comm_ctx.all_gather_state`),
    and is freed at the next unit's `wait_for_unshard`. The last unit gathered in the forward is the last block
    (the root gathers first); its output is freed only when the root's forward ends ("Free the last all-gather
    result if needed", _fsdp_state.py `_post_forward` of the root), after the LM head and the loss, which
    transformers computes inside the model's forward (transformers 5.24 models/llama/modeling_llama.py
    `LlamaForCausalLM.forward`: `self.loss_function(...)`). At that moment the root is gathered, no gradient is made
    yet, and SHARD_GRAD_OP still holds every block (`reshard_after_forward` False: `reshard` returns in FORWARD);
    FULL_SHARD resharded the last block after its forward and prefetches it again only at the loss's backward
    (`fsdp_root_unsharded`). FSDP1 all-gathers straight into the unit's unsharded flat parameter
    (_flat_param.py `FlatParamHandle.unshard` → `_all_gather_flat_param`): nothing outlives it. Frameworks with
    models of their own call the loss on the model's output, after the root's forward has ended and the output is
    freed (torchtune 0.6.1 recipes/full_finetune_distributed.py: `logits = self._model(**batch)`, then
    `self._loss_fn(logits, labels)`): None for them."""
    if fsdp_version(rp) != 2 or not fsdp_sharded(rp) or rp.framework not in HF_MODEL_FRAMEWORKS:
        return None
    blocks = counted_layers(rp) if rp.zero_stage < 3 else 0
    return int(fsdp_root_unit(rp, gradient=False) + (blocks + 1) * fsdp_unit_bytes(rp))


def fsdp_unit_bytes(rp: ResolvedPlan) -> float:
    """One block's unsharded parameters as FSDP gathers them: in `fsdp_gather_bytes`, or a 4-bit model's packed
    storage (`gathered_layer_bytes`)."""
    if rp.quant_bits:
        return gathered_layer_bytes(rp, params(rp))
    return fsdp_block_params(rp) * fsdp_gather_bytes(rp) + fsdp_unit_adapters(rp)


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
    pg = fsdp_gather_bytes(rp)
    rb = 4 if rp.fsdp_mixed_precision else pg
    unit = fsdp_unit_bytes(rp)
    full = rp.peft == "none" and rp.trained_layers is None
    # a block's unsharded gradients are those of the parameters it gathered (`fsdp_block_params`)
    grads = (fsdp_block_params(rp) if full else p.trainable / max(counted_layers(rp), 1)) * pg
    reduce_in = grads / pg * rb * (1 + 1 / shard_ranks(rp))
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
    pg = fsdp_gather_bytes(rp)
    rb = 4 if rp.fsdp_mixed_precision else pg
    unit = fsdp_unit_bytes(rp)
    full = rp.peft == "none" and rp.trained_layers is None
    unsharded = (fsdp_block_params(rp) if full else p.trainable / layers) * pg
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
            unsharded + reduce_in * (1 + 1 / shard_ranks(rp)),
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
    DeepSpeed's reduce bucket is `reduce_bucket_size` elements (`zero_reduce_bucket`), its ZeRO-3 prefetch
    `stage3_prefetch_bucket_size` (`zero3_prefetch_bucket`). DDP's reducer allocates its buckets when the model is
    wrapped, one flat tensor per bucket, together as large as every trainable gradient in its dtype (torch
    torch/csrc/distributed/c10d/reducer.cpp `Reducer::initialize_buckets`: `bucket.gradients = at::empty(...)` for
    all its variables), and with `gradient_as_bucket_view=False`, the default of torch, accelerate's
    DistributedDataParallelKwargs and so the HF Trainer, each `.grad` is a tensor of its own copied into them
    (`mark_variable_ready_dense`: `bucket_view.copy_(grad)`): a second copy of the gradients for the whole run,
    whatever `bucket_cap_mb` (which sets how many buckets, not their total)."""
    if rp.world_size <= 1 and not rp.offload_params:
        return 0
    layer_bytes = gathered_layer_bytes(rp, p)
    if rp.strategy == "fsdp":
        return 2 * layer_bytes if rp.offload_params else 0
    if rp.strategy == "deepspeed":
        if rp.zero_stage >= 3:
            # the phases outside the training step's own (`zero_step_buffers`): two blocks and the prefetch bucket, of
            # the model's parameters at most, beside the parameters kept whole
            prefetch = min(zero3_prefetch_bucket(rp), shapes(rp.arch).total)
            whole = zero3_gathered_moments(rp.with_changes(micro_batch=1, seq_len=1, grad_accum=1))[2]
            return int(zero3_reduce_bucket(rp) + 2 * layer_bytes + prefetch * DTYPE_BYTES[rp.weight_dtype] + whole)
        # the reduce buckets, 16-bit (the step's: `zero_step_buffers`)
        out = zero2_reduce_buckets(rp) * zero_reduce_bucket(rp) * 2
        if rp.offload_params:
            out += 2 * layer_bytes + zero3_prefetch_bucket(rp) * 2
        return out
    if rp.strategy in ("ddp", "none") and rp.world_size > 1:
        return p.trainable * p.trainable_dtype_bytes
    return 0


# DeepSpeed's ZeRO-3 limits where a configuration states none, as transformers' DeepSpeed docs set them too
# (deepspeed 0.19.8 runtime/zero/config.py `max_live_parameters`, `max_reuse_distance`: `pp_int(1e9)`)
ZERO3_MAX_LIVE_PARAMETERS = 10**9
ZERO3_MAX_REUSE_DISTANCE = 10**9


def zero_reduce_bucket(rp: ResolvedPlan) -> int:
    """`reduce_bucket_size` in elements: the plan's, else as the HF Trainer fills "auto", h² (transformers 5.24
    integrations/deepspeed.py `HfTrainerDeepSpeedConfig.trainer_config_finalize`)."""
    return rp.zero_reduce_bucket if rp.zero_reduce_bucket is not None else rp.arch.hidden**2


def zero2_reduce_buckets(rp: ResolvedPlan) -> int:
    """ZeRO-1/2's reduce buckets: two under `overlap_comm` (its double buffer), else one (deepspeed 0.19.8
    runtime/zero/stage_1_and_2.py `setup_buckets`); `overlap_comm` is off for them unless the config turns it on
    (runtime/zero/config.py `overlap_comm_valid`)."""
    return 2 if rp.zero_overlap_comm else 1


def zero3_prefetch_bucket(rp: ResolvedPlan) -> int:
    """`stage3_prefetch_bucket_size` in elements: the plan's, else as the HF Trainer fills "auto", 0.9·h²
    (`trainer_config_finalize`)."""
    return rp.zero3_prefetch_bucket if rp.zero3_prefetch_bucket is not None else int(0.9 * rp.arch.hidden**2)


def zero3_persistence_threshold(rp: ResolvedPlan) -> int:
    """`stage3_param_persistence_threshold` in elements: the plan's, else as the HF Trainer fills "auto", 10·h
    (`trainer_config_finalize`). A parameter of at most this many elements is never partitioned (deepspeed 0.19.8
    runtime/zero/partition_parameters.py `_convert_to_deepspeed_param`: `param.ds_persist = True`)."""
    if rp.zero3_persistence_threshold is not None:
        return rp.zero3_persistence_threshold
    return 10 * rp.arch.hidden


def zero3_reduce_bucket(rp: ResolvedPlan) -> int:
    """ZeRO-3's gradient bucket: one `reduce_bucket_size` buffer per communication dtype, made with the optimizer
    and kept (deepspeed 0.19.8 runtime/zero/stage3.py `_setup_for_real_optimizer`: `bucket.buffer = torch.empty(
    self.reduce_bucket_size, ...)` under `contiguous_gradients`)."""
    return zero_reduce_bucket(rp) * DTYPE_BYTES[rp.compute_dtype]


NO_PARAMS = -1  # a module with no parameters of its own (a block, its attention, its MLP, a wrapper)


@dataclass(frozen=True)
class Zero3Trace:
    """ZeRO-3's module trace of one training step: one entry per module run (forward, the recomputation of a
    checkpointed block, backward), each naming the parameter it holds (`NO_PARAMS`: none) with its elements
    (`numel`), its bytes when gathered (`nbytes`) and whether it stays whole on every rank (`persist`); `loss`: the
    LM head's forward (the end of the forward); `top`: the entries of the top block's backward, its recomputation
    included."""

    order: tuple[int, ...]
    numel: tuple[int, ...]
    nbytes: tuple[float, ...]
    persist: tuple[bool, ...]
    loss: int
    top: range


def zero3_trace(rp: ResolvedPlan, p: Params) -> Zero3Trace:
    """The modules a ZeRO-3 step runs, in order, with their parameters, as DeepSpeed's hooks see them (every
    submodule, deepspeed 0.19.8 runtime/zero/parameter_offload.py `_register_deepspeed_module`): the model's wrappers
    and its embedding; each block, its first norm, its attention with its linears, its second norm, its MLP with its
    linears and activation (transformers 5.24 models/llama/modeling_llama.py `LlamaDecoderLayer.forward`), a LoRA
    adapter's wrapper, base linear, dropout, lora_A and lora_B in that order (peft 0.21.2 tuners/lora/layer.py
    `Linear.forward`), other adapters after their block; the final norm and the LM head (the embedding's own
    parameter when tied). The backward runs them in reverse, a checkpointed block's forward again first (transformers'
    gradient checkpointing recomputes the whole block inside its backward); the embedding's backward runs when its
    output needs a gradient. A block's parameters are the model's averaged over its blocks."""
    s = shapes(rp.arch)
    layers = counted_layers(rp)
    tp = max(rp.tensor_parallel, 1)
    threshold = zero3_persistence_threshold(rp)
    wb = DTYPE_BYTES[rp.weight_dtype]
    lb = sum(quantized_bytes_per_param(rp)) if rp.quant_bits else wb
    numel: list[int] = []
    nbytes: list[float] = []
    persist: list[bool] = []

    def param(n: float, per: float, small: bool | None = None) -> int:
        numel.append(round(n))
        nbytes.append(n * per / tp)
        persist.append(n <= threshold if small is None else small)
        return len(numel) - 1

    embed = param(s.embed_params, wb)
    adapted = {l.name for l in lora_linears(rp)} if rp.peft in ("lora", "qlora", "dora") else set()
    ab = p.trainable_dtype_bytes
    norms = max(s.layer_params - s.linear_params / layers, 0) / 2
    norm_persists = rp.arch.hidden <= threshold  # a norm's weight: h elements
    mlp_names = ("gate", "up", "down", "fc1", "fc2")
    blocks: list[list[int]] = []
    # the embedding's output needs a gradient when it trains, or with checkpointing: transformers'
    # `gradient_checkpointing_enable` calls `enable_input_require_grads` (transformers 5.24 modeling_utils.py);
    # otherwise the first block's q, k and v base linears read it only and no gradient reaches them either
    frozen_input = rp.peft != "none" and not rp.modules_to_save and not rp.grad_checkpointing
    no_backward: set[int] = set()
    for k in range(layers):
        block = [NO_PARAMS, param(norms, wb, norm_persists), NO_PARAMS]  # the block, its first norm, its attention
        mlp_started = False
        for lin in s.linears:
            if lin.name in mlp_names and not mlp_started:
                block += [param(norms, wb, norm_persists), NO_PARAMS]  # the second norm, the MLP
                mlp_started = True
            base = param(lin.params / layers, lb)
            if k == 0 and frozen_input and lin.name in ("q", "k", "v"):
                no_backward.add(base)
            if lin.name in adapted:
                share = lin.count / layers
                block += [NO_PARAMS, base, NO_PARAMS]  # wrapper, base, dropout
                block.append(param(share * rp.lora_r * lin.in_features, ab, rp.lora_r * lin.in_features <= threshold))
                block.append(param(share * rp.lora_r * lin.out_features, ab, rp.lora_r * lin.out_features <= threshold))
            else:
                block.append(base)
            if lin.name in ("gate", "fc1"):
                block.append(NO_PARAMS)  # the activation
        if rp.peft != "none" and not adapted and p.trainable:
            block.append(param(p.trainable / layers, ab, False))
        blocks.append(block)
    final_norm = param(rp.arch.hidden, wb, norm_persists)
    # the step's and the model's wrappers, the embedding, the rotary embedding
    forward = [NO_PARAMS, NO_PARAMS, NO_PARAMS, embed, NO_PARAMS]
    forward += [i for block in blocks for i in block] + [final_norm]
    tail = [final_norm]
    if not rp.scalar_head and rp.arch.block != "encoder":
        head = param(s.lm_head_params, wb) if s.lm_head_params else embed
        forward.append(head)
        tail = [head, NO_PARAMS, final_norm]  # the head, the model's wrapper, the final norm
    order = list(forward) + [NO_PARAMS, NO_PARAMS] + tail
    top = range(0)
    for k in reversed(range(layers)):
        begin = len(order)
        if rp.grad_checkpointing:
            order += blocks[k]
        order += [i for i in reversed(blocks[k]) if i not in no_backward]
        if k == layers - 1:
            top = range(begin, len(order))
    if not frozen_input:
        order.append(embed)
    return Zero3Trace(tuple(order), tuple(numel), tuple(nbytes), tuple(persist), len(forward) - 1, top)


def zero3_persistent_bytes(trace: Zero3Trace) -> float:
    """Bytes of the parameters ZeRO-3 keeps whole on every rank (`persist`): each keeps its full data beside its
    partition through the whole run (deepspeed 0.19.8 runtime/zero/partition_parameters.py `_partition_param`: a
    persistent parameter's `ds_tensor` is made on the local device, its data not freed; `ds_persist` "replicated
    throughout training"); the partition is in the weights."""
    return sum(b for b, whole in zip(trace.nbytes, trace.persist) if whole)


def zero3_gathered(trace: Zero3Trace, prefetch: int, max_live: int, reuse: int) -> list[float]:
    """Bytes of gathered (all-gathered, unpartitioned) parameters while each entry of `trace` runs, from the second
    step on: deepspeed 0.19.8 runtime/zero/partitioned_param_coordinator.py, `PartitionedParameterCoordinator`.

    The first step records the module order (`record_module`; `reset_step` at the next forward completes the trace)
    and releases each module's parameters after it runs. From the second step on, `fetch_sub_module`, called for
    every module (parameter-less ones too, `pre_sub_module_forward_function` / `pre_sub_module_backward_function`),
    gathers the module's parameters and then prefetches from the trace's parameter queue,
    `max_params_to_prefetch = min(self.__max_n_available_params - self.__n_available_params,
    self.__prefetch_bucket_sz)`, popping entries `while self.__param_queue and numel_prefetching <
    max_params_to_prefetch` and gathering those `ds_status == ZeroParamStatus.NOT_AVAILABLE`: at least a bucket
    (`stage3_prefetch_bucket_size`) of parameters not yet gathered, at most `stage3_max_live_parameters` less those
    gathered. Every entry it pops, gathered already or not, marks its parameter as fetched for that later use
    (`__most_recent_step_id_param_fetched_for[param] = max(..., param_in_trace.step_id_last_used_at)`). After the
    module runs, `release_sub_module` partitions those of its parameters (`__params_to_release`) that are not
    persistent (`if not p.ds_persist`), not marked for a later use (`if self.__most_recent_step_id_param_fetched_for
    [param] > step_id: params_to_release.discard(param.ds_id)`), and not met again in the trace before the distance:
    `for module in self.__submodule_order[step_id:]: if params_traversed >= self.__max_reuse_dist_in_numel: break`,
    each module's parameters discarded, then `params_traversed += param.ds_numel`. A parameter met before that stays
    gathered until that use; each is released after its last use in the step.

    Every module prefetches at least a bucket's worth, one parameter at least, and uses one, so the prefetch runs
    ahead of the modules until the live limit stops it: with the defaults (1e9 elements each) a model under 1e9
    elements ends up gathered whole, and every parameter stays gathered from its forward to its backward, its next
    use within the distance; an 8B model (Llama-3-8B: 218M elements a block, 525M the LM head) holds about 1e9
    elements gathered (the live limit, overshot by the last parameter), the blocks ahead of the forward and the LM
    head kept from its forward to its backward (the next module), and no block kept from its forward for its
    backward (between the last block's down_proj in the forward and its backward lie the LM head's forward and
    backward, 1.05e9 elements)."""
    n = len(trace.order)
    prefix = [0]
    for i in trace.order:
        prefix.append(prefix[-1] + (trace.numel[i] if i != NO_PARAMS else 0))
    following = [n] * n
    seen: dict[int, int] = {}
    for at in reversed(range(n)):
        following[at] = seen.get(trace.order[at], n)
        seen[trace.order[at]] = at
    queue = deque(at for at, i in enumerate(trace.order) if i != NO_PARAMS)  # each parameter's uses, in order
    marked: dict[int, int] = {}
    gathered: set[int] = set()
    live = 0  # elements gathered (the coordinator's `__n_available_params`)
    held = 0.0
    out: list[float] = []
    for at, i in enumerate(trace.order):
        if i != NO_PARAMS and marked.get(i, -1) < at:  # not popped by an earlier prefetch: the queue's next entry
            marked[i] = queue.popleft()
        if i != NO_PARAMS and i not in gathered and not trace.persist[i]:
            gathered.add(i)
            live += trace.numel[i]
            held += trace.nbytes[i]
        prefetching = 0
        budget = min(max_live - live, prefetch)
        while queue and prefetching < budget:
            q = queue.popleft()
            j = trace.order[q]
            marked[j] = max(marked.get(j, -1), q)
            if j not in gathered and not trace.persist[j]:
                gathered.add(j)
                live += trace.numel[j]
                held += trace.nbytes[j]
                prefetching += trace.numel[j]
        out.append(held)
        if i == NO_PARAMS or i not in gathered or marked[i] > at + 1:
            continue
        if following[at] < n and prefix[following[at]] - prefix[at + 1] < reuse:
            continue  # used again within the reuse distance
        gathered.discard(i)
        live -= trace.numel[i]
        held -= trace.nbytes[i]
    return out


def zero2_gradient_overhang(rp: ResolvedPlan) -> int:
    """Bytes of gradient ZeRO-2 keeps on rank 0 beyond its partition: the contiguous gradient buffer holds every
    parameter of the partition whole, `total_size += param_in_partition.numel()` (deepspeed 0.19.8
    runtime/zero/stage_1_and_2.py `copy_grads_in_partition`), so the parameter across the partition's end, in the
    flat group's order (`model.parameters()`: the embedding, each block's attention and MLP linears and its norms,
    the final norm, the LM head), comes in whole. Full fine-tuning; an adapter's parameters are small."""
    if rp.peft != "none" or rp.trained_layers is not None or rp.world_size <= 1:
        return 0
    s = shapes(rp.arch)
    layers = counted_layers(rp)
    block = [lin.params / layers for lin in s.linears]
    block.append(max(s.layer_params - sum(block), 0))  # the norms
    end = s.total / rp.world_size  # rank 0's partition
    reached = s.embed_params + (end - s.embed_params) // max(sum(block), 1) * sum(block) if end > s.embed_params else 0
    for n in ([] if reached else [s.embed_params]) + block:
        reached += n
        if reached >= end:
            break
    return int(max(reached - end, 0) * DTYPE_BYTES[rp.weight_dtype])


def zero2_gradients_whole(rp: ResolvedPlan) -> bool:
    """Whether ZeRO-2 holds its whole gradient partition through the backward: with `contiguous_gradients` (the HF
    Trainer's configurations, DeepSpeed's default) the first reduce makes the rank's flat gradient buffer at its full
    size, `self.grads_in_partition = torch.empty(int(total_size), ...)` (deepspeed 0.19.8
    runtime/zero/stage_1_and_2.py `copy_grads_in_partition`), which the block-by-block gradients then fill."""
    return rp.strategy == "deepspeed" and rp.zero_stage == 2 and rp.world_size > 1 and not rp.offload_optimizer


def zero_step_buffers(rp: ResolvedPlan, p: Params) -> dict[str, int] | None:
    """DeepSpeed ZeRO-2's and ZeRO-3's buffers at the training step's moments, the loss ("forward-backward"), the
    top block's recomputation and backward ("recompute") and the optimizer step; None for other plans.

    ZeRO-2 makes its reduce buckets (`zero2_reduce_buckets`, `zero_reduce_bucket` each) at the first
    gradient of the
    backward and drops them at its end (deepspeed 0.19.8 runtime/zero/stage_1_and_2.py `setup_buckets` from
    `process_gradients`; `_release_ipg_buffers` in `independent_gradient_partition_epilogue`): none at the loss or
    the step. Its gradient partition is made whole at the first reduce, with the parameter across its end
    (`zero2_gradient_overhang`) until the step frees it.
    ZeRO-3: its gradient bucket (`zero3_reduce_bucket`) and the parameters gathered (`zero3_gathered`) at the loss,
    at the most the top block's recomputation and backward hold, and none at the optimizer step (each parameter is
    released after its last use in the backward)."""
    if rp.strategy != "deepspeed" or rp.zero_stage < 2 or (rp.world_size <= 1 and not rp.offload_params):
        return None
    if rp.zero_stage == 2:
        if rp.offload_params or rp.offload_optimizer:
            return None
        overhang = zero2_gradient_overhang(rp)
        buckets = zero2_reduce_buckets(rp) * zero_reduce_bucket(rp) * DTYPE_BYTES[rp.compute_dtype]
        return {"forward-backward": 0, "recompute": buckets + overhang, "optimizer-step": overhang}
    # the module trace is the model's and its adapters', whatever the batch (searches over it reuse the result)
    at_loss, top, whole = zero3_gathered_moments(rp.with_changes(micro_batch=1, seq_len=1, grad_accum=1))
    bucket = zero3_reduce_bucket(rp)
    # the step partitions every parameter, the persistent ones too, and gathers those again after the update
    # (deepspeed 0.19.8 runtime/zero/stage3.py `step` → `_partition_all_parameters`, `_post_step`): they are back
    # once the step's temporaries are gone
    regathered = max(0.0, whole - optimizer_temporaries(rp, p) - zero_step_grad_copy(rp, p))
    return {
        "forward-backward": int(bucket + whole + at_loss),
        "recompute": int(bucket + whole + top),
        "optimizer-step": int(bucket + regathered),
    }


# The replay runs over every module of the model, so its cost grows with the depth; a plan deeper than this (no
# published model comes near: Llama-3.1-405B has 126 layers) is replayed at this depth, its blocks being alike, and
# its whole-kept parameters scaled to its own depth
ZERO3_REPLAY_LAYERS = 1024


@lru_cache(maxsize=64)
def zero3_gathered_moments(rp: ResolvedPlan) -> tuple[float, float, float]:
    """ZeRO-3's gathered bytes at the loss and at the most of the top block's backward (`zero3_gathered`), and those
    of the parameters it keeps whole (`zero3_persistent_bytes`)."""
    if rp.arch.layers > ZERO3_REPLAY_LAYERS:
        short = rp.with_changes(arch=rp.arch.model_copy(update={"layers": ZERO3_REPLAY_LAYERS}))
        at_loss, top, whole = zero3_gathered_moments(short)
        return at_loss, top, whole * rp.arch.layers / ZERO3_REPLAY_LAYERS
    trace = zero3_trace(rp, params(rp))
    max_live = rp.zero3_max_live_params if rp.zero3_max_live_params is not None else ZERO3_MAX_LIVE_PARAMETERS
    reuse = rp.zero3_max_reuse_distance if rp.zero3_max_reuse_distance is not None else ZERO3_MAX_REUSE_DISTANCE
    held = zero3_gathered(trace, zero3_prefetch_bucket(rp), max_live, reuse)
    return held[trace.loss], max((held[at] for at in trace.top), default=0.0), zero3_persistent_bytes(trace)


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
