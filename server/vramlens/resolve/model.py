"""Model stage: the architecture the run trains — the named model (catalog, local folder, Hub cache or Hub), or one
given by its sizes — as the framework's builder makes it (builder positions, added blocks, a separate LM head)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from vramlens.knowledge.schema import ModelArch
from vramlens.plan import TrainingPlan
from vramlens.resolve.common import Approximate, Context, ResolveError
from vramlens.settings import Settings


@dataclass(frozen=True)
class ModelPart:
    arch: ModelArch
    remote_code: str = ""  # ResolvedPlan.remote_code


def resolve_model(ctx: Context) -> ModelPart:
    plan, assumptions = ctx.plan, ctx.assumptions
    if plan.model_id is None:
        from vramlens.formats.model_kind import built_arch

        arch = built_arch(plan) or arch_from_sizes(plan)
        if arch is None:
            raise ResolveError(no_model_message(plan), "model_id")
        vocab_note = (
            ""
            if _size(plan, "vocab_size", "padded_vocab_size")
            else f"; vocabulary assumed {arch.vocab:,} (GPT-2's, padded as GPT-NeoX pads it)"
        )
        experts = (
            f", {arch.num_experts} routed experts ({arch.experts_per_token} per token) in "
            f"{arch.layers - arch.dense_layers} layers"
            + (f", {arch.shared_experts} shared" if arch.shared_experts else "")
            if arch.num_experts
            else ""
        )
        note = (
            f"model given by its sizes: {arch.layers} layers, hidden {arch.hidden}, {arch.heads} heads"
            f"{experts}{vocab_note}"
        )
        assumptions.append(Approximate(note) if vocab_note else note)
        if arch.approximate == UNGATED_EXPERTS:
            assumptions.append(Approximate(f"approximate: {arch.approximate}"))
    else:
        arch = _model(plan.model_id.value, ctx.settings, assumptions)
    if plan.model_id is not None:
        ctx.sources["model_id"] = plan.model_id
    arch = ctx.hooks.builder_arch(arch, plan.extra)
    added = ctx.val("added_layers")
    if isinstance(added, int) and added > 0:
        arch = expanded_arch(arch, added)
        assumptions.append(f"{added} decoder block(s) added to the model: {arch.layers} layers")
    as_run = ctx.hooks.arch_as_run(arch)
    if as_run is not arch:
        arch = as_run
        assumptions.append(
            f"{ctx.fw_label} keeps the LM head apart from the token embedding: {arch.vocab:,} × "
            f"{arch.hidden} more weights than the tied checkpoint"
        )
    return ModelPart(arch, remote_code_use(ctx, arch))


def remote_code_use(ctx: Context, arch: ModelArch) -> str:
    """Whether the run builds the checkpoint's own modeling code (`ResolvedPlan.remote_code`), and what every view
    says about it. transformers builds the `auto_map` class when the run passes `trust_remote_code=True`, even for a
    model type it ships (models/auto/auto_factory.py `_BaseAutoModelClass.from_pretrained`), and refuses to load a
    model type it does not ship without it (dynamic_module_utils.py `resolve_trust_remote_code`: "… contains custom
    code which must be executed to correctly load the model"). A framework that builds its own model never asks."""
    from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
    from vramlens.knowledge.models import REMOTE_CODE_WRITTEN, remote_code_needed
    from vramlens.knowledge.versions import OWN_SDPA_ATTENTION

    if not arch.remote_code or ctx.fw_key not in HF_MODEL_FRAMEWORKS:
        return ""
    trusted, needed = ctx.val("trust_remote_code"), remote_code_needed(arch)
    if trusted is None and not needed:
        # a script of its own decides in its `from_pretrained` call, which is not read from here
        ctx.assumptions.append(
            Approximate(
                f"`{arch.remote_code}`: the checkpoint's own code (its config.json's auto_map) is built if the run "
                f"passes `trust_remote_code=True`, which is not read here; estimated as transformers' `{arch.family}`"
            )
        )
        return ""
    if trusted is True or (trusted is None and needed):
        if arch.family in REMOTE_CODE_WRITTEN:
            sized = f"its weights counted as {REMOTE_CODE_WRITTEN[arch.family]} builds them, its activations as"
        elif needed:
            sized = "sized from its config.json's sizes alone, its activations as"
        else:
            sized = f"estimated as transformers' `{arch.family}`, its activations as"
        kernel = OWN_SDPA_ATTENTION.get(
            arch.family, "without SDPA support it runs eager attention, which keeps the attention probabilities"
        )
        ctx.assumptions.append(
            Approximate(
                f"{'`trust_remote_code`' if trusted else 'loaded only with `trust_remote_code=True`'}: transformers "
                f"builds the checkpoint's own `{arch.remote_code}` (its config.json's auto_map), {sized} "
                f"transformers' layers — that code's saved tensors and attention kernel are not read ({kernel})"
            )
        )
        return "built"
    return "refused" if needed else ""


def expanded_arch(arch: ModelArch, added: int) -> ModelArch:
    """The model with `added` copies of its decoder block inserted (LLaMA-Pro's block expansion, arXiv:2401.02415;
    ms-swift v4.5.2 swift/tuners/llamapro.py `LLaMAPro.prepare_model` deep-copies every (L/n)-th block into the
    module list and sets `num_hidden_layers` to the new depth): every per-layer count grows with the depth."""
    from vramlens.knowledge.models import param_count

    bare = arch.model_copy(update={"params_total": 0})
    grown = arch.layers + added
    update: dict = {"layers": grown}
    if arch.params_total:
        update["params_total"] = (
            arch.params_total + param_count(bare.model_copy(update={"layers": grown})) - param_count(bare)
        )
    if arch.layer_kinds:
        update["layer_kinds"] = tuple((kind, round(n * grown / arch.layers)) for kind, n in arch.layer_kinds)
    return arch.model_copy(update=update)


def hub_lookup(settings: Settings):
    """How this run asks the Hub for a config.json: None when the `model_lookup` setting turns it off."""
    from vramlens.knowledge import hub

    if not settings.model_lookup:
        return None
    return settings.hub_lookup or hub.fetch_config


def _model(name: str, settings: Settings, assumptions: list[str]) -> ModelArch:
    """The named model's architecture (`models.find_model`), or a ResolveError saying why there is none."""
    from vramlens.knowledge import models

    found = models.find_model(name, settings.workspace, hub_lookup(settings), settings.any_model_folder, by_name=True)
    if found.arch is not None:
        if found.assumed:  # a fine-tune named after its base: the base's shapes
            assumptions.append(Approximate(found.assumed))
        if found.where in ("local folder", "hub cache", "hub"):
            assumptions.append(f"model shapes from `{name}`'s config.json ({found.where})")
        elif found.where.startswith("the base model"):
            assumptions.append(f"model shapes of `{found.arch.id}`, {found.where}")
        generic = found.arch.approximate.startswith(models.GENERIC_NOTE)
        if found.arch.approximate and (found.arch.params_total or not generic):  # by construction or a catalog note
            assumptions.append(Approximate(f"approximate: `{found.arch.family}`: {found.arch.approximate}"))
        elif found.arch.approximate:
            assumptions.append(
                Approximate(
                    f"approximate: `{found.arch.family}` has no dedicated model in vramlens; "
                    f"estimated generically from its config's sizes ({found.arch.approximate})"
                )
            )
        return found.arch
    if problem := models.local_config_problem(name, settings.workspace, settings.any_model_folder):
        raise ResolveError(problem, "model_id")
    if (missing := _missing_path(name, settings)) is not None:
        raise ResolveError(f"model `{name}`: a local path, and {missing} does not exist", "model_id")
    if found.pending:
        raise ResolveError(f"looking up `{name}` on the Hugging Face Hub (its config.json only)…", "model_id")
    hints = models.suggest_model(name)
    hint = hints[0] if hints else None
    if not settings.model_lookup:
        hub_text = (
            "not looked up on the Hugging Face Hub (the `model_lookup` setting or --offline turns it off, "
            "and the editor asks the Hub only in a trusted workspace)"
        )
    elif found.problem:
        hub_text = found.problem
    else:
        hub_text = "not a Hugging Face Hub id"
    if found.not_by_name:
        hub_text += f"; not estimated from its name: {found.not_by_name}"
    raise ResolveError(
        f"unknown model `{name}`: not in the catalog, not a local folder with config.json, not in "
        f"the local Hugging Face cache; {hub_text}" + (f" — did you mean `{hint}`?" if hint else ""),
        "model_id",
        hint,
    )


def _missing_path(name: str, settings: Settings) -> str | None:
    """The folder a path-like model name (`./models/x`, `/data/x`, `~/x`) points at when it does not exist."""
    from pathlib import Path

    from vramlens.file_access import expand_user

    n = name.strip()
    if not n.startswith(("/", "~", "./", "../")):
        return None
    path = expand_user(n)
    if not path.is_absolute() and settings.workspace is not None:
        path = Path(settings.workspace) / path
    return None if path.exists() else f"`{path}`"


# the sizes a model given by its sizes needs (`arch_from_sizes`), as configs spell them
_SIZE_KEYS = frozenset({"num_layers", "hidden_size", "num_attention_heads", "n_layer", "n_embd", "n_head"})
_QUOTED_KEY = re.compile(r"`([^`]+)`")
NO_MODEL = "the config does not name a model"  # and gives no value for one: a partial config (DeepSpeed JSON)


def no_model_message(plan: TrainingPlan) -> str:
    """Why a plan has no model, naming the value the file gave for one when it gave one that could not be used
    (a `$MODEL` only known when the script runs, a value of the wrong type): the reader's own words for it."""
    from vramlens.formats.model_kind import other_kind

    if (kind := other_kind(plan)) is not None:  # the run trains another kind of model: the reader says which
        return kind
    for issue in plan.issues:
        m = _QUOTED_KEY.match(issue.message)
        key = m.group(1).lower().lstrip("-") if m else ""
        names_model = (
            "model" in key.replace("model_max_length", "").replace("model_parallel", "").replace("model-parallel", "")
            or key.endswith("from_pretrained")
            or key.replace("-", "_") in _SIZE_KEYS
        )
        if names_model and not key.startswith(("ref", "reward", "teacher", "value", "critic")):
            line = f" (line {issue.span.start_line + 1})" if issue.span is not None else ""
            why = issue.message.split("; it is not read")[0]
            return f"the config does not name a model vramlens can use: {why}{line}"
    return NO_MODEL


def _size(plan: TrainingPlan, *keys: str):
    for k in keys:
        s = plan.extra.get(f"arch.{k}")
        if s is not None and isinstance(s.value, (int, float)) and not isinstance(s.value, bool) and s.value > 0:
            return int(s.value)
    return None


def arch_from_sizes(plan: TrainingPlan) -> ModelArch | None:
    """A model given by its sizes instead of a hub id (GPT-NeoX `num_layers`/`hidden_size`/…, nanoGPT
    `n_layer`/`n_head`/`n_embd`): a GELU MLP of 4h and LayerNorm unless the config says SwiGLU/RMSNorm."""
    layers = _size(plan, "num_layers", "n_layer")
    hidden = _size(plan, "hidden_size", "n_embd")
    heads = _size(plan, "num_attention_heads", "n_head")
    head_dim = _size(plan, "head_dim")
    if not (layers and hidden and heads) or (hidden % heads and not head_dim) or max(layers, hidden, heads) > 1_000_000:
        return None  # heads that do not divide the width need their size given (Megatron `--kv-channels`)

    def text(key: str) -> str:
        s = plan.extra.get(f"arch.{key}")
        return str(s.value).lower() if s is not None else ""

    gated = "glu" in text("activation")
    inter = _size(plan, "intermediate_size") or (int(8 * hidden / 3) if gated else 4 * hidden)
    megatron = plan.dist_strategy is not None and plan.dist_strategy.value == "megatron"
    if gated and inter > 4 * hidden and not megatron:
        inter = inter // 3  # GPT-NeoX's SwiGLU intermediate_size is not the per-branch width
    # Megatron's `--ffn-hidden-size` is the width of each gated branch: linear_fc1 is 2 × ffn_hidden_size wide when
    # gated (megatron/core/transformer/mlp.py core_v0.13.0 `MLP.__init__`: `if self.config.gated_linear_unit:
    # ffn_hidden_size *= 2`), linear_fc2 ffn_hidden_size → hidden
    untied = plan.extra.get("arch.no_weight_tying")
    sizes = {
        "mlp": "swiglu" if gated else "gelu",
        "norm": "rmsnorm" if "rms" in text("norm") else "layernorm",
        "kv_heads": _size(plan, "num_kv_heads"),
        "head_dim": head_dim if head_dim and head_dim != hidden // heads else None,
        "vocab": _size(plan, "vocab_size", "padded_vocab_size") or 50304,
        "tied_embeddings": not (untied is not None and bool(untied.value)),
        "max_position": _size(plan, "max_position_embeddings", "block_size"),
        "source": "sizes read from the config file",
    }
    if _size(plan, "num_experts"):
        return _moe_arch(plan, layers, hidden, heads, inter, sizes)
    linear, qkv = plan.extra.get("arch.linear_bias"), plan.extra.get("arch.qkv_bias")
    if linear is not None:  # biases as the reader states them (formats.megatron `_linear_defaults`)
        sizes.update(attn_bias=bool(linear.value) or bool(qkv is not None and qkv.value), mlp_bias=bool(linear.value))
    return ModelArch(
        id=f"custom-{layers}L-{hidden}h",
        family="gpt_neox" if plan.extra.get("arch.num_layers") else "gpt2",
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=inter,
        **sizes,
    )


UNGATED_EXPERTS = "experts counted as gated (SwiGLU) MLPs; these are not"


def _moe_arch(plan: TrainingPlan, layers: int, hidden: int, heads: int, inter: int, sizes: dict) -> ModelArch | None:
    """A model with routed experts given by its sizes (Megatron-LM's `--num-experts`, `--moe-ffn-hidden-size`, …,
    kept as `arch.*` shapes by formats.megatron), built by the construction the catalog uses for a Hugging Face
    config with experts (`knowledge.models._arch_from_sizes`, under Mixtral's keys: a decoder of attention blocks and
    MoE MLPs, shared experts and leading dense layers as Qwen2-MoE / DeepSeek name them); what the flags say of the
    norm, activation and embeddings is kept as they say it."""
    from vramlens.knowledge.models import _arch_from_sizes

    experts = _size(plan, "num_experts")
    config = {
        "model_type": "mixtral",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": sizes["kv_heads"] or heads,
        "head_dim": sizes["head_dim"] or hidden // heads,
        "intermediate_size": inter,
        "vocab_size": sizes["vocab"],
        "max_position_embeddings": sizes["max_position"],
        "tie_word_embeddings": sizes["tied_embeddings"],
        "num_local_experts": experts,
        "moe_intermediate_size": _size(plan, "moe_intermediate_size") or inter,
        "num_experts_per_tok": _size(plan, "experts_per_token"),
        "shared_expert_intermediate_size": _size(plan, "shared_expert_intermediate_size"),
        "first_k_dense_replace": _size(plan, "dense_layers"),
    }
    arch = _arch_from_sizes(
        {k: v for k, v in config.items() if v is not None}, f"custom-{layers}L-{hidden}h-{experts}e"
    )
    if arch is None:
        return None
    update: dict = {"norm": sizes["norm"], "mlp": sizes["mlp"], "source": sizes["source"]}
    if sizes["mlp"] != "swiglu":
        update["approximate"] = UNGATED_EXPERTS
    return arch.model_copy(update=update)
