"""Every argument of a framework, at the version the workspace runs, held to that version's own definitions.

Runs once after a framework's reader filled a plan (`formats.parse_yaml_text`, `formats.shell.build_plan`). For a plan
whose framework has dumped argument schemas (`frameworks/schemas/`), at the version pinned in the workspace
(`environment.workspace_pins`) or else the newest dump, each setting is checked against that version's arguments:
- an argument of that version that changes memory or speed and that the estimate does not model
  (`irrelevant.NOT_MODELLED`), set to something other than its default and not used by the reader: named as not
  modelled (`PlanBuilder.unmodelled`);
- a key renamed between versions (TRL `max_seq_length` → `max_length`, ms-swift `sft_type` → `train_type` →
  `tuner_type`): a note naming the versions between which it changed;
- a key that is no argument of that version, for frameworks that stop on unknown arguments: an unknown-name issue
  with the nearest argument name of that version.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Iterable, Mapping

from vramlens.formats.settings import PlanBuilder, Setting, closest, to_bool
from vramlens.frameworks import irrelevant, schemas
from vramlens.frameworks.axolotl import plugins as axolotl_plugins
from vramlens.plan import IssueKind, Severity

# plan.framework -> the dumped framework whose arguments it reads (nemo-automodel plans use transformers' defaults,
# but their recipes' keys are read by formats/nemo_automodel.py)
DUMPED = {
    "transformers": "transformers",
    "trl": "trl",
    "axolotl": "axolotl",
    "llamafactory": "llamafactory",
    "ms-swift": "ms-swift",
    "megatron-swift": "megatron-swift",
    "megatron": "megatron",
    "torchtune": "torchtune",
    "torchtitan": "torchtitan",
    "openrlhf": "openrlhf",
    "verl": "verl",
}

# each framework's distribution on PyPI (the name a workspace pins it by)
DISTRIBUTIONS = {
    "transformers": "transformers",
    "trl": "trl",
    "axolotl": "axolotl",
    "llamafactory": "llamafactory",
    "ms-swift": "ms-swift",
    "megatron-swift": "ms-swift",  # Megatron-SWIFT ships in ms-swift
    "megatron": "megatron-core",  # Megatron-LM's releases are megatron-core's (its core_v<version> tags)
    "torchtune": "torchtune",
    "torchtitan": "torchtitan",
    "openrlhf": "openrlhf",
    "verl": "verl",
}

# the names a framework's releases were published under before (LLaMA-Factory up to 0.7: `llmtuner`)
EARLIER_DISTRIBUTIONS = {"llamafactory": ("llmtuner",)}

TITLES = {
    "transformers": "transformers",
    "trl": "TRL",
    "axolotl": "axolotl",
    "llamafactory": "LLaMA-Factory",
    "ms-swift": "ms-swift",
    "megatron-swift": "Megatron-SWIFT",
    "megatron": "Megatron-LM",
    "torchtune": "torchtune",
    "torchtitan": "torchtitan",
    "openrlhf": "OpenRLHF",
    "verl": "verl",
}

# Keys renamed between releases: (framework, old) -> new. The versions between which each changed are read from
# the dumps (the newest that still has the old name, the oldest that has the new one).
RENAMED = {
    ("trl", "max_seq_length"): "max_length",
    ("ms-swift", "sft_type"): "train_type",
    ("ms-swift", "train_type"): "tuner_type",
    ("megatron-swift", "train_type"): "tuner_type",
    # ms-swift 4.0's Megatron-SWIFT loads an mcore checkpoint by `--mcore_model` and saves to `--output_dir`
    # (docs/source_en/Megatron-SWIFT/Command-line-parameters.md at v4.0.0), the flags 3.x took as `--load`, `--save`
    ("megatron-swift", "load"): "mcore_model",
    ("megatron-swift", "save"): "output_dir",
}

# Entry points that stop on an argument they do not define, by the tool that runs them or the YAML dialect read:
# - HfArgumentParser (transformers hf_argparser.py `parse_args_into_dataclasses`: "Some specified arguments are not
#   used by the HfArgumentParser"; `parse_dict(allow_extra_keys=False)`: "Some keys are not used by the
#   HfArgumentParser"), which TRL's `trl` CLI (TrlParser), LLaMA-Factory (src/llamafactory/hparams/parser.py
#   `_parse_args`) and ms-swift (swift/utils/utils.py `parse_args`: "remaining_argv") use, Megatron-SWIFT's
#   `megatron sft|pt|rlhf` among them (v4.6.0 swift/pipelines/base.py, v3.5.3 swift/llm/base.py: `raise
#   ValueError(f'remaining_argv: {remaining_argv}')`);
# - axolotl only with `strict: true` (its config model otherwise keeps unknown keys).
STRICT_TOOLS = {
    "trl": "trl",
    "llamafactory": "llamafactory",
    "swift": "ms-swift",
    "axolotl": "axolotl",
    "megatron": "megatron-swift",
}
STRICT_DIALECTS = {"llamafactory": "llamafactory", "axolotl": "axolotl"}
# Frameworks whose entry point stops on an argument it does not define unless the launched script adds it: a flag
# no dumped release defines is said as information, with the reason. Megatron-LM's `parse_args` runs argparse's
# `parse_args()` over its own arguments and the script's `extra_args_provider` (megatron/training/arguments.py
# core_v0.15.3 `parse_args`; pretrain_vlm.py and the forks' copies of pretrain_gpt.py add their own)
ADDED_BY_SCRIPT = {
    "megatron": "Megatron-LM stops on a flag it does not define unless the launched script adds it (its "
    "`extra_args_provider`)",
}
# LLaMA-Factory under USE_MCA=1 parses with mcore_adapter's Megatron training arguments, which are not dumped
# (src/llamafactory/hparams/parser.py `_TRAIN_MCA_ARGS`): a config with Megatron parallel keys is not held to them
MCA_KEYS = {
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "expert_model_parallel_size",
    "use_distributed_optimizer",
}


UNPINNED = "the newest release vramlens has the arguments of"
# what the file itself installs (`TrainingPlan.installs`): distribution → (version, where)
Installs = Mapping[str, tuple[str, str]] | None
# the `frameworkVersions` setting: distribution → version
Told = Mapping[str, str] | None


def version_for(
    framework: str, workspace: Path | None, installs: Installs = None, told: Told = None
) -> tuple[str | None, str]:
    """(the dumped version describing the run, where its version came from): the release the setting names, the
    file itself installs or the workspace pins (`pinned_release`), else the newest dump."""
    pin = pinned_release(framework, workspace, installs, told)
    if pin is not None:
        return schemas.pick_version(framework, pin.version), pin.source
    return schemas.pick_version(framework), UNPINNED


def pinned_release(framework: str, workspace: Path | None, installs: Installs = None, told: Told = None):
    """The release of the framework's distribution the run is pinned to (`environment.Found`: the release as
    pinned — it may fall between two dumps — and where): the `frameworkVersions` setting (`told`), else the file's
    own `pip install` (`TrainingPlan.installs`), else the workspace's exact pin; None when nothing pins it."""
    from vramlens import environment

    dist = DISTRIBUTIONS.get(framework)
    if dist is None:
        return None
    names = (dist, *EARLIER_DISTRIBUTIONS.get(framework, ()))
    named = {environment.canonical(k): v for k, v in (told or {}).items()}
    for name in names:
        if name in named:
            return environment.Found(named[name], "the frameworkVersions setting")
    for name in names:
        if installs and name in installs:
            return environment.Found(*installs[name])
    pins = environment.workspace_pins(workspace) if workspace is not None else {}  # read only when it decides
    return next((pins[name] for name in names if name in pins), None)


def implied_version(
    framework: str, used: Iterable[str], names_of: Callable[[str], set[str]], at_most: str | None = None
) -> tuple[str, list[str]] | None:
    """(the release the file's own arguments belong to, the arguments of the file the newest release lacks) when
    the newest dumped release does not define every argument the file uses that some dumped release defines, or
    the file runs something only releases up to `at_most` have: of the releases up to `at_most`, the one that
    defines the most of the file's arguments, the newer of two that define as many. An ms-swift 2.x line
    (`swift sft --sft_type lora --model_type qwen-7b-chat`: ms-swift v2.4.0 examples/pytorch/llm/scripts/) is read
    with ms-swift 2.6.1's arguments and defaults, not with 4.x's, which renamed both. `names_of`: a release's
    argument names (`names_at`)."""
    have = schemas.versions(framework)
    if not have:
        return None
    newest = have[-1]
    if at_most is not None:
        have = tuple(v for v in have if schemas.version_key(v) <= schemas.version_key(at_most)) or have[:1]
    by_version = {v: names_of(v) for v in (*have, newest)}
    known = {n for n in used if any(n in names for names in by_version.values())}
    missing = sorted(known - by_version[newest])
    if not missing and have[-1] == newest:
        return None
    best = max(reversed(have), key=lambda v: len(known & by_version[v]))  # max keeps the first, the newest
    return (best, missing) if best != newest else None


def _release_note(
    framework: str, version: str, missing: list[str], tool: str | None, at_most: tuple[str, str] | None
) -> str:
    """What made the file read at an older release than the newest: the arguments the newest lacks, or the entry
    point it runs."""
    title, newest = TITLES[framework], schemas.versions(framework)[-1]
    why = []
    if at_most is not None:
        why.append(at_most[1])
    if missing:
        flags = ", ".join(f"`{'--' if tool is not None else ''}{n}`" for n in missing[:4])
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        one = len(missing) == 1
        why.append(
            f"{flags}{more} {'is not an argument' if one else 'are not arguments'} of {title} {newest}, the newest "
            f"release vramlens has the arguments of"
        )
    return (
        f"read as {title} {version}, the release the file is written for: {'; '.join(why)} (pin the release in the "
        f"workspace or name it in the frameworkVersions setting to read it as another)"
    )


def _installed_decides(framework: str) -> bool:
    """Whether the framework is one whose installed version the estimate reads (transformers, TRL:
    `knowledge.frameworks.run_version`): the file's own arguments then do not choose its release."""
    from vramlens import environment

    return DISTRIBUTIONS.get(framework) in environment.PACKAGES


def _extends(framework: str, version: str, workspace: Path | None) -> list[str]:
    """The transformers dumps whose arguments a framework's extend (TRL's configs extend TrainingArguments): the
    pinned transformers, else every dumped one (an unpinned run may use any)."""
    from vramlens import environment

    dump = schemas.schema(framework, version)
    if dump is None or not dump.get("extends"):
        return []
    if environment.workspace_pins(workspace).get("transformers") is not None:
        pinned = version_for("transformers", workspace)[0]
        return [pinned] if pinned is not None else []
    return list(schemas.versions("transformers"))


def _any_version_defines(framework: str, name: str, workspace: Path | None) -> bool:
    return any(name in names_at(framework, v, workspace) for v in schemas.versions(framework))


@functools.lru_cache(maxsize=None)
def _own_names(framework: str, version: str, aliases: bool = True) -> frozenset[str]:
    """The argument names (and aliases) of one dumped schema: the dumps do not change while the server runs."""
    dump = schemas.schema(framework, version)
    return frozenset(
        n
        for a in (dump["arguments"] if dump is not None else ())
        for n in (
            schemas.argument_name(a["name"]),
            *(schemas.argument_name(x) for x in (a.get("aliases") or () if aliases else ())),
        )
    )


def names_at(framework: str, version: str, workspace: Path | None = None) -> set[str]:
    """Every argument name and alias the framework defines at that version, its base classes' included, and each
    section that holds dotted arguments (axolotl's `special_tokens` for `special_tokens.pad_token`)."""
    out = set(_own_names(framework, version))
    out |= {n.split(".", 1)[0] for n in out if "." in n}
    for v in _extends(framework, version, workspace):  # the workspace's pins decide: not cached
        out |= _own_names("transformers", v, aliases=False)
    return out


def _defined(framework: str, name: str, version: str, workspace: Path | None) -> dict | None:
    found = schemas.argument(framework, name, version)
    if found is None:
        for v in _extends(framework, version, workspace):
            found = schemas.argument("transformers", name, v)
            if found is not None:
                break
    return found


def _rename_issue(
    b: PlanBuilder, s: Setting, framework: str, name: str, names: set[str], tool: str | None, title: str
) -> bool:
    """Point out a key renamed in a later release than the one `names` belong to (`_renamed`); whether it was."""
    renamed = _renamed(framework, name, names) if tool is None or tool in STRICT_TOOLS else None
    if renamed is None:
        return False
    new, steps = renamed
    flag = "--" if tool is not None else ""
    b.issue(
        IssueKind.NOT_READ,
        f"`{s.key}` is not an argument of {title}: renamed in {TITLES[framework]} "
        f"({', then '.join(steps)}); write `{flag}{new}`",
        s,
        severity=Severity.INFO,
        suggestion=flag + new,
        span=s.key_span,
    )
    return True


def _name(s: Setting) -> str:
    """The argument a setting gives, as the dumps spell it (dotted for a nested key)."""
    if len(s.path) == 1:
        return schemas.argument_name(s.key)
    return ".".join(schemas.argument_name(str(p)) for p in s.path)


def is_default_or_off(s: Setting, definition: dict) -> bool:
    """Whether a setting leaves its argument as the framework defines it: unset, the default, empty, or off."""
    v = s.value
    if v is None or v == definition.get("default") or v in ([], {}):
        return True
    return to_bool(v) is False


def _renamed(framework: str, name: str, names: set[str]) -> tuple[str, list[str]] | None:
    """(the name the version read has, each rename on the way: "`old` → `new` between <last with old> and <first
    with new>") when `name` was renamed and the version read has a later name instead."""
    steps, new = [], name
    while (nxt := RENAMED.get((framework, new))) is not None and new not in names:
        have = schemas.versions(framework)
        old_in = [v for v in have if schemas.arguments(framework, new, v)]
        new_in = (
            [
                v
                for v in have
                if schemas.version_key(v) > schemas.version_key(old_in[-1]) and schemas.arguments(framework, nxt, v)
            ]
            if old_in
            else []
        )
        if not old_in or not new_in:
            return None
        steps.append(f"`{new}` → `{nxt}` between {old_in[-1]} and {new_in[0]}")
        new = nxt
    return (new, steps) if steps and new in names else None


def apply(
    b: PlanBuilder,
    settings: Iterable[Setting],
    workspace: Path | None,
    *,
    tool: str | None = None,
    at_most: tuple[str, str] | None = None,
    told: Told = None,
) -> None:
    """Hold the settings a reader saw to the framework's own arguments at the version the run uses (module doc).
    `tool`: the command that runs them, for a command line (`trl`, `swift`, `llamafactory`, ...). `at_most`: (the
    newest release that has what the file runs, why), for a file that runs an entry point a later release removed.
    `told`: the `frameworkVersions` setting."""
    plan = b.plan
    framework = DUMPED.get(plan.framework or "")
    if framework is None or plan.format in ("nemo-automodel", "axolotl-cloud"):  # not the framework's own arguments
        return
    version, source = version_for(framework, workspace, plan.installs, told)
    if version is None:
        return
    pinned = source != UNPINNED
    settings = [s for s in settings if not s.unresolved and s.path]
    seen: dict[str, set[str]] = {}

    def names_of(v: str) -> set[str]:  # names_at, once per release for this file
        if v not in seen:
            seen[v] = names_at(framework, v, workspace)
        return seen[v]

    if not pinned and not _installed_decides(framework):
        implied = implied_version(
            framework, {_name(s) for s in settings}, names_of, at_most[0] if at_most is not None else None
        )
        if implied is not None:
            version, missing = implied
            plan.framework_release = version
            plan.read_notes.append(_release_note(framework, version, missing, tool, at_most))
    if tool is not None:
        strict = STRICT_TOOLS.get(tool) == framework
    else:
        strict = STRICT_DIALECTS.get(plan.format) == framework
        if framework == "llamafactory" and any(s.path[0] in MCA_KEYS for s in settings):
            strict = False
        if framework == "axolotl":
            strict = any(s.path == ("strict",) and to_bool(s.value) for s in settings)
    names = names_of(version)
    # a pinned release between two dumps: an argument either neighbour defines may be one of its own
    found = pinned_release(framework, workspace, plan.installs, told)
    pin = found.version if found is not None else None
    around = sorted({v for v in schemas.neighbours(framework, pin) if v not in (None, version)}) if pin else []
    newest = schemas.versions(framework)[-1]
    # read at an older release its arguments imply: a renamed one is still pointed out against the newest
    newest_names = names_of(newest) if plan.framework_release is not None else names
    hints: dict[str, str | None] = {}

    def hint_for(name: str) -> str | None:  # a flag repeated many times is compared with every name once
        if name not in hints:
            hints[name] = closest(name, names)
        return hints[name]

    consumed = {v.key for v in plan.settings().values() if v.key} | {u.key for u in plan.unmodelled}
    consumed |= set(plan.read_alongside)
    sections = {u.key for u in plan.unmodelled}  # a section named as not modelled as a whole covers its entries
    title = f"{TITLES[framework]} {version}"
    handled: set[str] = set()
    unknown_plugin = False
    if framework == "axolotl":
        top = [s for s in settings if len(s.path) == 1]
        handled = axolotl_plugins.check(b, top, version, title)
        unknown_plugin = bool(axolotl_plugins.unknown_listed(top))
    for s in settings:
        if s.key in handled and len(s.path) == 1:
            continue
        name = _name(s)
        if len(s.path) > 1 and str(s.path[0]) in sections:
            continue
        if name in names:
            definition = _defined(framework, name, version, workspace)
            entry = irrelevant.lookup(irrelevant.NOT_MODELLED, name)
            if (
                entry is not None
                and s.key not in consumed
                and definition is not None
                and not is_default_or_off(s, definition)
            ):
                b.unmodelled(s, entry[0], entry[1])
            if name not in newest_names and len(s.path) == 1:
                _rename_issue(b, s, framework, name, newest_names, tool, f"{TITLES[framework]} {newest}")
            continue
        if len(s.path) != 1:
            continue
        if _rename_issue(b, s, framework, name, names, tool, title):
            continue
        flag = "--" if tool is not None else ""
        if (
            framework == "axolotl"
            and not strict
            and not _any_version_defines(framework, name, workspace)
            and s.key not in consumed
        ):
            # axolotl's config model drops the keys it does not define (frameworks/axolotl/plugins.py): the run
            # never sees this one, and neither does the estimate
            hint = hint_for(name)
            b.issue(
                IssueKind.NOT_READ,
                f"`{s.key}` is not an argument of {title} or of the plugins it ships: axolotl drops keys its config "
                f"does not define"
                + (", unless a plugin `plugins` lists defines it" if unknown_plugin else "")
                + (f" — did you mean `{hint}`?" if hint else ""),
                s,
                severity=Severity.INFO,
                suggestion=hint,
                span=s.key_span,
            )
        elif framework in ADDED_BY_SCRIPT and (pinned or not _any_version_defines(framework, name, workspace)):
            if s.key in consumed:
                continue
            hint = hint_for(name)
            if hint and "-" in s.key:  # in the file's own spelling
                hint = hint.replace("_", "-")
            b.issue(
                IssueKind.NOT_READ,
                f"`{s.key}` is not an argument of {title}"
                + ("" if pinned else " or of any release vramlens has the arguments of")
                + f": {ADDED_BY_SCRIPT[framework]}; not read"
                + (f" — did you mean `{flag}{hint}`?" if hint else ""),
                s,
                severity=Severity.INFO,
                suggestion=flag + hint if hint else None,
                span=s.key_span,
            )
        elif (
            strict
            and (pinned or not _any_version_defines(framework, name, workspace))
            and not any(name in names_of(v) for v in around)
        ):
            # unpinned, the newest release is only an assumption: an argument an older release defines is not flagged
            hint = hint_for(name)
            if around:
                # the pinned release's own arguments are not dumped: one a release between the two added and a
                # later one removed is not known (ms-swift 3.5.0's `--gc_collect_after_offload`)
                message = (
                    f"`{s.key}` is not an argument of {title} or {' or '.join(around)}, the releases vramlens has "
                    f"the arguments of either side of the pinned {pin}: it may be one of {pin}'s own, which vramlens "
                    f"does not have; {TITLES[framework]} stops on arguments it does not define"
                )
            else:
                message = f"`{s.key}` is not an argument of {title}, which stops on arguments it does not define"
            b.issue(
                IssueKind.NOT_READ if around else IssueKind.UNKNOWN_VALUE,  # not known either way: information
                message + (f" — did you mean `{flag}{hint}`?" if hint else ""),
                s,
                suggestion=flag + hint if hint else None,
                span=s.key_span,
                **({"severity": Severity.INFO} if around else {}),
            )
