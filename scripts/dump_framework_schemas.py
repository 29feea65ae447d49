"""Dump each training framework's argument definitions, at chosen versions, into versioned data files.

    python scripts/dump_framework_schemas.py [--wheels DIR] [--git OWNER/NAME=PATH] [FRAMEWORK[==VERSION] ...]

For each (framework, version) of `TARGETS`, the package is fetched with `pip download --no-deps` (a wheel, else the
sdist) into a temporary folder (or taken from --wheels) and read as an archive — or, for a framework whose arguments
are not in its wheel (Megatron-LM's `megatron/training/arguments.py`), the files are read at the release's tag of
its git repository (a clone given with --git, else a blob-less clone made into a temporary folder) — and its
argument-defining files are read with `vramlens.frameworks.argdefs` (Python `ast`; nothing from the package is
imported or run) and, for YAML recipe configs, with vramlens' bounded YAML loader. The result is written to
`server/vramlens/frameworks/schemas/<framework>/<version>.json`:

    {"framework", "version", "source": [{"file", "sha256" | "commit"}], "extends": [...],
     "arguments": [{"name", "aliases", "type", "default", "default_text", "choices", "owner", "file", "line"
                    [, "default_when"]}, ...]}

(What each release requires of the libraries is dumped, for every release, by `scripts/dump_release_requirements.py`.)
Arguments are sorted by (name, owner), one a line, so that a rerun gives the same bytes and a new version diffs
cleanly.
`extends` names argument classes the framework inherits from another package (TRL's configs extend transformers'
`TrainingArguments`), whose arguments are in that package's schema. Help texts are dropped.

`schemas/index.json` lists every framework's dumped versions (including those written by other dump scripts, e.g.
verl's by `scripts/dump_verl_defaults.py`) and, for a framework that cannot be dumped this way, why not.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import json
import math
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from vramlens.formats.yaml_doc import load_yaml  # noqa: E402
from vramlens.frameworks import argdefs  # noqa: E402
from vramlens.frameworks.schemas import version_key  # noqa: E402

OUT = ROOT / "server" / "vramlens" / "frameworks" / "schemas"


@dataclass(frozen=True)
class Part:
    """Which files of a package define arguments, and how to read them.

    `how`: "classes" flattens the dataclass/pydantic classes named in `roots` (bases and nested classes resolved
    over every file the part matches); "argparse" takes each file's `add_argument` calls; "reads" takes each file's
    `cfg.get("key", default)` reads; "yaml" takes every leaf key of each YAML file as a dotted name; "plugins" takes
    axolotl's integrations: each plugin class whose `get_input_args()` returns an argument class's dotted path, that
    class's fields flattened, each record naming the plugin (`"plugin": "axolotl.integrations.liger.LigerPlugin"`)
    — axolotl merges them into its config model only for the plugins a config lists (integrations/config.py
    `merge_input_args`); "factories" takes the flags Megatron-LM builds from dataclasses (`factory_arguments`)."""

    files: tuple[str, ...]  # fnmatch patterns over the archive's paths (any leading folder is ignored)
    how: str
    roots: tuple[str, ...] = ()  # "classes": the argument classes a command line parses into
    exclude: tuple[str, ...] = ()
    receivers: tuple[str, ...] = ()  # "reads": attribute spellings of the config object read as `cfg`


@dataclass(frozen=True)
class Target:
    framework: str  # folder name under schemas/
    package: str  # PyPI name
    versions: dict[str, tuple[Part, ...]]
    extends: tuple[str, ...] = ()
    note: str = ""
    # versions published under another PyPI name (LLaMA-Factory ≤ 0.7 as `llmtuner`): version -> that name
    published_as: dict[str, str] = field(default_factory=dict)
    # read from a git repository's tags instead of the package: "owner/name", and version -> tag
    repository: str = ""
    tags: dict[str, str] = field(default_factory=dict)


HF_ROOTS = ("TrainingArguments", "Seq2SeqTrainingArguments")
# the configs, the on-policy base they share up to 0.2x (trl/trainer/utils.py `OnPolicyConfig`: PPO's and RLOO's
# `response_length`, `local_rollout_forward_batch_size`), and from 0.2x the trainers moved to trl/experimental/
TRL_FILES = ("trl/trainer/*_config.py", "trl/trainer/utils.py", "trl/experimental/*/*_config.py")
TRL_ROOTS = (
    "SFTConfig",
    "DPOConfig",
    "GRPOConfig",
    "KTOConfig",
    "RewardConfig",
    "ORPOConfig",
    "CPOConfig",
    "RLOOConfig",
    "PPOConfig",
    "OnlineDPOConfig",
    "GKDConfig",
    "BCOConfig",
    "DistillationConfig",
    "GOLDConfig",
    "XPOConfig",
    "NashMDConfig",
    "PRMConfig",
    "ModelConfig",
)
LF_ROOTS = (
    "ModelArguments",
    "DataArguments",
    "FinetuningArguments",
    "GeneratingArguments",
    "TrainingArguments",
    "RayArguments",
)
SWIFT_ROOTS = ("SftArguments", "DPOArguments", "RLHFArguments", "TrainArguments", "PretrainArguments", "SFTArguments")
SWIFT_1 = (Part(("swift/llm/utils/argument.py", "swift/trainers/arguments.py"), "classes", SWIFT_ROOTS),)
SWIFT_3 = (
    Part(
        ("swift/llm/argument/*.py", "swift/llm/argument/base_args/*.py", "swift/trainers/arguments.py"),
        "classes",
        SWIFT_ROOTS,
    ),
)
SWIFT_3_RELEASES = ("3.0.3", "3.1.1.post1", "3.2.2", "3.3.1", "3.4.1.post1", "3.5.3", "3.6.4", "3.7.3", "3.8.3")
SWIFT_3_RELEASES += ("3.9.3", "3.10.3", "3.11.3", "3.12.6")
SWIFT_4_RELEASES = ("4.0.4", "4.1.3", "4.2.3", "4.3.2", "4.4.2", "4.5.3", "4.6.0")
SWIFT_4 = (
    Part(
        (
            "swift/arguments/*.py",
            "swift/arguments/base_args/*.py",
            "swift/trainers/arguments.py",
            "swift/rlhf_trainers/args_mixin.py",  # GRPOArgumentsMixin (vLLM rollout, generation)
            "swift/ray_utils/*.py",  # RayArguments (4.3+)
            "swift/ray/arguments.py",  # RayArguments (4.0-4.2)
        ),
        "classes",
        SWIFT_ROOTS,
    ),
)
# Megatron-SWIFT (`megatron sft|pt|rlhf`, ms-swift 3.3+): its argument classes hold Megatron-LM's own flags as
# fields beside ms-swift's BaseArguments (3.x swift/megatron/argument/train_args.py `MegatronTrainArguments(
# MegatronArguments, BaseArguments)`; 4.x swift/megatron/arguments/sft_args.py `MegatronSftArguments`)
MEGATRON_SWIFT_ROOTS = (
    "MegatronTrainArguments",
    "MegatronSftArguments",
    "MegatronPretrainArguments",
    "MegatronRLHFArguments",
)
MEGATRON_SWIFT_3 = (
    Part(
        ("swift/megatron/argument/*.py", "swift/llm/argument/base_args/*.py", "swift/llm/argument/*.py"),
        "classes",
        MEGATRON_SWIFT_ROOTS,
    ),
)
MEGATRON_SWIFT_4 = (
    Part(
        (
            "swift/megatron/arguments/*.py",
            "swift/arguments/base_args/*.py",
            "swift/arguments/*.py",
            "swift/ray_utils/*.py",
            "swift/ray/arguments.py",
        ),
        "classes",
        MEGATRON_SWIFT_ROOTS,
    ),
)
# Megatron-LM's command line (`pretrain_gpt.py` and its kin parse it with argparse's `parse_args`, which stops on a
# flag it does not define): megatron/arguments.py up to core 0.5, megatron/training/arguments.py after; from 0.16
# part of it is built from dataclasses by megatron/training/argument_utils.py `ArgumentGroupFactory`
# (TransformerConfig with ModelParallelConfig, and the training configs of megatron/training/config/)
MEGATRON_ARGPARSE = Part(("megatron/arguments.py", "megatron/training/arguments.py"), "argparse")
MEGATRON_FACTORIES = Part(
    (
        "megatron/training/arguments.py",
        "megatron/core/model_parallel_config.py",
        "megatron/core/transformer/transformer_config.py",
        "megatron/core/fault_injector.py",
        "megatron/training/*_config.py",  # 0.16
        "megatron/training/config/*.py",  # 0.17 onwards
    ),
    "factories",
)
# the last release of every megatron-core minor, by its tag (core_v0.4.0 is the first)
MEGATRON_TAGS = {
    v: f"core_v{v}"
    for v in ("0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.3", "0.13.1")
}
MEGATRON_TAGS |= {v: f"core_v{v}" for v in ("0.14.0", "0.15.3", "0.16.1", "0.17.1", "0.18.2", "0.19.0")}
TUNE = (
    Part(("recipes/*.py", "recipes/dev/*.py"), "reads"),
    Part(("recipes/configs/*.yaml", "recipes/configs/*/*.yaml", "recipes/configs/*/*/*.yaml"), "yaml"),
)
ORLHF = (Part(("openrlhf/cli/train_*.py",), "argparse"),)
AXOLOTL_PLUGINS = Part(("axolotl/integrations/*/*.py",), "plugins")
AXOLOTL_OLD = (
    Part(("*/axolotl/utils/config/models/input/v0_4_1/__init__.py",), "classes", ("AxolotlInputConfig",)),
    AXOLOTL_PLUGINS,
)
AXOLOTL_NEW = (Part(("axolotl/utils/schemas/*.py",), "classes", ("AxolotlInputConfig",)), AXOLOTL_PLUGINS)
# the last release of every minor (pick_version reads a release at its own minor's dump); axolotl's config model
# moved from utils/config/models/input/v0_4_1/ to utils/schemas/ in 0.8.0
AXOLOTL_RELEASES = {"0.5.2": AXOLOTL_OLD, "0.6.0": AXOLOTL_OLD, "0.7.0": AXOLOTL_OLD}
AXOLOTL_RELEASES |= {
    v: AXOLOTL_NEW
    for v in ("0.8.1", "0.9.2", "0.10.0", "0.11.0", "0.12.2", "0.13.2", "0.14.0", "0.15.0", "0.16.1", "0.17.0")
}
AXOLOTL_RELEASES |= {v: AXOLOTL_NEW for v in ("0.18.0", "0.19.0")}
TRL_RELEASES = ("0.8.6", "0.9.6", "0.10.1", "0.11.4", "0.12.2", "0.13.0", "0.14.0", "0.15.2", "0.16.1", "0.17.0")
TRL_RELEASES += ("0.18.2", "0.19.1", "0.20.0", "0.21.0", "0.22.2", "0.23.1", "0.24.0", "0.25.1", "0.26.2", "0.27.2")
TRL_RELEASES += ("0.28.0", "0.29.1", "1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.1", "1.6.0", "1.7.1", "1.8.0")
TRL_RELEASES += ("1.9.2", "1.10.0", "1.11.0", "1.12.0", "1.13.0", "1.14.2", "1.15.0", "1.16.0")
# every LLaMA-Factory release from 0.8.0: its patches change defaults (0.9.1 and 0.9.5 differ)
LF_RELEASES = ("0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.9.0", "0.9.1", "0.9.2", "0.9.3", "0.9.4", "0.9.5")

TARGETS: tuple[Target, ...] = (
    Target(
        "transformers",
        "transformers",
        {
            v: (Part(("transformers/training_args.py", "transformers/training_args_seq2seq.py"), "classes", HF_ROOTS),)
            # 4.54.0: the first whose default `optim` is adamw_torch_fused (with torch >= 2.8)
            for v in ("4.46.3", "4.54.0", "4.57.6", "5.24.0")
        },
    ),
    Target(
        "trl",
        "trl",
        {v: (Part(TRL_FILES, "classes", TRL_ROOTS),) for v in TRL_RELEASES},
        extends=("transformers TrainingArguments",),
    ),
    Target("axolotl", "axolotl", AXOLOTL_RELEASES),
    Target(
        "llamafactory",
        "llamafactory",
        {
            **{v: (Part(("llmtuner/hparams/*.py",), "classes", LF_ROOTS),) for v in ("0.6.3", "0.7.0")},
            **{v: (Part(("llamafactory/hparams/*.py",), "classes", LF_ROOTS),) for v in LF_RELEASES},
        },
        extends=("transformers Seq2SeqTrainingArguments",),
        published_as={"0.6.3": "llmtuner", "0.7.0": "llmtuner"},
    ),
    Target(
        "ms-swift",
        "ms-swift",
        {
            "1.7.3": SWIFT_1,
            "2.6.1": SWIFT_1,
            # the last release of every 3.x and 4.x minor: arguments come and go within a major (3.5's
            # `--gc_collect_after_offload` is in neither 2.6.1 nor 3.12.6)
            **{v: SWIFT_3 for v in SWIFT_3_RELEASES},
            **{v: SWIFT_4 for v in SWIFT_4_RELEASES},
        },
        extends=("transformers Seq2SeqTrainingArguments",),
    ),
    Target(
        "megatron-swift",
        "ms-swift",
        {
            **{v: MEGATRON_SWIFT_3 for v in SWIFT_3_RELEASES if version_key(v) >= version_key("3.3")},
            **{v: MEGATRON_SWIFT_4 for v in SWIFT_4_RELEASES},
        },
        note="Megatron-SWIFT's own argument classes (Megatron-LM's flags as dataclass fields, with ms-swift's "
        "BaseArguments), from the ms-swift wheel",
    ),
    Target(
        "megatron",
        "megatron-core",
        {
            v: (MEGATRON_ARGPARSE,) if version_key(v) < version_key("0.16") else (MEGATRON_ARGPARSE, MEGATRON_FACTORIES)
            for v in MEGATRON_TAGS
        },
        note="Megatron-LM's command line, read at each megatron-core release's tag of NVIDIA/Megatron-LM (the "
        "megatron-core wheel does not hold megatron/training/)",
        repository="NVIDIA/Megatron-LM",
        tags=MEGATRON_TAGS,
    ),
    Target("torchtune", "torchtune", {"0.1.1": TUNE, "0.6.1": TUNE}),
    Target(
        "torchtitan",
        "torchtitan",
        {
            "0.1.0": (
                Part(("torchtitan/config_manager.py",), "argparse"),
                Part(("torchtitan/config_manager.py",), "classes", ("JobConfig",)),
            ),
            "0.2.2": (Part(("torchtitan/config/job_config.py",), "classes", ("JobConfig",)),),
        },
        note="0.3.0 composes its configuration from `Configurable` classes spread over its modules "
        "(torchtitan/config/configs.py holds only some sections); 0.2.2 is the newest dumped",
    ),
    # OpenRLHF's dotted command line (`--model.model_name_or_path`, `--train.micro_batch_size`) first ships in
    # 0.10.2 (openrlhf/cli/train_sft.py); 0.10.1 still reads `--pretrain`, `--micro_train_batch_size`.
    Target("openrlhf", "openrlhf", {v: ORLHF for v in ("0.9.10", "0.10.1", "0.10.2", "0.11.2")}),
    Target(
        "nemo-automodel",
        "nemo_automodel",
        {
            v: (
                Part(
                    ("nemo_automodel/recipes/*.py", "nemo_automodel/recipes/*/*.py"), "reads", receivers=("self.cfg",)
                ),
            )
            for v in ("0.1.0", "0.7.0")
        },
        note='only the recipes\' reads of their config (`cfg.get("step_scheduler.local_batch_size", 1)`) are dumped: '
        "NeMo AutoModel has no argument classes, and its example YAML recipes are not shipped in the wheel",
    ),
)

# Frameworks whose arguments come from elsewhere or cannot be dumped by this script, and why.
NOT_HERE: dict[str, str] = {
    "verl": "dumped by scripts/dump_verl_defaults.py from its hydra YAML trainer configs (the dataclass configs of "
    "newer versions are instantiated from that YAML)",
}


def _archive(package: str, version: str, wheels: Path) -> Path:
    stem = package.replace("-", "_").lower()

    def found() -> list[Path]:
        return sorted(
            p
            for p in wheels.iterdir()
            if p.name.lower().replace("-", "_").startswith(f"{stem}_{version}")
            or p.name.lower().replace("-", "_").startswith(f"{stem}-{version}")
        )

    if not found():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-build-isolation",
                f"{package}=={version}",
                "-d",
                str(wheels),
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
    files = found()
    if not files:
        raise RuntimeError(f"{package} {version}: pip download gave no file")
    return next((f for f in files if f.suffix == ".whl"), files[0])


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=600).stdout


def _clone(repository: str, clones: dict[str, Path], tmp: Path) -> Path:
    """A git repository of `repository` ("owner/name"): the clone --git names, else a blob-less bare clone made in
    `tmp` (its files are fetched as they are read)."""
    if repository in clones:
        return clones[repository]
    path = tmp / repository.replace("/", "+")
    if not path.exists():
        subprocess.run(
            ["git", "clone", "-q", "--bare", "--filter=blob:none", f"https://github.com/{repository}.git", str(path)],
            check=True,
            capture_output=True,
            timeout=1800,
        )
    clones[repository] = path
    return path


def _tag_members(repo: Path, tag: str, parts: tuple[Part, ...]) -> tuple[dict[str, bytes], str]:
    """The files the parts name at the tag (read with `git show`; nothing is checked out), and the tag's commit."""
    commit = _git(repo, "rev-parse", f"{tag}^{{commit}}").decode().strip()
    names = _git(repo, "ls-tree", "-r", "--name-only", commit).decode().splitlines()
    patterns = [pat for part in parts for pat in part.files]
    members = {
        n: _git(repo, "show", f"{commit}:{n}") for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)
    }
    return members, commit


def _members(archive: Path) -> dict[str, bytes]:
    """The archive's .py and .yaml files by path, with an sdist's top folder (`pkg-1.0/`) and `src/` removed and a
    wheel's `.data/purelib/` prefix removed."""
    out: dict[str, bytes] = {}
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            items = [(n, lambda n=n: z.read(n)) for n in z.namelist()]
            return _normalise(items, out)
    with tarfile.open(archive) as t:
        items = [(m.name, lambda m=m: t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]
        return _normalise(items, out)


def _normalise(items, out: dict[str, bytes]) -> dict[str, bytes]:
    for name, read in items:
        if not name.endswith((".py", ".yaml", ".yml")):
            continue
        path = name
        if ".data/purelib/" in path:
            path = path.split(".data/purelib/", 1)[1]
        elif "/src/" in path:
            path = path.split("/src/", 1)[1]
        out[path] = read()
    return out


def _matching(members: dict[str, bytes], part: Part) -> list[str]:
    return sorted(
        p
        for p in members
        if any(fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase("x/" + p, pat) for pat in part.files)
        and not any(fnmatch.fnmatchcase(p, pat) for pat in part.exclude)
    )


def _json_value(value):
    """A default as JSON can hold it (tuples and sets as lists); None when it cannot be."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_json_value(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return None


def _stem(file: str) -> str:
    return file.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _record(a: argdefs.ArgDef, file: str, owner: str | None = None) -> dict:
    default = _json_value(a.default)
    text = a.default_text
    if default is None and a.default is not None and text is None:
        text = repr(a.default)[:200]
    record = {
        "name": a.name,
        "aliases": sorted(a.aliases),
        "type": a.type,
        "default": default,
        "default_text": text[:200] if text else None,
        "choices": _json_value(list(a.choices)) if a.choices else None,
        "owner": owner or a.owner,
        "file": file,
        "line": a.line,
    }
    if a.default_when:
        record["default_when"] = [[cond[:200], _json_value(value)] for cond, value in a.default_when]
    return record


def _yaml_leaves(text: str, name: str, file: str) -> list[dict]:
    _, settings = load_yaml(text, file)
    out = []
    for s in settings:
        if isinstance(s.value, (dict, list)) and s.value:
            continue
        line = s.key_span.start_line + 1 if s.key_span else 0
        value = _json_value(s.value)
        out.append(
            {
                "name": ".".join(str(p) for p in s.path),
                "aliases": [],
                "type": _type_of(value),
                "default": value,
                "default_text": None,
                "choices": None,
                "owner": name,
                "file": file,
                "line": line,
            }
        )
    return out


def _type_of(value) -> str | None:
    for t, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list"), (dict, "dict")):
        if isinstance(value, t):
            return name
    return None


def dump_part(members: dict[str, bytes], part: Part) -> tuple[list[dict], list[str], dict[str, list[str]]]:
    """The argument records of one part, notes on what could not be read, and for a "classes" part each owner
    class's bases among the classes read (`PPOConfig` → `OnPolicyConfig` in trl 0.19: the fields a config
    inherits keep the owner that defines them, and a reader looks them up through the class's bases)."""
    files = _matching(members, part)
    notes: list[str] = []
    if not files:
        return [], [f"no file matches {', '.join(part.files)}"], {}
    records: list[dict] = []
    if part.how == "yaml":
        for f in files:
            owner = f.split("configs/", 1)[-1].rsplit(".", 1)[0]
            try:
                records += _yaml_leaves(members[f].decode("utf-8"), owner, f)
            except (ValueError, UnicodeDecodeError) as e:  # a config the loader refuses is named, the rest dumped
                notes.append(f"{f}: {type(e).__name__}: {e}")
        return records, notes, {}
    modules: dict[str, argdefs.ModuleArgs] = {}
    bases: dict[str, list[str]] = {}
    for f in files:
        text = members[f].decode("utf-8")
        for receiver in part.receivers:  # same length, so lines stay where they were
            text = text.replace(receiver + ".", "cfg." + " " * (len(receiver) - 3))
        try:
            modules[f] = argdefs.read_module(text, f)
        except argdefs.SourceRefused as e:
            notes.append(str(e))
    # an argparse parser or a config read belongs to its script: the owner is the script's name
    if part.how == "argparse":
        for f, m in modules.items():
            records += [_record(a, f, owner=_stem(f)) for a in m.parsers]
    elif part.how == "reads":
        for f, m in modules.items():
            records += [_record(a, f, owner=_stem(f)) for a in m.config_reads]
    elif part.how == "plugins":
        records, why = _plugin_records(members, modules)
        notes += why
    elif part.how == "factories":
        records, why = factory_arguments(members, files)
        notes += why
    else:
        classes, where, trees = _classes(members, modules)
        # every class the part's files define, fields or not (a mixin of methods holds no argument)
        defined = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
        roots = [r for r in part.roots if r in classes]
        if not roots:
            notes.append(f"none of the classes {', '.join(part.roots)} found")
        for r in roots:
            records += [_record(a, where.get(a.owner, "")) for a in argdefs.flatten(classes, r)]
            notes += _unread_bases(classes, r, part, defined)
        owners = {r["owner"] for r in records} | set(roots)
        for name in sorted(owners):
            known = [b.rsplit(".", 1)[-1] for b in classes[name].bases] if name in classes else []
            if found := [b for b in known if b in classes and b != name]:
                bases[name] = found
    return records, notes, bases


def _classes(members: dict[str, bytes], modules: dict[str, argdefs.ModuleArgs]) -> tuple[dict, dict[str, str], dict]:
    """Every class the modules define (a subclass's re-export over the class itself skipped: trl 0.29
    trainer/kto_config.py `KTOConfig(_KTOConfig)`), the file defining each, and each file's parsed tree."""
    classes: dict[str, argdefs.ClassArgs] = {}
    where: dict[str, str] = {}
    trees = {f: ast.parse(members[f]) for f in modules}
    for f, m in modules.items():
        imported = _imported_as(trees[f])
        for name, c in m.classes.items():
            if name in classes and any(imported.get(b.rsplit(".", 1)[-1]) == name for b in c.bases):
                continue
            if name not in classes or c.kind != "plain":
                classes[name] = c
                where[name] = f
    return classes, where, trees


def _field_options(trees: dict[str, ast.Module]) -> dict[tuple[str, str], dict]:
    """(class, field) -> what its `field(...)` says beyond the default: `init` when False, and the literal
    `metadata={"argparse_meta": {...}}` Megatron-LM's ArgumentGroupFactory lets take precedence."""
    out: dict[tuple[str, str], dict] = {}
    for tree in trees.values():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for item in cls.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                call = item.value
                if not (
                    isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "field"
                ):
                    continue
                options: dict = {}
                for kw in call.keywords:
                    try:
                        value = ast.literal_eval(kw.value)
                    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                        continue
                    if kw.arg == "init" and value is False:
                        options["init"] = False
                    elif (
                        kw.arg == "metadata"
                        and isinstance(value, dict)
                        and isinstance(value.get("argparse_meta"), dict)
                    ):
                        options["meta"] = value["argparse_meta"]
                if options:
                    out[(cls.name, item.target.id)] = options
    return out


def _factory_calls(tree: ast.Module) -> list[tuple[str, frozenset[str], int]]:
    """Each `ArgumentGroupFactory(Config, exclude=[...])` of a module: the class, the excluded fields (a literal list,
    or a name a literal list is bound to in the same function) and the line."""
    out = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))):
        lists: dict[str, list] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                try:
                    value = ast.literal_eval(n.value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
                if isinstance(value, list):
                    lists[n.targets[0].id] = value
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Call) and getattr(n.func, "id", "") == "ArgumentGroupFactory" and n.args):
                continue
            cls = ast.unparse(n.args[0]).rsplit(".", 1)[-1]
            excluded: list = []
            for kw in n.keywords:
                if kw.arg == "exclude":
                    if isinstance(kw.value, ast.Name):
                        excluded = lists.get(kw.value.id, [])
                    else:
                        try:
                            excluded = ast.literal_eval(kw.value)
                        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                            excluded = []
            out.append((cls, frozenset(excluded), n.lineno))
    return sorted(set(out), key=lambda c: c[2])


def factory_arguments(members: dict[str, bytes], files: list[str]) -> tuple[list[dict], list[str]]:
    """The flags Megatron-LM's `ArgumentGroupFactory` adds for a dataclass (megatron/training/argument_utils.py
    core_v0.16.1 `_build_argparse_kwargs_from_field`, `build_group`): one per field (its bases' included) not
    excluded and not `init=False`, named `--field-name` with `dest` the field; a bool field whose default is True
    becomes `--no-field-name`/`--disable-field-name` (store_false); a field's `argparse_meta` metadata overrides the
    names (`arg_names`) and the default. Fields typed by another class are not flags (the factory cannot type
    them)."""
    modules: dict[str, argdefs.ModuleArgs] = {}
    notes: list[str] = []
    for f in files:
        try:
            modules[f] = argdefs.read_module(members[f].decode("utf-8"), f)
        except argdefs.SourceRefused as e:
            notes.append(str(e))
    classes, where, trees = _classes(members, modules)
    options = _field_options(trees)
    records: list[dict] = []
    for f, tree in trees.items():
        for cls, excluded, _ in _factory_calls(tree):
            if cls not in classes:
                notes.append(f"{f}: ArgumentGroupFactory({cls}): the class is not in the files read")
                continue
            for a in argdefs.flatten(classes, cls):
                if "." in a.name or a.name in excluded:
                    continue
                opt = options.get((a.owner, a.name), {})  # the class whose definition of the field stands
                if opt.get("init") is False:
                    continue
                meta = opt.get("meta", {})
                dashed = a.name.replace("_", "-")
                names = [f"no-{dashed}", f"disable-{dashed}"] if a.type == "bool" and a.default is True else [dashed]
                if isinstance(meta.get("arg_names"), list):
                    names = [str(n).lstrip("-") for n in meta["arg_names"]]
                default = meta["default"] if "default" in meta else a.default
                a = replace(a, aliases=tuple(n for n in names if n.replace("-", "_") != a.name), default=default)
                records.append(_record(a, where.get(a.owner, "")))
    return records, notes


def _imported_as(tree: ast.Module) -> dict[str, str]:
    """A module's imports under another name: local name -> the imported name (`from ..experimental.kto import
    KTOConfig as _KTOConfig`)."""
    return {
        a.asname: a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
        if a.asname is not None
    }


# Bases that hold no arguments, or whose arguments another package's dump holds (`Target.extends`)
NO_ARGUMENT_BASES = frozenset(
    {
        "object",
        "ABC",
        "Generic",
        "BaseModel",
        "Enum",
        "TrainingArguments",
        "Seq2SeqTrainingArguments",
        "HfTrainingArguments",  # ms-swift's name for transformers' classes (swift/trainers/arguments.py)
        "HfSeq2SeqTrainingArguments",
        "BaseTrainingArguments",  # LLaMA-Factory's name for transformers' Seq2SeqTrainingArguments
    }
)


def _unread_bases(classes: dict[str, argdefs.ClassArgs], root: str, part: Part, defined: set[str]) -> list[str]:
    """A note for each class `root` inherits from that no file of the part defines (`defined`): its arguments are
    missing from the dump (ms-swift 4.x `RLHFArguments` → `GRPOArgumentsMixin`, in swift/rlhf_trainers/
    args_mixin.py), which must be said rather than dumped as if the class had none."""
    notes, seen, todo = [], set(), [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for base in (b.rsplit(".", 1)[-1] for b in classes[name].bases) if name in classes else ():
            if base in classes:
                todo.append(base)
            elif base not in NO_ARGUMENT_BASES and base not in defined:
                notes.append(f"{root}: base class {base} of {name} is not in {', '.join(part.files)}: not dumped")
    return sorted(set(notes))


def _registrations(text: str) -> list[tuple[str, str]]:
    """(plugin class, dotted path of its argument class) for each class of a module whose `get_input_args` returns
    a string constant (axolotl integrations/base.py `BasePlugin.get_input_args`)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ClassDef):
            continue
        for fn in node.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "get_input_args":
                for ret in ast.walk(fn):
                    if (
                        isinstance(ret, ast.Return)
                        and isinstance(ret.value, ast.Constant)
                        and isinstance(ret.value.value, str)
                    ):
                        out.append((node.name, ret.value.value))
    return out


def _plugin_records(members: dict[str, bytes], modules: dict[str, argdefs.ModuleArgs]) -> tuple[list[dict], list[str]]:
    """The argument records of axolotl's bundled plugins (Part "plugins"): the plugin is named as a config lists it,
    `axolotl.integrations.<folder>.<PluginClass>` (integrations/base.py `load_plugin` imports the module path and
    takes the class; each folder's `__init__` exports its plugin)."""
    records: list[dict] = []
    notes: list[str] = []
    folder_of = {f: f.split("integrations/", 1)[1].split("/", 1)[0] for f in modules}
    for f in sorted(modules):
        for plugin, path in _registrations(members[f].decode("utf-8")):
            folder = folder_of[f]
            pool: dict[str, argdefs.ClassArgs] = {}
            where: dict[str, str] = {}
            for g, m in modules.items():
                if folder_of[g] == folder:
                    for name, c in m.classes.items():
                        pool.setdefault(name, c)
                        where.setdefault(name, g)
            cls = path.rsplit(".", 1)[-1]
            if cls not in pool:
                notes.append(f"{f}: {plugin}'s argument class {path} not found in integrations/{folder}/")
                continue
            for a in argdefs.flatten(pool, cls):
                records.append(
                    _record(a, where.get(a.owner, f)) | {"plugin": f"axolotl.integrations.{folder}.{plugin}"}
                )
    return records, notes


def _config_keys(leaves: list[dict], configs: dict[str, dict]) -> list[dict]:
    """A recipe's shipped configs: each key once as an argument (owner "configs"; its default when every config
    that sets it agrees), and each config's own values in `configs` (config name -> {key: value})."""
    by_name: dict[str, list[dict]] = {}
    for r in leaves:
        configs.setdefault(r["owner"], {})[r["name"]] = r["default"]
        by_name.setdefault(r["name"], []).append(r)
    out = []
    for name, rs in by_name.items():
        values = {json.dumps(r["default"], sort_keys=True) for r in rs}
        types = {r["type"] for r in rs} - {None}
        same = len(values) == 1
        out.append(
            {
                "name": name,
                "aliases": [],
                "type": types.pop() if len(types) == 1 else None,
                "default": rs[0]["default"] if same else None,
                "default_text": None if same else f"set by {len(rs)} configs, to {len(values)} values",
                "choices": None,
                "owner": "configs",
                "file": rs[0]["file"],
                "line": rs[0]["line"],
            }
        )
    return out


# transformers' enums that frameworks use as defaults (axolotl `optimizer: OptimizerNames.ADAMW_HF.value`,
# `lr_scheduler: SchedulerType.COSINE`): read from this release's transformers/training_args.py and
# transformers/trainer_utils.py; their members' values are stable across releases
TRANSFORMERS_ENUMS = ("transformers", "4.46.3", ("transformers/training_args.py", "transformers/trainer_utils.py"))
_ENUM_DEFAULT = re.compile(r"([A-Z]\w*)\.([A-Z][A-Z0-9_]*)(?:\.value)?")


def _enum_members(sources: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    """`{enum class: {member: literal value}}` of every Enum subclass (`class X(str, Enum)`, transformers'
    `ExplicitEnum`) the sources define, read with `ast`."""
    out: dict[str, dict[str, Any]] = {}
    for text in sources.values():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if not any(b.endswith("Enum") for b in bases):
                continue
            members = {}
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    try:
                        members[stmt.targets[0].id] = ast.literal_eval(stmt.value)
                    except ValueError:
                        continue
            out.setdefault(node.name, members)
    return out


def _resolve_enum_defaults(records: list[dict], enums: dict[str, dict[str, Any]]) -> None:
    """A default written as an enum member (`OptimizerNames.ADAMW_HF.value`, `AttentionFunction.AUTO`) becomes the
    member's value when the enum is one the package or transformers defines; the source text stays beside it."""
    for r in records:
        m = _ENUM_DEFAULT.fullmatch(r.get("default_text") or "")
        if r.get("default") is None and m and m.group(2) in enums.get(m.group(1), {}):
            r["default"] = enums[m.group(1)][m.group(2)]


def dump(target: Target, version: str, wheels: Path, clones: dict[str, Path] | None = None) -> tuple[dict, list[str]]:
    """One release's dump; `clones`: git repositories by "owner/name" (--git), a clone made in `wheels` otherwise."""
    if target.repository:
        repo = _clone(target.repository, clones if clones is not None else {}, wheels)
        members, commit = _tag_members(repo, target.tags[version], target.versions[version])
        source = {"file": f"{target.repository}@{target.tags[version]}", "commit": commit}
    else:
        archive = _archive(target.published_as.get(version, target.package), version, wheels)
        members = _members(archive)
        source = {"file": archive.name, "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}
    records: list[dict] = []
    notes: list[str] = []
    configs: dict[str, dict] = {}
    bases: dict[str, list[str]] = {}
    for part in target.versions[version]:
        got, why, found = dump_part(members, part)
        bases |= found
        notes += why
        if part.how == "yaml":
            records += _config_keys(got, configs)
        else:
            records += got
    package, release, files = TRANSFORMERS_ENUMS
    enums = _enum_members({f: b for f, b in _members(_archive(package, release, wheels)).items() if f in files})
    enums |= _enum_members({f: b for f, b in members.items() if f.endswith(".py")})
    _resolve_enum_defaults(records, enums)
    unique = {(r["name"], r["owner"]): r for r in records}
    args = [unique[k] for k in sorted(unique)]
    data = {
        "framework": target.framework,
        "version": version,
        "source": [source],
        "extends": list(target.extends),
        "arguments": args,
    }
    if bases:
        data["bases"] = dict(sorted(bases.items()))
    if configs:
        data["configs"] = {k: configs[k] for k in sorted(configs)}
    if notes:
        data["notes"] = notes
    return data, notes


def write(data: dict) -> Path:
    path = OUT / data["framework"] / f"{data['version']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {k: v for k, v in data.items() if k not in ("arguments", "configs")}
    lines = [json.dumps(a, sort_keys=True, ensure_ascii=False, allow_nan=False) for a in data["arguments"]]
    text = json.dumps(head, sort_keys=True, ensure_ascii=False)[:-1] + ', "arguments": [\n' + ",\n".join(lines) + "\n]"
    if data.get("configs"):
        text += (
            ', "configs": {\n'
            + ",\n".join(
                f"{json.dumps(k)}: {json.dumps(v, sort_keys=True, ensure_ascii=False, allow_nan=False)}"
                for k, v in data["configs"].items()
            )
            + "\n}"
        )
    text += "}\n"
    path.write_text(text, encoding="utf-8")
    return path


def write_index(not_dumped: dict[str, str]) -> Path:
    """schemas/index.json: every framework folder's versions, and the frameworks not dumped with the reason."""
    frameworks = {}
    for d in sorted(p for p in OUT.iterdir() if p.is_dir()):
        versions = sorted((p.stem for p in d.glob("*.json")), key=version_key)
        if versions:
            frameworks[d.name] = {"versions": versions}
            if d.name in NOT_HERE:
                frameworks[d.name]["dumped_by"] = NOT_HERE[d.name]
            note = next((t.note for t in TARGETS if t.framework == d.name and t.note), None)
            if note:
                frameworks[d.name]["note"] = note
    index = {"frameworks": frameworks, "not_dumped": dict(sorted(not_dumped.items()))}
    path = OUT / "index.json"
    path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("only", nargs="*", help="FRAMEWORK or FRAMEWORK==VERSION (default: all of TARGETS)")
    ap.add_argument("--wheels", type=Path, help="a folder of already downloaded packages (default: a temp dir)")
    ap.add_argument(
        "--git",
        action="append",
        default=[],
        metavar="OWNER/NAME=PATH",
        help="a local clone of a framework's repository (default: a blob-less clone into the temp dir)",
    )
    args = ap.parse_args(argv)
    wanted = [w.partition("==") for w in args.only]
    clones = {name: Path(path) for name, _, path in (g.partition("=") for g in args.git)}
    not_dumped: dict[str, str] = {}
    old = OUT / "index.json"
    if old.exists():
        not_dumped = json.loads(old.read_text(encoding="utf-8")).get("not_dumped", {})
    for fw, why in NOT_HERE.items():
        print(f"{fw}: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = args.wheels or Path(tmp)
        wheels.mkdir(parents=True, exist_ok=True)
        for target in TARGETS:
            for version in target.versions:
                if wanted and not any(w == target.framework and (not v or v == version) for w, _, v in wanted):
                    continue
                try:
                    data, notes = dump(target, version, wheels, clones)
                except (RuntimeError, subprocess.SubprocessError, OSError) as e:
                    print(f"{target.framework} {version}: not dumped: {e}")
                    not_dumped[f"{target.framework} {version}"] = str(e)[:200]
                    continue
                not_dumped.pop(f"{target.framework} {version}", None)
                path = write(data)
                print(
                    f"{target.framework} {version}: {len(data['arguments'])} arguments -> "
                    f"{path.relative_to(ROOT)}" + "".join(f"\n    note: {n}" for n in notes)
                )
                if not data["arguments"]:
                    not_dumped[f"{target.framework} {version}"] = "; ".join(notes) or "no argument definitions found"
    print(f"index: {write_index(not_dumped).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
