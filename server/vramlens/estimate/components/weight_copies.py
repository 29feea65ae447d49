"""Copies of weights made during the step: dequantized 4-bit weights (torchao NF4, a bitsandbytes LM head) and
autocast's 16-bit copies of fp32 weights."""

from __future__ import annotations

from vramlens.estimate.components.common import DTYPE_BYTES, compiled_block, fp32_residual
from vramlens.estimate.components.norms import first_block_input_frozen, parallel_block
from vramlens.estimate.components.parameters import Params, head_quantized
from vramlens.estimate.components.sharding import fsdp_gathers_16bit
from vramlens.estimate.components.trained import weight_grad_share
from vramlens.estimate.shapes import shapes
from vramlens.resolved import ResolvedPlan

# torchao 0.15–0.17 dtypes/nf4tensor.py `NF4Tensor.get_original_weight`, which `linear_nf4` runs for every forward and
# backward of a torchtune QLoRA linear (`LinearNF4`: `weight.to(input.dtype)`): both 4-bit halves unpacked to int64
# (8 bytes per weight together), looked up to 16-bit, scaled and stacked, all alive until it returns: 14 bytes per
# weight at its peak, 2 kept (the 16-bit weight). Traced under fake tensors (tests/trace/test_torchtune_backend.py).
NF4_DEQUANT_PEAK_BYTES = 14


def nf4_dequant_transient(rp: ResolvedPlan) -> int:
    """The peak of torchao's eager NF4 dequantization of the largest block linear in a torchtune QLoRA step (0 for
    other steps, or when torchtune compiles the model)."""
    if not (rp.framework == "torchtune" and rp.quant_bits == 4) or rp.compile:
        return 0
    return int(NF4_DEQUANT_PEAK_BYTES * shapes(rp.arch).largest_linear / max(rp.tensor_parallel, 1))


def dequantized_head(rp: ResolvedPlan) -> int:
    """A quantized LM head is dequantized to the compute dtype on every call (bitsandbytes `matmul_4bit`:
    `dequantize_4bit(B)` then a 16-bit matmul); the copy exists while the head runs, in forward and again in
    its backward, when every saved activation and the logits are still held: V·h·2 bytes at the peak, twice
    that when the weight was quantized from fp16 (dequantized to fp16, then cast)."""
    if not head_quantized(rp):
        return 0
    per = DTYPE_BYTES[rp.compute_dtype if rp.compute_dtype != "fp32" else "bf16"]
    if rp.quant_dequant_fp16 and rp.compute_dtype != "fp16":
        per += 2  # quantized from fp16: dequantized to fp16, then cast (both alive in the cast)
    return shapes(rp.arch).lm_head_params * per


def autocast_weight_cache(rp: ResolvedPlan, p: Params) -> int:
    """16-bit copies of fp32 weights that autocast makes in forward and backward keeps.

    AMP over fp32 weights: every linear weight (traced: ~15 GiB of the 30.5 GiB AMP activations of an 8B
    model); inside checkpointed blocks the copies are rebuilt during recompute, but the LM head is outside them.
    A k-bit model under autocast: only the LM head is an fp32 nn.Linear (the quantized linears dequantize
    themselves) — its 16-bit copy (V·h·2 bytes) is kept by the frozen head's backward (trace rows 22–35)."""
    s = shapes(rp.arch)
    head = (s.lm_head_params or s.embed_params) * 2 if rp.arch.block != "encoder" else 0
    if fsdp_gathers_16bit(rp):
        return 0  # the weights reach autocast already in the compute dtype
    if rp.amp:
        blocks = 0 if rp.grad_checkpointing else s.linear_params * 2
        if first_block_input_frozen(rp):
            # the first block's linears that read its norm's output keep no copy (`first_block_input_frozen`)
            reads_norm = ("q", "k", "v") + (("gate", "up", "fc1") if parallel_block(rp.arch) else ())
            blocks -= (
                sum(lin.params for lin in s.linears if lin.name in reads_norm and not lin.expert)
                * 2
                // max(rp.arch.layers, 1)
            )
        return int(blocks + head)
    if fp32_residual(rp):
        # a head TRL cast back to bf16 (kbit_embeddings_16bit) needs no 16-bit copy
        return 0 if rp.kbit_embeddings_16bit else int(head)
    return 0


def autocast_forward_cache(rp: ResolvedPlan) -> int:
    """16-bit copies of the checkpointed blocks' fp32 linear weights that autocast's cache holds until the forward
    ends. Autocast caches every cast of a leaf weight that requires grad (`cached_cast`, aten/src/ATen/
    autocast_mode.cpp, torch 2.13) and clears the cache only when the outermost autocast context exits
    (`torch.clear_autocast_cache()` in `autocast.__exit__`, torch/amp/autocast_mode.py). The Trainer's autocast
    wraps the model's forward, and transformers computes the loss inside it (`ForCausalLMLoss`), so the copies are
    alive through the LM head and the loss even though checkpointed blocks save none of them for backward.
    Frozen weights (a PEFT base model, layers `trained_layers` leaves out) are cast afresh at each use and not
    cached; trainable adapters are, but they are small. Under FSDP's mixed precision nothing is cached
    (`fsdp_gathers_16bit`)."""
    if (
        not (rp.amp and rp.grad_checkpointing and rp.compute_dtype != "fp32")
        or compiled_block(rp)
        or fsdp_gathers_16bit(rp)
    ):
        return 0
    trained = sum(lin.params * weight_grad_share(rp, lin.name) for lin in shapes(rp.arch).linears)
    return int(trained * DTYPE_BYTES[rp.compute_dtype])


def recompute_weight_copies(rp: ResolvedPlan) -> int:
    """The 16-bit copies of one block's trainable weights while that block is recomputed and back-propagated under
    AMP: torch.utils.checkpoint re-enters autocast for the recompute (torch 2.13 torch/utils/checkpoint.py
    `_checkpoint_without_reentrant_generator`: `device_autocast_ctx`, with the cache setting of the forward), and
    the block's matmuls keep their casts for its backward."""
    return autocast_forward_cache(rp) // max(rp.arch.layers, 1)
