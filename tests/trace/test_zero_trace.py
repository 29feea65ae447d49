"""DeepSpeed ZeRO-2/ZeRO-3 steps traced as rank 0 of N under torch's fake process group by DeepSpeed's own engine
(`vramlens.trace.zero`), and the estimator's per-rank figures held to them.

The grid: a small Llama × world sizes 2/4/8 × full fine-tune / LoRA × checkpointing off/on × ZeRO-2 / ZeRO-3, bf16
(DeepSpeed's bf16 mode: 16-bit weights, fp32 master partitions and AdamW states), the HF Trainer's configuration.
`row` gives the raw error (estimate / traced per-rank peak − 1) and the error sharding adds: the estimate's error on
the ZeRO plan less its error on the same model's step on one GPU without DeepSpeed (traced by the real-library
backend), as tests/trace/test_sharded_trace.py does for FSDP, where the two estimates peak in the same phase: a
single-GPU error made in another phase (the checkpointed backward's, where the ZeRO step peaks at the loss or at the
optimizer step) is not in the ZeRO estimate's peak. The table:
`python tests/trace/test_zero_trace.py [--fast]`.
Skips with a reason where deepspeed, torch or transformers are missing.
"""

from __future__ import annotations

import functools
import itertools
import sys

import pytest
from trace_plans import LORA, TINY_LLAMA, need, plan
from vramlens.estimate import allocated_peak, estimate

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")
pytest.importorskip("deepspeed", reason="deepspeed not installed (DeepSpeed's ZeRO runs only where it is)")

import torch  # noqa: E402
from vramlens.trace import engine, zero  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

if not torch.distributed.is_available():
    pytest.skip("torch built without distributed support", allow_module_level=True)

ARCH = TINY_LLAMA.model_copy(update={"id": "tiny-llama-4", "layers": 4})
# DeepSpeed's bf16 mode casts every parameter to bf16, adapters included (deepspeed 0.19.8 runtime/engine.py
# `_cast_module_mixed_precision`), and its ZeRO optimizer keeps an fp32 master partition of every trainable one
# (runtime/zero/stage_1_and_2.py `single_partition_of_fp32_groups`, stage3.py `fp32_partitioned_groups_flat`)
ZERO_BF16 = dict(weight_dtype="bf16", compute_dtype="bf16", master_weights=True, adapter_fp32=False)
TOLERANCE = 0.03


def zero_plan(world: int, peft: str, ckpt: bool, stage: int):
    return plan(
        arch=ARCH,
        strategy="deepspeed",
        world_size=world,
        zero_stage=stage,
        grad_checkpointing=ckpt,
        **ZERO_BF16,
        **(LORA if peft == "lora" else {}),
    )


@functools.cache
def single_gpu(peft: str, ckpt: bool) -> tuple[int, int, str]:
    """(traced peak, estimated peak, the estimate's peak phase) of the same model's step on one GPU without
    DeepSpeed, in bf16 (adapters too)."""
    rp = plan(arch=ARCH, grad_checkpointing=ckpt, **(dict(LORA, adapter_fp32=False) if peft == "lora" else {}))
    traced = engine.run(step_config(rp), backend="transformers")["peak_bytes"]
    return traced, allocated_peak(rp), estimate(rp, limits=False).phase


def row(world: int, peft: str, ckpt: bool, stage: int) -> dict:
    rp = zero_plan(world, peft, ckpt, stage)
    traced, est = zero.run(step_config(rp), stage)["peak_bytes"], allocated_peak(rp)
    t1, e1, phase1 = single_gpu(peft, ckpt)
    if estimate(rp, limits=False).phase != phase1:
        t1 = e1  # the single-GPU error is in another phase than the ZeRO estimate's peak
    return {
        "world": world,
        "peft": peft,
        "ckpt": ckpt,
        "stage": stage,
        "traced": traced,
        "estimate": est,
        "raw_error": est / traced - 1,
        "error": (est - traced - (e1 - t1)) / traced,
    }


GRID = list(itertools.product((2, 4, 8), ("full", "lora"), (False, True), (2, 3)))
# ZeRO-2: rank 0 holds every 16-bit weight, its partitions of the fp32 master weights and AdamW states, and, in the
# backward, the reduce buckets; each gradient leaves for the bucket as it is made. ZeRO-3: its partitions, and the
# parameters its coordinator keeps gathered
FAST = [(2, "full", False, 2), (2, "lora", False, 2), (2, "full", False, 3), (2, "lora", False, 3)]


def test_fake_trace_matches_real_cpu_tensors():
    """DeepSpeed's ZeRO-3 step under fake tensors allocates what the same step on real CPU tensors allocates."""
    cfg = step_config(zero_plan(2, "full", False, 3))
    fake, real = zero.run(cfg, 3), zero.run(cfg, 3, real=True)
    assert fake["phases"] == real["phases"]
    assert fake["persistent_bytes"] == real["persistent_bytes"]


def test_a_world_destroyed_elsewhere_leaves_no_stale_deepspeed_group():
    """A trace after another one's world was torn down by something else (a test's or a library's teardown): DeepSpeed
    would broadcast over its cached clone of the dead world group ("Group … is not registered")."""
    import torch.distributed as dist

    cfg = step_config(zero_plan(2, "full", False, 2))
    first = zero.run(cfg, 2)
    dist.destroy_process_group()
    assert zero.run(cfg, 2)["phases"] == first["phases"]


def test_rank_keeps_its_partitions_after_the_step():
    """After the step rank 0 keeps its 16-bit weights (ZeRO-2: all of them; ZeRO-3: its partition, the small
    parameters below the persistence threshold whole), its fp32 master and both AdamW states' partitions (12 B per
    parameter over the ranks), and ZeRO-3's flat 16-bit gradient partition."""
    n = sum(p.numel() for p in _meta_params())
    small = sum(p.numel() for p in _meta_params() if p.numel() <= 10 * ARCH.hidden)
    for stage, world in ((2, 2), (3, 4)):
        live = zero.run(step_config(zero_plan(world, "full", False, stage)), stage)["persistent_bytes"]
        weights = 2 * n if stage == 2 else 2 * (n - small) / world + 2 * small
        grads = 2 * n / world if stage == 3 else 0
        assert live == pytest.approx(weights + 12 * n / world + grads, rel=0.02), (stage, world)


def _meta_params():
    from vramlens.trace import hf

    return list(hf.build_meta(step_config(plan(arch=ARCH))).model.parameters())


@pytest.mark.parametrize("world,peft,ckpt,stage", FAST, ids=lambda v: str(v))
def test_estimate_holds_to_the_zero_trace(world, peft, ckpt, stage):
    """The error sharding adds (the single-GPU step's own error at these shapes taken out, `row`)."""
    r = row(world, peft, ckpt, stage)
    assert abs(r["error"]) <= TOLERANCE, r


def test_zero3_gathered_working_set():
    """ZeRO-3 from its second step: every module prefetches a bucket ahead, and a parameter stays gathered until its
    next use within stage3_max_reuse_distance (1e9 elements) or a prefetch's mark for it: this 4-layer model is
    gathered whole from the forward to the backward, the frozen embedding's forward use aside under LoRA without
    checkpointing (deepspeed 0.19.8 runtime/zero/partitioned_param_coordinator.py; estimate/components/buffers.py
    `zero3_gathered`)."""
    for key in ((2, "lora", True, 3), (4, "full", False, 3)):
        r = row(*key)
        assert abs(r["raw_error"]) <= TOLERANCE and abs(r["error"]) <= TOLERANCE, r


def test_unsupported_says_why():
    cfg = step_config(zero_plan(2, "full", False, 3))
    assert zero.unsupported(cfg, 3) is None
    assert "ZeRO-2 or ZeRO-3" in zero.unsupported(cfg, 1)
    fp32 = step_config(plan(arch=ARCH, strategy="deepspeed", world_size=2, zero_stage=3, weight_dtype="fp32"))
    assert "16-bit" in zero.unsupported(fp32, 3)


if __name__ == "__main__":  # the table: python tests/trace/test_zero_trace.py [--fast]
    keys = FAST if "--fast" in sys.argv else GRID
    print(
        f"{'ranks':>5} {'peft':5} {'ckpt':5} {'zero':4} {'traced MiB':>10} {'estimate MiB':>12} {'raw':>7} "
        f"{'sharded':>8}"
    )
    for key in keys:
        r = row(*key)
        print(
            f"{r['world']:>5} {r['peft']:5} {str(r['ckpt']):5} {r['stage']:>4} {r['traced'] / 2**20:>10.2f} "
            f"{r['estimate'] / 2**20:>12.2f} {r['raw_error']:>+7.1%} {r['error']:>+8.1%}",
            flush=True,
        )
