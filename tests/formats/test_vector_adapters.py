"""IA3 and VeRA in the spellings that exist: peft's IA3Config/VeraConfig in a script, ms-swift's `train_type`/`sft_type`
`ia3`/`vera` with `vera_rank`, `vera_dropout` and `ia3_feedforward_modules` (swift/llm/argument/tuner_args.py). The
adapters train vectors, so the trainable count is what peft creates (peft 0.21.2 tuners/ia3, tuners/vera)."""

from __future__ import annotations

from test_python_calls import at
from vramlens.estimate import estimate
from vramlens.formats import parse_document
from vramlens.resolve import Settings, resolve

SCRIPT = """\
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from peft import {cls}, get_peft_model

model = AutoModelForCausalLM.from_pretrained("{model}", torch_dtype=torch.bfloat16)
model = get_peft_model(model, {call})
args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, bf16=True)
Trainer(model=model, args=args).train()
"""


def script(cls: str, call: str, model: str = "meta-llama/Llama-3.2-1B"):
    text = SCRIPT.format(cls=cls, call=call, model=model)
    plan = parse_document(text, "train.py").plan
    return text, plan, resolve(plan, Settings(gpu="H100-80GB")).resolved


def test_ia3_config_in_a_script():
    text, plan, rp = script(
        "IA3Config",
        'IA3Config(task_type="CAUSAL_LM", target_modules=["k_proj", "v_proj", '
        '"down_proj"], feedforward_modules=["down_proj"])',
    )
    assert plan.peft_method.value == "ia3" and at(text, plan.peft_method.span) == "IA3Config"
    assert at(text, plan.feedforward_targets.span) == 'feedforward_modules=["down_proj"]'
    assert rp.peft == "ia3" and rp.lora_targets == ("k", "v", "down") and rp.feedforward_targets == ("down",)
    # Llama-3.2-1B, 16 layers: k and v scale their 512-wide outputs, down its 8192-wide input
    assert estimate(rp, limits=False).params_trainable == 16 * (512 + 512 + 8192)


def test_ia3_without_targets_takes_peft_defaults_for_the_family():
    """peft's TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING: q, v and down for Qwen2 (k, v and down for
    Llama), down as the feedforward module — not the framework's LoRA default of q and v."""
    _, _, rp = script("IA3Config", 'IA3Config(task_type="CAUSAL_LM")', model="Qwen/Qwen2.5-0.5B")
    assert rp.lora_targets == ("q", "v", "down") and rp.feedforward_targets == ("down",)
    _, _, rp = script("IA3Config", 'IA3Config(task_type="CAUSAL_LM")')
    assert rp.lora_targets == ("k", "v", "down")


def test_vera_config_in_a_script():
    text, plan, rp = script("VeraConfig", 'VeraConfig(r=64, target_modules=["q_proj", "v_proj"], vera_dropout=0.1)')
    assert plan.peft_method.value == "vera" and at(text, plan.lora_r.span) == "r=64"
    assert rp.peft == "vera" and rp.lora_r == 64 and rp.lora_dropout == 0.1 and rp.lora_targets == ("q", "v")
    # lambda_d (r) and lambda_b (out features) per adapted linear: q 2048 wide, v 512
    assert estimate(rp, limits=False).params_trainable == 16 * (64 + 2048 + 64 + 512)


def test_vera_rank_defaults_to_peft_256_not_the_lora_default():
    _, _, rp = script("VeraConfig", 'VeraConfig(task_type="CAUSAL_LM")')
    assert rp.peft == "vera" and rp.lora_r == 256 and rp.lora_targets == ("q", "v") and rp.lora_dropout == 0.0


def test_ms_swift_train_type_vera_and_sft_type_ia3():
    text = (
        "swift sft --model Qwen/Qwen2.5-7B-Instruct --train_type vera --vera_rank 128 "
        "--target_modules q_proj v_proj --torch_dtype bfloat16\n"
    )
    plan = parse_document(text, "train.sh").plan
    assert plan.peft_method.value == "vera" and at(text, plan.lora_r.span) == "--vera_rank 128"
    rp = resolve(plan, Settings(gpu="H100-80GB")).resolved
    assert rp.peft == "vera" and rp.lora_r == 128 and rp.lora_targets == ("q", "v")

    text = (
        "swift sft --model Qwen/Qwen2.5-7B-Instruct --sft_type ia3 --target_modules k_proj v_proj down_proj "
        "--ia3_feedforward_modules down_proj\n"
    )
    plan = parse_document(text, "train.sh").plan
    rp = resolve(plan, Settings(gpu="H100-80GB")).resolved
    assert rp.peft == "ia3" and rp.lora_targets == ("k", "v", "down") and rp.feedforward_targets == ("down",)
