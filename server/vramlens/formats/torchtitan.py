"""torchtitan TOML job configs (`--job.config_file x.toml`) and the command lines that launch them.

The job config is torchtitan's `JobConfig` written as TOML tables: `[model] name/flavor`, `[training]`,
`[parallelism]`, `[activation_checkpoint]`, `[optimizer]`, `[compile]`, float8 under `[float8]` or
`[quantize.linear.float8]` (torchtitan/config_manager.py at v0.1.0, torchtitan/config/job_config.py at v0.2.x;
before v0.1 the parallel degrees sat in `[training]` and `[experimental]`, and the batch was `batch_size`).
Recent torchtitan main names a Python config instead (`--module llama3 --config llama3_8b`): a launch of that
form is read by `formats.torchtitan_python`, into the same settings.
The model's shapes come from torchtitan's own flavor tables (knowledge/data/torchtitan_flavors.json, dumped by
scripts/dump_torchtitan_flavors.py). Command-line overrides `--section.key value` win over the file, as
torchtitan's ConfigManager applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramlens import toml_reading
from vramlens.formats.model_kind import set_built_arch, set_other_kind
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_float, to_int
from vramlens.knowledge.pipelining import MULTI_STAGE_SCHEDULES, TORCH_SCHEDULES, schedule_named
from vramlens.plan import IssueKind, Origin, Severity, Span, TrainingPlan
from vramlens.text import LineIndex

if TYPE_CHECKING:
    from vramlens.knowledge.schema import ModelArch

FRAMEWORK_LABEL = "torchtitan 0.1–0.2 (JobConfig)"
# The tables that make a TOML file a torchtitan job config (JobConfig's sections)
TABLES = frozenset(
    {
        "job",
        "model",
        "training",
        "parallelism",
        "activation_checkpoint",
        "optimizer",
        "float8",
        "experimental",
        "compile",
        "quantize",
        "lr_scheduler",
        "checkpoint",
        "metrics",
        "profiling",
    }
)
NOT_JOB_CONFIGS = frozenset({"pyproject.toml", ".vramlens.toml", "uv.lock", "poetry.lock", "cargo.toml"})

# Flavors whose shapes are those of a published checkpoint (tests/formats/test_torchtitan.py checks each against the
# catalog): estimated as that model, so its family's layer kinds apply.
SAME_SHAPES = {
    ("llama3", "8B"): "meta-llama/Llama-3.1-8B",
    ("llama3", "8B_flex"): "meta-llama/Llama-3.1-8B",
    ("llama3", "8B_varlen"): "meta-llama/Llama-3.1-8B",
    ("llama3", "70B"): "meta-llama/Llama-3.1-70B",
    ("llama3", "405B"): "meta-llama/Llama-3.1-405B",
    ("qwen3", "0.6B"): "Qwen/Qwen3-0.6B",
    ("qwen3", "1.7B"): "Qwen/Qwen3-1.7B",
    ("qwen3", "4B"): "Qwen/Qwen3-4B",
    ("qwen3", "8B"): "Qwen/Qwen3-8B",
    ("qwen3", "14B"): "Qwen/Qwen3-14B",
    ("qwen3", "32B"): "Qwen/Qwen3-32B",
    ("qwen3", "30B-A3B"): "Qwen/Qwen3-30B-A3B",
    ("deepseek_v3", "671B"): "deepseek-ai/DeepSeek-V3",
}
# Model packages whose every flavor has mixture-of-experts layers (torchtitan/models/deepseek_v3/__init__.py,
# gpt_oss/__init__.py, llama4/__init__.py at v0.2.2, kimi_k2_7/__init__.py at main: MoE layers in every flavor, the
# debug models included): never read as a dense model from their dense fields alone
MOE_MODELS = frozenset({"deepseek_v3", "gpt_oss", "llama4", "kimi_k2_7"})
# Flavors whose layers vramlens' model shapes cannot hold, with the reason (kept out of the estimate)
NOT_ESTIMATED = {
    # torchtitan/models/qwen3_5/__init__.py at main: Gated DeltaNet linear-attention layers between the full ones
    "qwen3_5": "its linear-attention (Gated DeltaNet) layers are not in the flavor's fields",
    # torchtitan/models/kimi_k2_7/__init__.py at main: a vision encoder beside the DeepSeek-V3-style decoder
    "kimi_k2_7": "its vision encoder is not in the flavor's fields",
    # torchtitan/models/muse_glimmer/__init__.py at main: the FFN width is computed in its layer builder
    # (`int(_FFN_DIM_MULTIPLIER * dim)`), not a field of the flavor
    "muse_glimmer": "its FFN width is computed in its layer builder, not a field of the flavor",
}
# Model packages that train something other than a language model: (the kind, what the package builds)
OTHER_KINDS = {
    # torchtitan/experiments/flux/__init__.py at v0.2.0, torchtitan/models/flux/__init__.py at v0.2.2 and main
    "flux": (
        "a diffusion model",
        "torchtitan's FLUX.1 flow-matching text-to-image transformer (with its T5 and CLIP text encoders and VAE); "
        "vramlens models language-model blocks only",
    ),
    # torchtitan/experiments/vlm/__init__.py at v0.2.0: `Llama3Siglip2Transformer`
    "vlm": (
        "a vision-language model",
        "torchtitan's experimental Llama 3 decoder with a SigLIP2 vision encoder, whose encoder shapes are not in "
        "torchtitan's model flavor tables",
    ),
}
# The shape fields a flavor and a catalog model must share to be estimated as that model
TWIN_FIELDS = (
    "hidden",
    "layers",
    "heads",
    "n_kv_heads",
    "d_head",
    "vocab",
    "num_experts",
    "experts_per_token",
    "moe_intermediate",
    "shared_experts",
    "dense_layers",
    "kv_lora_rank",
    "attn_bias",
    "mlp_bias",
)
LLAMA3_TOKENIZER_VOCAB = 128256  # the Llama 3 tokenizer's size (`vocab_size = -1`: set from the tokenizer)


def is_job_config(data: Any) -> bool:
    """A parsed TOML document is a torchtitan job config: a `[model]` table naming a model or flavor and one more
    JobConfig table."""
    if not isinstance(data, dict):
        return False
    model = data.get("model")
    named = isinstance(model, dict) and ("flavor" in model or "name" in model)
    return named and len(TABLES & {k for k, v in data.items() if isinstance(v, dict)}) >= 2


def parse_toml(text: str, ctx) -> TrainingPlan | None:
    """`formats.TEXT_PARSERS` entry for `.toml`: a plan for a torchtitan job config, None for any other TOML."""
    if Path(ctx.path).name.lower() in NOT_JOB_CONFIGS:
        return None
    settings = toml_settings(text, ctx.path)
    if settings is None:
        return None
    b = PlanBuilder(ctx.path, "torchtitan", "torchtitan")
    apply(b, settings, [], None)
    return b.plan


def toml_settings(text: str, path: str) -> list[Setting] | None:
    """The job config's values as Settings (path = table parts + key), with the spans where each is written;
    None when the text is not a torchtitan job config."""
    parsed = toml_reading.loads(text)
    if not is_job_config(parsed.data):
        return None
    spans = _spans(text, path)
    out: list[Setting] = []
    stack: list[tuple[tuple[str, ...], dict]] = [((), parsed.data)]
    while stack:
        prefix, table = stack.pop()
        for key, value in table.items():
            where = prefix + (str(key),)
            if isinstance(value, dict):
                stack.append((where, value))
                continue
            span, value_span, key_span = spans.get(where, (None, None, None))
            out.append(Setting(str(key), where, value, span=span, value_span=value_span, key_span=key_span))
    return out


_HEADER = re.compile(r"[ \t]*\[([^\[\]#]+)\][ \t]*(?:#.*)?")
_ENTRY = re.compile(r"[ \t]*([A-Za-z0-9_\-\"' .]+?)[ \t]*=[ \t]*")


def _parts(key: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in key.split("."))


def _spans(text: str, path: str) -> dict[tuple[str, ...], tuple[Span, Span, Span]]:
    """(entry, value, key) spans of the one-line `key = value` entries, by table parts + key. Lines only: a value
    spread over several lines gets the span of its first line."""
    idx = LineIndex(text, path)
    out: dict[tuple[str, ...], tuple[Span, Span, Span]] = {}
    table: tuple[str, ...] = ()
    for n, line in enumerate(text.splitlines()):
        if m := _HEADER.fullmatch(line):
            table = _parts(m[1])
            continue
        m = _ENTRY.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        start = idx.starts[n] if n < len(idx.starts) else 0
        value = _value_end(line, m.end())
        key_span = idx.span(start + m.start(1), start + m.end(1))
        value_span = idx.span(start + m.end(), start + value)
        out[table + _parts(m[1])] = (idx.span(start + m.start(1), start + value), value_span, key_span)
    return out


def _value_end(line: str, start: int) -> int:
    """Where a one-line TOML value ends: after its closing quote, or before a comment."""
    if line[start : start + 1] in ("'", '"'):
        q = line[start]
        i = start + 1
        while i < len(line) and line[i] != q:
            i += 2 if line[i] == "\\" and q == '"' else 1
        return min(i + 1, len(line))
    hash_at = line.find("#", start)
    return len(line[:hash_at].rstrip()) if hash_at >= 0 else len(line.rstrip())


# ------------------------------------------------------------------------------------------------ the plan

# Where each value is written, newest spelling first (v0.2.x, v0.1.0, before v0.1).
WHERE = {
    "name": (("model", "name"),),
    "flavor": (("model", "flavor"),),
    "converters": (("model", "converters"),),
    "local_batch": (("training", "local_batch_size"), ("training", "batch_size")),
    "global_batch": (("training", "global_batch_size"),),
    "seq_len": (("training", "seq_len"),),
    "compile": (("compile", "enable"), ("training", "compile")),
    "compile_components": (("compile", "components"),),
    "param_dtype": (("training", "mixed_precision_param"),),
    "cpu_offload": (("training", "enable_cpu_offload"),),
    "dp_replicate": (("parallelism", "data_parallel_replicate_degree"), ("training", "data_parallel_replicate_degree")),
    "dp_shard": (("parallelism", "data_parallel_shard_degree"), ("training", "data_parallel_shard_degree")),
    "tp": (("parallelism", "tensor_parallel_degree"), ("training", "tensor_parallel_degree")),
    "pp": (("parallelism", "pipeline_parallel_degree"), ("experimental", "pipeline_parallel_degree")),
    "pp_schedule": (("parallelism", "pipeline_parallel_schedule"), ("experimental", "pipeline_parallel_schedule")),
    "pp_schedule_csv": (("parallelism", "pipeline_parallel_schedule_csv"),),
    "pp_layers_per_stage": (("parallelism", "pipeline_parallel_layers_per_stage"),),
    # v0.2.0 … main `pipeline_parallel_first_stage_less_layers` / `..._last_stage_less_layers` (default 1; v0.1.0
    # distributed/pipeline.py `generate_split_points` weighs both 1, not configurable), v0.2.2 … main
    # `module_fqns_per_model_part`
    "pp_first_less": (("parallelism", "pipeline_parallel_first_stage_less_layers"),),
    "pp_last_less": (("parallelism", "pipeline_parallel_last_stage_less_layers"),),
    "pp_fqns": (("parallelism", "module_fqns_per_model_part"),),
    "pp_split_points": (
        ("parallelism", "pipeline_parallel_split_points"),
        ("experimental", "pipeline_parallel_split_points"),
    ),
    # v0.1.0 config_manager.py / v0.2.2 config/job_config.py `pipeline_parallel_microbatch_size` (default 1); main
    # config/configs.py `num_pp_microbatches` (default 1), the count itself
    "pp_microbatch_size": (("parallelism", "pipeline_parallel_microbatch_size"),),
    "pp_microbatches": (("parallelism", "num_pp_microbatches"),),
    "cp": (("parallelism", "context_parallel_degree"), ("experimental", "context_parallel_degree")),
    "ep": (("parallelism", "expert_parallel_degree"),),
    "etp": (("parallelism", "expert_tensor_parallel_degree"),),
    "reshard": (("parallelism", "fsdp_reshard_after_forward"),),
    "ac_mode": (("activation_checkpoint", "mode"),),
    "ac_option": (("activation_checkpoint", "selective_ac_option"),),
    "loss_parallel_off": (("parallelism", "disable_loss_parallel"), ("training", "disable_loss_parallel")),
    "float8_old": (("float8", "enable_float8_linear"),),
    # torchtitan v0.2.2 config/job_config.py `Float8Linear.enable_fsdp_float8_all_gather` (default False); v0.1.0
    # config_manager.py `[float8]`
    "float8_all_gather": (
        ("quantize", "linear", "float8", "enable_fsdp_float8_all_gather"),
        ("float8", "enable_fsdp_float8_all_gather"),
    ),
    # v0.2.2 config/job_config.py `Validation`: enable (False), local_batch_size (8), seq_len (2048)
    "validation": (("validation", "enable"),),
    "validation_batch": (("validation", "local_batch_size"),),
    "validation_seq_len": (("validation", "seq_len"),),
    "optimizer": (("optimizer", "name"),),
    "optimizer_impl": (("optimizer", "implementation"),),
    "optimizer_in_bwd": (("optimizer", "early_step_in_backward"),),
}
# JobConfig defaults (v0.1.0 config_manager.py = v0.2.2 config/job_config.py for these)
DEFAULTS = {
    "local_batch": 8,
    "seq_len": 2048,
    "compile": False,
    "param_dtype": "bfloat16",
    "dp_replicate": 1,
    "dp_shard": -1,
    "tp": 1,
    "pp": 1,
    "cp": 1,
    "reshard": "default",
    "ac_mode": "selective",
    "ac_option": "2",
    "optimizer": "AdamW",
    "optimizer_impl": "fused",
    "name": "llama3",
    "flavor": "debugmodel",
    "validation_batch": 8,
    "validation_seq_len": 2048,
}
OPTIMIZERS = {"adamw": "torch.optim.AdamW", "adam": "torch.optim.Adam"}
OPTIMIZER_IMPL = {"fused": "fused", "foreach": "foreach", "for-loop": "forloop"}


@dataclass
class _Values:
    by_path: dict[tuple[str, ...], Setting]
    defaults: dict[str, Any]

    def get(self, what: str) -> Setting | None:
        return next((self.by_path[p] for p in WHERE[what] if p in self.by_path), None)

    def value(self, what: str):
        s = self.get(what)
        return s.value if s is not None else self.defaults.get(what)


def apply(
    b: PlanBuilder,
    settings: list[Setting],
    overrides: list[Setting],
    world: tuple[int, Setting | None] | None,
    world_note: str | None = None,
    defaults: dict[str, Any] = DEFAULTS,
) -> None:
    """Fill the plan from the job config's settings, with command-line overrides over them and the run's process
    count when the launch gives one. With no job config read (`settings` empty), JobConfig's default model is not
    assumed: the plan names a model only when the command line does. `defaults`: the config class's defaults
    (JobConfig's, or Trainer.Config's for the Python configs of `formats.torchtitan_python`)."""
    by_path = {s.path: s for s in settings}
    by_path.update({s.path: s for s in overrides})
    v = _Values(by_path, defaults)
    b.plan.format, b.plan.framework = "torchtitan", "torchtitan"
    if settings or v.get("name") is not None or v.get("flavor") is not None:
        _model(b, v)
    _batch(b, v)
    _precision(b, v)
    _parallel(b, v, world, world_note)
    _checkpointing(b, v)
    _optimizer(b, v)
    _float8(b, v)
    _validation(b, v)
    for what in ("name", "flavor"):
        if (s := v.get(what)) is not None:
            b.remember(s)
    b.set(
        "attn_impl",
        "flex_attention" if _flex(v) else "sdpa",
        origin=Origin.DEFAULT,
        framework=FRAMEWORK_LABEL,
        note="torchtitan's attention: SDPA (flex attention in the *_flex flavors)",
    )
    b.set(
        "packing",
        True,
        origin=Origin.DEFAULT,
        framework=FRAMEWORK_LABEL,
        note="torchtitan's text datasets fill every sample to seq_len",
    )
    b.set(
        "objective",
        "pretrain",
        origin=Origin.DEFAULT,
        framework=FRAMEWORK_LABEL,
        note="torchtitan pre-trains: next-token loss on every token",
    )


def _validation(b: PlanBuilder, v: _Values) -> None:
    """`[validation]`: when enabled, a no-grad forward of `local_batch_size` sequences between steps, beside the
    training state (frameworks/torchtitan/hooks.py); a validation length other than the training one is named."""
    switch = v.get("validation")
    if switch is None or not to_bool(switch.value):
        return
    b.remember(switch)
    said = v.get("validation_batch")
    batch = to_int(said.value) if said is not None else v.defaults.get("validation_batch")
    if said is not None and batch is not None:
        b.set("eval_batch", batch, said)
    elif batch is not None:
        _default(b, "eval_batch", batch, note="torchtitan's validation.local_batch_size")
    length = v.value("validation_seq_len")
    if to_int(length) != to_int(v.value("seq_len")):
        b.unmodelled(
            v.get("validation_seq_len"),
            f"validation at {length} tokens a sequence, not the training length",
            "the validation forward estimated at the training sequence length",
            key="validation.seq_len",
        )


def _default(b: PlanBuilder, concept: str, value, note: str | None = None) -> None:
    b.set(concept, value, origin=Origin.DEFAULT, framework=FRAMEWORK_LABEL, note=note)


def _flavors() -> dict:
    from vramlens.knowledge.data import load

    return load("torchtitan_flavors.json")["versions"]


def flavor_args(name: str, flavor: str) -> tuple[dict, str] | None:
    """(the flavor's model args, `tag commit`) from the newest dumped torchtitan release that has it, else from main
    (the flavors main added: a JobConfig names a released flavor)."""
    versions = list(_flavors().items())
    tags = [(t, v) for t, v in versions if t != "main"]
    for tag, version in [*reversed(tags), *((t, v) for t, v in versions if t == "main")]:
        table = version["models"].get(name, {}).get("flavors", {})
        if flavor in table:
            return table[flavor], f"{tag} ({version['commit'][:10]})"
    return None


def ffn_hidden(args: dict) -> int:
    """The SwiGLU width torchtitan builds: an explicit `hidden_dim` (qwen3), else from dim, multiple_of and
    ffn_dim_multiplier (torchtitan/models/llama3/model/model.py `FeedForward.__init__` at v0.1.0 and v0.2.2:
    hidden = int(2 * 4 * dim / 3), times ffn_dim_multiplier, rounded up to a multiple of multiple_of)."""
    if args.get("hidden_dim"):
        return int(args["hidden_dim"])
    hidden = int(2 * (4 * args["dim"]) / 3)
    if args.get("ffn_dim_multiplier") is not None:
        hidden = int(args["ffn_dim_multiplier"] * hidden)
    multiple = int(args.get("multiple_of") or 256)
    return multiple * ((hidden + multiple - 1) // multiple)


def _model(b: PlanBuilder, v: _Values) -> None:
    name_s, flavor_s = v.get("name"), v.get("flavor")
    name, flavor = str(v.value("name")), str(v.value("flavor"))
    where = flavor_s or name_s
    label = f"torchtitan {name} `{flavor}`"
    # a flavor read but not estimated says why in the one message every view gives instead of an estimate
    # (resolve.model.no_model_message takes a note that starts with the model's key)
    said = f"`model` {label}"
    if (name, flavor) in SAME_SHAPES:
        mid = SAME_SHAPES[(name, flavor)]
        if where is not None:
            b.set("model_id", mid, where, note=f"{label}: the shapes of {mid}")
        else:
            _default(b, "model_id", mid, f"{label} (JobConfig's default model): the shapes of {mid}")
        return
    if name in OTHER_KINDS:
        kind, what = OTHER_KINDS[name]
        set_other_kind(b, where, kind, f"{label} is {what}")
        return
    found = flavor_args(name, flavor)
    if found is None:
        known = sorted(
            {f for version in _flavors().values() for f in version["models"].get(name, {}).get("flavors", {})}
        )
        what = f"flavor `{flavor}` of torchtitan model `{name}`" if known else f"torchtitan model `{name}`"
        hint = f" (known: {', '.join(known)})" if known else ""
        b.issue(
            IssueKind.UNKNOWN_VALUE,
            f"`model`: unknown {what}{hint}: its shapes are not known, so no estimate",
            where,
            suggestion=None,
        )
        return
    args, version = found
    if name in NOT_ESTIMATED:
        b.issue(IssueKind.UNKNOWN_VALUE, f"{said}: {NOT_ESTIMATED[name]}; no estimate", where)
        return
    # qwen3 at the releases states `moe_enabled`; a flavor at main has expert fields only where it has experts
    moe = args["moe_enabled"] if "moe_enabled" in args else name in MOE_MODELS or bool(args.get("num_experts"))
    if moe:
        arch = flavor_arch(name, args)
        if arch is None:
            why = "its expert fields are not in the dumped flavor tables"
            b.issue(IssueKind.UNKNOWN_VALUE, f"{said} is a mixture-of-experts flavor: {why}; no estimate", where)
            return
        # llama4's checkpoints are multimodal and run every expert on every token in transformers (DENSE_ROUTED
        # there); torchtitan trains the text decoder with routed grouped GEMMs: never a catalog twin
        twin = catalog_twin(arch) if name != "llama4" else None
        if twin is None:  # no published checkpoint has its shapes: the model torchtitan builds from the flavor
            set_built_arch(
                b,
                arch.model_copy(update={"id": f"torchtitan/{name}/{flavor}"}),
                where,
                f"{label}: the model torchtitan builds from the flavor's fields ({arch.layers} layers, hidden "
                f"{arch.hidden}, {arch.num_experts} experts of {arch.moe_intermediate}, top-{arch.experts_per_token}, "
                f"{arch.shared_experts} shared, {arch.layers - arch.dense_layers} MoE layers; torchtitan {version} "
                f"torchtitan/models/{name}/__init__.py)",
            )
            return
        note = (
            f"{label}: the shapes of {twin.id} ({arch.num_experts} experts of {arch.moe_intermediate}, "
            f"top-{arch.experts_per_token}, {arch.shared_experts} shared; torchtitan {version})"
        )
        if where is not None:
            b.set("model_id", twin.id, where, note=note)
        else:
            _default(b, "model_id", twin.id, note)
        return
    dim, layers, heads = args.get("dim"), args.get("n_layers"), args.get("n_heads")
    if not all(isinstance(x, int) and x > 0 for x in (dim, layers, heads)):
        b.issue(IssueKind.UNKNOWN_VALUE, f"{said} has no dense decoder shapes vramlens can use; no estimate", where)
        return
    vocab = args.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= 0:
        vocab = LLAMA3_TOKENIZER_VOCAB
        b.plan.read_notes.append(f"{label}: vocabulary from the tokenizer, assumed the Llama 3 tokenizer's {vocab:,}")
    sizes = {
        "n_layer": layers,
        "n_embd": dim,
        "n_head": heads,
        "num_kv_heads": args.get("n_kv_heads") or heads,
        "intermediate_size": ffn_hidden(args),
        "vocab_size": vocab,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "no_weight_tying": not args.get("enable_weight_tying", False),
    }
    anchor = where or Setting("flavor", ("model", "flavor"), flavor)
    for key, value in sizes.items():
        b.shape(key, Setting(anchor.key, anchor.path, value, span=anchor.span, value_span=anchor.value_span))
    b.plan.model_span_hint = anchor.span
    b.plan.read_notes.append(f"{label}: shapes from torchtitan {version} torchtitan/models/{name}/__init__.py")


def _int(args: dict, key: str) -> int | None:
    value = args.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def flavor_arch(name: str, args: dict) -> ModelArch | None:
    """A mixture-of-experts flavor's shapes as vramlens' ModelArch, from the dumped flavor fields (None where a
    field the layers need is missing). The fields, as torchtitan builds them:
    - deepseek_v3 (torchtitan/models/deepseek_v3/model/args.py and model/model.py at v0.2.2; __init__.py at main):
      the first `n_dense_layers` layers a dense FFN of `inter_dim`, the others `num_experts` routed experts of
      `moe_inter_dim` (top `top_k`) plus `num_shared_experts` shared ones; multi-head latent attention with
      `kv_lora_rank`, heads of `v_head_dim`; the LM head untied.
    - qwen3 MoE flavors (torchtitan/models/qwen3/model/args.py at v0.2.2): every layer MoE when `moe_enabled`,
      `num_experts` experts of `moe_inter_dim`, no shared expert; GQA heads of `head_dim`.
    - gpt_oss (torchtitan/models/gpt_oss/model/args.py at v0.2.2): every layer MoE, experts of `moe_inter_dim`
      with biases, attention projections with biases, heads of `head_dim`.
    - llama4 (torchtitan/models/llama4/model/args.py and model/model.py `TransformerBlock.__init__` at v0.2.0 and
      v0.2.2): MoE on every `interleave_moe_layer_step`-th layer, experts of `llama4_expert_hidden`, the other
      layers llama3's FeedForward of 4 × dim; GQA; the output untied."""
    from vramlens.knowledge.schema import ModelArch

    dim, layers, heads, vocab = (_int(args, k) for k in ("dim", "n_layers", "n_heads", "vocab_size"))
    experts, top_k, expert_dim = (_int(args, k) for k in ("num_experts", "top_k", "moe_inter_dim"))
    if name == "llama4" and dim and experts and top_k:
        expert_dim = llama4_expert_hidden(args)
    if not (dim and layers and heads and vocab and experts and top_k and expert_dim):
        return None
    common = dict(
        id=f"torchtitan/{name}",
        hidden=dim,
        layers=layers,
        heads=heads,
        vocab=vocab,
        num_experts=experts,
        experts_per_token=top_k,
        moe_intermediate=expert_dim,
        shared_experts=int(args.get("num_shared_experts") or 0),
        tied_embeddings=bool(args.get("enable_weight_tying", False)),
        source="torchtitan flavor fields",
    )
    if name in ("deepseek_v3", "kimi_k2_7"):
        kv_rank, head, inter = _int(args, "kv_lora_rank"), _int(args, "v_head_dim"), _int(args, "inter_dim")
        if not (kv_rank and head and inter):
            return None
        return ModelArch(
            family="deepseek_v3",
            head_dim=head,
            intermediate=inter,
            dense_layers=int(args.get("n_dense_layers") or 0),
            kv_lora_rank=kv_rank,
            **common,
        )
    head = _int(args, "head_dim") or dim // heads
    if name == "llama4":
        # every `interleave_moe_layer_step`-th layer MoE (`(layer_id + 1) % step == 0`), the others a SwiGLU FFN of
        # llama3's width; one shared expert FFN of `hidden_dim * num_shared_experts`, counted as that many experts
        step = int(args.get("interleave_moe_layer_step") or 1)
        return ModelArch(
            family="llama",
            kv_heads=_int(args, "n_kv_heads"),
            intermediate=ffn_hidden(args),
            dense_layers=layers - layers // step,
            **common,
        )
    if name == "gpt_oss":
        return ModelArch(
            family="gpt_oss",
            kv_heads=_int(args, "n_kv_heads"),
            head_dim=head,
            intermediate=expert_dim,
            attn_bias=True,
            mlp_bias=True,
            **common,
        )
    if name == "qwen3":
        return ModelArch(
            family="qwen3_moe",
            kv_heads=_int(args, "n_kv_heads"),
            head_dim=head,
            intermediate=_int(args, "hidden_dim") or expert_dim,
            **common,
        )
    return None


def llama4_expert_hidden(args: dict) -> int:
    """The width of llama4's experts (torchtitan/models/llama4/model/model.py `TransformerBlock.__init__` at v0.2.0
    and v0.2.2): 4 × dim, × 2/3, × ffn_dim_multiplier, divided by top_k + num_shared_experts when
    `auto_scale_hidden_dim` (its default: True), rounded up to a multiple of `multiple_of`."""
    hidden = int(2 * (4 * args["dim"]) / 3)
    if args.get("ffn_dim_multiplier") is not None:
        hidden = int(args["ffn_dim_multiplier"] * hidden)
    if args.get("auto_scale_hidden_dim", True):
        hidden = int(hidden / (int(args["top_k"]) + int(args.get("num_shared_experts") or 0)))
    multiple = int(args.get("multiple_of") or 256)
    return hidden + (-hidden % multiple)


def catalog_twin(arch: ModelArch) -> ModelArch | None:
    """The catalog model with the flavor's shapes (every field of TWIN_FIELDS equal), if one has them."""
    from vramlens.knowledge.models import all_models

    want = tuple(getattr(arch, f) for f in TWIN_FIELDS)
    for model in all_models():
        if tuple(getattr(model, f) for f in TWIN_FIELDS) == want:
            return model
    return None


def _flex(v: _Values) -> bool:
    found = flavor_args(str(v.value("name")), str(v.value("flavor")))
    args = found[0] if found else {}
    return bool(args.get("use_flex_attn")) or args.get("attn_type") == "flex"


def _batch(b: PlanBuilder, v: _Values) -> None:
    if (s := v.get("local_batch")) is not None:
        b.set_int("micro_batch", s, minimum=1)
    else:
        _default(b, "micro_batch", DEFAULTS["local_batch"])
    if (s := v.get("seq_len")) is not None:
        b.set_int("seq_len", s, minimum=1)
    else:
        _default(b, "seq_len", DEFAULTS["seq_len"])
    if (s := v.get("global_batch")) is not None and (to_int(s.value) or -1) > 0:
        b.set_int("global_batch", s, minimum=1)
    if (s := v.get("compile")) is not None:
        on = to_bool(s.value)
        parts = v.value("compile_components")
        if isinstance(parts, str):  # `--compile.components model` on a command line
            parts = [p.strip() for p in parts.split(",") if p.strip()]
        if on and isinstance(parts, list) and "model" not in parts:
            on = False  # only the loss compiled: the model runs eagerly
        if on is not None:
            b.set("compile", on, s)
        if on and isinstance(parts, list) and "loss" not in parts:
            # torchtitan/components/loss.py (v0.2.2) `build_cross_entropy_loss` compiles the loss only when
            # compile.components names it
            b.set(
                "compile_loss",
                False,
                v.get("compile_components") or s,
                note="compile.components leaves out `loss`: the cross-entropy runs eagerly",
            )
    else:
        _default(b, "compile", False)
    if (s := v.get("cpu_offload")) is not None and to_bool(s.value):
        # FSDP2 CPUOffloadPolicy: sharded parameters, gradients and optimizer states live on the CPU
        b.set("offload_params", True, s, note="FSDP2 CPU offload")
        b.set("offload_optimizer", True, s, note="FSDP2 CPU offload")


def _precision(b: PlanBuilder, v: _Values) -> None:
    """torchtitan keeps fp32 parameters and runs FSDP2 with MixedPrecisionPolicy(param_dtype=mixed_precision_param,
    reduce_dtype=float32) (torchtitan/models/llama3/infra/parallelize.py `apply_fsdp`, v0.1.0 and v0.2.2)."""
    s = v.get("param_dtype")
    text = str(v.value("param_dtype")).strip().lower()
    amp = {"bfloat16": "bf16", "float32": "none", "float16": "fp16"}.get(text)
    if amp is None and s is not None:
        b.unknown(s, "mixed precision dtype", ("bfloat16", "float32"))
        return
    # the parameters' dtype is torchtitan's, not a setting: it builds every flavor in fp32 and no key changes that
    anchor = v.get("flavor") or v.get("name") or s
    note = "torchtitan builds the model in fp32 (FSDP2 keeps the sharded fp32 parameters)"
    if anchor is not None:
        b.set("weight_dtype", "fp32", anchor, note=note)
    else:
        _default(b, "weight_dtype", "fp32", note)
    if s is not None:
        b.set("amp_dtype", amp, s, note="FSDP2 mixed precision: parameters gathered and computed in this dtype")
    else:
        _default(b, "amp_dtype", amp, "mixed_precision_param = bfloat16")


def _degree(b: PlanBuilder, v: _Values, what: str, minimum: int = 1) -> tuple[int, Setting | None]:
    s = v.get(what)
    n = to_int(s.value) if s is not None else DEFAULTS[what]
    if n is None or (n < minimum and not (what == "dp_shard" and n == -1)):
        b.issue(
            IssueKind.INVALID_VALUE,
            f"`{s.key}` should be a whole number of at least {minimum}"
            + (" (or -1)" if what == "dp_shard" else "")
            + f", got {s.value!r}",
            s,
        )
        return DEFAULTS[what], None
    return n, s


def _parallel(b: PlanBuilder, v: _Values, world: tuple[int, Setting | None] | None, world_note: str | None) -> None:
    rep, rep_s = _degree(b, v, "dp_replicate")
    shard, shard_s = _degree(b, v, "dp_shard")
    tp, tp_s = _degree(b, v, "tp")
    pp, pp_s = _degree(b, v, "pp")
    cp, cp_s = _degree(b, v, "cp")
    others = rep * tp * pp * cp
    if world is not None:
        n, ws = world
        b.set(
            "world_size",
            n,
            ws,
            origin=Origin.FILE if ws is not None else Origin.DEFAULT,
            note=world_note,
            framework=None if ws is not None else FRAMEWORK_LABEL,
        )
        if shard == -1:
            shard = max(1, n // others)
        elif shard * others != n:
            b.issue(
                IssueKind.CONFLICTING_SETTINGS,
                f"the parallel degrees multiply to {shard * others}, but the run "
                f"has {n} GPUs: torchtitan refuses this (ParallelDims checks their product)",
                shard_s or ws,
            )
    elif shard > 0:
        b.set(
            "world_size",
            shard * others,
            shard_s,
            origin=Origin.DERIVED,
            note=f"data_parallel_shard {shard} × replicate {rep} × TP {tp} × PP {pp} × CP {cp}",
        )
    elif others > 1:
        b.set(
            "world_size",
            others,
            origin=Origin.DERIVED,
            note=f"data_parallel_shard_degree -1 and no GPU count: at least replicate {rep} × TP {tp} × PP {pp} × "
            f"CP {cp} GPUs",
        )
    # torchtitan/distributed/parallel_dims.py (v0.2.2): `fsdp_enabled` is dp_shard > 1 or cp > 1, and the FSDP mesh is
    # data_parallel_shard × context_parallel ("we always assume that when cp is used, FSDP is also applied"); the
    # resolver shards an FSDP run over the data-parallel × context-parallel ranks
    if shard == -1 or shard > 1 or cp > 1:
        where = shard_s if shard == -1 or shard > 1 else cp_s
        b.set(
            "dist_strategy",
            "fsdp",
            where,
            note="torchtitan shards with FSDP2 (`fully_shard`) over data_parallel_shard × context_parallel ranks",
        )
        _reshard(b, v, where, pp, pp_s)
        b.set("fsdp_version", 2, where, origin=Origin.DERIVED, note="torchtitan uses FSDP2")
        if rep > 1:
            # parallel_dims.py: the `dp_replicate` mesh dimension; `fully_shard` over (dp_replicate, dp_shard_cp)
            # shards within data_parallel_shard_degree × context_parallel_degree ranks
            b.set("dp_replicas", rep, rep_s, note="HSDP: FSDP shards within each of data_parallel_replicate_degree")
    elif rep > 1:
        b.set("dist_strategy", "ddp", rep_s, note="data_parallel_replicate_degree > 1 with no sharding: DDP")
    else:
        b.set("dist_strategy", "none", shard_s, origin=Origin.DERIVED if shard_s is None else Origin.FILE)
    if tp > 1:
        b.set("tensor_parallel", tp, tp_s)
        # torchtitan's TP plan is sequence-parallel: the norms run SequenceParallel and the blocks take and return
        # sequence-sharded activations (wo and w2 `RowwiseParallel(output_layouts=Shard(1))`); the output projection
        # keeps the logits sharded over the vocabulary for a loss-parallel cross-entropy unless
        # parallelism.disable_loss_parallel (torchtitan/models/llama3/infra/parallelize.py `apply_tp`, v0.1.0 and
        # v0.2.2)
        b.set(
            "sequence_parallel",
            True,
            tp_s,
            origin=Origin.DERIVED,
            note="torchtitan's tensor parallel plan: SequenceParallel norms, sequence-sharded block inputs",
        )
        off = v.get("loss_parallel_off")
        if off is None or not to_bool(off.value):
            b.set(
                "loss_parallel",
                True,
                off or tp_s,
                origin=Origin.DERIVED if off is None else Origin.FILE,
                note="loss parallel: logits sharded over the vocabulary on the tensor-parallel ranks",
            )
    if cp > 1:
        b.set("context_parallel", cp, cp_s)
    if pp > 1:
        b.set("pipeline_parallel", pp, pp_s)
        _pipeline_batch(b, v, pp_s)
        _pipeline_schedule(b, v, pp, pp_s)
        _pipeline_split(b, v, pp_s)
    if (s := v.get("ep")) is not None and (ep := to_int(s.value) or 1) > 1:
        _expert_parallel(b, s, ep, tp, shard if shard > 0 else None, cp, v.get("etp"))


def _expert_parallel(
    b: PlanBuilder, s: Setting, ep: int, tp: int, shard: int | None, cp: int, etp_s: Setting | None
) -> None:
    """`expert_parallel_degree`: torchtitan divides each MoE layer's routed experts over `ep` ranks and shards each
    rank's experts with FSDP over the rest of its sparse mesh (pp, dp_replicate, efsdp, ep, etp), efsdp =
    data_parallel_shard × context_parallel × TP ÷ (etp × ep) (v0.2.2 torchtitan/distributed/parallel_dims.py
    `build_mesh`; v0.2.0 `_build_mesh_with_ep`: `dp_shard_mod_ep = dp_shard * cp // ep`), with the blocks' reshard
    policy (models/*/infra/parallelize.py `apply_fsdp`: the experts `fully_shard`ed on that mesh). Without tensor
    parallelism that is NeMo AutoModel's layout (components.sharding `fsdp_expert_gather_share`); the all-to-all
    receives each rank's routed tokens, counted as the routed activations of balanced routing.
    With tensor parallelism `expert_tensor_parallel_degree` (default 1) is TP or 1, nothing else (`_validate`:
    "Currently we only support ETP=TP or ETP=1"): ETP = TP splits each expert over the TP ranks as TP splits the
    dense layers, `ep` taken from data_parallel_shard × context_parallel; ETP = 1 keeps each expert whole, `ep`
    taken from those ranks × TP, each rank routing its own sequence shard's tokens — an expert's activations are
    then counted as under ETP = TP, said as approximate."""
    etp = (to_int(etp_s.value) or 1) if etp_s is not None else 1
    if tp > 1 and etp not in (1, tp):
        b.issue(
            IssueKind.INVALID_VALUE,
            f"expert_tensor_parallel_degree {etp} should be the tensor_parallel_degree ({tp}) or 1: torchtitan "
            "refuses any other",
            etp_s,
        )
        return
    borrowed = shard * cp * (tp if etp == 1 else 1) if shard is not None else None
    if borrowed is not None and borrowed % ep:
        over = "data_parallel_shard_degree × context_parallel_degree" + (
            " × tensor_parallel_degree" if tp > 1 and etp == 1 else ""
        )
        b.issue(
            IssueKind.INVALID_VALUE,
            f"expert_parallel_degree {ep} should divide {over} ({borrowed}): torchtitan refuses the mesh",
            s,
        )
        return
    b.set("expert_parallel", ep, s, note=f"each GPU holds 1/{ep} of every MoE layer's routed experts")
    if tp > 1:
        note = (
            f"each expert split over the {tp} tensor-parallel GPUs"
            if etp == tp
            else "each expert whole on its GPU (expert parallelism over the tensor-parallel GPUs too)"
        )
        if etp_s is not None:
            b.set("expert_tensor_parallel", etp, etp_s, note=note)
        else:
            b.set("expert_tensor_parallel", 1, s, note=note, origin=Origin.DEFAULT, framework="torchtitan")
        if etp == 1:
            from vramlens.resolve import Approximate

            b.plan.read_notes.append(
                Approximate(
                    "expert_tensor_parallel_degree 1 under tensor parallelism: each GPU routes its own sequence "
                    "shard's tokens to whole experts; their activations are counted as with each expert split over "
                    "the tensor-parallel GPUs"
                )
            )


def read_schedule(b: PlanBuilder, s: Setting | None) -> str:
    """The torch schedule a pipeline setting names (1F1B when none is written), set on the plan; a name torch has no
    schedule for is reported and taken as 1F1B."""
    name = schedule_named(str(s.value)) if s is not None else "1F1B"
    if name is None:
        b.unknown(s, "pipeline schedule", TORCH_SCHEDULES)
        return "1F1B"
    if s is not None:
        b.set("pipeline_schedule", name, s, note=f"torch.distributed.pipelining's {name} schedule")
    return name


def _pipeline_schedule(b: PlanBuilder, v: _Values, pp: int, pp_s: Setting | None) -> None:
    """The pipeline schedule and the stages each rank runs. torchtitan builds `pipeline_parallel_schedule` by name
    with torch's `get_schedule_class` (case-insensitive; torch 2.14 torch/distributed/pipelining/schedules.py), one
    stage per rank for a single-stage schedule (1F1B, GPipe); a multi-stage one runs
    `pipeline_parallel_layers_per_stage`'s count of stages, else two per rank (v0.1.0
    torchtitan/distributed/pipeline.py `generate_split_points`: "by default each pipeline rank has 2 virtual
    stages"; v0.2.2 distributed/pipeline_parallel.py `pipeline_llm`; main `_get_pipeline_metadata`), or at v0.1.0
    one stage per `pipeline_parallel_split_points` boundary plus one, split over the ranks (models/llama3/infra/
    pipeline.py `pipeline_llama_manual_split`). The estimate holds each rank to its stages' layers and the
    micro-batches the schedule keeps in flight (components.pipeline `torch_schedule_in_flight`)."""
    s = v.get("pp_schedule")
    name = read_schedule(b, s)
    if (csv := v.get("pp_schedule_csv")) is not None and csv.value:
        b.unmodelled(
            csv,
            "a pipeline schedule read from a CSV file (`_PipelineScheduleRuntime`)",
            f"estimated as the {name} schedule holds its micro-batches",
        )
    if name not in MULTI_STAGE_SCHEDULES:
        return
    splits = v.get("pp_split_points")
    per_stage = v.get("pp_layers_per_stage")
    n_splits = len(splits.value) if splits is not None and isinstance(splits.value, list) else 0
    if n_splits and (n_splits + 1) % pp == 0:
        b.set(
            "virtual_pipeline",
            (n_splits + 1) // pp,
            splits,
            origin=Origin.DERIVED,
            note=f"{n_splits + 1} stages from {n_splits} split points over {pp} pipeline ranks",
        )
        return
    if (per_stage is not None and per_stage.value is not None) or v.get("pp_fqns") is not None:
        return  # the stages' count follows from the model's layers (`_pipeline_split`)
    b.set(
        "virtual_pipeline",
        2,
        s or pp_s,
        origin=Origin.DEFAULT,
        framework=FRAMEWORK_LABEL,
        note=f"{name} runs two pipeline stages per rank (torchtitan's default for a multi-stage schedule)",
    )


def _split_layer(point: Any) -> int | None:
    """The decoder layer a split point names (`layers.4` → 4), None for any other module."""
    m = re.fullmatch(r"layers\.(\d+)", str(point).strip())
    return int(m.group(1)) if m else None


def _pipeline_split(b: PlanBuilder, v: _Values, pp_s: Setting | None) -> None:
    """How torchtitan cuts the model's layers into stages, for the resolver's split (knowledge.pipelining
    `stage_split`): `module_fqns_per_model_part` names each stage's modules outright (its `layers.N` entries are
    the stage's decoder layers), else `_generate_llm_fqn_per_model_part` splits the layers with the embeddings and
    the output modules weighing `pipeline_parallel_first_stage_less_layers` and `..._last_stage_less_layers` layers
    (default 1 each), over `pipeline_parallel_layers_per_stage`'s count of stages when given (torchtitan b5bcd76
    torchtitan/distributed/pipeline_parallel.py `pipeline_llm`, `_get_pipeline_metadata`). v0.1.0's
    `pipeline_parallel_split_points` name the first layer of each stage after the first (`layers.N`; models/llama3/
    infra/pipeline.py `pipeline_llama_manual_split` keeps the layers from one split point up to the next)."""
    if read_stage_modules(b, v.get("pp_fqns")):
        return
    splits = v.get("pp_split_points")
    if splits is not None and isinstance(splits.value, list) and splits.value:
        firsts = [_split_layer(p) for p in splits.value]
        if None in firsts or firsts != sorted(set(firsts)) or firsts[0] == 0:
            b.issue(
                IssueKind.INVALID_VALUE,
                "`pipeline_parallel_split_points` should name increasing decoder layers after the first "
                f"(`layers.N`), got {splits.value!r}: the layers are taken as evenly split",
                splits,
            )
            return
        b.set(
            "stage_boundaries",
            firsts,
            splits,
            note=f"{len(firsts) + 1} stages, cut before layers {', '.join(map(str, firsts))}",
        )
        return
    for what, concept, end in (
        ("pp_first_less", "stage_input_weight", "the first stage's embeddings"),
        ("pp_last_less", "stage_output_weight", "the last stage's norm and output"),
    ):
        if (s := v.get(what)) is not None:
            b.set_int(concept, s, minimum=0)
        else:
            b.set(
                concept,
                1,
                pp_s,
                origin=Origin.DEFAULT,
                framework=FRAMEWORK_LABEL,
                note=f"{end} count as one layer in torchtitan's split of the layers over the stages",
            )
    if (per_stage := v.get("pp_layers_per_stage")) is not None and per_stage.value is not None:
        b.set_int("layers_per_stage", per_stage, minimum=1)


# a decoder layer's module name in a stage's list (`layers.3`, `model.layers.3`)
_LAYER_FQN = re.compile(r"(^|\.)layers\.\d+$")


def _pipeline_batch(b: PlanBuilder, v: _Values, pp_s: Setting | None) -> None:
    """The pipeline's micro-batches: the estimate's micro batch is one pipeline micro-batch and its accumulation the
    schedule's count of them (M). Releases up to v0.2.x split the local batch: `n_microbatches = local_batch_size //
    pipeline_parallel_microbatch_size` (v0.1.0 torchtitan/distributed/pipeline.py `build_pipeline_schedule`); main
    states the count, `num_pp_microbatches`, each of one micro batch (torchtitan/config/configs.py at b5bcd76c).
    Gradient accumulation over whole schedules (a global batch above local × data parallel) does not raise the peak
    and is not counted."""
    if (count_s := v.get("pp_microbatches")) is not None or "pp_microbatches" in v.defaults:
        m = to_int(count_s.value) if count_s is not None else v.defaults["pp_microbatches"]
        if m is not None and m >= 1:
            b.set(
                "grad_accum",
                m,
                count_s or pp_s,
                origin=Origin.FILE if count_s is not None else Origin.DEFAULT,
                framework=None if count_s is not None else FRAMEWORK_LABEL,
                override=True,
                note=f"{m} pipeline micro-batch{'es' if m != 1 else ''} per schedule (num_pp_microbatches)",
            )
        return
    split_local_batch(
        b, v.get("pp_microbatch_size"), pp_s, "pipeline_parallel_microbatch_size", "torchtitan", FRAMEWORK_LABEL
    )


def split_local_batch(
    b: PlanBuilder, size_s: Setting | None, pp_s: Setting | None, name: str, who: str, label: str
) -> None:
    """The plan's local batch (`micro_batch`) split into pipeline micro-batches of `size_s` (default 1), the
    schedule's M (`grad_accum`): `n_microbatches = local_batch_size // microbatch_size`, refused unless it divides
    (torchtitan v0.1.0 … v0.2.2 `build_pipeline_schedule`; NeMo AutoModel components/distributed/pipelining/
    functional.py `build_pipeline_schedule`). `name` is the setting's, `who` the framework that refuses, `label`
    its defaults'."""
    local = b.plan.micro_batch.value if b.plan.micro_batch is not None else None
    size = to_int(size_s.value) if size_s is not None else 1
    if not isinstance(local, int) or not size or size < 1 or local % size:
        where = size_s or b.plan.micro_batch
        return b.issue(
            IssueKind.INVALID_VALUE,
            f"local_batch_size {local} is not a multiple of {name} {size}: {who} refuses the pipeline schedule",
            span=getattr(where, "span", None),
        )
    anchor = size_s or pp_s
    b.set(
        "micro_batch",
        size,
        anchor,
        origin=Origin.FILE if size_s is not None else Origin.DEFAULT,
        framework=None if size_s is not None else label,
        override=True,
        note=f"one pipeline micro-batch: {name} {size} of local_batch_size {local}",
    )
    b.set(
        "grad_accum",
        local // size,
        anchor,
        origin=Origin.DERIVED,
        override=True,
        note=f"{local // size} pipeline micro-batches per schedule: local_batch_size {local} ÷ {name} {size}",
    )


def read_stage_modules(b: PlanBuilder, s: Setting | None) -> bool:
    """`module_fqns_per_model_part`, each stage's modules named outright (torchtitan, NeMo AutoModel): the decoder
    layers of each stage (its `layers.N` entries) set as `stage_layers`; whether it was read."""
    if s is None or not isinstance(s.value, list):
        return False
    if not all(isinstance(part, list) for part in s.value):
        b.issue(IssueKind.INVALID_VALUE, "`module_fqns_per_model_part` should list each stage's modules", s)
        return False
    counts = [sum(1 for name in part if _LAYER_FQN.search(str(name))) for part in s.value]
    b.set("stage_layers", counts, s, note=f"decoder layers of each stage: {counts}")
    return True


def _reshard(b: PlanBuilder, v: _Values, where: Setting | None, pp: int, pp_s: Setting | None) -> None:
    """The ZeRO stage of torchtitan's FSDP2 from `parallelism.fsdp_reshard_after_forward` (v0.1.0
    config_manager.py, v0.2.x config/job_config.py, main config/configs.py; default "default"): "always" reshards each
    block after its forward (FULL_SHARD, stage 3), "never" keeps its parameters gathered until its backward
    (SHARD_GRAD_OP, stage 2), "default" is "always" unless pipeline parallelism is on (v0.2.0
    models/llama3/infra/parallelize.py `apply_fsdp`; main distributed/fsdp.py
    `get_fsdp_reshard_after_forward_policy`). "default" also leaves the last block (v0.1.0) or the final norm and
    output (v0.2.x) gathered, whose backward runs first: the estimate takes them as resharded."""
    s = v.get("reshard")
    policy = str(v.value("reshard")).strip().lower()
    if policy not in ("default", "always", "never"):
        if s is not None:
            b.unknown(s, "FSDP reshard policy", ("default", "always", "never"))
        s, policy = None, "default"
    if policy == "default" and pp > 1:
        b.set(
            "zero_stage",
            2,
            pp_s,
            origin=Origin.DERIVED,
            note=f'fsdp_reshard_after_forward "default" with pipeline parallel ({pp} stages): FSDP2 keeps each '
            "block's parameters gathered from its forward to its backward (SHARD_GRAD_OP-like)",
        )
    elif policy == "never":
        b.set(
            "zero_stage",
            2,
            s,
            note="fsdp_reshard_after_forward never: FSDP2 keeps each block's parameters gathered from its forward to "
            "its backward (SHARD_GRAD_OP-like)",
        )
    elif policy == "always":
        b.set("zero_stage", 3, s, note="fsdp_reshard_after_forward always: FSDP2 reshards each block after its forward")
    else:
        if s is not None:
            b.remember(s)
        b.set("zero_stage", 3, where, origin=Origin.DERIVED, note="FSDP2 shards parameters, gradients and states")


def _checkpointing(b: PlanBuilder, v: _Values) -> None:
    """torchtitan/models/llama3/infra/parallelize.py `apply_ac` (v0.1.0; torchtitan/distributed/
    activation_checkpoint.py `_apply_ac_to_transformer_block` at v0.2.2): `full` wraps every block in
    checkpoint_wrapper; `selective` with selective_ac_option "op" wraps every block in a checkpoint whose policy saves
    the outputs of the ops in its save list (matmuls — every second one recomputed —, attention, reduce-scatters)
    and recomputes the rest (`selective_recompute` "op"); a whole number N checkpoints every N-th block
    (`_apply_layer_sac`: `if not ac_freq or count % ac_freq == 0`, so 0 and 1 checkpoint every block)."""
    s = v.get("ac_mode")
    mode = str(v.value("ac_mode")).strip().lower()
    if mode not in ("none", "full", "selective", "memory_budget"):
        if s is not None:
            b.unknown(s, "activation checkpointing mode", ("none", "selective", "full"))
        return
    if mode == "none":
        return b.set("grad_checkpointing", False, s, origin=Origin.FILE if s else Origin.DEFAULT)
    if mode == "full":
        return b.set("grad_checkpointing", True, s)
    option_s = v.get("ac_option")
    option = str(v.value("ac_option")).strip().lower()
    where = option_s or s
    if mode == "memory_budget":
        b.set("grad_checkpointing", False, s)
        return b.unmodelled(
            s,
            "activation checkpointing to a memory budget (torch.compile's min-cut)",
            "estimated without activation checkpointing (more memory than the run)",
            key="activation_checkpoint.mode",
        )
    origin = Origin.FILE if where is not None else Origin.DEFAULT
    framework = None if where is not None else FRAMEWORK_LABEL
    if option == "op":
        b.set(
            "grad_checkpointing",
            False,
            where,
            origin=origin,
            framework=framework,
            note="selective_ac_option op: no whole block checkpointed",
        )
        return b.set(
            "selective_recompute",
            "op",
            where,
            origin=origin,
            framework=framework,
            note="selective_ac_option op: each block keeps its input, every other matmul's output and the "
            "attention's output; the rest is recomputed in backward",
        )
    every = to_int(option) if option.isdigit() else None
    if every is None:
        return b.unknown(option_s, "selective_ac_option", ("op", "2")) if option_s is not None else None
    every = max(every, 1)
    b.set(
        "grad_checkpointing",
        True,
        where,
        origin=origin,
        framework=framework,
        note="selective_ac_option 1: every block checkpointed"
        if every == 1
        else f"selective_ac_option {every}: every {_nth(every)} block checkpointed",
    )
    b.set("checkpoint_every", every, where, origin=origin, framework=framework)


def _nth(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _optimizer(b: PlanBuilder, v: _Values) -> None:
    s = v.get("optimizer")
    name = str(v.value("optimizer")).strip()
    full = OPTIMIZERS.get(name.lower())
    if full is None:
        if s is not None:
            b.unknown(s, "torchtitan optimizer", ("AdamW", "Adam"))
        return
    if s is not None:
        b.set("optimizer", full, s)
    else:
        _default(b, "optimizer", full)
    impl_s = v.get("optimizer_impl")
    impl = OPTIMIZER_IMPL.get(str(v.value("optimizer_impl")).strip().lower())
    if impl is not None:
        b.set(
            "optimizer_impl",
            impl,
            impl_s,
            origin=Origin.FILE if impl_s else Origin.DEFAULT,
            framework=None if impl_s else FRAMEWORK_LABEL,
        )
    elif impl_s is not None:
        b.unknown(impl_s, "optimizer implementation", tuple(OPTIMIZER_IMPL))
    # v0.2.2 components/optimizer.py `OptimizersInBackwardContainer`: each parameter's optimizer steps and zeroes its
    # gradient from a post-accumulate-grad hook, so no whole set of gradients is held at once
    in_bwd = v.get("optimizer_in_bwd")
    if in_bwd is not None:
        b.set_bool("optimizer_in_bwd", in_bwd, note="`early_step_in_backward`: the optimizer steps in backward")


def _float8(b: PlanBuilder, v: _Values) -> None:
    converters = v.get("converters")
    value = converters.value if converters is not None else []
    if isinstance(value, str):  # `--model.converters float8,mx` on a command line
        value = value.split(",")
    names = [str(n).strip() for n in value] if isinstance(value, list) else []
    old = v.get("float8_old")
    on = [
        n
        for n in names
        if n
        in (
            "float8",
            "quantize.linear.float8",
            "mx",
            "quantize.linear.mx",
            "quantize.grouped_mm.float8",
            "quantize.grouped_mm.mx",
        )
    ]
    linears = [n for n in on if "grouped_mm" not in n]
    if linears:
        # the speed model runs the blocks' linears at the fp8 rate with torchao's casts (estimate/throughput.py
        # `float8_peak`); the memory model counts what they keep, a bf16 linear's (resolve.assemble `_float8_linears`)
        b.set("float8_linears", True, converters, note=f"{', '.join(linears)}: the blocks' linears run in fp8")
        _float8_all_gather(b, v)
        if any(n.endswith("mx") for n in on):
            b.unmodelled(
                converters,
                f"the memory of MX linears ({', '.join(on)}: torchao's MX casts of inputs and weights)",
                "estimated as float8 linears, with a bf16 linear's saved tensors",
                key="model.converters",
            )
        elif len(on) > len(linears):
            b.unmodelled(
                converters,
                f"low-precision grouped expert GEMMs ({', '.join(n for n in on if 'grouped_mm' in n)})",
                "estimated with bf16 expert GEMMs",
                key="model.converters",
            )
    elif on:
        b.unmodelled(
            converters,
            f"low-precision grouped expert GEMMs ({', '.join(on)})",
            "estimated with bf16 expert GEMMs",
            key="model.converters",
        )
    elif old is not None and to_bool(old.value):
        b.set("float8_linears", True, old, note="torchao Float8Linear: the blocks' linears run in fp8")
        _float8_all_gather(b, v)


def _float8_all_gather(b: PlanBuilder, v: _Values) -> None:
    """With float8 linears, FSDP2 may all-gather their weights in fp8 (torchao `enable_fsdp_float8_all_gather`): the
    speed model halves that all-gather's volume; the memory model keeps bf16 weights."""
    gather = v.get("float8_all_gather")
    if gather is not None and to_bool(gather.value):
        b.set("float8_all_gather", True, gather, note="FSDP2 all-gathers the float8 linears' weights in fp8")


# ------------------------------------------------------------------------------------------------ launch lines


def override_settings(words: list[tuple[str, Span | None]]) -> tuple[list[Setting], str | None, Span | None]:
    """`--section.key value` / `--section.key=value` words of a torchtitan command line → Settings (path = the
    dotted parts), plus the `--job.config_file` value and its span."""
    out: list[Setting] = []
    config, config_span = None, None
    i = 0
    while i < len(words):
        text, span = words[i]
        i += 1
        if not text.startswith("--") or "." not in text.split("=", 1)[0]:
            continue
        name, eq, value = text[2:].partition("=")
        value_span = span
        if not eq:
            if i < len(words) and not words[i][0].startswith("--"):
                value, value_span = words[i]
                i += 1
            else:
                value = "true"  # a bare boolean flag (`--compile.enable`)
        path = tuple(p.replace("-", "_") for p in name.split("."))
        if path == ("job", "config_file"):
            config, config_span = value, value_span
            continue
        entry = (
            span
            if span is None or value_span is None
            else span.model_copy(update={"end_line": value_span.end_line, "end_col": value_span.end_col})
        )
        out.append(Setting(path[-1], path, _typed(value), span=entry, value_span=value_span, key_span=span))
    return out, config, config_span


def _typed(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    n = to_int(text)
    if n is not None and re.fullmatch(r"-?\d+", text.strip()):
        return n
    f = to_float(text)
    if f is not None:
        return f
    if text.startswith("[") or "," in text:
        return [p.strip().strip("'\"") for p in text.strip("[]").split(",") if p.strip()]
    return text


def from_launch(
    b: PlanBuilder,
    words: list[tuple[str, Span | None]],
    config_file: tuple[str, Span | None] | None,
    world: tuple[int, Any] | None,
    world_note: str | None,
    ctx,
) -> bool:
    """A torchtitan launch: read the job config it names (found as the shell reader finds config files) with the
    command line's overrides over it. False when the command names no job config."""
    from vramlens.formats import references
    from vramlens.plan import Reference

    overrides, config, config_span = override_settings(words)
    if config is None and config_file is None and (selected := registry_selection(words)) is not None:
        from vramlens.formats import torchtitan_python

        torchtitan_python.from_launch(b, selected[0], selected[1], overrides, world, world_note, ctx)
        return True
    if config is None and config_file is not None:
        config, config_span = config_file
    if config is None:
        return False
    ref = Reference(kind="config", target=config, span=config_span)
    b.plan.references.append(ref)
    settings: list[Setting] = []
    found, refused = references.find(config, ctx.path, ctx.workspace)
    text = references._read(found, ctx) if found is not None else None
    if found is not None:
        ref.resolved_path = str(found)
    if text is None:
        why = (
            "lies outside the folders vramlens reads"
            if refused
            else "was not found (looked next to this file and in the workspace root)"
        )
        b.issue(
            IssueKind.REFERENCE,
            f"torchtitan job config `{config}` {why}: only the command line's values count",
            span=config_span,
            severity=Severity.WARNING,
        )
    else:
        settings = toml_settings(text, str(found)) or []
        if not settings:
            b.issue(
                IssueKind.REFERENCE,
                f"`{config}` is not a torchtitan job config",
                span=config_span,
                severity=Severity.WARNING,
            )
    apply(b, settings, overrides, world, world_note)
    return True


def registry_selection(
    words: list[tuple[str, Span | None]],
) -> tuple[tuple[str, Span | None], tuple[str, Span | None]] | None:
    """`--module <package> --config <function>` (or `--module=…`) of a torchtitan main command line: the Python config
    it selects (torchtitan/config/manager.py at main: both are required); None when either is missing."""
    found: dict[str, tuple[str, Span | None]] = {}
    for i, (text, span) in enumerate(words):
        name, eq, value = text.partition("=")
        if name not in ("--module", "--config"):
            continue
        if eq:
            found[name] = (value, span)
        elif i + 1 < len(words) and not words[i + 1][0].startswith("-"):
            found[name] = words[i + 1]
    if "--module" in found and "--config" in found and found["--module"][0] and found["--config"][0]:
        return found["--module"], found["--config"]
    return None


_RUN_SCRIPT = re.compile(r"run_\w*train\w*\.sh")
# a line that runs torchtitan's launch script, with its `NAME=value` prefixes and `\`-continued lines
_RUN_LINE = re.compile(r"^[ \t]*(?:[A-Za-z_]\w*=\S*[ \t]+)*\S*run_\w*train\w*\.sh\b(?:[^\n]*\\\n)*[^\n]*", re.M)


def from_script(script, ctx, path: str) -> TrainingPlan | None:
    """The plan of a shell script that launches torchtitan, or None: `torchrun … -m torchtitan.train
    --job.config_file x.toml --training.steps 10 …`, or torchtitan's launch script with its variables
    (`NGPU=8 CONFIG_FILE=./x.toml ./run_train.sh --training.seq_len 4096`; run_train.sh at v0.1.0–v0.2.2 runs
    `torchrun --nproc_per_node=${NGPU:-8} … -m torchtitan.train --job.config_file ${CONFIG_FILE} "$@"`)."""
    from vramlens.formats import shell

    idx = script.index
    launch = script.launch
    at = _train_module_at(launch.args) if launch is not None else None
    if at is not None:
        words = [(a.text, idx.span(a.word.start, a.word.end)) for a in launch.args[at + 1 :]]
        world = _torchrun_world(launch, idx)
        b = PlanBuilder(path, "torchtitan", "torchtitan")
        return b.plan if from_launch(b, words, None, world, "torchrun's process count", ctx) else None
    for line in _RUN_LINE.finditer(script.text):  # the shell reader passes over lines of unknown programs
        cmd_words = shell.words_in(script.text, line.start(), line.end())
        texts = [shell.expand_parts(w.parts, script.env) for w in cmd_words]
        k = 0
        prefix: dict[str, tuple[str, Span]] = {}
        while k < len(texts) and texts[k] is not None and re.match(r"[A-Za-z_]\w*=", texts[k]):
            name, _, value = texts[k].partition("=")
            prefix[name] = (value, idx.span(cmd_words[k].start, cmd_words[k].end))
            k += 1
        if k >= len(texts) or texts[k] is None or not _RUN_SCRIPT.fullmatch(texts[k].rsplit("/", 1)[-1]):
            continue

        def var(name: str) -> tuple[str, Span | None] | None:
            if name in prefix:
                return prefix[name]
            known = script.env.get(name)
            if known is not None and known.value is not None and known.exported:
                return known.value, idx.span(*known.stmt_range) if known.stmt_range else None
            return None

        words = [(t or "", idx.span(w.start, w.end)) for t, w in zip(texts[k + 1 :], cmd_words[k + 1 :])]
        ngpu = var("NGPU")
        b = PlanBuilder(path, "torchtitan", "torchtitan")
        world, note = None, None
        if ngpu is not None and to_int(ngpu[0]):
            s = Setting("NGPU", ("NGPU",), to_int(ngpu[0]), span=ngpu[1], value_span=ngpu[1])
            world, note = (to_int(ngpu[0]), s), "NGPU: torchrun --nproc_per_node"
        else:
            world, note = (8, None), f"`{texts[k]}` runs `NGPU:-8` processes"
        config = var("CONFIG_FILE")
        module, function = var("MODULE"), var("CONFIG")
        if config is None and (module is not None or function is not None):
            # run_train.sh at torchtitan main: `MODULE=${MODULE:-"llama3"} CONFIG=${CONFIG:-"llama3_debugmodel"}`,
            # passed on as `--module ${MODULE} --config ${CONFIG}`
            from vramlens.formats import torchtitan_python

            overrides = override_settings(words)[0]
            torchtitan_python.from_launch(
                b,
                module or ("llama3", None),
                function or ("llama3_debugmodel", None),
                overrides,
                world,
                note,
                ctx,
            )
            return b.plan
        if config is None:
            b.issue(
                IssueKind.NOT_READ,
                f"`{texts[k]}` is given no CONFIG_FILE: torchtitan's script then trains its "
                "debug model (./torchtitan/models/llama3/train_configs/debug_model.toml)",
                severity=Severity.INFO,
                span=idx.span(line.start(), line.end()),
            )
            config = ("./torchtitan/models/llama3/train_configs/debug_model.toml", idx.span(line.start(), line.end()))
        if from_launch(b, words, config, world, note, ctx):
            return b.plan
    return None


def _train_module_at(args) -> int | None:
    """Where torchtitan's trainer is named among a launch's words (`-m torchtitan.train`, `torchtitan/train.py`, or a
    `train.py` given `--job.config_file`); None for any other program. Found by name, not by position: a launcher
    flag read wrongly as taking no value must not hide it."""
    for j, a in enumerate(args):
        t = a.text
        if t == "torchtitan.train" or t.endswith("torchtitan/train.py"):
            return j
        if (t == "train.py" or t.endswith("/train.py")) and any(
            x.text.split("=", 1)[0] == "--job.config_file" for x in args[j + 1 :]
        ):
            return j
    return None


def _torchrun_world(launch, idx: LineIndex) -> tuple[int, Setting] | None:
    """torchrun's `--nproc_per_node` × `--nnodes` (a number; `--nnodes 1:4` ranges are read as their low end)."""
    nproc = nodes = None
    where = None
    for name, flag, vals in launch.launcher_flags:
        text = vals[0].text if vals else ""
        text = text.split("=", 1)[1] if "=" in text else text
        if name == "nproc_per_node":
            nproc = to_int(text)
            word = (vals[0] if vals else flag).word
            where = Setting(
                "nproc_per_node",
                ("nproc_per_node",),
                nproc,
                span=idx.span(flag.word.start, word.end),
                value_span=idx.span(word.start, word.end),
            )
        elif name == "nnodes":
            nodes = to_int(text.split(":", 1)[0])
    if not nproc or where is None:
        return None
    return nproc * (nodes or 1), where
