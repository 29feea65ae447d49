"""Model architectures: the built-in catalog, a local `config.json`, or the local Hugging Face cache.

`lookup_model(name)` tries, in order:
  1. the catalog: hub id or alias, case-insensitive; torchtune builder paths are reduced to the builder name
     (`torchtune.models.llama3_1.qlora_llama3_1_8b` -> `llama3_1_8b`);
  2. a local folder (or file) holding `config.json`, relative to the workspace or absolute;
  3. the local Hugging Face hub cache (`hf_cache.py`), offline;
  4. looser catalog matches: the name without its org (`checkpoints/meta-llama/Meta-Llama-3-8B`, litgpt names)
     and without quantization suffixes (`unsloth/llama-3-8b-bnb-4bit`).
`config.json` is read with `json` only; nothing from a model folder is ever executed. Local folders are
read only inside the workspace (without one, the current directory) and the Hugging Face cache
(`vramlens.file_access`); shapes must be whole numbers up to `MAX_DIM`.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vramlens import file_access
from vramlens.knowledge import inventory, ssm_configs
from vramlens.knowledge.data import index_spellings, load
from vramlens.knowledge.hf_cache import cached_config_path
from vramlens.knowledge.hub import MAX_CONFIG_BYTES, HubAnswer, HubLookup, adapter_base
from vramlens.knowledge.hub import is_repo_id as hub_is_repo_id
from vramlens.knowledge.schema import ModelArch

MAX_DIM = 2**31 - 1  # no real shape comes near; bounds every product of shapes well inside a float

# DeepSeek MLA's sizes besides kv_lora_rank, as DeepseekV2Config/DeepseekV3Config name them (`ModelArch` fields of the
# same names; without them, `ModelArch.mla_head_dims`: RoPE width 64 as in every DeepSeek-V2/V2-Lite/V3 config)
MLA_SIZES = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim")
# T5 relative attention: 32 buckets per head, in the first layer of the encoder and of the decoder.
_T5_RELATIVE_BUCKETS = 32

_TORCHTUNE_PATH = re.compile(r"^torchtune\.models\.[a-z0-9_]+\.")
_TORCHTUNE_PEFT = re.compile(r"^q?lora_")
_QUANT_SUFFIX = re.compile(
    r"(?:[-_.](?:unsloth|bnb|4bit|8bit|nf4|gptq|awq|gguf|int4|int8|fp8|mlx|exl2|hqq|w4a16|dynamic))+$", re.IGNORECASE
)

# model_type -> (block, mlp, norm, attention biases, MLP biases) for config.json files.
_ENCODERS = frozenset(
    {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "deberta", "deberta-v2", "camembert", "modernbert"}
)
_ENCODER_DECODERS = frozenset({"t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "longt5"})
_GEGLU = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "recurrent_gemma"})
_UNGATED_GELU = frozenset(
    {
        "gpt2",
        "gpt_neo",
        "gpt_neox",
        "gptj",
        "gpt_bigcode",
        "bert",
        "roberta",
        "xlm-roberta",
        "distilbert",
        "electra",
        "camembert",
        "phi",
        "bloom",
        "falcon",
        "starcoder2",
        "mpt",
        "bart",
        "mbart",
        "pegasus",
        "marian",
        "codegen",
        # transformers 5.24 models/openai/modeling_openai.py `MLP` (c_fc, c_proj; gelu), LayerNorm
        "openai-gpt",
        "gpt_neox_japanese",  # models/gpt_neox_japanese `GPTNeoXJapaneseMLP` (dense_h_to_4h, dense_4h_to_h)
    }
)
# models/opt `OPTDecoderLayer` fc1/fc2 (relu); models/persimmon `PersimmonMLP` dense_h_to_4h/dense_4h_to_h (relu²)
_RELU = frozenset({"opt", "persimmon"})
# Ungated MLPs whose two linears are named up_proj and down_proj, with relu² between them (no gate_proj): transformers
# 5.24 models/nemotron/modeling_nemotron.py `NemotronMLP` and models/nemotron_h/modeling_nemotron_h.py `NemotronHMLP`
# (`down_proj(act_fn(up_proj(x)))`, `hidden_act` / `mlp_hidden_act` "relu2"). Their canonical linears are fc1 and fc2,
# which the target names up_proj and down_proj reach (resolve/adapters.py `normalize_targets`), gate_proj none.
UNGATED_UP_DOWN = frozenset({"nemotron", "nemotron_h"})
# (Nemotron: `NemotronLayerNorm1P`, a LayerNorm with a bias whose weight is stored less one, transformers 5.24
# models/nemotron/modeling_nemotron.py)
_LAYERNORM = _UNGATED_GELU | _RELU | frozenset({"olmo", "stablelm", "cohere", "nemotron"})
_BIASED = _UNGATED_GELU | _RELU
# q/k/v biases, no o_proj bias (ChatGLM: add_qkv_bias on query_key_value, add_bias_linear off)
QKV_BIAS_ONLY = frozenset({"qwen", "qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "chatglm"})
# family -> token-type rows next to the learned positions (GPT-BigCode keeps GPT-2's `wpe`: transformers 5.24
# models/gpt_bigcode/modeling_gpt_bigcode.py GPTBigCodeModel)
LEARNED_POSITIONS = {"gpt2": 0, "gpt_bigcode": 0, "bert": 2, "roberta": 1}
# Decoders with a LayerNorm right after the token embedding besides the final one (transformers 5.24
# models/bloom/modeling_bloom.py `word_embeddings_layernorm`)
EMBEDDING_NORM = frozenset({"bloom"})
# Norms per decoder layer when not 2: phi / falcon-7b feed attention and MLP from one LayerNorm (parallel block);
# Gemma-2/3 add post-attention and post-MLP norms.
_NORMS_PER_LAYER = {"phi": 1, "falcon": 1, "gemma2": 4, "gemma3_text": 4}


# ----------------------------------------------------------------------------------------------- catalog


def _arch(entry: Mapping[str, Any]) -> ModelArch:
    """A catalog entry: its shapes written out, or (`config`) the model's config.json read as a local one is."""
    if "config" in entry:
        arch = arch_from_hf_config(entry["config"], entry["id"], source=entry.get("source", ""))
        if arch is None:
            raise ValueError(f"models.yaml: the config of {entry['id']} does not map to an architecture")
        extra = {k: v for k, v in entry.items() if k not in ("config", "id")}
        if extra.get("approximate"):  # the entry's own reason beside what the mapping found approximate
            extra["approximate"] = "; ".join(filter(None, (arch.approximate, extra["approximate"])))
        return arch.model_copy(update={**extra, "aliases": tuple(entry.get("aliases", ()))})
    return ModelArch(**{**entry, "aliases": tuple(entry.get("aliases", ()))})


# Generated catalog files, each written by a script from a public model table and citing it, in the order they are
# taken: models_imported.json by scripts/import_catalog.py (litgpt's config table); every other
# `models_imported_<source>.json` by the importer its "generated_by" names, after it in name order.
IMPORTED = "models_imported.json"


def _imported_files() -> list[str]:
    data = resources.files("vramlens.knowledge.data")
    names = sorted(p.name for p in data.iterdir() if p.name.startswith("models_imported_") and p.name.endswith(".json"))
    return [IMPORTED, *names]


def _imported(taken: set[str]) -> list[ModelArch]:
    """The generated entries (`_imported_files`): shapes imported from public model tables, each citing its source.
    A hand entry wins, then an earlier file: an imported model whose id is a spelling already taken is left out, and
    so is an alias spelled there. An entry holding `config` (a config.json) is read as a local config.json is. An
    entry that says it is `approximate` yields to an exact one of a later file for the same spelling, and to an
    approximate one that `agrees_with` it (transformers' config defaults that state the same shapes and build the
    model's own layer kinds: scripts/import_catalog_transformers.py)."""
    out = []
    entries = []
    for name in _imported_files():
        text = resources.files("vramlens.knowledge.data").joinpath(name).read_text(encoding="utf-8")
        entries.extend(json.loads(text)["models"])

    def rank(entry: Mapping[str, Any]) -> int:
        return 0 if not entry.get("approximate") else 1 if entry.get("agrees_with") else 2

    for entry in sorted(entries, key=rank):  # stable: file order otherwise
        entry = {k: v for k, v in entry.items() if k != "agrees_with"}
        if entry["id"].lower() in taken:
            continue
        aliases = tuple(a for a in entry.get("aliases", ()) if a.lower() not in taken)
        taken.update(s.lower() for s in (entry["id"], *aliases))
        if "config" in entry:
            out.append(_arch({**entry, "aliases": aliases}))
        else:
            out.append(ModelArch(**{**entry, "aliases": aliases}))
    return out


@functools.cache
def _catalog() -> tuple[tuple[ModelArch, ...], dict[str, ModelArch], dict[str, ModelArch]]:
    """(models, exact index by lower-case id/alias, loose index by lower-case basename without quant suffix).
    models.yaml's hand entries first, then the imported ones (`_imported`)."""
    hand = [_arch(e) for e in load("models.yaml")["models"]]
    taken = {s.lower() for m in hand for s in (m.id, *m.aliases)}
    models = tuple(hand + _imported(taken))
    exact = index_spellings(models, lambda m: m.id, str.lower, "models.yaml")
    loose: dict[str, ModelArch | None] = {}
    for key, model in exact.items():
        short = _loose_key(key)
        if short in exact and exact[short] is not model:
            continue  # an exact spelling elsewhere wins
        if loose.get(short, model) is not model:
            loose[short] = None  # ambiguous: two models share the short name
        else:
            loose[short] = model
    return models, exact, {k: v for k, v in loose.items() if v is not None}


def _loose_key(name: str) -> str:
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    return _QUANT_SUFFIX.sub("", base)


def _catalog_exact(name: str) -> ModelArch | None:
    _, exact, _ = _catalog()
    key = name.strip().lower()
    if key in exact:
        return exact[key]
    builder = _TORCHTUNE_PEFT.sub("", _TORCHTUNE_PATH.sub("", key))
    return exact.get(builder)


def _catalog_loose(name: str) -> ModelArch | None:
    _, exact, loose = _catalog()
    parts = [p for p in name.strip().lower().replace("\\", "/").split("/") if p]
    if len(parts) >= 2 and (model := exact.get("/".join(parts[-2:]))):
        return model  # e.g. checkpoints/meta-llama/Meta-Llama-3-8B (litgpt checkpoint_dir)
    return loose.get(_loose_key(name)) if parts else None


# A model name's series and size: the words before its first size word ("8b", "1.8B", "500m"), without separators
# and a leading "meta" (`OpenRLHF/Llama-3-8b-sft-mixture` and `meta-llama/Meta-Llama-3-8B` are both llama3 · 8B).
_SIZE_WORD = re.compile(r"^(\d+(?:\.\d+)?)([bm])$")
# fields that do not change a model's shapes (where it is published, how it is named, how long a context it was
# trained for)
_NOT_SHAPES = frozenset({"id", "aliases", "source", "params_b", "max_position", "approximate"})
# `models/llama3-8b-pro`, `checkpoints/qwen3-4b-sft`: folders (a missing one), not a Hub organisation
_FOLDER_ORGS = frozenset(
    {"models", "model", "checkpoints", "checkpoint", "ckpt", "ckpts", "saves", "output", "outputs"}
)
# `stablelm-2-1_6b`, `Qwen-1_8B`: an underscore between digits standing for a decimal point
_DECIMAL_UNDERSCORE = re.compile(r"(?<=\d)_(?=\d)")
# a name saying its weights are quantized: the base's stored dtype would not be the checkpoint's
_QUANTIZED_WORD = re.compile(
    r"(?<![a-z0-9])(aqlm|nvfp4|mxfp4|fp8|fp4|gptq|awq|bnb|nf4|int4|int8|[248]bit|gguf|exl2|hqq)(?![a-z0-9])", re.I
)


def _series_size(name: str) -> tuple[str, float] | None:
    """(series, size in millions) a model name states, or None (no size word, or nothing before it). An underscore
    between digits is a decimal point, as Hub ids spell one (`stabilityai/stablelm-2-1_6b`, `Qwen/Qwen-1_8B`,
    `OpenGVLab/InternVL3_5-8B`)."""
    base = _DECIMAL_UNDERSCORE.sub(".", name.rstrip("/").rsplit("/", 1)[-1].lower())
    words = [w for w in re.split(r"[-_\s]+", base) if w]
    for i, word in enumerate(words):
        if m := _SIZE_WORD.match(word):
            series = words[:i][1:] if words[:1] == ["meta"] else words[:i]
            text = "".join(series)
            if not re.search("[a-z]", text):
                return None
            return text, round(float(m.group(1)) * (1000 if m.group(2) == "b" else 1), 3)
    return None


@functools.cache
def _by_series_size() -> dict[tuple[str, float], tuple[ModelArch, ...]]:
    """Catalog models by the (series, size) of their id. An alias of another series (a fine-tune listed for its
    shapes: `HuggingFaceH4/zephyr-7b-beta` under Mistral-7B) names no family of its own."""
    index: dict[tuple[str, float], dict[str, ModelArch]] = {}
    for model in all_models():
        if key := _series_size(model.id):
            index.setdefault(key, {})[model.id] = model
    return {k: tuple(v.values()) for k, v in index.items()}


# what transformers builds from the shapes (`_by_construction`): an entry of a table that gives shapes alone has none
_BUILT = ("params_total", "params_by_kind", "layer_kinds")


def _same_shapes(candidates: Sequence[ModelArch]) -> bool:
    """Whether catalog models have the same shapes: every field but `_NOT_SHAPES` equal, and the counts built from
    them (`_BUILT`) equal where both carry them (`meta-llama/Meta-Llama-3-70B` from litgpt's table and
    `meta-llama/Llama-3-70B-Instruct` built from its config.json)."""
    dumps = [m.model_dump(exclude=set(_NOT_SHAPES)) for m in candidates]
    built = [{k: d.pop(k) for k in _BUILT} for d in dumps]
    same = len({json.dumps(d, sort_keys=True, default=str) for d in dumps}) == 1
    return same and all(len({json.dumps(b[k], default=str) for b in built if b[k]}) <= 1 for k in _BUILT)


def catalog_by_name(name: str) -> ModelArch | None:
    """The catalog model a Hub id not in the catalog names by its base's series and size
    (`OpenRLHF/Llama-3-8b-sft-mixture` → `meta-llama/Meta-Llama-3-8B`), when the catalog models of that series and
    size all have the same shapes; None when there is none, or two with different shapes (never a guess between
    them). Only for a Hub id: a local path names a folder, not a base."""
    if not hub_is_repo_id(name) or (key := _series_size(name)) is None:
        return None
    if name.split("/", 1)[0].lower() in _FOLDER_ORGS or _QUANTIZED_WORD.search(name):
        return None  # a local folder's path; or weights stored otherwise than the base's (2-bit AQLM, NVFP4, …)
    candidates = _by_series_size().get(key, ())
    if not candidates or not _same_shapes(candidates):
        return None
    if _MIXTURE_WORD.search(name) and not candidates[0].is_moe:
        return None  # `acme/Qwen3-14B-16E-upcycled`: a mixture of experts named after a dense model
    if _misspelt(name):
        return None  # `Qwen/Qwen2.5-0.5B-Instrukt`: a catalog id misspelt, answered with "did you mean", not shapes
    return candidates[0]  # models.yaml's hand entries come first


# A model of a catalog series at a size the catalog does not hold (`Qwen/Qwen-14B-Chat` beside Qwen-7B and Qwen-72B):
# its architecture from the series' dense members (family, norm, MLP, head width, query heads per K/V head, MLP
# width per hidden width, vocabulary, tie, dtype, vision tower: those of the member nearest in size), its scale from
# the size its name states. Depth and the ratio of the real parameter count to the stated size are interpolated
# between the members in log-size (the nearest two beyond their range; the ratio held there); the hidden width is
# then the one whose parameter count (`param_count`) is that size times that ratio.
# words naming a mixture of experts (`-A3B`, `-A2.7B` active parameters, `-16E` experts, `MoE`, `8x7B`): its
# experts' number and width are not in its name
_MIXTURE_WORD = re.compile(r"(?<![a-z0-9])(a\d+(\.\d+)?b|\d+e|moe|\d+x\d+(\.\d+)?[bm])(?![a-z0-9])", re.I)
# how far beyond its members' sizes a series is extrapolated (a factor on the size)
SERIES_REACH = 4.0
NOT_HUB_ID = "not a Hub id"


@dataclass(frozen=True)
class BySeries:
    """`series_by_name`'s answer: the estimated architecture and what it assumed, or why there is none."""

    arch: ModelArch | None = None
    assumed: str = ""
    refused: str = ""


@functools.cache
def _series_members() -> dict[str, tuple[tuple[float, ModelArch], ...]]:
    """Catalog models by series: (stated size, model) in size order, one model a size (none where the catalog
    holds two different shapes at that size)."""
    out: dict[str, list[tuple[float, ModelArch]]] = {}
    for (series, size), candidates in _by_series_size().items():
        if _same_shapes(candidates):
            out.setdefault(series, []).append((size, candidates[0]))
    return {k: tuple(sorted(v, key=lambda e: e[0])) for k, v in out.items()}


def _interpolate(x: float, xs: list[float], ys: list[float], hold: bool) -> float:
    """y at x, linear between the two points around x; beyond them the nearest two's line, or (`hold`) the nearest
    point's y."""
    if x <= xs[0] or x >= xs[-1]:
        i = 0 if x <= xs[0] else len(xs) - 2
        if hold:
            return ys[0] if x <= xs[0] else ys[-1]
    else:
        i = max(j for j in range(len(xs) - 1) if xs[j] <= x)
    return ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])


def _scaled(template: ModelArch, hidden: int, layers: int) -> ModelArch:
    """`template` at another hidden width and depth: head width, query heads per K/V head and MLP width per hidden
    width kept; layers by kind (sliding / full attention) in the template's proportions."""
    heads = max(1, round(hidden / template.d_head))
    kv = max(1, round(heads * template.n_kv_heads / template.heads))
    while heads % kv:
        kv -= 1
    update: dict[str, Any] = {
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv if template.kv_heads is not None else None,
        "head_dim": template.d_head,
        "intermediate": max(1, round(template.intermediate * hidden / template.hidden)),
        "layer_kinds": tuple((kind, round(n * layers / template.layers)) for kind, n in template.layer_kinds),
        "params_total": 0,
        "params_by_kind": (),
        "params_b": None,
        "hf_config_json": "",
    }
    return template.model_copy(update=update)


def name_refusal(name: str) -> str:
    """Why a name alone cannot give a model's shapes by its series: not a Hub id, quantized weights, a mixture of
    experts, no size; "" when it can."""
    if not hub_is_repo_id(name) or name.split("/", 1)[0].lower() in _FOLDER_ORGS:
        return NOT_HUB_ID
    if _QUANTIZED_WORD.search(name):
        return "its name says its weights are quantized, which a series' members do not say how"
    if _MIXTURE_WORD.search(name):
        return "a mixture of experts: the number and width of its experts are not in its name"
    if _series_size(name) is None:
        return "its name states no size (such as 7B or 350M)"
    return ""


def series_by_name(name: str) -> BySeries:
    """The architecture a Hub id names by a catalog series and a size the catalog does not hold, estimated from the
    series' members (the rule above), or why there is none: no size in the name, a mixture of experts, a series
    the catalog does not hold or holds only one dense size of, members of different architectures, a layer
    pattern only a config.json gives, or a size too far beyond the members'."""
    if refused := name_refusal(name):
        return BySeries(refused=refused)
    key = _series_size(name)
    assert key is not None  # name_refusal: the name states a size
    series, size = key
    if _by_series_size().get(key):
        return BySeries(
            refused=f"the catalog's {series} models of that size differ in shapes, or the name is one's misspelt"
        )
    return from_series(name, series, size, _series_members().get(series, ()))


def from_series(name: str, series: str, size: float, every: Sequence[tuple[float, ModelArch]]) -> BySeries:
    """A `size` (millions) model of `series` estimated from `every` (stated size, model) of its members (the rule
    above), or why there is none."""
    members = [(s, m) for s, m in every if not m.is_moe and m.block == "decoder"]
    if not members:
        return BySeries(refused=f"no dense catalog model of a series `{series}`")
    if len({m.family for _, m in members}) > 1:
        families = ", ".join(sorted({m.family for _, m in members}))
        return BySeries(refused=f"the {series} series' catalog models are of different architectures ({families})")
    if len(members) < 2:
        return BySeries(refused=f"one dense catalog model of the {series} series ({members[0][1].id}): no scale")
    template = min(members, key=lambda e: abs(math.log(e[0] / size)))[1]
    if template.family in BUILT_AS_WRITTEN or template.kv_lora_rank or template.hf_config_json:
        return BySeries(refused=f"{template.family}'s layer pattern is read from a config.json, not from a size")
    if any(kind in inventory.NOT_ATTENTION for kind, _ in template.layer_kinds):
        return BySeries(refused=f"{template.family}'s layers that are not attention are read from a config.json")
    if not members[0][0] / SERIES_REACH <= size <= members[-1][0] * SERIES_REACH:
        return BySeries(refused=f"{size:g}M is too far beyond the {series} series' catalog sizes")
    xs = [math.log(s) for s, _ in members]
    ratio = _interpolate(math.log(size), xs, [math.log(param_count(m) / (s * 1e6)) for s, m in members], hold=True)
    target = size * 1e6 * math.exp(ratio)
    layers = max(1, round(math.exp(_interpolate(math.log(size), xs, [math.log(m.layers) for _, m in members], False))))
    low, high = 8, 8 * max(m.hidden for _, m in members)
    while high - low > 8:  # the parameter count grows with the hidden width
        mid = (low + high) // 16 * 8
        low, high = (mid, high) if param_count(_scaled(template, mid, layers)) < target else (low, mid)
    hidden = min((low, high), key=lambda h: abs(param_count(_scaled(template, h, layers)) - target))
    arch = _scaled(template, hidden, layers).model_copy(update={"id": name, "aliases": ()})
    sizes = ", ".join(m.id for _, m in members)
    stated = f"{size / 1000:g}B" if size >= 1000 else f"{size:g}M"
    arch = arch.model_copy(update={"source": f"estimated from the {series} series ({sizes}) at {stated}"})
    assumed = f"shapes of `{name}` estimated from the {series} series ({sizes}) at the {stated} its name states"
    return BySeries(arch, assumed)


TYPO_SIMILARITY = 0.92  # difflib ratio above which a name not in the catalog reads as a catalog id misspelt


def _misspelt(name: str) -> bool:
    """Whether the catalog spelling closest to `name` is close enough to read as misspelt, and is not the name's
    own start followed by a separator (`allenai/Olmo-3-7B-Instruct-SFT`, `openlm-research/open_llama_3b_v2`: a
    model derived from or named after that one, not a typo of it)."""
    _, exact, _ = _catalog()
    key = name.strip().lower()
    close = difflib.get_close_matches(key, list(exact), n=1, cutoff=TYPO_SIMILARITY)
    return bool(close) and not (key.startswith(close[0]) and key[len(close[0]) : len(close[0]) + 1] in ("-", "_", "."))


def all_models() -> tuple[ModelArch, ...]:
    """Every catalog model."""
    return _catalog()[0]


def suggest_model(name: str, limit: int = 3) -> list[str]:
    """Hub ids of catalog models whose ids or aliases are closest to `name` (for "did you mean")."""
    _, exact, _ = _catalog()
    close = difflib.get_close_matches(name.strip().lower(), list(exact), n=limit * 4, cutoff=0.6)
    return list(dict.fromkeys(exact[c].id for c in close))[:limit]


# ----------------------------------------------------------------------------------------------- lookup


def lookup_model(name_or_path: str, workspace: Path | None = None) -> ModelArch | None:
    """Architecture for a hub id, alias, torchtune builder, local model folder or cached hub model; None if
    unknown. Never reaches the network (`find_model` with a Hub lookup does)."""
    return find_model(name_or_path, workspace).arch


@dataclass(frozen=True)
class ModelFound:
    """What `find_model` learned: the architecture, or why there is none (and whether an answer is coming)."""

    arch: ModelArch | None = None
    where: str = "catalog"
    """catalog | local folder | hub cache | hub | catalog (close name) | catalog (by name) | catalog (by series)"""
    problem: str | None = None
    pending: bool = False
    assumed: str = ""
    """catalog (by name): the shapes taken from a base the name states, and why (an approximation); catalog (by
    series): the shapes estimated from the series and size the name states (`series_by_name`)"""
    not_by_name: str = ""
    """why the name gave no shapes by its series and size (`series_by_name`), when asked (`by_name`)"""


def find_model(
    name_or_path: str,
    workspace: Path | None = None,
    hub: HubLookup | None = None,
    any_folder: bool = False,
    _adapter_of: str | None = None,
    by_name: bool = False,
) -> ModelFound:
    """The model's architecture from, in order: the catalog (exact id, alias or torchtune builder), a local
    folder, the local Hugging Face cache, the Hub (`hub`: a lookup that may answer PENDING; None: not asked),
    then a close catalog name, then (`by_name`) the catalog model whose series and size the name states
    (`catalog_by_name`: an approximation, said in `assumed`), else one estimated from the catalog models of its
    series at the size it states (`series_by_name`: said in `assumed`; why not in `not_by_name`). `any_folder` lets
    an absolute folder outside the workspace be read (the command line and trusted workspaces)."""
    if not name_or_path or not name_or_path.strip():
        return ModelFound()
    name = name_or_path.strip()
    if model := _catalog_exact(name):
        return ModelFound(model)
    if local := _local_config(name, workspace, any_folder):
        config, roots = local
        if config.name == "adapter_config.json":
            base = adapter_base(config, roots)
            if base and _adapter_of is None:
                found = find_model(base, workspace, hub, any_folder, _adapter_of=name)
                return ModelFound(
                    found.arch,
                    f"the base model of the adapter `{name}`, from the {found.where}",
                    found.problem,
                    found.pending,
                )
            return ModelFound()
        return ModelFound(arch_from_config_file(config, name, roots), "local folder")
    if config := cached_config_path(name):
        return ModelFound(arch_from_config_file(config, name, file_access.cache_roots()), "hub cache")
    answer = hub(name) if hub is not None and hub_is_repo_id(name) else None
    if answer is not None and answer.base_model and _adapter_of is None:
        base = find_model(answer.base_model, workspace, hub, any_folder, _adapter_of=name)
        where = f"the base model of the adapter `{name}`, from the {base.where}"
        return ModelFound(base.arch, where, base.problem, base.pending)
    if answer is not None and answer.config is not None:
        if (arch := arch_from_config_file(answer.config, name, file_access.cache_roots())) is not None:
            return ModelFound(arch, "hub")
        answer = HubAnswer(problem=f"`{name}`'s config.json on the Hub is not a model config vramlens can use")
    if by_name and (not_read := _folder_not_read(name, workspace, any_folder)) and (named := _by_folder_name(name)):
        model, tail = named  # a folder vramlens does not read, named after a catalog model
        assumed = f"shapes of {model.id} assumed from the name `{tail}` of the model folder, which was not read: "
        return ModelFound(model, "catalog (by folder name)", assumed=assumed + not_read)
    if model := _catalog_loose(name):
        return ModelFound(model, "catalog (close name)")
    hub_text = "the Hub is off" if answer is None else (answer.problem or "the Hub gave no config.json")
    by_series = BySeries()
    if by_name and not (answer is not None and answer.pending):
        if model := catalog_by_name(name):
            assumed = f"shapes of {model.id} assumed from the name `{name}`; {hub_text}"
            return ModelFound(model, "catalog (by name)", assumed=assumed)
        by_series = series_by_name(name)
        if by_series.arch is not None:
            return ModelFound(by_series.arch, "catalog (by series)", assumed=f"{by_series.assumed}; {hub_text}")
    not_by_name = "" if by_series.refused == NOT_HUB_ID else by_series.refused
    if answer is None:
        return ModelFound(not_by_name=not_by_name)
    return ModelFound(problem=answer.problem, pending=answer.pending, not_by_name=not_by_name)


def _folder_not_read(name: str, workspace: Path | None, any_folder: bool) -> str | None:
    """Why the model folder a path names was not read, when the path leads outside the workspace (or to a folder
    that is not there) or starts with a variable only known when the script runs (`$HDFS_ROOT/model/Qwen3-8B`);
    None for any other name (a Hub id, a folder inside the workspace)."""
    n = name.strip()
    if n.startswith("$"):
        head = re.split(r"[\\/]", n, maxsplit=1)[0]
        return f"`{n}` starts with `{head}`, only known when the script runs"
    if not n.startswith(("/", "~", ".")) and ".." not in Path(n).parts:
        return None
    if (problem := local_config_problem(n, workspace, any_folder)) is not None:
        return problem if problem.startswith("model folder `") else None
    path = file_access.expand_user(n)
    if path.is_absolute() and not file_access.inside(path, file_access.allowed_roots(workspace)):
        try:
            return None if path.exists() else f"model folder `{n}` does not exist here"
        except (OSError, ValueError):
            return None
    return None


def _by_folder_name(name: str) -> tuple[ModelArch, str] | None:
    """The catalog model a folder's path ends with (`/data/models/Qwen/Qwen2-7B`, `~/models/deepseek-llm-7b-chat`):
    its last two parts as a Hub id, then its last part as a model's name; None when neither is one."""
    parts = [p for p in re.split(r"[\\/]", name.strip().strip("\"'")) if p and p not in (".", "..", "~")]
    parts = [p for p in parts if not p.startswith("$")]
    if len(parts) >= 2 and (model := _catalog_exact(pair := "/".join(parts[-2:])) or catalog_by_name(pair)):
        return model, pair
    if parts and (model := _catalog_exact(parts[-1]) or _catalog_loose(parts[-1])):
        return model, parts[-1]
    return None


def _local_candidates(name: str, workspace: Path | None) -> list[Path]:
    raw = file_access.expand_user(name.strip())
    return [raw] if raw.is_absolute() or workspace is None else [workspace / raw, raw]


def _local_config(name: str, workspace: Path | None, any_folder: bool = False) -> tuple[Path, list[Path] | None] | None:
    """A local model folder's config.json (or a PEFT adapter's adapter_config.json), or a .json file named
    directly, as the workspace check resolved it, with the folders it must be read inside (None: anywhere — an
    absolute folder from the command line or a trusted workspace). A folder on the way may be swapped for a link
    since the check, so the file is read with these roots (`read_config_file`), which checks the file opened."""
    roots = file_access.allowed_roots(workspace)
    for path in _local_candidates(name, workspace):
        allowed = None if any_folder and path.is_absolute() else roots
        if allowed is not None and not file_access.inside(path, allowed):
            continue
        try:
            for file in ("config.json", "adapter_config.json"):  # a PEFT adapter folder names its base model
                if path.is_dir() and (path / file).is_file():
                    config = file_access.resolved_inside(path / file, allowed)
                    return (config, allowed) if config is not None else None
            if path.is_file() and path.suffix == ".json" and (allowed is not None or path.name == "config.json"):
                config = file_access.resolved_inside(path, allowed)
                return (config, allowed) if config is not None else None
        except (OSError, ValueError):
            continue
    return None


def local_config_problem(name: str, workspace: Path | None = None, any_folder: bool = False) -> str | None:
    """Why a model named by a local path has no architecture: the path leads outside what vramlens reads, or
    its config.json is not a usable model config. None when the name is not such a path."""
    n = name.strip()
    candidates = _local_candidates(n, workspace)
    path_like = n.startswith(("/", "~", ".")) or ".." in Path(n).parts
    roots = file_access.allowed_roots(workspace)
    if path_like and not any(file_access.inside(p, roots) or (any_folder and p.is_absolute()) for p in candidates):
        return file_access.refusal("model folder", n, workspace)
    local = _local_config(n, workspace, any_folder)
    if local is None:
        return None
    config, roots = local
    if config.name == "adapter_config.json":
        base = adapter_base(config, roots)
        return None if base else f"`{config}` names no base model (`base_model_name_or_path`)"
    if arch_from_config_file(config, n, roots) is None:
        unreadable = read_config_file(config, roots)
        if isinstance(unreadable, str):
            return f"`{config}` is not a model config vramlens can use: {unreadable}"
        return (
            f"`{config}` is not a model config vramlens can use: hidden_size, num_attention_heads, "
            f"num_hidden_layers and vocab_size (and any other shape) must be whole numbers from 1 to {MAX_DIM:,}"
        )
    return None


def read_config_file(path: Path, roots: list[Path] | None = None) -> dict | str:
    """A `config.json`'s object (json only, size-bounded), or why it could not be read. With `roots`, only if the
    file opened lies in one of them (`file_access.read_checked`)."""
    try:
        config = json.loads(file_access.read_checked(path, MAX_CONFIG_BYTES, roots=roots))
    except OSError as exc:
        return f"it could not be read ({exc.strerror or exc})"
    except RecursionError:  # json recurses once per nested array or object
        return "it is nested too deeply to be a model config"
    except ValueError as exc:
        return f"it is not JSON ({str(exc)[:120]})"
    return config if isinstance(config, dict) else "it is not a JSON object"


def arch_from_config_file(path: Path, model_id: str | None = None, roots: list[Path] | None = None) -> ModelArch | None:
    """Read a `config.json` (json only, size-bounded; inside `roots` when given) and map it; None if unreadable or
    not a model config."""
    config = read_config_file(path, roots)
    if isinstance(config, str):
        return None
    return arch_from_hf_config(config, model_id or str(path.parent), source=f"config.json at {path}")


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _dtype(config: Mapping[str, Any]) -> str:
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "")).lower()
        if method == "bitsandbytes":
            if quant.get("load_in_4bit"):
                return str(quant.get("bnb_4bit_quant_type", "nf4")).lower()
            if quant.get("load_in_8bit"):
                return "int8"
        if method in ("fp8", "mxfp4"):
            return method
        if method in ("gptq", "awq"):
            return f"int{quant.get('bits', 4)}"
    dtype = str(_first(config, "torch_dtype", "dtype") or "").lower()
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, "bf16" if not dtype else dtype)


def _dim(v: Any) -> bool:
    """A shape: a whole number from 0 to MAX_DIM (not a bool, a float, NaN or text)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_DIM


def arch_from_hf_config(config: Mapping[str, Any], model_id: str, source: str = "config.json") -> ModelArch | None:
    """Map a transformers `config.json` dict to a ModelArch: its sizes (`_arch_from_sizes`), and the parameters
    transformers' own classes build from it (`knowledge.inventory`: exact counts by kind, layers by kind), or why
    the count is approximate. An omni model's config.json (Qwen2.5-Omni, Qwen3-Omni: `thinker_config`, `talker_config`
    and the speech decoder's config, no shapes of its own) is read as its thinker, the decoder that is trained:
    transformers 5.24 models/qwen2_5_omni/modeling_qwen2_5_omni.py `Qwen2_5OmniForConditionalGeneration.__init__`
    builds `self.thinker` from `config.thinker_config` and the talker only when `enable_audio_output`
    (models/qwen3_omni_moe/modeling_qwen3_omni_moe.py likewise), and LLaMA-Factory (ff6d4d1
    src/llamafactory/model/loader.py) trains `getattr(model, "thinker")` of both."""
    remote_code = remote_model_class(config)
    thinker = config.get("thinker_config")
    if isinstance(thinker, Mapping) and _first(config, "hidden_size", "text_config", "llm_config") is None:
        config = thinker
    foreign = ""
    if ssm_configs.is_mamba_ssm(config):
        config, foreign = ssm_configs.from_mamba_ssm(config)
        source = ", ".join(filter(None, (source, "mamba_ssm's format read as transformers converts it")))
    config = _flat_sizes(config)
    arch = _arch_from_sizes(config, model_id, source)
    if arch is None:
        # sizes left out of the config.json because they equal the config class's defaults (`save_pretrained`
        # writes only what differs from them): read as transformers reads them, from those defaults
        config = inventory.with_defaults(config, str(config.get("model_type") or "").lower())
        arch = _arch_from_sizes(config, model_id, source)
    vlm = config.get("vlm_config")
    outer = str(config.get("model_type") or "").lower()
    if arch is None and isinstance(vlm, Mapping):
        # a model built around a VLM (transformers 5.24 models/colpali/modeling_colpali.py `ColPaliForRetrieval`:
        # `self.vlm` from `config.vlm_config` and an `embedding_proj_layer` to `embedding_dim`; ColQwen2,
        # ColModernVBert likewise; models/pi0 `PI0Model`: a vlm_config beside its action expert's dit_config): read
        # and counted as that VLM. Its own inventory cannot stand in: it was measured at one set of the VLM's sizes
        # (scripts/dump_model_inventories.py varies one level of sub-configs, not vlm_config.text_config)
        config = inventory.with_defaults(vlm, str(vlm.get("model_type") or "").lower())
        arch = _arch_from_sizes(config, model_id, source)
    if arch is None:
        return _without_vocabulary(config, model_id, source)
    arch = _by_construction(arch, config)
    if config.get("tie_word_embeddings") is None and arch.tied_embeddings and dict(arch.params_by_kind).get("lm-head"):
        # the config.json leaves it to the config class, whose default transformers' build followed: an LM head of
        # its own (Glm4Config `tie_word_embeddings=False`; PretrainedConfig's True is only the base's default)
        arch = arch.model_copy(update={"tied_embeddings": False})
    if isinstance(vlm, Mapping) and config.get("model_type") != outer:
        note = f"counted as its {config.get('model_type')} vlm_config: the parameters {outer} adds to it are not"
        arch = arch.model_copy(update={"approximate": "; ".join(filter(None, (arch.approximate, note)))})
    if arch.family == "lfm2":
        arch = arch.model_copy(update={"intermediate": lfm2_mlp_width(config, arch.intermediate)})
    note = NOT_MODELLED_LAYERS.get(arch.family, "")
    if arch.family == "nemotron_h" and dict(arch.layer_kinds).get("moe fused"):
        # estimate/components/ssm.py `_nemotron_h_moe`: written from `NemotronHMoE`'s torch loop, not traced
        note = "Nemotron-H MoE layers' activations estimated from the modeling code, not checked against a trace"
    if note and note not in arch.approximate:
        arch = arch.model_copy(update={"approximate": "; ".join(filter(None, (arch.approximate, note)))})
    if foreign:
        arch = arch.model_copy(update={"approximate": "; ".join(filter(None, (arch.approximate, foreign)))})
    written = _as_written(config, arch.family)
    if written is not None:
        arch = arch.model_copy(update={"hf_config_json": json.dumps(dict(written), sort_keys=True, default=str)})
    if remote_code:
        arch = arch.model_copy(update={"remote_code": remote_code})
    return arch


# Sizes a family writes in a sub-config, under its own names: (model_type) -> {(section, key): the flat name the
# generic reader takes}. DBRX: transformers 5.24 models/dbrx/configuration_dbrx.py `DbrxAttentionConfig.kv_n_heads`,
# `DbrxFFNConfig.ffn_hidden_size` (each expert's width), `moe_num_experts`, `moe_top_k`; modeling_dbrx.py
# `DbrxAttention` (Wqkv: hidden → hidden + 2·kv_n_heads·head_dim), `DbrxExpertGLU` (w1, v1, w2 per expert).
NESTED_SIZES: dict[str, dict[tuple[str, str], str]] = {
    "dbrx": {
        ("attn_config", "kv_n_heads"): "num_key_value_heads",
        ("ffn_config", "ffn_hidden_size"): "intermediate_size",
        ("ffn_config", "moe_num_experts"): "num_local_experts",
        ("ffn_config", "moe_top_k"): "num_experts_per_tok",
    },
}


def _flat_sizes(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """`config` with the sizes its family nests in sub-configs (NESTED_SIZES) also at the top, where the generic
    reader looks; a top-level key of the same name is kept."""
    nested = NESTED_SIZES.get(str(config.get("model_type") or "").lower())
    if not nested:
        return config
    flat = dict(config)
    for (section, key), name in nested.items():
        sub = config.get(section)
        if isinstance(sub, Mapping) and sub.get(key) is not None and name not in flat:
            flat[name] = sub[key]
    return flat


REMOTE_NOT_BUILT = "remote code: not built"  # how `_by_construction` names a remote-code model it could not build


def remote_code_needed(arch: ModelArch) -> bool:
    """Whether loading the model needs its checkpoint's own code: it has an `auto_map` class and transformers ships no
    class for its model type (one whose layers are written here from that code, or one the inventory does not know)."""
    return bool(arch.remote_code) and (arch.family in REMOTE_CODE_WRITTEN or REMOTE_NOT_BUILT in arch.approximate)


# The auto classes a training run loads a model through, in the order a config's `auto_map` is asked for one: a
# causal LM, a vision-language model, the bare model
REMOTE_AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModelForVision2Seq", "AutoModel")


def remote_model_class(config: Mapping[str, Any]) -> str:
    """The model class a checkpoint's own code defines for training (its config.json `auto_map` entry for the first
    of REMOTE_AUTO_CLASSES; "repo--module.Class" when the code lives in another repository), "" for none. transformers
    builds it instead of its own class when the run passes `trust_remote_code=True` (transformers 5.x
    models/auto/auto_factory.py `_BaseAutoModelClass.from_pretrained`: `has_remote_code = hasattr(config,
    "auto_map") and cls.__name__ in config.auto_map`; `if has_remote_code and trust_remote_code:` the class comes from
    `get_class_from_dynamic_module`)."""
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, Mapping):
        return ""
    for name in REMOTE_AUTO_CLASSES:
        ref = auto_map.get(name)
        if isinstance(ref, (list, tuple)):
            ref = next((r for r in ref if isinstance(r, str)), None)
        if isinstance(ref, str) and ref.strip():
            return ref.strip()[:200]
    return ""


def _as_written(config: Mapping[str, Any], family: str) -> Mapping[str, Any] | None:
    """The config.json (or, for a vision-language composite, its `text_config`) of a `BUILT_AS_WRITTEN` language
    model, which the plan keeps: a Qwen3.5 checkpoint's config.json is its composite (transformers 5.24
    models/qwen3_5/configuration_qwen3_5.py `Qwen3_5Config`: `text_config` a `Qwen3_5TextConfig`, which holds the
    layer pattern and the gated DeltaNet's sizes), as Gemma-3n's and Llama-4's are. None for any other model."""
    if family not in BUILT_AS_WRITTEN:
        return None
    for candidate in (config, config.get("text_config")):
        if isinstance(candidate, Mapping) and str(candidate.get("model_type") or "").lower() == family:
            return candidate
    return None


def _vocabulary(config: Mapping[str, Any]) -> bool:
    """Whether the config (or one of its sub-configs) writes a vocabulary size. A vocabulary of token types
    (`type_vocab_size`, BERT's segment embeddings) is none: CANINE writes only that one, its characters hashed into
    `num_hash_buckets` (transformers 5.24 models/canine/configuration_canine.py `CanineConfig`). Nor is one left
    null: the size of a CTC head the base model does not build (models/wav2vec2_bert/configuration_wav2vec2_bert.py
    `Wav2Vec2BertConfig.vocab_size: int | None = None`; Wav2Vec2-Conformer's, and the semantic encoders of X-Codec-2
    and NeuCodec, likewise)."""

    def vocabulary(key: Any, value: Any) -> bool:
        return "vocab" in str(key) and str(key) != "type_vocab_size" and value is not None

    return any(
        vocabulary(k, v) or (isinstance(v, Mapping) and any(vocabulary(k2, v2) for k2, v2 in v.items()))
        for k, v in config.items()
    )


def _without_vocabulary(config: Mapping[str, Any], model_id: str, source: str) -> ModelArch | None:
    """A model_type transformers ships that has no vocabulary, so is no language model (an audio or vision encoder, a
    codec, a keypoint or object detector: transformers 5.24 models/audio_spectrogram_transformer `ASTModel`,
    models/dac `DacModel`, models/superpoint `SuperPointForKeypointDetection`): the parameters its bundled inventory
    counts, layers by kind as built; the block the estimate sizes activations with is a transformer encoder of
    the config's width, heads and depth (1 where it writes none), which the arch's `approximate` says. None where
    the inventory has no such model_type, or the config writes a vocabulary (a language model whose sizes were not
    read)."""
    model_type = str(config.get("model_type") or "").lower()
    if _vocabulary(config) or not inventory.known(model_type):
        return None
    built = inventory.build(config, model_type)
    if built is None or built.total <= 0:
        return None
    hidden = _first(config, "hidden_size", "d_model", "embed_dim", "dim")
    heads = _first(config, "num_attention_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads")
    layers = max((n for _, n in built.layer_kinds), default=0)
    hidden, heads = (v if _dim(v) and v else 1 for v in (hidden, heads))
    if hidden % heads:
        heads = 1
    intermediate = _first(config, "intermediate_size", "encoder_ffn_dim", "decoder_ffn_dim")
    notes = [f"parameters approximate: {built.approximate}"] if built.approximate else []
    notes.append(
        f"{inventory.classes(model_type)[0]} is not a language model: parameters counted from transformers' build, "
        f"activations not modelled (sized as a transformer encoder of {max(layers, 1)} layers {hidden} wide)"
    )
    return ModelArch(
        id=model_id,
        family=model_type,
        block="encoder",
        mlp="gelu",
        norm="layernorm",
        hidden=hidden,
        layers=max(layers, 1),
        heads=heads,
        intermediate=intermediate if _dim(intermediate) and intermediate else 4 * hidden,
        vocab=0,
        params_total=built.total,
        params_by_kind=built.by_kind,
        layer_kinds=tuple((kind, n) for kind, n in built.layer_kinds if kind != "other"),  # blocks of no known kind
        stored_dtype=_dtype(config),
        source="; ".join(filter(None, (source, built.source))),
        approximate="; ".join(notes),
    )


# parts of a block the estimate does not model, by family (their activations sized as the family's attention + MLP
# block): Gemma-3n (transformers 5.24 models/gemma3n/modeling_gemma3n.py `Gemma3nTextDecoderLayer`: AltUp's
# altup_num_inputs copies of the stream, LAuReL, the per-layer embeddings and their gates, KV shared across the last
# num_kv_shared_layers)
def lfm2_mlp_width(config: Mapping[str, Any], width: int) -> int:
    """The width LFM2's MLP builds from `intermediate_size` (transformers 5.24 models/lfm2/modeling_lfm2.py
    `Lfm2MLP.__init__`; defaults from `Lfm2Config`: auto-adjust on, multiplier 1.0, multiple of 256)."""
    if not config.get("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    multiplier = config.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is not None:
        multiple = int(config.get("block_multiple_of", 256))
        width = int(multiplier * width)
        width = multiple * ((width + multiple - 1) // multiple)
    return width


# the NOT_MODELLED_LAYERS notes about eager attention alone: dropped where the run's attention is another
# (resolve/versions.py)
EAGER_ATTENTION_NOTES = frozenset({"gpt_oss"})

NOT_MODELLED_LAYERS = {
    # models/gpt_oss/modeling_gpt_oss.py: sinks, clamped SwiGLU and the checkpointed recompute under adapters are
    # modelled (estimate/components/experts.py); its eager attention builds a full and a sliding-window mask (b·s²
    # each) even without padding, counted only in the checkpointed recompute's peak
    "gpt_oss": "eager attention's full and sliding-window masks counted only in a checkpointed recompute",
    # composite encoder-decoders read from their decoder's sizes (`_arch_from_sizes`): models/encoder_decoder
    # `EncoderDecoderModel`, models/vision_encoder_decoder `VisionEncoderDecoderModel` (an image encoder: ViT, Swin,
    # ...), models/t5gemma2 `T5Gemma2Encoder` (a SigLIP vision tower beside its text layers), models/musicgen
    # `MusicgenForConditionalGeneration` (a T5 text encoder, an EnCodec audio codec, one head per codebook)
    "encoder-decoder": "encoder layers sized as the decoder's",
    "vision-encoder-decoder": "the image encoder's layers sized as the text decoder's, over the text tokens",
    "t5gemma2": "encoder layers sized as the decoder's; its vision tower's activations not modelled",
    **dict.fromkeys(
        ("musicgen", "musicgen_melody"),
        "text encoder layers sized as the decoder's; the audio codec and the codebook heads' logits not modelled",
    ),
    # models/blt/modeling_blt.py `BltModel`: local encoder, global transformer over patches, local decoder, patcher
    "blt": "the byte-level local encoder, local decoder and entropy patcher sized as global transformer layers",
}

# what the estimate does not model when the base weights are 4-bit (QLoRA), by family: added to a k-bit plan's
# assumptions (resolve/assemble.py), not to the architecture's
NOT_MODELLED_KBIT = {
    # models/gemma3n/modeling_gemma3n.py: AltUp, LAuReL, the per-layer inputs, shared K/V and the checkpointed
    # recompute are modelled in a 16-bit step (estimate/components/gemma3n.py), not over 4-bit weights, where
    # prepare_model_for_kbit_training makes the stream fp32 (the real-library trace is 22-31 % above the estimate)
    "gemma3n_text": "Gemma-3n blocks over 4-bit weights (QLoRA) not modelled",
    # models/llama4/modeling_llama4.py: the MoE block over 4-bit weights is sized as in a 16-bit run; its experts'
    # matmuls run in bf16 under autocast where the estimate counts fp32 (the real-library trace agrees within 2 %,
    # but not term by term)
    "llama4_text": "Llama-4 MoE blocks over 4-bit weights (QLoRA) not modelled term by term",
    # models/jamba/modeling_jamba.py: the Mamba mixers over 4-bit weights are sized as in a 16-bit run (the
    # real-library trace is 2-4 % above the estimate)
    "jamba": "Jamba's Mamba mixers over 4-bit weights (QLoRA) sized as in a 16-bit run",
}

# model_types whose linear-attention layers are a gated DeltaNet (estimate/components/mixers.py `deltanet_bytes`):
# Qwen3-Next with its input projections fused (transformers 5.24 models/qwen3_next/modeling_qwen3_next.py
# `Qwen3NextGatedDeltaNet`: in_proj_qkvz, in_proj_ba) and the Qwen3.5 language models with them split
# (models/qwen3_5/modeling_qwen3_5.py `Qwen3_5GatedDeltaNet`: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a;
# models/qwen3_5_moe the same mixer); the rest of the mixer, its gated norm and the gated attention beside it are the
# same code
DELTANET_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
# the Qwen3.5 spelling of the mixer's input projections (`estimate.shapes.deltanet_linears`)
SPLIT_DELTANET_PROJECTIONS = frozenset({"qwen3_5_text", "qwen3_5_moe_text"})

# model_types whose mixers are LFM2's gated short convolutions (estimate/components/mixers.py
# `short_conv_per_token`): LFM2 and LFM2-MoE (transformers 5.24 models/lfm2_moe/modeling_lfm2_moe.py
# `Lfm2MoeShortConv`, the same code as models/lfm2 `Lfm2ShortConv`, as are their attention layers)
SHORT_CONV_FAMILIES = ("lfm2", "lfm2_moe")

# layer kinds (knowledge.inventory.NOT_ATTENTION) the estimate models as themselves in these model_types: LFM2's
# short convolutions (estimate/components/mixers.py; LoRA's q/k/v/o only in its attention layers, estimate/shapes.py)
MODELLED_MIXERS = {
    "short conv": frozenset(SHORT_CONV_FAMILIES),
    "state space": frozenset({"mamba2", "falcon_h1", "jamba", "bamba", "granitemoehybrid", "nemotron_h"}),
    "linear attention": frozenset(DELTANET_FAMILIES),
}
# model_types whose block shapes (estimate/shapes.py) hold their mixers' linears under the model's own module names
# (in_proj, out_proj, x_proj, dt_proj, in_proj_qkvz, in_proj_ba, shared_expert_gate), so that a LoRA target naming one
# is counted on it (resolve/adapters.py `_own_mixer_linear`); Falcon-H1's mixer linears are among its other
# parameters (estimate/components/quant.py `mixer_linear_params`)
OWN_MIXER_LINEARS = (frozenset().union(*MODELLED_MIXERS.values()) - {"falcon_h1"}) | {"mamba", "falcon_mamba"}

# model_types whose layer pattern and mixer sizes no ModelArch field holds (hybrids, state-space and linear-attention
# mixers, MLA, per-layer embeddings, Llama-4's interleaved MoE): the plan keeps their config.json
# (`ModelArch.hf_config_json`), so that the real-library trace builds the model transformers builds from it
BUILT_AS_WRITTEN = frozenset(
    {
        "mamba2",
        "falcon_h1",
        "jamba",
        "bamba",
        "nemotron_h",
        "granitemoehybrid",
        *SHORT_CONV_FAMILIES,
        *DELTANET_FAMILIES,
        "gpt_oss",
        "deepseek_v3",
        "gemma3n_text",
        "llama4_text",
    }
)


def _by_construction(arch: ModelArch, config: Mapping[str, Any]) -> ModelArch:
    """`arch` with the parameter count transformers builds from `config`, where a bundled inventory has its
    model_type. A VLM's language model is counted from `text_config` (its vision tower stays in `vision_params`);
    an encoder's task head is the inventory's, and said so where config.json names another (`_task_head`). A
    model_type transformers does not ship,
    written for `trust_remote_code` (`auto_map`: Qwen-1, ChatGLM, Baichuan, InternLM, MPT, older Phi), is never
    run: its estimate is approximate, and says so."""
    model_type = str(config.get("model_type") or "").lower()
    text = config.get("text_config") or config.get("llm_config")
    vlm = isinstance(config.get("vision_config"), dict) and isinstance(text, dict)
    text_type = str(text.get("model_type") or "").lower() if vlm else ""
    # a composite whose text_config builds no language model of its own (no class of transformers 5.24 takes it
    # alone: the contrastive dual encoders `Aimv2Model`, `AlignModel`, `AltCLIPModel`; BLIP's and Pix2Struct's text
    # decoders, `BlipTextLMHeadModel`, `Pix2StructTextModel`, built only inside their composites) is counted whole,
    # its vision tower in the count rather than in `vision_params`. An omni model's thinker (an audio tower beside
    # the vision tower, `Qwen2_5OmniThinkerForConditionalGeneration`) keeps its language model counted apart.
    whole = (
        vlm
        and not isinstance(config.get("audio_config"), dict)
        and not inventory.known(text_type)
        and inventory.known(model_type)
    )
    outer, outer_type = config, model_type
    if vlm and not whole:
        config, model_type = text, text_type
    if not inventory.known(model_type):
        if config.get("auto_map") and model_type not in REMOTE_CODE_WRITTEN:
            reason = REMOTE_NOT_BUILT
            return arch.model_copy(update={"approximate": "; ".join(filter(None, (reason, arch.approximate)))})
        return arch
    built = inventory.build(config, model_type)
    if built is None or built.total <= 0:
        return arch
    kinds = dict(built.by_kind)
    if vlm and not whole and "lm-head" not in kinds and "embedding" in kinds:
        arch = arch.model_copy(update={"tied_embeddings": _composite_tie(outer, outer_type, arch.tied_embeddings)})
    if vlm and not whole and "lm-head" not in kinds and "embedding" in kinds and not arch.tied_embeddings:
        # a VLM's text inventory is its base text model (`Qwen3VLMoeTextModel`); the untied head is the outer
        # model's (transformers 5.24 models/qwen3_vl_moe/modeling_qwen3_vl_moe.py `Qwen3VLMoeForConditionalGeneration`:
        # `self.lm_head = nn.Linear(text_config.hidden_size, text_config.vocab_size, bias=False)`)
        head = arch.vocab * arch.hidden
        built = inventory.Built(
            built.total + head, (*built.by_kind, ("lm-head", head)), built.layer_kinds, built.approximate, built.source
        )
    encoder = arch.block == "encoder"
    # layers that are not attention (RecurrentGemma's recurrent blocks, lru_width wide: transformers 5.24
    # models/recurrent_gemma/modeling_recurrent_gemma.py `RecurrentGemmaRecurrentBlock`) are outside what the family
    # formulas size: the build's count stands
    mixers_built = any(kind in inventory.NOT_ATTENTION for kind, _ in built.layer_kinds)
    if (
        model_type in _DEDICATED
        and not mixers_built
        and (
            built.approximate
            # the family formulas size MLA as multi-head attention (`_attention`): an MLA model's exact build wins;
            # the encoders' formulas leave out their task heads (and ELECTRA's embedding projection)
            or (not encoder and not arch.kv_lora_rank and abs(built.total / param_count(arch) - 1) > 0.05)
        )
    ):
        # a family the formulas above know (tested against published sizes) keeps its formula for a config the
        # inventory does not scale exactly, or reads otherwise than they do (an older spelling it does not know).
        # The layers are still those of the build.
        return arch.model_copy(update={"layer_kinds": built.layer_kinds})
    notes = [f"parameters approximate: {built.approximate}"] if built.approximate else []
    if vlm and not whole and isinstance(outer.get("audio_config"), dict):
        notes.append(AUDIO_TOWER_NOTE)
    if encoder:
        notes += filter(None, [_task_head(config, model_type)])
    mixers = _mamba_mixer(config) if model_type == "mamba" else {}
    if mixers:
        notes.append(MAMBA_KERNEL_NOTE)
    other = [
        (kind, n)
        for kind, n in built.layer_kinds
        if kind in inventory.NOT_ATTENTION
        and not (mixers and kind == "state space")
        and model_type not in MODELLED_MIXERS.get(kind, ())
    ]
    if model_type in MIXER_PATH_NOTES:
        notes.append(MIXER_PATH_NOTES[model_type])
    if other:
        layers = ", ".join(f"{n} {kind}" for kind, n in other)
        notes.append(
            f"activations and LoRA targets of the {layers} layers sized as attention layers of the same "
            f"width (parameters exact)"
        )
    update: dict[str, Any] = {
        "params_total": built.total,
        "params_by_kind": built.by_kind,
        "layer_kinds": built.layer_kinds,
        "approximate": "; ".join(notes),
        "source": "; ".join(filter(None, (arch.source, built.source))),
        **mixers,
    }
    if whole:
        notes.append(WHOLE_COMPOSITE_NOTE)
        update.update(approximate="; ".join(notes), vision_params=0)
    by_kind = dict(built.by_kind)
    per_layer = (built.total - by_kind.get("embedding", 0) - by_kind.get("lm-head", 0)) / max(arch.layers, 1)
    matrices = 3 if arch.mlp in ("swiglu", "geglu") else 2
    attention = 2 * arch.hidden * arch.q_dim + 2 * arch.hidden * arch.kv_dim
    if other and not arch.is_moe and attention + matrices * arch.hidden * arch.intermediate > per_layer:
        # layers that are not attention (Mamba, short convolutions) stand in as attention + MLP: the MLP gets the
        # width that gives the stand-in the weights a real layer has on average, so that the linears
        # `estimate.shapes` lists add up to the count
        update["intermediate"] = max(1, int((per_layer - attention) / (matrices * arch.hidden)))
    return arch.model_copy(update=update)


def _composite_tie(config: Mapping[str, Any], model_type: str, text_tie: bool) -> bool:
    """Whether a composite's head is its language model's input embedding. transformers 5.24 ties by the
    composite's own config (modeling_utils.py `get_expanded_tied_weights_keys`: `getattr(self.config,
    "tie_word_embeddings", False)`, `self` the outer `…ForConditionalGeneration`), the config class's default where
    config.json does not write it (models/qwen3_vl_moe/configuration_qwen3_vl_moe.py `Qwen3VLMoeConfig`: False, its
    `Qwen3VLMoeTextConfig`: True); 4.x tied by text_config's (modeling_utils.py `tie_weights`:
    `self.config.get_text_config(decoder=True)`), read here where the composite's build has no head that may be tied
    (no inventory, or none holding such a head: CLIP's dual encoder)."""
    default = inventory.tie_default(model_type)
    if default is None:
        return text_tie
    tie = config.get("tie_word_embeddings")
    return tie if isinstance(tie, bool) else default


def _task_head(config: Mapping[str, Any], model_type: str) -> str:
    """What an encoder's count leaves open: its task head. transformers builds the class a config.json's
    `architectures` names (`BertForMaskedLM`, `RobertaForSequenceClassification`, ...); the inventory counts the
    class it was measured on and those that build the same parameters (`inventory.classes`). "" when the named class
    is one of them."""
    named = config.get("architectures")
    head = named[0] if isinstance(named, list) and named and isinstance(named[0], str) else None
    counted = inventory.classes(model_type)
    if head in counted:
        return ""
    if head is None:
        return f"task head not named (no `architectures` in config.json): counted as transformers' {counted[0]}'s"
    return f"task head of {head} counted as transformers' {counted[0]}'s"


# what the estimate of an omni thinker (`_by_construction`: its language model from text_config, its vision tower in
# `vision_params`) leaves out: its audio encoder (transformers 5.24 models/qwen2_5_omni/modeling_qwen2_5_omni.py
# `Qwen2_5OmniThinkerModel.__init__`: `self.audio_tower = Qwen2_5OmniAudioEncoder._from_config(config.audio_config)`)
AUDIO_TOWER_NOTE = "audio tower not counted (its parameters and activations not modelled)"


# what the estimate of a composite counted whole (`_by_construction`) does not model
WHOLE_COMPOSITE_NOTE = (
    "vision tower counted in the parameters, its activations not modelled (the layers are sized from text_config)"
)


# The activations of a Mamba mixer follow the CUDA kernels transformers calls when mamba_ssm and causal-conv1d are
# installed (what a GPU run uses); without them transformers runs its torch path, which keeps far more.
# Mamba mixers of hybrids and Mamba-2 (Mamba-2, Falcon-H1, Jamba, Bamba, Granite-4 hybrids): estimate/components/ssm.py
# `mamba2_mixer_bytes`,
# `jamba_mixer_bytes`, and why the torch path
MAMBA2_PATH_NOTE = (
    "Mamba mixers sized as transformers' torch path keeps them (mamba_ssm kernels not assumed installed; "
    "with them a mixer keeps less)"
)
# Qwen3-Next's gated DeltaNet: estimate/components/mixers.py `deltanet_bytes`. transformers 5.24
# models/qwen3_next/modeling_qwen3_next.py maps `chunk_gated_delta_rule` to flash-linear-attention's kernel when fla
# is importable (`use_kernel_func_from_hub_with_fallback(..., "fla")`), to `torch_chunk_gated_delta_rule` otherwise
DELTANET_PATH_NOTE = (
    "gated DeltaNet layers sized as transformers' torch path keeps them (flash-linear-attention kernels not "
    "assumed installed; with them a layer keeps less)"
)
# the path each model_type's modelled mixers are sized on, said in its `approximate`
MIXER_PATH_NOTES = {
    "mamba2": MAMBA2_PATH_NOTE,
    "falcon_h1": MAMBA2_PATH_NOTE,
    "jamba": MAMBA2_PATH_NOTE,
    "bamba": MAMBA2_PATH_NOTE,
    "granitemoehybrid": MAMBA2_PATH_NOTE,
    "nemotron_h": MAMBA2_PATH_NOTE,
    **dict.fromkeys(DELTANET_FAMILIES, DELTANET_PATH_NOTE),
}
MAMBA_KERNEL_NOTE = (
    "Mamba mixers sized as mamba_ssm's fused kernel keeps them (assumes mamba_ssm and causal-conv1d "
    "are installed; not traced: transformers' torch fallback keeps about 14 bytes per channel and "
    "state per token)"
)


def _mamba_mixer(config: Mapping[str, Any]) -> dict:
    """The sizes of a Mamba mixer (transformers 5.24 models/mamba/configuration_mamba.py `__post_init__`:
    `intermediate_size` = expand · hidden_size unless the config.json writes one, which the base class then sets;
    `time_step_rank` "auto" = ceil(hidden_size / 16); state_size 16, conv_kernel 4 by default); {} when a size is
    not a whole number."""
    hidden = config.get("hidden_size")
    if not (_dim(hidden) and hidden):
        return {}
    expand = config.get("expand", 2)
    inner = config.get("intermediate_size")
    if not _dim(inner) and isinstance(expand, (int, float)) and not isinstance(expand, bool) and 0 < expand < 64:
        inner = int(expand * hidden)
    rank = config.get("time_step_rank", "auto")
    if rank == "auto":
        rank = math.ceil(hidden / 16)
    sizes = {
        "ssm_state": config.get("state_size", 16),
        "ssm_inner": inner,
        "ssm_conv": config.get("conv_kernel", 4),
        "ssm_dt_rank": rank,
    }
    return sizes if all(_dim(v) and v > 0 for v in sizes.values()) else {}


def _arch_from_sizes(config: Mapping[str, Any], model_id: str, source: str = "config.json") -> ModelArch | None:
    """Map a transformers `config.json` dict (incl. nested `text_config`, T5 and GPT-2 keys) to a ModelArch.

    Vision-language models: the language model from `text_config` (`llm_config` in InternVL's own configs), the
    vision tower and projector from `vision_config` (`vision_tower`). A `model_type` with no dedicated mapping here
    is read generically from its sizes (hidden, layers, heads, kv heads, intermediate, vocab, experts, state
    sizes) and marked `approximate`."""
    outer_type = str(config.get("model_type", "")).lower()
    vision = config.get("vision_config")
    text = config.get("text_config") or config.get("llm_config")
    if isinstance(text, dict) and (
        _first(config, "hidden_size", "n_embd", "n_embed", "d_model") is None
        # PaliGemma's outer `hidden_size` is the projector's width, not its language model's (transformers 5.24
        # models/paligemma/configuration_paligemma.py `PaliGemmaConfig`): the outer config writes no depth or no heads
        or _first(config, "num_hidden_layers", "n_layer", "num_layers", "n_layers") is None
        or _first(config, "num_attention_heads", "n_head", "num_heads", "n_heads") is None
    ):
        config = {**config, **text}  # multimodal (Gemma-3, Llava, Qwen3-VL, Mllama, InternVL): the LM's shapes
    # a composite encoder-decoder, of no sizes of its own (transformers 5.24 models/encoder_decoder/
    # configuration_encoder_decoder.py `EncoderDecoderConfig`, models/vision_encoder_decoder `…Config`,
    # models/t5gemma2 `T5Gemma2Config`: `encoder` and `decoder` sub-configs; models/musicgen `MusicgenConfig`:
    # `text_encoder`, `audio_encoder`, `decoder`): the decoder's sizes, the encoder's depth (T5Gemma2's encoder
    # holds a text_config)
    encoder = _first(config, "encoder", "text_encoder")
    composite = isinstance(encoder, dict) and isinstance(config.get("decoder"), dict)
    if composite and _first(config, "hidden_size", "n_embd", "n_embed", "d_model") is None:
        encoder = encoder["text_config"] if isinstance(encoder.get("text_config"), dict) else encoder
        config = {**config, **config["decoder"], "model_type": outer_type}
    else:
        composite = False
    if isinstance(config.get("global_config"), dict) and _first(config, "hidden_size", "d_model") is None:
        # BLT (transformers 5.24 models/blt/configuration_blt.py `BltConfig`: byte-level local encoder and decoder
        # around a global transformer over patches, and an entropy patcher): the global transformer's sizes
        config = {**config, **config["global_config"], "model_type": outer_type}
    model_type = str(config.get("model_type") or outer_type).lower()

    # XLM writes its width as `emb_dim` (transformers 5.24 models/xlm/configuration_xlm.py `attribute_map`);
    # Kosmos-2's and Kosmos-2.5's text decoders as `embed_dim`, their depth as `layers` and their heads as
    # `attention_heads` (models/kosmos2/configuration_kosmos2.py `Kosmos2TextConfig`,
    # models/kosmos2_5/configuration_kosmos2_5.py `Kosmos2_5TextConfig`)
    hidden = _first(config, "hidden_size", "n_embd", "n_embed", "d_model", "dim", "d_embed", "emb_dim", "embed_dim")
    heads = _first(
        config,
        "num_attention_heads",
        "n_head",
        "num_heads",
        "encoder_attention_heads",
        "n_heads",
        "num_encoder_attention_heads",
        "decoder_attention_heads",  # a decoder alone (TrOCR, models/trocr/configuration_trocr.py)
        "attention_heads",
    )
    # FSMT writes its vocabularies as src_vocab_size / tgt_vocab_size (models/fsmt/configuration_fsmt.py)
    vocab = _first(config, "vocab_size", "padded_vocab_size", "tgt_vocab_size")
    # an encoder-decoder that writes its stacks' depths apart (BART-style `encoder_layers` / `decoder_layers`:
    # Blenderbot, PLBart, MVP, FSMT, Whisper; ProphetNet's `num_encoder_layers` / `num_decoder_layers`)
    stacks = (
        _first(config, "encoder_layers", "num_encoder_layers"),
        _first(config, "decoder_layers", "num_decoder_layers"),
    )
    approximate = _generic_notes(config, model_type)
    if heads is None and approximate and _dim(hidden) and hidden:
        heads = max(1, hidden // _GENERIC_HEAD_DIM)  # attention-free (Mamba, RWKV): heads only size the estimate
        approximate += "; no attention heads in the config: sized as heads of 128"
    if model_type in _ENCODER_DECODERS:
        block = "encoder-decoder"
        encoder_layers = _first(config, "num_layers", "encoder_layers")
        layers = _first(config, "num_decoder_layers", "decoder_layers", "num_layers")
    elif composite:
        block = "encoder-decoder"
        encoder_layers = _first(encoder, "num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "n_layers")
        layers = _first(config, "num_hidden_layers", "n_layer", "num_layers", "decoder_layers", "n_layers")
    elif (
        model_type not in _ENCODERS
        and all(_dim(v) and v > 0 for v in stacks)
        and _first(config, "num_hidden_layers", "n_layer", "num_layers", "n_layers") is None
    ):
        block = "encoder-decoder"
        encoder_layers, layers = stacks
    else:
        block = "encoder" if model_type in _ENCODERS else "decoder"
        encoder_layers = 0
        layers = _first(config, "num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "layers")
        pattern = inventory.nemotron_h_layers(config) if model_type == "nemotron_h" else None
        if pattern:
            # Nemotron-H writes its layers as a list of kinds, one per layer, or as `hybrid_override_pattern`, one
            # character per layer (transformers 5.24 models/nemotron_h/configuration_nemotron_h.py
            # `layers_block_type`; `num_hidden_layers` is its length, whatever the config.json writes)
            layers = len(pattern)
    if not all(_dim(v) and v > 0 for v in (hidden, heads, vocab, layers)):
        return None
    intermediate = _first(
        config,
        "intermediate_size",
        "n_inner",
        "d_ff",
        "ffn_dim",
        "encoder_ffn_dim",
        "ffn_hidden_size",
        "block_ff_dim",
        "decoder_ffn_dim",
    )
    if isinstance(intermediate, list) and intermediate and all(_dim(w) for w in intermediate):
        # one MLP width per layer (Gemma-3n, transformers 5.24 models/gemma3n/modeling_gemma3n.py `Gemma3nTextMLP`:
        # layer i is `intermediate_size[i]` wide): the block's shapes take the mean (the count is the inventory's)
        intermediate = round(sum(intermediate) / len(intermediate))
    expand = config.get("expand")
    if (
        (not _dim(intermediate) or not intermediate)
        and isinstance(expand, (int, float))
        and 0 < expand < 64
        and _first(config, "num_attention_heads", "n_head", "num_heads") is None
    ):
        # attention-free Mamba: a layer is in_proj (h → 2·expand·h) + out_proj (expand·h → h) = 3·expand·h²
        # (transformers modeling_mamba.py `MambaMixer`); the generic layer (4·h² attention + 3·h·I gated MLP) gets
        # the MLP width that gives it as many weights
        intermediate = max(1, int((3 * expand - 4) * hidden / 3))
    elif intermediate is None:
        intermediate = 4 * hidden
    if not _dim(intermediate) or intermediate <= 0:
        return None  # present but not a width ("big", -1, 1.5)
    if model_type == "qwen":
        # Qwen-1 `QWenMLP`: w1 and w2 are hidden × intermediate_size / 2, c_proj the way back (REMOTE_CODE_WRITTEN)
        intermediate //= 2

    feed_forward = str(config.get("feed_forward_proj", "")).lower()
    if feed_forward:
        mlp = {"gated-gelu": "geglu", "gated-silu": "swiglu", "relu": "relu"}.get(feed_forward, "gelu")
    elif model_type in _GEGLU:
        mlp = "geglu"
    elif model_type in _UNGATED_GELU or model_type in _ENCODERS:
        mlp = "gelu"
    elif model_type in _RELU or model_type in UNGATED_UP_DOWN:
        mlp = "relu"
    else:
        mlp = "swiglu"
    norm = "layernorm" if model_type in _LAYERNORM or model_type in _ENCODERS else "rmsnorm"
    biased = model_type in _BIASED or model_type in _ENCODERS
    if model_type == "falcon":
        # Falcon's linears are biased only where `bias` says (default false: transformers 5.24
        # models/falcon/configuration_falcon.py; modeling_falcon.py `FalconAttention`, `FalconMLP`: bias=config.bias)
        biased = bool(config.get("bias"))

    kv_lora_rank = config.get("kv_lora_rank")
    head_dim = _first(config, "head_dim", "d_kv", "head_size")
    kv_heads = _first(config, "num_key_value_heads", "num_kv_heads", "n_kv_heads")
    if kv_lora_rank:  # DeepSeek MLA: head_dim is the value heads' width (`ModelArch.mla_head_dims`)
        head_dim = _first(config, "v_head_dim", "qk_nope_head_dim") or head_dim
        kv_heads = heads
    if model_type == "falcon" and not config.get("new_decoder_architecture"):
        # Falcon's num_kv_heads is read only by the new (Falcon-40B) decoder architecture; otherwise one K/V head
        # when multi_query (the default), one per query head when not (transformers 5.24
        # models/falcon/modeling_falcon.py `FalconAttention.__init__`: qkv_out_dim hidden + 2·head_dim or 3·hidden)
        kv_heads = 1 if config.get("multi_query", True) else heads
    if model_type == "chatglm" and config.get("multi_query_attention") and not kv_heads:
        kv_heads = config.get("multi_query_group_num")  # modeling_chatglm.py `SelfAttention` (REMOTE_CODE_WRITTEN)
    if model_type == "gpt_bigcode" and config.get("multi_query", True) and not kv_heads:
        # GPT-BigCode (StarCoder, SantaCoder) is multi-query unless told otherwise: one K/V head, c_attn is
        # h × (h + 2·head_dim) (transformers 5.24 models/gpt_bigcode/configuration_gpt_bigcode.py `multi_query =
        # True`, `num_key_value_heads = 1 if self.multi_query`; modeling_gpt_bigcode.py GPTBigCodeAttention)
        kv_heads = 1

    num_experts = _first(config, "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts") or 0
    shared_intermediate = config.get("shared_expert_intermediate_size")
    shared_experts = config.get("n_shared_experts") or (1 if shared_intermediate else 0)
    if model_type.startswith("llama4") and num_experts:
        # transformers modeling_llama4.py `Llama4TextMoe`: every MoE layer has one shared expert of the experts' width
        shared_experts, shared_intermediate = 1, intermediate
    moe_intermediate = config.get("moe_intermediate_size") or (intermediate if num_experts else None)
    if model_type.startswith("llama4") and num_experts and _dim(config.get("intermediate_size_mlp")):
        # the dense layers between MoE layers are `intermediate_size_mlp` wide, the experts `intermediate_size`
        # (transformers 5.24 models/llama4/modeling_llama4.py `Llama4TextDecoderLayer`: Llama4TextMLP(config,
        # intermediate_size=config.intermediate_size_mlp) when the layer is not a MoE layer)
        intermediate = config["intermediate_size_mlp"]
    tied = config.get("tie_word_embeddings")
    shapes = (
        intermediate,
        head_dim,
        kv_heads,
        num_experts,
        shared_intermediate,
        shared_experts,
        kv_lora_rank,
        *(config.get(k) for k in MLA_SIZES),
        encoder_layers,
        config.get("moe_intermediate_size"),
        config.get("first_k_dense_replace"),
        _first(config, "num_experts_per_tok", "experts_per_token", "moe_topk"),
        _first(config, "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
    )
    if not all(v is None or _dim(v) for v in shapes):
        return None
    try:
        return ModelArch(
            id=model_id,
            family=model_type or "unknown",
            block=block,
            mlp=mlp,
            norm=norm,
            hidden=hidden,
            layers=layers,
            encoder_layers=encoder_layers or 0,
            heads=heads,
            kv_heads=kv_heads if kv_heads and kv_heads != heads else None,
            head_dim=head_dim if head_dim and head_dim != hidden // heads else None,
            intermediate=intermediate,
            vocab=vocab,
            tied_embeddings=True if tied is None else bool(tied),  # transformers' PretrainedConfig default
            attn_bias=bool(
                _first(config, "attention_bias", "qkv_bias", "use_bias", "add_qkv_bias")
                or (model_type in QKV_BIAS_ONLY and model_type != "chatglm")
                or biased
            ),
            mlp_bias=bool(config.get("mlp_bias") or biased),
            num_experts=num_experts,
            experts_per_token=_first(config, "num_experts_per_tok", "experts_per_token", "moe_topk") or 0,
            moe_intermediate=moe_intermediate,
            shared_experts=shared_experts,
            shared_expert_intermediate=shared_intermediate,
            dense_layers=_dense_layers(config, layers, num_experts),
            kv_lora_rank=kv_lora_rank,
            **({k: config.get(k) for k in MLA_SIZES} if kv_lora_rank else {}),
            max_position=_first(config, "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
            stored_dtype=_dtype(config),
            source=source,
            approximate=approximate,
            **(_vision_tower(vision, hidden, outer_type, config) if isinstance(vision, dict) else {}),
        )
    except ValidationError:  # a field of the wrong type (text where a number goes)
        return None


def _dense_layers(config: Mapping[str, Any], layers: int, num_experts: int) -> int:
    """Layers with a dense MLP in an MoE model: DeepSeek's leading `first_k_dense_replace`, or every layer but
    one in `period` (Jamba `expert_layer_period`, Llama-4 `interleave_moe_layer_step`, Qwen2-MoE
    `decoder_sparse_step`), or those Llama-4's `moe_layers` leaves out — only their number matters for the weights.
    Qwen2-MoE / Qwen3-MoE and the families
    built on them also name dense layers in `mlp_only_layers` (transformers 5.24 models/qwen2_moe/
    modeling_qwen2_moe.py, models/qwen3_moe/modeling_qwen3_moe.py `…DecoderLayer`: a layer is MoE when
    `layer_idx not in config.mlp_only_layers` and `(layer_idx + 1) % config.decoder_sparse_step == 0`)."""
    only = config.get("mlp_only_layers")
    step = config.get("decoder_sparse_step")
    if num_experts and isinstance(only, list) and all(_dim(i) for i in only) and (step is None or _dim(step)):
        step = step or 1
        return sum(1 for i in range(layers) if i in only or (i + 1) % step != 0)
    listed = config.get("moe_layers")
    if num_experts and isinstance(listed, list) and all(_dim(i) for i in listed):
        # Llama-4's MoE layers where config.json lists them: a layer is MoE when `layer_idx in config.moe_layers`,
        # which overrides `interleave_moe_layer_step` (transformers 5.24 models/llama4/modeling_llama4.py
        # `Llama4TextDecoderLayer`, configuration_llama4.py `__post_init__`)
        return layers - len(set(listed) & set(range(layers)))
    # the leading dense layers: DeepSeek's `first_k_dense_replace`; LFM2-MoE's and AFMoE's `num_dense_layers`
    # (transformers 5.24 models/lfm2_moe/modeling_lfm2_moe.py `Lfm2MoeDecoderLayer`: a dense `Lfm2MoeMLP` where
    # `layer_idx < config.num_dense_layers`; models/afmoe/modeling_afmoe.py: `layer_idx >= config.num_dense_layers`)
    first = _first(config, "first_k_dense_replace", "num_dense_layers") or 0
    period = _first(config, "expert_layer_period", "interleave_moe_layer_step", "decoder_sparse_step")
    if num_experts and _dim(period) and period > 1:
        return layers - layers // period
    return first if _dim(first) and first <= layers else 0


# model_type values the mapping above knows the structure of (attention + MLP blocks as transformers builds
# them); anything else is estimated from its sizes alone and marked approximate.
_DEDICATED = (
    _ENCODERS
    | _ENCODER_DECODERS
    | _GEGLU
    | _UNGATED_GELU
    | _RELU
    | _LAYERNORM
    | QKV_BIAS_ONLY
    | frozenset(
        {
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen3",
            "qwen3_moe",
            "qwen3_vl",
            "qwen3_vl_text",
            "qwen2_5_vl_text",
            "qwen2_vl_text",
            "phi3",
            "deepseek_v2",
            "deepseek_v3",
            "gpt_oss",
            "olmo2",
            "olmo3",
            "gemma3",
            "llava",
            "mllama",
            "mllama_text_model",
            "internvl",
            "internvl_chat",
            "granite",
            "smollm3",
            "mistral3",
            "llama4",
            "llama4_text",
        }
    )
)
_GENERIC_HEAD_DIM = 128
# Keys that say a layer is not attention + MLP: recurrent / state-space mixers (Mamba, Jamba, Falcon-H1,
# Nemotron-H, Qwen3-Next's linear attention, LFM2's short convolutions).
_STATE_KEYS = (
    "state_size",
    "ssm_state_size",
    "mamba_d_state",
    "d_state",
    "linear_num_value_heads",
    "mamba_n_heads",
    "conv_L_cache",
    "layer_types",
    "hybrid_override_pattern",
    "attn_layer_period",
)


# Remote-code model types (`auto_map`, never run) whose layers are written here from their published modeling file:
# their counts are by construction, not approximate.
REMOTE_CODE_WRITTEN = {
    # Qwen/Qwen-7B modeling_qwen.py (Hugging Face Hub, QwenLM): `QWenAttention` c_attn hidden → 3·hidden with a bias,
    # c_proj without (`no_bias`); `QWenMLP` `ff_dim_in = config.intermediate_size // 2`, w1 and w2 hidden → ff_dim_in,
    # c_proj ff_dim_in → hidden, SwiGLU; RMSNorm ln_1, ln_2, ln_f; wte and lm_head untied
    "qwen": "Qwen-1's modeling_qwen.py (QWenAttention with one q|k|v `c_attn`, QWenMLP with intermediate_size / 2)",
    # baichuan-inc/Baichuan2-7B-Base modeling_baichuan.py (Hugging Face Hub): `Attention` W_pack hidden → 3·hidden and
    # o_proj, both without bias; `MLP` gate/up/down of intermediate_size, SwiGLU, no biases; RMSNorm; `NormHead`
    # lm_head vocab × hidden, untied (13B: the same layers, ALiBi in place of RoPE)
    "baichuan": "Baichuan's modeling_baichuan.py (W_pack, o_proj, gated MLP, NormHead)",
    # THUDM/chatglm3-6b modeling_chatglm.py (Hugging Face Hub): `SelfAttention` query_key_value hidden →
    # heads·kv_channels + 2·multi_query_group_num·kv_channels with a bias (add_qkv_bias), dense without
    # (add_bias_linear false); `MLP` dense_h_to_4h hidden → 2·ffn_hidden_size (SwiGLU), dense_4h_to_h back; RMSNorm;
    # output_layer untied
    "chatglm": "ChatGLM's modeling_chatglm.py (grouped query_key_value, SwiGLU dense_h_to_4h of 2 × ffn_hidden_size)",
}


GENERIC_NOTE = "every layer sized as attention"  # how the generic reading's notes begin (`_generic_notes`)


def _generic_notes(config: Mapping[str, Any], model_type: str) -> str:
    """ "" for a model_type with a dedicated mapping; else what the generic reading assumed."""
    if model_type in _DEDICATED or model_type in REMOTE_CODE_WRITTEN:
        return ""
    moe = _first(config, "num_local_experts", "n_routed_experts", "num_experts")
    notes = [f"{GENERIC_NOTE} + {'an MoE' if moe else 'a gated'} MLP"]
    if any(config.get(k) is not None for k in _STATE_KEYS):
        notes.append("state-space / recurrent layers counted as attention layers of the same width")
    return "; ".join(notes)


def _vision_tower(
    vision: Mapping[str, Any], lm_hidden: int, outer_type: str = "", config: Mapping[str, Any] | None = None
) -> dict:
    """Vision encoder + projector sizes from a VLM's `vision_config`, as transformers 5.24 builds them (ViT blocks:
    q, k, v, o + an MLP, with biases; patch embedding; projector to the LM width):
    - SigLIP / CLIP (models/siglip/modeling_siglip.py, models/clip/modeling_clip.py): Conv2d patch embedding (SigLIP
      with a bias), learned position embeddings (CLIP: one more for its class token, and `pre_layrnorm`), LayerNorm
      blocks, a final `post_layernorm`; Gemma-3's projector (models/gemma3/modeling_gemma3.py
      `Gemma3MultiModalProjector`) is an RMSNorm and one vision × text matrix after a 4 × 4 average pool,
      LLaVA's (models/llava/modeling_llava.py `LlavaMultiModalProjector`) two biased linears;
    - Qwen2-VL (models/qwen2_vl: LayerNorm blocks, ungated MLP, `PatchMerger` LayerNorm + two biased linears over
      2 × 2 merged patches), Qwen2.5-VL (models/qwen2_5_vl: RMSNorm blocks, gated SiLU MLP with biases, an RMSNorm
      merger), Qwen3-VL (models/qwen3_vl: a biased Conv3d, learned positions `num_position_embeddings`, one merger
      and one more per `deepstack_visual_indexes` entry, those normalising after the 2 × 2 shuffle);
    - Mllama (`num_global_layers`, tiles), InternVL (pixel shuffle 0.5) from the generic ViT block."""
    d = _first(vision, "embed_dim", "hidden_size", "width", "vision_hidden_size")
    if vision.get("embed_dim") and vision.get("hidden_size") and vision.get("depth"):
        d = vision["embed_dim"]  # Qwen2-VL: hidden_size is the merger's output (the LM width)
    layers = _first(vision, "depth", "num_hidden_layers", "num_layers", "layers")
    if not (_dim(d) and _dim(layers) and d and layers):
        return {}
    layers += vision.get("num_global_layers") or 0  # Mllama: a second, global encoder
    inter = _first(vision, "intermediate_size")
    ratio = vision.get("mlp_ratio")
    if not _dim(inter) or not inter:
        inter = int(d * ratio) if isinstance(ratio, (int, float)) and 0 < ratio < 64 else 4 * d
    vtype = str(vision.get("model_type", "")).lower()
    gated = str(vision.get("hidden_act", "")).lower() == "silu"  # Qwen2.5-VL's SwiGLU vision MLP
    patch = _first(vision, "patch_size") or 14
    channels = vision.get("in_channels") or vision.get("in_chans") or vision.get("num_channels") or 3
    temporal = vision.get("temporal_patch_size") or 1
    merge = vision.get("spatial_merge_size") or (
        2 if vision.get("downsample_ratio") or vision.get("pixel_shuffle_ratio") else 1
    )
    heads = _first(vision, "num_heads", "num_attention_heads") or 0
    if not all(_dim(v) and v for v in (patch, channels, temporal, merge)) or not _dim(heads):
        return {}
    image = _first(vision, "image_size")
    if isinstance(image, list):
        image = image[0] if image and _dim(image[0]) else None
    if _dim(image) and image:
        grid = (image // patch) ** 2
        patches = grid * (vision.get("max_num_tiles") or 1)
    else:  # dynamic resolution (Qwen-VL): LLaMA-Factory's default image_max_pixels = 768 × 768
        grid = 0
        patches = (768 * 768) // (patch * patch)
    rms = outer_type == "qwen2_5_vl" or vtype == "qwen2_5_vl"  # Qwen2.5-VL: RMSNorm, no biases in the norms
    norm = d if rms else 2 * d
    mlp = (3 * d * inter + 2 * inter + d) if gated else (2 * d * inter + inter + d)
    block = 4 * d * d + 4 * d + mlp + 2 * norm
    embed = channels * temporal * patch * patch * d
    merged = d * merge * merge
    out = _first(vision, "out_hidden_size") or lm_hidden
    extra = 0
    if outer_type == "gemma3" or vtype.startswith("siglip"):
        embed += d + grid * d  # conv bias, learned positions
        extra += 2 * d  # post_layernorm
        projector = d * out + d if outer_type == "gemma3" else d * out + out * out
    elif vtype.startswith("clip"):
        embed += d + (grid + 1) * d  # class token, positions (+1 for it)
        extra += 4 * d  # pre_layrnorm, post_layernorm
        projector = d * out + out + out * out + out  # LLaVA: linear_1, linear_2 with biases
    elif outer_type.startswith(("qwen2_vl", "qwen2_5_vl", "qwen3_vl")) and merge > 1:
        projector = norm + merged * merged + merged + merged * out + out
        if outer_type.startswith("qwen3_vl"):
            embed += d + (_first(vision, "num_position_embeddings") or 0) * d
            deepstack = vision.get("deepstack_visual_indexes") or []
            n = len(deepstack) if isinstance(deepstack, list) else 0
            projector += n * (2 * merged + merged * merged + merged + merged * out + out)
    else:
        projector = merged * merged + merged * out if merge > 1 else d * out + out * out
    tokens = config.get("mm_tokens_per_image") if config else None
    if not (_dim(tokens) and tokens):
        tokens = patches // (merge * merge)
    return {
        "vision_params": layers * block + embed + extra + projector,
        "vision_hidden": d,
        "vision_layers": layers,
        "vision_intermediate": inter,
        "image_patches": patches,
        "vision_heads": heads,
        "vision_patch": patch,
        "image_tokens": tokens,
        "vision_gated": gated,
    }


# ----------------------------------------------------------------------------------------------- parameters


def _linear_mlp(hidden: int, intermediate: int, gated: bool, bias: bool) -> int:
    """Weights (+ biases) of one MLP: gated = gate/up/down (3 matrices), ungated = fc1/fc2."""
    if gated:
        return 3 * hidden * intermediate + (2 * intermediate + hidden if bias else 0)
    return 2 * hidden * intermediate + (intermediate + hidden if bias else 0)


def _attention(arch: ModelArch) -> int:
    """One self-attention block: q, k, v, o (+ biases), or DeepSeek MLA's low-rank projections."""
    h, heads = arch.hidden, arch.heads
    if arch.kv_lora_rank:
        # transformers 5.24 models/deepseek_v3/modeling_deepseek_v3.py `DeepseekV3Attention.__init__`
        rank, (nope, rope, v) = arch.kv_lora_rank, arch.mla_head_dims
        qr = arch.q_lora_rank
        q = h * qr + qr + qr * heads * (nope + rope) if qr else h * heads * (nope + rope)  # q_a + q_a_layernorm + q_b
        kv_down = h * (rank + rope) + rank  # kv_a_proj_with_mqa + kv_a_layernorm
        kv_up = rank * heads * (nope + v)  # kv_b_proj: k_nope and v per head
        return q + kv_down + kv_up + heads * v * h
    weights = 2 * h * arch.q_dim + 2 * h * arch.kv_dim
    if not arch.attn_bias:
        return weights
    out_bias = 0 if arch.family in QKV_BIAS_ONLY else h
    return weights + arch.q_dim + 2 * arch.kv_dim + out_bias


def _moe(arch: ModelArch) -> int:
    """One MoE MLP: routed experts + router (+ router bias when experts carry biases) + shared experts."""
    h = arch.hidden
    expert_size = arch.moe_intermediate or arch.intermediate
    experts = arch.num_experts * _linear_mlp(h, expert_size, True, arch.mlp_bias)
    router = h * arch.num_experts + (arch.num_experts if arch.mlp_bias else 0)
    shared_size = arch.shared_expert_intermediate or expert_size
    return experts + router + arch.shared_experts * _linear_mlp(h, shared_size, True, False)


def _encoder_decoder(arch: ModelArch) -> int:
    """T5-style: shared embedding, encoder (self-attn + MLP + 2 norms), decoder (+ cross-attn, 3 norms)."""
    h = arch.hidden
    attention = 4 * h * arch.q_dim
    mlp = _linear_mlp(h, arch.intermediate, arch.mlp in ("swiglu", "geglu"), arch.mlp_bias)
    encoder = arch.encoder_layers * (attention + mlp + 2 * h)
    decoder = arch.layers * (2 * attention + mlp + 3 * h)
    relative_bias = 2 * _T5_RELATIVE_BUCKETS * arch.heads
    lm_head = 0 if arch.tied_embeddings else arch.vocab * h
    return arch.vocab * h + encoder + decoder + 2 * h + relative_bias + lm_head


def norms_per_layer(arch: ModelArch) -> int:
    """Normalisation layers per block (1 for parallel phi/falcon blocks, 4 for Gemma-2/3, else 2)."""
    return _NORMS_PER_LAYER.get(arch.family, 2)


def param_count(arch: ModelArch) -> int:
    """Total parameters: what transformers builds (`params_total`, from the bundled inventories) where known, else
    implied by the shapes (embeddings, attention, dense/MoE MLPs, norms, lm_head)."""
    if arch.params_total:
        return arch.params_total
    if arch.block == "encoder-decoder":
        return _encoder_decoder(arch)
    h = arch.hidden
    norm = h if arch.norm == "rmsnorm" else 2 * h
    gated = arch.mlp in ("swiglu", "geglu")
    embeddings = arch.vocab * h
    if arch.family in LEARNED_POSITIONS and arch.max_position:
        embeddings += (arch.max_position + LEARNED_POSITIONS[arch.family]) * h
    n_norms = norms_per_layer(arch)
    dense_layers = arch.dense_layers if arch.is_moe else arch.layers
    moe_layers = arch.layers - dense_layers
    total = (
        embeddings
        + arch.layers * (_attention(arch) + n_norms * norm)
        + dense_layers * _linear_mlp(h, arch.intermediate, gated, arch.mlp_bias)
        + moe_layers * (_moe(arch) if arch.is_moe else 0)
        + norm  # final norm (embedding LayerNorm for encoders)
        + (norm if arch.family in EMBEDDING_NORM else 0)
    )
    if arch.block == "encoder" and arch.family in ("bert",):
        total += h * h + h  # BERT pooler
    if not arch.tied_embeddings and arch.block == "decoder":
        total += arch.vocab * h + (arch.vocab if arch.family == "phi" else 0)  # lm_head (phi-2 has a bias)
    return total
