"""Time and memory for hostile documents: an alias bomb, 100,000-deep flow nesting, a 10 MB YAML file and a
binary file. Each is measured two ways:

  analyze   `vramlens.analysis.analyze` in a fresh process (after a warm-up analysis): wall time and growth of
            the peak RSS (ru_maxrss);
  server    `vramlens serve` over stdio: didOpen → publishDiagnostics time, and growth of the server's peak RSS
            (VmHWM) over its RSS before the open.

    python benchmarks/hostile_inputs.py
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "fuzz"), str(REPO / "tests" / "security")]

import hostile  # noqa: E402
from lsp_wire import Server  # noqa: E402

CASES = {"alias bomb": hostile.alias_bomb, "100k-deep flow": hostile.deep_flow, "10 MB YAML": hostile.ten_megabytes,
         "binary 64 KiB": hostile.binary}

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
    out = subprocess.run([sys.executable, "-c", IN_PROCESS, str(REPO / "tests" / "security"), name],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def in_server(make) -> dict:
    text = make()
    with tempfile.TemporaryDirectory() as tmp, Server(workspace=Path(tmp)) as s:
        s.initialize()
        warm = (Path(tmp) / "warm.yaml").as_uri()
        s.open(warm, hostile.HEADER)
        s.diagnostics(warm, 1)
        time.sleep(1.0)                       # let the warm-up thread and GPU detection finish
        before = _status(s.proc.pid, "VmRSS")
        uri = (Path(tmp) / "hostile.yaml").as_uri()
        mark = len(s.notifications)
        t = time.perf_counter()
        s.open(uri, text)
        diag = s.diagnostics(uri, 1, after=mark)
        dt = time.perf_counter() - t
        peak = _status(s.proc.pid, "VmHWM")
        return {"s": dt, "rss_mib": peak - before, "codes": [d.get("code") for d in diag["params"]["diagnostics"]],
                "message": (diag["params"]["diagnostics"] or [{}])[0].get("message", "")}


def main() -> None:
    print(f"{'input':16s} {'size':>9s} | {'analyze s':>9s} {'ΔRSS MiB':>8s} | {'server s':>8s} {'ΔRSS MiB':>8s} | diagnostic")
    for label, make in CASES.items():
        a = in_process(make.__name__)
        s = in_server(make)
        print(f"{label:16s} {a['chars'] / 2**20:7.2f}MB | {a['s']:9.3f} {a['rss_mib']:8.1f} | {s['s']:8.3f} "
              f"{s['rss_mib']:8.1f} | {','.join(map(str, s['codes']))}: {s['message'][:90]}")


if __name__ == "__main__":
    main()
