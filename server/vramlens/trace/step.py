"""One training step, shared by the trace (fake tensors), the CPU check (real tensors) and the live probe
(CUDA): micro-batches of forward and backward, then the optimizer step and zero_grad, as the HF Trainer
runs them. `mark(phase)` is called at every phase boundary:

  fwd → loss (the LM head and the loss, called by the model) → bwd-loss (backward through the loss)
  → bwd (the rest of backward, from a hook on the LM head's input) → … → opt → zero → end
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from vramlens.trace.config import StepConfig
from vramlens.trace.model import DTYPES

Mark = Callable[[str], None]


def autocast(cfg: StepConfig, device_type: str):
    if not cfg.autocast:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=DTYPES[cfg.compute_dtype])


REDUCED = (torch.bfloat16, torch.float16)


class LogSoftmaxHalfToFloat(torch.autograd.Function):
    """`log_softmax(x, dim=-1, dtype=float32)` of a 16-bit x as CUDA computes it: one kernel reads x and writes the
    fp32 output, and the backward writes the input's gradient in x's dtype (aten/src/ATen/native/cuda/SoftMax.cu
    `host_softmax` / `host_softmax_backward` with `half_to_float`); autograd keeps the fp32 output. The CPU kernel
    converts x to fp32 first; here that happens a few rows at a time, so no x-sized fp32 copy is made."""

    @staticmethod
    def forward(ctx, x):
        out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        step = max(1, 2**18 // max(x.shape[-1], 1))
        for i in range(0, x.shape[0], step):
            out[i : i + step] = torch.log_softmax(x[i : i + step].float(), dim=-1)
        ctx.save_for_backward(out)
        ctx.in_dtype = x.dtype
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        gi = torch.empty(out.shape, dtype=ctx.in_dtype, device=out.device)
        step = max(1, 2**18 // max(out.shape[-1], 1))
        for i in range(0, out.shape[0], step):
            gc = g[i : i + step]
            gi[i : i + step] = (gc - out[i : i + step].exp() * gc.sum(-1, keepdim=True)).to(ctx.in_dtype)
        return gi


class CudaAutocastPolicy(torch.overrides.TorchFunctionMode):
    """CPU autocast with CUDA's policy for `cross_entropy` on 16-bit logits (T5's `CrossEntropyLoss` on the LM head's
    output): CUDA's autocast has no rule for `cross_entropy_loss`, which decomposes into `log_softmax`, run with an
    fp32 output (torch 2.13 aten/src/ATen/autocast_mode.h `AT_FORALL_FP32_SET_OPT_DTYPE`), and `nll_loss`; CPU
    autocast casts the logits to fp32 as a whole first. Here it runs as CUDA decomposes it,
    `nll_loss(log_softmax(x, dtype=float32))` (`LogSoftmaxHalfToFloat`). Active during the forward (the loss is not
    recomputed by checkpointing; torch function modes are not active in backward). gelu_new's `pow`, which CUDA's
    autocast runs in fp32, is inside blocks that checkpointing recomputes: `hf.activations_as_cuda` handles it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (
            func is torch.nn.functional.cross_entropy
            and torch.is_autocast_enabled("cpu")
            and args
            and isinstance(args[0], torch.Tensor)
            and args[0].dtype in REDUCED
            and args[0].dim() == 2
            and kwargs.get("weight") is None
            and not kwargs.get("label_smoothing")
        ):
            target = args[1] if len(args) > 1 else kwargs["target"]
            return torch.nn.functional.nll_loss(
                LogSoftmaxHalfToFloat.apply(args[0]),
                target,
                ignore_index=kwargs.get("ignore_index", -100),
                reduction=kwargs.get("reduction", "mean"),
            )
        return func(*args, **kwargs)


def cuda_autocast_policy(cfg: StepConfig, device_type: str):
    """`CudaAutocastPolicy` when a CPU step runs under autocast (the trace and its CPU check)."""
    if not cfg.autocast or device_type != "cpu":
        return contextlib.nullcontext()
    return CudaAutocastPolicy()


def forward_backward(model, batch, cfg: StepConfig, mark: Mark, device_type: str) -> None:
    for _ in range(cfg.grad_accum):
        mark("fwd")
        with cuda_autocast_policy(cfg, device_type), autocast(cfg, device_type):
            extra = {k: batch[k] for k in ("attention_mask", "pixel_values", "token_type_ids") if k in batch}
            out = model(batch["ids"], batch["labels"], mark=mark, **extra)
        loss = out["loss"]
        if cfg.grad_accum > 1:
            loss = loss / cfg.grad_accum
        logits = out["logits"] if cfg.holds_logits else None  # still referenced by the loop
        del out
        mark("bwd-loss")
        loss.backward()
        del loss, logits


def optimizer_step(optimizer, cfg: StepConfig, mark: Mark) -> None:
    mark("opt")
    optimizer.step()
    mark("zero")
    optimizer.zero_grad(set_to_none=cfg.set_to_none)
    mark("end")


def train_step(model, optimizer, batch, cfg: StepConfig, mark: Mark, device_type: str) -> None:
    forward_backward(model, batch, cfg, mark, device_type)
    optimizer_step(optimizer, cfg, mark)
