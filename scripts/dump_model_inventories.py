"""Write server/vramlens/knowledge/data/inventories.json.gz: for every model_type of the installed transformers, the
parameters its own classes build, as formulas of the config's fields, and the kind of every layer.

    python3 scripts/dump_model_inventories.py [model_type ...]

Each model is built from a tiny config on the `meta` device (no memory, no weights, no remote code:
`AutoModelForCausalLM.from_config` / `AutoModel.from_config` of transformers' own classes). Every parameter name
is collapsed to a pattern (`model.layers.{i}.self_attn.q_proj.weight`); every dimension of its shape, and how many
times the pattern occurs, are measured again with each size field of the config doubled, one at a time, which
gives each quantity as a product of fields (`hidden_size * num_key_value_heads / num_attention_heads`) or a sum of
such products (a Mamba-2 `in_proj`: 2·intermediate + 2·groups·state + heads). A last build with every field scaled
at once checks the formulas; a quantity that does not follow them is recorded as not scalable.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import gzip
import json
import math
import re
import sys
import warnings
from fractions import Fraction
from pathlib import Path

from vramlens.knowledge.inventory import STAGE_POWER, left_out_where_equal, stage_values, stages_chosen
from vramlens.trace.inventory import INDEX as _INDEX
from vramlens.trace.inventory import _kind, _pattern, model_class
from vramlens.trace.inventory import measure as _measure

# gzip-compressed JSON (knowledge/inventory.py reads it on first use): a few MB of JSON, a tenth of it compressed
OUT = Path(__file__).resolve().parents[1] / "server" / "vramlens" / "knowledge" / "data" / "inventories.json.gz"

# Tiny sizes for the base build (by field name, in any sub-config); every other field keeps its default.
TINY = {
    "hidden_size": 64,
    "d_model": 64,
    "n_embd": 64,
    "n_embed": 64,
    "dim": 64,
    "embed_dim": 64,
    "word_embed_proj_dim": 64,
    "intermediate_size": 160,
    "ffn_dim": 160,
    "d_ff": 160,
    "n_inner": 160,
    "encoder_ffn_dim": 160,
    "decoder_ffn_dim": 160,
    "ffn_hidden_size": 160,
    "moe_intermediate_size": 48,
    "shared_expert_intermediate_size": 80,
    "expert_intermediate_size": 48,
    "num_attention_heads": 4,
    "n_head": 4,
    "num_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "d_kv": 16,
    "vocab_size": 256,
    "num_experts": 6,
    "num_local_experts": 6,
    "n_routed_experts": 6,
    "moe_num_experts": 6,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 128,
    "n_positions": 128,
    # distinct sizes, so that no two terms of a sum are equal by chance (MLA, gated DeltaNet)
    "qk_nope_head_dim": 24,
    "v_head_dim": 20,
    "qk_rope_head_dim": 8,
    "kv_lora_rank": 32,
    "q_lora_rank": 48,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 12,
    "linear_value_head_dim": 10,
}
# Fields whose default hides a kind of layer the model can have: one leading dense layer (DeepSeek), one MLP-only
# layer (Qwen-MoE), so that the reference build holds both kinds.
STRUCTURE = {"first_k_dense_replace": 1, "mlp_only_layers": [0]}
# Switches that may add or remove parameters (biases, norms, gates, shared experts) or reshape them (Falcon's
# `multi_query` and `new_decoder_architecture`: transformers 5.24 models/falcon/modeling_falcon.py `FalconAttention`)
_SWITCH = re.compile(
    r"bias|norm|gate|shared|proj|conv|qk|parallel|expert|mlp|attn|attention|pooler|head|query|architecture"
)
# Fields that never size a tensor: token ids, probabilities, scales, seeds.
_NOT_SIZES = re.compile(
    r"(token_id|_id$|_ids$|eps|epsilon|theta|dropout|initializer|_range|scale|seed|"
    r"multiplier|factor|temperature|alpha|beta|limit|^use_|_p$|coef|std|_min$|_max$|floor|"
    r"cutoff|threshold|chunk_size_feed_forward|logits_to_keep|transformers_version)",
    re.IGNORECASE,
)
_FLOAT_SIZES = re.compile(r"(^|_)(expand|mlp_ratio|ratio)$")
DROP = object()  # an override that leaves the field out, for the config class to compute
_GEMMA4 = {
    "per_layer_config": DROP,
    "global_head_dim": 32,
    "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 2,
}
# Per model_type: values that make the tiny build consistent or show every kind of layer the model has.
OVERRIDES = {
    # ELECTRA: an embedding width that no doubling of the tiny hidden size reaches, so that the projection between
    # them (built only where they differ: `_unless_equal`) is in every build that scales them
    "electra": {"embedding_size": 48},
    # LFM2's MLP width rounding is applied by knowledge/inventory.py `_lfm2`: the inventory reads the plain width
    "lfm2": {
        "layer_types": ["conv", "conv", "full_attention"] * 2 + ["conv", "full_attention"],
        "block_auto_adjust_ff_dim": False,
    },
    "lfm2_moe": {"layer_types": ["conv", "conv", "full_attention"] * 2 + ["conv", "full_attention"]},
    "mamba2": {"num_heads": 8},
    # GLM-5-Next's text model requires as many key/value heads as query heads (`COUPLED`) and no RoPE slice in its
    # DSA layers (transformers 5.24 models/glm5_next/configuration_glm5_next.py `validate_architecture`)
    "glm5_next_text": {"num_key_value_heads": TINY["num_attention_heads"], "qk_rope_head_dim": 0},
    # Llama-4: MoE layers every second layer, from `interleave_moe_layer_step` (`moe_layers` left to the config class,
    # transformers 5.24 models/llama4/configuration_llama4.py `__post_init__`), so that the reference build holds
    # the dense layers between them, `intermediate_size_mlp` wide (modeling_llama4.py `Llama4TextDecoderLayer`)
    "llama4_text": {"moe_layers": None, "interleave_moe_layer_step": 2, "intermediate_size_mlp": 96},
    # ERNIE-4.5-MoE: a last MoE layer before the last layer, so that the reference build shows that it counts
    # (models/ernie4_5_moe/modeling_ernie4_5_moe.py `Ernie4_5_MoeDecoderLayer`: MoE from moe_layer_start_index to
    # moe_layer_end_index, every moe_layer_interval-th layer)
    "ernie4_5_moe": {"moe_layer_end_index": 6},
    # Falcon-H1: the Mamba width from mamba_expand · hidden_size and the head size from it ("auto"), so that each
    # can be varied alone (knowledge/inventory.py `_falcon_h1` reads a written mamba_d_ssm as that product)
    "falcon_h1": {"head_dim": 16, "mamba_d_ssm": None, "mamba_d_head": "auto", "mamba_n_heads": 8},
    # Bamba, Granite-4 hybrids: the Mamba head size from mamba_expand · hidden_size / mamba_n_heads ("auto",
    # transformers 5.24 models/bamba/configuration_bamba.py and
    # models/granitemoehybrid/configuration_granitemoehybrid.py `__post_init__`), eight heads that divide the tiny
    # width, so that each size can be varied alone; attention layers among the Mamba layers (Bamba's
    # `attn_layer_indices`, Granite's `layer_types`), so that the inventory holds both kinds and which layers are which
    "bamba": {"mamba_d_head": "auto", "mamba_n_heads": 8, "attn_layer_indices": [2, 5]},
    "granitemoehybrid": {
        "mamba_d_head": "auto",
        "mamba_n_heads": 8,
        "layer_types": ["linear_attention", "linear_attention", "full_attention"] * 2 + ["linear_attention"] * 2,
    },
    # Gemma-3n: one MLP width for every layer (the config class repeats it per layer, configuration_gemma3n.py
    # `__post_init__`; knowledge/inventory.py `_gemma3n` reads a written list), and a layer pattern whose unshared
    # layers hold both kinds of attention (`kv_sharing_modes`: the last num_kv_shared_layers layers reuse the KV of
    # the last unshared layer of their kind, and build no k/v projections, modeling_gemma3n.py `Gemma3nTextAttention`)
    # (two AltUp inputs: its altup_num_inputs - 1 projections stay a shorter list than the layers when scaled, so the
    # layer stack is still the one measured)
    "gemma3n_text": {
        "altup_num_inputs": 2,
        "intermediate_size": TINY["intermediate_size"],
        "num_kv_shared_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"] * 4,
        "activation_sparsity_pattern": [0.0] * 8,
    },
    # Gemma-4: the full-attention layers' head size from `global_head_dim` (transformers 5.24
    # models/gemma4/configuration_gemma4.py `Gemma4TextConfig.__post_init__` writes it into `per_layer_config` for
    # the "full_attention" layers where config.json has no `per_layer_config`: knowledge/inventory.py `_gemma4` reads a
    # written one back), so that it can be varied; a layer pattern whose last layer is full attention, as the class
    # requires
    **dict.fromkeys(("gemma4_text", "gemma4_unified_text"), _GEMMA4),
    **dict.fromkeys(("gemma4", "gemma4_unified"), {f"text_config.{k}": v for k, v in _GEMMA4.items()}),
    # Gemma-4's assistant: every layer reuses the key/value states of the model it assists (num_kv_shared_layers =
    # num_hidden_layers, configuration_gemma4.py `kv_sharing_modes`; `COUPLED` keeps them equal)
    "gemma4_unified_assistant": {
        **{f"text_config.{k}": v for k, v in _GEMMA4.items()},
        "text_config.num_kv_shared_layers": 8,  # the tiny layer count (`MAX_LAYERS`)
    },
}
# Sizes a config class requires to agree (its `validate_architecture`), by model_type: varying a field scales its
# partners by (new / old) ** exponent so that the config stays valid; a partner sizes no parameter and is neither
# varied nor recorded as fixed.
COUPLED = {
    # transformers 5.24 models/mamba2/configuration_mamba2.py `validate_architecture`: hidden_size · expand ==
    # num_heads · head_dim; modeling_mamba2.py `Mamba2Mixer.__init__` sizes its parameters by hidden_size,
    # int(expand · hidden_size), num_heads, n_groups, state_size and conv_kernel, and reads head_dim only to reshape
    "mamba2": {"hidden_size": {"head_dim": 1}, "expand": {"head_dim": 1}, "num_heads": {"head_dim": -1}},
    # transformers 5.24 models/glm5_next/configuration_glm5_next.py `Glm5NextTextConfig.validate_architecture`:
    # num_attention_heads == num_key_value_heads (the tiny build starts them equal: `OVERRIDES`)
    "glm5_next_text": {"num_attention_heads": {"num_key_value_heads": 1}},
    # transformers 5.24 models/gemma4/configuration_gemma4.py `kv_sharing_modes`: the assistant's layers all reuse
    # the assisted model's key/value states, num_kv_shared_layers == num_hidden_layers
    "gemma4_unified_assistant": {"text_config.num_hidden_layers": {"text_config.num_kv_shared_layers": 1}},
}
_SIZE_NAME = re.compile(r"hidden|heads|dim|size|expand|experts|state|groups|vocab|layers|embd|d_model|rank")
_PERTURBED = re.compile(
    _SIZE_NAME.pattern + r"|period|offset|interval|step|kernel|conv|position|replace|^n_|^num_|"
    r"_num_|tok|width|window|bucket|channels|patch|image|length|merge|ctx|inner|ff|cache"
)
MAX_LAYERS = 8  # base layer count (layer lists are cut to it)
LAYER_FIELDS = (
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "n_layers",
    "num_decoder_layers",
    "decoder_layers",
    "encoder_layers",
)


_INITS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "zeros_",
    "ones_",
    "constant_",
    "orthogonal_",
)


@contextlib.contextmanager
def quiet_and_quick():
    """No warnings, and no weight initialisation (on the meta device it computes nothing, and it is most of the
    time a build takes); torch.nn.init is restored afterwards."""
    import torch
    import transformers

    saved = {name: getattr(torch.nn.init, name) for name in _INITS}
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in _INITS:
                setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
            yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)
        transformers.logging.set_verbosity(verbosity)


def class_for(model_type: str, config_cls: type | None = None) -> str | None:
    """The name of the class a `model_type` config builds as (trace/inventory.py `model_class`)."""
    cls = model_class(model_type, config_cls)
    return None if cls is None else cls.__name__


def _fields(d: dict, prefix: str = "") -> dict[str, float]:
    """Numeric fields that may size a tensor, by dotted path (one level of sub-configs)."""
    out = {}
    for k, v in d.items():
        if not isinstance(k, str):
            continue
        if isinstance(v, dict) and not prefix and k not in ("rope_scaling", "rope_parameters", "quantization_config"):
            out.update(_fields(v, f"{k}."))
        elif isinstance(v, bool) or _NOT_SIZES.search(k):
            continue
        elif isinstance(v, int) and v >= 1 and _PERTURBED.search(k):
            out[prefix + k] = v
        elif isinstance(v, float) and _FLOAT_SIZES.search(k) and v > 0:
            out[prefix + k] = v
    return out


def _get(d: dict, path: str):
    for part in path.split("."):
        d = d[part]
    return d


def _set(d: dict, path: str, value) -> dict:
    d = json.loads(json.dumps(d))
    node = d
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[part]
    old = node[parts[-1]]
    node[parts[-1]] = value
    if parts[-1] in LAYER_FIELDS and isinstance(old, int):
        for k, v in list(node.items()):  # layer lists follow the layer count
            if isinstance(v, list) and len(v) == old and old:
                node[k] = (v * (value // old + 1))[:value]
    return d


def vary(model_type: str, d: dict, path: str, value) -> dict:
    """`_set`, with the sizes the config class requires to agree with `path` scaled along (`COUPLED`)."""
    old = _get(d, path)
    out = _set(d, path, value)
    for partner, exponent in COUPLED.get(model_type, {}).get(path, {}).items():
        scaled = _get(out, partner) * (value / old) ** exponent
        out = _set(out, partner, int(scaled) if float(scaled).is_integer() else scaled)
    return out


def partners(model_type: str) -> set[str]:
    return {p for coupled in COUPLED.get(model_type, {}).values() for p in coupled}


def tiny(d: dict, widths: bool = True) -> dict:
    """The config with few layers and (`widths`) small sizes; token ids stay inside the vocabulary."""
    d = json.loads(json.dumps(d, default=str))
    for node in [d, *(v for v in d.values() if isinstance(v, dict))]:
        ids = [v for k, v in node.items() if k.endswith("token_id") and isinstance(v, int) and not isinstance(v, bool)]
        for k, v in list(node.items()):
            if k in STRUCTURE:
                node[k] = STRUCTURE[k]
            if widths and k in TINY and isinstance(v, int) and not isinstance(v, bool):
                node[k] = max(TINY[k], max(ids, default=0) + 1) if k == "vocab_size" else TINY[k]
            if k in LAYER_FIELDS and isinstance(v, int) and not isinstance(v, bool) and v > MAX_LAYERS:
                node[k] = MAX_LAYERS
                for k2, v2 in list(node.items()):
                    if isinstance(v2, list) and len(v2) == v:
                        node[k2] = v2[:MAX_LAYERS]
                    if isinstance(v2, dict) and v2 and all(str(i).isdigit() for i in v2):  # settings by layer index
                        node[k2] = {i: s for i, s in v2.items() if int(i) < MAX_LAYERS}
                for k2 in ("full_attn_idxs", "mlp_only_layers"):
                    if isinstance(node.get(k2), list):
                        node[k2] = [i for i in node[k2] if isinstance(i, int) and i < MAX_LAYERS]
    return d


# Sizes a config class may leave None that its model class reads as numbers (repair): a head size, heads of an
# index or of the key/value projections, a token budget, a compression ratio, a number of experts.
_NONE_SIZES = re.compile(r"head_dim|heads|budget|ratio$|experts$")


def repair(d: dict) -> dict:
    """Values a default config lacks and its model class needs, for one that does not build as it is (tried after the
    plain tiny config, so a model that builds without them keeps the config class's own values):
    - a size left None (`head_dim` of Ministral, HunYuan: models/ministral/modeling_ministral.py `MinistralAttention`
      reads `config.head_dim` as a number; `num_key_value_heads` of Nemotron, `n_routed_experts` of dots1,
      `indexer_*` of Qwen4-Exp): its tiny value (a head size: hidden_size / num_attention_heads of the tiny build),
      one key/value head for an index (models/qwen4_exp/configuration_qwen4_exp.py validates indexer_kv_heads == 1);
    - `rope_theta` in a sub-config the attention reads it from (models/dbrx/modeling_dbrx.py `DbrxAttention`:
      `attn_config.rope_theta`; a published config.json writes it there), from the model's own rope parameters;
    - RoPE parameters per layer type where the model reads them so and the default has none
      (models/cohere_compass/modeling_cohere_compass.py reads `rope_parameters[layer_type]`);
    - `is_decoder` for classes that build a language-model head only for a decoder (Reformer's
      `ReformerModelWithLMHead`);
    - a token map left None (Emu3's `vocabulary_map`): empty."""
    d = json.loads(json.dumps(d))
    rope = d.get("rope_parameters") if isinstance(d.get("rope_parameters"), dict) else {}
    theta = rope.get("rope_theta", 10000.0) if isinstance(rope.get("rope_theta"), (int, float)) else 10000.0
    d["is_decoder"] = True
    for node in [d, *(v for v in d.values() if isinstance(v, dict) and "model_type" in v)]:
        for k, v in list(node.items()):
            if v is None and _NONE_SIZES.search(k) and not _NOT_SIZES.search(k.replace("ratio", "")):
                node[k] = TINY.get(k, 1 if k.endswith("kv_heads") else 16 if "dim" in k else 4)
            if v is None and k.endswith("_map"):
                node[k] = {}
        if node is not d and "rope_theta" not in node and "rope_parameters" not in node:
            node["rope_theta"] = theta
        types = node.get("layer_types")
        if node.get("rope_parameters") == {} and isinstance(types, list):
            node["rope_parameters"] = {t: {"rope_type": "default", "rope_theta": theta} for t in set(map(str, types))}
    return d


def build(config_cls, d: dict):
    import torch
    import transformers

    cfg = config_cls.from_dict(d)
    cls = getattr(transformers, class_for(cfg.model_type, config_cls))
    with torch.device("meta"):
        return cfg, cls._from_config(cfg)


def infer(q0, qs: dict[str, float | None], base: dict[str, float], inverse: bool = False) -> list | None:
    """A quantity as a sum of terms [coefficient, {field: exponent}] from its base value and its value with each
    field doubled (None: that build failed or the quantity vanished). `inverse`: a field whose doubling lowers a
    sum divides its term (exponent -1: the term halves) rather than subtracting a multiple of it (Falcon's
    multi-query query_key_value, hidden_size + 2 · hidden_size / num_attention_heads rows: transformers 5.24
    models/falcon/modeling_falcon.py `FalconAttention.__init__`)."""
    if q0 is None:
        return None
    changed = {f: v for f, v in qs.items() if v is not None and v != q0}
    if not changed:
        return [[q0, {}]]
    if q0 and all(v and math.log2(v / q0).is_integer() and abs(math.log2(v / q0)) <= 2 for v in changed.values()):
        exps = {f: int(math.log2(v / q0)) for f, v in changed.items()}
        coef = Fraction(q0)
        for f, e in exps.items():
            coef /= Fraction(base[f]).limit_denominator(1000) ** e
        return [[_num(coef), exps]]
    # a sum of products: fields every term holds (the quantity doubles with them) are common factors; the other
    # fields, grouped by the change they make, are one term each (Mamba-2 in_proj 2·I + 2·G·N + H; MLA's kv_b_proj
    # heads · (qk_nope + v))
    common = [f for f, v in changed.items() if v == 2 * q0]
    factor = Fraction(1)
    for f in common:
        factor *= Fraction(base[f]).limit_denominator(1000)
    # (grouped by the term's base value: doubling a factor adds it, doubling a divisor takes half of it away, so that
    # DBRX's Wqkv rows d_model + 2 · kv_n_heads · d_model / n_heads hold kv_n_heads and n_heads in one term)
    groups: dict[Fraction, dict[str, int]] = collections.defaultdict(dict)
    for f, v in changed.items():
        if f not in common:
            delta = Fraction(v) - Fraction(q0)
            exponent = -1 if inverse and delta < 0 else 1
            groups[-2 * delta if exponent < 0 else delta][f] = exponent
    terms, rest = [], Fraction(q0)
    for value, exps in groups.items():
        coef = value / factor
        for f, e in exps.items():
            coef /= Fraction(base[f]).limit_denominator(1000) ** e
        terms.append([_num(coef), {**{f: 1 for f in common}, **exps}])
        rest -= value
    if rest:
        terms.append([_num(rest / factor), {f: 1 for f in common}])
    return terms


def _num(x: Fraction):
    return int(x) if x.denominator == 1 else [x.numerator, x.denominator]


def evaluate(terms: list, fields: dict) -> float:
    total = 0.0
    for coef, exps in terms:
        c = coef[0] / coef[1] if isinstance(coef, list) else coef
        for f, e in exps.items():
            c *= fields[f] ** e
        total += c
    return total


def _countable(terms: list, fields: dict) -> bool:
    """Whether a fitted total can be a number of parameters: a whole constant, and no value below zero at the base
    sizes nor with any one of its fields halved (a smaller model of the same kind). A sum over occurrences of
    different shapes can be quadratic in a field, which two builds and checks that move the field only by doubling
    fit as a line with a negative constant: transformers 5.24 models/lw_detr/modeling_lw_detr.py
    `LwDetrModel.__init__` builds group_detr `LwDetrMLPPredictionHead(d_model, d_model, 4, num_layers=3)`, weights
    group_detr · (2 · d_model² + 4 · d_model), fitted as 20020 · d_model − 3407872."""
    constant = sum(Fraction(*c) if isinstance(c, list) else Fraction(c) for c, exps in terms if not exps)
    if constant.denominator != 1:
        return False
    used = {f for _, exps in terms for f in exps}
    smaller = [fields, *({**fields, f: fields[f] / 2} for f in used)]
    return all(evaluate(terms, values) >= 0 for values in smaller)


def candidates(model_type: str, defaults: dict) -> list[dict]:
    """The configs a model_type's reference build is tried with, in order; the first that builds is measured."""
    override = OVERRIDES.get(model_type, {})
    bases = [
        tiny(defaults),
        repair(tiny(defaults)),
        tiny(defaults, widths=False),
        repair(tiny(defaults, widths=False)),
        json.loads(json.dumps(defaults, default=str)),
    ]
    return [_overridden(d, override) for d in bases]


def _overridden(d: dict, override: dict) -> dict:
    """`d` with the values of `override` (a dotted key: in that sub-config; `DROP`: left out)."""
    d = json.loads(json.dumps(d))
    for path, v in override.items():
        *parents, key = path.split(".")
        node = d
        for part in parents:
            node = node[part]
        if v is DROP:
            node.pop(key, None)
        else:
            node[key] = v
    return d


def inventory(model_type: str) -> dict:
    from transformers import AutoConfig

    base_cfg = AutoConfig.for_model(model_type)
    config_cls = type(base_cfg)
    defaults = base_cfg.to_dict()
    # the smallest config that builds: tiny; only fewer layers (sizes that must agree: Mamba heads × head dim =
    # expand × hidden); the defaults (per-layer settings keyed by layer index)
    for d0 in candidates(model_type, defaults):
        try:
            cfg0, model0 = build(config_cls, d0)
            break
        except Exception as e:
            error = e
    else:
        raise error
    _split.clear()
    q0, info = measure(model0, cfg0)
    _split.update(_split_patterns(model0, cfg0, q0, info))
    if _split:
        q0, info = measure(model0, cfg0)
    fields = {f: v for f, v in _fields(d0).items() if f not in partners(model_type)}
    sizes = {int(v) for k, v in q0.items() if k[0] in ("d", "n", "k") and v}
    # a field that sizes something divides (or is a multiple of) some size of the base build; the others are not
    # varied (the check build below would show one that was missed)
    fields = {
        f: v
        for f, v in fields.items()
        if not float(v).is_integer() or v == 1 or any(s % v == 0 or v % s == 0 for s in sizes)
    }
    builds: dict[str, dict] = {}
    configs: dict[str, dict] = {}
    varied: dict[str, tuple] = {}  # field -> the build with it doubled (config, model)
    fixed = []
    for f, v in fields.items():
        try:
            cfg_f, model_f = build(config_cls, vary(model_type, d0, f, v * 2))
            builds[f] = measure(model_f, cfg_f)[0]
            varied[f] = cfg_f, model_f
            configs[f] = cfg_f.to_dict()
        except Exception:  # an inconsistent config: the field is taken as fixed
            if _SIZE_NAME.search(f):
                fixed.append(f)
    # fields whose doubling builds parameters the base build has none of (XLM's `lang_embeddings`, built only where
    # n_langs > 1: transformers 5.24 models/xlm/modeling_xlm.py `XLMModel.__init__`), with their base value: a
    # config.json with another value is approximate (knowledge/inventory.py)
    base_names = {_INDEX.sub(".{i}", k[1]) for k in q0 if k[0] == "n"}
    adds = {
        f: fields[f]
        for f, b in builds.items()
        if any(k[0] == "n" and _INDEX.sub(".{i}", k[1]) not in base_names for k in b)
    }
    formulas = {}
    for key, v0 in q0.items():
        if key[0] == "rank":
            continue
        formulas[key] = infer(v0, {f: b.get(key) for f, b in builds.items()}, fields)
    used = sorted({f for t in formulas.values() if t for _, e in t for f in e})
    # check: every used field scaled at once (alternately × 2 and × 4)
    d_check, scaled = d0, dict(fields)
    for n, f in enumerate(used):
        m = 2 if n % 2 else 4
        # an odd layer count: periods and layer lists must hold beyond the base build's 8 layers
        layer_field = f.rsplit(".", 1)[-1] in LAYER_FIELDS
        d_try = vary(model_type, d_check, f, fields[f] + 3 if layer_field else fields[f] * m)
        try:
            config_cls.from_dict(d_try)
        except Exception:
            continue
        d_check, scaled[f] = d_try, fields[f] + 3 if layer_field else fields[f] * m
    checked = True
    check = None
    try:
        check = build(config_cls, d_check)
        qc, _ = measure(check[1], check[0])
    except Exception:
        qc, checked = {}, False
    derived = _derived(config_cls, d0, used, fields, defaults)
    switches, nullable = _switches(config_cls, d0, q0, used)
    params, kinds = [], {}
    rule_fields: set[str] = set()
    tied = _tied(model0)
    # a second check: every other field doubled, the rest kept (sizes scaled unequally), layers odd
    d_alt, alt = d0, dict(fields)
    for n, f in enumerate(used):
        layer_field = f.rsplit(".", 1)[-1] in LAYER_FIELDS
        if layer_field or n % 2 == 0:
            value = fields[f] + 3 if layer_field else fields[f] * 2
            try:
                config_cls.from_dict(vary(model_type, d_alt, f, value))
            except Exception:
                continue
            d_alt, alt[f] = vary(model_type, d_alt, f, value), value
    alternate = None
    try:
        alternate = build(config_cls, d_alt)
        qa = measure(alternate[1], alternate[0])[0]
    except Exception:
        qa = None

    def follows(key, terms) -> bool:
        return (
            terms is not None
            and checked
            and key in qc
            and qc[key] is not None
            and abs(evaluate(terms, scaled) - qc[key]) < 0.5
            and (qa is None or qa.get(key) is not None and abs(evaluate(terms, alt) - qa[key]) < 0.5)
        )

    # a quantity that does not follow the terms one doubling at a time gives: refit as one product of powers of
    # fields plus a constant (`_product_plus_constant`) or as a sum whose terms a field may divide (`infer`'s
    # `inverse`), else, where it moves with several fields, as a multilinear
    # sum over the subsets of those fields, each subset doubled at once (a product of sizes beside
    # terms of its factors alone: Nemotron-H's Mamba in_proj, 2·H·P + 2·G·N + H with H heads of P channels,
    # transformers 5.24 models/nemotron_h/modeling_nemotron_h.py `NemotronHMamba2Mixer.__init__`)
    subsets: dict[frozenset, dict | None] = {}
    grid: dict[tuple, dict | None] = {}  # `_polynomial`'s builds
    for key, terms in list(formulas.items()):
        if key[0] in ("rank", "k") or terms is None or follows(key, terms):
            continue
        moved = sorted(f for f, b in builds.items() if b.get(key) is not None and b.get(key) != q0.get(key))
        doubled = {f: b.get(key) for f, b in builds.items()}
        refits = [*_product_plus_constant(q0[key], doubled, fields), infer(q0[key], doubled, fields, inverse=True)]
        refit = next((t for t in refits if t is not None and follows(key, t)), None)
        if refit is None and 2 <= len(moved) <= 4:
            refit = _multilinear(model_type, config_cls, d0, key, q0[key], moved, fields, subsets)
        if (refit is None or not follows(key, refit)) and key[0] == "t":  # a total over layers of two shapes
            refit = _polynomial(model_type, config_cls, d0, key, q0[key], moved, fields, grid)
        if refit is not None and follows(key, refit):
            formulas[key] = refit
    layouts: list = []  # (fields, layer count, layers of each pattern and kind) of every build, when first needed

    def selected(key, rule: dict, follows_formula: bool) -> dict:
        """`rule`, or where it (or the count's formula, without one) misses a build with one field doubled, which
        layers the conditions on single fields select (`_conditions`)."""
        misses = [f for f, b in builds.items() if rule and b.get(key, 0) != _rule_count(rule, configs[f])]
        where = info["where"].get(key[1] if key[0] == "n" else key, set())
        # a list the config class computes when config.json leaves it out (Llama-4's `moe_layers`, default None)
        listed = getattr(config_cls, "__dataclass_fields__", {}).get(rule.get("where_in") or rule.get("where_not_in"))
        computed = listed is not None and listed.default is None
        if rule and not misses and not computed or not rule and follows_formula and len(where) in (0, info["layers"]):
            return rule  # a formula for a part of some layers may hold only for the builds' fixed fields
        if not layouts:
            runs = [(cfg0, model0), *varied.values(), check, alternate]
            layouts.extend(_layout(*run) for run in runs if run is not None)
        found = _conditions(key[1] if key[0] == "n" else key, layouts, config_cls, q0[key] // max(len(where), 1))
        if found and not any(b.get(key, 0) != _rule_count(found, configs[f]) for f, b in builds.items()):
            return found
        return rule

    for key, terms in formulas.items():
        if key[0] == "k":
            rule = _where(info["where"][key], cfg0, info["layers"], defaults=defaults)
            rule = selected(key, rule, follows(key, terms))
            kinds[key[1]] = {"n": terms if follows(key, terms) or rule else None, **rule}
    stagers: list[_Stages] = []  # the builds of stage-indexed patterns, made when first needed
    # the per-stage lists the stage formulas read or that move other parameters: [measured, the config class's]
    stage_fields: dict[str, list] = {}
    used_by_stages: set[str] = set()  # the fields the stage formulas read

    def stager() -> _Stages:
        if not stagers:
            checks = [run for run in (check, alternate) if run is not None]
            stagers.append(_Stages(model_type, config_cls, d0, fields, (cfg0, model0), varied, checks))
        return stagers[0]

    def staged(pattern: str) -> list[tuple[str, dict]] | None:
        """The pattern as stage entries (`_Stages.fit`), where the config has per-stage lists: one, or (a pattern
        whose first block in a stage differs from the others, `_Stages.leads`) that of the first block and that of
        the others."""
        if not _stage_lists(d0):
            return None
        parts = [pattern, *filter(None, [stager().lead(pattern)])]
        fits = [(p, stager().fit(p)) for p in parts]
        return None if any(fit is None for _, fit in fits) else fits

    def listed(pattern: str) -> list[str]:
        """The per-stage lists whose entries, doubled, move the pattern's total."""
        if not _stage_lists(d0):
            return []
        runs = stager().runs.items()
        t = ("t", pattern)
        return sorted(
            {name.split()[1] for name, run in runs if name.startswith("list ") and run[3].get(t) != q0.get(t)}
        )

    for pattern in {k[1] for k in q0 if k[0] == "n"}:
        rank = q0[("rank", pattern)]
        count = formulas[("n", pattern)]
        dims = [formulas.get(("d", pattern, a)) for a in range(rank or 0)]
        # a shape that differs from stage to stage of a hierarchical backbone or follows the first or last stage's
        # width, or a count or shape that a per-stage list moves
        stage = None
        if rank is None or not all(follows(("d", pattern, a), t) for a, t in enumerate(dims)) or listed(pattern):
            stage = staged(pattern)
        for p, fit in stage or ():
            # (the first blocks' parameters apart, `staged`)
            lead = sum(stager().numel0(other) for other, _ in stage or () if other != pattern)
            numel0 = stager().numel0(p) if p != pattern else q0[("t", pattern)] - lead
            entry = {"p": p, "kind": info["kinds"][pattern], "n": None, "shape": [], "numel0": numel0}
            params.append({**entry, "stages": fit})
            parts = [fit, *([fit["first"]] if "first" in fit else [])]
            read = {f for part in parts for t in (part["n"], *part["shape"]) for _, e in t for f in e}
            used_by_stages.update(f for f in read if f in fields)
            for f in [fit["list"], *(f.split("[")[0] for f in read if "[" in f)]:
                stage_fields[f] = [_get(d0, f), _get(defaults, f)]
        if stage is not None:
            continue
        rule = _where(info["where"].get(pattern, set()), cfg0, info["layers"], q0[("n", pattern)], defaults)
        if not rule and count is not None and all(not e for _, e in count):
            rule = _every_listed_layer(info["where"].get(pattern, set()), cfg0, info["layers"], q0[("n", pattern)])
        rule = selected(("n", pattern), rule, follows(("n", pattern), count))
        # a layer rule counts exactly where the config says which layers; the dims must follow their formulas
        if rule:  # fields that move the layers a rule selects in a way the rule does not say (Qwen-MoE's
            # decoder_sparse_step beside mlp_only_layers): a config.json that changes them is approximate
            rule["rule_fixed"] = [
                f for f, b in builds.items() if b.get(("n", pattern), 0) != _rule_count(rule, configs[f])
            ]
            rule_fields.update(rule["rule_fixed"])
        ok = (
            rank is not None
            and (bool(rule) or follows(("n", pattern), count))
            and all(follows(("d", pattern, a), t) for a, t in enumerate(dims))
        )
        numel0 = q0[("n", pattern)] * math.prod(q0.get(("d", pattern, a)) or 0 for a in range(rank or 0))
        entry = {"p": pattern, "kind": info["kinds"][pattern], "n": count, "shape": dims, "numel0": numel0}
        if not ok and not rule and follows(("t", pattern), formulas.get(("t", pattern))):
            # occurrences of different shapes (transformers 5.24 models/wav2vec2/modeling_wav2vec2.py
            # `Wav2Vec2FeatureEncoder`: a first convolution of one input channel, then conv_dim[i - 1] → conv_dim[i]):
            # their total follows its formula, where that formula can be a count at all (`_countable`)
            entry["total"] = formulas[("t", pattern)]
            ok = _countable(entry["total"], fields)
        if not ok:
            entry["exact"] = False
        entry.update(rule)
        params.append(entry)
    if _stage_lists(d0):
        # parameters outside the stage entries whose total a per-stage list moves (FocalNet's focal convolutions,
        # focal_levels[i] of them per layer with kernels from focal_windows[i]: transformers 5.24
        # models/focalnet/modeling_focalnet.py `FocalNetModulation`): a config.json with another list is approximate
        for entry in params:
            if "stages" in entry or any(k.startswith("where") for k in entry):
                continue
            moved = listed(entry["p"])
            if moved:
                entry["lists_fixed"] = moved
                stage_fields.update({f: [_get(d0, f), _get(defaults, f)] for f in moved})
    _unless_equal(model_type, config_cls, d0, fields, params)
    apart = _built_where_apart(q0, builds, fields)
    rule_fields.update(f for pair in apart for f in pair)
    adds = {f: v for f, v in adds.items() if not any(f in pair for pair in apart)}  # said by the pair instead
    params.sort(key=lambda e: e["p"])
    stacks = _stacks((cfg0, model0), varied, check, alternate, fields, scaled, alt, defaults)
    return {
        "class": type(model0).__name__,
        "config_class": config_cls.__name__,
        "fields": {
            f: [fields[f], _default(defaults, f)]
            for f in sorted(
                {
                    *used,
                    *fixed,
                    *rule_fields,
                    *(g for t in derived.values() for _, e in t for g in e),
                    *_stack_fields(stacks),
                    *used_by_stages,
                }
            )
        },
        **({"lists": stage_fields} if stage_fields else {}),
        "fixed": fixed,
        "derived": derived,
        "switches": switches,
        "nullable": nullable,
        "params": params,
        "layer_kinds": kinds,
        "layers": info["layers"],
        "stack": info["stack"],
        "tied": tied,
        "same_params": same_parameters(model_type, cfg0, model0),
        **({"adds": adds} if adds else {}),
        **({"stacks": stacks} if stacks else {}),
        "tie_default": bool(_tie(defaults)),
        "dtype": str(defaults.get("dtype") or defaults.get("torch_dtype") or ""),
        "total0": sum(p.numel() for p in model0.parameters()),
        # the model_type of each sub-config (EncoderDecoderConfig's `encoder` and `decoder`: any two models, bert's
        # by default, transformers 5.24 models/encoder_decoder/configuration_encoder_decoder.py): the formulas are
        # those of these models
        **({"parts": parts} if (parts := _parts(d0)) else {}),
        **({"built_where_apart": apart} if apart else {}),
    }


def _parts(d: dict) -> dict[str, str]:
    """The model_type of every sub-config of a config dict that names one."""
    return {k: v["model_type"] for k, v in d.items() if isinstance(v, dict) and isinstance(v.get("model_type"), str)}


def _built_where_apart(q0: dict, builds: dict, fields: dict) -> list[list[str]]:
    """Pairs of fields of one name, equal in the base build, where setting one apart builds parameters the base
    build has not (transformers 5.24 models/encoder_decoder/modeling_encoder_decoder.py `EncoderDecoderModel`:
    `enc_to_dec_proj` only where encoder.hidden_size != decoder.hidden_size): the inventory does not count them, and
    knowledge/inventory.py says so for a config whose two values differ."""
    base = {k[1] for k in q0 if k[0] == "n"}
    pairs: list[list[str]] = []
    for f, q in builds.items():
        if {k[1] for k in q if k[0] == "n"} - base:
            name = f.rsplit(".", 1)[-1]
            pairs += [
                [f, g]
                for g, v in fields.items()
                if g != f and v == fields[f] and g.rsplit(".", 1)[-1] == name and [g, f] not in pairs
            ]
    return pairs


def _unless_equal(model_type: str, config_cls, d0: dict, fields: dict, params: list[dict]) -> None:
    """Parameters built only where two sizes differ (transformers 5.24 models/electra/modeling_electra.py
    `ElectraModel.__init__`: `if config.embedding_size != config.hidden_size: self.embeddings_project =
    nn.Linear(config.embedding_size, config.hidden_size)`): for each matrix outside the layer stack shaped by two
    fields, a build with the one set to the other's value; the parameters not built there get `unless_equal`
    (knowledge/inventory.py counts them only where the config's two values differ)."""
    gone: dict[tuple, set | None] = {}
    for entry in params:
        dims = entry["shape"]
        single = [d[0][1] for d in dims if d and len(d) == 1 and d[0][0] == 1 and len(d[0][1]) == 1]
        if entry.get("exact") is False or entry["n"] != [[1, {}]] or len(dims) != 2 or len(single) != 2:
            continue
        (a, ea), (b, eb) = (next(iter(x.items())) for x in single)
        if a == b or ea != 1 or eb != 1 or a not in fields or b not in fields:
            continue
        if (a, b) not in gone:
            try:
                cfg, model = build(config_cls, vary(model_type, d0, b, fields[a]))
                built = {k[1] for k in measure(model, cfg)[0] if k[0] == "n"}
                gone[(a, b)] = {
                    e["p"]
                    for e in params
                    if e["n"] == [[1, {}]]
                    and {a, b} & {f for d in e["shape"] if d for _, exps in d for f in exps}
                    # not built, under its own name nor merged with a part of the same shape (`measure`)
                    and e["p"] not in built
                    and _INDEX.sub(".{i}", e["p"]) not in built
                }
            except Exception:  # a config that does not build: no rule
                gone[(a, b)] = None
    for (a, b), patterns in gone.items():  # the matrices and their biases
        for entry in params:
            if entry["p"] in (patterns or ()):
                entry["unless_equal"] = [a, b]


def _multilinear(
    model_type: str, config_cls, d0: dict, key, q0, moved: list[str], fields: dict, cache: dict
) -> list | None:
    """A quantity as a sum of products of distinct fields of `moved` (each to the power one), from builds with every
    subset of them doubled at once: with y_f = 1 or 2 the quantity is Σ_S c_S Π_{f∈S} y_f, and the c_S follow by
    Möbius inversion over the subsets. None when a build fails."""
    import itertools

    values: dict[frozenset, Fraction] = {}
    for n in range(len(moved) + 1):
        for combo in itertools.combinations(moved, n):
            s = frozenset(combo)
            if s not in cache:
                d = d0
                for f in combo:
                    d = vary(model_type, d, f, fields[f] * 2)
                try:
                    cfg_s, model_s = build(config_cls, d)
                    cache[s] = measure(model_s, cfg_s)[0]
                except Exception:
                    cache[s] = None
            got = q0 if not combo else (cache[s] or {}).get(key)
            if got is None:
                return None
            values[s] = Fraction(got)
    subsets = list(values)
    # h(T) = Σ_{U⊆T} (−1)^{|T|−|U|} g(U): the coefficient of Π_{f∈T} (y_f − 1)
    h = {t: sum((-1) ** (len(t) - len(u)) * values[u] for u in subsets if u <= t) for t in subsets}
    terms = []
    for s in sorted(subsets, key=lambda x: (len(x), sorted(x))):
        c = sum((-1) ** (len(t) - len(s)) * h[t] for t in subsets if s <= t)
        for f in s:
            c /= Fraction(fields[f]).limit_denominator(1000)
        if c:
            terms.append([_num(c), {f: 1 for f in sorted(s)}])
    return terms or [[0, {}]]


def _product_plus_constant(q0, qs: dict, base: dict) -> list[list]:
    """A quantity as one product of fields, each to a power from -2 to 2, plus a constant: c·Π f^e + r (a ViT's
    position embeddings, (image_size / patch_size)² + 1 with its class token: transformers 5.24
    models/vit/modeling_vit.py `ViTEmbeddings`). Doubling f alone adds p·(2^e − 1), p the product's base value;
    every p that gives each field's change a power is a candidate (the check builds choose)."""
    changed = {f: Fraction(v) - Fraction(q0) for f, v in qs.items() if v is not None and v != q0}
    powers = (-2, -1, 1, 2)
    candidates = []
    for e0 in powers if changed else ():
        p = next(iter(changed.values())) / (Fraction(2) ** e0 - 1)
        exps = {f: next((e for e in powers if p * (Fraction(2) ** e - 1) == d), None) for f, d in changed.items()}
        if None in exps.values() or not p:
            continue
        coef = p
        for f, e in exps.items():
            coef /= Fraction(base[f]).limit_denominator(1000) ** e
        rest = Fraction(q0) - p
        candidates.append([[_num(coef), exps], *([[_num(rest), {}]] if rest else [])])
    return candidates


# Hierarchical backbones: stages sized by their index and by per-stage lists (transformers 5.24
# models/swin/modeling_swin.py `SwinEncoder`: stage i holds depths[i] `SwinLayer`s int(embed_dim * 2**i) wide with
# num_heads[i] heads, each with a (2 * window_size - 1)**2-row relative position table, and a `SwinPatchMerging`
# in every stage but the last; `SwinModel.layernorm` is as wide as the last stage; models/segformer/
# modeling_segformer.py builds a sequence-reduction convolution only in the stages where sr_ratios[i] > 1)
def _stage_lists(d: dict, prefix: str = "") -> dict[str, list]:
    """The config's lists of numbers (one entry per stage: `depths`, `hidden_sizes`, `sr_ratios`), by dotted path
    (one level of sub-configs: MaskFormer's `backbone_config.depths`)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and not prefix:
            out.update(_stage_lists(v, f"{k}."))
        elif isinstance(v, list) and len(v) >= 2 and all(_number(x) for x in v) and not _NOT_SIZES.search(k):
            out[prefix + k] = v
    return out


def _stage_quantities(model, cfg, leads: frozenset = frozenset()) -> dict:
    """(pattern, stage) -> {"n": occurrences, axis: size (None where they differ), "rank", "of": the number of
    stages} of every parameter inside a ModuleList as long as a per-stage list of the config (`_stage_lists`), its
    first index being the stage; a pattern of `leads` is counted apart in the first block of each stage
    (`_lead_pattern`)."""
    import torch

    lengths = {len(v) for v in _stage_lists(cfg.to_dict()).values()}
    modules = dict(model.named_modules())
    shapes = collections.defaultdict(set)
    for name, p in model.named_parameters():
        shapes[_INDEX.sub(".{i}", name)].add(tuple(p.shape))
    out: dict = {}
    for name, p in model.named_parameters():
        first = _INDEX.search(name)
        owner = modules.get(name[: first.start()]) if first else None
        if not isinstance(owner, torch.nn.ModuleList) or len(owner) not in lengths:
            continue
        pattern = _pattern(name, modules, len(shapes[_INDEX.sub(".{i}", name)]) > 1)
        if pattern in leads:
            pattern = _lead_pattern(name, pattern) or pattern
        q = out.setdefault((pattern, int(first.group(1))), {"of": len(owner)})
        q["n"] = q.get("n", 0) + 1
        q["rank"] = p.dim() if q.get("rank", p.dim()) == p.dim() else None
        for axis, size in enumerate(p.shape):
            if q.setdefault(axis, size) != size:
                q[axis] = None
    return out


def _lead_pattern(name: str, pattern: str) -> str | None:
    """The pattern of a parameter of a stage's first block: `pattern` with the block's index (the second index of
    `name`, after the stage's) kept where it is 0 (transformers 5.24 models/bit/modeling_bit.py `BitStage`: the first
    layer of each stage reads the previous stage's width, `in_channels`, the others the stage's own, `out_channels`);
    None for a later block or a parameter of no block of a stage. `name` may be the pattern itself (its first
    block's pattern)."""
    parts = name.split(".")
    indices = [n for n, part in enumerate(parts) if part.isdigit() or part == "{i}"]
    if len(indices) < 2 or parts[indices[1]] not in ("0", "{i}"):
        return None
    out = pattern.split(".")
    out[indices[1]] = "0"
    return ".".join(out)


def _mixed_in_stage(quantities: dict) -> frozenset:
    """The patterns of `_stage_quantities` whose occurrences in one stage differ in shape: the first block of a
    stage of a hierarchical backbone, built from the previous stage's width (`_lead_pattern`)."""
    return frozenset(
        p for (p, _), q in quantities.items() if q["rank"] is None or any(q[a] is None for a in range(q["rank"]))
    )


def _parabola(points: list[tuple]) -> list[Fraction]:
    """[c, b, a] of a·x² + b·x + c through three points (x, y)."""
    (x1, y1), (x2, y2), (x3, y3) = ((Fraction(x).limit_denominator(1000), Fraction(y)) for x, y in points)
    a = ((y3 - y1) / (x3 - x1) - (y2 - y1) / (x2 - x1)) / (x3 - x2)
    b = (y2 - y1) / (x2 - x1) - a * (x1 + x2)
    return [y1 - a * x1 * x1 - b * x1, b, a]


def _quadratic(var: str, points: list[tuple]) -> list:
    """a·x² + b·x + c through three (x, y), as terms of the variable x."""
    return [[_num(v), {var: e} if e else {}] for e, v in reversed(list(enumerate(_parabola(points)))) if v] or [[0, {}]]


def _polynomial(model_type: str, config_cls, d0: dict, key, q0, moved: list[str], fields: dict, cache: dict):
    """A quantity as a polynomial of degree two at most in each of one or two fields, from builds with each field
    at one, two and three times its base value: a total over layers of different shapes (transformers 5.24
    models/mask2former/modeling_mask2former.py `Mask2FormerMLPPredictionHead(hidden_dim, hidden_dim,
    mask_feature_size, 3)`: 2·hidden_dim² + hidden_dim·mask_feature_size weights), which builds that move each field
    only by doubling fit as a line. None when a build fails."""
    import itertools

    if not 1 <= len(moved) <= 2:
        return None
    coefs: dict[tuple, Fraction] = {}
    for levels in itertools.product((1, 2, 3), repeat=len(moved)):
        at = tuple(zip(moved, levels))
        if at not in cache:
            d = d0
            for f, level in at:
                d = d if level == 1 else vary(model_type, d, f, fields[f] * level)
            try:
                cfg, model = build(config_cls, d)
                cache[at] = measure(model, cfg)[0]
            except Exception:
                cache[at] = None
        got = q0 if set(levels) == {1} else (cache[at] or {}).get(key)
        if got is None:
            return None
        coefs[levels] = Fraction(got)
    for axis, f in enumerate(moved):  # field by field: the levels of its axis become exponents
        solved = {}
        for rest in {k[:axis] + k[axis + 1 :] for k in coefs}:
            points = [(level * fields[f], coefs[(*rest[:axis], level, *rest[axis:])]) for level in (1, 2, 3)]
            for e, c in enumerate(_parabola(points)):
                solved[(*rest[:axis], e, *rest[axis:])] = c
        coefs = solved
    terms = [[_num(c), {f: e for f, e in zip(moved, exps) if e}] for exps, c in sorted(coefs.items()) if c]
    return terms or [[0, {}]]


class _Stages:
    """The builds a stage-indexed pattern is fitted and checked on: the base build, each field doubled, each
    per-stage list's even-indexed and odd-indexed entries doubled (so that a stage's own entry and the previous
    stage's move apart), the check builds, a build with every list's odd-indexed entries doubled, and (on demand)
    one variable tripled."""

    def __init__(self, model_type: str, config_cls, d0: dict, fields: dict, base, varied: dict, checks: list):
        self.model_type, self.config_cls, self.d0, self.fields = model_type, config_cls, d0, fields
        self.lists0 = _stage_lists(d0)
        self.runs: dict[str, tuple] = {}
        # patterns whose first block in a stage differs from the others: counted apart in every run
        self.leads = _mixed_in_stage(_stage_quantities(base[1], base[0]))
        self._add("base", base)
        for f, run in varied.items():
            self._add(f"field {f}", run)
        for f in self.lists0:
            for parity in (0, 1):
                self._add(f"list {f} {parity}", self._scaled(f, parity, 2))
        for n, run in enumerate(checks):
            self._add(f"check {n}", run)
        d_odd = d0
        for f, v in self.lists0.items():  # unequal changes from stage to stage, every list at once
            d_try = _set(d_odd, f, [x * 2 if s % 2 else x for s, x in enumerate(v)])
            if self._add("odd", d_try, keep=False):
                d_odd = d_try
        self._add("odd", d_odd)

    def lead(self, pattern: str) -> str | None:
        """The pattern of the first block of each stage, where it is counted apart from `pattern` (`leads`; not
        where `pattern` names that block already: a position `_pattern` keeps)."""
        lead = _lead_pattern(pattern, pattern) if pattern in self.leads else None
        return lead if lead != pattern else None

    def numel0(self, pattern: str) -> int:
        """The parameters of a pattern in the stages of the base build."""
        stages = self._of(pattern, self.runs["base"], None).values()
        return sum(q["n"] * math.prod(q[a] or 0 for a in range(q["rank"] or 0)) for q in stages)

    def _scaled(self, f: str, parity: int, m: int) -> dict:
        """d0 with the entries of list f at stages of that parity times m."""
        return _set(self.d0, f, [x * m if s % 2 == parity else x for s, x in enumerate(self.lists0[f])])

    def _add(self, name: str, run, keep: bool = True) -> str | None:
        """Measure a build (a (config, model) pair, or a config dict to build); None where it does not build."""
        try:
            cfg, model = build(self.config_cls, run) if isinstance(run, dict) else run
            d = cfg.to_dict()
            values = {f: _get(d, f) for f in self.fields if _number(_default(d, f))}
            measured = (values, _stage_lists(d), _stage_quantities(model, cfg, self.leads), measure(model, cfg)[0])
        except Exception:
            return None
        if keep:
            self.runs[name] = measured
        return name

    def _moved(self, var: str, s: int, m: int = 2) -> str | None:
        """The run with variable `var` of stage s times m (a field, `F[s]` or `F[s-1]`), built on demand for m = 3."""
        if "[" not in var:
            name, d = f"field {var}" if m == 2 else f"tripled {var}", None
        else:
            f, index = var[:-1].split("[")
            parity = s % 2 if index == "s" else (s - 1) % 2
            name = f"list {f} {parity}" if m == 2 else f"tripled {f} {parity}"
            d = self._scaled(f, parity, m)
        if name not in self.runs and m != 2:
            d = d if d is not None else vary(self.model_type, self.d0, var, self.fields[var] * m)
            return self._add(name, d)
        return name if name in self.runs else None

    def _of(self, pattern: str, run: tuple, outside: tuple | None) -> dict:
        """The pattern's quantities in each stage of a run: its own, or (`outside`: (a list, "first" or "last"), a
        pattern outside the stages as wide as the first or the last) those of the whole model in that stage of as
        many as the list has entries."""
        if outside is None:
            return {s: q for (p, s), q in run[2].items() if p == pattern}
        q, (listed, end) = run[3], outside
        if ("n", pattern) not in q or listed not in run[1]:
            return {}
        rank = q[("rank", pattern)]
        dims = {a: q[("d", pattern, a)] for a in range(rank or 0)}
        return {0 if end == "first" else len(run[1][listed]) - 1: {"n": q[("n", pattern)], "rank": rank, **dims}}

    def fit(self, pattern: str) -> dict | None:
        """The pattern as a stage entry: {"list": the list that counts the stages, "in": the stages that hold it
        (knowledge/inventory.py `stages_chosen`), "n": occurrences in a stage, "shape": its shape there, and "first":
        those of the first stage where it differs (SegFormer's first patch embedding reads num_channels where the
        others read hidden_sizes[i - 1])}, each a formula of the fields, of the stage's and the previous stage's
        list entries (`F[s]`, `F[s-1]`) and of 2**s that gives every run's quantities in every stage; None where
        none does."""
        base = self.runs["base"]
        stages = {q["of"] for q in base[2].values()}
        lengths = sorted((f for f, v in self.lists0.items() if len(v) in stages), key=lambda f: ("depth" not in f, f))
        if self._of(pattern, base, None):
            return self._fit(pattern, lengths, None)
        # outside the stages: as wide as the last one (Swin's final norm) or the first (ConvNeXt's stem), of the
        # stages some list counts
        fits = (self._fit(pattern, [f], (f, end)) for end in ("last", "first") for f in lengths)
        return next(filter(None, fits), None)

    def _fit(self, pattern: str, lengths: list[str], outside: tuple | None) -> dict | None:
        """`fit` with the stages counted by one of `lengths`, of a pattern in the stages or (`outside`) outside them
        (`_of`)."""
        at = {name: self._of(pattern, run, outside) for name, run in self.runs.items()}
        ranks = {q["rank"] for q in at["base"].values()}
        of = {q["of"] for q in at["base"].values()} if outside is None else {len(self.lists0[outside[0]])}
        counted = [f for f in lengths if len(self.lists0[f]) in of]
        if not at["base"] or len(ranks) != 1 or None in ranks or len(of) != 1 or not counted:
            return None
        rules = [[outside[1]]] if outside else [["all"], ["but_last"], ["but_first"], ["first"]]
        rules += [] if outside else [["above_one", f] for f in sorted(self.lists0)]
        rule = next((r for r in rules if self._chosen_everywhere(at, r, counted[0], None)), None)
        if rule is None and outside is not None:
            return None
        of_run = lambda run: self._of(pattern, run, outside)  # noqa: E731
        fitted = {x: self._fit_quantity(at, x, of_run) for x in ["n", *range(ranks.pop())]}
        if any(f is None for f in fitted.values()):
            return None
        unless = None
        if rule is None:  # built only where two of the stage's variables differ (`left_out_where_equal`)
            read = [f for t in fitted.values() for terms in t if terms for _, e in terms for f in e]
            found = (
                (r, u)
                for u in self._unequal_options(at, read)
                for r in rules
                if self._chosen_everywhere(at, r, counted[0], u)
            )
            rule, unless = next(found, (None, None))
            if rule is None:
                return None
        entry = {
            "list": counted[0],
            "in": rule,
            **({"unless_equal": unless} if unless else {}),
            "n": fitted["n"][0],
            "shape": [t[0] for x, t in fitted.items() if x != "n"],
        }
        if any(t[1] is not None for t in fitted.values()):
            first = {x: t[1] if t[1] is not None else t[0] for x, t in fitted.items()}
            entry["first"] = {"n": first["n"], "shape": [t for x, t in first.items() if x != "n"]}
        return entry

    def _chosen_everywhere(self, at: dict, rule: list, counted: str, unless: dict | None) -> bool:
        """Whether, in every run, the stages that hold the pattern are those `rule` chooses of as many as the list
        `counted` has entries, less those `unless` leaves out (knowledge/inventory.py `left_out_where_equal`)."""
        for name in at:
            values, lists = self.runs[name][:2]
            chosen = stages_chosen(rule, lists, len(lists.get(counted, ())))
            left = [left_out_where_equal(unless, stage_values(values, lists, s), s) for s in chosen]
            if None in left or set(at[name]) != {s for s, out in zip(chosen, left) if not out}:
                return False
        return True

    def _unequal_options(self, at: dict, read: list[str]):
        """The conditions `left_out_where_equal` reads that the base build meets in every stage holding the pattern:
        pairs of stage variables, unequal there, the variables the pattern's formulas read first (a shortcut
        projection hidden_sizes[s] wide, built in the first stage where embedding_size != hidden_sizes[0]:
        transformers 5.24 models/resnet/modeling_resnet.py `ResNetEncoder`), in the first stage only or in all."""
        import itertools

        values0, lists0 = self.runs["base"][:2]
        variables = {f for s in range(max(at["base"]) + 1) for f in stage_values(values0, lists0, s)}
        names = sorted(variables, key=lambda f: (f not in read, f))
        for first_only, (u, v) in itertools.product((True, False), itertools.combinations(names, 2)):
            unless = {"of": [u, v], "first_only": first_only}
            if STAGE_POWER not in (u, v) and not any(
                left_out_where_equal(unless, stage_values(values0, lists0, s), s) is not False for s in at["base"]
            ):
                yield unless

    def _holds(self, terms: list, at: dict, x, stages) -> bool:
        """Whether `terms` gives quantity x in every stage of `stages` (a predicate) of every run."""
        for name, by_stage in at.items():
            for s, q in by_stage.items():
                if not stages(s):
                    continue
                if q.get(x) is None:
                    return False
                got = evaluate(terms, stage_values(self.runs[name][0], self.runs[name][1], s))
                if abs(got - q[x]) >= 0.5:
                    return False
        return True

    def _fit_quantity(self, at: dict, x, of) -> tuple | None:
        """Quantity x as (the formula of every stage, that of the first stage where it differs, else None): fitted
        in each stage of the base build from the builds with one variable doubled (or, quadratic in one variable,
        tripled), then each term's coefficient as c · 2**(k·s) (k from the stages; tried from -2 to 2 where the
        base build has one stage)."""
        values0, lists0 = self.runs["base"][:2]
        by_stage = {}
        for s, q0 in at["base"].items():
            base_s = stage_values(values0, lists0, s)
            runs = {v: self._moved(v, s) for v in base_s if v != STAGE_POWER}
            moved = {v: at[r].get(s, {}).get(x) for v, r in runs.items() if r is not None}
            terms = infer(q0[x], moved, base_s)
            changed = [v for v, got in moved.items() if got is not None and got != q0[x]]
            if len(changed) == 1:  # moved by one variable: a third build tells a line from a parabola
                third = self._moved(changed[0], s, 3)
                if third is not None:
                    at[third] = of(self.runs[third])
                got = None if third is None else at[third].get(s, {}).get(x)
                if got is not None and (terms is None or not self._holds(terms, at, x, s.__eq__)):
                    b = base_s[changed[0]]
                    terms = _quadratic(changed[0], [(b, q0[x]), (2 * b, moved[changed[0]]), (3 * b, got)])
            if terms is None or not self._holds(terms, at, x, s.__eq__):
                return None
            by_stage[s] = terms
        merged = self._merge(by_stage, at, x, lambda s: True)
        if merged is not None:
            return merged, None
        if 0 not in by_stage or len(by_stage) < 2:
            return None
        rest = self._merge({s: t for s, t in by_stage.items() if s}, at, x, lambda s: s > 0)
        return None if rest is None else (rest, by_stage[0])

    def _merge(self, by_stage: dict, at: dict, x, stages) -> list | None:
        """One formula for the stages' formulas (`stages`: the predicate of the stages it is for): terms of the same
        fields in each stage, each coefficient c · 2**(k·s)."""
        import itertools

        coefs = {
            s: {json.dumps(e, sort_keys=True): Fraction(*c) if isinstance(c, list) else Fraction(c) for c, e in t}
            for s, t in by_stage.items()
        }
        keys = set(next(iter(coefs.values())))
        if any(set(c) != keys for c in coefs.values()):
            return None
        choices = []
        for key in sorted(keys):
            c = {s: by[key] for s, by in coefs.items()}
            s0 = min(c)
            ks: list = [0, 1, -1, 2, -2]
            if len(c) > 1:
                s1 = min(s for s in c if s != s0)
                r = c[s1] / c[s0]
                ks = [round(math.log2(r) / (s1 - s0))] if r > 0 else []
            options = [
                [_num(c[s0] / Fraction(2) ** (k * s0)), {**json.loads(key), **({STAGE_POWER: k} if k else {})}]
                for k in ks
                if all(c[s] == c[s0] * Fraction(2) ** (k * (s - s0)) for s in c)
            ]
            if not options:
                return None
            choices.append(options)
        return next((list(t) for t in itertools.product(*choices) if self._holds(list(t), at, x, stages)), None)


def _stack_fields(stacks: list) -> set[str]:
    """The fields the formulas of `_stacks` read."""
    formulas = [t for s in stacks for t in (s["layers"], *(k["n"] for k in s["kinds"].values())) if t]
    return {f for terms in formulas for _, exps in terms for f in exps}


def _stacks(base: tuple, varied: dict, check, alternate, fields: dict, scaled: dict, alt: dict, defaults: dict) -> list:
    """Where another ModuleList is the largest stack of blocks in another build (an audio tower beside the language
    model's layers, each as deep as its own config says; trace/inventory.py `measure` counts the layers of the
    longest): each such stack's depth and layer kinds as formulas, in the order the model holds them, for
    knowledge/inventory.py to count the layers of the one a config makes the longest. [] where every build's largest
    stack is the same ModuleList. `base`, `check`, `alternate` and the `varied` values are (config, model) builds;
    the check builds are those of `scaled` and `alt` sizes."""
    runs = [base, *varied.values(), check, alternate]
    chosen = {measure(model, cfg)[1]["stack"] for cfg, model in filter(None, runs)}
    names = [name for name, _ in base[1].named_modules() if name in chosen]
    if len(names) < 2:
        return []
    out = []
    for name in names:

        def quantities(run, name=name):
            if run is None:
                return None, None
            q, info = measure(run[1], run[0], name)
            return {**{k: v for k, v in q.items() if k[0] == "k"}, ("layers",): info["layers"]}, info

        q0, info0 = quantities(base)
        qs = {f: quantities(run)[0] for f, run in varied.items()}
        qc, qa = quantities(check)[0], quantities(alternate)[0]
        depth, kinds = None, {}
        for key, v0 in q0.items():
            terms = infer(v0, {f: q.get(key) for f, q in qs.items()}, fields)
            ok = (
                terms is not None
                and qc is not None
                and qc.get(key) is not None
                and abs(evaluate(terms, scaled) - qc[key]) < 0.5
                and (qa is None or qa.get(key) is not None and abs(evaluate(terms, alt) - qa[key]) < 0.5)
            )
            if key == ("layers",):
                depth = terms if ok else None
                continue
            rule = _where(info0["where"][key], base[0], info0["layers"], defaults=defaults)
            kinds[key[1]] = {"n": terms if ok or rule else None, **rule}
        out.append({"stack": name, "layers": depth, "kinds": kinds})
    return out


def _every_listed_layer(indices: set, cfg, layers: int, n: int) -> dict:
    """A pattern in every layer of a model whose layer count is the length of a list of layer kinds (Nemotron-H's
    `layers_block_type`, transformers 5.24 models/nemotron_h/configuration_nemotron_h.py: `num_hidden_layers` is a
    property that returns its length): counted as the layers of every kind the list holds."""
    if not indices or not layers or len(indices) != layers:
        return {}
    for field, values in vars(cfg).items():
        if isinstance(values, list) and len(values) == layers and all(isinstance(v, str) for v in values):
            return {"where": [field, sorted(set(values))], "per": n // layers}
    return {}


def _rule_count(rule: dict, config: dict) -> int | None:
    """Occurrences a layer rule gives for a config (knowledge/inventory.py reads it the same way)."""
    from vramlens.knowledge import inventory as bundled

    fake = {
        "models": {
            "x": {
                "class": "",
                "fields": {},
                "params": [{"p": "x", "kind": "x", "n": None, "shape": [], **rule}],
                "layer_kinds": {},
                "tied": None,
            }
        }
    }
    saved = bundled._data
    bundled._data = lambda: fake
    try:
        built = bundled.build(config, "x")
    finally:
        bundled._data = saved
    return dict(built.by_kind).get("x", 0) if built else None


# Patterns of the layer stack whose shape differs between layers of different types, by the list of layer types
# that separates them (Kimi-Linear's `self_attn.q_proj`: an MLA projection in its "full_attention" layers, a
# delta-rule one in the others, transformers 5.24 models/kimi_linear/modeling_kimi_linear.py
# `KimiLinearDecoderLayer`); chosen from the base build of the model_type being measured (`_split_patterns`), so
# that every build of it names the same patterns
_split: dict[str, str] = {}


def _layer_type_lists(cfg, layers: int) -> dict[str, list]:
    """The config's lists of layer types (`_per_layer`), by dotted field (`text_config.` for a composite)."""
    out = {}
    for owner, prefix in ((cfg, ""), (getattr(cfg, "text_config", None), "text_config.")):
        for field, values in vars(owner).items() if owner is not None else ():
            if _per_layer(values, layers):
                out[prefix + field] = values
    return out


def _per_layer(values, layers: int) -> bool:
    """Whether `values` is a list of layer types: a string per layer, or a 0/1 flag per layer (Mistral-Large-4's
    `no_rope_layers`, whose NoPE layers size kv_a_proj_with_mqa and kv_b_proj without the RoPE slice: transformers
    5.24 models/mistral_large4/modeling_mistral_large4.py `MistralLarge4TextAttention.__init__`)."""
    return (
        isinstance(values, list)
        and len(values) == layers
        and (
            all(isinstance(v, str) for v in values)
            or all(isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in values)
        )
    )


def _occurrences(model, info: dict):
    """(pattern, layer index, name, parameter) of every parameter of the layer stack `info` names."""
    if not info["stack"]:
        return
    prefix = info["stack"] + "."
    for name, p in model.named_parameters():
        if name.startswith(prefix):
            yield _INDEX.sub(".{i}", name), int(name[len(prefix) :].split(".")[0]), name, p


def _split_patterns(model, cfg, q: dict, info: dict) -> dict[str, str]:
    """Patterns whose shape differs between layers and is one shape in the layers of each type of a list of layer
    types: pattern -> that list's field."""
    shapes: dict[str, list] = collections.defaultdict(list)
    for pattern, i, _, p in _occurrences(model, info):
        if any(q.get(("d", pattern, a), 0) is None for a in range(p.dim())):
            shapes[pattern].append((i, tuple(p.shape)))
    lists = _layer_type_lists(cfg, info["layers"])
    out = {}
    for pattern, seen in shapes.items():
        for field, types in lists.items():
            if all(len({s for i, s in seen if types[i] == t}) == 1 for t in {types[i] for i, _ in seen}):
                out[pattern] = field
                break
    return out


def measure(model, cfg, stack_name: str | None = None) -> tuple[dict, dict]:
    """trace/inventory.py `measure`, with each pattern of `_split` counted apart in the layers of each type, as
    `pattern [type]`."""
    q, info = _measure(model, cfg, stack_name)
    lists = _layer_type_lists(cfg, info["layers"]) if _split else {}
    split = {p: lists[f] for p, f in _split.items() if f in lists and ("n", p) in q}
    if not split:
        return q, info
    modules = dict(model.named_modules())
    for pattern in split:
        for key in [k for k in q if k[0] in ("n", "d", "rank") and k[1] == pattern]:
            del q[key]
        info["where"].pop(pattern, None)
        info["kinds"].pop(pattern, None)
    for pattern, i, name, p in _occurrences(model, info):
        if pattern not in split:
            continue
        sub = f"{pattern} [{split[pattern][i]}]"
        q[("n", sub)] = q.get(("n", sub), 0) + 1
        for axis, size in enumerate(p.shape):
            if q.setdefault(("d", sub, axis), size) != size:
                q[("d", sub, axis)] = None
        q[("rank", sub)] = p.dim() if q.get(("rank", sub), p.dim()) == p.dim() else None
        info["where"][sub].add(i)
        info["kinds"].setdefault(sub, _kind(name, modules))
    return q, info


def _switches(config_cls, d0: dict, q0: dict, used: list[str]) -> tuple[dict, list[str]]:
    """Booleans (top-level, and a sub-config's) whose other value changes which parameters exist (attention_bias, a
    shared expert, a decoder's cross-attention), and used sizes that may be null (DeepSeek's q_lora_rank: None → one
    q_proj): a config.json with the other value is not what the inventory measured."""

    def patterns(d):  # as `base` names them: a pattern whose shape differs between occurrences has None there
        cfg, model = build(config_cls, d)
        q = measure(model, cfg)[0]
        return {(k[1], tuple(q.get(("d", k[1], a)) for a in range(q[("rank", k[1])] or 0))) for k in q if k[0] == "n"}

    base = {(k[1], tuple(q0.get(("d", k[1], a)) for a in range(q0[("rank", k[1])] or 0))) for k in q0 if k[0] == "n"}
    switches, nullable = {}, []
    # and a sub-config's (EncoderDecoderConfig's `decoder.add_cross_attention`, transformers 5.24
    # models/bert/modeling_bert.py `BertLayer`: a cross-attention block only with it)
    flags = {k: v for k, v in d0.items() if isinstance(v, bool)}
    flags.update(
        {f"{k}.{g}": w for k, v in d0.items() if isinstance(v, dict) for g, w in v.items() if isinstance(w, bool)}
    )
    for k, v in flags.items():
        name = k.rsplit(".", 1)[-1]
        if _SWITCH.search(name) and not name.startswith(("use_cache", "output_", "return_")):
            try:
                if patterns(_set(d0, k, not v)) != base:
                    switches[k] = v
            except Exception:
                continue
    for f in used:
        if "." in f or f in LAYER_FIELDS:
            continue
        try:
            if patterns({**d0, f: None}) != base:
                nullable.append(f)
        except Exception:
            continue
    return switches, nullable


def _derived(config_cls, d0: dict, used: list[str], fields: dict, defaults: dict) -> dict:
    """Fields the config class computes from others when config.json leaves them out (Mamba's intermediate_size =
    expand · hidden_size): the formula, for a config.json that does not write them."""
    out = {}
    for f in used:
        if "." in f:
            continue
        bare = {k: v for k, v in d0.items() if k != f}
        try:
            v0 = getattr(config_cls.from_dict(bare), f, None)
        except Exception:
            continue
        if not _number(v0) or v0 == _default(defaults, f):
            continue
        values = {}
        for g, gv in fields.items():
            if g == f or "." in g or g not in bare:
                continue
            try:
                values[g] = getattr(config_cls.from_dict(_set(bare, g, gv * 2)), f, None)
            except Exception:
                continue
        terms = infer(v0, {g: v if _number(v) else None for g, v in values.items()}, fields)
        if terms is not None:
            out[f] = terms
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _default(d: dict, path: str):
    try:
        v = _get(d, path)
    except (KeyError, TypeError):
        return None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _tie(d: dict):
    if "tie_word_embeddings" in d:
        return d["tie_word_embeddings"]
    for v in d.values():
        if isinstance(v, dict) and "tie_word_embeddings" in v:
            return v["tie_word_embeddings"]
    return None


def same_parameters(model_type: str, cfg, model) -> list[str]:
    """The other classes transformers maps the model_type to (its auto `MODEL_*_MAPPING_NAMES`: the base model and
    every task head) that build, from the same config, the parameters `model` has, name for name and shape for
    shape (transformers 5.24 models/bert/modeling_bert.py: `BertForMaskedLM` and `BertLMHeadModel` are both
    `BertModel(config, add_pooling_layer=False)` under `bert` and `BertOnlyMLMHead` under `cls`): a config.json
    whose `architectures` names one of them builds what the inventory counts."""
    import torch
    import transformers
    from transformers.models.auto import modeling_auto as ma

    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    names: set[str] = set()
    for mapping in (getattr(ma, n) for n in sorted(dir(ma)) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES")):
        found = mapping.get(model_type)
        names.update([found] if isinstance(found, str) else found or ())
    same = []
    for name in sorted(names - {type(model).__name__}):
        cls = getattr(transformers, name, None)
        if getattr(cls, "config_class", None) is not type(cfg):
            continue
        try:
            with torch.device("meta"):
                other = cls._from_config(cfg)
        except Exception:  # a head this config does not build
            continue
        if {n: tuple(p.shape) for n, p in other.named_parameters()} == shapes:
            same.append(name)
    return same


def _tied(model) -> dict | None:
    """The output embedding's and input embedding's patterns, and whether the build ties them."""
    try:
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    except Exception:
        return None
    if out is None or inp is None or getattr(out, "weight", None) is None:
        return None
    out_name = next((f"{n}.weight" for n, m in model.named_modules(remove_duplicate=False) if m is out), "")
    in_name = next((f"{n}.weight" for n, m in model.named_modules(remove_duplicate=False) if m is inp), "")
    return {
        "out": _INDEX.sub(".{i}", out_name or ""),
        "in": _INDEX.sub(".{i}", in_name or ""),
        "is_tied": out.weight is inp.weight,
    }


def _where(indices: set, cfg, layers: int, n: int | None = None, defaults: dict | None = None) -> dict:
    """Which layers a pattern sits in, when the config says it: a list of layer types (`layer_types`), a list of
    layer indices (`full_attn_idxs`, `mlp_only_layers`), a period and offset (Jamba's `attn_layer_period` /
    `attn_layer_offset`, and the layers off it) or the first k layers (`first_k_dense_replace`). `default`: the
    config class's value of the field, for a config.json that leaves it out."""
    if not indices or not layers or len(indices) == layers:
        return {}
    per = (n // len(indices)) if n else 1
    every = set(range(layers))
    for owner, prefix in ((cfg, ""), (getattr(cfg, "text_config", None), "text_config.")):
        if owner is None:
            continue
        attrs = {k: v for k, v in vars(owner).items() if not isinstance(v, bool)}

        def default(field):
            try:
                v = _get(defaults or {}, prefix + field)
            except (KeyError, TypeError):
                return None
            return v if isinstance(v, (int, list)) and not isinstance(v, bool) else None

        # the most specific rule first: a list of layer types, a list of indices, a period, the first k layers
        # (only a field named for it: any other 1 would also "select" layer 0)
        for field, values in attrs.items():
            if _per_layer(values, layers):
                chosen = {values[i] for i in indices}
                if {i for i, v in enumerate(values) if v in chosen} == indices:
                    return {"where": [prefix + field, sorted(chosen)], "per": per}
        for field, values in attrs.items():
            if isinstance(values, list) and values and all(isinstance(v, int) for v in values):
                if set(values) & every == indices:
                    return {"where_in": prefix + field, "per": per, "default": default(field)}
                if every - set(values) == indices:
                    return {"where_not_in": prefix + field, "per": per, "default": default(field)}
        for field, values in attrs.items():
            if isinstance(values, int) and field.endswith("period"):
                offset_field = field[: -len("period")] + "offset"
                offset = attrs.get(offset_field, 0)
                if isinstance(offset, int) and values:
                    on = {i for i in every if i % values == offset}
                    if on in (indices, every - indices):
                        rule = "where_every" if on == indices else "where_every_not"
                        return {rule: [prefix + field, prefix + offset_field], "per": per}
        for field, values in attrs.items():
            if isinstance(values, int) and 0 < values < layers and re.search(r"first|dense|replace", field):
                if set(range(values)) == indices:
                    return {"where_below": prefix + field, "per": per, "default": default(field)}
                if set(range(values, layers)) == indices:
                    return {"where_from": prefix + field, "per": per, "default": default(field)}
        # a shorter list of layer kinds repeated over the layers (RecurrentGemma's `block_types`, layer i of kind
        # block_types[i % len(block_types)]: transformers 5.24 models/recurrent_gemma/configuration_recurrent_gemma.py
        # `layers_block_type`)
        for field, values in attrs.items():
            if isinstance(values, list) and 1 < len(values) < layers and all(isinstance(v, str) for v in values):
                chosen = {values[i % len(values)] for i in indices}
                if {i for i in every if values[i % len(values)] in chosen} == indices:
                    return {"where_cycle": [prefix + field, sorted(chosen)], "per": per, "default": default(field)}
    return {}


# Fields that may say which layers hold a part beside a list of layer kinds (`_where`): a list of layer indices, a
# step, the first or last layer of a range (Qwen-MoE's `mlp_only_layers` and `decoder_sparse_step`, ERNIE-4.5's
# `moe_layer_start_index`, `moe_layer_end_index` and `moe_layer_interval`, Llama-4's `moe_layers` and
# `interleave_moe_layer_step`)
_SELECTOR = re.compile(r"layer|step|interval|freq|sparse|dense|replace|start|end|period|offset")


def _layout(cfg, model) -> tuple[dict, int, dict]:
    """(fields that may select layers, by dotted path; the layer count; the layers of every pattern and kind) of a
    build."""
    info = measure(model, cfg)[1]
    fields = {}
    for owner, prefix in ((cfg, ""), (getattr(cfg, "text_config", None), "text_config.")):
        for k, v in (vars(owner) if owner is not None else {}).items():
            if _SELECTOR.search(k) and k not in LAYER_FIELDS and (_number(v) or isinstance(v, list)):
                fields[prefix + k] = v
    return fields, info["layers"], info["where"]


def _conditions(where_key, layouts: list, config_cls, per: int) -> dict:
    """Which layers hold a pattern (or a kind) as conditions on single fields that must all hold
    (knowledge/inventory.py `layer_meets`: a list of indices a layer is in or not in, a step, a first or last layer),
    where no one field says it: Qwen-MoE's `layer_idx not in config.mlp_only_layers and (layer_idx + 1) %
    config.decoder_sparse_step == 0` (transformers 5.24 models/qwen2_moe/modeling_qwen2_moe.py
    `Qwen2MoeDecoderLayer`), ERNIE-4.5's interval between a first and a last MoE layer
    (models/ernie4_5_moe/modeling_ernie4_5_moe.py `Ernie4_5_MoeDecoderLayer`). The conditions are every one that
    holds in every build (`layouts`: the base build, one field doubled, the check builds) for the layers that hold
    the part, or (`negated`) for those that do not (the dense MLP of the layers that are not MoE), and selects fewer
    than all layers in one, of the two the one on more fields; {} unless together they select exactly those layers in
    every build."""
    from vramlens.knowledge.inventory import layer_meets

    base_fields = layouts[0][0]
    candidates = [
        (condition, f)
        for f, v in base_fields.items()
        for condition in (("in", "not_in") if isinstance(v, list) else ("step", "from", "upto", "below"))
    ]
    dataclass_defaults = getattr(config_cls, "__dataclass_fields__", {})
    found = []
    for negated in (False, True):
        truths = [
            set(range(n)) - set(where.get(where_key, ())) if negated else set(where.get(where_key, ()))
            for _, n, where in layouts
        ]
        chosen, selections = [], []
        for condition, f in candidates:
            met = []
            for (fields, n, _), truth in zip(layouts, truths):
                on = [layer_meets(condition, fields.get(f), i, n) for i in range(n)]
                if any(m is None for m in on):
                    break
                met.append(({i for i in range(n) if on[i]}, truth, n))
            else:
                if all(truth <= on for on, truth, _ in met) and any(len(on) < n for on, _, n in met):
                    chosen.append([condition, f])
                    selections.append([on for on, _, _ in met])
        if chosen and all(set.intersection(*(s[r] for s in selections)) == truths[r] for r in range(len(truths))):
            defaults = {}
            for _, f in chosen:
                field = dataclass_defaults.get(f) if "." not in f else None
                default = getattr(field, "default", None)
                if not isinstance(getattr(field, "default_factory", dataclasses.MISSING), type(dataclasses.MISSING)):
                    default = field.default_factory()  # a list field's default (`mlp_only_layers = []`)
                defaults[f] = default if _number(default) or isinstance(default, list) else None
            found.append({"where_all": chosen, "negated": negated, "per": per, "default": defaults})
    # the rule on more fields (Llama-4's dense layers: not every `interleave_moe_layer_step`-th one, besides not in
    # `moe_layers`, which a config.json may leave out)
    return max(found, key=lambda rule: len(rule["where_all"]), default={})


def main() -> int:
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    ap = argparse.ArgumentParser()
    ap.add_argument("types", nargs="*", help="model_types to (re)build; default: every one not yet recorded")
    ap.add_argument("--again", action="store_true", help="rebuild every model_type")
    ap.add_argument("--skipped", action="store_true", help="try the model_types skipped before again")
    ap.add_argument("--out", type=Path, default=OUT, help="the file to write (default: the bundled inventories)")
    ap.add_argument("--reverse", action="store_true", help="last model_types first (a second process on another core)")
    ap.add_argument("--merge", type=Path, help="add the model_types another --out file holds, then stop")
    args = ap.parse_args()
    out = args.out
    existing = _read(out) if out.exists() else {"models": {}, "skipped": {}}
    if args.merge:
        other = _read(args.merge)
        if other.get("transformers") != existing.setdefault("transformers", other.get("transformers")):
            raise SystemExit(
                f"{args.merge} is of transformers {other.get('transformers')}, {out} of {existing['transformers']}"
            )
        existing.setdefault("torch", other.get("torch"))
        for t, inv in other["models"].items():
            existing["models"].setdefault(t, inv)
            existing["skipped"].pop(t, None)
        for t, why in other["skipped"].items():
            if t not in existing["models"]:
                existing["skipped"].setdefault(t, why)
        _write(existing, out)
        return 0
    existing["transformers"] = transformers.__version__
    existing["torch"] = torch.__version__.split("+")[0]
    from transformers.models.auto import modeling_auto as ma

    # language models first, then the other base models, then models with a task class only
    mappings = [
        ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        ma.MODEL_MAPPING_NAMES,
    ]
    ordered = sorted(CONFIG_MAPPING_NAMES, key=lambda t: next(n for n, m in enumerate([*mappings, {t: t}]) if t in m))
    # a model_type with no model class builds nothing
    types = (
        [t for t in args.types if class_for(t)]
        if args.types
        else [
            t
            for t in ordered
            if class_for(t)
            and (args.again or t not in existing["models"] and (args.skipped or t not in existing["skipped"]))
        ]
    )
    for t in reversed(types) if args.reverse else types:
        try:
            with quiet_and_quick():
                existing["models"][t] = inventory(t)
            existing["skipped"].pop(t, None)
        except Exception as e:  # the default config does not build: nothing to record
            if len(types) == 1:
                raise
            existing["skipped"][t] = f"{type(e).__name__}: {str(e)[:160]}"
            existing["models"].pop(t, None)
        print(t, "ok" if t in existing["models"] else existing["skipped"][t], file=sys.stderr, flush=True)
        _write(existing, out)
    return 0


def _read(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def _write(data: dict, out: Path) -> None:
    text = (json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n").encode()
    tmp = out.with_name(out.name + ".tmp")  # replaced whole: a reader never sees half a file
    # mtime 0: the same inventories give the same bytes
    tmp.write_bytes(gzip.compress(text, compresslevel=9, mtime=0) if out.suffix == ".gz" else text)
    tmp.replace(out)


if __name__ == "__main__":
    raise SystemExit(main())
