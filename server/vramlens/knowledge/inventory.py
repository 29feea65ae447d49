"""Parameter counts by construction: the bundled inventories of what transformers' own classes build, scaled by a
`config.json`'s sizes.

`knowledge/data/inventories.json.gz` (gzip-compressed JSON, read on first use) is written by
`scripts/dump_model_inventories.py` from tiny meta-device builds of every model_type of one transformers version
(recorded in the file). Each parameter pattern carries its shape and
its number of occurrences as formulas of config fields (sums of products), or the rule that says which layers hold
it (a `layer_types` list, a list of layer indices, a period and offset, the first k layers). Nothing here imports
torch or transformers; the data is plain JSON.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from collections.abc import Mapping
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


# model_type -> how its config class reads a config.json where that is not a size formula
_CONFIG_READERS = {"lfm2": _lfm2, "falcon_h1": _falcon_h1, "gemma3n_text": _gemma3n, "nemotron_h": _nemotron_h}


def build(config: Mapping[str, Any], model_type: str) -> Built | None:
    """The parameters transformers' `model_type` classes build from `config` (a config.json dict), from the bundled
    inventory; None when the model_type has none."""
    inv = _data()["models"].get(model_type)
    if inv is None:
        return None
    if model_type in _CONFIG_READERS:
        config = _CONFIG_READERS[model_type](config)
    notes: list[str] = []
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
    for field in inv.get("nullable", ()):
        if field in config and config[field] is None:
            notes.append(f"{field}=null (the reference build sets it)")
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
                for k in ("where_in", "where_not_in", "where_every", "where_every_not", "where_below", "where_from")
                if k in entry
            ),
            None,
        )
        if rule:
            field = entry[rule][0] if rule.startswith("where_every") else entry[rule]
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
    if tied:
        tie = _lookup(config, "tie_word_embeddings")
        if not isinstance(tie, bool):
            tie = _lookup(config, "text_config.tie_word_embeddings")
        tie = inv["tie_default"] if not isinstance(tie, bool) else tie
        if tie and not tied["is_tied"] and tied["out"] in shapes:
            by_kind["lm-head"] = by_kind.get("lm-head", 0) - shapes[tied["out"]]
        elif not tie and tied["is_tied"] and tied["in"] in shapes:
            by_kind["lm-head"] = by_kind.get("lm-head", 0) + shapes[tied["in"]]
    layer_kinds = {}
    for kind, entry in inv["layer_kinds"].items():
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
    k = field(arg)
    if not isinstance(k, int):
        return None
    k = max(0, min(k, n))
    return k if rule == "where_below" else n - k
