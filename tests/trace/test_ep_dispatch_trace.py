"""The torch dispatcher's all-gather path of NeMo AutoModel v0.5.0 (nemo_automodel/components/moe/experts.py
`_AllGatherConcatVarlenFn` and the ep > 1 branch of `GroupedExperts.forward`, its grouped-GEMM `_forward_grouped_mm`
and per-expert `_forward_loop`, reproduced below with the same tensor operations), run on real CPU tensors over an
8-rank fake process group (torch.testing._internal.distributed.fake_pg: collectives move no data, every tensor is
allocated as on a GPU) and counted by the trace's LiveBytes: the forward's peak equals components.dispatch's
transient, its backward's is no larger, and only the per-expert loop keeps the gathered rows for the backward."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn_f
from torch.autograd import Function
from vramlens.estimate import components as C
from vramlens.knowledge import gpus, models, optimizers
from vramlens.resolved import ResolvedPlan
from vramlens.trace.tracker import LiveBytes

EP, TOKENS = 8, 128


class _AllGatherConcatVarlenFn(Function):
    """experts.py v0.5.0 `_AllGatherConcatVarlenFn` (every rank with the same token count: no padding)."""

    @staticmethod
    def forward(ctx, local_tensor, group, gathered_lens, max_len):
        gathered = [torch.empty_like(local_tensor) for _ in range(len(gathered_lens))]
        dist.all_gather(gathered, local_tensor, group=group)
        gathered = [g[:n] for g, n in zip(gathered, gathered_lens)]
        ctx.group, ctx.gathered_lens, ctx.rank = group, gathered_lens, dist.get_rank(group)
        return torch.cat(gathered, dim=0)

    @staticmethod
    def backward(ctx, grad_output):
        grad_full = grad_output.contiguous()
        start = sum(ctx.gathered_lens[: ctx.rank])
        dist.all_reduce(grad_full, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad_full.narrow(0, start, ctx.gathered_lens[ctx.rank]).contiguous(), None, None, None


def _gather(t, group):
    """experts.py v0.5.0 `_all_gather_dim0_var(..., differentiable=False)`."""
    out = [torch.empty_like(t) for _ in range(EP)]
    dist.all_gather(out, t, group=group)
    return torch.cat(out, dim=0)


@pytest.fixture(scope="module")
def group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=EP)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _layer(loop: bool, group, h: int, k: int, experts: int) -> tuple[int, int, bool]:
    """(forward peak, backward peak, whether the gathered rows are saved) of one MoE layer's dispatch, in bytes
    beyond the layer's input and expert weights (and, in the backward, their gradients). The router sends 4 tokens
    to the rank's first expert and every other choice to another rank's expert, so that the expert compute itself
    is negligible."""
    x = torch.randn(TOKENS, h, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(1, h, h, dtype=torch.bfloat16, requires_grad=True)  # the rank's one expert given tokens
    weights, indices = torch.rand(TOKENS, k), torch.full((TOKENS, k), experts - 1)
    indices[:4, 0] = 0
    mask = torch.ones(TOKENS, dtype=torch.bool)
    gathered_shape = (EP * TOKENS, h)
    saved: list[tuple] = []
    tr = LiveBytes()
    with tr, torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        tr.track(x), tr.track(w)
        base = tr.cur
        xg = _AllGatherConcatVarlenFn.apply(x, group, [TOKENS] * EP, TOKENS)
        wg, ig, mg = _gather(weights.float(), group), _gather(indices, group), _gather(mask, group)
        y = torch.zeros(xg.shape, dtype=torch.float32)
        if loop:  # `_forward_loop`
            idx, top = torch.where(torch.logical_and(ig == 0, mg.unsqueeze(-1)))
            idx_b = idx[:, None].expand(-1, h)
            out = (xg.gather(dim=0, index=idx_b) @ w[0]) * wg[idx, top, None]
        else:  # `_forward_grouped_mm`, a plain matmul for the rank's one expert holding tokens
            idx = torch.where(torch.logical_and(ig == 0, mg.unsqueeze(-1)))[0]
            idx_b = idx[:, None].expand(-1, h)
            out = xg[idx] @ w[0]
        y.scatter_add_(0, idx_b, out.float())
        y.add_(xg.sum(dtype=torch.float32) * 0.0)
        y = dist_nn_f.all_reduce(y, op=dist.ReduceOp.SUM, group=group)
        y = y.narrow(0, 0, TOKENS).contiguous().to(torch.bfloat16)
        del xg, wg, ig, mg, idx, idx_b, out
        forward = tr.peak - base
        tr.reset_peak()
        y.float().sum().backward()
        backward = tr.peak - base - 2 * (x.numel() + w.numel())  # less the gradients it makes
    return forward, backward, gathered_shape in saved


def _plan(dispatch: str) -> ResolvedPlan:
    return ResolvedPlan(
        arch=models.lookup_model("Qwen/Qwen3-30B-A3B"),
        optimizer=optimizers.lookup_optimizer("adamw_torch"),
        gpu=gpus.lookup_gpu("H100-SXM")[0],
        micro_batch=1,
        seq_len=TOKENS,
        strategy="fsdp",
        fsdp_version=2,
        world_size=EP,
        gpu_count=EP,
        expert_parallel=EP,
        ep_dispatch=dispatch,
    )


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize(("loop", "dispatch"), [(False, "all_gather"), (True, "all_gather_loop")])
def test_dispatch_transient_matches_the_trace(group, loop, dispatch):
    rp = _plan(dispatch)
    a = rp.arch
    forward, backward, kept = _layer(loop, group, a.hidden, a.experts_per_token, a.num_experts)
    transient = C.ep_dispatch_transient(rp, TOKENS)
    # the loop's gathered rows are saved: counted apart (ep_gathered_saved), alive at the forward's peak
    expected = transient + C.ep_gathered_saved(rp, TOKENS)
    assert kept == loop
    assert abs(forward - expected) / expected < 0.02, (forward, expected)
    assert backward <= expected * 1.02
