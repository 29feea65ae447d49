"""Speed as well as memory: tokens/s, step time and MFU in every estimate, fixes that say what they cost in speed,
and `vramlens gpus` ranking the GPUs a run fits on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = """\
model_name_or_path: meta-llama/Llama-3.2-1B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: {mb}
gradient_accumulation_steps: 1
max_length: 2048
gradient_checkpointing: {ckpt}
optim: adamw_torch_fused
"""


def _estimate(tmp_path: Path, gpu: str = "A100-80GB", mb: int = 8, ckpt: bool = False) -> dict:
    cfg = tmp_path / f"sft-{gpu}-{mb}-{ckpt}.yaml"
    cfg.write_text(CONFIG.format(mb=mb, ckpt=str(ckpt).lower()))
    out = _cli("estimate", str(cfg), "--gpu", gpu, "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VRAMLENS_CALIBRATION": "off"},
    )


def test_a_full_fine_tune_has_throughput_with_a_plausible_mfu(tmp_path):
    t = _estimate(tmp_path)["throughput"]
    assert set(t) >= {"tokens_per_s", "step_s", "mfu", "bound"}
    assert 0.05 <= t["mfu"] <= 0.75
    assert t["tokens_per_s"] * t["step_s"] == pytest.approx(8 * 2048, rel=1e-3)
    assert t["bound"] in ("compute", "memory", "communication", "overhead", "generation", "offload")


def test_checkpointing_costs_15_to_45_percent_and_an_h100_is_faster_than_an_a100(tmp_path):
    plain = _estimate(tmp_path)["throughput"]["tokens_per_s"]
    ckpt = _estimate(tmp_path, ckpt=True)["throughput"]["tokens_per_s"]
    h100 = _estimate(tmp_path, gpu="H100")["throughput"]["tokens_per_s"]
    assert 1.15 <= plain / ckpt <= 1.45
    assert 1.5 <= h100 / plain <= 3.5


def test_a_larger_micro_batch_runs_faster_per_token(tmp_path):
    speeds = [_estimate(tmp_path, mb=mb)["throughput"]["tokens_per_s"] for mb in (1, 2, 8)]
    assert speeds[0] < speeds[1] < speeds[2]


def test_the_text_output_gives_tokens_per_second(tmp_path):
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(CONFIG.format(mb=8, ckpt="false"))
    out = _cli("estimate", str(cfg), "--gpu", "A100-80GB", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    speed = next(line for line in out.stdout.splitlines() if line.strip().startswith("speed"))
    assert "tokens/s per GPU" in speed and "MFU" in speed


def test_fix_titles_give_the_new_peak_and_the_speed_change(tmp_path):
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(CONFIG.format(mb=8, ckpt="false"))
    out = _cli("check", str(cfg), "--gpu", "L4", "--format", "json", cwd=tmp_path)
    findings = json.loads(out.stdout)["files"][0]["findings"]
    titles = [fix["title"] for f in findings for fix in f.get("fixes", [])]
    memory = [t for t in titles if "→ peak" in t]
    assert memory, out.stdout
    assert all("tokens/s" in t or "same speed" in t for t in memory), memory
    ckpt = next(t for t in memory if "checkpointing" in t.lower())
    assert "−" in ckpt.split("→")[1]  # recomputation costs speed


def test_gpus_lists_the_gpus_the_run_fits_fastest_first(tmp_path):
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(CONFIG.format(mb=8, ckpt="false"))
    out = _cli("gpus", str(cfg), "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["gpus"]
    names = [r["gpu"] for r in rows]
    assert rows and all(r["fits"] for r in rows)
    speeds = [r["run_tokens_per_s"] for r in rows]
    assert speeds == sorted(speeds, reverse=True)
    assert "H100-SXM" in names and "T4" not in names  # 8 × 2048 of a full 1B run does not fit 16 GB
    assert names.index("H100-SXM") < names.index("A100-80GB")
    text = _cli("gpus", str(cfg), cwd=tmp_path)
    assert "tokens/s per GPU" in text.stdout and "H100-SXM" in text.stdout


def _fixes(tmp_path: Path, text: str, gpu: str):
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    cfg = tmp_path / "run.yaml"
    cfg.write_text(text)
    a = analyze(text, str(cfg), Settings(gpu=gpu))
    oom = next(f for f in a.findings if f.rule_id == "VL001")
    return oom.fixes


def test_make_it_fit_keeps_a_full_fine_tune_full_and_picks_the_fastest_plan(tmp_path):
    """A full 1B fine-tune that fits a 24 GB card with checkpointing, 8-bit Adam or a smaller micro-batch: the
    plan stays a full fine-tune, and no single memory fix that fits runs faster than it."""
    fixes = _fixes(tmp_path, CONFIG.format(mb=8, ckpt="false"), "RTX 4090")
    fit = next(f for f in fixes if f.id == "make-it-fit")
    assert "LoRA" not in fit.title and "changes what is trained" not in fit.title
    assert "peft_method" not in fit.changes and "quant_bits" not in fit.changes
    assert fit.estimate_after.fits
    speed = fit.estimate_after.throughput.tokens_per_s
    for other in fixes:
        after = other.estimate_after
        if (
            other.id != "make-it-fit"
            and after is not None
            and "peft_method" not in other.changes
            and after.device_bytes <= after.usable_bytes * (1 - after.headroom_fraction)
        ):
            assert other.estimate_after.throughput.tokens_per_s <= speed * 1.0001, other.title


def test_make_it_fit_says_so_when_only_changing_what_is_trained_fits(tmp_path):
    """An 8B full fine-tune cannot fit 40 GB as a full fine-tune: the plan that fits trains adapters, and says so."""
    text = CONFIG.format(mb=1, ckpt="false").replace("Llama-3.2-1B", "Meta-Llama-3-8B")
    fit = next(f for f in _fixes(tmp_path, text, "A100-40GB") if f.id == "make-it-fit")
    assert fit.title.startswith("Make it fit (changes what is trained):") and "LoRA" in fit.title
