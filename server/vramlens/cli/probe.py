"""Measure one training step on the local GPU: real steps of a synthetic model with the config's shapes.

Random weights and random token ids: nothing is downloaded, no code from the workspace runs. The steps run
in a subprocess in its own process group, killed on timeout. Needs a CUDA GPU and `vramlens[probe]`.

Exit codes: 0 measured (the steps ran), 1 out of memory (the phase is reported), 2 the config could not be
read or resolved, 3 no CUDA GPU on this machine, 4 torch is not installed, 5 timeout, 6 the probe crashed.
"""

from __future__ import annotations

import json
import sys

EXIT_OK, EXIT_OOM, EXIT_CONFIG, EXIT_NO_GPU, EXIT_NO_TORCH, EXIT_TIMEOUT, EXIT_CRASH = 0, 1, 2, 3, 4, 5, 6
EXIT_BY_STATUS = {
    "ok": EXIT_OK,
    "oom": EXIT_OOM,
    "no_cuda": EXIT_NO_GPU,
    "no_torch": EXIT_NO_TORCH,
    "timeout": EXIT_TIMEOUT,
}
GIB = 1 << 30
ENVIRONMENT_LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes")


def add_arguments(p):
    p.add_argument("path", help="a training config (YAML/JSON, Python, shell, Markdown)")
    p.add_argument("--steps", type=int, default=3, help="training steps to run (default 3; step 0 is warm-up)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before the probe is killed (default 300)")
    p.add_argument("--as-gpu", help='cap memory to emulate a smaller GPU, e.g. "A100-40GB"')
    p.add_argument(
        "--gpu",
        help="GPU the estimate is compared for (default: the config's, else the --as-gpu one, else the one measured)",
    )
    p.add_argument("--num-gpus", type=int, help="number of GPUs (overrides the config)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument(
        "--python",
        help="interpreter with torch and CUDA to run the probe (default: $VRAMLENS_TRACE_PYTHON, else this one)",
    )
    p.add_argument("--no-record", action="store_true", help="do not add the result to the calibration file")


def run(args) -> int:
    from vramlens.cli.project import chosen_python
    from vramlens.cli.trace import load_plan
    from vramlens.knowledge import gpus
    from vramlens.probe.client import record_calibration, run_probe

    cap, emulated = None, None
    if args.as_gpu:
        found = gpus.lookup_gpu(args.as_gpu)
        if found is None:
            print(f"vramlens: unknown GPU `{args.as_gpu}`", file=sys.stderr)
            return EXIT_CONFIG
        emulated = found[0]
        cap = int(emulated.usable_gib * GIB)
    loaded, error = load_plan(args.path, _with_gpu(args, args.gpu or args.as_gpu))
    if error:
        print(f"vramlens: {error}", file=sys.stderr)
        return EXIT_CONFIG
    plan, res = loaded
    rp = res.resolved
    if args.format == "text":
        print(
            f"probing {args.path}: {args.steps} steps of {rp.arch.id} "
            f"(micro batch {rp.micro_batch}, sequence {rp.seq_len}) …",
            file=sys.stderr,
        )
    # the interpreter whose installed versions the plan was resolved with (cli/project.py `settings_for`)
    result = run_probe(rp, steps=args.steps, timeout=args.timeout, cap_usable_bytes=cap, python=chosen_python(args))
    compared, out = report(args, plan, res, result, emulated)
    if not args.no_record:
        record_calibration(compared, result)
    code = EXIT_BY_STATUS.get(out["status"], EXIT_CRASH)
    if args.format == "json":
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(render_text(out))
    return code


def report(args, plan, res, result: dict, emulated=None):
    """(the plan the probe's answer `result` is compared with, the command's JSON): the estimate is for the GPU the
    probe ran on unless the settings, a flag or the config named one (`compared_plan`). `plan`, `res`: the parsed
    config and its resolution; `emulated`: the `--as-gpu` card."""
    from vramlens.estimate import estimate
    from vramlens.probe.client import compared_plan, summary_line

    comparison = compared_plan(res.resolved, result, named=not res.gpu_assumed, emulated=emulated)
    rp = comparison.plan
    est = estimate(rp, limits=False)
    status = result.get("status", "crash")
    out = {
        "file": args.path,
        "format": plan.format,
        "model": {"id": rp.arch.id, "params": est.params_total},
        "status": status,
        "as_gpu": args.as_gpu,
        "summary": summary_line(result),
        "measured": _measured(result),
        "estimate": {
            "allocated_gib": _g(est.allocated_bytes),
            "reserved_gib": _g(est.reserved_bytes),
            "device_gib": _g(est.device_bytes),
            "gpu": rp.gpu.name,
            "gpu_reason": comparison.reason,
            "gpu_warning": comparison.warning,
            "versions": {name: version for name, version, _ in rp.versions if name in ENVIRONMENT_LIBRARIES},
        },
        "oom_phase": result.get("phase") if status == "oom" else None,
        "probe": result,
    }
    if status == "ok" and result.get("max_allocated"):
        out["measured_over_estimated"] = round(result["max_allocated"] / est.allocated_bytes, 3)
    return rp, out


def _with_gpu(args, gpu: str | None):
    """The arguments with `gpu` as the GPU flag (the estimate is compared for the --as-gpu one by default)."""
    import argparse

    return argparse.Namespace(**{**vars(args), "gpu": gpu})


def _g(n) -> float | None:
    return None if n is None else round(n / GIB, 2)


def _measured(res: dict) -> dict:
    return {
        "max_allocated_gib": _g(res.get("max_allocated")),
        "max_reserved_gib": _g(res.get("max_reserved")),
        "device_used_gib": _g(res.get("device_used")),
        "alloc_retries": res.get("alloc_retries"),
        "context_gib": _g(res.get("used_after_context")),
        "gpu": res.get("gpu"),
        "wall_s": res.get("wall_s"),
        "environment": {
            "gpu": res.get("gpu"),
            "total_gib": _g(res.get("total_bytes")),
            "compute_capability": res.get("compute_capability"),
            "driver": res.get("driver"),
            "cuda": res.get("cuda"),
            **{name: res.get(name) for name in ENVIRONMENT_LIBRARIES},
        },
    }


def environment_text(env: dict) -> str:
    """`NVIDIA H200 (139.8 GiB, sm 9.0, driver 570.133.20, CUDA 12.8, torch 2.11.0, transformers 5.17.0)`: what
    was measured with, the parts the child reported."""
    parts = [
        f"{env['total_gib']:.1f} GiB" if env.get("total_gib") else None,
        f"sm {env['compute_capability']}" if env.get("compute_capability") else None,
        f"driver {env['driver']}" if env.get("driver") else None,
        f"CUDA {env['cuda']}" if env.get("cuda") else None,
        *(f"{name} {env[name]}" for name in ENVIRONMENT_LIBRARIES if env.get(name)),
    ]
    shown = ", ".join(p for p in parts if p)
    return f"{env.get('gpu')}" + (f" ({shown})" if shown else "")


def render_text(out: dict) -> str:
    status = out["status"]
    lines = [f"{out['file']}  ({out['format']}) — live probe", f"  {out['summary']}"]
    if status == "no_cuda":
        lines.append(
            "  This machine has no CUDA GPU: nothing was measured. `vramlens trace` gives the exact "
            "allocated peak without a GPU."
        )
        return "\n".join(lines)
    m, e = out["measured"], out["estimate"]
    if status in ("ok", "oom"):
        lines.append(
            f"  GPU       {environment_text(m['environment'])}"
            + (f" capped as {out['as_gpu']}" if out["as_gpu"] else "")
        )
        if e.get("gpu_warning"):
            lines.append(f"  warning   {e['gpu_warning']}")
    if status == "ok":
        lines += [
            f"  measured  allocated {m['max_allocated_gib']:.2f} · reserved {m['max_reserved_gib']:.2f} · "
            f"device {m['device_used_gib']:.2f} GiB · allocator retries {m['alloc_retries']}",
            f"  estimate  allocated {e['allocated_gib']:.2f} · reserved {e['reserved_gib']:.2f} · "
            f"device {e['device_gib']:.2f} GiB  (measured ÷ estimated allocated: {out['measured_over_estimated']})",
            f"            for {e['gpu']}: {e['gpu_reason']}",
        ]
        for i, s in enumerate(out["probe"].get("steps", [])):
            lines.append(
                f"    step {i}: max allocated {_g(s['max_allocated']):.2f}, max reserved "
                f"{_g(s.get('max_reserved')) or 0:.2f} GiB"
            )
    if status == "oom":
        lines.append(
            f"  out of memory in phase {out['oom_phase']}; the estimate for {e['gpu']} was {e['device_gib']:.2f} GiB "
            "on the device"
        )
    return "\n".join(lines)
