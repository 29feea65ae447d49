"""Parameter shapes of a model: the linear layers (for LoRA targets and quantization) and the rest.

Counts follow the Hugging Face modelling code of each family: Llama-style decoders (GQA,
gated MLP, RMSNorm), GPT-2/BERT-style blocks (fused or separate QKV with biases, GELU MLP,
LayerNorm), Mixture-of-Experts MLPs (router + experts + shared experts), and T5-style
encoder-decoders (self-attention, cross-attention in the decoder).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from vramlens.knowledge.models import DELTANET_FAMILIES, SHORT_CONV_FAMILIES, SPLIT_DELTANET_PROJECTIONS
from vramlens.knowledge.schema import ModelArch

# Families whose attention has per-head RMSNorms on q and k (Qwen3, Gemma-3, OLMo-2).
# (LFM2: `Lfm2Attention.q_layernorm` / `k_layernorm`, transformers 5.24 models/lfm2/modeling_lfm2.py)
QK_NORM_FAMILIES = {
    *("qwen3", "qwen3_moe", "qwen3_vl_text", "qwen3_vl_moe_text"),
    *("gemma3", "gemma3_text", "olmo2", "olmo3", *SHORT_CONV_FAMILIES),
    # transformers 5.24 models/qwen3_next/modeling_qwen3_next.py `Qwen3NextAttention`: q_norm, k_norm (Qwen3.5's alike)
    *DELTANET_FAMILIES,
}


@dataclass(frozen=True, slots=True)
class Linear:
    name: str  # canonical name: q k v o gate up down fc1 fc2 lm_head
    in_features: int
    out_features: int
    count: int  # how many of these in the whole model (layers × experts)
    bias: bool = False
    expert: bool = False  # a routed expert's projection (MoE)

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + (self.out_features if self.bias else 0))


@dataclass(frozen=True, slots=True)
class Shapes:
    linears: tuple[Linear, ...]  # every nn.Linear inside the blocks (quantizable, LoRA-targetable)
    embed_params: int  # token (+ position/type) embeddings
    lm_head_params: int  # 0 when tied to the embeddings
    other_params: int  # norms, routers, biases outside linears, poolers
    layer_params: int  # parameters of one (largest) block, for FSDP/ZeRO-3 working sets

    @property
    def linear_params(self) -> int:
        return sum(l.params for l in self.linears)

    @property
    def largest_linear(self) -> int:
        """Weights of the largest block linear (0 without linears)."""
        return max((l.in_features * l.out_features for l in self.linears), default=0)

    @property
    def total(self) -> int:
        return self.linear_params + self.embed_params + self.lm_head_params + self.other_params


@lru_cache(maxsize=512)
def shapes(arch: ModelArch) -> Shapes:
    """The linear layers by name; totals come from `knowledge.models.param_count` (tested against the
    published sizes), so embeddings, norms, routers and biases are whatever that count leaves."""
    from vramlens.knowledge.models import norms_per_layer, param_count

    h, L = arch.hidden, arch.layers
    q, kv = arch.q_dim, arch.kv_dim
    gated = arch.mlp in ("swiglu", "geglu")
    linears: list[Linear] = []

    def attention(count: int) -> None:
        if arch.kv_lora_rank:
            linears.extend(mla_linears(arch, count))
            return
        linears.extend(
            [Linear("q", h, q, count), Linear("k", h, kv, count), Linear("v", h, kv, count), Linear("o", q, h, count)]
        )

    def mlp(count: int, inter: int, expert: bool = False) -> None:
        if count <= 0:
            return
        if gated:
            linears.extend(
                [
                    Linear("gate", h, inter, count, expert=expert),
                    Linear("up", h, inter, count, expert=expert),
                    Linear("down", inter, h, count, expert=expert),
                ]
            )
        else:
            linears.extend(
                [Linear("fc1", h, inter, count, expert=expert), Linear("fc2", inter, h, count, expert=expert)]
            )

    def feed_forward() -> None:
        """A dense MLP in every layer, or in a MoE model its dense layers' MLPs, routed and shared experts."""
        dense = arch.dense_layers if arch.is_moe else L
        mlp(dense, arch.intermediate)
        if arch.is_moe:
            inter_e = arch.moe_intermediate or arch.intermediate
            mlp((L - dense) * arch.num_experts, inter_e, expert=True)
            mlp((L - dense) * arch.shared_experts, arch.shared_expert_intermediate or inter_e)

    if is_mamba(arch):
        linears.extend(mamba_linears(arch))
    elif nemotron_h_linears(arch):
        linears.extend(nemotron_h_linears(arch))
    elif mamba2_linears(arch):
        linears.extend(mamba2_linears(arch))
    elif short_conv_layers(arch):
        # LFM2: attention's q, k, v, o in the attention layers only; each short-convolution layer has in_proj
        # h → 3h and out_proj h → h instead (transformers 5.24 models/lfm2/modeling_lfm2.py `Lfm2ShortConv`);
        # LFM2-MoE's leading dense layers an MLP, the others routed experts (models/lfm2_moe `Lfm2MoeDecoderLayer`)
        n_conv = short_conv_layers(arch)
        attention(L - n_conv)
        linears.extend([Linear("in_proj", h, 3 * h, n_conv), Linear("out_proj", h, h, n_conv)])
        feed_forward()
    elif mamba2_hybrid_linears(arch)[0]:
        # Bamba, Granite-4 hybrids: q, k, v, o in the attention layers only; each Mamba-2 layer has its mixer's
        # in_proj and out_proj instead (`mamba2_hybrid_linears`); a dense MLP in every layer
        n_ssm, in_width, inner = mamba2_hybrid_linears(arch)
        attention(L - n_ssm)
        linears.extend([Linear("in_proj", h, in_width, n_ssm), Linear("out_proj", inner, h, n_ssm)])
        mlp(L, arch.intermediate)
    elif jamba_mixer_linears(arch):
        # Jamba: q, k, v, o in the attention layers only; each Mamba layer has its mixer's linears instead
        # (`jamba_mixer_linears`); a dense MLP or a MoE block by `expert_layer_period`
        mixer = jamba_mixer_linears(arch)
        attention(L - mixer[0].count)
        linears.extend(mixer)
        feed_forward()
    elif deltanet_linears(arch):
        linears.extend(deltanet_linears(arch))
    elif arch.block == "encoder-decoder":
        enc = arch.encoder_layers or L
        attention(enc + 2 * L)  # encoder self, decoder self + cross
        mlp(enc + L, arch.intermediate)
    else:
        attention(L)
        feed_forward()
    embed = arch.vocab * h
    lm_head = 0 if (arch.tied_embeddings or arch.block == "encoder") else arch.vocab * h
    total = param_count(arch)
    linear_params = sum(l.params for l in linears)
    other = max(total - linear_params - embed - lm_head, 0)
    per_layer_mlp = (
        (3 if gated else 2)
        * h
        * (arch.moe_intermediate or arch.intermediate)
        * max(arch.num_experts + arch.shared_experts, 1)
    )
    attention_weights = (
        sum(l.in_features * l.out_features for l in mla_linears(arch, 1))
        if arch.kv_lora_rank
        else 2 * h * q + 2 * h * kv
    )
    layer = attention_weights + per_layer_mlp + norms_per_layer(arch) * h
    if is_mamba(arch) or nemotron_h_linears(arch) or mamba2_linears(arch):
        layer = (linear_params + other) // max(L, 1)
    return Shapes(tuple(linears), embed, lm_head, other, layer)


def mamba2_hybrid_linears(arch: ModelArch) -> tuple[int, int, int]:
    """(Mamba-2 layers, in_proj's width, out_proj's input width) of a Bamba or Granite-4 hybrid stack whose layer
    kinds were counted (`ModelArch.layer_kinds` "state space"); (0, 0, 0) for any other model. transformers 5.24
    models/bamba/modeling_bamba.py `BambaMixer` (and `GraniteMoeHybridMambaLayer`, the same mixer): in_proj h →
    I + (I + 2·G·N) + H (the gate, x|B|C, Δ), out_proj I → h, I = mamba_expand · h (BambaConfig and
    GraniteMoeHybridConfig: mamba_n_heads 128, mamba_n_groups 1, mamba_d_state 256, mamba_expand 2 by default)."""
    import json

    n_ssm = dict(arch.layer_kinds).get("state space", 0)
    if arch.family not in ("bamba", "granitemoehybrid") or not n_ssm or not arch.hf_config_json:
        return 0, 0, 0
    config = json.loads(arch.hf_config_json)
    inner = int(config.get("mamba_expand", 2) * arch.hidden)
    groups, state = int(config.get("mamba_n_groups", 1)), int(config.get("mamba_d_state", 256))
    return n_ssm, 2 * inner + 2 * groups * state + int(config.get("mamba_n_heads", 128)), inner


def deltanet_linears(arch: ModelArch) -> list[Linear]:
    """The nn.Linear modules of a Qwen3-Next or Qwen3.5 stack (`knowledge.models.DELTANET_FAMILIES`) by the kind of
    each layer (`ModelArch.layer_kinds`, counted from its `layer_types`); [] for any other model, or before its layer
    kinds were counted. transformers 5.24 models/qwen3_next/modeling_qwen3_next.py: `Qwen3NextAttention` q_proj h →
    2 · heads · head_dim (the query and its output gate), k_proj, v_proj, o_proj (`attention_bias`), in the
    full-attention layers only; `Qwen3NextGatedDeltaNet` in_proj_qkvz h → 2·Hk·dk + 2·H·dv, in_proj_ba h → 2·H,
    out_proj H·dv → h (no bias), in the linear-attention layers (Qwen3.5, models/qwen3_5/modeling_qwen3_5.py
    `Qwen3_5GatedDeltaNet`: the same widths split as in_proj_qkv h → 2·Hk·dk + H·dv, in_proj_z h → H·dv, in_proj_b and
    in_proj_a h → H); `Qwen3NextSparseMoeBlock` its routed experts (3-D parameters in transformers 5, nn.Linear
    modules in 4.x: `expert`), its shared expert `Qwen3NextMLP` (gate, up, down_proj of
    shared_expert_intermediate_size) and `shared_expert_gate` h → 1; a dense `Qwen3NextMLP` in `mlp_only_layers`
    (Qwen3.5: a dense MLP in every layer, Qwen3.5-MoE a MoE block in every layer). Qwen3NextConfig defaults
    (models/qwen3_next/configuration_qwen3_next.py, and Qwen3_5TextConfig's): linear_num_key_heads 16,
    linear_num_value_heads 32, linear_key_head_dim and linear_value_head_dim 128."""
    import json

    n_lin = dict(arch.layer_kinds).get("linear attention", 0)
    if arch.family not in DELTANET_FAMILIES or not n_lin or not arch.hf_config_json:
        return []
    config = json.loads(arch.hf_config_json)
    h, L, q, kv = arch.hidden, arch.layers, arch.q_dim, arch.kv_dim
    hk, hv = int(config.get("linear_num_key_heads", 16)), int(config.get("linear_num_value_heads", 32))
    dk, dv = int(config.get("linear_key_head_dim", 128)), int(config.get("linear_value_head_dim", 128))
    bias = bool(config.get("attention_bias", False))
    if arch.family in SPLIT_DELTANET_PROJECTIONS:
        projections = [
            Linear("in_proj_qkv", h, 2 * hk * dk + hv * dv, n_lin),
            Linear("in_proj_z", h, hv * dv, n_lin),
            Linear("in_proj_b", h, hv, n_lin),
            Linear("in_proj_a", h, hv, n_lin),
        ]
    else:
        projections = [
            Linear("in_proj_qkvz", h, 2 * hk * dk + 2 * hv * dv, n_lin),
            Linear("in_proj_ba", h, 2 * hv, n_lin),
        ]
    n_attn = L - n_lin
    out = [
        Linear("q", h, 2 * q, n_attn, bias),
        Linear("k", h, kv, n_attn, bias),
        Linear("v", h, kv, n_attn, bias),
        Linear("o", q, h, n_attn, bias),
        *projections,
        Linear("out_proj", hv * dv, h, n_lin),
    ]
    dense = arch.dense_layers if arch.is_moe else L
    inter_e = arch.moe_intermediate or arch.intermediate
    for count, width, expert in (
        (dense, arch.intermediate, False),
        ((L - dense) * arch.num_experts, inter_e, True),
        ((L - dense) * arch.shared_experts, arch.shared_expert_intermediate or inter_e, False),
    ):
        if count > 0:
            out += [
                Linear("gate", h, width, count, expert=expert),
                Linear("up", h, width, count, expert=expert),
                Linear("down", width, h, count, expert=expert),
            ]
    if arch.is_moe and arch.shared_experts and L - dense > 0:
        out.append(Linear("shared_expert_gate", h, 1, L - dense))
    return out


def jamba_mixer_linears(arch: ModelArch) -> list[Linear]:
    """The nn.Linear modules of Jamba's Mamba layers ([] for any other model, or before its layer kinds were
    counted): transformers 5.24 models/jamba/modeling_jamba.py `JambaMambaMixer.__init__`, in_proj h → 2·I (x and
    the gate z), x_proj I → R + 2·N (Δ, B, C), dt_proj R → I with a bias, out_proj I → h, in_proj and out_proj with
    `mamba_proj_bias`; I = mamba_expand · h, R = `mamba_dt_rank` ("auto": ⌈h / 16⌉), N = `mamba_d_state`
    (JambaConfig defaults 2, "auto", 16, False: models/jamba/configuration_jamba.py)."""
    import json
    import math

    n_ssm = dict(arch.layer_kinds).get("state space", 0)
    if arch.family != "jamba" or not n_ssm or not arch.hf_config_json:
        return []
    config = json.loads(arch.hf_config_json)
    h = arch.hidden
    inner = int(config.get("mamba_expand", 2) * h)
    rank = config.get("mamba_dt_rank", "auto")
    r = math.ceil(h / 16) if rank == "auto" else int(rank)
    n = int(config.get("mamba_d_state", 16))
    bias = bool(config.get("mamba_proj_bias", False))
    return [
        Linear("in_proj", h, 2 * inner, n_ssm, bias),
        Linear("x_proj", inner, r + 2 * n, n_ssm),
        Linear("dt_proj", r, inner, n_ssm, True),
        Linear("out_proj", inner, h, n_ssm, bias),
    ]


def mamba2_linears(arch: ModelArch) -> list[Linear]:
    """The nn.Linear modules of a Mamba-2 model, in every layer ([] for any other model): transformers 5.24
    models/mamba2/modeling_mamba2.py `Mamba2Mixer.__init__`, in_proj h → 2·I + 2·G·N + H (the gate, x|B|C, Δ;
    I = int(expand · h)) and out_proj I → h, both with `use_bias`; no attention, no MLP."""
    import json

    if arch.family != "mamba2" or not arch.hf_config_json:
        return []
    config = json.loads(arch.hf_config_json)
    inner = int(config.get("expand", 2) * arch.hidden)
    heads, groups, state = (
        int(config.get(k, d)) for k, d in (("num_heads", 128), ("n_groups", 8), ("state_size", 128))
    )
    bias = bool(config.get("use_bias", False))
    width = 2 * inner + 2 * groups * state + heads
    return [
        Linear("in_proj", arch.hidden, width, arch.layers, bias),
        Linear("out_proj", inner, arch.hidden, arch.layers, bias),
    ]


def nemotron_h_linears(arch: ModelArch) -> list[Linear]:
    """The nn.Linear modules of a Nemotron-H stack, by the kind of each layer (`ModelArch.layer_kinds`, counted
    from its layer list); [] for any other model. transformers 5.24 models/nemotron_h/modeling_nemotron_h.py:
    `NemotronHAttention` q, k, v, o_proj (no bias); `NemotronHMamba2Mixer` in_proj h → 2·I + 2·G·N + H (the gate,
    x|B|C, Δ; I = mamba_num_heads · mamba_head_dim) and out_proj I → h (`use_bias`); `NemotronHMLP` up_proj and
    down_proj (`mlp_bias`, no gate: the ungated MLP's canonical fc1 and fc2); `NemotronHMoE`: its routed experts are
    3-D parameters (`NemotronHExperts`, up I_e × h and down h × I_e), its shared expert a `NemotronHMLP` of
    moe_shared_expert_intermediate_size, and with `moe_latent_size` the latent projections fc1_latent_proj and
    fc2_latent_proj (the experts then read the latent width)."""
    import json

    if arch.family != "nemotron_h" or not arch.hf_config_json:
        return []
    kinds = dict(arch.layer_kinds)
    n_attn, n_ssm = kinds.get("attention", 0), kinds.get("state space", 0)
    n_mlp, n_moe = kinds.get("dense mlp", 0), kinds.get("moe fused", 0)
    if not n_attn + n_ssm + n_mlp + n_moe:
        return []
    config = json.loads(arch.hf_config_json)
    h, q, kv = arch.hidden, arch.q_dim, arch.kv_dim
    heads = int(config.get("mamba_num_heads", 128))
    inner = heads * int(config.get("mamba_head_dim", 64))
    groups = int(config.get("n_groups", config.get("mamba_n_groups", 8)))
    state = int(config.get("ssm_state_size", 128))
    bias, mlp_bias = bool(config.get("use_bias", False)), bool(config.get("mlp_bias", False))
    out: list[Linear] = []
    if n_attn:
        out += [Linear("q", h, q, n_attn), Linear("k", h, kv, n_attn), Linear("v", h, kv, n_attn)]
        out.append(Linear("o", q, h, n_attn))
    if n_ssm:
        out.append(Linear("in_proj", h, 2 * inner + 2 * groups * state + heads, n_ssm, bias=bias))
        out.append(Linear("out_proj", inner, h, n_ssm, bias=bias))
    if n_mlp:
        out += [
            Linear("fc1", h, arch.intermediate, n_mlp, mlp_bias),
            Linear("fc2", arch.intermediate, h, n_mlp, mlp_bias),
        ]
    if n_moe:
        width = int(config.get("moe_intermediate_size", arch.moe_intermediate or arch.intermediate))
        shared = int(config.get("moe_shared_expert_intermediate_size", width))
        latent = config.get("moe_latent_size")
        into = int(latent) if latent else h
        experts = n_moe * max(arch.num_experts, 1)
        out += [Linear("fc1", into, width, experts, expert=True), Linear("fc2", width, into, experts, expert=True)]
        out += [Linear("fc1", h, shared, n_moe, mlp_bias), Linear("fc2", shared, h, n_moe, mlp_bias)]
        if latent:
            out += [Linear("fc1_latent", h, into, n_moe, mlp_bias), Linear("fc2_latent", into, h, n_moe, mlp_bias)]
    return out


def short_conv_layers(arch: ModelArch) -> int:
    """How many layers of the stack are short convolutions (the layer kinds transformers builds from the config), in
    a family whose convolution layers are modelled: LFM2, LFM2-MoE."""
    return dict(arch.layer_kinds).get("short conv", 0) if arch.family in SHORT_CONV_FAMILIES else 0


def mla_linears(arch: ModelArch, count: int) -> list[Linear]:
    """The nn.Linear modules of DeepSeek's multi-head latent attention (transformers 5.24
    models/deepseek_v3/modeling_deepseek_v3.py `DeepseekV3Attention.__init__`), by canonical name: q_a (q_a_proj,
    h → q_lora_rank) and q_b (q_b_proj, → heads·(nope + rope)), or one full-rank q (q_proj) when q_lora_rank is
    null; kv_a (kv_a_proj_with_mqa, h → kv_lora_rank + rope), kv_b (kv_b_proj, kv_lora_rank → heads·(nope + v));
    o (o_proj, heads·v → h). q_a, kv_a and o carry a bias with `attention_bias`. No k or v linear exists."""
    h, heads, rank, qr = arch.hidden, arch.heads, arch.kv_lora_rank or 0, arch.q_lora_rank
    nope, rope, v = arch.mla_head_dims
    bias = arch.attn_bias
    if qr:
        q = [Linear("q_a", h, qr, count, bias=bias), Linear("q_b", qr, heads * (nope + rope), count)]
    else:
        q = [Linear("q", h, heads * (nope + rope), count)]
    return [
        *q,
        Linear("kv_a", h, rank + rope, count, bias=bias),
        Linear("kv_b", rank, heads * (nope + v), count),
        Linear("o", heads * v, h, count, bias=bias),
    ]


def is_mamba(arch: ModelArch) -> bool:
    """Every layer a Mamba mixer (transformers `MambaForCausalLM`) whose sizes the config gave."""
    return arch.family == "mamba" and arch.ssm_inner > 0


def mamba_linears(arch: ModelArch) -> list[Linear]:
    """The nn.Linear modules of a Mamba mixer, in every layer (transformers 5.24 models/mamba/modeling_mamba.py
    `MambaMixer.__init__`): in_proj h → 2·I (x and the gate z), x_proj I → dt_rank + 2·N (Δ, B, C), dt_proj
    dt_rank → I with a bias, out_proj I → h; in_proj and out_proj carry a bias with `use_bias`. The depthwise
    conv1d is an nn.Conv1d, which peft's "all-linear" does not select (peft 0.21.2 src/peft/tuners/tuners_utils.py
    `_maybe_include_all_linear_layers`: torch.nn.Linear and transformers' Conv1D only)."""
    h, i, n, r, count = arch.hidden, arch.ssm_inner, arch.ssm_state, arch.ssm_dt_rank, arch.layers
    return [
        Linear("in_proj", h, 2 * i, count, bias=arch.attn_bias),
        Linear("x_proj", i, r + 2 * n, count),
        Linear("dt_proj", r, i, count, bias=True),
        Linear("out_proj", i, h, count, bias=arch.attn_bias),
    ]


def targeted(arch: ModelArch, targets: tuple[str, ...], experts: bool = True) -> list[Linear]:
    """The linear layers a LoRA target list selects (canonical names; "all-linear" = every block linear).
    `experts=False`: routed experts are not nn.Linear modules (transformers 5 `MixtralExperts` and the like keep
    them as 3-D parameters run with grouped_mm) and no target name reaches them."""
    s = shapes(arch)
    linears = [l for l in s.linears if experts or not l.expert]
    if is_mamba(arch) or arch.family in ("mamba2", "nemotron_h"):
        # peft refuses LoRA on a Mamba mixer's out_proj (and conv1d): `_check_lora_target_modules_mamba` in peft
        # 0.21.2 src/peft/tuners/tuners_utils.py raises for them, "all-linear" included
        linears = [l for l in linears if l.name != "out_proj"]
    if "all-linear" in targets:
        return linears
    return [l for l in linears if l.name in targets]
