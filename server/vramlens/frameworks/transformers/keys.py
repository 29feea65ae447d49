"""The Hugging Face key tables: `TrainingArguments` (format "hf") and TRL's configs (format "trl": `SFTConfig`/
`DPOConfig`/`GRPOConfig` + `ModelConfig`, read by `HfArgumentParser` / `trl sft --config`). One reader serves both
(`formats.hf.apply`, also Python keyword arguments and `--flag value` command lines): its dispatch is generated from
`KEYS_TRL` + `READ_ONLY`; the fixes' writer (`formats.render_yaml`) from `KEYS` / `KEYS_TRL`, and the JSON Schemas
(`formats.schemas`) from the top-level keys of `KEYS` and of `TRL_KEYS` (`frameworks.keys`).

Keys and meanings: transformers `src/transformers/training_args.py` (`TrainingArguments`), trl
`trl/trainer/sft_config.py`, `trl/trainer/model_config.py` at the versions in docs/config-sources.md.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from vramlens.formats.vocab import HF_ATTENTION
from vramlens.frameworks.keys import Key, NotHere, Table, Through
from vramlens.frameworks.transformers import readers as r
from vramlens.frameworks.transformers import writers as w
from vramlens.knowledge import optimizers

Num = Union[int, float, str]  # YAML 1.1 reads `2e-5` as text; the frameworks convert it
GE1 = {"ge": 1}
DTYPES = {"json_schema_extra": {"examples": ["bfloat16", "float16", "float32", "auto"]}}
# the objective fixes (fixes_objective) write TRL's keys in both formats
OBJECTIVE = ("precompute_ref", "vllm_memory_share", "generation", "num_generations", "completion_len", "ref_model_id")


def _training_arguments(trl: bool) -> Table:
    """`TrainingArguments`' keys; what differs between the two formats is how a fix writes the TRL-only concepts."""

    def trl_key(key: str) -> str:
        return f"`{key}` is a TRL setting; this file holds plain TrainingArguments"

    return (
        Key(
            ("per_device_train_batch_size",),
            "micro_batch",
            r._int("micro_batch", 1),
            write=True,
            after=("gradient_accumulation_steps",),
            spellings=(("per_gpu_train_batch_size",),),
            type=int,
            description="Samples per GPU per forward/backward (default 8). Activation memory grows linearly with it.",
            schema=GE1,
        ),
        Key(
            ("gradient_accumulation_steps",),
            "grad_accum",
            r._int("grad_accum", 1),
            write=True,
            after=("per_device_train_batch_size",),
            type=int,
            description="Micro-batches per optimizer step (default 1). Raises the effective batch without more "
            "activation memory.",
            schema=GE1,
        ),
        Key(
            ("per_device_eval_batch_size",),
            "eval_batch",
            r._int("eval_batch", 1),
            write=True,
            after=("per_device_train_batch_size",),
            type=int,
            description="Samples per GPU in evaluation (default 8). Evaluation can run out of memory on its own.",
            schema=GE1,
        ),
        Key(
            ("gradient_checkpointing",),
            "grad_checkpointing",
            r._bool("grad_checkpointing"),
            # FSDP's own switch wins where the file has it
            write=w.write_at(
                (
                    ("fsdp_config", "activation_checkpointing"),
                    ("fsdp_config", "fsdp_activation_checkpointing"),
                    "gradient_checkpointing",
                ),
                after=("gradient_accumulation_steps",),
            ),
            # transformers 5 names it `activation_checkpointing` (training_args.py: `gradient_checkpointing*` are
            # deprecated aliases, used when the new name is not set)
            spellings=(("activation_checkpointing",),),
            type=bool,
            description="Recompute activations in backward (default false): activation memory drops from all layers "
            "to about one.",
        ),
        Key(
            ("gradient_checkpointing_kwargs",),
            "ckpt_reentrant",
            section=r._ckpt_kwargs,
            spellings=(("activation_checkpointing_kwargs",),),
            type=dict,
            description="Options of checkpointing, e.g. `{use_reentrant: false}`; transformers 5 also takes "
            "`every_n_layers` (checkpoint every n-th layer) and `offload` (checkpointed inputs in host memory).",
        ),
        Key(
            ("gradient_checkpointing_kwargs", "use_reentrant"),
            "ckpt_reentrant",
            write=True,
            after=("gradient_checkpointing",),
            type=bool,
        ),
        Key(
            ("bf16",),
            "amp_dtype",
            r._amp("bf16"),
            write=w.amp(trl),
            type=Union[bool, Literal["auto"]],
            description="bf16 mixed precision (default false; TRL: true unless fp16). With fp32 weights, adds a bf16 "
            "working copy of activations; halves activation memory against fp32.",
        ),
        Key(
            ("fp16",),
            "amp_dtype",
            r._amp("fp16"),
            type=bool,
            description="fp16 mixed precision (default false). Activations in fp16, weights stay fp32.",
        ),
        Key(
            ("optim",),
            "optimizer",
            r._optim,
            write=True,
            after=("learning_rate", "lr_scheduler_type"),
            type=str,
            description="Optimizer (default adamw_torch_fused). AdamW keeps 8 bytes of state per fp32 parameter; "
            "8-bit variants (adamw_bnb_8bit, paged_adamw_8bit) about 2; paged ones can spill to CPU memory.",
            schema={"json_schema_extra": {"examples": list(optimizers.hf_names())}},
        ),
        Through("optimizer_impl", w.optimizer_impl),
        Key(
            ("torch_compile",),
            "compile",
            r._bool("compile"),
            write=True,
            after=("gradient_checkpointing",),
            type=bool,
            description="torch.compile the model (default false): usually less activation memory, with a "
            "compile-time peak.",
        ),
        Key(
            ("use_liger_kernel",),
            "loss_impl",
            r._liger,
            write=w.loss(trl),
            type=bool,
            description="Liger kernels incl. fused linear cross-entropy: no full "
            "[tokens × vocabulary] logits tensor — often the largest activation; Liger's RMSNorm saves its input "
            "and 1/rms (no fp32 copy), its SwiGLU the gate's and up's outputs (no act(gate)).",
        ),
        Key(
            ("deepspeed",),
            section=r._deepspeed,
            type=Union[str, dict],
            description="DeepSpeed config (path or inline): ZeRO shards optimizer states, "
            "gradients and (stage 3) weights across GPUs; offload moves them to CPU.",
        ),
        Key(
            ("fsdp",),
            read=r._fsdp,
            type=Union[str, list, bool],
            description="FSDP options (`full_shard auto_wrap`, `shard_grad_op`, `offload`): shards weights, "
            "gradients and optimizer states across GPUs.",
        ),
        Key(
            ("fsdp_config",),
            section=r._fsdp_config,
            type=dict,
            description="FSDP settings (`offload_params`, `activation_checkpointing`, "
            "`state_dict_type`; FULL_STATE_DICT gathers the whole model to save).",
        ),
        # transformers strips `fsdp_` from fsdp_config keys: both spellings mean the same (readers.fsdp_config_entry)
        Key(
            ("fsdp_config", "state_dict_type"),
            "fsdp_state_dict_type",
            write=True,
            spellings=(("fsdp_config", "fsdp_state_dict_type"),),
            type=str,
        ),
        Key(
            ("torch_dtype",),
            "weight_dtype",
            r._dtype,
            write=w.weight_dtype if trl else False,
            type=str,
            description="dtype the weights are loaded in (renamed `dtype`): float32 takes 4 bytes per parameter, "
            "bfloat16 2.",
            schema=DTYPES,
        ),
        Key(
            ("attn_implementation",),
            "attn_impl",
            r._attn,
            write=trl,
            after=("torch_dtype", "dtype", "model_name_or_path"),
            type=str,
            description="Attention kernel: `eager` materialises [batch, heads, seq, seq] scores; "
            "sdpa/flash_attention_2 are O(seq).",
            schema={"json_schema_extra": {"examples": list(HF_ATTENTION)}},
        ),
        # written through other keys, or (plain TrainingArguments) in the training script
        Through("seq_len", w.seq(trl)),
        Through("alloc_conf", w.alloc(trl)),
        Through("peft_method", w.peft(trl)),
        Through("quant_bits", w.quant(trl)),
        *(Through(concept, w.objective(concept)) for concept in OBJECTIVE),
        # the 4-bit compute dtype is `BitsAndBytesConfig`'s, set where the model is loaded
        NotHere("quant_compute_dtype"),
        *(
            ()
            if trl
            else (
                NotHere("weight_dtype", "the weights' dtype is set where the model is loaded"),
                NotHere("attn_impl", trl_key("attn_implementation")),
                NotHere("packing", trl_key("packing")),
                NotHere("activation_offload", trl_key("activation_offloading")),
                NotHere("lora_r", trl_key("lora_r")),
                NotHere("lora_alpha", trl_key("lora_alpha")),
                NotHere("lora_dropout", trl_key("lora_dropout")),
                NotHere("lora_targets", "LoRA target modules are set in the training script"),
            )
        ),
    )


# TRL's own keys (SFTConfig, DPOConfig, GRPOConfig, ModelConfig), on top of TrainingArguments'
TRL_KEYS: Table = (
    Key(
        ("model_name_or_path",),
        "model_id",
        r._model,
        type=str,
        description="The model: parameter count, layers, hidden size and vocabulary set every memory term.",
    ),
    Key(
        ("dtype",),
        "weight_dtype",
        r._dtype,
        type=str,
        description="dtype of the loaded weights (TRL ModelConfig; old name `torch_dtype`).",
        schema=DTYPES,
    ),
    Key(
        ("max_length",),
        "seq_len",
        r._seq,
        type=int,
        description="Maximum tokens per sample (default 1024; `max_seq_length` before TRL 0.16). "
        "Activations grow linearly with it, eager attention quadratically.",
        schema=GE1,
    ),
    Key(
        ("max_seq_length",),
        "seq_len",
        r._seq,
        type=int,
        description="Old name of `max_length` (removed in TRL 0.20).",
        schema=GE1,
    ),
    Key(
        ("packing",),
        "packing",
        r._bool("packing"),
        write=True,
        after=("max_length", "max_seq_length"),
        type=bool,
        description="Pack samples into full-length rows: every row costs the maximum length.",
    ),
    Key(
        ("padding_free",),
        "packing",
        r._bool("packing"),
        type=bool,
        description="Drop padding (with packing): no memory on pad tokens.",
    ),
    Key(
        ("activation_offloading",),
        "activation_offload",
        r._bool("activation_offload"),
        write=True,
        after=("gradient_checkpointing",),
        type=bool,
        description="Move saved activations to CPU memory during the step.",
    ),
    Key(
        ("loss_type",),
        "loss_impl",
        r._loss_type,
        type=str,
        description="SFT loss; `chunked_nll` (default since TRL 1.7) never holds the full logits tensor.",
    ),
    Key(
        ("use_peft",),
        "peft_method",
        r._use_peft,
        type=bool,
        description="Train LoRA adapters: gradients and optimizer states only for the adapters.",
    ),
    Key(
        ("lora_r",),
        "lora_r",
        r._int("lora_r", 1),
        write=True,
        after=("use_peft",),
        type=int,
        description="LoRA rank (default 16): adapter parameters grow linearly with it.",
        schema=GE1,
    ),
    Key(
        ("lora_alpha",),
        "lora_alpha",
        r._float("lora_alpha"),
        write=True,
        after=("lora_r",),
        type=Num,
        description="LoRA scaling (default 32). No memory effect.",
    ),
    Key(
        ("lora_dropout",),
        "lora_dropout",
        r._float("lora_dropout"),
        write=True,
        after=("lora_alpha",),
        type=Num,
        description="LoRA dropout (default 0.05): > 0 keeps an extra copy of each adapted input.",
    ),
    Key(
        ("lora_target_modules",),
        "lora_targets",
        r._targets_handler("lora_targets"),
        write=True,
        convert=w.targets_text,
        after=("lora_dropout", "lora_alpha", "lora_r"),
        type=Union[list, str],
        description="Layers that get adapters (`all-linear` = every linear layer).",
    ),
    Key(
        ("lora_modules_to_save",),
        "modules_to_save",
        r._targets_handler("modules_to_save"),
        type=list,
        description="Modules trained in full next to the adapters (embeddings, lm_head can be large).",
    ),
    Key(
        ("load_in_4bit",),
        "quant_bits",
        r._load_in(4),
        type=bool,
        description="Load the base model in 4-bit (NF4): about 0.5 byte per parameter.",
    ),
    Key(
        ("load_in_8bit",),
        "quant_bits",
        r._load_in(8),
        type=bool,
        description="Load the base model in 8-bit: about 1 byte per parameter.",
    ),
    Key(
        ("bnb_4bit_quant_type",),
        "quant_type",
        r._quant_type,
        type=Literal["nf4", "fp4"],
        description="4-bit data type (default nf4).",
    ),
    Key(
        ("use_bnb_nested_quant",),
        "quant_double",
        r._bool("quant_double"),
        type=bool,
        description="Double quantization of the 4-bit scales: saves ~0.4 bit per parameter.",
    ),
    Key(
        ("env",),
        "alloc_conf",
        section=r._env,
        type=dict[str, str],
        description="Environment variables set before training, e.g. "
        "`PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True` against fragmentation.",
    ),
)

KEYS: Table = _training_arguments(trl=False)
KEYS_TRL: Table = _training_arguments(trl=True) + TRL_KEYS


def _read(name: str, reader: Any, concept: str | None = None) -> Key:
    return Key((name,), concept, reader)


# Keys the one reader also reads that neither schema describes: the spellings of the scripts and libraries that pass
# their arguments on to TrainingArguments / PEFT / bitsandbytes (transformers examples' `model_max_length`,
# `block_size`; ms-swift, LMFlow, axolotl), and arguments with no memory of their own to describe.
READ_ONLY: Table = (
    _read("task_type", r._task_type, "task_head"),
    _read("lora_task_type", r._task_type, "task_head"),
    _read("num_labels", r._num_labels, "task_head"),
    _read("problem_type", r._problem_type, "task_head"),
    _read("optim_target_modules", r._targets_handler("optimizer_targets")),
    _read("optim_args", r._optim_args),
    _read("lisa_activated_layers", r._lisa_layers, "peft_method"),
    _read("lisa_n_layers", r._lisa_layers, "peft_method"),
    *(
        _read(k, r._model, "model_id")
        for k in ("model_name", "model_id", "base_model", "pretrained_model_name_or_path")
    ),
    _read("block_size", r._block_size, "seq_len"),
    *(_read(k, r._seq, "seq_len") for k in ("model_max_length", "max_seq_len", "seq_length")),
    _read("use_flash_attention_2", r._flash2, "attn_impl"),
    _read("trust_remote_code", r._bool("trust_remote_code"), "trust_remote_code"),
    _read("torch_compile_mode", r._compile_mode, "compile"),
    _read("torch_compile_backend", r._compile_mode, "compile"),
    _read("use_dora", r._dora, "peft_method"),
    # peft IA3Config `feedforward_modules` and VeraConfig `r`/`vera_dropout` (ms-swift: `ia3_feedforward_modules`,
    # `vera_rank`, `vera_dropout`, swift/llm/argument/tuner_args.py)
    _read("ia3_feedforward_modules", r._targets_handler("feedforward_targets")),
    _read("vera_rank", r._int("lora_r", 1), "lora_r"),
    _read("vera_dropout", r._float("lora_dropout"), "lora_dropout"),
    _read("bnb_4bit_use_double_quant", r._bool("quant_double"), "quant_double"),
    _read("bnb_4bit_quant_storage", r._quant_storage),
    _read("bnb_4bit_compute_dtype", r._quant_compute),
    _read("use_liger", r._liger, "loss_impl"),
    Key(("model_init_kwargs",), section=r._model_init_kwargs),
    Key(("teacher_model_init_kwargs",), section=r._teacher_init_kwargs),
)
