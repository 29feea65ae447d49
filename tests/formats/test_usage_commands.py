"""Scripts that take their settings from the command line: the usage example in the module docstring, or in a
README beside the script, is read as that command line, and the estimate says where the values came from."""

from __future__ import annotations

import shutil
from pathlib import Path

from vramlens.analysis import Settings, analyze
from vramlens.formats import parse_document

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "usage"


def test_docstring_usage_example_is_the_command_line():
    path = FIXTURES / "sft.py"
    text = path.read_text(encoding="utf-8")
    plan = parse_document(text, str(path)).plan
    assert plan.model_id.value == "Qwen/Qwen2-0.5B"
    line = text.split("\n")[plan.model_id.span.start_line]
    assert "--model_name_or_path Qwen/Qwen2-0.5B" in line  # the range is the docstring's line
    assert plan.micro_batch.value == 2 and plan.grad_accum.value == 8 and plan.seq_len.value == 4096
    assert plan.grad_checkpointing.value is True
    assert plan.peft_method is None  # the first example: full training
    assert any("module docstring (line 6)" in n and "1 other example" in n for n in plan.read_notes)
    messages = [i.message for i in plan.issues]
    assert not any(m.startswith("`from_pretrained` is only known") for m in messages)  # the command gives it
    assert any(m.startswith("`dtype` is only known") for m in messages)  # this one it does not


def test_the_assumptions_say_where_the_values_came_from_and_fixes_edit_the_example():
    path = FIXTURES / "sft.py"
    text = path.read_text(encoding="utf-8")
    # a 10 GB GPU: TRL's fused `nll` head lets this full fine-tune of Qwen2-0.5B fit a T4
    a = analyze(text, str(path), Settings(gpu="RTX 3080"))
    assert any("usage example in the module docstring" in x for x in a.resolution.assumptions)
    fit = next(x for f in a.findings if f.rule_id == "VL001" for x in f.fixes if x.id == "smaller-micro-batch")
    lines = text.split("\n")
    assert fit.edits and all("--" in lines[e.span.start_line] for e in fit.edits)  # the example's flags


def test_readme_next_to_the_script(tmp_path: Path):
    folder = tmp_path / "dpo"
    shutil.copytree(FIXTURES / "readme_next", folder)
    script = folder / "train_dpo.py"
    text = script.read_text(encoding="utf-8")
    plan = parse_document(text, str(script), workspace=tmp_path).plan
    assert plan.model_id.value == "Qwen/Qwen2.5-1.5B-Instruct"
    assert Path(plan.model_id.span.file).name == "README.md"
    assert plan.gpu_count.value == 4 and plan.micro_batch.value == 4 and plan.seq_len.value == 1024
    assert any("README.md next to the script" in n for n in plan.read_notes)
    a = analyze(text, str(script), Settings(gpu="T4", workspace=tmp_path))
    assert all(f.span.file == str(script) for f in a.findings)
    assert any(f.rule_id == "VL001" and "HfArgumentParser" in text.split("\n")[f.span.start_line] for f in a.findings)


def test_a_readme_elsewhere_or_for_another_script_is_not_used(tmp_path: Path):
    (tmp_path / "README.md").write_text((FIXTURES / "readme_next" / "README.md").read_text())
    sub = tmp_path / "scripts"
    sub.mkdir()
    script = sub / "train_dpo.py"
    script.write_text((FIXTURES / "readme_next" / "train_dpo.py").read_text())
    assert parse_document(script.read_text(), str(script), workspace=tmp_path).plan.model_id is None
    other = tmp_path / "other.py"
    other.write_text((FIXTURES / "readme_next" / "train_dpo.py").read_text())
    assert parse_document(other.read_text(), str(other), workspace=tmp_path).plan.model_id is None


def test_a_config_the_example_names_but_the_workspace_lacks_is_not_an_error(tmp_path: Path):
    script = tmp_path / "examples" / "scripts" / "dpo.py"
    script.parent.mkdir(parents=True)
    script.write_text(
        '"""\naccelerate launch --config_file examples/accelerate_configs/deepspeed_zero3.yaml '
        "examples/scripts/dpo.py \\\n    --model_name_or_path Qwen/Qwen2-0.5B-Instruct \\\n"
        '    --per_device_train_batch_size 2\n"""\n'
        "from trl import DPOConfig, DPOTrainer, ModelConfig, TrlParser\n"
        "args, model_args = TrlParser((DPOConfig, ModelConfig)).parse_args_and_config()\n"
        "DPOTrainer(model=model_args.model_name_or_path, args=args).train()\n"
    )
    a = analyze(script.read_text(), str(script), Settings(workspace=tmp_path))
    assert a.estimate is not None and a.plan.model_id.value == "Qwen/Qwen2-0.5B-Instruct"
    assert not any(f.severity == "error" for f in a.findings), [(f.rule_id, f.message) for f in a.findings]
    assert any("deepspeed_zero3.yaml" in f.message and "read without it" in f.message for f in a.findings)
