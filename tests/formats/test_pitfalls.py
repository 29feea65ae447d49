"""The parsing pitfalls of docs/config-sources.md ("Parsing pitfalls"), each handled on purpose."""

from __future__ import annotations

from vramlens.formats import parse_document
from vramlens.plan import IssueKind

BASE = "base_model: meta-llama/Llama-3.2-1B\nsequence_len: 2048\nnum_epochs: 1\n"  # an axolotl config


def parse(text: str, path: str = "/ws/cfg.yaml"):
    result = parse_document(text, path)
    assert result.plan is not None, result.issues
    return result.plan


def issues(plan, kind=None):
    return [i for i in plan.issues if kind is None or i.kind == kind]


def test_scientific_notation_without_a_dot_is_text_in_yaml_but_still_a_number():
    # PyYAML reads `5e-2` as the string '5e-2'; axolotl's schema converts it, and so do we
    p = parse(BASE + "micro_batch_size: 1\nadapter: lora\nlora_dropout: 5e-2\nlora_alpha: 1.6e1\n")
    assert p.lora_dropout.value == 0.05 and p.lora_alpha.value == 16.0
    assert not issues(p)


def test_yaml_1_1_booleans():
    p = parse(BASE + "micro_batch_size: 1\nsample_packing: yes\ngradient_checkpointing: off\n")
    assert p.packing.value is True and p.grad_checkpointing.value is False
    # an unquoted NO/no in an accelerate config becomes false: read as meant, and told
    p = parse("distributed_type: NO\nmixed_precision: no\nnum_processes: 1\n")
    assert (p.dist_strategy.value, p.amp_dtype.value) == ("none", "none")
    quoted = [i for i in issues(p, IssueKind.INVALID_VALUE) if "read by YAML as the boolean false" in i.message]
    assert {i.suggestion for i in quoted} == {"'NO'", "'no'"}


def test_auto_values_defer_to_the_framework():
    p = parse(BASE + "micro_batch_size: 1\nbf16: auto\ntorch_compile: auto\n")
    assert p.amp_dtype.value == "bf16" and "auto" in p.amp_dtype.note
    # axolotl utils/schemas/config.py `check_torch_compile_auto`: `auto` is True on torch 2.5.1 and newer
    assert p.compile.value is True and "auto" in p.compile.note
    p = parse(
        '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto", '
        '"gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}}',
        "/ws/ds.json",
    )
    assert p.micro_batch is None and p.grad_accum is None and p.amp_dtype is None and not issues(p)


def test_null_and_empty_mean_the_default_not_false():
    p = parse(BASE + "micro_batch_size:\ngradient_checkpointing: null\nlora_target_modules:\ndeepspeed:\nfsdp:\n")
    assert p.micro_batch is None and p.grad_checkpointing is None and p.lora_targets is None
    assert p.dist_strategy is None and not issues(p)


def test_strings_in_number_slots():
    p = parse(BASE + "micro_batch_size: '4'\ngradient_accumulation_steps: \"8\"\n")
    assert (p.micro_batch.value, p.grad_accum.value) == (4, 8)
    p = parse(BASE + "micro_batch_size: four\n")
    assert p.micro_batch is None and "whole number" in issues(p)[0].message


def test_a_ratio_in_an_integer_looking_field_is_not_a_batch_size():
    p = parse(
        "model_name_or_path: m/x\nstage: sft\ncutoff_len: 1024\nwarmup_steps: 0.1\nper_device_train_batch_size: 1.0\n"
    )
    assert p.micro_batch.value == 1  # 1.0 is a whole number
    p = parse("model_name_or_path: m/x\nstage: sft\ncutoff_len: 1024\nper_device_train_batch_size: 1.5\n")
    assert p.micro_batch is None and issues(p)


def test_underscored_integers():
    p = parse(BASE.replace("2048", "500_000") + "micro_batch_size: 1\n")
    assert p.seq_len.value == 500_000


def test_old_and_new_key_names_coexist():
    p = parse("model_name_or_path: m/x\nmax_seq_length: 1024\nper_device_train_batch_size: 1\nuse_peft: true\n")
    assert p.seq_len.value == 1024 and p.seq_len.key == "max_seq_length"
    p = parse("model_name_or_path: m/x\nmax_seq_length: 1024\nmax_length: 2048\nuse_peft: true\n")
    assert p.seq_len.value == 2048
    p = parse("model_name_or_path: m/x\nuse_flash_attention_2: true\nper_device_train_batch_size: 1\n")
    assert p.attn_impl.value == "flash_attention_2"


def test_framework_default_drift_is_explained():
    # an older TRL recipe (max_seq_length was removed in TRL 0.20) that leaves gradient checkpointing unset
    p = parse("model_name_or_path: m/x\nmax_seq_length: 1024\nper_device_train_batch_size: 1\ndataset_mixer: {}\n")
    drift = [i for i in p.issues if "older TRL" in i.message]
    assert drift and "gradient checkpointing" in drift[0].message and drift[0].severity.value == "info"
    # LLaMA-Factory changed the cutoff_len default
    p = parse("model_name_or_path: m/x\nstage: sft\nfinetuning_type: lora\nper_device_train_batch_size: 1\n")
    assert any("2048 since 2024-11" in i.message for i in p.issues)


def test_interpolation_and_placeholders():
    p = parse(
        "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\nbatch_size: 4\n"
        "batch_size_val: ${batch_size}\ngradient_accumulation_steps: ${eval:'16 // ${batch_size}'}\n"
        "dtype: bf16\n"
    )
    assert p.eval_batch.value == 4
    assert p.grad_accum is None and not [i for i in p.issues if "whole number" in i.message]


def test_lora_targets_as_list_comma_string_all_or_regex():
    p = parse("model_name_or_path: m/x\nstage: sft\ncutoff_len: 512\nlora_target: all\n")
    assert p.lora_targets.value == ["all-linear"]
    p = parse("model_name_or_path: m/x\nstage: sft\ncutoff_len: 512\nlora_target: q_proj, v_proj\n")
    assert p.lora_targets.value == ["q_proj", "v_proj"]
    p = parse(BASE + "micro_batch_size: 1\nadapter: lora\nlora_target_modules: 'model.layers.[\\d]+.(q|v)_proj'\n")
    assert p.lora_targets.value == ["model.layers.[\\d]+.(q|v)_proj"] and "regular expression" in p.lora_targets.note


def test_gradient_checkpointing_as_a_string():
    p = parse(BASE + "micro_batch_size: 1\ngradient_checkpointing: offload\n")
    assert p.grad_checkpointing.value is True and p.activation_offload.value is True


def test_trl_values_on_the_line_after_their_key():
    text = "model_name_or_path:\n  Qwen/Qwen2.5-0.5B\nlearning_rate:\n  0.0001\nper_device_train_batch_size:\n  2\n"
    p = parse(text)
    assert p.model_id.value == "Qwen/Qwen2.5-0.5B" and p.model_id.value_span.start_line == 1
    assert p.micro_batch.value == 2 and p.micro_batch.value_span.start_line == 5
