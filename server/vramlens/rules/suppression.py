"""Suppression comments.

    micro_batch_size: 16   # vramlens: ignore[VL001]         this line, these rules
    # vramlens: ignore-file[VL004, VL009]                     the whole file, these rules
    # vramlens: ignore                                        the whole file, every rule

`ignore[...]` applies to the line it is written on (the line a finding starts on); `ignore-file[...]` and
a bare `ignore` apply to the whole file wherever they appear. Codes are rule ids or rule names. The marker
may follow `#` (YAML, Python, shell), `//` (JSONC) or `<!--` (Markdown).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vramlens.plan import text_lines

_MARKER = re.compile(
    r"(?:#|//|<!--)\s*vramlens:\s*(?P<kind>ignore-file|ignore)\b(?:\s*\[(?P<codes>[^\]]*)\])?", re.IGNORECASE
)
ALL = "*"


@dataclass
class Suppressions:
    file: set[str] = field(default_factory=set)  # codes ignored in the whole file ("*" = all)
    lines: dict[int, set[str]] = field(default_factory=dict)  # 0-based line -> codes ignored on it

    def suppressed(self, line: int, rule_id: str, name: str = "") -> bool:
        keys = {rule_id.upper(), name.lower()} - {""}
        if ALL in self.file or keys & self.file:
            return True
        on_line = self.lines.get(line)
        if not on_line:
            return False
        return ALL in on_line or bool(keys & on_line)


def _codes(raw: str | None) -> set[str]:
    if raw is None:
        return {ALL}
    out = set()
    for c in re.split(r"[,\s]+", raw.strip()):
        if c:
            out.add(c.upper() if re.fullmatch(r"(?i)vl\d+", c) else c.lower())
    return out or {ALL}


def scan(text: str) -> Suppressions:
    """Find every suppression comment in `text`."""
    result = Suppressions()
    if "vramlens" not in text:
        return result
    for lineno, line in enumerate(text_lines(text)):
        if "vramlens" not in line:
            continue
        for m in _MARKER.finditer(line):
            codes = _codes(m.group("codes"))
            if m.group("kind").lower() == "ignore-file" or m.group("codes") is None:
                result.file |= codes
            else:
                result.lines.setdefault(lineno, set()).update(codes)
    return result
