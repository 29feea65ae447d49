"""The probe subprocess: `python -m vramlens.probe.child`, one JSON request on stdin, one JSON line on stdout.

Request: {"plan": <ResolvedPlan JSON>, "steps": 3, "cap_usable_bytes": null | bytes}
Answer:  {"status": "ok" | "oom" | "no_cuda" | "no_torch" | "error", …} (see `session.run_session`), plus what
it measured with (`environment`: the device's name, compute capability and driver, the CUDA and library
versions), the device's total memory, the memory used right after the CUDA context was created, and the cap.
It builds a model from shapes and random weights, feeds random token ids: no downloads, no user code.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
from typing import Any

LIBRARIES = ("transformers", "peft", "bitsandbytes")  # reported when installed beside torch


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # libraries' prints go to stderr
    sys.stdout = sys.stderr
    req = json.loads(sys.stdin.read() or "{}")

    def answer(msg: dict) -> int:
        out.write(json.dumps(msg) + "\n")
        out.flush()
        return 0

    try:
        import torch
    except ImportError as exc:
        return answer({"status": "no_torch", "message": str(exc)})
    if not torch.cuda.is_available():
        return answer(
            {"status": "no_cuda", "message": f"torch {torch.__version__} sees no CUDA device", **environment()}
        )

    from vramlens.probe.session import CudaMeter, run_session
    from vramlens.resolved import ResolvedPlan

    dev = torch.device("cuda", 0)
    torch.cuda.init()
    torch.cuda.synchronize(dev)
    free0, total = torch.cuda.mem_get_info(dev)
    info: dict[str, Any] = {**environment(dev), "total_bytes": total, "used_after_context": total - free0}
    cap = req.get("cap_usable_bytes")
    if cap:
        # emulate a smaller GPU: the allocator may use the target's usable memory minus this context
        fraction = max(0.01, min(1.0, (int(cap) - info["used_after_context"]) / total))
        torch.cuda.set_per_process_memory_fraction(fraction, dev)
        info["memory_fraction"] = round(fraction, 4)
    try:
        rp = ResolvedPlan.model_validate(req["plan"])
        res = run_session(
            rp,
            dev,
            CudaMeter(dev),
            steps=int(req.get("steps", 3)),
            progress=lambda m: print(f"probe: {m}", file=sys.stderr, flush=True),
        )
    except Exception as exc:  # anything but an OOM: report, do not hang
        return answer({"status": "error", "message": f"{type(exc).__name__}: {exc}", **info})
    return answer({**res, **info})


def environment(device=None) -> dict[str, Any]:
    """What a measurement was made with: torch, the CUDA it was built with and the libraries installed beside it
    (None when absent) and, given a CUDA device, its name, compute capability and the driver's version."""
    import torch

    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for name in LIBRARIES:
        try:
            env[name] = md.version(name)
        except md.PackageNotFoundError:
            env[name] = None
    if device is not None:
        major, minor = torch.cuda.get_device_capability(device)
        env.update(
            gpu=torch.cuda.get_device_name(device), compute_capability=f"{major}.{minor}", driver=driver_version()
        )
    return env


def driver_version() -> str | None:
    """The NVIDIA driver's version ("570.133.20"): NVML's `nvmlSystemGetDriverVersion` when nvidia-ml-py is
    installed, else `nvidia-smi --query-gpu=driver_version`; None when neither answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # not installed, or NVML not loadable: ask nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split() if done.returncode == 0 else []
    return lines[0] if lines else None  # one line per GPU, one driver for all of them


if __name__ == "__main__":
    sys.exit(main())
