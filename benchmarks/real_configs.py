"""How many real configs vramlens recognises and estimates, per format, and why the others get no estimate.

Walks every config it can find — the shared corpus (`../shared/corpus`, when present), the test fixtures
(`tests/fixtures`) and `examples/` — through the same pipeline as `vramlens check` (`analysis.analyze`), twice:
with the Hub lookup off (models from the catalog, local folders and the local Hugging Face cache), and with a
Hub on loopback (`tests/fake_hub.py`, serving the `config.json` / `adapter_config.json` files under
`tests/fixtures/hub`; the real
network is never used) into an empty temporary cache. For each format it counts files, files recognised as
configs, files estimated (offline / with the Hub), files estimated with no unmodelled setting (with the Hub: the plan
records no `unmodelled` setting, `TrainingPlan.unmodelled`, so the figure rests on no setting the estimate ignores),
predicted out-of-memory findings (VL001), files recognised as
not being a training run (inference, generation, merge, export, evaluation, quantization: VL018), and why the
rest got no estimate (with the Hub). Prints the table and writes it to `benchmarks/results/real_configs.txt`.

    python benchmarks/real_configs.py [--out benchmarks/results/real_configs.txt] [--list]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # the real Hub is never asked; the fake one is on loopback

from vramlens.analysis import analyze  # noqa: E402
from vramlens.cli.paths import iter_config_files, read_config_text  # noqa: E402
from vramlens.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT.parent / "shared" / "corpus", ROOT / "tests" / "fixtures", ROOT / "examples"]
HUB_CONFIGS = ROOT / "tests" / "fixtures" / "hub"

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
        if root.exists():  # the Hub's model configs are not training configs
            out.extend((root, f) for f in iter_config_files([root]) if HUB_CONFIGS not in f.parents)
    return out


def outcome(path: Path, lookup: bool) -> dict:
    try:
        text = read_config_text(path, errors="replace")
    except OSError as exc:
        return {
            "format": path.suffix or "(none)",
            "estimated": False,
            "clean": False,
            "cause": f"unreadable: {exc}",
            "vl001": False,
            "not_training": False,
            "recognised": False,
        }
    a = analyze(text, str(path), Settings(workspace=path.parent, model_lookup=lookup))
    not_training = any(f.rule_id == "VL018" for f in a.findings)
    estimated = a.estimate is not None
    return {
        "format": a.plan.format if a.plan is not None else f"other {path.suffix or '(none)'}",
        "recognised": a.plan is not None or not_training,
        "estimated": estimated,
        "clean": estimated and a.plan is not None and not a.plan.unmodelled,
        "cause": "" if estimated else ("not a training run" if not_training else reason(a.error)),
        "vl001": any(f.rule_id == "VL001" for f in a.findings),
        "not_training": not_training,
    }


def with_fake_hub(fn):
    """Run `fn()` with HF_ENDPOINT on a loopback Hub serving tests/fixtures/hub, an empty cache, no token."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fake_hub import FakeHub

    repos = {
        str(d.relative_to(HUB_CONFIGS)): {
            "files": {f.name: json.loads(f.read_text(encoding="utf-8")) for f in d.glob("*.json")}
        }
        for d in HUB_CONFIGS.glob("*/*")
        if d.is_dir()
    }
    hub = FakeHub(repos)
    saved = dict(os.environ)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ.pop("HF_HUB_OFFLINE", None)
            os.environ.pop("HF_TOKEN", None)
            os.environ.update(hub.env(Path(tmp)))
            return fn(), len(repos)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        hub.close()


def run(files: list[tuple[Path, Path]], listing: bool) -> str:
    offline = [outcome(path, lookup=False) for _, path in files]
    online, served = with_fake_hub(lambda: [outcome(path, lookup=True) for _, path in files])
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    why: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    lines_out: list[str] = []
    for (root, path), off, on in zip(files, offline, online):
        row = rows[on["format"]]
        row["files"] += 1
        row["recognised"] += on["recognised"]
        row["estimated offline"] += off["estimated"]
        row["estimated +Hub"] += on["estimated"]
        row["no unmodelled +Hub"] += on["clean"]
        row["VL001"] += on["vl001"]
        row["not training"] += on["not_training"]
        if on["cause"]:
            why[on["format"]][on["cause"]] += 1
        if listing:
            state = "estimated" if on["estimated"] else on["cause"]
            lines_out.append(f"{state:<40} {on['format']:<16} {path.relative_to(root.parent)}")
    total = collections.Counter()
    for row in rows.values():
        total.update(row)
    cols = ("files", "recognised", "estimated offline", "estimated +Hub", "no unmodelled +Hub", "VL001", "not training")
    names = ["../shared/corpus" if s == SOURCES[0] else str(s.relative_to(ROOT)) for s in SOURCES if s.exists()]
    out = [
        f"{len(files)} files from {', '.join(names)}",
        f"offline: Hub lookup off; +Hub: a Hub on loopback serving {served} model repositories (tests/fixtures/hub)",
        "",
        f"{'format':<18}" + "".join(f"{c:>19}" for c in cols) + "   why no estimate (+Hub)",
    ]
    for fmt in sorted(rows, key=lambda f: (f.startswith("other"), -rows[f]["files"], f)):
        row = rows[fmt]
        reasons = "; ".join(f"{n} {r}" for r, n in why[fmt].most_common())
        out.append(f"{fmt:<18}" + "".join(f"{row[c]:>19}" for c in cols) + f"   {reasons}")
    out.append(f"{'all':<18}" + "".join(f"{total[c]:>19}" for c in cols))
    named = sum(
        1 for off, on in zip(offline, online) if on["estimated"] or off["estimated"] or on["cause"] == "unknown model"
    )
    out.append("")
    for label, key in (("offline", "estimated offline"), ("with the Hub", "estimated +Hub")):
        out.append(
            f"estimated {label}: {total[key]} of {total['files']} files "
            f"({100 * total[key] / max(total['files'], 1):.0f} %); of the training configs that name a "
            f"model: {total[key]} of {named} ({100 * total[key] / max(named, 1):.0f} %)"
        )
    out.append(
        f"estimated with the Hub and no unmodelled setting: {total['no unmodelled +Hub']} of {total['files']} files "
        f"({100 * total['no unmodelled +Hub'] / max(total['files'], 1):.0f} %); of the training configs that name a "
        f"model: {total['no unmodelled +Hub']} of {named} ({100 * total['no unmodelled +Hub'] / max(named, 1):.0f} %)"
    )
    out.append(
        f"recognised as not a training run (VL018): {total['not training']}, none with VL001: "
        f"{not any(on['vl001'] and on['not_training'] for on in online)}; predicted OOM (VL001): "
        f"{total['VL001']} files"
    )
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
