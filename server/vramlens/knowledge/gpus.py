"""GPU lookup: turn the GPU strings found in configs, launch scripts and comments into a `GpuSpec` and a count.

Accepted shapes (as the projects' configs write them; docs/config-sources.md, "GPU names"):
"A100-40GB", "NVIDIA A100-SXM4-40GB", "a100 40gb", "8xH100", "8x H100",
"2 x A100", "4 * A100", "A100 * 4", "1xA10G", "Tesla T4", "NVIDIA GeForce RTX 4090", "rtx 6000 ada",
"NVIDIA H100 80GB HBM3", and ms-swift's "80GiB * 4" (only a memory size: a generic GPU of that size).

A string is reduced to (model, memory, form): vendor words (NVIDIA, Tesla, GeForce, AMD Instinct) and memory
technology (HBM3, GDDR6) are dropped, "40GB"/"40G"/"40GiB" becomes the memory, SXM is the default form and
"PCIe"/"NVL" are kept. Catalog aliases are reduced the same way, so spellings need not be listed one by one.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from vramlens.knowledge.data import index_spellings, load
from vramlens.knowledge.schema import GpuSpec

# Usable share of nominal memory when only a size is known (HBM rule of data/gpus.yaml).
_GENERIC_USABLE_SHARE = 0.988

# "8xH100", "2 x A100", "4 * A100" / "A100 * 4", "H100 x 8" (a trailing "x" needs a space: "RTX 3090" is no count)
_COUNT_FIRST = re.compile(r"^\s*(\d{1,4})\s*[x×*]\s*(\S.*)$", re.IGNORECASE)
_COUNT_LAST = re.compile(r"^(.*\S)(?:\s+[x×]\s*|\s*\*\s*)(\d{1,4})\s*$", re.IGNORECASE)
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(?:gib|gb|g)\b")
_FORM = re.compile(r"^(pcie|nvl)\d*$")
_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce", "amd", "instinct", "radeon", "gpu", "gpus"})
_DROP_WORDS = frozenset(
    {"hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7", "generation", "sxm", "sxm2", "sxm3", "sxm4", "sxm5"}
)


@dataclass(frozen=True)
class GpuMatch:
    """What a GPU string resolved to."""

    spec: GpuSpec
    """The GPU model."""
    count: int
    """How many of them the string names ("8xH100" -> 8; 1 when no count is given)."""
    note: str | None = None
    """An assumption the caller should show, e.g. which card a bare "A100" was read as."""


Key = tuple[str, float | None, str]


def _parse(text: str) -> Key:
    """Reduce a GPU name to (model, memory in GB or None, form) — see the module docstring."""
    s = text.lower()
    memory: float | None = None
    if m := _MEMORY.search(s):
        memory = float(m.group(1))
        s = s[: m.start()] + " " + s[m.end() :]
    model, form = [], ""
    for token in re.split(r"[^a-z0-9.]+", s):
        if not token or token in _VENDOR_WORDS or token in _DROP_WORDS:
            continue
        if f := _FORM.match(token):
            form = f.group(1)
            continue
        model.append(token)
    return "".join(model), memory, form


@dataclass(frozen=True)
class _Index:
    by_key: dict[Key, GpuSpec]
    defaults: dict[str, tuple[GpuSpec, str | None]]  # model key -> (spec, note) when no memory/form given
    by_name: dict[str, GpuSpec]
    spellings: dict[str, str]  # lower-case alias -> canonical name (did-you-mean)


@functools.cache
def _index() -> _Index:
    data = load("gpus.yaml")
    specs = [GpuSpec(**{**entry, "aliases": tuple(entry.get("aliases", ()))}) for entry in data["gpus"]]
    by_name = {s.name: s for s in specs}
    by_key = index_spellings(specs, lambda s: s.name, _parse, "gpus.yaml")
    defaults: dict[str, tuple[GpuSpec, str | None]] = {}
    spellings = {spelling.lower(): s.name for s in specs for spelling in (s.name, *s.aliases)}
    for spec in specs:  # a model key with exactly one card answers bare queries for that model
        for spelling in (spec.name, *spec.aliases):
            model = _parse(spelling)[0]
            if model and model not in defaults:
                candidates = {s.name for k, s in by_key.items() if k[0] == model}
                if len(candidates) == 1:
                    defaults[model] = (spec, None)
    for entry in data["ambiguous"]:
        model, memory, form = _parse(entry["query"])
        if memory is not None or form:
            raise ValueError(f"gpus.yaml: ambiguous query {entry['query']!r} must name no size or form")
        defaults[model] = (by_name[entry["choice"]], entry["note"])
        spellings[entry["query"].lower()] = entry["choice"]
    return _Index(by_key, defaults, by_name, spellings)


def _variant_with_memory(index: _Index, model: str, memory: float) -> GpuSpec | None:
    """The catalog card of this model with the stated memory (any form), or None."""
    return next((spec for key, spec in index.by_key.items() if key[0] == model and spec.memory_gib == memory), None)


def _count_readings(text: str) -> list[tuple[str, int]]:
    """Ways to read `text` as (GPU name, count): "3090 x 2" is tried as 3090 x "2" and as "3090" x 2."""
    readings = []
    if m := _COUNT_FIRST.match(text):
        readings.append((m.group(2), int(m.group(1))))
    if m := _COUNT_LAST.match(text):
        readings.append((m.group(1), int(m.group(2))))
    readings.append((text, 1))
    return readings


def _generic(memory: float) -> GpuSpec:
    return GpuSpec(
        name=f"{memory:g}GiB GPU",
        memory_gib=memory,
        usable_gib=round(memory * _GENERIC_USABLE_SHARE, 2),
        bf16=True,
        source="no GPU model named, only its memory size; usable by the HBM rule of gpus.yaml",
    )


def lookup_gpu_detail(text: str) -> GpuMatch | None:
    """Resolve a GPU string to its spec, the count it names, and any assumption made; None if unknown."""
    for name, count in _count_readings(text.strip()):
        if count >= 1 and (match := _resolve(name, count)):
            return match
    return None


def _resolve(name: str, count: int) -> GpuMatch | None:
    index = _index()
    model, memory, form = _parse(name)
    if not model:
        if memory is None:
            return None
        return GpuMatch(
            _generic(memory),
            count,
            f"'{name.strip()}' names only a memory size: assumed a bf16-capable GPU of {memory:g} GiB",
        )
    for key in ((model, memory, form), (model, memory, "")):
        if spec := index.by_key.get(key):
            return GpuMatch(spec, count)
    if memory is not None and (sized := _variant_with_memory(index, model, memory)) is not None:
        # the memory a name states picks the variant ("H100 SXM 96GB" is the 96 GB card, not the 80 GB SXM default)
        note = (
            None
            if not form
            else f"no {name.strip()!r} is known; used {sized.name}, the {model.upper()} with {memory:g} GB"
        )
        return GpuMatch(sized, count, note)
    if (spec := index.by_key.get((model, None, form))) and (memory is None or memory == spec.memory_gib):
        return GpuMatch(spec, count)
    if model in index.defaults:
        spec, note = index.defaults[model]
        if memory is not None and memory != spec.memory_gib:
            note = f"no {name.strip()!r} with {memory:g} GB is known; used {spec.name} ({spec.memory_gib:g} GiB)"
        return GpuMatch(spec, count, note)
    return None


def lookup_gpu(text: str) -> tuple[GpuSpec, int] | None:
    """`(spec, count)` for a GPU string such as "8x H100" or "NVIDIA A100-SXM4-40GB"; None if unknown."""
    match = lookup_gpu_detail(text)
    return (match.spec, match.count) if match else None


def gpu_by_name(name: str) -> GpuSpec | None:
    """The catalog entry with this canonical name (e.g. "A100-80GB")."""
    return _index().by_name.get(name)


def all_gpus() -> tuple[GpuSpec, ...]:
    """Every catalog GPU, in catalog order (for completion and quick picks)."""
    return tuple(_index().by_name.values())


def suggest_gpu(text: str, limit: int = 3) -> list[str]:
    """Canonical names of the catalog GPUs whose spellings are closest to an unknown GPU string."""
    name = _count_readings(text.strip())[0][0]
    spellings = _index().spellings
    close = difflib.get_close_matches(name.lower(), list(spellings), n=limit * 4, cutoff=0.5)
    return list(dict.fromkeys(spellings[c] for c in close))[:limit]


# One source and one rounding for a GPU's usable memory in every view. The catalog gives it in GiB with two
# decimals (79.15); the estimate compares bytes against it. `usable_bytes` rounds the figure up to a whole byte, so
# that bytes shown in GiB (a peak's verdict, `vramlens check`) read as the figure does, and `usable_text` shows it
# with one decimal rounding a tie up (79.15 → "79.2", as the bytes read): a float's own rounding would show 79.15 as
# 79.2 but 94.85 as 94.8, its binary value lying just above or below.


def usable_bytes(spec: GpuSpec) -> int:
    """The GPU's usable memory in bytes (the catalog's GiB figure, rounded up to a byte)."""
    return math.ceil(spec.usable_gib * (1 << 30))


def usable_text(gib: float) -> str:
    """A usable-memory figure in GiB with one decimal, a tie rounded up ("79.2" for 79.15 and for its bytes)."""
    return str(Decimal(f"{gib:.6f}").quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
