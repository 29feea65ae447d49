"""Settings in the language server: each source kept as its own layer, merged per document.

Sources, lowest priority first (`vramlens.settings` has the model and the key spellings):
  1. the local GPU found by `nvidia-smi` (a default only)
  2. `initializationOptions` of the client (any of `{"vramlens": {...}}`, `{"settings": {...}}` or flat)
  3. the editor's `vramlens` section, pulled with `workspace/configuration` or pushed with
     `workspace/didChangeConfiguration` (Neovim 0.7 only pushes)
  4. the project's `.vramlens.toml` / `pyproject.toml [tool.vramlens]` next to the document
A GPU named inside the document itself (`# vramlens: gpu=...`) is read by the parsers.

Trust (`trusted`) comes from initializationOptions only and only as the JSON boolean `true`, at the top level
or in the `vramlens` section; nothing else a workspace can write (pushed settings, project files) grants it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vramlens.settings import SECTION, Settings, merge, read_source, section, user_chosen
from vramlens.workspace_config import find_workspace_config

__all__ = ["SECTION", "EffectiveSettings", "SettingsStore", "client_trusts", "read_client_settings"]

log = logging.getLogger(__name__)


def read_client_settings(data: Any, problems: list[str] | None = None) -> dict[str, Any]:
    """The settings layer a client sent (initializationOptions or the editor section); refused values are
    left out and reported in `problems`."""
    values, refused = read_source(section(data), "client settings")
    if problems is not None:
        problems.extend(refused)
    return values


def client_trusts(options: Any) -> bool:
    """Whether initializationOptions say the workspace is trusted: only a JSON `true` does."""
    if not isinstance(options, dict):
        return False
    for where in (options, section(options)):  # the top level (what VS Code sends) or the vramlens section
        values, _ = read_source({"trusted": where.get("trusted")}, "initializationOptions", exclude=())
        if values.get("trusted") is True:  # the model's StrictBool: "true", 1 are refused
            return True
    return False


@dataclass(frozen=True)
class EffectiveSettings:
    """The settings one document is analysed with, and where the GPU came from."""

    values: Settings
    gpu_origin: str | None = None
    """Human description of the GPU's source, e.g. "pyproject.toml", "editor settings", "nvidia-smi"."""
    project_file: Path | None = None


@dataclass
class SettingsStore:
    """All sources, kept apart so that a change in one is merged again in the right order."""

    detected: dict[str, Any] = field(default_factory=dict)
    initialization: dict[str, Any] = field(default_factory=dict)
    editor: dict[str, Any] = field(default_factory=dict)
    detected_note: str | None = None

    def for_document(self, path: Path | None, root: Path | None) -> EffectiveSettings:
        project = None
        if path is not None:
            try:
                project = find_workspace_config(path, root)
            except OSError:
                project = None
        # the local GPU count is a default: a launcher's process count in the file wins over it (resolve._world)
        detected = {k: v for k, v in self.detected.items() if k != "gpu_count"}
        layers = [
            ("nvidia-smi" + (f" ({self.detected_note})" if self.detected_note else ""), detected),
            ("initialization options", self.initialization),
            ("editor settings", self.editor),
        ]
        if project is not None:
            layers.append((project.path.name, user_chosen(project.values)))  # the trace interpreter: not
            # a repository's to choose
            for p in project.problems:
                log.warning("%s: %s", project.path, p)
        origin = None
        for name, layer in layers:
            if layer.get("gpu") is not None:
                origin = name
        return EffectiveSettings(
            merge((values for _, values in layers), machine_gpu_count=self.detected.get("gpu_count")),
            origin,
            project.path if project else None,
        )

    def with_editor(self, editor: dict[str, Any]) -> "SettingsStore":
        return replace(self, editor=editor)
