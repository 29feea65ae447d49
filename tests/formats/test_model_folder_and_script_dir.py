"""Launch scripts that name their config by the script's own folder (ms-swift examples/ray/: `SCRIPT_DIR="$(cd
"$(dirname "${BASH_SOURCE[0]}")" && pwd)"`, then `--config "$SCRIPT_DIR/ray_grpo_colocate.yaml"`), and model folders
that vramlens does not read but whose name is a model's (verl: `$HDFS_ROOT/model/Qwen3-30B-A3B-Base`,
`${RAY_DATA_HOME}/models/Qwen3-VL-8B-Instruct`, an absolute folder outside the workspace, verl's default
`~/models/deepseek-llm-7b-chat`): estimated by that name, approximately, saying which folder was not read and why.
Fixtures: tests/fixtures/ms-swift/main-3602360a, tests/fixtures/verl/main-2026-01-29 (SOURCE beside them)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SWIFT_MAIN = FIXTURES / "ms-swift" / "main-3602360a"
VERL_MAIN = FIXTURES / "verl" / "main-2026-01-29"


def analysed(path: Path, workspace: Path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=workspace, model_lookup=False))


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


def _ray_example(tmp_path: Path, idiom: str | None = None) -> Path:
    folder = tmp_path / "examples" / "ray" / "grpo"
    folder.mkdir(parents=True)
    shutil.copy(SWIFT_MAIN / "ray_grpo_colocate.yaml", folder / "ray_grpo_colocate.yaml")
    script = folder / "run_colocate.sh"
    text = (SWIFT_MAIN / "run_colocate.sh").read_text(encoding="utf-8")
    if idiom is not None:
        original = 'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"'
        assert original in text
        text = text.replace(original, idiom)
    script.write_text(text, encoding="utf-8")
    return script


def test_a_config_named_by_the_scripts_own_folder_is_read(tmp_path):
    # run_colocate.sh: `megatron rlhf --use_ray true --config "$SCRIPT_DIR/ray_grpo_colocate.yaml"`; the YAML's
    # model and batch, and its `train:` group (the trainer's own arguments: LoRA rank 8), are the run's
    script = _ray_example(tmp_path)
    a = analysed(script, tmp_path)
    assert a.estimate is not None, a.error
    plan = a.plan
    assert value(plan, "model_id") == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert value(plan, "micro_batch") == 2 and value(plan, "objective") == "grpo"
    assert value(plan, "peft_method") == "lora" and value(plan, "lora_r") == 8
    assert plan.model_id.span is not None and plan.model_id.span.file.endswith("ray_grpo_colocate.yaml")
    # a folder only known when the script runs (its first argument) is still not guessed
    unknown = _ray_example(
        tmp_path / "unknown", 'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\nSCRIPT_DIR=$1'
    )
    a = analysed(unknown, tmp_path / "unknown")
    assert a.estimate is None and value(a.plan, "model_id") is None


@pytest.mark.parametrize(
    "idiom",
    [
        'SCRIPT_DIR=$(dirname "$0")',
        "SCRIPT_DIR=$(dirname $(realpath $0))",
        'SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"',
        'SCRIPT_DIR="$(cd "$(dirname "$0")"/.. && pwd)/grpo"',
    ],
)
def test_other_spellings_of_the_scripts_folder(tmp_path, idiom):
    a = analysed(_ray_example(tmp_path, idiom), tmp_path)
    assert a.plan is not None and value(a.plan, "model_id") == "Qwen/Qwen2.5-VL-3B-Instruct", a.error


def test_a_positional_config_named_by_the_scripts_own_folder_is_read(tmp_path):
    # ms-swift loads a lone `.yaml` argument as `--config` (swift/utils/utils.py `parse_args`)
    script = _ray_example(tmp_path)
    text = script.read_text(encoding="utf-8").replace(
        'megatron rlhf --use_ray true --config "$SCRIPT_DIR/ray_grpo_colocate.yaml"',
        'megatron rlhf "$SCRIPT_DIR/ray_grpo_colocate.yaml" --use_ray true',
    )
    assert '"$SCRIPT_DIR/ray_grpo_colocate.yaml" --use_ray' in text
    script.write_text(text, encoding="utf-8")
    a = analysed(script, tmp_path)
    assert a.plan is not None and value(a.plan, "model_id") == "Qwen/Qwen2.5-VL-3B-Instruct", a.error
    assert value(a.plan, "lora_r") == 8


def _approximate(a) -> str:
    return " | ".join(a.estimate.approximate)


def test_a_model_folder_under_an_unset_variable_is_estimated_by_its_name(tmp_path):
    # HF_MODEL_PATH=${HF_MODEL_PATH:-"${RAY_DATA_HOME}/models/Qwen3-VL-8B-Instruct"}, RAY_DATA_HOME never set
    script = tmp_path / "run_qwen3_vl-8b-megatron.sh"
    shutil.copy(VERL_MAIN / "run_qwen3_vl-8b-megatron.sh", script)
    a = analysed(script, tmp_path)
    assert a.estimate is not None, a.error
    why = _approximate(a)
    assert "shapes of Qwen/Qwen3-VL-8B-Instruct assumed from the name `Qwen3-VL-8B-Instruct`" in why
    assert "`${RAY_DATA_HOME}`, only known when the script runs" in why
    said = " ".join(i.message for i in a.plan.issues)
    assert "`actor_rollout_ref.model.path` is set from `$HF_MODEL_PATH`" in said


def test_a_model_folder_outside_the_workspace_is_estimated_by_its_name_and_says_it_was_not_read(tmp_path):
    # run_qwen2.5-3b_megatron_gsm8k_multiturn.sh: `actor_rollout_ref.model.path=/user/longxiang1/models/Qwen/
    # Qwen2.5-3B-Instruct`, a folder on the machine that ran it
    folder = tmp_path / "sglang_multiturn"
    shutil.copytree(VERL_MAIN / "sglang_multiturn", folder)
    a = analysed(folder / "run_qwen2.5-3b_megatron_gsm8k_multiturn.sh", tmp_path)
    assert a.estimate is not None, a.error
    assert value(a.plan, "model_id") == "/user/longxiang1/models/Qwen/Qwen2.5-3B-Instruct"
    why = _approximate(a)
    assert "assumed from the name `Qwen/Qwen2.5-3B-Instruct` of the model folder, which was not read" in why
    assert "`/user/longxiang1/models/Qwen/Qwen2.5-3B-Instruct` is outside the workspace" in why


def test_a_readable_model_folder_inside_the_workspace_keeps_priority_over_its_name(tmp_path):
    script = tmp_path / "run.sh"
    text = (VERL_MAIN / "sglang_multiturn" / "run_qwen2.5-3b_megatron_gsm8k_multiturn.sh").read_text(encoding="utf-8")
    script.write_text(text.replace("/user/longxiang1/models/Qwen/", "$HOME/models/Qwen/"), encoding="utf-8")
    by_name = analysed(script, tmp_path)
    assert by_name.estimate is not None and "assumed from the name" in _approximate(by_name)
    # the same name as a folder in the workspace, with its own config.json: its shapes, no guess by name
    model = tmp_path / "models" / "Qwen2.5-3B-Instruct"
    model.mkdir(parents=True)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    }
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    script.write_text(text.replace("/user/longxiang1/models/Qwen/", "./models/"), encoding="utf-8")
    local = analysed(script, tmp_path)
    assert local.estimate is not None, local.error
    assert "assumed from the name" not in " ".join(local.estimate.approximate)
    assert local.estimate.params_total < by_name.estimate.params_total


def test_verls_default_model_folder_is_estimated_by_its_name(tmp_path):
    # retool_multiturn_grpo.yaml composes verl's ppo_trainer and leaves `actor_rollout_ref.model.path` at its default
    # `~/models/deepseek-llm-7b-chat`, the folder verl loads
    folder = tmp_path / "config"
    folder.mkdir()
    shutil.copy(VERL_MAIN / "sglang_multiturn" / "config" / "retool_multiturn_grpo.yaml", folder)
    a = analysed(folder / "retool_multiturn_grpo.yaml", tmp_path)
    assert a.estimate is not None, a.error
    assert value(a.plan, "model_id") == "~/models/deepseek-llm-7b-chat" and "verl's default" in a.plan.model_id.note
    why = _approximate(a)
    assert "assumed from the name `deepseek-llm-7b-chat` of the model folder, which was not read" in why
    assert "`~/models/deepseek-llm-7b-chat` is outside the workspace" in why


def test_a_launch_cut_by_a_comment_says_so_and_does_not_take_verls_default_model(tmp_path):
    # run_deepseek7b_llm_pfppo.sh: `algorithm.pf_ppo.reweight_method=pow \  # [...]` ends the command at the comment;
    # the next lines (`algorithm.pf_ppo.weight_pow=2.0 \`, …, `actor_rollout_ref.model.path=…`) run as a command
    # of their own, so the model they name is never passed: the cut is said, and no default model is guessed
    folder = tmp_path / "ppo_trainer"
    folder.mkdir()
    shutil.copy(VERL_MAIN / "ppo_trainer" / "run_deepseek7b_llm_pfppo.sh", folder)
    a = analysed(folder / "run_deepseek7b_llm_pfppo.sh", tmp_path)
    assert a.estimate is None and value(a.plan, "model_id") is None
    warned = [f for f in a.findings if "a `#` comment ends the command above" in f.message]
    assert warned and warned[0].span.start_line == 6
    assert "a `#` comment cuts it" in a.error
