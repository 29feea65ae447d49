"""Quantization-aware training: what torchao's fake-quantized linears keep for the backward, per block
(knowledge/qat.py `SAVED`, measured from torchao itself)."""

from __future__ import annotations

from vramlens.estimate.components.common import (
    ATTN_LINEARS,
    MLP_LINEARS,
    has_linear,
    linear_in_features,
    linear_out_features,
)
from vramlens.knowledge import qat
from vramlens.resolved import ResolvedPlan

# the linears of a block that read one input: q, k and v the attention's, gate and up (or fc1) the MLP's
_SHARED_INPUT = (("q", "k", "v"), ("o",), ("gate", "up", "fc1"), ("down", "fc2"))


def qat_block_bytes(rp: ResolvedPlan, tokens: int) -> int:
    """Bytes one block's fake-quantized linears keep for its backward beyond a plain block's, for `tokens` tokens:
    each linear's rounded weight (and, for a trained weight, the rounding's fp32 intermediates and per-group
    scales), and with an activation layout its rounded input in place of the 16-bit input the plain linears kept
    (q, k and v keep one copy each where the plain linears shared one). The weights of an adapter's base are frozen:
    only the rounded copy the input's gradient needs. Routed experts are not nn.Linear modules under transformers 5
    (fused 3-D parameters) and are not swapped; a MoE block counts its attention linears."""
    if not rp.qat:
        return 0
    saved = qat.SAVED[rp.qat]
    arch = rp.arch
    tp = max(rp.tensor_parallel, 1)
    frozen = rp.peft != "none"
    names = [n for n in ATTN_LINEARS + (() if arch.num_experts else MLP_LINEARS) if has_linear(arch, n)]
    per_weight = (
        saved.weight_frozen if frozen else saved.weight + (saved.per_group / rp.qat_group if rp.qat_group else 0)
    )
    weights = sum(linear_in_features(arch, n) * linear_out_features(arch, n) for n in names) * per_weight / tp
    plain = 0.0 if frozen else qat.PLAIN_INPUT_BYTES
    per_input = saved.input_frozen if frozen else saved.input
    inputs = 0.0
    for group in _SHARED_INPUT:
        present = [n for n in group if n in names]
        if present and per_input:
            width = linear_in_features(arch, present[0])
            inputs += width * (per_input * len(present) - plain) + saved.per_token * len(present)
    return int(weights + tokens * max(inputs, 0.0))
