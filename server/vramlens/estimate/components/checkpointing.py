"""Activation checkpointing: what the blocks keep when every block, every n-th block or some ops are recomputed."""

from __future__ import annotations

from vramlens.estimate.components.activations import activations_per_token
from vramlens.estimate.components.common import (
    DTYPE_BYTES,
    HF_C_ATTN_FAMILIES,
    HF_ONE_QKV_LINEAR,
    HF_ROPE_QKV,
    fp32_residual,
)
from vramlens.estimate.components.gemma3n import block_input_per_token as gemma3n_block_input
from vramlens.estimate.components.gemma3n import gemma3n
from vramlens.estimate.components.gemma3n import held_while_recomputing as gemma3n_held
from vramlens.estimate.components.trained import counted_layers
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.resolved import ResolvedPlan


def block_input_per_token(rp: ResolvedPlan) -> float:
    """What a checkpointed block keeps of its input on this rank: 2h (4h in an fp32 residual stream, which FSDP's
    MixedPrecision never has: it gathers the parameters in the compute dtype and casts the forward's inputs to it,
    torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_api.py `MixedPrecisionPolicy.param_dtype`,
    `cast_forward_inputs`), divided over the tensor-parallel ranks under sequence parallelism (the block's input is
    sharded along the sequence: torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py `apply_tp`,
    `SequenceParallel()` on the norms and `output_layouts=Shard(1)` on wo and w2; Korthikanti et al. 2022 §4.2.2)."""
    if gemma3n(rp):
        return gemma3n_block_input(rp)  # the AltUp copies of the hidden state
    fp32 = rp.compute_dtype == "fp32" or (fp32_residual(rp) and not rp.fsdp_mixed_precision)
    sp = max(rp.tensor_parallel, 1) if rp.sequence_parallel else 1
    return (4 if fp32 else 2) * rp.arch.hidden / sp


def checkpoint_per_token(rp: ResolvedPlan) -> float:
    """With gradient checkpointing of every block, each keeps only its input (`block_input_per_token`)."""
    layers = rp.arch.layers + (rp.arch.encoder_layers if rp.arch.block == "encoder-decoder" else 0)
    return layers * block_input_per_token(rp)


def recomputes(rp: ResolvedPlan) -> bool:
    """Whether backward recomputes blocks: whole-block checkpointing (of every block or every n-th) or op-level
    selective checkpointing, which wraps every block in a checkpoint that keeps only some ops' outputs. Every n-th
    block with n above the block count checkpoints none."""
    return (rp.grad_checkpointing and checkpointed_blocks(rp) > 0) or rp.selective_recompute == "op"


def checkpointed_blocks(rp: ResolvedPlan) -> int:
    """How many blocks are wrapped in a whole-block checkpoint: all of them, or under `checkpoint_every` n the
    n-th, 2n-th, … (torchtitan v0.2.2 torchtitan/distributed/activation_checkpoint.py `_apply_layer_sac`: a
    running count of the blocks, checkpointed where `count % ac_freq == 0`), so ⌊L / n⌋ of L."""
    layers = counted_layers(rp)
    if not rp.grad_checkpointing:
        return 0
    return layers // max(rp.checkpoint_every, 1)


# The ops whose outputs torchtitan's op-level selective checkpointing saves (torchtitan v0.2.2, commit 73a0e697,
# torchtitan/models/llama3/infra/parallelize.py `_op_sac_save_list`): aten.mm, the SDPA kernels (flash, efficient,
# cuDNN, math, fused-overrideable), flex attention, varlen attention, _c10d_functional.reduce_scatter_tensor,
# aten.max (no outputs in a 16-bit run) and compiled regions. Its policy (torchtitan/distributed/
# activation_checkpoint.py `_apply_op_sac`, `_custom_policy`) saves every listed op's output except every second
# mm: a block's mms are counted in forward order and the 2nd, 4th, … are recomputed. Everything else (norms,
# RoPE, activation functions, products, casts, all-gathers) is recomputed from those and the block's input.
def op_saved_mms(rp: ResolvedPlan) -> list[tuple[str, int, bool]]:
    """One block's matmuls in forward order as (name, output width, row-parallel): q, k, v (one q|k|v linear where
    the model fuses them), o, then the MLP's gate, up, down (fc1, fc2 ungated). torchtitan's FeedForward computes
    `w2(F.silu(w1(x)) * w3(x))`: w1 (gate), then w3 (up), then w2 (down) (torchtitan v0.2.2
    torchtitan/models/llama3/model/model.py). A mixture-of-experts block contributes its router's matmul and its
    shared experts'; the routed experts run `_grouped_mm`, which is not in the save list."""
    arch = rp.arch
    q, kv, h = arch.q_dim, arch.kv_dim, arch.hidden
    fused = rp.fused_qkv or (
        rp.framework in HF_MODEL_FRAMEWORKS and arch.family in (HF_ROPE_QKV | HF_C_ATTN_FAMILIES | HF_ONE_QKV_LINEAR)
    )
    mms = [("qkv", q + 2 * kv, False)] if fused else [("q", q, False), ("k", kv, False), ("v", kv, False)]
    mms.append(("o", h, True))
    gated = arch.mlp in ("swiglu", "geglu")
    if arch.is_moe:
        mms.append(("router", arch.num_experts, False))
        inter = (arch.shared_expert_intermediate or arch.moe_intermediate or arch.intermediate) * arch.shared_experts
        if not inter:
            return mms
    else:
        inter = arch.intermediate
    mms += [("gate", inter, False), ("up", inter, False)] if gated else [("fc1", inter, False)]
    mms.append(("down", h, True))
    return mms


def op_saved_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token one block keeps under op-level selective checkpointing, on this rank: the block's input (kept
    by the checkpoint), the outputs of its odd-numbered matmuls (`op_saved_mms`), the attention kernel's outputs
    (its output and fp32 logsumexp: `_scaled_dot_product_flash_attention` returns both; eager attention runs bmm and
    softmax, neither listed), and under sequence parallelism the reduce-scatter outputs after o and down.
    Column-parallel outputs are a tensor-parallel shard each; a row-parallel matmul's output is its rank's partial
    sum over the whole hidden width, before the reduce-scatter."""
    arch = rp.arch
    c = DTYPE_BYTES[rp.compute_dtype]
    tp = max(rp.tensor_parallel, 1)
    out = block_input_per_token(rp)
    for n, (_, width, row) in enumerate(op_saved_mms(rp), start=1):
        if n % 2 == 1:
            out += c * width / (1 if row else tp)
        if row and tp > 1 and rp.sequence_parallel:
            out += c * width / tp
    if rp.attn_impl != "eager":
        out += (c * arch.q_dim + 4 * arch.heads) / tp
    return out


def saved_per_token(rp: ResolvedPlan) -> tuple[float, float, float]:
    """What the blocks keep for backward per token under the plan's checkpointing, on this rank, as (every block at
    the end of the forward, while the highest recomputed block is recomputed, while the lowest one is). The two
    recompute figures leave out what the block being recomputed keeps beyond its input: its recompute
    (`backward_block_per_token`) counts it. Every block checkpointed: L inputs, L and 1 while recomputing. Every n-th
    (`checkpointed_blocks`): those keep their input, the others everything (`activations_per_token`); the blocks
    above the highest checkpointed one have run their backward before it is recomputed, and below the lowest one
    (the n-th) n − 1 blocks still hold everything. Op-level (`op_saved_per_token`): every block keeps its saved ops."""
    layers = counted_layers(rp)
    inp = block_input_per_token(rp)
    if rp.selective_recompute == "op" and not rp.grad_checkpointing:
        one = op_saved_per_token(rp)
        return layers * one, layers * one - one + inp, inp
    if not rp.grad_checkpointing:
        total = activations_per_token(rp)[0]
        return total, total, total
    k = checkpointed_blocks(rp)
    if k == layers:
        total = layers * inp
        if gemma3n(rp):
            # what the model holds outside the blocks while they are recomputed (`gemma3n.held_while_recomputing`)
            return total, total + gemma3n_held(rp, lowest=False), inp + gemma3n_held(rp, lowest=True)
        return total, total, inp
    _, one_layer = activations_per_token(rp)
    n = max(rp.checkpoint_every, 1)
    total = k * inp + (layers - k) * one_layer
    above = layers - k * n
    return total, total - above * one_layer, (n - 1) * one_layer + inp


def layers_keeping_everything(rp: ResolvedPlan) -> int:
    """Blocks that keep all their activations (no checkpoint around them)."""
    if rp.selective_recompute == "op" and not rp.grad_checkpointing:
        return 0
    return counted_layers(rp) - checkpointed_blocks(rp) if rp.grad_checkpointing else counted_layers(rp)


def fsdp_kept_block_grads(rp: ResolvedPlan, saved: int) -> int:
    """Bytes FSDP1 keeps beyond the checkpoints when it holds every block's checkpointed input and that input's
    gradient until the backward ends (`rp.fsdp_keeps_block_grads`; knowledge/versions.py `fsdp1_keeps_block_grads`).
    At the first block's backward all L checkpoints are held with L − 1 input gradients, one of which is the gradient
    flowing in that any backward holds: L − 2 block-input-sized tensors more (measured on CPU: FSDP1 over LoRA layers
    under transformers 4.45.2 with reentrant checkpointing, 4 and 8 layers)."""
    if not (rp.fsdp_keeps_block_grads and rp.grad_checkpointing and saved):
        return 0
    n = counted_layers(rp)
    return int(saved * max(n - 2, 0) / n)
