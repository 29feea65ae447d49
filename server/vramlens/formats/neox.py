"""GPT-NeoX YAML (`deepy.py train.py a.yml b.yml`): flow mappings with comments, DeepSpeed keys inline.

Keys may be written with `-` or `_` (NeoX normalises them); the model is described by its shape
(`num_layers`, `hidden_size`, ...) rather than a hub id, and one run merges several files
(`megatron/neox_arguments/neox_args.py`, `configs/*.yml` of EleutherAI/gpt-neox; docs/config-sources.md).
The shape is kept in `plan.extra` under `arch.*`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from vramlens.formats import deepspeed
from vramlens.formats.settings import PlanBuilder, Setting, to_bool
from vramlens.plan import Origin

NEOX_KEYS = frozenset(
    {
        "pipe_parallel_size",
        "model_parallel_size",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "seq_length",
        "max_position_embeddings",
        "pos_emb",
        "norm",
        "no_weight_tying",
        "gpt_j_residual",
        "output_layer_parallelism",
        "scaled_upper_triang_masked_softmax_fusion",
        "bias_gelu_fusion",
        "checkpoint_activations",
        "partition_activations",
        "data_impl",
        "train_iters",
        "lr_decay_style",
        "attention_config",
        "use_bnb_optimizer",
        "init_method",
        "synchronize_each_layer",
        "checkpoint_num_layers",
        "rotary_pct",
        "make_vocab_size_divisible_by",
        "tokenizer_type",
        "finetune",
    }
)
PRECISION = {"bfloat16": "bf16", "bf16": "bf16", "fp16": "fp16", "float16": "fp16", "fp32": "none", "float32": "none"}


def norm_key(k: Any) -> str:
    return str(k).replace("-", "_")


def detect(data: Any, keys: set[str]) -> float:
    hits = len({norm_key(k) for k in keys} & NEOX_KEYS)
    if hits >= 4:
        return 1.0  # ahead of the DeepSpeed dialect, whose keys NeoX files also carry
    if hits == 3:
        return 0.8
    return 0.0


def _precision(b: PlanBuilder, concept: str, s: Setting) -> None:
    if isinstance(s.value, str):
        amp = PRECISION.get(s.value.strip().lower())
        if amp is None:
            return b.unknown(s, "precision", ("bfloat16", "fp16", "fp32"))
        b.set(concept, amp, s)


def _bnb_optimizer(b: PlanBuilder, concept: str, s: Setting) -> None:
    if to_bool(s.value):
        b.set(concept, "adamw_bnb_8bit", s, override=True, note="bitsandbytes 8-bit Adam")


def _attention(b: PlanBuilder, concept: str, s: Setting) -> None:
    if not isinstance(s.value, list):
        return
    kinds = {
        str(x).lower()
        for spec in s.value
        if isinstance(spec, list) and spec
        for x in (spec[0] if isinstance(spec[0], list) else [spec[0]])
    }
    if kinds == {"flash"}:
        b.set(concept, "flash_attention_2", s)
    elif kinds == {"global"}:
        b.set(concept, "eager", s, note="NeoX `global` attention materialises the score matrix")
    elif kinds:
        b.set(concept, "other", s)


def _read(b: PlanBuilder, key: "Key", s: Setting) -> None:
    if key.read is not None and key.concept is not None:
        key.read(b, key.concept, s)
    elif key.kind == "shape":
        b.shape(key.path[0], s)
    elif key.concept is None:
        b.remember(s)
    elif key.kind in ("whole", "count"):
        b.set_int(key.concept, s, minimum=1 if key.kind == "whole" else 0)
    elif key.kind == "bool":
        b.set_bool(key.concept, s)


@dataclass(frozen=True)
class Key:
    """One GPT-NeoX key vramlens reads (written with `_`; NeoX also accepts `-`): the plan concept it carries
    (None: kept for hovers, or a model-shape value), the kind of value ("whole" ≥ 1, "count" ≥ 0, "bool", "text",
    "choice" of `choices`, "list", "section"; "shape" for the model's shape), what it means, and how it is read
    when that is not plain. The parser dispatches on this table, the fixes' writer (`formats.render_yaml`) writes
    each concept at its key, the JSON Schema (`formats.schemas`) is generated from it."""

    path: tuple[str, ...]
    concept: str | None
    kind: str
    description: str
    read: Callable[[PlanBuilder, str, Setting], None] | None = None  # (builder, the key's concept, entry)
    choices: tuple[str, ...] = ()
    shape_kind: str = ""  # a "shape" key's value kind, for the schema


# GPT-NeoX's arguments: https://github.com/EleutherAI/gpt-neox/blob/main/configs/neox_arguments.md
KEYS: tuple[Key, ...] = (
    Key(("train_micro_batch_size_per_gpu",), "micro_batch", "whole", "Samples per GPU per step."),
    Key(("gradient_accumulation_steps",), "grad_accum", "whole", "Micro-batches per step."),
    Key(("train_batch_size",), "global_batch", "whole", "micro × accumulation × data-parallel GPUs."),
    Key(("seq_length",), "seq_len", "whole", "Tokens per sample (always full)."),
    Key(("checkpoint_activations",), "grad_checkpointing", "bool", "Recompute activations in backward."),
    Key(("model_parallel_size",), "tensor_parallel", "whole", "Tensor parallelism."),
    Key(("pipe_parallel_size",), "pipeline_parallel", "count", "Pipeline stages."),
    Key(
        ("precision",),
        "amp_dtype",
        "choice",
        "Training precision (fp16 and bf16 keep fp32 master weights).",
        _precision,
        choices=tuple(PRECISION),
    ),
    Key(
        ("use_bnb_optimizer",),
        "optimizer",
        "bool",
        "bitsandbytes 8-bit Adam: ~2 bytes of state per parameter.",
        _bnb_optimizer,
    ),
    Key(
        ("attention_config",),
        "attn_impl",
        "list",
        'Attention kind per layer ([["flash"], n]): `global` materialises the score matrix, `flash` does not.',
        _attention,
    ),
    Key(("partition_activations",), None, "bool", "Split checkpointed activations across model-parallel ranks."),
    Key(("zero_optimization",), None, "section", "DeepSpeed ZeRO (`stage`)."),
    Key(("finetune",), None, "bool", "Start from the loaded checkpoint's weights."),
    Key(("load",), None, "text", "The checkpoint folder to load."),
    *(
        Key((name,), None, "shape", text, shape_kind=kind)
        for name, kind, text in (
            ("num_layers", "whole", "Transformer layers."),
            ("hidden_size", "whole", "Hidden size."),
            ("num_attention_heads", "whole", "Attention heads."),
            ("num_kv_heads", "whole", "Key/value heads (grouped-query attention)."),
            ("intermediate_size", "whole", "MLP width."),
            ("max_position_embeddings", "whole", "Longest position the model embeds."),
            ("norm", "text", "Normalisation (layernorm, rmsnorm, ...)."),
            ("activation", "text", "MLP activation."),
            ("pos_emb", "text", "Position embedding (rotary, learned, ...)."),
            ("no_weight_tying", "bool", "Separate input and output embeddings."),
        )
    ),
)
BY_NAME: dict[str, Key] = {k.path[0]: k for k in KEYS}


def key_for(concept: str) -> Key:
    """The key a fix writes a concept at (the first in the table that carries it)."""
    return next(k for k in KEYS if k.concept == concept)


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    for s in settings:
        if len(s.path) != 1:
            continue
        key = BY_NAME.get(norm_key(s.key))
        if key is not None and key.path[0] != "zero_optimization":
            _read(b, key, s)
        elif key is not None:
            b.remember(s)
    # the DeepSpeed blocks (zero_optimization, fp16/bf16, optimizer) are DeepSpeed's own schema
    ds = [s for s in settings if norm_key(s.path[0]) in ("zero_optimization", "fp16", "bf16", "optimizer")]
    for s in ds:
        s_path = (norm_key(s.path[0]),) + tuple(str(p) for p in s.path[1:])
        deepspeed._apply_one(b, s_path, s)
    if b.plan.zero_stage is not None:
        b.set("dist_strategy", "deepspeed", origin=Origin.DERIVED, note="GPT-NeoX trains through DeepSpeed")
    if b.plan.model_id is None and "arch.num_layers" in b.plan.extra:
        b.plan.model_span_hint = b.plan.extra["arch.num_layers"].span
