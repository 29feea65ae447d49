"""Neovim tier: headless Neovim 0.7 with its built-in LSP client and `vramlens serve`.

The client is set up like the README's "Editor setup" snippet: vim.lsp.start_client with the
settings pushed in on_init (Neovim 0.7 does not answer workspace/configuration).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from editor_tools import ARTIFACTS, OomExample, require_command

pytestmark = pytest.mark.editor

HERE = Path(__file__).resolve().parent
FIX_PATTERN = r"(fits \|Make it fit"  # Vim regex: a fix that promises a fitting run
README = HERE.parents[1] / "README.md"


def readme_diagnostic_config() -> str:
    """The `vim.diagnostic.config(...)` line of the README's Neovim setup snippet."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Neovim") :]
    section = section[: section.index("\n## ", 1) if "\n## " in section else len(section)]
    found = re.findall(r"^vim\.diagnostic\.config\(.*\)$", section, flags=re.MULTILINE)
    assert found, "the README's Neovim snippet does not set vim.diagnostic.config"
    return found[0]


def run_neovim(tmp_path: Path, example: OomExample) -> dict:
    nvim = require_command("nvim", "Neovim")
    config_file = tmp_path / example.name
    shutil.copy(example.path, config_file)
    out = tmp_path / "nvim-result.json"
    job = tmp_path / "nvim-config.json"
    job.write_text(
        json.dumps(
            {
                "file": str(config_file),
                "out": str(out),
                "cmd": [sys.executable, "-m", "vramlens", "serve", "--stdio"],
                "settings": {"vramlens": {"gpu": example.gpu, "gpuCount": 1, "headroom": 0.1}},
                "hover_line": example.model_line(),
                "fix_pattern": FIX_PATTERN,
                "diagnostic_config": readme_diagnostic_config(),
            }
        )
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [nvim, "--headless", "--clean", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {HERE / 'lsp_check.lua'}"],
        env={**os.environ, "VRAMLENS_NVIM_CONFIG": str(job)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    print(f"neovim run: {time.monotonic() - t0:.1f} s")
    assert proc.returncode == 0 and out.is_file(), f"nvim failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(out.read_text())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "neovim-result.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    assert "error" not in result, result["error"]
    result["text_after"] = config_file.read_text()
    return result


def test_oom_diagnostic_hover_and_fix_in_neovim(tmp_path: Path, oom_example: OomExample) -> None:
    result = run_neovim(tmp_path, oom_example)

    assert result["filetype"] == "yaml"
    assert result["diagnostics_ok"], f"no VL001 within 60 s; got {result['diagnostics']}"
    error = next(d for d in result["diagnostics"] if d["code"] == "VL001")
    assert error["severity"] == 1 and error["source"] == "vramlens"  # 1 = vim.diagnostic.severity.ERROR
    assert oom_example.gpu in error["message"], "settings pushed in on_init did not reach the server"
    assert error["lnum"] == oom_example.dominant_line(), error
    # with the README's settings the sign column shows the error, not a warning on the same line (VL004 there)
    signs = result["signs_on_error_line"]
    assert any(d["code"] != "VL001" and d["lnum"] == error["lnum"] for d in result["diagnostics"]), result[
        "diagnostics"
    ]
    assert signs and signs[0]["name"] == "DiagnosticSignError", signs

    assert isinstance(result["hover_model"], str) and "GiB" in result["hover_model"], result["hover_model"]

    # The server's own notification: the estimate behind the diagnostics.
    estimate = result["estimate_before_fix"]
    assert estimate, "no vramlens/estimate notification"
    assert estimate["gpu"]["name"] == oom_example.gpu and estimate["fits"] is False, estimate

    titles = [a["title"] for a in result["code_actions"]]
    assert any("→ peak" in t and "GiB" in t for t in titles), titles
    assert len(set(titles)) == len(titles), f"an action offered twice: {titles}"
    assert result.get("applied"), f"no action matching {FIX_PATTERN!r} among {titles}"
    assert result["text_changed"], f"{result['applied']!r} did not change the buffer"
    assert result["cleared_after_fix"], (
        f"VL001 still there after {result['applied']!r}: {result['diagnostics_after_fix']}"
    )
    assert result["estimates"][-1]["fits"] is True, result["estimates"][-1]
    assert result["stopped"], "the server did not shut down when the client stopped"


def test_gpu_ranking_command_in_neovim(tmp_path: Path, oom_example: OomExample) -> None:
    """`vramlens.listGpus` with the buffer's URI (the README's Neovim snippet) gives the figures of `vramlens gpus`."""
    result = run_neovim(tmp_path, oom_example)
    gpus = result["gpus"]
    assert isinstance(gpus, list) and gpus, gpus
    cli = subprocess.run(
        [sys.executable, "-m", "vramlens", "gpus", oom_example.name, "--all", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)["gpus"]
    assert [{k: g[k] for k in expected[0]} for g in gpus] == expected
    fitting = [g for g in gpus if g["fits"]]
    assert fitting and gpus[: len(fitting)] == fitting and oom_example.gpu not in {g["name"] for g in fitting}
