"""Exact peak of one training step: run the real transformers/peft/bitsandbytes/TRL code of the config under torch
fake tensors (the synthetic model where the real code cannot run the step: the report says why).

No GPU and no weights are needed; torch runs in a worker subprocess (install `vramlens[trace]`). The
allocated level is traced; reserved and device levels come from the estimator's allocator model.

The worker runs in the interpreter the user chose: `--python`, else `$VRAMLENS_TRACE_PYTHON`, else the one running
vramlens — never one named by a file in the repository (`[trace] python` in `.vramlens.toml` or
`[tool.vramlens.trace]` is ignored, with a notice): that would run the repository's program.

The first lines say what the trace was: an exact trace (the whole step on the real libraries at the versions the
plan assumes), or what was not traced. A config whose objective is not a supervised step (DPO, KTO, GRPO, …) is
traced as one SFT step: the trace then gives no fit verdict and the estimate's verdict is shown.

Exit codes: 0 traced, 2 the config could not be read or resolved, 3 torch is not installed,
4 the trace failed or timed out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vramlens.cli.project import TRACE_PYTHON_ENV, chosen_python

EXIT_CONFIG, EXIT_NO_TORCH, EXIT_FAILED = 2, 3, 4


def add_arguments(p):
    from vramlens.cli.project import add_settings_flags

    p.add_argument("path", help="a training config (YAML/JSON, Python, shell, Markdown)")
    add_settings_flags(p)
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before the trace is stopped (default 300)")
    p.add_argument(
        "--steps",
        type=int,
        choices=[1, 2],
        help="trace 1 step (+ optimizer state) or 2 full steps (default: 1 unless gradients persist across steps)",
    )
    p.add_argument(
        "--python",
        help=f"interpreter of the training environment to trace in (default: "
        f"${TRACE_PYTHON_ENV}, else this one; never one a repository's file names)",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "transformers", "torchtune", "synthetic"],
        default="auto",
        help="auto (default): the real code where it can run the step (torchtune's own model and loss "
        "for a torchtune config, else transformers/peft/bitsandbytes/TRL), else the synthetic "
        "model; transformers or torchtune: that backend only, failing instead of falling back",
    )
    p.add_argument("--no-record", action="store_true", help="do not add the result to the calibration file")


def load_plan(path: str, args):
    """Parse and resolve one config file with the settings `estimate` and `check` use for it (project file,
    framework versions, flags); (plan, resolution) or an error message."""
    from vramlens.cli.project import settings_for
    from vramlens.formats import parse_file
    from vramlens.resolve import ResolveError, resolve
    from vramlens.settings import SettingsError

    try:
        settings = settings_for(Path(path), args)
    except SettingsError as exc:
        return None, "; ".join(f"{exc.source}: {p}" for p in exc.problems)
    try:
        parsed = parse_file(path, workspace=Path.cwd())
    except OSError as exc:
        return None, f"{path}: cannot read: {exc}"
    if parsed.plan is None:
        reason = parsed.issues[0].message if parsed.issues else "not a training config"
        return None, f"{path}: {reason}"
    try:
        res = resolve(parsed.plan, settings)
    except ResolveError as exc:
        return None, f"{path}: {exc}"
    return (parsed.plan, res), None


def trace_python(args) -> str | None:
    """The interpreter the user chose: `--python`, else `$VRAMLENS_TRACE_PYTHON`, else None (this one). A
    repository's project file cannot choose it — whoever wrote the repository would choose the program that runs —
    so one that names it gets a notice that it was ignored."""
    from vramlens.workspace_config import find_workspace_config

    project = find_workspace_config(Path(args.path).resolve(), Path.cwd())
    if project is not None and project.values.get("trace_python"):
        print(
            f"vramlens: `trace.python` in {project.path} ignored: a repository's files never choose the trace "
            f"interpreter; choose it with --python PATH or {TRACE_PYTHON_ENV}",
            file=sys.stderr,
        )
    return chosen_python(args)


def run(args) -> int:
    import asyncio

    from vramlens.calibration import calibrate
    from vramlens.estimate import estimate
    from vramlens.report import estimate_json
    from vramlens.trace.client import TraceClient, TraceError
    from vramlens.trace.report import estimate_from_result, trace_extras_from_result

    loaded, error = load_plan(args.path, args)
    if error:
        print(f"vramlens: {error}", file=sys.stderr)
        return EXIT_CONFIG
    plan, res = loaded
    rp = res.resolved
    tty = sys.stderr.isatty()

    def progress(message: str, fraction: float) -> None:
        if args.format == "text" and tty:
            sys.stderr.write(f"\r\x1b[2K  tracing: {message}")
            sys.stderr.flush()

    async def go() -> dict:
        client = TraceClient(
            trace_python(args), timeout=args.timeout, calibrate=not args.no_record, backend=args.backend
        )
        try:
            return await client.trace(rp, progress, steps=args.steps)
        finally:
            await client.close()

    try:
        result = asyncio.run(go())
    except TraceError as exc:
        if tty and args.format == "text":
            sys.stderr.write("\r\x1b[2K")
        print(f"vramlens: trace of {args.path} failed: {exc}", file=sys.stderr)
        return EXIT_NO_TORCH if exc.kind == "torch-missing" else EXIT_FAILED
    if tty and args.format == "text":
        sys.stderr.write("\r\x1b[2K")

    est = estimate_from_result(result)
    formula = estimate(rp, limits=False)
    out = estimate_json(args.path, plan, res, est)
    out.update(trace_extras_from_result(result))
    out["trace"]["formula_allocated_gib"] = round(formula.allocated_bytes / 2**30, 2)
    verdict = None
    if not out["trace"]["objective_traced"]:
        # the traced step is a stand-in of another objective: the verdict is the estimate's, as `estimate` gives it
        verdict = estimate(calibrate(res).resolved, limits=False)
        out["fits"] = verdict.fits
        out["estimate"] = {
            "device_gib": round(verdict.device_bytes / 2**30, 2),
            "fits": verdict.fits,
            "headroom_gib": round(verdict.headroom_bytes / 2**30, 2),
            "calibration": verdict.calibration.model_dump() if verdict.calibration else None,
        }
    out["verdict_from"] = "trace" if verdict is None else "estimate"
    if args.format == "json":
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(render_text(out, est, verdict))
    return 0


def _verdict(est) -> str:
    if not est.fits:
        return "OUT OF MEMORY"
    return "fits, but tight" if est.tight else "fits"


def render_text(out: dict, est, verdict_est=None) -> str:
    """The trace as text: its first lines say what it was and what it did not trace; `verdict_est` (the estimate of
    the config's own objective, when the trace ran a stand-in step) gives the fit verdict instead of the trace."""
    from vramlens.estimate.result import COMPONENT_LABELS, COMPONENTS, GIB
    from vramlens.knowledge.gpus import usable_text
    from vramlens.report import OBJECTIVE_NAMES, bar, calibration_line
    from vramlens.resolve import CHOOSE_GPU

    t = out["trace"]
    usable = est.usable_bytes
    gpu = out["gpu"]
    gpu_name = f"{gpu['count']}× {gpu['name']}" if gpu["count"] > 1 else gpu["name"]
    g = lambda n: n / GIB  # noqa: E731
    lines = [f"{out['file']}  ({out['format']}) — {t['title']}"]
    lines += [f"  not traced: {x}" for x in t["also_not_traced"]]
    lines += [
        f"  model   {out['model']['id']}  {est.params_total / 1e9:.2f} B params, "
        f"{est.params_trainable / 1e9:.3g} B trainable",
        f"  GPU     {gpu_name}: {usable_text(gpu['usable_gib'])} GiB usable per GPU"
        + (
            f"\n          (assumed: {gpu.get('assumption') or 'no GPU named — ' + CHOOSE_GPU})"
            if gpu.get("assumed")
            else ""
        ),
    ]
    if verdict_est is None:
        lines.append(
            f"  peak    {g(est.device_bytes):.2f} GiB on the device → {_verdict(est)}, "
            f"headroom {g(est.headroom_bytes):+.2f} GiB"
        )
    else:
        objective = OBJECTIVE_NAMES.get(out["objective"], out["objective"])
        lines += [
            f"  peak    {g(est.device_bytes):.2f} GiB on the device for the SFT step alone — no fit verdict from it",
            f"  estimate {g(verdict_est.device_bytes):.2f} GiB on the device for the {objective} step "
            f"→ {_verdict(verdict_est)}, headroom {g(verdict_est.headroom_bytes):+.2f} GiB (vramlens estimate)",
        ]
        if (calibrated := calibration_line(verdict_est)) is not None:
            lines.append(f"          {calibrated}")
    lines += [
        f"          allocated {g(est.allocated_bytes):.2f} (traced) · reserved {g(est.reserved_bytes):.2f} · "
        f"peak in: {t['peak_at']}",
    ]
    if (replay := t.get("allocator_replay")) is not None:
        lines.append(
            f"          reserved (allocator replay) {g(replay['reserved_bytes']):.2f} GiB, "
            f"{replay['segments']} segments, {g(replay['fragmentation_bytes']):.2f} GiB unused at its peak "
            f"({replay['settings']} allocator settings)" + (f" — {replay['note']}" if replay["note"] else "")
        )
    if (flops := t.get("flops")) is not None:
        phases = " · ".join(f"{k} {v / 1e12:.3g}" for k, v in flops["by_phase"].items() if v)
        lines.append(
            f"          work {flops['total'] / 1e12:.3g} TFLOP per step (FlopCounterMode): {phases}; "
            f"attention {flops['by_family']['attention'] / 1e12:.3g}"
        )
    lines += [
        f"          formula estimate of the allocated level: {t['formula_allocated_gib']:.2f} GiB",
        "",
    ]
    scale = max(est.device_bytes, usable)
    for key in COMPONENTS:
        v = est.components.get(key, 0)
        if v > 0:
            lines.append(f"  {COMPONENT_LABELS[key]:<40} {g(v):>8.2f} GiB  {bar(v / scale)}")
    lines.append(f"  {'GPU usable':<40} {g(usable):>8.2f} GiB  {bar(usable / scale)}")
    lines += ["", "  timeline (allocated GiB: after the phase / peak within it):"]
    for row in out["timeline"]:
        micro = (
            f".{row['micro']}"
            if row.get("micro", -1) >= 0 and row["phase"] in ("fwd", "loss", "bwd-loss", "bwd")
            else "  "
        )
        lines.append(
            f"    step {row['step']}{micro}  {row['phase']:<9} {row['after_gib']:>9.2f} / {row['peak_gib']:.2f}"
        )
    from vramlens.trace.report import REAL_BACKENDS

    shown = (t.get("versions") or {}) if t.get("backend") in REAL_BACKENDS else {"torch": t["torch"]}
    versions = ", ".join(f"{k} {v}" for k, v in shown.items() if v)
    lines.append(
        f"  traced {t['ops']:,} ops in {t['seconds']:.1f} s on the {t.get('backend', 'synthetic')} backend "
        f"({versions or 'torch ' + t['torch']}; {t['steps']} step(s))"
    )
    if out["assumptions"]:
        lines.append("  assumptions:")
        lines.extend(f"    - {a}" for a in out["assumptions"])
    return "\n".join(lines)
