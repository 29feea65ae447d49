"""Each rule fires on a small config that has its problem and stays silent once the problem is fixed."""

from __future__ import annotations

import importlib.util
import sys

import pytest

FULL_FT_8B = """
model_name_or_path: meta-llama/Meta-Llama-3-8B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: 4
gradient_accumulation_steps: 8
max_length: 2048
optim: adamw_torch
output_dir: out
"""

LORA_8B = """
model_name_or_path: meta-llama/Meta-Llama-3-8B
torch_dtype: bfloat16
bf16: true
use_peft: true
lora_target_modules: all-linear
lora_dropout: 0.0
gradient_checkpointing: true
per_device_train_batch_size: 4
gradient_accumulation_steps: 8
max_length: 2048
optim: adamw_torch
output_dir: out
env:
  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True
"""


# VL001 ----------------------------------------------------------------------------------------------


def test_predicted_oom_is_reported_on_the_dominant_line_with_numbers(run):
    a = run(FULL_FT_8B, gpu="A100-40GB")
    f = run.only(a, "VL001")
    assert f.severity == "error"
    assert "> 39.5 GiB usable on A100-40GB" in f.message
    # AdamW state is the largest component of an 8B full fine-tune at this batch: the finding sits on `optim`
    assert a.estimate.components["optimizer"] == max(
        v for k, v in a.estimate.components.items() if k not in ("allocator", "cuda_context")
    )
    assert "AdamW states" in f.message
    assert f.span.start_line == run.line_of(a, "optim:")
    # the breakdown points at the lines behind each component
    related = {r.message.split(":")[0]: r.span.start_line for r in f.related}
    assert related["AdamW states"] == run.line_of(a, "optim:")
    assert related["weights"] == run.line_of(a, "model_name_or_path")


def test_predicted_oom_on_activations_points_at_the_batch_line(run):
    a = run(
        FULL_FT_8B.replace("max_length: 2048", "max_length: 8192").replace(
            "bf16: true", "bf16: true\ngradient_checkpointing: false"
        ),
        gpu="H100",
    )
    f = run.only(a, "VL001")
    assert a.estimate.components["activations"] > a.estimate.components["optimizer"]
    assert f.span.start_line == run.line_of(a, "per_device_train_batch_size")


def test_no_oom_once_it_fits(run):
    a = run(LORA_8B, gpu="A100-40GB")
    assert a.estimate.fits
    assert "VL001" not in run.ids(a)


# VL002 ----------------------------------------------------------------------------------------------


def test_tight_fit_depends_on_the_headroom_setting(run):
    free = run(LORA_8B, gpu="A100-40GB", headroom=0.0).estimate
    share = free.headroom_bytes / free.usable_bytes
    assert 0.05 < share < 0.9
    tight = run(LORA_8B, gpu="A100-40GB", headroom=share + 0.05)
    f = run.only(tight, "VL002")
    assert f.severity == "warning" and "Tight fit" in f.message
    roomy = run(LORA_8B, gpu="A100-40GB", headroom=share - 0.05)
    assert "VL002" not in run.ids(roomy)


# VL003 ----------------------------------------------------------------------------------------------

SMALL = """
model_name_or_path: Qwen/Qwen2.5-0.5B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: {mb}
gradient_accumulation_steps: {ga}
gradient_checkpointing: true
max_length: 4096
output_dir: out
"""


def test_unused_headroom_suggests_a_batch_that_keeps_the_global_batch(run):
    a = run(SMALL.format(mb=1, ga=64), gpu="A100-80GB")
    f = run.only(a, "VL003")
    assert f.severity == "information"
    suggested = f.data["suggested_micro_batch"]
    assert suggested >= 2 and 64 % suggested == 0
    assert f"micro-batch {suggested} with accumulation {64 // suggested}" in f.message
    assert f.span.start_line == run.line_of(a, "per_device_train_batch_size")
    fixed = run(SMALL.format(mb=suggested, ga=64 // suggested), gpu="A100-80GB")
    assert "VL003" not in run.ids(fixed)


def test_unused_headroom_needs_a_named_gpu(run):
    a = run(SMALL.format(mb=1, ga=64))  # no GPU anywhere: A100-80GB is assumed
    assert a.estimate.device_bytes < 0.5 * a.estimate.usable_bytes
    assert "VL003" not in run.ids(a)


# VL004 ----------------------------------------------------------------------------------------------


def test_expandable_segments_suggested_when_tight(run):
    a = run(FULL_FT_8B, gpu="A100-40GB")
    f = run.only(a, "VL004")
    assert "expandable_segments:True" in f.message and f.data["saving_gib"] > 0
    fixed = run(FULL_FT_8B + "env:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n", gpu="A100-40GB")
    assert "VL004" not in run.ids(fixed)
    assert "VL001" in run.ids(fixed)  # the allocator setting alone does not make an 8B full FT fit


# VL005 ----------------------------------------------------------------------------------------------

T4 = """
model_name_or_path: Qwen/Qwen2.5-0.5B
{precision}
use_peft: true
per_device_train_batch_size: 1
max_length: 512
output_dir: out
"""


def test_bf16_on_a_gpu_without_bf16(run):
    a = run(T4.format(precision="bf16: true"), gpu="T4")
    f = run.only(a, "VL005")
    assert f.severity == "error" and "T4" in f.message
    assert f.span.start_line == run.line_of(a, "bf16: true")
    assert "VL005" not in run.ids(run(T4.format(precision="fp16: true"), gpu="T4"))
    assert "VL005" not in run.ids(run(T4.format(precision="bf16: true"), gpu="A10G"))


# VL006 ----------------------------------------------------------------------------------------------


def test_fp16_and_bf16_both_on(run):
    a = run(T4.format(precision="bf16: true\nfp16: true"), gpu="A10G")
    f = run.only(a, "VL006")
    assert f.severity == "error"
    assert f.span.start_line in (run.line_of(a, "bf16: true"), run.line_of(a, "fp16: true"))
    assert "VL006" not in run.ids(run(T4.format(precision="bf16: true\nfp16: false"), gpu="A10G"))


# VL007 ----------------------------------------------------------------------------------------------

TRL_NO_DTYPE = """
model_name_or_path: Qwen/Qwen2.5-7B
{dtype}
bf16: true
use_peft: true
max_length: 1024
per_device_train_batch_size: 1
output_dir: out
"""


def test_fp32_weights_from_a_framework_default(run):
    a = run(TRL_NO_DTYPE.format(dtype=""), gpu="A100-80GB")
    assert a.plan.framework == "trl"
    f = run.only(a, "VL007")
    assert "fp32" in f.message and f.data["saving_gib"] > 5
    assert f.span.start_line == run.line_of(a, "model_name_or_path")
    assert "VL007" not in run.ids(run(TRL_NO_DTYPE.format(dtype="torch_dtype: bfloat16"), gpu="A100-80GB"))
    # fp32 written on purpose is the user's choice
    assert "VL007" not in run.ids(run(TRL_NO_DTYPE.format(dtype="torch_dtype: float32"), gpu="A100-80GB"))


# VL008 ----------------------------------------------------------------------------------------------

BNB = """
model_name_or_path: Qwen/Qwen2.5-0.5B
torch_dtype: bfloat16
bf16: true
optim: {optim}
max_length: 512
output_dir: out
"""


def test_8bit_optimizer_without_bitsandbytes(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # an environment without the package
    a = run(BNB.format(optim="paged_adamw_8bit"), gpu="A100-80GB")
    f = run.only(a, "VL008")
    assert "bitsandbytes" in f.message and f.span.start_line == run.line_of(a, "optim:")
    assert "VL008" not in run.ids(run(BNB.format(optim="adamw_torch_fused"), gpu="A100-80GB"))
    declared = run(BNB.format(optim="paged_adamw_8bit"), gpu="A100-80GB", framework_versions={"bitsandbytes": "0.45"})
    assert "VL008" not in run.ids(declared)


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed here")
def test_8bit_optimizer_with_bitsandbytes_installed(run):
    assert "VL008" not in run.ids(run(BNB.format(optim="paged_adamw_8bit"), gpu="A100-80GB"))


# VL009 ----------------------------------------------------------------------------------------------

DROPOUT = """
model_name_or_path: meta-llama/Llama-3.1-8B
torch_dtype: bfloat16
bf16: true
use_peft: true
lora_target_modules: all-linear
lora_dropout: {dropout}
gradient_checkpointing: false
per_device_train_batch_size: 2
max_length: 4096
output_dir: out
"""


def test_lora_dropout_cost(run):
    a = run(DROPOUT.format(dropout=0.1), gpu="H100")
    f = run.only(a, "VL009")
    assert f.data["cost_gib"] > 0.05 and "lora_dropout: 0" in f.message
    assert f.span.start_line == run.line_of(a, "lora_dropout")
    assert "VL009" not in run.ids(run(DROPOUT.format(dropout=0), gpu="H100"))


# VL010 ----------------------------------------------------------------------------------------------

EVAL = """
model_name_or_path: meta-llama/Llama-3.2-1B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: 1
per_device_eval_batch_size: {eval_batch}
eval_strategy: steps
max_length: 4096
output_dir: out
"""


def test_eval_batch_larger_than_train_batch(run):
    a = run(EVAL.format(eval_batch=16), gpu="A100-40GB")
    f = run.only(a, "VL010")
    assert "Eval batch 16 > train micro-batch 1" in f.message
    assert f.span.start_line == run.line_of(a, "per_device_eval_batch_size")
    assert "VL010" not in run.ids(run(EVAL.format(eval_batch=1), gpu="A100-40GB"))
    no_eval = run(EVAL.format(eval_batch=16).replace("eval_strategy: steps", "eval_strategy: 'no'"), gpu="A100-40GB")
    assert "VL010" not in run.ids(no_eval)


# VL011 ----------------------------------------------------------------------------------------------

FSDP = """
model_name_or_path: meta-llama/Llama-3.1-8B
torch_dtype: bfloat16
bf16: true
fsdp: full_shard auto_wrap
fsdp_config:
  state_dict_type: {kind}
per_device_train_batch_size: 1
max_length: 2048
output_dir: out
"""


def test_fsdp_full_state_dict(run):
    a = run(FSDP.format(kind="FULL_STATE_DICT"), gpu="8xA100-80GB")
    f = run.only(a, "VL011")
    assert "SHARDED_STATE_DICT" in f.message and f.data["gathered_gib"] > 10
    assert "VL011" not in run.ids(run(FSDP.format(kind="SHARDED_STATE_DICT"), gpu="8xA100-80GB"))


# VL012 ----------------------------------------------------------------------------------------------

ATTN = """
model_name_or_path: meta-llama/Llama-3.2-1B
torch_dtype: bfloat16
bf16: true
attn_implementation: {attn}
per_device_train_batch_size: 1
max_length: 8192
output_dir: out
"""


def test_eager_attention_at_long_sequence(run):
    a = run(ATTN.format(attn="eager"), gpu="H100")
    f = run.only(a, "VL012")
    assert "Eager attention" in f.message and f.data["cost_gib"] >= 0.5
    assert f.span.start_line == run.line_of(a, "attn_implementation")
    assert "VL012" not in run.ids(run(ATTN.format(attn="sdpa"), gpu="H100"))
    short = run(ATTN.format(attn="eager").replace("max_length: 8192", "max_length: 256"), gpu="H100")
    assert "VL012" not in run.ids(short)


# VL013 ----------------------------------------------------------------------------------------------

ALLOC = """
model_name_or_path: Qwen/Qwen2.5-0.5B
torch_dtype: bfloat16
bf16: true
max_length: 512
output_dir: out
env:
  PYTORCH_CUDA_ALLOC_CONF: "{conf}"
"""


def test_alloc_conf_typo_is_reported_on_the_option_with_a_fix(run):
    a = run(ALLOC.format(conf="expandable_segment:True,max_split_size_mb:128"), gpu="A100-80GB")
    f = run.only(a, "VL013")
    assert f.severity == "error" and "expandable_segments" in f.message
    text = open(a.path).read().splitlines()[run.line_of(a, "PYTORCH_CUDA_ALLOC_CONF")]
    assert text[f.span.start_col : f.span.end_col] == "expandable_segment"
    assert [(e.new_text) for e in f.fixes[0].edits] == ["expandable_segments"]
    assert "VL013" not in run.ids(
        run(ALLOC.format(conf="expandable_segments:True,max_split_size_mb:128"), gpu="A100-80GB")
    )


# VL014 ----------------------------------------------------------------------------------------------


def test_missing_deepspeed_file(run, tmp_path):
    config = FULL_FT_8B + "deepspeed: ds_zero3.json\n"
    a = run(config, gpu="8xA100-80GB")
    f = run.only(a, "VL014")
    assert "ds_zero3.json" in f.message and f.span.start_line == run.line_of(a, "deepspeed:")
    (tmp_path / "ds_zero3.json").write_text('{"zero_optimization": {"stage": 3}}', encoding="utf-8")
    fixed = run(config, gpu="8xA100-80GB")
    assert "VL014" not in run.ids(fixed)
    assert fixed.resolution.resolved.zero_stage == 3


# VL015 ----------------------------------------------------------------------------------------------


def test_unknown_optimizer_with_did_you_mean(run):
    a = run(BNB.format(optim="adamw_bnb_8bt"), gpu="A100-80GB", framework_versions={"bitsandbytes": "0.45"})
    f = run.only(a, "VL015")
    assert "adamw_bnb_8bit" in f.message
    assert f.fixes and f.fixes[0].edits[0].new_text.strip("'\"") == "adamw_bnb_8bit"
    fixed = run(BNB.format(optim="adamw_bnb_8bit"), gpu="A100-80GB", framework_versions={"bitsandbytes": "0.45"})
    assert "VL015" not in run.ids(fixed)


# VL016 ----------------------------------------------------------------------------------------------


def test_yaml_syntax_error(run):
    a = run("model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: [1\noutput_dir: out\n")
    f = run.only(a, "VL016")
    assert f.severity == "error" and a.plan is None and a.error
    assert "VL016" not in run.ids(
        run("model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 1\noutput_dir: out\n")
    )


# VL017 ----------------------------------------------------------------------------------------------


def test_unknown_model_is_information_with_no_estimate(run):
    a = run("model_name_or_path: my-org/private-model-13b\nper_device_train_batch_size: 1\noutput_dir: out\n")
    f = run.only(a, "VL017")
    assert f.severity == "information" and a.estimate is None
    assert f.span.start_line == 0
    assert "VL017" not in run.ids(
        run("model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 1\noutput_dir: out\n")
    )


def test_unknown_gpu_setting_is_reported(run):
    a = run(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 1\noutput_dir: out\n", gpu="Voodoo5-6000"
    )
    f = run.only(a, "VL017")
    assert "Voodoo5-6000" in f.message and a.estimate is None


def test_a_problem_inside_a_referenced_file_is_shown_on_the_reference(run, tmp_path):
    (tmp_path / "ds.json").write_text('{\n  "zero_optimization": {"stage": 7}\n}\n', encoding="utf-8")
    a = run(FULL_FT_8B + "deepspeed: ds.json\n", gpu="8xA100-80GB")
    f = run.only(a, "VL015")
    assert "ZeRO stage" in f.message
    assert f.span.start_line == run.line_of(a, "deepspeed:") and f.span.file == a.path
