"""DDP's gradient buckets (torch/csrc/distributed/c10d/reducer.cpp `Reducer::initialize_buckets`): flat tensors
allocated when the model is wrapped that together hold every trainable gradient, beside the `.grad` tensors under
`gradient_as_bucket_view=False` (the default of torch, accelerate and so the HF Trainer)."""

from __future__ import annotations

import pytest
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan

A100 = GpuSpec(name="A100-80GB", memory_gib=80.0, usable_gib=79.2, bf16=True)
LLAMA_1B = ModelArch(
    id="llama-3.2-1b",
    family="llama",
    hidden=2048,
    layers=16,
    heads=32,
    kv_heads=8,
    head_dim=64,
    intermediate=8192,
    vocab=128256,
    tied_embeddings=True,
)


def plan(**kw) -> ResolvedPlan:
    base = dict(
        arch=LLAMA_1B,
        optimizer=OptimizerSpec(name="adamw_torch_fused", states=2),
        gpu=A100,
        weight_dtype="fp32",
        compute_dtype="bf16",
        amp=True,
        micro_batch=4,
        seq_len=2048,
        grad_checkpointing=True,
        world_size=8,
        strategy="ddp",
    )
    base.update(kw)
    return ResolvedPlan(**base)


@pytest.mark.parametrize("peft", ["none", "lora"])
def test_buckets_hold_a_copy_of_every_trainable_gradient(peft):
    rp = plan(peft=peft, lora_r=16, lora_targets=("all-linear",))
    p = C.params(rp)
    assert C.zero_buffers(rp, p) == p.trainable * p.trainable_dtype_bytes
    if peft == "none":
        assert C.zero_buffers(rp, p) == pytest.approx(4 * 1_235_814_400, rel=1e-6)  # fp32 gradients of 1.24 B


def test_one_process_has_no_buckets():
    rp = plan(world_size=1)
    assert C.zero_buffers(rp, C.params(rp)) == 0
    assert estimate(plan()).allocated_bytes - estimate(rp).allocated_bytes == pytest.approx(
        C.params(rp).trainable * 4, rel=0.01
    )
