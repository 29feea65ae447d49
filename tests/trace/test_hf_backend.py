"""The real-library trace backend (`vramlens.trace.hf`): each shim, and the whole step, give the same bytes under
fake tensors as the same step on real CPU tensors at tiny shapes. Skips with a reason where transformers/peft/
bitsandbytes/trl are not installed (CI installs the trace extra)."""

from __future__ import annotations

import pytest
from tiny_configs import TINY_GEMMA3_VLM
from trace_plans import LORA, plan
from vramlens.knowledge.schema import ModelArch

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
    assert original(ids) is None  # the real answer for the batch traced
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake_ids = torch.arange(16)[None].expand(2, 16)
        assert hf.real_packed_sequence_indices(fake_ids) is None
        assert masking_utils.find_packed_sequence_indices.__module__ == hf.__name__  # the shim answers
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
    assert fake == sdpa  # both keep q, k, v, output and the fp32 logsumexp (native grouped K/V)


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
    fake, real = fake_and_real(
        attn_mask=False, quant_bits=4, quant_type="nf4", quant_double=True, **{**LORA, "peft": "lora"}
    )
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

    other = ARCHS["llama"].model_copy(update=dict(id="tiny-deepseek", family="deepseek_v3"))
    assert "deepseek_v3" in hf.unsupported(step_config(plan(arch=other)))
    assert hf.unsupported(step_config(plan(arch=ARCHS["t5"]))) is None  # T5ForConditionalGeneration is built
    assert hf.unsupported(step_config(plan(arch=ARCHS["bert"], scalar_head=True))) is None  # *ForSequenceClassification


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


def test_flash_stand_in_with_a_padded_batch_fake_equals_real():
    """A padded batch under flash attention: transformers' mask function reads `attention_mask.all()`, which a fake
    tensor cannot answer; the stand-in's mask function answers as the real padded batch does."""
    fake, real = fake_and_real(attn_impl="flash_attention_2", attn_mask=True)
    assert fake == real


# Realistic shapes (fake tensors only): the estimator against the real libraries where the two used to part.
MISTRAL = dict(
    id="mistral-7b-shape",
    family="mistral",
    hidden=4096,
    layers=32,
    heads=32,
    kv_heads=8,
    intermediate=14336,
    vocab=32000,
)


def estimate_and_real(**changes):
    from vramlens.estimate import estimate
    from vramlens.knowledge.schema import ModelArch

    rp = plan(**{"arch": ModelArch(**MISTRAL), "attn_mask": False, "repeat_kv": False, **changes})
    real = engine.run(step_config(rp), backend="transformers")
    return estimate(rp, limits=False), real["peak_bytes"]


def test_checkpointed_qlora_last_block_backward():
    """QLoRA with checkpointing: the backward of the last block holds every block's fp32 checkpointed input and
    the block recomputed with its fp32 MLP activations and their gradients (not the LM head's 16-bit weight copy,
    freed by the head's backward, nor the other blocks' adapter gradients, not made yet); at these shapes the start
    of backward through the loss is a little higher, and both agree with the trace."""
    pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed (the trace extra)")
    from vramlens.estimate import estimate
    from vramlens.knowledge.schema import ModelArch
    from vramlens.trace import optim

    optim.warm_bitsandbytes()
    rp = plan(
        arch=ModelArch(**MISTRAL),
        attn_mask=False,
        repeat_kv=False,
        peft="qlora",
        quant_bits=4,
        quant_double=True,
        lora_r=16,
        lora_alpha=32.0,
        lora_dropout=0.05,
        lora_targets=("q", "k", "v", "o"),
        grad_checkpointing=True,
        micro_batch=4,
        seq_len=1024,
    )
    est = estimate(rp, limits=False)
    raw = engine.run(step_config(rp), backend="transformers")
    opt = raw["persistent"].get("optimizer", 0)  # one traced step: the state it creates
    block = next(t["peak_bytes"] for t in raw["timeline"] if t["phase"] == "bwd") + opt
    assert abs(est.phases["recompute"] / block - 1) < 0.03, (est.phases["recompute"] / 2**30, block / 2**30)
    assert (est.phase == "recompute") == (raw["peak_at"] == "backward")
    assert abs(est.allocated_bytes / raw["peak_bytes"] - 1) < 0.03


def test_dora_keeps_base_and_lora_outputs():
    pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    est, real = estimate_and_real(**{**LORA, "peft": "dora", "lora_r": 16}, micro_batch=1, seq_len=1024)
    assert abs(est.allocated_bytes / real - 1) < 0.03, (est.allocated_bytes / 2**30, real / 2**30)


def test_sdpa_attention_dropout_keeps_what_cuda_keeps():
    """GPT-2 trains with attention dropout 0.1: CPU SDPA would take the math kernel and keep the probabilities; the
    shim keeps what CUDA's flash/efficient kernels keep, the same under fake and real tensors."""
    from trace_plans import ARCHS
    from transformers.integrations import sdpa_attention

    cfg = step_config(plan(arch=ARCHS["gpt2"], attn_mask=False, seq_len=256))
    assert hf.unsupported(cfg) is None
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["peak_bytes"] == real["peak_bytes"]
    from transformers import AttentionInterface

    shim = AttentionInterface._global_mapping["sdpa"]
    AttentionInterface._global_mapping["sdpa"] = sdpa_attention.sdpa_attention_forward  # CPU's math kernel
    try:
        hf_install = hf.install_sdpa_dropout_as_cuda
        hf.install_sdpa_dropout_as_cuda = lambda: None
        math = engine.run(cfg, backend="transformers")
    finally:
        hf.install_sdpa_dropout_as_cuda = hf_install
        AttentionInterface._global_mapping["sdpa"] = shim
    assert math["peak_bytes"] > fake["peak_bytes"]  # the probabilities and masks the shim leaves out


@pytest.mark.parametrize("peft", [{}, LORA], ids=["full", "lora"])
def test_gpt_bigcode_multi_query_fake_equals_real(peft):
    """StarCoder's family: one K/V head sliced out of the fused c_attn, attention and residual dropout 0.1."""
    if peft:
        pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    from trace_plans import ARCHS

    cfg = step_config(
        plan(
            arch=ARCHS["gpt_bigcode"],
            attn_mask=False,
            seq_len=128,
            **{**peft, "lora_targets": ("q", "k", "v", "o", "fc1", "fc2")} if peft else {},
        )
    )
    assert hf.unsupported(cfg) is None
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["backend"] == "transformers"
    assert fake["peak_bytes"] == real["peak_bytes"] > 0
    assert fake["params_total"] == real["params_total"]


@pytest.mark.parametrize("peft", [{}, LORA], ids=["full", "lora"])
def test_gpt_bigcode_estimate_follows_the_real_step(peft):
    """StarCoder-1B-shaped step on the real modelling code: one K/V head (not 16), GPT-BigCode's two residual
    dropout masks per block, and under LoRA one adapter on the fused c_attn."""
    if peft:
        pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    from vramlens.estimate import estimate
    from vramlens.knowledge.models import lookup_model

    rp = plan(
        arch=lookup_model("bigcode/starcoderbase-1b"),
        attn_mask=False,
        repeat_kv=False,
        micro_batch=1,
        seq_len=1024,
        **peft,
    )
    real = engine.run(step_config(rp), backend="transformers")
    est = estimate(rp, limits=False)
    assert abs(est.allocated_bytes / real["peak_bytes"] - 1) < 0.03, (
        est.allocated_bytes / 2**30,
        real["peak_bytes"] / 2**30,
    )


DEBERTA = ModelArch(
    id="tiny-deberta-v3",
    family="deberta-v2",
    block="encoder",
    mlp="gelu",
    norm="layernorm",
    hidden=64,
    layers=2,
    heads=4,
    intermediate=128,
    vocab=500,
    tied_embeddings=True,
    attn_bias=True,
    mlp_bias=True,
    max_position=512,
)
ROBERTA = ModelArch(
    id="tiny-roberta",
    family="roberta",
    block="encoder",
    mlp="gelu",
    norm="layernorm",
    hidden=64,
    layers=2,
    heads=4,
    intermediate=128,
    vocab=500,
    tied_embeddings=True,
    attn_bias=True,
    mlp_bias=True,
    max_position=130,
)
ENCODER_LORA = dict(LORA, lora_targets=("q", "k", "v", "o", "fc1", "fc2"))


@pytest.mark.parametrize("arch", ["bert", "roberta", "deberta"])
@pytest.mark.parametrize(
    "changes",
    [{}, dict(amp=True, weight_dtype="fp32"), dict(ENCODER_LORA, grad_checkpointing=True)],
    ids=["full", "amp", "lora-ckpt"],
)
def test_encoder_classification_fake_equals_real(arch, changes):
    """BERT, RoBERTa and DeBERTa-v3 as `*ForSequenceClassification` with integer labels: the fake step allocates
    what the real CPU step allocates, in full, under autocast and with LoRA adapters on every block linear."""
    from trace_plans import ARCHS

    a = {"bert": ARCHS["bert"], "roberta": ROBERTA, "deberta": DEBERTA}[arch]
    fake, real = fake_and_real(arch=a, attn_mask=False, scalar_head=True, **changes)
    assert fake == real > 0


def test_encoder_lora_targets_each_block_linear_once():
    """BERT's attention output and MLP output are both `output.dense`: the targets are module paths, so o and fc2
    are adapted once each and nothing outside the blocks is."""
    from trace_plans import ARCHS

    cfg = step_config(plan(arch=ARCHS["bert"], scalar_head=True, **ENCODER_LORA))
    step = hf.build_meta(cfg)
    adapted = sorted(
        n.split(".lora_A")[0].split("layer.0.")[-1]
        for n, _ in step.model.named_parameters()
        if ".lora_A." in n and "layer.0." in n
    )
    assert adapted == [
        "attention.output.dense",
        "attention.self.key",
        "attention.self.query",
        "attention.self.value",
        "intermediate.dense",
        "output.dense",
    ]
    assert any("classifier" in n and p.requires_grad for n, p in step.model.named_parameters())  # SEQ_CLS


def test_deberta_runs_its_own_attention():
    """DeBERTa-v2 has no SDPA path in transformers: its disentangled attention is built and described as eager."""
    cfg = step_config(plan(arch=DEBERTA, scalar_head=True))
    assert not hf.supports_sdpa(cfg)
    assert "eager" in hf.description(cfg)[0]


def test_autocast_softmax_runs_in_fp32_as_on_cuda():
    """CUDA's autocast gives a 16-bit softmax input dtype=float32 (its fp32 list); CPU's would keep bf16. With the
    policy registered, the softmax under CPU autocast returns and keeps fp32, equal to the fp32 softmax of the
    16-bit scores; an explicit dtype and code outside autocast are untouched."""
    hf.install_autocast_softmax_as_cuda()
    x = torch.randn(4, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = x @ x.t()
        p = torch.nn.functional.softmax(scores, dim=-1)
        kept = torch.softmax(scores, -1, dtype=torch.bfloat16)
    assert scores.dtype == torch.bfloat16 and p.dtype == torch.float32 and kept.dtype == torch.bfloat16
    assert torch.equal(p, torch.softmax(scores.float(), -1))
    assert p.grad_fn._saved_result.dtype == torch.float32  # what the softmax keeps for backward
    p.sum().backward()
    assert x.grad is not None
    assert torch.softmax(scores.detach(), -1).dtype == torch.bfloat16


def test_dropout_allocates_only_its_output_and_mask():
    """CUDA's native_dropout writes the output and a bool mask in one kernel: the stand-in allocates those two
    and no output-sized temporary."""
    from vramlens.trace.tracker import LiveBytes, alloc_size

    x = torch.randn(256, 256, dtype=torch.bfloat16, requires_grad=True)
    with LiveBytes() as tr:
        tr.reset_peak()
        y = hf.cuda_dropout(x, 0.1)
    assert tr.peak == alloc_size(x.numel() * 2) + alloc_size(x.numel())
    assert y.dtype == x.dtype


@pytest.mark.parametrize("changes", [{}, dict(amp=True, weight_dtype="fp32")], ids=["bf16", "amp"])
def test_t5_fake_equals_real(changes):
    """T5 (tiny, gated-gelu, untied head): the relative position bias as SDPA's additive mask with a gradient
    (`BiasGradAsCuda`), gelu_new's fp32 pow and the fp32 log-softmax under autocast (`NewGeluAsCuda`,
    `CudaAutocastPolicy`): the same bytes under fake and real tensors."""
    from trace_plans import ARCHS

    cfg = step_config(plan(arch=ARCHS["t5"], attn_mask=False, seq_len=64, **changes))
    assert hf.unsupported(cfg) is None, hf.unsupported(cfg)
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["peak_bytes"] == real["peak_bytes"] > 0
    assert fake["params_total"] == real["params_total"]


def test_t5_position_bias_sdpa_keeps_what_cuda_keeps():
    """With a bias that requires grad, CPU SDPA takes the math kernel (attention probabilities kept per layer); the
    shim keeps what CUDA's memory-efficient kernel keeps, much less."""
    import torch.nn.functional as F

    q = torch.randn(2, 4, 64, 32, requires_grad=True)
    bias = torch.randn(1, 4, 64, 64, requires_grad=True)
    with hf.BiasGradAsCuda():
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=bias)
    assert out.grad_fn.name().startswith("EfficientAttentionWithBiasBackward")
    out.sum().backward()
    assert bias.grad.shape == bias.shape and q.grad.shape == q.shape


@pytest.mark.parametrize(
    ("images", "changes"),
    [
        (1, {}),
        (1, dict(LORA, lora_targets=("all-linear",))),
        (0, dict(grad_checkpointing=True)),
    ],
    ids=["full-image", "lora-all-linear-image", "full-ckpt-text"],
)
def test_gemma3_vision_language_model_fake_equals_real(images, changes):
    """The whole VLM with image batches (pixel_values, image soft tokens in input_ids, token_type_ids as
    Gemma3Processor gives them) and text-only ones: the image-count check switched off for fake tensors
    (`image_checks_off`) changes nothing the real step allocates."""
    from vramlens.knowledge import models

    if changes.get("peft"):
        pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    arch = models.arch_from_hf_config(TINY_GEMMA3_VLM, "tiny-gemma3")
    assert arch.vision_params and arch.image_tokens == 4
    fake, real = fake_and_real(
        arch=arch,
        seq_len=32,
        attn_mask=False,
        images_per_sequence=images,
        vision_frozen=bool(changes.get("peft")),
        **changes,
    )
    assert fake == real
    if images:
        text, _ = fake_and_real(
            arch=arch,
            seq_len=32,
            attn_mask=False,
            images_per_sequence=0,
            vision_frozen=bool(changes.get("peft")),
            **changes,
        )
        assert fake > text


def test_gemma3_vision_language_model_is_built_whole():
    from vramlens.knowledge import models

    arch = models.arch_from_hf_config(TINY_GEMMA3_VLM, "tiny-gemma3")
    step = hf.build_meta(step_config(plan(arch=arch, seq_len=32, images_per_sequence=1)))
    assert type(step.model).__name__ == "Gemma3ForConditionalGeneration"
    # q/k norms: in the count when it comes from transformers' own build (arch.params_total), added here otherwise
    qk = 0 if arch.params_total else 2 * 2 * 16
    assert hf.param_count(step) == models.param_count(arch) + arch.vision_params + qk


def _catalog_configs():
    """The catalog's vision-language entries: those whose held config.json has a vision tower (the language-only ones
    are held to their class by tests/knowledge/test_catalog_published.py)."""
    from vramlens.knowledge.data import load

    return [e for e in load("models.yaml")["models"] if "vision_config" in e.get("config", {})]


@pytest.mark.parametrize("entry", _catalog_configs(), ids=lambda e: e["id"])
def test_catalog_vision_language_totals_equal_the_model_class(entry):
    """Each catalog VLM (config.json held in models.yaml) has the parameters transformers' class built from that
    config has: the language model's count (`param_count`; the family formula leaves out per-head q/k norm weights,
    transformers' own build counts them) plus the
    vision tower and projector."""
    from transformers import AutoConfig, AutoModelForImageTextToText
    from vramlens.estimate.shapes import QK_NORM_FAMILIES
    from vramlens.knowledge import models

    config = dict(entry["config"])
    model_type = config.pop("model_type")
    config.pop("architectures", None)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(AutoConfig.for_model(model_type, **config))
    built = sum(p.numel() for p in model.parameters())
    arch = models.lookup_model(entry["id"])
    qk = arch.layers * 2 * arch.d_head if arch.family in QK_NORM_FAMILIES and not arch.params_total else 0
    assert models.param_count(arch) + arch.vision_params + qk == built


def test_modules_to_save_on_tied_embeddings_copies_both_and_matches_the_estimate():
    """peft deep-copies the tied head and the embeddings (two trained copies in the weights' dtype, the originals
    kept tied): the real library runs the step (fake == real), and the estimate of the allocated peak follows it."""
    from trace_plans import ARCHS
    from vramlens.estimate import estimate

    rp = plan(arch=ARCHS["qwen3"], attn_mask=False, modules_to_save=("embed", "lm_head"), **LORA)
    cfg = step_config(rp)
    step = hf.materialize(hf.build_meta(cfg), "cpu", real=True)
    base = step.model.get_base_model()
    copies = [m for m in step.modules() if type(m).__name__ == "ModulesToSaveWrapper"]
    assert len(copies) == 2
    assert base.lm_head.original_module.weight is base.model.embed_tokens.original_module.weight
    trained = {n: p.dtype for n, p in step.model.named_parameters() if p.requires_grad and "modules_to_save" in n}
    assert len(trained) == 2 and set(trained.values()) == {torch.bfloat16}
    fake = engine.run(cfg, backend="transformers")
    real = engine.run(cfg, backend="transformers", real=True)
    assert fake["backend"] == "transformers" and fake["peak_bytes"] == real["peak_bytes"]
    assert estimate(rp, limits=False).allocated_bytes / fake["peak_bytes"] == pytest.approx(1.0, abs=0.03)
