"""The knowledge base's data files, read once with a safe YAML loader."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any, TypeVar

import yaml

try:  # the libyaml-backed loader is ~10x faster when PyYAML was built with it
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Loader = yaml.SafeLoader

T = TypeVar("T")
K = TypeVar("K")


@functools.cache
def load(name: str) -> Any:
    """Parse `knowledge/data/<name>` (shipped with the package) once per process."""
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


def index_spellings(
    records: Iterable[T], name: Callable[[T], str], key: Callable[[str], K], file: str,
) -> dict[K, T]:
    """Map `key(spelling)` -> record for each record's name and aliases; a spelling shared by two records is an error."""
    index: dict[K, T] = {}
    for record in records:
        for spelling in (name(record), *getattr(record, "spellings", getattr(record, "aliases", ()))):
            k = key(spelling)
            if index.setdefault(k, record) is not record:
                raise ValueError(f"{file}: {spelling!r} names both {name(index[k])!r} and {name(record)!r}")
    return index
