"""Values from a config shown in Markdown (the editor's hover): one place that makes them inert.

A config value is written by whoever wrote the repository; put into Markdown as is, a backtick ends the code
span around it and what follows (`![x](https://…)`, a link, HTML) renders live in the editor. `code(value)`
makes a code span that no value can end; `text(value)` escapes a value for running text. Both fold line
breaks into spaces, so a value cannot start a new block (a heading, a list, a table row).
CommonMark 0.31.2: code spans https://spec.commonmark.org/0.31.2/#code-spans, backslash escapes
https://spec.commonmark.org/0.31.2/#backslash-escapes.
"""

from __future__ import annotations

import re

_PUNCTUATION = re.compile(r"([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")
_BACKTICK_RUNS = re.compile(r"`+")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")


def _one_line(value: object) -> str:
    return _LINE_BREAKS.sub(" ", str(value))


def text(value: object) -> str:
    """`value` as running Markdown text: every ASCII punctuation character backslash-escaped."""
    return _PUNCTUATION.sub(r"\\\1", _one_line(value))


def code(value: object) -> str:
    """`value` as an inline code span: fenced by one backtick more than its longest run of backticks, padded
    with a space when it starts or ends with a backtick (CommonMark strips one such space on each side).
    Not for table cells (use `text` there)."""
    s = _one_line(value)
    longest = max((len(m) for m in _BACKTICK_RUNS.findall(s)), default=0)
    fence = "`" * (longest + 1)
    if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ") and s.strip()):
        s = f" {s} "
    return f"{fence}{s}{fence}"
