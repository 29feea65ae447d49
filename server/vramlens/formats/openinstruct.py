"""open-instruct configs (allenai/open-instruct `open_instruct/finetune.py`, `dpo_tune.py`, `dpo_tune_cache.py`):
a YAML of the script's `FlatArguments`, or the same names as `--flags`.

The scripts are plain accelerate loops, not TRL: read with their own defaults (finetune.py at 00f6b60c,
`FlatArguments` and `main`):
  - the model is loaded with `torch_dtype=torch.bfloat16`, attention `flash_attention_2` unless
    `use_flash_attn: false` (then "eager");
  - `per_device_train_batch_size` 8, `gradient_accumulation_steps` 1, `gradient_checkpointing` false;
  - optimizer `torch.optim.AdamW(fused=fused_optimizer)`, `fused_optimizer` true; with `use_qlora` a paged
    bitsandbytes AdamW (`optim_bits=8 if use_8bit_optimizer else 32`) over an NF4, double-quantized model;
  - LoRA (`use_lora`): r 64, alpha 16, dropout 0.1 on q, k, v, o, gate, up, down;
  - `use_liger_kernel` with `reduce_loss: mean` → Liger's fused linear cross-entropy;
  - the loop keeps `outputs` (and with it the logits) alive through `accelerator.backward(loss)`.
Precision and sharding come from the launch, which the YAML does not name: open-instruct documents every recipe
with `accelerate launch --mixed_precision bf16 --num_machines 1 --num_processes 8 --use_deepspeed
--deepspeed_config_file configs/ds_configs/stage3_no_offloading_accelerate.conf` (docs/tulu3.md), so a file
read alone gets bf16 mixed precision, DeepSpeed ZeRO-3 and 8 processes as defaults, each shown as such
(the GPU count gives way to `--num-gpus` and the settings).
"""

from __future__ import annotations

import re
from typing import Any

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool
from vramlens.plan import Origin

# Keys only open-instruct's argument classes have (finetune.py FlatArguments, dpo_tune*.py FlatArguments).
OPEN_INSTRUCT_KEYS = frozenset(
    {
        "use_flash_attn",
        "dataset_mixer",
        "dataset_mixer_list",
        "dataset_mixer_list_splits",
        "with_tracking",
        "use_slow_tokenizer",
        "checkpointing_steps",
        "reduce_loss",
        "dpo_loss_type",
        "dpo_beta",
        "use_lora",
        "use_qlora",
        "use_8bit_optimizer",
        "clip_grad_norm",
        "fused_optimizer",
        "try_launch_beaker_eval_jobs",
        "hf_metadata_dataset",
        "oe_eval_tasks",
        "exp_name",
        "dataset_local_cache_dir",
        "dataset_transform_fn",
        "keep_last_n_checkpoints",
        "load_balancing_loss",
        "add_bos",
        "chat_template_name",
        "tokenizer_name",
        "dataset_mix_dir",
        "wandb_entity",
        "push_to_hub",
        "try_auto_save_to_beaker",
        "gs_bucket_path",
        "dpo_label_smoothing",
        "concatenated_forward",
        "packing",
        "timeout",
        "num_train_epochs",
    }
)
# (`dataset_mixer` is alignment-handbook's too: not a marker on its own)
STRONG = frozenset(
    {
        "use_flash_attn",
        "dataset_mixer_list",
        "with_tracking",
        "reduce_loss",
        "dpo_beta",
        "dpo_loss_type",
        "use_qlora",
        "try_launch_beaker_eval_jobs",
        "use_slow_tokenizer",
        "dataset_transform_fn",
        "fused_optimizer",
        "oe_eval_tasks",
    }
)
LORA_TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]
FRAMEWORK = "open-instruct"


def detect(data: Any, keys: set[str]) -> float:
    strong = len(keys & STRONG)
    hits = len(keys & OPEN_INSTRUCT_KEYS)
    if strong >= 2:
        return 1.0  # no other framework's arguments have two of these
    if strong >= 1 and hits >= 3 and not keys & (hf.TRL_KEYS - OPEN_INSTRUCT_KEYS):
        return 0.95
    return 0.0


def _flash(b: PlanBuilder, s: Setting) -> None:
    v = to_bool(s.value)
    if v is None:
        return b.remember(s)
    b.set(
        "attn_impl",
        "flash_attention_2" if v else "eager",
        s,
        note=None if v else 'open-instruct loads with attn_implementation="eager" without flash attention',
    )


def _use_lora(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("peft_method", "lora", s)
        b.set(
            "lora_targets",
            list(LORA_TARGETS),
            origin=Origin.DEFAULT,
            framework=FRAMEWORK,
            note="open-instruct's LoraConfig targets q, k, v, o, gate, up and down",
        )
    elif to_bool(s.value) is False:
        b.set("peft_method", "none", s)


def _use_qlora(b: PlanBuilder, s: Setting) -> None:
    if not to_bool(s.value):
        return b.remember(s)
    b.set("quant_bits", 4, s, note="open-instruct `use_qlora`: NF4, double quantization, bf16 compute")
    b.set("quant_type", "nf4", s)
    b.set("quant_double", True, s)


def _fused(b: PlanBuilder, s: Setting) -> None:
    v = to_bool(s.value)
    if v is not None:
        b.set("optimizer_impl", "fused" if v else "foreach", s)


def _liger(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "fused", s, note="Liger's fused linear cross-entropy (with `reduce_loss: mean`)")


HANDLERS = {
    "model_name_or_path": hf._model,
    "use_flash_attn": _flash,
    "use_lora": _use_lora,
    "use_qlora": _use_qlora,
    "lora_rank": lambda b, s: b.set_int("lora_r", s, minimum=1),
    "lora_alpha": hf._float("lora_alpha"),
    "lora_dropout": hf._float("lora_dropout"),
    "fused_optimizer": _fused,
    "use_liger_kernel": _liger,
    "per_device_train_batch_size": hf.HANDLERS["per_device_train_batch_size"],
    "gradient_accumulation_steps": hf.HANDLERS["gradient_accumulation_steps"],
    "max_seq_length": hf.HANDLERS["max_seq_length"],
    "gradient_checkpointing": hf.HANDLERS["gradient_checkpointing"],
    "packing": hf.HANDLERS["packing"],
}


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    top = [s for s in settings if len(s.path) == 1]
    for s in top:
        handler = HANDLERS.get(s.key)
        if handler is not None:
            handler(b, s)
        elif s.key in OPEN_INSTRUCT_KEYS or s.key in hf.TRAINING_ARGUMENT_KEYS:
            b.remember(s)
    from vramlens.formats import objective

    objective.apply_hf_keys(b, top)
    finish(b, {s.key: s for s in top})


def finish(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    """What open-instruct derives from the arguments: QLoRA's paged bitsandbytes AdamW, and the documented launch."""
    plan = b.plan
    if plan.quant_bits is not None and plan.peft_method is None:
        b.set("peft_method", "lora", origin=Origin.DERIVED, framework=FRAMEWORK, note="QLoRA trains LoRA adapters")
    if plan.quant_bits is not None and plan.optimizer is None:
        eight = by_key.get("use_8bit_optimizer")
        name = "paged_adamw_8bit" if eight is not None and to_bool(eight.value) else "paged_adamw_32bit"
        b.set(
            "optimizer",
            name,
            origin=Origin.DERIVED,
            framework=FRAMEWORK,
            note="open-instruct `use_qlora`: bitsandbytes AdamW(is_paged=True)",
        )
    if plan.quant_bits is not None and plan.dist_strategy is None:
        b.set(
            "dist_strategy",
            "ddp",
            origin=Origin.DERIVED,
            framework=FRAMEWORK,
            note='open-instruct: QLoRA "is not compatible with deepspeed"; one 4-bit model per GPU',
        )
    if plan.gpu_count is None and not plan.references:
        b.set(
            "gpu_count",
            8,
            origin=Origin.DEFAULT,
            framework=FRAMEWORK,
            note="open-instruct's documented launch: `accelerate launch --num_processes 8 --use_deepspeed "
            "… stage3_no_offloading_accelerate.conf` (docs/tulu3.md)",
        )


# open-instruct's training scripts, as a launch command names them
_SCRIPT = re.compile(r"(?:^|[/\\])open_instruct[/\\](finetune|dpo_tune|dpo_tune_cache|dpo|reward_modeling)\.py$")


def script_kind(path: str | None) -> str | None:
    """`open_instruct/finetune.py` → "finetune" (None for other scripts)."""
    m = _SCRIPT.search(str(path or "").strip().strip("'\""))
    return m.group(1) if m else None


def apply_flag(b: PlanBuilder, s: Setting) -> bool:
    """One `--flag` of an open-instruct script read with open-instruct's meaning; False when it has none."""
    handler = HANDLERS.get(s.key)
    if handler is None:
        return False
    handler(b, s)
    return True


def apply_launch(b: PlanBuilder, kind: str, settings: list[Setting]) -> None:
    """After an open-instruct script's flags: `dpo_tune_cache.py` computes the reference log-probs once before training
    (its `build_reference_logprobs_cache`), so no reference model is resident."""
    if kind == "dpo_tune_cache":
        b.set(
            "precompute_ref",
            True,
            origin=Origin.DERIVED,
            framework=FRAMEWORK,
            note="dpo_tune_cache.py caches the reference log-probs before training",
        )
    finish(b, {s.key: s for s in settings})
