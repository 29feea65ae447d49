"""Jupyter notebooks: code cells as Python, `!` lines and `%%bash` cells as shell, every position in its cell."""

from __future__ import annotations

import json
from pathlib import Path

from vramlens.analysis import Settings, analyze
from vramlens.formats import parse_document
from vramlens.formats.notebook import CellText, cell_span, from_json, views

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "notebooks"


def notebook(*cells: tuple[str, str], language: str = "python") -> str:
    return json.dumps(
        {
            "cells": [
                {"cell_type": kind, "metadata": {}, "source": src.splitlines(keepends=True)} for kind, src in cells
            ],
            "metadata": {"language_info": {"name": language}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def load(name: str):
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8")
    plan = parse_document(text, str(path)).plan
    return from_json(text), plan


def test_colab_unsloth_notebook_reads_the_trainer_cell():
    cells, plan = load("unsloth_llama3_1_8b_colab.ipynb")
    assert plan.format == "notebook" and plan.framework == "unsloth"
    assert plan.model_id.value == "unsloth/Meta-Llama-3.1-8B"
    assert plan.micro_batch.value == 2 and plan.grad_accum.value == 4 and plan.optimizer.value == "adamw_8bit"
    assert plan.quant_bits.value == 4 and plan.lora_r.value == 16 and plan.seq_len.value == 2048
    cell, span = cell_span(cells, plan.micro_batch.span)
    assert cells.numbers[cell] == 6  # markdown cells count, as the notebook shows them
    assert span.start_line == 12 and span.start_col == 8  # `per_device_train_batch_size = 2` in that cell


def test_shell_lines_and_bash_cells():
    _, plan = load("bash_cell_accelerate.ipynb")
    assert plan.format == "notebook" and plan.model_id.value == "Qwen/Qwen2.5-7B"
    assert plan.micro_batch.value == 8 and plan.seq_len.value == 4096 and plan.gpu_count.value == 1
    _, plan = load("bang_command.ipynb")
    assert plan.model_id.value == "Qwen/Qwen2-0.5B" and plan.micro_batch.value == 64


def test_views_keep_lines_and_blank_what_python_cannot_read():
    cells = CellText.join(
        ["%pip install trl\nx = 1\n!nvidia-smi\nfiles = !ls\ny = 2", "%%bash\ntorchrun t.py", "def f(:"]
    )
    py, sh = views(cells)
    assert len(py.split("\n")) == len(sh.split("\n")) == len(cells.text.split("\n"))
    assert "x = 1" in py and "y = 2" in py and "pip" not in py and "ls" not in py and "torchrun" not in py
    assert "def f" not in py  # a cell that does not parse is passed over
    assert " nvidia-smi" in sh and "torchrun t.py" in sh and "%%bash" not in sh
    assert CellText.parse(cells.text).starts == cells.starts


def test_other_languages_and_broken_json_are_not_configs():
    r = notebook(("code", "library(ggplot2)"), language="R")
    assert parse_document(r, "x.ipynb").plan is None
    assert parse_document("{not json", "x.ipynb").plan is None
    assert parse_document(notebook(("markdown", "# hi")), "x.ipynb").plan is None


def test_a_script_written_by_writefile_takes_the_command_line_that_runs_it():
    cells, plan = load("writefile_then_launch.ipynb")
    assert plan.model_id.value == "Qwen/Qwen2.5-3B" and plan.micro_batch.value == 4 and plan.gpu_count.value == 2
    assert any("cell 3" in n for n in plan.read_notes)


def test_nbformat_3_worksheets():
    text = json.dumps(
        {
            "worksheets": [
                {
                    "cells": [
                        {
                            "cell_type": "code",
                            "input": [
                                "from transformers import TrainingArguments\n",
                                "args = TrainingArguments(output_dir='o', per_device_train_batch_size=3)\n",
                            ],
                        }
                    ]
                }
            ],
            "metadata": {},
            "nbformat": 3,
        }
    )
    plan = parse_document(text, "old.ipynb").plan
    assert plan is not None and plan.micro_batch.value == 3


def test_check_reports_positions_in_cells():
    path = FIXTURES / "unsloth_llama3_1_8b_colab.ipynb"
    text = path.read_text(encoding="utf-8").replace(
        "per_device_train_batch_size = 2,", "per_device_train_batch_size = 32,"
    )
    a = analyze(text, str(path), Settings(gpu="T4"))
    cells = CellText.parse(from_json(text).text)
    oom = next(f for f in a.findings if f.rule_id == "VL001")
    cell, span = cell_span(cells, oom.span)
    assert cells.numbers[cell] == 6 and (span.start_line, span.start_col) == (12, 8)  # the micro-batch line


def test_a_cell_whose_own_language_is_shell_is_read_as_shell():
    text = json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "metadata": {"vscode": {"languageId": "shellscript"}},
                    "source": [
                        "torchrun --nproc_per_node 2 train.py \\\n",
                        "  --model_name_or_path Qwen/Qwen2.5-0.5B \\\n",
                        "  --per_device_train_batch_size 16\n",
                    ],
                }
            ],
            "metadata": {"language_info": {"name": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )
    cells = from_json(text)
    assert cells.languages == ["shellscript"] and CellText.parse(cells.text).languages == ["shellscript"]
    plan = parse_document(text, "x.ipynb").plan
    assert plan.micro_batch.value == 16 and plan.gpu_count.value == 2


def test_env_magic_sets_the_allocator_and_visible_gpus():
    text = notebook(
        (
            "code",
            "%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n%env CUDA_VISIBLE_DEVICES 0,1\n"
            "!torchrun --nproc_per_node 2 train.py --model_name_or_path Qwen/Qwen2.5-0.5B "
            "--per_device_train_batch_size 4",
        )
    )
    plan = parse_document(text, "x.ipynb").plan
    assert plan.alloc_conf.value == "expandable_segments:True" and plan.alloc_conf.value_span.start_col == 29


def _fixed(text: str, gpu: str, rule: str, title_start: str) -> tuple[str, str]:
    """Apply the fix of `rule` whose title starts with `title_start` to a notebook's cell text:
    (cell text before, after)."""
    from vramlens.text import apply_edits

    a = analyze(text, "x.ipynb", Settings(gpu=gpu))
    finding = next(f for f in a.findings if f.rule_id == rule)
    fix = next(x for x in finding.fixes if x.title.startswith(title_start))
    before = from_json(text).text
    return before, apply_edits(before, fix.edits)


def _changed_lines(before: str, after: str) -> list[str]:
    old = before.split("\n")
    return [line for line in after.split("\n") if line not in old]


ENV_SHELL = (
    "%env PYTORCH_CUDA_ALLOC_CONF={conf}\n"
    "!torchrun --nproc_per_node 1 trl/scripts/sft.py --model_name_or_path Qwen/Qwen2.5-7B \\\n"
    "    --per_device_train_batch_size 16 --max_length 4096 --bf16 --use_peft --lora_r 16\n"
)
ENV_PYTHON = (
    "%env PYTORCH_CUDA_ALLOC_CONF={conf}\nfrom trl import SFTConfig, SFTTrainer\n",
    "args = SFTConfig(per_device_train_batch_size=16, max_length=4096, bf16=True)\n"
    "trainer = SFTTrainer(model='Qwen/Qwen2.5-7B', args=args, train_dataset=ds)\n",
)


def test_fixes_of_the_allocator_edit_the_value_of_its_env_line():
    # shell view (`!torchrun` lines): a misspelt option is corrected where it is written
    before, after = _fixed(
        notebook(("code", ENV_SHELL.format(conf="expandable_segmets:True"))),
        "A10G",
        "VL013",
        "Replace with `expandable_segments`",
    )
    assert _changed_lines(before, after) == ["%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    assert len(after.split("\n")) == len(before.split("\n"))
    # adding expandable segments keeps the options already set, on the same `%env` line (no export, no os.environ)
    for text in (
        notebook(("code", ENV_SHELL.format(conf="garbage_collection_threshold:0.6"))),
        notebook(*(("code", src.format(conf="garbage_collection_threshold:0.6")) for src in ENV_PYTHON)),
    ):
        before, after = _fixed(text, "A10G", "VL004", "Add PYTORCH_CUDA_ALLOC_CONF")
        assert _changed_lines(before, after) == [
            "%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,garbage_collection_threshold:0.6"
        ], after
        assert len(after.split("\n")) == len(before.split("\n"))
        plan = parse_document(after, "x.ipynb").plan
        assert plan.alloc_conf.value == "expandable_segments:True,garbage_collection_threshold:0.6"


def test_the_versions_its_pip_installs_pin_are_the_run_s(tmp_path):
    """`%pip install "transformers==4.46.3"` in a notebook: the run's transformers, named with its cell."""
    text = notebook(
        ("markdown", "pip install transformers==4.57.6  (a markdown cell is not run)"),
        ("code", '%pip install -q "transformers==4.46.3" "peft==0.13.2" datasets\n!pip install "trl==0.12.*"'),
        (
            "code",
            "from transformers import AutoModelForCausalLM, TrainingArguments\n"
            'model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")\n'
            'args = TrainingArguments(output_dir="out", per_device_train_batch_size=1, bf16=True)\n',
        ),
    )
    path = tmp_path / "train.ipynb"
    path.write_text(text, encoding="utf-8")
    a = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False))
    assert a.plan is not None and a.plan.installs == {
        "transformers": ("4.46.3", "`pip install` in cell 2"),
        "peft": ("0.13.2", "`pip install` in cell 2"),
        "trl": ("0.12", "`pip install` in cell 2"),
    }
    said = "transformers 4.46.3 (`pip install` in cell 2)"
    assert any(str(x).startswith(said) for x in a.resolution.assumptions), a.resolution.assumptions
