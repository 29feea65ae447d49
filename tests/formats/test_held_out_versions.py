"""Example configs of the command-line frameworks at versions other than the ones their readers were written
against (tests/fixtures/<framework>/<version>/, each with its SOURCE): read with the values the files state."""

from __future__ import annotations

from pathlib import Path

from vramlens.formats import parse_document

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPENRLHF_030 = FIXTURES / "openrlhf" / "v0.3.0"


def plan_of(path: Path, text: str | None = None):
    return parse_document(path.read_text(encoding="utf-8") if text is None else text, str(path)).plan


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


# --- OpenRLHF before v0.3.8: entry points in examples/, run as `deepspeed ../train_dpo.py` ---------------------------


def test_openrlhf_0_3_heredoc_through_examples_script_is_read():
    plan = plan_of(OPENRLHF_030 / "train_dpo_llama.sh")
    assert plan.framework == "openrlhf" and value(plan, "objective") == "dpo"
    assert value(plan, "model_id") == "OpenLLMAI/Llama-2-13b-sft-model-ocra-500k"
    assert value(plan, "micro_batch") == 1 and value(plan, "seq_len") == 2048 and value(plan, "zero_stage") == 3
    assert value(plan, "grad_checkpointing") is True and value(plan, "amp_dtype") == "bf16"


def test_openrlhf_0_3_lora_and_ray_ppo_examples():
    plan = plan_of(OPENRLHF_030 / "train_sft_mixtral_lora.sh")
    assert value(plan, "model_id") == "mistralai/Mixtral-8x7B-v0.1" and value(plan, "micro_batch") == 4
    assert value(plan, "peft_method") == "lora" and value(plan, "lora_r") == 64
    plan = plan_of(OPENRLHF_030 / "train_ppo_llama_ray.sh")  # `ray job submit … -- python3 examples/train_ppo_ray.py`
    assert value(plan, "objective") == "ppo" and value(plan, "micro_batch") == 8
    assert value(plan, "reward_model_id") == "OpenLLMAI/Llama-2-7b-rm-anthropic_hh-lmsys-oasst-webgpt"


def test_a_train_dpo_py_without_openrlhf_flags_is_not_openrlhf():
    text = "deepspeed ../train_dpo.py --model_name_or_path gpt2 --per_device_train_batch_size 2\n"
    plan = plan_of(OPENRLHF_030 / "x.sh", text)
    assert plan is None or plan.framework != "openrlhf"


# --- verl main: the model path behind a default that names another variable ----------------------------------------

VERL_MAIN = FIXTURES / "verl" / "main-2026-01-29"


def test_verl_model_path_from_a_nested_default_is_read():
    # MODEL_PATH=${MODEL_PATH:-"${RAY_DATA_HOME}/models/Qwen3-8B"}, RAY_DATA_HOME=${RAY_DATA_HOME:-"${HOME}/verl"}
    plan = plan_of(VERL_MAIN / "run_qwen3-8b_npu.sh")
    assert plan.framework == "verl"
    assert value(plan, "model_id") == "~/verl/models/Qwen3-8B"
    assert value(plan, "micro_batch") == 10 and value(plan, "num_generations") == 5
    assert value(plan, "vllm_memory_share") == 0.6 and value(plan, "gpu_count") == 8


# --- NeMo AutoModel main: benchmark recipes build the model from a Hub config ------------------------------------

AUTOMODEL_MAIN = FIXTURES / "nemo_automodel" / "main-36044ad3"


def test_nemo_automodel_from_config_names_the_configs_model():
    # model: {_target_: NeMoAutoModelForCausalLM.from_config, config: {_target_: AutoConfig.from_pretrained,
    #         pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B}}
    plan = plan_of(AUTOMODEL_MAIN / "qwen3_moe_30b_te_deepep.yaml")
    assert value(plan, "model_id") == "Qwen/Qwen3-30B-A3B"
    assert plan.model_id.key is not None and "pretrained_model_name_or_path" in plan.model_id.key
    assert value(plan, "micro_batch") == 4 and value(plan, "seq_len") == 4096


def test_openrlhf_batch_inference_before_training_is_not_the_plan():
    # generate (python -m openrlhf.cli.batch_inference), label (deepspeed --module …batch_inference), then train_dpo
    plan = plan_of(FIXTURES / "openrlhf" / "v0.9.0" / "train_iterative_dpo_llama.sh")
    assert value(plan, "objective") == "dpo" and value(plan, "micro_batch") == 2
    assert value(plan, "zero_stage") == 3 and value(plan, "seq_len") == 4096
    assert value(plan, "grad_checkpointing") is True
