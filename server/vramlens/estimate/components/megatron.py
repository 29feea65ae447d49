"""Megatron-core layouts: pipeline stages, expert parallelism, the distributed optimizer, and one step's phases on
the busiest rank.

Megatron-LM 00caa53a megatron/training/theoretical_memory_usage.py (`compute_weight_and_optimizer_memory`,
`compute_activation_memory`, `compute_activation_memory_without_sp`) and Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models" (arXiv:2205.05198, Table 2 and §4-5), generalised to grouped
K/V, gated MLPs and routed experts; tests/estimate/test_megatron_layouts.py re-implements that file and checks the
two agree on the layouts it covers."""

from __future__ import annotations

import math

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.components.experts import expert_parameters, lora_linears
from vramlens.estimate.components.parameters import params
from vramlens.estimate.components.pipeline import Stage, stages
from vramlens.estimate.shapes import shapes
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
    optimizer's bytes on the GPU."""
    tp = max(rp.tensor_parallel, 1)
    dense = st.dense_params / tp
    experts = st.expert_params / (expert_tp(rp) * max(rp.expert_parallel, 1))
    wb = DTYPE_BYTES[rp.weight_dtype]
    weights = (dense + experts) * wb
    opt = rp.optimizer
    per_state = 4 * opt.states + (4 if wb < 4 else 0)  # fp32 states (+ the fp32 main weights)
    if rp.offload_optimizer:
        # the hybrid optimizer's CPU copies: its offload fraction of the rank's optimizer parameters
        per_state *= 1.0 - min(max(rp.optimizer_offload_fraction, 0.0), 1.0)
    dp, edp = megatron_dp(rp) if rp.distributed_optimizer else (1, 1)
    if rp.peft != "none":
        s = shapes(rp.arch)
        expert_total = sum(l.params for l in s.linears if l.expert)
        dense_adapters, expert_adapters = megatron_adapter_params(rp)
        # each kind of adapter in the share of its kind of weights this rank holds
        trained_dense = dense_adapters * dense / max(s.total - expert_total, 1)
        trained_experts = expert_adapters * experts / max(expert_total, 1)
        trained = trained_dense + trained_experts
        weights += trained * (4 if rp.adapter_fp32 else wb)
        return int(weights), int(trained * 4), int(trained_dense * per_state / dp + trained_experts * per_state / edp)
    grads = (dense + experts) * 4
    return int(weights), int(grads), int(dense * per_state / dp + experts * per_state / edp)


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
    if targets & {"all-linear", "gate", "up"}:
        per_expert += rp.lora_r * (arch.hidden + fc1_out)
    if targets & {"all-linear", "down"}:
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
    dense = st.dense_params / max(rp.tensor_parallel, 1)
    experts = st.expert_params / (expert_tp(rp) * max(rp.expert_parallel, 1))
    return int((dense + experts) * DTYPE_BYTES[rp.reference_dtype or rp.weight_dtype])


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
    if rp.selective_recompute == "core_attention":
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
    unpermuted output (2h each) with the experts' first projection and activation, and the router's fp32 logits."""
    arch = rp.arch
    h = arch.hidden
    replicated = 4 * h + 2 * h + 2 * h + 2 * h
    attention = (
        2 * arch.q_dim + 2 * arch.kv_dim + 2 * arch.kv_dim + 2 * arch.q_dim + megatron_core_attention_per_token(rp)
    )
    gated = arch.mlp in ("swiglu", "geglu")

    def inner(width: int) -> float:
        return (6 if gated else 4) * width

    if not moe:
        return attention + inner(arch.intermediate), replicated
    f = arch.moe_intermediate or arch.intermediate
    k = max(arch.experts_per_token, 1)
    # Routed tokens start from the rank's sequence-parallel shard: the all-to-all dispatcher sends them over EP and
    # gathers them over the expert-TP group before the grouped experts (megatron-core core_r0.13.0
    # megatron/core/transformer/moe/token_dispatcher.py `MoEAlltoAllTokenDispatcher.token_dispatch`:
    # `gather_from_sequence_parallel_region(..., group=self.tp_group)` of the expert-TP group), so a rank's experts
    # see ETP × its shard's rows: their fc1 input (2h, kept by the grouped linear for its weight gradient) at that
    # count, their first projection and activation split over ETP, and the unpermuted output (2h, kept by the
    # probability weighting) at the shard's count. Counted in the "divided by SP" part.
    routed = k * (2 * h * expert_tp(rp) + inner(f) + 2 * h)
    shared = arch.shared_experts * inner(arch.shared_expert_intermediate or f)
    return attention + shared, replicated + 4 * arch.num_experts + routed


def megatron_activations(rp: ResolvedPlan, st: Stage) -> tuple[int, int]:
    """(activations held, MoE all-to-all buffers) on a pipeline rank at its peak: every micro-batch in flight keeps
    the saved activations of the rank's layers (full recompute: their checkpointed inputs, plus one group recomputed
    in the backward), the first rank also its embedding's input ids and dropout mask. Tokens per micro-batch are
    divided by context parallelism."""
    tp = max(rp.tensor_parallel, 1)
    sp = tp if rp.sequence_parallel else 1
    h = rp.arch.hidden
    tokens = rp.micro_batch * rp.sequences_per_example * (rp.seq_len // max(rp.context_parallel, 1))
    moe_layers = min(st.layers, max(rp.arch.layers - rp.arch.dense_layers, 0)) if rp.arch.num_experts else 0
    split_d, repl_d = megatron_layer_per_token(rp, moe=False)
    split_m, repl_m = megatron_layer_per_token(rp, moe=True) if moe_layers else (0.0, 0.0)
    dense_layer = split_d / tp + repl_d / sp
    moe_layer = split_m / tp + repl_m / sp
    full = (st.layers - moe_layers) * dense_layer + moe_layers * moe_layer
    biggest = max(dense_layer, moe_layer)
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
    # selective recompute: one layer's core attention rebuilt in backward (megatron_core_attention_per_token)
    working = max(working, megatron_core_attention_per_token(rp, recomputed=True) / tp)
    if st.embedding:
        per_mb += (MEGATRON_EMBED_INPUT_BYTES + h) / sp
    a2a = 0
    if moe_layers:
        # the token dispatcher's all-to-all: a micro-batch's chosen-expert tokens sent and received for one layer
        # (megatron/core/transformer/moe/token_dispatcher.py `MoEAlltoAllTokenDispatcher`), from the rank's
        # sequence-parallel shard: MoE training with TP > 1 requires sequence parallelism (Megatron-LM d98e8a64
        # megatron/core/transformer/moe/moe_layer.py `forward` raises without it)
        a2a = int(2 * max(rp.arch.experts_per_token, 1) * 2 * h * tokens / tp)
    return int(tokens * (per_mb * st.in_flight + working)), a2a


# the 16-bit logits beside their fp32 copy in the vocab-parallel cross entropy (`megatron_head_per_token`)
MEGATRON_LOGITS_16BIT_BYTES = 2


def megatron_head_per_token(rp: ResolvedPlan) -> float:
    """The output layer and the loss on the last rank at the step's peak: the final norm's and the output
    projection's inputs and the fp32 logits, 4sbh/t·(1 + V/h) (Korthikanti et al. §4.4; theoretical_memory_usage with
    PP = 1), and beside the fp32 logits a 16-bit tensor of the same shape. The vocab-parallel cross entropy
    casts the output layer's 16-bit logits to fp32 (megatron/core/tensor_parallel/cross_entropy.py at Megatron-LM
    4a47b160 `calculate_logits_max`: `vocab_parallel_logits.float()`) and saves the fp32 softmax for backward, while
    the GPT model's forward still holds the 16-bit logits it passed in (megatron/core/models/gpt/gpt_model.py
    `_postprocess`: `logits, _ = self.output_layer(...)`, then `compute_language_model_loss(labels, logits)`); in
    backward the gradient is made in place in the fp32 softmax and cast to 16 bits for the output layer while the
    softmax is alive (megatron/core/fusions/fused_cross_entropy.py `calculate_gradients`:
    `grad_input.to(torch.bfloat16)` with `--cross-entropy-loss-fusion`; without it autograd casts the fp32
    gradient to the logits' dtype). So 6 bytes per logit at the loss, in forward and in backward."""
    if rp.scalar_head:
        return 0.0
    tp = max(rp.tensor_parallel, 1)
    sp = tp if rp.sequence_parallel else 1
    return 4 * rp.arch.hidden / sp + (4 + MEGATRON_LOGITS_16BIT_BYTES) * rp.arch.vocab / tp


def megatron_step(rp: ResolvedPlan) -> dict[str, dict[str, int]]:
    """The phases of one Megatron-core step on its busiest pipeline rank, by component. Gradient buffers and
    optimizer state are resident through the step, so the forward-backward is the peak; the optimizer step (fused
    Adam, in place) adds nothing."""
    best: dict[str, dict[str, int]] | None = None
    for st in stages(rp):
        w, g, o = megatron_state_bytes(rp, st)
        acts, a2a = megatron_activations(rp, st)
        tokens = rp.micro_batch * rp.sequences_per_example * (rp.seq_len // max(rp.context_parallel, 1))
        logits = int(tokens * megatron_head_per_token(rp)) if st.head else 0
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
                    "gradients": g,
                    "optimizer": o,
                    "reference": ref,
                    "activations": 0,
                    "logits": 0,
                    "temporaries": 0,
                },
            }
    assert best is not None  # `stages` returns one stage at least
    return best
