"""How a fix writes the torchtune concepts that are more than one key (the key table, `keys.py`, says which concept
each writer serves). `doc` is the document being edited (`formats.render_yaml._Doc`).

The model builder's name carries LoRA/QLoRA (`lora_`/`qlora_` prefix; torchtune `torchtune/models/*/
_model_builders.py` at bd2a0fc7); the adapters' keys are the builder's keyword arguments."""

from __future__ import annotations

from typing import Any

from vramlens.frameworks.torchtune.readers import _BUILDER
from vramlens.knowledge import optimizers

LOSSES = {
    "fused": "torchtune.modules.loss.LinearCrossEntropyLoss",
    "chunked": "torchtune.modules.loss.CEWithChunkedOutputLoss",
    "standard": "torch.nn.CrossEntropyLoss",
}
ATTENTION_MODULES = ["q_proj", "k_proj", "v_proj", "output_proj"]


def optimizer(doc: Any, value: Any, changes: dict) -> None:
    cls = optimizers.class_path(str(value)) or str(value)
    if "." not in cls:
        doc.notes.append(f"optimizer `{value}` has no torchtune class")
        return
    doc.set(("optimizer", "_component_"), cls)
    if not cls.startswith("torch.optim."):
        for k in ("fused", "foreach"):
            if ("optimizer", k) in doc.by_path and not doc.delete(("optimizer", k)):
                doc.notes.append(f"remove `optimizer.{k}`: `{cls}` does not take it")
    elif value == "adamw_torch_fused":
        doc.set(("optimizer", "fused"), True, after=("_component_",))


def optimizer_impl(doc: Any, value: Any, changes: dict) -> None:
    cls = str(doc.value(("optimizer", "_component_")) or "")
    if not cls.startswith("torch.optim."):
        doc.notes.append(f"`{cls}` has no fused/foreach switch")
        return
    doc.set(("optimizer", "fused"), value == "fused", after=("_component_", "lr"))


def loss(doc: Any, value: Any, changes: dict) -> None:
    cls = LOSSES.get(value)
    if cls:
        doc.set(("loss", "_component_"), cls)


def peft(doc: Any, value: Any, changes: dict) -> None:
    doc.done.add("quant_bits")
    comp = doc.get(("model", "_component_"))
    m = _BUILDER.match(str(comp.value)) if comp is not None else None
    if m is None:
        doc.notes.append("the model builder is not a torchtune.models builder: change it by hand")
        return
    bits = changes.get("quant_bits")
    prefix = {"lora": "lora_", "dora": "lora_", "qlora": "qlora_", "none": ""}.get(value)
    if prefix is None:
        doc.notes.append(f"PEFT method `{value}` has no torchtune builder")
        return
    if value == "lora" and (
        bits == 4 or (bits is None and m.group("prefix") == "qlora_" and "quant_bits" not in changes)
    ):
        prefix = "qlora_" if bits == 4 else "lora_"
    new = f"torchtune.models.{m.group('family')}.{prefix}{m.group('name')}"
    doc.set(("model", "_component_"), new)
    if prefix and not m.group("prefix"):
        r = changes.get("lora_r", 16)
        doc.set(("model", "lora_attn_modules"), list(ATTENTION_MODULES), after=("_component_",))
        doc.set(("model", "apply_lora_to_mlp"), True, after=("lora_attn_modules",))
        doc.set(("model", "lora_rank"), r, after=("apply_lora_to_mlp",))
        doc.set(("model", "lora_alpha"), 2 * r, after=("lora_rank",))
        doc.done.update(("lora_r", "lora_targets"))
        doc.notes.append(
            "run it with a LoRA recipe (`tune run lora_finetune_single_device` or `lora_finetune_distributed`)"
        )
    if value == "dora":
        doc.set(("model", "use_dora"), True, after=("_component_",))
    elif doc.value(("model", "use_dora")):
        doc.set(("model", "use_dora"), False)


def quant(doc: Any, value: Any, changes: dict) -> None:
    if value == 4:
        peft(doc, "qlora", {**changes, "quant_bits": 4})
    else:
        doc.notes.append(f"{value}-bit base weights have no torchtune builder")


def targets(doc: Any, value: Any, changes: dict) -> None:
    from vramlens.formats.render_yaml import _targets_text

    t = _targets_text(value)
    if t == "all-linear":
        doc.set(("model", "lora_attn_modules"), list(ATTENTION_MODULES))
        doc.set(("model", "apply_lora_to_mlp"), True, after=("lora_attn_modules",))
    else:
        names = {"o_proj": "output_proj"}
        attn = [names.get(x, x) for x in value if names.get(x, x) in ATTENTION_MODULES]
        doc.set(("model", "lora_attn_modules"), attn)
        mlp = any(x in ("gate_proj", "up_proj", "down_proj", "w1", "w2", "w3") for x in value)
        doc.set(("model", "apply_lora_to_mlp"), mlp, after=("lora_attn_modules",))


def dtype(doc: Any, value: Any, changes: dict) -> None:
    if value in ("bf16", "fp32"):
        doc.set(("dtype",), value, after=("device",))
    else:
        doc.notes.append(f"torchtune trains in bf16 or fp32, not `{value}`")
