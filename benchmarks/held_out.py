"""Configs vramlens has never seen: framework repositories at several versions, read and estimated.

For every (mirror, revision, glob) source of every framework below, extracts the matching files at that revision
from the bare mirror (`/work/.mirror/<owner>+<name>/repo`, read with `git ls-tree` / `git show`; nothing is
checked out or executed) into a temporary folder that keeps the repository's paths (so a script's `source`d file or
referenced YAML is found beside it), runs each through `vramlens.analysis.analyze` with the Hub lookup off, and
prints per framework × version: files, recognised, not a training run (VL018), estimated, estimated with no
unmodelled setting, and why the others got no estimate. Then it cross-checks the plan of every estimated file
against the values the file itself states, for the keys whose meaning is known (`Check` tables below): every
disagreement is listed (a silent misread, or a derivation the plan explains in its notes).

    python benchmarks/held_out.py [--framework openrlhf ...] [--list] [--out benchmarks/results/held_out.txt]

A framework is a `Framework` (its sources and its checks) in a plug-in module `benchmarks/held_out_<name>.py`.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import importlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import tomllib

os.environ["HF_HUB_OFFLINE"] = "1"  # the Hub is never asked

import yaml  # noqa: E402
from vramlens.analysis import analyze  # noqa: E402
from vramlens.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIRRORS = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror"))

REASONS = [
    (re.compile(r"unknown model|not in the catalog", re.I), "unknown model"),
    (re.compile(r"does not name a model", re.I), "no model named"),
    (re.compile(r"syntax error|could not be read|not valid", re.I), "syntax error"),
    (re.compile(r"unknown GPU", re.I), "unknown GPU"),
    (re.compile(r"internal error", re.I), "internal error"),
]


@dataclass(frozen=True)
class Source:
    mirror: str  # "<owner>+<name>" under MIRRORS
    revision: str  # a tag or commit present in the mirror
    globs: tuple[str, ...]  # fnmatch patterns on the repository path
    exclude: tuple[str, ...] = ()
    # files extracted beside the counted ones but not counted themselves: what a counted file reads (the YAML an
    # ms-swift script passes as `--config x.yaml` or as its lone argument), as in a checkout of the repository
    context: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    """A key the framework's files state, and the plan field that must hold the same value."""

    keys: tuple[str, ...]  # spellings as written (without leading dashes), dotted for nested YAML/TOML/hydra keys
    field: str  # TrainingPlan field
    kind: str = "int"  # "int", "bool", "model", "float", "text", or "map:<a>=<b>,..." (value -> expected)


@dataclass
class Framework:
    name: str
    sources: list[Source]
    checks: list[Check] = field(default_factory=list)
    # the file's own values when `stated` cannot read them (a script's usage example, a page's blocks): (path, plan)
    stated: Callable[[Path, Any], dict[str, Any]] | None = None


# ---------------------------------------------------------------------------------------------------------------
# frameworks: each plug-in module `held_out_<name>.py` beside this file defines `FRAMEWORKS: list[Framework]`


def frameworks() -> list[Framework]:
    out: list[Framework] = []
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    for module in sorted(here.glob("held_out_*.py")):
        out.extend(importlib.import_module(module.stem).FRAMEWORKS)
    return out


# ---------------------------------------------------------------------------------------------------------------


def git(mirror: str, *args: str) -> bytes:
    gitdir = MIRRORS / mirror / "repo"
    if not gitdir.exists():
        gitdir = MIRRORS / mirror
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True).stdout


def extract(src: Source, into: Path) -> list[Path]:
    names = git(src.mirror, "ls-tree", "-r", "--name-only", src.revision).decode().splitlines()
    out = []
    for name in names:
        counted = any(fnmatch.fnmatch(name, g) for g in src.globs) and not any(
            fnmatch.fnmatch(name, g) for g in src.exclude
        )
        if not counted and not any(fnmatch.fnmatch(name, g) for g in src.context):
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(git(src.mirror, "show", f"{src.revision}:{name}"))
        if counted:
            out.append(target)
    return out


def reason(error: str | None) -> str:
    if not error:
        return "not a config"
    for pattern, label in REASONS:
        if pattern.search(error):
            return label
    return error.split(":")[0][:60]


# --- what the file itself states -------------------------------------------------------------------------------

_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S*)")


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = data
    return out


def stated(path: Path) -> dict[str, Any]:
    """key -> value as the file states it (last one wins); `$VAR` values resolved from plain assignments."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".yaml", ".yml"):
        try:
            return _flatten(yaml.safe_load(text))
        except yaml.YAMLError:
            return {}
    if path.suffix == ".toml":
        try:
            return _flatten(tomllib.loads(text))
        except tomllib.TOMLDecodeError:
            return {}
    if path.suffix != ".sh":
        return {}
    variables: dict[str, str] = {}
    joined = re.sub(r"\\\n", " ", text)
    out: dict[str, Any] = {}
    for line in joined.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _ASSIGN.match(line)
        if m and not line.strip().endswith("("):
            variables[m.group(1)] = m.group(2).strip("\"'")
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, w in enumerate(words):
            if w.startswith("--"):
                key, eq, val = w[2:].partition("=")
                if not eq:
                    nxt = words[i + 1] if i + 1 < len(words) else None
                    val = "true" if nxt is None or nxt.startswith("--") else nxt
                out[key] = val
            elif "=" in w and "." in w.split("=", 1)[0] and not w.startswith(("$", "-")):
                key, _, val = w.partition("=")
                out[key.lstrip("+")] = val

    def sub(v: Any) -> Any:
        if isinstance(v, str):
            m = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", v)
            if m and m.group(1) in variables:
                return variables[m.group(1)]
        return v

    return {k: sub(v) for k, v in out.items()}


def _bool(v: Any) -> bool | None:
    s = str(v).strip().lower()
    return True if s in ("true", "1", "yes") else False if s in ("false", "0", "no") else None


def disagreement(check: Check, raw: Any, plan) -> str | None:
    """None when the plan agrees with (or cannot be compared to) the stated value; otherwise what differs."""
    if raw is None or (isinstance(raw, str) and ("$" in raw or raw == "")):
        return None
    got = getattr(plan, check.field, None)
    value = got.value if got is not None else None
    kind = check.kind
    if kind.startswith("map:"):
        table = dict(p.split("=") for p in kind[4:].split(","))
        want_s = table.get(str(raw).strip().lower())
        if want_s is None:
            return None
        want: Any = None if want_s == "none" else _bool(want_s) if want_s in ("true", "false") else int(want_s)
    elif kind == "int":
        try:
            want = int(str(raw))
        except ValueError:
            return None
    elif kind == "float":
        try:
            want = float(str(raw))
        except ValueError:
            return None
    elif kind == "bool":
        want = _bool(raw)
        if want is None:
            return None
    elif kind == "model":
        s = str(raw).rstrip("/")
        if value is None:
            return f"{check.field}: file {s!r}, plan none"
        a, b = s.lower(), str(value).lower().rstrip("/")
        if (
            a == b
            or a.endswith("/" + b.split("/")[-1])
            or b.endswith("/" + a.split("/")[-1])
            or a.split("/")[-1] == b.split("/")[-1]
        ):
            return None
        return f"{check.field}: file {s!r}, plan {value!r}"
    else:
        want = str(raw)
    if value is None and (want is False or (check.field.endswith("parallel") and want == 1)):
        return None  # the plan leaves a setting at its off / single-rank state unset
    if value == want or (isinstance(want, float) and isinstance(value, (int, float)) and abs(value - want) < 1e-6):
        return None
    return f"{check.field}: file {raw!r}, plan {value!r}"


def cross_check(fw: Framework, path: Path, plan) -> list[str]:
    values = fw.stated(path, plan) if fw.stated is not None else stated(path)
    out = []
    for check in fw.checks:
        raw = next((values[k] for k in check.keys if k in values), None)
        d = disagreement(check, raw, plan)
        if d:
            out.append(d)
    return out


# --- the run ---------------------------------------------------------------------------------------------------


UNKNOWN_MODELS: collections.Counter = collections.Counter()  # model id -> files naming it, not in the catalog


def run_source(fw: Framework, src: Source, tmp: Path) -> tuple[collections.Counter, collections.Counter, list[str]]:
    row: collections.Counter = collections.Counter()
    why: collections.Counter = collections.Counter()
    notes: list[str] = []
    into = tmp / fw.name / src.revision.replace("/", "_")
    for path in extract(src, into):
        text = path.read_text(encoding="utf-8", errors="replace")
        a = analyze(text, str(path), Settings(workspace=into, model_lookup=False))
        rel = path.relative_to(into)
        not_training = any(f.rule_id == "VL018" for f in a.findings)
        row["files"] += 1
        recognised = a.plan is not None or not_training
        row["recognised"] += recognised
        row["not training"] += not_training
        if not recognised:
            why["not a config"] += 1
            notes.append(f"  not a config      {rel}")
            continue
        if a.estimate is None and not not_training:
            cause = reason(a.error)
            if cause == "unknown model":  # read right; with the Hub on, the model's config.json would be fetched
                row["not in catalog"] += 1
                UNKNOWN_MODELS[str(a.plan.model_id.value) if a.plan is not None and a.plan.model_id else "?"] += 1
            else:
                why[cause] += 1
                notes.append(f"  {cause:<17} {rel}: {(a.error or '')[:140]}")
        elif a.estimate is not None:
            row["estimated"] += 1
            if a.plan is not None and not a.plan.unmodelled:
                row["no unmodelled"] += 1
        if a.plan is not None and not not_training and (a.estimate is not None or a.plan.model_id is not None):
            for d in cross_check(fw, path, a.plan):
                row["misreads"] += 1
                notes.append(f"  MISREAD           {rel}: {d}")
    return row, why, notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", action="append", help="only these frameworks (repeatable)")
    ap.add_argument("--list", action="store_true", help="list every failing file and every disagreement")
    ap.add_argument(
        "--out", help="write the report here (default: benchmarks/results/held_out.txt, only for a run over everything)"
    )
    args = ap.parse_args(argv)
    if args.out is None and not args.framework:
        args.out = str(ROOT / "benchmarks" / "results" / "held_out.txt")
    cols = ("files", "recognised", "not training", "estimated", "not in catalog", "no unmodelled", "misreads")
    lines = [f"{'framework':<16}{'version':<22}" + "".join(f"{c:>15}" for c in cols) + "   why no estimate"]
    detail: list[str] = []
    total: collections.Counter = collections.Counter()
    chosen: Callable[[Framework], bool] = lambda f: not args.framework or f.name in args.framework  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        for fw in filter(chosen, frameworks()):
            for src in fw.sources:
                if not (MIRRORS / src.mirror).exists():
                    lines.append(f"{fw.name:<16}{src.revision:<22}   (no mirror {src.mirror})")
                    continue
                row, why, notes = run_source(fw, src, Path(tmp))
                total.update(row)
                reasons = "; ".join(f"{n} {r}" for r, n in why.most_common() if n)
                version = src.revision.removeprefix("refs/tags/")
                lines.append(f"{fw.name:<16}{version:<22}" + "".join(f"{row[c]:>15}" for c in cols) + f"   {reasons}")
                if notes:
                    detail.append(f"{fw.name} {version}")
                    detail.extend(notes)
    lines.append(f"{'all':<38}" + "".join(f"{total[c]:>15}" for c in cols))
    training = total["recognised"] - total["not training"] + (total["files"] - total["recognised"])
    lines.append(
        f"\nestimated: {total['estimated']} of {training} files not recognised as something other than training "
        f"({100 * total['estimated'] / max(training, 1):.1f} %); read, model not in the catalog (the Hub is off): "
        f"{total['not in catalog']} ({100 * (total['estimated'] + total['not in catalog']) / max(training, 1):.1f} % "
        f"read and estimated or estimable); with no unmodelled setting: "
        f"{total['no unmodelled']}; disagreements with the file's own values: {total['misreads']}"
    )
    if args.list and UNKNOWN_MODELS:
        detail.append("models named but not in the catalog (files):")
        detail.extend(f"  {n:>5}  {m}" for m, n in UNKNOWN_MODELS.most_common())
    report = "\n".join(lines + ([""] + detail if args.list else [])) + "\n"
    print(report, end="")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
