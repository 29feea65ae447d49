"""README launch commands: the first shell block that trains, in the Markdown file's coordinates."""

from __future__ import annotations

from pathlib import Path

from test_python_calls import at, pos  # noqa: E402  (same helpers)
from vramlens.formats import parse_document
from vramlens.formats.render import render_change
from vramlens.text import apply_edits, with_line_ending

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "shell"


def load(name: str, text: str | None = None):
    path = FIXTURES / name
    text = text if text is not None else path.read_text(encoding="utf-8")
    return text, parse_document(text, str(path)).plan


def test_console_block_with_prompts_continuations_and_output():
    text, plan = load("README_console.md")
    assert plan.format == "markdown"
    assert plan.model_id.value == "Qwen/Qwen2.5-1.5B"  # the first block (pip install) does not train
    assert plan.micro_batch.value == 8  # the console block, not the torchrun one below
    assert pos(plan.micro_batch.value_span) == (13, 36, 13, 37)
    assert at(text, plan.micro_batch.span) == "--per_device_train_batch_size 8"
    assert plan.grad_checkpointing.value is True
    assert plan.gpu_count.value == 1 and at(text, plan.gpu_count.span) == "CUDA_VISIBLE_DEVICES=0"
    assert plan.source_file == str(FIXTURES / "README_console.md")


def test_indented_block_in_a_list_and_exports_of_other_blocks_do_not_carry_over():
    text, plan = load("README_bash.md")
    assert plan.model_id.value == "google/gemma-2-2b"
    assert plan.gpu_count.value == 2 and at(text, plan.gpu_count.span) == "--num_processes 2"
    assert plan.amp_dtype.value == "bf16" and at(text, plan.amp_dtype.value_span) == "True"
    assert plan.alloc_conf is None  # exported in a separate block


def test_markdown_without_a_training_command_is_not_a_config():
    _, plan = load("README_plain.md", "# Title\n\n```bash\npip install vramlens\n```\n\n```python\nprint(1)\n```\n")
    assert plan is None


def test_edits_land_in_the_markdown_file_with_prompts():
    text, plan = load("README_console.md")
    result = render_change(
        text, plan, {"micro_batch": 4, "alloc_conf": "expandable_segments:True", "loss_impl": "fused"}
    )
    new = apply_edits(text, result.edits)
    lines = new.split("\n")
    assert "$ export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in lines
    assert lines[lines.index("$ export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") + 1].startswith(
        "$ CUDA_VISIBLE_DEVICES=0 python train.py"
    )
    assert ">     --per_device_train_batch_size 4 \\" in lines
    assert lines[lines.index(">     --gradient_checkpointing \\") + 1] == ">     --use_liger_kernel True"
    _, again = load("README_console.md", new)
    assert again.micro_batch.value == 4 and again.alloc_conf.value == "expandable_segments:True"
    assert again.loss_impl.value == "fused"


def test_new_flag_in_an_indented_block_keeps_its_indentation():
    text, plan = load("README_bash.md")
    result = render_change(text, plan, {"grad_checkpointing": True})
    new = apply_edits(text, result.edits)
    assert "       --per_device_train_batch_size 4 \\\n       --gradient_checkpointing True\n   ```" in new
    _, again = load("README_bash.md", new)
    assert again.grad_checkpointing.value is True


def test_a_lone_carriage_return_breaks_a_line_as_in_the_editor():
    """A `\\r` on its own is a line break for the editor (and LSP); the block's spans count it too (found by the
    long fuzz profile: the batch size was placed a line too high)."""
    text = (
        "\rSetup:\n\n   ```shell\n   accelerate launch --num_processes 2 train_sft.py \\\n"
        "       --model_name_or_path google/gemma-2-2b \\\n       --per_device_train_batch_size 4\n   ```\n"
    )
    plan = parse_document(text, "README.md").plan
    assert at(text, plan.micro_batch.span) == "--per_device_train_batch_size 4"


def test_edits_in_a_markdown_file_whose_lines_end_in_a_lone_carriage_return():
    """The same edits as in the `\\n` file, line for line: a new flag keeps the console block's `> ` prompt (the
    prompt was looked up on a line counted with `\\n` only, so the flag came out without it)."""
    plain, plan = load("README_console.md")
    changes = {"micro_batch": 4, "alloc_conf": "expandable_segments:True", "loss_impl": "fused"}
    expected = apply_edits(plain, render_change(plain, plan, changes).edits)
    text = plain.replace("\n", "\r")
    _, plan = load("README_console.md", text)
    assert plan.micro_batch.value == 8 and at(text, plan.micro_batch.span) == "--per_device_train_batch_size 8"
    edits = render_change(text, plan, changes).edits
    new = apply_edits(text, [type(e)(span=e.span, new_text=with_line_ending(e.new_text, "\r")) for e in edits])
    assert "\n" not in new
    assert new.replace("\r", "\n") == expected
    assert ">     --use_liger_kernel True" in new.split("\r")
