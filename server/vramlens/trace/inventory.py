"""Exact parameter inventories, built where transformers is importable (the trace interpreter), cached.

`exact(config)` builds the model of a `config.json` dict with transformers' own classes on the `meta` device (no
memory, no weights; `trust_remote_code` is never set, so a model_type transformers does not ship is refused) and
returns its parameter count and layers by kind. Results are cached under the user's cache folder
(`file_access.user_cache_home()/vramlens/inventories/`) by the config's hash and the transformers version, so a
config is built once. `measure` is what scripts/dump_model_inventories.py records from its tiny builds for the
bundled inventories (knowledge/inventory.py), so the two agree on what a kind is.

    python -m vramlens.trace.inventory path/to/config.json
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from vramlens import file_access

INDEX = re.compile(r"\.(\d+)(?=\.)")
# module class name, less its model's prefix (`_own_name`) -> parameter kind, first match from the parameter's own
# module upwards
_KINDS = (
    (re.compile(r"Mamba2|Mamba|SSM|Ssm|S4"), "state-space"),
    (re.compile(r"DeltaNet|DeltaAttention|LinearAttention|Linear_?Attn|Recurrent|Lightning"), "linear-attention"),
    (re.compile(r"ShortConv"), "short-conv"),
    # not the forget gate of a linear attention's decay (transformers 5.24 models/kimi_linear/modeling_kimi_linear.py
    # `KimiLinearForgetGate`, held by `KimiLinearDeltaAttention`): its owner says what it is for
    (re.compile(r"Router|(?<!Forget)Gate$|TopK"), "moe-router"),
    (re.compile(r"Attention|Attn"), "attention"),
    (re.compile(r"MoE|Moe|Sparse"), "moe-experts"),
    (re.compile(r"MLP|FeedForward|FFN|Mlp|Ffn|DenseActDense|DenseGatedActDense|Intermediate|Output$"), "mlp"),
    (re.compile(r"Embedding"), "embedding"),
    (re.compile(r"Norm"), "norm"),
)
# a model's routed experts: every module inside them is one of them, whatever its own class (transformers 5.24
# models/nllb_moe/modeling_nllb_moe.py `NllbMoeExperts`, a ModuleDict of `NllbMoeDenseActDense`)
_EXPERTS = re.compile(r"Experts")


def _layers_of(model, only: str | None = None):
    """(prefix, ModuleList) of the largest stack of blocks (of equal lengths, the shortest name, then the first);
    `only`: that ModuleList whatever its length (None where the model has none of that name)."""
    import torch

    if only is not None:
        mod = dict(model.named_modules()).get(only)
        return (only, mod) if isinstance(mod, torch.nn.ModuleList) and len(mod) else None
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) and not re.search(r"expert", name, re.IGNORECASE):
            if best is None or len(mod) > len(best[1]) or (len(mod) == len(best[1]) and len(name) < len(best[0])):
                best = (name, mod)
    return best


def measure(model, cfg, stack_name: str | None = None) -> tuple[dict, dict]:
    """(quantities, index sets): dims and occurrence counts of every pattern, layers of every kind (those of the
    largest stack of blocks, or of the ModuleList `stack_name`)."""
    modules = dict(model.named_modules())
    q: dict = {}
    where: dict = collections.defaultdict(set)
    kinds_of: dict[str, str] = {}
    stack = _layers_of(model, stack_name)
    prefix = stack[0] + "." if stack else None
    layer_kinds: dict[int, set] = collections.defaultdict(set)
    shapes = collections.defaultdict(set)
    for name, p in model.named_parameters():
        shapes[INDEX.sub(".{i}", name)].add(tuple(p.shape))
    for name, p in model.named_parameters():
        pattern = _pattern(name, modules, len(shapes[INDEX.sub(".{i}", name)]) > 1)
        key = ("n", pattern)
        q[key] = q.get(key, 0) + 1
        q[("t", pattern)] = q.get(("t", pattern), 0) + p.numel()  # the total, where occurrences differ in shape
        for axis, size in enumerate(p.shape):
            dk = ("d", pattern, axis)
            if q.setdefault(dk, size) != size:
                q[dk] = None  # differs between occurrences
        q.setdefault(("rank", pattern), p.dim())
        if q[("rank", pattern)] != p.dim():
            q[("rank", pattern)] = None
        # a layer's kind is its own parameters' (one pattern may name attention in one layer and a linear attention
        # in another: transformers 5.24 models/kimi_linear/modeling_kimi_linear.py `KimiLinearDecoderLayer.self_attn`)
        kind = _kind(name, modules)
        kinds_of.setdefault(pattern, kind)
        if prefix and name.startswith(prefix):
            i = int(name[len(prefix) :].split(".")[0])
            where[pattern].add(i)
            if kind in ("attention", "state-space", "linear-attention", "short-conv", "moe-experts", "mlp"):
                layer_kinds[i].add(_layer_kind(kind, p, i, cfg))
    for kinds in layer_kinds.values():
        if "moe fused" in kinds:
            kinds.discard("moe per-expert")
        if kinds & {"moe fused", "moe per-expert"}:
            kinds.discard("dense mlp")  # shared experts are MLPs inside the MoE block
    for i in range(len(stack[1]) if stack else 0):
        for k in layer_kinds[i] or {"other"}:
            q[("k", k)] = q.get(("k", k), 0) + 1
            where[("k", k)].add(i)
    return q, {
        "kinds": kinds_of,
        "where": where,
        "layers": len(stack[1]) if stack else 0,
        "stack": stack[0] if stack else None,
    }


def _pattern(name: str, modules: dict, mixed: bool) -> str:
    """The parameter's name with its indices as {i}. Where that pattern would merge parameters of different shapes
    (`mixed`), the positions in a fixed recipe of plain torch layers stay as they are: transformers 5.24
    models/ctrl/modeling_ctrl.py `point_wise_feed_forward_network` is Sequential(Linear(d, dff), ReLU(),
    Linear(dff, d)), whose `ffn.0` and `ffn.2` are two parameters, not two occurrences of one."""
    import torch

    pattern = INDEX.sub(".{i}", name)
    if not mixed:
        return pattern
    parts = name.split(".")
    out = list(parts)
    for n in range(1, len(parts) - 1):
        owner = modules.get(".".join(parts[:n]))
        if parts[n].isdigit() and not (
            isinstance(owner, torch.nn.Sequential)
            and all(type(c).__module__.startswith("torch.") for c in owner.children())
        ):
            out[n] = "{i}"
    return ".".join(out)


def _kind(name: str, modules: dict) -> str:
    parts = name.split(".")[:-1]
    own = _own_name(type(modules[".".join(parts)]))
    if parts and parts[-1] in ("lm_head", "embed_out", "output_projection"):
        return "lm-head"
    if own.endswith(("Embedding", "Embeddings")):
        return "embedding"
    if "Norm" in own:
        return "norm"
    # the parameter's own module and its owners, nearest first; a plain torch layer is left out: its owner says what
    # it is for
    owners = [
        mod
        for n in range(len(parts), -1, -1)
        if (mod := modules.get(".".join(parts[:n]))) is not None and not type(mod).__module__.startswith("torch.")
    ]
    names = [_own_name(type(mod)) for mod in owners]
    if any(_EXPERTS.search(own_name) for own_name in names):
        return "moe-experts"
    for mod, own_name in zip(owners, names):
        if "time_decay" in mod._parameters:
            # RWKV's time mixing, named attention (transformers 5.24 models/rwkv/modeling_rwkv.py `RwkvSelfAttention`):
            # a sum over past tokens decayed per channel (`time_decay`, `time_first`), linear attention
            return "linear-attention"
        for pattern, kind in _KINDS:
            if pattern.search(own_name):
                return kind
    # a selective-scan mixer under another name (Mamba's `MambaMixer`, Falcon-H1's `FalconH1Mixer`); after the
    # names, as a gated delta rule's decay is an `A_log` too (models/qwen3_next/modeling_qwen3_next.py
    # `Qwen3NextGatedDeltaNet`, models/kimi_linear/modeling_kimi_linear.py `KimiLinearForgetGate` in
    # `KimiLinearDeltaAttention`)
    if any("A_log" in mod._parameters for mod in owners):
        return "state-space"
    return "other"


def _own_name(cls: type) -> str:
    """A transformers class's name less the class-name prefix of its model (the longest of its package's config
    classes' names less "Config"): the rest names what the module is, the prefix only whose it is. The model's own
    name may read as a kind that its modules are not: models/qwen2_moe/modeling_qwen2_moe.py `Qwen2MoeMLP` is the
    dense MLP of its `mlp_only_layers` and its shared expert, models/recurrent_gemma/modeling_recurrent_gemma.py
    `RecurrentGemmaAttention` is attention, models/kimi_linear/modeling_kimi_linear.py `KimiLinearAttention` is
    its MLA attention and `KimiLinearDeltaAttention` its linear attention (transformers 5.24)."""
    name = cls.__name__
    prefixes = _config_prefixes().get(cls.__module__.rpartition(".")[0], ())
    prefix = max((p for p in prefixes if name.startswith(p) and name != p), key=len, default="")
    return name[len(prefix) :]


@functools.cache
def _config_prefixes() -> dict[str, tuple[str, ...]]:
    """Package of a transformers model (`transformers.models.qwen2_moe`) -> the names of its config classes less
    "Config" (`Qwen2Moe`), from transformers' own model_type -> config class and model_type -> package tables."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name

    out: dict[str, tuple[str, ...]] = {}
    for model_type, config_name in CONFIG_MAPPING_NAMES.items():
        package = f"transformers.models.{model_type_to_module_name(model_type)}"
        out[package] = (*out.get(package, ()), config_name.removesuffix("Config"))
    return out


def _layer_kind(kind: str, p, i: int, cfg) -> str:
    if kind == "attention":
        types = getattr(cfg, "layer_types", None) or getattr(getattr(cfg, "text_config", None), "layer_types", None)
        if isinstance(types, list) and i < len(types) and "sliding" in str(types[i]):
            return "sliding attention"
        return "attention"
    if kind == "moe-experts":
        return "moe fused" if p.dim() == 3 else "moe per-expert"
    if kind == "mlp":
        return "dense mlp"
    return kind.replace("-", " ")


def _cache_path(config: dict, version: str) -> Path:
    text = json.dumps(config, sort_keys=True, default=str)
    key = hashlib.sha256(f"{version}\n{text}".encode()).hexdigest()
    return file_access.user_cache_home() / "vramlens" / "inventories" / f"{key}.json"


def exact(config: dict) -> dict[str, Any]:
    """{"total", "layer_kinds", "class", "transformers"} of what transformers builds from `config`; from the cache
    when this config was built before with this transformers version."""
    import transformers

    path = _cache_path(config, transformers.__version__)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    result = _build(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    tmp.replace(path)
    return result


def model_class(model_type: str, config_cls: type | None = None) -> Any:
    """The class transformers builds a `model_type` config as: from its auto mappings (seq2seq LM, causal LM,
    image-text-to-text, base model, then every other task), the first whose `config_class` is the config's own
    class; a composite config (Llama-4, Qwen3.5, Musicgen) is never handed to the class of its text or decoder
    part. Where no class takes the config's class (EXAONE, InternLM3: Llama's classes), the first mapped one.
    The seq2seq class comes first: a model_type mapped to both is an encoder-decoder whose causal-LM class is its
    decoder alone (transformers 5.24 models/bart/modeling_bart.py `BartForCausalLM`: `BartDecoderWrapper` and
    `lm_head`, "BART decoder with a language modeling head on top"; `BartForConditionalGeneration`: encoder and
    decoder), and its config.json is the whole model's."""
    import transformers
    from transformers.models.auto import modeling_auto as ma

    preferred = (
        ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
        ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        ma.MODEL_MAPPING_NAMES,
    )
    others = [getattr(ma, n) for n in sorted(dir(ma)) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES")]
    first = None
    for mapping in (*preferred, *(m for m in others if all(m is not p for p in preferred))):
        names = mapping.get(model_type)
        for name in [names] if isinstance(names, str) else names or ():
            cls = getattr(transformers, name, None)
            if cls is None:
                continue
            if config_cls is None or getattr(cls, "config_class", None) is config_cls:
                return cls
            if first is None and any(mapping is p for p in preferred):
                first = cls
    return first or _causal_lm_of_sub_config(model_type, config_cls)


def _causal_lm_of_sub_config(model_type: str, config_cls: type | None) -> Any:
    """The causal LM of a language model's sub-config that no auto mapping names under its own model_type
    (`mllama_text_model`, `emu3_text_model`): the class the causal-LM mapping names under the composite's model_type
    whose `config_class` is that sub-config's class (transformers 5.24 models/auto/modeling_auto.py
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES `"mllama": "MllamaForCausalLM"`, whose config_class is `MllamaTextConfig`;
    `"emu3": "Emu3ForCausalLM"`, `Emu3TextConfig`). An omni thinker's language model (the `text_config` of a
    composite with an audio and a vision tower, which no auto mapping names) has no causal LM of its own: the base
    text model its modeling module exports for that config class, as the thinker builds it (transformers 5.24
    models/qwen2_5_omni/modeling_qwen2_5_omni.py `Qwen2_5OmniThinkerModel.__init__`: `self.language_model =
    Qwen2_5OmniThinkerTextModel._from_config(config.text_config)`; models/qwen3_omni_moe/modeling_qwen3_omni_moe.py
    `Qwen3OmniMoeThinkerTextModel`). None where there is none."""
    import importlib

    from transformers.models.auto import modeling_auto as ma
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config_cls = config_cls or CONFIG_MAPPING[model_type]
        module = importlib.import_module(config_cls.__module__.replace(".configuration_", ".modeling_"))
    except (KeyError, ImportError):
        return None
    for names in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        for name in [names] if isinstance(names, str) else names:
            cls = getattr(module, name, None)
            if cls is not None and getattr(cls, "config_class", None) is config_cls:
                return cls
    composites = importlib.import_module(config_cls.__module__).__dict__.values()
    sub_configs = [getattr(c, "sub_configs", None) or {} for c in composites if isinstance(c, type)]
    if any(s.get("text_config") is config_cls and {"audio_config", "vision_config"} <= set(s) for s in sub_configs):
        for name in getattr(module, "__all__", ()):
            cls = getattr(module, name, None)
            if getattr(cls, "config_class", None) is config_cls and not name.endswith("PreTrainedModel"):
                return cls
    return None


def _build(config: dict) -> dict[str, Any]:
    import torch
    import transformers
    from transformers import AutoConfig

    model_type = str(config.get("model_type", ""))
    cfg = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
    cls = model_class(model_type, type(cfg))
    if cls is None:
        raise ValueError(f"transformers {transformers.__version__} has no model for model_type {model_type!r}")
    with torch.device("meta"):
        model = cls._from_config(cfg)
    quantities, _ = measure(model, cfg)
    kinds = {k[1]: v for k, v in quantities.items() if k[0] == "k" and k[1] != "other"}
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "layer_kinds": kinds,
        "class": cls.__name__,
        "transformers": transformers.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(exact(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))))
