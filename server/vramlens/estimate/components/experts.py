"""Routed experts of a mixture-of-experts block: how the modelling code runs them (modules one after another, or 3-D
parameters with grouped_mm), the expert parameters peft adapts, and the weight copies and gradients that adds."""

from __future__ import annotations

import json
from dataclasses import dataclass

from vramlens.estimate.components.common import DTYPE_BYTES, fp32_residual, mlp_bytes, unsloth_kernels
from vramlens.estimate.components.llama4 import FAMILIES as LLAMA4_FAMILIES
from vramlens.estimate.shapes import shapes, targeted
from vramlens.knowledge import versions
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.resolved import ResolvedPlan


def experts_adaptable(rp: ResolvedPlan) -> bool:
    """Whether LoRA wraps a MoE model's routed experts as nn.Linear modules (transformers 4.x builds each expert of
    them: "all-linear" wraps them; the canonical gate/up/down names do too except in Mixtral, whose experts name them
    w1/w3/w2, 4.57 `MixtralBlockSparseTop2MLP`). transformers 5 keeps them as 3-D parameters run with grouped_mm
    (models/mixtral/modeling_mixtral.py `MixtralExperts`, qwen3_moe likewise) that no target module reaches; peft
    may adapt those parameters instead (`expert_parameters`)."""
    if not rp.arch.is_moe or _expert_lora(rp) != "modules":
        return False
    return "all-linear" in rp.lora_targets or rp.arch.family != "mixtral"


def fused_experts(rp: ResolvedPlan) -> bool:
    """A MoE model whose routed experts are 3-D parameters run with grouped_mm (transformers ≥ 5 modelling code)."""
    if not rp.arch.is_moe or rp.framework not in HF_MODEL_FRAMEWORKS:
        return False
    tv = rp.version_of("transformers")
    return versions.at_least(tv[0] if tv else None, versions.FUSED_EXPERTS_FROM)


def expert_loop(rp: ResolvedPlan) -> bool:
    """A MoE model whose routed experts are modules run one after another: transformers 4.x (4.45.2 models/mixtral/
    modeling_mixtral.py `MixtralSparseMoeBlock.forward`: for each expert, its tokens through its MLP, `index_add_`
    into the output) and litgpt (model.py `LLaMAMoE.forward`). Autograd runs the later expert's nodes first (higher
    sequence numbers), so each expert's backward finishes before the previous one's starts."""
    return rp.arch.is_moe and not fused_experts(rp) and rp.framework != "torchtune"


def kbit_experts(rp: ResolvedPlan) -> bool:
    """Fused routed experts quantized on load with the rest of a k-bit model (axolotl `quantize_moe_experts`: axolotl
    067b021c src/axolotl/monkeypatch/moe_quant.py `patch_moe_quantization_on_load` turns each 3-D expert parameter into
    bitsandbytes 0.50.2 nn/parametrize.py `replace_parameter_4bit` packed NF4 data with its quant state, or with
    `load_in_8bit` row-wise int8 with fp32 row statistics, dequantized by a parametrization whenever it is read)."""
    return bool(rp.experts_kbit and rp.quant_bits in (4, 8) and fused_experts(rp))


def routed_block_params(rp: ResolvedPlan) -> int:
    """Parameters of one MoE block's routed expert stacks (gate|up and down of every expert)."""
    moe_layers = max(rp.arch.layers - rp.arch.dense_layers, 1)
    return sum(l.params for l in shapes(rp.arch).linears if l.expert) // moe_layers


def expert_bytes(rp: ResolvedPlan) -> int:
    """Bytes per element of fused routed experts' weights and of what they compute. grouped_mm is no autocast op, and
    transformers casts its input to the weight's dtype (5.24 integrations/moe.py `_grouped_mm`), so the experts
    compute in their weights' dtype: fp32 under AMP, and in a k-bit model, whose experts bitsandbytes leaves
    unquantized, fp32 once prepare_model_for_kbit_training has upcast them (peft 0.21.2 utils/other.py: every
    16-bit parameter that is not `Params4bit`). Experts built of nn.Linear modules (`expert_loop`) return what any
    MLP linear returns (`mlp_bytes`: fp32 out of a 4-bit linear fed the fp32 residual). Experts quantized on load
    (`kbit_experts`) compute in what their parametrization returns: 4-bit ones in the dtype they were loaded in
    (bitsandbytes 0.50.2 `Bnb4bitParametrization.forward` → `dequantize_4bit` to `quant_state.dtype`), 8-bit ones in
    fp32 (axolotl's `Bnb8bitParametrization` → bitsandbytes `int8_vectorwise_dequant`, "Dequantizes a tensor with
    dtype torch.int8 to torch.float32"); axolotl skips prepare_model_for_kbit_training for them, so nothing upcasts."""
    if not fused_experts(rp):
        return mlp_bytes(rp)
    if kbit_experts(rp):
        return 4 if rp.quant_bits == 8 else DTYPE_BYTES[rp.weight_dtype]
    if rp.weight_dtype == "fp32" or rp.quant_bits and rp.kbit_upcast:
        return 4
    return DTYPE_BYTES[rp.weight_dtype]


def _expert_lora(rp: ResolvedPlan) -> str | None:
    tv, pv = rp.version_of("transformers"), rp.version_of("peft")
    return versions.moe_expert_lora(rp.arch.family, tv[0] if tv else None, pv[0] if pv else None)


def expert_lora(rp: ResolvedPlan) -> str | None:
    """How LoRA target names reach this MoE model's routed experts (`versions.moe_expert_lora`): "modules",
    "parameters" (peft moves the MLP names to the fused expert parameters) or None."""
    return _expert_lora(rp)


@dataclass(frozen=True, slots=True)
class ExpertParam:
    """A routed-expert parameter peft adapts with a `lora.ParamWrapper`: `experts` stacked in × out matrices, rank
    `rank` per expert, in each of `layers` blocks."""

    name: str
    experts: int
    in_features: int
    out_features: int
    rank: int
    layers: int

    @property
    def adapter_params(self) -> int:
        return self.layers * self.experts * self.rank * (self.in_features + self.out_features)

    @property
    def weight_params(self) -> int:
        """One block's stacked weight (what the adapted copy W + BA has, per forward)."""
        return self.experts * self.in_features * self.out_features


def expert_parameters(rp: ResolvedPlan) -> list[ExpertParam]:
    """The routed-expert parameters LoRA adapts on transformers 5 with peft ≥ 0.19 (knowledge/versions.py
    `moe_expert_lora`): `gate_up_proj` when both gate and up are targeted (rank and alpha doubled: peft 0.21.2
    utils/transformers_weight_conversion.py `_convert_peft_config_moe`; one of the two alone makes peft raise),
    `down_proj` when down is, and under "all-linear" the router's weight (one h × E matrix). Mixtral's experts answer
    to w1/w3/w2, which the canonical names do not tell apart from gate_proj/up_proj/down_proj: only "all-linear"
    reaches them here."""
    arch = rp.arch
    named = _named_expert_parameters(rp)
    if rp.peft == "none" or not arch.is_moe or _expert_lora(rp) != "parameters" or arch.mlp not in ("swiglu", "geglu"):
        return named
    targets = set(rp.lora_targets)
    all_lin = "all-linear" in targets
    by_name = versions.MOE_CONVERSION_PATTERN[arch.family] == "qwen2_moe"
    h, E, r = arch.hidden, arch.num_experts, rp.lora_r
    inter = arch.moe_intermediate or arch.intermediate
    moe_layers = arch.layers - arch.dense_layers
    out: list[ExpertParam] = []
    if all_lin or by_name and {"gate", "up"} <= targets:
        out.append(ExpertParam("gate_up", E, h, 2 * inter, 2 * r, moe_layers))
    if all_lin or by_name and "down" in targets:
        out.append(ExpertParam("down", E, inter, h, r, moe_layers))
    if all_lin:
        out.append(ExpertParam("router", 1, h, E, r, moe_layers))
    return out + [e for e in named if e.name not in {o.name for o in out}]


def _named_expert_parameters(rp: ResolvedPlan) -> list[ExpertParam]:
    """The expert parameters a config names itself (peft `target_parameters`, `expert_targets`): rank r per expert on
    each named stack, gate_up included (peft 0.21.2 tuners/lora/layer.py `ParamWrapper.update_layer`: lora_A
    r·E × in, lora_B out × r·E; no doubling, which only peft's conversion of target_modules names applies)."""
    arch = rp.arch
    if not rp.expert_targets or rp.peft == "none" or not fused_experts(rp) or arch.mlp not in ("swiglu", "geglu"):
        return []
    h, E, r = arch.hidden, arch.num_experts, rp.lora_r
    inter = arch.moe_intermediate or arch.intermediate
    moe_layers = arch.layers - arch.dense_layers
    sizes = {"gate_up": (E, h, 2 * inter), "down": (E, inter, h), "router": (1, h, E)}
    return [ExpertParam(n, *sizes[n], r, moe_layers) for n in ("gate_up", "down", "router") if n in rp.expert_targets]


def lora_linears(rp: ResolvedPlan) -> list:
    """The nn.Linear modules LoRA adapts (`estimate.shapes.targeted`). Where peft rewrites a MoE model's targets for
    its fused experts (`expert_parameters`), the gate/up/down names leave `target_modules` for `target_parameters`
    (peft 0.21.2 utils/transformers_weight_conversion.py `_convert_peft_config_moe`: only `remaining_target_modules`
    stay, and "all-linear" is first resolved to leaf names, gate_proj/up_proj/down_proj among them), so the dense
    layers' MLPs and the shared experts, nn.Linear modules of those names, get no adapter."""
    linears = targeted(rp.arch, rp.lora_targets, experts_adaptable(rp))
    if moves_mlp_targets(rp):
        linears = [l for l in linears if l.name not in ("gate", "up", "down")]
    return linears


def moves_mlp_targets(rp: ResolvedPlan) -> bool:
    """Whether peft moves the gate/up/down target names to the fused experts' parameters (`lora_linears`): LoRA and
    DoRA (peft's conversion is for `PeftType.LORA` only) on a family peft converts by those names."""
    arch = rp.arch
    return (
        rp.peft in ("lora", "qlora", "dora")
        and not rp.adapter_method
        and arch.is_moe
        and _expert_lora(rp) == "parameters"
        and versions.MOE_CONVERSION_PATTERN.get(arch.family) == "qwen2_moe"
    )


def expert_adapter_notes(rp: ResolvedPlan) -> list[str]:
    """What the estimate says about LoRA on fused expert parameters: that it trains every expert, and that peft's
    `lora.ParamWrapper` refuses DoRA and LoRA dropout (peft 0.21.2 tuners/lora/layer.py `ParamWrapper.__init__`:
    `ValueError` "lora.ParamWrapper does not work with use_dora=True" / "with lora_dropout != 0"), so such a run
    stops in `get_peft_model`."""
    params = [e for e in expert_parameters(rp) if e.name != "router"]
    if not params:
        return []
    tv, pv = rp.version_of("transformers"), rp.version_of("peft")
    with_versions = (
        f"peft {pv[0] if pv else versions.NEWEST['peft']} on transformers "
        f"{tv[0] if tv else versions.NEWEST['transformers']}"
    )
    names = " and ".join(f"{e.name}_proj" for e in params)
    gate_up = next((f", gate_up at {e.rank}" for e in params if e.name == "gate_up" and e.rank != rp.lora_r), "")
    moved = (
        " from the MLP names in its targets (peft ≥ 0.19 `_convert_peft_config_moe` moves every target ending in "
        "gate_proj, up_proj or down_proj, a shared expert's too, to the routed experts; with peft < 0.19 they adapt "
        "only the dense and shared-expert linears)"
        if moves_mlp_targets(rp)
        else ""
    )
    out = [
        f"LoRA on the routed experts: {with_versions} adapts the fused {names} parameters of every expert "
        f"(rank {rp.lora_r} per expert{gate_up}){moved}, "
        f"and each block keeps its adapted expert weights for backward"
    ]
    refused = [what for what, on in (("use_dora", rp.peft == "dora"), ("lora_dropout", rp.lora_dropout > 0)) if on]
    if refused:
        out.append(
            f"{' and '.join(refused)} on the routed experts: {with_versions} wraps them in lora.ParamWrapper, "
            f"which raises ValueError for {' and '.join(refused)} — the run stops in get_peft_model; target "
            f"only the attention, or set {'use_dora: false' if rp.peft == 'dora' else 'lora_dropout: 0'}"
        )
    return out


def expert_weight_copies(rp: ResolvedPlan) -> int:
    """Bytes per MoE block that adapted expert parameters keep for backward (peft 0.21.2 tuners/lora/layer.py
    `ParamWrapper._activate_lora`): the parametrization makes W' = W + scaling·BA, a new tensor of the whole expert
    stack in the weight's dtype, and grouped_mm saves it for the input's gradient (transformers 5.24
    integrations/moe.py `grouped_mm_experts_forward`). From peft 0.21 W' comes from one `baddbmm(W, lhs, rhs)` over
    the factors cast to the weight's dtype, which baddbmm saves for their gradients; 0.19–0.20 compute the delta
    from the fp32 factors themselves (`get_delta_weight`). The router's adapted weight is h × E: left out.
    Experts quantized on load (`kbit_experts`) are a new tensor on every read too: each stack the block does not
    adapt is dequantized (once per forward: bitsandbytes 0.50.2 nn/parametrize.py `_register_parametrization_hooks`
    caches it for the module's forward) and saved by grouped_mm for the input's gradient."""
    wb = expert_bytes(rp)
    pv = rp.version_of("peft")
    factors = versions.peft_folds_expert_factors(pv[0] if pv else None)
    out = adapted = 0
    for e in expert_parameters(rp):
        if e.name == "router":
            continue
        out += e.weight_params * wb
        adapted += e.weight_params
        if factors:
            out += e.experts * e.rank * (e.in_features + e.out_features) * wb
    if kbit_experts(rp):
        out += max(routed_block_params(rp) - adapted, 0) * wb
    return out


def expert_weight_grad(rp: ResolvedPlan) -> int:
    """Bytes the backward of one MoE block with adapted expert parameters makes beyond what it keeps: grouped_mm's
    weight gradient is a whole expert stack (torch derivatives.yaml `_grouped_mm`: mat2's gradient is
    `_grouped_mm(self.t(), grad)`), made while W' is still saved; the down projection's runs first with both
    stacks alive, the gate|up one's after the down stack is freed."""
    wb = expert_bytes(rp)
    stacks = {e.name: e.weight_params * wb for e in expert_parameters(rp) if e.name != "router"}
    gu, down = stacks.get("gate_up", 0), stacks.get("down", 0)
    return max(down, gu - down)


# MoE families whose experts run every expert on every token, each token's input scaled by its routing score (0 for
# the experts it was not routed to): transformers 5.24 models/llama4/modeling_llama4.py `Llama4TextMoe.forward`
# (`hidden_states.repeat(num_experts, 1) * router_scores`, then `Llama4TextExperts.forward`'s bmm over all experts)
DENSE_ROUTED_FAMILIES = {"llama4_text", "llama4"}


def expert_passes(rp: ResolvedPlan) -> int:
    """How many expert MLPs each token runs through in a MoE layer: the chosen experts_per_token, or every expert
    where the family's modelling code runs them all (`DENSE_ROUTED_FAMILIES`)."""
    arch = rp.arch
    if arch.family in DENSE_ROUTED_FAMILIES:
        return max(arch.num_experts, 1)
    return max(arch.experts_per_token, 1)


# MoE families whose fused experts carry biases and gpt-oss's clamped SwiGLU, run by transformers' grouped_mm path
# (transformers 5.24 models/gpt_oss/modeling_gpt_oss.py `GptOssExperts`: `use_experts_implementation(has_bias=True)`)
BIASED_CLAMPED_EXPERTS = {"gpt_oss"}
# MoE families whose shared expert's output is scaled by a sigmoid gate (transformers 5.24
# models/qwen2_moe/modeling_qwen2_moe.py `Qwen2MoeSparseMoeBlock`: `shared_expert_gate`, h → 1; Qwen3-Next's and
# Qwen3.5-MoE's blocks the same)
GATED_SHARED_EXPERT = {"qwen2_moe", "qwen3_next", "qwen3_5_moe_text"}


def _attention_mask_kinds(rp: ResolvedPlan) -> int:
    """How many distinct 4-D masks gpt-oss's layers read: transformers 5.24 `GptOssModel.forward` builds a full and a
    sliding-window causal mask (`causal_mask_mapping`) and hands each layer the one of its `layer_types` (default:
    sliding and full alternating, `GptOssConfig.__post_init__`)."""
    config = json.loads(rp.arch.hf_config_json) if rp.arch.hf_config_json else {}
    kinds = config.get("layer_types")
    if not isinstance(kinds, list) or len(kinds) != rp.arch.layers:
        kinds = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(rp.arch.layers)]
    return len(set(kinds))


def _recomputed_grouped_mm_forward(rp: ResolvedPlan, one_layer: float, r: int, locals_: float) -> float:
    """`recomputed_experts_forward_per_token` of frozen routed experts without biases or a clamped gate (Qwen3.5-MoE,
    Qwen3-MoE, Mixtral under adapters that do not reach them): the recomputed block peaks where
    `grouped_mm_experts_forward` un-permutes the weighted expert outputs (transformers 5.24 integrations/moe.py
    `weighted_out[inv_perm]`), its saved tensors (`one_layer`) made up to there, and alive beside them: the gathered
    tokens, which a frozen grouped_mm does not keep, the weighted output, which the un-permute does not keep, and its
    un-permuted copy (k·h each, the experts' dtype); the decoder layer's locals, its residual and the MLP's input
    (the norm's output, which the frozen router does not keep); and the gradients waiting for the block: its
    output's, and where the block ends with the routed sum (no gated shared expert after it: its product is the
    first node that unpacks a saved tensor, so the recompute runs before the sum's gradient is expanded), that sum's
    gradient expanded over the chosen experts (k·h). Traced on Qwen3.5-MoE (LoRA and QLoRA, checkpointed): the peak
    is there, in the block the backward recomputes. `r`: the residual stream's bytes per element; `locals_`: the
    decoder layer's locals, as the caller counts them."""
    arch = rp.arch
    h, k = arch.hidden, expert_passes(rp)
    eb = expert_bytes(rp)
    c = 2 if rp.compute_dtype != "fp32" else 4
    gated_shared = arch.family in GATED_SHARED_EXPERT and arch.shared_experts > 0
    not_made = c * h + c if gated_shared else 0  # the gated shared expert's product and sigmoid (`mlp_per_token`)
    waiting = r * h + (0 if gated_shared else k * h * eb)
    return one_layer + (3 * k * h * eb - not_made + locals_ + waiting) / max(rp.tensor_parallel, 1)


def recomputed_experts_forward_per_token(rp: ResolvedPlan, one_layer: float) -> float:
    """Bytes per token of the top checkpointed gpt-oss block at its recomputed forward's peak, in an adapter model
    whose experts are frozen (0 elsewhere; frozen experts of other families: `_recomputed_grouped_mm_forward`).
    transformers 5.24 checkpoints without reentrancy, and torch 2.13 torch/utils/checkpoint.py recomputes the block
    when the first backward node needing its saved tensors runs: here the un-permute's backward
    (`weighted_out[inv_perm]` keeps `inv_perm`), after the nodes that save nothing have made their gradients: the
    block output's and the per-token sum's, expanded over the chosen experts and made contiguous by the view's
    backward (k·h, the experts' dtype). Every block's mask is held by its checkpoint: each distinct eager mask
    (`_attention_mask_kinds`), b·s² in the residual stream's dtype. The recomputed forward peaks at one of two
    points:
    In the attention, where the sink logits less their max are made (transformers 5.24 models/gpt_oss/
    modeling_gpt_oss.py `eager_attention_forward`): three score-sized tensors, the masked scores, the scores with a
    sink column (`torch.cat`) and that less its max, in the mask's dtype (the residual stream's: fp32 in a k-bit or
    AMP run), and before them the input norm's fp32 upcast, the adapters' casts of their input, the norm's output
    (a local of the decoder layer), q and k after RoPE and v (locals of `GptOssAttention.forward`), K and V repeated
    to every head (`repeat_kv`, locals), and where q and k are fp32 under autocast the matmul's 16-bit casts of them.
    In the experts' gate, at `(up + 1) * glu` (transformers 5.24 integrations/moe.py `grouped_mm_experts_forward`,
    `GptOssExperts._apply_gate`), the block's saved tensors (`one_layer`) less the down projection's output not made
    yet, and:
      - the gate's output, down's input, which a frozen grouped_mm does not keep, and the clamped `up`, a local of
        `_apply_gate` that `up + 1` does not keep;
      - the locals of `grouped_mm_experts_forward`: the gathered tokens (`selected_hidden_states_g`, which a frozen
        grouped_mm does not keep) and the gate|up biases gathered per token-expert pair (`selected_biases`);
      - the decoder layer's locals: the residual (kept by the norm itself when the stream is fp32, which the norm
        does not upcast) and the MLP's input, the norm's output, which the frozen router does not keep.
    After the gate returns, `up`, the gate|up biases and the gate's output go as the down projection's bias, output,
    weighted output and its un-permuted copy come: a later peak only where h exceeds the intermediate width."""
    from vramlens.estimate.components.linears import linear_inputs_per_token

    arch = rp.arch
    if (
        not arch.is_moe
        or rp.peft not in ("lora", "qlora")
        or not rp.grad_checkpointing
        or rp.framework not in HF_MODEL_FRAMEWORKS
        or unsloth_kernels(rp)
        or not fused_experts(rp)
        or kbit_experts(rp)
        or expert_parameters(rp)
    ):
        return 0.0
    if arch.family in LLAMA4_FAMILIES:
        return 0.0  # every expert on every token by bmm, no un-permute (`llama4.recomputed_moe_forward_per_token`)
    h, inter, k = arch.hidden, arch.moe_intermediate or arch.intermediate, expert_passes(rp)
    eb = expert_bytes(rp)
    r = 4 if fp32_residual(rp) or rp.compute_dtype == "fp32" else 2
    locals_ = (r * h if r == 2 else 0) + r * h
    if arch.family not in BIASED_CLAMPED_EXPERTS:
        return _recomputed_grouped_mm_forward(rp, one_layer, r, locals_)
    # at the gate's output: + gated output, clamped up, gathered tokens, gathered gate|up biases; − down's output
    at_gate = k * eb * (inter + inter + h + 2 * inter - h)
    # at the un-permuted copy: − up, gate|up biases, gate output; + down's biases, output, weighted output, its copy
    at_unpermute = at_gate + k * eb * (4 * h - 4 * inter)
    in_experts = one_layer + (max(at_gate, at_unpermute) + locals_) / max(rp.tensor_parallel, 1)
    s = rp.seq_len
    q, kv, heads = arch.q_dim, arch.kv_dim, arch.heads
    qkv = 4 if mlp_bytes(rp) == 4 or rp.compute_dtype == "fp32" else 2  # q, k, v out of their linears
    casts = 2 * 2 * q if qkv == 4 and rp.compute_dtype != "fp32" else 0
    norm = (4 * h if r == 2 else 0) + 4 + r * h  # the fp32 upcast, the inverse root, the output
    scores = r * heads * (3 * s + 2) + 8 * heads  # masked, with the sink column, less its max; max's indices
    states = qkv * (q + 2 * kv + 2 * q) + casts
    in_attention = (norm + linear_inputs_per_token(rp).qkv + states + scores) / max(rp.tensor_parallel, 1)
    if rp.attn_impl != "eager":  # a fused attention kernel makes no score-sized tensor
        in_attention = 0.0
    waiting = r * h + k * h * eb
    masks = _attention_mask_kinds(rp) * r * s - (2 * s if rp.attn_mask else 0) if rp.attn_impl == "eager" else 0
    return max(in_experts, in_attention) + (waiting + max(masks, 0)) / max(rp.tensor_parallel, 1)
