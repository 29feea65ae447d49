"""torchtitan's op-level selective activation checkpointing, run with torch's own `create_selective_checkpoint_contexts`
under fake tensors: what a stack of Llama-style blocks keeps after its forward matches the estimator's saved bytes per
block (`components.op_saved_per_token`). The policy is torchtitan's (v0.2.2, commit 73a0e697,
torchtitan/distributed/activation_checkpoint.py `_apply_op_sac` `_custom_policy`, and the save list of
torchtitan/models/llama3/infra/parallelize.py `_op_sac_save_list`); the block is torchtitan's Llama 3 block
(torchtitan/models/llama3/model/model.py: wq, wk, wv, RoPE, SDPA, wo; w2(silu(w1(x)) * w3(x))). On the fake "cpu"
device SDPA runs `_scaled_dot_product_flash_attention_for_cpu`, the CPU twin of the CUDA flash kernel in the save list
(the same outputs: the attention output and its fp32 logsumexp), so it is added to the list here."""

from __future__ import annotations

from collections import defaultdict

import pytest
from trace_plans import plan
from vramlens.estimate import components as C
from vramlens.knowledge.schema import ModelArch

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils.checkpoint import (  # noqa: E402
    CheckpointPolicy,
    checkpoint,  # noqa: E402
    create_selective_checkpoint_contexts,
)
from vramlens.trace.tracker import LiveBytes  # noqa: E402

F = torch.nn.functional
aten = torch.ops.aten
SAVE_LIST = {
    aten.mm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_attention_math.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    aten.max.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,  # the CPU twin of the flash kernel
}


def torchtitan_context():
    """torchtitan's op SAC context: save the listed ops' outputs, except every second mm of the block."""
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        save = func in SAVE_LIST and not (func == aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        bf16 = {"dtype": torch.bfloat16}
        self.attention_norm = torch.nn.RMSNorm(dim, **bf16)
        self.ffn_norm = torch.nn.RMSNorm(dim, **bf16)
        self.wq = torch.nn.Linear(dim, heads * self.head_dim, bias=False, **bf16)
        self.wk = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False, **bf16)
        self.wv = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False, **bf16)
        self.wo = torch.nn.Linear(heads * self.head_dim, dim, bias=False, **bf16)
        self.w1 = torch.nn.Linear(dim, hidden, bias=False, **bf16)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False, **bf16)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False, **bf16)

    def rope(self, x, freqs):
        # torchtitan `apply_rotary_emb`: the pairs as complex numbers, rotated, back to the input's dtype
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs).flatten(3).type_as(x)

    def attention(self, x, freqs):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim)
        k = self.wk(x).view(b, s, self.kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim)
        q, k = self.rope(q, freqs), self.rope(k, freqs)
        rep = self.heads // self.kv_heads
        k, v = (t.repeat_interleave(rep, dim=2) for t in (k, v))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))

    def forward(self, x, freqs):
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.w2(F.silu(self.w1(self.ffn_norm(h))) * self.w3(self.ffn_norm(h)))


ARCH = ModelArch(
    id="tiny-titan", family="llama", hidden=256, layers=4, heads=8, kv_heads=2, intermediate=768, vocab=1000
)
BATCH, SEQ = 2, 256
HEAD_DIM = ARCH.hidden // ARCH.heads


def kept_after_forward(layers: int, context_fn) -> int:
    """Bytes alive after the forward of `layers` blocks (each wrapped in a checkpoint), beyond the input."""
    with FakeTensorMode():
        blocks = [Block(ARCH.hidden, ARCH.heads, ARCH.kv_heads, ARCH.intermediate) for _ in range(layers)]
        x = torch.randn(BATCH, SEQ, ARCH.hidden, dtype=torch.bfloat16, requires_grad=True)
        freqs = torch.polar(torch.ones(SEQ, HEAD_DIM // 2), torch.randn(SEQ, HEAD_DIM // 2))[:, None, :]
        with LiveBytes() as live:
            for block in blocks:
                x = checkpoint(block, x, freqs, use_reentrant=False, context_fn=context_fn)
        # the tracker meets each linear's weight through its transpose (a view): the weights are not activations
        weights = {p.untyped_storage(): None for block in blocks for p in block.parameters()}
        return live.cur - sum(live.recs[st].nbytes for st in weights if st in live.recs)


def per_block_per_token(context_fn) -> float:
    """What one more block keeps, per token: the growth from 2 to 4 blocks, over 2 blocks and the batch's tokens."""
    return (kept_after_forward(4, context_fn) - kept_after_forward(2, context_fn)) / 2 / (BATCH * SEQ)


def test_op_level_selective_checkpointing_keeps_what_the_estimator_counts():
    traced = per_block_per_token(torchtitan_context)
    rp = plan(arch=ARCH, framework="torchtitan", seq_len=SEQ, micro_batch=BATCH, selective_recompute="op")
    assert C.op_saved_per_token(rp) == pytest.approx(traced, rel=0.03)
    # the input, wq, wv, attention (output + logsumexp), w1 and w2 outputs: every second mm (wk, wo, w3) recomputed
    h, q, kv, inter = ARCH.hidden, ARCH.q_dim, ARCH.kv_dim, ARCH.intermediate
    assert traced == pytest.approx(2 * h + 2 * q + 2 * kv + 2 * q + 4 * ARCH.heads + 2 * inter + 2 * h, rel=0.03)


def test_full_checkpointing_keeps_the_block_input_only():
    """The same stack with plain checkpoints: each block keeps its input (components.checkpoint_per_token)."""
    traced = per_block_per_token(lambda: torch.utils.checkpoint.noop_context_fn())
    rp = plan(arch=ARCH, framework="torchtitan", seq_len=SEQ, micro_batch=BATCH, grad_checkpointing=True)
    assert C.checkpoint_per_token(rp) / ARCH.layers == pytest.approx(traced, rel=0.03)
