"""The live probe: its step logic on real CPU tensors (the same builder and step as the trace), its no-GPU,
timeout and OOM paths, and — only where CUDA exists — a real GPU run."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from trace_plans import ADAMW_8BIT, LORA, need, plan, tiny_config  # noqa: E402

GIB = 1 << 30


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    "changes",
    [
        {},
        dict(LORA, grad_checkpointing=True),
        dict(optimizer_impl="foreach"),
        dict(optimizer=ADAMW_8BIT),
        dict(set_to_none=False, grad_accum=2),
    ],
    ids=["full", "lora-ckpt", "foreach", "adamw8bit", "accumulate"],
)
def test_probe_steps_on_cpu_reach_the_traced_peak(changes):
    """Steady-state steps (≥ 1) of the probe session hit exactly the peak the fake trace predicts."""
    need("torch")
    if getattr(changes.get("optimizer"), "library", "") == "bitsandbytes":
        need("bitsandbytes")
    from vramlens.probe.session import TrackerMeter, run_session
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    rp = plan(**changes)
    res = run_session(rp, "cpu", TrackerMeter(), steps=3)
    assert res["status"] == "ok" and len(res["steps"]) == 3
    traced = engine.run(step_config(rp))["peak_bytes"]
    assert res["max_allocated"] == traced
    assert res["steps"][1]["max_allocated"] == res["steps"][2]["max_allocated"]  # steady from step 1 on


def test_probe_reports_the_phase_that_runs_out_of_memory():
    need("torch")
    from vramlens.probe.session import TrackerMeter, run_session
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    rp = plan()
    traced = engine.run(step_config(rp))
    cap = traced["phases"]["forward-backward"] - 1  # enough for step 0, not for the steady state
    res = run_session(rp, "cpu", TrackerMeter(cap_bytes=cap), steps=3)
    assert res["status"] == "oom"
    assert res["phase"].endswith("1.0") and res["phase"][:3] in ("fwd", "los", "bwd")
    assert len(res["steps"]) == 1 and res["max_allocated"] <= cap


@pytest.mark.skipif(_cuda(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_the_probe_says_so_and_exits_3(tmp_path):
    need("torch")
    from vramlens.probe.client import run_probe

    res = run_probe(plan(), steps=2, timeout=120)
    assert res["status"] == "no_cuda"
    cfg = tiny_config(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "vramlens", "probe", str(cfg)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, VRAMLENS_CALIBRATION="off"),
    )
    assert done.returncode == 3, done.stderr
    assert "no CUDA GPU" in done.stdout


def _gone(pid: int) -> bool:
    """No such process, or only its exit status is left (a zombie nobody has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_timeout_kills_the_probe_process_group(tmp_path):
    """A probe that never answers is stopped, says so, and leaves nothing running: not the child, nor anything the
    child started (a stand-in interpreter that starts a detached sleeper, then sleeps itself)."""
    from vramlens.probe.client import run_probe, summary_line

    fake, child, grandchild = tmp_path / "python", tmp_path / "child.pid", tmp_path / "grandchild.pid"
    fake.write_text(
        f"#!/bin/sh\necho $$ > {shlex.quote(str(child))}\n"
        f"sleep 120 </dev/null >/dev/null 2>&1 &\necho $! > {shlex.quote(str(grandchild))}\n"
        "exec sleep 120\n"
    )
    fake.chmod(0o755)
    res = run_probe(plan(), steps=2, timeout=2.0, python=str(fake))
    assert res["status"] == "timeout" and res["timeout_s"] == 2.0
    assert "(timeout)" in summary_line(res)
    pids = {"child": int(child.read_text()), "grandchild": int(grandchild.read_text())}
    for _ in range(100):  # SIGKILL is delivered, not awaited, by killpg
        if all(_gone(pid) for pid in pids.values()):
            break
        time.sleep(0.1)
    assert {name: _gone(pid) for name, pid in pids.items()} == {"child": True, "grandchild": True}


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_gpu_probe_measures_close_to_the_trace():
    from vramlens.probe.client import run_probe
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    rp = plan(seq_len=512, micro_batch=2)
    res = run_probe(rp, steps=3, timeout=300)
    assert res["status"] == "ok", res
    traced = engine.run(step_config(rp))["peak_bytes"]
    # cuBLAS workspaces (8–32 MiB) are inside `allocated` on a GPU and invisible to the trace
    assert traced <= res["max_allocated"] <= traced + 64 * 2**20
    assert res["max_reserved"] >= res["max_allocated"] and res["device_used"] >= res["max_reserved"]
