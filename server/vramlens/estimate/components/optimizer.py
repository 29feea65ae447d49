"""Optimizer state and the optimizer step's temporaries, low-rank projections (GaLore, APOLLO, Q-GaLore) included."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.components.sharding import shard_factor
from vramlens.estimate.shapes import targeted
from vramlens.resolved import ResolvedPlan

if TYPE_CHECKING:  # `parameters` counts Q-GaLore's INT8 weights from here
    from vramlens.estimate.components.parameters import Params


def optimizer_state(rp: ResolvedPlan, p: Params) -> int:
    """Optimizer state per trainable parameter (knowledge/optimizers: states × bytes, None = param dtype:
    `_init_group` in torch/optim/adam.py). DeepSpeed mixed precision keeps fp32 master weights + fp32 states
    (DS: 12 B/param; ZeRO, arXiv:1910.02054 §3.1)."""
    if rp.offload_optimizer:
        return 0
    opt = rp.optimizer
    state_b = opt.state_bytes if opt.state_bytes is not None else p.trainable_dtype_bytes
    per_param = opt.states * state_b
    if rp.master_weights:
        per_param = 4 + opt.states * (opt.state_bytes if opt.state_bytes is not None else 4)
    if opt.paged:
        pass  # same size; lives in CUDA unified memory outside the allocator
    if opt.low_rank and rp.peft == "none":
        return int(low_rank_state(rp, p, per_param, state_b) * shard_factor(rp, "optimizer"))
    if opt.state_bytes is None and not rp.master_weights:
        # states in each parameter's own dtype: fp32 adapters beside 16-bit modules_to_save copies
        return int(opt.states * p.trainable_bytes * shard_factor(rp, "optimizer"))
    return int(p.trainable * per_param * shard_factor(rp, "optimizer"))


def low_rank_state(rp: ResolvedPlan, p: Params, per_param: float, state_b: float) -> float:
    """GaLore (Zhao et al. 2024, arXiv:2403.03507 §4; galore_torch/galore_projector.py `GaLoreProjector.project`):
    the gradient of a targeted m×n matrix is projected onto rank r on its shorter side, so the optimizer's states
    hold r·max(m, n) elements each, plus the projection matrix r·min(m, n); every other trainable parameter
    (embeddings, norms, LM head, untargeted linears) keeps full states. APOLLO's states are projected the same way
    (arXiv:2412.05270). Targets default to every linear of the blocks (LLaMA-Factory `galore_target: all`)."""
    if rp.low_rank <= 0:
        return p.trainable * per_param * 0.25  # rank unknown: a quarter of the full states
    r = rp.low_rank
    proj_b = low_rank_projection_bytes(rp, p)
    projected = full_covered = 0
    for lin in low_rank_linears(rp):
        long_side, short_side = max(lin.in_features, lin.out_features), min(lin.in_features, lin.out_features)
        rank = min(r, short_side)
        projected += lin.count * (rp.optimizer.states * rank * long_side * state_b + rank * short_side * proj_b)
        full_covered += lin.count * lin.in_features * lin.out_features
    return projected + max(p.trainable - full_covered, 0) * per_param


def low_rank_linears(rp: ResolvedPlan) -> list:
    """The block linears whose optimizer states GaLore/APOLLO project (none in a partial run, whose states keep the
    conservative full count)."""
    if rp.trained_layers is not None or not rp.optimizer.low_rank or rp.peft != "none":
        return []
    return list(targeted(rp.arch, rp.low_rank_targets or ("all-linear",)))


# Q-GaLore (VITA-Group/Q-GaLore 5bd2f1c5 q_galore_torch/q_galore_projector.py `_quantize`, utils/quantization.py
# `_quantize_tensor_int8`): quantized values are stored one per uint8 element, with a scale and a zero point in the
# tensor's 16-bit dtype per group of 256 elements (`proj_group_size`, `weight_group_size` default 256)
QGALORE_GROUP = 256


def low_rank_projection_bytes(rp: ResolvedPlan, p: Params) -> float:
    """Bytes per element of a GaLore projection matrix: the gradient's dtype (galore_torch galore_projector.py
    `get_orthogonal_matrix` casts the fp32 SVD factor back to it), or Q-GaLore's quantized projection (a uint8 per
    element, INT4 values by default, plus the group's 16-bit scale and zero point)."""
    grad_b = DTYPE_BYTES[rp.compute_dtype] if rp.low_rank_int8_weights else p.trainable_dtype_bytes
    if rp.low_rank_proj_quant:
        return 1 + 2 * grad_b / QGALORE_GROUP
    return grad_b


def low_rank_int8_params(rp: ResolvedPlan) -> int:
    """Q-GaLore's INT8 weights (VITA-Group/Q-GaLore 5bd2f1c5 utils/quantization.py `prepare_model_for_int8_training`:
    every q/k/v/o/gate/up/down linear becomes a `QGaLoreLinear` with a uint8 weight, updated by stochastic rounding
    in q_galore_adamw8bit.py): the parameters held that way."""
    if not rp.low_rank_int8_weights:
        return 0
    return sum(lin.params for lin in low_rank_linears(rp))


def low_rank_svd_transient(rp: ResolvedPlan, p: Params) -> int:
    """The projection update of the largest targeted m×n gradient (every `update_proj_gap` steps, the first one
    included): galore_torch galore_projector.py `get_orthogonal_matrix` (ms-swift v4.5.2
    swift/optimizers/galore/galore_projector.py, Q-GaLore's the same) copies the gradient to fp32 and runs
    `torch.linalg.svd(matrix, full_matrices=False)`; torch's cuSOLVER drivers work on a column-major clone of their
    input (pytorch v2.5 aten/src/ATen/native/cuda/linalg/BatchLinearAlgebraLib.cpp `apply_svd_lib_gesvdj`:
    `cloneBatchedColumnMajor`) and return U (m×k), S and Vh (k×n) in fp32, k = min(m, n). cuSOLVER's own workspace
    is left out."""
    grad_b = DTYPE_BYTES[rp.compute_dtype] if rp.low_rank_int8_weights else p.trainable_dtype_bytes
    worst = 0
    for lin in low_rank_linears(rp):
        m, n = lin.out_features, lin.in_features
        k = min(m, n)
        copies = 1 if grad_b == 4 else 2  # an fp32 gradient is decomposed as it is
        worst = max(worst, 4 * (copies * m * n + m * k + k * n + k))
    return worst


def optimizer_temporaries(rp: ResolvedPlan, p: Params) -> int:
    """Transient memory inside `optimizer.step()`: foreach AdamW makes one state-sized temporary
    (`_foreach_sqrt(exp_avg_sq)` in torch/optim/adam.py; traced 8B pure bf16 foreach 74.79 GiB = W+G+O+14.96,
    docs/memory-model.md); fused ≈ 0;
    for-loop ≈ 2 × the largest parameter; 8-bit and offloaded optimizers work in place."""
    opt = rp.optimizer
    if rp.offload_optimizer or opt.library in ("bitsandbytes", "torchao") or opt.family in ("lomo",):
        return 0
    if opt.low_rank:
        # galore_torch's optimizers step one parameter at a time (project, update, project back) whatever the
        # implementation asked for: a for-loop step, and now and then the projection's SVD of the largest gradient
        return max(2 * p.largest_param_bytes, low_rank_svd_transient(rp, p))
    if rp.optimizer_impl == "fused":
        return 0
    if rp.optimizer_impl == "forloop":
        return 2 * p.largest_param_bytes
    state_b = opt.state_bytes if opt.state_bytes is not None else p.trainable_dtype_bytes
    if opt.states == 0:
        return 0
    return int(p.trainable * state_b * shard_factor(rp, "optimizer"))
