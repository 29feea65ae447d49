"""Settings: where the GPU, headroom and rule severities come from, and which source wins.

Sources, lowest priority first:
  1. the local GPU found by `nvidia-smi` (a default only)
  2. `initializationOptions` of the client (any of `{"vramlens": {...}}`, `{"settings": {...}}` or flat)
  3. the editor's `vramlens` section, pulled with `workspace/configuration` or pushed with
     `workspace/didChangeConfiguration` (Neovim 0.7 only pushes)
  4. the project's `.vramlens.toml` / `pyproject.toml [tool.vramlens]` next to the document
A GPU named inside the document itself (`# vramlens: gpu=...`) is read by the parsers.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from vramlens.workspace_config import find_workspace_config

log = logging.getLogger(__name__)

SECTION = "vramlens"
SEVERITIES = ("error", "warning", "information", "hint", "off")
_SEVERITY_WORDS = {"info": "information", "warn": "warning", "none": "off", "ignore": "off"}


@dataclass(frozen=True)
class UserSettings:
    """One source's view of the `vramlens` settings section; None = not set by this source."""

    gpu: str | None = None
    """GPU to check against, e.g. "A100-40GB" or "8xH100"."""
    gpu_count: int | None = None
    """GPUs per node the run uses."""
    headroom: float | None = None
    """Fraction of usable memory to keep free before a fit counts as tight."""
    severity: dict[str, str] = field(default_factory=dict)
    """Rule id -> error|warning|information|hint|off."""
    framework_versions: dict[str, str] = field(default_factory=dict)
    """Framework -> version whose defaults apply, e.g. {"trl": "1.7"}."""
    debounce_ms: float | None = None
    """Delay before re-analysing after an edit (initializationOptions only)."""
    trace_python: str | None = None
    """`vramlens.trace.python`: the interpreter (the training environment) that runs `vramlens trace`."""

    def over(self, lower: "UserSettings") -> "UserSettings":
        """These settings, with what they leave unset taken from `lower`."""
        merged = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(lower, f.name)
            if isinstance(mine, dict):
                merged[f.name] = {**theirs, **mine}
            else:
                merged[f.name] = mine if mine is not None else theirs
        return UserSettings(**merged)


def _section(data: Any) -> dict:
    """Find the `vramlens` settings inside what a client sent."""
    if not isinstance(data, dict):
        return {}
    for key in (SECTION, "settings"):
        inner = data.get(key)
        if isinstance(inner, dict):
            return _section(inner) if SECTION in inner else inner
    return data


def parse_settings(data: Any, problems: list[str] | None = None) -> UserSettings:
    """Typed settings from JSON; values of the wrong type are ignored and reported in `problems`."""
    problems = problems if problems is not None else []
    raw = _section(data)
    norm = {str(k).replace("-", "").replace("_", "").lower(): v for k, v in raw.items()}

    def text(key: str) -> str | None:
        v = norm.get(key)
        if v is None or v == "":
            return None
        if isinstance(v, str):
            return v.strip() or None
        problems.append(f"vramlens.{key}: expected a string, got {v!r}")
        return None

    def number(key: str, kind: type, lo: float, hi: float) -> Any:
        v = norm.get(key)
        if v is None or v == "":
            return None
        try:
            if isinstance(v, bool):
                raise ValueError
            n = kind(v)
        except (TypeError, ValueError):
            problems.append(f"vramlens.{key}: expected a number, got {v!r}")
            return None
        if not lo <= n <= hi:
            problems.append(f"vramlens.{key}: {v!r} is outside {lo:g}–{hi:g}")
            return None
        return n

    severity: dict[str, str] = {}
    raw_sev = norm.get("severity")
    if isinstance(raw_sev, dict):
        for rule, level in raw_sev.items():
            word = str(level).strip().lower()
            word = _SEVERITY_WORDS.get(word, word)
            if word in SEVERITIES:
                severity[str(rule).strip().upper()] = word
            else:
                problems.append(f"vramlens.severity.{rule}: {level!r} is not one of {', '.join(SEVERITIES)}")
    elif raw_sev not in (None, ""):
        problems.append("vramlens.severity: expected an object like {\"VL004\": \"off\"}")
    versions = norm.get("frameworkversions")
    trace = norm.get("trace")
    if isinstance(trace, dict) and "python" in trace:
        norm["tracepython"] = trace["python"]
    elif "trace.python" in norm:
        norm["tracepython"] = norm["trace.python"]
    return UserSettings(
        gpu=text("gpu"),
        gpu_count=number("gpucount", int, 1, 1 << 16),
        headroom=number("headroom", float, 0.0, 0.9),
        severity=severity,
        framework_versions={str(k): str(v) for k, v in versions.items()} if isinstance(versions, dict) else {},
        debounce_ms=number("debouncems", float, 0.0, 5000.0),
        trace_python=text("tracepython"),
    )


@dataclass(frozen=True)
class EffectiveSettings:
    """The settings one document is analysed with, and where the GPU came from."""

    values: UserSettings
    gpu_origin: str | None = None
    """Human description of the GPU's source, e.g. "pyproject.toml", "editor settings", "nvidia-smi"."""
    project_file: Path | None = None


@dataclass
class SettingsStore:
    """All sources, kept apart so that a change in one is merged again in the right order."""

    detected: UserSettings = field(default_factory=UserSettings)
    initialization: UserSettings = field(default_factory=UserSettings)
    editor: UserSettings = field(default_factory=UserSettings)
    detected_note: str | None = None

    def for_document(self, path: Path | None, root: Path | None) -> EffectiveSettings:
        project = None
        if path is not None:
            try:
                project = find_workspace_config(path, root)
            except OSError:
                project = None
        layers = [("nvidia-smi" + (f" ({self.detected_note})" if self.detected_note else ""), self.detected),
                  ("initialization options", self.initialization),
                  ("editor settings", self.editor)]
        if project is not None:
            problems: list[str] = []
            layers.append((project.path.name, parse_settings(project.values, problems)))
            for p in problems:
                log.warning("%s: %s", project.path, p)
        merged = UserSettings()
        origin = None
        for name, layer in layers:
            merged = layer.over(merged)
            if layer.gpu is not None:
                origin = name
        return EffectiveSettings(merged, origin, project.path if project else None)

    def with_editor(self, editor: UserSettings) -> "SettingsStore":
        return replace(self, editor=editor)
