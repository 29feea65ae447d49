"""One key table per framework: the reader, the fixes' writer and the JSON Schema are generated from it.

A framework's table (`frameworks/<name>/keys.py`) is a tuple of `Key`s — every key its reader reads, each once — plus
`Through` entries for concepts written through other keys, and `NotHere` entries for the concepts a fix may change
that this format cannot write. From it:

- `by_name(table)` is the reader's dispatch table (top-level name → key), and `read(dispatch, b, top, nested)` reads a
  document's top-level entries with it: each key's `read` (or `section`, for a mapping read with its nested entries),
  `PlanBuilder.remember` for a key kept for hovers, and `PlanBuilder.unmodelled` for a switch the estimate has no
  formula for;
- `writers(table)` gives each concept the entry that writes it, and `handlers(table)` the writer's concept → handler
  table (`formats.render_yaml` runs it: `write_at` for a plain key, the entry's own function for anything else,
  `note` for a concept that cannot be written here);
- `schema_fields(table)` gives the pydantic fields of the format's JSON Schema (`formats.schemas`), in table order.

A key's `concept` is a name from the concept registry (`frameworks.concepts.CONCEPTS`): the concept its writer writes,
or the main one its reader sets (None: kept for hovers, or read only together with other keys). A nested key
(`path` longer than one) is read by its top-level section's `section` reader; it is in the table for its writer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, cast

if TYPE_CHECKING:  # the parse layer imports the framework tables: no import of it at run time here
    from vramlens.formats.settings import PlanBuilder, Setting

Reader = Callable[["PlanBuilder", "Setting"], None]
# (builder, the section's entry, the document's second-level entries by top-level key: `formats.hf.nested_index`)
SectionReader = Callable[["PlanBuilder", "Setting", dict[str, list["Setting"]]], None]
# (the document being edited: `formats.render_yaml._Doc`, the new value, every change of the fix)
Writer = Callable[[Any, Any, dict], None]
Path = tuple[str, ...]


@dataclass(frozen=True)
class Key:
    """One key of a framework's config file.

    path        where it is written (`("fsdp_config", "offload_params")` for a nested key)
    concept     the registry concept it carries (None: kept for hovers, or read together with other keys)
    read        how the reader reads it; None with no `section`: kept for hovers (`PlanBuilder.remember`)
    section     reads a mapping with its nested entries, instead of `read`
    read_by     the other reader the dialect runs that reads this key instead (LLaMA-Factory passes the keys it does
                not read itself to the Hugging Face TrainingArguments reader, "hf"): not in the dispatch table
    write       how a fix writes `concept` here: True = the value at `path` (through `convert`), editing whichever
                of `path`/`spellings` the file already has; a `Writer` for anything else; False = not written here
    convert     the file's spelling of a concept value, for `write=True`
    after       insert anchors: a new key goes after the first of these the file has (else at the end)
    spellings   other (legacy) paths read the same way
    type        the value's Python type for the JSON Schema (Optional is added); every top-level key has a property
    description what it does to memory or speed (the schema's description, shown on hover)
    schema      further pydantic `Field` arguments (`ge=1`, `json_schema_extra`)
    unmodelled  (what it is, how the estimate treats it) for a switch that changes memory or speed and that the
                estimate has no formula for: named in every view when true
    """

    path: Path
    concept: str | None = None
    read: Reader | None = None
    section: SectionReader | None = None
    read_by: str = ""
    write: bool | Writer = False
    convert: Callable[[Any], Any] | None = None
    after: tuple[str, ...] = ()
    spellings: tuple[Path, ...] = ()
    type: Any = Any
    description: str = ""
    schema: Mapping[str, Any] = field(default_factory=dict)
    unmodelled: tuple[str, str] | None = None


@dataclass(frozen=True)
class NotHere:
    """A concept a fix may change that this format cannot write. `note` (with `{value}` and `{fmt}`) is what the fix
    says instead of an edit; empty: the writer's default ("`concept` cannot be set in this … config", or where the
    referenced DeepSpeed file sets it)."""

    concept: str
    note: str = ""


@dataclass(frozen=True)
class Through:
    """A concept a fix writes through keys the table lists for other concepts (`optimizer_impl` through
    `optimizer`), or through a writer shared with other formats (TRL's objective keys)."""

    concept: str
    write: Writer


Table = tuple[Key | Through | NotHere, ...]

# The allocator setting is an environment variable: no YAML or JSON config of a framework has a place for it.
ALLOC_NOTE = (
    "set `PYTORCH_CUDA_ALLOC_CONF={value}` where the training is launched "
    "(e.g. `export PYTORCH_CUDA_ALLOC_CONF={value}` in the launch script): {fmt} configs have no "
    "place for environment variables"
)


def not_here(*concepts: str) -> tuple[NotHere, ...]:
    """`NotHere` with the writer's default note, for each of `concepts`."""
    return tuple(NotHere(c) for c in concepts)


def whole(concept: str, minimum: int = 1) -> Reader:
    """Read a whole number (at least `minimum`) into `concept`."""

    def read(b: PlanBuilder, s: Setting) -> None:
        b.set_int(concept, s, minimum=minimum)

    return read


def flag(concept: str) -> Reader:
    """Read a boolean into `concept`."""

    def read(b: PlanBuilder, s: Setting) -> None:
        b.set_bool(concept, s)

    return read


def keys(table: Table) -> tuple[Key, ...]:
    """The table's keys (without its `Through` and `NotHere` entries)."""
    return tuple(k for k in table if isinstance(k, Key))


def by_name(table: Table) -> dict[str, Key]:
    """Top-level key name (and each other spelling) → its key: the reader's dispatch table (without the keys another
    reader reads: `read_by`)."""
    out: dict[str, Key] = {}
    for key in keys(table):
        if key.read_by:
            continue
        for p in (key.path, *key.spellings):
            if len(p) != 1:
                continue
            if p[0] in out:
                raise ValueError(f"`{p[0]}` is in the key table twice")
            out[p[0]] = key
    return out


def read(dispatch: Mapping[str, Key], b: PlanBuilder, top: list[Setting], nested: dict[str, list[Setting]]) -> None:
    """Read the top-level entries `top` with the table's keys (`dispatch` = `by_name(table)`); unknown keys are left
    to the caller."""
    from vramlens.formats.settings import to_bool

    for s in top:
        key = dispatch.get(s.key)
        if key is None:
            continue
        if key.section is not None:
            key.section(b, s, nested)
        elif key.read is not None:
            key.read(b, s)
        else:
            b.remember(s)
        if key.unmodelled is not None and to_bool(s.value):
            b.unmodelled(s, *key.unmodelled)


def writers(table: Table) -> dict[str, Key | Through | NotHere]:
    """Concept → the entry that writes it (or says it cannot be written). A concept written by two entries is an
    error."""
    out: dict[str, Key | Through | NotHere] = {}
    for entry in table:
        if isinstance(entry, Key) and (entry.write is False or entry.concept is None):
            continue
        concept = entry.concept
        assert concept is not None
        if concept in out:
            raise ValueError(f"`{concept}` is written by two entries of the key table")
        out[concept] = entry
    return out


def write_at(where: tuple, after: tuple = (), convert: Callable[[Any], Any] | None = None) -> Writer:
    """A concept that is one key, spelled by any of `where` (key names or paths): edit whichever spelling the file
    has, else add the last plain (top-level) one (the first one when all are nested) after the first of `after` the
    file has."""
    paths = [k if isinstance(k, tuple) else (k,) for k in where]
    plain = [p for p in paths if len(p) == 1]
    new = plain[0] if plain and len(paths[0]) > 1 else paths[0]

    def handler(doc: Any, value: Any, changes: dict) -> None:
        v = convert(value) if convert else value
        for p in paths:
            if p in doc.by_path:
                doc.set(p, v)
                return
        doc.set(new, v, after)

    return handler


def note(text: str) -> Writer:
    """A fix that cannot be written in this file: say `text` (with `{value}` and `{fmt}` filled in) instead."""

    def handler(doc: Any, value: Any, changes: dict) -> None:
        doc.notes.append(text.format(value=value, fmt=doc.plan.format))

    return handler


def handlers(table: Table) -> dict[str, Writer]:
    """The writer's concept → handler table. A `NotHere` without a note has no handler: the writer's default note."""
    out: dict[str, Writer] = {}
    for concept, entry in writers(table).items():
        if isinstance(entry, NotHere):
            if entry.note:
                out[concept] = note(entry.note)
        elif isinstance(entry, Through) or callable(entry.write):
            out[concept] = cast(Writer, entry.write)
        else:
            out[concept] = write_at((entry.path, *entry.spellings), after=entry.after, convert=entry.convert)
    return out


def schema_fields(table: Table) -> dict[str, Any]:
    """Top-level key name → (type, pydantic Field) for `pydantic.create_model`, in table order."""
    from pydantic import Field

    return {
        key.path[0]: (Optional[key.type], Field(default=None, description=key.description, **key.schema))
        for key in keys(table)
        if len(key.path) == 1
    }
