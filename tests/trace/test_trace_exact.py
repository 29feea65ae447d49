"""The trace is exact at the allocator level: tracing a step under fake tensors gives byte for byte the peak
(and every phase's after/peak level) of running the same model and step on real CPU tensors with the same
tracker (docs/memory-model.md, "How the traced figures were measured")."""

from __future__ import annotations

import pytest
from trace_plans import ADAFACTOR, ADAMW_8BIT, ARCHS, LORA, PAGED_8BIT, need, plan

CASES = {
    "full bf16, fused AdamW": {},
    "gradient checkpointing": dict(grad_checkpointing=True),
    "LoRA, fp32 adapters": dict(LORA),
    "foreach AdamW": dict(optimizer_impl="foreach"),
    "AMP (fp32 weights + bf16 autocast)": dict(amp=True, weight_dtype="fp32"),
    "QLoRA (NF4, double quant)": dict(quant_bits=4, quant_double=True, **LORA),
    "QLoRA + checkpointing + paged 8-bit AdamW": dict(
        quant_bits=4, quant_double=True, grad_checkpointing=True, optimizer=PAGED_8BIT, **LORA
    ),
    "8-bit AdamW (bitsandbytes)": dict(optimizer=ADAMW_8BIT),
    "DoRA": dict(LORA, peft="dora"),
    "LLM.int8 base + LoRA": dict(quant_bits=8, **LORA),
    "eager attention": dict(attn_impl="eager"),
    "chunked loss": dict(loss_impl="chunked"),
    "fused linear cross-entropy": dict(loss_impl="fused"),
    "grad accumulation 2": dict(grad_accum=2),
    "zero_grad(set_to_none=False)": dict(set_to_none=False),
    "Adafactor": dict(optimizer=ADAFACTOR),
    "fp32 master weights": dict(master_weights=True),
    "LoRA dropout, logits kept": dict(LORA, lora_dropout=0.1, keep_logits=True),
}
LITGPT = dict(
    framework="litgpt",
    loss_impl="chunked",
    adapter_fp32=False,
    kbit_upcast=False,
    arch=ARCHS["llama"].model_copy(update={"tied_embeddings": False}),
)
CASES.update(
    {
        "litgpt LoRA q,v with dropout (fused qkv, chunked bf16 loss)": dict(LITGPT, **LORA, lora_dropout=0.05)
        | dict(lora_targets=("q", "v")),
        "litgpt QLoRA: 4-bit LM head with LoRA, inputs kept (bitsandbytes < 0.43.2)": dict(
            LITGPT, **LORA, quant_bits=4, quant_lm_head=True, quant_keeps_input=True
        )
        | dict(lora_targets=("q", "k", "v", "o", "gate", "up", "down", "lm_head"), lora_dropout=0.1),
        "litgpt Gemma-2 (soft-capped attention and logits)": dict(
            LITGPT, **LORA, arch=ARCHS["gemma2"].model_copy(update={"tied_embeddings": False})
        ),
    }
)
ARCH_CASES = {name: dict(arch=arch) for name, arch in ARCHS.items() if name != "llama"}


def _needs(changes: dict) -> None:
    need("torch")
    if changes.get("quant_bits") or getattr(changes.get("optimizer"), "library", "") == "bitsandbytes":
        need("bitsandbytes")


@pytest.mark.parametrize("changes", list({**CASES, **ARCH_CASES}.values()), ids=list({**CASES, **ARCH_CASES}))
def test_fake_trace_equals_real_cpu_execution(changes):
    _needs(changes)
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    cfg = step_config(plan(**changes))
    fake = engine.run(cfg)
    real = engine.run(cfg, real=True)
    assert fake["peak_bytes"] == real["peak_bytes"]
    assert fake["phase"] == real["phase"]
    assert fake["components"] == real["components"]
    assert [(t["phase"], t["after_bytes"], t["peak_bytes"]) for t in fake["timeline"]] == [
        (t["phase"], t["after_bytes"], t["peak_bytes"]) for t in real["timeline"]
    ]
    assert sum(fake["components"].values()) == fake["peak_bytes"]


@pytest.mark.parametrize(
    "changes",
    [
        CASES["full bf16, fused AdamW"],
        CASES["foreach AdamW"],
        CASES["QLoRA (NF4, double quant)"],
        CASES["8-bit AdamW (bitsandbytes)"],
        CASES["grad accumulation 2"],
    ],
    ids=["fused", "foreach", "qlora", "adamw8bit", "grad-accum"],
)
def test_one_step_shortcut_equals_two_steps(changes):
    """Step 0 + the optimizer state it created gives the steady-state peak of step 1 (docs/memory-model.md)."""
    _needs(changes)
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    cfg = step_config(plan(**changes))
    one, two = engine.run(cfg, steps=1), engine.run(cfg, steps=2)
    assert one["peak_bytes"] == two["peak_bytes"]
    assert one["phases"] == two["phases"]


def test_breakdown_shows_what_each_setting_costs():
    """The components move the way the settings say: foreach adds a state-sized optimizer temporary,
    checkpointing drops most saved activations, 8-bit Adam halves bf16 states (1 byte + block absmax)."""
    need("torch")
    need("bitsandbytes")
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    def run(**kw):
        return engine.run(step_config(plan(**kw)))

    fused, foreach = run(), run(optimizer_impl="foreach")
    state = fused["persistent"]["optimizer"]
    assert foreach["phases"]["optimizer-step"] - fused["phases"]["optimizer-step"] == pytest.approx(state / 2, rel=0.01)
    ckpt = run(grad_checkpointing=True)
    assert ckpt["phases"]["forward-backward"] < fused["phases"]["forward-backward"]
    assert run(optimizer=ADAMW_8BIT)["persistent"]["optimizer"] == pytest.approx(state / 2, rel=0.05)
    params = fused["params_total"]
    assert fused["persistent"]["weights"] >= 2 * params  # bf16 weights
    assert state == pytest.approx(4 * params, rel=0.01)  # bf16 m and v


def test_partial_features_are_flagged_not_exact():
    from vramlens.trace.config import step_config

    cfg = step_config(plan(strategy="deepspeed", zero_stage=3, world_size=8, grad_accum=64))
    assert any("8 ranks" in n for n in cfg.not_traced)
    assert cfg.grad_accum == 2  # later micro-batches repeat the second
    assert step_config(plan()).not_traced == ()


def test_paged_optimizer_states_stay_out_of_the_allocated_peak():
    """bitsandbytes pages states of ≥ 1e5 elements into CUDA unified memory, which `max_memory_allocated`
    does not count: the trace reports them apart."""
    need("torch")
    need("bitsandbytes")
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    plain = engine.run(step_config(plan(optimizer=ADAMW_8BIT)))
    paged = engine.run(step_config(plan(optimizer=PAGED_8BIT)))
    assert paged["paged_bytes"] > 0 and plain["paged_bytes"] == 0
    assert plain["persistent"]["optimizer"] - paged["persistent"].get("optimizer", 0) == paged["paged_bytes"]
    assert paged["peak_bytes"] < plain["peak_bytes"]
    assert any("unified memory" in a for a in paged["assumptions"])
