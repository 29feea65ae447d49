"""The rule set ships inside the wheel (as the `vramlens_rules` package, with each rule's documentation page) and
loads from an installed copy, whose diagnostics link to the installed pages."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_contains_and_loads_the_rule_set(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("vramlens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    rule_files = sorted(p.name for p in (ROOT / "rules").glob("vl*.py"))
    assert len(rule_files) >= 21
    for name in rule_files:
        assert f"vramlens_rules/{name}" in names
        assert f"vramlens_rules/docs/{name[:5].upper()}.md" in names
    assert "vramlens/rules/engine.py" in names and "vramlens/analysis.py" in names

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = (
        "import vramlens_rules, vramlens.rules as r; from vramlens.rules.docs import page_path; "
        "print(vramlens_rules.__file__); print(len(r.all_rules())); "
        "print(all(page_path(rule).is_file() and str(page_path(rule)).startswith(vramlens_rules.__path__[0]) "
        "for rule in r.all_rules()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out[0].startswith(str(site)) and out[1] == str(len(rule_files)) and out[2] == "True"
