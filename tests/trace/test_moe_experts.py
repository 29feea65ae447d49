"""A Mixture-of-Experts step on transformers 5 with the real libraries at small shapes: the routed experts are 3-D
parameters run with grouped_mm. Under AMP and in a k-bit model they compute in fp32, which CUDA runs (and the trace
now does, fake == real); LoRA on gate/up/down reaches them through peft's `lora.ParamWrapper`, and the estimate
follows what that keeps. Skips with a reason where torch/transformers/peft/bitsandbytes are missing (CI installs
the trace extra)."""

from __future__ import annotations

import pytest
from trace_plans import LORA, QWEN3_MOE_BLOCK, assert_estimate_matches_trace, need, plan, trace_step
from vramlens.estimate import components as C

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")

from vramlens.trace import engine, hf  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

MOE = QWEN3_MOE_BLOCK
AMP = dict(amp=True, weight_dtype="fp32")
QLORA = dict(LORA, peft="qlora", quant_bits=4, quant_double=True)


def moe_plan(seq_len: int = 256, **changes):
    return plan(arch=MOE, seq_len=seq_len, attn_mask=False, repeat_kv=False, **changes)


@pytest.mark.parametrize("changes", [AMP, LORA, QLORA], ids=["amp", "lora", "qlora"])
def test_moe_step_fake_equals_real(changes):
    """fp32 grouped_mm (AMP's fp32 experts, a k-bit model's upcast ones) and LoRA's W + BA per expert stack: the
    fake step allocates what the same step on real CPU tensors does."""
    if changes.get("peft"):
        need("peft")
    if changes.get("quant_bits"):
        need("bitsandbytes")
    cfg = step_config(moe_plan(**changes))
    assert hf.unsupported(cfg) is None
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["peak_bytes"] == real["peak_bytes"] > 0


def test_lora_on_gate_up_down_trains_every_expert():
    """peft turns the gate/up/down targets into adapters on the fused expert parameters: rank r per expert on
    down_proj, 2r on gate_up_proj. The estimate counts the parameters peft creates."""
    need("peft")
    rp = moe_plan(**LORA)
    traced = trace_step(rp)
    assert C.params(rp).adapter_params == traced["params_trainable"]
    attention_only = C.params(rp.with_changes(lora_targets=("q", "k", "v", "o"))).adapter_params
    assert traced["params_trainable"] > 10 * attention_only


@pytest.mark.parametrize("changes", [LORA, dict(LORA, grad_checkpointing=True)], ids=["lora", "lora-ckpt"])
def test_moe_lora_estimate_follows_the_real_step(changes):
    """Each MoE block keeps its adapted expert stacks W + BA and grouped_mm's inputs; a checkpointed block's backward
    starts with token-expert-pair-sized gradients. Leaving the experts frozen put these rows 24–29 % low."""
    need("peft")
    assert_estimate_matches_trace(moe_plan(seq_len=1024, **changes))


ATTENTION_ONLY = dict(LORA, lora_targets=("q", "k", "v", "o"))


@pytest.mark.parametrize(
    "changes",
    [ATTENTION_ONLY, dict(ATTENTION_ONLY, grad_checkpointing=True), dict(QLORA, lora_targets=("q", "k", "v", "o"))],
    ids=["lora", "lora-ckpt", "qlora"],
)
def test_frozen_experts_estimate_follows_the_real_step(changes):
    """Adapters on the attention alone leave the fused experts frozen: a checkpointed block is recomputed to its
    un-permute of the expert outputs, the gathered tokens, the weighted outputs and their un-permuted copy alive
    beside what it keeps (`experts._recomputed_grouped_mm_forward`)."""
    need("peft")
    if changes.get("quant_bits"):
        need("bitsandbytes")
    assert_estimate_matches_trace(moe_plan(**changes))


def test_kbit_moe_keeps_its_experts_unquantized_in_fp32():
    """bitsandbytes quantizes nn.Linear modules only: the 3-D experts stay, upcast to fp32 by
    prepare_model_for_kbit_training — the weights the estimate counts are the traced ones."""
    need("peft")
    need("bitsandbytes")
    rp = moe_plan(**QLORA)
    assert_estimate_matches_trace(rp, tol=0.04)
    experts = sum(lin.params for lin in C.shapes(MOE).linears if lin.expert)
    assert C.params(rp).frozen_bytes >= experts * 4
