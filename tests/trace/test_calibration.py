"""Measurements recorded locally correct later estimates for the same architecture (no torch needed)."""

from __future__ import annotations

import json

import pytest
from trace_plans import plan
from vramlens import calibration
from vramlens.knowledge.schema import ModelArch

EXACT = {"exact": True}  # only exact traces are recorded (a stand-in's ratio would scale every later estimate)


@pytest.fixture
def cal(tmp_path, monkeypatch):
    path = tmp_path / "calibration.jsonl"
    monkeypatch.setenv("VRAMLENS_CALIBRATION", str(path))
    calibration.configure(None, None)
    yield path
    calibration.configure(None, None)


def test_same_settings_give_the_measured_ratio(cal):
    rp = plan(micro_batch=4)
    calibration.record(rp, source="probe", estimated_allocated=100, measured_allocated=110, gpu="A100-80GB")
    assert calibration.correction_for(rp) == pytest.approx(1.10)
    line = json.loads(cal.read_text().splitlines()[0])
    assert line["arch"] == rp.arch.id and line["source"] == "probe" and line["settings_hash"]


def test_ratio_is_bounded(cal):
    calibration.record(plan(), source="trace", extra=EXACT, estimated_allocated=100, measured_allocated=400)
    assert calibration.correction_for(plan()) == 1.25
    calibration.record(plan(seq_len=256), source="trace", extra=EXACT, estimated_allocated=100, measured_allocated=10)
    assert calibration.correction_for(plan(seq_len=256)) == 0.8


def test_nearest_record_of_the_same_architecture_wins(cal):
    calibration.record(
        plan(micro_batch=1), source="trace", extra=EXACT, estimated_allocated=100, measured_allocated=105
    )
    calibration.record(
        plan(micro_batch=8, grad_checkpointing=True),
        source="trace",
        extra=EXACT,
        estimated_allocated=100,
        measured_allocated=120,
    )
    assert calibration.correction_for(plan(micro_batch=2)) == pytest.approx(1.05)
    assert calibration.correction_for(plan(micro_batch=8, grad_checkpointing=True, seq_len=256)) == pytest.approx(1.20)
    other = ModelArch(id="other", family="llama", hidden=512, layers=2, heads=8, intermediate=1024, vocab=1000)
    assert calibration.correction_for(plan(arch=other)) is None
    # a very different setup is not "matching"
    assert (
        calibration.correction_for(
            plan(peft="lora", lora_r=8, lora_targets=("q", "v"), quant_bits=4, amp=True, weight_dtype="fp32")
        )
        is None
    )


def test_off_switch_and_setting(cal, monkeypatch):
    calibration.record(plan(), source="trace", extra=EXACT, estimated_allocated=100, measured_allocated=110)
    monkeypatch.setenv("VRAMLENS_CALIBRATION", "off")
    assert calibration.correction_for(plan()) is None
    assert calibration.record(plan(), source="trace", extra=EXACT, estimated_allocated=1, measured_allocated=1) is None
    monkeypatch.setenv("VRAMLENS_CALIBRATION", str(cal))
    calibration.configure(enabled=False)
    assert calibration.correction_for(plan()) is None
    calibration.configure(enabled=True)
    assert calibration.correction_for(plan()) == pytest.approx(1.10)


def test_default_location_and_damaged_lines(tmp_path, monkeypatch):
    monkeypatch.delenv("VRAMLENS_CALIBRATION", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibration.calibration_path() == tmp_path / "vramlens" / "calibration.jsonl"
    calibration.record(plan(), source="trace", extra=EXACT, estimated_allocated=100, measured_allocated=90)
    with open(calibration.calibration_path(), "a") as fh:
        fh.write("{not json\n")
    assert calibration.correction_for(plan()) == pytest.approx(0.90)


def test_calibration_is_a_stage_of_its_own(cal):
    """resolve reads no file; `calibrate` applies the record and the estimate lists it in its assumptions."""
    from pathlib import Path as _Path

    from vramlens.estimate import estimate
    from vramlens.formats import parse_document
    from vramlens.resolve import resolve
    from vramlens.settings import Settings

    text = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n"
    res = resolve(parse_document(text, str(_Path(cal.parent) / "train.yaml")).plan, Settings(gpu="A10G"))
    calibration.record(res.resolved, source="probe", estimated_allocated=100, measured_allocated=115)
    assert (
        resolve(parse_document(text, str(cal.parent / "train.yaml")).plan, Settings(gpu="A10G")).resolved.correction
        == 1.0
    )
    calibrated = calibration.calibrate(res)
    assert calibrated.resolved.correction == pytest.approx(1.15)
    est = estimate(calibrated.resolved)
    assert any(a.startswith("calibrated: allocated memory scaled ×1.150") for a in est.assumptions)
    assert est.allocated_bytes > estimate(res.resolved).allocated_bytes


def test_the_cli_shows_the_calibration_it_applied(cal, tmp_path):
    import os
    import subprocess
    import sys

    from vramlens.formats import parse_file
    from vramlens.resolve import resolve
    from vramlens.settings import Settings

    config = tmp_path / "train.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n")
    res = resolve(parse_file(config, workspace=tmp_path).plan, Settings(gpu="A10G", workspace=tmp_path))
    calibration.record(res.resolved, source="trace", extra=EXACT, estimated_allocated=100, measured_allocated=120)

    def run(path: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "vramlens", "estimate", "train.yaml", "--gpu", "A10G", "--format", "json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "VRAMLENS_CALIBRATION": path},
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    on, off = run(str(cal)), run("off")
    assert [a for a in on["assumptions"] if a.startswith("calibrated: allocated memory scaled ×1.200")]
    assert not [a for a in off["assumptions"] if a.startswith("calibrated")]
    assert on["peak"]["allocated_gib"] > off["peak"]["allocated_gib"]


def test_the_suite_never_reads_the_users_cache():
    """tests/conftest.py points the calibration file and XDG_CACHE_HOME at a temporary folder for the session
    (and every CLI or server a test starts inherits them)."""
    import os
    import tempfile
    from pathlib import Path as _Path

    tmp = _Path(tempfile.gettempdir()).resolve()
    for name in ("VRAMLENS_CALIBRATION", "XDG_CACHE_HOME"):
        assert tmp in _Path(os.environ[name]).resolve().parents, (name, os.environ[name])
    assert _Path.home() / ".cache" not in _Path(os.environ["XDG_CACHE_HOME"]).resolve().parents
