"""The estimate as the CLI shows it: the stable JSON contract and a readable text breakdown.

JSON contract (`vramlens estimate --format json`, also produced by `vramlens trace`):
  {"file", "format", "model": {"id", "params"}, "gpu": {"name", "count", "memory_gib", "usable_gib"},
   "peak": {"allocated_gib", "reserved_gib", "device_gib"}, "phase", "components_gib": {...}, "fits",
   "headroom_gib", "max_micro_batch", "max_seq_len", "peak_at_micro_batch_1": {"phase", "allocated_gib"} or null
   (when not even micro batch 1 fits), "assumptions": [...], "objective"}
("objective": "sft" | "dpo" | "kto" | "orpo" | "simpo" | "cpo" | "rm" | "ppo" | "grpo" | "rloo" | "online-dpo" | "gkd" |
 "kd" | "pretrain"; the phases the objective adds: "reference-forward", "generation", "teacher-forward")
"calibration": {"factor", "source", "recorded", "key"} or null: the local exact trace or probe that scaled the
 estimate (vramlens.calibration; `vramlens calibration list` shows it by "key").
"throughput": {"tokens_per_s", "run_tokens_per_s", "step_s", "mfu", "bound", "parts_s"} or null when the GPU's
 speed is not known (vramlens.estimate.throughput).
"unmodelled": [{"key", "value", "what", "consequence", "line"}]: settings read that change memory or speed and that the
 estimate does not model ("line" 1-based, null when not known); "approximate": true when the figure rests on an
 approximation, "approximate_reasons": every reason (each unmodelled setting among them).
plus "range_gib": {"low", "high"}, "phases_gib" (allocated GiB of each candidate phase), "params_trainable",
"sources" (each setting's value and where it came from: {"<setting>": {"value", "from"}}, e.g. {"value": true,
"from": "default of TRL 1.x (SFTConfig/ModelConfig)"}).
"""

from __future__ import annotations

from vramlens.estimate.result import COMPONENT_LABELS, COMPONENTS, GIB, Estimate
from vramlens.knowledge.gpus import usable_text
from vramlens.plan import Origin, TrainingPlan
from vramlens.provenance import applied_defaults, by_source, default_phrase, json_value
from vramlens.resolve import Resolution


def _g(n: int | float) -> float:
    return round(n / GIB, 2)


def describe_source(s) -> str:
    if s.origin == Origin.FILE:
        where = f"line {s.span.start_line + 1}" if s.span else "file"
        if s.span and s.span.file and s.span.file != "":
            where = f"{s.span.file}:{s.span.start_line + 1}"
        return f"{s.key or 'file'} ({where})"
    if s.origin == Origin.DEFAULT:
        return default_phrase(s)
    return s.origin.value + (f": {s.note}" if s.note else "")


def estimate_fields(rp, est: Estimate, model_id: str | None = None) -> dict:
    """The estimate contract's fields that do not depend on the file (shared with `vramlens trace`)."""
    return {
        "model": {"id": model_id or rp.arch.id, "params": est.params_total},
        "objective": est.objective,
        "gpu": {
            "name": rp.gpu.name,
            "count": rp.gpu_count,
            "memory_gib": rp.gpu.memory_gib,
            "usable_gib": rp.gpu.usable_gib,
        },
        "peak": {
            "allocated_gib": _g(est.allocated_bytes),
            "reserved_gib": _g(est.reserved_bytes),
            "device_gib": _g(est.device_bytes),
        },
        "range_gib": {"low": _g(est.low_bytes), "high": _g(est.high_bytes)},
        "phase": est.phase,
        "phases_gib": {k: _g(v) for k, v in est.phases.items()},
        "components_gib": {k: _g(v) for k, v in est.components.items()},
        "fits": est.fits,
        "headroom_gib": _g(est.headroom_bytes),
        "max_micro_batch": est.max_micro_batch,
        "max_seq_len": est.max_seq_len,
        "peak_at_micro_batch_1": None
        if est.peak_at_one is None
        else {"phase": est.peak_at_one[0], "allocated_gib": _g(est.peak_at_one[1])},
        "params_trainable": est.params_trainable,
        "assumptions": list(est.assumptions),
        "throughput": est.throughput.as_json() if est.throughput is not None else None,
        "calibration": est.calibration.model_dump() if est.calibration is not None else None,
        "unmodelled": [
            {
                "key": u.key,
                "value": u.value,
                "what": u.what,
                "consequence": u.consequence,
                "line": u.span.start_line + 1 if u.span is not None else None,
            }
            for u in est.unmodelled
        ],
        "approximate": est.is_approximate,
        "approximate_reasons": list(est.approximate),
    }


def approximate_line(est: Estimate) -> str | None:
    """What every view puts beside its peak when the figure is approximate: "approximate: <reason>; <reason>";
    None when it is not."""
    if not est.is_approximate:
        return None
    return "approximate: " + "; ".join(est.approximate)


def peak_mark(est: Estimate) -> str:
    """ "≈ " before a peak that is approximate, nothing before one that is not."""
    return "≈ " if est.is_approximate else ""


def calibration_line(est: Estimate) -> str | None:
    """What every view puts under its peak when a local measurement scaled the estimate; None when none did."""
    c = est.calibration
    if c is None:
        return None
    source = {"trace": "an exact trace", "probe": "a probe"}.get(c.source, c.source)
    when = f" of {c.recorded[:10]}" if c.recorded else ""
    return (
        f"calibrated ×{c.factor:.3f} by {source}{when} on this machine (key {c.key}: `vramlens calibration "
        "list`, `clear`)"
    )


def estimate_json(path: str, plan: TrainingPlan, res: Resolution, est: Estimate) -> dict:
    out = {
        "file": path,
        "format": plan.format,
        **estimate_fields(res.resolved, est, plan.model_id.value if plan.model_id else None),
    }
    out["gpu"]["assumed"] = res.gpu_assumed
    out["gpu"]["assumption"] = res.gpu_assumption
    out["assumptions"] = list(res.assumptions) + out["assumptions"]
    out["sources"] = {k: {"value": json_value(v.value), "from": describe_source(v)} for k, v in res.sources.items()}
    return out


def assumed_gpu_note(res: Resolution) -> str:
    """What the text output adds to the GPU line when no GPU was named."""
    return f"\n          (assumed: {res.gpu_assumption})" if res.gpu_assumed else ""


OBJECTIVE_NAMES = {
    "sft": "supervised fine-tuning",
    "pretrain": "pre-training",
    "dpo": "DPO",
    "kto": "KTO",
    "orpo": "ORPO",
    "simpo": "SimPO",
    "cpo": "CPO",
    "rm": "reward model",
    "ppo": "PPO",
    "grpo": "GRPO",
    "rloo": "RLOO",
    "online-dpo": "online DPO",
    "gkd": "GKD (distillation)",
    "kd": "knowledge distillation",
}


METHOD_NAMES = {
    "none": "full fine-tune",
    "lora": "LoRA",
    "qlora": "QLoRA",
    "dora": "DoRA",
    "ia3": "IA3",
    "vera": "VeRA",
}


def method_text(rp) -> str:
    """How the weights train: full fine-tune or the adapter method (VeRA with its rank)."""
    if rp.adapter_method:  # a method beyond these (knowledge/peft_methods.OTHER_METHODS)
        from vramlens.knowledge.peft_methods import method_name

        return method_name(rp.adapter_method) + (" (4-bit base)" if rp.quant_bits == 4 else "")
    name = METHOD_NAMES.get(rp.peft, rp.peft)
    return f"{name} r={rp.lora_r}" if rp.peft == "vera" else name


def objective_text(rp) -> str:
    """One line on what the step optimises and what that adds: `DPO · reference: frozen copy · chosen + rejected`."""
    parts = [OBJECTIVE_NAMES.get(rp.objective, rp.objective)]
    if rp.sequences_per_example == 2:
        parts.append("chosen + rejected in one forward (2× sequences)")
    if rp.reference == "copy":
        copy = f"reference: {rp.reference_arch.id}" if rp.reference_arch is not None else "reference: a frozen copy"
        parts.append(copy + (" on the CPU (offloaded)" if rp.reference_offloaded else ""))
    elif rp.reference == "adapters-off":
        parts.append("reference: the PEFT base (adapters disabled)")
    elif rp.objective in ("dpo", "kto", "orpo", "simpo", "cpo", "ppo", "grpo", "rloo", "online-dpo"):
        parts.append("no reference model")
    if rp.generation != "none":
        gen = {
            "generate": "generate() with a KV cache",
            "vllm-colocate": f"vLLM colocated ({rp.vllm_memory_share:g} "
            f"of the GPU{', released while the policy trains' if rp.generation_sleeps else ''})",
            "vllm-server": "vLLM on a separate server",
        }[rp.generation]
        sequences = rp.generation_batch or rp.micro_batch * rp.generations_per_example
        parts.append(f"generation: {gen}, {sequences} × {rp.generation_len} tokens")
    if rp.reward_model:
        parts.append("reward model" + (f" {rp.reward_arch.id}" if rp.reward_arch is not None else ""))
    if rp.value_model:
        parts.append("value model" + (f" {rp.value_arch.id}" if rp.value_arch is not None else ""))
    if rp.teacher is not None:
        # a teacher that is not named is sized as the student (resolve.objective): not the student's id as its own
        named = rp.teacher is not rp.arch and rp.teacher != rp.arch
        parts.append(f"teacher {rp.teacher.id}" if named else "teacher not named (sized as the student)")
        if rp.teacher_dtype is not None:
            parts[-1] += f" in {rp.teacher_dtype}"
    return " · ".join(parts)


def speed_text(est: Estimate) -> str:
    """One line on how fast the step runs: `≈ 2,410 tokens/s per GPU · 3.40 s per step · MFU 41 % · compute-bound`."""
    t = est.throughput
    if t is None:
        return "speed not known for this GPU"
    run = f" ({t.run_tokens_per_s:,.0f} for the run)" if t.run_tokens_per_s > t.tokens_per_s * 1.001 else ""
    return (
        f"≈ {t.tokens_per_s:,.0f} tokens/s per GPU{run} · {t.step_s:.2f} s per optimizer step · "
        f"MFU {t.mfu:.0%} · {t.bound}-bound"
    )


def speed_change(before: Estimate, after: Estimate) -> str | None:
    """How a change moves the tokens per second: "+18 % tokens/s", "−24 % tokens/s"; None when not known."""
    if before.throughput is None or after.throughput is None or before.throughput.tokens_per_s <= 0:
        return None
    change = after.throughput.tokens_per_s / before.throughput.tokens_per_s - 1
    if abs(change) < 0.005:
        return "same speed"
    return f"{'+' if change > 0 else '−'}{abs(change):.0%} tokens/s"


def bar(fraction: float, width: int = 28) -> str:
    """A horizontal bar with eighth-block resolution."""
    fraction = max(0.0, min(1.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")


def render_text(path: str, plan: TrainingPlan, res: Resolution, est: Estimate) -> str:
    rp = res.resolved
    usable = est.usable_bytes
    verdict = "fits" if est.fits else "OUT OF MEMORY"
    if est.tight:
        verdict = "fits, but tight"
    gpu = f"{rp.gpu_count}× {rp.gpu.name}" if rp.gpu_count > 1 else rp.gpu.name
    lines = [
        f"{path}  ({plan.format})",
        f"  model   {plan.model_id.value if plan.model_id else rp.arch.id}  "
        f"{est.params_total / 1e9:.2f} B params, {est.params_trainable / 1e9:.3g} B trainable · {method_text(rp)}",
        f"  trains  {objective_text(rp)}",
        f"  GPU     {gpu}: {usable_text(rp.gpu.usable_gib)} GiB usable per GPU{assumed_gpu_note(res)}",
        f"  peak    {peak_mark(est)}{_g(est.device_bytes):.1f} GiB on the device "
        f"({_g(est.low_bytes):.1f}–{_g(est.high_bytes):.1f}) "
        f"→ {verdict}, headroom {_g(est.headroom_bytes):+.1f} GiB",
        f"          allocated {_g(est.allocated_bytes):.1f} · reserved {_g(est.reserved_bytes):.1f} · "
        f"peak phase: {est.phase}",
    ]
    if (calibrated := calibration_line(est)) is not None:
        lines.append(f"          {calibrated}")
    if est.is_approximate:
        lines.append("          approximate:")
        lines.extend(f"            - {reason}" for reason in est.approximate)
    lines += [f"  speed   {speed_text(est)}", ""]
    scale = max(est.device_bytes, usable)
    for key in COMPONENTS:
        v = est.components.get(key, 0)
        if v <= 0:
            continue
        lines.append(f"  {COMPONENT_LABELS[key]:<40} {_g(v):>7.2f} GiB  {bar(v / scale)}")
    lines.append(f"  {'GPU usable':<40} {_g(usable):>7.2f} GiB  {bar(usable / scale)}")
    lines.append("")
    if len(est.phases) > 1:
        lines.append("  phases (allocated): " + " · ".join(f"{p} {_g(v):.1f}" for p, v in est.phases.items()))
    if est.max_micro_batch is not None:
        lines.append(
            f"  largest micro batch that fits: {est.max_micro_batch}"
            + (f" · longest sequence at this batch: {est.max_seq_len}" if est.max_seq_len else "")
        )
    else:
        lines.append(f"  {est.not_even_one(rp.seq_len)}")
    for source, group in by_source(applied_defaults(res.sources)):  # what the file does not set
        lines.append(f"  {source.replace('default of', 'defaults of', 1)}, applied:")
        lines.extend(f"    - {d.title}: {d.value}" for d in group)
    notes = list(res.assumptions) + list(est.assumptions)
    if notes:
        lines.append("  assumptions:")
        lines.extend(f"    - {a}" for a in notes)
    return "\n".join(lines)
