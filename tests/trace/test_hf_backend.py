"""The real-library trace backend (`vramlens.trace.hf`): each shim, and the whole step, give the same bytes under
fake tensors as the same step on real CPU tensors at tiny shapes. Skips with a reason where transformers/peft/
bitsandbytes/trl are not installed (CI installs the trace extra)."""
from __future__ import annotations

import pytest

from trace_plans import LORA, plan

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
pytest.importorskip("transformers", reason="transformers not installed (the trace extra)")

import torch  # noqa: E402

from vramlens.trace import engine, hf  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402


def fake_and_real(**changes) -> tuple[int, int]:
    cfg = step_config(plan(**changes))
    assert hf.unsupported(cfg) is None, hf.unsupported(cfg)
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["backend"] == "transformers"
    return fake["peak_bytes"], real["peak_bytes"]


def test_full_finetune_fake_equals_real():
    fake, real = fake_and_real(attn_mask=False)
    assert fake == real > 0


def test_packed_sequence_shim_fake_equals_real():
    """Without the shim, transformers reads a fake tensor as packed sequences and builds an explicit mask
    (more bytes than the real step, which runs causal SDPA without a mask)."""
    from transformers import masking_utils

    fake, real = fake_and_real(attn_mask=False)
    assert fake == real
    original = masking_utils.find_packed_sequence_indices
    ids = torch.arange(16)[None].expand(2, 16)
    assert original(ids) is None                      # the real answer for the batch traced
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake_ids = torch.arange(16)[None].expand(2, 16)
        assert hf.real_packed_sequence_indices(fake_ids) is None
        assert getattr(masking_utils.find_packed_sequence_indices, "_vramlens", False)
        assert masking_utils.find_packed_sequence_indices(fake_ids) is None


def test_padding_mask_fake_equals_real_padded_batch():
    """A padded batch keeps transformers' 4-D mask (and, with SDPA and grouped K/V, repeated K/V): the fake step
    allocates what a real batch with one padding token allocates, more than the unpadded step."""
    fake, real = fake_and_real(attn_mask=True)
    unpadded, _ = fake_and_real(attn_mask=False)
    assert fake == real
    assert fake > unpadded


def test_dropout_keeps_a_one_byte_mask_like_cuda():
    x = torch.randn(64, 64, dtype=torch.bfloat16, requires_grad=True)
    y = hf.cuda_dropout(x, 0.1)
    saved = [t for t in y.grad_fn.saved_tensors]
    assert [t.dtype for t in saved] == [torch.bool]
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    fake, real = fake_and_real(lora_dropout=0.1, **{k: v for k, v in LORA.items()})
    assert fake == real


def test_tied_embeddings_are_retied_after_to_empty():
    from trace_plans import ARCHS

    cfg = step_config(plan(arch=ARCHS["qwen3"], attn_mask=False))
    step = hf.materialize(hf.build_meta(cfg), "cpu", real=True)
    inner = step.model
    assert inner.get_output_embeddings().weight is inner.get_input_embeddings().weight
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["peak_bytes"] == real["peak_bytes"]
    assert fake["params_total"] == sum(p.numel() for p in inner.parameters())


def test_flash_attention_stand_in_fake_equals_real():
    fake, real = fake_and_real(attn_impl="flash_attention_2", attn_mask=False)
    sdpa, _ = fake_and_real(attn_impl="sdpa", attn_mask=False)
    assert fake == real
    assert fake == sdpa          # both keep q, k, v, output and the fp32 logsumexp (native grouped K/V)


def test_lora_with_checkpointing_fake_equals_real():
    pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    fake, real = fake_and_real(grad_checkpointing=True, attn_mask=False, **LORA)
    assert fake == real


def test_dora_fake_equals_real():
    pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    fake, real = fake_and_real(attn_mask=False, **{**LORA, "peft": "dora"})
    lora, _ = fake_and_real(attn_mask=False, **LORA)
    assert fake == real
    assert fake != lora


def test_qlora_fake_equals_real():
    pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed (the trace extra)")
    from vramlens.trace import optim

    optim.warm_bitsandbytes()
    fake, real = fake_and_real(attn_mask=False, quant_bits=4, quant_type="nf4", quant_double=True,
                               **{**LORA, "peft": "lora"})
    assert fake == real


def test_trl_fused_loss_fake_equals_real():
    pytest.importorskip("trl", reason="trl not installed")
    fake, real = fake_and_real(loss_impl="chunked", framework="trl", attn_mask=False)
    assert fake == real


def test_versions_come_from_distribution_metadata():
    import importlib.metadata as md

    v = hf.versions()
    assert v["transformers"] == md.version("transformers")
    assert v["torch"] == md.version("torch")


def test_unsupported_family_falls_back_with_a_reason():
    from trace_plans import ARCHS

    cfg = step_config(plan(arch=ARCHS["t5"]))
    assert "t5" in hf.unsupported(cfg)


def test_trl_loss_without_trl_falls_back_with_the_reason(monkeypatch):
    real_versions = hf.versions()
    monkeypatch.setattr(hf, "versions", lambda: {**real_versions, "trl": None})
    cfg = step_config(plan(loss_impl="chunked", framework="trl"))
    assert "trl is not installed" in hf.unsupported(cfg)
    assert hf.unsupported(step_config(plan())) is None


def test_family_without_sdpa_runs_eager_and_says_so():
    """transformers 5's Gemma-2 has no SDPA path: the model is built with eager attention, as transformers
    chooses without an explicit implementation, and the assumptions say so."""
    from trace_plans import ARCHS

    cfg = step_config(plan(arch=ARCHS["gemma2"], attn_mask=False))
    if hf.supports_sdpa(cfg):
        pytest.skip("this transformers runs Gemma-2 with SDPA")
    assert "eager" in hf.description(cfg)[0]
    fake, real = fake_and_real(arch=ARCHS["gemma2"], attn_mask=False)
    assert fake == real
