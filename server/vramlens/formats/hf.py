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

from vramlens.formats.settings import PlanBuilder, Setting, to_int
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.transformers import keys as transformers_keys
from vramlens.frameworks.transformers.readers import ATTN_WORDS as ATTN_WORDS
from vramlens.frameworks.transformers.readers import DTYPE_WORDS as DTYPE_WORDS
from vramlens.frameworks.transformers.readers import FSDP_STRATEGIES as FSDP_STRATEGIES
from vramlens.frameworks.transformers.readers import FSDP_WORDS as FSDP_WORDS
from vramlens.frameworks.transformers.readers import TASK_TYPES as TASK_TYPES
from vramlens.frameworks.transformers.readers import _amp as _amp
from vramlens.frameworks.transformers.readers import _as_dict as _as_dict
from vramlens.frameworks.transformers.readers import _attn as _attn
from vramlens.frameworks.transformers.readers import _block_size as _block_size
from vramlens.frameworks.transformers.readers import _bool as _bool
from vramlens.frameworks.transformers.readers import _ckpt_kwargs as _ckpt_kwargs
from vramlens.frameworks.transformers.readers import _compile_mode as _compile_mode
from vramlens.frameworks.transformers.readers import _deepspeed as _deepspeed
from vramlens.frameworks.transformers.readers import _dora as _dora
from vramlens.frameworks.transformers.readers import _dtype as _dtype
from vramlens.frameworks.transformers.readers import _env as _env
from vramlens.frameworks.transformers.readers import _flash2 as _flash2
from vramlens.frameworks.transformers.readers import _float as _float
from vramlens.frameworks.transformers.readers import _fsdp as _fsdp
from vramlens.frameworks.transformers.readers import _fsdp_config as _fsdp_config
from vramlens.frameworks.transformers.readers import _int as _int
from vramlens.frameworks.transformers.readers import _liger as _liger
from vramlens.frameworks.transformers.readers import _lisa_layers as _lisa_layers
from vramlens.frameworks.transformers.readers import _load_in as _load_in
from vramlens.frameworks.transformers.readers import _loss_type as _loss_type
from vramlens.frameworks.transformers.readers import _model as _model
from vramlens.frameworks.transformers.readers import _model_init_kwargs as _model_init_kwargs
from vramlens.frameworks.transformers.readers import _num_labels as _num_labels
from vramlens.frameworks.transformers.readers import _optim as _optim
from vramlens.frameworks.transformers.readers import _optim_args as _optim_args
from vramlens.frameworks.transformers.readers import _problem_type as _problem_type
from vramlens.frameworks.transformers.readers import _quant_compute as _quant_compute
from vramlens.frameworks.transformers.readers import _quant_storage as _quant_storage
from vramlens.frameworks.transformers.readers import _quant_type as _quant_type
from vramlens.frameworks.transformers.readers import _seq as _seq
from vramlens.frameworks.transformers.readers import _targets as _targets
from vramlens.frameworks.transformers.readers import _targets_handler as _targets_handler
from vramlens.frameworks.transformers.readers import _task_type as _task_type
from vramlens.frameworks.transformers.readers import _use_peft as _use_peft
from vramlens.frameworks.transformers.readers import fsdp_config_entry as fsdp_config_entry
from vramlens.frameworks.transformers.readers import kids as kids
from vramlens.frameworks.transformers.readers import normalize_attn as normalize_attn
from vramlens.frameworks.transformers.readers import normalize_dtype as normalize_dtype
from vramlens.frameworks.transformers.readers import quant_method as quant_method
from vramlens.frameworks.transformers.readers import task_head_of_class as task_head_of_class
from vramlens.plan import IssueKind, Severity

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

# old spelling -> new spelling: when both are present the new one is what current versions read
RENAMED = {
    "max_seq_length": "max_length",  # TRL 0.16 renamed, 0.20 removed
    "torch_dtype": "dtype",  # transformers 4.56 / TRL 0.23
    "evaluation_strategy": "eval_strategy",
    "use_flash_attention_2": "attn_implementation",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
}


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


# The reader's dispatch, generated from the key tables (frameworks/transformers/keys.py): TRL's table (which holds
# TrainingArguments') and the other spellings the same reader reads.
DISPATCH = key_table.by_name(transformers_keys.KEYS_TRL + transformers_keys.READ_ONLY)
HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    name: key.read for name, key in DISPATCH.items() if key.read is not None
}
# handlers of dict-valued arguments: (builder, setting, nested entries by top-level key)
DICT_HANDLERS: dict[str, Callable] = {name: key.section for name, key in DISPATCH.items() if key.section is not None}


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
