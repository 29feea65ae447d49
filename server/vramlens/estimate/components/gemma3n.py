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

from vramlens.estimate.components.common import fp32_residual
from vramlens.resolved import ResolvedPlan


def _c(rp: ResolvedPlan) -> int:
    """Bytes per element of the block's own tensors (AltUp's copies and coefficients, LAuReL, the norms, the
    per-layer-input gate). A k-bit model without AMP runs them in fp32: prepare_model_for_kbit_training upcasts the
    embeddings, so the stream starts fp32, Gemma3nRMSNorm returns its input's dtype (`type_as`), and bitsandbytes'
    4-bit linears return theirs (`matmul_4bit(...).to(inp_dtype)`) — as the real-library trace of the QLoRA rows
    shows (benchmarks/results/trace_real_hybrids_vs_estimate.txt). Under AMP: 2, the autocast outputs' (no trace
    row checks Gemma-3n under AMP over a k-bit model)."""
    return 4 if fp32_residual(rp) and not rp.amp else 2


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
    c = _c(rp)
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
    """What `Gemma3nTextModel.forward` keeps per token outside its blocks, beyond a Llama model's final norm: what it
    keeps before the first block (`before_blocks_per_token`), the A - 1 projected AltUp copies after the last (the
    projection and its rescaled value each, and the last block's A outputs they read), and the final norm's fp32
    normalised value."""
    a = rp.arch
    g = shape(rp)
    c, h, A = _c(rp), a.hidden, g.altup
    full = rp.peft == "none"
    out = before_blocks_per_token(rp) + c * A * h + (A - 1) * 2 * c * h + 8
    if full:
        out += 2 * h + 8  # the final norm's fp32 normalised value (its weight trains) and lm_head's 16-bit input
    return out


def before_blocks_per_token(rp: ResolvedPlan) -> float:
    """What `Gemma3nTextModel.forward` keeps per token before its first block, held until the backward reaches the
    embeddings: the per-layer inputs every block's gate multiplies by; and when the embeddings' output needs a
    gradient (full fine-tuning, or transformers' `enable_input_require_grads` under checkpointing) the embeddings
    (read by `hidden_states_0**2` for the AltUp target magnitude, and by the projections when they train), the
    per-layer projection's norm (L·p wide), and the A - 1 projected AltUp copies (the projection, read by its own
    magnitude's `pow(2)` and by the product with the target magnitude, and that product, read by the division)."""
    a = rp.arch
    g = shape(rp)
    c, h, L, A, p = _c(rp), a.hidden, a.layers, g.altup, g.per_layer
    full = rp.peft == "none"
    out: float = c * L * p  # the per-layer inputs, kept by each block's product
    if full or rp.grad_checkpointing:
        out += c * h + _norm(p, L, full) + (A - 1) * 2 * c * h + 8
    if any(masked(rp, i) for i in range(len(g.layer_types))):
        # the sliding-window boolean mask, one (1, 1, s, s) for the batch (transformers 5.24 masking_utils.py
        # `create_sliding_window_causal_mask`), held by every sliding layer's checkpoint or SDPA call
        out += rp.seq_len / max(rp.micro_batch, 1)
    return out


def store_layers(rp: ResolvedPlan) -> list[int]:
    """The layers that store their K/V for the KV-sharing layers: the last layer of each type before the first
    sharing one (transformers 5.24 models/gemma3n/configuration_gemma3n.py `Gemma3nTextConfig.kv_sharing_modes`:
    "store"); none without sharing."""
    g = shape(rp)
    n = len(g.layer_types)
    if g.kv_shared <= 0 or g.kv_shared >= n:
        return []
    first = n - g.kv_shared
    return sorted({max(i for i in range(first) if g.layer_types[i] == t) for t in set(g.layer_types[:first])})


def kv_path_per_token(rp: ResolvedPlan) -> float:
    """What a recomputed K/V-storing layer leaves alive per token once checkpointing has recomputed it: its forward
    writes the recomputed K and V into the model's `KVSharingDict` (transformers 5.24 models/gemma3n/
    modeling_gemma3n.py `Gemma3nTextAttention.forward`: `shared_kv_states[self.layer_type] = key_states,
    value_states`), the dict every layer's checkpoint holds through its arguments until the backward ends, and
    with them the recomputed graph that made them and what it saved: AltUp's predict (the block's input among it),
    the input norm, k_proj's and v_proj's inputs (their adapters' copies and lora_A outputs under LoRA), k_norm,
    v_norm, and K and V themselves. Traced: the tiny config's storing layer 1 holds this while layer 0 is
    recomputed."""
    from vramlens.estimate.components.linears import adapter_input, linear_inputs_per_token

    a = rp.arch
    g = shape(rp)
    c, h, A = _c(rp), a.hidden, g.altup
    full = rp.peft == "none"
    nk = _norm(h, 1, full)
    out: float = nk + 4 * A + c * A * A + c * A * h + ((c * h + c * A) if full else 0)  # AltUp predict
    out += nk  # input_layernorm
    if full:
        out += c * h  # k_proj's and v_proj's input (the input norm's output)
    else:
        targets = set(rp.lora_targets)
        kv = [m for m in ("k", "v") if "all-linear" in targets or m in targets]
        if kv:
            copies = kv_adapters_per_token(rp, linear_inputs_per_token(rp))
            out += copies if copies else c * h  # own casts (or dropped copies), else the shared input itself
            fp32, b = adapter_input(rp)
            out += len(kv) * (4 if fp32 else b) * rp.lora_r  # lora_A's outputs, kept by lora_B
    out += _norm(a.d_head, a.n_kv_heads, full) + _norm(a.d_head, a.n_kv_heads, full, scaled=False)  # k/v norms
    return out + 2 * c * a.kv_dim  # K and V


def held_while_recomputing(rp: ResolvedPlan, lowest: bool) -> float:
    """Bytes per token Gemma-3n holds outside the block being recomputed when every block is checkpointed, beyond the
    blocks' inputs: what the model keeps before its first block (`before_blocks_per_token`); while the lowest block
    is recomputed also every storing layer's recomputed K/V path above it (`kv_path_per_token`), the gradient of the
    per-layer inputs summed over the blocks (L·p wide), and, when that block stores K/V for sharing layers, its
    recomputed K and V and the gradients of them that those layers' backward made."""
    out = before_blocks_per_token(rp)
    if lowest:
        g = shape(rp)
        stores = store_layers(rp)
        out += sum(kv_path_per_token(rp) for i in stores if i > 0)
        out += 2 * rp.arch.layers * g.per_layer
        if 0 in stores:
            # its K and V (in the dict again once recomputed) and their gradients from the sharing layers' backward
            out += 2 * 2 * 2 * rp.arch.kv_dim
    return out


def grads_not_made_at_lowest_recompute(rp: ResolvedPlan) -> int:
    """Parameters (a count) of a full fine-tune whose gradients do not exist yet while the lowest checkpointed block
    is recomputed, beyond the embedding's: that block's own (its backward has not run) and those of the modules
    `Gemma3nTextModel.forward` runs before the first block (their backward runs after every block's): the per-layer
    embeddings, per_layer_model_projection and its norm, and the A - 1 AltUp projections (transformers 5.24
    models/gemma3n/modeling_gemma3n.py `Gemma3nTextModel.__init__`). With the embeddings tied to the LM head, the
    head's gradient of the shared weight is alive already, waiting for the embedding's to be summed with it: less
    one embedding. Traced at small shapes: three blocks' gradients and the head's are alive at that peak."""
    if rp.peft != "none" or rp.trained_layers is not None:
        return 0
    a = rp.arch
    g = shape(rp)
    config = json.loads(a.hf_config_json) if a.hf_config_json else {}
    v = config.get("vocab_size_per_layer_input")
    vocab = v if isinstance(v, int) and v > 0 else a.vocab
    h, L, A, p, q, kv, d = a.hidden, a.layers, g.altup, g.per_layer, a.q_dim, a.kv_dim, a.d_head
    width = g.widths[0] if g.widths else a.intermediate
    block = (
        2 * h * q
        + 2 * h * kv
        + 2 * d  # q, k, v, o and the q/k norms
        + 3 * h * width  # the MLP
        + 4 * h  # input, post-attention, pre- and post-feedforward norms
        + h
        + A * A
        + A**3
        + A * h
        + h  # AltUp: correct_output_scale, the coefficients, the router and its norm
        + 2 * h * g.laurel_rank
        + h  # LAuReL and its norm
        + 2 * h * p
        + h  # the per-layer-input gate, projection and norm
    )
    before = vocab * L * p + h * L * p + p + (A - 1) * h * h
    tied = a.vocab * h if a.tied_embeddings else 0
    return max(block + before - tied, 0)


def recompute_peak_per_token(rp: ResolvedPlan, one_layer: float) -> float:
    """Bytes per token of a checkpointed Gemma-3n block at the peak of its recomputed forward, which torch's
    non-reentrant checkpoint runs when its backward starts (the last norm's weight product needs a saved tensor),
    up to the last tensor it saves (torch 2.13 torch/utils/checkpoint.py `_StopRecomputationError`): what it keeps
    (`one_layer`); the decoder layer's locals still alive then (`Gemma3nTextDecoderLayer.forward`): the corrected
    AltUp copies it will return, attn, attn_gated, attn_laurel, laurel_output, attn_ffw, attn_ffw_norm,
    attn_ffw_laurel_gated and per_layer_projection's output (16-bit, h wide each), and the input norm's and the
    pre-feedforward norm's outputs where no linear keeps them (adapters that keep their own cast or dropped copy,
    `linears.adapter_input`), the last norm's fp32 normalised value where its weight is frozen (the product with
    the weight reads it); and the gradients its backward started with: the incoming gradient of its A outputs and
    the fp32 gradient of its last norm's output (`Gemma3nRMSNorm.forward`'s `type_as` run backward). Traced: the
    lowest block's recompute is the step's peak."""
    from vramlens.estimate.components.linears import adapter_input

    c, h, A = _c(rp), rp.arch.hidden, shape(rp).altup
    out = one_layer + c * A * h + 8 * c * h + c * A * h + 4 * h
    if rp.peft != "none":
        out += 4 * h  # the last norm's normalised value, which its frozen weight's product reads
        targets = set(rp.lora_targets)
        copies = adapter_input(rp)[0] or rp.lora_dropout > 0
        for group in (("q", "k", "v"), ("gate", "up")):
            hit = "all-linear" in targets or any(m in targets for m in group)
            if copies or not hit:
                out += c * h  # the norm output feeding the group: no linear keeps it
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
