"""Files vramlens trusts from the user's cache (the calibration) come only from an absolute cache folder
outside the folder it was started in: a repository cannot ship a `calibration.jsonl` that turns "does not
fit" into "fits" by setting a relative XDG_CACHE_HOME (direnv, a .env file, a task runner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vramlens import calibration
from vramlens.analysis import analyze

ROOT = Path(__file__).resolve().parents[2]
OOM_EXAMPLE = ROOT / "examples" / "llama3-8b-full-adamw-a100-40gb.yaml"


def _estimate(config: Path, cwd: Path, home: Path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("VRAMLENS_CALIBRATION", "XDG_CACHE_HOME")}
    environ.update(HOME=str(home), **env)
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(config), "--format", "json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )
    assert out.returncode in (0, 1), out.stderr
    result = json.loads(out.stdout)
    return result[0] if isinstance(result, list) else result


def _shipped_calibration(folder: Path, config: Path, monkeypatch) -> None:
    """A calibration record saying this very plan measured at 0.8 × the estimate (the bound)."""
    monkeypatch.setenv("VRAMLENS_CALIBRATION", "off")
    rp = analyze(config.read_text(), str(config)).resolution.resolved
    path = folder / "vramlens" / "calibration.jsonl"
    path.parent.mkdir(parents=True)
    monkeypatch.setenv("VRAMLENS_CALIBRATION", str(path))
    calibration.configure(None, None)
    try:
        assert (
            calibration.record(rp, source="probe", estimated_allocated=100, measured_allocated=50, gpu="A100-40GB")
            is not None
        )
    finally:
        calibration.configure(None, None)


def test_relative_xdg_cache_home_in_a_repository_is_not_read(tmp_path, monkeypatch):
    repo, home, elsewhere = tmp_path / "repo", tmp_path / "home", tmp_path / "cache"
    repo.mkdir()
    home.mkdir()
    config = repo / "train.yaml"
    config.write_text(OOM_EXAMPLE.read_text())
    _shipped_calibration(repo / ".cache", config, monkeypatch)
    _shipped_calibration(elsewhere, config, monkeypatch)

    plain = _estimate(config, repo, home, VRAMLENS_CALIBRATION="off")
    # the same file in the user's own (absolute, outside the repository) cache does apply: the record is good
    calibrated = _estimate(config, repo, home, XDG_CACHE_HOME=str(elsewhere))
    assert calibrated["headroom_gib"] > plain["headroom_gib"]
    # relative, and absolute but inside the repository: ignored, the figures are the formulas' own
    for value in (".cache", str(repo / ".cache")):
        shipped = _estimate(config, repo, home, XDG_CACHE_HOME=value)
        assert shipped["headroom_gib"] == plain["headroom_gib"], value
        assert shipped["fits"] is False
