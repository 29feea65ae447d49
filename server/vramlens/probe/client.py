"""Run the live probe from a process that must not import torch.

`run_probe` starts `python -m vramlens.probe.child` in its own process group (a fresh CUDA context, nothing
left behind), feeds it the plan, and kills the whole group on timeout. `ProbeClient` is the asyncio
wrapper the language server uses (`run(rp, progress)`).
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
from pathlib import Path
from typing import Any, Callable

from vramlens import calibration
from vramlens.estimate import estimate
from vramlens.resolved import ResolvedPlan

log = logging.getLogger(__name__)
GIB = 1 << 30


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
