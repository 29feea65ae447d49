"""FSDP steps traced as rank 0 of N under torch's fake process group (`vramlens.trace.sharded`), and the estimator's
sharded figures held to them.

The grid: a small Llama × world sizes 2/4/8 × full fine-tune / LoRA × checkpointing off/on × FSDP1 / FSDP2 ×
FULL_SHARD / SHARD_GRAD_OP, AdamW. `row` gives the raw error (estimate / traced per-rank peak − 1) and the error
sharding adds: the estimate's error on the sharded plan less its error on the same model's step on one GPU
without FSDP (traced by the same real-library backend), so the single-GPU formulas' own error at these small shapes
is not counted twice. bf16 parameters without FSDP mixed precision isolate the sharded terms (parameters, gradients
and optimizer state at rest, gathered units, the root unit, the reduce-scatter): those rows are held to ±3 % of the
trace. The table: `python tests/trace/test_sharded_trace.py [--fast] [--mp]`.
Skips with a reason where torch or transformers are missing (CI installs the trace extra).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import sys

import pytest
from trace_plans import LORA, TINY_LLAMA, need, plan
from vramlens.estimate import allocated_peak

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")

import torch  # noqa: E402
from vramlens.trace import engine, sharded  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402
from vramlens.trace.tracker import LiveBytes  # noqa: E402

if not torch.distributed.is_available():
    pytest.skip("torch built without distributed support", allow_module_level=True)

ARCH = TINY_LLAMA.model_copy(update={"id": "tiny-llama-4", "layers": 4})
BF16 = dict(weight_dtype="bf16")
MP = dict(weight_dtype="fp32", amp=True, fsdp_mixed_precision=True)  # gathered in bf16, reduced in fp32
TOLERANCE = 0.03


def sharded_plan(world: int, peft: str, ckpt: bool, stage: int, precision: dict = BF16, **changes):
    return plan(
        arch=ARCH,
        strategy="fsdp",
        world_size=world,
        zero_stage=stage,
        grad_checkpointing=ckpt,
        **precision,
        **(LORA if peft == "lora" else {}),
        **changes,
    )


def trace_sharded(rp, version: int, real: bool = False) -> dict:
    cfg = dataclasses.replace(step_config(rp), fsdp_version=version)
    return engine.run(cfg, backend="fsdp", real=real)


@functools.cache
def single_gpu(peft: str, ckpt: bool) -> tuple[int, int]:
    """(traced peak, estimated peak) of the same model's step on one GPU without FSDP, in bf16: what FSDP's mixed
    precision computes with too (no fp32 weight reaches autocast)."""
    rp = plan(arch=ARCH, grad_checkpointing=ckpt, **(LORA if peft == "lora" else {}))
    return engine.run(step_config(rp), backend="transformers")["peak_bytes"], allocated_peak(rp)


def row(world: int, peft: str, ckpt: bool, version: int, stage: int, precision: dict = BF16) -> dict:
    rp = sharded_plan(world, peft, ckpt, stage, precision, fsdp_version=version)  # the estimate knows which FSDP
    traced, est = trace_sharded(rp, version)["peak_bytes"], allocated_peak(rp)
    t1, e1 = single_gpu(peft, ckpt)
    return {
        "world": world,
        "peft": peft,
        "ckpt": ckpt,
        "fsdp": version,
        "stage": stage,
        "traced": traced,
        "estimate": est,
        "raw_error": est / traced - 1,
        "error": (est - traced - (e1 - t1)) / traced,
    }


GRID = list(itertools.product((2, 4, 8), ("full", "lora"), (False, True), (1, 2), (3, 2)))


# full fine-tunes, no checkpointing: the peak is where the sharded terms are (the loss's backward, the root unit
# gathered, every other FULL_SHARD unit freed, every SHARD_GRAD_OP unit held)
FAST = [(2, "full", False, 2, 3), (4, "full", False, 1, 2)]


@pytest.mark.parametrize("world,peft,ckpt,version,stage", FAST, ids=lambda v: str(v))
def test_estimate_holds_to_the_sharded_trace(world, peft, ckpt, version, stage):
    r = row(world, peft, ckpt, version, stage)
    assert abs(r["raw_error"]) <= TOLERANCE, r


# checkpointed full fine-tunes: the peak is in a block's backward, where the gradient shards made so far, the units
# gathered and the reduce-scatters are (estimate/components/buffers.py `fsdp_recompute_block`)
CHECKPOINTED = [(2, "full", True, 2, 3), (4, "full", True, 1, 2)]


@pytest.mark.parametrize("world,peft,ckpt,version,stage", CHECKPOINTED, ids=lambda v: str(v))
def test_checkpointed_backward_holds_to_the_sharded_trace(world, peft, ckpt, version, stage):
    """The error sharding adds (the single-GPU step's own error at these shapes taken out, `row`)."""
    r = row(world, peft, ckpt, version, stage)
    assert abs(r["error"]) <= TOLERANCE, r


def test_fsdp2_gathers_the_adapters_with_their_block():
    """SHARD_GRAD_OP keeps every block gathered from its forward to its backward, peft's fp32 adapters with it."""
    r = row(2, "lora", False, 2, 2)
    assert abs(r["raw_error"]) <= TOLERANCE, r


def test_fsdp2_holds_the_last_forward_all_gather_through_the_loss():
    """FSDP2 keeps each unit's all-gather output in the forward until the next unit's copy-out; the last block's is
    freed when the root's forward ends, after the LM head and the loss, beside every block SHARD_GRAD_OP keeps
    gathered (estimate/components/buffers.py `fsdp_loss_forward_unsharded`)."""
    r = row(8, "lora", False, 2, 2)
    assert abs(r["error"]) <= TOLERANCE, r


def test_fsdp1_wraps_the_adapters_as_the_hf_trainer_does():
    """The HF Trainer gives every adapter linear a unit of its own (peft's `fsdp_auto_wrap_policy`): the blocks' flat
    parameters are frozen and hold no gradient; after the step rank 0 keeps its shard of the adapters' gradients."""
    rp = sharded_plan(2, "lora", False, 3, MP, fsdp_version=1)
    traced = trace_sharded(rp, 1)
    adapters = sum(p.numel() for p in _meta_params(**LORA) if p.requires_grad)
    assert traced["persistent"]["gradients"] == pytest.approx(adapters * 4 / 2, rel=0.05)  # fp32, over 2 ranks


def test_fsdp1_adapters_cast_their_input_from_the_fp32_shard():
    """Under FSDP1 each adapter is a unit of its own: peft reads lora_A's dtype outside that unit's forward, from its
    fp32 shard, and casts the 16-bit input up; autocast casts it back inside lora_A, so every adapter keeps its own
    16-bit copy of its input (estimate/components/sharding.py `fsdp1_adapter_input_upcast`)."""
    r = row(2, "lora", False, 1, 3, MP)
    assert abs(r["raw_error"]) <= TOLERANCE, r


# FSDP1 LoRA, checkpointed: FULL_SHARD in bf16 (the units gathered block by block alone), SHARD_GRAD_OP, and
# FULL_SHARD under mixed precision (the recomputed adapters' casts too); SHARD_GRAD_OP under mixed precision peaks
# at the loss, where the frozen final norm keeps its fp32 input alone (estimate/components/norms.py
# `final_norm_per_token`)
FSDP1_LORA_CHECKPOINTED = [
    (2, "lora", True, 1, 3, BF16),
    (2, "lora", True, 1, 2, BF16),
    (2, "lora", True, 1, 3, MP),
    (8, "lora", True, 1, 2, MP),
]


@pytest.mark.parametrize(
    "world,peft,ckpt,version,stage,precision",
    FSDP1_LORA_CHECKPOINTED,
    ids=["full-shard-bf16", "shard-grad-op-bf16", "full-shard-mixed-precision", "shard-grad-op-mixed-precision"],
)
def test_fsdp1_adapter_units_in_the_checkpointed_backward(world, peft, ckpt, version, stage, precision):
    """With every adapter a unit of its own, a block's pre-backward under FULL_SHARD prefetches the unit whose
    forward ended just before the block's, its last adapter, not the block below, which is gathered at the block's
    first adapter's backward, its recomputed activations freed: one block gathered at the recomputation's peak, not
    two. The recomputation under mixed precision casts every adapter's input from its fp32 shard again. SHARD_GRAD_OP
    keeps every adapter unit gathered from its forward to its backward (estimate/components/buffers.py
    `fsdp_recompute_block`, `fsdp_unit_adapters`; sharding.py `fsdp1_adapter_input_upcast`)."""
    r = row(world, peft, ckpt, version, stage, precision)
    assert abs(r["error"]) <= TOLERANCE, r


@pytest.mark.parametrize("world,peft,ckpt,version,stage", [*FAST, (2, "lora", False, 2, 3)], ids=lambda v: str(v))
def test_mixed_precision_blocks_compute_in_16bit(world, peft, ckpt, version, stage):
    """FSDP's MixedPrecision gathers every parameter of a unit in bf16, peft's fp32 adapters too: the blocks keep a
    bf16 residual stream and bf16 adapter inputs, not what autocast over fp32 weights keeps."""
    r = row(world, peft, ckpt, version, stage, MP)
    assert abs(r["raw_error"]) <= TOLERANCE, r


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("VRAMLENS_SHARDED_GRID"),
    reason="the whole sharded grid is a measurement of about 20 minutes: run it with "
    "VRAMLENS_SHARDED_GRID=1, or `python tests/trace/test_sharded_trace.py` for the table",
)
@pytest.mark.parametrize("precision", [BF16, MP], ids=["bf16", "mixed-precision"])
def test_sharded_grid_within_three_percent(precision):
    rows = [row(*key, precision) for key in GRID]
    off = [r for r in rows if abs(r["error"]) > TOLERANCE]
    assert len(off) <= len(rows) * 0.05, off


@pytest.mark.parametrize("version", [1, 2])
def test_fake_trace_matches_real_cpu_tensors(version):
    """The sharded step under fake tensors allocates what the same step on real CPU tensors allocates."""
    rp = sharded_plan(4, "full", False, 3, MP)
    fake, real = trace_sharded(rp, version), trace_sharded(rp, version, real=True)
    assert fake["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=1e-3)
    assert fake["phases"]["optimizer-step"] == pytest.approx(real["phases"]["optimizer-step"], rel=1e-3)


def test_per_rank_peak_falls_with_the_world_size_by_the_sharded_state():
    """At the optimizer step rank 0 holds its shard of the fp32 parameters, their gradients and both AdamW states
    (16 bytes per parameter over the ranks): from 2 to 4 ranks that much less, not the whole model's."""
    peaks = {n: trace_sharded(sharded_plan(n, "full", False, 3, MP), 2)["phases"]["optimizer-step"] for n in (2, 4)}
    params = sum(p.numel() for p in _meta_params())
    assert peaks[2] - peaks[4] == pytest.approx(16 * params * (1 / 2 - 1 / 4), rel=0.02)


def _meta_params(**changes):
    from vramlens.trace import hf

    return hf.build_meta(step_config(plan(arch=ARCH, **changes))).model.parameters()


def test_storage_resizes_are_counted_as_frees_and_allocations():
    """FSDP frees an unsharded parameter by resizing its storage to zero and gathers it again by resizing it back;
    the tracker counts both, so the bytes live after a step are the shards and the optimizer state only."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    sharded.fake_process_group(2)
    sharded.install_resize_tracking()
    mesh = init_device_mesh("cpu", (2,))
    tr = LiveBytes()
    with tr:
        model = torch.nn.Sequential(*[torch.nn.Linear(256, 256, bias=False) for _ in range(3)])
        for block in model:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), foreach=False)
        for _ in range(2):
            model(torch.randn(8, 256)).sum().backward()
            opt.step()
            opt.zero_grad()
    shard = 256 * 256 * 4 // 2
    live = sum(r.nbytes for r in tr.live_records() if r.nbytes >= shard)
    assert live == 3 * 3 * shard  # each weight's shard and its two AdamW states


def test_worker_traces_fsdp_plans_sharded_and_says_so():
    """An FSDP plan across ranks goes to the sharded backend first; its report no longer says one unsharded replica
    was traced, and names the FSDP it ran."""
    import threading

    from vramlens.trace import worker

    rp = sharded_plan(8, "lora", False, 3, MP)
    cfg = step_config(rp)
    assert [name for name, _ in worker.real_backends(cfg)][0] == "fsdp"
    raw = worker.run_backends(cfg, {"backend": "auto"}, lambda *a: None, threading.Event())
    assert raw["backend"] == "fsdp"
    assert not any("one unsharded replica" in n for n in raw["not_traced"])
    assert any("rank 0 of 8" in a for a in raw["assumptions"])
    single = worker.run_backends(
        step_config(plan(arch=ARCH, **MP, **LORA)), {"backend": "auto"}, lambda *a: None, threading.Event()
    )
    assert raw["peak_bytes"] < single["peak_bytes"]  # the weights and AdamW states are an eighth


if __name__ == "__main__":  # the table: python tests/trace/test_sharded_trace.py [--fast] [--mp]
    keys = FAST if "--fast" in sys.argv else GRID
    precision = MP if "--mp" in sys.argv else BF16
    print(
        f"{'ranks':>5} {'peft':5} {'ckpt':5} {'fsdp':4} {'stage':5} {'traced MiB':>10} {'estimate MiB':>12} "
        f"{'raw':>7} {'sharded':>8}"
    )
    for key in keys:
        r = row(*key, precision)
        print(
            f"{r['world']:>5} {r['peft']:5} {str(r['ckpt']):5} {r['fsdp']:>4} {r['stage']:>5} "
            f"{r['traced'] / 2**20:>10.2f} {r['estimate'] / 2**20:>12.2f} {r['raw_error']:>+7.1%} "
            f"{r['error']:>+8.1%}",
            flush=True,
        )
