"""Megatron-LM's hybrid Mamba/attention model (`pretrain_hybrid.py`, `pretrain_mamba.py` before it) as the
transformers Nemotron-H model that has the same layers.

Megatron-LM builds `HybridModel` (megatron/core/models/hybrid/hybrid_model.py at d98e8a64; `MambaModel`,
megatron/core/models/mamba/mamba_model.py, at core_v0.13.0 … core_v0.15.0) from a layer pattern, one symbol per layer
(megatron/core/models/hybrid/hybrid_layer_allocation.py `Symbols`; megatron/core/ssm/mamba_hybrid_layer_allocation.py
at core_v0.15.0): `M` a Mamba-2 layer, `*` self-attention, `-` an MLP, `E` a MoE layer. transformers 5.24
models/nemotron_h (`NemotronHForCausalLM`) builds the same four kinds of layer from `hybrid_override_pattern`, with
the same symbols, and the same parameters in each, layer by layer (megatron-core d98e8a64, the same at core_v0.15.0):

- `M`, `MambaLayer` → `MambaMixer` (megatron/core/ssm/mamba_mixer.py `MambaMixer.__init__`): the norm fused into
  in_proj (TELayerNormColumnParallelLinear, h), in_proj h → 2·I + 2·G·N + H (z, x, B, C, dt; no bias: `assert not
  bias`), the depthwise conv1d over x|B|C ((I + 2·G·N)·K weights and a bias: `assert conv_bias`), dt_bias, A_log and
  D (H each, `D_has_hdim=False`), the gated RMSNorm (I) and out_proj I → h; with d_state N = `mamba_state_dim`
  (128), headdim P = `mamba_head_dim` (64), ngroups G = `mamba_num_groups` (8) (megatron/core/transformer/
  transformer_config.py `TransformerConfig`), `d_conv` K = 4 and `expand` 2 (`MambaMixer.__init__` defaults, which
  the layer specs keep), H = `mamba_num_heads`, or d_inner // P with d_inner = expand · h, and I = H · P;
  `NemotronHMamba2Mixer` + the block's norm: the same tensors (`use_bias` false, `use_conv_bias` true).
- `*`, `TransformerLayer` with `SelfAttention` (megatron/core/models/hybrid/hybrid_layer_specs.py
  `hybrid_stack_spec`): the norm fused into linear_qkv (h), linear_qkv h → (heads + 2 · query groups) · kv_channels,
  linear_proj back to h, no q/k norms in the spec; `NemotronHAttention` + the block's norm (no biases).
- `-`, `MLPLayer`: the norm fused into linear_fc1 (h), linear_fc1 h → ffn, linear_fc2 ffn → h; `NemotronHMLP`
  (up_proj, down_proj, not gated).
- `E`, `MoETransformerLayer`: pre_mlp_layernorm (h), the router (experts × h, megatron/core/transformer/moe/router.py
  `TopKRouter`; its expert bias a buffer), the routed experts (h → moe ffn → h each) and the shared expert of
  `--moe-shared-expert-intermediate-size`; `NemotronHMoE` (`NemotronHTopkRouter`, `NemotronHExperts`, its shared
  `NemotronHMLP`; a width of 0 for a run without shared experts).
- the word embedding, the final norm and the output layer (untied with `--untie-embeddings-and-output-weights`).

So the model is read as that Nemotron-H config.json (`nemotron_h_config`), whose parameters the catalog counts by
construction, with the linear and LayerNorm biases megatron-core builds beside them (`uncounted_biases`). What the
config cannot say is named (`approximate`) or the run is not read (`not_built`, `not_buildable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# megatron/core/models/hybrid/hybrid_layer_allocation.py `Symbols` (d98e8a64): the layers Nemotron-H also builds …
BUILT = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}
# … and those it has no layer for
NOT_BUILT = {"G": "gated DeltaNet", "D": "DeepSeek sparse attention", "+": "multi-latent attention"}
PIPE = "|"  # pipeline stage boundaries in the pattern (`Symbols.PIPE`)
MTP = "/"  # multi-token prediction layers after the main pattern (`Symbols.MTP_SEPARATOR`)
# megatron/core/transformer/transformer_config.py `TransformerConfig` (d98e8a64; core_v0.15.0 the same):
# mamba_state_dim, mamba_head_dim, mamba_num_groups
MAMBA_STATE = 128
MAMBA_HEAD_DIM = 64
MAMBA_GROUPS = 8
# megatron/core/ssm/mamba_mixer.py `MambaMixer.__init__(…, d_conv=4, expand=2, …)`
MAMBA_CONV = 4
MAMBA_EXPAND = 2
# megatron/core/transformer/transformer_config.py `TransformerConfig` (d98e8a64): `moe_router_topk: int = 2`
MOE_TOPK = 2
# the layer specs whose layers are the ones above (`--spec <module> <name>`)
SPECS = ("hybrid_stack_spec", "mamba_stack_spec")

# What the activation estimate assumes of a hybrid Megatron run. The Megatron step (estimate/components/megatron.py
# `megatron_hybrid_layer_per_token`) sizes each layer by its kind; its Mamba layers by what megatron-core's
# memory-efficient training path keeps (megatron/core/ssm/mamba_mixer.py: mamba_ssm's
# `mamba_split_conv1d_scan_combined`, then its gated RMSNorm and out_proj), read from their source and not traced
# on a GPU; with `--disable-mamba-mem-eff-path` the mixer runs causal_conv1d and `mamba_chunk_scan_combined`
# instead (`_hybrid_parameter_notes` names it)
ACTIVATIONS_NOTE = (
    "Megatron hybrid: activations sized by layer kind, the Mamba layers as megatron-core's memory-efficient path "
    "keeps them (mamba_ssm's `mamba_split_conv1d_scan_combined` kernel and gated RMSNorm, read from their source, "
    "not measured)"
)
# `--disable-mamba-mem-eff-path` (megatron/training/arguments.py; `use_mamba_mem_eff_path` False): the mixer's
# unfused training path, which keeps more than the fused kernel and is sized as it
UNFUSED_MAMBA_NOTE = (
    "Megatron hybrid: `--disable-mamba-mem-eff-path` runs the Mamba mixers through causal_conv1d and "
    "`mamba_chunk_scan_combined`, which keep more than the fused kernel they are sized as"
)


def pattern_from_ratios(layers: int, attention: float, mlp: float) -> str:
    """The pattern Megatron allocates from `--num-layers` and the ratios `--hybrid-attention-ratio` and
    `--hybrid-mlp-ratio` (megatron/core/ssm/mamba_hybrid_layer_allocation.py `_allocate_auto` at core_v0.15.0;
    megatron/core/models/hybrid/hybrid_layer_allocation.py `pattern_from_ratios` at d98e8a64): attention layers
    evenly spaced, starting and ending with Mamba, then MLP layers spread over the remaining Mamba layers. Both
    ratios 0 (their defaults): every layer a Mamba layer."""
    attention_count = round(layers * attention)
    mamba_count = layers - attention_count
    section = mamba_count / (attention_count + 1)
    kinds = ["M"] * layers
    x = section
    for i in range(layers):
        if x < 0.5:
            kinds[i] = "*"
            x += section
        else:
            x -= 1
    mlp_count = round(layers * mlp)
    if mlp_count > 0:
        ratio = (mamba_count - mlp_count) / mlp_count
        x = ratio
        for i in range(layers):
            if kinds[i] == "M":
                if x < 0.5:
                    kinds[i] = "-"
                    x += ratio
                else:
                    x -= 1
    return "".join(kinds)


def not_built(pattern: str) -> str | None:
    """Why a pattern's layers are not the ones Nemotron-H builds, or None."""
    if MTP in pattern:
        return f"multi-token prediction layers (`{MTP}{pattern.split(MTP, 1)[1]}`) after the main pattern"
    other = sorted({ch for ch in pattern if ch not in BUILT and ch != PIPE})
    if other:
        named = ", ".join(f"`{ch}` ({NOT_BUILT.get(ch, 'not a layer symbol')})" for ch in other)
        return f"layers of kinds vramlens does not build: {named}"
    if not pattern.replace(PIPE, ""):
        return "an empty layer pattern"
    return None


def mamba_sizes(hidden: int, flags: Mapping[str, int | None]) -> tuple[int, int, int, int]:
    """(heads H, head width P, groups G, state N) of the Mamba mixers: `--mamba-num-heads`, `--mamba-head-dim`,
    `--mamba-num-groups`, `--mamba-state-dim`, else `TransformerConfig`'s defaults; without a head count,
    H = (expand · h) // P (`MambaMixer.__init__`)."""
    head_dim = flags.get("mamba_head_dim") or MAMBA_HEAD_DIM
    heads = flags.get("mamba_num_heads") or (MAMBA_EXPAND * hidden) // head_dim
    return heads, head_dim, flags.get("mamba_num_groups") or MAMBA_GROUPS, flags.get("mamba_state_dim") or MAMBA_STATE


def nemotron_h_config(
    pattern: str,
    sizes: Mapping[str, Any],
    mamba: tuple[int, int, int, int],
) -> dict[str, Any]:
    """The transformers 5.24 `nemotron_h` config.json of the layers Megatron builds (module docstring), with
    megatron-core's defaults where the run states nothing (d98e8a64). `sizes`: the run's hidden, heads, kv_heads,
    head_dim, ffn, vocab, tied; squared_relu (`--squared-relu`), linear_bias (False with `--disable-bias-linear`),
    dtype ("bf16", "fp16" or None); with experts, experts, topk (None: the default), moe_ffn and shared (0: none).
    Linear biases are not written (`uncounted_biases`)."""
    layers = pattern.replace(PIPE, "")
    heads, head_dim, groups, state = mamba
    config: dict[str, Any] = {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hybrid_override_pattern": layers,
        "num_hidden_layers": len(layers),
        "hidden_size": sizes["hidden"],
        "num_attention_heads": sizes["heads"],
        "num_key_value_heads": sizes["kv_heads"],
        "head_dim": sizes["head_dim"],
        "intermediate_size": sizes["ffn"],
        "mamba_num_heads": heads,
        "mamba_head_dim": head_dim,
        "ssm_state_size": state,
        "n_groups": groups,
        "conv_kernel": MAMBA_CONV,
        "use_conv_bias": True,
        # `TransformerConfig.activation_func` F.gelu, squared ReLU with `--squared-relu` (megatron/training/
        # argument_utils.py `core_transformer_config_from_args`); the parameters are the same
        "mlp_hidden_act": "relu2" if sizes.get("squared_relu") else "gelu",
        # no biases: the Mamba mixer has none (`MambaMixer.__init__`: `assert not bias`); those the other layers
        # have with `add_bias_linear` are counted apart (`uncounted_biases`)
        "use_bias": False,
        "mlp_bias": False,
        "attention_bias": False,
        "tie_word_embeddings": bool(sizes["tied"]),
        "vocab_size": sizes["vocab"],
        # megatron/core/model_parallel_config.py `params_dtype` float32; megatron/training/arguments.py
        # `validate_args`: torch.half with --fp16, torch.bfloat16 with --bf16
        "dtype": {"bf16": "bfloat16", "fp16": "float16"}.get(sizes.get("dtype") or "", "float32"),
    }
    if "E" in layers:
        shared = int(sizes.get("shared") or 0)
        config |= {
            "n_routed_experts": sizes["experts"],
            "num_experts_per_tok": sizes.get("topk") or MOE_TOPK,
            "moe_intermediate_size": sizes["moe_ffn"],
            "n_shared_experts": 1 if shared else 0,
            "moe_shared_expert_intermediate_size": shared,
        }
    return config


def not_buildable(pattern: str, sizes: Mapping[str, Any]) -> str | None:
    """Why megatron-core refuses to build a run's layers, or None: shared experts with linear biases
    (megatron/core/transformer/moe/shared_experts.py `SharedExpertMLP.__init__`: `assert config.add_bias_linear ==
    False`, "bias is not supported in the shared experts")."""
    if "E" in pattern and sizes.get("shared") and sizes.get("linear_bias"):
        return "shared experts with linear biases (no `--disable-bias-linear`), which megatron-core does not build"
    return None


def uncounted_biases(pattern: str, sizes: Mapping[str, Any]) -> int:
    """The biases megatron-core builds that the Nemotron-H count lacks (megatron-core d98e8a64). transformers 5.24
    `NemotronHAttention` builds no bias whatever `attention_bias` says, `NemotronHExperts` and `NemotronHTopkRouter`
    none, its RMSNorms hold weights only, and the bundled Nemotron-H inventory is measured with `mlp_bias` false (a
    config.json with it true is counted approximately), so all of them are counted here:
    - each attention layer's linear_qkv bias ((heads + 2 · query groups) · kv_channels) with `add_bias_linear`
      (`TransformerConfig`, True unless `--disable-bias-linear`) or `add_qkv_bias` (megatron/core/transformer/
      attention.py `SelfAttention`: `bias=self.config.add_bias_linear or self.config.add_qkv_bias`);
    - with `add_bias_linear`: each attention layer's linear_proj bias (h, `bias=self.config.add_bias_linear`), each
      MLP layer's linear_fc1 and linear_fc2 biases (ffn + h: megatron/core/transformer/mlp.py `MLP.__init__`,
      `bias=self.config.add_bias_linear`), and each MoE layer's router bias (one per expert: megatron/core/
      transformer/moe/router.py `Router.__init__`) and its routed experts' linear_fc1 and linear_fc2 biases (moe ffn
      + h per expert: megatron/core/transformer/moe/experts.py `TEGroupedMLP`, `bias=self.config.add_bias_linear`);
    - with LayerNorm (`--normalization` default LayerNorm, megatron/training/arguments.py): the bias of every layer's
      norm (fused into in_proj, linear_qkv or linear_fc1, or the MoE layer's pre_mlp_layernorm) and of the final
      norm, h each (Nemotron-H's RMSNorms hold their weights only).
    `sizes` as `nemotron_h_config`'s, with qkv_bias (`--add-qkv-bias`) and layernorm (whether the norms are
    LayerNorms)."""
    layers = pattern.replace(PIPE, "")
    h = int(sizes["hidden"])
    total = (len(layers) + 1) * h if sizes.get("layernorm") else 0
    if sizes.get("linear_bias") or sizes.get("qkv_bias"):
        total += layers.count("*") * (int(sizes["heads"]) + 2 * int(sizes["kv_heads"])) * int(sizes["head_dim"])
    if sizes.get("linear_bias"):
        total += layers.count("*") * h + layers.count("-") * (int(sizes["ffn"]) + h)
        total += layers.count("E") * int(sizes.get("experts") or 0) * (1 + int(sizes["moe_ffn"]) + h)
    return total
