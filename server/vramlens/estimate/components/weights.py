"""Resident weights on a rank and the buffers the modelling code registers beside them."""

from __future__ import annotations

from vramlens.estimate.components.parameters import Params
from vramlens.estimate.components.sharding import shard_factor
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.resolved import ResolvedPlan


def weights(rp: ResolvedPlan, p: Params) -> int:
    """Resident weights on this rank: frozen + quantized + trainable, sharded under ZeRO-3/FSDP FULL_SHARD,
    gone to the CPU with parameter offload (the working set is counted in `buffers`)."""
    if rp.offload_params:
        return 0
    return int((p.frozen_bytes + p.quantized_bytes + p.trainable_bytes) * shard_factor(rp, "weights")) + model_buffers(
        rp
    )


def model_buffers(rp: ResolvedPlan) -> int:
    """Buffers the modelling code registers beside the weights, on every rank: GPT-BigCode's causal mask, a
    max_positions × max_positions bool tensor (transformers 5.24 models/gpt_bigcode/modeling_gpt_bigcode.py
    GPTBigCodeModel `self.bias = nn.Buffer(torch.tril(torch.ones((max_positions, max_positions),
    dtype=torch.bool)), persistent=False)`; 64 MiB at StarCoder's 8192 positions)."""
    if rp.arch.family == "gpt_bigcode" and rp.framework in HF_MODEL_FRAMEWORKS and rp.arch.max_position:
        return rp.arch.max_position**2
    if rp.framework == "torchtune" and rp.arch.block == "decoder" and rp.arch.max_position:
        return rp.rope_caches * torchtune_rope_cache_bytes(rp.arch)
    return 0


# torchtune 0.6.1 RoPE modules whose cache holds cos and sin over the whole head dimension (models/qwen2
# `Qwen2RotaryPositionalEmbeddings`, models/phi3 `Phi3RotaryPositionalEmbeddings`: [max_seq_len, 2 × head_dim]); the
# others (modules/position_embeddings.py `RotaryPositionalEmbeddings`, llama3_1 `Llama3ScaledRoPE`) over half of it,
# [max_seq_len, head_dim / 2, 2]
TORCHTUNE_FULL_WIDTH_ROPE = frozenset({"qwen2", "phi3"})


def torchtune_rope_cache_bytes(arch) -> int:
    """One torchtune RoPE module's fp32 cache (and its fp32 frequencies) for the model's max_position."""
    head_dim = arch.head_dim or arch.hidden // arch.heads
    width = 2 * head_dim if arch.family in TORCHTUNE_FULL_WIDTH_ROPE else head_dim
    return 4 * (arch.max_position * width + head_dim // 2)
