"""Editor-perceived latency of `vramlens serve`, next to yaml-language-server on the same YAML.

Drives each server over stdio the way an editor does (VS Code's recorded client capabilities):
initialize → initialized → didOpen → N single-character edits at typing pace (each waits for that
edit's diagnostics) → 20 edits each followed by a code-action request → M hovers. Prints p50/p90 of
change→diagnostics and of hover, the time to the initialize answer (from process start), and the server's RSS.

Before that, `--starts` bare starts (spawn → initialize → shutdown) with a fresh cache folder (XDG_CACHE_HOME
in a temporary directory); the first start also pays for compiling modules without a __pycache__ entry.
`benchmarks/startup.py` compares starts alone, with CPU time, against yaml-language-server or another checkout.

yaml-language-server (npm, needs Node ≥ 22.13) runs on the Node 24 that scripts/install-editor-tools.sh
puts in .tools/node24; the server itself is installed into .tools/yaml-language-server on first use.
It validates the same file against the matching JSON Schema from schemas/.

    python benchmarks/lsp_latency.py [--edits 200] [--hovers 50] [--starts 6] [--file examples/...yaml] [--no-yls]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pytest_lsp import client_capabilities

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / ".tools"
NODE = TOOLS / "node24" / "node_modules" / "node" / "bin" / "node"
YLS_DIR = TOOLS / "yaml-language-server"
YLS_VERSION = "2.0.0"
YLS_MAIN = YLS_DIR / "node_modules" / "yaml-language-server" / "bin" / "yaml-language-server"
YLS_VALIDATION_DELAY_MS = 200  # yaml-language-server 2.0.0, out/src/yamlSettings.js: validationDelayMs = 200
DEFAULT_FILE = REPO / "examples" / "llama3-8b-full-adamw-a100-40gb.yaml"
TIMEOUT_S = 30.0


# ----------------------------------------------------------------------------------- a tiny editor


class Session:
    """One server process, driven like an editor, with time stamps of what it sends back."""

    def __init__(self, name: str, command: list[str], settings: dict[str, Any], env: dict[str, str] | None = None):
        self.name = name
        self.command = command
        self.settings = settings
        self.env = env
        self.client = LanguageClient("lsp-latency-bench", "1")
        self.published: list[tuple[float, types.PublishDiagnosticsParams]] = []
        self._waiter: tuple[Any, asyncio.Future] | None = None
        self._install_handlers()

    def _install_handlers(self) -> None:
        c = self.client

        @c.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_publish(params: types.PublishDiagnosticsParams) -> None:
            now = time.perf_counter()
            self.published.append((now, params))
            if self._waiter is not None:
                match, fut = self._waiter
                if match(params) and not fut.done():
                    fut.set_result(now)

        @c.feature(types.WORKSPACE_CONFIGURATION)
        def on_configuration(params: types.ConfigurationParams) -> list[Any]:
            return [self.settings.get(item.section or "", None) for item in params.items]

        for method in (
            types.CLIENT_REGISTER_CAPABILITY,
            types.CLIENT_UNREGISTER_CAPABILITY,
            types.WINDOW_WORK_DONE_PROGRESS_CREATE,
            types.WORKSPACE_CODE_LENS_REFRESH,
            types.WORKSPACE_INLAY_HINT_REFRESH,
            types.WORKSPACE_SEMANTIC_TOKENS_REFRESH,
            types.WORKSPACE_DIAGNOSTIC_REFRESH,
        ):
            c.feature(method)(lambda params: None)
        for method in (
            types.WINDOW_LOG_MESSAGE,
            types.WINDOW_SHOW_MESSAGE,
            types.PROGRESS,
            "vramlens/estimate",
            types.TELEMETRY_EVENT,
        ):
            c.feature(method)(lambda params: None)

    @property
    def pid(self) -> int:
        return self.client._server.pid  # type: ignore[union-attr]

    async def start(self, root: Path) -> dict[str, float]:
        params = types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            process_id=os.getpid(),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
        )
        # This client's own converter builds its (un)structure functions on first use (~20-30 ms here):
        # done now, so the figure below is the server's time, not this Python client's.
        converter = self.client.protocol._converter
        converter.unstructure(params)
        converter.structure({"jsonrpc": "2.0", "id": 0, "result": {"capabilities": {}}}, types.InitializeResponse)
        t0 = time.perf_counter()
        await self.client.start_io(*self.command, env=self.env)
        await self.client.initialize_async(params)
        t2 = time.perf_counter()
        self.client.initialized(types.InitializedParams())
        self.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=self.settings))
        return {"spawn_to_initialize_s": t2 - t0}

    def expect(self, match) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiter = (match, fut)
        return fut

    async def wait(self, fut: asyncio.Future) -> float:
        try:
            return await asyncio.wait_for(fut, TIMEOUT_S)
        finally:
            self._waiter = None

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 5)
            self.client.exit(None)
        except Exception:
            pass
        await self.client.stop()


def rss_mib(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of a process in MiB, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    to_mib = lambda v: int(v.split()[0]) / 1024  # noqa: E731 - kB
    return to_mib(fields.get("VmRSS", "0 kB")), to_mib(fields.get("VmHWM", "0 kB"))


# ----------------------------------------------------------------------------------- the workload


def edit_site(text: str) -> tuple[int, int]:
    """(line, column) of a one-digit value to retype: the micro batch, else the first digit after a colon."""
    for i, line in enumerate(text.splitlines()):
        for key in ("per_device_train_batch_size:", "micro_batch_size:", "batch_size:"):
            if line.lstrip().startswith(key):
                col = line.index(key) + len(key)
                while col < len(line) and not line[col].isdigit():
                    col += 1
                if col < len(line):
                    return i, col
    for i, line in enumerate(text.splitlines()):
        if ":" in line and line.split(":", 1)[1].strip()[:1].isdigit():
            col = line.index(":") + 1
            while not line[col].isdigit():
                col += 1
            return i, col
    raise SystemExit("no numeric value to edit in the benchmark file")


def hover_sites(text: str) -> list[types.Position]:
    """A position on each top-level key."""
    out = []
    for i, line in enumerate(text.splitlines()):
        if line and not line.startswith((" ", "#", "-")) and ":" in line:
            out.append(types.Position(line=i, character=1))
    return out


async def run(
    session: Session, path: Path, edits: int, hovers: int, versioned: bool, pace: float, actions: int = 20
) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    uri = path.resolve().as_uri()
    out: dict[str, Any] = await session.start(path.parent.resolve())
    first = session.expect(lambda p: p.uri == uri)
    t = time.perf_counter()
    session.client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="yaml", version=1, text=text))
    )
    out["open_to_diagnostics_s"] = await session.wait(first) - t
    await asyncio.sleep(0.3)  # let start-up work (settings, schema loading) settle

    line, col = edit_site(text)
    change_ms = []
    next_send = time.perf_counter()
    for i in range(edits):
        # typing pace: one keystroke every `pace` s at most (the previous answer is always awaited first)
        delay = next_send - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        next_send = time.perf_counter() + pace
        version = i + 2
        digit = str(1 + i % 8)
        fut = session.expect(
            (lambda p, v=version: p.uri == uri and p.version == v) if versioned else (lambda p: p.uri == uri)
        )
        t = time.perf_counter()
        session.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(start=types.Position(line, col), end=types.Position(line, col + 1)),
                        text=digit,
                    )
                ],
            )
        )
        change_ms.append((await session.wait(fut) - t) * 1000)

    # quick fixes right after an edit: the first request of a version computes the fixes (re-estimates)
    action_ms = []
    end = types.Position(len(text.splitlines()) + 1, 0)
    for i in range(actions):
        version = edits + 2 + i
        fut = session.expect(
            (lambda p, v=version: p.uri == uri and p.version == v) if versioned else (lambda p: p.uri == uri)
        )
        session.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(start=types.Position(line, col), end=types.Position(line, col + 1)),
                        text=str(1 + i % 8),
                    )
                ],
            )
        )
        await session.wait(fut)
        diagnostics = list(session.published[-1][1].diagnostics)
        t = time.perf_counter()
        await asyncio.wait_for(
            session.client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=types.Range(types.Position(0, 0), end),
                    context=types.CodeActionContext(diagnostics=diagnostics),
                )
            ),
            TIMEOUT_S,
        )
        action_ms.append((time.perf_counter() - t) * 1000)

    sites = hover_sites(text)
    hover_ms = []
    answered = 0
    for i in range(hovers):
        pos = sites[i % len(sites)]
        t = time.perf_counter()
        result = await asyncio.wait_for(
            session.client.text_document_hover_async(
                types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=pos)
            ),
            TIMEOUT_S,
        )
        hover_ms.append((time.perf_counter() - t) * 1000)
        answered += result is not None
    out["rss_mib"], out["peak_rss_mib"] = rss_mib(session.pid)
    out["change_ms"] = change_ms
    out["hover_ms"] = hover_ms
    out["code_action_ms"] = action_ms
    out["hovers_answered"] = answered
    out["publishes"] = len(session.published)
    await session.stop()
    return out


async def bare_start(command: list[str], env: dict[str, str], root: Path) -> float:
    """Seconds from spawning the server to its initialize answer; then initialized, shutdown, exit."""
    session = Session("start", command, {"vramlens": {}}, env)
    out = await session.start(root)
    await session.stop()
    return out["spawn_to_initialize_s"]


# ----------------------------------------------------------------------------------- yaml-language-server


def ensure_yls(install: bool) -> bool:
    if not NODE.exists():
        print(f"yaml-language-server skipped: no Node 24 at {NODE} (run scripts/install-editor-tools.sh)")
        return False
    if YLS_MAIN.exists():
        return True
    if not install or shutil.which("npm") is None:
        print("yaml-language-server skipped: not installed in .tools/yaml-language-server")
        return False
    YLS_DIR.mkdir(parents=True, exist_ok=True)
    pkg = YLS_DIR / "package.json"
    if not pkg.exists():
        pkg.write_text(json.dumps({"name": "vramlens-tools-yaml-language-server", "private": True}, indent=2) + "\n")
    env = {**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    print(f"installing yaml-language-server@{YLS_VERSION} into {YLS_DIR} ...", flush=True)
    subprocess.run(
        ["npm", "--no-audit", "--no-fund", "--loglevel=error", "install", f"yaml-language-server@{YLS_VERSION}"],
        cwd=YLS_DIR,
        env=env,
        check=True,
    )
    return YLS_MAIN.exists()


def schema_for(path: Path) -> Path | None:
    """The JSON Schema from schemas/ for the file's format (as the server detects it)."""
    try:
        from vramlens.formats import parse_document

        fmt = parse_document(path.read_text(encoding="utf-8"), str(path)).plan.format
    except Exception:
        fmt = None
    folder = REPO / "schemas"
    for name in (f"{fmt}.schema.json", "hf.schema.json"):
        if fmt and (folder / name).exists():
            return folder / name
    found = sorted(folder.glob("*.schema.json"))
    return found[0] if found else None


# ----------------------------------------------------------------------------------- report


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def describe(name: str, r: dict[str, Any]) -> None:
    c, h = r["change_ms"], r["hover_ms"]
    print(f"\n{name}")
    print(f"  initialize        {r['spawn_to_initialize_s'] * 1000:7.0f} ms from process start to the answer")
    if r.get("starts_s"):
        cold, *warm = (round(s * 1000) for s in r["starts_s"])
        print(
            f"  bare starts       first {cold} ms; then {', '.join(map(str, warm))} ms"
            + (f" (median {statistics.median(warm):.0f} ms)" if warm else "")
        )
    print(f"  first diagnostics {r['open_to_diagnostics_s'] * 1000:7.1f} ms after didOpen")
    print(
        f"  change→diagnostics p50 {pct(c, 0.5):6.1f} ms   p90 {pct(c, 0.9):6.1f} ms   max {max(c):6.1f} ms"
        f"   ({len(c)} edits)"
    )
    print(
        f"  hover              p50 {pct(h, 0.5):6.1f} ms   p90 {pct(h, 0.9):6.1f} ms   max {max(h):6.1f} ms"
        f"   ({len(h)} hovers, {r['hovers_answered']} answered)"
    )
    a = r["code_action_ms"]
    if a:
        print(
            f"  code actions       p50 {pct(a, 0.5):6.1f} ms   p90 {pct(a, 0.9):6.1f} ms   max {max(a):6.1f} ms"
            f"   ({len(a)} requests, each the first after an edit)"
        )
    print(f"  RSS                {r['rss_mib']:6.1f} MiB now, {r['peak_rss_mib']:.1f} MiB peak")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE)
    ap.add_argument("--edits", type=int, default=200)
    ap.add_argument("--hovers", type=int, default=50)
    ap.add_argument(
        "--pace-ms",
        type=float,
        default=50.0,
        help="least time between two edits, like fast typing (default 50 ms = 20 keys/s)",
    )
    ap.add_argument("--starts", type=int, default=6, help="bare starts timed before the session (default 6)")
    ap.add_argument("--no-yls", action="store_true", help="skip yaml-language-server")
    ap.add_argument("--no-install", action="store_true", help="do not npm-install yaml-language-server")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    path = args.file.resolve()

    command = [sys.executable, "-m", "vramlens", "serve", "--stdio"]
    cache_home = tempfile.TemporaryDirectory(prefix="vramlens-bench-cache-")
    env = {**os.environ, "XDG_CACHE_HOME": cache_home.name}
    starts = [asyncio.run(bare_start(command, env, path.parent)) for _ in range(args.starts)]
    vramlens = Session("vramlens", command, {"vramlens": {}}, env)
    results = {
        "vramlens": asyncio.run(run(vramlens, path, args.edits, args.hovers, versioned=True, pace=args.pace_ms / 1000))
    }
    results["vramlens"]["starts_s"] = starts
    cache_home.cleanup()
    describe(f"vramlens serve ({path.name})", results["vramlens"])

    if not args.no_yls and ensure_yls(not args.no_install):
        schema = schema_for(path)
        yaml_settings = {
            "validate": True,
            "hover": True,
            "completion": True,
            "format": {"enable": False},
            "schemaStore": {"enable": False},
            "schemas": {schema.as_uri(): [path.name]} if schema else {},
        }
        yls = Session(
            "yaml-language-server",
            [str(NODE), str(YLS_MAIN), "--stdio"],
            {"yaml": yaml_settings, "": {"yaml": yaml_settings}},
        )
        results["yaml-language-server"] = asyncio.run(
            run(yls, path, args.edits, args.hovers, versioned=False, pace=args.pace_ms / 1000)
        )
        describe(
            f"yaml-language-server {YLS_VERSION} on Node {_node_version()} "
            f"(schema: {schema.name if schema else 'none'})",
            results["yaml-language-server"],
        )
        v, y = results["vramlens"], results["yaml-language-server"]
        ratio = pct(v["change_ms"], 0.5) / pct(y["change_ms"], 0.5)
        print(
            f"\nratio vramlens / yaml-language-server, change→diagnostics p50: {ratio:.2f} "
            f"(target ≤ 0.25); hover p50: {pct(v['hover_ms'], 0.5) / pct(y['hover_ms'], 0.5):.2f}"
        )
        # yaml-language-server debounces validation by a fixed validationDelayMs = 200
        # (out/src/yamlSettings.js of the npm package); without that wait its own work per edit is:
        own = pct(y["change_ms"], 0.5) - YLS_VALIDATION_DELAY_MS
        print(
            f"  (yaml-language-server waits a fixed {YLS_VALIDATION_DELAY_MS} ms before validating; without it "
            f"its p50 would be ≈ {own:.1f} ms, ratio {pct(v['change_ms'], 0.5) / max(own, 0.1):.2f})"
        )

    floor = import_floor_s()
    print(
        f"\nfor scale: a bare `python -c 'import lsprotocol.types'` (pygls' protocol types, imported by any "
        f"pygls server) takes {floor * 1000:.0f} ms here"
    )
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print(
            "note: PYTHONDONTWRITEBYTECODE is set here, so modules without a __pycache__ entry (an editable "
            "install's) are compiled from source on every start"
        )
    v = results["vramlens"]
    warm = v["starts_s"][1:] + [v["spawn_to_initialize_s"]]
    checks = [
        ("change→diagnostics p50 ≤ 20 ms", pct(v["change_ms"], 0.5) <= 20),
        ("change→diagnostics p90 ≤ 50 ms", pct(v["change_ms"], 0.9) <= 50),
        (
            "initialize ≤ 0.5 s from process start (median of the starts after the first)",
            statistics.median(warm) <= 0.5,
        ),
        ("RSS ≤ 120 MB", v["peak_rss_mib"] * 1.048576 <= 120),
    ]
    print("\ntargets: " + "; ".join(f"{label}: {'met' if ok else 'MISSED'}" for label, ok in checks))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def import_floor_s(runs: int = 3) -> float:
    """Best of a few runs of a Python process that only imports lsprotocol.types."""
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import lsprotocol.types"], check=True)
        best = min(best, time.perf_counter() - t)
    return best


def _node_version() -> str:
    try:
        return subprocess.run([str(NODE), "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
