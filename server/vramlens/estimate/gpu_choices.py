"""Which GPU? The run's own step on every catalog GPU (and GPU count, for sharded runs), fastest fitting first.

Each choice is the resolved plan with only the GPU (and the count) changed, estimated again: its peak against
that GPU's usable memory and its predicted tokens per second per GPU and for the run. Runs that shard
(ZeRO/FSDP) are tried on 1, 2, 4 and 8 GPUs of each kind; others on the count they name. GPUs whose speed is
not in the catalog are left out (nothing to rank them by).

Used by `vramlens gpus` (cli/gpus.py) and the server command `vramlens.listGpus` with a document
(lsp/commands.py), so the terminal and the editor's GPU picker show the same figures.
"""

from __future__ import annotations

from vramlens.estimate import GIB, estimate
from vramlens.resolved import ResolvedPlan

COUNTS = (1, 2, 4, 8)
"""GPU counts a sharded run is tried on."""


def shards(rp: ResolvedPlan) -> bool:
    """The run splits its state across GPUs (DeepSpeed ZeRO ≥ 1 or FSDP), so more GPUs lower the peak."""
    return rp.strategy in ("deepspeed", "fsdp") and (rp.zero_stage >= 1 or rp.strategy == "fsdp")


def gpu_choices(rp: ResolvedPlan) -> list[dict]:
    """One row per catalog GPU with a known speed (and per count, when the run shards), sorted: the fitting
    choices fastest run first, then the rest fastest first; equal speeds fewer GPUs first.

    Row: {"gpu", "count", "peak_gib", "usable_gib", "fits", "tight", "tokens_per_s", "run_tokens_per_s",
    "step_s", "mfu", "bound"} (the `vramlens gpus --format json` contract).
    """
    from vramlens.knowledge.gpus import all_gpus

    sharded = shards(rp)
    counts = COUNTS if sharded else (max(rp.world_size, rp.gpu_count, 1),)
    out = []
    for gpu in all_gpus():
        if gpu.memory_gbs is None:
            continue
        for n in counts:
            changes = {"gpu": gpu, "gpu_count": n}
            if sharded or rp.strategy != "none":
                changes["world_size"] = n
            est = estimate(rp.with_changes(**changes))
            t = est.throughput
            if t is None:
                continue
            out.append(
                {
                    "gpu": gpu.name,
                    "count": n,
                    "peak_gib": round(est.device_bytes / GIB, 2),
                    "usable_gib": gpu.usable_gib,
                    "fits": est.fits,
                    "tight": est.tight,
                    "tokens_per_s": round(t.tokens_per_s, 1),
                    "run_tokens_per_s": round(t.run_tokens_per_s, 1),
                    "step_s": round(t.step_s, 4),
                    "mfu": round(t.mfu, 4),
                    "bound": t.bound,
                }
            )
    out.sort(key=lambda r: (not r["fits"], -r["run_tokens_per_s"], r["count"]))
    return out
