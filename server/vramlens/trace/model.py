"""A synthetic model with the plan's shapes, written in plain torch the way the Hugging Face modelling code
computes (so it saves the same tensors for backward), without transformers and without weights.

Covered: Llama/Mistral/Qwen/Gemma-style decoders (GQA, SwiGLU/GeGLU, RMSNorm computed in fp32, q/k norms,
Gemma's four norms and embedding scale, OLMo-2 post-norms), Mixture-of-Experts MLPs (router, top-k experts,
shared experts, leading dense layers), GPT-2-style decoders (LayerNorm, biases, learned positions, GELU),
BERT-style encoders (post-LN, sequence-classification head) and T5-style encoder-decoders.

PEFT semantics follow peft's `LoraLayer.forward`: the base layer runs first, the input is cast to the adapter
dtype in every adapted module (fp32 adapters keep their own fp32 copy of the input), and DoRA follows
`DoraLinearLayer.forward`. LoRA dropout runs CUDA's `native_dropout` (a 1-byte mask), not the CPU path.
4-bit and 8-bit base weights go through bitsandbytes' functional API, which has fake-tensor kernels
(`Params4bit` in `bitsandbytes/nn/modules.py` cannot wrap a fake tensor; docs/memory-model.md); with
`quant_keeps_input` the
4-bit matmul is the one bitsandbytes < 0.43.2 ran, which keeps its input for backward.

litgpt's step (`cfg.litgpt`) swaps the attention for litgpt's: a fused qkv linear with litgpt's LoRAQKVLinear,
q/k/v as views of its output, RoPE through torch.cat, repeat_interleave for grouped K/V and SDPA without a mask.

Parameter counts match `vramlens.estimate.shapes` (one exception: the BERT classifier adds 2h + 2).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from vramlens.knowledge.models import EMBEDDING_NORM, QKV_BIAS_ONLY  # families whose o_proj has no bias
from vramlens.trace import losses
from vramlens.trace.config import StepConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
Mark = Callable[[str], None]


def _noop(_: str) -> None:
    pass


# -- building blocks ----------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """HF LlamaRMSNorm (fp32 computation, weight applied in the input dtype) or GemmaRMSNorm
    (weight applied as (1 + w) in fp32)."""

    def __init__(self, dim: int, eps: float = 1e-6, gemma: bool = False, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))
        self.eps, self.gemma = eps, gemma

    def forward(self, x):
        if self.gemma:
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (h * (1.0 + self.weight.float())).type_as(x)
        in_dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(in_dtype)


def make_norm(cfg: StepConfig, dim: int, dtype) -> nn.Module:
    if cfg.arch.norm == "layernorm":
        return nn.LayerNorm(dim, eps=1e-5, dtype=dtype)
    return RMSNorm(dim, gemma=cfg.gemma, dtype=dtype)


class Quant4bitLinear(nn.Module):
    """Frozen NF4/FP4 weight (bitsandbytes Linear4bit semantics) through `quantize_4bit` + `matmul_4bit`."""

    def __init__(self, in_f: int, out_f: int, bias: bool, cfg: StepConfig, bias_dtype):
        super().__init__()
        self.in_features, self.out_features = in_f, out_f
        self.compute_dtype = DTYPES[cfg.compute_dtype]
        self.quant_type, self.double = cfg.quant_type if cfg.quant_type in ("nf4", "fp4") else "nf4", cfg.quant_double
        self.storage = {"uint8": torch.uint8, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
            cfg.quant_storage
        ]
        self.bias = nn.Parameter(torch.zeros(out_f, dtype=bias_dtype), requires_grad=False) if bias else None
        self.qs = None
        self.keeps_input = cfg.quant_keeps_input
        self.source_dtype = torch.float16 if cfg.quant_from_fp16 else self.compute_dtype

    def quantize_(self, device, real: bool) -> None:
        import bitsandbytes as bnb

        w = torch.empty(self.out_features, self.in_features, dtype=self.source_dtype, device=device)
        if real:
            w.normal_(0.0, 0.02)
        packed, self.qs = bnb.functional.quantize_4bit(
            w, blocksize=64, compress_statistics=self.double, quant_type=self.quant_type, quant_storage=self.storage
        )
        del w
        self.register_buffer("packed", packed)

    def quant_constants(self) -> list[torch.Tensor]:
        qs, out = self.qs, []
        while qs is not None:
            out += [t for t in (qs.absmax, qs.code, getattr(qs, "offset", None)) if isinstance(t, torch.Tensor)]
            qs = getattr(qs, "state2", None)
        return out

    def dequantized(self):
        import bitsandbytes as bnb

        return bnb.functional.dequantize_4bit(self.packed, self.qs)

    def forward(self, x):
        import bitsandbytes as bnb

        inp_dtype = x.dtype
        x = x.to(self.compute_dtype)
        bias = None if self.bias is None else self.bias.to(self.compute_dtype)
        if self.keeps_input:
            return KeptInputMatMul4Bit.apply(x, self.packed, bias, self.qs).to(inp_dtype)
        return bnb.matmul_4bit(x, self.packed.t(), bias=bias, quant_state=self.qs).to(inp_dtype)


class KeptInputMatMul4Bit(torch.autograd.Function):
    """`MatMul4Bit` as bitsandbytes <= 0.43.1 ran it (bitsandbytes/autograd/_functions.py before PR #1270,
    released in 0.43.2): the forward dequantizes the whole weight and calls `F.linear`, and `ctx.tensors = (A, B)`
    keeps the input A until backward although backward never reads it; backward dequantizes the weight again for
    grad_A. Built on `bitsandbytes.functional.dequantize_4bit`, which has fake-tensor kernels.

    A is kept through `save_for_backward` (bitsandbytes used a ctx attribute): under the non-reentrant checkpoint
    the trace uses, a recomputed block then frees it, as the Hugging Face default (reentrant) checkpoint did."""

    @staticmethod
    def forward(ctx, A, packed, bias, qs):
        import bitsandbytes as bnb

        out = F.linear(A, bnb.functional.dequantize_4bit(packed, qs).to(A.dtype), bias)
        ctx.qs, ctx.bias_dtype = qs, None if bias is None else bias.dtype
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(A, packed)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        import bitsandbytes as bnb

        grad_A = grad_bias = None
        if ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0, dtype=ctx.bias_dtype)
        if ctx.needs_input_grad[0]:
            _, packed = ctx.saved_tensors
            grad_A = torch.matmul(grad_output, bnb.functional.dequantize_4bit(packed, ctx.qs).to(grad_output.dtype))
        return grad_A, None, grad_bias, None


class Quant8bitLinear(nn.Module):
    """Frozen LLM.int8 weight (bitsandbytes Linear8bitLt with has_fp16_weights=False, threshold 0)."""

    def __init__(self, in_f: int, out_f: int, bias: bool, cfg: StepConfig, bias_dtype):
        super().__init__()
        self.in_features, self.out_features = in_f, out_f
        self.compute_dtype = DTYPES[cfg.compute_dtype]
        self.bias = nn.Parameter(torch.zeros(out_f, dtype=bias_dtype), requires_grad=False) if bias else None

    def quantize_(self, device, real: bool) -> None:
        import bitsandbytes as bnb

        w = torch.empty(self.out_features, self.in_features, dtype=self.compute_dtype, device=device)
        if real:
            w.normal_(0.0, 0.02)
        cb, scb, _ = bnb.functional.int8_vectorwise_quant(w)
        del w
        self.register_buffer("CB", cb)
        self.register_buffer("SCB", scb)

    def quant_constants(self) -> list[torch.Tensor]:
        return [self.SCB]

    def dequantized(self):
        return self.CB.to(self.compute_dtype) * (self.SCB.unsqueeze(1) / 127.0).to(self.compute_dtype)

    def forward(self, x):
        import bitsandbytes as bnb

        state = bnb.MatmulLtState()
        state.CB, state.SCB, state.has_fp16_weights, state.threshold = self.CB, self.SCB, False, 0.0
        state.is_training = self.training
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return bnb.matmul(x, self.CB, bias=bias, state=state)


class CudaDropout(nn.Module):
    """`nn.Dropout` as it runs on CUDA: `F.dropout` takes the fused `native_dropout` kernel there, which keeps a
    1-byte bool mask for backward. On the CPU device the trace runs on it would multiply by a noise tensor of the
    input's dtype instead (ATen Dropout.cpp, `is_fused_kernel_acceptable` is CUDA/XPU-only), so this calls
    `native_dropout` itself."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p <= 0:
            return x
        return torch.native_dropout(x, self.p, True)[0]


def make_dropout(p: float) -> nn.Module:
    return CudaDropout(p) if p > 0 else nn.Identity()


class LoraLinear(nn.Module):
    """peft LoRA/DoRA around a frozen base linear."""

    def __init__(self, base: nn.Module, in_f: int, out_f: int, cfg: StepConfig, adapter_dtype):
        super().__init__()
        self.base = base
        r = max(cfg.lora_r, 1)
        self.lora_A = nn.Linear(in_f, r, bias=False, dtype=adapter_dtype)
        self.lora_B = nn.Linear(r, out_f, bias=False, dtype=adapter_dtype)
        self.scaling = cfg.lora_alpha / r
        self.drop = make_dropout(cfg.lora_dropout)
        self.dora = cfg.peft == "dora"
        if self.dora:
            self.lora_magnitude = nn.Parameter(torch.ones(out_f, dtype=adapter_dtype))

    def _base_weight(self):
        if isinstance(self.base, (Quant4bitLinear, Quant8bitLinear)):
            return self.base.dequantized()
        return self.base.weight

    def _dora(self, x, base_result):
        x_eye = torch.eye(self.lora_A.weight.shape[1], device=x.device, dtype=x.dtype)
        lora_weight = self.lora_B(self.lora_A(x_eye)).T
        weight = self._base_weight().to(x.dtype)
        weight_norm = torch.linalg.norm(weight + self.scaling * lora_weight.detach(), dim=1).to(weight.dtype)
        weight_norm = weight_norm.detach()
        mag_norm_scale = (self.lora_magnitude / weight_norm).view(1, -1)
        lora_result = self.lora_B(self.lora_A(x))
        if base_result is None:
            base_result = F.linear(x, weight)
        elif getattr(self.base, "bias", None) is not None:
            base_result = base_result - self.base.bias
        return (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * self.scaling

    def forward(self, x):
        result = self.base(x)
        out_dtype = result.dtype
        x = x.to(self.lora_A.weight.dtype)
        if not self.dora:
            result = result + self.lora_B(self.lora_A(self.drop(x))) * self.scaling
        elif isinstance(self.drop, nn.Identity):
            result = result + self._dora(x, result)
        else:
            result = result + self._dora(self.drop(x), None)
        return result.to(out_dtype)


def adapter_dtype(cfg: StepConfig):
    return torch.float32 if (cfg.adapter_fp32 or cfg.param_dtype == "fp32") else DTYPES[cfg.compute_dtype]


def base_linear(cfg: StepConfig, name: str, in_f: int, out_f: int, bias: bool, dtype, other_dtype) -> nn.Module:
    """A frozen-or-trained linear without adapter: quantized when the plan quantizes (every block linear, as
    bitsandbytes does; the LM head too when `quant_lm_head`)."""
    quantize = name != "lm_head" or cfg.quant_lm_head
    if cfg.quant_bits == 4 and quantize:
        return Quant4bitLinear(in_f, out_f, bias, cfg, other_dtype)
    if cfg.quant_bits == 8 and quantize:
        return Quant8bitLinear(in_f, out_f, bias, cfg, other_dtype)
    return nn.Linear(in_f, out_f, bias=bias, dtype=other_dtype if name == "lm_head" else dtype)


def make_linear(cfg: StepConfig, name: str, in_f: int, out_f: int, bias: bool, dtype, other_dtype) -> nn.Module:
    """A linear as `base_linear` builds it, wrapped in a LoRA/DoRA adapter when the plan targets it."""
    base = base_linear(cfg, name, in_f, out_f, bias, dtype, other_dtype)
    if cfg.targets(name):
        return LoraLinear(base, in_f, out_f, cfg, adapter_dtype(cfg))
    return base


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, rep: int):
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float = 10000.0):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", torch.empty(head_dim // 2, dtype=torch.float32), persistent=False)

    def init_(self):
        d = self.head_dim
        self.inv_freq.copy_(
            1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=self.inv_freq.device) / d))
        )

    def forward(self, x, pos, dtype=None):
        freqs = pos[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        dtype = dtype or x.dtype
        return emb.cos().to(dtype), emb.sin().to(dtype)


class Attention(nn.Module):
    def __init__(self, cfg: StepConfig, dtype, other_dtype, causal: bool = True):
        super().__init__()
        a = cfg.arch
        self.cfg, self.causal = cfg, causal
        self.heads, self.kv_heads, self.d = a.heads, a.n_kv_heads, a.d_head
        h, qd, kvd = a.hidden, a.q_dim, a.kv_dim
        o_bias = a.attn_bias and a.family not in QKV_BIAS_ONLY
        self.q = make_linear(cfg, "q", h, qd, a.attn_bias, dtype, other_dtype)
        self.k = make_linear(cfg, "k", h, kvd, a.attn_bias, dtype, other_dtype)
        self.v = make_linear(cfg, "v", h, kvd, a.attn_bias, dtype, other_dtype)
        self.o = make_linear(cfg, "o", qd, h, o_bias, dtype, other_dtype)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.d, gemma=cfg.gemma, dtype=other_dtype)
            self.k_norm = RMSNorm(self.d, gemma=cfg.gemma, dtype=other_dtype)

    def forward(self, x, rope=None, mask=None, kv_source=None):
        c = self.cfg
        b, s, _ = x.shape
        src = x if kv_source is None else kv_source
        sk = src.shape[1]
        q = self.q(x).view(b, s, self.heads, self.d)
        k = self.k(src).view(b, sk, self.kv_heads, self.d)
        v = self.v(src).view(b, sk, self.kv_heads, self.d)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if rope is not None:
            cos, sin = rope[0][:, None], rope[1][:, None]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        repeated = rep > 1 and (c.attention == "eager" or c.repeat_kv)
        if repeated:
            k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        if c.attention == "eager":
            scores = torch.matmul(q, k.transpose(2, 3)) * (self.d**-0.5)
            if mask is not None:
                scores = scores + mask
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs, v)
        else:
            causal = self.causal and mask is None and kv_source is None
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask if self.causal else None, is_causal=causal, enable_gqa=rep > 1 and not repeated
            )
        out = out.transpose(1, 2).reshape(b, s, self.heads * self.d)
        return self.o(out)


class FusedQKV(nn.Module):
    """litgpt's `CausalSelfAttention.qkv`: one linear for q, k and v ([q | k | v] along its output), and, when
    LoRA adapts any of them, litgpt's `LoRAQKVLinear` (litgpt/lora.py): one dropout and one `lora_A` of
    r × (adapted parts) rows for all of them, `lora_B` applied as a grouped conv1d, the update scattered into a
    zero tensor of the full qkv width (`zero_pad`) unless q, k and v are all adapted."""

    def __init__(self, cfg: StepConfig, dtype, other_dtype):
        super().__init__()
        a = cfg.arch
        self.sizes = (a.q_dim, a.kv_dim, a.kv_dim)
        self.mha = a.heads == a.n_kv_heads
        self.out_features = sum(self.sizes)
        self.base = base_linear(cfg, "qkv", a.hidden, self.out_features, a.attn_bias, dtype, other_dtype)
        self.enabled = tuple(cfg.targets(n) for n in ("q", "k", "v"))
        self.lora = any(self.enabled)
        if self.lora:
            r, n = max(cfg.lora_r, 1), sum(self.enabled)
            self.lora_shapes = [size for size, on in zip(self.sizes, self.enabled) if on]
            self.lora_A = nn.Parameter(torch.empty(r * n, a.hidden, dtype=adapter_dtype(cfg)))
            self.lora_B = nn.Parameter(torch.empty(sum(self.lora_shapes), r, dtype=adapter_dtype(cfg)))
            self.scaling = cfg.lora_alpha / r
            self.drop = make_dropout(cfg.lora_dropout)

    def _lora_index(self, device) -> torch.Tensor:
        starts = (0, self.sizes[0], self.sizes[0] + self.sizes[1])
        return torch.cat(
            [torch.arange(st, st + size, device=device) for st, size, on in zip(starts, self.sizes, self.enabled) if on]
        )

    def _zero_pad(self, x):
        if all(self.enabled):
            return x
        x = x.transpose(0, 1)
        result = x.new_zeros((*x.shape[:-1], self.out_features)).view(-1, self.out_features)
        result = result.index_copy(1, self._lora_index(x.device), x.reshape(-1, sum(self.lora_shapes)))
        return result.view((*x.shape[:-1], self.out_features)).transpose(0, 1)

    def forward(self, x):
        pretrained = self.base(x)
        if not self.lora:
            return pretrained
        after_A = F.linear(self.drop(x.to(self.lora_A.dtype)), self.lora_A)
        a_t, w = after_A.transpose(-2, -1), self.lora_B.unsqueeze(-1)
        n = sum(self.enabled)
        if self.mha:
            after_B = F.conv1d(a_t, w, groups=n)
        else:
            after_B = torch.cat([F.conv1d(a, b) for a, b in zip(a_t.chunk(n, dim=1), w.split(self.lora_shapes))], dim=1)
        lora = self._zero_pad(after_B.transpose(-2, -1)) * self.scaling
        return (pretrained + lora).to(pretrained.dtype)


def litgpt_rope(x, cos, sin):
    """litgpt/model.py `apply_rope` (cos/sin of shape (1, T, d), fp32: `fit` rebuilds the cache in fp32)."""
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    return ((x * cos) + (rotated * sin)).to(dtype=x.dtype)


class LitAttention(nn.Module):
    """litgpt's `CausalSelfAttention.forward` in training (no KV cache, no mask)."""

    def __init__(self, cfg: StepConfig, dtype, other_dtype):
        super().__init__()
        a = cfg.arch
        self.cfg = cfg
        self.heads, self.kv_heads, self.d = a.heads, a.n_kv_heads, a.d_head
        self.qkv = FusedQKV(cfg, dtype, other_dtype)
        o_bias = a.attn_bias and a.family not in QKV_BIAS_ONLY
        self.o = make_linear(cfg, "o", a.q_dim, a.hidden, o_bias, dtype, other_dtype)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.d, gemma=cfg.gemma, dtype=other_dtype)
            self.k_norm = RMSNorm(self.d, gemma=cfg.gemma, dtype=other_dtype)

    def forward(self, x, rope=None, mask=None, kv_source=None):
        c = self.cfg
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split(self.qkv.sizes, dim=-1)
        q = q.view(B, T, self.heads, self.d).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, self.d).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.d).transpose(1, 2)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rope
        q = torch.cat((litgpt_rope(q, cos, sin), q[..., self.d :]), dim=-1)
        k = torch.cat((litgpt_rope(k, cos, sin), k[..., self.d :]), dim=-1)
        if self.kv_heads != self.heads:
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scale = 1.0 / (self.d**0.5)
        if c.attn_softcap is not None:
            scores = q @ k.mT * scale
            scores = torch.tanh(scores / c.attn_softcap) * c.attn_softcap
            causal = torch.ones(T, T, dtype=q.dtype, device=q.device).triu(diagonal=1)
            causal.masked_fill_(causal.bool(), torch.finfo(q.dtype).min)
            scores = F.softmax(scores + causal, dim=-1, dtype=torch.float).to(dtype=q.dtype)
            y = scores @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=scale, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, self.heads * self.d)
        return self.o(y)


def _activation(cfg: StepConfig):
    if cfg.arch.mlp == "swiglu":
        return F.silu
    if cfg.arch.mlp == "relu":
        return F.relu
    if cfg.arch.family in ("bert", "roberta"):
        return F.gelu
    return lambda t: F.gelu(t, approximate="tanh")


class MLP(nn.Module):
    def __init__(self, cfg: StepConfig, inter: int, dtype, other_dtype):
        super().__init__()
        a = cfg.arch
        self.gated = a.mlp in ("swiglu", "geglu")
        self.act = _activation(cfg)
        if self.gated:
            self.gate = make_linear(cfg, "gate", a.hidden, inter, a.mlp_bias, dtype, other_dtype)
            self.up = make_linear(cfg, "up", a.hidden, inter, a.mlp_bias, dtype, other_dtype)
            self.down = make_linear(cfg, "down", inter, a.hidden, a.mlp_bias, dtype, other_dtype)
        else:
            self.fc1 = make_linear(cfg, "fc1", a.hidden, inter, a.mlp_bias, dtype, other_dtype)
            self.fc2 = make_linear(cfg, "fc2", inter, a.hidden, a.mlp_bias, dtype, other_dtype)

    def forward(self, x):
        if self.gated:
            return self.down(self.act(self.gate(x)) * self.up(x))
        return self.fc2(self.act(self.fc1(x)))


class MoE(nn.Module):
    """HF Mixtral/Qwen-MoE sparse block: fp32 softmax router, top-k, per-expert gather → MLP → weighted
    index_add. The token-to-expert assignment is static and balanced (fake tensors cannot route on data)."""

    def __init__(self, cfg: StepConfig, dtype, other_dtype):
        super().__init__()
        a = cfg.arch
        self.E, self.k = a.num_experts, max(a.experts_per_token, 1)
        inter = a.moe_intermediate or a.intermediate
        self.router = nn.Linear(a.hidden, self.E, bias=a.mlp_bias, dtype=other_dtype)
        self.experts = nn.ModuleList(MLP(cfg, inter, dtype, other_dtype) for _ in range(self.E))
        self.shared = None
        if a.shared_experts:
            si = (a.shared_expert_intermediate or inter) * a.shared_experts
            self.shared = MLP(cfg, si, dtype, other_dtype)

    def forward(self, x):
        b, s, h = x.shape
        n = b * s
        xf = x.reshape(n, h)
        logits = self.router(xf)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, _ = torch.topk(w, self.k, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(xf.dtype)
        out = torch.zeros((n, h), dtype=xf.dtype, device=xf.device)
        for e, expert in enumerate(self.experts):
            p = torch.arange(e, n * self.k, self.E, device=xf.device)  # (token, slot) pairs routed to e
            if p.numel() == 0:
                continue
            tok, slot = p // self.k, p % self.k
            y = expert(xf[tok]) * w[tok, slot, None]
            out.index_add_(0, tok, y.to(xf.dtype))
        if self.shared is not None:
            out = out + self.shared(xf)
        return out.view(b, s, h)


class Block(nn.Module):
    def __init__(self, cfg: StepConfig, index: int, dtype, other_dtype, *, causal=True, cross=False, post_ln=False):
        super().__init__()
        a = cfg.arch
        h = a.hidden
        self.cfg, self.cross, self.post_ln = cfg, cross, post_ln
        if cfg.litgpt:
            self.attn: nn.Module = LitAttention(cfg, dtype, other_dtype)
        else:
            self.attn = Attention(cfg, dtype, other_dtype, causal=causal)
        if cfg.four_norms:
            self.n1, self.n1_post = make_norm(cfg, h, other_dtype), make_norm(cfg, h, other_dtype)
            self.n2, self.n2_post = make_norm(cfg, h, other_dtype), make_norm(cfg, h, other_dtype)
        else:
            self.n1 = make_norm(cfg, h, other_dtype)
            self.n2 = None if cfg.parallel_block else make_norm(cfg, h, other_dtype)
        if cross:
            self.nc = make_norm(cfg, h, other_dtype)
            self.cross_attn = Attention(cfg, dtype, other_dtype, causal=False)
        moe = a.is_moe and index >= a.dense_layers
        self.mlp = MoE(cfg, dtype, other_dtype) if moe else MLP(cfg, a.intermediate, dtype, other_dtype)

    def forward(self, x, rope=None, mask=None, enc=None):
        c = self.cfg
        if self.post_ln:  # BERT
            x = self.n1(x + self.attn(x, rope, mask))
            return self.n2(x + self.mlp(x))
        if c.four_norms:  # Gemma-2/3
            x = x + self.n1_post(self.attn(self.n1(x), rope, mask))
            return x + self.n2_post(self.mlp(self.n2(x)))
        if c.parallel_block:  # phi/falcon: one norm, attention ∥ MLP
            n = self.n1(x)
            return x + self.attn(n, rope, mask) + self.mlp(n)
        if c.post_norm_only:  # OLMo-2
            x = x + self.n1(self.attn(x, rope, mask))
            return x + self.n2(self.mlp(x))
        x = x + self.attn(self.n1(x), rope, mask)
        if self.cross:
            x = x + self.cross_attn(self.nc(x), None, None, kv_source=enc)
        return x + self.mlp(self.n2(x))


# -- the model ----------------------------------------------------------------------------------------


class SyntheticModel(nn.Module):
    def __init__(self, cfg: StepConfig):
        super().__init__()
        a = cfg.arch
        self.cfg = cfg
        dtype = DTYPES[cfg.param_dtype]
        other = torch.float32 if cfg.upcast_non_quantized else dtype
        emb = dtype if cfg.embeddings_16bit else other  # TRL's cast of the embeddings and LM head back
        h = a.hidden
        self.kind = a.block
        self.embed = nn.Embedding(a.vocab, h, dtype=emb)
        self.pos = self.types = self.emb_norm = self.pooler = None
        self.rotary = None
        if cfg.learned_positions:
            self.pos = nn.Embedding(a.max_position, h, dtype=emb)
            if cfg.token_types:
                self.types = nn.Embedding(cfg.token_types, h, dtype=emb)
        elif a.block == "decoder":
            self.rotary = Rotary(a.d_head)
        if a.block == "encoder":
            self.emb_norm = make_norm(cfg, h, other)  # counted as the "final" norm by knowledge.models
            self.blocks = nn.ModuleList(
                Block(cfg, i, dtype, other, causal=False, post_ln=True) for i in range(a.layers)
            )
            if a.family == "bert":
                self.pooler = nn.Linear(h, h, dtype=other)
            self.classifier = nn.Linear(h, 2, dtype=other)
        elif a.block == "encoder-decoder":
            self.encoder = nn.ModuleList(
                Block(cfg, i, dtype, other, causal=False) for i in range(a.encoder_layers or a.layers)
            )
            self.enc_norm = make_norm(cfg, h, other)
            self.blocks = nn.ModuleList(Block(cfg, i, dtype, other, cross=True) for i in range(a.layers))
        else:
            if a.family in EMBEDDING_NORM:  # BLOOM's `word_embeddings_layernorm`
                self.emb_norm = make_norm(cfg, h, other)
            self.blocks = nn.ModuleList(Block(cfg, i, dtype, other) for i in range(a.layers))
        if a.block != "encoder":
            self.norm = make_norm(cfg, h, other)
            self.lm_head = (
                None if a.tied_embeddings else make_linear(cfg, "lm_head", h, a.vocab, a.family == "phi", dtype, emb)
            )
        self.saved_copies = nn.ModuleDict()  # peft modules_to_save: the frozen originals

    # PEFT: trainable adapters (and modules_to_save copies), everything else frozen
    def apply_peft(self) -> None:
        cfg = self.cfg
        if cfg.peft == "none":
            return
        for n, p in self.named_parameters():
            p.requires_grad_("lora_" in n)
        import copy

        for name in cfg.modules_to_save:
            mod = self.embed if name == "embed" else self.lm_head if name == "lm_head" else None
            if mod is None:
                continue
            self.saved_copies[name] = copy.deepcopy(mod)
            for p in self.saved_copies[name].parameters():
                p.requires_grad_(False)
            for p in mod.parameters():
                p.requires_grad_(True)

    def head_weight(self):
        if self.lm_head is None:
            return self.embed.weight
        return self.lm_head.weight if isinstance(self.lm_head, nn.Linear) else None

    def head(self, x):
        if self.lm_head is None:
            if self.kind == "encoder-decoder":
                x = x * (self.cfg.arch.hidden**-0.5)  # T5 rescales before a tied LM head
            return F.linear(x, self.embed.weight)
        return self.lm_head(x)

    def _run(self, blocks, x, rope, mask, enc=None):
        ckpt = self.cfg.checkpointing and self.training
        for blk in blocks:
            if ckpt:
                x = checkpoint(blk, x, rope, mask, enc, use_reentrant=False)
            else:
                x = blk(x, rope, mask, enc)
            self.tick()
            if x.requires_grad:
                x.register_hook(self._tick_hook)
        return x

    # `tick` runs once per block in forward and in backward: a safe point to stop a trace (raising from
    # inside an op can abort the process when the op was called from C++)
    tick: Callable[[], None] = staticmethod(lambda: None)

    def _tick_hook(self, grad):
        self.tick()

    def _mask(self, b: int, s: int, dt, device):
        """The 4-D causal mask HF builds when it does not leave causality to the kernel: bool for SDPA,
        additive in the hidden states' dtype for eager attention."""
        c = self.cfg
        if c.mask == "bool":
            return torch.ones((s, s), dtype=torch.bool, device=device).tril().expand(b, 1, s, s).contiguous()
        if c.mask == "float":
            m = torch.zeros((b, 1, s, s), dtype=dt, device=device)
            upper = torch.ones((s, s), dtype=torch.bool, device=device).triu(1)
            return m.masked_fill_(upper, torch.finfo(dt).min)
        return None

    def forward(self, ids, labels, mark: Mark = _noop):
        c, a = self.cfg, self.cfg.arch
        b, s = ids.shape
        x = self.embed(ids)
        if c.gemma:
            x = x * torch.tensor(a.hidden**0.5, dtype=x.dtype, device=x.device)
        pos = torch.arange(s, device=ids.device)[None].expand(b, s)
        if self.pos is not None:
            x = x + self.pos(pos)
        if self.types is not None:
            x = x + self.types(torch.zeros_like(ids))
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        if self.rotary is None:
            rope = None
        elif c.litgpt:  # litgpt: an fp32 (1, T, d) cache slice
            rope = self.rotary(x, pos[:1], torch.float32)
        else:
            rope = self.rotary(x, pos)
        mask = self._mask(b, s, x.dtype, ids.device) if self.kind != "encoder" else None

        if self.kind == "encoder":
            x = self._run(self.blocks, x, None, None)
            mark("loss")
            if x.requires_grad:
                x.register_hook(lambda g: mark("bwd"))
            pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else x[:, 0]
            logits = self.classifier(pooled)
            loss = F.cross_entropy(logits.float(), labels[:, 0] % 2)
            return {"loss": loss, "logits": logits}

        enc = None
        if self.kind == "encoder-decoder":
            enc = self.enc_norm(self._run(self.encoder, x, None, None))
            x = self.embed(labels)
        x = self._run(self.blocks, x, rope, mask, enc)
        x = self.norm(x)
        mark("loss")
        if x.requires_grad:
            x.register_hook(lambda g: mark("bwd"))
        if c.loss == "fused" and self.head_weight() is not None:
            return {"loss": losses.fused_loss(x, self.head_weight(), labels), "logits": None}
        if c.loss == "chunked":
            loss, chunks = losses.chunked_loss(x, self.head, labels)
            return {"loss": loss, "logits": chunks}
        if c.loss == "litgpt":
            loss, chunks = losses.litgpt_loss(x, self.head, labels, c.logit_softcap, c.fabric_fp32_outputs)
            return {"loss": loss, "logits": chunks}
        logits = self.head(x)
        return {"loss": losses.standard_loss(logits, labels, c.logit_softcap), "logits": logits}


# -- construction -------------------------------------------------------------------------------------


def build_meta(cfg: StepConfig) -> SyntheticModel:
    with torch.device("meta"):
        model = SyntheticModel(cfg)
    model.apply_peft()
    return model


def materialize(model: SyntheticModel, device, real: bool) -> SyntheticModel:
    """Allocate every parameter on `device` (fake or real), re-tie embeddings, quantize the base linears.
    Real tensors get small random values; fake tensors get none (no kernels run)."""
    model = model.to_empty(device=device)  # tied heads read embed.weight: no tie to restore
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (Quant4bitLinear, Quant8bitLinear)):
                m.quantize_(device, real)
            elif isinstance(m, Rotary):
                m.init_()
        if real:
            init_real_(model.named_parameters(), model.cfg.gemma)
    model.train()
    return model


def init_real_(named_parameters, gemma: bool) -> None:
    """Small values for a real-tensor check: norms 1 (Gemma's (1 + w): 0), LoRA B 0, DoRA magnitudes 1, else
    N(0, 0.02). Packed quantized weights are left as they are."""
    for n, p in named_parameters:
        if p.dtype in (torch.uint8, torch.int8) or hasattr(p, "quant_state"):
            continue
        if "norm" in n and p.dim() == 1:
            p.fill_(0.0 if gemma else 1.0)
        elif "lora_B" in n:
            p.zero_()
        elif "lora_magnitude" in n:
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02)


def param_count(model: SyntheticModel) -> int:
    """Parameters of the underlying model (quantized weights counted by their shape), without adapters and
    without the frozen originals peft keeps for modules_to_save."""
    total = 0
    for n, p in model.named_parameters():
        if "lora_" in n or n.startswith("saved_copies."):
            continue
        total += p.numel()
    for m in model.modules():
        if isinstance(m, (Quant4bitLinear, Quant8bitLinear)):
            total += m.in_features * m.out_features
    return total


def quant_constants(model: nn.Module) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for m in model.modules():
        if isinstance(m, (Quant4bitLinear, Quant8bitLinear)) and (hasattr(m, "packed") or hasattr(m, "CB")):
            out += m.quant_constants()
    return out


def make_batch(cfg: StepConfig, device) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, cfg.arch.vocab, (cfg.micro_batch, cfg.seq_len), device=device)
    return {"ids": ids, "labels": ids}
