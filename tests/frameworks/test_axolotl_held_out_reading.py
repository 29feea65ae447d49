"""axolotl examples at 067b021c read by axolotl's own meanings: `dp_shard_size` as the FSDP shard degree, `qat` as
quantization-aware training and `quantize_moe_experts` as quantized MoE experts (fixtures and their SOURCE in
tests/fixtures/axolotl/067b021c)."""

from __future__ import annotations

import os
from pathlib import Path

from vramlens.analysis import analyze
from vramlens.formats import parse_document
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "axolotl" / "067b021c"


def _analysis(name: str):
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = FIXTURES / name
    return analyze(path.read_text(), str(path), Settings(workspace=FIXTURES, model_lookup=False))


def _plan(name: str):
    path = FIXTURES / name
    return parse_document(path.read_text(), str(path), workspace=FIXTURES).plan


def _unmodelled(plan) -> dict:
    return {u.key: u for u in plan.unmodelled}


def test_dp_shard_size_is_the_fsdp_shard_degree():
    # dp_shard_size 2 × tensor parallel 2 × context parallel 2: eight GPUs, FSDP over the shard × context ranks
    a = _analysis("qwen3-8b-fsdp-tp-cp.yaml")
    plan = a.plan
    assert plan.world_size is not None and plan.world_size.value == 8
    assert plan.world_size.key == "dp_shard_size"
    assert plan.dist_strategy.value == "fsdp"
    assert "dp_shard_size" not in _unmodelled(plan)
    assert a.estimate is not None


def test_dp_replicate_size_is_named_as_hsdp():
    plan = _plan("llama-3_1-8b-hsdp-tp.yaml")
    assert plan.world_size.value == 4 * 2 * 2
    found = _unmodelled(plan)
    assert "dp_shard_size" not in found
    assert "HSDP" in found["dp_replicate_size"].what and "4 ranks" in found["dp_replicate_size"].what


def test_dp_shard_size_without_fsdp_is_an_error():
    text = "base_model: Qwen/Qwen3-8B\nmicro_batch_size: 1\nsequence_len: 2048\ndp_shard_size: 2\nnum_epochs: 1\n"
    plan = parse_document(text, "/nonexistent/cfg.yaml").plan
    assert any("without FSDP" in i.message for i in plan.issues)


def test_qat_is_named_as_quantization_aware_training_not_a_precision_detail():
    plan = _plan("3b-qat-fsdp2.yaml")
    found = _unmodelled(plan)
    assert "qat" in found
    assert "quantization-aware training" in found["qat"].what
    assert "weights int4" in found["qat"].what and "activations int8" in found["qat"].what
    # its entries are covered by the section, not listed as precision details of their own
    assert "activation_dtype" not in found and "weight_dtype" not in found
    assert not any("precision detail" in u.what for u in plan.unmodelled)


def test_quantize_moe_experts_is_not_called_fp8_training():
    plan = _plan("glm-45-air-qlora.yaml")
    entry = _unmodelled(plan)["quantize_moe_experts"]
    assert "FP8" not in entry.what
    assert "experts" in entry.what and "bitsandbytes" in entry.what
