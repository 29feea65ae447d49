"""Expert-parallel token dispatch: what moving each MoE layer's tokens to the ranks that hold their experts costs a
rank, under NeMo AutoModel's dispatchers (ResolvedPlan.ep_dispatch).

`all_gather`, `all_gather_loop`: the `torch` dispatcher (nemo_automodel/components/moe/experts.py
`GroupedExperts.forward` at v0.4.0, v0.5.0 and main). Each MoE layer all-gathers the hidden states of the
expert-parallel group's tokens (`_AllGatherConcatVarlenFn`: a list of ep padded copies, then their `torch.cat`),
and the routing weights (fp32), expert indices (int64) and token mask (bool) likewise; every rank runs its own
experts on all N = ep × tokens rows into an fp32 output of N rows (`y = torch.zeros(x.shape, dtype=torch.float32)`),
all-reduced out of place (torch.distributed.nn.functional `_AllReduce.forward`: `tensor.clone()`) and narrowed to the
rank's own rows. In the backward the narrow's gradient is again N fp32 rows (`slice_backward`), all-reduced out of
place (`_AllReduce.backward`), and the gathered input's gradient is all-reduced in place and narrowed
(`_AllGatherConcatVarlenFn.backward`). With grouped GEMMs (`experts: torch_mm`, the default on CUDA from v0.4.0;
`te`/`gmm` fall back to it under this dispatcher, components/models/common/utils.py `BackendConfig.__post_init__`)
the gathered rows reach the experts through `x[sorted_token_ids]`, whose backward keeps only the indices
(IndexBackward0 saves `indices` and `self_sym_sizes`): nothing of N rows is saved, the layer's peak is its
transients. The per-expert loop (`experts: torch`, `_forward_loop`) takes each expert's rows with
`x.gather(0, idx)`, whose backward keeps its input (GatherBackward0 saves `self`): the gathered N rows stay saved
with the layer's activations until its backward.

`deepep`: DeepEP's normal-mode buffer, one per process (components/moe/megatron/fused_a2a.py `get_buffer` at
v0.4.0, v0.5.0 and main, called for the model's hidden size × max(dtype bytes, 2) by
experts.py `GroupedExpertsDeepEP._init_deepep_buffer`), sized by the larger of the dispatch and combine configs'
size hints for the group (knowledge.deepep; csrc/config.hpp `Config.get_nvl_buffer_size_hint`,
`get_rdma_buffer_size_hint`; csrc/deep_ep.cpp `Buffer::Buffer`: the NVLink buffer and its barrier metadata and a
32 MiB workspace by cudaMalloc; DeepEP 42144303, the commit NeMo AutoModel v0.5.0's docker/Dockerfile builds, as at
v1.2.1). They are outside torch's allocator: the device level counts them, with the CUDA context
(estimate.allocator.context_bytes). The RDMA buffer of a group over more than one node comes from NVSHMEM's
symmetric heap, whose own reservation the estimate does not model. The rows each dispatch hands a rank are torch
tensors alive until they are permuted to the experts (`ep_dispatch_transient`); what the experts then keep is
counted as the routed activations (tokens × top-k).

`hybridep`: HybridEP's buffers (DeepEP's `hybrid-ep` branch), one set per process (fused_a2a.py
`init_hybrid_ep_buffer` at v0.4.0, v0.5.0 and main), sized for every token of the group reaching one rank
(knowledge.hybridep): for DeepSeek-V3 (hidden 7168, 256 experts) over 64 GPUs at 8,192 tokens a rank, 8.3 GB.
Allocated outside torch's allocator (cudaMalloc, or cuMemCreate with a fabric handle on a multi-node NVLink
system, rounded to its granularity, which is not counted), counted at the device level. The group's ranks
reachable over NVLink are those of a node, or of the NVLink domain of a multi-node NVLink system
(`GpuSpec.nvlink_domain_gpus`); a group over several has its RDMA buffers counted too, its queue pairs named by
resolve.distribution. Its dispatch permutes the received rows straight to their experts (`dispatch_with_permute`):
what it hands them is the routed activations; its transient is the routing map and probabilities it is given
(token_dispatcher.py `_HybridEPManager.setup_metadata_from_indices`: a bool and an fp32 per token × expert)."""

from __future__ import annotations

from math import comb

from vramlens.estimate.components.megatron import expert_tp
from vramlens.knowledge.deepep import (
    COMBINE_CONFIGS,
    DEFAULT_SMS,
    DISPATCH_CONFIGS,
    MAX_SCALES,
    MAX_TOPK,
    NVL_PEERS,
    SOURCE_META_BYTES,
    WORKSPACE_BYTES,
)
from vramlens.knowledge.hybridep import buffer_bytes as hybridep_buffer_bytes
from vramlens.knowledge.hybridep import nvlink_ranks
from vramlens.resolved import ResolvedPlan


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _nvl_hint(config: tuple[int, int, int, int], hidden_bytes: int, ranks: int, sms: int) -> int:
    """csrc/config.hpp `Config.get_nvl_buffer_size_hint`."""
    channels, rdma_ranks, nvl_ranks = sms // 2, max(ranks // NVL_PEERS, 1), min(ranks, NVL_PEERS)
    slots = channels * nvl_ranks * config[1]
    n = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4
    n += slots * (hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * (8 + 4) + MAX_SCALES * 4)
    return _align(n, 128)


def _rdma_hint(config: tuple[int, int, int, int], hidden_bytes: int, ranks: int, sms: int) -> int:
    """csrc/config.hpp `Config.get_rdma_buffer_size_hint` (0 within one node of NVL_PEERS GPUs); the Config
    constructor rounds the receive chunk up to a multiple of the send chunk."""
    if ranks <= NVL_PEERS:
        return 0
    channels, rdma_ranks = sms // 2, ranks // NVL_PEERS
    recv = _align(config[3], config[2])
    n = channels * rdma_ranks * (NVL_PEERS * 2 + 2) * 2 * 4
    per_token = hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * (8 + 4) + MAX_SCALES * 4 + 16  # + an int4 each
    n += channels * rdma_ranks * recv * 2 * per_token
    return _align(n, 128)


def deepep_buffer_sizes(ranks: int, hidden_bytes: int, sms: int = DEFAULT_SMS) -> tuple[int, int] | None:
    """(num_nvl_bytes, num_rdma_bytes) `get_buffer` asks DeepEP's Buffer for: the larger of the dispatch and combine
    configs' hints. None for a group size DeepEP has no config for (`get_dispatch_config` asserts)."""
    if ranks not in DISPATCH_CONFIGS:
        return None
    configs = (DISPATCH_CONFIGS[ranks], COMBINE_CONFIGS[ranks])
    return (
        max(_nvl_hint(c, hidden_bytes, ranks, sms) for c in configs),
        max(_rdma_hint(c, hidden_bytes, ranks, sms) for c in configs),
    )


def _expert_tp(rp: ResolvedPlan) -> int:
    """Megatron-Core's flex dispatcher exchanges tokens over the expert-tensor × expert-parallel group, each expert
    replicated over the expert-tensor ranks (megatron/core/transformer/moe/token_dispatcher.py
    `MoEFlexTokenDispatcher`: `group=self.tp_ep_group`, `num_experts=self.tp_size * num_moe_experts`); 1 elsewhere."""
    return expert_tp(rp) if rp.strategy == "megatron" else 1


def dispatch_group(rp: ResolvedPlan) -> int:
    """The ranks one token dispatch spans (`_expert_tp` × the expert-parallel group)."""
    return max(rp.expert_parallel, 1) * _expert_tp(rp)


def rank_tokens(rp: ResolvedPlan) -> int:
    """Tokens of one micro-batch a rank dispatches: its sequences (chosen and rejected alike) × its context-parallel
    share, and under Megatron-Core with tensor parallelism its sequence-parallel share (MoE under TP requires it)."""
    tokens = rp.micro_batch * rp.sequences_per_example * (rp.seq_len // max(rp.context_parallel, 1))
    return tokens // (max(rp.tensor_parallel, 1) if rp.strategy == "megatron" else 1)


def ep_dispatch_buffers(rp: ResolvedPlan) -> int:
    """The dispatcher's buffers on each rank, outside torch's allocator. DeepEP: the NVLink buffer with its barrier
    signals and peer pointers (NVL_PEERS ints, pointers and signal pointers), the 32 MiB workspace and, over
    several nodes, the RDMA buffer (csrc/deep_ep.cpp `Buffer::Buffer`). HybridEP: knowledge.hybridep. 0 under any
    other dispatcher."""
    group = dispatch_group(rp)
    if group == 1 or not rp.arch.is_moe:
        return 0
    if rp.ep_dispatch == "hybridep":
        domain = nvlink_ranks(rp.gpu, rp.gpu_count)
        experts = rp.arch.num_experts * _expert_tp(rp)
        return hybridep_buffer_bytes(rank_tokens(rp), rp.arch.hidden, experts, group, domain)
    if rp.ep_dispatch != "deepep":
        return 0
    # `get_hidden_bytes(x)`: the hidden states' row, in their dtype (at least 2 bytes), as each dispatch asks for it
    sizes = deepep_buffer_sizes(group, rp.arch.hidden * (2 if rp.compute_dtype != "fp32" else 4))
    if sizes is None:
        return 0
    nvl, rdma = sizes
    return nvl + NVL_PEERS * (4 + 8 + 8) + WORKSPACE_BYTES + rdma


def _gathered_rows(rp: ResolvedPlan, tok: int) -> int:
    return max(rp.expert_parallel, 1) * tok


def ep_gathered_saved(rp: ResolvedPlan, tok: int) -> int:
    """Bytes one MoE layer saves for its backward of the torch dispatcher's all-gather: the gathered hidden states of
    the group's tokens (ep × `tok` rows, in the compute dtype) under the per-expert loop (`all_gather_loop`), none
    with grouped GEMMs or another dispatcher."""
    if rp.ep_dispatch != "all_gather_loop" or rp.expert_parallel <= 1 or not rp.arch.is_moe:
        return 0
    c = 2 if rp.compute_dtype != "fp32" else 4
    return _gathered_rows(rp, tok) * rp.arch.hidden * c


def deepep_received_rows(rp: ResolvedPlan, tok: int) -> float:
    """The rows DeepEP's dispatch hands a rank: each of the group's ep × `tok` tokens once if any of its top-k experts
    is among the rank's num_experts / ep (csrc/deep_ep.cpp `intranode_dispatch`: `num_recv_tokens` from
    `is_token_in_rank`), with every token's k experts an equally likely k-subset (the balanced routing the routed
    activations assume): ep · tok · (1 − C(E − E/ep, k) / C(E, k))."""
    ep, e, k = max(rp.expert_parallel, 1), max(rp.arch.num_experts, 1), max(rp.arch.experts_per_token, 1)
    miss = comb(e - e // ep, k) / comb(e, k) if k <= e else 0.0
    return ep * tok * (1.0 - miss)


def ep_dispatch_transient(rp: ResolvedPlan, tok: int) -> int:
    """The dispatch's largest transient in one MoE layer, beyond what the layer saves (`ep_gathered_saved`).

    torch dispatcher: the forward's all-reduce, when the gathered input (N rows, compute dtype, unless saved), the
    fp32 output and its all-reduced clone (N fp32 rows each) and the gathered routing (N × top-k fp32 weights and
    int64 indices, N mask bytes) are alive at once. The backward's two N-row fp32 gradients (the narrow's and its
    all-reduced clone) are no larger.
    DeepEP: what `Buffer.dispatch` returns (fused_a2a.py `FusedDispatch.forward`: `recv_x`, the received rows in the
    hidden states' dtype, with their int64 top-k indices and fp32 weights), alive until the rows are permuted to
    their experts; the combine's backward dispatches the gradients alike. Its `handle` (per-token rank masks and
    prefix sums, a few bytes a token) is not counted.
    HybridEP: the routing map and probabilities of the layer's tokens × experts it is handed (the rows it
    dispatches go straight to the experts, counted as the routed activations)."""
    if rp.expert_parallel <= 1 or not rp.arch.is_moe:
        return 0
    c = 2 if rp.compute_dtype != "fp32" else 4
    k = max(rp.arch.experts_per_token, 1)
    if rp.ep_dispatch == "deepep":
        return int(deepep_received_rows(rp, tok) * (rp.arch.hidden * c + k * (8 + 4)))
    if rp.ep_dispatch == "hybridep":
        return tok * max(rp.arch.num_experts, 1) * (1 + 4)
    if rp.ep_dispatch not in ("all_gather", "all_gather_loop"):
        return 0
    n, h = _gathered_rows(rp, tok), rp.arch.hidden
    gathered = 0 if rp.ep_dispatch == "all_gather_loop" else n * h * c
    return gathered + 2 * n * h * 4 + n * (k * (4 + 8) + 1)


def ep_dispatch_note(rp: ResolvedPlan) -> str | None:
    """What the dispatcher's buffers outside torch cost each GPU, said in every view (they are counted with the CUDA
    context); None without them."""
    n = ep_dispatch_buffers(rp)
    if not n:
        return None
    ep = dispatch_group(rp)
    kind = "expert-parallel" if _expert_tp(rp) == 1 else "expert-tensor × expert-parallel"
    if rp.ep_dispatch == "hybridep":
        domain = min(ep, nvlink_ranks(rp.gpu, rp.gpu_count))
        reach = f"{domain} of them over NVLink" if domain < ep else "all over NVLink"
        return (
            f"HybridEP's buffers for the {ep}-GPU {kind} group ({reach}): {n / 2**30:.2f} GiB a GPU outside "
            f"torch, sized for all {ep} × {rank_tokens(rp):,} tokens reaching one GPU (DeepEP 42144303 "
            "csrc/hybrid_ep/buffer/intranode.cu), counted with the CUDA context"
        )
    return (
        f"DeepEP's buffers for the {ep}-GPU {kind} group: {n / 2**30:.2f} GiB a GPU outside torch "
        "(DeepEP 42144303 csrc/deep_ep.cpp `Buffer::Buffer`), counted with the CUDA context"
    )
