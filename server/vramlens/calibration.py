"""Local calibration: what exact traces and live probes measured, kept so later estimates for the same model improve.

Every exact trace (`vramlens trace`, the editor's "Run exact trace": the whole step ran on the real libraries at the
trace interpreter's versions) and every probe (`vramlens probe`) appends one line to a JSON-lines file:

    {"arch": <model id>, "arch_hash", "settings_hash", "settings": {…}, "source": "trace" | "probe",
     "estimated_allocated": bytes, "measured_allocated": bytes, "gpu", "time", "vramlens", "estimator", "exact", …}

("estimator" is the formulas' revision, `vramlens.estimate.REVISION`: a record made against another one is ignored.)
A trace that was not exact — the synthetic stand-in, another objective than the config's, parts not traced — is
never recorded, and such a line written by an older vramlens is ignored (`applies`).

The calibration stage, between resolve and estimate: `calibrate(resolution)` sets the plan's `correction`
and `calibration` (factor, source, date, key) when a record applies; the estimate carries that
(`Estimate.calibration`) and every view names it in its headline (`vramlens.report.calibration_line`).
`vramlens estimate`, `check` and the editor run it; `trace` and `probe` compare against the
uncalibrated formulas (what they record is measured ÷ that). `vramlens calibration list|clear` shows and removes
records (`listing`, `clear`).

`correction_for(resolved_plan)` returns measured ÷ estimated of the nearest record for the same architecture
(same settings first, else the closest batch/sequence/precision/optimizer settings), bounded to [0.8, 1.25];
None when there is no close record or calibration is off.

Where: `$VRAMLENS_CALIBRATION` (a path), else `~/.cache/vramlens/calibration.jsonl` (`$XDG_CACHE_HOME` is
honoured when absolute and outside the current directory: a repository cannot ship its own calibration).
Off: `VRAMLENS_CALIBRATION=off`, or `configure(enabled=False)` (the editor setting).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramlens import __version__, file_access
from vramlens.resolved import Calibration, ResolvedPlan

if TYPE_CHECKING:
    from vramlens.resolve import Resolution

ENV = "VRAMLENS_CALIBRATION"
OFF_VALUES = {"off", "0", "false", "no", "none", "disabled"}
RATIO_BOUNDS = (0.8, 1.25)
MAX_DISTANCE = 3.0  # records further than this (see `distance`) are not "matching"
MAX_RECORDS = 5000  # read at most the last N lines

_setting: dict[str, Any] = {"enabled": None, "path": None}

# settings that change the allocated peak; differing ones add to the distance with these weights
_CATEGORICAL = {
    "precision": 2.0,
    "peft": 2.0,
    "quant": 2.0,
    "grad_checkpointing": 2.0,
    "optimizer": 1.5,
    "optimizer_impl": 1.0,
    "master_weights": 2.0,
    "set_to_none": 1.0,
    "attn_impl": 1.0,
    "repeat_kv": 0.5,
    "loss_impl": 1.5,
    "keep_logits": 0.5,
    "lora_targets": 1.0,
    "modules_to_save": 1.0,
    "adapter_fp32": 1.0,
    "kbit_upcast": 0.5,
    "packing": 0.5,
    "strategy": 2.0,
    "zero_stage": 2.0,
    "offload": 2.0,
    "activation_offload": 2.0,
    "compile": 1.0,
    "optimizer_in_bwd": 2.0,
    "tensor_parallel": 2.0,
    "context_parallel": 2.0,
    "framework": 1.0,
    "fused_qkv": 2.0,
    "quant_lm_head": 1.0,
    "quant_keeps_input": 2.0,
    "quant_dequant_fp16": 0.5,
    "lora_dropout": 1.0,
}
_NUMERIC = {"micro_batch": 0.5, "seq_len": 0.5, "grad_accum": 0.25, "lora_r": 0.25, "world_size": 1.0}


def configure(enabled: bool | None = None, path: str | os.PathLike | None = None) -> None:
    """Apply the editor/CLI setting (the environment variable still wins when it says "off")."""
    _setting["enabled"] = enabled
    _setting["path"] = Path(path).expanduser() if path else None


def calibration_path() -> Path | None:
    """The calibration file, or None when calibration is off."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in OFF_VALUES:
        return None
    if _setting["enabled"] is False:
        return None
    if env:
        return Path(env).expanduser()
    if _setting["path"] is not None:
        return _setting["path"]
    return file_access.user_cache_home() / "vramlens" / "calibration.jsonl"


def features(rp: ResolvedPlan) -> dict[str, Any]:
    """The settings of a plan that shape its allocated peak (the GPU and headroom do not)."""
    return {
        "precision": f"{rp.weight_dtype}/{rp.compute_dtype}/{'amp' if rp.amp else 'pure'}",
        "peft": rp.peft,
        "lora_r": rp.lora_r,
        "lora_targets": ",".join(sorted(rp.lora_targets)),
        "modules_to_save": ",".join(sorted(rp.modules_to_save)),
        "adapter_fp32": rp.adapter_fp32,
        "kbit_upcast": rp.kbit_upcast,
        "quant": f"{rp.quant_bits or 0}/{rp.quant_type}/{int(rp.quant_double)}" if rp.quant_bits else "none",
        "optimizer": rp.optimizer.name,
        "optimizer_impl": rp.optimizer_impl,
        "master_weights": rp.master_weights,
        "set_to_none": rp.set_to_none,
        "optimizer_in_bwd": rp.optimizer_in_bwd,
        "grad_checkpointing": rp.grad_checkpointing,
        "activation_offload": rp.activation_offload,
        "attn_impl": rp.attn_impl,
        "repeat_kv": rp.repeat_kv,
        "loss_impl": rp.loss_impl,
        "keep_logits": rp.keep_logits,
        "packing": rp.packing,
        "compile": rp.compile,
        "micro_batch": rp.micro_batch,
        "seq_len": rp.seq_len,
        "grad_accum": rp.grad_accum,
        "strategy": rp.strategy,
        "zero_stage": rp.zero_stage,
        "world_size": rp.world_size,
        "offload": f"{int(rp.offload_optimizer)}{int(rp.offload_params)}",
        "tensor_parallel": rp.tensor_parallel,
        "context_parallel": rp.context_parallel,
        "framework": rp.framework,
        "fused_qkv": rp.fused_qkv,
        "quant_lm_head": rp.quant_lm_head,
        "quant_keeps_input": rp.quant_keeps_input,
        "quant_dequant_fp16": rp.quant_dequant_fp16,
        "lora_dropout": rp.lora_dropout > 0,
    }


def _revision() -> int:
    from vramlens.estimate import REVISION

    return REVISION


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def arch_hash(rp: ResolvedPlan) -> str:
    return _hash(rp.arch.model_dump(exclude={"aliases", "source"}))


def settings_hash(rp: ResolvedPlan) -> str:
    return _hash(features(rp))


def record(
    rp: ResolvedPlan,
    *,
    source: str,
    estimated_allocated: int,
    measured_allocated: int,
    gpu: str | None = None,
    extra: dict | None = None,
    path: Path | None = None,
) -> dict | None:
    """Append one measurement; returns the record (None when calibration is off, or for a trace whose `extra`
    does not say `"exact": True`: only a step that ran whole on the real libraries measures what the formulas
    estimate)."""
    target = path or calibration_path()
    if target is None or estimated_allocated <= 0 or measured_allocated <= 0:
        return None
    if source == "trace" and (extra or {}).get("exact") is not True:
        return None
    rec = {
        "arch": rp.arch.id,
        "arch_hash": arch_hash(rp),
        "settings_hash": settings_hash(rp),
        "settings": features(rp),
        "source": source,
        "estimated_allocated": int(estimated_allocated),
        "measured_allocated": int(measured_allocated),
        "gpu": gpu,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "vramlens": __version__,
        "estimator": _revision(),
    }
    if extra:
        rec.update({k: v for k, v in extra.items() if k not in rec})
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec, sort_keys=True) + "\n")
    return rec


_cache: dict[Path, tuple[float, int, list[dict]]] = {}


def records(path: Path | None = None) -> list[dict]:
    """The recorded measurements, oldest first (malformed lines are skipped). Re-read only when the file
    changes: resolve asks on every keystroke."""
    target = path or calibration_path()
    if target is None:
        return []
    try:
        st = target.stat()
    except OSError:
        return []
    cached = _cache.get(target)
    if cached is not None and cached[:2] == (st.st_mtime, st.st_size):
        return cached[2]
    out = _read_records(target)
    _cache[target] = (st.st_mtime, st.st_size, out)
    return out


def _read_records(target: Path) -> list[dict]:
    out = []
    with open(target, encoding="utf-8", errors="replace") as fh:
        lines = fh.readlines()[-MAX_RECORDS:]
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("estimated_allocated") and rec.get("measured_allocated"):
            out.append(rec)
    return out


def applies(rec: dict) -> bool:
    """Whether a record may scale an estimate: a probe, or an exact trace, made against today's formulas."""
    if rec.get("estimator") != _revision():
        return False
    return rec.get("source") == "probe" or (rec.get("source") == "trace" and rec.get("exact") is True)


def why_not(rec: dict) -> str | None:
    """Why a record does not apply (None when it does), in words for `vramlens calibration list`."""
    if rec.get("estimator") != _revision():
        return "made against other formulas"
    if rec.get("source") == "trace" and rec.get("exact") is not True:
        return "not an exact trace"
    if rec.get("source") not in ("trace", "probe"):
        return f"unknown source {rec.get('source')!r}"
    return None


def record_key(rec: dict) -> str:
    """The key `vramlens calibration list` shows and `clear` takes: the hash of the settings (one model's
    records with these settings)."""
    return str(rec.get("settings_hash") or "")[:12]


def factor(rec: dict) -> float:
    """measured ÷ estimated allocated bytes of one record, bounded to RATIO_BOUNDS."""
    lo, hi = RATIO_BOUNDS
    return min(hi, max(lo, rec["measured_allocated"] / rec["estimated_allocated"]))


def distance(a: dict, b: dict) -> float:
    """How different two settings dicts are: weighted count of differing settings plus the log2 ratio of
    sizes (a doubled micro batch adds 0.5)."""
    d = 0.0
    for k, w in _CATEGORICAL.items():
        if a.get(k) != b.get(k):
            d += w
    for k, w in _NUMERIC.items():
        x, y = a.get(k), b.get(k)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x > 0 and y > 0:
            d += w * abs(math.log2(x / y))
        elif x != y:
            d += w
    return d


def nearest(rp: ResolvedPlan, path: Path | None = None) -> tuple[dict, float] | None:
    """The closest record for this architecture and its distance (latest wins ties); None if none is close."""
    ah, sh, feats = arch_hash(rp), settings_hash(rp), features(rp)
    best: tuple[dict, float] | None = None
    for rec in records(path):
        if rec.get("arch_hash") != ah or not applies(rec):
            continue  # another model, an inexact trace, or a ratio to other formulas
        dist = 0.0 if rec.get("settings_hash") == sh else distance(feats, rec.get("settings") or {})
        if dist <= MAX_DISTANCE and (best is None or dist <= best[1]):
            best = (rec, dist)
    return best


def calibrate(res: "Resolution") -> "Resolution":
    """The calibration stage: `res` with the local correction applied to its plan when a record applies
    (never fails: an unreadable file means no correction)."""
    import dataclasses

    try:
        applied = applied_for(res.resolved)
    except (OSError, ValueError):
        return res
    if applied is None or abs(applied.factor - 1.0) <= 1e-3:
        return res
    return dataclasses.replace(res, resolved=res.resolved.with_changes(correction=applied.factor, calibration=applied))


def applied_for(rp: ResolvedPlan, path: Path | None = None) -> Calibration | None:
    """The calibration the nearest matching record gives this plan: its bounded factor, source, date and key."""
    if path is None and calibration_path() is None:
        return None
    found = nearest(rp, path)
    if found is None:
        return None
    rec = found[0]
    return Calibration(factor=factor(rec), source=str(rec.get("source")), recorded=rec.get("time"), key=record_key(rec))


def correction_for(rp: ResolvedPlan, path: Path | None = None) -> float | None:
    """measured ÷ estimated allocated bytes of the nearest matching record, bounded to [0.8, 1.25]."""
    applied = applied_for(rp, path)
    return None if applied is None else applied.factor


def listing(path: Path | None = None) -> list[dict]:
    """Every record in the file, oldest first, as `vramlens calibration list` shows them: model, key, factor,
    source, date and why it does not apply (None when it does)."""
    return [
        {
            "model": rec.get("arch"),
            "key": record_key(rec),
            "factor": round(factor(rec), 4),
            "ratio": round(rec["measured_allocated"] / rec["estimated_allocated"], 4),
            "source": rec.get("source"),
            "recorded": rec.get("time"),
            "ignored": why_not(rec),
        }
        for rec in records(path)
    ]


def clear(*, keys: tuple[str, ...] = (), model: str | None = None, path: Path | None = None) -> int:
    """Remove the records whose key starts with one of `keys` or whose model is `model`; with neither, every
    record. Returns how many were removed. The file is rewritten whole (a temporary file renamed over it)."""
    target = path or calibration_path()
    if target is None:
        return 0
    try:
        with open(target, encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return 0

    def selected(line: str) -> bool:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return not keys and model is None  # a damaged line goes only with everything
        if not isinstance(rec, dict):
            return not keys and model is None
        if not keys and model is None:
            return True
        key = record_key(rec)
        return (model is not None and rec.get("arch") == model) or any(key and key.startswith(k) for k in keys)

    kept = [line for line in lines if line.strip() and not selected(line)]
    removed = sum(1 for line in lines if line.strip()) - len(kept)
    if removed:
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(kept)
        os.replace(tmp, target)
        _cache.pop(target, None)
    return removed
