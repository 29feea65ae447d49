"""How many real configs vramlens recognises and estimates, per format, and why the others get no estimate.

Walks every config it can find — the shared corpus (`../shared/corpus`, when present), the test fixtures
(`tests/fixtures`) and `examples/` — through the same pipeline as `vramlens check` (`analysis.analyze`), with
the Hub lookup off (nothing leaves the machine; models come from the catalog, local folders and the local
Hugging Face cache). For each format it counts files, files recognised as configs, files estimated, predicted
out-of-memory findings (VL001), files recognised as not being a training run (inference, generation, merge,
export, evaluation, quantization), and the reasons the rest got no estimate. Prints the table and writes it to
`benchmarks/results/real_configs.txt`.

    python benchmarks/real_configs.py [--out benchmarks/results/real_configs.txt] [--list]
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")     # the benchmark never reaches the network

from vramlens.analysis import analyze            # noqa: E402
from vramlens.cli.paths import iter_config_files, read_config_text  # noqa: E402
from vramlens.settings import Settings           # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT.parent / "shared" / "corpus", ROOT / "tests" / "fixtures", ROOT / "examples"]

# why-not reasons: the first pattern that matches the analysis error names the reason
REASONS = [
    (re.compile(r"unknown model|not in the catalog", re.I), "unknown model"),
    (re.compile(r"does not name a model", re.I), "partial config (no model: read through the configs using it)"),
    (re.compile(r"syntax error|could not be read|not valid", re.I), "syntax error"),
    (re.compile(r"unknown GPU", re.I), "unknown GPU"),
    (re.compile(r"internal error", re.I), "internal error"),
]


def reason(error: str | None) -> str:
    if not error:
        return "not a config"
    for pattern, label in REASONS:
        if pattern.search(error):
            return label
    return error.split(":")[0][:60]


def collect(sources: list[Path]) -> list[tuple[Path, Path]]:
    """(source root, file) for every candidate config file under the sources that exist."""
    out = []
    for root in sources:
        if root.exists():
            out.extend((root, f) for f in iter_config_files([root]))
    return out


def run(files: list[tuple[Path, Path]], listing: bool) -> str:
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    why: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    lines_out: list[str] = []
    for root, path in files:
        try:
            text = read_config_text(path, errors="replace")
        except OSError as exc:
            fmt, estimated, cause, vl001, not_training = path.suffix or "(none)", False, f"unreadable: {exc}", 0, False
        else:
            a = analyze(text, str(path), Settings(workspace=path.parent, model_lookup=False))
            not_training = any(f.rule_id == "VL018" for f in a.findings)
            fmt = a.plan.format if a.plan is not None else f"other {path.suffix or '(none)'}"
            estimated = a.estimate is not None
            cause = "" if estimated else ("not a training run" if not_training else reason(a.error))
            vl001 = sum(1 for f in a.findings if f.rule_id == "VL001")
        row = rows[fmt]
        row["files"] += 1
        row["recognised"] += fmt.startswith("other") is False or not_training
        row["estimated"] += estimated
        row["VL001"] += bool(vl001)
        row["not training"] += not_training
        if cause:
            why[fmt][cause] += 1
        if listing:
            lines_out.append(f"{'estimated' if estimated else cause:<40} {fmt:<16} {path.relative_to(root.parent)}")
    total = collections.Counter()
    for row in rows.values():
        total.update(row)
    cols = ("files", "recognised", "estimated", "VL001", "not training")
    out = [f"{len(files)} files from {', '.join(str(s.relative_to(ROOT.parent)) for s in SOURCES if s.exists())}",
           "(Hub lookup off: models from the catalog, local folders and the local Hugging Face cache)", "",
           f"{'format':<18}" + "".join(f"{c:>14}" for c in cols) + "   why no estimate"]
    for fmt in sorted(rows, key=lambda f: (f.startswith("other"), -rows[f]["files"], f)):
        row = rows[fmt]
        reasons = "; ".join(f"{n} {r}" for r, n in why[fmt].most_common())
        out.append(f"{fmt:<18}" + "".join(f"{row[c]:>14}" for c in cols) + f"   {reasons}")
    out.append(f"{'all':<18}" + "".join(f"{total[c]:>14}" for c in cols))
    model_named = sum(rows[f]["estimated"] + sum(n for r, n in why[f].items() if r == "unknown model")
                      for f in rows)
    out.append("")
    out.append(f"estimated: {total['estimated']} of {total['files']} files "
               f"({100 * total['estimated'] / max(total['files'], 1):.0f} %); of the configs that name a model: "
               f"{total['estimated']} of {model_named} ({100 * total['estimated'] / max(model_named, 1):.0f} %)")
    out.append(f"recognised as not a training run: {total['not training']}; predicted OOM (VL001): "
               f"{total['VL001']} files")
    if listing:
        out += ["", *lines_out]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "real_configs.txt"))
    ap.add_argument("--list", action="store_true", help="also list every file with its outcome")
    args = ap.parse_args(argv)
    report = run(collect(SOURCES), args.list)
    print(report, end="")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
