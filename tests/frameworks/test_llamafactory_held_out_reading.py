"""LLaMA-Factory examples at v0.9.5 (fixtures and their SOURCE in tests/fixtures/llamafactory/v0.9.5)."""

from __future__ import annotations

import os
from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory" / "v0.9.5"


def _analysis(name: str):
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = FIXTURES / name
    return analyze(path.read_text(), str(path), Settings(workspace=FIXTURES, model_lookup=False))


def test_v1_config_with_shared_keys_is_read_with_the_v1_dialect():
    # `template`, `cutoff_len` and `flash_attn` are keys of both layouts; `model`, `model_class`, `dist_config`,
    # `train_dataset` are v1's
    a = _analysis("v1_train_full_fsdp2_padding_free.yaml")
    assert a.plan.format == "llamafactory-v1"
    assert a.plan.model_id.value == "Qwen/Qwen3-0.6B"
    assert a.plan.micro_batch.value == 4
    assert a.plan.dist_strategy.value == "fsdp"
    assert a.estimate is not None
    assert not any(f.rule_id == "VL015" for f in a.findings)


def test_badam_verbose_is_a_logging_level_not_an_unmodelled_setting():
    a = _analysis("badam_llama3_full_sft.yaml")
    assert a.estimate is not None
    assert "badam_verbose" not in {u.key for u in a.plan.unmodelled}


def test_ktransformers_training_is_named_as_not_modelled():
    # `use_kt: true` (LLaMA-Factory 0.9.4+ KTransformersArguments): the MoE experts run on the CPU through
    # KTransformers' kernels; the estimate keeps them on the GPU and must say so
    a = _analysis("ktransformers_qwen3moe_lora_sft_kt.yaml")
    gaps = {u.key: u for u in a.plan.unmodelled}
    assert "use_kt" in gaps and "KTransformers" in gaps["use_kt"].what
    assert gaps["use_kt"].consequence == "estimated with every expert on the GPU"
