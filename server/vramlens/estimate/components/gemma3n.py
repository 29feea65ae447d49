"""Gemma-3n's text decoder: what its blocks and the pieces around them keep for backward.

transformers 5.24 models/gemma3n/modeling_gemma3n.py `Gemma3nTextDecoderLayer.forward` runs, around an attention and
a gated MLP, AltUp's predict and correct steps over `altup_num_inputs` copies of the hidden state, LAuReL (a low-rank
residual), the per-layer-input gate, and four more norms than a Llama block; `Gemma3nTextAttention` normalises q, k
and v per head, and its last `num_kv_shared_layers` layers reuse the K/V of the last earlier layer of their type.
Every `Gemma3nRMSNorm` upcasts its input and multiplies by its weight in fp32 (`_norm(x.float()) * weight.float()`).
`Gemma3nTextModel.forward` projects the embeddings into the AltUp copies and the per-layer inputs before the first
block, and projects the copies back and averages them after the last.

Each figure below is what autograd saves (torch 2.13 tools/autograd/derivatives.yaml), counted per token in a 16-bit
step, and checked against saved-tensor hooks on the real modules (tests/trace/test_gemma3n_llama4_layers.py).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from vramlens.resolved import ResolvedPlan

FAMILY = "gemma3n_text"


@dataclass(frozen=True)
class Gemma3nShape:
    """The config fields that size Gemma-3n's extra pieces (defaults: transformers 5.24
    models/gemma3n/configuration_gemma3n.py `Gemma3nTextConfig`)."""

    altup: int  # altup_num_inputs
    laurel_rank: int
    per_layer: int  # hidden_size_per_layer_input
    kv_shared: int  # num_kv_shared_layers
    layer_types: tuple[str, ...]
    sliding_window: int
    sparsity: tuple[float, ...]  # activation_sparsity_pattern
    widths: tuple[int, ...]  # the MLP width of each layer (intermediate_size, one per layer)

    def shared(self, i: int) -> bool:
        """Whether layer i reuses an earlier layer's K/V (`Gemma3nTextConfig.kv_sharing_modes`: "reuse")."""
        return self.kv_shared > 0 and i >= len(self.layer_types) - self.kv_shared


@functools.cache
def _shape(config_json: str, layers: int, intermediate: int) -> Gemma3nShape:
    config = json.loads(config_json) if config_json else {}

    def number(key: str, default: int) -> int:
        v = config.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default

    types = config.get("layer_types")
    if not (isinstance(types, list) and len(types) == layers):
        # `__post_init__`: every fifth layer full attention, the others sliding
        types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(layers)]
    sparsity = config.get("activation_sparsity_pattern")
    if not (isinstance(sparsity, list) and len(sparsity) == layers):
        sparse = 10 if layers > 10 else 0
        sparsity = [0.95] * sparse + [0.0] * (layers - sparse)
    widths = config.get("intermediate_size")
    if not (isinstance(widths, list) and len(widths) == layers):
        widths = [number("intermediate_size", intermediate)] * layers
    return Gemma3nShape(
        altup=number("altup_num_inputs", 4),
        laurel_rank=number("laurel_rank", 64),
        per_layer=number("hidden_size_per_layer_input", 256),
        kv_shared=min(number("num_kv_shared_layers", 15), layers),
        layer_types=tuple(str(t) for t in types),
        sliding_window=number("sliding_window", 512),
        sparsity=tuple(float(x) if isinstance(x, (int, float)) else 0.0 for x in sparsity),
        widths=tuple(int(w) if isinstance(w, int) else intermediate for w in widths),
    )


def gemma3n(rp: ResolvedPlan) -> bool:
    """Whether the plan's model is Gemma-3n's text decoder run by transformers' own modelling code."""
    from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS

    return rp.arch.family == FAMILY and rp.framework in HF_MODEL_FRAMEWORKS and rp.compute_dtype != "fp32"


def shape(rp: ResolvedPlan) -> Gemma3nShape:
    return _shape(rp.arch.hf_config_json or "", rp.arch.layers, rp.arch.intermediate)


def _norm(width: int, groups: int, weight_trains: bool, scaled: bool = True) -> int:
    """A `Gemma3nRMSNorm` over `groups` vectors of `width` whose input needs a gradient: its fp32 upcast (kept by
    `pow(2)` and by the product with the inverse root), the fp32 mean square and its `pow(-0.5)` (4 bytes each per
    vector), and, when its weight trains, the fp32 normalised value the weight's gradient reads."""
    return 4 * width * groups + 8 * groups + (4 * width * groups if weight_trains and scaled else 0)


def masked(rp: ResolvedPlan, i: int) -> bool:
    """Whether layer i's SDPA call gets a mask with no padding mask in the batch: a sliding layer once the sequence
    reaches the window (transformers 5.24 masking_utils.py `_ignore_causal_mask_sdpa`: `kv_length >=
    local_attention_size` keeps the mask)."""
    g = shape(rp)
    return g.layer_types[i] == "sliding_attention" and rp.seq_len >= g.sliding_window


def layer_per_token(
    rp: ResolvedPlan, i: int, *, grad_in: bool, qkv: float, o: float, mlp: float, kv_adapters: float
) -> float:
    """What Gemma-3n's block i keeps per token, in bytes. `qkv`, `o`, `mlp`: what the attention's q/k/v linears (and
    their adapters), o and the MLP keep, as a Llama block's (`linear_inputs_per_token`, `mlp_per_token`);
    `kv_adapters`: of `qkv`, what k's and v's adapters alone keep (a KV-shared layer has no k_proj or v_proj);
    `grad_in`: whether the block's input needs a gradient (not in the first block of an adapter run whose embeddings
    are frozen: autograd saves nothing for an op none of whose inputs needs one)."""
    a = rp.arch
    g = shape(rp)
    c = 2
    h, q, kv, heads, kv_heads = a.hidden, a.q_dim, a.kv_dim, a.heads, a.n_kv_heads
    A, p = g.altup, g.per_layer
    full = rp.peft == "none"
    nk = _norm(h, 1, full)
    out = 0.0
    if grad_in:
        # AltUp predict: the router's norm and fp32 tanh, the router and coefficient linears' inputs (when they
        # train), the coefficients and the permuted copy of the A inputs `matmul` reshapes (`Gemma3nTextAltUp.predict`)
        out += nk + 4 * A + c * A * A + c * A * h + ((c * h + c * A) if full else 0)
        out += nk  # input_layernorm
        # LAuReL: linear_left reads q_proj's input (counted with q's); linear_right's input; its norm
        out += (c * g.laurel_rank if full else 0) + nk
    shared = g.shared(i)
    out += qkv - (kv_adapters if shared else 0)
    out += _norm(a.d_head, heads, full)  # q_norm
    if not shared:
        out += _norm(a.d_head, kv_heads, full) + _norm(a.d_head, kv_heads, full, scaled=False)
    # SDPA (CUDA and the CPU kernels keep q, K, V, the output and the fp32 logsumexp): with a mask transformers
    # repeats K/V to every head (integrations/sdpa_attention.py `use_gqa_in_sdpa`) and torch turns the boolean mask
    # into an additive one in q's dtype on each call, which the kernel keeps (2 bytes a key); a shared layer without
    # a mask reads the K/V its producer keeps
    layer_masked = masked(rp, i) and not rp.attn_mask
    kv_kept = 2 * c * q if (layer_masked or rp.attn_mask or rp.repeat_kv) else (0 if shared else 2 * c * kv)
    out += c * q + kv_kept + c * q + 4 * heads + (c * rp.seq_len if layer_masked else 0)
    out += o
    out += nk  # post_attention_layernorm
    out += nk  # pre_feedforward_layernorm
    width = g.widths[i] if i < len(g.widths) else a.intermediate
    out += mlp * width / max(a.intermediate, 1) if a.intermediate else mlp
    if i < len(g.sparsity) and g.sparsity[i] > 0:
        # `_gaussian_topk`: std keeps the gate output and its own result, relu its output (act_fn's input)
        out += c * width + 2 * c
    out += nk  # post_feedforward_layernorm
    # AltUp correct: the router's norm and fp32 tanh, the router's input and the coefficients' linear input (when
    # they train), the coefficients and the innovation repeated A times (`Gemma3nTextAltUp.correct`)
    out += nk + 4 * A + c * A + c * A * h + ((c * h + c * A) if full else 0)
    # the per-layer-input gate: the scaled first copy (when correct_output_scale trains) and per_layer_input_gate's
    # input, the activation's input, its output (the product's other factor needs a gradient only when the
    # per-layer embeddings train) and per_layer_projection's input, then its norm
    out += (2 * c * h + 2 * c * p if full else 0) + c * p + nk
    return out


def outside_per_token(rp: ResolvedPlan) -> float:
    """What `Gemma3nTextModel.forward` keeps per token outside its blocks, beyond a Llama model's final norm: the
    embeddings (per_layer_model_projection's input), the per-layer projection's norm (L·p wide), the per-layer inputs
    every block's gate multiplies by, the A - 1 projected AltUp copies before the first block (the projection and its
    rescaled value each) and after the last (the same, and the last block's A outputs they read), and the final
    norm's fp32 normalised value."""
    a = rp.arch
    g = shape(rp)
    c, h, L, A, p = 2, a.hidden, a.layers, g.altup, g.per_layer
    full = rp.peft == "none"
    embeds_grad = full or rp.grad_checkpointing  # transformers' enable_input_require_grads under checkpointing
    out = c * L * p  # the per-layer inputs, kept by each block's product
    if embeds_grad:
        out += (c * h if full else 0) + _norm(p, L, full) + (A - 1) * 2 * c * h + 8
    out += c * A * h + (A - 1) * 2 * c * h + 8
    if full:
        out += 2 * h + 8  # the final norm's fp32 normalised value (its weight trains) and lm_head's 16-bit input
    return out


def block_input_per_token(rp: ResolvedPlan) -> float:
    """A checkpointed Gemma-3n block's input: the A stacked AltUp copies of the hidden state."""
    return 2 * shape(rp).altup * rp.arch.hidden


def kv_adapters_per_token(rp: ResolvedPlan, lin) -> float:
    """Of what the q/k/v linears keep (`LinearInputs.qkv_adapters`), the part k's and v's adapters keep alone: each
    adapter keeps its own copy of the input when it casts it (fp32 adapters) or drops it (LoRA dropout); a 16-bit
    adapter without dropout keeps the input q_proj's adapter keeps too."""
    from vramlens.estimate.components.linears import adapter_input

    if rp.peft == "none":
        return 0.0
    targets = set(rp.lora_targets)
    hit = [m for m in ("q", "k", "v") if "all-linear" in targets or m in targets]
    kv = [m for m in hit if m != "q"]
    if not kv:
        return 0.0
    if adapter_input(rp)[0] or rp.lora_dropout > 0:
        return lin.qkv_adapters * len(kv) / len(hit)
    return lin.qkv_adapters if "q" not in hit else 0.0
