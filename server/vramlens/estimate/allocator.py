"""From allocated bytes to what the GPU shows: caching-allocator slack and the CUDA context.

- reserved: PyTorch's caching allocator keeps freed blocks; transient tensors of changing sizes leave
  partly used segments. Measured nvidia-smi ÷ allocated on A100s is 1.06–1.90, median ≈ 1.27, largest for
  FSDP and QLoRA (fms-acceleration `scripts/benchmarks/refs/a100_80gb.csv`; docs/memory-model.md).
  We model the slack as a fraction of the transient
  (activation/logit/temporary) bytes plus a small share of the rest; expandable_segments removes most of it.
- device: + CUDA context and library workspaces, outside torch's counters: ~0.3–1.0 GB with the lazy module
  loading torch uses from 1.13 (pytorch/pytorch PR #86509: 287 MB lazy against 667 MB eager for one small tensor;
  vramcalc 0.1.2 README: ~0.75 GB on A6000); NCCL adds ~0.5–1 GB per rank. Before torch 1.13 every kernel loads
  with the context: 1343 MB measured for the context alone on a V100 with CUDA 11.2 (transformers
  docs/source/en/model_memory_anatomy.md at commit 0016acf7, "the CUDA kernels alone take up 1.3GB").
"""

from __future__ import annotations

from vramlens.knowledge import versions
from vramlens.resolved import ResolvedPlan

MIB = 1 << 20
CONTEXT_BYTES = 600 * MIB  # CUDA context + cuBLAS/cuDNN handles, single process, lazy module loading
EAGER_CONTEXT_BYTES = 1343 * MIB  # the context with every kernel loaded (torch before 1.13)
NCCL_BYTES = 700 * MIB  # per rank when world_size > 1
TRANSIENT = ("activations", "logits", "temporaries", "buffers")


def reserved_bytes(rp: ResolvedPlan, allocated: int, parts: dict[str, int]) -> int:
    transient = sum(parts.get(k, 0) for k in TRANSIENT)
    if rp.expandable_segments:
        slack = 0.02 * transient + 0.01 * allocated
    else:
        slack = 0.15 * transient + 0.03 * allocated
    if rp.quant_bits == 4:
        slack += 0.05 * allocated  # many mid-sized dequantization temporaries
    return int(allocated + slack + 64 * MIB)


def _eager_torch(rp: ResolvedPlan) -> tuple[str, str] | None:
    """(version, source) of the run's torch when it loads every CUDA kernel with the context (before 1.13)."""
    torch = rp.version_of("torch")
    return torch if torch and versions.cuda_modules_load_eagerly(torch[0]) else None


def cuda_context_bytes(rp: ResolvedPlan) -> int:
    """The CUDA context with the handles of one process, by how the torch in use loads its kernels."""
    return EAGER_CONTEXT_BYTES if _eager_torch(rp) else CONTEXT_BYTES


def context_bytes(rp: ResolvedPlan) -> int:
    """Everything outside torch's counters: the CUDA context, plus NCCL's buffers when ranks talk."""
    return cuda_context_bytes(rp) + (NCCL_BYTES if rp.world_size > 1 or rp.gpu_count > 1 else 0)


def device_bytes(rp: ResolvedPlan, allocated: int, parts: dict[str, int]) -> int:
    return reserved_bytes(rp, allocated, parts) + context_bytes(rp)


def device_range(rp: ResolvedPlan, allocated: int, device: int) -> tuple[int, int]:
    """A plausible range for the device level: allocation-level model error (±5 % traced) and the spread of
    allocator slack (run-to-run variation of ~10 % is common: torchtune PR #961 measured 20.2–24.1 GB)."""
    low = int(allocated * 0.97 + cuda_context_bytes(rp) * 0.5)
    high = int(device * 1.10)
    return low, high


def assumptions(rp: ResolvedPlan) -> list[str]:
    out = []
    if torch := _eager_torch(rp):
        out.append(
            f"torch {torch[0]} ({torch[1]}): CUDA kernels load with the context (lazy loading is "
            f"torch's default from 1.13) — CUDA context {EAGER_CONTEXT_BYTES / (1 << 30):.1f} GiB"
        )
    if not rp.expandable_segments:
        out.append("allocator: default caching allocator (no expandable_segments) — fragmentation slack included")
    if rp.correction != 1.0:
        out.append(
            f"calibrated: allocated memory scaled ×{rp.correction:.3f} by local traces/probes of this "
            "architecture (VRAMLENS_CALIBRATION=off to disable)"
        )
    if rp.optimizer.paged:
        out.append(
            "paged optimizer states live in CUDA unified memory: counted on the GPU, may page to the CPU under pressure"
        )
    return out
