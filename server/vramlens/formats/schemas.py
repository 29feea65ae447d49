"""JSON Schemas of the memory-relevant part of each config format, generated from pydantic models.

    python -m vramlens.formats.schemas [OUT_DIR]      (default: the repository's schemas/ folder)

One schema per `plan.format` (`schemas/<format>.schema.json`), used by editors for completion and
hover, and by the language server for value completion. They describe only the keys that change
GPU memory, say how in each description, and allow every other key (`additionalProperties: true`):
they document, they do not police. Defaults and meanings: each project's source at the commits in
docs/config-sources.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from vramlens.formats import accelerate, deepspeed, litgpt, neox
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.axolotl import keys as axolotl_keys
from vramlens.frameworks.llamafactory import keys as llamafactory_keys
from vramlens.frameworks.torchtune import keys as torchtune_keys
from vramlens.frameworks.transformers import keys as transformers_keys

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas"
Num = Union[int, float, str]  # YAML 1.1 reads `2e-5` as text; the frameworks convert it


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def F(description: str, **kw: Any) -> Any:
    return Field(default=None, description=description, **kw)


# --- HF TrainingArguments / TRL ------------------------------------------------------------------


class _HFBase(_Open):
    """Hugging Face `TrainingArguments` as YAML (HfArgumentParser): the memory-relevant keys."""

    model_config = ConfigDict(extra="allow", title="Hugging Face TrainingArguments (YAML)")


# The keys, their types and descriptions come from the HF and TRL key tables (frameworks/transformers/keys.py).
HFArguments = create_model(
    "HFArguments", __base__=_HFBase, __doc__=_HFBase.__doc__, **key_table.schema_fields(transformers_keys.KEYS)
)


class _TRLBase(HFArguments):  # type: ignore[valid-type,misc]
    """TRL `SFTConfig`/`DPOConfig`/`GRPOConfig` + `ModelConfig` keys (`trl sft --config`)."""

    model_config = ConfigDict(extra="allow", title="TRL config (YAML)")


TRLArguments = create_model(
    "TRLArguments", __base__=_TRLBase, __doc__=_TRLBase.__doc__, **key_table.schema_fields(transformers_keys.TRL_KEYS)
)


# --- axolotl ----------------------------------------------------------------------------------------


class _AxolotlBase(_Open):
    model_config = ConfigDict(extra="allow", title="axolotl config")


# The keys, their types and descriptions come from axolotl's key table (frameworks/axolotl/keys.py).
AxolotlConfig = create_model("AxolotlConfig", __base__=_AxolotlBase, **key_table.schema_fields(axolotl_keys.KEYS))


# --- LLaMA-Factory ----------------------------------------------------------------------------------


class _LlamaFactoryBase(_Open):
    model_config = ConfigDict(extra="allow", title="LLaMA-Factory config")


class _LlamaFactoryV1Base(_Open):
    model_config = ConfigDict(extra="allow", title="LLaMA-Factory v1 config")


# The keys, their types and descriptions come from LLaMA-Factory's key tables (frameworks/llamafactory/keys.py).
LlamaFactoryConfig = create_model(
    "LlamaFactoryConfig", __base__=_LlamaFactoryBase, **key_table.schema_fields(llamafactory_keys.KEYS)
)
LlamaFactoryV1Config = create_model(
    "LlamaFactoryV1Config", __base__=_LlamaFactoryV1Base, **key_table.schema_fields(llamafactory_keys.KEYS_V1)
)


# --- torchtune ----------------------------------------------------------------------------------------


class _TorchtuneBase(_Open):
    model_config = ConfigDict(extra="allow", title="torchtune recipe config")


# The keys, their types and descriptions come from torchtune's key table (frameworks/torchtune/keys.py).
TorchtuneConfig = create_model(
    "TorchtuneConfig", __base__=_TorchtuneBase, **key_table.schema_fields(torchtune_keys.KEYS)
)


# --- accelerate ---------------------------------------------------------------------------------------


class AccelerateConfig(_Open):
    model_config = ConfigDict(extra="allow", title="accelerate config")
    # the keys, their descriptions and the values the parser reads (formats.accelerate), not a second list
    distributed_type: Optional[Literal[tuple(accelerate.DISTRIBUTED_TYPES)]] = F(  # type: ignore[valid-type]
        accelerate.key_for("dist_strategy").description
    )
    num_processes: Optional[int] = F(accelerate.key_for("world_size").description, ge=1)
    mixed_precision: Optional[Literal[tuple(accelerate.MIXED_PRECISION)]] = F(  # type: ignore[valid-type]
        accelerate.key_for("amp_dtype").description
    )
    deepspeed_config: Optional[dict] = F(accelerate.SECTIONS["deepspeed_config"])
    fsdp_config: Optional[dict] = F(accelerate.SECTIONS["fsdp_config"])
    parallelism_config: Optional[dict] = F(accelerate.SECTIONS["parallelism_config"])


# --- DeepSpeed ---------------------------------------------------------------------------------------


class _DeepSpeedBase(_Open):
    model_config = ConfigDict(extra="allow", title="DeepSpeed config")


def _deepspeed_field(name: str) -> tuple[Any, Any]:
    """A top-level DeepSpeed key from the parser's key table: a whole number (or "auto") or a section."""
    key = deepspeed.BY_PATH.get((name,))
    kind = (
        Optional[Union[int, Literal["auto"]]]
        if key is not None and key.read is deepspeed.read_whole
        else Optional[dict]
    )
    return kind, F(deepspeed.SECTIONS[name])


# The top-level keys and their descriptions come from the DeepSpeed parser's key table (formats.deepspeed).
# (`dict[str, Any]`: a `**` of tuples could also fill create_model's own `__config__`, `__doc__`... for mypy)
_deepspeed_fields: dict[str, Any] = {name: _deepspeed_field(name) for name in deepspeed.SECTIONS}
DeepSpeedConfig = create_model("DeepSpeedConfig", __base__=_DeepSpeedBase, **_deepspeed_fields)


# --- litgpt ---------------------------------------------------------------------------------------


class _LitgptBase(_Open):
    model_config = ConfigDict(extra="allow", title="litgpt config")


def _litgpt_field(key: litgpt.Key) -> tuple[Any, Any]:
    """A top-level litgpt key from the parser's key table, typed by its kind."""
    if key.kind == "choice":
        return Optional[Literal[key.choices]], F(key.description)  # type: ignore[valid-type]
    if key.kind == "whole":
        return Optional[int], F(key.description, ge=1)
    kind = {"number": float, "bool": bool, "text": str, "section": dict, "devices": Union[int, Literal["auto"]]}[
        key.kind
    ]
    return Optional[kind], F(key.description)


# The top-level keys, their types and descriptions come from the litgpt parser's key table (formats.litgpt).
_litgpt_fields: dict[str, Any] = {key.path[0]: _litgpt_field(key) for key in litgpt.KEYS if len(key.path) == 1}
LitgptConfig = create_model("LitgptConfig", __base__=_LitgptBase, **_litgpt_fields)


# --- GPT-NeoX ---------------------------------------------------------------------------------------


class _NeoxBase(_Open):
    model_config = ConfigDict(extra="allow", title="GPT-NeoX config")


def _neox_field(key: neox.Key) -> tuple[Any, Any]:
    """A GPT-NeoX key from the parser's key table, typed by its kind."""
    kind = key.shape_kind or key.kind
    if kind == "choice":
        return Optional[Literal[key.choices]], F(key.description)  # type: ignore[valid-type]
    if kind in ("whole", "count"):
        return Optional[int], F(key.description, ge=1 if kind == "whole" else 0)
    python_type = {"bool": bool, "text": str, "list": list, "section": dict}[kind]
    return Optional[python_type], F(key.description)


# The keys, their types and descriptions come from the GPT-NeoX parser's key table (formats.neox).
_neox_fields: dict[str, Any] = {key.path[0]: _neox_field(key) for key in neox.KEYS}
NeoxConfig = create_model("NeoxConfig", __base__=_NeoxBase, **_neox_fields)


FORMATS: dict[str, type[BaseModel]] = {
    "hf": HFArguments,
    "trl": TRLArguments,
    "axolotl": AxolotlConfig,
    "llamafactory": LlamaFactoryConfig,
    "llamafactory-v1": LlamaFactoryV1Config,
    "torchtune": TorchtuneConfig,
    "accelerate": AccelerateConfig,
    "deepspeed": DeepSpeedConfig,
    "litgpt": LitgptConfig,
    "gpt-neox": NeoxConfig,
}


def schema_for(fmt: str) -> dict:
    model = FORMATS[fmt]
    schema = model.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://vramlens.dev/schemas/{fmt}.schema.json"
    schema["additionalProperties"] = True
    for prop in schema.get("properties", {}).values():
        # `Optional[Literal[...]]` → also a top-level `enum` (with null: an empty key means "default"),
        # which editors offer as completions
        branches = [b for b in prop.get("anyOf", []) if b != {"type": "null"}]
        if branches and all(isinstance(b, dict) and "enum" in b for b in branches):
            prop["enum"] = [v for b in branches for v in b["enum"]] + [None]
    return schema


def render_all() -> dict[str, str]:
    """File name → JSON text for every format."""
    return {f"{fmt}.schema.json": json.dumps(schema_for(fmt), indent=2, sort_keys=False) + "\n" for fmt in FORMATS}


def write_schemas(out_dir: Path = SCHEMA_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        p = out_dir / name
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
        written.append(p)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else SCHEMA_DIR
    for p in write_schemas(out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
