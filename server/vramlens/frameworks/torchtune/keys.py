"""The torchtune key table: every key the reader reads, with how a fix writes its concept and what its JSON Schema
says. The reader's dispatch (`dialect.apply`, in table order), the fixes' writer (`formats.render_yaml`) and the
schema (`formats.schemas`) are generated from it (`frameworks.keys`).

Keys and meanings: the recipes' `cfg.get(...)`/`cfg.<key>` reads in torchtune `recipes/*.py` and the packaged configs
`recipes/configs/` at torchtune bd2a0fc7 (docs/config-sources.md). A section (`model:`, `optimizer:`, `loss:`) is a
`_component_` with its keyword arguments: its reader reads the nested keys; the nested keys in the table are there
for their writers.
"""

from __future__ import annotations

from typing import Literal, Union

from vramlens.frameworks.keys import ALLOC_NOTE, Key, NotHere, Table, Through, flag, not_here, whole
from vramlens.frameworks.torchtune import readers as r
from vramlens.frameworks.torchtune import writers as w

GE1 = {"ge": 1}


def _kept(name: str, type_: object, description: str) -> Key:
    """A key kept for hovers (and read by the FSDP reader where it says so)."""
    return Key((name,), type=type_, description=description)


KEYS: Table = (
    Key(
        ("model",),
        "model_id",
        section=r.model,
        spellings=(("policy_model",), ("student_model",)),
        type=dict,
        description="`_component_` builder, e.g. torchtune.models.llama3_1.qlora_llama3_1_8b: size, "
        "LoRA (`lora_`) or QLoRA (`qlora_`, NF4 base) are in the name; `lora_rank`, "
        "`lora_attn_modules`, `apply_lora_to_mlp` set the adapters.",
    ),
    Through("peft_method", w.peft),
    Through("quant_bits", w.quant),
    Through("lora_targets", w.targets),
    Key(("model", "lora_rank"), "lora_r", write=True, after=("lora_attn_modules",)),
    Key(("model", "lora_alpha"), "lora_alpha", write=True, after=("lora_rank",)),
    Key(("model", "lora_dropout"), "lora_dropout", write=True, after=("lora_alpha",)),
    Key(
        ("batch_size",),
        "micro_batch",
        section=r.batch("micro_batch"),
        write=True,
        after=("shuffle", "seed"),
        type=int,
        description="Samples per GPU per step: activations grow linearly.",
        schema=GE1,
    ),
    Key(
        ("gradient_accumulation_steps",),
        "grad_accum",
        section=r.batch("grad_accum"),
        write=True,
        after=("max_steps_per_epoch", "epochs"),
        type=int,
        description="Micro-batches per optimizer step.",
        schema=GE1,
    ),
    Key(
        ("batch_size_val",),
        "eval_batch",
        section=r.batch("eval_batch"),
        write=True,
        after=("batch_size",),
        type=Union[int, str],  # the packaged configs write `${batch_size}`
        description="Samples per GPU per validation step (torchtune 0.6+ full_finetune recipes).",
    ),
    Key(
        ("tokenizer",),
        "seq_len",
        section=r.tokenizer,
        type=dict,
        description="`max_seq_len` bounds the sequence; null = the longest sample decides.",
    ),
    Key(("tokenizer", "max_seq_len"), "seq_len", write=True, after=("path",)),
    Key(
        ("dataset",),
        "packing",
        section=r.dataset,
        type=dict,
        description="`packed: True` fills every row to max_seq_len.",
    ),
    Key(("dataset", "packed"), "packing", write=True, after=("_component_",)),
    Key(
        ("enable_activation_checkpointing",),
        "grad_checkpointing",
        flag("grad_checkpointing"),
        write=True,
        after=("dtype", "device"),
        type=bool,
        description="Recompute activations (recipe default False).",
    ),
    Key(
        ("enable_activation_offloading",),
        "activation_offload",
        flag("activation_offload"),
        write=True,
        after=("enable_activation_checkpointing",),
        type=bool,
        description="Move saved activations to CPU (needs checkpointing).",
    ),
    Key(
        ("optimizer_in_bwd",),
        "optimizer_in_bwd",
        flag("optimizer_in_bwd"),
        write=True,
        after=("compile", "gradient_accumulation_steps"),
        type=bool,
        description="Step each parameter in backward: no full gradient buffer.",
    ),
    Key(
        ("compile",),
        "compile",
        r.compile_,
        write=True,
        after=("gradient_accumulation_steps",),
        type=Union[bool, dict],
        description="torch.compile model and loss.",
    ),
    Key(
        ("dtype",),
        "weight_dtype",
        r.dtype,
        write=w.dtype,
        type=Literal["bf16", "fp32"],
        description="Training dtype (no autocast): weights, grads and states.",
    ),
    NotHere("amp_dtype", "torchtune does not autocast; it trains in `dtype`"),
    Key(
        ("optimizer",),
        "optimizer",
        section=r.optimizer,
        write=w.optimizer,
        type=dict,
        description="`_component_` optimizer class: torch.optim.AdamW (fused: True) keeps 2 states "
        "per parameter; bitsandbytes.optim.PagedAdamW8bit ~2 bytes.",
    ),
    Through("optimizer_impl", w.optimizer_impl),
    Key(
        ("loss",),
        "loss_impl",
        section=r.loss,
        write=w.loss,
        type=dict,
        description="`_component_` loss; LinearCrossEntropyLoss never materialises the full logits.",
    ),
    Key(
        ("quantizer",),
        "qat",
        section=r.quantizer,
        type=dict,
        description="`_component_` QAT quantizer (torchao fake quantization, e.g. "
        "torchtune.training.quantization.Int8DynActInt4WeightQATQuantizer): each linear keeps rounded copies of its "
        "weight and input for the backward.",
    ),
    Key(
        ("tensor_parallel_dim",),
        "tensor_parallel",
        whole("tensor_parallel"),
        type=int,
        description="Tensor-parallel degree: weights divide by it.",
        schema=GE1,
    ),
    Key(
        ("context_parallel_dim",),
        "context_parallel",
        whole("context_parallel"),
        type=int,
        description="Context-parallel degree: the sequence divides by it (torchtune 0.6+ distributed recipes).",
        schema=GE1,
    ),
    Key(
        ("fsdp_cpu_offload",),
        "offload_params",
        r.fsdp_cpu_offload,
        type=bool,
        description="Offload parameters and the optimizer step to CPU (distributed recipes).",
    ),
    _kept("ac_mode", str, "Selective activation checkpointing mode (`selective`), with `ac_option`."),
    _kept("ac_option", Union[int, str], "Checkpoint every n-th layer (or `op`) in selective mode."),
    _kept("custom_sharded_layers", list, "Modules FSDP shards as their own units (e.g. the embedding, the output)."),
    _kept("data_parallel_shard_dim", int, "GPUs FSDP shards over (-1: all that are left)."),
    _kept("data_parallel_replicate_dim", int, "Replicas of the sharded model (HSDP)."),
    _kept(
        "fsdp_reshard_after_forward",
        bool,
        "Free the gathered parameters after forward (ZeRO-3 like; False: ZeRO-2 like, more memory).",
    ),
    _kept("memory_efficient_fsdp_wrap", bool, "Wrap the token embedding and output projection separately."),
    NotHere("alloc_conf", ALLOC_NOTE),
    # no config key for these: the recipes choose the attention (SDPA/flex), checkpoint non-reentrant and save
    # through the checkpointer (torchtune training/_activation_checkpointing.py, training/checkpointing/); the RLHF
    # recipes' generation keys are their own (`grpo_samples`, `max_generated_tokens`), not TRL's
    *not_here(
        "attn_impl",
        "ckpt_reentrant",
        "fsdp_state_dict_type",
        "quant_compute_dtype",
        "generation",
        "num_generations",
        "completion_len",
        "precompute_ref",
        "ref_model_id",
        "vllm_memory_share",
    ),
)
