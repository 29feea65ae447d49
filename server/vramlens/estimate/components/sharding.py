"""Sharding over ranks: the share of weights, gradients and optimizer state one rank keeps (tensor parallelism,
ZeRO/FSDP, pipeline stages), and the dtype FSDP gathers parameters in."""

from __future__ import annotations

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.components.experts import routed_block_params
from vramlens.estimate.components.pipeline import pipeline_stage_share
from vramlens.estimate.shapes import shapes
from vramlens.resolved import ResolvedPlan


def shard_factor(rp: ResolvedPlan, what: str) -> float:
    """Fraction of `what` ("weights", "gradients", "optimizer") kept on this rank: tensor parallelism splits the
    weights over its ranks (and with them their gradients and optimizer state: Megatron-LM's column- and row-parallel
    linears and vocabulary-parallel embedding; torch's `parallelize_module` with a model's plan, e.g. torchtune 0.6.1
    models/llama3/_parallelism.py `base_llama_tp_plan`, embeddings and output included; the norms it leaves whole
    are not counted apart), then ZeRO/FSDP shard what each rank holds over the data-parallel ranks. A pipeline rank
    holds its stage's share (`pipeline_stage_share`)."""
    return zero_shard_factor(rp, what) * pipeline_stage_share(rp) / max(rp.tensor_parallel, 1)


def shard_ranks(rp: ResolvedPlan) -> int:
    """The ranks ZeRO/FSDP shards over: every data-parallel rank, or under HSDP (FSDP's HYBRID_SHARD, FSDP2 on a
    (replicate, shard) mesh) those of one replica, `shard_group` (torch 2.13 distributed/fsdp/_init_utils.py
    `_init_process_group_state_for_hybrid_shard`; _fully_shard/_fsdp_param.py shards over the mesh's last dim)."""
    return max(rp.shard_group or rp.world_size, 1)


def zero_shard_factor(rp: ResolvedPlan, what: str) -> float:
    """Fraction of `what` kept on this rank by ZeRO/FSDP over the sharding ranks (`shard_ranks`)."""
    if rp.strategy not in ("deepspeed", "fsdp") or shard_ranks(rp) <= 1:
        return 1.0
    stage = rp.zero_stage
    needed = {"optimizer": 1, "gradients": 2, "weights": 3}[what]
    if rp.strategy == "fsdp" and what == "weights":
        # SHARD_GRAD_OP shards the parameters at rest too, gathering them from a unit's forward to its backward
        # (`fsdp_root_unsharded`; torch FSDP docs, ShardingStrategy.SHARD_GRAD_OP)
        needed = 2
    return 1.0 / shard_ranks(rp) if stage >= needed else 1.0


def fsdp_block_params(rp: ResolvedPlan) -> float:
    """One block's parameters as FSDP gathers them on a rank, and so the unsharded gradients its backward makes: the
    rank's tensor-parallel slice of the block, its routed experts only as far as the rank gathers them
    (`fsdp_expert_gather_share`)."""
    routed = routed_block_params(rp) if rp.arch.is_moe else 0
    layer = shapes(rp.arch).layer_params
    return (layer - routed * (1.0 - fsdp_expert_gather_share(rp))) / max(rp.tensor_parallel, 1)


def fsdp_model_params(rp: ResolvedPlan) -> float:
    """The whole model's parameters as FSDP gathers them on a rank (`fsdp_block_params`, over every block): its
    tensor-parallel slice, of the routed experts the share `fsdp_expert_gather_share`."""
    s = shapes(rp.arch)
    routed = sum(l.params for l in s.linears if l.expert)
    return (s.total - routed * (1.0 - fsdp_expert_gather_share(rp))) / max(rp.tensor_parallel, 1)


def fsdp_expert_gather_share(rp: ResolvedPlan) -> float:
    """The share of a MoE block's routed experts FSDP gathers on a rank under expert parallelism (1 without it).

    NeMo AutoModel's MoE parallelizer (v0.3.0, v0.4.0, v0.5.0 and main nemo_automodel/components/moe/
    parallelizer.py `parallelize_model`, `apply_ep`, `apply_fsdp`) folds the FSDP ranks, dp·cp, into an
    (ep_shard, ep) mesh, ep_shard = dp·cp / ep (v0.5.0 components/distributed/mesh_utils.py
    `_create_fsdp2_device_mesh`, `_create_moe_mesh`; v0.4.0 `create_device_mesh`: `ep_shard_size = dp_cp_size //
    ep_size`, 1 when ep covers them all). `apply_ep` distributes each MoE block's expert stacks `Shard(0)` over
    `ep`, a rank holding num_experts / ep of them; `apply_fsdp` then `fully_shard`s those over `ep_shard` as a unit
    of their own, left out of the block's unit (`ignored_params`), whose other parameters FSDP shards over dp·cp.
    At rest a rank keeps 1 / (ep · ep_shard) = 1 / (dp·cp) of the experts, as of every other parameter
    (`zero_shard_factor`, unchanged), but a block's all-gathers make its dense parameters whole and its experts only
    the rank's num_experts / ep. With ep = dp·cp (ep_shard 1) the experts are not FSDP-sharded at all
    (`ep_shard_enabled` false): each rank computes on its own experts in place and gathers none of them.

    Under tensor parallelism the share is of the rank's tensor-parallel slice (the callers divide by TP): torchtitan
    (v0.2.2 parallel_dims.py `build_mesh`, sparse mesh (efsdp, ep, etp), efsdp = fsdp × TP ÷ (etp × ep)) gathers
    num_experts / ep experts each split over etp, TP × 1 / (ep × etp) of the slice; with expert TP 1 the experts are
    taken over the TP ranks too, so they are unsharded once ep covers fsdp × TP."""
    ep = max(rp.expert_parallel, 1)
    if ep == 1 or rp.strategy != "fsdp":
        return 1.0
    tp = max(rp.tensor_parallel, 1)
    etp = max(rp.expert_tensor_parallel or tp, 1)
    return tp / (ep * etp) if ep * etp < shard_ranks(rp) * tp else 0.0


def fsdp_gathers_16bit(rp: ResolvedPlan) -> bool:
    """FSDP's MixedPrecision(param_dtype=bf16) over fp32 parameters: each unit's fp32 shard is cast to a
    low-precision shard and all-gathered in param_dtype, the module computes on that, and the unsharded copy is
    freed after the unit's forward and again after its backward (torch 2.13 torch/distributed/fsdp/_flat_param.py
    `_use_low_precision_shard`, `_free_low_precision_sharded_param`, _runtime_utils.py `_post_forward_reshard`;
    FSDP2: _fully_shard/_fsdp_param.py `all_gather_inputs` casts the shard to `param_dtype`). That 16-bit working
    set is the two gathered units of `zero_buffers` and the root of `fsdp_root_unsharded`. Autocast, if it runs
    too (verl's dp_actor.py wraps the forward in `torch.autocast(dtype=torch.bfloat16)`), meets 16-bit weights and
    caches no copies: it caches casts of fp32 leaf tensors only (aten/src/ATen/autocast_mode.cpp `cached_cast`)."""
    return rp.fsdp_mixed_precision


def fsdp_gather_bytes(rp: ResolvedPlan) -> int:
    """Bytes per parameter of FSDP's unsharded copies: the mixed-precision `param_dtype` (the compute dtype) when the
    plan gathers 16-bit weights (`fsdp_gathers_16bit`), else the parameters' own dtype (torch 2.13
    distributed/fsdp/_fully_shard/_fsdp_param.py `init_dtype_attrs`: no param_dtype, no cast). The unsharded
    gradients autograd makes are in that dtype too."""
    return DTYPE_BYTES[rp.compute_dtype if fsdp_gathers_16bit(rp) else rp.weight_dtype]


def fsdp_sharded(rp: ResolvedPlan) -> bool:
    """FULL_SHARD (stage 3) or SHARD_GRAD_OP (stage 2) across ranks: parameters, gradients and optimizer state all
    sharded at rest (`zero_shard_factor`)."""
    return rp.strategy == "fsdp" and shard_ranks(rp) > 1 and rp.zero_stage >= 2 and not rp.offload_params


def fsdp_version(rp: ResolvedPlan) -> int:
    """The FSDP a sharded plan runs: the one its config names (accelerate's and axolotl's `fsdp_version`, verl's
    `strategy: fsdp2`, torchtitan's and NeMo AutoModel's FSDP2), else FSDP1 where the plan keeps FSDP1's per-block
    gradients (`fsdp_keeps_block_grads`), else FSDP2; 0 when the plan does not shard with FSDP across ranks."""
    if rp.strategy != "fsdp" or rp.world_size <= 1 or rp.zero_stage < 2:
        return 0
    if rp.fsdp_version in (1, 2):
        return rp.fsdp_version
    return 1 if rp.fsdp_keeps_block_grads else 2


def fsdp1_adapter_units(rp: ResolvedPlan) -> bool:
    """Whether FSDP1 holds the adapters in units of their own: the HF Trainer wraps every trainable leaf linear
    (peft's lora_A, lora_B) in an FSDP1 unit beside the decoder blocks (transformers 5.24 distributed/fsdp.py
    `update_fsdp_plugin_peft` sets peft 0.21.2 utils/other.py `fsdp_auto_wrap_policy`), so a block's unit holds its
    frozen base weights only. FSDP2's `fully_shard` on a block takes its adapters with it (`fsdp_unit_adapters`)."""
    return fsdp_version(rp) == 1 and rp.peft != "none"


def fsdp1_adapter_input_upcast(rp: ResolvedPlan) -> bool:
    """Whether each LoRA adapter casts its 16-bit input to fp32 under FSDP1's mixed precision, autocast casting it
    back to 16 bits inside lora_A (a 16-bit copy per adapter, as over fp32 weights: `linears.adapter_input`).

    Every adapter linear is an FSDP1 unit of its own (`fsdp1_adapter_units`) with `use_orig_params`
    (transformers 5.24 training_args.py: `fsdp_config.get("use_orig_params", "true")`). peft's LoRA `Linear.forward`
    reads the adapter's dtype before calling it, `x = self._cast_input_dtype(x, lora_A.weight.dtype)` (peft 0.21.2
    tuners/lora/layer.py; bnb.py likewise), outside that unit's forward, where lora_A's weight is a view of the
    unit's fp32 sharded flat parameter (torch 2.14 distributed/fsdp/_flat_param.py `_use_sharded_views`: only
    between the unit's pre-forward unshard and its post-forward reshard is it the 16-bit gathered view,
    `_use_unsharded_views`). So the adapter's input goes up to fp32; lora_A then computes with its gathered 16-bit
    weight, autocast casting that fp32 input to 16 bits again (FSDP1 casts no non-root unit's inputs:
    _runtime_utils.py `_pre_forward`, `MixedPrecision.cast_forward_inputs` False by default), and the linear keeps
    that cast for lora_A's weight gradient: one per adapter, where the adapters reading one tensor would share it.
    With checkpointing the forward's copies are not kept, and the recomputed block's are what counts: SHARD_GRAD_OP
    leaves the gathered views in place after a unit's forward (`_use_sharded_flat_param`, `skip_use_sharded_views`),
    so the recomputation reads 16 bits and casts nothing; FULL_SHARD resharded each adapter after its forward
    (_runtime_utils.py `_post_forward_reshard`), and the recomputation runs each adapter unit's pre- and post-forward
    again (`_pre_forward` skips them only for a handle already in BACKWARD_PRE, which a lora_A reaches at its own
    pre-backward, after the recomputation has run), so peft reads lora_A's fp32 sharded view again and every
    adapter casts: the recomputed block keeps one 16-bit copy per adapter, as the forward does without
    checkpointing."""
    return (
        (not rp.grad_checkpointing or rp.zero_stage >= 3)
        and fsdp1_adapter_units(rp)
        and rp.peft in ("lora", "qlora", "dora")
        and fsdp_gathers_16bit(rp)
        and rp.compute_dtype != "fp32"
        and (rp.adapter_fp32 or rp.weight_dtype == "fp32")
        and rp.amp
    )
