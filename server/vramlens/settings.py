"""The settings: one model for every command and the language server, and how each source is read.

Sources (lowest priority first) — each gives some fields; later ones win, dictionaries are merged:

  1. the local GPU found by `nvidia-smi` (language server only; a default)
  2. the client's `initializationOptions` (`{"vramlens": {...}}`, `{"settings": {"vramlens": {...}}}` or flat)
  3. the editor's `vramlens` section (`workspace/configuration`, `workspace/didChangeConfiguration`)
  4. the project file nearest to the document: `.vramlens.toml` or `pyproject.toml [tool.vramlens]`
  5. command-line flags (`--gpu`, `--num-gpus`, `--headroom`, `--severity`, `--offline`)

A GPU named in the document itself (`# vramlens: gpu=...`) is read by the parsers and loses to all of these.

Keys: one field per setting below. Editors write the camelCase alias (`gpuCount`); project files may write it
kebab (`gpu-count`), snake (`gpu_count`) or camelCase. Every source is validated by this model, so a value
the server refuses is refused by the command line too, with the same message.

To add a setting: add one field with a default, a description and `allowed` (shown in error messages), then
read it where it is used (`settings.<name>`); every source accepts it from then on (a command-line flag for it
goes in `cli.project.add_settings_flags` and `FLAGS`; a table field also joins the `_table` validator).
`trusted` is the exception: only the client's initializationOptions set it (`lsp.config.client_trusts`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterable, get_origin

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

SECTION = "vramlens"
MAX_GPU_COUNT = 1 << 16  # GPUs per node; also the bound of the in-file `# vramlens: count=` directive
DEFAULT_HEADROOM = 0.10
SEVERITY_LEVELS = ("error", "warning", "information", "hint", "off")
# The one table of other spellings of a severity (settings, project files, `--severity`).
SEVERITY_ALIASES = {
    "info": "information",
    "warn": "warning",
    "none": "off",
    "ignore": "off",
    "disable": "off",
    "disabled": "off",
}


def normalize_severity(word: object) -> str | None:
    """ "error" | "warning" | "information" | "hint" | "off" for a user's spelling; None if not a severity."""
    w = str(word).strip().lower()
    w = SEVERITY_ALIASES.get(w, w)
    return w if w in SEVERITY_LEVELS else None


class Settings(BaseModel):
    """What one document is analysed with. Immutable: derive variants with `model_copy(update=...)`."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        arbitrary_types_allowed=True,
    )

    gpu: str | None = Field(
        None,
        description='GPU to check against, e.g. "A100-40GB" or "8xH100"; wins over a GPU named in the document.',
        json_schema_extra={"allowed": 'a GPU name such as "A100-40GB", "H100" or "8xH100"'},
    )
    gpu_count: int | None = Field(
        None,
        ge=1,
        le=MAX_GPU_COUNT,
        description="GPUs per node the run uses.",
        json_schema_extra={"allowed": f"a whole number from 1 to {MAX_GPU_COUNT}"},
    )
    headroom: float = Field(
        DEFAULT_HEADROOM,
        ge=0.0,
        le=0.9,
        description="Fraction of usable GPU memory to keep free; a fit with less is tight (VL002).",
        json_schema_extra={"allowed": "a number from 0 to 0.9"},
    )
    severity: dict[str, str] = Field(
        default_factory=dict,
        description="Rule id (or name) → error | warning | information | hint | off.",
        json_schema_extra={
            "allowed": 'a table of rule → level, e.g. VL004 = "off" (levels: ' + ", ".join(SEVERITY_LEVELS) + ")"
        },
    )
    framework_versions: dict[str, str] = Field(
        default_factory=dict,
        description='Framework or package → version whose defaults apply, e.g. {"trl": "1.7", "bitsandbytes": "0.45"}.',
        json_schema_extra={"allowed": 'a table of package → version, e.g. trl = "1.7"'},
    )
    debounce_ms: float | None = Field(
        None,
        ge=0.0,
        le=5000.0,
        description="Delay before re-analysing after an edit (language server).",
        json_schema_extra={"allowed": "a number of milliseconds from 0 to 5000"},
    )
    trusted: StrictBool = Field(
        False,
        description="Whether traces and probes may run (they execute torch). Only "
        "the client's initializationOptions can set it, and only the "
        "JSON boolean true trusts.",
        json_schema_extra={"allowed": "true or false (JSON booleans)"},
    )

    model_lookup: StrictBool = Field(
        True,
        description="Whether a model that is not in the catalog, a local "
        "folder or the local Hugging Face cache is looked up on the "
        "Hub (its config.json only; off when HF_HUB_OFFLINE=1).",
        json_schema_extra={"allowed": "true or false"},
    )

    trace_python: str | None = Field(
        None,
        description="The interpreter (the training environment) that runs "
        "`vramlens trace`; the language server takes it from the "
        "user's settings only, never from a project file.",
        json_schema_extra={"allowed": "a path or a command name, e.g. ~/envs/train/bin/python"},
    )

    # The run's context, not a user setting: never read from a source.
    workspace: Path | None = Field(
        None,
        exclude=True,
        description="Workspace root: referenced files and local model folders are looked up there too.",
    )
    read_file: Callable[[Path], str | None] | None = Field(
        None,
        exclude=True,
        description="How to read referenced files (the LSP passes its open buffers); None reads the disk.",
    )
    hub_lookup: Callable[[str], Any] | None = Field(
        None,
        exclude=True,
        description="How to ask the Hub for a "
        "model's config.json (`knowledge.hub`): the language server "
        "passes a background lookup; None asks and waits.",
    )
    machine_gpu_count: int | None = Field(
        None,
        exclude=True,
        description="GPUs found on this machine "
        "(nvidia-smi): the count when neither the settings nor the file give "
        "one; a launcher's process count wins over it.",
    )
    any_model_folder: bool = Field(
        False,
        exclude=True,
        description="Whether a model folder given by an absolute "
        "path outside the workspace may be read (its config.json "
        "only): the command line and trusted workspaces.",
    )

    @field_validator("gpu", "trace_python", mode="before")
    @classmethod
    def _gpu(cls, v: Any) -> Any:
        if isinstance(v, str):
            return v.strip() or None
        return v

    @field_validator("severity", "framework_versions", mode="before")
    @classmethod
    def _table(cls, v: Any, info: ValidationInfo) -> Any:
        if not isinstance(v, dict):
            raise ValueError("expected a table")
        if info.field_name == "framework_versions":
            return {str(k): str(x) for k, x in v.items()}
        out: dict[str, str] = {}
        for rule, level in v.items():
            word = normalize_severity(level)
            if word is None:
                raise ValueError(f"{level!r} is not one of {', '.join(SEVERITY_LEVELS)}")
            out[str(rule).strip().upper()] = word
        return out


CONTEXT_FIELDS = ("workspace", "read_file", "hub_lookup", "any_model_folder", "machine_gpu_count")
USER_FIELDS = tuple(name for name in Settings.model_fields if name not in CONTEXT_FIELDS)
TABLES = frozenset(name for name in USER_FIELDS if get_origin(Settings.model_fields[name].annotation) is dict)
"""Fields that are tables: merged key by key across sources, and their entries validated one by one."""
CLIENT_ONLY = frozenset({"trusted"})  # a project file or pushed editor settings cannot grant trust
NOT_FROM_PROJECT = frozenset({"trace_python"})  # a repository's project file cannot choose the program that runs


def user_chosen(project_values: dict[str, Any]) -> dict[str, Any]:
    """A project file's settings without those only the user may choose (`NOT_FROM_PROJECT`)."""
    return {k: v for k, v in project_values.items() if k not in NOT_FROM_PROJECT}


_BY_SPELLING = {
    **{name: name for name in USER_FIELDS},
    **{to_camel(name): name for name in USER_FIELDS},
    **{name.replace("_", "-"): name for name in USER_FIELDS},
    "trace.python": "trace_python",
}


class SettingsError(ValueError):
    """Settings a source gave that the model refuses; `problems` are one readable line each."""

    def __init__(self, source: str, problems: list[str]):
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems


def field_for(key: object) -> str | None:
    """The field a key names (`gpuCount`, `gpu-count`, `gpu_count` → gpu_count); None if not a setting."""
    return _BY_SPELLING.get(re.sub(r"\s+", "", str(key)))


def allowed(name: str) -> str:
    extra = Settings.model_fields[name].json_schema_extra
    return str(extra.get("allowed", "")) if isinstance(extra, dict) else ""


def section(data: Any) -> dict:
    """The `vramlens` settings inside what a client sent (nested under "vramlens" / "settings", or flat)."""
    if not isinstance(data, dict):
        return {}
    for key in (SECTION, "settings"):
        inner = data.get(key)
        if isinstance(inner, dict):
            return section(inner) if SECTION in inner else inner
    return data


def read_source(
    data: Any, source: str, *, exclude: Iterable[str] = CLIENT_ONLY, unknown: list[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The validated fields one source sets, and a line per value refused (the rest still apply).

    Keys are matched by `field_for`; None and "" mean "not set"; `exclude` lists fields this source may not set;
    keys that are not settings are added to `unknown` when given."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    if not isinstance(data, dict):
        if data not in (None, ""):
            problems.append(f"expected a table of settings, got {type(data).__name__}")
        return values, problems
    for key, value in data.items():
        if str(key).strip() == "trace" and isinstance(value, dict):  # VS Code's `vramlens.trace.python`, or a
            key, value = "trace.python", value.get("python")  # project file's [trace] python = "…"
        name = field_for(key)
        if name is None or name in exclude:
            if unknown is not None:
                unknown.append(str(key))
            continue
        if value is None or value == "":
            continue
        items = list(value.items()) if isinstance(value, dict) and name in TABLES else None
        try:
            if items is None:
                values[name] = getattr(Settings.model_validate({name: value}), name)
            else:  # a table: keep the entries that are valid
                table: dict[str, str] = {}
                for k, v in items:
                    try:
                        table.update(getattr(Settings.model_validate({name: {k: v}}), name))
                    except ValidationError as exc:
                        problems.append(_problem(key, exc, f"{key}.{k}"))
                values[name] = table
        except ValidationError as exc:
            problems.append(_problem(key, exc))
    return values, problems


def _problem(key: object, exc: ValidationError, shown: str | None = None) -> str:
    name = field_for(key) or str(key)
    err = exc.errors()[0]
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    value = err.get("input")
    value_text = f" = {value!r}" if not isinstance(value, dict) else ""
    return f"`{shown or key}`{value_text}: {msg} (allowed: {allowed(name)})"


def merge(layers: Iterable[dict[str, Any]], **context: Any) -> Settings:
    """Settings from source layers, lowest priority first (tables merged key by key), plus the run's context
    (`workspace`, `read_file`)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            if isinstance(value, dict):
                merged[name] = {**merged.get(name, {}), **value}
            else:
                merged[name] = value
    return Settings.model_validate({**merged, **context})


FLAGS = {
    "gpu": "--gpu",
    "gpu_count": "--num-gpus",
    "headroom": "--headroom",
    "severity": "--severity",
    "model_lookup": "--offline",
    "trace_python": "--python",
}


def from_flags(**flags: Any) -> dict[str, Any]:
    """The layer command-line flags give (field name → value, None: not given); raises SettingsError for a
    refused value, naming the flag."""
    values, problems = read_source({k: v for k, v in flags.items() if v is not None}, "command line", exclude=())
    for name, flag in FLAGS.items():
        problems = [p.replace(f"`{name}`", f"`{flag}`") for p in problems]
    if problems:
        raise SettingsError("command line", problems)
    return values
