"""Shell launch scripts: flags, env prefixes, variables, GPU counts and referenced configs, with spans."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_python_calls import at, pos  # noqa: E402  (same helpers)
from vramlens.formats import parse_document
from vramlens.formats.shell import tokenize
from vramlens.plan import IssueKind, Severity

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "shell"


def load(name: str, workspace: Path | None = FIXTURES):
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8")
    return text, parse_document(text, str(path), workspace=workspace).plan


def test_torchrun_with_hf_flags_and_a_trailing_backslash():
    text, plan = load("torchrun_hf.sh")
    assert plan.format == "shell" and plan.framework == "transformers"
    assert plan.model_id.value == "meta-llama/Llama-3.1-8B"
    assert pos(plan.micro_batch.span) == (4, 4, 4, 35) and pos(plan.micro_batch.value_span) == (4, 34, 4, 35)
    assert plan.micro_batch.value == 8 and plan.grad_accum.value == 4
    assert plan.seq_len.value == 4096 and plan.seq_len.key == "block_size"
    assert plan.amp_dtype.value == "bf16" and plan.amp_dtype.value_span is None  # bare flag
    assert at(text, plan.amp_dtype.span) == "--bf16"
    assert plan.grad_checkpointing.value is True and at(text, plan.grad_checkpointing.value_span) == "true"
    assert plan.optimizer.value == "adamw_torch_fused" and pos(plan.optimizer.value_span) == (9, 12, 9, 29)
    assert plan.gpu_count.value == 4 and at(text, plan.gpu_count.span) == "--nproc_per_node 4"
    assert "output_dir" in plan.extra  # read up to the trailing `\`


def test_env_prefixes_on_continuation_lines_and_quoted_values():
    text, plan = load("env_continuation.sh")
    assert plan.alloc_conf.value == "expandable_segments:True" and plan.alloc_conf.key == "PYTORCH_ALLOC_CONF"
    assert pos(plan.alloc_conf.value_span) == (0, 26, 0, 50)
    assert plan.gpu_count.value == 2  # --nproc_per_node beats CUDA_VISIBLE_DEVICES
    assert plan.model_id.value == "meta-llama/Llama-3.2-3B"
    assert at(text, plan.model_id.value_span) == '"meta-llama/Llama-3.2-3B"'  # --k="v"
    assert plan.optimizer.value == "adamw_bnb_8bit" and at(text, plan.optimizer.value_span) == "'adamw_bnb_8bit'"
    assert plan.attn_impl.value == "sdpa"
    assert plan.lora_targets.value == ["down_proj", "o_proj", "k_proj"]
    assert pos(plan.lora_targets.value_span) == (8, 26, 8, 51)


def test_ms_swift_command_with_env_prefixes_and_its_own_flag_names():
    text, plan = load("swift_sft.sh")
    assert plan.framework == "ms-swift"
    assert plan.model_id.value == "Qwen/Qwen2.5-32B-Instruct" and plan.model_id.key == "model"
    assert plan.peft_method.value == "lora" and plan.peft_method.key == "train_type"
    assert plan.lora_r.value == 8 and plan.lora_targets.value == ["all-linear"]
    assert plan.weight_dtype.value == "bf16" and plan.seq_len.value == 4096
    assert plan.attn_impl.value == "flash_attention_2"
    assert (plan.dist_strategy.value, plan.zero_stage.value) == ("deepspeed", 3)
    assert plan.gpu_count.value == 4 and at(text, plan.gpu_count.span) == "NPROC_PER_NODE=4"
    assert plan.alloc_conf.value == "expandable_segments:True"
    assert at(text, plan.alloc_conf.value_span) == "'expandable_segments:True'"
    assert not [i for i in plan.issues if i.severity != Severity.INFO]


def test_python_m_torch_distributed_run_with_equals_flags_and_negation():
    text, plan = load("python_m_dist_run.sh")
    assert plan.gpu_count.value == 2 and plan.world_size.value == 4  # 2 per node × 2 nodes
    assert pos(plan.gpu_count.value_span) == (0, 49, 0, 50)
    assert plan.micro_batch.value == 16 and at(text, plan.micro_batch.value_span) == "16"
    assert plan.amp_dtype.value == "bf16" and at(text, plan.amp_dtype.value_span) == "True"
    assert plan.grad_checkpointing.value is False
    assert plan.grad_checkpointing.key == "no_gradient_checkpointing"


def test_variables_expand_and_run_time_values_are_unknown():
    text, plan = load("variables_unknown.sh")
    assert plan.gpu_count.value == 4  # nproc_per_node=4 … $nproc_per_node
    assert plan.micro_batch.value == 8 and at(text, plan.micro_batch.value_span) == "$BS"  # ${BS:-8}
    assert plan.optimizer.value == "adamw_torch"  # "${OPTIM:-adamw_torch}"
    assert plan.grad_accum is None  # $(expr 16 / $nproc_per_node)
    assert plan.seq_len.value == 2048  # $((4 * 512)): integer arithmetic is worked out
    assert plan.model_id is None  # ${MODEL_PATH} never assigned
    unknown = {i.message.split("`")[1] for i in plan.issues if i.severity == Severity.INFO}
    assert {"gradient_accumulation_steps", "model_name_or_path"} <= unknown
    accum = next(i for i in plan.issues if "gradient_accumulation_steps" in i.message)
    assert at(text, accum.span) == "$(expr 16 / $nproc_per_node)"


def test_trailing_backslash_at_end_of_file_without_newline():
    text, plan = load("qlora_trailing_eof.sh")
    assert not text.endswith("\n")
    assert (plan.quant_bits.value, plan.quant_type.value, plan.quant_double.value) == (4, "nf4", True)
    assert plan.micro_batch.value == 1 and pos(plan.micro_batch.span) == (5, 4, 5, 35)


def test_comment_inside_a_continued_command_ends_it_and_is_reported():
    text, plan = load("comment_breaks.sh")
    assert plan.micro_batch.value == 4
    assert plan.grad_accum is None and plan.grad_checkpointing is None
    warning = next(i for i in plan.issues if i.severity == Severity.WARNING)
    assert at(text, warning.span) == "--gradient_accumulation_steps 8"


def test_nohup_redirections_background_and_heredoc_body_is_skipped():
    text, plan = load("nohup_heredoc.sh")
    assert plan.micro_batch.value == 32  # not the 999 inside the heredoc
    assert plan.amp_dtype.value == "fp16" and plan.gpu_count is None


def test_a_script_without_a_training_command_is_not_a_config():
    _, plan = load("not_training.sh")
    assert plan is None


def test_deepspeed_include_and_a_followed_deepspeed_json():
    text, plan = load("deepspeed_include.sh")
    assert plan.gpu_count.value == 2 and at(text, plan.gpu_count.value_span) == "localhost:0,1"
    assert plan.dist_strategy.value == "deepspeed"
    assert plan.zero_stage.value == 3 and plan.zero_stage.span.file.endswith("ds_z3.json")
    assert plan.offload_optimizer.value is True
    ref = next(r for r in plan.references if r.kind == "deepspeed")
    assert ref.resolved_path is not None and at(text, ref.span) == "configs/ds_z3.json"


def test_missing_deepspeed_json_is_vl014_on_the_value():
    text, plan = load("deepspeed_missing.sh")
    assert plan.gpu_count.value == 8
    issue = next(i for i in plan.issues if i.kind == IssueKind.REFERENCE)
    assert issue.severity == Severity.ERROR and at(text, issue.span) == "configs/does_not_exist.json"


def test_accelerate_config_file_is_merged_under_the_command_line():
    text, plan = load("accelerate_config.sh")
    assert plan.gpu_count.value == 8 and plan.world_size.value == 8  # --num_processes 8 beats the file's 4
    assert plan.world_size.span.file == str(FIXTURES / "accelerate_config.sh")
    assert plan.dist_strategy.value == "fsdp" and plan.dist_strategy.span.file.endswith("fsdp_accelerate.yaml")
    assert plan.amp_dtype.value == "bf16"
    assert plan.grad_checkpointing.value is True and plan.grad_checkpointing.value_span is None
    ref = next(r for r in plan.references if r.kind == "accelerate")
    assert ref.resolved_path.endswith("fsdp_accelerate.yaml")


def test_accelerate_num_processes_is_total_over_machines():
    _, plan = load("accelerate_multi_node.sh")
    assert plan.world_size.value == 16 and plan.gpu_count.value == 8
    assert plan.amp_dtype.value == "bf16" and plan.amp_dtype.key == "mixed_precision"


def test_llamafactory_cli_overrides_win_over_the_yaml():
    text, plan = load("llamafactory_cli.sh")
    assert plan.framework == "llamafactory"
    assert plan.micro_batch.value == 2 and pos(plan.micro_batch.value_span) == (3, 32, 3, 33)
    assert plan.seq_len.value == 4096 and at(text, plan.seq_len.span) == "cutoff_len=4096"
    assert plan.grad_accum.value == 8 and plan.grad_accum.span.file.endswith("lf_lora.yaml")
    assert plan.lora_r.value == 16 and plan.peft_method.value == "lora"
    assert plan.gpu_count.value == 2 and at(text, plan.gpu_count.span) == "NPROC_PER_NODE=2"
    ref = next(r for r in plan.references if r.kind == "config")
    assert at(text, ref.span) == "configs/lf_lora.yaml"


def test_torchtune_packaged_config_name_is_noted_not_an_error():
    text, plan = load("tune_packaged.sh")
    assert plan.framework == "torchtune"
    assert (plan.micro_batch.value, plan.grad_accum.value, plan.grad_checkpointing.value) == (4, 8, True)
    assert plan.gpu_count.value == 2
    assert not [i for i in plan.issues if i.kind == IssueKind.REFERENCE]
    assert any("packaged" in i.message for i in plan.issues)


def test_torchtune_dotted_overrides_and_a_local_config():
    text, plan = load("tune_file.sh")
    assert plan.optimizer.value == "bitsandbytes.optim.PagedAdamW8bit"
    assert at(text, plan.optimizer.value_span) == "bitsandbytes.optim.PagedAdamW8bit"
    assert plan.micro_batch.value == 2 and plan.micro_batch.span.file.endswith("tune_file.sh")
    assert plan.seq_len.value == 2048 and plan.seq_len.span.file.endswith("tt_full.yaml")


def test_axolotl_kebab_overrides_and_launcher_arguments_after_double_dash():
    text, plan = load("axolotl_train.sh")
    assert plan.framework == "axolotl"
    assert plan.micro_batch.value == 2 and at(text, plan.micro_batch.span) == "--micro-batch-size 2"
    assert plan.grad_accum.value == 2 and plan.grad_accum.span.file.endswith("axo_qlora.yml")
    assert plan.gpu_count.value == 2 and at(text, plan.gpu_count.span) == "--nproc_per_node=2"
    assert plan.quant_bits.value == 4


def test_trl_cli_with_a_recipe_and_comma_space_multi_values():
    text, plan = load("trl_sft.sh")
    assert plan.framework == "trl"
    assert plan.micro_batch.value == 4  # the flag, not the recipe's 8
    assert plan.grad_accum.value == 2 and plan.grad_accum.span.file.endswith("trl_recipe.yaml")
    assert plan.peft_method.value == "lora" and plan.lora_r.value == 32
    assert plan.lora_targets.value == ["q_proj", "v_proj"]
    assert at(text, plan.lora_targets.value_span) == '"q_proj", "v_proj"'


def test_fastchat_qlora_with_exported_visible_devices():
    text, plan = load("fastchat_qlora.sh")
    assert plan.gpu_count.value == 4 and at(text, plan.gpu_count.value_span) == "0,1,2,3"
    assert plan.peft_method.value == "qlora" and plan.quant_bits.value == 4
    assert (plan.lora_r.value, plan.lora_alpha.value, plan.lora_dropout.value) == (8, 16, 0.05)
    assert pos(plan.lora_alpha.span) == (3, 15, 3, 30)
    assert plan.seq_len.value == 2048


def test_missing_config_file_on_the_command_line_is_vl014(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("llamafactory-cli train examples/missing.yaml\n")
    plan = parse_document(script.read_text(), str(script), workspace=tmp_path).plan
    issue = next(i for i in plan.issues if i.kind == IssueKind.REFERENCE)
    assert issue.severity == Severity.ERROR and pos(issue.span) == (0, 23, 0, 44)


def test_tokenizer_keeps_exact_word_ranges():
    text = "A=1 torchrun --x=\"a b\" 'c d' $V ${W:-z} $(echo hi) \\\n  e # note\nnext"
    commands, comments = tokenize(text)
    words = [text[w.start : w.end] for w in commands[0].words]
    assert words == ["A=1", "torchrun", '--x="a b"', "'c d'", "$V", "${W:-z}", "$(echo hi)", "e"]
    assert [text[a:b] for a, b in comments] == ["# note"]
    assert [text[w.start : w.end] for w in commands[1].words] == ["next"]


@pytest.mark.parametrize(
    "line,expected",
    [
        ("torchrun --nproc_per_node=gpu train.py --per_device_train_batch_size 2", None),
        ("CUDA_VISIBLE_DEVICES=0,1,2 deepspeed train.py --per_device_train_batch_size 2", 3),
        ("deepspeed --include localhost:0,1@worker2:0,1 train.py --per_device_train_batch_size 2", 2),
        ("NPROC_PER_NODE=8 swift sft --model Qwen/Qwen2.5-7B", 8),
        ("accelerate launch --num_processes=4 train.py --bf16", 4),
    ],
)
def test_gpu_count_sources(tmp_path, line, expected):
    script = tmp_path / "run.sh"
    script.write_text(line + "\n")
    plan = parse_document(script.read_text(), str(script)).plan
    assert (plan.gpu_count.value if plan.gpu_count else None) == expected


def test_a_script_without_suffix_is_recognised_by_its_shebang(tmp_path):
    script = tmp_path / "launch"
    script.write_text("#!/usr/bin/env bash\ntorchrun --nproc_per_node 2 train.py --per_device_train_batch_size 3\n")
    plan = parse_document(script.read_text(), str(script)).plan
    assert plan.format == "shell" and plan.micro_batch.value == 3 and plan.gpu_count.value == 2
    py = tmp_path / "train"
    py.write_text("#!/usr/bin/env python\nfrom trl import SFTConfig\nSFTConfig(per_device_train_batch_size=2)\n")
    assert parse_document(py.read_text(), str(py)).plan.micro_batch.value == 2


def test_lines_skipped_without_tokenizing_never_hide_a_launch(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        'echo "torchrun; not a command"\nmkdir -p out\nLAUNCH=torchrun\n'
        "$LAUNCH --nproc_per_node 2 train.py --per_device_train_batch_size 6\n"
    )
    plan = parse_document(script.read_text(), str(script)).plan
    assert plan.micro_batch.value == 6 and plan.gpu_count.value == 2
    assert plan.micro_batch.span.start_line == 3


def test_a_lone_carriage_return_breaks_the_line_as_editors_count_it(tmp_path):
    from vramlens.formats import parse_document
    from vramlens.plan import text_lines

    text = "torchrun train.py \\\r    --model_name_or_path Qwen/Qwen2.5-14B --per_device_train_batch_size 2\n"
    plan = parse_document(text, str(tmp_path / "run.sh")).plan
    lines = text_lines(text)
    span = plan.model_id.value_span
    assert span.start_line == 1
    assert lines[1][span.start_col : span.end_col] == "Qwen/Qwen2.5-14B"


@pytest.mark.parametrize(
    "name",
    [
        "torchrun_hf.sh",
        "trl_sft.sh",
        "env_continuation.sh",
        "axolotl_train.sh",
        "deepspeed_include.sh",
        "nohup_heredoc.sh",
        "comment_breaks.sh",
    ],
)
def test_a_script_saved_with_lone_carriage_returns_reads_as_its_newline_copy(name):
    """Every line ends in a lone `\\r`: the script is read line by line as the editor shows it, as a CRLF script is
    (a `\\` before a lone `\\r` was an escaped character, so `--flag 4 \\` read as a list ['4', '\\r'] and the
    flags after it as extra arguments)."""
    plain, expected = load(name)
    text = plain.replace("\n", "\r")
    plan = parse_document(text, str(FIXTURES / name), workspace=FIXTURES).plan
    want = {k: (v.value, v.span, v.value_span) for k, v in expected.settings().items()}
    assert {k: (v.value, v.span, v.value_span) for k, v in plan.settings().items()} == want
    assert [(i.message, i.span) for i in plan.issues] == [(i.message, i.span) for i in expected.issues]
