"""Plan changes written back into Python scripts: edit in place, add in the call's layout, re-parse."""

from __future__ import annotations

import difflib
from pathlib import Path

from vramlens.formats import parse_document
from vramlens.formats.render import render_change
from vramlens.text import apply_edits, with_line_ending

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "python"


def render(name: str, changes: dict, text: str | None = None):
    path = FIXTURES / name
    text = text if text is not None else path.read_text(encoding="utf-8")
    plan = parse_document(text, str(path)).plan
    result = render_change(text, plan, changes)
    new = apply_edits(text, result.edits)
    return text, new, result, parse_document(new, str(path)).plan


def diff(old: str, new: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.ndiff(old.split("\n"), new.split("\n")):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


def test_values_read_through_variables_are_replaced_in_the_call():
    old, new, result, plan = render("sft_trl_qlora.py", {"micro_batch": 2, "grad_accum": 32})
    assert result.note is None
    assert (plan.micro_batch.value, plan.grad_accum.value) == (2, 32)
    assert diff(old, new) == (
        ["    per_device_train_batch_size=batch_size,", "    gradient_accumulation_steps=grad_accum,"],
        ["    per_device_train_batch_size=2,", "    gradient_accumulation_steps=32,"],
    )


def test_missing_argument_is_added_one_per_line_after_a_trailing_comma():
    old, new, result, plan = render("sft_trl_qlora.py", {"loss_impl": "fused"})
    assert plan.loss_impl.value == "fused"
    assert diff(old, new) == ([], ["    use_liger_kernel=True,"])
    lines = new.split("\n")
    assert lines[lines.index("    use_liger_kernel=True,") - 1] == "    learning_rate=2e-4,"


def test_missing_argument_without_trailing_comma_and_paren_on_the_last_line():
    old, new, result, plan = render("dpo_config.py", {"optimizer": "adamw_bnb_8bit"})
    assert plan.optimizer.value == "adamw_bnb_8bit"
    assert diff(old, new) == (
        ["    gradient_checkpointing=True)"],
        ["    gradient_checkpointing=True,", '    optim="adamw_bnb_8bit")'],
    )


def test_inline_call_gets_inline_arguments_in_its_quote_style():
    old, new, result, plan = render("hf_inline_args.py", {"grad_checkpointing": True, "optimizer": "paged_adamw_8bit"})
    assert plan.grad_checkpointing.value is True and plan.optimizer.value == "paged_adamw_8bit"
    assert diff(old, new) == (
        ["args = Seq2SeqTrainingArguments('out', per_device_train_batch_size=4, fp16=True, optim='adafactor')"],
        [
            "args = Seq2SeqTrainingArguments('out', per_device_train_batch_size=4, fp16=True, "
            "optim='paged_adamw_8bit', gradient_checkpointing=True)"
        ],
    )


def test_unknown_value_is_replaced_not_duplicated():
    old, new, result, plan = render("kwargs_splat.py", {"micro_batch": 2})
    assert plan.micro_batch.value == 2
    assert diff(old, new) == (
        ["    per_device_train_batch_size=args.batch_size,"],
        ["    per_device_train_batch_size=2,"],
    )


def test_alloc_conf_goes_before_the_first_torch_import_with_import_os():
    old, new, result, plan = render("alloc_insert.py", {"alloc_conf": "expandable_segments:True"})
    assert plan.alloc_conf.value == "expandable_segments:True"
    lines = new.split("\n")
    i = lines.index("import torch")
    assert lines[i - 2 : i] == ["import os", 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"']
    assert lines[:4] == old.split("\n")[:4]  # shebang, docstring, __future__ stay first
    assert diff(old, new)[0] == []


def test_alloc_conf_is_edited_in_place_when_present():
    old, new, result, plan = render("env_update.py", {"alloc_conf": "expandable_segments:True"})
    assert plan.alloc_conf.value == "expandable_segments:True"
    assert diff(old, new) == (
        ['environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,max_split_size_mb:256"'],
        ['environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"'],
    )


def test_lora_arguments_change_in_the_lora_config():
    old, new, result, plan = render(
        "sft_trl_qlora.py", {"peft_method": "lora", "lora_r": 64, "lora_targets": ["all-linear"]}
    )
    assert plan.lora_r.value == 64 and plan.lora_targets.value == ["all-linear"]
    assert diff(old, new) == (
        ["    r=16,", '    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],'],
        ["    r=64,", '    target_modules="all-linear",'],
    )


def test_qlora_on_a_trl_script_adds_a_peft_config_and_quantization():
    text = (
        (FIXTURES / "dpo_config.py")
        .read_text()
        .replace(
            'trainer = DPOTrainer(model="HuggingFaceH4/mistral-7b-sft-beta"',
            "from transformers import AutoModelForCausalLM\n"
            'model = AutoModelForCausalLM.from_pretrained("HuggingFaceH4/mistral-7b-sft-beta")\n'
            "trainer = DPOTrainer(model=model",
        )
    )
    old, new, result, plan = render(
        "dpo_config.py",
        {"peft_method": "qlora", "quant_bits": 4, "lora_r": 16, "lora_targets": ["all-linear"]},
        text=text,
    )
    assert result.note is None
    assert plan.peft_method.value == "lora" and plan.lora_r.value == 16
    assert plan.quant_bits.value == 4 and plan.quant_type.value == "nf4"
    assert "from peft import LoraConfig" in new and "from transformers import BitsAndBytesConfig" in new
    compile(new, "x.py", "exec")


def test_fused_optimizer_in_a_plain_loop_replaces_foreach():
    text = (FIXTURES / "custom_loop.py").read_text().replace("fused=True", "foreach=True")
    old, new, result, plan = render("custom_loop.py", {"optimizer_impl": "fused"}, text=text)
    assert plan.optimizer_impl.value == "fused"
    assert diff(old, new)[1] == ["optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)"]


def test_8bit_optimizer_for_a_constructed_optimizer_is_a_note_not_an_edit():
    old, new, result, plan = render("custom_loop.py", {"optimizer": "adamw_bnb_8bit"})
    assert result.edits == [] and "torch.optim.AdamW" in result.note and new == old


def test_gradient_checkpointing_in_a_plain_loop_is_enabled_after_loading():
    text = (
        (FIXTURES / "custom_loop.py")
        .read_text()
        .replace('model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})\n', "")
    )
    old, new, result, plan = render("custom_loop.py", {"grad_checkpointing": True}, text=text)
    assert plan.grad_checkpointing.value is True
    assert diff(old, new) == ([], ["model.gradient_checkpointing_enable()"])


def test_unicode_lines_are_edited_at_character_columns_and_added_after_the_last_argument():
    old, new, result, plan = render("unicode_columns.py", {"grad_accum": 9, "micro_batch": 5, "packing": True})
    assert (plan.grad_accum.value, plan.micro_batch.value, plan.packing.value) == (9, 5, True)
    assert diff(old, new)[1] == [
        'cfg = SFTConfig(output_dir="ausgabe/größe", per_device_train_batch_size=5,',
        '                run_name="模型", gradient_accumulation_steps=9,',
        '                logging_dir="🚀🚀", max_length=8192, packing=True)',
    ]


def test_a_script_whose_lines_end_in_a_lone_carriage_return_gets_the_same_edits():
    """Added arguments in a `\\r` file follow the same lines as in its `\\n` copy (Python and the editor both break
    lines at a lone `\\r`)."""
    changes = {"optimizer": "adamw_bnb_8bit", "loss_impl": "fused", "micro_batch": 2}
    for name in ("dpo_config.py", "sft_trl_qlora.py", "unicode_columns.py"):
        _, expected, _, _ = render(name, changes)
        plain = (FIXTURES / name).read_text(encoding="utf-8")
        text = plain.replace("\n", "\r")
        plan = parse_document(text, str(FIXTURES / name)).plan
        edits = render_change(text, plan, changes).edits
        new = apply_edits(text, [type(e)(span=e.span, new_text=with_line_ending(e.new_text, "\r")) for e in edits])
        assert new.replace("\r", "\n") == expected, name


def test_an_import_added_after_a_last_line_without_a_line_break_ends_that_line_first():
    # the file's last line is its last import, with no line break after it: the added import must not be placed
    # on a line past the end of the file (found by the long fuzz profile)
    text = (
        'trainer = OnlineDPOTrainer(model="Qwen/Qwen2.5-1.5B-Instruct", args=args)\n'
        'args = OnlineDPOConfig(output_dir="out", per_device_train_batch_size=4, bf16=True)\n'
        "from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer"
    )
    path = FIXTURES / "online_dpo_no_final_newline.py"
    plan = parse_document(text, str(path)).plan
    result = render_change(
        text, plan, {"peft_method": "lora", "lora_r": 16, "lora_alpha": 32, "lora_targets": ["all-linear"]}
    )
    last = len(text.split("\n")) - 1
    assert all(e.span.start_line <= last and e.span.end_line <= last for e in result.edits), result.edits
    new = apply_edits(text, result.edits)
    assert new.endswith(
        "from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer\nfrom peft import LoraConfig\n"
    ), new
    assert parse_document(new, str(path)).plan.peft_method.value == "lora"
