"""axolotl's plugins: which of a config's keys reach the run, and which plugins the estimate models.

axolotl validates a config with one pydantic model (`AxolotlInputConfig`, `model_config = {"populate_by_name": True}`:
pydantic's default `extra="ignore"` drops every key the model does not define). A plugin's arguments join that model
only when `plugins:` lists the plugin (axolotl src/axolotl/utils/config/__init__.py `validate_config` →
integrations/config.py `merge_input_args`, which subclasses the model with each listed plugin's `get_input_args()`
class). So `liger_rms_norm: true` without `axolotl.integrations.liger.LigerPlugin` in `plugins` is dropped, and the
run uses no Liger kernel.

Which key belongs to which plugin comes from the dumped schemas (`scripts/dump_framework_schemas.py`, Part
"plugins": each argument record names its plugin). A plugin is matched as axolotl loads it (integrations/base.py
`PluginManager.register` → `load_plugin`: the module path and the class name): by its class name, so
`axolotl.integrations.liger.LigerPlugin` and `axolotl.integrations.liger.plugin.LigerPlugin` are one plugin.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from vramlens.formats.settings import PlanBuilder, Setting, to_bool
from vramlens.frameworks import schemas
from vramlens.plan import IssueKind, Severity

# The bundled plugins the estimate accounts for, by class name, and how:
# - "read": the axolotl reader reads its switches (readers.py; the switches it does not read are held to
#   frameworks/irrelevant.py like any argument);
# - "irrelevant": it does not change the training step's memory or speed (the reason).
# Every other plugin a config lists is named as not modelled, with the arguments it sets.
ROLES: dict[str, tuple[str, str]] = {
    "LigerPlugin": ("read", "Liger kernels: their switches are read"),
    "CutCrossEntropyPlugin": ("read", "Cut Cross-Entropy: no full logits tensor"),
    # integrations/swanlab/plugins.py: logs metrics (and sampled completions) to SwanLab from the trainer's callbacks
    "SwanLabPlugin": ("irrelevant", "logs metrics to SwanLab"),
    # integrations/lm_eval/__init__.py `post_train_unload`: runs the lm-eval harness after training has ended
    "LMEvalPlugin": ("irrelevant", "runs the lm-eval harness after training"),
}


@functools.lru_cache(maxsize=1)
def owners() -> dict[str, frozenset[str]]:
    """Each plugin argument's name → the plugins (dotted, as a config lists them) that define it, over every dumped
    axolotl version; a name axolotl's own model defines at some version is not a plugin argument."""
    own: set[str] = set()
    out: dict[str, set[str]] = {}
    for v in schemas.versions("axolotl"):
        dump = schemas.schema("axolotl", v) or {"arguments": []}
        for a in dump["arguments"]:
            name = a["name"].split(".", 1)[0]
            if a.get("plugin"):
                out.setdefault(name, set()).add(a["plugin"])
            else:
                own.add(name)
    return {k: frozenset(v) for k, v in out.items() if k not in own}


@functools.lru_cache(maxsize=1)
def shipped() -> frozenset[str]:
    """The class names of the plugins the dumped axolotl releases ship (and those ROLES describes)."""
    return frozenset({class_name(p) for ps in owners().values() for p in ps} | set(ROLES))


def unknown_listed(top: Iterable[Setting]) -> list[str]:
    """The plugins `plugins:` lists that no dumped axolotl release ships (a third party's)."""
    return [p for p in listed(top) if class_name(p) not in shipped()]


def class_name(plugin: str) -> str:
    return str(plugin).strip().rsplit(".", 1)[-1]


def listed(top: Iterable[Setting]) -> list[str]:
    """The plugins `plugins:` lists (a list of dotted class paths; one string is read as a list of one)."""
    for s in top:
        if s.path == ("plugins",):
            values = s.value if isinstance(s.value, list) else [s.value] if isinstance(s.value, str) else []
            return [str(p).strip() for p in values if str(p).strip()]
    return []


def enabled(name: str, plugins: list[str]) -> bool:
    """Whether a plugin argument reaches the run: one of the plugins that define it is listed."""
    wanted = {class_name(p) for p in plugins}
    return any(class_name(p) in wanted for p in owners().get(name, ()))


def dropped(top: Iterable[Setting]) -> list[Setting]:
    """The plugin arguments a config sets whose plugin it does not list: axolotl drops them (module doc)."""
    top = list(top)
    plugins = listed(top)
    return [s for s in top if len(s.path) == 1 and s.key in owners() and not enabled(s.key, plugins)]


def switch(name: str, setting: Setting | None, version: str | None) -> bool:
    """A listed plugin's boolean switch as the run sees it: the value written, else its default at that version
    (Cut Cross-Entropy: `cut_cross_entropy` defaults to None in axolotl 0.6.0, True in 0.19.0)."""
    if setting is not None and setting.value is not None:
        return bool(to_bool(setting.value))
    definition = schemas.argument("axolotl", name, version)
    return bool(definition and definition.get("default"))


def check(b: PlanBuilder, top: list[Setting], version: str, title: str) -> set[str]:
    """Issues for the plugin arguments that never reach the run, and the listed plugins the estimate does not model
    named as not modelled (with the arguments each sets); returns the keys accounted for here."""
    from vramlens.frameworks.recognise import is_default_or_off  # recognise runs this: imported when it does

    done: set[str] = set()
    for s in dropped(top):
        plugin = sorted(owners()[s.key])[0]
        b.issue(
            IssueKind.NOT_READ,
            f"`{s.key}` is an argument of axolotl's `{class_name(plugin)}`, which `plugins` does not list: axolotl "
            f"drops it and the run goes without it — add `{plugin}` to `plugins` to use it",
            s,
            suggestion=plugin,
            span=s.key_span,
        )
        done.add(s.key)
    entry = next((s for s in top if s.path == ("plugins",)), None)
    by_plugin: dict[str, dict[str, dict]] = {}  # this version's plugin arguments: class name → top-level name → record
    for a in (schemas.schema("axolotl", version) or {"arguments": []})["arguments"]:
        if a.get("plugin"):
            by_plugin.setdefault(class_name(a["plugin"]), {})[a["name"].split(".", 1)[0]] = a
    for plugin in listed(top):
        cls = class_name(plugin)
        if cls in ROLES:
            continue
        mine = by_plugin.get(cls, {})
        if not mine and cls not in shipped():
            continue  # not a plugin axolotl ships: what it does is unknown here, and named below
        set_here = [s for s in top if s.key in mine and not is_default_or_off(s, mine[s.key])]
        for s in set_here:
            b.unmodelled(s, f"an argument of axolotl's {cls}", "estimated without it")
            done.add(s.key)
        if not set_here:
            b.unmodelled(
                entry, f"axolotl's {cls}, listed in `plugins`", "estimated without the plugin", key=f"plugins.{cls}"
            )
    for plugin in unknown_listed(top):
        b.issue(
            IssueKind.NOT_READ,
            f"`{plugin}` is not a plugin {title} ships: what it changes is not known here, and the keys it "
            f"defines are read as unknown",
            entry,
            severity=Severity.INFO,
        )
    return done
