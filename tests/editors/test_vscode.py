"""Real VS Code tier: the packaged .vsix in code-server (VS Code 1.139 in Chromium).

code-server runs on 127.0.0.1 with its own user-data, extensions and temp folders. Besides the
vramlens .vsix it gets a test-only probe extension (tests/editors/probe/) that runs in the same
extension host and reads what the editor received through the public VS Code API; Chromium
(playwright-core, Debian's browser) loads the page, hovers the squiggle, reads the breakdown
webview and takes the screenshot tests/artifacts/vscode-oom.png.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from editor_tools import (
    ARTIFACTS,
    CODE_SERVER,
    NODE24,
    PLAYWRIGHT_CORE,
    VSCE,
    OomExample,
    require_command,
    require_file,
)

pytestmark = pytest.mark.editor

HERE = Path(__file__).resolve().parent
PROBE = HERE / "probe"
DRIVER = HERE / "drive_vscode.cjs"
SCREENSHOT = ARTIFACTS / "vscode-oom.png"
# A quick fix whose title promises a fitting run, e.g. "... → peak 38.2 GiB (fits A100-40GB)",
# or else the "vramlens: Make it fit" source action.
FIX_PATTERN = r"\(fits |Make it fit"
NOTEBOOK = HERE.parent / "fixtures" / "notebooks" / "unsloth_llama3_1_8b_colab.ipynb"
# QLoRA with axolotl's `paged_adamw_8bit`: VL008 says whether bitsandbytes is installed where the server runs.
EIGHT_BIT_EXAMPLE = HERE.parents[1] / "examples" / "llama3-8b-qlora-a10g.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def package_probe(dest: Path, env: dict[str, str]) -> Path:
    src = dest / "probe-src"
    shutil.copytree(PROBE, src)
    vsix = dest / "probe.vsix"
    subprocess.run(
        [
            str(NODE24),
            str(VSCE),
            "package",
            "--no-dependencies",
            "--allow-missing-repository",
            "--skip-license",
            "-o",
            str(vsix),
        ],
        cwd=src,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return vsix


def wait_until_listening(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"code-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"code-server did not listen on port {port} within {timeout} s")


def stop_process_group(proc: subprocess.Popen) -> None:
    """Stop code-server and everything it started (extension host, language server, watcher)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived the main process
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


USER_SETTINGS = {
    "workbench.startupEditor": "none",
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "chat.disableAIFeatures": True,  # else code-server 4.139 starts an agent host process
    "workbench.tips.enabled": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "editor.hover.delay": 200,
    "vramlens.trace.server": "messages",
    # The server runs in the interpreter running these tests, the one whose `python -m vramlens` they compare the
    # editor with: both see the same installed packages (bitsandbytes, framework versions), in a virtual
    # environment too. (By default the extension would take `python3` from PATH, which an unactivated venv
    # is not on.)
    "vramlens.interpreter": [sys.executable],
}


@dataclass
class CodeServer:
    """code-server with its own folders under `root`, the .vsix and the probe installed."""

    root: Path
    env: dict[str, str]
    vsix: Path

    def run(
        self, file: Path, settings: dict, probe: dict, mode: str, screenshot: Path | None = None
    ) -> tuple[dict, dict]:
        """Open `file`'s folder in the browser and let the probe and the page driver do `mode`.

        Returns what the page showed and what the probe saw (both also saved in tests/artifacts).
        """
        data, extensions = self.root / "data", self.root / "extensions"
        # code-server is a remote window: machine-scoped settings such as vramlens.interpreter are
        # read from the server's Machine settings, the rest from User settings. Write both.
        for scope in ("User", "Machine"):
            (data / scope).mkdir(parents=True)
            (data / scope / "settings.json").write_text(json.dumps({**USER_SETTINGS, **settings}))
        cs = [str(CODE_SERVER), "--user-data-dir", str(data), "--extensions-dir", str(extensions)]
        for ext in (self.vsix, package_probe(self.root, self.env)):
            subprocess.run(
                [*cs, "--install-extension", str(ext), "--force"],
                env=self.env,
                check=True,
                capture_output=True,
                text=True,
                timeout=120,
            )
        probe_out, probe_go = self.root / "probe-result.json", self.root / "probe-go"
        probe_config = self.root / "probe-config.json"
        probe_config.write_text(
            json.dumps(
                {
                    "file": str(file),
                    "out": str(probe_out),
                    "go": str(probe_go),
                    "mode": mode,
                    "timeoutMs": 60000,
                    **probe,
                }
            )
        )
        port = free_port()
        with open(self.root / "code-server.log", "w") as log:
            server = subprocess.Popen(
                [
                    *cs,
                    "--bind-addr",
                    f"127.0.0.1:{port}",
                    "--auth",
                    "none",
                    "--disable-telemetry",
                    "--disable-update-check",
                    "--disable-workspace-trust",
                    "--disable-getting-started-override",
                    "--ignore-last-opened",
                    str(file.parent),
                ],
                env={**self.env, "VRAMLENS_PROBE_CONFIG": str(probe_config)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            wait_until_listening(port, server)
            driver = subprocess.run(
                [str(NODE24), str(DRIVER)],
                env={
                    **self.env,
                    "PLAYWRIGHT_CORE": str(PLAYWRIGHT_CORE),
                    "CHROMIUM": shutil.which("chromium"),
                    "URL": f"http://127.0.0.1:{port}/?folder={file.parent}",
                    "MODE": mode,
                    "PROBE_OUT": str(probe_out),
                    "PROBE_GO": str(probe_go),
                    "SCREENSHOT": str(screenshot or self.root / "page.png"),
                    "TIMEOUT_MS": "120000",
                },
                capture_output=True,
                text=True,
                timeout=180,
            )
        finally:
            stop_process_group(server)
            for ext_log in data.glob("logs/**/vramlens.vramlens/*.log"):
                shutil.copy(ext_log, ARTIFACTS / f"vscode-{mode}-vramlens.log")
        print(f"code-server {mode} run: {time.monotonic() - t0:.1f} s")
        assert driver.returncode == 0, f"browser driver failed:\n{driver.stdout}\n{driver.stderr[-3000:]}"
        page = json.loads(driver.stdout.strip().splitlines()[-1])
        result = json.loads(probe_out.read_text()) if probe_out.is_file() else {}
        (ARTIFACTS / f"vscode-{mode}-result.json").write_text(json.dumps({"page": page, "probe": result}, indent=2))
        assert "error" not in result, result["error"]
        return page, result


@pytest.fixture
def code_server(tmp_path: Path, vsix: Path) -> Iterator[CodeServer]:
    require_file(NODE24, "Node 24")
    require_file(CODE_SERVER, "code-server")
    require_file(PLAYWRIGHT_CORE, "playwright-core")
    require_command("chromium", "Chromium")
    # A short temp folder: code-server and Chromium put Unix sockets there (path limit 107 bytes).
    tmp = Path(tempfile.mkdtemp(prefix="vl-"))
    env = {
        **os.environ,
        "PATH": f"{NODE24.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # Keep code-server out of ~/.config, ~/.local/share, ~/.cache and /tmp.
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        "TMPDIR": str(tmp),
    }
    env.pop("VSCODE_IPC_HOOK_CLI", None)
    yield CodeServer(tmp_path, env, vsix)
    shutil.rmtree(tmp, ignore_errors=True)


def test_oom_diagnostic_hover_and_fix_in_vscode(
    tmp_path: Path, oom_example: OomExample, code_server: CodeServer
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config_file = workspace / oom_example.name
    shutil.copy(oom_example.path, config_file)
    original = config_file.read_text()
    SCREENSHOT.unlink(missing_ok=True)

    page, result = code_server.run(
        config_file,
        settings={"vramlens.gpu": oom_example.gpu},
        probe={"fixPattern": FIX_PATTERN, "hoverLines": {"model": oom_example.model_line()}},
        mode="oom",
        screenshot=SCREENSHOT,
    )
    assert result["extensionFound"] and result["extensionActive"], "vramlens extension did not activate"

    # The OOM error, on the line of the setting that dominates the peak.
    errors = [d for d in result["diagnostics"] if d["code"] == "VL001"]
    assert errors, f"no VL001 diagnostic; got {result['diagnostics']}"
    error = errors[0]
    assert error["severity"] == "error" and error["source"] == "vramlens"
    assert oom_example.gpu in error["message"], error["message"]
    assert error["line"] == oom_example.dominant_line(), (
        f"VL001 on line {error['line'] + 1}, expected line {oom_example.dominant_line() + 1}: "
        f"{original.splitlines()[error['line']]!r}"
    )

    # Hovers: the model key explains the budget; the page showed the diagnostic on hover.
    assert "GiB" in result["hovers"]["model"], result["hovers"]
    assert page["squiggle"], f"no error squiggle on the page: {page}"
    assert page["hoverText"] and ("VL001" in page["hoverText"] or error["message"][:40] in page["hoverText"]), page

    # The status bar itself shows the peak and the GPU, the same figures as the diagnostic.
    peak = re.search(r"peak (\d+(?:\.\d+)?) GiB", error["message"])
    assert peak, error["message"]
    assert page["statusBar"], f"no vramlens peak in the status bar; items: {page.get('statusBarItems')}"
    assert f"peak {float(peak.group(1)):g}/" in page["statusBar"] and oom_example.gpu in page["statusBar"], (
        page["statusBar"],
        error["message"],
    )

    # The output channel is not filled with pygls' notes on cancels of requests already answered.
    channel = ARTIFACTS / "vscode-oom-vramlens.log"
    assert channel.is_file(), "no vramlens output channel log"
    assert "Cancel notification for unknown message id" not in channel.read_text(errors="replace")

    # The breakdown chart rendered the estimate the server sent (a bar segment per component).
    assert page["breakdown"] and page["breakdown"]["segments"] >= 2, (page.get("breakdown"), page["console"])
    assert oom_example.gpu in page["breakdown"]["title"], page["breakdown"]

    # Quick fixes carry the new predicted peak in their titles; applying one fixes the file.
    titles = [a["title"] for a in result["quickFixes"]]
    assert any("→ peak" in t and "GiB" in t for t in titles), titles
    assert len(set(titles)) == len(titles), f"an action offered twice: {titles}"
    assert result["applied"], (
        f"no fix matching {FIX_PATTERN!r} among {titles + [a['title'] for a in result['sourceActions']]}"
    )
    assert result["saved"]
    assert config_file.read_text() != original, "applying the fix did not change the file"
    assert result["errorsClearedAfterFix"], (
        f"VL001 still reported after {result['applied']!r}: {result['diagnosticsAfterFix']}"
    )
    assert not [d for d in result["diagnosticsAfterFix"] if d["code"] == "VL001"]
    assert page["squiggleAfterFix"] == 0, "the error squiggle is still on the page after the fix"
    assert SCREENSHOT.is_file()


def test_missing_python_is_reported_with_show_logs(
    tmp_path: Path, oom_example: OomExample, code_server: CodeServer
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config_file = workspace / oom_example.name
    shutil.copy(oom_example.path, config_file)
    missing = tmp_path / "no-such-python" / "python3"

    page, result = code_server.run(
        config_file,
        settings={"vramlens.interpreter": [str(missing)]},
        probe={},
        mode="no-python",
        screenshot=ARTIFACTS / "vscode-no-python.png",
    )

    toast = page["notification"]
    assert toast, f"no error notification; page: {page}"
    assert "Python 3.10 or newer" in toast["text"] and str(missing) in toast["text"], toast
    assert "Show logs" in toast["buttons"], toast
    # "Show logs" opens the vramlens output channel with the same explanation.
    assert page["outputShown"], page
    assert result["diagnostics"] == [], "diagnostics without a server?"


def test_notebook_cells_get_their_squiggles_in_vscode(tmp_path: Path, code_server: CodeServer) -> None:
    """A Colab-style notebook (run too large for its T4): VS Code syncs it as a notebook, the errors land on their
    cells at the lines `vramlens check` reports for the .ipynb file, and the page shows the squiggle in the cell."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    notebook = workspace / NOTEBOOK.name
    # the published notebook fits a T4; with a micro-batch of 32 instead of 2 it does not (a VL001 in its cell)
    text = NOTEBOOK.read_text(encoding="utf-8")
    assert text.count("per_device_train_batch_size = 2,") == 1
    notebook.write_text(
        text.replace("per_device_train_batch_size = 2,", "per_device_train_batch_size = 32,"), encoding="utf-8"
    )
    page, result = code_server.run(
        notebook,
        settings={"vramlens.gpu": "T4"},
        probe={},
        mode="notebook",
        screenshot=ARTIFACTS / "vscode-notebook.png",
    )
    assert result["extensionFound"] and result["extensionActive"], "vramlens extension did not activate"
    assert result["notebookType"] == "jupyter-notebook" and "python" in result["cellLanguages"], result
    seen = {
        (d["code"], c["index"] + 1, d["line"] + 1, d["character"] + 1)
        for c in result["cellDiagnostics"]
        for d in c["diagnostics"]
    }
    check = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", str(notebook), "--gpu", "T4", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(check.stdout)["files"][0]["findings"]
    expected = {(f["rule"], f["cell"], f["start"]["line"], f["start"]["column"]) for f in findings}
    assert any(code == "VL001" for code, *_ in expected), expected
    assert seen == expected
    assert page["squiggle"], f"no error squiggle in a notebook cell: {page}"


def test_gpu_picker_ranks_gpus_for_the_open_config(
    tmp_path: Path, oom_example: OomExample, code_server: CodeServer
) -> None:
    """ "vramlens: Pick GPU" on a config that does not fit its GPU: every entry shows the run's peak / usable GiB
    and tokens/s (the figures of `vramlens gpus`), fitting GPUs first and fastest first, the rest marked as not
    fitting; taking the first sets vramlens.gpu to the fastest GPU that fits and the OOM error goes away."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config_file = workspace / oom_example.name
    shutil.copy(oom_example.path, config_file)

    page, result = code_server.run(
        config_file,
        settings={"vramlens.gpu": oom_example.gpu},
        probe={},
        mode="gpus",
        screenshot=ARTIFACTS / "vscode-gpu-picker.png",
    )
    assert result["extensionActive"], "vramlens extension did not activate"
    assert any(d["code"] == "VL001" for d in result["diagnostics"]), result["diagnostics"]

    # The server's ranking for the document: the rows `vramlens gpus --all` prints, in the same order.
    cli = subprocess.run(
        [sys.executable, "-m", "vramlens", "gpus", config_file.name, "--all", "--format", "json"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)["gpus"]
    ranked = result["listGpus"]
    assert [{k: g[k] for k in expected[0]} for g in ranked] == expected
    fitting = [g for g in ranked if g["fits"]]
    assert fitting and len(fitting) < len(ranked)

    # What the picker showed: the fastest fitting GPU first, with its peak / usable GiB and tokens/s.
    rows = page["pickerRows"]
    assert rows, f"no picker entries on the page: {page['console']}"
    assert config_file.name in page["pickerTitle"], page["pickerTitle"]
    first = fitting[0]
    assert first["name"] in rows[0]["text"], rows[0]
    assert f"{first['peak_gib']:.1f} / {first['usable_gib']:.1f} GiB" in rows[0]["text"], rows[0]
    assert f"{round(first['tokens_per_s']):,} tokens/s" in rows[0]["text"], rows[0]
    assert "fits this run" in rows[0]["text"], rows[0]  # the section separator
    not_fitting = [g for g in ranked if not g["fits"]]
    shown = page["pickerRowsNotFitting"]
    assert shown and all("does not fit" in r["text"] for r in shown), shown
    assert any(not_fitting[0]["name"] in r["text"] for r in shown), (not_fitting[0], shown)

    # Taking the first entry sets the GPU, and the run fits there.
    assert result["gpuSetting"] == first["name"], result.get("gpuSetting")
    assert result["errorsClearedAfterPick"], result["diagnosticsAfterPick"]


def _training_env(root: Path) -> Path:
    """A virtual environment whose packages differ from this interpreter's in bitsandbytes (installed here:
    none there; missing here: a stub there), and nothing else; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    if importlib.util.find_spec("bitsandbytes") is None:
        site = Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        (site / "bitsandbytes").mkdir(parents=True)
        (site / "bitsandbytes" / "__init__.py").write_text("")
    return python


def _check(python: Path | str, config: Path, **env: str) -> set[tuple[str, int]]:
    """(rule, 0-based line) of what `python -m vramlens check` reports for `config`."""
    proc = subprocess.run(
        [str(python), "-m", "vramlens", "check", config.name, "--format", "json"],
        cwd=config.parent,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return {(f["rule"], f["start"]["line"] - 1) for f in json.loads(proc.stdout)["files"][0]["findings"]}


def test_the_server_runs_in_the_interpreter_of_the_setting(tmp_path: Path, code_server: CodeServer) -> None:
    """With `vramlens.interpreter` naming a training environment, the server runs there: the editor shows what
    `vramlens check` run by that interpreter reports (here: whether `paged_adamw_8bit` finds bitsandbytes), not what
    the default interpreter would; the status bar item's tooltip names that interpreter and where it came from."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config_file = workspace / EIGHT_BIT_EXAMPLE.name
    shutil.copy(EIGHT_BIT_EXAMPLE, config_file)
    python = _training_env(tmp_path / "train-env")

    page, result = code_server.run(
        config_file,
        settings={"vramlens.interpreter": [str(python)]},
        probe={},
        mode="python",
        screenshot=ARTIFACTS / "vscode-interpreter.png",
    )
    assert result["extensionActive"], "vramlens extension did not activate"
    seen = {(d["code"], d["line"]) for d in result["diagnostics"]}

    # the same findings as the CLI in that environment, with the server the extension installed
    libs = next((tmp_path / "extensions").glob("vramlens.vramlens-*/bundled/libs"))
    there = _check(python, config_file, PYTHONPATH=str(libs))
    here = _check(sys.executable, config_file)
    assert {rule for rule, _ in there ^ here} == {"VL008"}, (there, here)
    assert seen == there, (seen, there, here)

    # the status bar item says which interpreter runs the server, and why that one
    tooltip = page["statusTooltip"]
    assert tooltip, f"no tooltip on the peak status bar item {page.get('statusBar')!r}: {page['console']}"
    assert f"at {python} (from the vramlens.interpreter setting)" in tooltip, tooltip
    assert "exact traces: the same" in tooltip, tooltip
    log = (ARTIFACTS / "vscode-python-vramlens.log").read_text(errors="replace")
    assert f"Starting server: {python} -m vramlens serve" in log, log[-3000:]
