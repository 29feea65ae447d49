"""Run the live probe from a process that must not import torch.

`run_probe` starts `python -m vramlens.probe.child` in its own process group (a fresh CUDA context, nothing
left behind), feeds it the plan, and kills the whole group on timeout. `compared_plan` chooses the plan its
answer is compared with (the GPU it ran on unless one was named, the torch it ran). `ProbeClient` is the
asyncio wrapper the language server uses (`run(rp, progress)`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vramlens import calibration
from vramlens.estimate import estimate
from vramlens.knowledge import gpus
from vramlens.knowledge.schema import GpuSpec
from vramlens.resolved import ResolvedPlan

log = logging.getLogger(__name__)
GIB = 1 << 30
# A catalog card is the one measured when the device's total memory is within this share of the card's: ECC
# takes 6.25 % of a GDDR card's (an A10G reports 22.5 of its 24 GiB), while a MIG slice short of the whole
# card has at most half of it (4g.40gb of an 80 GB A100). A MIG name is not in the catalog either way.
SAME_CARD_MEMORY = 0.1


def _env(rp: ResolvedPlan) -> dict[str, str]:
    """The child's environment: this package importable, and the plan's allocator configuration
    (expandable segments or the default caching allocator) instead of whatever this shell has."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.setdefault("CUDA_MODULE_LOADING", "LAZY")  # default since CUDA 11.7: smaller context
    env["PYTHONSAFEPATH"] = "1"  # never import modules from the user's workspace
    if rp.expandable_segments:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


def run_probe(
    rp: ResolvedPlan,
    *,
    steps: int = 3,
    timeout: float = 300.0,
    cap_usable_bytes: int | None = None,
    python: str | None = None,
) -> dict:
    """Probe `rp` on the local GPU; returns the child's answer plus `wall_s`, or status "timeout"/"crash"."""
    payload = json.dumps(
        {"plan": json.loads(rp.model_dump_json()), "steps": steps, "cap_usable_bytes": cap_usable_bytes}
    )
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [python or sys.executable, "-m", "vramlens.probe.child"],
        cwd=Path(__file__).resolve().parents[2],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(rp),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(payload, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return {
            "status": "timeout",
            "wall_s": round(time.monotonic() - t0, 1),
            "timeout_s": timeout,
            "stderr_tail": (err or "")[-2000:],
        }
    lines = [line for line in (out or "").splitlines() if line.startswith("{")]
    if not lines:
        return {
            "status": "crash",
            "returncode": proc.returncode,
            "wall_s": round(time.monotonic() - t0, 1),
            "stderr_tail": (err or "")[-2000:],
        }
    res = json.loads(lines[-1])
    res["wall_s"] = round(time.monotonic() - t0, 1)
    return res


@dataclass(frozen=True)
class Comparison:
    """The plan a probe's measurement is compared with, and why its GPU is that one."""

    plan: ResolvedPlan
    reason: str  # why the estimate is for `plan.gpu`
    warning: str | None = None  # the estimate is for another GPU than the one measured


def measured_gpu(res: dict) -> tuple[GpuSpec, bool] | None:
    """The GPU a probe ran on (None when it reported none): the catalog's card for the device's name when that
    card's memory is the measured one, else (a MIG slice, a card the catalog lacks) a card of the measured total
    memory and compute capability. The flag says whether it is the catalog's."""
    name, total = res.get("gpu"), res.get("total_bytes")
    if not name:
        return None
    found = gpus.lookup_gpu(name)
    if found is not None and (
        not total or abs(total / GIB - found[0].memory_gib) <= SAME_CARD_MEMORY * found[0].memory_gib
    ):
        return found[0], True
    if not total:
        return None
    sized = gpus.lookup_gpu(f"{total / GIB:.2f}GiB")  # a card of only a memory size (knowledge/gpus.py `_generic`)
    assert sized is not None
    cc = res.get("compute_capability")
    changes: dict[str, Any] = {"name": name, "source": "measured by the probe (not in the GPU catalog)"}
    if cc:
        # bf16 from compute capability 8.0 (torch 2.11 torch/cuda/__init__.py `is_bf16_supported`: major >= 8)
        changes.update(compute_capability=cc, bf16=tuple(int(x) for x in cc.split(".")) >= (8, 0))
    return sized[0].model_copy(update=changes), False


def compared_plan(rp: ResolvedPlan, res: dict, *, named: bool, emulated: GpuSpec | None = None) -> Comparison:
    """The plan the probe's answer `res` is compared with. `named`: the settings, a flag or the config chose the GPU
    (not the default, not a comment) — it is kept, with a warning when it is not the GPU measured. Otherwise the
    estimate is for the GPU the probe ran on (`measured_gpu`). `emulated`: the card `--as-gpu` capped the probe to,
    which is then the GPU measured. The torch the probe ran is the estimate's (its CUDA context); the other
    libraries' versions stay the plan's, whose code paths the synthetic step followed."""
    plan = rp
    if res.get("torch"):
        kept = tuple(v for v in rp.versions if v[0] != "torch")
        plan = rp.with_changes(versions=(*kept, ("torch", res["torch"], "the probe's environment")))
    measured = measured_gpu(res)
    ran_on = emulated or (measured[0] if measured else None)
    if ran_on is None:
        return Comparison(plan, "the GPU named" if named else "assumed: no GPU named, none measured")
    if named:
        if ran_on.name == rp.gpu.name:
            return Comparison(
                plan, "the GPU the probe was capped as (--as-gpu)" if emulated else "the GPU named, the one measured"
            )
        where = str(res.get("gpu")) + (f" capped as {emulated.name}" if emulated else "")
        return Comparison(plan, "the GPU named", f"estimate for {rp.gpu.name}, measured on {where}")
    reason = "the GPU the probe ran on"
    if measured is not None and not measured[1]:
        reason += f": not in the GPU catalog, taken as its measured {ran_on.memory_gib:g} GiB"
    return Comparison(plan.with_changes(gpu=ran_on), reason)


def summary_line(res: dict) -> str:
    status = res.get("status")
    if status == "ok":
        return (
            f"live probe on {res.get('gpu')}: max allocated {res['max_allocated'] / GIB:.2f} GiB, "
            f"max reserved {res.get('max_reserved', 0) / GIB:.2f} GiB, device used "
            f"{res.get('device_used', 0) / GIB:.2f} GiB, {res.get('alloc_retries', 0)} allocator retries"
        )
    if status == "oom":
        return f"live probe: out of memory in {res.get('phase')} after {res.get('max_allocated', 0) / GIB:.2f} GiB"
    if status == "no_cuda":
        return "live probe: no CUDA GPU on this machine"
    if status == "no_torch":
        return "live probe: torch is not installed (install `vramlens[probe]`)"
    if status == "timeout":
        return f"live probe: stopped after {res.get('timeout_s', 0):.0f} s (timeout)"
    return f"live probe failed: {res.get('message') or res.get('stderr_tail', '')[-300:]}"


def record_calibration(rp: ResolvedPlan, res: dict) -> None:
    """Add a successful probe to the calibration file (best effort)."""
    if res.get("status") != "ok" or not res.get("max_allocated"):
        return
    try:
        est = estimate(rp.with_changes(correction=1.0), limits=False)  # record against the uncorrected model
        calibration.record(
            rp,
            source="probe",
            estimated_allocated=est.allocated_bytes,
            measured_allocated=int(res["max_allocated"]),
            gpu=res.get("gpu"),
            extra={
                "measured_reserved": res.get("max_reserved"),
                "measured_device": res.get("device_used"),
                "torch": res.get("torch"),
            },
        )
    except Exception:  # calibration is best effort, never a probe failure
        log.warning("recording the probe in the calibration file failed", exc_info=True)


class ProbeClient:
    """The language server's handle on the probe (one subprocess per run)."""

    def __init__(self, python: str | None = None, timeout: float = 300.0, steps: int = 3):
        self.python, self.timeout, self.steps = python, timeout, steps

    @staticmethod
    def available() -> bool:
        import importlib.util

        return importlib.util.find_spec("torch") is not None

    async def run(self, resolved_plan: ResolvedPlan, progress: Callable[[str, int | None], Any] | None = None) -> dict:
        if progress is not None:
            progress("running real training steps on the GPU", None)
        res = await asyncio.to_thread(
            run_probe, resolved_plan, steps=self.steps, timeout=self.timeout, python=self.python
        )
        record_calibration(resolved_plan, res)
        res["message"] = summary_line(res)
        if res.get("status") == "ok":
            res["peak_gib"] = round(res.get("device_used", res["max_allocated"]) / GIB, 2)
        return res
