"""The Hugging Face dialect: `TrainingArguments`, TRL `SFTConfig`/`DPOConfig`/`GRPOConfig` and TRL
`ModelConfig` keys, as they appear in YAML (HfArgumentParser / `trl sft --config`), in Python
keyword arguments and in `--flag value` command lines. One table serves all three.

`apply(builder, settings)` reads the top-level settings; dict-valued arguments (`fsdp_config`,
`model_init_kwargs`, `gradient_checkpointing_kwargs`, `env`, an inline `deepspeed`) are read from
their nested entries when the reader produced them (YAML: exact spans), else from the dict value.
"""

from __future__ import annotations

import re
from typing import Callable

from vramlens.formats.settings import PlanBuilder, Setting, is_auto, to_bool, to_int
from vramlens.formats.vocab import HF_ATTENTION, check_optimizer
from vramlens.plan import IssueKind, Origin, Severity

# Keys that only TrainingArguments (or its TRL subclasses) define; used to recognise the dialect.
TRAINING_ARGUMENT_KEYS = frozenset(
    {
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "num_train_epochs",
        "max_steps",
        "output_dir",
        "optim",
        "lr_scheduler_type",
        "warmup_ratio",
        "warmup_steps",
        "logging_steps",
        "save_steps",
        "save_strategy",
        "eval_strategy",
        "evaluation_strategy",
        "gradient_checkpointing",
        "bf16",
        "fp16",
        "tf32",
        "deepspeed",
        "fsdp",
        "fsdp_config",
        "torch_compile",
        "use_liger_kernel",
        "report_to",
        "seed",
        "weight_decay",
        "max_grad_norm",
        "dataloader_num_workers",
        "remove_unused_columns",
        "do_train",
        "do_eval",
        "gradient_checkpointing_kwargs",
        "logging_strategy",
        "push_to_hub",
        "hub_model_id",
        "save_total_limit",
        "overwrite_output_dir",
        "log_level",
        "eval_steps",
        "per_gpu_train_batch_size",
        "run_name",
    }
)
TRL_KEYS = frozenset(
    {
        "use_peft",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
        "lora_modules_to_save",
        "load_in_4bit",
        "load_in_8bit",
        "bnb_4bit_quant_type",
        "use_bnb_nested_quant",
        "max_seq_length",
        "max_length",
        "packing",
        "padding_free",
        "dataset_text_field",
        "dataset_name",
        "dataset_mixer",
        "dataset_mixture",
        "model_init_kwargs",
        "beta",
        "max_prompt_length",
        "num_generations",
        "activation_offloading",
        "loss_type",
        "completion_only_loss",
        "assistant_only_loss",
        "use_dora",
        "use_rslora",
        "packing_strategy",
        "dataset_num_proc",
        "max_completion_length",
        "use_vllm",
        "env",
        "precompute_ref_log_probs",
        "vllm_mode",
        "vllm_gpu_memory_utilization",
        "teacher_model_name_or_path",
        "reward_funcs",
        "ref_model_init_kwargs",
        "rpo_alpha",
        "dpo_beta",
        "dpo_loss_type",
        "dataset_kwargs",
    }
)
MODEL_KEYS = ("model_name_or_path", "model_name", "model_id", "base_model", "pretrained_model_name_or_path")

DTYPE_WORDS = {
    "float32": "fp32",
    "fp32": "fp32",
    "torch.float32": "fp32",
    "float": "fp32",
    "32": "fp32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "torch.bfloat16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "16": "fp16",
    "float8": "fp8",
    "fp8": "fp8",
    "auto": "auto",
}

ATTN_WORDS = {
    "eager": "eager",
    "sdpa": "sdpa",
    "sdp": "sdpa",
    "flash_attention_2": "flash_attention_2",
    "flash_attn": "flash_attention_2",
    "fa2": "flash_attention_2",
    "flash": "flash_attention_2",
    "flash_attention_3": "flash_attention_3",
    "fa3": "flash_attention_3",
    "flex_attention": "flex_attention",
    "flex": "flex_attention",
    "xformers": "xformers",
    "kernels-community/flash-attn2": "flash_attention_2",
    "kernels-community/flash-attn3": "flash_attention_3",
    "kernels-community/vllm-flash-attn3": "flash_attention_3",
}

FSDP_WORDS = {"full_shard": 3, "shard_grad_op": 2, "hybrid_shard": 3, "hybrid_shard_zero2": 2, "no_shard": 0}
# accelerate's fsdp_sharding_strategy also takes the enum's integer (1..5)
FSDP_STRATEGIES = {
    "FULL_SHARD": 3,
    "SHARD_GRAD_OP": 2,
    "NO_SHARD": 0,
    "HYBRID_SHARD": 3,
    "HYBRID_SHARD_ZERO2": 2,
    "1": 3,
    "2": 2,
    "3": 0,
    "4": 3,
    "5": 2,
}

# old spelling -> new spelling: when both are present the new one is what current versions read
RENAMED = {
    "max_seq_length": "max_length",  # TRL 0.16 renamed, 0.20 removed
    "torch_dtype": "dtype",  # transformers 4.56 / TRL 0.23
    "evaluation_strategy": "eval_strategy",
    "use_flash_attention_2": "attn_implementation",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
}


def normalize_dtype(value) -> str | None:
    if value is None:
        return None
    return DTYPE_WORDS.get(str(value).strip().lower())


def normalize_attn(value) -> str | None:
    if value is None:
        return None
    w = str(value).strip()
    return ATTN_WORDS.get(w.lower(), "other" if "/" in w else None)


_PREQUANTIZED = re.compile(r"(?i)(?:^|[-_./])(gptq|awq|aqlm|bnb[-_]4bit|bnb[-_]nf4|4bit)(?:$|[-_.])")


def prequantized(model_id: str) -> tuple[int, str] | None:
    """(bits, method) for a hub id that names a pre-quantized checkpoint (`...-GPTQ`, `...-AWQ`,
    `...-bnb-4bit`): such weights load quantized without any quantization key in the config."""
    m = _PREQUANTIZED.search(model_id or "")
    if not m:
        return None
    word = m.group(1).lower().replace("-", "_")
    method = {"gptq": "gptq", "awq": "awq", "aqlm": "aqlm"}.get(word, "nf4")
    return (2 if method == "aqlm" else 4), method


def _targets(value) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip().strip("'\"") for p in value.strip("[]").replace(";", ",").split(",")]
        parts = [p for p in parts if p]
        if len(parts) == 1 and parts[0].lower() in ("all", "all-linear", "all_linear"):
            return ["all-linear"]
        return parts
    if isinstance(value, (list, tuple)):
        # module names only: PEFT's `target_modules` is a name or a list of names (peft 0.21.2 `LoraConfig`), so a
        # nested list or mapping is not one (and is never turned into text: an alias can make it huge)
        names = (str(v).strip() for v in value if isinstance(v, (str, int, float)))
        return [n for n in names if n]
    return None


def _as_dict(value, b: PlanBuilder | None = None, s: Setting | None = None) -> dict | None:
    """Dict-valued arguments also come as JSON text (`--fsdp_config '{"...": ...}'`), which transformers reads
    with `json.loads` (transformers 5.24 `TrainingArguments.__post_init__`, `_VALID_DICT_FIELDS`). Read with the
    bounded loader (`formats.yaml_doc.load_value`); text it does not read is not read here either, and with a
    builder a VL015 on the setting says why."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        from vramlens.formats.yaml_doc import YamlError, load_value

        try:
            d = load_value(value, json=True)
        except YamlError as exc:
            if b is not None and s is not None:
                b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` is not read: {exc}", s)
            return None
        return d if isinstance(d, dict) else None
    return None


def kids(s: Setting, nested: dict[str, list[Setting]] | None, b: PlanBuilder | None = None) -> list[Setting]:
    """The entries of a dict-valued setting: real nested entries when the reader made them, else
    entries synthesized from the dict (pointing at the whole argument). With a builder, JSON text that is not
    read gets a VL015 (`_as_dict`)."""
    if nested is not None and s.key in nested and isinstance(s.value, dict):
        return nested[s.key]
    d = _as_dict(s.value, b, s)
    return [s.child(k, v) for k, v in d.items()] if d else []


# --- handlers: (builder, setting) -> None ------------------------------------------------------


def _model(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        b.set("model_id", s.value.strip(), s)


def _dtype(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    d = normalize_dtype(s.value)
    if d is None:
        return b.unknown(s, "dtype", ("bfloat16", "float16", "float32", "auto"))
    b.set("weight_dtype", d, s)


def _amp(dtype: str) -> Callable[[PlanBuilder, Setting], None]:
    def handler(b: PlanBuilder, s: Setting) -> None:
        if s.value is None:
            return
        v = to_bool(s.value)
        if v is None:
            if is_auto(s.value):
                return b.set("amp_dtype", dtype, s, note=f"`{s.key}: auto` → {dtype} where the GPU supports it")
            if str(s.value).strip().lower() == "full":  # axolotl: bf16 also for eval
                return b.set("amp_dtype", dtype, s, note=f"`{s.key}: full` → {dtype}, also in evaluation")
            return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be true or false, got {s.value!r}", s)
        if v:
            if b.plan.amp_dtype is not None and b.plan.amp_dtype.value not in ("none", dtype):
                b.issue(
                    IssueKind.PRECISION_CONFLICT,
                    f"both `{b.plan.amp_dtype.key}` and `{s.key}` are on: a run fails with both fp16 and bf16",
                    s,
                    severity=Severity.ERROR,
                )
            b.set("amp_dtype", dtype, s, override=b.plan.amp_dtype is not None and b.plan.amp_dtype.value == "none")
        elif b.plan.amp_dtype is None:
            b.set("amp_dtype", "none", s)

    return handler


def _seq(b: PlanBuilder, s: Setting) -> None:
    b.set_int("seq_len", s, minimum=1)


def _block_size(b: PlanBuilder, s: Setting) -> None:
    """`block_size` (transformers examples/pytorch/language-modeling/run_clm.py): `group_texts` concatenates the
    tokenized dataset and cuts it into blocks of this length, so every sequence is full and none is padded."""
    if b.set_int("seq_len", s, minimum=1) is not None:
        b.set(
            "packing",
            True,
            s,
            origin=Origin.DERIVED,
            note="run_clm.py's group_texts cuts the concatenated texts into full blocks: no padding",
        )


def _attn(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip()
    if w in HF_ATTENTION:
        return b.set("attn_impl", w, s)
    a = normalize_attn(w)
    if a == "other" or (a is not None and "/" in w):
        return b.set("attn_impl", a, s, note=f"hub kernel `{w}`")
    if a is not None:  # a short form transformers rejects
        b.unknown(s, "attention implementation", suggestion=a if a in HF_ATTENTION else None)
        return b.set("attn_impl", a, s)
    b.unknown(s, "attention implementation", HF_ATTENTION)


def _flash2(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("attn_impl", "flash_attention_2", s)


def _use_peft(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    v = to_bool(s.value)
    if v is None:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be true or false, got {s.value!r}", s)
    b.set("peft_method", "lora" if v else "none", s)


def _dora(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("peft_method", "dora", s, override=True)


def _targets_handler(concept: str) -> Callable[[PlanBuilder, Setting], None]:
    def handler(b: PlanBuilder, s: Setting) -> None:
        t = _targets(s.value)
        if t:
            b.set(concept, t, s)

    return handler


def _load_in(bits: int) -> Callable[[PlanBuilder, Setting], None]:
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value):
            b.set("quant_bits", bits, s)
            b.set("quant_type", "nf4" if bits == 4 else "int8", s)

    return handler


def _quant_type(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        t = s.value.strip().lower()
        if t not in ("nf4", "fp4"):
            return b.unknown(s, "4-bit quantization type", ("nf4", "fp4"))
        b.set("quant_type", t, s, override=True)


def _quant_storage(b: PlanBuilder, s: Setting) -> None:
    d = normalize_dtype(s.value)
    if d:
        b.set("quant_storage_dtype", d, s)


def _quant_compute(b: PlanBuilder, s: Setting) -> None:
    d = normalize_dtype(s.value)
    if d:
        b.set("quant_compute_dtype", d, s)


def _optim(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        check_optimizer(b, s)
        b.set("optimizer", s.value.strip(), s)
    elif s.value not in (None, "") and not isinstance(s.value, str):
        check_optimizer(b, s)  # a number or a list where a name goes: VL015, not silence


def _deepspeed(b: PlanBuilder, s: Setting, nested=None) -> None:
    if s.value in (None, "", False):
        return
    b.set("dist_strategy", "deepspeed", s)
    d = _as_dict(s.value, b, s)
    if d is not None:
        from vramlens.formats import deepspeed

        entries = [x for x in (nested or {}).get("__all__", []) if x.path[:1] == (s.key,) and len(x.path) > 1]
        if entries and isinstance(s.value, dict):
            deepspeed.apply(b, entries, prefix=(s.key,))
        else:
            b.inline_deepspeed(d, s)
    elif isinstance(s.value, str):
        b.reference("deepspeed", s.value.strip(), s)


def _fsdp(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v in (None, "", False, []):
        return
    words = v.split() if isinstance(v, str) else [str(x) for x in v] if isinstance(v, (list, tuple)) else []
    words = [w.strip().lower() for w in words]
    if not words or words == ["false"]:
        return
    b.set("dist_strategy", "fsdp", s)
    for w in words:
        if w in FSDP_WORDS:
            b.set("zero_stage", FSDP_WORDS[w], s)
        elif w == "offload":
            b.set("offload_params", True, s)
            b.set("offload_optimizer", True, s)
        elif w not in ("auto_wrap", "true"):
            b.unknown(
                s,
                "FSDP option",
                suggestion=None,
                hint="expected full_shard, shard_grad_op, hybrid_shard, "
                "hybrid_shard_zero2, no_shard, offload, auto_wrap",
            )
    if b.plan.zero_stage is None and not any(w in FSDP_WORDS for w in words):
        b.set("zero_stage", 3, s, note="`fsdp` without a sharding strategy → FULL_SHARD")


def fsdp_config_entry(b: PlanBuilder, e: Setting) -> bool:
    """One `fsdp_config` entry (HF, axolotl and accelerate spell them with or without `fsdp_`)."""
    key = str(e.key).removeprefix("fsdp_")
    v = e.value
    if v is None:
        return True
    if key in ("offload_params", "cpu_offload"):
        on = to_bool(v)
        if on is not None:
            b.set("offload_params", on, e)
            b.set(
                "offload_optimizer",
                on,
                e,
                note="FSDP CPU offload also runs the optimizer step on the CPU" if on else None,
            )
        return True
    if key == "state_dict_type" and isinstance(v, str):
        b.set("fsdp_state_dict_type", v.strip().upper(), e)
        return True
    if key == "activation_checkpointing":
        b.set_bool("grad_checkpointing", e)
        if to_bool(v):
            # accelerate applies it with torch's non-reentrant wrapper inside each unit (accelerator.py
            # `prepare_model`: `checkpoint_wrapper(..., checkpoint_impl=CheckpointImpl.NO_REENTRANT)`)
            b.set("ckpt_reentrant", False, e, note="FSDP's activation checkpointing is non-reentrant")
        return True
    if key == "sharding_strategy":
        stage = FSDP_STRATEGIES.get(str(v).strip().upper())
        if stage is None:
            b.unknown(e, "FSDP sharding strategy", [k for k in FSDP_STRATEGIES if not k.isdigit()])
        else:
            b.set("zero_stage", stage, e, override=True)
            b.set("dist_strategy", "fsdp", e)
        return True
    if key == "reshard_after_forward":
        flag = to_bool(v)
        if flag is not None:
            b.set(
                "zero_stage",
                3 if flag else 2,
                e,
                override=True,
                note="reshard_after_forward " + ("on → FULL_SHARD-like" if flag else "off → SHARD_GRAD_OP-like"),
            )
        elif str(v).strip().upper() in FSDP_STRATEGIES:
            b.set("zero_stage", FSDP_STRATEGIES[str(v).strip().upper()], e, override=True)
        b.set("dist_strategy", "fsdp", e)
        return True
    if key == "version":
        b.set("dist_strategy", "fsdp", e)
        if str(v).strip() in ("1", "2"):
            b.set("fsdp_version", int(str(v).strip()), e)
        else:
            b.remember(e)
        return True
    return False


def _fsdp_config(b: PlanBuilder, s: Setting, nested=None) -> None:
    for e in kids(s, nested, b):
        if not fsdp_config_entry(b, e) and nested is not None:
            b.remember(e)


def _ckpt_kwargs(b: PlanBuilder, s: Setting, nested=None) -> None:
    for e in kids(s, nested, b):
        if e.key == "use_reentrant":
            b.set_bool("ckpt_reentrant", e)


def _liger(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "fused", s, note="Liger fused linear cross-entropy")
        # transformers trainer.py (`use_liger_kernel`): `_apply_liger_kernel_to_instance` also swaps RMSNorm, RoPE
        # and SwiGLU for Liger's kernels (liger_kernel/transformers/monkey_patch.py), which save other activations:
        # their speed is modelled (estimate/throughput.py `elementwise_bytes`), their memory is not
        b.set("fused_kernels", ["rms_norm", "rope", "swiglu"], s, note="Liger's RMSNorm, RoPE and SwiGLU kernels")
        b.unmodelled(
            s,
            "the memory of Liger's RMSNorm, RoPE and SwiGLU kernels (what they save for backward)",
            "estimated with transformers' layers' memory (their run time and the fused linear cross-entropy "
            "are modelled)",
        )


def _loss_type(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and "chunk" in s.value.lower():
        b.set("loss_impl", "chunked", s)
    elif isinstance(s.value, str) and s.value.strip().lower() == "nll":
        b.set("loss_impl", "standard", s)


def _model_init_kwargs(b: PlanBuilder, s: Setting, nested=None) -> None:
    for e in kids(s, nested, b):
        if e.key in ("dtype", "torch_dtype"):
            _dtype(b, e)
        elif e.key == "attn_implementation":
            _attn(b, e)
        elif e.key in ("load_in_4bit", "load_in_8bit"):
            _load_in(4 if e.key == "load_in_4bit" else 8)(b, e)


def _env(b: PlanBuilder, s: Setting, nested=None) -> None:
    for e in kids(s, nested, b):
        if str(e.key) in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF") and e.value is not None:
            b.set("alloc_conf", str(e.value), e)


def _int(concept: str, minimum: int = 0):
    return lambda b, s: b.set_int(concept, s, minimum=minimum)


def _bool(concept: str, invert: bool = False):
    return lambda b, s: b.set_bool(concept, s, invert=invert)


def _float(concept: str):
    return lambda b, s: b.set_float(concept, s)


def _compile_mode(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        b.set("compile", True, s, note=f"`{s.key}` set → torch.compile is on")


# The model's head (transformers AutoModelFor*; PEFT `TaskType`; ms-swift `--task_type`): a task head has no vocabulary
# logits. ms-swift 4.x swift/llm/argument/base_args/model_args.py `task_type`: causal_lm | seq_cls | embedding |
# reranker | generative_reranker; PEFT 0.x peft/utils/peft_types.py `TaskType`: SEQ_CLS, TOKEN_CLS, CAUSAL_LM, …
TASK_TYPES = {
    "seq_cls": "sequence-classification",
    "sequence_classification": "sequence-classification",
    "token_cls": "token-classification",
    "token_classification": "token-classification",
    "causal_lm": "causal-lm",
    "reranker": "sequence-classification",
    "regression": "regression",
}


def task_head_of_class(name: str) -> str | None:
    """`AutoModelForSequenceClassification` / `LlamaForTokenClassification` → the task head (None: another class)."""
    if name.endswith("ForSequenceClassification"):
        return "sequence-classification"
    if name.endswith("ForTokenClassification"):
        return "token-classification"
    return None


def _task_type(b: PlanBuilder, s: Setting) -> None:
    if not isinstance(s.value, str) or not s.value.strip():
        return
    head = TASK_TYPES.get(s.value.strip().lower())
    if head is None:
        return b.remember(s)
    b.set("task_head", head, s)


def _problem_type(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip().lower() == "regression":
        b.set("task_head", "regression", s, override=True, note="`problem_type: regression`: one scalar output")
    else:
        b.remember(s)


def _num_labels(b: PlanBuilder, s: Setting) -> None:
    n = to_int(s.value)
    if n is not None and n >= 1 and b.plan.task_head is None:
        b.set("task_head", "sequence-classification", s, note=f"`num_labels: {n}`: a {n}-wide classification head")
    b.remember(s)


def _optim_args(b: PlanBuilder, s: Setting) -> None:
    """transformers `optim_args` ("rank=64, update_proj_gap=200, scale=0.25"): the GaLore/APOLLO rank."""
    b.remember(s)
    if not isinstance(s.value, str):
        return
    for part in s.value.replace(";", ",").split(","):
        key, _, value = part.partition("=")
        if key.strip().lower() == "rank" and to_int(value.strip()):
            b.set("optimizer_rank", to_int(value.strip()), s)


def _lisa_layers(b: PlanBuilder, s: Setting) -> None:
    """LISA (arXiv:2403.17919): `lisa_activated_layers` (LMFlow finetuner args) / `lisa_n_layers` (axolotl) decoder
    layers train at a time; the embedding and LM head stay trainable (LMFlow `DynamicLayerActivationCallback` and
    axolotl's LISA callback freeze only `model.layers`)."""
    n = to_int(s.value)
    if n is None or n < 1:
        return b.remember(s)
    b.set("peft_method", "freeze", s, note=f"LISA: {n} randomly chosen layer(s) train at a time")
    b.set("trained_layers", n, s)
    b.set("trained_where", "rotating", s, origin=Origin.DERIVED, note="LISA samples new layers every interval")
    b.set(
        "trained_extra",
        ["embed", "lm_head"],
        s,
        origin=Origin.DERIVED,
        note="LISA keeps the embedding and the LM head trainable",
    )


HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    "task_type": _task_type,
    "lora_task_type": _task_type,
    "num_labels": _num_labels,
    "problem_type": _problem_type,
    "optim_target_modules": _targets_handler("optimizer_targets"),
    "optim_args": _optim_args,
    "lisa_activated_layers": _lisa_layers,
    "lisa_n_layers": _lisa_layers,
    **{k: _model for k in MODEL_KEYS},
    "torch_dtype": _dtype,
    "dtype": _dtype,
    "bf16": _amp("bf16"),
    "fp16": _amp("fp16"),
    "per_device_train_batch_size": _int("micro_batch", 1),
    "per_gpu_train_batch_size": _int("micro_batch", 1),
    "per_device_eval_batch_size": _int("eval_batch", 1),
    "gradient_accumulation_steps": _int("grad_accum", 1),
    "max_seq_length": _seq,
    "max_length": _seq,
    "block_size": _block_size,
    "model_max_length": _seq,
    "max_seq_len": _seq,
    "seq_length": _seq,
    "packing": _bool("packing"),
    "padding_free": _bool("packing"),
    "gradient_checkpointing": _bool("grad_checkpointing"),
    "activation_offloading": _bool("activation_offload"),
    "attn_implementation": _attn,
    "use_flash_attention_2": _flash2,
    "torch_compile": _bool("compile"),
    "torch_compile_mode": _compile_mode,
    "torch_compile_backend": _compile_mode,
    "optim": _optim,
    "use_peft": _use_peft,
    "use_dora": _dora,
    "lora_r": _int("lora_r", 1),
    "lora_alpha": _float("lora_alpha"),
    "lora_dropout": _float("lora_dropout"),
    "lora_target_modules": _targets_handler("lora_targets"),
    # peft IA3Config `feedforward_modules` and VeraConfig `r`/`vera_dropout` (ms-swift: `ia3_feedforward_modules`,
    # `vera_rank`, `vera_dropout`, swift/llm/argument/tuner_args.py)
    "ia3_feedforward_modules": _targets_handler("feedforward_targets"),
    "vera_rank": _int("lora_r", 1),
    "vera_dropout": _float("lora_dropout"),
    "lora_modules_to_save": _targets_handler("modules_to_save"),
    "load_in_4bit": _load_in(4),
    "load_in_8bit": _load_in(8),
    "bnb_4bit_quant_type": _quant_type,
    "use_bnb_nested_quant": _bool("quant_double"),
    "bnb_4bit_use_double_quant": _bool("quant_double"),
    "bnb_4bit_quant_storage": _quant_storage,
    "bnb_4bit_compute_dtype": _quant_compute,
    "fsdp": _fsdp,
    "use_liger_kernel": _liger,
    "use_liger": _liger,
    "loss_type": _loss_type,
}
# handlers of dict-valued arguments: (builder, setting, nested entries by top-level key)
DICT_HANDLERS: dict[str, Callable] = {
    "deepspeed": _deepspeed,
    "fsdp_config": _fsdp_config,
    "gradient_checkpointing_kwargs": _ckpt_kwargs,
    "model_init_kwargs": _model_init_kwargs,
    "env": _env,
}


def nested_index(settings: list[Setting]) -> dict[str, list[Setting]]:
    """Second-level entries grouped by their top-level key (plus every entry under "__all__")."""
    out: dict[str, list[Setting]] = {"__all__": settings}
    for s in settings:
        if len(s.path) == 2:
            out.setdefault(str(s.path[0]), []).append(s)
    return out


def apply(builder: PlanBuilder, settings: list[Setting], nested: dict[str, list[Setting]] | None = None) -> None:
    """Map top-level HF/TRL settings onto the plan."""
    top = [s for s in settings if len(s.path) == 1]
    if nested is None and len(top) != len(settings):
        nested = nested_index(settings)
    present = {s.key for s in top if s.value is not None}
    for s in top:
        new = RENAMED.get(s.key)
        if new is not None and new in present:
            builder.issue(
                IssueKind.NOT_READ,
                f"`{s.key}` is the old name of `{new}`; current versions read `{new}` and ignore (or reject) `{s.key}`",
                s,
                severity=Severity.INFO,
            )
            builder.remember(s)
            continue
        handler = HANDLERS.get(s.key)
        if handler is not None:
            handler(builder, s)
            continue
        dict_handler = DICT_HANDLERS.get(s.key)
        if dict_handler is not None:
            dict_handler(builder, s, nested)
        elif s.key in TRAINING_ARGUMENT_KEYS or s.key in TRL_KEYS:
            builder.remember(s)
    from vramlens.formats import objective

    objective.apply_hf_keys(builder, top)


def looks_like_trl(keys: set[str]) -> bool:
    return bool(keys & TRL_KEYS)


def detect_score(keys: set[str]) -> float:
    """How sure we are that a mapping with these top-level keys is HF/TRL arguments (0..1)."""
    hits = len(keys & TRAINING_ARGUMENT_KEYS) + len(keys & TRL_KEYS)
    if hits == 0:
        return 0.0
    has_model = any(k in keys for k in MODEL_KEYS)
    # capped below 1: framework-specific dialects reuse these keys and win when their own markers show
    return min(0.9, 0.25 * hits + (0.3 if has_model else 0.0))


def drift_notes(b: PlanBuilder, keys: set[str]) -> None:
    """Configs written for an older TRL mean something else today: say so when the file shows it."""
    if b.plan.format != "trl":
        return
    old = [k for k in ("max_seq_length", "dataset_mixer") if k in keys]
    if not old:
        return
    unset = []
    if b.plan.grad_checkpointing is None:
        unset.append("gradient checkpointing (off before TRL 0.22, on since)")
    if b.plan.amp_dtype is None:
        unset.append("bf16 (off before TRL 0.19, on since)")
    if b.plan.loss_impl is None:
        unset.append("the loss (full-logits cross-entropy before TRL 1.7, chunked since)")
    if unset:
        b.issue(
            IssueKind.ASSUMED,
            f"`{old[0]}` dates this config to an older TRL; it leaves these to the TRL default, which changed: "
            + "; ".join(unset)
            + ". vramlens estimates with the TRL 1.x defaults",
            severity=Severity.INFO,
        )


__all__ = [
    "HANDLERS",
    "DICT_HANDLERS",
    "apply",
    "detect_score",
    "looks_like_trl",
    "normalize_dtype",
    "normalize_attn",
    "to_int",
    "kids",
    "fsdp_config_entry",
    "nested_index",
]
