"""Time to the `initialize` answer of `vramlens serve`, next to yaml-language-server started in the same run.

Each round spawns one vramlens server and one yaml-language-server (interleaved, so both see the same load on
the machine), sends `initialize` with VS Code's recorded client capabilities, stops the clock at the answer,
then sends initialized, shutdown and exit. Prints each server's times, min / median / max, the machine's load
average at the start and end, and, for scale, the time a bare `python -c "import lsprotocol.types"` takes
(the import any pygls server pays).

    python benchmarks/startup.py [--rounds 10] [--no-yls] [--baseline DIR]

`--baseline DIR` also times the server of another checkout of vramlens (its `server/` folder put first on
PYTHONPATH, same interpreter), in the same rounds: a before/after comparison under the same load, e.g.
`git archive <commit> server | tar -x -C /tmp/base` and `--baseline /tmp/base`.

The figures depend on the machine and on what else runs on it: compare the two servers of one run, not runs
on different days. yaml-language-server comes from .tools (see benchmarks/lsp_latency.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_latency import NODE, YLS_MAIN, YLS_VERSION, Session, ensure_yls, import_floor_s  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/PID/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def start_once(command: list[str], env: dict[str, str], root: Path) -> tuple[float, float]:
    """(wall seconds from spawn to the initialize answer, CPU seconds the server used until then)."""
    session = Session("start", command, {"vramlens": {}}, env)
    out = await session.start(root)
    cpu = cpu_seconds(session.pid)
    await session.stop()
    return out["spawn_to_initialize_s"], cpu


def summary(times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return (
        f"min {min(ms):5.0f} ms   median {statistics.median(ms):5.0f} ms   max {max(ms):5.0f} ms   "
        f"({', '.join(f'{m:.0f}' for m in ms)})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--no-yls", action="store_true", help="skip yaml-language-server")
    ap.add_argument("--baseline", type=Path, help="another checkout whose server is timed in the same rounds")
    args = ap.parse_args()

    root = REPO / "examples"
    vramlens_cmd = [sys.executable, "-m", "vramlens", "serve", "--stdio"]
    yls = not args.no_yls and ensure_yls(install=False)
    yls_cmd = [str(NODE), str(YLS_MAIN), "--stdio"]
    with tempfile.TemporaryDirectory(prefix="vramlens-bench-cache-") as cache_home:
        env = {**os.environ, "XDG_CACHE_HOME": cache_home}  # nothing from the user's cache
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {"vramlens": [], "yaml-language-server": [], "baseline": []}
        cpu: dict[str, list[float]] = {"vramlens": [], "yaml-language-server": [], "baseline": []}
        baseline_env = None
        if args.baseline is not None:
            baseline_env = {**env, "PYTHONPATH": str(args.baseline.resolve() / "server")}
        runs = [("vramlens", vramlens_cmd, env)]
        if baseline_env is not None:
            runs.append(("baseline", vramlens_cmd, baseline_env))
        if yls:
            runs.append(("yaml-language-server", yls_cmd, env))
        for _ in range(args.rounds):
            for name, command, run_env in runs:
                wall, used = asyncio.run(start_once(command, run_env, root))
                times[name].append(wall)
                cpu[name].append(used)
        load_after = os.getloadavg()

    print(
        "wall time = spawn → initialize answer; CPU = user+system seconds the server used until the answer "
        "(less sensitive to other load on the machine)"
    )
    print(
        f"spawn → initialize answer, {args.rounds} rounds on {os.cpu_count()} cores "
        f"(load average {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end)"
    )
    names = [("vramlens", "vramlens serve")]
    if times["baseline"]:
        names.append(("baseline", f"baseline {args.baseline}"))
    if yls:
        names.append(("yaml-language-server", f"yaml-language-server {YLS_VERSION}"))
    for key, label in names:
        print(f"  {label}\n    wall  {summary(times[key])}\n    CPU   {summary(cpu[key])}")
    if times["baseline"]:
        print("  (the baseline's first round is its first start: a startup cache it keeps is empty then)")
    if yls:
        ratio = statistics.median(times["vramlens"]) / statistics.median(times["yaml-language-server"])
        print(f"  ratio of the medians vramlens / yaml-language-server: {ratio:.2f}")
    print(f"for scale: `python -c 'import lsprotocol.types'` takes {import_floor_s() * 1000:.0f} ms (best of 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
