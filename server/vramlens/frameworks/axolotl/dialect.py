"""The axolotl YAML dialect (`axolotl train config.yml`) and axolotl cloud configs: how the parser recognises them
and reads them with the key table (`keys.py`), plus the rules that take several keys together.

Defaults and meanings: `src/axolotl/utils/schemas/` at axolotl 067b021c (docs/config-sources.md).
"""

from __future__ import annotations

from typing import Any

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.axolotl import plugins, readers
from vramlens.frameworks.axolotl.keys import KEYS
from vramlens.plan import IssueKind, Origin, Severity

DISPATCH = key_table.by_name(KEYS)

# Keys that say "axolotl" (recognition only; what is read is the key table)
SIGNATURE = frozenset(
    {
        "base_model",
        "micro_batch_size",
        "sequence_len",
        "sample_packing",
        "num_epochs",
        "lora_target_linear",
        "adapter",
        "dataset_prepared_path",
        "val_set_size",
        "saves_per_epoch",
        "evals_per_epoch",
        "lr_scheduler",
        "special_tokens",
        "wandb_project",
        "wandb_entity",
        "wandb_watch",
        "wandb_log_model",
        "eval_sample_packing",
        "pad_to_sequence_len",
        "lora_model_dir",
        "base_model_config",
        "is_llama_derived_model",
        "train_on_inputs",
        "flash_attention",
        "xformers_attention",
        "sdp_attention",
        "chat_template",
        "plugins",
        "strict",
        "fsdp_version",
        "unfrozen_parameters",
        "liger_fused_linear_cross_entropy",
        "tokenizer_type",
        "eot_tokens",
        "lora_fan_in_fan_out",
        "model_type",
        "rl",
        "datasets",
        "activation_offloading",
    }
)
CLOUD_KEYS = frozenset(
    {
        "gpu",
        "gpu_count",
        "node_count",
        "provider",
        "secrets",
        "volumes",
        "branch",
        "dockerfile_commands",
        "memory",
        "timeout",
        "memory_preprocess",
        "timeout_preprocess",
    }
)


def cut_cross_entropy(b: PlanBuilder, top: list[Setting], ctx) -> None:
    """The Cut Cross-Entropy plugin patches the loss when its switch is on (integrations/cut_cross_entropy
    `CutCrossEntropyPlugin.pre_model_load`: `if cfg.cut_cross_entropy`): the value written, else the switch's default
    at the axolotl version the run uses (None in 0.6.0, True in 0.19.0: listing the plugin is enough)."""
    from vramlens.frameworks import recognise

    entry = next((s for s in top if s.path == ("plugins",)), None)
    if entry is None or not any(plugins.class_name(p) == "CutCrossEntropyPlugin" for p in plugins.listed(top)):
        return
    written = next((s for s in top if s.path == ("cut_cross_entropy",)), None)
    version = recognise.version_for("axolotl", getattr(ctx, "workspace", None), told=getattr(ctx, "releases", None))[0]
    if plugins.switch("cut_cross_entropy", written, version):
        b.set(
            "loss_impl",
            "fused",
            written if written is not None else entry,
            note="Cut Cross-Entropy plugin: no full logits tensor",
        )


def detect(data: Any, keys: set[str]) -> float:
    hits = len(keys & SIGNATURE)
    if "base_model" in keys and hits >= 3:
        return 1.0 if hits >= 5 else 0.95  # ahead of the HF dialect, whose keys it shares
    if hits >= 4 and ("micro_batch_size" in keys or "sequence_len" in keys):
        return 0.92
    return 0.0


def detect_cloud(data: Any, keys: set[str]) -> float:
    if "gpu" in keys and len(keys & CLOUD_KEYS) >= 2 and not keys & SIGNATURE:
        return 0.8
    return 0.0


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    top = [s for s in settings if len(s.path) == 1]
    present = {s.key for s in top if s.value is not None}
    if "base_model" in present and "base_model_config" in present:
        top = [s for s in top if s.key != "base_model_config"]
    # a plugin's arguments reach the run only with the plugin listed (plugins.py): the others are not read, and
    # recognise.apply says so
    dropped = {id(s) for s in plugins.dropped(top)}
    top = [s for s in top if id(s) not in dropped]
    key_table.read(DISPATCH, b, top, hf.nested_index(settings))
    cut_cross_entropy(b, top, ctx)
    legacy_attention(b, top)
    data_parallel(b, data, top)
    readers.lora_kernels(b, top)
    if b.plan.peft_method is None and b.plan.quant_bits is not None:
        # load_in_4bit without `adapter` — axolotl refuses to train quantized weights in full
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            "`load_in_4bit`/`load_in_8bit` without `adapter: lora|qlora`: quantized weights cannot be fully fine-tuned",
            severity=Severity.WARNING,
        )
    if (
        b.plan.peft_method is not None
        and b.plan.peft_method.value == "lora"
        and b.plan.quant_bits is not None
        and b.plan.quant_bits.value == 4
        and b.plan.quant_bits.key == "load_in_4bit"
    ):
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            "`adapter: lora` with `load_in_4bit: true`: axolotl expects `adapter: qlora` for 4-bit",
            span=b.plan.peft_method.value_span,
            severity=Severity.INFO,
            suggestion="qlora",
        )


def data_parallel(b: PlanBuilder, data: Any, top: list[Setting]) -> None:
    """`dp_shard_size` / `dp_replicate_size` with the tensor, context and expert parallel sizes, as axolotl 067b021c
    src/axolotl/utils/distributed.py `_get_parallel_config_kwargs` builds accelerate's ParallelismConfig: tensor,
    context and expert parallel take their share of the GPUs, `dp_replicate_size` replicas each hold one copy of
    the model, and FSDP shards it over `dp_shard_size` ranks (with the context-parallel ranks folded in: accelerate
    `fsdp_dim_names` → `dp_shard_cp`). `dp_shard_size` needs FSDP ("dp_shard_size was configured without a
    corresponding fsdp_config!"); the sizes multiply to the GPU count (monkeypatch/accelerate/parallelism_config.py
    `_patched_total_size`)."""
    by_key = {s.key: s for s in top}
    shard_s, rep_s = by_key.get("dp_shard_size"), by_key.get("dp_replicate_size")
    shard = to_int(shard_s.value) if shard_s is not None else None
    rep = to_int(rep_s.value) if rep_s is not None else None
    if not (shard and shard > 1) and not (rep and rep > 1):
        return
    plan = b.plan
    fsdp = plan.dist_strategy is not None and plan.dist_strategy.value == "fsdp"
    if shard and shard > 1 and not fsdp:
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            f'`dp_shard_size: {shard}` without FSDP: axolotl stops ("dp_shard_size was configured without a '
            'corresponding fsdp_config"); set `fsdp_version` and `fsdp_config`',
            shard_s,
            severity=Severity.ERROR,
        )
        return
    others = 1
    parts = []
    for name, value in (
        ("tensor_parallel", plan.tensor_parallel.value if plan.tensor_parallel is not None else None),
        ("context_parallel", plan.context_parallel.value if plan.context_parallel is not None else None),
        ("expert_parallel", to_int(data.get("expert_parallel_size")) if isinstance(data, dict) else None),
    ):
        if isinstance(value, int) and value > 1:
            others *= value
            parts.append(f"{name.replace('_', ' ')} {value}")
    world = (shard or 1) * (rep or 1) * others
    where = shard_s if shard and shard > 1 else rep_s
    if plan.world_size is None:
        note = " × ".join(
            [f"dp_shard_size {shard}"] * bool(shard and shard > 1)
            + [f"dp_replicate_size {rep}"] * bool(rep and rep > 1)
            + parts
        )
        b.set("world_size", world, where, origin=Origin.DERIVED, note=f"axolotl's parallel sizes: {note}")
    elif shard_s is not None:
        b.remember(shard_s)
    replicas = (rep or 1) if plan.world_size is None else max(1, plan.world_size.value // max(1, (shard or 1) * others))
    if fsdp and replicas > 1:
        b.set(
            "dp_replicas",
            replicas,
            rep_s or shard_s,
            origin=Origin.FILE if rep_s is not None and rep == replicas else Origin.DERIVED,
            note=f"HSDP: FSDP shards within groups of {shard or 1} ranks (`dp_shard_size`), {replicas} replicas",
        )


def legacy_attention(b: PlanBuilder, top: list[Setting]) -> None:
    """The legacy boolean attention flags, the first one on in axolotl's priority order."""
    legacy = dict(readers.LEGACY_ATTENTION)
    flags = {s.key: s for s in top if s.key in legacy}
    on = [(k, impl) for k, impl in readers.LEGACY_ATTENTION if k in flags and to_bool(flags[k].value)]
    for k, s in flags.items():
        b.remember(s)
    if not on:
        return
    key, impl = on[0]
    s = flags[key]
    if b.plan.attn_impl is not None and b.plan.attn_impl.key == "attn_implementation":
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            f"`{key}: true` together with `attn_implementation`: axolotl refuses both; remove `{key}`",
            s,
            severity=Severity.ERROR,
        )
        return
    b.set("attn_impl", impl, s, note=f"legacy flag `{key}` (axolotl maps it to `attn_implementation: {impl}`)")


def apply_cloud(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    for s in settings:
        if len(s.path) != 1:
            continue
        if s.key == "gpu":
            readers.gpu(b, s)
        elif s.key == "gpu_count":
            b.set_int("gpu_count", s, minimum=1)
        elif s.key in ("node_count", "provider"):
            b.remember(s)
    nodes = data.get("node_count") if isinstance(data, dict) else None
    if b.plan.gpu_count is not None and isinstance(nodes, int) and nodes > 1:
        b.set("world_size", b.plan.gpu_count.value * nodes, note=f"{b.plan.gpu_count.value} GPUs × {nodes} nodes")
