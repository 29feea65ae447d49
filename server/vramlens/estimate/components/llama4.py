"""Llama-4's text decoder: what its attention and MoE blocks keep beyond a Llama block's.

transformers 5.24 models/llama4/modeling_llama4.py:
  - `Llama4TextAttention`: RoPE layers (`no_rope_layers[i] == 1`; by default every layer but each
    `no_rope_layer_interval`-th) normalise q and k with `Llama4TextL2Norm` (`use_qk_norm`), which has no weight: it
    keeps the fp32 upcast and the fp32 inverse root per head; RoPE layers attend in chunks (`layer_types`
    "chunked_attention" when `attention_chunk_size` is set), so their SDPA call gets a mask once the sequence
    reaches the chunk (masking_utils.py `_ignore_causal_mask_sdpa`: `kv_length >= local_attention_size`), with
    which transformers repeats K/V to every head (integrations/sdpa_attention.py `use_gqa_in_sdpa`) and torch turns
    the boolean mask into an additive one in q's dtype on each call, kept by the kernel;
  - `Llama4TextMoe`: the router's top-k indices (int64) and fp32 sigmoid scores, the scores' 16-bit transposed
    copy, the input repeated for every expert (kept by its product with the scores) and that product (the fused
    experts' `bmm` input); `Llama4TextExperts` keeps gate|up and act(gate) per expert (and the product, down's
    input); the shared expert (`Llama4TextMLP`: nn.Linear gate/up/down, which LoRA targets reach) keeps gate, up,
    act(gate) and down's input.
Checked against saved-tensor hooks on the real modules (tests/trace/test_gemma3n_llama4_layers.py)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from vramlens.resolved import ResolvedPlan

FAMILIES = {"llama4_text", "llama4"}


@dataclass(frozen=True)
class Llama4Shape:
    rope: tuple[bool, ...]  # per layer: RoPE (and chunked attention, qk norm) or NoPE
    qk_norm: bool
    chunk: int | None  # attention_chunk_size
    moe: tuple[bool, ...]  # per layer: MoE block or dense MLP


@functools.cache
def _shape(config_json: str, layers: int, dense_layers: int, is_moe: bool) -> Llama4Shape:
    """Defaults: transformers 5.24 models/llama4/configuration_llama4.py `Llama4TextConfig.__post_init__`."""
    config = json.loads(config_json) if config_json else {}
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    interval = config.get("no_rope_layer_interval", 4)
    interval = interval if isinstance(interval, int) and interval > 0 else 4
    rope = config.get("no_rope_layers")
    if not (isinstance(rope, list) and len(rope) == layers):
        rope = [int((i + 1) % interval != 0) for i in range(layers)]
    chunk = config.get("attention_chunk_size", 8192)
    moe_layers = config.get("moe_layers")
    if not isinstance(moe_layers, list):
        step = config.get("interleave_moe_layer_step")
        if isinstance(step, int) and step > 0:
            moe_layers = list(range(step - 1, layers, step))
        else:  # the dense layers first, as `ModelArch.dense_layers` counts them
            moe_layers = list(range(dense_layers, layers)) if is_moe else []
    moe_set = {i for i in moe_layers if isinstance(i, int)}
    return Llama4Shape(
        rope=tuple(bool(r) for r in rope),
        qk_norm=config.get("use_qk_norm", True) is not False,
        chunk=chunk if isinstance(chunk, int) and chunk > 0 else None,
        moe=tuple(i in moe_set for i in range(layers)),
    )


def llama4(rp: ResolvedPlan) -> bool:
    """Whether the plan's model is Llama-4's text decoder run by transformers' own modelling code, in 16 bits."""
    from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS

    return rp.arch.family in FAMILIES and rp.framework in HF_MODEL_FRAMEWORKS and rp.compute_dtype != "fp32"


def shape(rp: ResolvedPlan) -> Llama4Shape:
    a = rp.arch
    return _shape(a.hf_config_json or "", a.layers, a.dense_layers, a.is_moe)


def attention_extra_per_token(rp: ResolvedPlan, i: int) -> float:
    """What layer i's attention keeps per token beyond `attention_per_token`'s count (grouped K/V unrepeated, no
    mask, no q/k norm): the L2 norm of q and k on a RoPE layer, and on a chunked layer masked by its chunks the
    repeated K/V and the additive mask (2 bytes a key; with a padding mask in the batch every layer has a mask,
    which `attention_mask_bytes` and the plan's `repeat_kv` count)."""
    a = rp.arch
    g = shape(rp)
    c = 2
    out = 0.0
    rope = g.rope[i] if i < len(g.rope) else True
    if rope and g.qk_norm:
        out += 4 * (a.q_dim + a.kv_dim) + 4 * (a.heads + a.n_kv_heads)
    chunked = rope and g.chunk is not None and rp.seq_len >= g.chunk
    if chunked and not rp.attn_mask:
        out += c * rp.seq_len + (0 if rp.repeat_kv else 2 * c * (a.q_dim - a.kv_dim))
    return out


def moe_per_token(rp: ResolvedPlan, lin_mlp: float) -> float:
    """What one `Llama4TextMoe` block keeps per token, its input included (`Llama4TextMoe.forward`, module
    docstring). `lin_mlp`: what `linear_inputs_per_token` counts for the MLP's linears (the input and, trained,
    the experts' down input)."""
    from vramlens.estimate.components.common import mlp_bytes
    from vramlens.estimate.components.experts import expert_bytes
    from vramlens.estimate.components.linears import adapter_input

    a = rp.arch
    c = 2
    E, k, h = max(a.num_experts, 1), max(a.experts_per_token, 1), a.hidden
    inter = a.moe_intermediate or a.intermediate
    shared = (a.shared_expert_intermediate or inter) * max(a.shared_experts, 1)
    router = 8 * k + 4 * E + c * E  # top-k indices, fp32 sigmoid, the 16-bit transposed copy
    full = rp.peft == "none"
    if full:
        m = mlp_bytes(rp)
        # repeated input and its product with the scores; gate|up and act(gate) per expert; the shared expert's gate,
        # up, act(gate) and down input (its gate/up input is the block's, the experts' down input `lin_mlp`'s)
        return router + E * (2 * c * h + 3 * m * inter) + 4 * c * shared + lin_mlp
    eb = expert_bytes(rp)
    # frozen experts: the repeated input (kept by its product with the trained scores), gate|up and act(gate);
    # no frozen bmm keeps its input. The shared expert: gate, up, act(gate) and its adapters' inputs
    out = router + E * (c * h + 3 * eb * inter) + 3 * c * shared
    targets = set(rp.lora_targets)
    hit = [(n, w) for n, w in (("gate", h), ("up", h), ("down", shared)) if "all-linear" in targets or n in targets]
    fp32, per = adapter_input(rp)
    if fp32 or rp.lora_dropout > 0:
        out += sum((per + (1 if rp.lora_dropout > 0 else 0)) * w for _, w in hit)
    else:
        out += (c * h if any(n != "down" for n, _ in hit) else 0) + (
            c * shared if any(n == "down" for n, _ in hit) else 0
        )
    return out


def recomputed_moe_forward_per_token(rp: ResolvedPlan, one_layer: float) -> float:
    """Bytes per token of the top checkpointed block, a `Llama4TextMoe` one, at its recomputed forward's peak under
    LoRA on 16-bit weights with the routed experts frozen (0 elsewhere). transformers 5.24 checkpoints without
    reentrancy; torch 2.13 torch/utils/checkpoint.py recomputes the block when the first backward node needing its
    saved tensors runs, the nodes that save nothing having made their gradients: the block output's, and the routed
    output's, which the sum over experts' backward expands and the reshape's backward makes contiguous (E·h). The
    forward then peaks in the shared expert's down projection, the block's last linear (`Llama4TextMoe.forward`:
    `out = self.shared_expert(hidden_states)` after the routed experts). Alive then, beside the block's saved
    tensors (`one_layer`):
      - `Llama4TextDecoderLayer.forward`'s locals: the attention output (`attention_states`, kept by no node), the
        residual (its norm keeps its fp32 upcast) and the MLP's input, the norm's output (the frozen router and
        the adapters' casts do not keep it);
      - `Llama4TextMoe.forward`'s locals: the scaled repeated input (`routed_in`, which the frozen experts' bmm
        does not keep) and the experts' output (`routed_out`), E·h each;
      - the shared expert's product, down's input, which the frozen base layer does not keep (the adapter keeps its
        own cast), and down's forward transients: the base layer's output, the adapter's scaled output in the
        adapter's dtype and its cast to the output's (peft 0.21.2 tuners/lora/layer.py `Linear.forward`);
      - the chunked attention's boolean mask, an input of every checkpointed block (masking_utils.py
        `create_chunked_causal_mask`, once for all chunked layers), s bytes a token."""
    from vramlens.estimate.components.common import fp32_residual, unsloth_kernels
    from vramlens.estimate.components.experts import expert_bytes, expert_parameters
    from vramlens.estimate.components.linears import adapter_input

    a = rp.arch
    if not llama4(rp):
        return 0.0
    g = shape(rp)
    if (
        rp.peft != "lora"
        or rp.quant_bits
        or fp32_residual(rp)
        or not rp.grad_checkpointing
        or not (g.moe and g.moe[-1])
        or unsloth_kernels(rp)
        or expert_parameters(rp)
    ):
        return 0.0
    c = 2
    E, h = max(a.num_experts, 1), a.hidden
    shared = (a.shared_expert_intermediate or a.moe_intermediate or a.intermediate) * max(a.shared_experts, 1)
    eb = expert_bytes(rp)
    targets = set(rp.lora_targets)
    fp32, per = adapter_input(rp)
    ad = per if fp32 else c
    down = c * h + ((ad * h + (c * h if ad != c else 0)) if "all-linear" in targets or "down" in targets else 0)
    locals_ = 3 * c * h + 2 * E * h * eb + c * shared + down
    waiting = c * h + E * h * eb
    chunked = any(r and g.chunk is not None and rp.seq_len >= g.chunk for r in g.rope)
    mask = rp.seq_len if chunked and not rp.attn_mask else 0
    return one_layer + (locals_ + waiting + mask) / max(rp.tensor_parallel, 1)
