"""How a fix writes the LLaMA-Factory concepts that are more than one plain key (the key tables, `keys.py`, say
which concept each writer serves). `doc` is the document being edited (`formats.render_yaml._Doc`)."""

from __future__ import annotations

from typing import Any

from vramlens.frameworks.llamafactory.readers import OPTIMIZER_SWITCHES


def grad_checkpointing(doc: Any, value: Any, changes: dict) -> None:
    if ("disable_gradient_checkpointing",) in doc.by_path:
        doc.set(("disable_gradient_checkpointing",), not value)
    elif not value:
        doc.set(("disable_gradient_checkpointing",), True, after=("gradient_accumulation_steps",))
    # on by default: nothing to write


def peft(doc: Any, value: Any, changes: dict) -> None:
    doc.done.add("quant_bits")
    word = {"lora": "lora", "qlora": "lora", "dora": "lora", "none": "full", "freeze": "freeze"}.get(value)
    if word is None:
        doc.notes.append(f"finetuning type `{value}` has no LLaMA-Factory spelling")
        return
    doc.set(("finetuning_type",), word, after=("do_train", "stage"))
    if value == "dora":
        doc.set(("use_dora",), True, after=("finetuning_type",))
    bits = changes.get("quant_bits", 4 if value == "qlora" else None)
    if bits is not None:
        doc.set(("quantization_bit",), bits, after=("model_name_or_path",))


def targets(doc: Any, value: Any, changes: dict) -> None:
    from vramlens.formats.render_yaml import _targets_text

    t = _targets_text(value)
    doc.set(
        ("lora_target",),
        "all" if t == "all-linear" else ",".join(str(x) for x in value),
        after=("lora_rank", "finetuning_type"),
    )


def attn(doc: Any, value: Any, changes: dict) -> None:
    word = {"flash_attention_2": "fa2", "flash_attention_3": "fa3", "sdpa": "sdpa", "eager": "disabled"}.get(value)
    if word is None:
        doc.notes.append(f"attention `{value}` has no LLaMA-Factory `flash_attn` spelling")
        return
    doc.set(("flash_attn",), word, after=("trust_remote_code", "model_name_or_path"))


def loss(doc: Any, value: Any, changes: dict) -> None:
    if value == "fused":
        doc.set(("enable_liger_kernel",), True, after=("trust_remote_code", "model_name_or_path"))
    else:
        doc.notes.append(f"LLaMA-Factory has no `{value}` loss switch; `enable_liger_kernel: true` fuses it")


def quant(doc: Any, value: Any, changes: dict) -> None:
    if value:
        doc.set(("quantization_bit",), value, after=("model_name_or_path",))


def optimizer(doc: Any, value: Any, changes: dict) -> None:
    for switch in OPTIMIZER_SWITCHES:  # these replace `optim`: turn them off
        if doc.value((switch,)):
            doc.set((switch,), False)
    doc.set(("optim",), value, after=("learning_rate",))


def amp(doc: Any, value: Any, changes: dict) -> None:
    if value in ("bf16", "fp16"):
        doc.set((value,), True, after=("lr_scheduler_type", "warmup_ratio"))
        other = "fp16" if value == "bf16" else "bf16"
        if doc.value((other,)):
            doc.set((other,), False)


# --- v1 layout -------------------------------------------------------------------------------------


def v1_peft(doc: Any, value: Any, changes: dict) -> None:
    doc.done.update(("quant_bits", "lora_r"))
    if value in ("lora", "qlora"):
        doc.set(("peft_config", "name"), "lora", after=())
        doc.set(("peft_config", "r"), changes.get("lora_r", 16), after=("name",))
        bits = changes.get("quant_bits", 4 if value == "qlora" else None)
        if bits:
            doc.set(("quant_config", "name"), "bnb")
            doc.set(("quant_config", "quantization_bit"), bits, after=("name",))
    else:
        doc.notes.append(f"PEFT method `{value}` cannot be set in a v1 config")


def v1_quant(doc: Any, value: Any, changes: dict) -> None:
    doc.set(("quant_config", "name"), "bnb")
    doc.set(("quant_config", "quantization_bit"), value, after=("name",))


def v1_loss(doc: Any, value: Any, changes: dict) -> None:
    if value == "fused":
        doc.set(("kernel_config", "name"), "liger_kernel")
    else:
        doc.notes.append(f"no `{value}` loss in the v1 schema")
