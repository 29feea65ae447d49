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
from vramlens.formats.vocab import HF_ATTENTION
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.axolotl import keys as axolotl_keys
from vramlens.frameworks.llamafactory import keys as llamafactory_keys
from vramlens.knowledge import optimizers

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas"
Num = Union[int, float, str]  # YAML 1.1 reads `2e-5` as text; the frameworks convert it


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def F(description: str, **kw: Any) -> Any:
    return Field(default=None, description=description, **kw)


# --- HF TrainingArguments / TRL ------------------------------------------------------------------


class HFArguments(_Open):
    """Hugging Face `TrainingArguments` as YAML (HfArgumentParser): the memory-relevant keys."""

    model_config = ConfigDict(extra="allow", title="Hugging Face TrainingArguments (YAML)")
    per_device_train_batch_size: Optional[int] = F(
        "Samples per GPU per forward/backward (default 8). Activation memory grows linearly with it.", ge=1
    )
    gradient_accumulation_steps: Optional[int] = F(
        "Micro-batches per optimizer step (default 1). Raises the effective batch without more activation memory.", ge=1
    )
    per_device_eval_batch_size: Optional[int] = F(
        "Samples per GPU in evaluation (default 8). Evaluation can run out of memory on its own.", ge=1
    )
    gradient_checkpointing: Optional[bool] = F(
        "Recompute activations in backward (default false): activation memory drops from all layers to about one."
    )
    gradient_checkpointing_kwargs: Optional[dict] = F("Options of checkpointing, e.g. `{use_reentrant: false}`.")
    bf16: Optional[Union[bool, Literal["auto"]]] = F(
        "bf16 mixed precision (default false; TRL: true unless fp16). With fp32 weights, adds a bf16 working copy "
        "of activations; halves activation memory against fp32."
    )
    fp16: Optional[bool] = F("fp16 mixed precision (default false). Activations in fp16, weights stay fp32.")
    optim: Optional[str] = F(
        "Optimizer (default adamw_torch_fused). AdamW keeps 8 bytes of state per fp32 parameter; 8-bit variants "
        "(adamw_bnb_8bit, paged_adamw_8bit) about 2; paged ones can spill to CPU memory.",
        json_schema_extra={"examples": list(optimizers.hf_names())},
    )
    torch_compile: Optional[bool] = F(
        "torch.compile the model (default false): usually less activation memory, with a compile-time peak."
    )
    use_liger_kernel: Optional[bool] = F(
        "Liger kernels incl. fused linear cross-entropy: no full "
        "[tokens × vocabulary] logits tensor — often the largest activation."
    )
    deepspeed: Optional[Union[str, dict]] = F(
        "DeepSpeed config (path or inline): ZeRO shards optimizer states, "
        "gradients and (stage 3) weights across GPUs; offload moves them to CPU."
    )
    fsdp: Optional[Union[str, list, bool]] = F(
        "FSDP options (`full_shard auto_wrap`, `shard_grad_op`, `offload`): shards weights, gradients and "
        "optimizer states across GPUs."
    )
    fsdp_config: Optional[dict] = F(
        "FSDP settings (`offload_params`, `activation_checkpointing`, "
        "`state_dict_type`; FULL_STATE_DICT gathers the whole model to save)."
    )
    torch_dtype: Optional[str] = F(
        "dtype the weights are loaded in (renamed `dtype`): float32 takes 4 bytes per parameter, bfloat16 2.",
        json_schema_extra={"examples": ["bfloat16", "float16", "float32", "auto"]},
    )
    attn_implementation: Optional[str] = F(
        "Attention kernel: `eager` materialises [batch, heads, seq, seq] scores; sdpa/flash_attention_2 are O(seq).",
        json_schema_extra={"examples": list(HF_ATTENTION)},
    )


class TRLArguments(HFArguments):
    """TRL `SFTConfig`/`DPOConfig`/`GRPOConfig` + `ModelConfig` keys (`trl sft --config`)."""

    model_config = ConfigDict(extra="allow", title="TRL config (YAML)")
    model_name_or_path: Optional[str] = F(
        "The model: parameter count, layers, hidden size and vocabulary set every memory term."
    )
    dtype: Optional[str] = F(
        "dtype of the loaded weights (TRL ModelConfig; old name `torch_dtype`).",
        json_schema_extra={"examples": ["bfloat16", "float16", "float32", "auto"]},
    )
    max_length: Optional[int] = F(
        "Maximum tokens per sample (default 1024; `max_seq_length` before TRL 0.16). "
        "Activations grow linearly with it, eager attention quadratically.",
        ge=1,
    )
    max_seq_length: Optional[int] = F("Old name of `max_length` (removed in TRL 0.20).", ge=1)
    packing: Optional[bool] = F("Pack samples into full-length rows: every row costs the maximum length.")
    padding_free: Optional[bool] = F("Drop padding (with packing): no memory on pad tokens.")
    activation_offloading: Optional[bool] = F("Move saved activations to CPU memory during the step.")
    loss_type: Optional[str] = F("SFT loss; `chunked_nll` (default since TRL 1.7) never holds the full logits tensor.")
    use_peft: Optional[bool] = F("Train LoRA adapters: gradients and optimizer states only for the adapters.")
    lora_r: Optional[int] = F("LoRA rank (default 16): adapter parameters grow linearly with it.", ge=1)
    lora_alpha: Optional[Num] = F("LoRA scaling (default 32). No memory effect.")
    lora_dropout: Optional[Num] = F("LoRA dropout (default 0.05): > 0 keeps an extra copy of each adapted input.")
    lora_target_modules: Optional[Union[list, str]] = F("Layers that get adapters (`all-linear` = every linear layer).")
    lora_modules_to_save: Optional[list] = F(
        "Modules trained in full next to the adapters (embeddings, lm_head can be large)."
    )
    load_in_4bit: Optional[bool] = F("Load the base model in 4-bit (NF4): about 0.5 byte per parameter.")
    load_in_8bit: Optional[bool] = F("Load the base model in 8-bit: about 1 byte per parameter.")
    bnb_4bit_quant_type: Optional[Literal["nf4", "fp4"]] = F("4-bit data type (default nf4).")
    use_bnb_nested_quant: Optional[bool] = F("Double quantization of the 4-bit scales: saves ~0.4 bit per parameter.")
    env: Optional[dict[str, str]] = F(
        "Environment variables set before training, e.g. "
        "`PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True` against fragmentation."
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


class _Component(_Open):
    component: Optional[str] = Field(default=None, alias="_component_", description="Dotted path of the builder/class.")


class TorchtuneConfig(_Open):
    model_config = ConfigDict(extra="allow", title="torchtune recipe config")
    model: Optional[dict] = F(
        "`_component_` builder, e.g. torchtune.models.llama3_1.qlora_llama3_1_8b: size, "
        "LoRA (`lora_`) or QLoRA (`qlora_`, NF4 base) are in the name; `lora_rank`, "
        "`lora_attn_modules`, `apply_lora_to_mlp` set the adapters."
    )
    batch_size: Optional[int] = F("Samples per GPU per step: activations grow linearly.", ge=1)
    gradient_accumulation_steps: Optional[int] = F("Micro-batches per optimizer step.", ge=1)
    enable_activation_checkpointing: Optional[bool] = F("Recompute activations (recipe default False).")
    enable_activation_offloading: Optional[bool] = F("Move saved activations to CPU (needs checkpointing).")
    optimizer: Optional[dict] = F(
        "`_component_` optimizer class: torch.optim.AdamW (fused: True) keeps 2 states "
        "per parameter; bitsandbytes.optim.PagedAdamW8bit ~2 bytes."
    )
    optimizer_in_bwd: Optional[bool] = F("Step each parameter in backward: no full gradient buffer.")
    loss: Optional[dict] = F("`_component_` loss; LinearCrossEntropyLoss never materialises the full logits.")
    tokenizer: Optional[dict] = F("`max_seq_len` bounds the sequence; null = the longest sample decides.")
    dataset: Optional[dict] = F("`packed: True` fills every row to max_seq_len.")
    dtype: Optional[Literal["bf16", "fp32"]] = F("Training dtype (no autocast): weights, grads and states.")
    compile: Optional[Union[bool, dict]] = F("torch.compile model and loss.")
    fsdp_cpu_offload: Optional[bool] = F("Offload parameters and the optimizer step to CPU (distributed recipes).")
    tensor_parallel_dim: Optional[int] = F("Tensor-parallel degree: weights divide by it.", ge=1)


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
