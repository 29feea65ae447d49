"""The frameworks' argument schemas, as dumped from their own code by `scripts/dump_framework_schemas.py`.

`schemas/<framework>/<version>.json` holds every argument a framework defines at that version (name, aliases,
type, default, choices, where it is defined); `schemas/index.json` lists the versions dumped and the frameworks
that could not be. A config pinned to (or run with) a version is read against the newest dump at or below it.
"""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parent / "schemas"


def version_key(version: str) -> tuple:
    """A sort key for version strings (PEP 440 order for the forms packages use): "0.10.2" > "0.9.10",
    "3.0.0" > "3.0.0rc1", "2.6.1.post1" > "2.6.1", "1.0" == "1.0.0"."""
    out: list[tuple] = []
    for part in re.split(r"[.\-+]", version.strip().lstrip("vV")):
        m = re.match(r"(\d*)(.*)", part)
        number, suffix = m.group(1), m.group(2)
        after = 1 if suffix.startswith("post") else -1  # a post-release after, a pre-release/dev before
        if number and suffix:
            out += [(int(number), 0, ""), (0, after, suffix)]
        elif number:
            out.append((int(number), 0, ""))
        else:
            out.append((0, after, suffix))
    out += [(0, 0, "")] * (8 - len(out))
    return tuple(out)


@cache
def frameworks() -> tuple[str, ...]:
    """The frameworks with at least one dumped schema."""
    if not DIR.is_dir():
        return ()
    return tuple(sorted(d.name for d in DIR.iterdir() if d.is_dir() and any(d.glob("*.json"))))


@cache
def versions(framework: str) -> tuple[str, ...]:
    """The dumped versions of a framework, oldest first."""
    if framework not in frameworks():
        return ()
    return tuple(sorted((p.stem for p in (DIR / framework).glob("*.json")), key=version_key))


def pick_version(framework: str, version: str | None = None) -> str | None:
    """The dumped version that describes `version`: a dump of the same minor release, the newest at or below it,
    else that minor's oldest (ms-swift 3.5.0 by 3.5.3: a minor's patches keep its arguments; LLaMA-Factory, whose
    0.x patches change defaults, is dumped at every release); else the newest at or below it of the same major;
    else the oldest above it of the same major (ms-swift 3.5.0 with only 2.6.1 and 3.12.6 dumped is described by
    3.12.6, not by 2.6.1: 3.0 renamed its arguments); else the newest below it; the newest of all when `version` is
    None; the oldest dump when `version` is older than every dump (the nearest description there is)."""
    have = versions(framework)
    if not have:
        return None
    if version is None:
        return have[-1]
    minor = version_key(version)[:2]
    names_minor = len(version.lstrip("vV").split(".")) >= 2
    same = [v for v in have if version_key(v)[:2] == minor] if names_minor else []
    if same:
        at_or_below = [v for v in same if version_key(v) <= version_key(version)]
        return at_or_below[-1] if at_or_below else same[0]
    below, above = neighbours(framework, version)
    want = version_key(version)[:1]
    if below is not None and version_key(below)[:1] == want:
        return below
    if above is not None and version_key(above)[:1] == want:
        return above
    return below or have[0]


def neighbours(framework: str, version: str) -> tuple[str | None, str | None]:
    """The dumped versions either side of `version`: (the newest at or below it, the oldest at or above it); both
    are `version` itself when it is dumped."""
    have = versions(framework)
    want = version_key(version)
    below = [v for v in have if version_key(v) <= want]
    above = [v for v in have if version_key(v) >= want]
    return (below[-1] if below else None), (above[0] if above else None)


@lru_cache(maxsize=256)
def _load(framework: str, version: str) -> dict[str, Any]:
    return json.loads((DIR / framework / f"{version}.json").read_text(encoding="utf-8"))


def schema(framework: str, version: str | None = None) -> dict[str, Any] | None:
    """The dump of `framework` for `version` (see `pick_version`), or None for a framework never dumped."""
    v = pick_version(framework, version)
    return _load(framework, v) if v is not None else None


def argument_name(name: str) -> str:
    """An argument as the dumps spell it: `--lora-rank` → `lora_rank` (case kept)."""
    return name.strip().lstrip("-").replace("-", "_")


@lru_cache(maxsize=256)
def _by_name(framework: str, version: str) -> dict[str, tuple[dict, ...]]:
    """Arguments by name and by alias (dashes read as underscores), in the dump's order."""
    out: dict[str, list[dict]] = {}
    for a in _load(framework, version)["arguments"]:
        for n in {argument_name(a["name"]), *(argument_name(x) for x in a.get("aliases") or ())}:
            out.setdefault(n, []).append(a)
    return {k: tuple(v) for k, v in out.items()}


def arguments(framework: str, name: str, version: str | None = None) -> tuple[dict, ...]:
    """Every definition of argument `name` (or an alias of it; `--a-b` is `a_b`) at that version: one per class or
    script that defines it (TRL's SFTConfig and DPOConfig, OpenRLHF's train_sft and train_dpo)."""
    v = pick_version(framework, version)
    if v is None:
        return ()
    return _by_name(framework, v).get(argument_name(name), ())


def argument(framework: str, name: str, version: str | None = None, owner: str | None = None) -> dict | None:
    """The definition of argument `name` at that version (by `owner`, the class or script, when given; else the
    first), or None when the framework does not define it there."""
    found = arguments(framework, name, version)
    if owner is not None:
        found = tuple(a for a in found if a.get("owner") == owner)
    return found[0] if found else None


@lru_cache(maxsize=256)
def lineage(framework: str, cls: str, version: str | None = None) -> tuple[str, ...]:
    """`cls` and the classes it inherits from among those dumped, nearest first, as the dump's `bases` records
    them (trl 0.19.1: PPOConfig → OnPolicyConfig; trl 1.16.0: GKDConfig → SFTConfig → _BaseConfig). An inherited
    argument is recorded once, under the class that defines it."""
    v = pick_version(framework, version)
    bases = _load(framework, v).get("bases", {}) if v is not None else {}
    out: list[str] = []
    todo = [cls]
    while todo:
        c = todo.pop(0)
        if c not in out:
            out.append(c)
            todo += bases.get(c, [])
    return tuple(out)


@lru_cache(maxsize=256)
def newest_defining(framework: str, cls: str, version: str | None = None) -> str | None:
    """The dumped version that describes `version` (`pick_version`) when it defines class `cls`; else the newest
    dump at or below it that does (trl's PPOConfig is gone after 1.12: a PPO run on 1.16 is read against 1.12.0),
    else the oldest dump that does; None when no dump defines it."""
    have = [v for v in versions(framework) if any(a.get("owner") == cls for a in _load(framework, v)["arguments"])]
    if not have:
        return None
    picked = pick_version(framework, version)
    if picked in have:
        return picked
    below = [v for v in have if picked is None or version_key(v) <= version_key(picked)]
    return below[-1] if below else have[0]


def default(framework: str, name: str, version: str | None = None, owner: str | None = None) -> Any:
    """An argument's literal default at that version (None when it has none, or it is not a literal)."""
    a = argument(framework, name, version, owner)
    return a.get("default") if a is not None else None


@cache
def index() -> dict[str, Any]:
    """schemas/index.json: dumped versions per framework, and the frameworks not dumped with the reason."""
    path = DIR / "index.json"
    if not path.is_file():
        return {"frameworks": {}, "not_dumped": {}}
    return json.loads(path.read_text(encoding="utf-8"))


REQUIREMENTS = Path(__file__).resolve().parent / "release_requirements.json"


@cache
def _requirements() -> dict[str, Any]:
    try:
        return json.loads(REQUIREMENTS.read_text(encoding="utf-8"))["frameworks"]
    except (OSError, ValueError, KeyError):
        return {}


def release_requirements(framework: str, version: str) -> tuple[str, dict[str, str]] | None:
    """(the release, what it requires of the libraries whose version changes a step's memory) for a release of
    `framework` published on PyPI — its package metadata's `Requires-Dist`, dumped for every release by
    `scripts/dump_release_requirements.py`. A series (`"3.5"`, from a pin `==3.5.*`) is its newest release; None
    for a release not published (or not read)."""
    published = _requirements().get(framework, {}).get("releases", {})
    if version in published:
        return version, published[version]
    depth = len(version.strip().lstrip("vV").split("."))
    want = version_key(version)[:depth] if depth < 3 else version_key(version)
    same = sorted((v for v in published if version_key(v)[: len(want)] == want), key=version_key)
    return (same[-1], published[same[-1]]) if same else None
