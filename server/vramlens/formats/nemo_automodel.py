"""NeMo AutoModel recipe YAML (`automodel examples/llm_finetune/…/x.yaml --nproc-per-node 8`).

Sections as NVIDIA-NeMo/Automodel's recipes read them (nemo_automodel/recipes/llm/train_ft.py; the examples under
examples/llm_finetune/ at v0.1.0 and v0.5.0): `model` is a `_target_` (`NeMoAutoModelForCausalLM.from_pretrained`)
with `pretrained_model_name_or_path` and `torch_dtype` (default "auto": the checkpoint's dtype),
`step_scheduler` the global and local (per-GPU) batch, `distributed` FSDP2Manager's `dp_size`/`dp_replicate_size`/
`tp_size`/`cp_size`/`pp_size`/`ep_size`, `sequence_parallel` and `activation_checkpointing`
(nemo_automodel/components/distributed/fsdp2.py at v0.1.0, distributed/config.py at v0.5.0: FSDP2 with
MixedPrecisionPolicy(param_dtype=bfloat16)), `peft` LoRA's `dim`/`alpha`/`dropout`/`target_modules`/
`match_all_linear`, `quantization` bitsandbytes' `load_in_4bit`…, `fp8` torchao's float8 linears, `optimizer` a
`torch.optim` class, `loss_fn`.
`_target_` values are read as text only; nothing is imported.
"""

from __future__ import annotations

import re
from typing import Any

from vramlens.formats import model_kind
from vramlens.formats.ep_dispatch import KEY, set_deepep, set_hybridep
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.formats.torchtitan import read_schedule, read_stage_modules, split_local_batch
from vramlens.knowledge.deepep import DISPATCH_CONFIGS
from vramlens.knowledge.frameworks import NEMO_OWN_MODEL_ATTENTION
from vramlens.knowledge.pipelining import MULTI_STAGE_SCHEDULES
from vramlens.plan import IssueKind, Origin, Sourced

LABEL = "NeMo AutoModel"
SECTIONS = frozenset(
    {
        "step_scheduler",
        "dist_env",
        "model",
        "distributed",
        "peft",
        "loss_fn",
        "packed_sequence",
        "dataloader",
        "validation_dataset",
        "validation_dataloader",
        "recipe",
        "rng",
        "quantization",
        "checkpoint",
        "lr_scheduler",
        "optimizer",
        "dataset",
    }
)
DTYPES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "torch.float16": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "torch.float32": "fp32",
    "auto": "auto",
}
LOSSES = {
    "MaskedCrossEntropy": "standard",
    "TEParallelCrossEntropy": "standard",
    "FusedLinearCrossEntropy": "fused",
    "ChunkedCrossEntropy": "chunked",
}
# The recipe classes a YAML's `recipe:` names (nemo_automodel/recipes/ at main 36044ad3): the language-model ones
# are read as such; the others train another kind of model, (the kind, what it trains) — said when no model is read.
_SPECULATIVE = (
    "a speculative-decoding draft model",
    "a small draft network against the frozen target model `{target}`, which runs beside it "
    "(nemo_automodel/recipes/llm/train_{module}.py)",
)
RECIPES: dict[str, tuple[str, str] | None] = {
    "TrainFinetuneRecipeForNextTokenPrediction": None,
    "BenchmarkingRecipeForNextTokenPrediction": None,
    "KnowledgeDistillationRecipeForNextTokenPrediction": None,
    "TrainFinetuneRecipeForSequenceClassification": None,
    "FinetuneRecipeForVLM": None,
    "KnowledgeDistillationRecipeForVLM": None,
    "DiffusionLMSFTRecipe": None,
    "DiffusionGemmaSFTRecipe": None,
    "TrainDiffusionRecipe": ("a diffusion model", "`{target}` by flow matching (nemo_automodel/recipes/diffusion)"),
    "TrainEagle1Recipe": _SPECULATIVE,
    "TrainEagle2Recipe": _SPECULATIVE,
    "TrainEagle3Recipe": _SPECULATIVE,
    "TrainDFlashRecipe": _SPECULATIVE,
    "TrainDFlash2Recipe": _SPECULATIVE,
    "TrainDominoRecipe": _SPECULATIVE,
    "TrainDSparkRecipe": _SPECULATIVE,
    "TrainJetSpecRecipe": _SPECULATIVE,
    "TrainVispecRecipe": _SPECULATIVE,
    "TrainVispecStage1Recipe": _SPECULATIVE,
    "PretrainRecipeForMultimodal": (
        "a unified multimodal model",
        "a language model `{target}` joined with a vision encoder and an image autoencoder in one network "
        "(nemo_automodel/recipes/multimodal)",
    ),
    "FinetuneRecipeForMultimodal": (
        "a unified multimodal model",
        "a language model `{target}` joined with a vision encoder and an image autoencoder in one network "
        "(nemo_automodel/recipes/multimodal)",
    ),
    "TrainBiEncoderRecipe": ("an embedding retriever", "a bi-encoder on `{target}` (nemo_automodel/recipes/retrieval)"),
    "TrainCrossEncoderRecipe": (
        "an embedding retriever",
        "a cross-encoder reranker on `{target}` (nemo_automodel/recipes/retrieval)",
    ),
    "EmbeddingDistillRecipe": (
        "an embedding retriever",
        "an embedding model distilled from `{target}` (nemo_automodel/recipes/retrieval)",
    ),
}
# recipe class → the module under nemo_automodel/recipes/llm/ that defines it (for the message)
_RECIPE_MODULES = {
    "TrainEagle1Recipe": "eagle1",
    "TrainEagle2Recipe": "eagle2",
    "TrainEagle3Recipe": "eagle3",
    "TrainDFlashRecipe": "dflash",
    "TrainDFlash2Recipe": "dflash2",
    "TrainDominoRecipe": "domino",
    "TrainDSparkRecipe": "dspark",
    "TrainJetSpecRecipe": "jetspec",
    "TrainVispecRecipe": "vispec",
    "TrainVispecStage1Recipe": "vispec",
}
# the run's header comment: "automodel examples/…/x.yaml --nproc-per-node 8"
_RUN_LINE = re.compile(r"^#.*\bautomodel\b.*--nproc[-_]per[-_]node[ =](\d+)", re.MULTILINE)


def _target(value: Any) -> str:
    return value.get("_target_", "") if isinstance(value, dict) and isinstance(value.get("_target_"), str) else ""


def detect(data: Any, keys: set[str]) -> float:
    if "nemo_automodel" in _target(data.get("model")) or "nemo_automodel" in _target(data.get("distributed")):
        return 1.0
    if str(data.get("recipe") or "").strip() in RECIPES:
        return 1.0
    if "flow_matching" in keys and "step_scheduler" in keys and isinstance(data.get("model"), dict):
        return 1.0  # TrainDiffusionRecipe's sections (nemo_automodel/recipes/diffusion/train.py at 36044ad3)
    if {"step_scheduler", "distributed"} <= keys and len(keys & SECTIONS) >= 4:
        return 0.9
    return 0.0


def config_purpose(keys: set[str], data: dict) -> str | None:
    """What a NeMo AutoModel YAML that trains nothing is for (no `optimizer` section, which every training recipe
    builds), or None: the diffusion generation configs (examples/diffusion/generate/configs at 36044ad3, read by
    examples/diffusion/generate/generate.py: `inference.num_inference_steps`) and the retrieval hard-negative mining
    config (examples/retrieval/data_utils/mining_config.yaml: `mining:`)."""
    if "optimizer" in keys:
        return None
    inference = data.get("inference")
    if isinstance(inference, dict) and "num_inference_steps" in inference:
        return "a NeMo AutoModel diffusion generation config (samples images or videos from a trained model)"
    if isinstance(data.get("mining"), dict) and "hard_negatives_to_mine" in data["mining"]:
        return "a NeMo AutoModel hard-negative mining config (retrieval data preparation with an embedding model)"
    return None


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    by = {tuple(str(p) for p in s.path): s for s in settings}

    def get(*path: str) -> Setting | None:
        s = by.get(path)
        return s if s is not None and s.value is not None else None

    _model(b, data, get)
    if b.plan.model_id is None and model_kind.built_arch(b.plan) is None:
        _other_kind(b, data, get)
    if (s := get("step_scheduler", "local_batch_size")) is not None:
        b.set_int("micro_batch", s, minimum=1)
    if (s := get("step_scheduler", "global_batch_size")) is not None:
        b.set_int("global_batch", s, minimum=1)
    _sequence(b, get)
    _distributed(b, data, get, ctx)
    _peft(b, data, get)
    _quantization(b, get)
    if (s := get("optimizer", "_target_")) is not None and isinstance(s.value, str):
        b.set("optimizer", s.value.strip(), s)
    if (s := get("loss_fn", "_target_")) is not None and isinstance(s.value, str):
        impl = LOSSES.get(s.value.rsplit(".", 1)[-1])
        if impl is not None:
            b.set("loss_impl", impl, s)
    if (s := get("compile", "enabled")) is not None:
        b.set_bool("compile", s)
    if (s := get("fp8", "enabled")) is not None and to_bool(s.value):
        b.set("float8_linears", True, s, note="torchao Float8: the linears run in fp8")


def _model(b: PlanBuilder, data: Any, get) -> None:
    s = get("model", "pretrained_model_name_or_path")
    if s is None:
        # `NeMoAutoModelForCausalLM.from_config` with `config: {_target_: transformers.AutoConfig.from_pretrained,
        # pretrained_model_name_or_path: …}`: that model's architecture, initialised afresh (the llm_benchmark and
        # llm_pretrain examples, e.g. examples/llm_benchmark/deepseek/deepseek_v3_te_deepep.yaml at 36044ad3)
        s = get("model", "config", "pretrained_model_name_or_path")
    if s is not None and isinstance(s.value, str) and s.value.strip() and not _other_recipe(data):
        b.set("model_id", s.value.strip(), s)
    elif s is None and isinstance(model := data.get("model"), dict):
        _model_by_fields(b, model, get)
    s = get("model", "torch_dtype")
    if s is not None:
        dtype = DTYPES.get(str(s.value).strip().lower())
        if dtype is None:
            b.unknown(s, "torch_dtype", ("bfloat16", "float32", "auto"))
        else:
            b.set("weight_dtype", dtype, s)
    else:
        b.set(
            "weight_dtype",
            "auto",
            origin=Origin.DEFAULT,
            framework=LABEL,
            note="from_pretrained(torch_dtype='auto'): the checkpoint's dtype",
        )
    if (s := get("model", "attn_implementation")) is not None and isinstance(s.value, str):
        b.set("attn_impl", s.value.strip(), s)
    _own_model_attention(b, data, get)


# NeMo AutoModel's own model classes (its registry, nemo_automodel/_transformers/registry.py, and a `_target_` naming
# nemo_automodel.components.models.<x>.model.<Class>) run attention through `model.backend.attn`
# (components/attention/utils.py `initialize_attn_module_and_func` at v0.2.0 and 36044ad3: "te", Transformer Engine's
# DotProductAttention; "sdpa", F.scaled_dot_product_attention with `is_causal` and `enable_gqa`; "flex", torch's
# FlexAttention; main also "eager"), defaulting to "te" where Transformer Engine is installed, else "sdpa"
# (components/moe/utils.py `BackendConfig` at v0.2.0, components/models/common/utils.py at v0.4.0 and main): no
# backend writes out the score matrix, whatever attention transformers' class of the same model has
OWN_ATTENTION = {"te": "flash_attention_2", "sdpa": "sdpa", "flex": "flex_attention", "eager": "eager"}


def _own_model_attention(b: PlanBuilder, data: Any, get) -> None:
    """Where the model section has a `backend:` or names one of NeMo's own classes, the attention its own class
    of the model runs (`OWN_ATTENTION`), kept for the resolver (resolve/versions.py), which applies it to the
    families NeMo implements itself (knowledge/frameworks.py `NEMO_OWN_MODELS`)."""
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return
    target = model.get("_target_")
    own_class = isinstance(target, str) and target.strip().startswith("nemo_automodel.components.models.")
    if not isinstance(model.get("backend"), dict) and not own_class:
        return
    s = get("model", "backend", "attn")
    said = str(s.value).strip().lower() if s is not None and s.value is not None else None
    attention = OWN_ATTENTION.get(said or "sdpa")
    if attention is None:
        return  # tilelang, cudnn: the model's own sparse kernels (main), left to the family's default
    where = s or get("model", "backend") or get("model", "_target_")
    note = (
        f"`backend.attn: {said}`"
        if said
        else "`BackendConfig.attn` default: Transformer Engine's attention where it is installed, else SDPA"
    )
    b.plan.extra[NEMO_OWN_MODEL_ATTENTION] = Sourced(
        value=attention,
        origin=Origin.FILE if s is not None else Origin.DEFAULT,
        key=where.key if where is not None else None,
        span=where.span if where is not None else None,
        value_span=where.value_span if where is not None else None,
        note=note,
    )


# `config: {_target_: transformers.models.<model_type>.configuration_<model_type>.<Name>Config, …}` or NeMo AutoModel's
# own `nemo_automodel.components.models.<model_type>.config.<Name>Config`
_CONFIG_CLASS = re.compile(r"(?:^|\.)models\.(\w+)\.(?:configuration_\w+|config)\.(\w+Config)$")
# nanoGPT-style builders' size keywords (nemo_automodel/components/models/gpt2.py `build_gpt2_model` at v0.2.0):
# GPT-2 blocks, LayerNorm and a GELU MLP of 4 × n_embd, the LM head tied
_GPT2_SIZES = {"n_layer": "n_layer", "n_embd": "n_embd", "n_head": "n_head", "vocab_size": "vocab_size"}


def _model_by_fields(b: PlanBuilder, model: dict, get) -> None:
    """A model the file builds from its own fields instead of naming a checkpoint:
    `NeMoAutoModelForCausalLM.from_config` with an inline `config:` (its config class's fields, as config.json
    holds them: the llm_finetune proxies and llm_benchmark recipes at main 36044ad3), or a builder called with the
    model's sizes (`build_gpt2_model(n_layer=…, n_embd=…, n_head=…)`, examples/llm_pretrain/nanogpt_pretrain.yaml)."""
    config = model.get("config")
    if isinstance(config, dict) and isinstance(config.get("_target_"), str):
        from vramlens.knowledge.models import arch_from_hf_config

        target = config["_target_"].strip()
        where = get("model", "config", "_target_")
        m = _CONFIG_CLASS.search(target)
        fields = {k: v for k, v in config.items() if k != "_target_"}
        if m is not None:
            fields.setdefault("model_type", m[1])
        name = target.rsplit(".", 1)[-1]
        arch = arch_from_hf_config(fields, f"{name} (inline config)", source="the config's inline `model.config`")
        if arch is None:
            b.issue(
                IssueKind.UNKNOWN_VALUE,
                f"`model.config` builds `{name}` from fields the file leaves partly to the class's own defaults "
                "(no hidden size, layer count or head count written), which vramlens does not know",
                where,
            )
            return
        model_kind.set_built_arch(
            b,
            arch,
            where,
            f"`model.config`: `{name}` built afresh from the file's fields ({arch.layers} layers, hidden "
            f"{arch.hidden}" + (f", {arch.num_experts} experts" if arch.num_experts else "") + ")",
        )
        return
    if all(k in model for k in ("n_layer", "n_embd", "n_head")):
        for key, shape in _GPT2_SIZES.items():
            if (s := get("model", key)) is not None:
                b.shape(shape, s)
        if (s := get("model", "n_positions")) is not None:
            b.shape("block_size", s)


def _other_recipe(data: Any) -> tuple[str, str] | None:
    """(the kind, what it trains) when the recipe trains something other than a language model."""
    recipe = str(data.get("recipe") or "").strip()
    if recipe in RECIPES:
        return RECIPES[recipe]
    if "flow_matching" in data:
        return RECIPES["TrainDiffusionRecipe"]
    return None


def _other_kind(b: PlanBuilder, data: Any, get) -> None:
    """A run that trains another kind of model: one message naming the kind and the model it names."""
    found = _other_recipe(data)
    if found is None:
        return
    kind, what = found
    recipe = str(data.get("recipe") or "").strip()
    where = None
    for path in (
        ("recipe_args", "target_model_name_or_path"),
        ("model", "pretrained_model_name_or_path"),
        ("model", "llm_path"),
        ("model", "config", "pretrained_model_name_or_path"),
        ("recipe",),
    ):
        if (where := get(*path)) is not None:
            break
    target = where.value if where is not None and path != ("recipe",) else "?"
    detail = what.format(target=target, module=_RECIPE_MODULES.get(recipe, "*"))
    said = f"`recipe: {recipe}`" if recipe else "`flow_matching:` (the diffusion recipe's section)"
    model_kind.set_other_kind(b, where, kind, f"{said} trains {detail}")


def _sequence(b: PlanBuilder, get) -> None:
    packed = get("packed_sequence", "packed_sequence_size")
    if packed is not None and (to_int(packed.value) or 0) > 0:
        b.set_int("seq_len", packed, minimum=1)
        b.set("packing", True, packed, note="packed_sequence_size > 0: samples packed to this length")
        return
    for path in (("dataset", "seq_length"), ("dataset", "max_length"), ("dataset", "seq_len")):
        if (s := get(*path)) is not None:
            b.set_int("seq_len", s, minimum=1)
            return


def _pipeline(b: PlanBuilder, get, pp_s: Setting | None) -> None:
    """`distributed.pipeline`: AutoPipeline builds `pp_schedule` (default "1f1b") with torch's `get_schedule_class`
    (NeMo AutoModel components/distributed/pipelining/autopipeline.py `AutoPipeline.__init__`, functional.py
    `pipeline_model`) and cuts the model's decoder layers evenly over its stages, the first ones a layer more, the
    embeddings and the head beside them (functional.py `generate_hf_model_fqn_per_model_part`: torchtitan's split
    with no weights), two stages per rank for a multi-stage schedule or ceil(layers / `layers_per_stage`)
    (`calculate_virtual_stages`), or the stages `module_fqns_per_model_part` names. The recipe hands the schedule
    the local batch in micro-batches of `pp_microbatch_size` (default 1; recipes/llm/train_ft.py: `pp_batch_size`
    = `step_scheduler.local_batch_size`; functional.py `build_pipeline_schedule`: `n_microbatches = local_batch_size
    // microbatch_size`)."""
    s = get("distributed", "pipeline", "pp_schedule")
    name = read_schedule(b, s)
    if not read_stage_modules(b, get("distributed", "pipeline", "module_fqns_per_model_part")):
        for concept in ("stage_input_weight", "stage_output_weight"):
            b.set(
                concept,
                0,
                s or pp_s,
                origin=Origin.DERIVED,
                note="NeMo AutoModel splits the decoder layers alone (the embeddings and the head weigh nothing)",
            )
        lps = get("distributed", "pipeline", "layers_per_stage")
        if lps is not None:
            b.set_int("layers_per_stage", lps, minimum=1)
            rounding = get("distributed", "pipeline", "round_virtual_stages_to_pp_multiple")
            if rounding is not None and str(rounding.value).lower() in ("up", "down"):
                b.set("stage_count_rounding", str(rounding.value).lower(), rounding)
            elif rounding is not None and rounding.value is not None:
                b.issue(
                    IssueKind.INVALID_VALUE,
                    f"`round_virtual_stages_to_pp_multiple` should be up or down, got {rounding.value!r} "
                    "(NeMo AutoModel raises ValueError)",
                    rounding,
                )
        elif name in MULTI_STAGE_SCHEDULES:
            b.set(
                "virtual_pipeline",
                2,
                s,
                origin=Origin.DEFAULT,
                framework=LABEL,
                note=f"{name}: two stages per rank (NeMo AutoModel's default, `calculate_virtual_stages`)",
            )
    if b.plan.micro_batch is not None:
        size = get("distributed", "pipeline", "pp_microbatch_size")
        split_local_batch(b, size, pp_s, "pp_microbatch_size", LABEL, LABEL)


def _size(b: PlanBuilder, get, key: str) -> tuple[int | None, Setting | None]:
    """A parallel size; `none` (the rest of the GPUs) and absent are None; anything else not ≥ 1 is reported."""
    s = get("distributed", key)
    if s is None or str(s.value).strip().lower() in ("none", "null", ""):
        return None, s
    n = to_int(s.value)
    if n is None or n < 1:
        b.issue(
            IssueKind.INVALID_VALUE, f"`{key}` should be a whole number of at least 1 (or none), got {s.value!r}", s
        )
        return None, s
    return n, s


def _distributed(b: PlanBuilder, data: Any, get, ctx) -> None:
    section = data.get("distributed")
    if not isinstance(section, dict):
        return
    target = _target(section).rsplit(".", 1)[-1]
    strategy = str(section.get("strategy") or "").strip().lower()
    where = get("distributed", "_target_") or get("distributed", "strategy")
    megatron_fsdp = target == "MegatronFSDPManager" or strategy == "megatron_fsdp"
    if target == "DDPManager" or strategy == "ddp":
        b.set("dist_strategy", "ddp", where)
    else:  # FSDP2Manager / strategy fsdp2 (and MegatronFSDP's sharding)
        b.set("dist_strategy", "fsdp", where, note="NeMo AutoModel shards with FSDP2")
        b.set("zero_stage", 3, where, origin=Origin.DERIVED, note="FSDP2 shards parameters, gradients and states")
        b.set("fsdp_version", 2, where, origin=Origin.DERIVED)
        if megatron_fsdp:
            b.unmodelled(where, "Megatron-FSDP (its own buffers and bucketing)", "estimated as FSDP2")
    dp, dp_s = _size(b, get, "dp_size")
    tp, tp_s = _size(b, get, "tp_size")
    cp, cp_s = _size(b, get, "cp_size")
    pp, pp_s = _size(b, get, "pp_size")
    rep, rep_s = _size(b, get, "dp_replicate_size")
    ep, ep_s = _size(b, get, "ep_size")
    if not (target == "DDPManager" or strategy == "ddp" or megatron_fsdp):
        _reshard(b, get, pp or 1, pp_s, ep or 1, ep_s)
    if tp and tp > 1:
        b.set("tensor_parallel", tp, tp_s)
    if cp and cp > 1:
        b.set("context_parallel", cp, cp_s)
    if pp and pp > 1:
        b.set("pipeline_parallel", pp, pp_s)
        _pipeline(b, get, pp_s)
    if rep and rep > 1:
        # FSDP2 over the (dp_replicate, dp_shard_cp) mesh: sharded within dp·cp ÷ dp_replicate_size GPUs
        # (components/distributed/mesh_utils.py at v0.5.0)
        b.set("dp_replicas", rep, rep_s, note="HSDP: FSDP shards within each of dp_replicate_size replicas")
    if ep and ep > 1:
        _expert_parallel(b, get, ep, ep_s, dp and dp * (cp or 1) * (tp or 1))
    if dp:
        b.set(
            "world_size",
            dp * (tp or 1) * (cp or 1) * (pp or 1),
            dp_s,
            origin=Origin.DERIVED,
            note=f"dp_size {dp} × tp {tp or 1} × cp {cp or 1} × pp {pp or 1}",
        )
    else:
        _world_from_launch(b, get, ctx)
    if (s := get("distributed", "sequence_parallel")) is not None and to_bool(s.value):
        b.remember(s)
    s = get("distributed", "activation_checkpointing")
    if s is not None:
        if str(s.value).strip().lower() == "selective":
            b.set("grad_checkpointing", False, s)
            b.unmodelled(s, "selective activation checkpointing", "estimated without activation checkpointing")
        else:
            b.set_bool("grad_checkpointing", s)


def _reshard(b: PlanBuilder, get, pp: int, pp_s: Setting | None, ep: int, ep_s: Setting | None) -> None:
    """FSDP2 with each layer's parameters gathered from its forward to its backward
    (`fully_shard(reshard_after_forward=False)`): ZeRO stage 2 (SHARD_GRAD_OP-like) instead of 3.
    With ep_size > 1 the MoE parallelizer shards the model with `distributed.moe.reshard_after_forward` (default
    False: MoEParallelizerConfig, moe/config.py at v0.3.0 and v0.4.0, distributed/config.py at v0.5.0;
    _transformers/infrastructure.py `instantiate_infrastructure` at v0.5.0), the same flag for every block's unit,
    its experts' unit and the root (moe/parallelizer.py `apply_fsdp` at v0.3.0–v0.5.0): false keeps every block
    gathered, of its experts the rank's own (num_experts / ep). Otherwise
    `distributed.reshard_after_forward` (FSDP2Config from v0.5.0, default None) sets every layer; None keeps the
    layers gathered under pipeline parallelism and reshards all but the last layer without it
    (distributed/parallelizer.py `apply_fsdp2_sharding_recursively` at v0.4.0 and v0.5.0; the last layer's backward
    runs first, so the estimate takes it as resharded)."""
    key = ("distributed", "moe", "reshard_after_forward") if ep > 1 else ("distributed", "reshard_after_forward")
    s = get(*key)
    if ep > 1 and s is None and get("distributed", "moe") is None:
        # v0.2.0 recipes give the MoE parallelizer its arguments in a `parallelizer:` section (recipes/llm/
        # train_ft.py at v0.2.0: `self.cfg.get("parallelizer", None)`), which later releases no longer read
        key = ("parallelizer", "reshard_after_forward")
        s = get(*key)
    name = ".".join(key[1:]) if key[0] == "distributed" else ".".join(key)
    flag = to_bool(s.value) if s is not None else None
    if s is not None and flag is None:
        b.issue(IssueKind.INVALID_VALUE, f"`{name}` should be true or false, got {s.value!r}", s)
    elif s is not None:
        b.set(
            "zero_stage",
            3 if flag else 2,
            s,
            override=True,
            note=f"{name} {'true: FSDP2 reshards each layer after its forward' if flag else 'false' + _GATHERED}",
        )
    elif ep > 1:
        note = f"ep_size {ep}: `moe.reshard_after_forward` false by default{_GATHERED}"
        b.set("zero_stage", 2, ep_s, origin=Origin.DERIVED, override=True, note=note)
    elif pp > 1:
        note = f"pp_size {pp}: FSDP2 keeps each layer gathered across the microbatches{_GATHERED}"
        b.set("zero_stage", 2, pp_s, origin=Origin.DERIVED, override=True, note=note)


_GATHERED = ": each layer's parameters stay gathered from its forward to its backward (SHARD_GRAD_OP-like)"


# the flex token dispatchers whose buffers the estimate does not size: UCCL-EP (components/moe/uccl_ep
# `UCCLBuffer`)
_OTHER_FLEX_DISPATCHERS = {"uccl_ep": "UCCL-EP's"}


def _expert_parallel(b: PlanBuilder, get, ep: int, ep_s: Setting | None, ranks: int | None) -> None:
    """`ep_size` > 1: the MoE parallelizer divides each MoE block's routed experts over `ep` of the data- and
    context-parallel ranks, which must be a multiple of it (components/distributed/mesh_utils.py
    `_create_fsdp2_device_mesh` at v0.5.0: "non_pp_size must be a multiple of ep_size"; v0.4.0 `create_device_mesh`:
    `dp_cp_size % ep_size == 0`); it takes none of the GPUs for itself (the world is dp × tp × cp × pp).
    The token dispatch (`model.backend.dispatcher`; v0.2.0–v0.4.0 also read `enable_deepep`, which v0.5.0
    ignores) is counted (components.dispatch): `torch` all-gathers the group's hidden states in each MoE layer
    (components/moe/experts.py `GroupedExperts.forward` at v0.4.0, v0.5.0), saved for the backward only by the
    per-expert loop (`experts: torch`; grouped GEMMs otherwise: `torch_mm`, the CUDA default, to which `te` and
    `gmm` fall back, components/models/common/utils.py `BackendConfig.__post_init__` at v0.5.0; v0.2.0 and v0.3.0
    run only the loop, over DTensor's all-gather and reduce-scatter: named where `enable_deepep: false` leaves the
    version open); `deepep` allocates one fixed buffer outside torch (components/moe/megatron/fused_a2a.py
    `get_buffer`) for DeepEP's own group sizes, with its default 20 SMs; `hybridep` allocates HybridEP's buffers
    outside torch for the group's tokens (fused_a2a.py `init_hybrid_ep_buffer`; components.dispatch), whatever its
    SM count. Named as not counted: UCCL-EP's buffers, DeepEP's with another SM count or over several nodes
    (NVSHMEM's heap) and HybridEP's inter-node queue pairs (resolve.distribution, which knows the NVLink domain). A
    dispatcher left to `BackendConfig`'s default (DeepEP where deep_ep is installed, else UCCL-EP where it is, else
    `torch`) is taken as DeepEP, which NeMo AutoModel's `moe` extra and container install, and said so; named as
    not counted for a group DeepEP has no configuration for.
    The routed activations each rank keeps are counted per token × top-k, as without expert parallelism (balanced
    routing)."""
    if ranks and ranks % ep:
        b.issue(
            IssueKind.INVALID_VALUE,
            f"`ep_size` {ep} should divide the data- and context-parallel GPUs (dp × cp × tp = {ranks})",
            ep_s,
        )
        return
    b.set("expert_parallel", ep, ep_s, note="each GPU holds num_experts / ep_size of every MoE layer's experts")
    d = get("model", "backend", "dispatcher")
    dispatcher = str(d.value).strip().lower() if d is not None else None
    legacy = False  # `enable_deepep`, which v0.5.0 ignores
    if dispatcher is None and (e := get("model", "backend", "enable_deepep")) is not None:
        dispatcher, d, legacy = ("deepep" if to_bool(e.value) else "torch"), e, True
    group = f"the {ep}-GPU expert-parallel group"
    # no dispatcher named: BackendConfig's default, DeepEP where deep_ep is installed (NeMo AutoModel's `moe` extra
    # and its container install it: pyproject.toml `moe = [..., "deep_ep"]`, docker/Dockerfile DEEPEP_COMMIT at
    # v0.4.0, v0.5.0 and main), else UCCL-EP where that is (v0.4.0+), else `torch` (components/models/common/utils.py
    # `BackendConfig.dispatcher` at v0.3.0, v0.4.0, v0.5.0 and main; v0.2.0 components/moe/utils.py
    # `BackendConfig.enable_deepep = HAVE_DEEP_EP`)
    default = dispatcher is None and ep in DISPATCH_CONFIGS
    if default:
        dispatcher = "deepep"
        b.plan.read_notes.append(
            "`model.backend.dispatcher` not set: BackendConfig's default taken as DeepEP, which NeMo AutoModel's "
            "`moe` extra and container install (without deep_ep it is UCCL-EP where that is installed, else an "
            "all-gather of the group's tokens in each MoE layer) — set it to be sure"
        )
    if dispatcher == "torch":
        x = get("model", "backend", "experts")
        loop = x is not None and str(x.value).strip().lower() == "torch"
        if x is not None:
            b.remember(x)
        note = f"each MoE layer all-gathers {group}'s hidden states" + (
            ", kept for the backward by the per-expert loop" if loop else " for its grouped GEMMs"
        )
        b.set("ep_dispatch", "all_gather_loop" if loop else "all_gather", d, note=note)
        if x is None and legacy:
            # v0.2.0 and v0.3.0 spell the torch dispatcher so too, and run only the per-expert loop
            # (components/moe/experts.py `GroupedExperts.forward` at v0.3.0, moe/layers.py at v0.2.0)
            b.unmodelled(
                d,
                f"{group}'s gathered hidden states kept for the backward in each MoE layer (v0.2.0 and v0.3.0, whose "
                "per-expert loop saves them; v0.4.0's grouped GEMMs do not)",
                "counted as v0.4.0 runs it",
                key=KEY,
            )
        return
    sms = get("model", "backend", "dispatcher_num_sms")
    if dispatcher == "deepep":
        why = "BackendConfig's default where deep_ep is installed" if default else ""
        return set_deepep(b, ep, d, ep_s, sms, assumed=why)
    if dispatcher == "hybridep":
        return set_hybridep(b, ep, d, sms)
    if dispatcher in _OTHER_FLEX_DISPATCHERS:
        what = f"{_OTHER_FLEX_DISPATCHERS[dispatcher]} communication buffers for {group}, allocated outside torch"
    elif dispatcher is not None:
        what = f"the `{dispatcher}` dispatcher's token dispatch buffers for {group}"
    else:  # DeepEP, the default, has no configuration for the group: it asserts where deep_ep is installed
        what = (
            f"expert-parallel token dispatch buffers for {group} (BackendConfig's default dispatcher: DeepEP, which "
            f"has no configuration for {ep} GPUs, where deep_ep is installed, else UCCL-EP's buffers where it is, "
            "else an all-gather of the group's tokens in each MoE layer)"
        )
    b.unmodelled(d or ep_s, what, "not counted", key=KEY)


def _world_from_launch(b: PlanBuilder, get, ctx) -> None:
    """dp_size none: every GPU of the run. The header's `automodel x.yaml --nproc-per-node N` gives the GPUs of one
    node; the benchmark recipes state their node count in `benchmark.num_nodes` (the nodes the published figures
    were measured on, recorded by tests/ci_tests/scripts/collect_benchmark_artifact.py at v0.4.0, e.g.
    examples/llm_benchmark/deepseek/deepseek_v3_te_deepep.yaml: `num_nodes: 32` under `--nproc-per-node 8`); with
    no `--nproc-per-node` the node count alone is the plan's (`node_count`; HEAD's GB200 recipes say "16 nodes x 4
    GB200 = 64 GPUs" only in a comment)."""
    m = _RUN_LINE.search(getattr(ctx, "text", "") or "")
    per_node = int(m[1]) if m is not None and 1 <= int(m[1]) <= 65536 else None
    nodes_s = get("benchmark", "num_nodes")
    nodes = to_int(nodes_s.value) if nodes_s is not None else None
    if nodes_s is not None and (nodes is None or nodes < 1):
        b.issue(
            IssueKind.INVALID_VALUE,
            f"`num_nodes` should be a whole number of at least 1, got {nodes_s.value!r}",
            nodes_s,
        )
        nodes = None
    if nodes is not None and nodes > 1:
        if per_node is None:
            # the GPUs per node are the GPU count's (settings, `--num-gpus`), else one node of the card's
            # reference system (resolve/gpu.py `_nodes_world`)
            b.set("node_count", nodes, nodes_s, note=f"num_nodes {nodes}, no `--nproc-per-node` in the header")
            return
        b.set(
            "world_size",
            nodes * per_node,
            nodes_s,
            origin=Origin.DERIVED,
            note=f"dp_size none: every GPU of the run, num_nodes {nodes} × `--nproc-per-node {per_node}` (header)",
        )
    elif per_node is not None:
        b.set(
            "world_size",
            per_node,
            origin=Origin.DERIVED,
            note=f"dp_size none: every GPU of the run in the header (`--nproc-per-node {per_node}`)",
        )


def _peft(b: PlanBuilder, data: Any, get) -> None:
    section = data.get("peft")
    if not isinstance(section, dict):
        return
    anchor = get("peft", "_target_") or get("peft", "dim")
    quant = data.get("quantization")
    four_bit = isinstance(quant, dict) and to_bool(quant.get("load_in_4bit"))
    b.set("peft_method", "qlora" if four_bit else "lora", anchor, note="NeMo AutoModel's LoRA (PeftConfig)")
    if (s := get("peft", "dim")) is not None:
        b.set_int("lora_r", s, minimum=1)
    if (s := get("peft", "alpha")) is not None:
        b.set_float("lora_alpha", s)
    if (s := get("peft", "dropout")) is not None:
        b.set_float("lora_dropout", s)
    if (s := get("peft", "match_all_linear")) is not None and to_bool(s.value):
        b.set("lora_targets", ["all-linear"], s)
    elif (s := get("peft", "target_modules")) is not None:
        names = s.value if isinstance(s.value, list) else [s.value]
        # glob patterns (`*_proj`, `*.q_proj`): the module names they end with
        targets = [str(n).strip().lstrip("*").lstrip(".").lstrip("_") for n in names]
        targets = ["all-linear" if t in ("proj", "") else t for t in targets]
        b.set("lora_targets", targets, s, note=f"patterns {names}")


def _quantization(b: PlanBuilder, get) -> None:
    if (s := get("quantization", "load_in_4bit")) is not None and to_bool(s.value):
        b.set("quant_bits", 4, s)
        if (t := get("quantization", "bnb_4bit_quant_type")) is not None:
            b.set("quant_type", str(t.value).strip().lower(), t)
        if (t := get("quantization", "bnb_4bit_use_double_quant")) is not None:
            b.set_bool("quant_double", t)
        if (t := get("quantization", "bnb_4bit_quant_storage")) is not None:
            b.set("quant_storage_dtype", DTYPES.get(str(t.value).strip().lower(), "uint8"), t)
    elif (s := get("quantization", "load_in_8bit")) is not None and to_bool(s.value):
        b.set("quant_bits", 8, s)
        b.set("quant_type", "int8", s)
    _qat(b, get)


# NeMo AutoModel's `quantizer_type` → the torchao quantizer class it builds, with bf16 precision and scales
# (nemo_automodel/components/quantization/qat.py `QATConfig.create_quantizer`); knowledge/qat.py QUANTIZERS
QAT_QUANTIZER_CLASSES = {"int8_dynact_int4weight": "Int8DynActInt4WeightQATQuantizer"}


def _qat(b: PlanBuilder, get) -> None:
    """`qat: {enabled, qat_config: {quantizer_type, groupsize}}` (examples/llm_finetune/llama3_2/
    llama3_2_1b_squad_qat.yaml): the recipe prepares the model with the quantizer before training."""
    on = get("qat", "enabled")
    if on is None or not to_bool(on.value):
        return
    t = get("qat", "qat_config", "quantizer_type")
    kind = str(t.value).strip().lower() if t is not None and t.value is not None else "int8_dynact_int4weight"
    from vramlens.knowledge import qat

    if (cls := QAT_QUANTIZER_CLASSES.get(kind)) in qat.QUANTIZERS:
        name, default_group = qat.QUANTIZERS[cls]
        g = get("qat", "qat_config", "groupsize")
        group = to_int(g.value) if g is not None else None
        note = f"QAT `{kind}`: fake-quantized linears (torchao)"
        b.set("qat", f"{name}:{group or default_group}", t or on, note=note)
    else:
        b.unmodelled(
            t or on,
            f"quantization-aware training (`{kind}`)",
            "estimated as 16-bit training: the fake-quantized copies each linear keeps are not counted",
            key="qat",
        )
