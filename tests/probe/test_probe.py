"""The live probe: its step logic on real CPU tensors (the same builder and step as the trace), its no-GPU,
timeout and OOM paths, and — only where CUDA exists — a real GPU run."""

from __future__ import annotations

import importlib.util
import json
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


def _answer(gpu: str, total_gib: float, cc: str = "9.0") -> dict:
    """The child's answer to a successful probe, with the fields `vramlens.probe.child` writes on a GPU (its
    `environment`, the device's total memory and context) and `run_probe` adds (`wall_s`)."""
    step = {"max_allocated": 3 * GIB, "max_reserved": 4 * GIB, "allocated": GIB, "reserved": 4 * GIB}
    step.update(peak_inactive_split=0, alloc_retries=0, device_used=5 * GIB, seconds=1.0)
    return {
        "status": "ok",
        "steps": [step, step, step],
        "phase": None,
        "allocated_after_build": GIB,
        "max_allocated": 3 * GIB,
        "max_reserved": 4 * GIB,
        "device_used": 5 * GIB,
        "alloc_retries": 0,
        "peak_inactive_split": 0,
        "seconds": 3.0,
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "transformers": "5.17.0",
        "peft": "0.21.0",
        "bitsandbytes": None,
        "gpu": gpu,
        "compute_capability": cc,
        "driver": "580.95.05",
        "total_bytes": int(total_gib * GIB),
        "used_after_context": GIB // 2,
        "wall_s": 9.5,
    }


def _report(tmp_path, monkeypatch, answer: dict, *flags: str):
    """What `vramlens probe` makes of the child's `answer` for the tiny config and these flags: (the plan the
    measurement is compared with, the JSON, the text), with no GPU."""
    import argparse

    from vramlens.cli import probe as cli
    from vramlens.cli.trace import load_plan

    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "train.yaml" if (tmp_path / "train.yaml").exists() else tiny_config(tmp_path)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args([str(cfg), *flags])
    emulated = None
    if args.as_gpu:
        from vramlens.knowledge.gpus import lookup_gpu

        emulated = lookup_gpu(args.as_gpu)[0]
    loaded, error = load_plan(args.path, cli._with_gpu(args, args.gpu or args.as_gpu))
    assert error is None, error
    plan, res = loaded
    compared, out = cli.report(args, plan, res, answer, emulated)
    json.dumps(out)  # `--format json` prints it
    return res, compared, out, cli.render_text(out)


@pytest.mark.parametrize(
    "device, total_gib, card",
    [
        ("NVIDIA H200", 139.8, "H200"),
        ("NVIDIA H100 80GB HBM3", 79.2, "H100-SXM"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "A100-40GB"),
        ("NVIDIA A10G", 22.5, "A10G"),  # ECC on: 22.5 of the card's 24 GiB
    ],
)
def test_with_no_gpu_named_the_estimate_is_for_the_gpu_the_probe_ran_on(tmp_path, monkeypatch, device, total_gib, card):
    """No --gpu, --as-gpu, setting or config key: the comparison is not with the estimate's default GPU but with
    the card the probe measured on, and the text says which GPU and why."""
    res, compared, out, text = _report(tmp_path, monkeypatch, _answer(device, total_gib))
    assert res.gpu_assumed and res.resolved.gpu.name == "A100-80GB"  # what the estimate alone assumes
    assert compared.gpu.name == card
    assert out["estimate"]["gpu"] == card and out["estimate"]["gpu_reason"] == "the GPU the probe ran on"
    assert out["estimate"]["gpu_warning"] is None and "warning" not in text
    assert f"for {card}: the GPU the probe ran on" in text
    assert "    step 2: max allocated 3.00, max reserved 4.00 GiB" in text
    # the CUDA context the estimate counts is the measured torch's
    assert compared.version_of("torch") == ("2.11.0+cu130", "the probe's environment")
    assert out["estimate"]["versions"]["torch"] == "2.11.0+cu130"


def test_a_named_gpu_is_kept_and_a_different_measured_one_is_warned_of(tmp_path, monkeypatch):
    res, compared, out, text = _report(tmp_path, monkeypatch, _answer("NVIDIA H200", 139.8), "--gpu", "A100-80GB")
    assert not res.gpu_assumed
    assert compared.gpu.name == out["estimate"]["gpu"] == "A100-80GB"
    assert out["estimate"]["gpu_warning"] == "estimate for A100-80GB, measured on NVIDIA H200"
    assert "  warning   estimate for A100-80GB, measured on NVIDIA H200" in text
    assert "    step 2: max allocated 3.00, max reserved 4.00 GiB" in text

    _, compared, out, text = _report(tmp_path, monkeypatch, _answer("NVIDIA H200", 139.8), "--gpu", "H200")
    assert compared.gpu.name == "H200" and out["estimate"]["gpu_warning"] is None and "warning" not in text


def test_a_probe_capped_as_another_gpu_is_compared_for_that_gpu(tmp_path, monkeypatch):
    _, compared, out, text = _report(tmp_path, monkeypatch, _answer("NVIDIA H200", 139.8), "--as-gpu", "A100-40GB")
    assert compared.gpu.name == "A100-40GB" and out["estimate"]["gpu_warning"] is None
    assert "NVIDIA H200 (139.8 GiB" in text and "capped as A100-40GB" in text

    _, _, out, _ = _report(
        tmp_path, monkeypatch, _answer("NVIDIA H200", 139.8), "--as-gpu", "A100-40GB", "--gpu", "A100-80GB"
    )
    assert out["estimate"]["gpu_warning"] == "estimate for A100-80GB, measured on NVIDIA H200 capped as A100-40GB"


@pytest.mark.parametrize(
    "device, total_gib, cc",
    [
        ("NVIDIA Blackwell Prototype X", 95.5, "10.0"),  # no such card in the catalog
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 39.4, "9.0"),  # a MIG slice: not the whole card's memory
        ("Tesla V100-SXM2-32GB MIG", 15.8, "7.0"),
    ],
)
def test_a_card_the_catalog_lacks_is_taken_at_its_measured_memory(tmp_path, monkeypatch, device, total_gib, cc):
    _, compared, out, text = _report(tmp_path, monkeypatch, _answer(device, total_gib, cc))
    assert compared.gpu.name == out["estimate"]["gpu"] == device
    assert compared.gpu.memory_gib == pytest.approx(total_gib, abs=0.01)
    assert compared.gpu.compute_capability == cc and compared.gpu.bf16 == (cc != "7.0")
    assert "not in the GPU catalog, taken as its measured" in out["estimate"]["gpu_reason"]
    assert f"for {device}: the GPU the probe ran on: not in the GPU catalog" in text


def test_the_text_and_json_say_what_the_probe_measured_with(tmp_path, monkeypatch):
    _, _, out, text = _report(tmp_path, monkeypatch, _answer("NVIDIA H200", 139.8))
    assert out["measured"]["environment"] == {
        "gpu": "NVIDIA H200",
        "total_gib": 139.8,
        "compute_capability": "9.0",
        "driver": "580.95.05",
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "transformers": "5.17.0",
        "peft": "0.21.0",
        "bitsandbytes": None,
    }
    assert (
        "  GPU       NVIDIA H200 (139.8 GiB, sm 9.0, driver 580.95.05, CUDA 13.0, torch 2.11.0+cu130, "
        "transformers 5.17.0, peft 0.21.0)\n" in text
    )


def test_the_childs_environment_collection_runs_on_this_machines_torch():
    """Without a device it reports torch, its CUDA build and the libraries installed beside it, and no device
    fields; the driver's version is a string or None, never an error."""
    need("torch")
    import importlib.metadata as md

    import torch
    from vramlens.probe.child import driver_version, environment

    env = environment()
    json.dumps(env)
    assert env["torch"] == torch.__version__ and env["cuda"] == torch.version.cuda
    for name in ("transformers", "peft", "bitsandbytes"):
        installed = importlib.util.find_spec(name) is not None
        assert env[name] == (md.version(name) if installed else None)
    assert not {"gpu", "compute_capability", "driver", "total_bytes"} & set(env)
    assert driver_version() is None or isinstance(driver_version(), str)
