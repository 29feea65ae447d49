"""Framework files that name no model, read for what they are: a script that prepares data, merges checkpoints or
serves a model is not a training run (VL018); a file that only sets variables for a launch script is not a run
itself; a launch line that names no model says where the model would come from. Fixtures copied unchanged from
the frameworks' repositories (see the SOURCE note beside each)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MEGATRON_MAIN = FIXTURES / "megatron" / "Megatron-LM-d98e8a64"  # NVIDIA/Megatron-LM main, commit d98e8a64
MEGATRON_R08 = FIXTURES / "megatron" / "Megatron-LM-core_r0.8.0"  # tag core_r0.8.0, commit baf94af3
TRL_0_19 = FIXTURES / "trl" / "v0.19.1"  # huggingface/trl tag v0.19.1, commit accf7383
TRL_0_12 = FIXTURES / "trl" / "v0.12.2"  # huggingface/trl tag v0.12.2, commit 4c71daf4
TRL_MAIN = FIXTURES / "trl" / "f2cd5771"  # huggingface/trl main, commit f2cd5771


def _analyze(path: Path, root: Path):
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=root, model_lookup=False))


def _not_training(a) -> str:
    notes = [f.message for f in a.findings if f.rule_id == "VL018"]
    assert a.estimate is None and notes, (a.error, [f.message for f in a.findings])
    return notes[0]


@pytest.mark.parametrize(
    "root, path, runs",
    [
        # `MCORE_MISTRAL=<path_to_mcore_mistral_model_folder>` … then `python examples/multimodal/
        # combine_state_dicts.py`: the placeholder's `>` has no target on its line, so the next line is a command
        (MEGATRON_R08, "examples/multimodal/combine_mistral_clip.sh", "combine_state_dicts.py"),
        # `python3 tools/preprocess_data.py --input $1 … --tokenizer-type GPT2BPETokenizer`: tokenizes a corpus
        (MEGATRON_MAIN, "examples/academic_paper_scripts/detxoify_lm/annotations/preprocess.sh", "preprocess_data.py"),
        # `WOW_DATA_FOLDER=<PATH_OF_WIZARD_OF_WIKIPEDIA_DATA_FOLDER>` … `python ${DIR}/tasks/msdp/preprocessing.py`
        (MEGATRON_MAIN, "examples/academic_paper_scripts/msdp/data_processing.sh", "preprocessing.py"),
    ],
)
def test_megatron_scripts_that_prepare_data_or_merge_checkpoints_are_not_training(root: Path, path: str, runs: str):
    a = _analyze(root / "not_training" / path, root / "not_training")
    assert f"`{runs}`" in _not_training(a)


def test_a_file_that_only_sets_variables_is_settings_for_a_launch_script():
    # conf/moonshotai/kimi_k2_instruct.sh: HF_MODEL_CKPT=…, TP=8, ETP=1, EP=64 — what conf/arguments.sh sources as
    # conf/${MLM_MODEL_CFG}.sh; it runs nothing
    conf = MEGATRON_MAIN / "not_training" / "examples" / "post_training" / "modelopt" / "conf" / "moonshotai"
    note = _not_training(_analyze(conf / "kimi_k2_instruct.sh", MEGATRON_MAIN / "not_training"))
    assert "a file of settings (`HF_MODEL_CKPT`, `TP`, `ETP`, `EP`)" in note and "runs no command" in note
    # … but one whose variable holds a command line's flags (MLM_EXTRA_ARGS="--decoder-first-pipeline-num-layers 3
    # …") is part of a launch, and not called a settings file
    a = _analyze(conf / "kimi_k2_instruct_export.sh", MEGATRON_MAIN / "not_training")
    assert not any(f.rule_id == "VL018" for f in a.findings)


@pytest.mark.parametrize(
    "path, name",
    [
        (TRL_0_19 / "not_training" / "trl" / "scripts" / "vllm_serve.py", "vllm_serve.py"),
        (TRL_0_12 / "not_training" / "examples" / "scripts" / "chat.py", "chat.py"),
    ],
)
def test_a_python_script_named_for_serving_or_chat_with_no_trainer_is_not_training(path: Path, name: str):
    note = _not_training(_analyze(path, path.parents[2]))
    assert f"`{name}`" in note and "calls no trainer" in note


@pytest.mark.parametrize(
    "page, script, line",
    [
        # "```bash\nCUDA_VISIBLE_DEVICES=4,5,6,7 accelerate launch train.py\n```"
        ("docs_source_speeding_up_training.md", "train.py", 67),
        # "accelerate launch --multi_gpu --num_machines 1  --num_processes 8 my_accelerate_script.py"
        ("docs_source_using_llama_models.md", "my_accelerate_script.py", 27),
    ],
)
def test_a_launch_of_a_script_not_in_the_workspace_says_the_model_is_that_scripts(page: str, script: str, line: int):
    a = _analyze(TRL_0_19 / page, TRL_0_19)
    assert a.estimate is None and "does not name a model" in a.error
    assert f"`{script}`, the script it runs, is not in the workspace" in a.error and f"(line {line})" in a.error


def test_a_launch_of_a_trl_script_without_its_model_argument_names_the_argument(tmp_path: Path):
    # trl/scripts/grpo.py parses TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig)): the model is
    # `--model_name_or_path`, which this line does not give
    shutil.copytree(TRL_MAIN / "trl", tmp_path / "trl")
    run = tmp_path / "run.sh"
    run.write_text("accelerate launch trl/scripts/grpo.py --dataset_name trl-lib/tldr\n", encoding="utf-8")
    a = _analyze(run, tmp_path)
    assert a.estimate is None and "does not name a model" in a.error
    assert "`model` is a command-line argument of `grpo.py` (`--model_name_or_path`, TRL's `ModelConfig`)" in a.error
    # given, the model is read from it
    run.write_text(
        "accelerate launch trl/scripts/grpo.py --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name trl-lib/tldr\n",
        encoding="utf-8",
    )
    a = _analyze(run, tmp_path)
    assert a.plan.model_id.value == "Qwen/Qwen2.5-0.5B"
    assert not any("command-line argument of `grpo.py`" in i.message for i in a.plan.issues)


@pytest.mark.parametrize("name", ["llama3.yaml", "llama3_lora_sft.yaml", "llava1_5.yaml"])
def test_a_llamafactory_model_and_template_with_nothing_to_train_on_is_an_inference_config(name: str):
    # LLaMA-Factory v0.8.3 examples/inference/*.yaml: `model_name_or_path` and `template` (with an adapter, or
    # `visual_inputs`), no `stage`, `dataset` or `output_dir`: examples/README.md runs them with
    # `llamafactory-cli chat`
    root = FIXTURES / "llamafactory" / "v0.8.3" / "not_training"
    note = _not_training(_analyze(root / "examples" / "inference" / name, root))
    assert "LLaMA-Factory inference config" in note


def test_a_launch_that_gives_the_models_sizes_gets_no_note_about_the_script(tmp_path: Path):
    # Megatron-LM core_v0.13.0 examples/retro/train_retro_2b_distributed.sh: `torchrun … pretrain_retro.py
    # ${RETRO_MODEL_ARGS[@]} …`, RETRO_MODEL_ARGS=(--num-layers 32 --hidden-size 2048 --num-attention-heads 32): the
    # model is its sizes, not something pretrain_retro.py loads
    run = tmp_path / "train.sh"
    run.write_text(
        "torchrun --nproc_per_node 8 pretrain_retro.py --num-layers 32 --hidden-size 2048 --num-attention-heads 32\n",
        encoding="utf-8",
    )
    a = _analyze(run, tmp_path)
    assert not any("the script it runs, is not in the workspace" in i.message for i in a.plan.issues)


def test_a_llamafactory_v1_export_config_is_not_training():
    # LLaMA-Factory v0.9.5 examples/v1/train_lora/export_lora.yaml: `model` and `peft_config: {name: lora,
    # adapter_name_or_path, export_dir, …}`, read by `llamafactory-cli merge` (src/llamafactory/v1/launcher.py)
    root = FIXTURES / "llamafactory" / "v0.9.5" / "not_training"
    note = _not_training(_analyze(root / "examples" / "v1" / "train_lora" / "export_lora.yaml", root))
    assert "LLaMA-Factory v1 merge/export config" in note


def test_a_model_argument_given_a_run_time_value_is_not_called_missing(tmp_path: Path):
    # `--model_name_or_path $MODEL` with MODEL unset: the line gives the model, its value is only known at run time
    shutil.copytree(TRL_MAIN / "trl", tmp_path / "trl")
    run = tmp_path / "run.sh"
    run.write_text("accelerate launch trl/scripts/grpo.py --model_name_or_path $MODEL\n", encoding="utf-8")
    a = _analyze(run, tmp_path)
    assert a.plan.model_id is None
    assert not any("does not give it" in i.message for i in a.plan.issues)


def test_a_docstring_usage_example_after_a_lone_carriage_return_is_placed_on_its_own_line(tmp_path: Path):
    """A lone \\r ends a line for the editor (LSP) and for Python's own tokenizer: the spans of a module docstring's
    usage example count it, so the note about the command points at the command's line, not the one above it."""
    text = "\r" + (TRL_MAIN / "examples" / "scripts" / "openenv" / "echo.py").read_text(encoding="utf-8")
    path = tmp_path / "echo.py"
    path.write_text(text, encoding="utf-8", newline="")
    a = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False))
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    spans = [i.span for i in a.plan.issues if i.span is not None and i.span.file == str(path)]
    assert spans
    for span in spans:
        assert span.end_col <= len(lines[span.end_line]), (span, lines[span.end_line])
    assert any("python examples/scripts/openenv/echo.py" in lines[s.start_line] for s in spans)
