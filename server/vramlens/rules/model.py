"""What a rule is and what it reports: `Rule`, `Finding`, `Related`, and the severity words.

A rule file (top-level `rules/`, shipped as the `vramlens_rules` package) builds one `Rule` and
attaches its check with `@RULE.check`. The check receives a `RuleContext` and yields `Finding`s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

from vramlens.plan import IssueKind, Span
from vramlens.settings import normalize_severity  # noqa: F401 (re-exported for rule code)

if TYPE_CHECKING:
    from vramlens.fixes import Fix
    from vramlens.rules.context import RuleContext

Severity = Literal["error", "warning", "information", "hint"]
SEVERITIES: tuple[str, ...] = ("error", "warning", "information", "hint")
SEVERITY_RANK = {name: i for i, name in enumerate(SEVERITIES)}  # lower is more severe
# What a rule needs before its check can run; the engine skips it when the input is missing.
Needs = Literal["text", "plan", "resolution", "estimate"]


@dataclass
class Related:
    """A second location that explains a finding (LSP relatedInformation, SARIF relatedLocations)."""

    span: Span
    message: str


@dataclass(eq=False)
class Finding:
    """One diagnostic. `fixes` is computed on first access: each fix needs a re-estimate, which the
    diagnostics on every keystroke do not pay for."""

    rule_id: str
    severity: str
    message: str
    span: Span
    related: list[Related] = field(default_factory=list)
    name: str = ""  # the rule's name, e.g. "predicted-oom"
    data: dict[str, Any] = field(default_factory=dict)  # numbers behind the message (GiB figures), for surfaces
    fix_source: Callable[[], list["Fix"]] | list["Fix"] | None = field(default=None, repr=False)

    @functools.cached_property
    def fixes(self) -> list["Fix"]:
        src = self.fix_source
        if src is None:
            return []
        if callable(src):
            return [f for f in src() if f is not None]
        return list(src)

    @property
    def line(self) -> int:
        return self.span.start_line


@dataclass
class Rule:
    """One rule: its stable id and name, its documentation, and its check."""

    id: str  # "VL001"
    name: str  # "predicted-oom" (kebab-case, stable)
    title: str  # one line, used as SARIF shortDescription
    severity: Severity  # default severity
    message: str  # message template, `str.format` fields filled by the check
    why: str  # documentation: what it does, why it matters, an example, the fix
    fixes: tuple[str, ...] = ()  # ids of the fixes it offers (see vramlens.fixes.FIX_IDS)
    needs: Needs = "plan"
    owns: tuple[IssueKind, ...] = ()  # the parse-issue kinds this rule reports (each kind has one owner)
    _check: Callable[["RuleContext"], Iterable[Finding] | None] | None = field(default=None, repr=False)

    def check(self, fn: Callable[["RuleContext"], Iterable[Finding] | None]):
        """Decorator: attach the rule's check function."""
        self._check = fn
        return fn

    def run(self, ctx: "RuleContext") -> list[Finding]:
        if self._check is None:
            return []
        out = self._check(ctx)
        return [f for f in (out or ()) if f is not None]

    def format(self, **fields: Any) -> str:
        return self.message.format(**fields)

    @property
    def summary(self) -> str:
        """The first paragraph of `why`."""
        return self.why.strip().split("\n\n", 1)[0].replace("\n", " ")
