"""Custom training loops configured by a plain YAML/JSON file (nanoGPT-style and home-grown trainers).

There is no schema, so only unmistakable names are read: a model name, a per-step batch size,
a sequence length, accumulation, precision, checkpointing, an optimizer name — at the top level
or one level down in a `train:`/`model:`/`optimizer:` block. A file is only taken for a training
config when it has a batch size and a model or sequence length; anything vaguer is left alone.
nanoGPT's `gradient_accumulation_steps` is global (divided by the number of GPUs in train.py).
"""

from __future__ import annotations

from typing import Any

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool

SECTIONS = {"train", "training", "trainer", "model", "optim", "optimizer", "data", "hparams", "config", "args"}
MODEL = {
    "model",
    "model_name",
    "model_id",
    "model_name_or_path",
    "base_model",
    "pretrained_model",
    "pretrained_model_name_or_path",
    "hf_model",
    "model_path",
}
MICRO = {
    "micro_batch_size",
    "batch_size",
    "per_device_batch_size",
    "per_device_train_batch_size",
    "train_batch_size_per_device",
    "batch_size_per_device",
    "micro_bs",
    "mbs",
}
GLOBAL = {"global_batch_size", "total_batch_size"}
ACCUM = {
    "gradient_accumulation_steps",
    "grad_accum",
    "grad_accum_steps",
    "accumulate_grad_batches",
    "gradient_accumulation",
}
SEQ = {
    "max_seq_len",
    "seq_len",
    "max_seq_length",
    "block_size",
    "context_length",
    "max_length",
    "seq_length",
    "sequence_length",
    "max_position_embeddings",
    "ctx_len",
}
CKPT = {"gradient_checkpointing", "activation_checkpointing", "grad_checkpointing", "checkpoint_activations"}
NANOGPT = {"n_layer", "n_head", "n_embd", "init_from", "block_size", "dropout", "bias"}


def _candidates(settings: list[Setting]) -> list[Setting]:
    return [s for s in settings if len(s.path) == 1 or (len(s.path) == 2 and str(s.path[0]) in SECTIONS)]


def detect(data: Any, keys: set[str]) -> float:
    names = set(keys)
    for k, v in data.items():
        if str(k) in SECTIONS and isinstance(v, dict):
            names |= {str(x) for x in v}
    batch = bool(names & MICRO or names & GLOBAL)
    model = bool(names & MODEL) or len(names & NANOGPT) >= 3
    seq = bool(names & SEQ)
    if batch and (model or seq):
        return 0.5 + 0.05 * min(3, len(names & (ACCUM | CKPT | {"optimizer", "dtype", "precision", "compile"})))
    return 0.0


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    cands = _candidates(settings)
    top_micro = [s for s in cands if s.key in MICRO]
    for s in cands:
        k = s.key
        if k in MODEL and isinstance(s.value, str):
            hf._model(b, s)
        elif k == "name" and len(s.path) == 2 and str(s.path[0]) == "model" and isinstance(s.value, str):
            hf._model(b, s)
        elif k == "init_from" and isinstance(s.value, str) and s.value.startswith("gpt2"):
            b.set("model_id", s.value.strip(), s, note="nanoGPT `init_from`: OpenAI GPT-2 weights")
        elif k in MICRO and s in top_micro[:1]:
            b.set_int("micro_batch", s, minimum=1)
        elif k in GLOBAL:
            b.set_int("global_batch", s, minimum=1)
        elif k in ACCUM:
            note = None
            if "n_layer" in data or "init_from" in data:
                note = "nanoGPT divides this by the number of GPUs"
            b.set_int("grad_accum", s, minimum=1, note=note)
        elif k in SEQ and not (k == "max_position_embeddings" and any(x.key in SEQ - {k} for x in cands)):
            b.set_int("seq_len", s, minimum=1)
        elif k in CKPT:
            b.set_bool("grad_checkpointing", s)
        elif k in ("dtype", "precision", "torch_dtype"):
            d = hf.normalize_dtype(s.value)
            if d in ("bf16", "fp16", "fp32"):
                b.set("weight_dtype", d, s)
        elif k in ("compile", "torch_compile"):
            b.set_bool("compile", s)
        elif k in ("optimizer", "optim") and isinstance(s.value, str):
            b.set("optimizer", s.value.strip(), s)
        elif k in ("lora_r", "lora_rank"):
            b.set("peft_method", "lora", s)
            b.set_int("lora_r", s, minimum=1)
        elif k in ("n_layer", "n_head", "n_embd", "num_layers", "hidden_size", "num_attention_heads"):
            b.shape(k, s, override=True)
        elif k in ("attn_implementation", "attention"):
            hf._attn(b, s)
        elif k in ("bf16", "fp16") and to_bool(s.value) is not None:
            hf.HANDLERS[k](b, s)
