"""Parameter counts by construction: the bundled inventories of what transformers' own classes build, scaled by a
`config.json`'s sizes.

`knowledge/data/inventories.json.gz` (gzip-compressed JSON, read on first use) is written by
`scripts/dump_model_inventories.py` from tiny meta-device builds of every model_type of one transformers version
(recorded in the file). Each parameter pattern carries its shape and
its number of occurrences as formulas of config fields (sums of products), or the rule that says which layers hold
it (a `layer_types` list, a list of layer indices, a period and offset, the first k layers), and the two sizes that
must differ for it to be built (`unless_equal`). Nothing here imports torch or transformers; the data is plain JSON.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

DATA = "inventories.json.gz"  # gzip-compressed JSON
_LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "decoder_layers")
# Layer kinds that are not attention. The estimator models them as themselves in the model_types
# knowledge/models.py `MODELLED_MIXERS` lists (Mamba / Mamba-2 mixers, gated DeltaNet, short convolutions); in any
# other model_type it sizes them as attention layers, and says so.
NOT_ATTENTION = ("state space", "linear attention", "short conv")


@dataclass(frozen=True)
class Built:
    """What transformers would build from a config: parameters (total and by kind) and layers by kind."""

    total: int
    by_kind: tuple[tuple[str, int], ...]
    layer_kinds: tuple[tuple[str, int], ...]
    approximate: str  # "" when every quantity followed its formula; else what did not
    source: str


@functools.cache
def _data() -> dict:
    """The inventories, read and decompressed on first use (importing this module reads nothing)."""
    return json.loads(gzip.decompress(resources.files("vramlens.knowledge.data").joinpath(DATA).read_bytes()))


def version() -> str:
    return str(_data().get("transformers", ""))


def known(model_type: str) -> bool:
    return model_type in _data()["models"]


def classes(model_type: str) -> tuple[str, ...]:
    """The transformers classes whose build the model_type's inventory counts: the one it was measured on, then
    those that build the same parameters from the same config (scripts/dump_model_inventories.py
    `same_parameters`); () when the model_type has no inventory."""
    inv = _data()["models"].get(model_type)
    return () if inv is None else (inv["class"], *inv.get("same_params", ()))


# The parameter kinds of a layer that is not attention or an MLP (scripts/dump_model_inventories.py `kind_of`)
MIXER_KINDS = frozenset({"linear-attention", "state-space", "short-conv"})


def _linears(inv: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(module path, layer kind) of each linear weight of an inventory: a 2-D `<module>.weight` (`{i}` standing for
    the layer index in the path)."""
    for entry in inv["params"]:
        path = entry["p"]
        if path.endswith(".weight") and len(entry["shape"]) == 2 and "." in path[: -len(".weight")]:
            yield path[: -len(".weight")], entry["kind"]


@functools.cache
def linear_leaves(model_type: str) -> dict[str, frozenset[str]]:
    """The model_type's linear weights by module leaf name (what a peft `target_modules` entry ends with), each with
    the kinds of layer it is found in: `{"out_proj": {"linear-attention"}, "q_proj": {"attention"}, ...}`; empty
    when the model_type has no inventory."""
    inv = _data()["models"].get(model_type)
    out: dict[str, set[str]] = {}
    for module, kind in _linears(inv) if inv is not None else ():
        out.setdefault(module.rsplit(".", 1)[-1], set()).add(kind)
    return {leaf: frozenset(kinds) for leaf, kinds in out.items()}


@functools.cache
def linear_paths() -> tuple[str, ...]:
    """Every linear's module path in every inventory, `{i}` standing for the layer index
    ("model.language_model.layers.{i}.self_attn.q_proj"): the names a regex over module names is matched against."""
    return tuple(sorted({module for inv in _data()["models"].values() for module, _ in _linears(inv)}))


def tie_default(model_type: str) -> bool | None:
    """The tie_word_embeddings of the model_type's config class where a config.json does not write it (the
    reference build's); None when the model_type has no inventory or its build has no head that may be tied to an
    input embedding (CLIP's dual encoder)."""
    inv = _data()["models"].get(model_type)
    return None if inv is None or not inv.get("tied") else bool(inv["tie_default"])


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 2**31


def _eval(terms: list, values: Mapping[str, float]) -> float:
    total = 0.0
    for coef, exps in terms:
        c = coef[0] / coef[1] if isinstance(coef, list) else coef
        for field, e in exps.items():
            c *= values[field] ** e
        total += c
    return total


def _lfm2(config: Mapping[str, Any]) -> dict:
    """LFM2's own spellings and its MLP width (transformers 5.24 models/lfm2/configuration_lfm2.py `__post_init__`:
    `tie_embedding` and `block_ff_dim` are read as tie_word_embeddings and intermediate_size; modeling_lfm2.py
    `Lfm2MLP`: with `block_auto_adjust_ff_dim` the width is int(2/3 · I), times `block_ffn_dim_multiplier`, rounded
    up to a multiple of `block_multiple_of`). The inventory is built with the adjustment off, so the width it reads
    is the one the layers get."""
    config = dict(config)
    if isinstance(config.get("tie_embedding"), bool):
        config["tie_word_embeddings"] = config["tie_embedding"]
    width = config.get("block_ff_dim", config.get("intermediate_size", 12288))
    if _number(width) and config.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier, multiple = config.get("block_ffn_dim_multiplier", 1.0), config.get("block_multiple_of", 256)
        if _number(multiplier) and isinstance(multiple, int) and multiple > 0:
            width = int(multiplier * width)
            width = multiple * ((width + multiple - 1) // multiple)
    if _number(width):
        config["intermediate_size"] = int(width)
    return config


def _falcon_h1(config: Mapping[str, Any]) -> dict:
    """Falcon-H1's Mamba width is `mamba_d_ssm` when written, else mamba_expand · hidden_size (transformers 5.24
    models/falcon_h1/configuration_falcon_h1.py `__post_init__`); the inventory is measured with the second, so a
    written width is read as the expand factor that gives it."""
    config = dict(config)
    width, hidden = config.get("mamba_d_ssm"), config.get("hidden_size")
    if _number(width) and _number(hidden) and hidden:
        config["mamba_expand"] = width / hidden
    return config


def _gemma3n(config: Mapping[str, Any]) -> dict:
    """Gemma-3n's MLP width, one per layer (transformers 5.24 models/gemma3n/configuration_gemma3n.py
    `intermediate_size: int | list[int] = 16_384`, repeated per layer by `__post_init__`; modeling_gemma3n.py
    `Gemma3nTextMLP` builds layer i with `intermediate_size[i]`). The inventory is measured with one width for every
    layer: a list is read as its mean (the MLP's matrices are linear in it, so the sum over layers is exact when the
    mean is a whole number)."""
    config = dict(config)
    width = config.get("intermediate_size", 16_384)
    if isinstance(width, list) and width and all(_number(w) for w in width):
        width = sum(width) / len(width)
    if _number(width):
        config["intermediate_size"] = int(width) if float(width).is_integer() else width
    return config


# transformers 5.24 models/nemotron_h/configuration_nemotron_h.py `NemotronHConfig.__post_init__`: the older names of
# the Mamba fields, and `hybrid_override_pattern` (M Mamba-2, * attention, - MLP, E MoE) read as `layers_block_type`
_NEMOTRON_H_LEGACY = {
    "mamba_n_groups": "n_groups",
    "mamba_d_conv": "conv_kernel",
    "mamba_expand": "expand",
    "mamba_conv_bias": "use_conv_bias",
    "mamba_chunk_size": "chunk_size",
}
NEMOTRON_H_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
NEMOTRON_H_DEFAULT_LAYERS = ("linear_attention", "moe", "full_attention", "mlp")


def nemotron_h_layers(config: Mapping[str, Any]) -> list[str] | None:
    """Nemotron-H's layer kinds, one per layer, as `NemotronHConfig` reads them: `layers_block_type` (or its alias
    `layer_types`), else `hybrid_override_pattern` one character per layer, else the class's default list; None for
    a pattern with a character the class does not know (it raises)."""
    listed = config.get("layers_block_type", config.get("layer_types"))
    if isinstance(listed, list) and all(isinstance(v, str) for v in listed):
        return list(listed)
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        if not all(ch in NEMOTRON_H_PATTERN for ch in pattern):
            return None
        return [NEMOTRON_H_PATTERN[ch] for ch in pattern]
    return list(NEMOTRON_H_DEFAULT_LAYERS)


def _nemotron_h(config: Mapping[str, Any]) -> dict:
    """Nemotron-H's older spellings (`_NEMOTRON_H_LEGACY`) and its layer list (`nemotron_h_layers`): every layer is
    one block of one kind, and the list's length is the layer count (`num_hidden_layers` is ignored)."""
    config = dict(config)
    for old, new in _NEMOTRON_H_LEGACY.items():
        if old in config:
            config[new] = config.pop(old)
    layers = nemotron_h_layers(config)
    if layers is not None:
        config["layers_block_type"] = layers
    return config


# Canonical field -> the older spellings transformers' config classes read as it (their `attribute_map`: GPT-2,
# BLOOM, GPT-BigCode, GPT-J, T5 configs in transformers 5.24)
_ALIASES = {
    "hidden_size": ("n_embd", "n_embed", "d_model"),
    "num_hidden_layers": ("n_layer", "num_layers"),
    "num_attention_heads": ("n_head", "num_heads"),
    "max_position_embeddings": ("n_positions",),
    "intermediate_size": ("n_inner",),
    # Qwen3-MoE, Qwen3-VL-MoE, Mixtral, MiniMax, gpt-oss configs in transformers 5.24: `attribute_map = {"num_experts":
    # "num_local_experts"}` (a published Qwen3-VL-MoE config.json writes `num_experts`)
    "num_local_experts": ("num_experts",),
}


def _layer_lists(config: Mapping[str, Any], layers: int, full, dense: int) -> dict:
    """`config` with the layer lists a config class computes where config.json leaves them out: `layer_types` (a
    layer is full attention where `full(i)`, else linear attention) and `mlp_layer_types` (the first `dense` layers
    dense, the others sparse), `layers` long unless `num_hidden_layers` says otherwise."""
    config = dict(config)
    n = config.get("num_hidden_layers", layers)
    if not (isinstance(n, int) and 0 < n <= 4096):
        return config
    if not isinstance(config.get("layer_types"), list):
        config["layer_types"] = ["full_attention" if full(i) else "linear_attention" for i in range(n)]
    if not isinstance(config.get("mlp_layer_types"), list):
        config["mlp_layer_types"] = ["dense" if i < dense else "sparse" for i in range(n)]
    return config


def _kimi_linear(config: Mapping[str, Any]) -> dict:
    """Kimi-Linear as transformers 5.24 models/kimi_linear/configuration_kimi_linear.py `KimiLinearConfig.__post_init__`
    reads it: the checkpoint's `linear_attn_config` gives the delta-attention sizes (head_dim, num_heads,
    short_conv_kernel_size) and its layers (1-indexed `full_attn_layers`, `kda_layers`); without a `layer_types`
    list every fourth layer from index 4 is full attention; the first `first_k_dense_replace` (1) layers are dense;
    27 layers by default."""
    config = dict(config)
    linear = config.get("linear_attn_config")
    linear = linear if isinstance(linear, Mapping) else {}
    for key, field in (
        ("head_dim", "linear_head_dim"),
        ("num_heads", "linear_num_heads"),
        ("short_conv_kernel_size", "linear_conv_kernel_dim"),
    ):
        if _number(linear.get(key)):
            config[field] = linear[key]
    full = linear.get("full_attn_layers")
    listed = isinstance(full, list) and isinstance(linear.get("kda_layers"), list)
    dense = config.get("first_k_dense_replace", 1)
    return _layer_lists(
        config,
        27,
        (lambda i: i + 1 in full) if listed else (lambda i: i > 0 and i % 4 == 0),
        dense if isinstance(dense, int) else 1,
    )


def _bailing_hybrid(config: Mapping[str, Any]) -> dict:
    """Bailing-hybrid's layer lists as transformers 5.24 models/bailing_hybrid/configuration_bailing_hybrid.py
    `BailingHybridConfig.__post_init__` computes them: every `layer_group_size`-th layer (6) full attention, the
    first `first_k_dense_replace` (2) layers dense; 42 layers by default."""
    group, dense = config.get("layer_group_size", 6), config.get("first_k_dense_replace", 2)
    if not (isinstance(group, int) and group > 0 and isinstance(dense, int)):
        return dict(config)
    return _layer_lists(config, 42, lambda i: (i + 1) % group == 0, dense)


def _inkling(layers: int):
    """The Inkling text models' `layer_types` (transformers 5.24 models/inkling/configuration_inkling.py,
    models/inkling2/configuration_inkling2.py, models/inkling2_loop/configuration_inkling2_loop.py `__post_init__`):
    sliding-window ("hybrid_sliding") in the layers `local_layer_ids` lists (Inkling) or, without it, in every layer
    but each sixth, which is "hybrid"; `layers` layers by default."""

    def read(config: Mapping[str, Any]) -> dict:
        config = dict(config)
        n = config.get("num_hidden_layers", layers)
        if isinstance(config.get("layer_types"), list) or not (isinstance(n, int) and 0 < n <= 4096):
            return config
        local = config.get("local_layer_ids")
        sliding = set(local) if isinstance(local, list) else {i for i in range(n) if (i + 1) % 6}
        config["layer_types"] = ["hybrid_sliding" if i in sliding else "hybrid" for i in range(n)]
        return config

    return read


NOT_READ = "vramlens:not read"  # a reader's list of the fields of a config.json it cannot read (a note of `build`)


def _gemma4(config: Mapping[str, Any]) -> dict:
    """Gemma-4's layers as transformers 5.24 models/gemma4/configuration_gemma4.py `Gemma4TextConfig.__post_init__`
    reads them: without `layer_types`, every sixth layer and the last are "full_attention" (30 layers by default);
    a config.json without `per_layer_config` gives each "full_attention" layer the head size `global_head_dim` (512)
    and, with `attention_k_eq_v`, `num_global_key_value_heads` key/value
    heads; one with it (what `save_pretrained` writes: those values by layer index) sets them per layer. The
    inventory is measured with `global_head_dim`: a written per_layer_config that gives every full-attention layer,
    and only those, the same values (or none) is read as it; another is noted as not read."""
    config = dict(config)
    config.setdefault("global_head_dim", 512)
    n = config.get("num_hidden_layers", 30)
    if not isinstance(config.get("layer_types"), list) and isinstance(n, int) and 0 < n <= 4096:
        # the class's pattern: every sixth layer full attention, and the last
        config["layer_types"] = [
            "full_attention" if (i + 1) % 6 == 0 or i == n - 1 else "sliding_attention" for i in range(n)
        ]
    per_layer = config.pop("per_layer_config", None)
    types = config.get("layer_types")
    if not isinstance(per_layer, Mapping) or not isinstance(types, list):
        return config
    if not per_layer and _number(config.get("head_dim")):  # no layer overridden: every layer of head_dim
        config["global_head_dim"] = config["head_dim"]
        return config
    full = {i for i, t in enumerate(types) if t == "full_attention"}
    overrides = {str(v) for k, v in per_layer.items()}
    if {int(k) for k in per_layer if str(k).isdigit()} != full or len(overrides) != 1:
        config[NOT_READ] = ["per_layer_config"]  # not the class's own pattern
        return config
    override = next(iter(per_layer.values()))
    if isinstance(override, Mapping):
        if _number(override.get("head_dim")):
            config["global_head_dim"] = override["head_dim"]
        if _number(override.get("num_key_value_heads")):
            config["num_global_key_value_heads"] = override["num_key_value_heads"]
    return config


def _gemma4_composite(config: Mapping[str, Any]) -> dict:
    """A Gemma-4 composite's config.json, counted whole: its text_config read by `_gemma4`."""
    text = _gemma4(config.get("text_config") or {})
    return {**config, "text_config": text, NOT_READ: text.pop(NOT_READ, [])}


# model_type -> how its config class reads a config.json where that is not a size formula
_CONFIG_READERS = {
    "lfm2": _lfm2,
    "falcon_h1": _falcon_h1,
    "gemma3n_text": _gemma3n,
    "nemotron_h": _nemotron_h,
    "kimi_linear": _kimi_linear,
    "bailing_hybrid": _bailing_hybrid,
    "inkling_text": _inkling(66),
    "inkling2_text": _inkling(48),
    "inkling2_loop_text": _inkling(24),
    "gemma4_text": _gemma4,
    "gemma4_unified_text": _gemma4,
    # composites whose config.json (no vision_config) is counted whole: their text_config read as above
    "gemma4": _gemma4_composite,
    "gemma4_unified": _gemma4_composite,
    "gemma4_unified_assistant": _gemma4_composite,
}


def with_defaults(config: Mapping[str, Any], model_type: str) -> dict:
    """`config` with each size field the model_type's inventory records and the config.json leaves out (also inside a
    sub-config: `text_config.hidden_size`) set to the config class's default, as transformers reads it:
    `save_pretrained` writes only the values that differ from the defaults (transformers 5.24
    configuration_utils.py `PreTrainedConfig.to_json_string(use_diff=True)`, `to_diff_dict`). A field written
    under an older spelling (`_ALIASES`) is not filled."""
    filled = copy.deepcopy(dict(config))
    inv = _data()["models"].get(model_type)
    for field, (_, default) in (inv or {}).get("fields", {}).items():
        *parents, name = field.split(".")
        node = filled
        for part in parents:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                break
        else:
            if _number(default) and all(node.get(key) is None for key in (name, *_ALIASES.get(name, ()))):
                node[name] = default
    return filled


def build(config: Mapping[str, Any], model_type: str) -> Built | None:
    """The parameters transformers' `model_type` classes build from `config` (a config.json dict), from the bundled
    inventory; None when the model_type has none."""
    inv = _data()["models"].get(model_type)
    if inv is None:
        return None
    if model_type in _CONFIG_READERS:
        config = _CONFIG_READERS[model_type](config)
    notes: list[str] = [f"{field} not read" for field in config.get(NOT_READ, ())]
    values: dict[str, float] = {}
    missing = []
    for field, (tiny, default) in inv["fields"].items():
        v = _lookup(config, field)
        for alias in _ALIASES.get(field, ()):  # older spellings the config classes map (`attribute_map`)
            if not _number(v):
                v = _lookup(config, alias)
        if not _number(v):
            missing.append(field)
            v = default if _number(default) else tiny
        values[field] = v
    for field in missing:  # computed by the config class from other fields (Mamba: expand · hidden_size)
        terms = inv.get("derived", {}).get(field)
        if terms and all(f in values for _, exps in terms for f in exps):
            values[field] = _eval(terms, values)
    for field, measured in inv.get("switches", {}).items():
        v = _lookup(config, field)
        if isinstance(v, bool) and v != measured:
            notes.append(f"{field}={str(v).lower()} (the reference build has {str(measured).lower()})")
    for a, b in inv.get("built_where_apart", ()):  # parameters built only where the two differ
        if values.get(a) != values.get(b):
            notes.append(f"{a} differs from {b} (the reference build has them equal)")
    for part, measured in inv.get("parts", {}).items():  # a sub-config of another model than the one measured
        written = _lookup(config, f"{part}.model_type")
        if isinstance(written, str) and written != measured:
            notes.append(f"{part} is {written} (the reference build's is {measured})")
    for field in inv.get("nullable", ()):
        if field in config and config[field] is None:
            notes.append(f"{field}=null (the reference build sets it)")
    added = [f for f, base in inv.get("adds", {}).items() if _number(_lookup(config, f)) and _lookup(config, f) != base]
    if added:  # XLM's n_langs > 1 builds lang_embeddings (scripts/dump_model_inventories.py `adds`)
        notes.append(f"{', '.join(added)} builds parameters the reference build does not have")
    fixed = [f for f in inv.get("fixed", ()) if values.get(f) != inv["fields"][f][0]]
    if fixed:
        notes.append(f"{', '.join(fixed)} could not be varied in the reference build")

    def layers_for(field: str) -> int | None:
        prefix = field.rsplit(".", 1)[0] + "." if "." in field else ""
        for name in _LAYER_FIELDS:
            v = _lookup(config, prefix + name)
            if _number(v):
                return int(v)
            if prefix + name in values:
                return int(values[prefix + name])
        return None

    def count(entry: Mapping[str, Any]) -> float | None:
        per = entry.get("per", 1)
        moved = [
            f
            for f in entry.get("rule_fixed", ())
            if _number(_lookup(config, f)) and _lookup(config, f) != inv["fields"].get(f, [None])[0]
        ]
        if moved:
            notes.append(f"{', '.join(moved)} also moves the layers of {entry.get('p', 'a kind')}")
        if "where" in entry:
            field, chosen = entry["where"]
            listed = _lookup(config, field)
            if isinstance(listed, list):
                return per * sum(1 for v in listed if v in chosen)
        rule = next(
            (
                k
                for k in (
                    "where_in",
                    "where_not_in",
                    "where_every",
                    "where_every_not",
                    "where_below",
                    "where_from",
                    "where_all",
                    "where_cycle",
                )
                if k in entry
            ),
            None,
        )
        if rule == "where_all":  # the conditions' first field's stack: [[condition, field], ...]
            field = entry[rule][0][1]
            n = layers_for(field)
            got = None if n is None else _all_conditions(entry, config, n)
            if got is not None:
                return per * got
            notes.append(f"{field} not read: the layers it selects are estimated")
        elif rule:
            field = entry[rule][0] if rule.startswith(("where_every", "where_cycle")) else entry[rule]
            n = layers_for(field)
            if n is not None:
                got = _rule_layers(rule, entry[rule], config, values, n, entry.get("default"))
                if got is not None:
                    return per * got
            notes.append(f"{field} not read: the layers it selects are estimated")
        return None if entry["n"] is None else _eval(entry["n"], values)

    by_kind: dict[str, int] = {}
    shapes: dict[str, int] = {}
    for entry in inv["params"]:
        pair = entry.get("unless_equal")
        if pair and values.get(pair[0]) == values.get(pair[1]):
            continue  # built only where the two sizes differ (ELECTRA's embeddings_project)
        lists = inv.get("lists", {})  # per-stage lists: [measured, the config class's]
        moved = [f for f in entry.get("lists_fixed", ()) if _listed(config, f, lists[f][1]) != lists[f][0]]
        if moved:  # a per-stage list that moves parameters no formula reads it in
            notes.append(f"{', '.join(moved)} not read for {entry['p']}")
        if "stages" in entry:  # a pattern sized stage by stage (a hierarchical backbone)
            stage_numel = _stages_numel(entry["stages"], config, values, {f: v[1] for f, v in lists.items()})
            if stage_numel is None:
                notes.append(f"{entry['p']} not scaled exactly")
                continue
            numel = stage_numel
        elif "total" in entry:  # occurrences of different shapes: their total
            if entry.get("exact") is False:  # a fit through the reference builds that is no count at other sizes
                notes.append(f"{entry['p']} not scaled exactly")
            numel = max(0, round(_eval(entry["total"], values)))
        else:
            n = count(entry)
            dims = [None if d is None else _eval(d, values) for d in entry["shape"]]
            if n is None or any(d is None for d in dims) or entry.get("exact") is False:
                notes.append(f"{entry['p']} not scaled exactly")
            if n is None or any(d is None for d in dims):
                continue
            numel = round(n) * math.prod(round(d) for d in dims)
        shapes[entry["p"]] = numel
        by_kind[entry["kind"]] = by_kind.get(entry["kind"], 0) + numel
    tied = inv.get("tied")
    # the reference build has the config class's default tie; a class that builds otherwise does not follow the
    # config's tie_word_embeddings (transformers 5.24 models/cpmant/modeling_cpmant.py `CpmAntForCausalLM`:
    # `_tied_weights_keys = {}`, its lm_head is never the input embedding)
    if tied and tied["is_tied"] == bool(inv["tie_default"]):
        # both tied weights in the module of one sub-config: that sub-config's tie decides (transformers 5.24
        # models/vision_encoder_decoder/modeling_vision_encoder_decoder.py sets the outer config's
        # tie_word_embeddings to False; the decoder, built from `config.decoder`, ties its own head)
        owners = {tied["in"].split(".", 1)[0], tied["out"].split(".", 1)[0]}
        part = owners.pop() if len(owners) == 1 else ""
        tie = _lookup(config, f"{part}.tie_word_embeddings") if isinstance(config.get(part), Mapping) else None
        if not isinstance(tie, bool):
            tie = _lookup(config, "tie_word_embeddings")
        if not isinstance(tie, bool):
            tie = _lookup(config, "text_config.tie_word_embeddings")
        tie = inv["tie_default"] if not isinstance(tie, bool) else tie
        if tie and not tied["is_tied"] and tied["out"] in shapes:
            by_kind["lm-head"] = by_kind.get("lm-head", 0) - shapes[tied["out"]]
        elif not tie and tied["is_tied"] and tied["in"] in shapes:
            by_kind["lm-head"] = by_kind.get("lm-head", 0) + shapes[tied["in"]]
    layer_kinds = {}
    for kind, entry in _stack_kinds(inv, values, notes).items():
        if kind == "other":  # blocks of none of the kinds (convolutions): trace/inventory.py `exact` leaves them out
            continue
        n = count(entry)
        if n is None:
            notes.append(f"{kind} layers not counted exactly")
        elif round(n) > 0:
            layer_kinds[kind] = round(n)
    return Built(
        total=sum(by_kind.values()),
        by_kind=tuple(sorted((k, v) for k, v in by_kind.items() if v)),
        layer_kinds=tuple(sorted(layer_kinds.items())),
        approximate="; ".join(dict.fromkeys(notes)),
        source=f"transformers {version()} {inv['class']} (meta build, scaled)",
    )


# the variable of a stage's formulas that doubles from stage to stage (transformers 5.24 models/swin/modeling_swin.py
# `SwinEncoder`: stage i is int(embed_dim * 2**i) wide)
STAGE_POWER = "2**s"


def stage_values(values: Mapping[str, float], lists: Mapping[str, Any], s: int) -> dict[str, float]:
    """The variables the formulas of stage s read: the config's fields, each per-stage list's entry of the stage
    and of the one before it (`hidden_sizes[s]`, `hidden_sizes[s-1]`), and 2**s."""
    listed = {f: v for f, v in lists.items() if isinstance(v, list)}
    entries = {f"{f}[s]": v[s] for f, v in listed.items() if s < len(v)}
    before = {f"{f}[s-1]": v[s - 1] for f, v in listed.items() if 0 < s <= len(v)}
    return {**values, **entries, **before, STAGE_POWER: 2**s}


def stages_chosen(rule: list, lists: Mapping[str, Any], stages: int) -> list[int]:
    """The stages of `stages` that hold a stage-indexed pattern: "all", all "but_last" (transformers 5.24
    models/swin/modeling_swin.py `SwinEncoder`: a `SwinPatchMerging` in every stage but the last), the "last" (the
    final norm of `SwinModel`, as wide as the last stage), the "first" (models/convnext/modeling_convnext.py
    `ConvNextEmbeddings`, hidden_sizes[0] wide), all "but_first" (models/rt_detr/modeling_rt_detr_resnet.py
    `RTDetrResNetBottleNeckLayer`: an average pool before the shortcut projection where a stage's first block has
    stride 2, every stage but the first), or those where a per-stage list's entry is "above_one"
    (models/segformer/modeling_segformer.py `SegformerEfficientSelfAttention`: a sequence-reduction convolution where
    sr_ratios[i] > 1)."""
    if rule[0] == "above_one":
        listed = lists.get(rule[1])
        return [s for s, v in enumerate(listed[:stages]) if v > 1] if isinstance(listed, list) else []
    ends = {"first": [0], "last": [stages - 1]}
    but = {"but_last": list(range(stages - 1)), "but_first": list(range(1, stages))}
    return {"all": list(range(stages)), **but, **ends}[rule[0]]


def left_out_where_equal(unless: Mapping[str, Any] | None, variables: Mapping[str, float], s: int) -> bool | None:
    """Whether stage s leaves out a pattern built only where two of its variables differ (`unless`: {"of": the two
    variables, "first_only": whether only the first stage has the condition}; transformers 5.24
    models/resnet/modeling_resnet.py `ResNetBottleNeckLayer`: a `ResNetShortCut` projection where in_channels !=
    out_channels or stride != 1, the first stage's stride being 1 and the others' 2, so that the first stage has it
    only where embedding_size != hidden_sizes[0]); None where a variable is missing."""
    if not unless or (unless["first_only"] and s):
        return False
    u, v = (variables.get(f) for f in unless["of"])
    return None if u is None or v is None else round(u) == round(v)


def _listed(config: Mapping[str, Any], field: str, default: Any) -> Any:
    """A per-stage list of the config (a list of numbers), else `default`."""
    v = _lookup(config, field)
    return v if isinstance(v, list) and v and all(_number(x) for x in v) else default


def _stages_numel(
    stages: Mapping[str, Any], config: Mapping[str, Any], values: Mapping[str, float], defaults: Mapping[str, Any]
) -> int | None:
    """The parameters of a pattern sized stage by stage (scripts/dump_model_inventories.py `_Stages`): in each stage
    its rule selects (`stages_chosen`; as many stages as the list `stages["list"]` has entries), occurrences times
    shape, formulas of the fields, of the stage's (and the previous stage's) entries of the per-stage lists (the
    config's, else the config class's `defaults`) and of 2**s, those of `stages["first"]` in the first stage where
    it has them, not in a stage where two variables are equal that must differ (`left_out_where_equal`); None where a
    list is too short for a stage."""
    lists = {field: _listed(config, field, default) for field, default in defaults.items()}
    counted = lists.get(stages["list"])
    if not isinstance(counted, list):
        return None
    total = 0
    for s in stages_chosen(stages["in"], lists, len(counted)):
        own = stages["first"] if s == 0 and "first" in stages else stages
        formulas = [own["n"], *own["shape"]]
        variables = stage_values(values, lists, s)
        left_out = left_out_where_equal(stages.get("unless_equal"), variables, s)
        if left_out is None or any(f not in variables for terms in formulas for _, exps in terms for f in exps):
            return None
        if left_out:
            continue
        n, *dims = (round(_eval(terms, variables)) for terms in formulas)
        total += n * math.prod(dims)
    return total


def _stack_kinds(inv: Mapping[str, Any], values: Mapping[str, float], notes: list[str]) -> dict:
    """The layer kinds of the stack of blocks whose layers are counted: the inventory's own, or, where another
    ModuleList can be the longest (`stacks`: an audio tower beside the language model's layers), those of the one
    the config's sizes make the longest, as trace/inventory.py `_layers_of` picks it (of equal depths, the shortest
    name, then the first)."""
    best = None
    for stack in inv.get("stacks", ()):
        if stack["layers"] is None:
            notes.append(f"the depth of {stack['stack']} not scaled exactly")
            return inv["layer_kinds"]
        depth = round(_eval(stack["layers"], values))
        if best is None or depth > best[0] or (depth == best[0] and len(stack["stack"]) < len(best[1]["stack"])):
            best = depth, stack
    return inv["layer_kinds"] if best is None else best[1]["kinds"]


def layer_meets(condition: str, value: Any, i: int, n: int) -> bool | None:
    """Whether layer i of n meets one condition on a config field's value (None: the value does not fit it): `in` /
    `not_in` a list of layer indices, `step` ((i + 1) % value == 0), `from` / `upto` / `below` (i >= value,
    i <= value, i < value; a negative value counts from the end: ERNIE-4.5's `moe_layer_end_index = -1` is the last
    layer, transformers 5.24 models/ernie4_5_moe/configuration_ernie4_5_moe.py `__post_init__`)."""
    if condition in ("in", "not_in"):
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return None
        return (i in value) == (condition == "in")
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if condition == "step":
        return (i + 1) % value == 0 if value > 0 else None
    bound = value + n if value < 0 else value
    return {"from": i >= bound, "upto": i <= bound, "below": i < bound}.get(condition)


def _all_conditions(entry: Mapping[str, Any], config: Mapping[str, Any], n: int) -> int | None:
    """How many of the n layers meet every condition of a `where_all` rule (or, `negated`, not all of them): each
    field from the config, else the config class's default; a list the config class computes when it is left out
    (default None: Llama-4's `moe_layers` from `interleave_moe_layer_step`, transformers 5.24
    models/llama4/configuration_llama4.py `__post_init__`) is not read then, the other conditions saying the same
    layers."""
    defaults = entry.get("default") or {}
    conditions = []
    for condition, field in entry["where_all"]:
        value = _lookup(config, field)
        value = defaults.get(field) if value is None else value
        if value is None and condition in ("in", "not_in") and len(entry["where_all"]) > 1:
            continue
        conditions.append((condition, value))
    selected = 0
    for i in range(n):
        met = [layer_meets(condition, value, i, n) for condition, value in conditions]
        if any(m is None for m in met):
            return None
        selected += all(met) != bool(entry.get("negated"))
    return selected


def _rule_layers(
    rule: str, arg: Any, config: Mapping[str, Any], values: Mapping[str, float], n: int, default: Any = None
) -> int | None:
    """How many of the n layers a layer rule selects, from the config's own fields (or the config class's default
    for one it leaves out)."""

    def field(name: str) -> Any:
        v = _lookup(config, name)
        return v if v is not None else values.get(name, default)

    if rule in ("where_in", "where_not_in"):
        listed = _lookup(config, arg)
        listed = listed if isinstance(listed, list) else default
        if not isinstance(listed, list):
            return None
        inside = len({i for i in listed if isinstance(i, int) and 0 <= i < n})
        return inside if rule == "where_in" else n - inside
    if rule.startswith("where_every"):
        period, offset = field(arg[0]), field(arg[1]) or 0
        if not (isinstance(period, int) and period > 0 and isinstance(offset, int)):
            return None
        on = sum(1 for i in range(n) if i % period == offset)
        return on if rule == "where_every" else n - on
    if rule == "where_cycle":  # [field, kinds]: layer i is of kind field[i % len(field)]
        cycle = _lookup(config, arg[0])
        cycle = cycle if isinstance(cycle, list) and cycle else default
        if not (isinstance(cycle, list) and cycle):
            return None
        return sum(1 for i in range(n) if cycle[i % len(cycle)] in arg[1])
    k = field(arg)
    if not isinstance(k, int):
        return None
    k = max(0, min(k, n))
    return k if rule == "where_below" else n - k
