"""litgpt's LoRA/QLoRA step in the trace: the 128-token chunked head and loss held through backward (fp32 once
Lightning Fabric casts the outputs), the 4-bit LM head, bitsandbytes < 0.43.2 keeping every 4-bit matmul's
input, Fabric's fp16 quantization source, and litgpt's fused qkv linear.
Byte counts are checked against what each of those keeps, computed from the shapes (tiny models, seconds)."""

from __future__ import annotations

import dataclasses

import pytest
from trace_plans import ARCHS, TINY_LLAMA, need, plan

B, S = 2, 128  # trace_plans.plan's micro batch and sequence length
LITGPT = dict(framework="litgpt", loss_impl="chunked", adapter_fp32=False, kbit_upcast=False, logits_fp32=True)
QV = dict(peft="lora", lora_r=8, lora_alpha=16.0, lora_targets=("q", "v"))
UNTIED = TINY_LLAMA.model_copy(update={"tied_embeddings": False})


def litgpt_plan(**changes):
    return plan(**{**LITGPT, **QV, "arch": UNTIED, **changes})


def trace(cfg):
    from vramlens.trace import engine

    return engine.run(cfg)


def live_after(raw: dict, phase: str) -> int:
    """Bytes live when `phase` of the first micro-batch ends."""
    return next(t["after_bytes"] for t in raw["timeline"] if t["step"] == 0 and t["micro"] == 0 and t["phase"] == phase)


def test_litgpt_plans_get_litgpt_step():
    from vramlens.trace.config import step_config

    cfg = step_config(litgpt_plan(quant_bits=4, quant_lm_head=True, quant_keeps_input=True))
    assert (cfg.loss, cfg.litgpt, cfg.holds_logits, cfg.mask) == ("litgpt", True, True, "none")
    assert cfg.quant_lm_head and cfg.quant_keeps_input
    assert any("128-token chunks" in a for a in cfg.assumptions)
    assert any("PR #1270" in a for a in cfg.assumptions)
    # other frameworks keep torchtune's chunked loss and the Hugging Face attention
    hf = step_config(plan(**QV, loss_impl="chunked"))
    assert (hf.loss, hf.litgpt, hf.holds_logits) == ("chunked", False, False)
    # nothing to quantize: the flags stay off
    bf16 = step_config(litgpt_plan(quant_lm_head=True, quant_keeps_input=True))
    assert not bf16.quant_lm_head and not bf16.quant_keeps_input


def test_litgpt_loss_chunks_and_value():
    """128-token chunks of the LM head, the last one cut by a position; the loss is the mean next-token
    cross-entropy, as one full cross-entropy computes it."""
    need("torch")
    import torch
    import torch.nn.functional as F
    from vramlens.trace import losses

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50)
    for seq, lengths in ((300, [128, 128, 43]), (256, [128, 127]), (100, [99])):
        hidden = torch.randn(2, seq, 16)
        labels = torch.randint(0, 50, (2, seq))
        loss, chunks = losses.litgpt_loss(hidden, head, labels)
        assert [c.shape[1] for c in chunks] == lengths
        full = head(hidden)[:, :-1]
        expected = F.cross_entropy(full.reshape(-1, 50), labels[:, 1:].reshape(-1))
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    capped, chunks = losses.litgpt_loss(hidden, head, labels, softcap=30.0)
    assert torch.allclose(chunks[0], torch.tanh(head(hidden)[:, :-1] / 30.0) * 30.0)


@pytest.mark.parametrize("family, fabric", [("llama", True), ("gemma2", True), ("llama", False), ("gemma2", False)])
def test_litgpt_loss_holds_its_logits_through_backward(family, fabric):
    """At the start of backward the loop still holds the logit chunks and each chunk's log-softmax: in fp32
    (4 + 4 bytes per logit) once Lightning Fabric has cast the model's outputs to the default dtype, in bf16
    (2 + 2) without that cast. Gemma-2's soft-cap adds its bf16 tanh output (2). The final norm's output, read
    only by the frozen head, is freed."""
    need("torch")
    from vramlens.trace.config import step_config

    vocab, seq = 4096, 300
    arch = (UNTIED if family == "llama" else ARCHS["gemma2"]).model_copy(
        update={"vocab": vocab, "tied_embeddings": False}
    )
    cfg = step_config(litgpt_plan(arch=arch, seq_len=seq))
    assert cfg.fabric_fp32_outputs
    raw = trace(dataclasses.replace(cfg, fabric_fp32_outputs=fabric))
    grown = live_after(raw, "loss") - live_after(raw, "fwd")
    width = 4 if fabric else 2
    tanh = 2 if family == "gemma2" else 0
    norm_out = B * seq * arch.hidden * 2
    # the log-softmax skips the position cut off the last chunk
    expected = (width + tanh) * B * seq * vocab + width * B * (seq - 1) * vocab - norm_out
    assert grown == pytest.approx(expected, rel=0.005)
    assert (grown + norm_out) / (B * seq * vocab) == pytest.approx(2 * width + tanh, abs=0.03)


def test_quantized_lm_head_shrinks_the_weights():
    """A 4-bit LM head: V·h/2 packed bytes + an fp32 absmax per 64 weights in place of V·h bf16 weights;
    LoRA on it trains r·(h + V) more parameters."""
    need("torch")
    need("bitsandbytes")
    from vramlens.trace.config import step_config

    def held(raw):
        return raw["persistent"]["weights"] + raw["persistent"].get("quant_constants", 0)

    q4 = trace(step_config(litgpt_plan(quant_bits=4, quant_lm_head=True)))
    bf16_head = trace(step_config(litgpt_plan(quant_bits=4, quant_lm_head=False)))
    vh = UNTIED.vocab * UNTIED.hidden
    assert held(bf16_head) - held(q4) == pytest.approx(vh * (2 - 0.5 - 4 / 64), rel=0.01)
    assert q4["params_total"] == bf16_head["params_total"]

    with_head = trace(step_config(litgpt_plan(quant_bits=4, quant_lm_head=True, lora_targets=("q", "v", "lm_head"))))
    assert with_head["params_trainable"] - q4["params_trainable"] == 8 * (UNTIED.hidden + UNTIED.vocab)


def test_keeps_input_matmul_keeps_exactly_the_inputs():
    """bitsandbytes < 0.43.2: each 4-bit linear keeps its input for backward. The rise is the inputs nothing
    else keeps: per block the attention output projection's input (b·s·q_dim), the MLP input (b·s·h, read by
    the frozen gate and up) and the down projection's input (b·s·inter), plus the LM head's input (b·s·h).
    The q/k/v input is kept anyway by the LoRA branch."""
    need("torch")
    need("bitsandbytes")
    from vramlens.trace.config import step_config

    quant = dict(quant_bits=4, quant_lm_head=True)
    kept = trace(step_config(litgpt_plan(**quant, quant_keeps_input=True)))
    current = trace(step_config(litgpt_plan(**quant, quant_keeps_input=False)))
    a = UNTIED
    inputs = 2 * B * S * (a.layers * (a.q_dim + a.hidden + a.intermediate) + a.hidden)
    assert live_after(kept, "loss") - live_after(current, "loss") == inputs
    assert kept["peak_bytes"] - current["peak_bytes"] >= inputs


def test_keeps_input_matmul_computes_what_bitsandbytes_computes():
    need("torch")
    need("bitsandbytes")
    import torch
    from vramlens.trace import model as M
    from vramlens.trace.config import step_config

    torch.manual_seed(0)
    cfg = step_config(litgpt_plan(quant_bits=4, quant_keeps_input=True))
    old = M.Quant4bitLinear(64, 32, False, cfg, torch.bfloat16)
    old.quantize_("cpu", real=True)
    new = M.Quant4bitLinear(64, 32, False, dataclasses.replace(cfg, quant_keeps_input=False), torch.bfloat16)
    new.packed, new.qs = old.packed, old.qs
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16, requires_grad=True)
    y_old = old(x)
    (g_old,) = torch.autograd.grad(y_old.float().square().sum(), x)
    y_new = new(x)
    (g_new,) = torch.autograd.grad(y_new.float().square().sum(), x)
    assert y_old.grad_fn.name().startswith("KeptInputMatMul4Bit")
    assert torch.allclose(y_old.float(), y_new.float(), atol=1e-2, rtol=1e-2)
    assert torch.allclose(g_old.float(), g_new.float(), atol=1e-2, rtol=1e-2)


def test_fused_qkv_keeps_what_litgpt_keeps():
    """litgpt's one q|k|v linear against the Hugging Face layout, multi-head attention, LoRA on q and v:
    the value handed to SDPA is a view of the q|k|v output, so all of it stays (+ b·s·(q_dim + kv_dim));
    `zero_pad`'s index_copy keeps the LoRA update (b·s·(q_dim + kv_dim)) and its index (int64)."""
    need("torch")
    from vramlens.trace.config import step_config

    mha = UNTIED.model_copy(update={"kv_heads": UNTIED.heads})
    cfg = step_config(litgpt_plan(arch=mha))
    hf = dataclasses.replace(cfg, litgpt=False, repeat_kv=True, mask="none")
    width = mha.q_dim + mha.kv_dim
    per_block = 2 * B * S * width * 2 + 8 * width
    assert live_after(trace(cfg), "fwd") - live_after(trace(hf), "fwd") == mha.layers * per_block


def test_fused_qkv_has_one_dropout():
    """One dropout serves q, k and v: its dropped copy replaces the input the LoRA branch kept, so dropout adds
    only its 1-byte mask per element (none in the first block, whose input needs no gradient)."""
    need("torch")
    from vramlens.trace.config import step_config

    plain = trace(step_config(litgpt_plan()))
    dropped = trace(step_config(litgpt_plan(lora_dropout=0.1)))
    h = UNTIED.hidden
    assert live_after(dropped, "fwd") - live_after(plain, "fwd") == (UNTIED.layers - 1) * B * S * h


@pytest.mark.parametrize("arch", [UNTIED, UNTIED.model_copy(update={"kv_heads": UNTIED.heads})], ids=["gqa", "mha"])
def test_fused_qkv_has_the_catalog_parameters(arch):
    need("torch")
    from vramlens.knowledge.models import param_count
    from vramlens.trace import model as M
    from vramlens.trace.config import step_config

    lit = M.build_meta(step_config(litgpt_plan(arch=arch, lora_targets=("q", "k", "v", "o"))))
    hf = M.build_meta(step_config(plan(arch=arch, **{**QV, "lora_targets": ("q", "k", "v", "o")})))
    assert M.param_count(lit) == param_count(arch)
    trainable = [sum(p.numel() for p in m.parameters() if p.requires_grad) for m in (lit, hf)]
    assert trainable[0] == trainable[1]


def test_fp16_quantization_source_adds_an_fp16_weight_per_dequantization():
    """Lightning Fabric quantizes each weight from an fp16 copy, so a dequantization makes an fp16 weight and
    then its bf16 copy: the peak, at the LM head's backward, rises by nearly one fp16 LM-head weight."""
    need("torch")
    need("bitsandbytes")
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    arch = UNTIED.model_copy(update={"hidden": 1024, "vocab": 4096, "layers": 1})
    cfg = step_config(litgpt_plan(arch=arch, seq_len=64, quant_bits=4, quant_lm_head=True, quant_keeps_input=True))
    fp16 = dataclasses.replace(cfg, quant_from_fp16=True)
    rise = trace(fp16)["peak_bytes"] - trace(cfg)["peak_bytes"]
    head = arch.vocab * arch.hidden * 2
    assert 0.9 * head <= rise <= head
    assert engine.run(fp16)["peak_bytes"] == engine.run(fp16, real=True)["peak_bytes"]
