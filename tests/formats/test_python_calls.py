"""Python training scripts: values and exact source ranges of the calls that decide memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.formats import parse_document
from vramlens.plan import IssueKind, Severity, Span
from vramlens.text import LineIndex

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "python"


def load(name: str):
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8")
    return text, parse_document(text, str(path)).plan


def at(text: str, span: Span) -> str:
    """The text a span covers, its lines counted as the editor counts them (a lone \\r breaks a line too);
    columns are characters."""
    idx = LineIndex(text)
    return text[idx.offset(span.start_line, span.start_col) : idx.offset(span.end_line, span.end_col)]


def pos(span: Span) -> tuple[int, int, int, int]:
    return span.start_line, span.start_col, span.end_line, span.end_col


def test_trl_qlora_script_reads_every_memory_setting_with_its_range():
    text, plan = load("sft_trl_qlora.py")
    assert plan.format == "python" and plan.framework == "trl"
    assert plan.model_id.value == "meta-llama/Llama-3.1-8B"
    assert at(text, plan.model_id.value_span) == "model_id"  # the argument, resolved through the variable
    assert plan.micro_batch.value == 4
    assert pos(plan.micro_batch.span) == (41, 4, 41, 42)
    assert at(text, plan.micro_batch.span) == "per_device_train_batch_size=batch_size"
    assert at(text, plan.micro_batch.value_span) == "batch_size"
    assert plan.grad_accum.value == 16  # effective_batch // batch_size
    assert plan.seq_len.value == 2048 and at(text, plan.seq_len.value_span) == "2048"
    assert plan.optimizer.value == "paged_adamw_8bit"
    assert pos(plan.optimizer.value_span) == (44, 10, 44, 28)
    assert plan.amp_dtype.value == "bf16" and plan.weight_dtype.value == "bf16"
    assert plan.attn_impl.value == "flash_attention_2"
    assert plan.quant_bits.value == 4 and plan.quant_type.value == "nf4" and plan.quant_double.value is True
    assert plan.quant_compute_dtype.value == "bf16"
    assert at(text, plan.quant_compute_dtype.value_span) == "torch.bfloat16"
    assert plan.peft_method.value == "lora"
    assert plan.lora_r.value == 16 and at(text, plan.lora_r.span) == "r=16"
    assert plan.lora_alpha.value == 32 and plan.lora_dropout.value == 0.05
    assert plan.lora_targets.value == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert plan.grad_checkpointing.value is True  # prepare_model_for_kbit_training's default
    assert plan.grad_checkpointing.key == "prepare_model_for_kbit_training"
    assert plan.alloc_conf.value == "expandable_segments:True"
    assert pos(plan.alloc_conf.span) == (3, 0, 3, 66)
    assert at(text, plan.alloc_conf.value_span) == '"expandable_segments:True"'
    assert all(s.span.file == str(FIXTURES / "sft_trl_qlora.py") for s in plan.settings().values())


def test_training_arguments_one_per_line_with_dict_and_missing_deepspeed_file():
    text, plan = load("hf_trainer_full.py")
    assert plan.framework == "transformers"
    assert (plan.micro_batch.value, plan.eval_batch.value, plan.grad_accum.value) == (8, 16, 2)
    assert pos(plan.eval_batch.value_span) == (7, 31, 7, 33)
    assert plan.grad_checkpointing.value is True and plan.ckpt_reentrant.value is False
    assert plan.compile.value is False
    assert plan.weight_dtype.value == "bf16" and at(text, plan.weight_dtype.value_span) == '"bfloat16"'
    assert plan.dist_strategy.value == "deepspeed"
    missing = [i for i in plan.issues if i.kind == IssueKind.REFERENCE]
    assert len(missing) == 1 and missing[0].severity == Severity.ERROR
    assert at(text, missing[0].span) == '"configs/ds_zero3_missing.json"'


def test_inline_seq2seq_arguments_keep_single_quotes_in_spans():
    text, plan = load("hf_inline_args.py")
    assert plan.model_id.value == "google/flan-t5-large"
    assert plan.micro_batch.value == 4 and plan.amp_dtype.value == "fp16"
    assert plan.optimizer.value == "adafactor"
    assert at(text, plan.optimizer.value_span) == "'adafactor'"
    assert pos(plan.micro_batch.span) == (3, 39, 3, 68)


def test_dpo_trainer_with_a_model_name_string():
    text, plan = load("dpo_config.py")
    assert plan.framework == "trl"
    assert plan.model_id.value == "HuggingFaceH4/mistral-7b-sft-beta"
    assert at(text, plan.model_id.span) == 'model="HuggingFaceH4/mistral-7b-sft-beta"'
    assert (plan.micro_batch.value, plan.grad_accum.value, plan.seq_len.value) == (2, 8, 1024)
    assert plan.grad_checkpointing.value is True
    assert pos(plan.grad_checkpointing.span) == (8, 4, 8, 31)


def test_grpo_placeholders_and_reassigned_names_are_unknown_never_guessed():
    text, plan = load("grpo_placeholders.py")
    assert plan.micro_batch.value == 8  # generations // 2
    assert plan.grad_accum.value == 4  # 2 ** 2
    assert plan.grad_checkpointing is None  # `...` placeholder
    info = [i for i in plan.issues if i.severity == Severity.INFO]
    assert any("`gradient_checkpointing`" in i.message and "..." in i.message for i in info)
    assert "learning_rate" not in plan.extra  # `lr` is assigned twice: unknown


def test_first_config_call_wins_when_a_file_has_two():
    _, plan = load("orpo_then_kto.py")
    assert plan.micro_batch.value == 4 and plan.seq_len.value == 4096
    assert plan.micro_batch.span.start_line == 2


def test_unsloth_loader_and_peft_call():
    text, plan = load("unsloth_sft.py")
    assert plan.model_id.value == "unsloth/Meta-Llama-3.1-8B-bnb-4bit"
    assert plan.model_id.key == "model_name"
    assert plan.seq_len.value == 4096 and at(text, plan.seq_len.value_span) == "max_seq_length"
    assert plan.weight_dtype is None  # dtype = None: unsloth picks
    assert plan.quant_bits.value == 4
    assert plan.lora_r.value == 32 and at(text, plan.lora_r.span) == "r = 32"
    assert plan.lora_dropout.value == 0
    assert plan.grad_checkpointing.value is True and at(text, plan.grad_checkpointing.value_span) == '"unsloth"'
    assert plan.optimizer.value == "adamw_8bit"
    assert (plan.micro_batch.value, plan.grad_accum.value) == (2, 4)


def test_plain_pytorch_loop():
    text, plan = load("custom_loop.py")
    assert plan.framework == "custom"
    assert plan.optimizer.value == "torch.optim.AdamW" and plan.optimizer_impl.value == "fused"
    assert at(text, plan.optimizer_impl.span) == "fused=True"
    assert plan.micro_batch.value == 16 and at(text, plan.micro_batch.span) == "batch_size=16"
    assert plan.amp_dtype.value == "bf16"
    assert plan.weight_dtype.value == "fp32"
    assert plan.grad_checkpointing.value is True and plan.ckpt_reentrant.value is False
    assert plan.alloc_conf.value == "expandable_segments:True" and plan.alloc_conf.key == "PYTORCH_ALLOC_CONF"
    assert at(text, plan.alloc_conf.value_span) == '"expandable_segments:True"'


def test_bitsandbytes_optimizer_through_an_import_alias():
    text, plan = load("bnb_optimizer_loop.py")
    assert plan.optimizer.value == "bitsandbytes.optim.PagedAdamW8bit"
    assert at(text, plan.optimizer.span) == "bnb.optim.PagedAdamW8bit"
    assert plan.weight_dtype.value == "bf16" and plan.compile.value is True


def test_splats_and_attributes_of_unknown_objects_record_nothing():
    text, plan = load("kwargs_splat.py")
    assert plan.micro_batch is None
    assert plan.grad_accum.value == 4 and plan.grad_checkpointing.value is True
    messages = [i.message for i in plan.issues if i.severity == Severity.INFO]
    assert any("args.batch_size" in m for m in messages)
    assert not any("**default_args" in m for m in messages)  # a dict literal: read entry by entry


def test_dict_splats_and_module_variables_are_read_where_they_are_written():
    text, plan = load("splat_dict.py")
    assert plan.framework == "trl" and plan.model_id.value == "Qwen/Qwen2.5-1.5B"
    assert plan.micro_batch.value == 4 and at(text, plan.micro_batch.value_span) == "batch"
    assert at(text, plan.micro_batch.span) == "per_device_train_batch_size=batch"
    assert plan.grad_accum.value == 8 and plan.seq_len.value == 4096
    assert (
        plan.grad_checkpointing.value is True
        and at(text, plan.grad_checkpointing.span) == '"gradient_checkpointing": True'
    )
    assert plan.amp_dtype.value == "bf16" and plan.optimizer.value == "adamw_torch_fused"
    assert plan.weight_dtype.value == "bf16" and plan.attn_impl.value == "sdpa"
    assert not [i for i in plan.issues if "**" in i.message]


def test_splats_only_known_at_run_time_say_so():
    text, plan = load("splat_unknown.py")
    assert plan.grad_checkpointing.value is True
    assert plan.micro_batch is None  # `extra` is changed after it is built: not trusted
    messages = [i.message for i in plan.issues]
    assert any("**extra" in m and "changed after it is built" in m for m in messages)
    assert any("**cfg" in m and "yaml.safe_load(f)" in m for m in messages)


def test_code_execution_bait_is_only_read():
    marker = Path("/tmp/vramlens-bait-was-run")
    marker.unlink(missing_ok=True)
    text, plan = load("code_bait.py")
    assert not marker.exists()
    assert plan.grad_accum.value == 2
    assert plan.micro_batch is None and plan.optimizer is None


@pytest.mark.parametrize("name", ["not_training_inference.py", "not_training_plain.py", "syntax_error.py"])
def test_files_without_training_calls_are_not_configs(name):
    _, plan = load(name)
    assert plan is None


def test_columns_count_characters_not_utf8_bytes():
    text, plan = load("unicode_columns.py")
    assert pos(plan.micro_batch.span) == (3, 44, 3, 73)
    assert at(text, plan.micro_batch.value_span) == "3"
    assert pos(plan.grad_accum.value_span) == (4, 59, 4, 60)
    assert pos(plan.seq_len.span) == (5, 34, 5, 49)
    assert at(text, plan.grad_accum.span) == "gradient_accumulation_steps=7"
    assert at(text, plan.seq_len.span) == "max_length=8192"


def test_lines_that_end_in_a_lone_carriage_return_are_lines_as_python_and_the_editor_count_them():
    """Python reads a lone \\r as a line break, and so does the editor: the script is read with the same values
    and ranges as its \\n copy (it was not recognised at all, and non-ASCII columns came from the wrong line)."""
    plain, expected = load("unicode_columns.py")
    text = plain.replace("\n", "\r")
    plan = parse_document(text, str(FIXTURES / "unicode_columns.py")).plan
    assert plan is not None
    for concept in ("micro_batch", "grad_accum", "seq_len"):
        got, want = getattr(plan, concept), getattr(expected, concept)
        assert (
            got.value == want.value and pos(got.span) == pos(want.span) and pos(got.value_span) == pos(want.value_span)
        )
    assert at(text, plan.grad_accum.span) == "gradient_accumulation_steps=7"


def test_environ_update_and_from_os_import():
    text, plan = load("env_update.py")
    assert plan.alloc_conf.value == "expandable_segments:True,max_split_size_mb:256"
    assert plan.alloc_conf.span.start_line == 3
    assert plan.gpu_count.value == 4
    assert at(text, plan.gpu_count.value_span) == '"0,1,2,3"'


def test_function_scope_shadows_module_variables_and_parameters_are_unknown():
    text, plan = load("scoped_vars.py")
    assert plan.micro_batch.value == 8  # the function's batch_size, not the module's 2
    assert plan.grad_accum.value == 4  # tuple assignment
    assert plan.eval_batch.value == 16
    assert plan.seq_len is None  # `seq` is a parameter
    assert any("`seq`" in i.message for i in plan.issues)


def test_model_init_kwargs_dict_call_and_optimizer_enum():
    text, plan = load("model_init_kwargs.py")
    assert plan.model_id.value == "Qwen/Qwen2.5-0.5B"
    assert plan.weight_dtype.value == "bf16" and plan.attn_impl.value == "flash_attention_2"
    assert plan.optimizer.value == "adamw_torch_fused"
    assert at(text, plan.optimizer.value_span) == "OptimizerNames.ADAMW_TORCH_FUSED"
    assert plan.packing.value is True and plan.loss_impl.value == "fused"


def test_a_global_rebinding_in_a_helper_makes_the_module_value_unknown(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(
        "from trl import SFTConfig\n\nbatch_size = 8\n\n\ndef tune():\n    global batch_size\n"
        "    batch_size = 2\n\n\ndef unrelated(x):\n    y = x * 2\n    return y\n\n\n"
        "SFTConfig(output_dir='o', per_device_train_batch_size=batch_size, gradient_accumulation_steps=2)\n"
    )
    plan = parse_document(src.read_text(), str(src)).plan
    assert plan.micro_batch is None and plan.grad_accum.value == 2
