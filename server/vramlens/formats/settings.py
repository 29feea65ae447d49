"""The common currency of all parsers: a flat `Setting` (key, value, spans) and a `PlanBuilder`.

Every format reader (YAML, JSON, Python calls, shell flags) reduces its input to Settings; a
dialect (e.g. `formats.hf`) maps Settings to plan concepts through the builder, which records
provenance and turns loosely typed values ("True", "2e-5", "auto", 4.0) into typed ones with a
clear issue when it cannot.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

from vramlens.plan import IssueKind, Origin, ParseIssue, Reference, Severity, Sourced, Span, TrainingPlan, Unmodelled


class Setting:
    """One `key: value` entry of a document (or one keyword argument, one `--flag value`).

    `span` is the whole entry, `value_span` the value only, `key_span` the key only. Readers that
    produce thousands of entries (the YAML loader) pass raw coordinates instead of `Span` objects;
    the `Span`s are then built on first access, so entries no dialect looks at cost almost nothing.
    """

    __slots__ = ("key", "path", "value", "unresolved", "_span", "_value_span", "_key_span", "_coords")

    def __init__(
        self,
        key: str,
        path: tuple,
        value: Any,
        span: Span | None = None,
        value_span: Span | None = None,
        key_span: Span | None = None,
        unresolved: bool = False,
    ):
        self.key = key  # the key as written (last path component), e.g. "micro_batch_size"
        self.path = path  # full key path, e.g. ("zero_optimization", "stage")
        self.value = value
        self.unresolved = unresolved  # value comes from an expression we could not evaluate
        self._span = span
        self._value_span = value_span
        self._key_span = key_span
        self._coords: tuple | None = None

    @classmethod
    def at(cls, key: str, path: tuple, value: Any, coords: tuple) -> "Setting":
        """An entry with lazy spans; `coords` = (file, key_start_line, key_start_col, key_end_line,
        key_end_col, value_start_line, value_start_col, value_end_line, value_end_col)."""
        s = cls.__new__(cls)
        s.key, s.path, s.value, s.unresolved = key, path, value, False
        s._span = s._value_span = s._key_span = None
        s._coords = coords
        return s

    @property
    def span(self) -> Span | None:
        if self._span is None and self._coords is not None:
            f, a, b, _, _, _, _, g, h = self._coords
            self._span = Span(file=f, start_line=a, start_col=b, end_line=g, end_col=h)
        return self._span

    @span.setter
    def span(self, value: Span | None) -> None:
        self._span = value

    @property
    def value_span(self) -> Span | None:
        if self._value_span is None and self._coords is not None:
            f, _, _, _, _, e, ec, g, h = self._coords
            self._value_span = Span(file=f, start_line=e, start_col=ec, end_line=g, end_col=h)
        return self._value_span

    @value_span.setter
    def value_span(self, value: Span | None) -> None:
        self._value_span = value

    @property
    def key_span(self) -> Span | None:
        if self._key_span is None and self._coords is not None:
            f, a, b, c, d = self._coords[:5]
            self._key_span = Span(file=f, start_line=a, start_col=b, end_line=c, end_col=d)
        return self._key_span

    @key_span.setter
    def key_span(self, value: Span | None) -> None:
        self._key_span = value

    @property
    def file(self) -> str | None:
        if self._coords is not None:
            return self._coords[0]
        sp = self._span or self._value_span
        return sp.file if sp is not None else None

    def child(self, key: Any, value: Any) -> "Setting":
        """A nested entry that has no text of its own (inside an inline dict): it points at this entry."""
        s = Setting(key=str(key), path=self.path + (key,), value=value)
        s._span, s._value_span, s._coords = self._span, self._value_span, self._coords
        return s

    def __repr__(self) -> str:
        return f"Setting({'.'.join(str(p) for p in self.path)}={self.value!r})"


class Unknown:
    """A value that could not be determined statically (a variable, a call, `${ENV}`)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Unknown({self.text!r})"


TRUE_WORDS = {"true", "yes", "on", "1", "y"}
FALSE_WORDS = {"false", "no", "off", "0", "n", "none", "null", ""}


def to_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        w = value.strip().lower()
        if w in TRUE_WORDS:
            return True
        if w in FALSE_WORDS:
            return False
    return None


def to_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value) if math.isfinite(value) else None
        except OverflowError:  # an int beyond any float (`0xfff...`)
            return None
    if isinstance(value, str):
        try:
            f = float(value.strip().replace("_", ""))
        except (ValueError, OverflowError):
            return None
        return f if math.isfinite(f) else None
    return None


def to_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    f = to_float(value)
    if f is None or f != int(f):
        return None
    return int(f)


# Counts (batch sizes, sequence lengths, ranks, GPUs) above this are typos or hostile input, not plans.
MAX_COUNT = 2**31 - 1


def shown(value: Any, limit: int = 60) -> str:
    """A value for a message: repr, shortened (a huge number or a pasted blob must not fill the screen)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return f"a {'negative ' if value < 0 else ''}number of about 10^{int(value.bit_length() * 0.30103)}"
    text = (
        repr(value)
        if not isinstance(value, (dict, list)) or len(value) < 50
        else f"<{type(value).__name__} of {len(value)}>"
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def closest(word: str, choices, cutoff: float = 0.6) -> str | None:
    """The choice that looks most like `word` (for "did you mean"), or None."""
    choices = list(choices)
    # the same words in another order first: adamw_8bit_bnb -> adamw_bnb_8bit
    parts = sorted(p for p in re.split(r"[-_.\s]+", str(word).lower()) if p)
    for c in choices:
        if sorted(p for p in re.split(r"[-_.\s]+", c.lower()) if p) == parts:
            return c
    low = {c.lower(): c for c in choices}
    hit = difflib.get_close_matches(str(word).strip().lower(), list(low), n=1, cutoff=cutoff)
    return low[hit[0]] if hit else None


class PlanBuilder:
    """Collects concept values for one TrainingPlan, first writer wins unless `override=True`.

    Empty values (`key:` or `key: null`) mean "the framework default" and are ignored by the typed
    setters; `auto` is kept as a recognised, unmodelled value.
    """

    def __init__(self, file: str, fmt: str, framework: str | None):
        self.plan = TrainingPlan(source_file=file, format=fmt, framework=framework)

    @classmethod
    def wrap(cls, plan: TrainingPlan) -> "PlanBuilder":
        b = cls.__new__(cls)
        b.plan = plan
        return b

    def has(self, concept: str) -> bool:
        return getattr(self.plan, concept) is not None

    def set(
        self,
        concept: str,
        value: Any,
        setting: Setting | None = None,
        *,
        note: str | None = None,
        origin: Origin = Origin.FILE,
        override: bool = False,
        framework: str | None = None,
        per_unit: int | None = None,
        budget: int | None = None,
    ) -> None:
        """`per_unit`, `budget`: the value counts sequences of that many tokens in a token budget (`Sourced`)."""
        if setting is not None and setting.key not in self.plan.read_alongside:
            self.plan.read_alongside.append(setting.key)  # read, even when an earlier key set the concept
        if not override and getattr(self.plan, concept) is not None:
            return
        if setting is None:
            sourced = Sourced(
                value=value, origin=origin, note=note, framework=framework, per_unit=per_unit, budget=budget
            )
        else:
            sourced = Sourced(
                value=value,
                origin=origin,
                key=setting.key,
                span=setting.span,
                value_span=setting.value_span,
                note=note,
                framework=framework,
                per_unit=per_unit,
                budget=budget,
            )
        setattr(self.plan, concept, sourced)

    def set_int(
        self, concept: str, setting: Setting, *, minimum: int = 0, note: str | None = None, override: bool = False
    ) -> int | None:
        if setting.value is None:
            return None
        v = to_int(setting.value)
        if v is None:
            if is_auto(setting.value):
                self.remember(setting)
                return None
            self.issue(
                IssueKind.INVALID_VALUE,
                f"`{setting.key}` should be a whole number, got {shown(setting.value)}",
                setting,
            )
            return None
        if v < minimum:
            self.issue(IssueKind.INVALID_VALUE, f"`{setting.key}` must be at least {minimum}, got {shown(v)}", setting)
            return None
        if v > MAX_COUNT:
            self.issue(
                IssueKind.INVALID_VALUE,
                f"`{setting.key}` is {shown(v)}, more than vramlens can estimate (at most {MAX_COUNT:,}); "
                f"the value is ignored",
                setting,
            )
            return None
        if isinstance(setting.value, str):
            note = note or f"`{setting.value}` (text) read as the number {v}"
        self.set(concept, v, setting, note=note, override=override)
        return v

    def set_bool(
        self, concept: str, setting: Setting, *, note: str | None = None, invert: bool = False, override: bool = False
    ) -> bool | None:
        if setting.value is None:
            return None
        v = to_bool(setting.value)
        if v is None:
            if is_auto(setting.value):
                self.remember(setting)
                return None
            self.issue(
                IssueKind.INVALID_VALUE, f"`{setting.key}` should be true or false, got {shown(setting.value)}", setting
            )
            return None
        self.set(concept, (not v) if invert else v, setting, note=note, override=override)
        return v

    def set_float(
        self, concept: str, setting: Setting, *, note: str | None = None, override: bool = False
    ) -> float | None:
        if setting.value is None:
            return None
        v = to_float(setting.value)
        if v is None:
            self.issue(
                IssueKind.INVALID_VALUE, f"`{setting.key}` should be a number, got {shown(setting.value)}", setting
            )
            return None
        self.set(concept, v, setting, note=note, override=override)
        return v

    def reference(self, kind: str, target: str, setting: Setting | None = None) -> None:
        """Note another file this config points at; `formats.references` follows it."""
        self.plan.references.append(
            Reference(kind=kind, target=target, span=(setting.value_span or setting.span) if setting else None)
        )

    def inline_deepspeed(self, config: dict, setting: Setting) -> None:
        """A DeepSpeed config given inline (a dict instead of a path): its settings are nested Settings."""
        from vramlens.formats import deepspeed

        deepspeed.apply_dict(self, config, setting)

    def remember(self, setting: Setting, value: Any = None) -> None:
        """Keep a recognised key we do not model as a concept (for hovers)."""
        v = setting.value if value is None else value
        self.plan.extra[".".join(str(p) for p in setting.path)] = Sourced(
            value=v if isinstance(v, (str, int, float, bool, type(None))) else repr(v),
            key=setting.key,
            span=setting.span,
            value_span=setting.value_span,
        )

    def unmodelled(self, setting: Setting | None, what: str, consequence: str, *, key: str | None = None) -> None:
        """Record a setting that changes memory or speed and that the estimate does not model; every view names it.
        Recorded once per key."""
        name = key or (setting.key if setting is not None else what)
        if any(u.key == name for u in self.plan.unmodelled):
            return
        value = None if setting is None or setting.value is None else str(setting.value)[:200]
        self.plan.unmodelled.append(
            Unmodelled(
                key=name,
                value=value,
                what=what,
                consequence=consequence,
                span=setting.span if setting is not None else None,
            )
        )

    def shape(self, name: str, setting: Setting, *, override: bool = False) -> None:
        """Keep a model-shape value the file states (`plan.extra["arch.<name>"]`, which the model resolver reads when
        no model id is named); the first one kept wins unless `override`."""
        key = f"arch.{name}"
        if override or not self.plan.extra.get(key):
            v = setting.value
            self.plan.extra[key] = Sourced(
                value=v if isinstance(v, (str, int, float, bool)) else repr(v),
                key=setting.key,
                span=setting.span,
                value_span=setting.value_span,
            )

    def issue(
        self,
        kind: IssueKind,
        message: str,
        setting: Setting | None = None,
        *,
        severity: Severity = Severity.WARNING,
        suggestion: str | None = None,
        span: Span | None = None,
    ) -> None:
        self.plan.issues.append(
            ParseIssue(
                kind=kind,
                message=message,
                span=span or (setting.value_span if setting else None) or (setting.span if setting else None),
                severity=severity,
                suggestion=suggestion,
            )
        )

    def unknown(
        self, setting: Setting, what: str, choices=(), *, suggestion: str | None = None, hint: str | None = None
    ) -> None:
        """An unknown value (VL015) with the closest valid spelling when there is one."""
        if suggestion is None and choices:
            suggestion = closest(str(setting.value), choices)
        msg = f"unknown {what} `{setting.value}` for `{setting.key}`"
        if suggestion:
            msg += f" — did you mean `{suggestion}`?"
        elif hint:
            msg += f" ({hint})"
        self.issue(IssueKind.UNKNOWN_VALUE, msg, setting, suggestion=suggestion)
