"""Absurd values where numbers go — 10^9 and 10^30 batches, sequence length 0, negatives, NaN/inf, words,
a 6,000-digit number — and 1T-parameter or impossible local models: a clear message on the value, no
overflow, no exception, and the max-batch / max-sequence searches and the fix search stay bounded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fuzzing import hang_guard
from vramlens.analysis import Settings, analyze

BASE = "model_name_or_path: meta-llama/Meta-Llama-3-8B\nbf16: true\n"


def run(text: str, ws: Path, name: str = "train.yaml"):
    with hang_guard(name):
        analysis = analyze(text, str(ws / name), Settings(gpu="A100-80GB", workspace=ws))
        for finding in analysis.findings:
            for fix in finding.fixes:  # each fix re-estimates; the "make it fit" search too
                assert fix.title
    assert analysis.error is None or "internal error" not in analysis.error, analysis.error
    assert not [f for f in analysis.findings if "internal error" in f.message]
    est = analysis.estimate
    if est is not None:
        for n in (est.device_bytes, est.allocated_bytes, est.reserved_bytes, *est.components.values()):
            assert isinstance(n, int) or math.isfinite(n), est
        assert est.max_micro_batch is None or 1 <= est.max_micro_batch <= 4096
        assert est.max_seq_len is None or 128 <= est.max_seq_len <= 1 << 20
    return analysis


def messages(analysis, rule: str | None = None) -> list[str]:
    return [f.message for f in analysis.findings if rule is None or f.rule_id == rule]


@pytest.mark.parametrize(
    "line,expect",
    [
        ("per_device_train_batch_size: 1000000000", "VL001"),  # kept: it is a count, and it does not fit
        ("per_device_train_batch_size: 1000000000000000000000000000000", "more than vramlens can estimate"),
        ("per_device_train_batch_size: 0x" + "f" * 5000, "number of about 10^"),
        ("per_device_train_batch_size: -4", "must be at least 1, got -4"),
        ("per_device_train_batch_size: 0", "must be at least 1, got 0"),
        ("per_device_train_batch_size: .nan", "should be a whole number, got nan"),
        ("per_device_train_batch_size: .inf", "should be a whole number, got inf"),
        ("per_device_train_batch_size: eight", "should be a whole number, got 'eight'"),
        ("per_device_train_batch_size: 2.5", "should be a whole number, got 2.5"),
        ("per_device_train_batch_size: [1, 2]", "should be a whole number"),
        ("max_seq_length: 0", "must be at least 1, got 0"),
        ("max_seq_length: 10000000000000", "more than vramlens can estimate"),
        ("max_seq_length: -.inf", "should be a whole number"),
        ("gradient_accumulation_steps: 99999999999999999999", "more than vramlens can estimate"),
        ("learning_rate: .nan\nper_device_train_batch_size: 1", None),
        ("use_peft: true\nlora_r: 1000000000000", "more than vramlens can estimate"),
        ("use_peft: true\nlora_r: -1\nlora_alpha: .nan", "must be at least 1, got -1"),
        ("bf16: maybe", "should be true or false"),
        ("optim: 12345", "unknown"),
    ],
)
def test_absurd_values_get_a_clear_message(tmp_path, line, expect):
    analysis = run(BASE + line + "\n", tmp_path)
    if expect == "VL001":
        vl001 = messages(analysis, "VL001")
        assert vl001 and "GiB" in vl001[0] and analysis.estimate.max_micro_batch is not None  # a batch that fits
    elif expect is not None:
        assert any(expect in m for m in messages(analysis)), messages(analysis)


def _config(ws: Path, name: str, config: dict) -> str:
    (ws / name).mkdir()
    (ws / name / "config.json").write_text(json.dumps(config))
    return name


# A trillion-parameter MoE (Kimi-K2-like shapes, config.json of moonshotai/Kimi-K2-Instruct: 61 layers,
# hidden 7168, 384 experts of 2048, 8 per token, 1 shared expert, 1 dense layer, vocab 163840).
TRILLION = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "num_hidden_layers": 61,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "vocab_size": 163840,
    "n_routed_experts": 384,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 512,
    "v_head_dim": 128,
    "torch_dtype": "bfloat16",
}


def test_a_trillion_parameter_model_is_estimated_and_does_not_fit(tmp_path):
    name = _config(tmp_path, "kimi", TRILLION)
    analysis = run(f"model_name_or_path: {name}\nper_device_train_batch_size: 1\nbf16: true\n", tmp_path)
    est = analysis.estimate
    assert est is not None and est.params_total > 0.9e12 and not est.fits
    assert est.max_micro_batch is None and est.max_seq_len is None
    assert messages(analysis, "VL001")


def test_the_largest_shapes_accepted_still_give_finite_numbers(tmp_path):
    huge = {
        "model_type": "llama",
        "hidden_size": 2**31 - 1,
        "intermediate_size": 2**31 - 1,
        "num_hidden_layers": 2**31 - 1,
        "num_attention_heads": 1,
        "vocab_size": 2**31 - 1,
    }
    name = _config(tmp_path, "huge", huge)
    analysis = run(
        f"model_name_or_path: {name}\nper_device_train_batch_size: 1000000000\nmax_seq_length: 2147483647\n", tmp_path
    )
    assert analysis.estimate is not None and not analysis.estimate.fits
    assert messages(analysis, "VL001")


@pytest.mark.parametrize(
    "config",
    [
        {
            "model_type": "llama",
            "hidden_size": 10**12,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "vocab_size": 32000,
        },
        {
            "model_type": "llama",
            "hidden_size": 10**400,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "vocab_size": 32000,
        },
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": "big",
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "vocab_size": 32000,
        },
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_hidden_layers": -32,
            "num_attention_heads": 32,
            "vocab_size": 32000,
        },
        {
            "model_type": "llama",
            "hidden_size": 4096.5,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "vocab_size": 32000,
        },
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "vocab_size": 32000,
            "num_key_value_heads": 10**15,
        },
    ],
)
def test_impossible_local_models_are_explained(tmp_path, config):
    name = _config(tmp_path, "weird", config)
    analysis = run(f"model_name_or_path: {name}\nper_device_train_batch_size: 1\n", tmp_path)
    assert analysis.estimate is None
    vl017 = messages(analysis, "VL017")
    assert vl017 and "is not a model config vramlens can use" in vl017[0], vl017


def test_nan_and_infinity_in_a_local_config(tmp_path):
    (tmp_path / "nan").mkdir()
    (tmp_path / "nan" / "config.json").write_text(
        '{"model_type": "llama", "hidden_size": NaN, "num_hidden_layers": '
        'Infinity, "num_attention_heads": 32, "vocab_size": 32000}'
    )
    analysis = run("model_name_or_path: nan\nper_device_train_batch_size: 1\n", tmp_path)
    assert analysis.estimate is None and "is not a model config" in messages(analysis, "VL017")[0]


@pytest.mark.parametrize("gpu", ["1000000xH100", "0xH100", "H100 count=99999999999", "-8xA100"])
def test_absurd_gpu_counts(tmp_path, gpu):
    run(f"# vramlens: gpu={gpu}\n" + BASE + "per_device_train_batch_size: 4\n", tmp_path)
