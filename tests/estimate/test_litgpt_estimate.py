"""litgpt's fine-tuning step, as its source runs it: a separate LM head, a 4-bit LM head under QLoRA, and the
bitsandbytes release it supports (0.42.0), whose 4-bit matmul keeps its input for backward. Also the LoRA
dropout copies every framework makes, sized by each targeted linear's own input."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import CORPUS, need
from vramlens.analysis import Settings, analyze
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.knowledge import frameworks, gpus, models, optimizers
from vramlens.resolved import ResolvedPlan

LLAMA2_QLORA = CORPUS / "lightning" / "litgpt__finetune__llama-2-7b__qlora.yaml"


def analysis(text: str, path: Path, **settings):
    result = analyze(text, path, Settings(gpu="A10G", **settings))
    assert result.estimate is not None, result.error
    return result


def test_litgpt_qlora_keeps_4bit_inputs_with_the_bitsandbytes_it_supports():
    text = need(LLAMA2_QLORA).read_text()
    old = analysis(text, LLAMA2_QLORA)
    new = analysis(text, LLAMA2_QLORA, framework_versions={"bitsandbytes": "0.45.0"})
    rp_old, rp_new = old.resolution.resolved, new.resolution.resolved
    assert rp_old.quant_keeps_input and not rp_new.quant_keeps_input
    assert any("bitsandbytes 0.42.0" in a for a in old.resolution.assumptions)
    # q and v adapters with dropout keep only their dropped copies, so the 4-bit matmuls keep their inputs:
    # the attention input (h), the MLP input (h) and the down projection's input (I), in bf16
    arch = rp_old.arch
    tokens = rp_old.micro_batch * rp_old.seq_len
    assert (rp_old.micro_batch, rp_old.seq_len) == (2, 512)
    expected = tokens * arch.layers * 2 * (2 * arch.hidden + arch.intermediate)
    diff = old.estimate.components["activations"] - new.estimate.components["activations"]
    assert diff == pytest.approx(expected, abs=64)


def test_litgpt_quantizes_the_lm_head_and_dequantizes_it_at_the_peak():
    rp = analysis(need(LLAMA2_QLORA).read_text(), LLAMA2_QLORA).resolution.resolved
    assert rp.framework == "litgpt" and rp.quant_lm_head and rp.quant_bits == 4
    # Fabric hands the chunked logits back in fp32: they and their log-softmax are held, 8 bytes per logit;
    # attention runs causal without a mask
    assert rp.logits_fp32 and not rp.attn_mask
    assert estimate(rp, limits=False).components["logits"] == rp.micro_batch * rp.seq_len * rp.arch.vocab * 8
    head = rp.arch.vocab * rp.arch.hidden
    with_head, without = estimate(rp, limits=False), estimate(rp.with_changes(quant_lm_head=False), limits=False)
    # litgpt keeps the non-quantized head in bf16 (no fp32 upcast); quantized it is 0.5 B + fp32 absmax per 64
    assert without.components["weights"] - with_head.components["weights"] == pytest.approx(head * 1.5, rel=1e-6)
    assert with_head.components["quant_constants"] - without.components["quant_constants"] == pytest.approx(
        head * 4 / 64, rel=1e-6
    )
    # Lightning quantizes from an fp16 copy, so the head dequantizes to fp16 and is cast to bf16: two copies
    assert with_head.components["temporaries"] == head * (2 + 2) and without.components["temporaries"] == 0
    assert estimate(rp.with_changes(quant_dequant_fp16=False), limits=False).components["temporaries"] == head * 2


@pytest.mark.parametrize("model", ["google/gemma-2b", "meta-llama/Llama-3.2-1B"])
def test_litgpt_keeps_a_separate_lm_head_for_tied_checkpoints(model):
    text = need(LLAMA2_QLORA).read_text().replace("checkpoints/meta-llama/Llama-2-7b-hf", f"checkpoints/{model}")
    text = text.replace("quantize: bnb.nf4", "")
    result = analysis(text, LLAMA2_QLORA.with_name("lora.yaml"))
    catalog = models.lookup_model(model)
    assert catalog.tied_embeddings
    rp = result.resolution.resolved
    assert not rp.arch.tied_embeddings
    assert result.estimate.params_total - models.param_count(catalog) == catalog.vocab * catalog.hidden
    assert any("LM head apart" in a for a in result.resolution.assumptions)


def test_lora_dropout_copies_are_sized_by_each_targets_input():
    arch = models.lookup_model("meta-llama/Llama-3.2-1B")
    rp = ResolvedPlan(
        arch=arch,
        optimizer=optimizers.lookup_optimizer("adamw_torch_fused"),
        gpu=gpus.lookup_gpu("H100-80GB")[0],
        peft="lora",
        lora_r=16,
        lora_alpha=16.0,
        lora_targets=("q", "k", "v", "o", "gate", "up", "down"),
        adapter_fp32=False,
    )
    _, plain = C.activations_per_token(rp)
    _, dropped = C.activations_per_token(rp.with_changes(lora_dropout=0.1))
    h, q, inter = arch.hidden, arch.q_dim, arch.intermediate
    # with dropout each adapter keeps a bf16 dropped copy + a 1-byte mask of its own input (q, k, v, gate, up
    # read h, o reads q_dim, down reads I); the shared undropped inputs of the three groups are no longer kept
    added = 3 * (5 * h + q + inter)
    removed = 2 * (h + h + inter)
    assert dropped - plain == pytest.approx(added - removed)


@pytest.mark.parametrize(
    "version, keeps",
    [
        ("0.41.1", True),
        ("0.42.0", True),
        ("0.43.1", True),
        ("0.43.2", False),
        ("0.45", False),
        ("1.0.0", False),
        ("v0.42.0", True),
        ("", False),
        (None, False),
        ("main", False),
    ],
)
def test_bitsandbytes_versions_that_keep_4bit_inputs(version, keeps):
    assert frameworks.bnb_keeps_4bit_input(version) is keeps


# Saved activations of one block of litgpt's own LoRA model (litgpt 0.5.13, `litgpt.lora.GPT`, bf16, b=1, s=256),
# measured on CPU with torch.autograd.graph.saved_tensors_hooks as the difference between 2 and 1 layers
# (benchmarks/litgpt_vs_estimate.py). On CPU dropout keeps its mask in bf16, on CUDA as a bool: the CUDA figure
# is 1 byte less per dropped element.
LITGPT_MEASURED = [
    # catalog id, targets, dropout, bytes per token per layer on CPU, dropped elements per token (CPU − CUDA)
    ("meta-llama/Llama-2-7b-hf", ("q", "v"), 0.05, 181_384, 4096),
    ("meta-llama/Llama-2-7b-hf", ("q", "k", "v", "o", "gate", "up", "down"), 0.05, 258_248, 4096 * 4 + 11008),
    ("meta-llama/Llama-2-7b-hf", ("q", "v"), 0.0, 173_192, 0),
    ("meta-llama/Meta-Llama-3-8B", ("q", "v"), 0.05, 178_728, 4096),
]


@pytest.mark.parametrize("model, targets, dropout, cpu_bytes, dropped", LITGPT_MEASURED)
def test_fused_qkv_block_matches_litgpt_own_modules(model, targets, dropout, cpu_bytes, dropped):
    rp = ResolvedPlan(
        arch=models.lookup_model(model),
        framework="litgpt",
        fused_qkv=True,
        repeat_kv=True,
        optimizer=optimizers.lookup_optimizer("adamw_torch"),
        gpu=gpus.lookup_gpu("A100-80GB")[0],
        peft="lora",
        lora_r=32,
        lora_alpha=16.0,
        lora_dropout=dropout,
        lora_targets=targets,
        adapter_fp32=False,
        kbit_upcast=False,
        loss_impl="chunked",
    )
    _, one_layer = C.activations_per_token(rp)
    assert one_layer == pytest.approx(cpu_bytes - dropped, rel=0.01)
    if rp.arch.kv_dim == rp.arch.q_dim:
        # multi-head attention: without the fused q|k|v semantics (the Hugging Face layout) the block is off by
        # more than 1 % (the value view keeps the whole q|k|v output)
        _, hf_layout = C.activations_per_token(rp.with_changes(fused_qkv=False))
        assert hf_layout != pytest.approx(cpu_bytes - dropped, rel=0.01)
