"""Adapter stage: quantization and the training method — LoRA/QLoRA/DoRA, IA3/VeRA, partial fine-tuning (freeze,
LLaMA-Pro, LISA) or full — with the modules each trains, in canonical names."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from vramlens.knowledge import inventory, peft_methods
from vramlens.knowledge.models import OWN_MIXER_LINEARS, UNGATED_UP_DOWN
from vramlens.knowledge.schema import ModelArch
from vramlens.plan import TrainingPlan, derived
from vramlens.resolve.common import Approximate, Context


@dataclass(frozen=True)
class AdapterPart:
    quant_bits: Any  # 4, 8 or None
    peft: str  # "none", "lora", "qlora", "dora", "ia3", "vera"
    partial: dict  # trained_layers, trained_modules, trained_extra, trained_where (ResolvedPlan fields)
    targets: tuple[str, ...]
    feedforward: tuple[str, ...]
    modules_to_save: tuple[str, ...]
    head: str  # "causal-lm" or a scalar head
    plan_fields: dict = field(default_factory=dict)  # ResolvedPlan fields this stage sets beyond the above


# methods that train part of the full weights (partial fine-tuning, `_partial_training`), not adapters
PARTIAL_METHODS = ("freeze", "llamapro", "lisa")


def resolve_adapters(ctx: Context, arch: ModelArch) -> AdapterPart:
    plan, val, sources, assumptions = ctx.plan, ctx.val, ctx.sources, ctx.assumptions
    fields: dict[str, Any] = {}
    quant_bits = val("quant_bits")
    peft = str(val("peft_method") or "none")
    if not quant_bits:
        quant_bits = _prequantized(plan, arch, peft, fields, sources, assumptions)
    method = peft if peft in peft_methods.OTHER_METHODS else ""
    if quant_bits and peft in ("none", "other", *PARTIAL_METHODS):
        peft = "lora"
        assumptions.append(Approximate("quantized base weights train only through adapters: assumed LoRA"))
    if quant_bits == 4 and peft == "lora":
        peft = "qlora"
    partial = _partial_training(plan, peft, val, sources, assumptions, arch)
    if peft in PARTIAL_METHODS:
        peft = "none"
    if method:
        peft = _other_method(ctx, method, fields, quant_bits)
    if peft not in ("none", "lora", "qlora", "dora", "ia3", "vera"):
        # a method named but not known (`other`): its base is frozen whatever it trains, so LoRA on the targets is
        # the nearest modelled method (full fine-tuning would count gradients and states for every weight)
        assumptions.append(
            Approximate(f"PEFT method `{peft}` is not modelled: estimated as LoRA on its targets (the base frozen)")
        )
        peft = "qlora" if quant_bits == 4 else "lora"
    targets: tuple[str, ...] = ()
    feedforward: tuple[str, ...] = ()
    if peft in ("ia3", "vera"):
        targets, feedforward = _vector_adapter_targets(plan, peft, arch, assumptions)
    elif method in peft_methods.PER_BLOCK_METHODS:
        targets = ("o",)  # sized as one hidden × hidden linear per block (estimate/components/adapters.py)
    elif peft != "none":
        raw = val("lora_targets") or ["q", "v"]
        matched = regex_targets(str(raw[0]), arch) if len(raw) == 1 and _REGEX.search(str(raw[0])) else None
        if matched is not None:
            targets, tower, notes = matched
            unknown = [] if targets else [str(raw[0])]
            if not tower:
                fields["tower_adapters"] = False
            assumptions.extend(Approximate(n) for n in notes)
        else:
            targets, unknown = normalize_targets(list(raw), arch)
        if unknown:
            assumptions.append(Approximate(f"LoRA targets not recognised and ignored: {', '.join(unknown)}"))
        if not targets:
            targets = ("q", "v")
        if arch.family in MAMBA_LORA_TARGETS and not set(targets) & {"all-linear", *MAMBA_LORA_TARGETS[arch.family]}:
            # no attention and no MLP in a Mamba model: the targets named select nothing peft could adapt
            assumptions.append(
                Approximate(
                    f"LoRA targets {', '.join(targets)} are not in a `{arch.family}` model: assumed "
                    f"{', '.join(MAMBA_LORA_TARGETS[arch.family])}, what peft can adapt in it"
                )
            )
            targets = MAMBA_LORA_TARGETS[arch.family]
    modules_to_save, _ = normalize_targets(list(val("modules_to_save") or []), arch)

    head = str(val("task_head") or "causal-lm")
    if head != "causal-lm":
        assumptions.append(f"{head} head: no LM head and no vocabulary logits (a hidden × labels output layer)")
    return AdapterPart(quant_bits, peft, partial, targets, feedforward, modules_to_save, head, fields)


def _prequantized(
    plan: TrainingPlan, arch: ModelArch, peft: str, fields: dict, sources: dict, assumptions: list
) -> Any:
    """The bits of a checkpoint its publisher quantized (AWQ, GPTQ, bitsandbytes, FP8), read from its config.json
    or its name when no setting quantizes it: such weights load at that width whatever the config says. An FP8
    checkpoint trained in full is the exception: the frameworks that train FP8 checkpoints' full weights convert
    them to the training precision on load (Megatron-Bridge / mcore-bridge; transformers' FP8 linears hold no
    trainable weight), so its width is the run's."""
    if plan.model_id is None:
        return None
    found = peft_methods.prequantized(str(plan.model_id.value), arch.stored_dtype)
    if found is None:
        return None
    bits, method, where = found
    if method == "fp8" and peft in ("none", *PARTIAL_METHODS):
        assumptions.append(f"FP8 checkpoint ({where}) trained in full: its weights taken at the training precision")
        return None
    fields.update(quant_type=method, quant_double=False)
    what = {"awq": "AWQ", "gptq": "GPTQ", "nf4": "bitsandbytes NF4", "fp4": "bitsandbytes FP4", "fp8": "FP8"}
    note = f"{bits}-bit {what.get(method, method)} weights: {where}"
    sources["quant_bits"] = derived(bits, note)
    assumptions.append(note)
    return bits


def _other_method(ctx: Context, method: str, fields: dict, quant_bits: Any) -> str:
    """A PEFT method beyond LoRA/DoRA/IA3/VeRA (knowledge/peft_methods.OTHER_METHODS): resolved as "lora" (a
    frozen base under trained adapters) with the method and its hyperparameters for the estimate to size it."""
    name, defaults = peft_methods.OTHER_METHODS[method]
    shape = dict(defaults)
    written = []
    for param, keys in peft_methods.METHOD_SETTINGS.get(method, {}).items():
        for key in keys:
            v = ctx.extra(key)
            if key == "lora_rank" and ctx.plan.lora_r is not None:
                v = ctx.plan.lora_r.value
            if v is not None and str(v).strip().lstrip("-").isdigit() and int(str(v).strip()) > 0:
                shape[param] = int(str(v).strip())
                written.append(key)
                break
    # the rank-wide product LoRA keeps per token: AdaLoRA's and the adapters' bottleneck; the methods that build a
    # delta weight or a rotation keep no rank-wide product
    rank = shape.get("r", 0) if method in ("adalora", *peft_methods.PER_BLOCK_METHODS) else 0
    fields.update(adapter_method=method, adapter_shape=tuple(sorted(shape.items())), lora_r=rank)
    sizes = ", ".join(f"{k} {v}" for k, v in sorted(shape.items()))
    reason = (
        "what its forward keeps per token is " + peft_methods.KEPT_TENSORS[method]
        if method in peft_methods.KEPT_TENSORS
        else "what its forward keeps per token is counted as LoRA's (the adapted linears' inputs)"
    ) + (", and its weight-sized tensors per adapted linear" if method in peft_methods.WEIGHT_SIZED_FORWARD else "")
    told_sizes = sizes + ("" if written else ", peft's defaults")
    ctx.assumptions.append(
        Approximate(f"{name} ({told_sizes}): its parameters and optimizer state counted as defined; {reason}")
    )
    ctx.unmodelled(
        ctx.plan.peft_method,
        "peft_method",
        method,
        f"{name} activations (what its forward keeps for backward)",
        "its parameters counted as defined; " + peft_methods.KEPT_TENSORS.get(method, peft_methods.KEPT_AS_LORA),
    )
    return "qlora" if quant_bits == 4 else "lora"


# Mamba models hold no attention and no MLP: transformers 5.24 models/mamba/modeling_mamba.py `MambaMixer` (in_proj,
# x_proj, dt_proj, out_proj) and models/mamba2/modeling_mamba2.py `Mamba2Mixer` (in_proj, out_proj). peft 0.21.2 has
# no default LoRA targets for them (utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING) and
# refuses out_proj and conv1d (tuners/tuners_utils.py `_check_lora_target_modules_mamba`): what it can adapt
MAMBA_LORA_TARGETS = {"mamba": ("in_proj", "x_proj", "dt_proj"), "mamba2": ("in_proj",)}

LORA_NAME_MAP = {
    "q_proj": ("q",),
    "k_proj": ("k",),
    "v_proj": ("v",),
    "o_proj": ("o",),
    # DeepSeek-V2/V3 multi-head latent attention (transformers 5.24 models/deepseek_v3/modeling_deepseek_v3.py
    # `DeepseekV3Attention`; q_proj where q_lora_rank is null)
    "q_a_proj": ("q_a",),
    "q_b_proj": ("q_b",),
    "kv_a_proj_with_mqa": ("kv_a",),
    "kv_b_proj": ("kv_b",),
    "out_proj": ("o",),
    "in_proj": ("in_proj",),
    "x_proj": ("x_proj",),
    "dt_proj": ("dt_proj",),
    "output_proj": ("o",),
    "dense": ("o",),
    "query": ("q",),
    "key": ("k",),
    "value": ("v",),
    "c_attn": ("q", "k", "v"),
    "qkv_proj": ("q", "k", "v"),
    "qkv": ("q", "k", "v"),
    "wqkv": ("q", "k", "v"),
    "query_key_value": ("q", "k", "v"),
    "proj": ("o",),
    "attn.proj": ("o",),
    "gate_proj": ("gate",),
    "up_proj": ("up",),
    "down_proj": ("down",),
    "gate_up_proj": ("gate", "up"),
    "w1": ("gate",),
    "w3": ("up",),
    "w2": ("down",),
    "fc_1": ("gate",),
    "fc_2": ("up",),
    "c_fc": ("fc1",),
    "fc1": ("fc1",),
    "fc2": ("fc2",),
    "fc_in": ("fc1",),
    "fc_out": ("fc2",),
    "dense_h_to_4h": ("fc1",),
    "dense_4h_to_h": ("fc2",),
    # a Nemotron-H latent MoE's projections into and out of the experts' width (transformers 5.24
    # models/nemotron_h/modeling_nemotron_h.py `NemotronHMoE`)
    "fc1_latent_proj": ("fc1_latent",),
    "fc2_latent_proj": ("fc2_latent",),
    "wi": ("fc1",),
    "wo": ("down",),
    "wi_0": ("gate",),
    "wi_1": ("up",),  # T5 v1.1 / Flan-T5 gated-gelu; `wo` is fc2 when ungated
    "mlp": ("gate", "up", "down", "fc1", "fc2"),
    "q": ("q",),
    "k": ("k",),
    "v": ("v",),
    "o": ("o",),
    "gate": ("gate",),
    "up": ("up",),
    "down": ("down",),
    "lm_head": ("lm_head",),
    "output": ("lm_head",),
    "head": ("lm_head",),
    "embed_tokens": ("embed",),
    # Megatron-core's own module names, which Megatron-SWIFT's `--target_modules` and `--modules_to_save` take
    # (megatron/core/transformer/attention.py `SelfAttention.linear_qkv`, `linear_proj`; mlp.py `MLP.linear_fc1`, gate
    # and up in one linear when gated, and `linear_fc2`; models/gpt/gpt_model.py `output_layer`;
    # common/embeddings/language_model_embedding.py `word_embeddings`): the gated or plain MLP's names alike,
    # whichever the model has
    "linear_qkv": ("q", "k", "v"),
    "linear_proj": ("o",),
    "linear_fc1": ("gate", "up", "fc1"),
    "linear_fc2": ("down", "fc2"),
    "output_layer": ("lm_head",),
    "word_embeddings": ("embed",),
    "wte": ("embed",),
    "tok_embeddings": ("embed",),
    "embed": ("embed",),
}


# Module names that mean other linears in one family than LORA_NAME_MAP says: GPT-2's and GPT-BigCode's `c_proj` is
# both the attention's output and the MLP's (transformers 5.24 models/gpt2/modeling_gpt2.py `GPT2Attention.c_proj`,
# `GPT2MLP.c_proj`; models/gpt_bigcode likewise); Qwen-1's too, and its MLP is `c_proj(w1(x) * silu(w2(x)))` — `w2`
# the gate, `w1` the up projection (Qwen/Qwen-7B modeling_qwen.py `QWenMLP.forward`), not Mixtral's w1/w2/w3
# (a target with its parent's name, `attn.c_proj`, is the one linear). Names a remote-code family spells its own way
# follow (knowledge/models.py `REMOTE_CODE_WRITTEN`)
_GPT2_NAMES = {"c_proj": ("o", "fc2"), "attn.c_proj": ("o",), "mlp.c_proj": ("fc2",)}
FAMILY_LORA_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "gpt2": _GPT2_NAMES,
    "gpt_bigcode": _GPT2_NAMES,
    "openai-gpt": _GPT2_NAMES,  # transformers 5.24 models/openai/modeling_openai.py `Attention.c_proj`, `MLP.c_proj`
    "qwen": {"c_proj": ("o", "down"), "attn.c_proj": ("o",), "mlp.c_proj": ("down",), "w1": ("up",), "w2": ("gate",)},
    # ChatGLM2/3's MLP is gated: `dense_h_to_4h` computes gate|up (hidden → 2·ffn_hidden_size, `swiglu` chunks it in
    # two) and `dense_4h_to_h` is down; `dense` is the attention's output (THUDM/chatglm3-6b modeling_chatglm.py `MLP`,
    # `SelfAttention.dense`)
    "chatglm": {"dense_h_to_4h": ("gate", "up"), "dense_4h_to_h": ("down",), "dense": ("o",)},
    # Baichuan's q|k|v linear (baichuan-inc/Baichuan2-7B-Base modeling_baichuan.py `Attention.W_pack`)
    "baichuan": {"w_pack": ("q", "k", "v")},
    # InternLM2's attention is `wqkv` (hidden → (heads + 2·kv_heads)·head_dim) and `wo`, its MLP
    # `w2(act(w1(x)) * w3(x))` (internlm/internlm2-chat-7b modeling_internlm2.py `InternLM2Attention`,
    # `InternLM2MLP`): `wo` is the attention's output, not a T5 MLP's down projection
    "internlm2": {"wqkv": ("q", "k", "v"), "wo": ("o",)},
}


def _frozen_share(plan: TrainingPlan, val, assumptions: list[str], arch: ModelArch, out: dict) -> dict:
    """A full fine-tune with its first parameters frozen by share (`frozen_share_layers`)."""
    share = float(val("frozen_share"))
    key = plan.frozen_share.key if plan.frozen_share is not None else None
    said = f"`{key or 'freeze_parameters_ratio'} {share:g}`"
    layers, head, frozen = frozen_share_layers(arch, share)
    if layers is None:
        assumptions.append(f"{said} freezes {frozen} of the language model: a full fine-tune of it")
        return out
    out.update(trained_layers=layers, trained_extra=("lm_head",) if head else ())
    uneven = arch.dense_layers or any(kind in inventory.NOT_ATTENTION for kind, _ in arch.layer_kinds)
    trains = (
        f"{layers} layer(s) train"
        + (" with the LM head" if head else "")
        + " — the lowest frozen in part, counted whole"
        if layers
        else ("only the LM head trains" if head else "no decoder layer and no LM head trains")
    )
    uneven_note = "; its layers taken as equal in size" if uneven else ""
    if arch.vision_params:
        uneven_note += "; the vision tower counted first, as transformers registers it"
    note = f"{said}: {frozen} frozen, in the model's order; {trains}{uneven_note}"
    assumptions.append(Approximate(note) if layers or uneven_note else note)
    return out


def _vector_adapter_targets(
    plan: TrainingPlan, peft: str, arch: ModelArch, assumptions: list[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(targets, IA3 feedforward targets) of an IA3 or VeRA adapter: the config's, else peft's defaults for the
    family (knowledge/peft_methods.py: peft 0.21.2 utils/constants.py), never the frameworks' LoRA defaults. IA3's
    feedforward modules default to the family's among the targets (peft `_prepare_adapter_config`)."""
    defaults = peft_methods.default_targets(peft, arch.family)
    name = "IA3" if peft == "ia3" else "VeRA"
    targets: tuple[str, ...] = ()
    if plan.lora_targets is not None:
        targets, unknown = normalize_targets(list(plan.lora_targets.value), arch)
        if unknown:
            assumptions.append(Approximate(f"{name} targets not recognised and ignored: {', '.join(unknown)}"))
    if not targets:
        if defaults is None:
            assumptions.append(
                Approximate(
                    f"peft has no default {name} targets for `{arch.family}` (it asks for "
                    f"target_modules): assumed q and v"
                )
            )
            targets = ("q", "v")
        else:
            targets = defaults[0]
    feedforward: tuple[str, ...] = ()
    if peft == "ia3":
        if plan.feedforward_targets is not None:
            feedforward, _ = normalize_targets(list(plan.feedforward_targets.value), arch)
        elif defaults is not None:
            feedforward = defaults[1]
        feedforward = tuple(t for t in feedforward if t in targets or "all-linear" in targets)
    return targets, feedforward


def _adapter_rank(plan: TrainingPlan, peft: str, val) -> int:
    """LoRA/DoRA rank (the framework's default when unset); VeRA's rank of its shared projections, peft's 256
    (VeraConfig.r, ms-swift `vera_rank`) unless the config sets it; 0 without a rank."""
    if peft == "vera":
        return int(plan.lora_r.value) if plan.lora_r is not None and plan.lora_r.value else peft_methods.VERA_DEFAULT_R
    if peft in ("none", "ia3"):
        return 0
    return int(val("lora_r") or 8)


# a target written as a regular expression over module paths (peft fullmatches a string `target_modules` against
# every module's name: peft 0.21.2 tuners/tuners_utils.py `check_target_module_exists`)
_REGEX = re.compile(r"[\[\]()|*+?\\^$]")
# words of a module path inside a vision or audio tower or its projector, not the language model
_TOWER = re.compile(r"vision|visual|audio|image|\bvit\b|siglip|projector|multi_modal", re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def regex_targets(pattern: str, arch: ModelArch) -> tuple[tuple[str, ...], bool, list[str]] | None:
    """A regex target read by construction: matched, as peft matches it, against the module paths of transformers'
    builds (`inventory.linear_paths`, layer index 0 … L - 1 for `{i}`), keeping the language-model linears the
    model's own build has (`inventory.linear_leaves`, where its model_type has an inventory). Returns the canonical
    targets of the language-model linears it selects, whether it reaches a vision/audio tower's linears, and what
    is approximate (a linear it selects in some layers only is counted in every layer); None when the pattern does
    not compile."""
    try:
        rx = re.compile(pattern)
    except re.error:
        return None
    n = max(arch.layers, 1)
    probe = sorted({*range(min(n, 8)), n - 1})  # a quick look at a few layers before every one of them

    def selects(path: str, i: int) -> bool:
        return rx.fullmatch(path.replace("{i}", str(i))) is not None

    own = inventory.linear_leaves(arch.family)  # the model's own linears, where its model_type has an inventory
    hits: dict[str, set[int]] = {}  # language-model leaf -> layer indices it is selected in
    tower = False
    for path in inventory.linear_paths():
        if "{i}" not in path:
            if not selects(path, 0):
                continue
            indices = list(range(n))  # a module outside the layer stack
        elif any(selects(path, i) for i in probe):
            indices = [i for i in range(n) if selects(path, i)]
        else:
            continue
        prefix, leaf = path.rsplit(".", 1)
        if _TOWER.search(prefix):
            tower = True
            continue
        if own and leaf not in own:
            continue  # another model's module (a fused qkv_proj that `.*v_proj` also matches)
        hits.setdefault(leaf, set()).update(indices)
    targets, unknown = normalize_targets(sorted(hits), arch)
    notes = []
    if unknown:
        unmodelled = ", ".join(unknown)
        notes.append(f"LoRA target pattern selects {unmodelled}, which the estimate does not model: not counted")
    notes += [
        f"LoRA target pattern selects {leaf} in {len(layer)} of {n} layers: counted in every layer"
        for leaf, layer in sorted(hits.items())
        if len(layer) < n and leaf in LORA_NAME_MAP
    ]
    return targets, tower, notes


def _own_mixer_linear(arch: ModelArch, key: str) -> tuple[str, ...]:
    """(key,) where the model's own modules (transformers' build: `knowledge.inventory`) have a linear of that leaf
    name in a layer that is not attention or an MLP, or one the target map does not know (Qwen3-Next's
    `shared_expert_gate`); () otherwise. peft selects a module by the end of its name, so `out_proj` in
    Qwen3-Next is the gated DeltaNet's output projection, not the attention's `o_proj`."""
    if arch.family not in OWN_MIXER_LINEARS:
        return ()  # its block shapes size the mixers as attention layers (knowledge/models.py `OWN_MIXER_LINEARS`)
    kinds = inventory.linear_leaves(arch.family).get(key)
    if not kinds:
        return ()
    if kinds & inventory.MIXER_KINDS or (key not in LORA_NAME_MAP and kinds <= {"moe-experts"}):
        return (key,)
    return ()


def normalize_targets(names: list[str], arch: ModelArch) -> tuple[tuple[str, ...], list[str]]:
    """Framework module names → canonical targets; returns (targets, names not understood)."""
    out: list[str] = []
    unknown: list[str] = []
    for raw in names:
        n = str(raw).strip().strip("'\"")
        low = n.lower()
        if low in ("all-linear", "all_linear", "all", "linear"):
            # every block linear; a name beside it that is no block linear (Megatron-SWIFT's `all-router`,
            # `all-embedding`) is still said to be ignored
            rest = [r for r in names if str(r).strip().strip("'\"").lower() != low]
            return ("all-linear",), normalize_targets(rest, arch)[1] if rest else []
        key = low.split(".")[-1]
        family = FAMILY_LORA_NAMES.get(arch.family, {})
        mapped = (
            family.get(".".join(low.split(".")[-2:]))
            or family.get(key)
            or LORA_NAME_MAP.get(key)
            or LORA_NAME_MAP.get(low)
        )
        own = _own_mixer_linear(arch, key)
        if own:
            # a linear of the model's own mixers (a gated DeltaNet's in_proj_qkvz, a Mamba mixer's out_proj), which
            # the estimate names as the model does; the attention linear of that name too where there is one
            attention = inventory.linear_leaves(arch.family)[key] - inventory.MIXER_KINDS
            mapped = (*own, *(mapped if mapped is not None and attention else ()))
        if mapped is None:
            unknown.append(n)
            continue
        gated = arch.mlp in ("swiglu", "geglu")
        if gated and set(mapped) <= {"fc1", "fc2"}:
            # an ungated MLP's name (`dense_h_to_4h`, `fc_in`, `c_fc`) in a gated MLP: the estimate has no linear
            # of that name, so it says so instead of dropping the target without a word
            unknown.append(n)
            continue
        for m in mapped:
            if m == "gate" and arch.family in UNGATED_UP_DOWN:
                continue  # its MLP is up_proj and down_proj alone: a gate name matches no module
            if m in ("gate", "up", "down") and not gated:
                m = {"gate": "fc1", "up": "fc1", "down": "fc2"}[m]
            elif m in ("fc1", "fc2") and gated and key in ("mlp", "linear_fc1", "linear_fc2"):
                continue
            if m not in out:
                out.append(m)
    return tuple(out), unknown


def frozen_share_layers(arch: ModelArch, share: float) -> tuple[int | None, bool, str]:
    """(decoder layers that still train, whether an untied LM head trains, what is frozen) when the first `share` of
    the parameters are frozen in the model's order, as ms-swift freezes them (v4.4.3 swift/utils/transformers_utils.py
    `freeze_parameters`: `n_freeze = int(sum(numel) * ratio)`, then every parameter tensor whose running total is at
    most that stops training, `bisect_right` over `np.cumsum`). The order is the one transformers registers: a
    vision-language model's tower first, then the token embedding, the decoder layers, the final norm and an untied LM
    head (a tied head is the embedding's tensor, counted once). The layer the boundary falls in is frozen in part: it
    is counted as trained. None for layers: nothing but parameters before the embedding's end froze (a full
    fine-tune of the language model)."""
    from vramlens.knowledge.models import param_count

    text = param_count(arch)
    embed = arch.vocab * arch.hidden
    head = 0 if arch.tied_embeddings else arch.vocab * arch.hidden
    layers = max(arch.layers, 1)
    per_layer = max(text - embed - head - arch.hidden, 1) / layers
    frozen = int((text + arch.vision_params) * share) - arch.vision_params
    if frozen < embed:
        return None, bool(head), "the vision tower only" if arch.vision_params and frozen >= 0 else "nothing"
    whole = min(int((frozen - embed) // per_layer), layers)
    head_trains = bool(head) and frozen < text
    return layers - whole, head_trains, f"the token embedding and {whole} of {layers} decoder layers"


def _partial_training(
    plan: TrainingPlan, peft: str, val, sources: dict, assumptions: list[str], arch: ModelArch
) -> dict:
    """Which weights a partial full fine-tune trains (freeze tuning, LLaMA-Pro, LISA, ms-swift's frozen share):
    `trained_layers` of the decoder layers, `trained_modules` inside them and `trained_extra` outside them
    (components.trained_params)."""
    out: dict[str, Any] = {"trained_layers": None, "trained_modules": (), "trained_extra": (), "trained_where": "last"}
    if plan.frozen_share is not None and plan.trained_layers is None:
        if peft == "none":
            return _frozen_share(plan, val, assumptions, arch, out)
        # ms-swift freezes by share in its full fine-tune branch only (swift/pipelines/train/tuner.py)
        assumptions.append(f"`{plan.frozen_share.key}` applies to a full fine-tune only: ignored with {peft}")
    if peft != "freeze" and plan.trained_layers is None:
        return out
    layers = val("trained_layers")
    if layers is None:
        assumptions.append(Approximate("which layers train is not known: estimated as a full fine-tune"))
        return out
    modules = [str(m).strip().lower() for m in (val("trained_modules") or [])]
    canon: list[str] = []
    for m in modules:
        if m in ("all", ""):
            canon = []
            break
        if m in ("self_attn", "attn", "attention", "self_attention"):
            canon.append("attn")
        elif m in ("mlp", "feed_forward", "ffn", "block_sparse_moe"):
            canon.append("mlp")
    extra = []
    for m in val("trained_extra") or []:
        low = str(m).strip().lower()
        if low in ("embed_tokens", "wte", "embed", "tok_embeddings", "word_embeddings"):
            extra.append("embed")
        elif low in ("lm_head", "output", "head"):
            extra.append("lm_head")
    where = str(val("trained_where") or "last")
    out.update(
        trained_layers=abs(int(layers)),
        trained_modules=tuple(dict.fromkeys(canon)),
        trained_extra=tuple(dict.fromkeys(extra)),
        trained_where=where if where in ("last", "first", "spread", "rotating") else "last",
    )
    assumptions.append(
        f"partial fine-tuning: {abs(int(layers))} layer(s) train"
        + (f" ({', '.join(out['trained_modules'])})" if out["trained_modules"] else "")
        + (f" with {', '.join(out['trained_extra'])}" if out["trained_extra"] else "")
        + "; gradients and optimizer states only for those, activations only for the layers the "
        "backward runs through (from the lowest trained one up)"
    )
    return out
