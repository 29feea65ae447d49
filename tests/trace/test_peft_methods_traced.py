"""PEFT methods beyond LoRA/DoRA/IA3/VeRA against peft's own adapters: the real-library backend builds each method
with peft's config class (`vramlens.trace.hf.apply_peft`, knowledge.peft_methods.PEFT_CONFIGS) on transformers' model
under fake tensors. The trainable parameters equal peft's for every method; what AdaLoRA's and MiSS's forwards keep
(estimate.components.adapters `adalora_per_token`, `miss_per_token`) is the traced peak within ±3 %. The other
methods' kept tensors are estimated as LoRA's and named as not modelled in every view."""

from __future__ import annotations

import pytest
from trace_plans import TINY_LLAMA, need, plan
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.knowledge import peft_methods

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")

from vramlens.trace import engine  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

MID = TINY_LLAMA.model_copy(
    update=dict(id="tiny-llama-mid", hidden=512, layers=2, heads=8, kv_heads=4, intermediate=1024, vocab=4000)
)
SHAPES = {
    "adalora": {"r": 12},
    "loha": {"r": 8},
    "lokr": {"r": 8},
    "oft": {"block": 32},
    "boft": {"block": 4, "factors": 1},
    "fourierft": {"frequencies": 1000},
    "bone": {"r": 64},
}
BF16 = dict(weight_dtype="bf16", compute_dtype="bf16")


def method_plan(method: str, **changes):
    shape = SHAPES[method]
    base = dict(
        arch=MID,
        seq_len=1024,
        attn_mask=False,
        repeat_kv=False,
        peft="lora",
        lora_r=shape.get("r", 8),
        lora_targets=("all-linear",),
        adapter_method=method,
        adapter_shape=tuple(sorted(shape.items())),
        **BF16,
    )
    base.update(changes)
    return plan(**base)


def traced(rp) -> dict:
    return engine.run(step_config(rp), backend="transformers")


def test_every_peft_config_method_is_known_to_the_estimate():
    assert set(peft_methods.PEFT_CONFIGS) <= set(peft_methods.OTHER_METHODS)
    assert set(SHAPES) == set(peft_methods.PEFT_CONFIGS)


@pytest.mark.parametrize("method", sorted(SHAPES))
def test_trainable_parameters_are_peft_own(method):
    """Each method's trainable parameters as peft builds them (AdaLoRA's `ranknum` among them: peft re-wraps it as a
    trainable parameter when it moves the adapter to the base layer's device)."""
    rp = method_plan(method, seq_len=128)
    assert C.params(rp).trainable == traced(rp)["params_trainable"]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        dict(weight_dtype="fp32", amp=True),
        dict(lora_dropout=0.1),
        dict(lora_targets=("q", "v")),
        dict(lora_targets=("q", "v"), grad_checkpointing=True),
    ],
    ids=["bf16", "amp", "dropout", "q-v", "q-v-checkpointed"],
)
def test_adalora_keeps_its_scaled_products(changes):
    """`(x @ (A·E)ᵀ @ Bᵀ) * scaling / ranknum`: the division by the trainable `ranknum` keeps each adapted linear's
    out-wide numerator. Without it the estimate was 0.80 of the traced peak in 16-bit."""
    rp = method_plan("adalora", **changes)
    assert estimate(rp, limits=False).allocated_bytes / traced(rp)["peak_bytes"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("changes", [{}, dict(grad_checkpointing=True)], ids=["bf16", "checkpointed"])
def test_miss_keeps_its_sums_not_the_input(changes):
    """`torch.sum(x.reshape(..., in // r, r), dim=-2) @ miss`: the r-wide sum, no copy of the input. Estimated as
    LoRA's (an fp32 copy of every adapted linear's input) it was 1.35 of the traced peak."""
    rp = method_plan("bone", **changes)
    assert estimate(rp, limits=False).allocated_bytes / traced(rp)["peak_bytes"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("method", ["adalora", "loha", "bone"])
def test_the_synthetic_model_says_it_runs_lora_in_their_place(method):
    not_traced = step_config(method_plan(method)).not_traced
    name = peft_methods.OTHER_METHODS[method][0]
    assert any(n.startswith(f"{name} adapters in the synthetic model") for n in not_traced), not_traced
