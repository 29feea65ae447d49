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


def forward_backward(model, batch, cfg: StepConfig, mark: Mark, device_type: str) -> None:
    for _ in range(cfg.grad_accum):
        mark("fwd")
        with autocast(cfg, device_type):
            extra = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
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
