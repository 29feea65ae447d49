"""Megatron-LM launch flags: `torchrun … pretrain_gpt.py --tensor-model-parallel-size 2 …` (NVIDIA/Megatron-LM
megatron/training/arguments.py; examples/*/train_*.sh) and Megatron-SWIFT's `megatron sft|pt|rlhf` (ms-swift 3.x,
swift/megatron/argument/megatron_args.py: the same arguments spelled with underscores, plus `--model`, `--max_length`,
`--train_type`). Flags are read with `-` and `_` alike. The model is a hub id (`--model`) or given by its sizes
(`--num-layers`, `--hidden-size`, … kept as `arch.*` shapes); the layout (TP, PP, virtual stages, EP, expert TP, CP,
sequence parallelism), the distributed optimizer and recompute settings become plan concepts that
`estimate.components.megatron_step` models.
"""
from __future__ import annotations

import re

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int

ARGUMENTS = "Megatron-LM megatron/training/arguments.py"
# scripts that run Megatron-LM's training loop (`pretrain_gpt.py`, `examples/classes/pretrain_gpt.py`, …)
_SCRIPT = re.compile(r"(?:^|/)pretrain_(?:gpt|mamba|bert|t5|vlm|mixtral|llama)\w*\.py$")
SWIFT_SUBCOMMANDS = ("sft", "pt", "rlhf")


def is_program(prog: str, sub: str, script: str | None) -> bool:
    """A command that runs Megatron: Megatron-SWIFT's `megatron sft|pt|rlhf`, or a launcher running pretrain_*.py."""
    return (prog == "megatron" and sub in SWIFT_SUBCOMMANDS) or bool(script and _SCRIPT.search(script))


def _layout(concept: str, kind: str = "int"):
    def handler(b: PlanBuilder, s: Setting) -> None:
        b.set("dist_strategy", "megatron", s, note="Megatron-core parallel layout")
        if kind == "int":
            b.set_int(concept, s, minimum=1)
        else:
            b.set_bool(concept, s)
    return handler


def _recompute_granularity(b: PlanBuilder, s: Setting) -> None:
    """`full` checkpoints whole layers; `selective` recomputes the core attention only (its scores, softmax and
    dropout are not stored: `components.megatron_core_attention_per_token`; fused attention keeps none anyway)."""
    w = str(s.value).strip().lower()
    if w not in ("full", "selective"):
        return b.unknown(s, "recompute granularity", ("full", "selective"))
    b.set("grad_checkpointing", w == "full", s, note=f"Megatron recompute granularity `{w}`")
    if w == "selective":
        b.set("selective_recompute", "core_attention", s, note="Megatron selective recompute: the core attention")


def _attention_backend(b: PlanBuilder, s: Setting) -> None:
    """`--attention-backend` (megatron/core/transformer/enums.py `AttnBackend`): `local` and `unfused` run the
    attention unfused (the scores are materialised); flash, fused and auto run a fused kernel."""
    w = str(s.value).strip().lower().removeprefix("attnbackend.")
    if w in ("local", "unfused"):
        b.set("attn_impl", "eager", s, note=f"attention backend `{w}`: unfused core attention")
    elif w in ("flash", "fused", "auto"):
        b.set("attn_impl", "sdpa", s, note=f"attention backend `{w}`: a fused attention kernel")
    else:
        b.unknown(s, "attention backend", ("flash", "fused", "unfused", "local", "auto"))


def _recompute_method(b: PlanBuilder, s: Setting) -> None:
    w = str(s.value).strip().lower()
    if w not in ("uniform", "block"):
        return b.unknown(s, "recompute method", ("uniform", "block"))
    b.set("recompute_method", w, s)


def _precision(dtype: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value) is False:
            return
        b.set("amp_dtype", dtype, s, note="Megatron mixed precision: 16-bit weights, fp32 main weights in the optimizer")
        b.set("weight_dtype", dtype, s)
    return handler


def _shape(name: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_int(s.value) is None:
            return b.unknown(s, "size", hint="a whole number")
        s.value = to_int(s.value)
        b.shape(name, s)
    return handler


def _swiglu(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value) is not False:
        s.value = "swiglu"
        b.shape("activation", s)


def _train_type(b: PlanBuilder, s: Setting) -> None:
    w = str(s.value).strip().lower()
    if w in ("full", "lora"):
        b.set("peft_method", "none" if w == "full" else "lora", s)
    else:
        b.unknown(s, "train type", ("full", "lora"))


def _not_modelled(what: str, consequence: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value) is not False:
            b.unmodelled(s, what, consequence)
    return handler


HANDLERS = {
    "tensor_model_parallel_size": _layout("tensor_parallel"),
    "pipeline_model_parallel_size": _layout("pipeline_parallel"),
    "virtual_pipeline_model_parallel_size": _layout("virtual_pipeline"),
    "expert_model_parallel_size": _layout("expert_parallel"),
    "expert_tensor_parallel_size": _layout("expert_tensor_parallel"),
    "context_parallel_size": _layout("context_parallel"),
    "sequence_parallel": _layout("sequence_parallel", "bool"),
    "use_distributed_optimizer": _layout("distributed_optimizer", "bool"),
    "recompute_granularity": _recompute_granularity,
    "attention_backend": _attention_backend,
    "recompute_method": _recompute_method,
    "recompute_num_layers": lambda b, s: b.set_int("recompute_layers", s, minimum=1),
    "micro_batch_size": lambda b, s: b.set_int("micro_batch", s, minimum=1),
    "global_batch_size": lambda b, s: b.set_int("global_batch", s, minimum=1),
    "seq_length": lambda b, s: b.set_int("seq_len", s, minimum=1),
    "max_length": lambda b, s: b.set_int("seq_len", s, minimum=1),          # Megatron-SWIFT
    "packing": lambda b, s: b.set_bool("packing", s),
    "bf16": _precision("bf16"), "fp16": _precision("fp16"),
    "model": hf._model,                                                       # Megatron-SWIFT: a hub id
    "train_type": _train_type,
    "lora_rank": lambda b, s: b.set_int("lora_r", s, minimum=1),
    "num_layers": _shape("num_layers"), "hidden_size": _shape("hidden_size"),
    "num_attention_heads": _shape("num_attention_heads"), "ffn_hidden_size": _shape("intermediate_size"),
    "num_query_groups": _shape("num_kv_heads"), "vocab_size": _shape("vocab_size"),
    "max_position_embeddings": _shape("max_position_embeddings"),
    "swiglu": _swiglu,
    "normalization": lambda b, s: b.shape("norm", s),
    "untie_embeddings_and_output_weights": lambda b, s: b.shape("no_weight_tying", s),
    "grad_reduce_in_bf16": _not_modelled("gradients reduced in bf16", "gradient buffers counted in fp32"),
    "fp8_format": _not_modelled("FP8 training (Transformer Engine)", "estimated with 16-bit activations"),
    "cpu_offloading": _not_modelled("activation/weight CPU offloading", "estimated as kept on the GPU"),
    "optimizer_cpu_offload": _not_modelled("optimizer states offloaded to the CPU", "estimated on the GPU"),
    "num_experts": _not_modelled("routed experts given by size", "estimated as a dense model"),
}


def handler(name: str):
    """The handler of a Megatron flag (`-` or `_` spelling), or None for one that does not change memory. Any flag
    read marks the run as Megatron's (its own model, schedule and optimizer: `components.megatron_step`)."""
    found = HANDLERS.get(name.replace("-", "_"))
    if found is None:
        return None

    def run(b: PlanBuilder, s: Setting) -> None:
        if b.plan.dist_strategy is None:
            b.set("dist_strategy", "megatron", s, note="the command runs Megatron")
        found(b, s)
    return run
