"""The torchtune recipe config dialect (`tune run <recipe> --config <file or packaged name>`): how the parser
recognises it and reads it with the key table (`keys.py`), after resolving the file's OmegaConf interpolations.

Recipes and configs: torchtune `recipes/` at bd2a0fc7 (docs/config-sources.md).
"""

from __future__ import annotations

from typing import Any

from vramlens.formats.settings import PlanBuilder, Setting, Unknown
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.torchtune import readers
from vramlens.frameworks.torchtune.keys import KEYS


def detect(data: Any, keys: set[str]) -> float:
    model = data.get("model")
    if isinstance(model, dict) and "_component_" in model:
        return 1.0
    components = sum(1 for v in data.values() if isinstance(v, dict) and "_component_" in v)
    if components >= 2:
        return 0.95
    if components == 1 and keys & {"batch_size", "epochs", "enable_activation_checkpointing", "dtype"}:
        return 0.8
    return 0.0


def index(data: Any, settings: list[Setting]) -> readers.Index:
    """The resolved entries by dotted path. Training keys live at the top, or under `training:` in the async GRPO dev
    recipe (torchtune recipes/dev/async_grpo_full_finetune_distributed.py): its entries are found under their path
    within `training:` too, after the top-level ones."""
    by_path = {s.path: s for s in settings}
    sections: list[tuple] = [()]
    if "batch_size" not in data and isinstance(data.get("training"), dict):
        sections.append(("training",))
    out: readers.Index = {}
    for sec in sections:
        for path, s in by_path.items():
            if s.unresolved or path[: len(sec)] != sec or len(path) == len(sec):
                continue
            out.setdefault(readers.dotted(path[len(sec) :]), [s])
    return out


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    written: list[Setting] = []
    for s in settings:
        if isinstance(s.value, str) and "${" in s.value:
            resolved = readers.interpolate(s.value, data)
            if isinstance(resolved, Unknown):
                s.unresolved = True
            else:
                written.append(Setting(key=s.key, path=s.path, value=s.value))
                s.value = resolved
    found = index(data, settings)
    # a section is there with its own entry, or only with entries under it (`tune run … optimizer._component_=…`)
    first: dict[str, Setting] = {}
    for name, entries in found.items():
        first.setdefault(name.split(".", 1)[0], entries[0])
    first.update((name, entries[0]) for name, entries in found.items() if "." not in name)
    found[readers.WRITTEN] = written
    # the table's top-level keys in table order, each read once (by the first of its spellings the file has)
    for key in key_table.keys(KEYS):
        if len(key.path) != 1 or key.read_by:
            continue
        entry = next(
            (first[n] for n in (key.path[0], *(p[0] for p in key.spellings if len(p) == 1)) if n in first), None
        )
        if entry is None:
            continue
        if key.section is not None:
            key.section(b, entry, found)
        elif key.read is not None:
            key.read(b, entry)
        else:
            b.remember(entry)
    readers.launch(b, ctx, found)
    from vramlens.formats import objective

    objective.apply_torchtune(b, data, readers.getter(found))
