"""DeepEP's normal-mode (intranode NVLink, internode RDMA) configurations, as NeMo AutoModel sizes its buffer with them
(nemo_automodel/components/moe/megatron/fused_a2a.py `get_buffer` at v0.4.0, v0.5.0 and main). From deepseek-ai/DeepEP
at 42144303 (the commit NeMo AutoModel v0.5.0's docker/Dockerfile builds; the same at v1.2.1): deep_ep/buffer.py,
csrc/config.hpp, csrc/kernels/configs.cuh, csrc/kernels/internode.cu."""

# deep_ep/buffer.py `Buffer.num_sms`, which `BackendConfig.dispatcher_num_sms` (20) sets in NeMo AutoModel
DEFAULT_SMS = 20
NVL_PEERS = 8  # csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS: a group over more ranks spans nodes (RDMA)
WORKSPACE_BYTES = 32 << 20  # csrc/kernels/configs.cuh NUM_WORKSPACE_BYTES
MAX_TOPK = 128  # csrc/config.hpp `get_*_buffer_size_hint`: kNumMaxTopK
MAX_SCALES = 128  # kNumMaxScales
SOURCE_META_BYTES = 8  # csrc/kernels/internode.cu `SourceMeta` (two ints), with NVSHMEM compiled in

# deep_ep/buffer.py `get_dispatch_config` / `get_combine_config`: group size → Config(num_sms, nvl send chunk,
# nvl receive chunk, rdma send chunk, rdma receive chunk) without num_sms, in tokens; another group size asserts
DISPATCH_CONFIGS = {
    2: (24, 256, 6, 128),
    4: (6, 256, 6, 128),
    8: (6, 256, 6, 128),
    16: (36, 288, 20, 128),
    24: (8, 288, 32, 128),
    32: (32, 288, 32, 128),
    64: (20, 288, 28, 128),
    128: (20, 560, 32, 128),
    144: (32, 720, 12, 128),
    160: (28, 720, 12, 128),
}
COMBINE_CONFIGS = {
    2: (10, 256, 6, 128),
    4: (9, 256, 6, 128),
    8: (4, 256, 6, 128),
    16: (4, 288, 12, 128),
    24: (1, 288, 8, 128),
    32: (1, 288, 8, 128),
    64: (1, 288, 20, 128),
    128: (1, 560, 12, 128),
    144: (2, 720, 8, 128),
    160: (2, 720, 8, 128),
}
