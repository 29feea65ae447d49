"""Expert-parallel token dispatch (components/dispatch.py) under NeMo AutoModel's dispatchers: the `torch` dispatcher's
all-gather of the group's hidden states (nemo_automodel/components/moe/experts.py `GroupedExperts.forward` at v0.5.0),
saved by the per-expert loop and a transient with grouped GEMMs, and DeepEP's and HybridEP's buffers outside torch's
allocator (components/moe/megatron/fused_a2a.py `get_buffer`, `init_hybrid_ep_buffer`; DeepEP 42144303
csrc/config.hpp, csrc/deep_ep.cpp, csrc/hybrid_ep/buffer/intranode.cu)."""

from __future__ import annotations

from vramlens.estimate import _phases, estimate
from vramlens.estimate import components as C
from vramlens.estimate.components.dispatch import deepep_buffer_sizes
from vramlens.knowledge import gpus, hybridep, models, optimizers
from vramlens.resolved import ResolvedPlan

MIB = 1 << 20


def plan(model: str, **changes) -> ResolvedPlan:
    base = dict(
        arch=models.lookup_model(model),
        optimizer=optimizers.lookup_optimizer("adamw_torch"),
        gpu=gpus.lookup_gpu("H100-SXM")[0],
        micro_batch=4,
        seq_len=4096,
        grad_checkpointing=False,
        strategy="fsdp",
        fsdp_version=2,
        zero_stage=2,
        world_size=8,
        gpu_count=8,
        expert_parallel=8,
    )
    base.update(changes)
    return ResolvedPlan(**base)


def test_deepep_intranode_buffer_by_hand():
    """8 ranks, hidden 2880 in bf16 (5760 bytes a row), 20 SMs: 10 channels. The dispatch and combine configs of 8
    ranks both receive 256 tokens a chunk (buffer.py), so get_nvl_buffer_size_hint (config.hpp) is
    10·8·(2·1 + 3)·4 = 1600 bytes of counters plus 10·8·256 = 20480 slots of 5760 (hidden) + 8 (SourceMeta) +
    128·8 + 128·4 (top-k indices and weights) + 128·4 (scales) = 7816 bytes: 160,073,280, rounded up to 128:
    160,073,344. No RDMA buffer within one node."""
    assert deepep_buffer_sizes(8, 5760) == (160_073_344, 0)


def test_deepep_internode_buffers_by_hand():
    """16 ranks (2 nodes of 8), hidden 7168 in bf16 (14336 bytes). NVLink: both configs receive 288 tokens a chunk;
    10·8·(2·2 + 3)·4 = 2240 + 10·8·288 = 23040 slots × (14336 + 8 + 1024 + 512 + 512 = 16392) = 377,673,920 →
    377,673,984. RDMA: the dispatch config's 128-token receive chunk rounds up to a multiple of its 20-token send
    chunk, 140 (the combine config's to 132 of 12): 10·2·(8·2 + 2)·2·4 = 2880 + 10·2·140·2 × (16392 + 16 for the
    int4) = 91,884,800 → 91,887,744."""
    assert deepep_buffer_sizes(16, 14336) == (377_673_984, 91_887_744)


def test_deepep_has_no_config_for_other_group_sizes():
    assert deepep_buffer_sizes(12, 5760) is None


def test_deepep_buffer_counts_at_the_device_level():
    """gpt-oss-20b (hidden 2880) over an 8-GPU DeepEP group: the NVLink buffer, its barrier signals and peer
    pointers (8 ints, 8 pointers, 8 pointers: 160 bytes) and the 32 MiB workspace, all cudaMalloc'd by
    `Buffer::Buffer` outside torch's allocator: the device level grows by them, torch's peak does not."""
    rp = plan("openai/gpt-oss-20b", micro_batch=1, seq_len=2048, ep_dispatch="deepep")
    with_buffers, without = estimate(rp, limits=False), estimate(rp.with_changes(ep_dispatch=""), limits=False)
    assert with_buffers.allocated_bytes == without.allocated_bytes
    added = 160_073_344 + 160 + 32 * MIB
    assert with_buffers.components["cuda_context"] - without.components["cuda_context"] == added
    assert with_buffers.device_bytes - without.device_bytes == added


def test_torch_dispatcher_loop_saves_the_gathered_hidden_states():
    """Qwen3-30B-A3B (48 MoE layers, hidden 2048, top-8), 4 × 4096 tokens a rank, ep 8, no checkpointing: the
    per-expert loop's `x.gather` keeps the gathered 8 × 16384 rows of 2048 bf16 values (512 MiB) in every MoE layer
    until its backward."""
    rp = plan("Qwen/Qwen3-30B-A3B", ep_dispatch="all_gather_loop")
    n = 8 * 4 * 4096
    assert C.ep_gathered_saved(rp, 4 * 4096) == n * 2048 * 2 == 512 * MIB
    totals, _, _, _ = _phases(rp)
    before, _, _, _ = _phases(rp.with_changes(ep_dispatch=""))
    assert totals["forward-backward"] - before["forward-backward"] == 48 * 512 * MIB


def test_torch_dispatcher_transients_by_hand():
    """The forward's all-reduce of the top MoE layer: the fp32 output of the 131072 gathered rows and its
    all-reduced clone (2 × 131072 × 2048 × 4 = 2 GiB), the gathered routing (131072 × (8 × (4 + 8)) weights and
    indices + 131072 mask bytes), and with grouped GEMMs the gathered input itself (512 MiB, not saved: indexing keeps
    only the indices); the loop saved it already."""
    n = 8 * 4 * 4096
    loop = plan("Qwen/Qwen3-30B-A3B", ep_dispatch="all_gather_loop")
    grouped = loop.with_changes(ep_dispatch="all_gather")
    assert C.ep_dispatch_transient(loop, 4 * 4096) == 2 * n * 2048 * 4 + n * (8 * 12 + 1)
    assert C.ep_dispatch_transient(grouped, 4 * 4096) == n * 2048 * 2 + 2 * n * 2048 * 4 + n * (8 * 12 + 1)
    assert C.ep_gathered_saved(grouped, 4 * 4096) == 0
    _, phases, _, _ = _phases(grouped)
    assert phases["expert-dispatch"]["temporaries"] == C.ep_dispatch_transient(grouped, 4 * 4096)
    assert phases["expert-dispatch"]["logits"] == 0


def test_no_dispatch_without_expert_parallelism():
    rp = plan("Qwen/Qwen3-30B-A3B", ep_dispatch="all_gather", expert_parallel=1)
    assert C.ep_dispatch_transient(rp, 4096) == 0 and C.ep_dispatch_buffers(rp) == 0
    assert "expert-dispatch" not in _phases(rp)[0]


def test_deepep_received_rows_by_hand():
    """gpt-oss-20b: 32 experts, top-4, over 8 ranks (4 experts each). A token misses a rank when its 4 experts are
    all among the other 28: C(28, 4) / C(32, 4) = 20475 / 35960. With 2048 tokens a rank, a rank receives
    8 × 2048 × (1 − 20475/35960) = 7048.6 rows of 2880 bf16 values with 4 int64 indices and 4 fp32 weights each
    (csrc/deep_ep.cpp `intranode_dispatch`: recv_x, recv_topk_idx, recv_topk_weights)."""
    rp = plan("openai/gpt-oss-20b", micro_batch=1, seq_len=2048, ep_dispatch="deepep")
    rows = 8 * 2048 * (1 - 20475 / 35960)
    assert abs(C.deepep_received_rows(rp, 2048) - rows) < 1e-6
    assert C.ep_dispatch_transient(rp, 2048) == int(rows * (2880 * 2 + 4 * 12))


def test_hybridep_token_capacity():
    """config.cuh `Configurer`: at least 512 tokens, padded to the 64-token combine chunk."""
    assert [hybridep.token_capacity(t) for t in (100, 512, 1000, 8192)] == [512, 512, 1024, 8192]


def test_hybridep_buffers_by_hand():
    """DeepSeek-V3 (hidden 7168, 256 experts) over 64 GPUs of one NVLink domain, 8192 tokens a rank (intranode.cu,
    allgather.cu): 8192 × 64 = 524,288 rows of worst-case capacity. Tokens 524,288 × 7168 × 2 = 7,516,192,768;
    probabilities 524,288 × (4 local experts × 64 ranks) × 4 = 536,870,912; fp8 scaling factors
    524,288 × 56 × 4 = 117,440,512; dispatch and combine chunk flags 2 × 128 × 64 × 4 = 65,536; preprocessing
    scratch 108 × (64 + 4) × 8 = 58,752; the all-gathered routing map 256 × 524,288 = 134,217,728 bytes."""
    assert hybridep.buffer_bytes(8192, 7168, 256, 64, 72) == 8_304_846_208


def test_hybridep_internode_buffers_by_hand():
    """DeepSeek-V3 over 64 H100s, 8 NVLink domains of 8, 4096 tokens a rank (internode_doca.cu). Dispatch: the
    rank's tokens (4096 × 7168 × 2 = 58,720,256), their probabilities over all 256 experts (4,194,304) and scaling
    factors (4096 × 56 × 4 = 917,504), and per each of the 7 other domains a slot per token for its hidden state,
    its probabilities over the domain's 32 experts and its scaling factors (4096 × 7 × (14,336 + 128 + 224) =
    421,134,336). Combine: a reduction and a receive slot per other domain (2 × 4096 × 7 × (14,336 + 128) =
    829,423,616). Four flag arrays of 64 chunks × 7 + 2 × 7 uint64 (14,784)."""
    assert hybridep.internode_bytes(4096, 7168, 32, 256, 8) == 1_314_404_800
    intranode = hybridep.buffer_bytes(4096, 7168, 256, 64, 64)  # the same group all on NVLink
    spread = hybridep.buffer_bytes(4096, 7168, 256, 64, 8)
    # the probabilities' width is the domain's experts: 4096 × 64 rows × 4 experts × (64 − 8) ranks × 4 bytes fewer
    assert spread - intranode == 1_314_404_800 - 4096 * 64 * 4 * 56 * 4 - 108 * 56 * 8


def test_hybridep_buffer_spans_the_group_not_the_domain():
    """A group of 16 over two 8-GPU nodes still sizes its NVLink buffers for all 16 ranks' tokens
    (`NVLCoordinator::init`: capacity × ranks per node × nodes); only the probabilities' width is the domain's."""
    one_domain = hybridep.buffer_bytes(4096, 2048, 128, 16, 16)
    nvlink = hybridep.buffer_bytes(4096, 2048, 128, 16, 8) - hybridep.internode_bytes(4096, 2048, 8 * 8, 128, 2)
    rows = 4096 * 16
    assert one_domain - nvlink == rows * 8 * (16 - 8) * 4 + 108 * (16 - 8) * 8


def test_hybridep_buffers_count_at_the_device_level():
    """Qwen3-30B-A3B (hidden 2048, 128 experts) over an 8-GPU HybridEP group on one H100 node, 4 × 4096 tokens a
    rank: the buffers are allocated outside torch's allocator — the device level grows by them, torch's peak does
    not — and every view says what they cost."""
    rp = plan("Qwen/Qwen3-30B-A3B", ep_dispatch="hybridep")
    with_buffers, without = estimate(rp, limits=False), estimate(rp.with_changes(ep_dispatch=""), limits=False)
    assert with_buffers.allocated_bytes == without.allocated_bytes
    added = hybridep.buffer_bytes(4 * 4096, 2048, 128, 8, 8)
    assert with_buffers.components["cuda_context"] - without.components["cuda_context"] == added
    assert any(a.startswith("HybridEP's buffers for the 8-GPU expert-parallel group") for a in with_buffers.assumptions)
    # its transient: the routing map and fp32 probabilities of the layer's tokens × experts
    assert C.ep_dispatch_transient(rp, 4096) == 4096 * 128 * 5


def test_megatron_flex_dispatch_spans_expert_tensor_ranks_and_their_sequence_share():
    """Megatron-Core's flex dispatcher: tokens cross the expert-TP × EP group, each expert replicated over the
    expert-TP ranks (`num_experts=tp_size * num_moe_experts`), and a rank dispatches its sequence-parallel share
    (MoEFlexTokenDispatcher). TP 2 (expert TP defaulting to it) × EP 4: an 8-rank HybridEP group over 256 expert
    copies, 4 × 4096 / 2 tokens a rank."""
    rp = plan("Qwen/Qwen3-30B-A3B", strategy="megatron", tensor_parallel=2, expert_parallel=4, ep_dispatch="hybridep")
    assert C.ep_dispatch_buffers(rp) == hybridep.buffer_bytes(4 * 4096 // 2, 2048, 128 * 2, 8, 8)
    note = C.ep_dispatch_note(rp)
    assert note is not None and note.startswith(
        "HybridEP's buffers for the 8-GPU expert-tensor × expert-parallel group"
    )


def test_megatron_allgather_dispatch_by_hand():
    """Megatron-LM's default all-gather dispatcher (MoEAllGatherTokenDispatcher): with TP 2 and EP 4 (expert TP
    defaulting to TP) each rank gathers its group's 8 × (4 × 4096 / 2) tokens: the routing map and fp32
    probabilities over 128 experts, the hidden states (2048 wide, bf16) in the global buffer, and at the combine the
    unpermuted rows in bf16 and their fp32 copy."""
    rp = plan("Qwen/Qwen3-30B-A3B", strategy="megatron", tensor_parallel=2, expert_parallel=4, ep_dispatch="all_gather")
    n = 8 * 4 * 4096 // 2
    assert C.megatron_allgather_dispatch(rp, 4 * 4096) == n * (2 * 2048 + 2 * 2048 + 4 * 2048 + 128 * 5)
