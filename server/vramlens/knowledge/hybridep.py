"""HybridEP's buffers (DeepEP's `hybrid-ep` branch), as NeMo AutoModel's `hybridep` dispatcher creates them
(nemo_automodel/components/moe/megatron/fused_a2a.py `init_hybrid_ep_buffer` at v0.4.0, v0.5.0 and main: one
`HybridEPBuffer` per process, for the expert-parallel group, the model's hidden size, the local experts and the
tokens of the first dispatch, `x.shape[-2]` of the rank's flattened hidden states). From deepseek-ai/DeepEP at
42144303 (the commit NeMo AutoModel v0.5.0's and main's docker/Dockerfile build; v0.4.0 builds 7febc6e2 on the
`hybrid-ep` branch, whose buffers are the same but for the chunk padding): deep_ep/hybrid_ep_buffer.py,
csrc/hybrid_ep/config.cuh `Configurer`, csrc/hybrid_ep/buffer/intranode.cu `NVLCoordinator`,
csrc/hybrid_ep/extension/allgather.cu `CustomAllgather::allocate_ag_buffer`, csrc/hybrid_ep/hybrid_ep.cu
`HybridEPBuffer::allocate_buffer`."""

from vramlens.knowledge.schema import GpuSpec

MIN_TOKENS_PER_RANK = 512  # config.cuh `Configurer`: max(max_num_of_tokens_per_rank, 512)
CHUNK_TOKENS = 64  # NUM_OF_TOKENS_PER_CHUNK_COMBINE_API's default: the token capacity is padded to it (42144303)
TOKEN_BYTES = 2  # the combine buffer holds uint16 tokens; the dispatch buffer shares it (`use_shared_buffer`)
SCALE_GROUP = 128  # the fp8 scaling-factor buffer: hidden / 128 fp32 per token, allocated without fp8 too
PREPROCESSING_BLOCKS = 108  # `num_sms_preprocessing_api`'s default; NeMo passes none
TMP_STATE_BYTES = 8  # hybrid_ep_backend.cuh `tmp_state_t`: an enum and an int32


def nvlink_ranks(gpu: GpuSpec, gpus_per_node: int) -> int:
    """The GPUs a rank reaches over NVLink (what `detect_accessible_ranks` finds of a group laid over consecutive
    ranks): the NVLink domain of a multi-node NVLink system (GB200 NVL72), else the GPUs of a node, at most the
    card's reference node."""
    if gpu.nvlink_domain_gpus:
        return gpu.nvlink_domain_gpus
    return min(gpus_per_node, gpu.node_gpus or gpus_per_node)


def token_capacity(tokens: int) -> int:
    """`BufferConfig.max_num_of_tokens_per_rank`: the first dispatch's tokens, at least 512, padded to the combine
    chunk (`hybrid_ep_pad_num_of_tokens_per_rank`). Later dispatches of no more tokens keep the buffer."""
    t = max(tokens, MIN_TOKENS_PER_RANK)
    return -(-t // CHUNK_TOKENS) * CHUNK_TOKENS


def buffer_bytes(tokens: int, hidden: int, experts: int, group: int, domain: int) -> int:
    """Bytes of one process's HybridEP buffers for an expert-parallel group of `group` ranks, `domain` of them
    reachable over NVLink (`detect_accessible_ranks`: the group's ranks on the node, or in the NVLink domain of a
    multi-node NVLink system), `experts` routed experts in all, `tokens` per rank in a dispatch.

    The buffers are sized for the worst case, every token of the group reaching one rank
    (`NVLCoordinator::init`: max_num_of_tokens = capacity × ranks per node × nodes): the token buffer (uint16 × hidden
    per token), the probabilities (fp32 per token × the experts of the NVLink domain), the fp8 scaling factors
    (fp32 × hidden / 128 per token), the dispatch and combine chunk flags and the preprocessing scratch; the custom
    all-gather's routing map (a byte per token of the group × expert) beside them; over several NVLink domains the
    inter-node buffers too (`internode_bytes`)."""
    per_node = min(group, domain)
    capacity = token_capacity(tokens)
    rows = capacity * group
    local_experts = experts // group
    chunks = -(-capacity // CHUNK_TOKENS)
    out = rows * hidden * TOKEN_BYTES
    out += rows * local_experts * per_node * 4
    out += rows * (hidden // SCALE_GROUP) * 4
    out += 2 * chunks * group * 4
    out += PREPROCESSING_BLOCKS * (per_node + local_experts) * TMP_STATE_BYTES
    out += experts * rows
    if group > per_node:
        out += internode_bytes(capacity, hidden, local_experts * per_node, experts, group // per_node)
    return out


def internode_bytes(capacity: int, hidden: int, domain_experts: int, experts: int, nodes: int) -> int:
    """The RDMA buffers of a group over `nodes` NVLink domains (csrc/hybrid_ep/buffer/internode_doca.cu
    `RDMACoordinator::allocate_dispatch_buffers`, `allocate_combine_buffers`; the DOCA GPU-verbs build NeMo
    AutoModel's docker/Dockerfile makes, HYBRID_EP_MULTINODE=1 without NIXL): the dispatch's own tokens, their
    probabilities over every expert and scaling factors, and per other domain a token, probability (the domain's
    experts) and scaling-factor slot for each of the rank's tokens; the combine's reduction and receive slots per
    other domain; their chunk flags. Its queue pairs are not counted (resolve.distribution names them)."""
    others = nodes - 1
    dispatch = capacity * hidden * TOKEN_BYTES + capacity * experts * 4 + capacity * (hidden // SCALE_GROUP) * 4
    dispatch += capacity * others * (hidden * TOKEN_BYTES + domain_experts * 4 + (hidden // SCALE_GROUP) * 4)
    combine = 2 * capacity * others * (hidden * TOKEN_BYTES + domain_experts * 4)
    flags = (-(-capacity // CHUNK_TOKENS) * others + 2 * others) * 8
    return dispatch + combine + 4 * flags
