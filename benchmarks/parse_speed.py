"""How long parsing a 2,000-line YAML config takes (the parse runs on every keystroke).

Builds a ~2,000-line axolotl config from the shared corpus (every axolotl example's entries, their
top-level keys made unique so the document stays one valid config), then times, in the same process:

  - `formats.parse_document` (detection, dialect, spans, hints; references are not on disk here)
  - `yaml_doc.load_yaml` alone (data + a Setting per entry, spans built lazily)
  - `yaml.safe_load` (pure-Python PyYAML, what axolotl/TRL call) and `yaml.load(CSafeLoader)`

and prints the median of each and the ratio parse_document / safe_load. Target: under 20 ms.

    python benchmarks/parse_speed.py [--runs 50] [--lines 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import yaml
from vramlens.formats import parse_document
from vramlens.formats.yaml_doc import load_yaml

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"


def build(lines_wanted: int) -> str:
    files = sorted((CORPUS / "axolotl").glob("*.y*ml"))
    out: list[str] = []
    i = 0
    while len(out) < lines_wanted:
        for f in files:
            for line in f.read_text(encoding="utf-8").splitlines():
                if i and line and not line[0].isspace() and line[0] not in "#-" and ":" in line:
                    key, _, rest = line.partition(":")
                    line = f"{key}_{i}:{rest}"  # later copies get unique top-level keys
                out.append(line)
            i += 1
            if len(out) >= lines_wanted:
                break
    return "\n".join(out[:lines_wanted]) + "\n"


def median_ms(fn, runs: int) -> tuple[float, float]:
    """(median wall ms, median CPU ms): on a busy machine wall time includes waiting for a core."""
    fn()
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--lines", type=int, default=2000)
    args = ap.parse_args()
    text = build(args.lines)
    path = "/bench/config.yaml"
    plan = parse_document(text, path).plan
    entries = len(load_yaml(text, path)[1])
    print(
        f"document: {len(text.splitlines())} lines, {len(text) / 1024:.0f} KiB, {entries} entries, "
        f"read as {plan.format if plan else None}"
    )
    parse = median_ms(lambda: parse_document(text, path), args.runs)
    load = median_ms(lambda: load_yaml(text, path), args.runs)
    safe = median_ms(lambda: yaml.safe_load(text), max(5, args.runs // 5))
    csafe = median_ms(lambda: yaml.load(text, Loader=yaml.CSafeLoader), args.runs)
    print("                          wall ms   CPU ms")
    print(f"parse_document          {parse[0]:8.2f} {parse[1]:8.2f}   (target < 20 ms)")
    print(f"  load_yaml alone       {load[0]:8.2f} {load[1]:8.2f}")
    print(
        f"yaml.safe_load          {safe[0]:8.2f} {safe[1]:8.2f}   "
        f"parse_document / safe_load = {parse[1] / safe[1]:.2f} (CPU)"
    )
    print(
        f"yaml.load(CSafeLoader)  {csafe[0]:8.2f} {csafe[1]:8.2f}   parse_document / CSafeLoader = "
        f"{parse[1] / csafe[1]:.2f} (CPU)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
