"""Plan changes written back into launch scripts: values in place, new flags in the command's layout."""

from __future__ import annotations

from pathlib import Path

from test_python_render import diff  # noqa: E402  (same helper)
from vramlens.formats import parse_document
from vramlens.formats.render import render_change
from vramlens.text import apply_edits, with_line_ending

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "shell"


def render(name: str, changes: dict, text: str | None = None):
    path = FIXTURES / name
    text = text if text is not None else path.read_text(encoding="utf-8")
    plan = parse_document(text, str(path), workspace=FIXTURES).plan
    result = render_change(text, plan, changes)
    new = apply_edits(text, result.edits)
    return text, new, result, parse_document(new, str(path), workspace=FIXTURES).plan


def test_values_are_replaced_in_place():
    old, new, result, plan = render("torchrun_hf.sh", {"micro_batch": 4, "grad_accum": 8})
    assert (plan.micro_batch.value, plan.grad_accum.value) == (4, 8)
    assert diff(old, new) == (
        ["    --per_device_train_batch_size 8 \\", "    --gradient_accumulation_steps 4 \\"],
        ["    --per_device_train_batch_size 4 \\", "    --gradient_accumulation_steps 8 \\"],
    )


def test_new_flag_keeps_a_trailing_backslash_on_the_last_line():
    old, new, result, plan = render("torchrun_hf.sh", {"loss_impl": "fused"})
    assert plan.loss_impl.value == "fused"
    assert diff(old, new) == ([], ["    --use_liger_kernel True \\"])
    assert new.split("\n")[-3:] == ["    --output_dir out \\", "    --use_liger_kernel True \\", ""]


def test_new_flag_on_a_continued_command_without_trailing_backslash():
    old, new, result, plan = render("accelerate_config.sh", {"optimizer": "adamw_bnb_8bit"})
    assert plan.optimizer.value == "adamw_bnb_8bit"
    assert diff(old, new) == (
        ["  --gradient_checkpointing"],
        ["  --gradient_checkpointing \\", "  --optim adamw_bnb_8bit"],
    )


def test_new_flag_on_a_single_line_command():
    old, new, result, plan = render("deepspeed_missing.sh", {"grad_checkpointing": True})
    assert plan.grad_checkpointing.value is True
    assert new == old.replace(
        "--per_device_train_batch_size 4", "--per_device_train_batch_size 4 --gradient_checkpointing True"
    )


def test_unknown_value_is_replaced_not_duplicated():
    old, new, result, plan = render("variables_unknown.sh", {"grad_accum": 4})
    assert plan.grad_accum.value == 4
    assert diff(old, new) == (
        ["    --gradient_accumulation_steps $(expr 16 / $nproc_per_node) \\"],
        ["    --gradient_accumulation_steps 4 \\"],
    )


def test_quotes_are_kept_when_a_value_changes():
    old, new, result, plan = render("env_continuation.sh", {"optimizer": "paged_adamw_8bit"})
    assert plan.optimizer.value == "paged_adamw_8bit"
    assert diff(old, new) == (["    --optim='adamw_bnb_8bit' \\"], ["    --optim='paged_adamw_8bit' \\"])


def test_expandable_segments_export_goes_before_the_command_and_its_env_prefixes():
    old, new, result, plan = render("torchrun_hf.sh", {"alloc_conf": "expandable_segments:True"})
    assert plan.alloc_conf.value == "expandable_segments:True"
    assert diff(old, new) == ([], ["export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"])
    assert new.split("\n")[2] == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def test_existing_env_prefix_is_edited_with_its_quotes():
    old, new, result, plan = render("swift_sft.sh", {"alloc_conf": "expandable_segments:True,max_split_size_mb:512"})
    assert plan.alloc_conf.value == "expandable_segments:True,max_split_size_mb:512"
    assert diff(old, new)[1] == ["PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True,max_split_size_mb:512' \\"]


def test_negated_bare_flag_turns_back_on():
    old, new, result, plan = render("python_m_dist_run.sh", {"grad_checkpointing": True})
    assert plan.grad_checkpointing.value is True
    assert new == old.replace("--no_gradient_checkpointing", "--gradient_checkpointing")


def test_llamafactory_overrides_use_key_value_words():
    old, new, result, plan = render("llamafactory_cli.sh", {"micro_batch": 1, "grad_accum": 16})
    assert (plan.micro_batch.value, plan.grad_accum.value) == (1, 16)
    assert plan.grad_accum.span.file.endswith("llamafactory_cli.sh")  # the override now wins over the YAML
    assert diff(old, new) == (
        ["    per_device_train_batch_size=2 \\", "    cutoff_len=4096"],
        ["    per_device_train_batch_size=1 \\", "    cutoff_len=4096 \\", "    gradient_accumulation_steps=16"],
    )


def test_torchtune_optimizer_becomes_a_component_override():
    old, new, result, plan = render("tune_packaged.sh", {"optimizer": "paged_adamw_8bit"})
    assert plan.optimizer.value == "bitsandbytes.optim.PagedAdamW8bit"
    assert new.rstrip("\n").endswith("optimizer._component_=bitsandbytes.optim.PagedAdamW8bit")


def test_axolotl_flags_go_before_the_launcher_arguments():
    old, new, result, plan = render("axolotl_train.sh", {"grad_accum": 4})
    assert plan.grad_accum.value == 4 and plan.gpu_count.value == 2
    assert new == old.replace(" -- ", " --gradient-accumulation-steps 4 -- ")


def test_swift_lora_settings_use_swift_names():
    old, new, result, plan = render("swift_sft.sh", {"lora_r": 16, "lora_targets": ["all-linear"]})
    assert plan.lora_r.value == 16
    assert diff(old, new) == (["    --lora_rank 8 \\"], ["    --lora_rank 16 \\"])


def test_qlora_on_a_trl_command():
    old, new, result, plan = render("trl_sft.sh", {"peft_method": "qlora", "quant_bits": 4})
    assert plan.quant_bits.value == 4
    assert diff(old, new)[1][-1] == "    --load_in_4bit"


def test_deepspeed_values_are_a_note():
    text = (FIXTURES / "deepspeed_include.sh").read_text()
    plan = parse_document(text, str(FIXTURES / "deepspeed_include.sh"), workspace=FIXTURES).plan
    result = render_change(text, plan, {"zero_stage": 2})
    assert result.edits == [] and result.note


def test_a_script_saved_with_lone_carriage_returns_gets_the_edits_of_its_newline_copy():
    changes = {"micro_batch": 2, "loss_impl": "fused", "alloc_conf": "expandable_segments:True"}
    for name in ("torchrun_hf.sh", "trl_sft.sh", "qlora_trailing_eof.sh"):
        _, expected, _, _ = render(name, changes)
        text = (FIXTURES / name).read_text(encoding="utf-8").replace("\n", "\r")
        plan = parse_document(text, str(FIXTURES / name), workspace=FIXTURES).plan
        edits = render_change(text, plan, changes).edits
        new = apply_edits(text, [type(e)(span=e.span, new_text=with_line_ending(e.new_text, "\r")) for e in edits])
        assert "\n" not in new and new.replace("\r", "\n") == expected, name
