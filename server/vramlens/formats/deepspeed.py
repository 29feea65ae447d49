"""The DeepSpeed JSON dialect (`zero_optimization`, `bf16`/`fp16`, batch keys, `optimizer.type`).

Used for a DeepSpeed JSON document on its own, for a file referenced by `deepspeed: path`, for an inline
`deepspeed: {...}` mapping, and for the files frameworks ship and configs name without the file beside them (ms-swift
`--deepspeed zero3_offload`, axolotl `deepspeed_configs/zero2.json`, LLaMA-Factory
`examples/deepspeed/ds_z3_config.json`: `knowledge.deepspeed.preset`, the frameworks' own files). `"auto"` values
defer to whatever runs the config (resolve.distribution); a ZeRO size the document does not write is DeepSpeed's
default, which neither the HF Trainer nor accelerate changes (they fill only "auto": transformers 5.24
integrations/deepspeed.py `HfDeepSpeedConfig.fill_match`, accelerate 1.15 accelerator.py `_prepare_deepspeed`
`is_auto`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vramlens.formats.settings import PlanBuilder, Setting, is_auto, to_bool, to_int
from vramlens.knowledge.deepspeed import ZERO_SIZE_DEFAULTS
from vramlens.plan import IssueKind, Origin

DEEPSPEED_KEYS = frozenset(
    {
        "zero_optimization",
        "train_micro_batch_size_per_gpu",
        "train_batch_size",
        "gradient_accumulation_steps",
        "fp16",
        "bf16",
        "gradient_clipping",
        "optimizer",
        "scheduler",
        "steps_per_print",
        "wall_clock_breakdown",
        "zero_allow_untested_optimizer",
        "activation_checkpointing",
        "communication_data_type",
        "zero_force_ds_cpu_optimizer",
        "comms_config",
        "monitor_config",
        "sequence_parallel_size",
    }
)


def detect_score(keys: set[str]) -> float:
    hits = len(keys & DEEPSPEED_KEYS)
    if "zero_optimization" in keys or "train_micro_batch_size_per_gpu" in keys:
        return min(1.0, 0.95 + 0.01 * hits)
    return 0.15 * hits if hits >= 2 else 0.0


def apply(b: PlanBuilder, settings: list[Setting], prefix: tuple = ()) -> None:
    """Apply every setting under `prefix` (empty for a DeepSpeed document of its own)."""
    n = len(prefix)
    for s in settings:
        if s.path[:n] != prefix or len(s.path) == n:
            continue
        path = tuple(str(p) for p in s.path[n:])
        _apply_one(b, path, s)
        if path == ("zero_optimization",):
            left_to_deepspeed(b, s.value, s)


def apply_dict(b: PlanBuilder, config: dict, where: Setting, note: str | None = None) -> None:
    """Apply a DeepSpeed config given as a plain dict; every value points at `where`'s span."""

    def walk(d: dict, path: tuple, parent: Setting) -> None:
        for k, v in d.items():
            p = path + (str(k),)
            child = parent.child(k, v)
            child.path = where.path + p
            _apply_one(b, p, child, note)
            if isinstance(v, dict):
                walk(v, p, child)

    b.set("dist_strategy", "deepspeed", where, note=note)
    walk(config, (), where)
    left_to_deepspeed(b, config.get("zero_optimization"), where, note)


def left_to_deepspeed(b: PlanBuilder, zero, where: Setting, note: str | None = None) -> None:
    """The ZeRO sizes a config's `zero_optimization` does not write: DeepSpeed's defaults (the stage-3 ones only under
    ZeRO-3). Nothing fills a missing key: the HF Trainer and accelerate replace only the values written "auto"."""
    if not isinstance(zero, dict):
        return
    stage3 = to_int(zero.get("stage")) == 3
    for concept, (name, default) in ZERO_SIZE_DEFAULTS.items():
        key = key_for(concept)
        written = any(len(p) == 2 and p[1] in zero for p in (key.path, *key.spellings))
        if written or b.has(concept) or (name.startswith("stage3_") and not stage3):
            continue
        why = f"`{name}` not written: DeepSpeed's default {default:,} (deepspeed 0.19.8 runtime/zero/config.py)"
        b.set(concept, default, where, origin=Origin.DEFAULT, note=f"{note}; {why}" if note else why)


def _device_on(v) -> bool | None:
    if isinstance(v, str):
        w = v.strip().lower()
        if w in ("cpu", "nvme"):
            return True
        if w in ("none", "", "gpu", "cuda"):
            return False
        return None
    return to_bool(v)


# -- how each key's value is read --------------------------------------------------------------------
Reader = Callable[[PlanBuilder, "Key", Setting, "str | None"], None]


def read_whole(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    if not is_auto(s.value):  # "auto": the training arguments decide
        b.set_int(key.concept, s, minimum=1, note=note)


def _stage(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    stage = to_int(s.value)
    if stage is None or not 0 <= stage <= 3:
        return b.issue(IssueKind.INVALID_VALUE, f"ZeRO stage must be 0, 1, 2 or 3, got {s.value!r}", s)
    b.set("dist_strategy", "deepspeed", s, note=note)
    b.set(key.concept, stage, s, note=note)


def _device(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    on = _device_on(s.value)
    if on is not None:
        b.set(key.concept, on, s, note=note)


def _precision(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    if not is_auto(s.value) and to_bool(s.value):
        b.set(key.concept, key.path[0], s, note=note)


def _optimizer_type(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    if isinstance(s.value, str):
        b.set(key.concept, s.value, s, note=note or "DeepSpeed's own optimizer replaces the trainer's `optim`")


def _flag(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    on = None if is_auto(s.value) else to_bool(s.value)
    if on is None:
        return b.remember(s)
    b.set(key.concept, on, s, note=note)


def _kept(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    b.remember(s)


def _not_modelled(what: str, consequence: str, when=lambda v: to_bool(v) is True) -> "Reader":
    """A key the estimate has no formula for: kept for hovers and, when `when` holds for its value, named as not
    modelled in every view."""

    def read(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
        b.remember(s)
        if when(s.value):
            b.unmodelled(s, what, consequence, key=".".join(key.path))

    return read


def _explicit_size(v) -> bool:
    """A count written as a number (not "auto")."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _size(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    """A ZeRO size in elements: a whole number (`5e8` and `"500000000"` too; deepspeed 0.19.8 runtime/zero/config.py
    types each `int`, the reduce bucket above 0 and the rest at least 0), or "auto", kept as written."""
    if is_auto(s.value):
        return b.set(key.concept, "auto", s, note=note)
    n = to_int(s.value)
    least = 1 if key.concept == "zero_reduce_bucket" else 0
    if n is None or n < least:
        return b.issue(
            IssueKind.INVALID_VALUE, f"`{s.key}` should be a whole number of at least {least}, got {s.value!r}", s
        )
    b.set(key.concept, n, s, note=note)


# DeepSpeed AutoTP (deepspeed 0.16.4+, https://www.deepspeed.ai/tutorials/autotp-training/): `tp_model_init` replaces
# each decoder layer's linears in place, the ones feeding attention and the MLP column-parallel (`LinearLayer`), the
# attention output and `down_proj` row-parallel with an all-reduce (`LinearAllreduce`), the LM head row-parallel
# with its full logits all-reduced (`LmHeadLinearAllreduce`), embeddings split along the hidden size
# (deepspeedai/DeepSpeed deepspeed/module_inject/auto_tp.py `AutoTP._replace`, `_slice_embedding`,
# `_replace_last_linear_module`); nothing shards the sequence. ZeRO then shards over the data-parallel ranks.
AUTOTP_NOTE = (
    "DeepSpeed AutoTP over {n} GPUs sized as tensor parallelism without sequence parallelism: attention and MLP "
    "linears split column- then row-wise, norms and the residual stream replicated, full logits on every rank "
    "(DeepSpeed's auto_tp.py layout; checked against torch's own tensor-parallel trace, not DeepSpeed's)"
)


def autotp(b: PlanBuilder, s: Setting, note: str | None = None) -> None:
    """`tensor_parallel.autotp_size` of a DeepSpeed config (transformers 5.24 integrations/deepspeed.py
    `deepspeed_init` calls `deepspeed.tp_model_init` with it before `deepspeed.initialize`, and accelerate 1.15
    accelerator.py `_prepare_deepspeed` builds the `tp` device mesh for it), or a trainer's flag that writes it
    (OpenRLHF `--ds_tensor_parallel_size` / `--ds.tensor_parallel_size`, openrlhf/utils/deepspeed/deepspeed_utils.py
    `get_train_ds_config` → `"tensor_parallel": {"autotp_size": …}`, with `deepspeed.tp_model_init` on the model)."""
    from vramlens.resolve import Approximate

    n = to_int(s.value)
    if n is None or n < 1:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be a whole number of at least 1, got {s.value!r}", s)
    if n == 1:
        return
    b.set("tensor_parallel", n, s, note=note or f"DeepSpeed AutoTP over {n} GPUs")
    b.plan.read_notes.append(Approximate(AUTOTP_NOTE.format(n=n)))


def _autotp(b: PlanBuilder, key: "Key", s: Setting, note: str | None) -> None:
    autotp(b, s, note)


@dataclass(frozen=True)
class Key:
    """One DeepSpeed key: where it is written, the plan concept it carries, how its value is read. The parser
    dispatches on this table, the fixes' writer (`formats.render_yaml`) writes each concept at its `path`, and the
    JSON Schema (`formats.schemas`) describes the top-level sections from it."""

    path: tuple[str, ...]
    concept: str | None  # None: a key kept for hovers only
    read: Reader = read_whole
    spellings: tuple[tuple[str, ...], ...] = ()  # other paths read the same way (older DeepSpeed, GPT-NeoX)


# DeepSpeed config reference: https://www.deepspeed.ai/docs/config-json/ (batch, fp16/bf16, optimizer, ZeRO).
KEYS: tuple[Key, ...] = (
    Key(("train_micro_batch_size_per_gpu",), "micro_batch"),
    Key(("gradient_accumulation_steps",), "grad_accum"),
    Key(("train_batch_size",), "global_batch"),
    Key(("sequence_parallel_size",), "context_parallel"),
    Key(("tensor_parallel", "autotp_size"), "tensor_parallel", _autotp),
    Key(("zero_optimization", "stage"), "zero_stage", _stage),
    Key(
        ("zero_optimization", "offload_optimizer", "device"),
        "offload_optimizer",
        _device,
        spellings=(("zero_optimization", "cpu_offload"),),
    ),
    Key(
        ("zero_optimization", "offload_param", "device"),
        "offload_params",
        _device,
        spellings=(("zero_optimization", "cpu_offload_params"),),
    ),
    Key(("bf16", "enabled"), "amp_dtype", _precision, spellings=(("bf16", "bf16"),)),  # GPT-NeoX: bf16.bf16
    Key(("fp16", "enabled"), "amp_dtype", _precision, spellings=(("fp16", "fp16"),)),
    Key(("optimizer", "type"), "optimizer", _optimizer_type),
    *(
        Key(path, None, _kept)
        for path in (
            ("activation_checkpointing", "partition_activations"),
            ("activation_checkpointing", "cpu_checkpointing"),
            ("zero_optimization", "sub_group_size"),
        )
    ),
    # ZeRO's buffer sizes and ZeRO-3's gathering limits, in elements (components.buffers); "auto" is kept as
    # written, for the resolver to fill as whatever runs the config fills it (resolve.distribution.zero_sizes).
    # DeepSpeed's config model takes a stage-3 key by its field name too (deepspeed 0.19.8 runtime/zero/config.py:
    # `prefetch_bucket_size: int = Field(..., alias="stage3_prefetch_bucket_size")`, runtime/config_utils.py
    # `populate_by_name=True`): axolotl's zero3*.json write `max_live_parameters` / `max_reuse_distance`
    Key(("zero_optimization", "reduce_bucket_size"), "zero_reduce_bucket", _size),
    Key(("zero_optimization", "overlap_comm"), "zero_overlap_comm", _flag),
    Key(
        ("zero_optimization", "stage3_prefetch_bucket_size"),
        "zero3_prefetch_bucket",
        _size,
        spellings=(("zero_optimization", "prefetch_bucket_size"),),
    ),
    Key(
        ("zero_optimization", "stage3_param_persistence_threshold"),
        "zero3_persistence_threshold",
        _size,
        spellings=(("zero_optimization", "param_persistence_threshold"),),
    ),
    Key(
        ("zero_optimization", "stage3_max_live_parameters"),
        "zero3_max_live_params",
        _size,
        spellings=(("zero_optimization", "max_live_parameters"),),
    ),
    Key(
        ("zero_optimization", "stage3_max_reuse_distance"),
        "zero3_max_reuse_distance",
        _size,
        spellings=(("zero_optimization", "max_reuse_distance"),),
    ),
    # ZeRO-1/2 all-gather the updated weights into their flat 16-bit groups in place, the bucket size only cutting
    # that into views when `all_gather_into_tensor` is missing (deepspeed 0.19.8 runtime/utils.py
    # `all_gather_dp_groups`); ZeRO-3 gathers by `stage3_prefetch_bucket_size`: no buffer of its size is made
    Key(("zero_optimization", "allgather_bucket_size"), None, _kept),
    # ZeRO++ (https://www.deepspeed.ai/tutorials/zeropp/): quantized weight/gradient communication and a secondary
    # weight partition per node (hpZ), which keeps more of the weights on each GPU
    Key(
        ("zero_optimization", "zero_quantized_weights"),
        None,
        _not_modelled("ZeRO++ quantized weight communication", "estimated as plain ZeRO"),
    ),
    Key(
        ("zero_optimization", "zero_quantized_gradients"),
        None,
        _not_modelled("ZeRO++ quantized gradient communication", "estimated as plain ZeRO"),
    ),
    Key(
        ("zero_optimization", "zero_hpz_partition_size"),
        None,
        _not_modelled(
            "ZeRO++ hierarchical weight partition, a secondary copy per node",
            "estimated as plain ZeRO-3 with no secondary partition",
            lambda v: _explicit_size(v) and v > 1,
        ),
    ),
)
BY_PATH: dict[tuple[str, ...], Key] = {p: k for k in KEYS for p in (k.path, *k.spellings)}
# What the top-level sections hold (the JSON Schema's descriptions).
SECTIONS: dict[str, str] = {
    "zero_optimization": (
        "`stage` 1 shards optimizer states, 2 also gradients, 3 also weights; `offload_optimizer.device`/"
        "`offload_param.device` cpu|nvme move them off the GPU; bucket sizes set temporary buffers."
    ),
    "train_micro_batch_size_per_gpu": "Samples per GPU per step.",
    "gradient_accumulation_steps": "Micro-batches per step.",
    "train_batch_size": "micro × accumulation × GPUs.",
    "bf16": "`enabled`: bf16 weights with fp32 master weights in the optimizer (12 bytes/param).",
    "fp16": "`enabled`: fp16 training with loss scaling and fp32 master weights.",
    "optimizer": "DeepSpeed's own optimizer (`type`), replacing the trainer's.",
    "sequence_parallel_size": "GPUs one sequence is split across (DeepSpeed-Ulysses): activations per GPU shrink "
    "with it.",
    "tensor_parallel": "`autotp_size`: GPUs each layer's linears are split across (DeepSpeed AutoTP); weights, "
    "gradients and optimizer states per GPU shrink with it, ZeRO shards over the rest.",
    "activation_checkpointing": "`partition_activations` / `cpu_checkpointing`: where checkpointed activations are "
    "kept (models that use DeepSpeed's checkpointing API).",
}


def key_for(concept: str) -> Key:
    """The key a fix writes a concept at (the first in the table that carries it)."""
    return next(k for k in KEYS if k.concept == concept)


def _apply_one(b: PlanBuilder, path: tuple, s: Setting, note: str | None = None) -> None:
    key = BY_PATH.get(path)
    if key is not None and s.value is not None:
        key.read(b, key, s, note)
