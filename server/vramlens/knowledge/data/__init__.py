"""The knowledge base's data files, read once with a safe YAML loader."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any, TypeVar

T = TypeVar("T")
K = TypeVar("K")


@functools.cache
def load(name: str) -> Any:
    """Parse `knowledge/data/<name>` (shipped with the package) once per process, with the one YAML loader
    vramlens uses for every file (safe scalars only, bounded; formats.yaml_doc)."""
    from vramlens.formats.yaml_doc import load_yaml

    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return load_yaml(text, name)[0]


def index_spellings(
    records: Iterable[T],
    name: Callable[[T], str],
    key: Callable[[str], K],
    file: str,
) -> dict[K, T]:
    """Map `key(spelling)` -> record for each record's name and aliases; a spelling shared by two records is an
    error."""
    index: dict[K, T] = {}
    for record in records:
        for spelling in (name(record), *getattr(record, "spellings", getattr(record, "aliases", ()))):
            k = key(spelling)
            if index.setdefault(k, record) is not record:
                raise ValueError(f"{file}: {spelling!r} names both {name(index[k])!r} and {name(record)!r}")
    return index
