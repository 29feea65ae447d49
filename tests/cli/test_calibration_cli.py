"""Local calibration as a user meets it: only exact traces and probes scale an estimate, the estimate's headline and
JSON say so (factor, source, date, key), and `vramlens calibration list|clear` shows and removes the records."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from vramlens import __version__, calibration
from vramlens.estimate import REVISION
from vramlens.formats import parse_file
from vramlens.resolve import resolve
from vramlens.settings import Settings

CONFIG = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.yaml").write_text(CONFIG)
    rp = resolve(
        parse_file(tmp_path / "train.yaml", workspace=tmp_path).plan, Settings(gpu="A10G", workspace=tmp_path)
    ).resolved
    return tmp_path, rp


def _line(rp, *, source: str, ratio: float, exact: bool | None, time: str) -> str:
    """One record as `calibration.record` writes it (and as older versions wrote inexact traces)."""
    rec = {
        "arch": rp.arch.id,
        "arch_hash": calibration.arch_hash(rp),
        "settings_hash": calibration.settings_hash(rp),
        "settings": calibration.features(rp),
        "source": source,
        "estimated_allocated": 1000,
        "measured_allocated": int(1000 * ratio),
        "gpu": None,
        "time": time,
        "vramlens": __version__,
        "estimator": REVISION,
    }
    if exact is not None:
        rec["exact"] = exact
    return json.dumps(rec) + "\n"


def _cli(cwd, *args):
    done = subprocess.run(
        [sys.executable, "-m", "vramlens", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, VRAMLENS_CALIBRATION=str(cwd / "cal.jsonl")),
    )
    return done


def _estimate(cwd, fmt="json"):
    done = _cli(cwd, "estimate", "train.yaml", "--gpu", "A10G", "--format", fmt)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if fmt == "json" else done.stdout


@pytest.mark.parametrize("source, exact", [("trace", False), ("trace", None), ("lens", True)])
def test_a_record_that_is_not_an_exact_trace_or_a_probe_scales_nothing(project, source, exact):
    cwd, rp = project
    (cwd / "cal.jsonl").write_text(_line(rp, source=source, ratio=1.45, exact=exact, time="2025-03-01T10:00:00+00:00"))
    out = _estimate(cwd)
    assert not [a for a in out["assumptions"] if a.startswith("calibrated")]
    assert out["calibration"] is None
    assert "calibrated" not in _estimate(cwd, "text")
    listed = json.loads(_cli(cwd, "calibration", "list", "--format", "json").stdout)["records"]
    assert len(listed) == 1 and listed[0]["ignored"] and listed[0]["factor"] == 1.25
    assert "no: " in _cli(cwd, "calibration", "list").stdout


@pytest.mark.parametrize("source, ratio, said", [("trace", 1.2, "an exact trace"), ("probe", 0.9, "a probe")])
def test_an_applied_calibration_is_in_the_headline_and_json_and_clear_removes_it(project, source, ratio, said):
    cwd, rp = project
    plain = _estimate(cwd)
    (cwd / "cal.jsonl").write_text(
        _line(
            rp, source=source, ratio=ratio, exact=True if source == "trace" else None, time="2025-03-01T10:00:00+00:00"
        )
    )
    out = _estimate(cwd)
    key = calibration.settings_hash(rp)[:12]
    assert out["calibration"] == {
        "factor": ratio,
        "source": source,
        "recorded": "2025-03-01T10:00:00+00:00",
        "key": key,
    }
    assert (out["peak"]["allocated_gib"] > plain["peak"]["allocated_gib"]) is (ratio > 1)
    text = _estimate(cwd, "text").splitlines()
    peak = next(i for i, line in enumerate(text) if line.lstrip().startswith("peak"))
    calibrated = next(i for i, line in enumerate(text) if "calibrated ×" in line)
    assert calibrated <= peak + 2 < next(i for i, line in enumerate(text) if line.lstrip().startswith("speed")) + 1
    assert f"calibrated ×{ratio:.3f} by {said} of 2025-03-01" in text[calibrated] and key in text[calibrated]

    listed = _cli(cwd, "calibration", "list")
    row = next(line for line in listed.stdout.splitlines() if key in line)
    assert rp.arch.id in row and f"×{ratio:.3f}" in row and source in row and "2025-03-01" in row and "yes" in row

    assert _cli(cwd, "calibration", "clear").returncode == 2  # says what to clear, clears nothing
    assert _cli(cwd, "calibration", "clear", "ffffffff").returncode == 2
    assert _estimate(cwd)["calibration"] is not None
    cleared = _cli(cwd, "calibration", "clear", key[:6])
    assert cleared.returncode == 0 and "removed 1" in cleared.stdout
    assert _estimate(cwd)["calibration"] is None
    assert "no calibration records" in _cli(cwd, "calibration", "list").stdout


def test_clear_by_model_and_all(project):
    cwd, rp = project
    other = rp.with_changes(micro_batch=8)
    (cwd / "cal.jsonl").write_text(
        _line(rp, source="probe", ratio=1.1, exact=None, time="2025-03-01T10:00:00+00:00")
        + _line(other, source="trace", ratio=1.1, exact=True, time="2025-03-02T10:00:00+00:00")
        + "{damaged\n"
    )
    assert len(json.loads(_cli(cwd, "calibration", "list", "--format", "json").stdout)["records"]) == 2
    assert "removed 2" in _cli(cwd, "calibration", "clear", "--model", rp.arch.id).stdout
    assert (cwd / "cal.jsonl").read_text() == "{damaged\n"  # only what was asked for
    assert "removed 1" in _cli(cwd, "calibration", "clear", "--all").stdout
    assert (cwd / "cal.jsonl").read_text() == ""
