"""Megatron-core layouts: pipeline stages, expert parallelism, the distributed optimizer, and one step's phases on
the busiest rank.

Megatron-LM 00caa53a megatron/training/theoretical_memory_usage.py (`compute_weight_and_optimizer_memory`,
`compute_activation_memory`, `compute_activation_memory_without_sp`) and Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models" (arXiv:2205.05198, Table 2 and §4-5), generalised to grouped
K/V, gated MLPs and routed experts; tests/estimate/test_megatron_layouts.py re-implements that file and checks the
two agree on the layouts it covers."""

from __future__ import annotations

import json
import math

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.components.experts import expert_parameters, lora_linears
from vramlens.estimate.components.logits import verl_triton_head_bytes
from vramlens.estimate.components.parameters import params
from vramlens.estimate.components.pipeline import Stage, stage_layer_counts, stages
from vramlens.estimate.components.ssm import mamba2_sizes
from vramlens.estimate.shapes import shapes
from vramlens.knowledge.inventory import nemotron_h_layers
from vramlens.resolved import ResolvedPlan

MEGATRON_EMBED_INPUT_BYTES = 8  # int64 token ids of a micro-batch held by the first stage (theoretical_memory_usage)


def expert_tp(rp: ResolvedPlan) -> int:
    return max(rp.expert_tensor_parallel or rp.tensor_parallel, 1)


def megatron_dp(rp: ResolvedPlan) -> tuple[int, int]:
    """(ranks the dense weights' optimizer state is sharded over, ranks the experts' is): the distributed optimizer
    shards over the data-parallel group with context parallelism folded in (megatron/core/parallel_state.py
    `get_data_parallel_group(with_context_parallel=True)`) and the experts' over the expert data-parallel group,
    world ÷ (expert TP × EP × PP) (`get_expert_data_parallel_group`)."""
    dp = max(rp.world_size, 1) * max(rp.context_parallel, 1)
    world = dp * max(rp.tensor_parallel, 1) * max(rp.pipeline_parallel, 1)
    edp = max(world // (expert_tp(rp) * max(rp.expert_parallel, 1) * max(rp.pipeline_parallel, 1)), 1)
    return dp, edp


def megatron_state_bytes(rp: ResolvedPlan, st: Stage) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) of a pipeline rank under Megatron-core. 16-bit weights with fp32 gradient
    buffers (Megatron-LM megatron/training/arguments.py: bf16 turns on `accumulate_allreduce_grads_in_fp32`; the
    buffers of megatron/core/distributed/param_and_grad_buffer.py stay allocated through the step) and an fp32 main
    copy + Adam's two fp32 states in the optimizer: 18 bytes per parameter, or 6 + 12/DP with the distributed
    optimizer (theoretical_memory_usage `num_bytes_per_parameter`). fp32 training keeps no main copy. Adapters
    (LoRA through Megatron-SWIFT) train alone over frozen 16-bit weights. With the optimizer offloaded to the CPU
    (`--optimizer-cpu-offload`, which arguments.py requires with `--use-precision-aware-optimizer`: no fp32 main
    copy on the GPU), Megatron-LM d98e8a64dd megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py
    `_get_sub_optimizer_param_groups` moves `--optimizer-offload-fraction` (default 1.0, arguments.py) of the rank's
    optimizer parameters to pinned CPU copies that its CPU Adam updates with their states: at that default the GPU
    keeps no optimizer state, only the 16-bit weights and the gradient buffers. Below it, the parameters past the
    offloaded share stay on the GPU (`offload_params_numel < offload_threshold and param.is_cuda`, the threshold
    being that fraction of the optimizer's parameter count), each with an fp32 copy (`param_update_in_fp32=True`,
    megatron/core/optimizer/__init__.py) and the GPU Adam's two fp32 states (torch.optim.AdamW): that share of the
    optimizer's bytes on the GPU. The gradient buffers are in `grad_buffer_dtype` (fp32 unless an fp16 run or
    `--grad-reduce-in-bf16` makes them 16-bit: formats.megatron `_grad_buffers`)."""
    dense, experts = megatron_rank_params(rp, st)
    wb = DTYPE_BYTES[rp.weight_dtype]
    weights = (dense + experts) * wb
    opt = rp.optimizer
    per_state = 4 * opt.states + (4 if wb < 4 else 0)  # fp32 states (+ the fp32 main weights)
    if rp.precision_aware_optimizer and not rp.offload_optimizer:
        # (the hybrid CPU optimizer builds its GPU Adam without the precision-aware dtypes, `param_update_in_fp32`:
        # megatron/core/optimizer/__init__.py `HybridDeviceOptimizer(...)`)
        per_state = megatron_precision_aware_state_bytes(rp)
    if rp.offload_optimizer:
        # the hybrid optimizer's CPU copies: its offload fraction of the rank's optimizer parameters
        per_state *= 1.0 - min(max(rp.optimizer_offload_fraction, 0.0), 1.0)
    dp, edp = megatron_dp(rp) if rp.distributed_optimizer else (1, 1)
    weights += megatron_vision_params(rp, st)[0] * wb
    trained_dense, trained_experts = megatron_trained_params(rp, st)
    gb = DTYPE_BYTES[rp.grad_buffer_dtype]
    if rp.peft != "none":
        weights += (trained_dense + trained_experts) * (4 if rp.adapter_fp32 else wb)
        gb = 4 if rp.adapter_fp32 else gb
    grads = (trained_dense + trained_experts) * gb
    return int(weights), int(grads), int(trained_dense * per_state / dp + trained_experts * per_state / edp)


def megatron_critic_plan(rp: ResolvedPlan) -> ResolvedPlan:
    """The critic trained beside the policy under Megatron-Core, as a plan of its own (verl's Megatron workers:
    `CriticWorker` builds its own Megatron-Core model with a one-wide value head, verl/models/mcore `value_model`):
    its shapes without the vocabulary head, at its own micro-batch and recompute, by the policy's layout or its own
    (`critic_layout`: verl's `critic.megatron.*`) over the same GPUs, its data-parallel ranks what its TP × PP × CP
    leave of them."""
    ckpt = rp.grad_checkpointing if rp.critic_grad_checkpointing is None else rp.critic_grad_checkpointing
    critic = rp.with_changes(
        arch=rp.value_arch or rp.arch,
        scalar_head=True,
        value_arch=None,
        value_model=False,
        reward_model=False,
        reference="none",
        verl_fused_head=False,
        micro_batch=rp.critic_micro_batch or rp.micro_batch,
        critic_micro_batch=0,
        grad_checkpointing=ckpt,
    )
    if rp.critic_layout is None:
        return critic
    tp, pp, cp, ep, etp = rp.critic_layout
    gpus = max(rp.world_size, 1) * max(rp.tensor_parallel, 1) * max(rp.pipeline_parallel, 1)
    gpus *= max(rp.context_parallel, 1)
    return critic.with_changes(
        tensor_parallel=tp,
        pipeline_parallel=pp,
        context_parallel=cp,
        expert_parallel=ep,
        expert_tensor_parallel=etp or None,
        world_size=max(gpus // (tp * pp * cp), 1),
        virtual_pipeline=1,
        first_stage_layers=None,
        last_stage_layers=None,
    )


def megatron_value_model(rp: ResolvedPlan) -> int:
    """The critic's weights, gradient buffers and optimizer state (`megatron_state_bytes` of `megatron_critic_plan`
    on its busiest stage), resident beside the policy's through the actor's phases unless offloaded."""
    critic = megatron_critic_plan(rp)
    return max(sum(megatron_state_bytes(critic, st)) for st in stages(critic))


def megatron_reward_weights(rp: ResolvedPlan) -> int:
    """A frozen reward model beside the policy under Megatron-Core: its 16-bit weights (a one-wide score head) on
    the busiest stage of the policy's layout."""
    rm = rp.with_changes(arch=rp.reward_arch or rp.arch, scalar_head=True, peft="none")
    wb = DTYPE_BYTES[rp.weight_dtype]
    return int(max(sum(megatron_rank_params(rm, st)) * wb for st in stages(rm)))


def megatron_rank_params(rp: ResolvedPlan, st: Stage) -> tuple[float, float]:
    """(dense, expert) parameters a pipeline rank holds: its share of the stage's dense weights over TP and of its
    routed experts over expert TP × EP (the vision tower apart: `megatron_vision_params`)."""
    return st.dense_params / max(rp.tensor_parallel, 1), st.expert_params / (expert_tp(rp) * max(rp.expert_parallel, 1))


def megatron_trained_params(rp: ResolvedPlan, st: Stage) -> tuple[float, float]:
    """(dense, expert) parameters a pipeline rank trains, whose gradient buffers and optimizer state it holds: its
    share of the dense weights over TP (with a trained vision tower) and of the experts over expert TP × EP, or under
    adapters each kind of adapter in the share of its kind of weights the rank holds."""
    dense, experts = megatron_rank_params(rp, st)
    if rp.peft == "none":
        return dense + megatron_vision_params(rp, st)[1], experts
    s = shapes(rp.arch)
    expert_total = sum(l.params for l in s.linears if l.expert)
    dense_adapters, expert_adapters = megatron_adapter_params(rp)
    return dense_adapters * dense / max(s.total - expert_total, 1), expert_adapters * experts / max(expert_total, 1)


def megatron_vision_params(rp: ResolvedPlan, st: Stage) -> tuple[int, int]:
    """(vision tower and projector parameters a rank holds, those of them trained in full). The stage's whole tower
    (`Stage.vision_params`: the first stage's, not split over TP), held in the weights' dtype. In full training it
    trains unless `--freeze_vit` (ms-swift v4.0.0 swift/megatron/arguments/megatron_args.py `freeze_vit: bool =
    True`; `_init_multimodal_full` puts the tower in `freeze_parameters` only with it), and Megatron's DDP wraps the
    whole model, so a trained tower gets fp32 gradient buffers and data-parallel-sharded optimizer state as the
    language model's dense weights do. Under adapters whatever of the tower trains is in `megatron_adapter_params`."""
    vision = st.vision_params
    trained = vision if vision and not rp.vision_frozen and rp.peft == "none" else 0
    return vision, trained


def megatron_adapter_params(rp: ResolvedPlan) -> tuple[int, int]:
    """(adapters on the dense weights, adapters on the routed experts) of a Megatron-SWIFT LoRA run, whole model.

    The experts' adapters are Megatron-SWIFT's own: on a grouped-expert linear (TEGroupedLinear, `linear_fc1` with
    gate and up fused, `linear_fc2`), `LoraParallelLinear.update_layer` builds lora_A and lora_B as grouped linears
    with the base layer's `num_gemms`, one r × in and out × r pair per local expert (ms-swift v4.0.0
    swift/megatron/tuners/lora.py; v3.10.0 the same). "all-linear" (`find_all_linears`, swift/megatron/utils/utils.py)
    takes every TE linear and grouped linear but the output layer, not the router. They live in the expert
    gradient buffers and the distributed optimizer shards them over the expert data-parallel group
    (`megatron_dp`), the dense adapters over the data-parallel group. The dense part is what `params` counts
    besides the experts (attention and dense-MLP adapters, `modules_to_save`)."""
    arch = rp.arch
    p = params(rp).trainable
    if not arch.num_experts:
        return p, 0
    peft_experts = sum(e.adapter_params for e in expert_parameters(rp)) + sum(
        l.count * rp.lora_r * (l.in_features + l.out_features) for l in lora_linears(rp) if l.expert
    )
    targets = set(rp.lora_targets)
    f = arch.moe_intermediate or arch.intermediate
    fc1_out = 2 * f if arch.mlp in ("swiglu", "geglu") else f
    per_expert = 0
    if targets & {"all-linear", "gate", "up", "fc1"}:
        per_expert += rp.lora_r * (arch.hidden + fc1_out)
    if targets & {"all-linear", "down", "fc2"}:
        per_expert += rp.lora_r * (f + arch.hidden)
    experts = per_expert * arch.num_experts * max(arch.layers - arch.dense_layers, 0)
    return max(p - peft_experts, 0), experts


def megatron_reference_bytes(rp: ResolvedPlan, st: Stage) -> int:
    """A frozen reference copy (DPO/KTO of full weights): Megatron-SWIFT builds a second Megatron-core model with the
    policy's layout and dtype and loads the same checkpoint into it (ms-swift v4.0.0
    swift/megatron/trainers/rlhf_mixin.py `prepare_model`: `self.ref_models = get_mcore_model(args, ...)` when
    `tuner_type == 'full'` and `rlhf_type` is not rm/gkd; v3.12.6 the same file, `setup_model_and_optimizer`), so a
    rank holds its stage's share of it: dense weights over TP, experts over expert TP × EP. LoRA runs use the policy
    with its adapters off and hold no copy."""
    if rp.reference != "copy" or rp.reference_offloaded:
        return 0
    dense, experts = megatron_rank_params(rp, st)
    dense += st.vision_params  # the tower whole (`stages`)
    return int((dense + experts) * DTYPE_BYTES[rp.reference_dtype or rp.weight_dtype])


def megatron_recomputes(rp: ResolvedPlan, module: str) -> bool:
    """Whether Megatron's selective recompute checkpoints `module` (ResolvedPlan.recompute_modules)."""
    return rp.selective_recompute == "core_attention" and module in rp.recompute_modules


def megatron_core_attention_per_token(rp: ResolvedPlan, recomputed: bool = False) -> float:
    """Bytes per token one layer's core attention keeps beyond Q, K, V and its output (split over the tensor-parallel
    ranks): with an unfused kernel (Megatron's own DotProductAttention, `--attention-backend local`/`unfused`), the
    16-bit softmax output, the dropout mask and the dropped probabilities, 5·a·s per token (Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models", §4.1: 5as²b per layer); none with flash or
    cuDNN fused attention, which keep only their output and softmax statistics. Selective recompute
    (`--recompute-granularity selective`, `selective_recompute` "core_attention") checkpoints the core attention
    (megatron/core/transformer/attention.py `_checkpointed_attention_forward`): its scores are not stored, and in
    backward one layer's are rebuilt at a time (`recomputed`: the size of that working set)."""
    if rp.attn_impl != "eager":
        return 0.0
    scores = 5.0 * rp.arch.heads * (rp.seq_len // max(rp.context_parallel, 1))
    if megatron_recomputes(rp, "core_attn"):
        return scores if recomputed else 0.0
    return 0.0 if recomputed else scores


def megatron_layer_per_token(rp: ResolvedPlan, moe: bool) -> tuple[float, float]:
    """Bytes one layer saves per token of a micro-batch, as (split over the tensor-parallel ranks, replicated over them
    unless sequence parallelism splits it too). Korthikanti et al. Table 2 counts a GPT layer as
    sbh(10 + 24/t) without sequence parallelism and 34·sbh/t with it: the two norms' inputs (4h), the QKV and MLP
    inputs (2h each) and the two 1-byte dropout masks (2h) are replicated; Q, K, V and the attention output (8h),
    the MLP's first projection output and its activation (16h at ffn = 4h) are split (theoretical_memory_usage:
    `18 + 4 * ffn / h` with SP). Grouped K/V and a gated MLP (twice as wide a first projection) are counted at their
    widths; attention scores are not stored (Megatron-core's fused/flash attention keeps only its output and
    softmax statistics). A routed-expert layer keeps, per token and chosen expert, the permuted input and the
    unpermuted output (2h each) with the experts' first projection and activation, and the router's fp32 logits.
    The layer is its attention half and its MLP half (`_attention_part`, `_mlp_part`)."""
    gated = rp.arch.mlp in ("swiglu", "geglu")
    split_a, repl_a = _attention_part(rp)
    split_m, repl_m = _mlp_part(rp, moe, gated)
    return split_a + split_m, repl_a + repl_m


def _attention_part(rp: ResolvedPlan) -> tuple[float, float]:
    """The self-attention half of a layer, (split, replicated) bytes per token: Q, K, V and the attention output
    (with unfused core attention, its scores) split; the norm's input, linear_qkv's input and the 1-byte dropout
    mask of the bias-dropout-add replicated (5h)."""
    arch = rp.arch
    h = arch.hidden
    attention = (
        2 * arch.q_dim + 2 * arch.kv_dim + 2 * arch.kv_dim + 2 * arch.q_dim + megatron_core_attention_per_token(rp)
    )
    return attention, 2 * h + 2 * h + h


def _mlp_part(
    rp: ResolvedPlan, moe: bool, gated: bool, shared_width: int | None = None, stored: bool = True
) -> tuple[float, float]:
    """The MLP half of a layer, (split, replicated) bytes per token: the first projection's output and its activation
    split; the norm's input, linear_fc1's input and the dropout mask replicated (5h). A MoE half keeps its shared
    experts split (the model's, or one `shared_width` wide) and, replicated, the router's fp32 logits and the routed
    tokens. Selective recompute (`stored`: what stays saved; `megatron_recomputes`) of "mlp" or "moe" checkpoints the
    whole MLP or MoE layer (megatron/core/transformer/mlp.py, moe/moe_layer.py `tensor_parallel.checkpoint`): it keeps
    its input (linear_fc1's, counted) and nothing inside; "shared_experts" the shared experts alike; "moe_act"
    discards the experts' activation output (moe/experts.py, output-discarding checkpoint), keeping fc1's output."""
    arch = rp.arch
    h = arch.hidden
    replicated = 2 * h + 2 * h + h

    def inner(width: int, act_discarded: bool = False) -> float:
        return (6 if gated else 4) * width - (2 * width if act_discarded else 0)

    if not moe:
        if stored and megatron_recomputes(rp, "mlp"):
            return 0.0, replicated
        return inner(arch.intermediate), replicated
    if stored and megatron_recomputes(rp, "moe"):
        return 0.0, replicated
    f = arch.moe_intermediate or arch.intermediate
    k = max(arch.experts_per_token, 1)
    # Routed tokens start from the rank's sequence-parallel shard: the all-to-all dispatcher sends them over EP and
    # gathers them over the expert-TP group before the grouped experts (megatron-core core_r0.13.0
    # megatron/core/transformer/moe/token_dispatcher.py `MoEAlltoAllTokenDispatcher.token_dispatch`:
    # `gather_from_sequence_parallel_region(..., group=self.tp_group)` of the expert-TP group), so a rank's experts
    # see ETP × its shard's rows: their fc1 input (2h, kept by the grouped linear for its weight gradient) at that
    # count, their first projection and activation split over ETP, and the unpermuted output (2h, kept by the
    # probability weighting) at the shard's count. Counted in the "divided by SP" part.
    routed = k * (2 * h * expert_tp(rp) + inner(f, stored and megatron_recomputes(rp, "moe_act")) + 2 * h)
    if stored and megatron_recomputes(rp, "shared_experts"):
        shared = 0.0
    elif shared_width is None:
        shared = arch.shared_experts * inner(arch.shared_expert_intermediate or f)
    else:
        shared = inner(shared_width)
    return shared, replicated + 4 * arch.num_experts + routed


# Megatron-LM's hybrid Mamba/attention model (megatron/core/models/hybrid/hybrid_model.py at d98e8a64; MambaModel,
# megatron/core/models/mamba/mamba_model.py at core_v0.15.0) builds one layer of one kind per pattern symbol: a
# Mamba layer, an attention-only TransformerLayer, an MLP-only MLPLayer or a MoE-only layer (hybrid_layer_specs.py
# `hybrid_stack_spec`; mamba_layer_specs.py `mamba_stack_spec`). Its model is read as transformers' Nemotron-H, whose
# layer list (`knowledge.inventory.nemotron_h_layers`) names the same kinds.
HYBRID_MAMBA, HYBRID_ATTENTION, HYBRID_MLP, HYBRID_MOE = "linear_attention", "full_attention", "mlp", "moe"


def megatron_hybrid_layers(rp: ResolvedPlan) -> list[str] | None:
    """The kind of each layer of a hybrid Mamba/attention model (Nemotron-H's layer list, in order), or None for a
    model of transformer layers."""
    if rp.arch.family != "nemotron_h" or not rp.arch.hf_config_json:
        return None
    layers = nemotron_h_layers(json.loads(rp.arch.hf_config_json))
    kinds = (HYBRID_MAMBA, HYBRID_ATTENTION, HYBRID_MLP, HYBRID_MOE)
    if layers is None or len(layers) != rp.arch.layers or any(k not in kinds for k in layers):
        return None
    return layers


def megatron_mamba_per_token(rp: ResolvedPlan) -> tuple[float, float]:
    """What a Mamba layer saves per token, (split over the tensor-parallel ranks, replicated over them unless sequence
    parallelism splits it too), on Megatron-core's training path. megatron/core/ssm/mamba_layer.py `MambaLayer` with
    megatron/core/ssm/mamba_mixer.py `MambaMixer` (core_v0.15.0 `ssm_training`; d98e8a64 `_ssm_training`, the
    same): the norm fused into in_proj (TELayerNormColumnParallelLinear keeps the norm's input and its own, 2h each)
    and the bias-dropout-add's 1-byte mask (h), replicated as a transformer layer's; then, with the mixer's d_inner
    I, heads H and groups G split over TP (`d_inner_local_tp`, `nheads_local_tp`, `ngroups_local_tp`) and state N:
    - in_proj's output z|x|B|C|dt made contiguous (2·(2I + 2GN + H)), which mamba_ssm's
      `mamba_split_conv1d_scan_combined` keeps (the memory-efficient path, `use_mamba_mem_eff_path` True by default:
      transformer_config.py). Its autograd Function (mamba_ssm v2.2.2 … v2.3.1
      mamba_ssm/ops/triton/ssd_combined.py `MambaSplitConv1dScanCombinedFn.forward`, called without rmsnorm_weight
      or outproj_weight) saves `zxbcdt`, the scan's output before the z gate `out_x` (2I), the conv weights and
      A, D, dt_bias; the conv output, Δ and the chunk states are recomputed in its backward;
    - the gated RMSNorm (`ExtendedRMSNorm`, mamba_ssm ops/triton/layernorm_gated.py `RMSNorm` → `LayerNormFn`,
      called without z: the kernel gated the output already) saves its input (2I) and 1/rms per group in fp32 (4G);
    - out_proj (TERowParallelLinear) keeps its input (2I).
    Not counted: the per-layer fp32 A = −exp(A_log) and dt_bias copy (12·H bytes per micro-batch)."""
    z = mamba2_sizes(rp)
    assert z is not None  # a Nemotron-H model (`megatron_hybrid_layers`)
    h = rp.arch.hidden
    zxbcdt = 2 * (2 * z.inner + 2 * z.groups * z.state + z.heads)
    split = zxbcdt + 2 * z.inner + (2 * z.inner + 4 * z.groups) + 2 * z.inner
    return split, 2 * h + 2 * h + h


def megatron_hybrid_layer_per_token(rp: ResolvedPlan, kind: str) -> tuple[float, float]:
    """Bytes one layer of a hybrid model saves per token, by its kind, as (split, replicated): a Mamba layer
    (`megatron_mamba_per_token`), an attention-only layer (a transformer layer's attention half, `_attention_part`),
    an MLP-only or MoE-only layer (its MLP half, `_mlp_part`). Nemotron-H's MLPs and experts are not gated, and its
    MoE layer has one shared MLP `moe_shared_expert_intermediate_size` wide (transformers 5.24
    models/nemotron_h/modeling_nemotron_h.py `NemotronHMLP`: up_proj, activation, down_proj; `NemotronHMoE`:
    `self.shared_experts = NemotronHMLP(config, intermediate_size=config.moe_shared_expert_intermediate_size)`,
    configuration_nemotron_h.py default 7688; 0 for a Megatron run without `--moe-shared-expert-intermediate-size`)."""
    if kind == HYBRID_MAMBA:
        return megatron_mamba_per_token(rp)
    if kind == HYBRID_ATTENTION:
        return _attention_part(rp)
    if kind == HYBRID_MOE:
        shared = json.loads(rp.arch.hf_config_json).get("moe_shared_expert_intermediate_size", 7688)
        return _mlp_part(rp, True, gated=False, shared_width=int(shared or 0))
    return _mlp_part(rp, False, gated=False)


def _stage_layer_bytes(rp: ResolvedPlan, st: Stage, tp: int, sp: int) -> tuple[list[tuple[int, float]], int]:
    """((layers, bytes per token on a rank) for each kind of layer on the stage, MoE layers on it). A hybrid model's
    stage holds its slice of the layer list (megatron/core/ssm/mamba_block.py `_select_layers_for_pipeline_parallel`
    at core_v0.15.0: consecutive layers, `stage_layer_counts` of them)."""
    kinds = megatron_hybrid_layers(rp)
    if kinds is None:
        moe_layers = min(st.layers, max(rp.arch.layers - rp.arch.dense_layers, 0)) if rp.arch.num_experts else 0
        split_d, repl_d = megatron_layer_per_token(rp, moe=False)
        split_m, repl_m = megatron_layer_per_token(rp, moe=True) if moe_layers else (0.0, 0.0)
        return [
            (st.layers - moe_layers, split_d / tp + repl_d / sp),
            (moe_layers, split_m / tp + repl_m / sp),
        ], moe_layers
    n_first, _, n_last = stage_layer_counts(rp)
    start = {"middle": n_first, "last": len(kinds) - n_last}.get(st.name, 0)
    held = kinds[start : start + st.layers]
    out = []
    for kind in dict.fromkeys(held):
        split, repl = megatron_hybrid_layer_per_token(rp, kind)
        out.append((held.count(kind), split / tp + repl / sp))
    return out, held.count(HYBRID_MOE)


def megatron_activations(rp: ResolvedPlan, st: Stage) -> tuple[int, int]:
    """(activations held, MoE all-to-all buffers) on a pipeline rank at its peak: every micro-batch in flight keeps
    the saved activations of the rank's layers (full recompute: their checkpointed inputs, plus one group recomputed
    in the backward), the first rank also its embedding's input ids and dropout mask. Tokens per micro-batch are
    divided by context parallelism. A hybrid Mamba/attention model's layers are sized by kind (`_stage_layer_bytes`)."""
    tp = max(rp.tensor_parallel, 1)
    sp = tp if rp.sequence_parallel else 1
    h = rp.arch.hidden
    tokens = rp.micro_batch * rp.sequences_per_example * (rp.seq_len // max(rp.context_parallel, 1))
    by_kind, moe_layers = _stage_layer_bytes(rp, st, tp, sp)
    full = sum(n * per_token for n, per_token in by_kind)
    biggest = max(per_token for _, per_token in by_kind)
    if rp.grad_checkpointing:
        ckpt = 2 * h / sp  # a recomputed layer keeps only its input (Korthikanti: 2sbh)
        n = max(min(rp.recompute_layers, st.layers), 1)
        if rp.recompute_method == "block":
            # the first n layers of each chunk recomputed, the rest keep everything
            # (transformer_block.py `_checkpointed_forward`)
            per_mb = n * ckpt + full * (st.layers - n) / max(st.layers, 1)
            working = biggest
        else:
            per_mb = math.ceil(st.layers / n) * ckpt
            working = n * biggest  # one group of n layers recomputed for one micro-batch
    else:
        per_mb, working = full, 0.0
    # selective recompute: one layer's core attention rebuilt in backward (megatron_core_attention_per_token), or
    # one layer's MLP or MoE half (`_mlp_part`)
    working = max(working, megatron_core_attention_per_token(rp, recomputed=True) / tp)
    gated = rp.arch.mlp in ("swiglu", "geglu")
    if megatron_hybrid_layers(rp) is None:
        for moe in [m for m, n in ((True, moe_layers), (False, st.layers - moe_layers)) if n > 0]:
            if megatron_recomputes(rp, "moe" if moe else "mlp"):
                (split, repl), (kept_s, kept_r) = _mlp_part(rp, moe, gated, stored=False), _mlp_part(rp, moe, gated)
                working = max(working, (split - kept_s) / tp + (repl - kept_r) / sp)
    if st.embedding:
        per_mb += (MEGATRON_EMBED_INPUT_BYTES + h) / sp
    a2a = 0
    if moe_layers and rp.ep_dispatch == "all_gather":
        a2a = megatron_allgather_dispatch(rp, tokens)
    elif moe_layers:
        # the token dispatcher's all-to-all: a micro-batch's chosen-expert tokens sent and received for one layer
        # (megatron/core/transformer/moe/token_dispatcher.py `MoEAlltoAllTokenDispatcher`), from the rank's
        # sequence-parallel shard: MoE training with TP > 1 requires sequence parallelism (Megatron-LM d98e8a64
        # megatron/core/transformer/moe/moe_layer.py `forward` raises without it)
        a2a = int(2 * max(rp.arch.experts_per_token, 1) * 2 * h * tokens / tp)
    return int(tokens * (per_mb * st.in_flight + working)), a2a


def megatron_allgather_dispatch(rp: ResolvedPlan, tokens: int) -> int:
    """The all-gather token dispatcher's memory in one MoE layer (Megatron-LM's default; megatron/core/transformer/
    moe/token_dispatcher.py `MoEAllGatherTokenDispatcher` at core main): every rank gathers the N = expert TP × EP ×
    its sequence-parallel shard tokens of its group — their routing map (a byte per token × expert) and fp32
    probabilities, and their hidden states into the global memory buffer (`use_global_buffer=True`, which stays
    allocated once used) — then at the combine unpermutes its experts' outputs back to N rows (`restore_shape`) and
    casts them to fp32 for the reduce-scatter (`hidden_states.to(self.local_probs.dtype)`): 16-bit and fp32 copies of
    N × hidden alive together. The permuted rows its experts get are the routed activations."""
    h, e = rp.arch.hidden, max(rp.arch.num_experts, 1)
    n = max(rp.expert_parallel, 1) * expert_tp(rp) * tokens / max(rp.tensor_parallel, 1)
    return int(n * (2 * h + 2 * h + 4 * h + e * (1 + 4)))


# the 16-bit logits beside their fp32 copy in the vocab-parallel cross entropy (`megatron_head_per_token`)
MEGATRON_LOGITS_16BIT_BYTES = 2
# the fp32 copy of the softmax the compiled fused cross-entropy's backward makes (`megatron_head_per_token`)
MEGATRON_FUSED_CE_GRAD_COPY_BYTES = 4


def megatron_head_per_token(rp: ResolvedPlan) -> float:
    """The output layer and the loss on the last rank at the step's peak: the final norm's and the output
    projection's inputs and the fp32 logits, 4sbh/t·(1 + V/h) (Korthikanti et al. §4.4; theoretical_memory_usage with
    PP = 1), and beside the fp32 logits a 16-bit tensor of the same shape. The vocab-parallel cross entropy
    casts the output layer's 16-bit logits to fp32 (megatron/core/tensor_parallel/cross_entropy.py at Megatron-LM
    4a47b160 `calculate_logits_max`: `vocab_parallel_logits.float()`) and saves the fp32 softmax for backward, while
    the GPT model's forward still holds the 16-bit logits it passed in (megatron/core/models/gpt/gpt_model.py
    `_postprocess`: `logits, _ = self.output_layer(...)`, then `compute_language_model_loss(labels, logits)`); in
    backward the gradient is made in place in the fp32 softmax and cast to 16 bits for the output layer while the
    softmax is alive (without `--cross-entropy-loss-fusion` autograd casts the fp32 gradient to the logits' dtype).
    So 6 bytes per logit at the loss, in forward and in backward.

    With `--cross-entropy-loss-fusion` (its native implementation, Megatron-SWIFT's default from 4.0) the backward
    is `calculate_gradients` of megatron-core core_v0.15.0 megatron/core/fusions/fused_cross_entropy.py, compiled
    (megatron/core/jit.py: `jit_fuser = torch.compile` from torch 2.2): its `grad_2d[arange_1d, masked_target_1d]
    -= softmax_update` on the saved softmax is traced as the functional `aten.index_put` (torch 2.14 Inductor's
    post-grad graph), which Inductor lowers into a new fp32 buffer of the logits' shape, written back into the
    softmax after `mul_` and `grad_input.to(torch.bfloat16)`: the softmax, that copy and the 16-bit gradient are
    alive together, 10 bytes per logit in backward."""
    if rp.scalar_head:
        return 0.0
    tp = max(rp.tensor_parallel, 1)
    sp = tp if rp.sequence_parallel else 1
    if rp.verl_fused_head:
        # verl's fused forward (v0.5.0 and later verl/models/mcore/model_forward_fused.py): the final norm's input,
        # then the hidden states gathered from the sequence-parallel region (saved by its Triton head) instead of the
        # output layer and the cross entropy; what the head itself holds is `logits.verl_triton_head_bytes`
        return 2 * rp.arch.hidden / sp + 2 * rp.arch.hidden
    per_logit = 4 + MEGATRON_LOGITS_16BIT_BYTES
    if rp.cross_entropy_fusion:
        per_logit += MEGATRON_FUSED_CE_GRAD_COPY_BYTES
    return 4 * rp.arch.hidden / sp + per_logit * rp.arch.vocab / tp


def megatron_precision_aware_state_bytes(rp: ResolvedPlan) -> int:
    """Bytes per trained parameter of Transformer Engine's FusedAdam under `--use-precision-aware-optimizer`: Adam's
    two states in `--exp-avg-dtype` / `--exp-avg-sq-dtype` and the master weights in `--main-params-dtype`, fp32 ones
    of bf16 parameters kept as their 16-bit remainders (`store_param_remainders`, Megatron-LM d98e8a64dd
    megatron/core/optimizer/optimizer_config.py, default True and applied from Transformer Engine 2.1:
    transformer_engine/pytorch/optimizers/fused_adam.py "store the trailing 16 remainder bits"); no master weights
    for fp32 parameters."""
    wb = DTYPE_BYTES[rp.weight_dtype]
    master = 0
    if wb < 4:
        master = DTYPE_BYTES[rp.main_params_dtype]
        if megatron_te_master_weights(rp) and rp.main_params_dtype == "fp32" and rp.weight_dtype == "bf16":
            master = 2
    return DTYPE_BYTES[rp.exp_avg_dtype] + DTYPE_BYTES[rp.exp_avg_sq_dtype] + master


def megatron_te_master_weights(rp: ResolvedPlan) -> bool:
    """Whether Transformer Engine's FusedAdam keeps the master weights and reads the gradients in place: not for an FP8
    run of a recipe other than delayed scaling with fp32 master weights on the GPU, where Megatron keeps its own fp32
    main parameters and copies the gradients (optimizer_config.py `use_precision_aware_optimizer_no_fp8_or_ds_fp8`)."""
    return rp.main_params_dtype != "fp32" or rp.fp8_recipe in ("", "delayed") or rp.offload_optimizer


def megatron_grad_copy_bytes(rp: ResolvedPlan, st: Stage) -> int:
    """The fp32 copy of 16-bit gradient buffers the optimizer steps on: the distributed optimizer gives each
    main-parameter shard `shard_model_grad.float()`, the rank's 1/DP of the dense gradients and 1/expert-DP of the
    experts', and the non-distributed one every main parameter `model_param.main_grad.float()` (Megatron-LM
    d98e8a64dd megatron/core/optimizer/distrib_optimizer.py and optimizer.py `_copy_model_grads_to_main_grads`); both
    live until the next step's `optimizer.zero_grad()` (megatron/training/training.py `train_step`), so from the
    optimizer step to the next forward. `.float()` of fp32 buffers is the buffer itself: nothing."""
    if rp.grad_buffer_dtype == "fp32" or DTYPE_BYTES[rp.weight_dtype] >= 4 or (rp.peft != "none" and rp.adapter_fp32):
        return 0
    if rp.precision_aware_optimizer and megatron_te_master_weights(rp):
        return 0  # `use_decoupled_grad`: the optimizer reads the 16-bit buffer shards in place
    dense, experts = megatron_trained_params(rp, st)
    dp, edp = megatron_dp(rp) if rp.distributed_optimizer else (1, 1)
    return int(4 * (dense / dp + experts / edp))


def megatron_step(rp: ResolvedPlan) -> dict[str, dict[str, int]]:
    """The phases of one Megatron-core step on its busiest pipeline rank, by component. Gradient buffers and
    optimizer state are resident through the step, so the forward-backward is the peak; the optimizer step (fused
    Adam, in place) adds the fp32 copy of 16-bit gradient buffers (`megatron_grad_copy_bytes`)."""
    best: dict[str, dict[str, int]] | None = None
    for st in stages(rp):
        w, g, o = megatron_state_bytes(rp, st)
        acts, a2a = megatron_activations(rp, st)
        tokens = rp.micro_batch * rp.sequences_per_example * (rp.seq_len // max(rp.context_parallel, 1))
        logits = int(tokens * megatron_head_per_token(rp)) if st.head else 0
        if st.head and rp.verl_fused_head:
            logits += verl_triton_head_bytes(rp, tokens, -(-rp.arch.vocab // max(rp.tensor_parallel, 1)))
        ref = megatron_reference_bytes(rp, st)
        fb = {
            "weights": w,
            "gradients": g,
            "optimizer": o,
            "reference": ref,
            "activations": acts,
            "logits": logits,
            "temporaries": a2a,
        }
        if best is None or sum(fb.values()) > sum(best["forward-backward"].values()):
            best = {
                "forward-backward": fb,
                "optimizer-step": {
                    "weights": w,
                    "gradients": g + megatron_grad_copy_bytes(rp, st),
                    "optimizer": o,
                    "reference": ref,
                    "activations": 0,
                    "logits": 0,
                    "temporaries": 0,
                },
            }
    assert best is not None  # `stages` returns one stage at least
    return best
