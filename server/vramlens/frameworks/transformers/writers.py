"""How a fix writes the Hugging Face concepts that are more than one key (the key table, `keys.py`, says which
concept each writer serves), for plain `TrainingArguments` (`trl=False`: LoRA, quantization and the sequence length
belong to the training script) and for TRL's configs (`trl=True`: `SFTConfig` + `ModelConfig`, trl
`trl/trainer/sft_config.py`, `trl/trainer/model_config.py`). `doc` is the document being edited
(`formats.render_yaml._Doc`)."""

from __future__ import annotations

from typing import Any

from vramlens.frameworks.keys import ALLOC_NOTE, Writer, write_at

# the sequence length's spellings (TRL's, and the scripts' that pass it on), in the order a fix edits them
SEQ_KEYS = ("max_length", "max_seq_length", "block_size", "model_max_length", "max_seq_len", "seq_length")


def quant(trl: bool) -> Writer:
    def write(doc: Any, value: Any, changes: dict) -> None:
        if not trl:
            doc.notes.append("4-bit loading is set up in the training script (`BitsAndBytesConfig`)")
            return
        if value == 4:
            doc.set(("load_in_4bit",), True, after=("use_peft", "model_name_or_path"))
            if doc.value(("load_in_8bit",)):
                doc.set(("load_in_8bit",), False)
        elif value == 8:
            doc.set(("load_in_8bit",), True, after=("use_peft", "model_name_or_path"))
            if doc.value(("load_in_4bit",)):
                doc.set(("load_in_4bit",), False)
        elif not value:
            for k in ("load_in_4bit", "load_in_8bit"):
                if doc.value((k,)):
                    doc.set((k,), False)

    return write


def peft(trl: bool) -> Writer:
    quantize = quant(trl)

    def write(doc: Any, value: Any, changes: dict) -> None:
        if not trl:
            doc.notes.append("LoRA is set up in the training script (peft `LoraConfig`), not in TrainingArguments")
            return
        doc.done.add("quant_bits")
        if value in ("lora", "qlora", "dora"):
            doc.set(("use_peft",), True, after=("model_name_or_path", "attn_implementation"))
        elif value == "none":
            doc.set(("use_peft",), False, after=("model_name_or_path",))
        if value == "dora":
            doc.set(("use_dora",), True, after=("use_peft",))
        bits = changes.get("quant_bits", 4 if value == "qlora" else None)
        if bits is not None:
            quantize(doc, bits, changes)

    return write


def alloc(trl: bool) -> Writer:
    def write(doc: Any, value: Any, changes: dict) -> None:
        if not trl:
            doc.notes.append(ALLOC_NOTE.format(value=value, fmt="TrainingArguments"))
            return
        doc.set(("env", "PYTORCH_CUDA_ALLOC_CONF"), str(value), after=())

    return write


def loss(trl: bool) -> Writer:
    def write(doc: Any, value: Any, changes: dict) -> None:
        if value == "fused":
            doc.set(("use_liger_kernel",), True, after=("gradient_checkpointing", "bf16"))
        elif value == "chunked" and trl:
            doc.set(("loss_type",), "chunked_nll", after=("max_length", "max_seq_length"))
        elif value == "standard" and doc.value(("use_liger_kernel",)):
            doc.set(("use_liger_kernel",), False)
        else:
            doc.notes.append("a chunked loss needs TRL's SFTConfig (`loss_type: chunked_nll`)")

    return write


def optimizer_impl(doc: Any, value: Any, changes: dict) -> None:
    cur = doc.value(("optim",)) or "adamw_torch"
    if value == "fused" and cur in ("adamw_torch", "adamw_hf"):
        doc.set(("optim",), "adamw_torch_fused", after=("learning_rate",))
    elif value != "fused":
        doc.notes.append(f"optimizer implementation `{value}` cannot be chosen by `optim`")


def seq(trl: bool) -> Writer:
    def write(doc: Any, value: Any, changes: dict) -> None:
        for k in SEQ_KEYS:
            if (k,) in doc.by_path:
                doc.set((k,), value)
                return
        if trl:
            doc.set(("max_length",), value, after=("packing", "per_device_train_batch_size"))
        else:
            doc.notes.append("the sequence length is an argument of the training script, not of TrainingArguments")

    return write


def amp(trl: bool) -> Writer:
    def write(doc: Any, value: Any, changes: dict) -> None:
        if value in ("bf16", "fp16"):
            doc.set((value,), True, after=("bf16", "fp16", "gradient_accumulation_steps"))
            other = "fp16" if value == "bf16" else "bf16"
            if doc.value((other,)):
                doc.set((other,), False)
        else:
            for k in ("bf16", "fp16"):
                if (k,) in doc.by_path or (k == "bf16" and trl):
                    doc.set((k,), False, after=("gradient_accumulation_steps",))

    return write


def weight_dtype(doc: Any, value: Any, changes: dict) -> None:
    word = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "auto": "auto"}.get(value, value)
    write_at(("dtype", "torch_dtype"), after=("model_name_or_path",))(doc, word, changes)


def objective(concept: str) -> Writer:
    """TRL's objective keys (`formats.render_yaml.objective_handlers`, shared with axolotl's `trl:` section)."""

    def write(doc: Any, value: Any, changes: dict) -> None:
        from vramlens.formats.render_yaml import objective_handlers

        objective_handlers()[concept](doc, value, changes)

    return write


def targets_text(value: Any) -> Any:
    """The file's spelling of LoRA targets (`all-linear` as text, else a list)."""
    from vramlens.formats.render_yaml import _targets_text

    return _targets_text(value)
