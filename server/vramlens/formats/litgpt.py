"""litgpt config_hub YAML (`litgpt finetune_lora --config x.yaml`, `litgpt pretrain --config ...`).

jsonargparse style (`litgpt/args.py`, `litgpt/finetune/*.py` at litgpt 26857050;
docs/config-sources.md): `precision` says both the
weight dtype and autocast (`bf16-true` = bf16 weights, `bf16-mixed` = fp32 weights + bf16 autocast),
`quantize: bnb.nf4` etc., `train.micro_batch_size` / `train.global_batch_size` (accumulation is
derived), LoRA switched on per projection by booleans. With more than one device a full
fine-tune runs FSDP with activation checkpointing per block — litgpt decides that, not the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.formats.vocab import check_optimizer
from vramlens.plan import IssueKind, Origin

LITGPT_KEYS = frozenset(
    {
        "precision",
        "quantize",
        "devices",
        "num_nodes",
        "checkpoint_dir",
        "out_dir",
        "train",
        "eval",
        "logger_name",
        "lora_query",
        "lora_key",
        "lora_value",
        "lora_projection",
        "lora_mlp",
        "lora_head",
        "model_name",
        "model_config",
        "initial_checkpoint_dir",
        "tokenizer_dir",
        "data",
        "resume",
    }
)

PRECISION = {
    "bf16-true": ("bf16", "none"),
    "bf16-mixed": ("fp32", "bf16"),
    "16-true": ("fp16", "none"),
    "16-mixed": ("fp32", "fp16"),
    "32-true": ("fp32", "none"),
    "32": ("fp32", "none"),
    "64-true": ("fp32", "none"),
    "bf16": ("bf16", "none"),
    "16": ("fp32", "fp16"),
    "transformer-engine": ("fp32", "fp8"),
    "transformer-engine-float16": ("fp16", "fp8"),
}
QUANTIZE = {
    "bnb.nf4": (4, "nf4", False),
    "bnb.nf4-dq": (4, "nf4", True),
    "bnb.fp4": (4, "fp4", False),
    "bnb.fp4-dq": (4, "fp4", True),
    "bnb.int8-training": (8, "int8", False),
    "bnb.int8": (8, "int8", False),
}
LORA_SWITCHES = {
    "lora_query": ["q_proj"],
    "lora_key": ["k_proj"],
    "lora_value": ["v_proj"],
    "lora_projection": ["o_proj"],
    "lora_mlp": ["gate_proj", "up_proj", "down_proj"],
    "lora_head": ["lm_head"],
}
_SWITCH_WORDS = {
    "lora_query": "the query projection",
    "lora_key": "the key projection",
    "lora_value": "the value projection",
    "lora_projection": "the attention output projection",
    "lora_mlp": "the MLP",
    "lora_head": "the output head",
}
# litgpt model names (config names) → Hugging Face ids, for the pretraining configs
MODEL_NAMES = {
    "tiny-llama-1.1b": "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T",
    "micro-llama-300M": "keeeeenw/MicroLlama",
    "pythia-14m": "EleutherAI/pythia-14m",
    "pythia-160m": "EleutherAI/pythia-160m",
}


@dataclass(frozen=True)
class Key:
    """One litgpt key vramlens reads: where it is written, the plan concept it carries, the kind of value
    ("whole" ≥ 1, "number", "bool", "text", "choice" of `choices`, "devices", "section") and what it means. The
    parser reads the plain values from this table, the fixes' writer (`formats.render_yaml`) writes each concept at
    its `path`, and the JSON Schema (`formats.schemas`) is generated from it."""

    path: tuple[str, ...]
    concept: str | None
    kind: str
    description: str
    choices: tuple[str, ...] = ()


# litgpt config_hub YAML (litgpt/args.py TrainArgs, litgpt/finetune/lora.py setup(), at 26857050).
KEYS: tuple[Key, ...] = (
    Key(("checkpoint_dir",), "model_id", "text", "checkpoints/<org>/<model>: the model."),
    Key(
        ("precision",),
        "weight_dtype",
        "choice",
        "`*-true`: weights in that dtype; `*-mixed`: fp32 weights + autocast (4 bytes/param + copies).",
        tuple(PRECISION),
    ),
    Key(("quantize",), "quant_bits", "choice", "Quantized base weights (needs a `*-true` precision).", tuple(QUANTIZE)),
    Key(("devices",), "world_size", "devices", "GPUs; full fine-tuning on >1 uses FSDP + checkpointing."),
    Key(("num_nodes",), None, "whole", "Machines."),
    Key(
        ("train",),
        None,
        "section",
        "`micro_batch_size` (default 4), `global_batch_size` (default 64; accumulation derived), `max_seq_length`.",
    ),
    Key(("train", "micro_batch_size"), "micro_batch", "whole", "Samples per device per step (default 4)."),
    Key(
        ("train", "global_batch_size"),
        "global_batch",
        "whole",
        "Samples per optimizer step on all devices (default 64): accumulation is derived from it.",
    ),
    Key(("train", "max_seq_length"), "seq_len", "whole", "Longest sequence trained on."),
    Key(("lora_r",), "lora_r", "whole", "LoRA rank (default 8)."),
    Key(("lora_alpha",), "lora_alpha", "number", "LoRA scaling numerator."),
    Key(("lora_dropout",), "lora_dropout", "number", "Dropout on the adapters' input."),
    *(
        Key(
            (switch,),
            "lora_targets",
            "bool",
            f"Adapter{'s' if len(modules) > 1 else ''} on {_SWITCH_WORDS[switch]} ({', '.join(modules)}).",
        )
        for switch, modules in LORA_SWITCHES.items()
    ),
)
BY_PATH: dict[tuple[str, ...], Key] = {k.path: k for k in KEYS}


def key_for(concept: str) -> Key:
    """The key a fix writes a concept at (the first in the table that carries it)."""
    return next(k for k in KEYS if k.concept == concept)


def detect(data: Any, keys: set[str]) -> float:
    hits = len(keys & LITGPT_KEYS)
    train = data.get("train")
    if isinstance(train, dict) and ({"micro_batch_size", "global_batch_size"} & set(train)) and hits >= 3:
        return 1.0
    if "precision" in keys and isinstance(data.get("precision"), str) and "-" in data["precision"] and hits >= 3:
        return 0.95
    return 0.0


def _model(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if not isinstance(v, str) or not v.strip():
        return
    text = v.strip().rstrip("/")
    if s.key == "model_name":
        mid = MODEL_NAMES.get(text, text)
        return b.set("model_id", mid, s, note=f"litgpt model `{text}`" if mid != text else None)
    parts = [p for p in re.split(r"[/\\]", text) if p]
    if parts and parts[0] == "checkpoints":
        parts = parts[1:]
    mid = "/".join(parts[-2:]) if len(parts) >= 2 else text
    b.set("model_id", mid, s, note=f"checkpoint folder `{text}` → `{mid}`" if mid != text else None)


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    by_path = {s.path: s for s in settings}
    for key in ("checkpoint_dir", "model_name", "initial_checkpoint_dir"):
        s = by_path.get((key,))
        if s is not None:
            _model(b, s)
    s = by_path.get(("precision",))
    if s is not None and s.value is not None:
        w = str(s.value).strip()
        if w not in PRECISION:
            b.unknown(s, "precision", [k for k in PRECISION if "-" in k])
        else:
            weights, amp = PRECISION[w]
            b.set("weight_dtype", weights, s)
            b.set("amp_dtype", amp, s)
    s = by_path.get(("quantize",))
    if s is not None and s.value is not None:
        w = str(s.value).strip()
        if w not in QUANTIZE:
            sug = "bnb." + w if "bnb." + w in QUANTIZE else None
            b.unknown(s, "quantization", QUANTIZE, suggestion=sug)
        else:
            bits, qtype, double = QUANTIZE[w]
            b.set("quant_bits", bits, s)
            b.set("quant_type", qtype, s)
            b.set("quant_double", double, s)
            if (
                b.plan.amp_dtype is not None
                and b.plan.amp_dtype.value != "none"
                and b.plan.weight_dtype is not None
                and b.plan.weight_dtype.value == "fp32"
            ):
                b.issue(
                    IssueKind.CONFLICTING_SETTINGS,
                    f"`quantize: {w}` with a `*-mixed` precision: litgpt refuses this combination; use `bf16-true`",
                    s,
                    suggestion="bf16-true",
                )
    for spec in KEYS:
        if spec.path[0] == "train" and spec.kind == "whole" and spec.concept is not None and spec.path in by_path:
            b.set_int(spec.concept, by_path[spec.path], minimum=1)
    devices = by_path.get(("devices",))
    nodes = by_path.get(("num_nodes",))
    n_dev = to_int(devices.value) if devices is not None else None
    n_nodes = to_int(nodes.value) if nodes is not None else 1
    if devices is not None and n_dev is not None:
        total = n_dev * (n_nodes or 1)
        b.set(
            "world_size",
            total,
            devices,
            note=f"devices {n_dev} × num_nodes {n_nodes or 1}" if (n_nodes or 1) > 1 else None,
        )
    elif devices is not None:
        b.remember(devices)
    # LoRA
    lora = {k: by_path[(k,)] for k in ("lora_r", "lora_alpha", "lora_dropout") if (k,) in by_path}
    switches = {k: by_path[(k,)] for k in LORA_SWITCHES if (k,) in by_path}
    if lora or switches:
        peft = "qlora" if b.plan.quant_bits is not None and b.plan.quant_bits.value == 4 else "lora"
        b.set(
            "peft_method",
            peft,
            lora.get("lora_r") or next(iter(switches.values())),
            note="LoRA settings → run with `litgpt finetune_lora`",
        )
        if "lora_r" in lora:
            b.set_int("lora_r", lora["lora_r"], minimum=1)
        for k in ("lora_alpha", "lora_dropout"):
            if k in lora:
                b.set_float(k, lora[k])
        targets: list[str] = []
        for k, s in switches.items():
            if to_bool(s.value):
                targets += LORA_SWITCHES[k]
        if switches:
            first = next(iter(switches.values()))
            b.set(
                "lora_targets", targets or [], first, note="from the lora_query/key/value/projection/mlp/head switches"
            )
    # optimizer: a class path string or {class_path, init_args}
    s = by_path.get(("optimizer",))
    if s is not None:
        cls = s.value.get("class_path") if isinstance(s.value, dict) else s.value
        where = by_path.get(("optimizer", "class_path"), s)
        if isinstance(cls, str) and cls.strip():
            name = cls.strip()
            if "." not in name:
                name = f"torch.optim.{name}"
            check_optimizer(b, where, "class")
            b.set("optimizer", name, where)
    # full fine-tuning on several devices: FSDP + activation checkpointing per block
    if b.plan.peft_method is None and b.plan.world_size is not None and b.plan.world_size.value > 1:
        b.set(
            "dist_strategy",
            "fsdp",
            origin=Origin.DERIVED,
            framework="litgpt",
            note="litgpt full fine-tuning on >1 device uses FSDP",
        )
        b.set("zero_stage", 3, origin=Origin.DERIVED, framework="litgpt", note="FSDP FULL_SHARD")
        b.set(
            "grad_checkpointing",
            True,
            origin=Origin.DERIVED,
            framework="litgpt",
            note="litgpt checkpoints each Block under FSDP",
        )
    for key in ("model_config", "logger_name"):
        if (key,) in by_path:
            b.remember(by_path[(key,)])
