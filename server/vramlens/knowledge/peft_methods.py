"""peft's default targets for the adapter methods beyond LoRA, per model family, in canonical linear names.

Source: peft 0.21.2 `src/peft/utils/constants.py` — `TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING`,
`TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING` and `TRANSFORMERS_MODELS_TO_VERA_TARGET_MODULES_MAPPING`
(a copy of the LoRA mapping, q and v for the decoder families). `IA3Config`/`VeraConfig` take these when
`target_modules` (and for IA3 `feedforward_modules`) are not given (`_prepare_adapter_config` in
peft/tuners/ia3/model.py and vera/model.py); a family missing from the mapping makes peft raise.
"""

from __future__ import annotations

import re

# (targets, feedforward targets) of IA3 — the feedforward ones scale the linear's input, the others its output
IA3_DEFAULTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "llama": (("k", "v", "down"), ("down",)),
    "mistral": (("k", "v", "down"), ("down",)),
    "gemma": (("q", "v", "down"), ("down",)),
    "gemma2": (("q", "v", "down"), ("down",)),
    "gemma3_text": (("q", "v", "down"), ("down",)),
    "qwen2": (("q", "v", "down"), ("down",)),
    "qwen3": (("q", "v", "down"), ("down",)),
    "phi": (("q", "v", "fc2"), ("fc2",)),
    "gpt2": (("q", "k", "v", "fc2"), ("fc2",)),  # c_attn (one q|k|v linear), mlp.c_proj
    "gpt_bigcode": (("q", "k", "v", "fc2"), ("fc2",)),
    "gpt_neox": (("q", "k", "v", "fc2"), ("fc2",)),  # query_key_value, dense_4h_to_h
    "falcon": (("q", "k", "v", "fc2"), ("fc2",)),
}
# VeRA: the LoRA mapping (peft 0.21.2 constants.py; "phi" set to q_proj, v_proj): q and v, or the one q|k|v linear
VERA_DEFAULTS: dict[str, tuple[str, ...]] = {
    **{
        f: ("q", "v")
        for f in ("llama", "mistral", "mixtral", "stablelm", "gemma", "gemma2", "gemma3_text", "qwen2", "qwen3", "phi")
    },
    **{f: ("q", "k", "v") for f in ("gpt2", "gpt_bigcode", "gpt_neox", "falcon")},  # c_attn / query_key_value
}
VERA_DEFAULT_R = 256  # VeraConfig.r (peft 0.21.2 tuners/vera/config.py)


def default_targets(method: str, family: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(targets, IA3 feedforward targets) peft takes for `method` on `family`; None when peft has no default."""
    if method == "ia3":
        return IA3_DEFAULTS.get(family)
    if method == "vera":
        t = VERA_DEFAULTS.get(family)
        return (t, ()) if t else None
    return None


# Adapter methods beyond LoRA/DoRA/IA3/VeRA, each with the hyperparameters that size it and their defaults. The
# base stays frozen in every one; what each adds and keeps is counted in estimate/components/adapters.py.
#   adalora   peft 0.21.2 tuners/adalora/config.py `init_r` 12 (ms-swift 4.0 tuner_args.py `adalora_init_r` 12)
#   loha      peft 0.21.2 tuners/loha/config.py `r` 8
#   lokr      peft 0.21.2 tuners/lokr/config.py `r` 8, `decompose_factor` -1 (w1 full, w2 = w2_a @ w2_b)
#   oft       peft 0.21.2 tuners/oft/config.py `oft_block_size` 32 (`r` 0: in_features / block size blocks)
#   boft      peft 0.21.2 tuners/boft/config.py; ms-swift 4.0 tuner_args.py `boft_block_size` 4,
#             `boft_n_butterfly_factor` 1 (peft subtracts one: a single butterfly factor)
#   fourierft peft 0.21.2 tuners/fourierft/config.py `n_frequency` 1000 (ms-swift 4.0 `fourier_n_frequency` 2000)
#   bone      peft 0.21.2 tuners/miss (Bone renamed MiSS) `r` 64; ms-swift 4.0 tuner.py passes `r=reft_rank` (4)
#   adapter   ms-swift 4.0 swift/tuners/adapter.py `AdapterModule`: Linear(hidden, adapter_length) → act →
#             Linear(adapter_length, hidden) on each block's MLP output; tuner_args.py `adapter_length` 128
#   reft      ms-swift 4.0 swift/tuners/reft.py over pyreft's LoreftIntervention: a rotation (hidden × r) and a
#             learned source Linear(hidden, r) per intervened block; tuner_args.py `reft_rank` 4
OTHER_METHODS: dict[str, tuple[str, dict[str, int]]] = {
    "adalora": ("AdaLoRA", {"r": 12}),
    "loha": ("LoHa", {"r": 8}),
    "lokr": ("LoKr", {"r": 8}),
    "oft": ("OFT", {"block": 32}),
    "boft": ("BOFT", {"block": 4, "factors": 1}),
    "fourierft": ("FourierFT", {"frequencies": 1000}),
    "bone": ("Bone", {"r": 64}),
    "adapter": ("Houlsby adapter", {"r": 128}),
    "reft": ("ReFT", {"r": 4}),
}
# peft's own config class for each method and how its sizes are passed (the real-library trace builds them:
# trace.hf `apply_peft`); the per-block adapters are ms-swift's and pyreft's, not peft's
PEFT_CONFIGS: dict[str, tuple[str, dict[str, str]]] = {
    "adalora": ("AdaLoraConfig", {"r": "init_r"}),
    "loha": ("LoHaConfig", {"r": "r"}),
    "lokr": ("LoKrConfig", {"r": "r"}),
    "oft": ("OFTConfig", {"block": "oft_block_size"}),
    "boft": ("BOFTConfig", {"block": "boft_block_size", "factors": "boft_n_butterfly_factor"}),
    "fourierft": ("FourierFTConfig", {"frequencies": "n_frequency"}),
    "bone": ("MissConfig", {"r": "r"}),
}
# What the estimate counts of each method's kept tensors, as every view says it (`resolve.adapters`), from peft's
# own adapters in the real-library trace (trace.hf `apply_peft`; tests/trace/test_peft_methods_traced.py): AdaLoRA and
# MiSS are counted from their own forwards; the others as LoRA's, which their forwards are not
KEPT_TENSORS = {
    "adalora": "counted from its forward (LoRA's and the scaled out-wide products its division keeps); a checkpointed "
    "block's recomputed backward is counted as LoRA's",
    "bone": "counted from its forward (the r-wide sums, no copy of the input) in 16-bit; under autocast as in 16-bit",
}
KEPT_AS_LORA = "its kept tensors estimated as LoRA's"
# ms-swift 4.0 passes FourierFT 2000 frequencies and Bone r 4 (tuner_args.py, tuner.py) where peft's defaults are 1000
# and 64: either way a few hundred thousand parameters on a 7B model, so peft's are taken
# the settings that size each method, by the names the frameworks write them (ms-swift 4.0 tuner_args.py, peft)
METHOD_SETTINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "adalora": {"r": ("adalora_init_r", "init_r")},
    "loha": {"r": ("lora_rank", "r")},
    "lokr": {"r": ("lora_rank", "r")},
    "oft": {"block": ("oft_block_size",)},
    "boft": {"block": ("boft_block_size",), "factors": ("boft_n_butterfly_factor",)},
    "fourierft": {"frequencies": ("fourier_n_frequency", "n_frequency")},
    "bone": {"r": ("reft_rank",)},
    "adapter": {"r": ("adapter_length",)},
    "reft": {"r": ("reft_rank",)},
}
# methods whose forward builds a weight-sized tensor per adapted linear (the delta weight, or BOFT's in × in rotation)
WEIGHT_SIZED_FORWARD = frozenset({"loha", "lokr", "boft", "fourierft"})
# methods that adapt each block once (its MLP output or hidden state), not each targeted linear
PER_BLOCK_METHODS = frozenset({"adapter", "reft"})


def method_name(method: str) -> str:
    return OTHER_METHODS[method][0] if method in OTHER_METHODS else method


def lokr_factors(dimension: int) -> tuple[int, int]:
    """peft 0.21.2 tuners/lokr/layer.py `factorization(dimension, factor=-1)`: the two factors nearest √dimension,
    smaller first."""
    m, n = 1, dimension
    length = m + n
    while m < n:
        new_m = m + 1
        while dimension % new_m != 0:
            new_m += 1
        new_n = dimension // new_m
        if new_m + new_n > length or new_m > new_n:
            break
        m, n, length = new_m, new_n, new_m + new_n
    return (m, n) if m <= n else (n, m)


# A checkpoint quantized by its publisher, from its name: AWQ and GPTQ (`-Int4`/`-Int8`, 4-bit unless the name says
# 8), bitsandbytes (`-bnb-4bit`, unsloth's naming), FP8 (`-FP8`, transformers' fine-grained FP8 quantizer).
_PREQUANT_WORD = re.compile(
    r"(?i)(?:^|[-_./])(awq|gptq(?:[-_]int[48])?|int4|int8|bnb[-_]4bit|bnb[-_]nf4|bnb[-_]8bit|fp8)(?:$|[-_.])"
)
_BITS_WORD = re.compile(r"(?i)(?:^|[-_./])int([48])(?:$|[-_.])")


def _swift_registered(model_id: str) -> tuple[int, str, str] | None:
    """(bits, method, where) of a checkpoint ms-swift 1.x/2.x registers as stored quantized: its `register_model`
    requires the library that loads it (`requires=['auto_gptq>=0.5']`, `function_kwargs={'gptq_bits': 8}` for
    'qwen/Qwen-7B-Chat-Int8'; `requires=['bitsandbytes<0.41.2', …]` for 'baichuan-inc/Baichuan2-7B-Chat-4bits'),
    read by scripts/dump_swift_model_types.py into knowledge/data/ms_swift_model_types.json."""
    from vramlens.knowledge.frameworks import swift_model_entry

    entry = swift_model_entry(model_id) if model_id else None
    if entry is None:
        return None
    quant = entry.get("quant")
    if not (isinstance(quant, list) and len(quant) == 2):
        return None
    method, bits = str(quant[0]), int(quant[1])
    where = f"ms-swift's model registry (swift/llm/utils/model.py {entry.get('tag') or 'v1.7.3'}: requires {method})"
    return bits, method, where


def prequantized(model_id: str, stored_dtype: str = "") -> tuple[int, str, str] | None:
    """(bits, method, where it was read) of a checkpoint stored quantized: its config.json's `quantization_config`
    (`ModelArch.stored_dtype`, knowledge/models.py `_dtype`) or its name; None for a 16-bit checkpoint."""
    by_config = {"int4": (4, "gptq"), "int8": (8, "gptq"), "nf4": (4, "nf4"), "fp4": (4, "fp4"), "fp8": (8, "fp8")}
    if stored_dtype in by_config:
        bits, method = by_config[stored_dtype]
        return bits, method, "the checkpoint's config.json (quantization_config)"
    registered = _swift_registered(model_id)
    if registered is not None:
        return registered
    name = (model_id or "").rstrip("/").rsplit("/", 1)[-1]
    words = [m.group(1).lower().replace("-", "_") for m in _PREQUANT_WORD.finditer(name)]
    if not words:
        return None
    size = _BITS_WORD.search(name)
    bits = int(size.group(1)) if size else 4
    if any(w == "awq" for w in words):
        return 4, "awq", "the checkpoint's name"
    if any(w.startswith("gptq") for w in words):
        return bits, "gptq", "the checkpoint's name"
    if any(w.startswith("bnb") for w in words):
        return (
            (8, "int8", "the checkpoint's name") if "8bit" in " ".join(words) else (4, "nf4", "the checkpoint's name")
        )
    if "fp8" in words:
        return 8, "fp8", "the checkpoint's name"
    return None  # a bare `-Int4`/`-Int8` names no method: not read as one


# peft `LoraConfig.target_parameters` on a MoE model: a parameter name's last part → the routed-expert stack peft
# wraps in a `lora.ParamWrapper` (peft 0.21.2 tuners/lora/model.py matches a target parameter by the end of its name;
# transformers 5 keeps the experts as fused `gate_up_proj` / `down_proj` stacks)
EXPERT_PARAMETERS = {"gate_up_proj": "gate_up", "down_proj": "down"}
# axolotl 067b021c src/axolotl/monkeypatch/moe_quant.py `patch_peft_target_parameters_matching`: gate_proj/up_proj
# (w1/w3) name the fused gate_up_proj too (`_UNFUSED_TO_FUSED`)
EXPERT_PARAMETERS_UNFUSED = {
    **EXPERT_PARAMETERS,
    "gate_proj": "gate_up",
    "up_proj": "gate_up",
    "w1": "gate_up",
    "w3": "gate_up",
    "w2": "down",
}
EXPERT_KINDS = ("gate_up", "down", "router")


def expert_parameter(name: str, names: dict[str, str] = EXPERT_PARAMETERS) -> str | None:
    """The expert stack ("gate_up", "down") or the router ("router": `mlp.gate.weight`) a target parameter names;
    an already canonical name as it is; None for a parameter that is neither."""
    name = str(name).strip()
    if name in EXPERT_KINDS:
        return name
    path, _, last = name.rpartition(".")
    return names.get(last) if "expert" in path else "router" if path.endswith("gate") else None
