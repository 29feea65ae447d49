"""TOML files a repository controls (`.vramlens.toml`, `pyproject.toml`, `uv.lock`, `poetry.lock`), read with bounds.

`tomllib` parses arrays and inline tables by recursion, one group of Python frames per level
(CPython 3.11 Lib/tomllib/_parser.py: parse_value → parse_array / parse_inline_table → parse_value), so a
few kilobytes of `a = [[[[…]]]]` raise RecursionError, which is not a TOMLDecodeError. A dotted key
(`a.b.c.… = 1`, or a table header `[a.b.c.…]`) is parsed without recursion, but `key_value_rule` records every
prefix of the key (`header + key[:i] for i in range(1, len(key))`), so memory grows with the square of its length:
20,000 parts (40 KB) took 1.5 GB; and the tables it builds are as deep
as the key is long, which breaks whatever walks them afterwards. So a file is read only when it is a regular file
of bounded size (and, when asked, inside the given folders: `vramlens.file_access`), and — outside strings and
comments, checked before parsing — its brackets and braces nest at most `MAX_DEPTH` levels and no key has more
than `MAX_DEPTH` dots; the tables it parses to nest no deeper either. Real project and lock files nest a handful
of levels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramlens import file_access

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None
AVAILABLE = _toml is not None

MAX_DEPTH = 64

# What can hide a bracket or a dot from the scan: strings (TOML 1.0.0, https://toml.io/en/v1.0.0#string: basic
# "…" with backslash escapes, literal '…', and their multi-line forms, which may end with one or two extra quotes)
# and comments. A one-line string left open ends at its line's end, a multi-line one at the end of the text (the
# parser refuses both). Every alternative matches whatever follows its first characters, so nothing backtracks.
_HIDING = re.compile(
    r'''
      "(?!"")(?:[^"\\\n]+|\\.)*"?
    | \#[^\n]*
    | '(?!'')[^'\n]*'?
    | """(?:\\[\s\S]|[^\\])*?(?:"""(?!")|\Z)
    | \'\'\'[\s\S]*?(?:\'\'\'(?!\')|\Z)
''',
    re.VERBOSE,
)
_BRACKETS = re.compile(r"[\[\]{}]")
_KEY_ENDS = re.compile(r"[=,\n\[\]{}]")  # what ends a key (the dots of a dotted key lie between these)


@dataclass(frozen=True, slots=True)
class TomlFile:
    """A TOML document's tables, or why there are none."""

    data: dict[str, Any] | None
    problem: str | None = None
    """One line for the user: "not read: …" (not a regular file inside the folders, too large, too deeply nested)
    or "not valid TOML: …"."""


def _nests_deeper(text: str, limit: int) -> bool:
    """Whether, outside strings and comments, `[` and `{` nest deeper than `limit` (a table header counts as one
    or two levels) or a key has more than `limit` dots. Linear in the text."""
    brackets, dots = text.count("[") + text.count("{"), text.count(".")
    if brackets <= limit and dots <= limit:
        return False  # too few to nest that deep: no scan needed
    bare = _HIDING.sub("_", text)  # a string or comment: one character that is neither
    if dots > limit and any(part.count(".") > limit for part in _KEY_ENDS.split(bare)):
        return True
    depth = 0
    for bracket in _BRACKETS.findall(bare) if brackets > limit else ():
        if bracket in "[{":
            depth += 1
            if depth > limit:
                return True
        elif depth:
            depth -= 1
    return False


def _tables_nest_deeper(data: Any, limit: int) -> bool:
    """Whether the tables and arrays of parsed TOML nest deeper than `limit`; without recursion."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        for child in value.values() if isinstance(value, dict) else value:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False


def loads(text: str) -> TomlFile:
    """Parse a TOML text within the bounds; never raises."""
    if _toml is None:
        return TomlFile(None, "not read: reading TOML needs Python 3.11+ or the `tomli` package")
    too_deep = TomlFile(None, f"not read: its arrays, tables or dotted keys nest deeper than {MAX_DEPTH} levels")
    if _nests_deeper(text, MAX_DEPTH):
        return too_deep
    try:
        data = _toml.loads(text)
    except _toml.TOMLDecodeError as exc:
        return TomlFile(None, f"not valid TOML: {exc}")
    except RecursionError:  # not expected after the scan; kept so a parser change cannot crash
        return too_deep
    if _tables_nest_deeper(data, MAX_DEPTH):
        return too_deep
    return TomlFile(data)


def read(path: Path, max_bytes: int, *, roots: list[Path] | None = None, expect: Path | None = None) -> TomlFile:
    """A TOML file read with `file_access.read_text_checked` (a regular file of at most `max_bytes`, inside
    `roots` or the file `expect` when given, symlinks resolved on the opened file), then `loads`."""
    try:
        text = file_access.read_text_checked(path, max_bytes, expect=expect, roots=roots, errors="strict")
    except UnicodeDecodeError as exc:
        return TomlFile(None, f"not valid TOML: {exc}")
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        return TomlFile(None, f"not read: {exc}")
    return loads(text)
