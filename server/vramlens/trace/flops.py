"""The traced step's work: FLOPs per op counted by torch's own `torch.utils.flop_counter.FlopCounterMode`, and the
bytes the ops without a FLOP formula read and write.

`FlopCounterMode` is a `TorchDispatchMode` that sees every aten op and applies the FLOP formula torch registers for
it (matmuls: `aten.mm`, `addmm`, `bmm`, `baddbmm`, `_scaled_mm`; convolutions; the SDPA, flash and memory-efficient
attention kernels and their backwards), from the shapes alone, so it counts fake tensors as it counts real ones
(torch 2.13 torch/utils/flop_counter.py; https://docs.pytorch.org/docs/stable/generated/torch.utils.flop_counter.html).
bitsandbytes' fused 4-bit matmul (a QLoRA base layer's forward) is counted here as the matmul it is.
Its conventions are kept as they are:
- a matmul of (n×k)·(k×m) is 2·n·k·m FLOPs (`mm_flop`); elementwise ops, norms, softmax and the loss count none;
- attention counts both products of the whole s×s score matrix, forward 2 bmm and backward 5 (the scores are
  recomputed, `sdpa_backward_flop_count`), causal or not ("We aren't accounting for causal attention here").
  A causal call to a kernel that skips the blocks above the diagonal does about half that work: the calls made
  with `is_causal` are also summed apart (`attention_causal`), for a time model to halve.
The trace runs on the fake CPU device, where SDPA takes `_scaled_dot_product_flash_attention_for_cpu`, which torch
does not register: it is counted here with torch's own SDPA formulas (`sdpa_flop_count`,
`sdpa_backward_flop_count`), as its CUDA counterparts are.

Each op is put in a phase by when it runs: `forward` (the forward and the loss), `backward`, `recompute` (forward
ops that run inside backward with grad mode on: activation checkpointing's recomputation, which runs the block's
forward under `torch.enable_grad()`, torch 2.13 torch/utils/checkpoint.py), `optimizer`; and in a family:
`matmul` (mm, addmm, _scaled_mm: the linears, LM head, adapters), `attention` (the attention kernels, and bmm /
baddbmm, which in the traced families are eager attention's scores and values) and `other` (convolutions, …).
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten

PHASES = ("forward", "backward", "recompute", "optimizer")
FAMILIES = ("matmul", "attention", "other")
# the engine's phases (trace.engine.PHASE_LABELS) → this module's
ENGINE_PHASES = {
    "fwd": "forward",
    "loss": "forward",
    "bwd-loss": "backward",
    "bwd": "backward",
    "opt": "optimizer",
    "zero": "optimizer",
    "end": "optimizer",
}
MATMUL = {aten.mm, aten.addmm, aten._scaled_mm}
BATCHED = {aten.bmm, aten.baddbmm}
CPU_FLASH = aten._scaled_dot_product_flash_attention_for_cpu
CPU_FLASH_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward
# ops whose output is a view or a copy of metadata: no bytes moved
NO_TRAFFIC = {
    aten.view,
    aten._unsafe_view,
    aten.t,
    aten.transpose,
    aten.permute,
    aten.expand,
    aten.unsqueeze,
    aten.squeeze,
    aten.slice,
    aten.select,
    aten.detach,
    aten.alias,
    aten.as_strided,
    aten.split,
    aten.split_with_sizes,
    aten.unbind,
    aten.chunk,
    aten.reshape,
    aten.empty,
    aten.empty_like,
    aten.empty_strided,
    aten.new_empty,
    aten.new_empty_strided,
    aten.lift_fresh,
    aten.narrow,
}


def _cpu_flash_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _gemm_4bit_flop(a_shape, *args, out_shape=None, **kwargs) -> int:
    """bitsandbytes' fused 4-bit matmul, `A @ dequantize(B).t()` (bitsandbytes 0.50 `torch.ops.bitsandbytes.gemm_4bit`,
    called by `MatMul4Bit.forward` in bitsandbytes/autograd/_functions.py): 2 FLOPs per multiply-add, as `mm_flop`."""
    m = 1
    for d in a_shape:
        m *= d
    return 2 * m * out_shape[-1]


def _bitsandbytes_gemm():
    """The fused 4-bit matmul op, when the installed bitsandbytes registers one (None otherwise)."""
    try:
        return torch.ops.bitsandbytes.gemm_4bit
    except (AttributeError, RuntimeError):
        return None


def _argument(packet, args, kwargs, name: str):
    """An op's argument by its schema name (positional or keyword), None when the op has none."""
    if name in kwargs:
        return kwargs[name]
    for overload in packet.overloads():
        names = [a.name for a in getattr(packet, overload)._schema.arguments]
        if name in names:
            i = names.index(name)
            return args[i] if i < len(args) else None
    return None


def _recomputing() -> bool:
    """Inside activation checkpointing's recomputation. Non-reentrant checkpointing recomputes under its
    `_recomputation_hook` saved-tensor hooks (torch 2.13 torch/utils/checkpoint.py), which stay on inside an
    `autograd.Function`'s forward (bitsandbytes' `MatMul4Bit`), where grad mode is off; reentrant checkpointing
    reruns the forward under `torch.enable_grad()`. Backward itself runs with grad mode off."""
    if torch.is_grad_enabled():
        return True
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    return hooks is not None and "_recomputation_hook" in getattr(hooks[0], "__qualname__", "")


def _nbytes(tree) -> int:
    flat, _ = torch.utils._pytree.tree_flatten(tree)
    return sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor))


class _GlobalOnly:
    """Stands in for `FlopCounterMode`'s `ModuleTracker`: every count goes to "Global", no module hooks."""

    parents = frozenset({"Global"})

    def __enter__(self):
        return self

    def __exit__(self, *args) -> None:
        return None


class StepFlops(FlopCounterMode):
    """`FlopCounterMode` whose counts are also split by phase and family (module docstring). `phase` is a callable
    giving the engine's current phase. Enter it below the byte tracker (before it), so that the tracker sees the ops
    the model calls, not `FlopCounterMode`'s decompositions."""

    def __init__(self, phase):
        mapping = {CPU_FLASH: _cpu_flash_flop, CPU_FLASH_BACKWARD: _cpu_flash_backward_flop}
        self.matmuls = set(MATMUL)
        gemm_4bit = _bitsandbytes_gemm()
        if gemm_4bit is not None:
            mapping[gemm_4bit] = _gemm_4bit_flop
            self.matmuls.add(gemm_4bit)
        super().__init__(display=False, custom_mapping=mapping)
        # FlopCounterMode attributes FLOPs to modules with a `ModuleTracker`, whose global module hooks put grad hooks
        # on every module's inputs and outputs (torch 2.13 torch/utils/module_tracker.py): they change what autograd
        # keeps alive, so the traced memory would not be the step's. Only the global count is used here.
        self.mod_tracker = _GlobalOnly()
        self._phase = phase
        self.reset()

    def reset(self) -> None:
        """Start counting a new step (the figures are per optimizer step)."""
        self.by = {p: {f: 0 for f in FAMILIES} for p in PHASES}
        self.causal = 0
        self.other_bytes = {p: 0 for p in PHASES}
        self.counted_ops = 0

    def _count_flops(self, func_packet, out, args, kwargs):
        glob = self.flop_counts["Global"]
        before = glob.get(func_packet, 0)
        out = super()._count_flops(func_packet, out, args, kwargs)
        flops = glob.get(func_packet, 0) - before
        phase = ENGINE_PHASES.get(self._phase(), "forward")
        if phase == "backward" and _recomputing():
            phase = "recompute"
        if flops:
            self.counted_ops += 1
            if func_packet in self.matmuls:
                family = "matmul"
            elif func_packet in BATCHED or func_packet in ATTENTION:
                family = "attention"
            else:
                family = "other"
            self.by[phase][family] += flops
            if family == "attention" and _argument(func_packet, args, kwargs, "is_causal"):
                self.causal += flops
        elif (
            func_packet not in NO_TRAFFIC
            and func_packet not in self.flop_registry
            and not str(func_packet).startswith("prim.")
        ):
            self.other_bytes[phase] += _nbytes(args) + _nbytes(out)
        return out

    def result(self) -> dict:
        """Per optimizer step: total, by phase, by family, by phase and family; `attention_causal`: the attention
        FLOPs of calls made with `is_causal`; `other_bytes`: bytes read and written by the ops without a FLOP
        formula (elementwise, norms, softmax, loss, optimizer update), by phase."""
        return {
            "total": sum(sum(f.values()) for f in self.by.values()),
            "by_phase": {p: sum(f.values()) for p, f in self.by.items()},
            "by_family": {f: sum(self.by[p][f] for p in PHASES) for f in FAMILIES},
            "by_phase_family": {p: dict(f) for p, f in self.by.items()},
            "attention_causal": self.causal,
            "other_bytes": dict(self.other_bytes),
            "counter": "torch.utils.flop_counter.FlopCounterMode",
        }


ATTENTION = {
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_efficient_attention_backward,
    aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_cudnn_attention_backward,
    aten._flash_attention_forward,
    aten._efficient_attention_forward,
    aten._flash_attention_backward,
    aten._efficient_attention_backward,
    CPU_FLASH,
    CPU_FLASH_BACKWARD,
}
