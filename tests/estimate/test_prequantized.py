"""A checkpoint its publisher quantized (AWQ, GPTQ, bitsandbytes, FP8) holds its weights at that width."""

from __future__ import annotations

from pathlib import Path

from vramlens.estimate import estimate
from vramlens.formats import parse_document, parse_file
from vramlens.resolve import Settings, resolve

AWQ = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "v4.0.0" / "qlora_awq" / "train.sh"


def _run(plan):
    res = resolve(plan, Settings(gpu="A100-80GB"))
    return res, estimate(res.resolved)


def test_awq_checkpoint_weights_are_packed_4bit():
    plan = parse_file(AWQ).plan
    res, est = _run(plan)
    rp = res.resolved
    assert rp.quant_bits == 4 and rp.quant_type == "awq"
    assert any("4-bit AWQ weights: the checkpoint's name" in a for a in res.assumptions)

    text = AWQ.read_text().replace("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct")
    _, full = _run(parse_document(text, "train.sh").plan)
    # 4 bits plus group scales and zeros, against 16 bits
    assert est.components["weights"] < 0.55 * full.components["weights"]


def test_gptq_int8_and_fp8_names_are_8bit():
    for name, method in (("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "gptq"), ("Qwen/Qwen2.5-7B-Instruct-FP8", "fp8")):
        text = f"swift sft --model {name} --tuner_type lora --torch_dtype bfloat16\n"
        res, _ = _run(parse_document(text, "train.sh").plan)
        assert res.resolved.quant_bits == 8 and res.resolved.quant_type == method


def test_an_fp8_checkpoint_trained_in_full_is_not_turned_into_lora():
    text = "swift sft --model Qwen/Qwen2.5-7B-Instruct-FP8 --tuner_type full --torch_dtype bfloat16\n"
    res, est = _run(parse_document(text, "train.sh").plan)
    assert not res.resolved.quant_bits and res.resolved.peft == "none"
    assert est.params_trainable == est.params_total
    assert any("FP8 checkpoint" in a and "trained in full" in a for a in res.assumptions)
    assert not any("assumed LoRA" in str(a) for a in res.assumptions)
