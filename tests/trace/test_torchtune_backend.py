"""The torchtune backend (`vramlens.trace.torchtune_backend`): torchtune's own model, adapters and loss give the same
bytes under fake tensors as the same step on real CPU tensors at tiny shapes, and a torchtune config is traced on it
through the worker. torchtune comes with the trace extra; CI installs it (`trace_plans.need`)."""

from __future__ import annotations

import pytest
from trace_plans import ARCHS, LORA, TINY_LLAMA, need, plan
from vramlens.knowledge import frameworks

need("torch")
need("torchtune")

import torch  # noqa: E402
from vramlens.trace import engine  # noqa: E402
from vramlens.trace import torchtune_backend as tt  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

TUNE = dict(framework="torchtune", adapter_fp32=False, kbit_upcast=False, attn_mask=False)
TINY_QWEN2 = ARCHS["llama"].model_copy(
    update={"id": "tiny-qwen2", "family": "qwen2", "tied_embeddings": True, "attn_bias": True, "max_position": 512}
)
TINY_LLAMA_POS = TINY_LLAMA.model_copy(update={"max_position": 512})


def fake_and_real(**changes) -> tuple[dict, dict]:
    cfg = step_config(plan(**{**TUNE, "arch": TINY_LLAMA_POS, **changes}))
    assert tt.unsupported(cfg) is None, tt.unsupported(cfg)
    fake = engine.run(cfg, backend="torchtune")
    real = engine.run(cfg, backend="torchtune", real=True)
    assert fake["backend"] == real["backend"] == "torchtune"
    return fake, real


@pytest.mark.parametrize(
    "changes",
    [
        dict(),
        dict(loss_impl="chunked"),
        dict(grad_checkpointing=True, loss_impl="chunked"),
        dict(weight_dtype="fp32", compute_dtype="fp32", loss_impl="chunked"),
        dict(LORA, loss_impl="chunked"),
        dict(LORA, peft="dora", grad_checkpointing=True),
        dict(LORA, lora_dropout=0.1),
        dict(LORA, arch=TINY_QWEN2, rope_caches=2),
        dict(LORA, peft="qlora", quant_bits=4, loss_impl="chunked"),
        dict(LORA, peft="qlora", quant_bits=4, grad_checkpointing=True, lora_targets=("q", "v")),
    ],
    ids=[
        "full CE",
        "full chunked",
        "ckpt",
        "fp32",
        "LoRA",
        "DoRA ckpt",
        "LoRA dropout",
        "Qwen2 LoRA",
        "QLoRA",
        "QLoRA q,v ckpt",
    ],
)
def test_torchtune_step_fake_equals_real(changes):
    fake, real = fake_and_real(**changes)
    assert fake["peak_bytes"] == real["peak_bytes"] > 0
    assert fake["params_total"] == real["params_total"]


def test_an_nf4_weight_counts_its_packed_data_and_constants_not_its_wrapper():
    """torchao's NF4Tensor is a wrapper subclass: its nominal 16-bit storage is never allocated (on CUDA either); the
    tracker counts the tensors it holds (packed 4-bit data, int8 scalers and their factors) and the dequantization's
    temporaries (14 bytes per weight at the peak, 2 kept)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchao.dtypes.nf4tensor import to_nf4
    from vramlens.estimate.components import NF4_DEQUANT_PEAK_BYTES
    from vramlens.trace.tracker import LiveBytes

    n = 1024 * 512
    with FakeTensorMode(allow_non_fake_inputs=True):
        tr = LiveBytes()
        with tr:
            weight = torch.nn.Parameter(to_nf4(torch.empty(1024, 512, dtype=torch.bfloat16)), requires_grad=False)
            held = tr.cur
            base = tr.cur
            tr.reset_peak()
            dequantized = weight.to(torch.bfloat16)
            assert tr.cur - base == 2 * n
            assert round((tr.peak - base) / n) == NF4_DEQUANT_PEAK_BYTES
    assert n // 2 < held < n  # 4 bits per weight + the double-quantized scalers: not 2 bytes
    del dequantized


def test_rope_caches_are_built_on_real_tensors_and_copied():
    """Llama-3.1's scaled RoPE compares frequencies in Python (no answer from a fake tensor): the cache is computed on
    real tensors and copied into a fake buffer of its shape and dtype, one per RoPE module."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from vramlens.trace.tracker import LiveBytes

    cfg = step_config(plan(**TUNE, arch=TINY_LLAMA_POS))
    model = tt.build_meta(cfg)
    with FakeTensorMode(allow_non_fake_inputs=True), LiveBytes():  # as engine.run materializes it
        step = tt.materialize(model, "cpu", real=False)
    caches = [b for n, b in step.named_buffers() if n.endswith("cache")]
    assert len(caches) == 1 and isinstance(caches[0], FakeTensor) and caches[0].dtype == torch.float32
    head_dim = TINY_LLAMA.hidden // TINY_LLAMA.heads
    assert tuple(caches[0].shape) == (512, head_dim // 2, 2)


def test_lora_builders_give_every_layer_its_own_rope_but_llama_3_1():
    """What `knowledge.frameworks.torchtune_rope_caches` says, checked against torchtune's builders."""
    for family, package in (("qwen2", None), ("mistral", None), ("llama", "llama3"), ("llama", "llama3_1")):
        arch = (TINY_QWEN2 if family == "qwen2" else TINY_LLAMA_POS).model_copy(update={"family": family})
        n = frameworks.torchtune_rope_caches(package, family, "lora", arch.layers)
        cfg = step_config(plan(**TUNE, **LORA, arch=arch, rope_caches=n))
        model = tt.build_model(cfg)
        ropes = {id(m) for m in model.modules() if hasattr(m, "rope_init")}
        assert len(ropes) == n, (family, package)


def test_a_torchtune_config_is_traced_on_torchtune(tmp_path):
    """The worker picks the torchtune backend for a torchtune plan and reports its version."""
    import threading

    from vramlens.trace import worker

    cfg = step_config(plan(**TUNE, **LORA, arch=TINY_LLAMA_POS, loss_impl="chunked"))
    raw = worker.run_backends(cfg, {"backend": "auto"}, lambda *a: None, threading.Event())
    assert raw["backend"] == "torchtune" and "fallback_reason" not in raw
    assert raw["versions"]["torchtune"] == tt.version()
    assert any("traced on torchtune" in a for a in raw["assumptions"])
    # QLoRA: torchao's NF4 base weights, as torchtune's QLoRA builders hold them
    cfg = step_config(plan(**TUNE, **{**LORA, "peft": "qlora"}, arch=TINY_LLAMA_POS, loss_impl="chunked", quant_bits=4))
    raw = worker.run_backends(cfg, {"backend": "auto"}, lambda *a: None, threading.Event())
    assert raw["backend"] == "torchtune" and raw["components"]["quant_constants"] > 0
    # torchtune has no IA3: the synthetic model, with the reason
    cfg = step_config(
        plan(
            **TUNE,
            peft="ia3",
            lora_targets=("k", "v", "down"),
            feedforward_targets=("down",),
            arch=TINY_LLAMA_POS,
            loss_impl="chunked",
        )
    )
    raw = worker.run_backends(cfg, {"backend": "auto"}, lambda *a: None, threading.Event())
    assert raw["backend"] == "synthetic" and "no `ia3` adapter" in raw["fallback_reason"]
    with pytest.raises(RuntimeError, match="torchtune backend cannot trace"):
        worker.run_backends(cfg, {"backend": "torchtune"}, lambda *a: None, threading.Event())


@pytest.mark.parametrize(
    "model, changes",
    [
        ("meta-llama/Llama-3.2-1B", dict(loss_impl="chunked")),
        ("meta-llama/Llama-3.2-1B", dict(loss_impl="chunked", weight_dtype="fp32", compute_dtype="fp32")),
        ("Qwen/Qwen2.5-0.5B", dict(LORA, loss_impl="chunked", grad_checkpointing=True)),
        ("Qwen/Qwen2.5-0.5B", dict()),
        (
            "Qwen/Qwen2.5-0.5B",
            dict(LORA, peft="qlora", quant_bits=4, quant_double=True, loss_impl="chunked", grad_checkpointing=True),
        ),
    ],
    ids=["full chunked", "fp32 chunked", "Qwen2.5 LoRA ckpt", "Qwen2.5 full CE", "Qwen2.5 QLoRA ckpt"],
)
def test_the_estimate_agrees_with_torchtunes_own_step(model, changes):
    """The formula against torchtune's step at 2 × 512 tokens: within 3 % (benchmarks/trace_vs_estimate.py
    --grid torchtune runs the larger sweep). Covers the chunked loss's peak (forward, or the head's backward in
    fp32), torchtune's fp32 norm weights, the per-layer RoPE caches of Qwen2's LoRA builder and torchao's NF4
    dequantization in a checkpointed QLoRA block."""
    from vramlens.estimate import estimate
    from vramlens.knowledge import models

    arch = models.lookup_model(model)
    rope = frameworks.torchtune_rope_caches(None, arch.family, changes.get("peft", "none"), arch.layers)
    rp = plan(**TUNE, arch=arch, seq_len=512, micro_batch=2, rope_caches=rope, **changes)
    traced = engine.run(step_config(rp), backend="torchtune")["peak_bytes"]
    assert abs(estimate(rp, limits=False).allocated_bytes / traced - 1) <= 0.03
