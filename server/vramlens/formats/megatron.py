"""Megatron-LM launch flags: `torchrun … pretrain_gpt.py --tensor-model-parallel-size 2 …` (NVIDIA/Megatron-LM
megatron/training/arguments.py; examples/*/train_*.sh) and Megatron-SWIFT's `megatron sft|pt|rlhf` (ms-swift 3.x/4.x,
swift/megatron/argument/megatron_args.py: the same arguments spelled with underscores, plus `--model`, `--max_length`,
`--train_type`). Flags are read with `-` and `_` alike. The model is a hub id (`--model`) or given by its sizes
(`--num-layers`, `--hidden-size`, … kept as `arch.*` shapes); the layout (TP, PP, virtual stages, EP, expert TP, CP,
sequence parallelism), the distributed optimizer and recompute settings become plan concepts that
`estimate.components.megatron_step` models.

Every argument of Megatron-LM core_v0.15.0 (0d7e02bd, the last release that defines them all in
megatron/training/arguments.py) whose name says it may change memory or speed (`frameworks.irrelevant.judged`) is
read here (`HANDLERS`), recorded as not modelled (a `_not_modelled` handler), or listed in `IRRELEVANT` with why;
tests/formats/test_megatron_arguments.py holds that file to it. Defaults are Megatron-LM's own for `pretrain_*.py`
and Megatron-SWIFT's for `megatron sft|pt|rlhf` (knowledge/frameworks.py "megatron", "megatron-swift").
"""

from __future__ import annotations

import math
import re
from typing import Any

from vramlens.formats import hf
from vramlens.formats import megatron_hybrid as mh
from vramlens.formats.ep_dispatch import KEY as EP_KEY
from vramlens.formats.ep_dispatch import set_deepep, set_hybridep
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_float, to_int
from vramlens.plan import IssueKind, Origin, Severity
from vramlens.settings import MAX_GPU_COUNT

ARGUMENTS = "Megatron-LM megatron/training/arguments.py"
FRAMEWORK = "megatron"  # knowledge/frameworks.py: Megatron-LM's own defaults
SWIFT_FRAMEWORK = "megatron-swift"  # … and Megatron-SWIFT's
SWIFT_LABEL = "Megatron-SWIFT 3.3–4.6 (megatron_args.py)"
GPT2_VOCAB = 50257  # GPT2BPETokenizer (gpt2-vocab.json) of examples/gpt3/*.sh
# scripts that run Megatron-LM's training loop (`pretrain_gpt.py`, `examples/classes/pretrain_gpt.py`, …)
# (`pretrain_hybrid.py`: Megatron-LM main's hybrid Mamba/attention entry point, examples/mamba/train.sh)
_SCRIPT = re.compile(r"(?:^|/)pretrain_(?:gpt|mamba|hybrid|bert|t5|vlm|mixtral|llama)\w*\.py$")
SWIFT_SUBCOMMANDS = ("sft", "pt", "rlhf")


# Megatron-LM's own spelling of the model's shape and of its batch (megatron/training/arguments.py
# `_add_network_size_args`, `_add_training_args`: `--num-layers`, `--hidden-size`, `--num-attention-heads`,
# `--micro-batch-size`, `--seq-length`): a script launched with them runs Megatron's training loop, whatever its
# name (examples/academic_paper_scripts/detxoify_lm/finetune_gpt.py, examples/multimodal/train.py,
# pretrain_retro.py, examples/mimo/train.py at core_v0.13.0 / HEAD all call `megatron.training.pretrain`).
_SHAPE_FLAGS = (("--num-layers", "--encoder-num-layers", "--decoder-num-layers"), ("--hidden-size",))
_LOOP_FLAGS = frozenset({"--num-attention-heads", "--micro-batch-size", "--seq-length", "--global-batch-size"})


def is_program(prog: str, sub: str, script: str | None, flags: list[str] | None = None) -> bool:
    """A command that runs Megatron: Megatron-SWIFT's `megatron sft|pt|rlhf`, a launcher running pretrain_*.py, or
    a launcher running a `.py` script with Megatron-LM's own dashed model and batch flags."""
    if (prog == "megatron" and sub in SWIFT_SUBCOMMANDS) or bool(script and _SCRIPT.search(script)):
        return True
    if not script or not script.endswith(".py") or not flags:
        return False
    names = {f.split("=", 1)[0] for f in flags if f.startswith("--")}
    return all(any(n in names for n in group) for group in _SHAPE_FLAGS) and len(names & _LOOP_FLAGS) >= 2


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
    if w not in ("full", "selective", "none"):  # `none`: Megatron-SWIFT's spelling of no recompute
        return b.unknown(s, "recompute granularity", ("full", "selective"))
    b.set("grad_checkpointing", w == "full", s, note=f"Megatron recompute granularity `{w}`")
    if w == "selective":
        b.set("selective_recompute", "core_attention", s, note="Megatron selective recompute: the core attention")
    else:
        b.set("selective_recompute", "none", s)


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
        b.set(
            "amp_dtype", dtype, s, note="Megatron mixed precision: 16-bit weights, fp32 main weights in the optimizer"
        )
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


def _not_modelled(what: str, consequence: str, *, unless=None):
    """Record the flag as not modelled when it is on (`unless`: its default value, which is modelled)."""

    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value) is not False and (unless is None or str(s.value).strip().lower() != unless):
            b.unmodelled(s, what, consequence)

    return handler


def _frozen_share(b: PlanBuilder, s: Setting) -> None:
    if (to_float(s.value) or 0) > 0:
        b.unmodelled(
            s,
            "parameters frozen by share (the first share of the parameters, in the model's order)",
            "estimated as a full fine-tune",
        )


def _offload_fraction(b: PlanBuilder, s: Setting) -> None:
    """`--optimizer-offload-fraction` (default 1.0, megatron/training/arguments.py): the share of each rank's optimizer
    parameters the hybrid optimizer keeps on the CPU (with `--optimizer-cpu-offload`); the rest stays on the GPU
    (components.megatron_state_bytes)."""
    try:
        fraction = float(str(s.value))
    except ValueError:
        b.unknown(s, "offload fraction", ("a number from 0 to 1",))
        return
    if not 0.0 <= fraction <= 1.0:
        b.unknown(s, "offload fraction", ("a number from 0 to 1",))
        return
    s.value = fraction
    b.set("optimizer_offload_fraction", fraction, s, note=f"{fraction:g} of the optimizer on the CPU")


def _hybrid_pattern(b: PlanBuilder, s: Setting) -> None:
    """`--hybrid-layer-pattern M-M-M*-…` (main; `--hybrid-override-pattern` before it): every symbol is one layer,
    a Mamba (M), attention (*), MLP (-) or MoE (E) layer (megatron/core/models/hybrid/hybrid_layer_allocation.py
    `Symbols`), and the pattern sets the layer count (megatron/training/arguments.py `validate_args`: "hybrid_layer_
    pattern always overrides --num-layers"). `finish` builds the model from it (`_hybrid_model`)."""
    if s.value in (None, "", True, False) or str(s.value).strip().lower() in ("none", "null"):
        return
    b.remember(s)


def _recompute_activations(b: PlanBuilder, s: Setting) -> None:
    """`--recompute-activations`: megatron/training/arguments.py `validate_args` turns it into
    `recompute_granularity = 'selective'` (core_v0.15.0)."""
    if to_bool(s.value) is False:
        return
    s.value = "selective"
    _recompute_granularity(b, s)


# The selective recompute modules the estimate models (components.megatron): "core_attn" (the core attention), "mlp"
# and "moe" (a dense MLP or a whole MoE layer checkpointed: it keeps its input), "shared_experts", "moe_act" (the
# experts' activation output discarded and recomputed); megatron/core/transformer/transformer_config.py
# `recompute_modules` (core_v0.13.0 to 2026 main). The others ("layernorm", "mla_up_proj", the GatedDeltaNet ones,
# "mhc") are named as not modelled.
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "shared_experts", "moe_act")


def _recompute_modules(b: PlanBuilder, s: Setting) -> None:
    """`--recompute-modules` (selective recompute; default `core_attn`, RECOMPUTE_MODULES)."""
    words = s.value if isinstance(s.value, list) else str(s.value).replace(",", " ").split()
    words = [str(w).strip().strip("[]'\"").lower() for w in words if str(w).strip().strip("[]'\"")]
    b.set("recompute_modules", sorted({w for w in words if w in RECOMPUTE_MODULES}), s)
    other = [w for w in words if w not in RECOMPUTE_MODULES]
    if other:
        b.unmodelled(s, f"selective recompute of {', '.join(other)}", "those modules counted as stored")


def _moe_layer_recompute(b: PlanBuilder, s: Setting) -> None:
    """`--moe-layer-recompute` (deprecated): selective granularity with "moe" added to the recompute modules
    (core_v0.13.0 megatron/core/transformer/transformer_config.py `__post_init__`); merged in `finish`."""
    if to_bool(s.value) is not False:
        b.remember(s)
        b.set("selective_recompute", "core_attention", s, note="--moe-layer-recompute: selective recompute")


def _optimizer(b: PlanBuilder, s: Setting) -> None:
    """`--optimizer adam|sgd`: Transformer Engine's FusedAdam (apex's when TE is missing) in AdamW mode, or FusedSGD
    (megatron/core/optimizer/__init__.py, core_v0.15.0; `adam_w_mode = config.decoupled_weight_decay`)."""
    w = str(s.value).strip().lower()
    if w == "adam":
        b.set("optimizer", "adamw_apex_fused", s, note="Megatron's `adam`: a fused AdamW (Transformer Engine / apex)")
    elif w == "sgd":
        b.set("optimizer", "sgd", s, note="Megatron's `sgd`: a fused SGD")
    else:
        b.unmodelled(s, f"Megatron optimizer `{w}`", "estimated as Adam (two fp32 states)")


def _vocabulary(b: PlanBuilder, s: Setting) -> None:
    """`--vocab-size` (before padding) and `--padded-vocab-size` (as given); `finish` pads the first."""
    if to_int(s.value) is None:
        return b.unknown(s, "vocabulary size", hint="a whole number")
    s.value = to_int(s.value)
    b.shape("padded_vocab_size" if s.path[0] == "padded_vocab_size" else "vocab_size", s)


def _remember(b: PlanBuilder, s: Setting) -> None:
    """A flag `finish` reads together with others."""
    b.remember(s)


def _sft(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value) is not False:
        b.set("objective", "sft", s, note="Megatron-LM `--sft`")


def _rlhf_type(b: PlanBuilder, s: Setting) -> None:
    from vramlens.formats import objective

    objective.set_objective(b, objective.word(str(s.value)), s)


# `--main-params-dtype` (fp32, fp16), `--exp-avg-dtype` / `--exp-avg-sq-dtype` (fp32, fp16, bf16, fp8): Megatron-LM
# d98e8a64dd megatron/training/arguments.py `_add_training_args`
_STATE_DTYPES = {
    "fp32": "fp32",
    "float32": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8": "fp8",
    "uint8": "fp8",
}


def _precision_aware_optimizer(b: PlanBuilder, s: Setting) -> None:
    """`--use-precision-aware-optimizer`: Transformer Engine's FusedAdam keeps the master weights and Adam's states
    in the dtypes below, reads the gradient buffers in place (`use_decoupled_grad`: no fp32 copy), and Megatron makes
    no main parameters of its own (Megatron-LM d98e8a64dd megatron/core/optimizer/__init__.py
    `_get_megatron_optimizer_based_on_param_groups`, distrib_optimizer.py `_copy_model_grads_to_main_grads`).
    `store_param_remainders` (OptimizerConfig default True, no flag; applied from Transformer Engine 2.1) keeps fp32
    master weights of bf16 parameters as their 16-bit remainders."""
    on = to_bool(s.value)
    if on is None:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be true or false, got {s.value!r}", s)
    note = (
        "Transformer Engine's FusedAdam: Adam's states in their own dtypes; where it holds the master weights, fp32 "
        "ones of bf16 parameters as 16-bit remainders (store_param_remainders, Transformer Engine 2.1 or newer assumed)"
    )
    b.set("precision_aware_optimizer", on, s, note=note if on else None)


def _state_dtype(concept: str):
    def handler(b: PlanBuilder, s: Setting) -> None:
        dtype = _STATE_DTYPES.get(str(s.value).strip().lower())
        if dtype is None or (concept == "main_params_dtype" and dtype not in ("fp32", "fp16")):
            return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` is not a dtype Megatron takes here: {s.value!r}", s)
        b.set(concept, dtype, s)

    return handler


HANDLERS = {
    "tensor_model_parallel_size": _layout("tensor_parallel"),
    "pipeline_model_parallel_size": _layout("pipeline_parallel"),
    "virtual_pipeline_model_parallel_size": _layout("virtual_pipeline"),
    # the interleaved schedule's model chunks per stage by another spelling (`_virtual_stages`)
    "num_virtual_stages_per_pipeline_rank": _layout("virtual_pipeline"),
    "num_layers_per_virtual_pipeline_stage": _remember,
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
    "max_length": lambda b, s: b.set_int("seq_len", s, minimum=1),  # Megatron-SWIFT
    "torch_dtype": _remember,  # Megatron-SWIFT: `_swift_precision`
    "packing": lambda b, s: b.set_bool("packing", s),
    "bf16": _precision("bf16"),
    "fp16": _precision("fp16"),
    "model": hf._model,  # Megatron-SWIFT: a hub id
    "train_type": _train_type,
    # ms-swift 4.0 renamed it (swift/megatron/arguments/megatron_args.py v4.0.0: `tuner_type: Literal['lora',
    # 'full'] = 'full'`, `train_type` deprecated to it)
    "tuner_type": _train_type,
    "lora_rank": lambda b, s: b.set_int("lora_r", s, minimum=1),
    "num_layers": _shape("num_layers"),
    "hidden_size": _shape("hidden_size"),
    "num_attention_heads": _shape("num_attention_heads"),
    "ffn_hidden_size": _shape("intermediate_size"),
    "num_query_groups": _shape("num_kv_heads"),
    "max_position_embeddings": _shape("max_position_embeddings"),
    "swiglu": _swiglu,
    "normalization": lambda b, s: b.shape("norm", s),
    "untie_embeddings_and_output_weights": lambda b, s: b.shape("no_weight_tying", s),
    "disable_bias_linear": lambda b, s: b.shape("disable_bias_linear", s),  # kept for resolve.arch_from_sizes
    "add_qkv_bias": lambda b, s: b.shape("add_qkv_bias", s),
    "grad_reduce_in_bf16": _remember,  # `_grad_buffers`
    "fp8_format": _not_modelled("FP8 training (Transformer Engine)", "estimated with 16-bit activations"),
    "cpu_offloading": _not_modelled("activation/weight CPU offloading", "estimated as kept on the GPU"),
    # Megatron-SWIFT swift/megatron/utils/utils.py: the first share of the parameters, in the model's order, frozen
    "freeze_parameters_ratio": _frozen_share,
    # routed experts (megatron/training/arguments.py `_add_moe_args`): the MoE model `resolve.arch_from_sizes` builds
    "num_experts": _shape("num_experts"),
    "moe_ffn_hidden_size": _shape("moe_intermediate_size"),
    "moe_router_topk": _shape("experts_per_token"),
    "moe_shared_expert_intermediate_size": _shape("shared_expert_intermediate_size"),
    "moe_layer_freq": _remember,
    # the token dispatcher (`token_dispatcher`, after every flag)
    "moe_token_dispatcher_type": _remember,
    "moe_enable_deepep": _remember,
    "moe_flex_dispatcher_backend": _remember,
    "moe_deepep_num_sms": _remember,
    "moe_hybridep_num_sms": _remember,
    "recompute_activations": _recompute_activations,
    "recompute_modules": _recompute_modules,
    "optimizer": _optimizer,
    "vocab_size": _vocabulary,
    "padded_vocab_size": _vocabulary,
    "make_vocab_size_divisible_by": _remember,
    "tokenizer_type": _remember,
    "group_query_attention": _remember,
    "accumulate_allreduce_grads_in_fp32": _remember,
    "kv_channels": _remember,
    "encoder_seq_length": lambda b, s: b.set_int("seq_len", s, minimum=1),
    "use_flash_attn": lambda b, s: b.set("attn_impl", "sdpa", s, note="FlashAttention") if to_bool(s.value) else None,
    "sft": _sft,
    "rlhf_type": _rlhf_type,  # Megatron-SWIFT `megatron rlhf`
    "freeze_vit": _remember,  # Megatron-SWIFT: whether a VLM's vision tower trains (resolve/vision.py)
    # Megatron-SWIFT `--task_type seq_cls --num_labels N`: its GPTModel replaces the output layer with a
    # hidden × num_labels linear (ms-swift v4.0.0 swift/megatron/model/gpt_model.py `OutputLayerLinear(...,
    # self.args.num_labels, ...)`): a classification head, not the vocabulary's
    "task_type": hf._task_type,
    "num_labels": hf._num_labels,
    "checkpoint_activations": lambda b, s: b.issue(
        IssueKind.UNKNOWN_VALUE,
        "`--checkpoint-activations` is no longer valid: Megatron-LM exits on it; write "
        "`--recompute-activations` (or `--recompute-granularity`)",
        s,
        suggestion="--recompute-activations",
    ),
    "batch_size": lambda b, s: b.issue(
        IssueKind.UNKNOWN_VALUE,
        "`--batch-size` is no longer valid: Megatron-LM stops on it; write `--micro-batch-size`",
        s,
        suggestion="--micro-batch-size",
    ),
    # FP8 / FP4 weights and recipes (the FP8 format itself: `fp8_format` above)
    "fp8_param_gather": _not_modelled("FP8 weights (parameter all-gather in FP8)", "16-bit weights counted"),
    "fp4_format": _not_modelled("FP4 training (Transformer Engine)", "estimated with 16-bit activations"),
    "fp4_param_gather": _not_modelled("FP4 weights", "16-bit weights counted"),
    # precision
    "fp32_residual_connection": _not_modelled("residual stream in fp32", "residual counted in 16-bit"),
    "attention_softmax_in_fp32": _remember,  # `_softmax_in_fp32`
    "fp16_lm_cross_entropy": _not_modelled("cross entropy on 16-bit logits", "logits counted in fp32"),
    # the vocab-parallel cross-entropy's kernels (components.megatron_head_per_token); `te` takes Transformer
    # Engine's instead of megatron/core/fusions/fused_cross_entropy.py (core_v0.15.0 language_module.py
    # `compute_language_model_loss`)
    "cross_entropy_loss_fusion": lambda b, s: b.set_bool("cross_entropy_fusion", s),
    "cross_entropy_fusion_impl": _not_modelled(
        "Transformer Engine's fused cross-entropy", "the native fused cross-entropy counted", unless="native"
    ),
    "use_precision_aware_optimizer": _precision_aware_optimizer,
    "main_grads_dtype": _remember,  # `_grad_buffers`
    "main_params_dtype": _state_dtype("main_params_dtype"),
    "exp_avg_dtype": _state_dtype("exp_avg_dtype"),
    "exp_avg_sq_dtype": _state_dtype("exp_avg_sq_dtype"),
    # recompute and memory management
    "distribute_saved_activations": _not_modelled(
        "recomputed layers' inputs split over the tensor-parallel group", "counted whole on each rank"
    ),
    "moe_layer_recompute": _moe_layer_recompute,
    "empty_unused_memory_level": _not_modelled(
        "the allocator cache emptied during each step",
        "reserved memory estimated with the caching allocator's slack",
        unless="0",
    ),
    "tp_comm_overlap": _not_modelled(
        "tensor-parallel communication overlapped with GEMMs (userbuffers)", "its communication buffers are not counted"
    ),
    "optimizer_cpu_offload": lambda b, s: b.set_bool(
        "offload_optimizer",
        s,
        note="the optimizer's fp32 copies and states on the CPU (Megatron's hybrid optimizer, offload fraction 1.0 "
        "by default: megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py)",
    ),
    "optimizer_offload_fraction": _offload_fraction,
    # other sharding and layouts
    "use_megatron_fsdp": _not_modelled(
        "Megatron FSDP (weights and gradients sharded)", "estimated with whole weights and gradients on each rank"
    ),
    "use_torch_fsdp2": _not_modelled(
        "torch FSDP2 (weights and gradients sharded)", "estimated with whole weights and gradients on each rank"
    ),
    # `--torch-fsdp2-no-reshard-after-forward` (store_false, dest torch_fsdp2_reshard_after_forward, default True):
    # with `--use-torch-fsdp2` the units keep their parameters gathered from forward to backward, "FSDP ZeRO-2"
    # (megatron/training/arguments.py; megatron/training/training.py `get_megatron_ddp_config` →
    # TorchFullyShardedDataParallelConfig(reshard_after_forward=...), core_v0.15.0 and main)
    "torch_fsdp2_no_reshard_after_forward": _not_modelled(
        "torch FSDP2 without resharding after forward (ZeRO-2-like: parameters gathered from forward to backward)",
        "estimated with whole weights and gradients on each rank, as for --use-torch-fsdp2",
    ),
    "pipeline_model_parallel_layout": _not_modelled("a custom pipeline layer layout", "layers split evenly"),
    # uneven pipeline stages (megatron/core/transformer/transformer_block.py `get_num_layers_to_build`)
    "decoder_first_pipeline_num_layers": lambda b, s: b.set_int("first_stage_layers", s, minimum=0),
    "decoder_last_pipeline_num_layers": lambda b, s: b.set_int("last_stage_layers", s, minimum=0),
    "moe_extended_tp": _not_modelled("extended tensor parallelism of the experts", "experts split by EP only"),
    "multi_latent_attention": _not_modelled("multi-latent attention (MLA)", "estimated as multi-head attention"),
    "hybrid_override_pattern": _hybrid_pattern,
    "hybrid_layer_pattern": _hybrid_pattern,
    # the pattern's older spelling as ratios (`megatron_hybrid.pattern_from_ratios`), read by `_hybrid_model`
    "hybrid_attention_ratio": _remember,
    "hybrid_mlp_ratio": _remember,
    "perform_rl_step": _not_modelled(
        "Megatron-RL (generation and GRPO inside the run)", "estimated as a training step without generation"
    ),
    # megatron-core 0.12-0.19 (frameworks/schemas/megatron/): memory features the estimate does not model
    "use_custom_fsdp": _not_modelled(
        "Megatron FSDP (weights and gradients sharded; `--use-custom-fsdp` before 0.14)",
        "estimated with whole weights and gradients on each rank",
    ),
    "fine_grained_activation_offloading": _not_modelled(
        "fine-grained activation offloading to the CPU", "the offloaded activations counted on the GPU"
    ),
    "attention_output_gate": _not_modelled(
        "gated attention (an output gate on each attention layer)", "the gate's weights and activations not counted"
    ),
    "experimental_attention_variant": _not_modelled(
        "an experimental attention variant (gated delta net, DeepSeek sparse attention)",
        "estimated as the standard attention",
    ),
    "linear_attention_freq": _not_modelled(
        "linear-attention layers interleaved with attention", "every layer counted as an attention layer"
    ),
    "hybrid_context_parallel": _not_modelled(
        "hybrid context parallelism (a context-parallel size per sample)", "estimated with the stated CP size"
    ),
    "batch_invariant_mode": _not_modelled("batch-invariant kernels", "speed estimated with the usual kernels"),
    "ddp_reduce_scatter_with_fp32_accumulation": _not_modelled(
        "gradients reduce-scattered with fp32 accumulation", "gradient buffers counted in their own dtype only"
    ),
    "ddp_param_name_patterns_for_fp32_local_accumulation": _not_modelled(
        "fp32 local gradient accumulation for the parameters named", "gradient buffers counted in their own dtype only"
    ),
    "ep_overlap_early_attn_memory_release": _not_modelled(
        "attention's memory released early under overlapped expert-parallel communication",
        "attention's saved tensors counted for the whole step",
    ),
    "tensor_parallel_num_weight_shards": _not_modelled(
        "tensor-parallel weights re-materialised from shards layer by layer", "weights counted whole on each rank"
    ),
    "expert_tensor_parallel_num_weight_shards": _not_modelled(
        "expert weights re-materialised from shards layer by layer", "expert weights counted whole on each rank"
    ),
    "freeze_all_layers": _not_modelled("every layer frozen", "estimated with every layer trained"),
    "use_kitchen_attention": _not_modelled("Kitchen's quantized attention", "estimated as the usual attention"),
    "mamba_training_ssm_states_dtype": _not_modelled(
        "the dtype Mamba layers keep their SSM states in while training", "states counted in the activations' dtype"
    ),
    "encoder_tensor_model_parallel_size": _not_modelled(
        "a tensor-parallel size of the encoder's own (T5, a VLM's vision tower)",
        "estimated with the decoder's layout",
        unless="0",
    ),
    "encoder_pipeline_model_parallel_size": _not_modelled(
        "pipeline stages of the encoder's own (T5, a VLM's vision tower)",
        "estimated with the decoder's layout",
        unless="0",
    ),
    "moe_flex_dispatcher_num_sms": _remember,
}

_GROUPS = {
    "FP8/FP4 recipe details (FP8 training itself is recorded as not modelled)": (
        "fp8_recipe fp8_margin fp8_interval fp8_amax_history_len fp8_amax_compute_algo fp8_wgrad "
        "first_last_layers_bf16 num_layers_at_start_in_bf16 num_layers_at_end_in_bf16 keep_fp8_transpose_cache "
        "reuse_grad_buf_for_mxfp8_param_ag moe_router_padding_for_fp8"
    ),
    "inference and text-generation serving, not training": (
        "inference_batch_times_seqlen_threshold flash_decode inference_max_batch_size inference_max_seq_length "
        "inference_dynamic_batching_unified_memory_level disable_chunked_prefill"
    ),
    "Megatron-RL details (`--perform-rl-step` is recorded as not modelled)": (
        "rl_offload_optimizer_during_inference rl_offload_kv_cache_during_training rl_use_sequence_packing "
        "rl_sequence_packing_bin_size rl_sequence_packing_algo"
    ),
    "models vramlens does not read from a Megatron launch (Retro, T5, BERT, ICT, DINO)": (
        "retro_encoder_attention_dropout retro_attention_gate relative_attention_num_buckets "
        "relative_attention_max_distance decoder_seq_length retriever_seq_length short_seq_prob indexer_batch_size "
        "data_sharding dino_freeze_last_layer"
    ),
    "positions and activations computed in place, without stored tensors of their own": (
        "rotary_seq_len_interpolation_factor activation_func_clamp_value window_attn_skip_freq "
        "use_fused_weighted_squared_relu use_te_activation_func"
    ),
    "multi-latent attention sizes (MLA itself is recorded as not modelled)": "q_lora_rank kv_lora_rank",
    "logging, checks and checkpoint files": (
        "log_num_zeros_in_grad log_memory_to_tensorboard record_memory_history memory_snapshot_path "
        "check_for_nan_in_loss_and_grad no_save_optim no_load_optim strict_fsdp_dtensor_load "
        "ckpt_fully_parallel_save_deprecated ckpt_fully_parallel_save ckpt_fully_parallel_load "
        "dist_ckpt_optim_fully_reshardable distrib_optim_fully_reshardable_mem_efficient data_parallel_random_init"
    ),
    "numerics of the same tensors: gradient clipping, dropout probability (the core attention's dropout mask is "
    "counted: estimate.components.megatron_core_attention_per_token), reduced-precision matmul, router dtype": (
        "clip_grad attention_dropout disable_bf16_reduced_precision_matmul moe_router_dtype"
    ),
    "the global batch over the run (memory follows the micro batch, which these do not change)": (
        "rampup_batch_size decrease_batch_size_if_needed"
    ),
    "communication scheduling and process groups: the speed estimate treats collectives as overlapped with compute "
    "(estimate/throughput.py)": (
        "tp_comm_overlap_cfg tp_comm_overlap_ag tp_comm_overlap_rs tp_comm_overlap_rs_dgrad tp_comm_bulk_dgrad "
        "tp_comm_bulk_wgrad tp_comm_bootstrap_backend tp_comm_split_ag tp_comm_split_rs "
        "async_tensor_model_parallel_allreduce pipeline_model_parallel_comm_backend overlap_grad_reduce "
        "align_grad_reduce overlap_param_gather_with_optimizer_step use_ring_exchange_p2p gradient_reduce_div_fusion "
        "num_distributed_optimizer_instances cp_comm_type hierarchical_context_parallel_sizes use_tp_pp_dp_mapping "
        "overlap_moe_expert_parallel_comm model_parallel_size"
    ),
    "Megatron's gradient buffers are counted whole (`_grad_buffers`); the bucket size splits them for the reduce": (
        "ddp_bucket_size"
    ),
    "where index files are cached on disk, or what an in-process restart releases": (
        "data_cache_path object_storage_cache_path inprocess_empty_cuda_cache"
    ),
    "inference and RL generation settings (decode-time KV and latent caches, CUDA-graph padding at decode)": (
        "rl_remove_kv_cache_during_training moe_pad_experts_for_cuda_graph_inference cache_mla_latents"
    ),
    "wgrad accumulated straight into the fp32 main gradients, which are counted either way": (
        "gradient_accumulation_fusion"
    ),
    "CPU-offload details: which optimizer runs the offloaded part and how its copies overlap, not how much is kept": (
        "use_torch_optimizer_for_cpu_offload overlap_cpu_optimizer_d2h_h2d"
    ),
    "FSDP details (`--use-megatron-fsdp` / `--use-torch-fsdp2` are recorded as not modelled)": (
        "data_parallel_sharding_strategy fsdp_double_buffer enable_full_sharding_in_hsdp"
    ),
    "attention masks: a boolean b×s×s mask per micro batch (s² bytes a sample), small next to the activations; "
    "fused attention takes the causal mask as a flag": "reset_attention_mask create_attention_mask_in_dataloader",
    # megatron-core 0.4-0.19 (frameworks/schemas/megatron/)
    "details of CPU and fine-grained activation offloading (the offloading itself is recorded as not modelled)": (
        "cpu_offloading_num_layers cpu_offloading_retain_pinned_cpu_buffers activation_offload_fraction "
        "fine_grained_offloading_max_inflight_offloads delay_offload_until_cuda_graph "
        "delta_offload_bytes_across_pp_ranks offload_modules"
    ),
    "checkpoint files, logging and health checks": (
        "ckpt_fully_parallel_load_exchange_algo ckpt_fully_parallel_load_process_group "
        "ckpt_fully_parallel_save_process_group ckpt_load_validate_sharding_integrity fully_parallel_load "
        "fully_parallel_save save_activations_interval gpu_sniff_test_interval log_batch_size_to_tensorboard "
        "log_device_memory_used log_max_attention_logit log_memory_interval logits_save_dtype"
    ),
    "the data loader's index files and caches, on the host": "dataloader_fast_cache_load s3_cache_path",
    "collective scheduling (the speed estimate treats collectives as overlapped with compute)": (
        "delay_grad_reduce overlap_dispatch_backward_with_experts_wgrad moe_ncclep_zero_copy"
    ),
    "DeepSeek sparse attention details (the variant itself is recorded as not modelled)": (
        "dsa_indexer_k_norm_fp32 dsa_indexer_rotate_activation dsa_kernel_backend"
    ),
    "evaluation batches: a forward pass without saved activations, after the training step": (
        "eval_global_batch_size eval_micro_batch_size"
    ),
    "FP8 and quantization recipe details (FP8 training itself is recorded as not modelled)": (
        "fp8_output_proj fp8_quantizer_factory keep_fp8_transpose_cache_when_using_custom_fsdp "
        "moe_router_padding_for_quantization te_precision_config_file kitchen_attention_backend"
    ),
    "which FlashAttention release the fused attention runs: the same saved tensors": "flash_attention_version",
    "FSDP details (Megatron FSDP itself is recorded as not modelled)": (
        "fsdp_db_use_persist_buf_on_alloc_fail fsdp_manual_registration megatron_fsdp_enable_fine_grained_param_gather "
        "megatron_fsdp_grad_comm_dtype megatron_fsdp_main_grads_dtype megatron_fsdp_main_params_dtype "
        "megatron_fsdp_max_pool_double_buffer outer_dp_sharding_strategy"
    ),
    "a fused residual-add + RMSNorm kernel over the same tensors": "fused_residual_rmsnorm",
    "inference serving settings, not training": (
        "inference_disable_triton_nvls_kernels inference_dynamic_batching_chunk_size "
        "inference_dynamic_batching_cuda_graph_mixed_prefill_count inference_dynamic_batching_mamba_memory_ratio "
        "inference_fuse_tp_communication inference_moe_disable_fused_quant_kernels mamba_inference_conv_states_dtype "
        "mamba_inference_ssm_states_dtype"
    ),
    "numerics of the same tensors: a zero-centred norm weight, the attention's scale": (
        "layernorm_zero_centered_gamma mup_attn_scale_power"
    ),
    "Megatron-RL generation details (`--perform-rl-step` is recorded as not modelled)": (
        "rl_generation_batch_size rl_inference_expert_model_parallel_size "
        "rl_inference_expert_tensor_model_parallel_size rl_inference_model_unified_memory_level "
        "rl_inference_pipeline_model_parallel_size rl_inference_tensor_model_parallel_size rl_kv_cache_management_mode "
        "rl_num_parallel_generation_batches rl_num_parallel_generations rl_offload_inference_model_weights_when_idle "
        "rl_parallel_generation_tasks rl_sequence_packing_max_sequences_per_bin"
    ),
    "the encoder/decoder split of a T5 pipeline, a model the Megatron reader does not estimate": (
        "pipeline_model_parallel_split_rank"
    ),
    "the global batch over the run (memory follows the micro batch)": "step_batch_size_schedule",
}
# Megatron-LM arguments that look as if they changed memory or speed and do not, as estimated: name -> why
IRRELEVANT: dict[str, str] = {name: why for why, names in _GROUPS.items() for name in names.split()}

# Megatron-SWIFT's own spellings of Megatron settings that Megatron-LM's arguments.py does not define (ms-swift v3.12.6
# swift/megatron/argument/megatron_args.py, v4.6.0 swift/megatron/arguments/megatron_args.py), held to the same rule
# by tests/frameworks/test_schema_coverage.py over the Megatron-SWIFT dumps
_SWIFT_GROUPS = {
    IRRELEVANT["gradient_accumulation_fusion"]: "no_gradient_accumulation_fusion",
    IRRELEVANT["create_attention_mask_in_dataloader"]: "no_create_attention_mask_in_dataloader",
    "the fused bias + activation kernel (on by default): the unfused path keeps the same activation input for "
    "backward": "bias_activation_fusion",
    "how pipeline stages exchange activations (batched or separate send/receive): the same tensors": "batch_p2p_comm",
    "how context-parallel ranks split a sequence (zigzag or contiguous chunks): each holds as many tokens either way": (
        "cp_partition_mode"
    ),
    "how the data loader splits samples over the ranks: no GPU memory": "no_data_sharding",
    "a model size Megatron-SWIFT fills in from the checkpoint's config.json, which the estimate reads": (
        "linear_conv_kernel_dim"
    ),
}
SWIFT_IRRELEVANT: dict[str, str] = {name: why for why, names in _SWIFT_GROUPS.items() for name in names.split()}


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


def known(name: str) -> bool:
    """A flag this reader reads or lists as irrelevant (`-` or `_` spelling)."""
    return name.replace("-", "_") in HANDLERS or name.replace("-", "_") in IRRELEVANT


def is_swift(launch) -> bool:
    """Megatron-SWIFT's `megatron sft|pt|rlhf` rather than a Megatron-LM `pretrain_*.py` script."""
    return launch.script is None and launch.subcommand in SWIFT_SUBCOMMANDS


def framework(launch) -> str:
    """Whose defaults a Megatron launch takes (a key of knowledge.frameworks.DEFAULTS)."""
    return SWIFT_FRAMEWORK if is_swift(launch) else FRAMEWORK


FLEX_DISPATCHER_FLAGS = (
    "moe_token_dispatcher_type",
    "moe_enable_deepep",
    "moe_flex_dispatcher_backend",
    "moe_deepep_num_sms",
    "moe_hybridep_num_sms",
)


def token_dispatcher(b: PlanBuilder, by: dict[str, Setting], default: str = "alltoall") -> None:
    """`moe_token_dispatcher_type` (Megatron-LM's default `allgather`, megatron/training/arguments.py core_v0.13.0 and
    TransformerConfig; Megatron-SWIFT's and verl's `hf_to_mcore_config` give `alltoall`: `default`). `allgather`
    gathers every token of the expert-tensor × expert-parallel group on each rank (MoEAllGatherTokenDispatcher:
    components.megatron_activations); `alltoall` sends each token to its experts' ranks (what the estimate's MoE
    layers assume). `flex` runs a backend that allocates its buffers outside torch over that group (token_dispatcher.py
    `MoEFlexTokenDispatcher`, fused_a2a.py `get_buffer` / `init_hybrid_ep_buffer`; formats.ep_dispatch):
    `moe_flex_dispatcher_backend` (deepep by default, hybridep, ncclep: core main transformer_config.py), or DeepEP by
    the deprecated `moe_enable_deepep` (before the backend flag, the only one; `__post_init__` refuses it without
    `flex`)."""
    said = by.get("moe_token_dispatcher_type")
    kind = str(said.value).strip().lower() if said is not None else default
    ep = to_int(by["expert_model_parallel_size"].value) if "expert_model_parallel_size" in by else None
    tp = to_int(by["tensor_model_parallel_size"].value) if "tensor_model_parallel_size" in by else None
    etp = to_int(by["expert_tensor_parallel_size"].value) if "expert_tensor_parallel_size" in by else None
    group = max(ep or 1, 1) * max(etp or tp or 1, 1)
    if kind == "allgather":
        if group > 1 and (said is not None or "num_experts" in by):
            note = f"each MoE layer gathers the tokens of its {group}-GPU expert-tensor × expert-parallel group"
            if said is not None:
                b.set("ep_dispatch", "all_gather", said, note=note)
            else:
                b.set("ep_dispatch", "all_gather", note=note, origin=Origin.DEFAULT, framework="Megatron-LM")
        return
    if kind != "flex":
        return
    deepep = by.get("moe_enable_deepep")
    backend = by.get("moe_flex_dispatcher_backend")
    if deepep is not None and to_bool(deepep.value):
        name, said = "deepep", deepep
    elif backend is not None:
        name, said = str(backend.value).strip().lower(), backend
    else:
        name = "deepep"
    if group <= 1:
        return
    if name == "deepep":
        return set_deepep(b, group, said, by.get("expert_model_parallel_size"), by.get("moe_deepep_num_sms"))
    if name == "hybridep":
        return set_hybridep(b, group, said, by.get("moe_hybridep_num_sms"))
    b.unmodelled(said, f"the `{name}` flex dispatcher's communication buffers", "not counted", key=EP_KEY)


def _moe_recompute_merge(b: PlanBuilder, by: dict) -> None:
    """`--moe-layer-recompute` adds "moe" to the recompute modules, written or default (`_moe_layer_recompute`)."""
    s = by.get("moe_layer_recompute")
    if s is None or to_bool(s.value) is False:
        return
    written = b.plan.recompute_modules
    modules = sorted({*(written.value if written is not None else ["core_attn"]), "moe"})
    b.set("recompute_modules", modules, s, override=True, note="--moe-layer-recompute: the MoE layers recomputed")


def finish(b: PlanBuilder, settings: list[Setting], launch) -> None:
    """After every flag: the objective the command runs, and what Megatron derives from several flags or stops
    without."""
    by = {s.path[0]: s for s in settings if s.path and not s.unresolved}
    token_dispatcher(b, by, "alltoall" if is_swift(launch) else "allgather")
    if is_swift(launch):
        _swift_precision(b, by)
    _grad_buffers(b, by)
    _softmax_in_fp32(b, by)
    _moe_recompute_merge(b, by)
    _fp8_recipe(b, by)
    _virtual_stages(b, by)
    if is_swift(launch):
        _swift_checkpoint_model(b, by)
        return _swift_finish(b, launch.subcommand)
    script = launch.script.text.rsplit("/", 1)[-1] if launch.script else "pretrain_gpt.py"
    if launch.launcher == FRAGMENT:
        names = ", ".join(f"`{raw_name(launch, w)}`" for w in launch.command.words)
        b.plan.read_notes.append(
            f"the file runs no command: it sets Megatron-LM flags in {names} for a launch script to `source`; "
            "read as the flags of a Megatron-LM training run (`pretrain_gpt.py`)"
        )
    b.set(
        "objective",
        "pretrain",
        note=f"`{script}` trains next-token prediction from the start of each sample (no `--sft`)",
        origin=Origin.DERIVED,
        framework="Megatron-LM",
    )
    for concept, flag in (("micro_batch", "--micro-batch-size"), ("seq_len", "--seq-length")):
        if getattr(b.plan, concept) is None:
            # megatron/training/arguments.py (core_v0.15.0) `validate_args`: `assert args.micro_batch_size is not
            # None`; `assert args.encoder_seq_length is not None` when --seq-length is not given
            b.issue(
                IssueKind.ASSUMED,
                f"Megatron-LM stops without `{flag}` (megatron/training/arguments.py asserts "
                "it); the estimate assumes one",
            )
    if b.plan.model_id is None:
        _query_groups(b, by)
        _vocabulary_padded(b, by)
        _head_size(b, by)
        _linear_defaults(b, by)
        _experts(b, by)
        _hybrid_model(b, by, script)
    from vramlens.formats.model_kind import other_kind, set_other_kind

    if script.startswith("pretrain_t5") and other_kind(b.plan) is None:
        # pretrain_t5.py builds megatron.core.models.T5.T5Model: an encoder and a decoder with cross-attention
        # (`--encoder-num-layers`, `--decoder-num-layers`; Megatron-LM examples/t5/train_t5_220m_distributed.sh)
        sizes = [f"`{f} {by[k].value}`" for f, k in _T5_FLAGS if k in by]
        set_other_kind(
            b,
            by.get("encoder_num_layers") or by.get("num_layers"),
            "an encoder-decoder (T5) model",
            f"`{script}` trains Megatron-LM's T5Model" + (f" ({', '.join(sizes)})" if sizes else ""),
        )
    if other_kind(b.plan) is not None:  # a hybrid Mamba model (`_hybrid_pattern`): its sizes build no transformer
        b.plan.model_id = None
        for key in [k for k in b.plan.extra if k.startswith("arch.")]:
            del b.plan.extra[key]


_SWIFT_DTYPES = {
    **dict.fromkeys(("float16", "fp16", "half", "float32", "fp32"), "fp16"),
    **dict.fromkeys(("bfloat16", "bf16"), "bf16"),
}


def _swift_precision(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """Megatron-SWIFT's precision from `--torch_dtype` when neither `--fp16` nor `--bf16` is given: float16 and
    float32 train in fp16, bfloat16 in bf16 (ms-swift 3602360a5 swift/arguments/base_args/model_args.py
    `_init_mixed_precision`, which swift/megatron/arguments/megatron_args.py `_init_mixed_precision` calls; v3.5.0
    swift/llm/argument/base_args/model_args.py the same). Without it the checkpoint's dtype decides, as resolved."""
    s = by.get("torch_dtype")
    if s is None or any(by.get(f) is not None and to_bool(by[f].value) is not None for f in ("fp16", "bf16")):
        return
    name = str(s.value).strip().lower().removeprefix("torch.")
    dtype = _SWIFT_DTYPES.get(name)
    if dtype is None:
        b.unknown(s, "torch_dtype", tuple(_SWIFT_DTYPES))
        return
    note = f"Megatron-SWIFT trains a torch_dtype {name} model in {dtype} mixed precision"
    b.set("amp_dtype", dtype, s, note=note)
    b.set("weight_dtype", dtype, s, note=note)


def _softmax_in_fp32(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """`--attention-softmax-in-fp32` acts in Megatron's own unfused attention only (megatron/core/transformer/
    dot_product_attention.py → fusions/fused_softmax.py `FusedScaleMaskSoftmax.forward_torch_softmax`: the scores
    cast to fp32 before the softmax, which keeps its fp32 output); a fused or flash kernel (the attention backends
    other than `local`/`unfused`) computes its softmax internally whatever the flag says."""
    s = by.get("attention_softmax_in_fp32")
    if s is None or to_bool(s.value) is False:
        return
    if b.plan.attn_impl is not None and b.plan.attn_impl.value == "eager":
        b.unmodelled(s, "attention softmax in fp32 (unfused attention)", "counted in the training dtype")


def _fp8_recipe(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """An FP8 run's recipe (`--fp8-recipe`, default "delayed": Megatron-LM d98e8a64dd megatron/training/arguments.py;
    Megatron-SWIFT the same), which decides who keeps a precision-aware optimizer's master weights
    (`megatron_precision_aware_state_bytes`). FP8 training itself stays named as not modelled (`fp8_format`)."""
    fmt = by.get("fp8_format") or by.get("fp8")
    if fmt is None or to_bool(fmt.value) is False or str(fmt.value).strip().lower() in ("", "none"):
        return
    recipe = by.get("fp8_recipe")
    value = str(recipe.value).strip().lower() if recipe is not None else "delayed"
    b.set("fp8_recipe", value, recipe or fmt, origin=Origin.FILE if recipe is not None else Origin.DEFAULT)


def _grad_buffers(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """The dtype of the gradient buffers: fp32 when `accumulate_allreduce_grads_in_fp32` holds, else the parameters'
    (megatron/training/training.py passes the flag on as DistributedDataParallelConfig `grad_reduce_in_fp32`;
    megatron/core/distributed/param_and_grad_buffer.py: `grad_dtype = torch.float if grad_reduce_in_fp32 else
    param.dtype`). Megatron-LM d98e8a64dd megatron/training/arguments.py `validate_args` turns the flag on for bf16
    unless `--grad-reduce-in-bf16` or `--main-grads-dtype bf16`, and never for fp16 (core_r0.8.0: on for every bf16
    run); Megatron-SWIFT the same for bf16 unless `main_grads_dtype bf16` (ms-swift 3602360a5
    swift/megatron/arguments/megatron_args.py `_map_dtype`; `accumulate_allreduce_grads_in_fp32: bool = False`)."""
    given = b.plan.amp_dtype or b.plan.weight_dtype
    dtype = given.value if given is not None else None
    if dtype not in ("fp16", "bf16"):
        return
    flag = by.get("accumulate_allreduce_grads_in_fp32")
    if flag is not None and to_bool(flag.value):
        b.set("grad_buffer_dtype", "fp32", flag, note="gradients accumulated and reduced in fp32")
        return
    if dtype == "fp16":
        b.set(
            "grad_buffer_dtype",
            "fp16",
            by.get("fp16") or flag,
            origin=Origin.DERIVED,
            note="fp16 without --accumulate-allreduce-grads-in-fp32: the gradient buffers are fp16, and the optimizer "
            "copies them to fp32 for its step",
        )
        return
    low = by.get("grad_reduce_in_bf16")
    if low is None or not to_bool(low.value):
        main = by.get("main_grads_dtype")
        low = main if main is not None and str(main.value).strip().lower() == "bf16" else None
    if low is not None:
        b.set("grad_buffer_dtype", "bf16", low, note="bf16 gradient buffers, copied to fp32 for the optimizer's step")


_T5_FLAGS = (("--encoder-num-layers", "encoder_num_layers"), ("--decoder-num-layers", "decoder_num_layers"))


# the entry points that build Megatron-LM's hybrid model from the flags alone: pretrain_hybrid.py (d98e8a64,
# hybrid_builders.py `hybrid_builder` → `HybridModel`) and pretrain_mamba.py (core_v0.13.0 … core_v0.15.0 →
# `MambaModel`; at d98e8a64 a wrapper that runs pretrain_hybrid.py)
_HYBRID_SCRIPTS = ("pretrain_hybrid", "pretrain_mamba")
_HYBRID_KIND = "a hybrid Mamba/attention model"
# the Mamba mixer's flags (megatron/core/transformer/transformer_config.py `TransformerConfig` fields)
_MAMBA_FLAGS = ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads")


def _hybrid_model(b: PlanBuilder, by: dict[str, Setting], script: str) -> None:
    """A hybrid Mamba/attention run: the layer pattern (`--hybrid-layer-pattern`, `--hybrid-override-pattern`, or
    for pretrain_mamba.py / pretrain_hybrid.py without one, `--num-layers` with the ratios
    `--hybrid-attention-ratio` and `--hybrid-mlp-ratio`: all Mamba layers by default) read as the Nemotron-H model
    of the same layers (formats/megatron_hybrid.py), whose parameters are counted by construction. A run whose
    layers or builder that model does not have keeps the message that it is not estimated, with why."""
    from vramlens.formats.model_kind import set_built_arch, set_other_kind
    from vramlens.knowledge.models import arch_from_hf_config
    from vramlens.resolve import Approximate

    given = by.get("hybrid_layer_pattern") or by.get("hybrid_override_pattern")
    if given is not None and (given.value in (None, "", True, False) or str(given.value).lower() in ("none", "null")):
        given = None
    ratios = {k: _ratio(by.get(f"hybrid_{k}_ratio")) for k in ("attention", "mlp")}
    if not script.startswith(_HYBRID_SCRIPTS):
        if given is not None:
            flag = "--" + given.key.lstrip("-").replace("_", "-")
            set_other_kind(
                b,
                given,
                _HYBRID_KIND,
                f"`{flag} {given.value}` makes each layer a Mamba, attention, MLP or MoE layer, and `{script}` builds "
                "its own model around them (vramlens reads the hybrid model pretrain_hybrid.py and pretrain_mamba.py "
                "build)",
            )
        elif ratios["attention"]:
            b.unmodelled(
                by["hybrid_attention_ratio"], "hybrid Mamba/attention layers", "estimated as transformer layers"
            )
        return
    extra = b.plan.extra
    layers = extra.get("arch.num_layers")
    where: Setting | None
    if given is not None:
        pattern, where = str(given.value).strip(), given
        how = f"`--{given.key.lstrip('-').replace('_', '-')} {pattern}`"
    elif layers is not None and to_int(layers.value):
        n = int(to_int(layers.value) or 0)
        pattern = mh.pattern_from_ratios(n, ratios["attention"], ratios["mlp"])
        where = by.get("hybrid_attention_ratio") or by.get("num_layers")
        how = (
            f"{n} layers allocated by the attention ratio {ratios['attention']:g} and MLP ratio "
            f"{ratios['mlp']:g}: `{pattern}`"
        )
    else:
        return
    main = pattern.split(mh.MTP, 1)[0]

    def refuse(why: str) -> None:
        set_other_kind(b, where, _HYBRID_KIND, f"{how}: {why}")

    spec = by.get("spec")
    spec_words = [] if spec is None else spec.value if isinstance(spec.value, list) else str(spec.value).split()
    if spec_words and str(spec_words[-1]) not in mh.SPECS:
        return refuse(f"the layer spec `{' '.join(map(str, spec_words))}` is not Megatron's hybrid stack spec")
    if (why := mh.not_built(pattern)) is not None:
        return refuse(why)
    activation = str(getattr(extra.get("arch.activation"), "value", "")).lower()
    if "glu" in activation and any(ch in main for ch in "-E"):
        return refuse("gated (SwiGLU) MLPs, which the Nemotron-H layers it is read as do not have")
    if "moe_latent_size" in by:
        return refuse("a latent MoE (`--moe-latent-size`)")

    def size(key: str) -> int | None:
        s = extra.get(f"arch.{key}")
        return to_int(s.value) if s is not None else None

    hidden, heads = size("hidden_size"), size("num_attention_heads")
    if not hidden or not heads:
        return refuse("no `--hidden-size` or `--num-attention-heads`")
    mamba_flags = {k: to_int(by[k].value) if k in by else None for k in _MAMBA_FLAGS}
    mamba = mh.mamba_sizes(hidden, mamba_flags)
    if not mamba_flags["mamba_num_heads"] and (mh.MAMBA_EXPAND * hidden) % mamba[1]:
        return refuse(f"d_inner {mh.MAMBA_EXPAND * hidden} is not a multiple of the Mamba head width {mamba[1]}")
    untied = extra.get("arch.no_weight_tying")
    sizes = {
        "hidden": hidden,
        "heads": heads,
        "kv_heads": size("num_kv_heads") or heads,
        "head_dim": size("head_dim") or hidden // heads,
        # arguments.py `validate_args`: `ffn_hidden_size` 4h when not given (not gated)
        "ffn": size("intermediate_size") or 4 * hidden,
        "vocab": size("vocab_size") or GPT2_VOCAB,
        "tied": not (untied is not None and to_bool(untied.value) is not False),
        "squared_relu": "squared_relu" in by and to_bool(by["squared_relu"].value) is not False,
        "linear_bias": bool(getattr(extra.get("arch.linear_bias"), "value", True)),
        "qkv_bias": bool(getattr(extra.get("arch.qkv_bias"), "value", False)),
        # arguments.py `--normalization` default LayerNorm
        "layernorm": "rms" not in str(getattr(extra.get("arch.norm"), "value", "LayerNorm")).lower(),
        "dtype": next((d for d in ("bf16", "fp16") if d in by and to_bool(by[d].value) is not False), None),
        "experts": size("num_experts"),
        "topk": size("experts_per_token"),
        "moe_ffn": size("moe_intermediate_size") or size("intermediate_size") or 4 * hidden,
        "shared": size("shared_expert_intermediate_size") or 0,
    }
    if "E" in main and not sizes["experts"]:
        return refuse("MoE layers (`E`) without `--num-experts`")
    if (why := mh.not_buildable(main, sizes)) is not None:
        return refuse(why)
    config = mh.nemotron_h_config(pattern, sizes, mamba)
    arch = arch_from_hf_config(config, f"megatron-hybrid-{config['num_hidden_layers']}L-{hidden}h", source=how)
    if arch is None or not arch.params_total:
        return refuse("its layers could not be built")
    # the biases megatron-core builds beyond the Nemotron-H model's (`uncounted_biases`)
    arch = arch.model_copy(update={"params_total": arch.params_total + mh.uncounted_biases(main, sizes)})
    counts = ", ".join(f"{main.count(ch)} {name}" for ch, name in mh.BUILT.items() if ch in main)
    set_built_arch(
        b,
        arch,
        where,
        f"Megatron-LM hybrid model ({how}): {counts} layers, read as the Nemotron-H model of the same layers "
        f"(transformers nemotron_h), {arch.params_total:,} parameters",
    )
    notes = [mh.ACTIVATIONS_NOTE] + _hybrid_parameter_notes(b, by, main)
    b.plan.read_notes.extend(Approximate(n) for n in notes)


def _ratio(s: Setting | None) -> float:
    try:
        return float(str(s.value)) if s is not None else 0.0
    except ValueError:
        return 0.0


def _hybrid_parameter_notes(b: PlanBuilder, by: dict[str, Setting], main: str) -> list[str]:
    """What a hybrid run's flags add to the layers the Nemotron-H model counts (megatron-core d98e8a64), and a Mamba
    training path the activations are not sized for."""
    notes = []
    position = by.get("position_embedding_type")
    if position is None or str(position.value).strip().lower() == "learned_absolute":
        # arguments.py `--position-embedding-type` default learned_absolute: `LanguageModelEmbedding` adds
        # max_position_embeddings × h learned positions (hybrid_builders.py passes the flag on)
        notes.append("Megatron hybrid: learned absolute position embeddings not counted")
    if mh.PIPE in main:
        notes.append("Megatron hybrid: pipeline stages split evenly, not at the pattern's `|` boundaries")
    if "moe_shared_expert_gate" in by and to_bool(by["moe_shared_expert_gate"].value) is not False:
        notes.append("Megatron hybrid: the shared experts' gate (hidden size per MoE layer) not counted")
    unfused = by.get("disable_mamba_mem_eff_path")
    if unfused is not None and to_bool(unfused.value) is not False and "M" in main:
        notes.append(mh.UNFUSED_MAMBA_NOTE)
    return notes


def implied_world_size(b: PlanBuilder, settings: list[Setting]) -> None:
    """A launch that states no GPU count runs on at least the GPUs its parallel layout needs: megatron-core
    `parallel_state.initialize_model_parallel` requires the world size to be a multiple of TP × PP × CP and (of the
    expert layers) of ETP × EP × PP, ETP defaulting to TP (core_v0.13.0 megatron/core/parallel_state.py; core_r0.8.0
    asks that EP divide the data-parallel size, the same product when CP is 1). The least such world size is taken,
    with a note; a launcher's count (`--nproc_per_node`, `NPROC_PER_NODE`) is never replaced."""
    plan = b.plan
    if plan.gpu_count is not None or plan.world_size is not None or is_swift_plan(plan):
        return
    by = {s.path[0]: s for s in settings if s.path and not s.unresolved}

    def size(concept: str, flag: str) -> int:
        sourced = getattr(plan, concept, None)
        if sourced is not None and isinstance(sourced.value, int) and sourced.value >= 1:
            return sourced.value
        n = to_int(by[flag].value) if flag in by else None
        return n if n and n >= 1 else 1

    tp = size("tensor_parallel", "tensor_model_parallel_size")
    pp = size("pipeline_parallel", "pipeline_model_parallel_size")
    cp = size("context_parallel", "context_parallel_size")
    ep = size("expert_parallel", "expert_model_parallel_size")
    etp = to_int(by["expert_tensor_parallel_size"].value) if "expert_tensor_parallel_size" in by else None
    etp = etp if etp and etp >= 1 else tp
    world = math.lcm(tp * pp * cp, etp * ep * pp)
    if world <= 1 or world > MAX_GPU_COUNT:
        return
    parts = [f"TP {tp}", f"PP {pp}"] + ([f"CP {cp}"] if cp > 1 else []) + ([f"EP {ep}"] if ep > 1 else [])
    src = next(
        (
            by[f]
            for f in (
                "tensor_model_parallel_size",
                "pipeline_model_parallel_size",
                "context_parallel_size",
                "expert_model_parallel_size",
            )
            if f in by
        ),
        None,
    )
    note = (
        f"no launcher states the GPU count: the least world size megatron-core accepts for {' × '.join(parts)} "
        "(a multiple of TP × PP × CP and of expert TP × EP × PP), one data-parallel replica"
    )
    b.set("gpu_count", world, src, note=note, origin=Origin.DERIVED)
    b.set("world_size", world, src, note=note, origin=Origin.DERIVED)


def is_swift_plan(plan) -> bool:
    return plan.framework == SWIFT_FRAMEWORK


def _swift_checkpoint_model(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """Megatron-SWIFT without `--model`: the model is the checkpoint `--mcore_model` or `--load` names (ms-swift
    v3.5.0 swift/llm/argument/base_args/base_args.py `_init_ckpt_dir`: `model = self.model or mcore_model or load`,
    whose args.json gives the model; the folder `swift export --to_mcore true` writes)."""
    if b.plan.model_id is not None:
        return
    s = by.get("mcore_model") or by.get("load")
    if s is not None and isinstance(s.value, str) and s.value.strip():
        b.set(
            "model_id",
            s.value.strip(),
            s,
            note=f"Megatron-SWIFT reads the model from the checkpoint `--{s.path[0]}` names (its args.json)",
        )


def _swift_finish(b: PlanBuilder, subcommand: str) -> None:
    """Megatron-SWIFT's command and defaults (ms-swift v3.12.6 8773ecd0 swift/megatron/argument/rlhf_args.py
    `rlhf_type = 'dpo'`, megatron_args.py `global_batch_size: int = 16`; the same in v4.5.2 ff512877
    swift/megatron/arguments/)."""
    if subcommand == "rlhf":
        b.set(
            "objective",
            "dpo",
            note="Megatron-SWIFT's default rlhf_type for `megatron rlhf`",
            origin=Origin.DEFAULT,
            framework=SWIFT_LABEL,
        )
    else:
        b.set(
            "objective",
            "pretrain" if subcommand == "pt" else "sft",
            note=f"the command runs `megatron {subcommand}`",
            origin=Origin.DERIVED,
            framework=SWIFT_LABEL,
        )
    if b.plan.global_batch is None:
        b.set("global_batch", 16, origin=Origin.DEFAULT, framework=SWIFT_LABEL)


def _virtual_stages(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """`--num-layers-per-virtual-pipeline-stage N`: the interleaved 1F1B schedule with (layers ÷ PP) ÷ N model chunks
    per stage (megatron/training/arguments.py core_v0.15.3 `validate_args`: `virtual_pipeline_model_parallel_size =
    num_layers_per_pipeline_stage // num_layers_per_virtual_pipeline_stage`, no interleaving when that is 1)."""
    said = by.get("num_layers_per_virtual_pipeline_stage")
    plan = b.plan
    if said is None or plan.virtual_pipeline is not None:
        return
    per_chunk = to_int(said.value)
    layers = to_int(by["num_layers"].value) if "num_layers" in by else None
    pp = plan.pipeline_parallel.value if plan.pipeline_parallel is not None else None
    if not (per_chunk and layers and isinstance(pp, int) and pp > 1) or per_chunk < 1:
        return
    chunks = layers // pp // per_chunk
    if chunks >= 1:
        b.set(
            "virtual_pipeline",
            chunks,
            said,
            note=f"{layers} layers ÷ PP {pp} ÷ {per_chunk} layers a chunk: {chunks} model chunks per stage",
            origin=Origin.DERIVED,
        )


def _query_groups(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """`--num-query-groups` counts only with `--group-query-attention`, and defaults to 1 (arguments.py
    core_v0.15.0 `core_transformer_config_from_args`: `num_query_groups = args.num_query_groups if
    args.group_query_attention else None`; `--num-query-groups` default 1)."""
    gqa = by.get("group_query_attention")
    groups = by.get("num_query_groups")
    if gqa is not None and to_bool(gqa.value) is not False:
        if groups is None:
            b.shape("num_kv_heads", Setting(gqa.key, gqa.path, 1, gqa.span, gqa.value_span), override=True)
    elif groups is not None:
        b.plan.extra.pop("arch.num_kv_heads", None)
        b.issue(
            IssueKind.NOT_READ,
            f"`{groups.key}` has no effect without `--group-query-attention`: Megatron-LM "
            "gives every attention head its own key and value",
            groups,
            severity=Severity.INFO,
            span=groups.key_span,
        )


def _vocabulary_padded(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """The vocabulary Megatron-LM builds: `--padded-vocab-size` as given, else the tokenizer's size padded to a
    multiple of `--make-vocab-size-divisible-by` (128) × TP (megatron/training/tokenizer/tokenizer.py core_v0.15.0
    `build_tokenizer`, `_vocab_size_with_padding`). The NullTokenizer of `--vocab-size` adds an end-of-document
    token (`_NullTokenizer.vocab_size`: `_vocab_size_without_eod + 1`)."""
    from vramlens.plan import Sourced
    from vramlens.resolve import Approximate

    extra = b.plan.extra
    if extra.get("arch.padded_vocab_size") is not None:
        extra["arch.vocab_size"] = extra["arch.padded_vocab_size"]
        return
    divisible = to_int(by["make_vocab_size_divisible_by"].value) if "make_vocab_size_divisible_by" in by else 128
    tp = to_int(b.plan.tensor_parallel.value) if b.plan.tensor_parallel is not None else 1
    multiple = max(divisible or 1, 1) * max(tp or 1, 1)
    given = extra.get("arch.vocab_size")
    tokenizer = str(by["tokenizer_type"].value) if "tokenizer_type" in by else None
    if given is not None:
        size = int(given.value) + (1 if tokenizer == "NullTokenizer" else 0)
    else:
        size = GPT2_VOCAB
    padded = -(-size // multiple) * multiple
    how = f"padded to {padded:,}, a multiple of {divisible} × TP {tp or 1}"
    if given is not None:
        extra["arch.vocab_size"] = Sourced(
            value=padded,
            key=given.key,
            span=given.span,
            value_span=given.value_span,
            note=f"{size:,} tokens{' (with the end-of-document token)' if tokenizer == 'NullTokenizer' else ''}, {how}",
        )
    else:
        extra["arch.vocab_size"] = Sourced(
            value=padded, origin=Origin.ASSUMED, note=f"GPT-2's {GPT2_VOCAB:,} tokens, {how}"
        )
        b.plan.read_notes.append(
            Approximate(
                f"vocabulary not given (`--vocab-size`, `--padded-vocab-size`)"
                f"{' for ' + tokenizer if tokenizer else ''}: "
                f"assumed GPT-2's {GPT2_VOCAB:,} tokens, {how}"
            )
        )


def _head_size(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """`--kv-channels`: the size of an attention head, hidden ÷ heads when not given (arguments.py core_v0.15.0
    `validate_args`: `if args.kv_channels is None: args.kv_channels = args.hidden_size // args.num_attention_heads`);
    Q is heads × kv_channels wide and K, V query groups × kv_channels (megatron/core/transformer/attention.py
    `query_projection_size`, `kv_projection_size`)."""
    s = by.get("kv_channels")
    if s is None:
        return
    size = to_int(s.value)
    if size is None or size <= 0:
        return b.unknown(s, "head size", hint="a whole number")
    s.value = size
    b.shape("head_dim", s)


def _linear_defaults(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """What Megatron-LM builds where the flags are silent (megatron/training/arguments.py core_v0.13.0):
    - the MLP width: `validate_args` sets `ffn_hidden_size` to 4h, or with `--swiglu` to int((4h · 2/3) / 64) · 64;
    - biases: every linear layer has one unless `--disable-bias-linear` (which stores False into `add_bias_linear`,
      default True); `--add-qkv-bias` adds them to the QKV projection alone, and `validate_args` turns it on when
      `add_bias_linear` is."""
    from vramlens.plan import Sourced

    extra = b.plan.extra
    hidden = extra.get("arch.hidden_size")
    gated = "glu" in str(getattr(extra.get("arch.activation"), "value", "")).lower()
    h = to_int(hidden.value) if hidden is not None else None
    if extra.get("arch.intermediate_size") is None and h and gated:
        width = int((4 * h * 2 / 3) / 64) * 64
        extra["arch.intermediate_size"] = Sourced(
            value=width,
            origin=Origin.DEFAULT,
            framework="Megatron-LM",
            note="`--ffn-hidden-size` default with `--swiglu`: int((4h · 2/3) / 64) · 64",
        )
    off = by.get("disable_bias_linear")
    linear = off is None or to_bool(off.value) is False
    qkv = by.get("add_qkv_bias")
    extra["arch.linear_bias"] = Sourced(
        value=linear,
        key=off.key if off is not None else None,
        span=off.span if off is not None else None,
        origin=Origin.FILE if off is not None else Origin.DEFAULT,
        framework=None if off is not None else "Megatron-LM",
        note="biases on every linear layer unless `--disable-bias-linear`",
    )
    extra["arch.qkv_bias"] = Sourced(
        value=linear or (qkv is not None and to_bool(qkv.value) is not False),
        origin=Origin.DERIVED,
        note="`--add-qkv-bias`, on with the linear layers' biases",
    )


MAX_PATTERN = 100_000  # layers in a `--moe-layer-freq` pattern; Megatron's models have at most a few hundred


def _experts(b: PlanBuilder, by: dict[str, Setting]) -> None:
    """A MoE model given by its sizes: `--num-experts` routed experts of `--moe-ffn-hidden-size` (default
    `--ffn-hidden-size`: arguments.py core_v0.15.0 `validate_args`), `--moe-router-topk` of them per token (default
    2), shared experts of `--moe-shared-expert-intermediate-size` in all, in the layers `--moe-layer-freq` makes MoE
    layers (megatron/core/models/gpt/gpt_layer_specs.py `get_gpt_decoder_block_spec`: an int N makes layer i a MoE
    layer when i % N == 0; a list pattern marks them with 1); the other layers keep a dense MLP of
    `--ffn-hidden-size`."""
    from vramlens.plan import Sourced

    extra = b.plan.extra
    if extra.get("arch.num_experts") is None:
        return
    if extra.get("arch.experts_per_token") is None:
        extra["arch.experts_per_token"] = Sourced(
            value=mh.MOE_TOPK, origin=Origin.DEFAULT, framework="Megatron-LM", note="`--moe-router-topk` default"
        )
    freq = by.get("moe_layer_freq")
    layers = extra.get("arch.num_layers")
    if freq is None or layers is None or to_int(layers.value) is None:
        return
    n = int(to_int(layers.value) or 0)
    pattern = moe_layer_pattern(freq.value, n)
    if pattern is None:
        return b.unknown(freq, "MoE layer frequency", hint="a whole number or a list pattern such as ([0]+[1]*23)")
    if len(pattern) != n:
        b.issue(
            IssueKind.INVALID_VALUE,
            f"`{freq.key}` gives a pattern of {len(pattern)} layers for {n} layers: Megatron-LM stops on it "
            "(gpt_layer_specs.py asserts the lengths match)",
            freq,
        )
        return
    extra["arch.dense_layers"] = Sourced(
        value=pattern.count(0),
        key=freq.key,
        span=freq.span,
        value_span=freq.value_span,
        note=f"{pattern.count(1)} MoE layers, {pattern.count(0)} dense",
    )


def moe_layer_pattern(value, layers: int) -> list[int] | None:
    """Megatron's `--moe-layer-freq` as a per-layer pattern (1: MoE layer): an int N, or a Python list expression of
    0/1 lists, `+` and `* int` (arguments.py `moe_freq_type` evaluates it; here it is read with `ast`, never run)."""
    import ast

    text = str(value).strip()
    if "[" not in text:
        n = to_int(text)
        return [1 if i % n == 0 else 0 for i in range(layers)] if n and n > 0 else None

    def ev(node: ast.AST) -> list[int] | int | None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List):
            items = [ev(e) for e in node.elts]
            return [int(i) for i in items if isinstance(i, int)] if all(i in (0, 1) for i in items) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                out = left + right
            elif isinstance(node.op, ast.Add) and isinstance(left, int) and isinstance(right, int):
                return left + right
            elif isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
                return left * right if abs(left * right) <= MAX_PATTERN else None
            elif isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int):
                out = left * right if 0 <= right and len(left) * right <= MAX_PATTERN else []
            elif isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list):
                out = right * left if 0 <= left and len(right) * left <= MAX_PATTERN else []
            else:
                return None
            return out if 0 < len(out) <= MAX_PATTERN else None
        return None

    try:
        found = ev(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return found if isinstance(found, list) else None


# --- a file of Megatron flags in variables, for a launch script to `source` ---------------------------------------

FRAGMENT = "variables"  # Launch.launcher of a file that only sets Megatron flags in variables
_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def raw_name(launch, word) -> str:
    """The variable name a fragment launch's assignment word sets."""
    return word.plain_prefix().split("=", 1)[0].removesuffix("+")


def _fragment_vars(text: str, env: dict, ex) -> tuple[list, list]:
    """The variables of a script that hold lists of Megatron-LM flags, (name, Var, its Args) each, and all their
    Args together; a variable another one names (`ALL="$A $B"`) is left out (its words are read through it)."""
    from vramlens.formats import shell

    found: list[tuple[str, Any, list]] = []
    for name, var in env.items():
        if var.elements is not None:
            args = [
                shell.Arg(a.word, piece)
                for a in var.elements
                for piece in (a.value.split() if a.value is not None else [None])
            ]
        elif var.words_range is not None:
            words = shell._spliced_words(text, var.words_range, ex)
            args = shell._args(text, words, env, ex, 1) if words is not None else []
        elif var.fields is not None:
            # a value that is not one quoted list: `MODEL_OPTIONS="… --tokenizer-model "unsloth/Qwen2.5-Math-7B" \
            # --lr …"` (Megatron-LM examples/rl/model_configs/qwen_2p5_math_7b.sh at main) closes and reopens its
            # quotes; bash splits it into the same words where it is used unquoted
            args = list(var.fields)
        else:
            continue
        known = [a.text for a in args if a.value]  # a list of flags, not a command (`CMD="python x.py …"`)
        megatron = any(w.startswith("--") and handler(shell._flag_name(w)) for w in known)
        if known and known[0].startswith("--") and megatron and (var.stmt_range or var.value_range):
            found.append((name, var, args))
    named = {
        m.group(1)
        for _, var, _ in found
        if var.words_range is not None
        for m in _REF.finditer(text[var.words_range[0] : var.words_range[1]])
    }
    found = [f for f in found if f[0] not in named]
    return found, [a for _, _, found_args in found for a in found_args]


def fragment_launch(text: str, env: dict, ex):
    """A script with no command of its own that keeps Megatron-LM's flags in variables for a launch script to
    `source` (Megatron-LM examples/rl/model_configs/*.sh `MODEL_OPTIONS="--num-layers 48 …"`,
    examples/post_training/modelopt/conf/<org>/<model>.sh `MODEL_ARGS=" … "`, read by `torchrun … train_rl.py
    $MODEL_OPTIONS` or `finetune.py ${MODEL_ARGS}`): read as the flags of a Megatron-LM training run when, all
    variables together, they give the model's shape and its batch as a launch does (`is_program`). Each variable's
    words keep their ranges in the file; a variable another one names (`ALL="$A $B"`) is read once."""
    from vramlens.formats import shell

    found, args = _fragment_vars(text, env, ex)
    flags = [a.text for a in args if a.text]
    if not found or not is_program("", "", "variables.py", flags):
        return None
    if any(shell_flag(f) in _HYBRID_PATTERN for f in flags):
        return None  # a hybrid Mamba model's definition (`fragment_purpose`): its layers are not transformer layers
    first, last = found[0][1], found[-1][1]
    start = (first.stmt_range or first.value_range)[0]
    end = (last.stmt_range or last.value_range)[1]
    command = shell.Command([v.word for _, v, _ in found if v.word is not None], start, end)
    return shell.Launch("megatron", command, args, {}, launcher=FRAGMENT)


# Megatron-LM's hybrid Mamba/attention layer pattern: `--hybrid-layer-pattern` (main, megatron/training/arguments.py
# `validate_args`: "hybrid_layer_pattern always overrides --num-layers") and its older spelling
# `--hybrid-override-pattern` (core_v0.13.0 … core_v0.15.0)
_HYBRID_PATTERN = ("--hybrid-layer-pattern", "--hybrid-override-pattern")


def fragment_purpose(text: str, env: dict, ex) -> tuple[str, tuple[int, int]] | None:
    """A script with no command of its own whose variables hold a hybrid Mamba model's flags (`--hidden-size`,
    `--num-attention-heads`, `--hybrid-layer-pattern`; `fragment_launch` does not take it): a model definition that
    launch scripts `source` (Megatron-LM examples/post_training/modelopt/conf/nvidia/Nemotron-H-8B-Base-8K.sh at
    main, read by `${LAUNCH_SCRIPT} … ${MODEL_ARGS}` in finetune.sh / train.sh): (what it is, its range), or None."""
    found, args = _fragment_vars(text, env, ex)
    names = {shell_flag(a.text) for a in args if a.text and a.text.startswith("--")}
    if not found or not {"--hidden-size", "--num-attention-heads"} <= names:
        return None
    ranges = [v.stmt_range or v.value_range for _, v, _ in found]
    variables_used = {
        m.group(1) for m in _REF.finditer(text) if not any(r and r[0] <= m.start() < r[1] for r in ranges)
    }
    if any(name in variables_used for name, _, _ in found):
        return None  # the file itself passes them to a command it runs: a launch not read, not a definition
    hybrid = next((f for f in _HYBRID_PATTERN if f in names), None)
    if hybrid is None:
        return None  # a transformer's flags without a run's: read when a launch script sources it
    # Mamba (M), attention (*), MLP (-) and MoE (E) layers, each its own layer (megatron/core/models/hybrid/
    # hybrid_layer_allocation.py `Symbols`), not transformer blocks
    why = f"its layers are a hybrid Mamba/attention pattern (`{hybrid}`), which vramlens does not estimate"
    variables = ", ".join(f"`{name}`" for name, _, _ in found)
    first, last = found[0][1], found[-1][1]
    start = (first.stmt_range or first.value_range)[0]
    end = (last.stmt_range or last.value_range)[1]
    what = f"a Megatron-LM model definition ({variables}) for a launch script to `source`, not a run: {why}"
    return what, (start, end)


def shell_flag(word: str) -> str:
    return word.split("=", 1)[0]
