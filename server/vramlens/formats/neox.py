"""GPT-NeoX YAML (`deepy.py train.py a.yml b.yml`): flow mappings with comments, DeepSpeed keys inline.

Keys may be written with `-` or `_` (NeoX normalises them); the model is described by its shape
(`num_layers`, `hidden_size`, ...) rather than a hub id, and one run merges several files
(config-vocabulary.md §4.9, §8.10). The shape is kept in `plan.extra` under `arch.*`.
"""
from __future__ import annotations

from typing import Any

from vramlens.formats import deepspeed
from vramlens.formats.settings import PlanBuilder, Setting, to_bool
from vramlens.plan import Origin

NEOX_KEYS = frozenset({
    "pipe_parallel_size", "model_parallel_size", "num_layers", "hidden_size", "num_attention_heads", "seq_length",
    "max_position_embeddings", "pos_emb", "norm", "no_weight_tying", "gpt_j_residual", "output_layer_parallelism",
    "scaled_upper_triang_masked_softmax_fusion", "bias_gelu_fusion", "checkpoint_activations", "partition_activations",
    "data_impl", "train_iters", "lr_decay_style", "attention_config", "use_bnb_optimizer", "init_method",
    "synchronize_each_layer", "checkpoint_num_layers", "rotary_pct", "make_vocab_size_divisible_by",
    "tokenizer_type", "finetune",
})
ARCH_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "intermediate_size",
             "max_position_embeddings", "seq_length", "norm", "activation", "pos_emb", "no_weight_tying")


def norm_key(k: Any) -> str:
    return str(k).replace("-", "_")


def detect(data: Any, keys: set[str]) -> float:
    hits = len({norm_key(k) for k in keys} & NEOX_KEYS)
    if hits >= 4:
        return 1.0          # ahead of the DeepSpeed dialect, whose keys NeoX files also carry
    if hits == 3:
        return 0.8
    return 0.0


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    for s in settings:
        if len(s.path) != 1:
            continue
        k = norm_key(s.key)
        if k == "train_micro_batch_size_per_gpu":
            b.set_int("micro_batch", s, minimum=1)
        elif k == "gradient_accumulation_steps":
            b.set_int("grad_accum", s, minimum=1)
        elif k == "train_batch_size":
            b.set_int("global_batch", s, minimum=1)
        elif k == "seq_length":
            b.set_int("seq_len", s, minimum=1)
        elif k == "checkpoint_activations":
            b.set_bool("grad_checkpointing", s)
        elif k == "model_parallel_size":
            b.set_int("tensor_parallel", s, minimum=1)
        elif k == "pipe_parallel_size":
            b.set_int("pipeline_parallel", s, minimum=0)
        elif k == "precision" and isinstance(s.value, str):
            w = s.value.strip().lower()
            amp = {"bfloat16": "bf16", "bf16": "bf16", "fp16": "fp16", "float16": "fp16", "fp32": "none",
                   "float32": "none"}.get(w)
            if amp is None:
                b.unknown(s, "precision", ("bfloat16", "fp16", "fp32"))
            else:
                b.set("amp_dtype", amp, s)
        elif k == "use_bnb_optimizer" and to_bool(s.value):
            b.set("optimizer", "adamw_bnb_8bit", s, override=True, note="bitsandbytes 8-bit Adam")
        elif k == "attention_config" and isinstance(s.value, list):
            kinds = {str(x).lower() for spec in s.value if isinstance(spec, list) and spec
                     for x in (spec[0] if isinstance(spec[0], list) else [spec[0]])}
            if kinds == {"flash"}:
                b.set("attn_impl", "flash_attention_2", s)
            elif kinds == {"global"}:
                b.set("attn_impl", "eager", s, note="NeoX `global` attention materialises the score matrix")
            elif kinds:
                b.set("attn_impl", "other", s)
        elif k in ARCH_KEYS:
            b.shape(k, s)
        elif k in ("partition_activations", "zero_optimization", "finetune", "load"):
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
