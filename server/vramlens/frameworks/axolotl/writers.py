"""How a fix writes the axolotl concepts that are more than one key (the key table, `keys.py`, says which concept
each writer serves). `doc` is the document being edited (`formats.render_yaml._Doc`)."""

from __future__ import annotations

from typing import Any

from vramlens.frameworks.axolotl.readers import LEGACY_ATTENTION, LIGER_PLUGIN


def peft(doc: Any, value: Any, changes: dict) -> None:
    doc.done.add("quant_bits")
    bits = changes.get("quant_bits", 4 if value == "qlora" else None)
    if value in ("lora", "qlora", "dora"):
        adapter = "qlora" if (value == "qlora" or bits == 4) else "lora"
        doc.set(("adapter",), adapter, after=("load_in_4bit", "load_in_8bit", "output_dir"))
        if value == "dora":
            doc.set(("peft_use_dora",), True, after=("adapter",))
        if bits is not None:
            quant(doc, bits, changes)
        if "lora_r" not in changes and ("lora_r",) not in doc.by_path:
            doc.set(("lora_r",), 16, after=("adapter", "lora_model_dir"))
    else:
        doc.notes.append("to train every weight, remove `adapter:` and the LoRA keys")


def quant(doc: Any, value: Any, changes: dict) -> None:
    if value == 4:
        doc.set(("load_in_4bit",), True, after=("load_in_8bit", "base_model"))
        if doc.value(("load_in_8bit",)):
            doc.set(("load_in_8bit",), False)
        if doc.value(("adapter",)) == "lora":
            doc.set(("adapter",), "qlora")
    elif value == 8:
        doc.set(("load_in_8bit",), True, after=("base_model",))
        if doc.value(("load_in_4bit",)):
            doc.set(("load_in_4bit",), False)


def targets(doc: Any, value: Any, changes: dict) -> None:
    from vramlens.formats.render_yaml import _targets_text

    t = _targets_text(value)
    if t == "all-linear":
        doc.set(("lora_target_linear",), True, after=("lora_target_modules", "lora_dropout", "lora_alpha", "lora_r"))
    else:
        doc.set(("lora_target_modules",), list(value), after=("lora_dropout", "lora_alpha", "lora_r"))
        if doc.value(("lora_target_linear",)):
            doc.set(("lora_target_linear",), False)


def attn(doc: Any, value: Any, changes: dict) -> None:
    for key, _ in LEGACY_ATTENTION:
        s = doc.get((key,))
        if s is not None and s.value:
            doc.replace_entry((key,), "attn_implementation", value)
            return
    doc.set(("attn_implementation",), value, after=("gradient_checkpointing_kwargs", "gradient_checkpointing"))


def loss(doc: Any, value: Any, changes: dict) -> None:
    if value == "fused":
        # Liger's fused linear cross-entropy, what the fix's title names: axolotl's Liger plugin and its switch
        # (axolotl src/axolotl/integrations/liger/README.md "Usage", args.py `LigerArgs`); the Cut Cross Entropy
        # plugin is another package (apple/ml-cross-entropy)
        doc.append_item(("plugins",), LIGER_PLUGIN, after=("base_model", "tokenizer_type"))
        doc.set(("liger_fused_linear_cross_entropy",), True, after=("liger_glu_activation", "plugins"))
    elif value == "chunked":
        doc.set(("chunked_cross_entropy",), True, after=("sequence_len",))
    else:
        doc.notes.append(f"loss `{value}`: remove the loss plugin from `plugins`")


def optimizer_impl(doc: Any, value: Any, changes: dict) -> None:
    cur = doc.value(("optimizer",)) or "adamw_torch_fused"
    if value == "fused" and cur == "adamw_torch":
        doc.set(("optimizer",), "adamw_torch_fused")
    else:
        doc.notes.append(f"optimizer implementation `{value}` cannot be chosen by `optimizer`")


def grad_checkpointing(doc: Any, value: Any, changes: dict) -> None:
    doc.set(("gradient_checkpointing",), bool(value), after=("gradient_accumulation_steps", "bf16", "tf32"))


def amp(doc: Any, value: Any, changes: dict) -> None:
    if value in ("bf16", "fp16"):
        doc.set((value,), True, after=("bf16", "fp16"))
        other = "fp16" if value == "bf16" else "bf16"
        if doc.value((other,)) not in (None, False):
            doc.set((other,), False)
    else:
        for k in ("bf16", "fp16"):
            if (k,) in doc.by_path:
                doc.set((k,), False)


def objective(concept: str):
    """TRL's objective keys, which axolotl passes through under `trl:` (`formats.render_yaml.objective_handlers`)."""

    def write(doc: Any, value: Any, changes: dict) -> None:
        from vramlens.formats.render_yaml import objective_handlers

        objective_handlers(("trl",))[concept](doc, value, changes)

    return write
