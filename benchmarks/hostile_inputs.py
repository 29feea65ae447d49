"""Time and memory for hostile documents: an alias bomb, 100,000-deep flow nesting, a 10 MB YAML file and a
binary file. Each is measured two ways:

  analyze   `vramlens.analysis.analyze` in a fresh process (after a warm-up analysis): wall time and growth of
            the peak RSS (ru_maxrss);
  server    `vramlens serve` over stdio: didOpen → publishDiagnostics time, and growth of the server's peak RSS
            (VmHWM) over its RSS before the open.

Then the CPU and memory bombs (tests/security/hostile.py), each analysed (diagnostics, then every fix a code
action would offer) in a fresh process under a 3 GiB address-space limit and a 120 s timeout, by this tree and
by an earlier revision (`--before`, default: the last commit before the bounds; its `server/` is exported with
`git archive`): a shell variable doubled per line (script and README), a 300 KB YAML base-60 integer, 4,000 and
60,000 duplicate keys, a path of 80,000 characters (workspace check), an f-string of 150,000 placeholders.
And two server figures: a 50 MB document and its later edits (edit → answer to a hover on another document),
and the server's handler-future table (RSS) after 2,000 edits.

    python benchmarks/hostile_inputs.py [--before REV] [--skip-before]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "fuzz"), str(REPO / "tests" / "security")]

import hostile  # noqa: E402
from lsp_wire import Server  # noqa: E402

CASES = {
    "alias bomb": hostile.alias_bomb,
    "100k-deep flow": hostile.deep_flow,
    "10 MB YAML": hostile.ten_megabytes,
    "binary 64 KiB": hostile.binary,
}

IN_PROCESS = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import hostile
from vramlens.analysis import Settings, analyze
text = getattr(hostile, sys.argv[2])()
analyze(hostile.HEADER, "warm.yaml", Settings(gpu="A100-80GB"))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
a = analyze(text, "hostile.yaml", Settings(gpu="A100-80GB"))
dt = time.perf_counter() - t
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "rss_mib": (after - before) / 1024, "chars": len(text),
                  "findings": [[f.rule_id, f.message] for f in a.findings]}))
"""


def _status(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def in_process(name: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, str(REPO / "tests" / "security"), name],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def in_server(make) -> dict:
    text = make()
    with tempfile.TemporaryDirectory() as tmp, Server(workspace=Path(tmp)) as s:
        s.initialize()
        warm = (Path(tmp) / "warm.yaml").as_uri()
        s.open(warm, hostile.HEADER)
        s.diagnostics(warm, 1)
        time.sleep(1.0)  # let the warm-up thread and GPU detection finish
        before = _status(s.proc.pid, "VmRSS")
        uri = (Path(tmp) / "hostile.yaml").as_uri()
        mark = len(s.notifications)
        t = time.perf_counter()
        s.open(uri, text)
        diag = s.diagnostics(uri, 1, after=mark)
        dt = time.perf_counter() - t
        peak = _status(s.proc.pid, "VmHWM")
        return {
            "s": dt,
            "rss_mib": peak - before,
            "codes": [d.get("code") for d in diag["params"]["diagnostics"]],
            "message": (diag["params"]["diagnostics"] or [{}])[0].get("message", ""),
        }


BOMBS = [  # label, generator, its argument, path analysed as
    ("shell doubling 63 lines", "shell_doubling", 63, "train.sh"),
    ("README ```bash doubling", "shell_doubling_readme", 63, "README.md"),
    ("YAML base-60 300 KB", "base60_int", 300_000, "cfg.yaml"),
    ("4,000 duplicate keys", "repeated_keys", 4_000, "cfg.yaml"),
    ("60,000 duplicate keys", "repeated_keys", 60_000, "cfg.yaml"),
    ("path m/ x 40,000", "long_path", 40_000, "cfg.yaml"),
    ("f-string 150,000 {x}", "fstring_placeholders", 150_000, "train.py"),
]
BOMB_AS_LIMIT = 3 << 30
BOMB_TIMEOUT_S = 120

BOMB = """
import json, pathlib, resource, sys, time
sys.path.insert(0, sys.argv[1])
import hostile
import vramlens.analysis
from vramlens.analysis import analyze
if hasattr(vramlens.analysis, "AnalysisSettings"):     # the revision before the bounds
    Settings = vramlens.analysis.AnalysisSettings
else:                                                 # this tree: one settings model
    from vramlens.settings import Settings
ws = pathlib.Path(sys.argv[5])
settings = Settings(gpu="A100-80GB", workspace=ws)
text = getattr(hostile, sys.argv[2])(int(sys.argv[3]))
analyze(hostile.HEADER, str(ws / "warm.yaml"), settings)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
a = analyze(text, str(ws / sys.argv[4]), settings)
t1 = time.perf_counter()
fixes = sum(len(f.fixes) for f in a.findings)
t2 = time.perf_counter()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": t1 - t, "fix_s": t2 - t1, "rss_mib": (after - before) / 1024, "n": len(a.findings),
                  "first": (a.findings[0].rule_id + " " + a.findings[0].message[:70]) if a.findings else ""}))
"""


def _bomb_limits() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (BOMB_AS_LIMIT, BOMB_AS_LIMIT))


def bomb(name: str, arg: int, path: str, pythonpath: str | None) -> str:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as ws:
        try:
            out = subprocess.run(
                [sys.executable, "-c", BOMB, str(REPO / "tests" / "security"), name, str(arg), path, ws],
                capture_output=True,
                text=True,
                timeout=BOMB_TIMEOUT_S,
                env=env,
                preexec_fn=_bomb_limits,
            )
        except subprocess.TimeoutExpired:
            return f"> {BOMB_TIMEOUT_S} s (killed)"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed: {last[:60]}"
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return (
        f"{r['s']:7.2f} s  fixes {r['fix_s']:6.2f} s  ΔRSS {r['rss_mib']:6.0f} MiB  "
        f"{r['n']:>5} findings  {r['first'][:50]}"
    )


def export(rev: str, into: str) -> str:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "server", "rules", "schemas"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return str(Path(into) / "server")


def huge_document_edits(pythonpath: str | None, edits: int = 3) -> str:
    """A 50 MB YAML document opened, then `edits` keystrokes in it, each followed by a hover on a small
    document: seconds from the keystroke to the hover's answer."""
    env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp())
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    text = hostile.HEADER + "x" * (50 * 2**20) + "\n"
    with tempfile.TemporaryDirectory() as tmp, Server(workspace=Path(tmp), env=env) as s:
        s.initialize()
        small = (Path(tmp) / "small.yaml").as_uri()
        s.open(small, hostile.HEADER)
        s.diagnostics(small, 1)
        big = (Path(tmp) / "big.yaml").as_uri()
        t = time.perf_counter()
        s.open(big, text)
        s.diagnostics(big, 1, timeout=300)
        open_s = time.perf_counter() - t
        times = []
        for v in range(2, 2 + edits):
            pos = {"line": 0, "character": v}
            t = time.perf_counter()
            s.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": big, "version": v},
                    "contentChanges": [{"range": {"start": pos, "end": pos}, "text": "a"}],
                },
            )
            s.request(
                "textDocument/hover",
                {"textDocument": {"uri": small}, "position": {"line": 0, "character": 3}},
                timeout=300,
            )
            times.append(time.perf_counter() - t)
        published = sum(
            1
            for _, m in s.notifications
            if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == big
        )
        return (
            f"open → VL016 {open_s:5.2f} s; edit → other document's hover "
            + ", ".join(f"{x:.2f}" for x in times)
            + f" s; {published} publish(es) for it"
        )


def edit_storm_rss(pythonpath: str | None, edits: int = 2_000) -> str:
    """RSS of the server before and after `edits` small edits (the handler-future table grows per edit)."""
    env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp())
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as tmp, Server(workspace=Path(tmp), env=env) as s:
        s.initialize()
        uri = (Path(tmp) / "cfg.yaml").as_uri()
        s.open(uri, hostile.HEADER)
        s.diagnostics(uri, 1)
        for v in range(2, 202):  # warm up allocator pools
            s.notify(
                "textDocument/didChange",
                {"textDocument": {"uri": uri, "version": v}, "contentChanges": [{"text": hostile.HEADER + f"# {v}\n"}]},
            )
        s.diagnostics(uri, 201)
        time.sleep(0.5)
        before = s.rss_mib()
        last = 201 + edits
        for v in range(202, last + 1):
            s.notify(
                "textDocument/didChange",
                {"textDocument": {"uri": uri, "version": v}, "contentChanges": [{"text": hostile.HEADER + f"# {v}\n"}]},
            )
        s.diagnostics(uri, last, timeout=300)
        time.sleep(0.5)
        after = s.rss_mib()
        return (
            f"RSS {before:.1f} → {after:.1f} MiB after {edits:,} edits "
            f"({(after - before) * 1024 / edits:+.2f} KiB/edit)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="a498935", help="revision to compare with (default: before the bounds)")
    ap.add_argument("--skip-before", action="store_true", help="measure this tree only")
    args = ap.parse_args()
    hostile_documents()
    with tempfile.TemporaryDirectory() as tmp:
        old = None if args.skip_before else export(args.before, tmp)
        print(
            f"\nCPU and memory bombs (analysis + fixes, fresh process, {BOMB_AS_LIMIT >> 30} GiB address-space "
            f"limit, {BOMB_TIMEOUT_S} s timeout)"
        )
        for label, name, arg, path in BOMBS:
            if old is not None:
                print(f"  {label:26s} before {bomb(name, arg, path, old)}")
            print(f"  {label:26s} after  {bomb(name, arg, path, None)}")
        print("\nServer: a 50 MB document")
        if old is not None:
            print(f"  before {huge_document_edits(old)}")
        print(f"  after  {huge_document_edits(None)}")
        print("\nServer: memory across an edit storm (whole-document edits, no waiting)")
        if old is not None:
            print(f"  before {edit_storm_rss(old)}")
        print(f"  after  {edit_storm_rss(None)}")


def hostile_documents() -> None:
    print(
        f"{'input':16s} {'size':>9s} | {'analyze s':>9s} {'ΔRSS MiB':>8s} | "
        f"{'server s':>8s} {'ΔRSS MiB':>8s} | diagnostic"
    )
    for label, make in CASES.items():
        a = in_process(make.__name__)
        s = in_server(make)
        print(
            f"{label:16s} {a['chars'] / 2**20:7.2f}MB | {a['s']:9.3f} {a['rss_mib']:8.1f} | {s['s']:8.3f} "
            f"{s['rss_mib']:8.1f} | {','.join(map(str, s['codes']))}: {s['message'][:90]}"
        )


if __name__ == "__main__":
    main()
