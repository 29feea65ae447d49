"""Memory figures stated by framework repositories next to their runnable configs, against the estimate.

Framework repositories write the memory a run measured beside the command that ran it:
- ms-swift example scripts (`examples/**/*.sh`) begin with comments such as `# 22GiB`, `# 4 * 80GiB`,
  `# 2 * 50GiB, 3.5s/it`, `# 30GB GPU memory`, `# ZeRO3: 3.5s/it; 4 * 60GiB` (v1.x to 4.x);
- axolotl example READMEs (`examples/<model>/README.md`): `# LoRA SFT (1x48GB @ ~44GiB)` above
  `axolotl train examples/<model>/<config>.yaml`, or "This config uses about 7.8GiB VRAM." beside the page's one
  `axolotl train` command.

For each file with a stated figure this extracts the file (and the files beside it: `held_out.extract`) from the bare
mirror at that revision, analyses it with the Hub lookup off, and compares the estimate with the figure:

- "N * X GiB" (or "X GiB * N", "NxM GB @ X GiB/GPU") is X per GPU on N GPUs; a plain "X GiB" is one process's
  figure. "GiB" is 2**30 bytes; "GB" is taken as written, 10**9 bytes (ms-swift writes both, often for the same kind
  of nvidia-smi reading; the table also says how many rows fall inside the band if "GB" is read as GiB).
- The level compared: the device level (`Estimate.device_bytes`, what nvidia-smi shows), unless the page says the
  figure is the caching allocator's reserved memory (axolotl's gpt-oss README: "Memory usage taken from
  `device_mem_reserved(gib)` from logs"), then `Estimate.reserved_bytes`.
- A figure measured on Ascend NPUs (the comment or path says Ascend / NPU) is listed and not compared: neither
  the device's runtime nor its allocator is the CUDA one the estimate models.
- A script that runs under TorchAcc (`USE_TORCHACC=1`, ms-swift 2.x `examples/pytorch/llm/scripts/torchacc/`) is listed
  and not compared: PyTorch/XLA's allocator, not CUDA's caching allocator, holds the memory, and those scripts'
  "80GB GPU memory" is the A100's size under "Experimental environment: 2 * A100".
- A figure that states the card, not a measurement, is listed and not compared (`CARD_STATEMENTS`, each with its
  reason).
- Each revision's scripts are estimated with that revision's framework version (`frameworkVersions`: ms-swift's
  `swift/version.py` at the tag), so version-dependent defaults (ms-swift's evaluation split before 3.6) apply.
- A file that states several different figures (variants: "lora: …" / "full: …", "gc true, vgc false: …") is
  listed as ambiguous and not compared; several lines stating the same figure count once.
- A comment whose text is a sentence about hardware ("you'll need 64 × 80 GiB", "8 GPUs of 80GB each") is not a
  measured figure and is not read.

    python benchmarks/held_out_memory.py [--out benchmarks/results/held_out_memory.txt] [--source ms-swift ...]

Rows are grouped: within 0.8–1.25 (estimate ÷ stated), estimated misses (with the plan's traits, to group them by
cause), not estimated (why), model not in the catalog with the Hub off (not misses of the estimator: with the Hub
on its config.json would be read), not a training run, measured on Ascend, ambiguous.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["HF_HUB_OFFLINE"] = "1"  # the Hub is never asked

from held_out import MIRRORS, ROOT, Framework, Source, extract, git, reason  # noqa: E402
from vramlens.analysis import analyze  # noqa: E402
from vramlens.settings import Settings  # noqa: E402

# held_out.py imports every `held_out_*.py` beside it as a plug-in; this module adds no sources to that run
FRAMEWORKS: list[Framework] = []

GIB = 2**30
LOW, HIGH = 0.8, 1.25

# --- the stated figure -----------------------------------------------------------------------------------------

_NUM = r"\d+(?:\.\d+)?"
_FIGURE = re.compile(
    rf"(?:(?P<n>\d+)\s*(?:[*×]|x(?=\s*{_NUM}\s*Gi?B))\s*)?~?(?P<v>{_NUM})\s*(?P<u>GiB|GB)\b(?:\s*/\s*GPU)?"
    rf"(?:\s*[*×]\s*(?P<n2>\d+))?",
    re.I,
)
# what may stand beside a figure on a comment line that states one: a speed, a duration, filler words
_BESIDE = re.compile(
    r"\d+(?:\.\d+)?\s*s/it|\d+\s*(?:hours?|h|minutes?|min|m|s)\b|training speed|gpu memory|totally|vram"
    r"|\(use flash_attn\)|per gpu|/gpu|ascend\s*\w*|npu",
    re.I,
)
_LABEL = re.compile(r"^\s*([^:]{1,60}):\s*")


@dataclass(frozen=True)
class Figure:
    per_gpu: int  # bytes per GPU as stated
    gpus: int | None  # the N of "N * X"; None when the figure names no count
    text: str  # the line as written
    line: int  # 1-based
    unit: str  # "GiB" or "GB"
    label: str = ""  # "lora", "gc true, vgc false", ... ("" when none)
    ascend: bool = False


def _bytes(value: str, unit: str) -> int:
    return int(float(value) * (GIB if unit.lower() == "gib" else 10**9))


def comment_figures(line: str, lineno: int = 1, path: str = "") -> list[Figure]:
    """The measured per-GPU figures a shell comment line states; [] for a line that is not such a statement (a
    sentence about hardware, a URL, code)."""
    s = line.strip()
    if not s.startswith("#"):
        return []
    body = s.lstrip("#").strip()
    figures = list(_FIGURE.finditer(body))
    if not figures:
        return []
    label = ""
    m = _LABEL.match(body)
    if m and not _FIGURE.search(m.group(1)):
        label = m.group(1).strip()
    rest = body[m.end() :] if label and m else body
    rest = _BESIDE.sub(" ", _FIGURE.sub(" ", rest))
    if re.search(r"[A-Za-z]{2,}", rest):  # words left over: a sentence, not a measurement
        return []
    ascend = bool(re.search(r"ascend|npu", body + " " + path, re.I))
    out = []
    for f in figures:
        n = f.group("n") or f.group("n2")
        out.append(
            Figure(
                per_gpu=_bytes(f.group("v"), f.group("u")),
                gpus=int(n) if n else None,
                text=s,
                line=lineno,
                unit="GiB" if f.group("u").lower() == "gib" else "GB",
                label=label,
                ascend=ascend,
            )
        )
    return out


def script_figures(text: str, path: str = "") -> list[Figure]:
    """Every measured figure a shell script's comment lines state."""
    out: list[Figure] = []
    for i, line in enumerate(text.splitlines(), 1):
        out.extend(comment_figures(line, i, path))
    return out


_AXO_CMD = re.compile(r"axolotl\s+train\s+(\S+\.ya?ml)")
_AXO_AT = re.compile(rf"\((?P<n>\d+)\s*x\s*{_NUM}\s*GB\s*@\s*~?(?P<v>{_NUM})\s*(?P<u>GiB|GB)\b[^)]*\)", re.I)
_AXO_USES = re.compile(rf"config uses about\s*~?(?P<v>{_NUM})\s*(?P<u>GiB|GB)\b", re.I)


def readme_figures(text: str) -> list[tuple[str, Figure]]:
    """(config path, figure) pairs an axolotl example README states: a `# … (NxM GB @ ~X GiB[/GPU])` comment with the
    `axolotl train <config>` command on the next command line, or "This config uses about X GiB" on a page with
    exactly one `axolotl train` config. A comment stating two set-ups ("8x48GB @ … or 4x80GB @ …") is ambiguous and
    left out."""
    lines = text.splitlines()
    out: list[tuple[str, Figure]] = []
    for i, line in enumerate(lines):
        s = line.strip()
        if not s.startswith("#"):
            continue
        found = list(_AXO_AT.finditer(s))
        if len(found) != 1 or " or " in s:
            continue
        cmd = next(
            (_AXO_CMD.search(x) for x in lines[i + 1 : i + 4] if x.strip() and not x.strip().startswith("#")), None
        )
        if cmd is None:
            continue
        f = found[0]
        out.append(
            (cmd.group(1), Figure(_bytes(f.group("v"), f.group("u")), int(f.group("n")), s, i + 1, f.group("u")))
        )
    configs = sorted({m.group(1) for m in _AXO_CMD.finditer(text)})
    for i, line in enumerate(lines):
        m = _AXO_USES.search(line)
        if m and len(configs) == 1:
            unit = "GiB" if m.group("u").lower() == "gib" else "GB"
            out.append((configs[0], Figure(_bytes(m.group("v"), m.group("u")), None, line.strip(), i + 1, unit)))
    return out


def readme_level(text: str) -> str:
    """The estimate's level a README's figures measure: reserved when the page says they are the caching allocator's
    reserved memory (axolotl logs `device_mem_reserved(gib)`), else the device level."""
    return "reserved" if re.search(r"mem_reserved|\breserved\b", text, re.I) else "device"


# Figures that state the card the run used rather than what it measured: (path pattern, the stated line, reason).
# Listed under "states the card", never compared.
CARD_STATEMENTS: tuple[tuple[re.Pattern[str], re.Pattern[str], str], ...] = (
    (
        re.compile(r"(?:^|/)torchacc/"),
        re.compile(r"^#\s*80GB GPU memory$"),
        "ms-swift 2.x TorchAcc examples: every script, 7B to 72B, with or without `USE_TORCH_XLA=0`, writes "
        "'80GB GPU memory' under 'Experimental environment: N * A100' — the A100's size",
    ),
    (
        re.compile(r"(?:^|/)examples/train/multi-gpu/fsdp_qlora/train\.sh$"),
        re.compile(r"^#\s*80GiB \* 2\b"),
        "ms-swift commit ce2403719 (#4591) changed only this comment of the script, '# 14GiB * 2' → '# 80GiB * 2', "
        "with no change to its arguments: the A100-80GiB card, not a measurement",
    ),
)


def card_statement(path: str, line: str) -> str | None:
    """Why a script's figure (its stated line) states the card, not a measurement; None when it is a measurement."""
    return next((why for where, said, why in CARD_STATEMENTS if where.search(path) and said.search(line)), None)


def framework_version(ms: MemorySource) -> dict[str, str]:
    """The framework version a revision's scripts run with, for the `frameworkVersions` setting: ms-swift's
    `swift/version.py` `__version__` at that revision ("4.6.0.dev0" at HEAD reads as 4.6.0)."""
    if ms.name != "ms-swift":
        return {}
    try:
        text = git(ms.source.mirror, "show", f"{ms.source.revision}:swift/version.py").decode()
    except Exception:  # noqa: BLE001 — a revision without the file: the newest release's defaults
        return {}
    m = re.search(r"__version__\s*=\s*['\"]([0-9][0-9.]*[0-9])", text)
    return {"ms-swift": m.group(1)} if m else {}


# --- sources ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorySource:
    name: str  # "ms-swift", "axolotl"
    source: Source  # what to extract (the stated file and the files beside it)
    kind: str  # "script-comments" or "axolotl-readme"


SOURCES: list[MemorySource] = [
    *(
        MemorySource("ms-swift", Source("modelscope+ms-swift", rev, ("examples/*",)), "script-comments")
        for rev in ("v2.4.0", "v3.5.0", "v4.0.0", "HEAD")
    ),
    *(
        MemorySource(
            "axolotl",
            Source("axolotl-ai-cloud+axolotl", rev, ("examples/*", "deepspeed_configs/*")),
            "axolotl-readme",
        )
        for rev in ("v0.9.2", "HEAD")
    ),
]


@dataclass
class Row:
    source: str
    version: str
    path: str
    figure: Figure
    level: str = "device"
    status: str = ""  # "compared", "not in catalog", "not estimated", "not training", "ascend", "xla", "card",
    # "ambiguous"
    why: str = ""
    estimate: int | None = None
    traits: str = ""
    plan_gpus: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        return None if self.estimate is None else self.estimate / self.figure.per_gpu

    @property
    def ratio_gb_as_gib(self) -> float | None:
        if self.estimate is None:
            return None
        stated = self.figure.per_gpu * (GIB / 10**9 if self.figure.unit == "GB" else 1)
        return self.estimate / stated


def _value(plan: Any, name: str) -> Any:
    s = getattr(plan, name, None)
    return None if s is None else s.value


def traits(plan: Any) -> str:
    """What kind of run the plan is: objective, method, distribution (to group misses by)."""
    objective = _value(plan, "objective") or "sft"
    method = _value(plan, "peft_method") or "full"
    quant = _value(plan, "quant_bits")
    if quant:
        method = f"q{method.removeprefix('q')}{quant}" if method != "full" else f"full-int{quant}"
    parts = [str(plan.framework or plan.format), str(objective), str(method)]
    dist = _value(plan, "dist_strategy")
    zero = _value(plan, "zero_stage")
    if zero is not None:
        parts.append(f"zero{zero}")
    elif dist:
        parts.append(str(dist))
    for name, tag in (("tensor_parallel", "tp"), ("pipeline_parallel", "pp"), ("expert_parallel", "ep")):
        v = _value(plan, name)
        if v and v != 1:
            parts.append(f"{tag}{v}")
    if _value(plan, "generation"):
        parts.append("gen")
    return " ".join(parts)


def _plan_gpus(plan: Any) -> int | None:
    per = _value(plan, "devices_per_process")  # a device map: each process uses several GPUs
    for name in ("world_size", "gpu_count"):
        v = _value(plan, name)
        if isinstance(v, int):
            return v * per if name == "world_size" and isinstance(per, int) and per > 1 else v
    return None


def measure(row: Row, path: Path, into: Path, versions: dict[str, str] | None = None) -> None:
    if row.figure.ascend:
        row.status = "ascend"
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    if re.search(r"^\s*(?:export\s+)?USE_TORCHACC=1", text, re.M):
        row.status = "xla"
        return
    card = card_statement(row.path, row.figure.text)
    if card is not None:
        row.status, row.why = "card", card
        return
    settings = Settings(workspace=into, model_lookup=False, framework_versions=dict(versions or {}))
    a = analyze(text, str(path), settings)
    if any(f.rule_id == "VL018" for f in a.findings):
        row.status, row.why = "not training", next(f.message for f in a.findings if f.rule_id == "VL018")[:100]
        return
    if a.plan is not None:
        row.traits = traits(a.plan)
        row.plan_gpus = _plan_gpus(a.plan)
        row.extra["unmodelled"] = [u.key.lstrip("-") for u in a.plan.unmodelled]
        row.extra["model"] = str(_value(a.plan, "model_id"))
    if a.estimate is None:
        cause = reason(a.error) if a.plan is not None else "not a config"
        row.status = "not in catalog" if cause == "unknown model" else "not estimated"
        row.why = cause if cause == "unknown model" else (a.error or cause)[:140]
        return
    row.status = "compared"
    row.estimate = a.estimate.reserved_bytes if row.level == "reserved" else a.estimate.device_bytes
    row.extra["approximate"] = list(a.estimate.approximate)


def rows_of(ms: MemorySource, tmp: Path) -> list[Row]:
    into = tmp / ms.name / ms.source.revision.replace("/", "_")
    version = ms.source.revision.removeprefix("refs/tags/")
    rows: list[Row] = []
    pinned = framework_version(ms)
    if ms.kind == "script-comments":
        # only the scripts stating a figure are extracted with their folder's neighbours: list first
        names = git(ms.source.mirror, "ls-tree", "-r", "--name-only", ms.source.revision).decode().splitlines()
        if not any(n.startswith("examples/") for n in names):
            return []
        files = extract(ms.source, into)
        for path in sorted(p for p in files if p.suffix == ".sh"):
            rel = str(path.relative_to(into))
            figs = script_figures(path.read_text(encoding="utf-8", errors="replace"), rel)
            if not figs:
                continue
            distinct = {(f.per_gpu, f.gpus) for f in figs}
            row = Row(ms.name, version, rel, figs[0])
            if len(distinct) > 1 and not all(f.ascend for f in figs):
                row.status, row.why = "ambiguous", "; ".join(f.text.lstrip("# ") for f in figs)[:140]
            else:
                measure(row, path, into, pinned)
            rows.append(row)
    elif ms.kind == "axolotl-readme":
        files = extract(ms.source, into)
        for readme in sorted(p for p in files if p.name == "README.md"):
            text = readme.read_text(encoding="utf-8", errors="replace")
            level = readme_level(text)
            for config, fig in readme_figures(text):
                target = into / config
                rel = f"{readme.relative_to(into)}:{fig.line} -> {config}"
                row = Row(ms.name, version, rel, fig, level=level)
                if not target.exists():
                    row.status, row.why = "not estimated", f"{config} not in the repository at {version}"
                else:
                    measure(row, target, into, pinned)
                rows.append(row)
    return rows


# --- the table -------------------------------------------------------------------------------------------------


def _g(b: int | None) -> str:
    return "-" if b is None else f"{b / GIB:.1f}"


def report(rows: list[Row]) -> str:
    lines: list[str] = []
    head = f"{'source':<10}{'version':<10}" + "".join(
        f"{c:>12}"
        for c in (
            "stated",
            "compared",
            "in band",
            "median",
            "not in cat",
            "not est",
            "not train",
            "ascend",
            "xla",
            "card",
            "ambig",
        )
    )
    lines.append(head)
    keys = list(dict.fromkeys((r.source, r.version) for r in rows))
    for key in [*keys, ("all", "")]:
        sel = [r for r in rows if (r.source, r.version) == key or key[0] == "all"]
        comp = [r for r in sel if r.status == "compared"]
        inband = [r for r in comp if LOW <= (r.ratio or 0) <= HIGH]
        med = f"{statistics.median(r.ratio or 0 for r in comp):.2f}" if comp else "-"
        counts = collections.Counter(r.status for r in sel)
        lines.append(
            f"{key[0]:<10}{key[1]:<10}"
            + "".join(
                f"{x:>12}"
                for x in (
                    len(sel),
                    len(comp),
                    f"{len(inband)} ({100 * len(inband) / max(len(comp), 1):.0f}%)",
                    med,
                    counts["not in catalog"],
                    counts["not estimated"],
                    counts["not training"],
                    counts["ascend"],
                    counts["xla"],
                    counts["card"],
                    counts["ambiguous"],
                )
            )
        )
    comp = [r for r in rows if r.status == "compared"]
    gb_inband = sum(LOW <= (r.ratio_gb_as_gib or 0) <= HIGH for r in comp)
    n_gb = sum(r.figure.unit == "GB" for r in comp)
    lines.append(
        f"\nestimate ÷ stated per GPU; level: device (nvidia-smi) unless the page names another. {len(comp)} compared, "
        f"{sum(LOW <= (r.ratio or 0) <= HIGH for r in comp)} within {LOW}–{HIGH}; "
        f"{n_gb} of them state GB (read as 10^9 bytes); with GB read as GiB: {gb_inband} within."
    )
    mism = [r for r in comp if r.figure.gpus and r.plan_gpus and r.figure.gpus != r.plan_gpus]
    lines.append(f"rows whose stated GPU count differs from the plan's: {len(mism)}")

    misses = sorted((r for r in comp if not LOW <= (r.ratio or 0) <= HIGH), key=lambda r: r.ratio or 0)
    lines.append(f"\nestimated, outside {LOW}–{HIGH}: {len(misses)}, by the plan's traits (count, median ratio)")
    by: dict[str, list[Row]] = collections.defaultdict(list)
    for r in misses:
        by[("low  " if (r.ratio or 0) < LOW else "high ") + r.traits].append(r)
    for k, rs in sorted(by.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(rs):>4}  {statistics.median(r.ratio or 0 for r in rs):5.2f}  {k}")
    lines.append("\nestimated misses (ratio, estimate GiB / stated GiB, stated line, plan GPUs, traits, unmodelled):")
    for r in misses:
        um = ",".join(r.extra.get("unmodelled", [])) or "-"
        approx = "; ".join(r.extra.get("approximate", []))
        um += f"; approximate: {approx}" if approx else ""
        lines.append(
            f"  {r.ratio:5.2f}  {_g(r.estimate):>6} / {_g(r.figure.per_gpu):>6}  {r.source} {r.version} {r.path}"
            f"  [{r.figure.text[:50]}] gpus={r.plan_gpus} {r.traits} {r.level}; unmodelled: {um}"
        )
    lines.append("\nestimated, within the band:")
    for r in sorted((r for r in comp if LOW <= (r.ratio or 0) <= HIGH), key=lambda r: r.ratio or 0):
        lines.append(
            f"  {r.ratio:5.2f}  {_g(r.estimate):>6} / {_g(r.figure.per_gpu):>6}  {r.source} {r.version} {r.path}"
            f"  {r.traits}"
        )
    for status, title in (
        ("not estimated", "not estimated (why)"),
        ("not in catalog", "model not in the catalog with the Hub off (not misses of the estimator)"),
        ("not training", "not a training run (VL018): the figure is an inference/export command's"),
        ("ascend", "measured on Ascend NPUs: not compared"),
        ("xla", "TorchAcc (PyTorch/XLA) runs: not compared"),
        ("card", "the figure states the card, not a measurement (why): not compared"),
        ("ambiguous", "several different figures stated (variants of one script): not compared"),
    ):
        sel = [r for r in rows if r.status == status]
        if not sel:
            continue
        lines.append(f"\n{title}: {len(sel)}")
        if status == "not in catalog":
            models = collections.Counter(r.extra.get("model", "?") for r in sel)
            lines.extend(f"  {n:>4}  {m}" for m, n in models.most_common())
            continue
        for r in sel:
            lines.append(f"  {r.source} {r.version} {r.path}: {r.why or r.figure.text}"[:200])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", help="only these sources (ms-swift, axolotl; repeatable)")
    ap.add_argument(
        "--out",
        help="write the report here (default: benchmarks/results/held_out_memory.txt, for a run over every source)",
    )
    args = ap.parse_args(argv)
    if args.out is None and not args.source:
        args.out = str(ROOT / "benchmarks" / "results" / "held_out_memory.txt")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for ms in SOURCES:
            if args.source and ms.name not in args.source:
                continue
            if not (MIRRORS / ms.source.mirror).exists():
                print(f"(no mirror {ms.source.mirror})", file=sys.stderr)
                continue
            rows.extend(rows_of(ms, Path(tmp)))
    text = report(rows)
    print(text, end="")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
