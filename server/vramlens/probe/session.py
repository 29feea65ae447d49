"""Real training steps of the synthetic model, measured: the probe's step logic.

The model, the optimizer and the step are the trace's (`vramlens.trace.model/optim/step`), run on real
tensors. The memory meter is the GPU's caching-allocator statistics (`CudaMeter`) in the probe, or the
trace's live-bytes tracker on CPU tensors (`TrackerMeter`), which is how the step logic is tested without a
GPU. Step 0 allocates the optimizer state lazily, so peaks are reported per step and the steady state is
the maximum over steps ≥ 1 (state created in `_init_group`, `torch/optim/adam.py`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch

from vramlens.resolved import ResolvedPlan
from vramlens.trace import model as M
from vramlens.trace import optim as O
from vramlens.trace.config import step_config
from vramlens.trace.step import train_step
from vramlens.trace.tracker import LiveBytes


class CudaMeter:
    """`torch.cuda` memory statistics of one device."""

    def __init__(self, device: torch.device):
        self.device = device
        self.oom_errors: tuple[type[BaseException], ...] = (torch.cuda.OutOfMemoryError,)
        self.total = torch.cuda.mem_get_info(device)[1]

    def context(self):
        return contextlib.nullcontext()

    def reset_peak(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def current(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def snapshot(self) -> dict:
        torch.cuda.synchronize(self.device)
        st = torch.cuda.memory_stats(self.device)
        free, total = torch.cuda.mem_get_info(self.device)
        return {
            "max_allocated": torch.cuda.max_memory_allocated(self.device),
            "max_reserved": torch.cuda.max_memory_reserved(self.device),
            "allocated": torch.cuda.memory_allocated(self.device),
            "reserved": torch.cuda.memory_reserved(self.device),
            "peak_inactive_split": int(st.get("inactive_split_bytes.all.peak", 0)),
            "alloc_retries": int(st.get("num_alloc_retries", 0)),
            "device_used": int(total - free),  # context + reserved + memory outside the allocator
        }


class TrackerMeter:
    """Live storage bytes of real CPU tensors; `cap_bytes` makes allocations past the cap fail like an OOM."""

    def __init__(self, cap_bytes: int | None = None):
        self.tracker = LiveBytes(cap_bytes=cap_bytes)
        self.oom_errors: tuple[type[BaseException], ...] = (MemoryError,)

    def context(self):
        return self.tracker

    def reset_peak(self) -> None:
        self.tracker.reset_peak()

    def current(self) -> int:
        return self.tracker.cur

    def peak(self) -> int:
        return self.tracker.peak

    def snapshot(self) -> dict:
        return {"max_allocated": self.tracker.peak, "allocated": self.tracker.cur}


def run_session(
    rp: ResolvedPlan, device: str | torch.device, meter, steps: int = 3, progress: Callable[[str], None] | None = None
) -> dict:
    """Build the synthetic model on `device`, run `steps` real steps, return per-step memory figures.
    An out-of-memory error ends the session with status "oom" and the phase it happened in."""
    device = torch.device(device)
    cfg = step_config(rp)
    say = progress or (lambda msg: None)
    out: dict = {"status": "ok", "steps": [], "phase": None}
    where = {"phase": "build"}
    t0 = time.perf_counter()
    torch.manual_seed(0)
    try:
        with meter.context():
            say("building the model")
            model = M.build_meta(cfg)
            model = M.materialize(model, device, real=True)
            trainable: list[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
            batch = M.make_batch(cfg, device)
        # bitsandbytes optimizers are built as the trace builds them (its quantile maps are not model memory)
        optimizer = O.make_optimizer(cfg, trainable) if O.uses_bitsandbytes(cfg) else None
        with meter.context():
            if optimizer is None:
                optimizer = O.make_optimizer(cfg, trainable)
            out["allocated_after_build"] = meter.current()
            micro = {"n": -1}

            for step in range(steps):
                micro["n"] = -1

                def mark(phase: str, step=step) -> None:
                    if phase == "fwd":
                        micro["n"] += 1
                    where["phase"] = (
                        f"{phase}{step}.{max(micro['n'], 0)}"
                        if phase in ("fwd", "loss", "bwd-loss", "bwd")
                        else f"{phase}{step}"
                    )

                say(f"step {step + 1}/{steps}")
                meter.reset_peak()
                train_step(model, optimizer, batch, cfg, mark, device.type)
                snap = meter.snapshot()
                snap["seconds"] = round(time.perf_counter() - t0, 2)
                out["steps"].append(snap)
    except meter.oom_errors as exc:
        out.update(
            status="oom",
            phase=where["phase"],
            message=str(exc).splitlines()[0][:300] if str(exc) else "",
            max_allocated=meter.peak(),
        )
    steady = out["steps"][1:] or out["steps"]
    if steady:
        for key in ("max_allocated", "max_reserved", "device_used", "alloc_retries", "peak_inactive_split"):
            vals = [s[key] for s in steady if key in s]
            if vals:
                out[key] = max(vals)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
