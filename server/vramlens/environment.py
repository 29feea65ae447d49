"""Which library versions a training run uses, without importing any of them.

In order (the first that names a package wins):
1. the `frameworkVersions` setting (`Settings.framework_versions`), then what the file itself installs (a launch
   script's `pip install "transformers==4.51.*"`: `pip_install_pins`);
2. the workspace's pins, read with bounded reads from its top folder: uv.lock, poetry.lock (exact resolutions),
   requirements*.txt, pyproject.toml (`[project]` and optional dependencies, `[tool.poetry.dependencies]`) and
   environment.yml — only exact pins (`==`, a bare Poetry version) count. A pin file is read only when it is a
   regular file inside that folder (symlinks resolved on the opened file: `vramlens.file_access`), TOML within
   `vramlens.toml_reading`'s bounds; entries of the wrong type are skipped, and a file that cannot be read
   gives no pins (a warning says why);
3. the trace interpreter's installed distributions, read from their `*.dist-info/METADATA` files (the
   `trace.python` setting's environment; without it, this interpreter's, through `importlib.metadata`, which reads
   the same files — not known to be the run's, so not when the framework's release excludes it);
4. what the training framework's release requires (`Requirements`: its package metadata's `Requires-Dist`, dumped
   with its arguments), when that excludes the newest release known: the newest release it allows;
5. else the newest release this knowledge was checked against (`knowledge.versions.NEWEST`).
"""

from __future__ import annotations

import glob
import importlib.metadata as md
import logging
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from vramlens import toml_reading
from vramlens.file_access import read_text_checked
from vramlens.knowledge.versions import NEWEST, parse

log = logging.getLogger(__name__)

PACKAGES = tuple(NEWEST)
# training frameworks whose pins choose the argument schemas their configs are read against (frameworks.recognise)
FRAMEWORK_PACKAGES = (
    "axolotl",
    "llamafactory",
    "llmtuner",
    "ms-swift",
    "torchtune",
    "torchtitan",
    "openrlhf",
    "verl",
    "megatron-core",  # Megatron-LM's releases (its core_v<version> tags)
)
MAX_PIN_FILE = 4 * 2**20  # a lock file of a large project is ~1–3 MB
MAX_METADATA = 2**20
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge / pytorch channel names of the same distributions
LOCKS = ("uv.lock", "poetry.lock")
ENVIRONMENT_FILES = ("environment.yml", "environment.yaml")


@dataclass(frozen=True, slots=True)
class Found:
    version: str
    source: str  # where it came from, for the assumptions


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    n = re.sub(r"[-_.]+", "-", str(name).strip().lower())
    return CONDA_NAMES.get(n, n)


# Adjacent parts match disjoint characters (one `\s*` around the extras), so a long line is matched in linear time.
_REQ = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\]\s*)?"
    r"===?\s*([0-9][A-Za-z0-9.+!_-]*)\s*(?:[;#].*)?$"
)


def exact_pin(requirement: str) -> tuple[str, str] | None:
    """(name, version) of a requirement pinned with `==`/`===` (no wildcard), else None."""
    m = _REQ.match(requirement.split(" #", 1)[0].strip())
    if m is None or "*" in m.group(2):
        return None
    return canonical(m.group(1)), m.group(2)


def pip_install_pins(words: list[str]) -> dict[str, str]:
    """What a `pip install` (`pip3`, `python -m pip`, `uv pip`) command pins of `PACKAGES` and `FRAMEWORK_PACKAGES`,
    as its words are written: `"transformers==4.51.*"` → {"transformers": "4.51"} (a series: its newest release),
    `peft==0.15.2` → "0.15.2", `'ms-swift[llm]==2.6.1'` → {"ms-swift": "2.6.1"}; options, ranges and unpinned names
    are left out."""
    try:
        start = words.index("install") + 1
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for word in words[start:]:
        word = word.strip("'\"")
        pin = None if word.startswith("-") else exact_pin(word.removesuffix(".*"))
        if pin is not None and (pin[0] in PACKAGES or pin[0] in FRAMEWORK_PACKAGES):
            out.setdefault(*pin)
    return out


def _read(path: Path, roots: list[Path]) -> str | None:
    try:
        return read_text_checked(path, MAX_PIN_FILE, roots=roots)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        log.warning("pins in %s ignored: not read: %s", path, exc)
        return None


def _toml(text: str, where: str) -> dict:
    read = toml_reading.loads(text)
    if read.data is None:
        log.warning("pins in %s ignored: %s", where, read.problem)
        return {}
    return read.data


def _table(data: dict, key: str) -> dict:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _strings(value) -> list[str]:
    """The strings of a list (anything else in it, or anything but a list: none)."""
    return [v for v in _list(value) if isinstance(v, str)]


def _lock_pins(text: str, where: str = "a lock file") -> dict[str, str]:
    out: dict[str, str] = {}
    for pkg in _list(_toml(text, where).get("package")):
        if isinstance(pkg, dict) and isinstance(pkg.get("name"), str) and isinstance(pkg.get("version"), str):
            out.setdefault(canonical(pkg["name"]), pkg["version"])
    return out


def _requirements_pins(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.lstrip().startswith(("#", "-")):
            continue
        pin = exact_pin(line)
        if pin:
            out.setdefault(*pin)
    return out


def _pyproject_pins(text: str, where: str = "pyproject.toml") -> dict[str, str]:
    data = _toml(text, where)
    project = _table(data, "project")
    reqs = _strings(project.get("dependencies"))
    for group in [*_table(project, "optional-dependencies").values(), *_table(data, "dependency-groups").values()]:
        reqs += _strings(group)  # a PEP 735 `{include-group = …}` entry is not a requirement
    out = _requirements_pins("\n".join(reqs))
    for name, spec in _table(_table(_table(data, "tool"), "poetry"), "dependencies").items():
        version = spec.get("version") if isinstance(spec, dict) else spec
        if isinstance(version, str) and re.fullmatch(r"=?=?\s*[0-9][0-9A-Za-z.+!_-]*", version.strip()):
            out.setdefault(canonical(name), version.strip().lstrip("= "))
    return out


def _environment_pins(text: str) -> dict[str, str]:
    from vramlens.formats.yaml_doc import YamlError, load_value

    try:
        data = load_value(text)  # bounded: an alias bomb under `- pip:` stops at the loader's budget
    except YamlError as exc:
        log.warning("pins in environment.yml ignored: %s", exc)
        return {}
    out: dict[str, str] = {}
    deps = data.get("dependencies") if isinstance(data, dict) else None
    for dep in deps if isinstance(deps, list) else []:
        if isinstance(dep, dict):
            for name, version in _requirements_pins("\n".join(_strings(dep.get("pip")))).items():
                out.setdefault(name, version)
        elif isinstance(dep, str):
            # conda match spec: name=version[=build] or name==version (channel prefixes dropped)
            m = re.fullmatch(r"(?:[^:]+::)?([A-Za-z0-9._-]+)\s*==?\s*([0-9][0-9A-Za-z.+!_]*)(?:=\S+)?", dep.strip())
            if m and "*" not in m.group(2):
                out.setdefault(canonical(m.group(1)), m.group(2))
    return out


def _stamp(folder: Path) -> tuple:
    """The pin files of a folder with their sizes and modification times (the cache key)."""
    names = [*LOCKS, *sorted(p.name for p in folder.glob("requirements*.txt")), "pyproject.toml", *ENVIRONMENT_FILES]
    out = []
    for name in names:
        try:
            st = (folder / name).stat()
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def workspace_pins(folder: Path | None) -> dict[str, Found]:
    """Exact pins of the workspace's top folder, lock files first."""
    if folder is None:
        return {}
    folder = Path(folder)
    return dict(_pins(folder, _stamp(folder)))


@lru_cache(maxsize=64)
def _pins(folder: Path, stamp: tuple) -> tuple[tuple[str, Found], ...]:
    out: dict[str, Found] = {}
    try:
        roots = [folder.resolve()]  # a pin file (or a link) leading out of the folder is not read
    except (OSError, RuntimeError):
        return ()
    for name, _, _ in stamp:
        text = _read(folder / name, roots)
        if text is None:
            continue
        if name in LOCKS:
            pins = _lock_pins(text, str(folder / name))
        elif name == "pyproject.toml":
            pins = _pyproject_pins(text, str(folder / name))
        elif name in ENVIRONMENT_FILES:
            pins = _environment_pins(text)
        else:
            pins = _requirements_pins(text)
        for pkg, version in pins.items():
            if (pkg in PACKAGES or pkg in FRAMEWORK_PACKAGES) and pkg not in out:
                out[pkg] = Found(version, f"pinned in {name}")
    return tuple(out.items())


def site_packages(python: str) -> list[Path]:
    """The package folders of the environment an interpreter path belongs to (a venv or a prefix), found on disk
    from the path alone: the interpreter is not run."""
    exe = shutil.which(python) if os.sep not in python else os.path.expanduser(python)
    if not exe:
        return []
    prefix = Path(os.path.abspath(exe)).parent.parent  # …/bin/python → the environment's prefix
    found = []
    for pattern in (
        "lib/python3*/site-packages",
        "lib/python3*/dist-packages",
        "lib/python3/dist-packages",
        "local/lib/python3*/dist-packages",
        "Lib/site-packages",
    ):
        found += [Path(p) for p in sorted(glob.glob(str(prefix / pattern)))]
    return found


def _metadata_version(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip() or None
        if not line.strip():
            break  # headers end at the first blank line
    return None


@lru_cache(maxsize=8)
def installed(python: str | None) -> dict[str, Found]:
    """Versions installed in the trace interpreter's environment (this interpreter's when None). Read once per
    interpreter and process: reading distribution metadata costs milliseconds, and every fix re-resolves the plan.
    Callers only read the mapping."""
    out: dict[str, Found] = {}
    if python is None:
        for name in PACKAGES:
            try:
                out[name] = Found(md.version(name), "installed with vramlens")
            except md.PackageNotFoundError:
                continue
        return out
    for folder in site_packages(python):
        for name in PACKAGES:
            if name in out:
                continue
            for info in sorted(folder.glob("*.dist-info")):
                dist = info.name[: -len(".dist-info")].rsplit("-", 1)[0]
                if canonical(dist) != name:
                    continue
                try:
                    text = read_text_checked(info / "METADATA", MAX_METADATA)
                except (OSError, ValueError, UnicodeDecodeError):
                    continue
                version = _metadata_version(text)
                if version:
                    out[name] = Found(version, f"installed in {python}")
                    break
    return out


@dataclass(frozen=True)
class Requirements:
    """What the training framework's release requires of the libraries (its package metadata's `Requires-Dist`,
    dumped with its arguments): `who` ("ms-swift 2.6.1"), package → specifier ("<4.48,>=4.33"), and the releases
    of each package vramlens has dumped (to name the newest below an exclusive major bound)."""

    who: str
    specs: Mapping[str, str]
    known: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def versions(
    settings, requires: Requirements | None = None, installs: Mapping[str, tuple[str, str]] | None = None
) -> dict[str, Found]:
    """Every package of `PACKAGES` with the version a run of these settings uses, and where it was found. What the
    file itself installs (`installs`: package → (version, where), its `pip install` commands) comes after the
    setting. A package nothing names is the newest release vramlens knows, or, when the framework's release
    `requires` excludes that, the newest release it allows."""
    told = {canonical(k): v for k, v in settings.framework_versions.items()}
    pins = workspace_pins(settings.workspace)
    have = installed(settings.trace_python)
    out = {}
    for name in PACKAGES:
        if name in told:
            out[name] = Found(told[name], "the frameworkVersions setting")
        elif installs and name in installs:
            out[name] = Found(*installs[name])
        elif name in pins:
            out[name] = pins[name]
        elif name in have and (settings.trace_python is not None or not _excluded(name, have[name], requires)):
            out[name] = have[name]
        elif (
            requires is not None
            and name in requires.specs
            and (allowed := newest_allowed(requires.specs[name], NEWEST[name], requires.known.get(name, ())))
        ):
            out[name] = Found(allowed, f"the newest {requires.who} allows: {name}{requires.specs[name]}")
        else:
            out[name] = Found(NEWEST[name], "the newest release vramlens knows")
    return out


def _excluded(name: str, found: Found, requires: Requirements | None) -> bool:
    """Whether the version installed beside vramlens (no trace interpreter is set, so not known to be the run's)
    is one the framework's release does not allow: the release's requirement then says more about the run."""
    if requires is None or name not in requires.specs:
        return False
    return satisfies(requires.specs[name], found.version) is False


_CLAUSE = re.compile(r"\s*(===|==|!=|<=|>=|~=|<|>)\s*([^\s,;]+)\s*")


def _clauses(spec: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for part in spec.split(",") if (m := _CLAUSE.fullmatch(part))]


def _allows(clauses: list[tuple[str, str]], v: tuple[int, int, int]) -> bool:
    for op, text in clauses:
        bound = parse(text)
        if bound is None:
            continue
        if (
            (op in ("==", "===") and "*" not in text and v != bound)
            or (op == "!=" and v == bound)
            or (op == "<" and not v < bound)
            or (op == "<=" and not v <= bound)
            or (op in (">", ">=", "~=") and not v >= bound)
        ):
            return False
    return True


def satisfies(spec: str, version: str) -> bool | None:
    """Whether `version` meets a requirement specifier ("<4.48,>=4.33"); None when either does not read as
    numbers. Pre-release and wildcard clauses are read by their numbers."""
    clauses, v = _clauses(spec), parse(version)
    return None if v is None or not clauses else _allows(clauses, v)


def newest_allowed(spec: str, newest: str, known: tuple[str, ...] = ()) -> str | None:
    """The newest release a requirement specifier allows when it excludes `newest` (None when `newest` satisfies
    it, or nothing can be named): an exact pin; an inclusive upper bound itself; below an exclusive bound the
    series before it ("<4.48" → "4.47", "<4.58.1" → "4.58.0"), or below a major bound ("<1.0") the newest of
    `known` under it (`satisfies`)."""
    if satisfies(spec, newest) is not False:
        return None
    clauses = _clauses(spec)
    exact = [text for op, text in clauses if op in ("==", "===") and "*" not in text and parse(text)]
    if exact:
        return exact[0]
    uppers = sorted((b, op, text) for op, text in clauses if op in ("<", "<=") and (b := parse(text)) is not None)
    if not uppers:
        return None
    bound, op, text = uppers[0]
    if op == "<=":
        return text
    major, minor, patch = bound
    if patch:
        return f"{major}.{minor}.{patch - 1}"
    if minor:
        return f"{major}.{minor - 1}"
    below = [k for k in known if (t := parse(k)) is not None and t < bound and _allows(clauses, t)]
    return max(below, key=lambda k: parse(k) or (0, 0, 0)) if below else None
