"""peft's default targets for the adapter methods beyond LoRA, per model family, in canonical linear names.

Source: peft 0.21.2 `src/peft/utils/constants.py` — `TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING`,
`TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING` and `TRANSFORMERS_MODELS_TO_VERA_TARGET_MODULES_MAPPING`
(a copy of the LoRA mapping, q and v for the decoder families). `IA3Config`/`VeraConfig` take these when
`target_modules` (and for IA3 `feedforward_modules`) are not given (`_prepare_adapter_config` in
peft/tuners/ia3/model.py and vera/model.py); a family missing from the mapping makes peft raise.
"""

from __future__ import annotations

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
