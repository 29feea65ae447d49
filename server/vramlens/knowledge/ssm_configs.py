"""config.json files written by mamba_ssm rather than transformers, read as transformers reads their conversions.

The `state-spaces/*` checkpoints (mamba-130m … mamba-2.8b, mamba2-130m … mamba2-2.7b, mamba-2.8b-slimpj) publish the
config.json of mamba_ssm's own `MambaConfig` (state-spaces/mamba mamba_ssm/models/config_mamba.py: `d_model`,
`n_layer`, `vocab_size`, `ssm_cfg`, `pad_vocab_size_multiple`, `tie_embeddings`; no `model_type`). transformers
converts them with its own scripts, and those define the model it builds:

- Mamba-1 (`ssm_cfg` without `"layer": "Mamba2"`): transformers models/mamba/convert_mamba_ssm_checkpoint_to_pytorch.py
  `convert_ssm_config_to_hf_config` — `hidden_size` = d_model, `intermediate_size` = 2·d_model,
  `time_step_rank` = ceil(d_model / 16), `num_hidden_layers` = n_layer, the vocabulary padded up to a multiple of
  `pad_vocab_size_multiple` (mamba_ssm/models/mixer_seq_simple.py `MambaLMHeadModel.__init__` pads it the same way);
  the rest are `MambaConfig`'s defaults, which are mamba_ssm's `Mamba` defaults (mamba_ssm/modules/mamba_simple.py:
  d_state 16, d_conv 4, expand 2, conv_bias True, bias False).
- Mamba-2 (`"layer": "Mamba2"`): transformers models/mamba2/convert_mamba2_ssm_checkpoint_to_pytorch.py
  `convert_ssm_config_to_hf_config` — `hidden_size`, `num_heads` = hidden·expand // head_dim, `num_hidden_layers`,
  `n_groups` (1 unless given), `tie_word_embeddings`, the padded vocabulary; `Mamba2Config`'s defaults otherwise
  (state_size 128, head_dim 64, expand 2, conv_kernel 4: mamba_ssm/modules/mamba2.py `Mamba2` defaults).

Sizes an `ssm_cfg` overrides (`d_state`, `d_conv`, `expand`, `headdim`, `ngroups`, `dt_rank`) are carried to the
field each mamba_ssm argument fills. A config whose MixerModel also builds attention layers (`attn_layer_idx`) or MLPs
(`d_intermediate` > 0) has no transformers class: its Mamba layers are read and the rest is named as not counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# mamba_ssm argument → transformers MambaConfig / Mamba2Config field
_MAMBA1_FIELDS = {"d_state": "state_size", "d_conv": "conv_kernel", "expand": "expand", "dt_rank": "time_step_rank"}
_MAMBA2_FIELDS = {
    "d_state": "state_size",
    "d_conv": "conv_kernel",
    "expand": "expand",
    "headdim": "head_dim",
    "ngroups": "n_groups",
}


def is_mamba_ssm(config: Mapping[str, Any]) -> bool:
    """A config.json in mamba_ssm's own format: its `MambaConfig` fields and no transformers `model_type`."""
    return (
        not config.get("model_type")
        and isinstance(config.get("d_model"), int)
        and isinstance(config.get("n_layer"), int)
        and ("ssm_cfg" in config or "pad_vocab_size_multiple" in config)
    )


def _padded(vocab: int, multiple: int) -> int:
    return vocab + (multiple - vocab % multiple) % multiple if multiple > 0 else vocab


def from_mamba_ssm(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The transformers config.json of a mamba_ssm config (as transformers' conversion scripts write it), and what of
    the mamba_ssm model it leaves out ("" when nothing)."""
    raw = config.get("ssm_cfg")
    ssm: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    d_model, layers = int(config["d_model"]), int(config["n_layer"])
    vocab = _padded(int(config.get("vocab_size", 50277)), int(config.get("pad_vocab_size_multiple", 8)))
    tied = bool(config.get("tie_embeddings", True))
    if ssm.get("layer") == "Mamba2":
        out: dict[str, Any] = {
            "model_type": "mamba2",
            "architectures": ["Mamba2ForCausalLM"],
            "hidden_size": d_model,
            "num_hidden_layers": layers,
            "vocab_size": vocab,
            "tie_word_embeddings": tied,
            "residual_in_fp32": bool(config.get("residual_in_fp32", True)),
            "n_groups": 1,
        }
        out.update({hf: ssm[arg] for arg, hf in _MAMBA2_FIELDS.items() if arg in ssm})
        # transformers models/mamba2/configuration_mamba2.py `Mamba2Config` defaults: expand 2, head_dim 64
        out["num_heads"] = d_model * int(out.get("expand", 2)) // int(out.get("head_dim", 64))
    else:
        expand = int(ssm.get("expand", 2))
        out = {
            "model_type": "mamba",
            "architectures": ["MambaForCausalLM"],
            "hidden_size": d_model,
            "expand": expand,
            "intermediate_size": expand * d_model,
            "time_step_rank": math.ceil(d_model / 16),
            "num_hidden_layers": layers,
            "vocab_size": vocab,
            "tie_word_embeddings": tied,
            "residual_in_fp32": bool(config.get("residual_in_fp32", True)),
        }
        out.update({hf: ssm[arg] for arg, hf in _MAMBA1_FIELDS.items() if arg in ssm and ssm[arg] != "auto"})
    left_out = []
    if config.get("attn_layer_idx"):
        left_out.append(f"the attention layers at attn_layer_idx {list(config['attn_layer_idx'])}")
    if int(config.get("d_intermediate") or 0) > 0:
        left_out.append(f"the MLP of width d_intermediate {config['d_intermediate']} in every layer")
    note = (
        f"mamba_ssm's MixerModel builds {' and '.join(left_out)}, which no transformers class holds: not counted"
        if left_out
        else ""
    )
    return out, note
