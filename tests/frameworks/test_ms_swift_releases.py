"""ms-swift's example scripts at the releases users run (tests/fixtures/ms-swift/<version>/, each with its SOURCE):
the 1.x/2.x model registry with the types later releases renamed and the example entry points' own types, 2.x's
`swift dpo`, and scripts that train and then run inference on the checkpoint they wrote."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "ms-swift"


def plan_of(path: Path):
    return parse_document(path.read_text(encoding="utf-8"), str(path)).plan


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


def test_a_1_5_model_type_renamed_later_is_read_from_that_release_registry():
    # v1.5.0 registers `cogagent-chat` ('ZhipuAI/cogagent-chat'); v1.7.3 renamed it `cogagent-18b-chat`
    plan = plan_of(FIXTURES / "v1.5.0" / "cogagent_chat_lora_sft.sh")
    assert value(plan, "model_id") == "THUDM/cogagent-chat-hf"
    assert "ms-swift v1.5.0" in plan.model_id.note
    assert value(plan, "micro_batch") == 1 and value(plan, "seq_len") == 1024 and value(plan, "gpu_count") == 2
    # `--lora_target_modules` left at DEFAULT: the type's registered targets (LoRATM.cogagent)
    assert "language_expert_query_key_value" in value(plan, "lora_targets")


def test_the_example_entry_points_own_model_types_are_registered():
    # llm_sft.py does `import custom`; examples/pytorch/llm/custom.py registers `tigerbot-7b` with LoRATM.llama2
    plan = plan_of(FIXTURES / "v2.4.0" / "custom" / "tigerbot_7b_lora_ddp_ds_sft.sh")
    assert value(plan, "model_id") == "TigerResearch/tigerbot-7b-base-v3"
    assert "custom.py" in plan.model_id.note
    assert value(plan, "lora_targets") == ["q_proj", "k_proj", "v_proj"]
    assert value(plan, "zero_stage") == 2 and value(plan, "world_size") == 2
    assert not any("not a model type" in i.message for i in plan.issues)


def test_swift_dpo_of_2_x_is_a_dpo_run():
    # ms-swift 2.x swift/cli/main.py: `swift dpo …` runs swift/cli/rlhf.py with `--rlhf_type dpo`
    plan = plan_of(FIXTURES / "v2.4.0" / "dpo" / "lora_dpo.sh")
    assert plan is not None and plan.framework == "ms-swift"
    assert value(plan, "objective") == "dpo" and "swift dpo" in plan.objective.note
    assert value(plan, "model_id") == "01-ai/Yi-6B-Chat" and value(plan, "peft_method") == "lora"
    assert value(plan, "seq_len") == 1024 and value(plan, "prompt_len") == 512


def test_a_script_that_trains_then_infers_is_read_from_its_training_command():
    plan = plan_of(FIXTURES / "v4.0.0" / "train_then_infer" / "cached_dataset_vlm.sh")
    assert value(plan, "model_id") == "Qwen/Qwen2.5-Omni-7B" and value(plan, "gpu_count") == 4


def _held_out_cli():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import held_out_cli
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return held_out_cli


def test_the_held_out_check_takes_the_training_command_values_and_hub_names():
    cli = _held_out_cli()
    # `megatron sft --model LLM-Research/…` then `swift infer --model megatron_output/…/checkpoint-xxx`
    values = cli.swift_stated(FIXTURES / "v4.0.0" / "train_then_infer" / "llama4_mcore.sh", None)
    assert values["model"] == "LLM-Research/Llama-4-Scout-17B-16E-Instruct" and values["micro_batch_size"] == "4"
    assert "stream" not in values  # a `swift infer` flag
    # ms-swift's registry pairs 'modelscope/Llama-2-70b-chat-ms' with the Hub's 'meta-llama/Llama-2-70b-chat-hf'
    values = cli.swift_stated(FIXTURES / "v1.5.0" / "llama2_70b_chat_qlora_mp_sft.sh", None)
    assert values["model_id_or_path"] == "meta-llama/Llama-2-70b-chat-hf"


def test_megatron_swift_3_5_names_its_model_by_the_checkpoint_it_loads():
    # `megatron sft --load Qwen2.5-7B-Instruct-mcore` (the folder `swift export --to_mcore true` wrote): v3.5.0
    # BaseArguments `_init_ckpt_dir` takes the model from that checkpoint's args.json
    plan = plan_of(FIXTURES / "v3.5.0" / "megatron_sft.sh")
    assert value(plan, "model_id") == "Qwen2.5-7B-Instruct-mcore" and plan.model_id.key == "load"
    assert value(plan, "tensor_parallel") == 2 and value(plan, "micro_batch") == 4


def test_an_ms_swift_yaml_config_is_read_as_its_command_line_arguments():
    # `model_name: swift-bot` / `model_author: swift` name the self-cognition identity, not the model
    plan = plan_of(FIXTURES / "v4.0.0" / "yaml" / "sft.yaml")
    assert plan.framework == "ms-swift"
    assert value(plan, "model_id") == "Qwen/Qwen2.5-7B-Instruct" and value(plan, "peft_method") == "lora"
    assert value(plan, "zero_stage") == 3 and value(plan, "micro_batch") == 1
    # the script that runs it (`swift sft --config sft.yaml`) reads it the same way
    plan = plan_of(FIXTURES / "v4.0.0" / "yaml" / "sft.sh")
    assert value(plan, "model_id") == "Qwen/Qwen2.5-7B-Instruct" and value(plan, "peft_method") == "lora"


MAIN = FIXTURES / "main-3602360a"


def test_a_megatron_swift_config_is_read_with_megatron_arguments():
    plan = plan_of(MAIN / "ray_grpo_colocate.yaml")
    assert plan.framework == "megatron-swift" and value(plan, "objective") == "grpo"
    assert value(plan, "model_id") == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert value(plan, "micro_batch") == 2 and value(plan, "global_batch") == 16 and value(plan, "seq_len") == 4096


def test_the_config_a_command_loads_overrides_the_commands_own_defaults(tmp_path: Path):
    # `megatron rlhf` alone defaults to DPO; `rlhf_type: grpo` in the config it loads is the run's
    (tmp_path / "ray_grpo_colocate.yaml").write_text((MAIN / "ray_grpo_colocate.yaml").read_text(encoding="utf-8"))
    script = tmp_path / "run.sh"
    script.write_text("megatron rlhf --use_ray true --config ray_grpo_colocate.yaml\n", encoding="utf-8")
    plan = plan_of(script)
    assert value(plan, "objective") == "grpo" and value(plan, "micro_batch") == 2
    assert plan.objective.key == "rlhf_type"


def test_a_ray_config_reads_its_rollout_group_and_the_online_rl_arguments():
    # ray_grpo_colocate.yaml: `colocate_groups: [[train, rollout]]`, the rollout group's
    # `vllm_gpu_memory_utilization: 0.4`, `sleep_level: 1`, `max_completion_length: 4096`, `beta: 0`
    plan = plan_of(MAIN / "ray_grpo_colocate.yaml")
    assert value(plan, "generation") == "vllm-colocate" and plan.generation.key == "colocate_groups"
    assert value(plan, "vllm_memory_share") == 0.4 and value(plan, "generation_sleeps") is True
    assert value(plan, "completion_len") == 4096 and value(plan, "num_generations") == 8
    assert value(plan, "reference_free") is True


def test_megatron_swift_grpo_takes_its_own_rollout_defaults_and_sleep_level():
    # dense_colocate.sh: `--vllm_mode colocate --vllm_gpu_memory_utilization 0.7 --sleep_level 2`,
    # `--max_length 8192` (the prompt's bound in GRPO), `--max_completion_length 2048`
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    path = MAIN / "dense_colocate.sh"
    plan = plan_of(path)
    assert value(plan, "generation_sleeps") is True and plan.generation_sleeps.key == "sleep_level"
    a = analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, gpu="H100-80GB"))
    rp = a.resolution.resolved
    assert rp.generation == "vllm-colocate" and rp.generation_sleeps and rp.vllm_memory_share == 0.7
    assert rp.seq_len == 8192 + 2048  # prompt bounded by max_length, then the completion


def test_megatron_swift_grpo_without_a_completion_length_uses_megatron_swifts_default(tmp_path: Path):
    script = tmp_path / "run.sh"
    script.write_text(
        "megatron rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct --micro_batch_size 2 "
        "--use_vllm true --vllm_mode colocate --max_length 1024\n",
        encoding="utf-8",
    )
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    a = analyze(script.read_text(encoding="utf-8"), str(script), Settings(workspace=tmp_path, gpu="H100-80GB"))
    # swift/megatron/arguments/megatron_args.py: max_completion_length 512; TRL's own default would be 256
    assert a.resolution.resolved.seq_len == 1024 + 512
    assert a.resolution.sources["completion_len"].framework.startswith("ms-swift")


def test_megatron_at_the_start_of_a_line_is_a_launch():
    # run_colocate.sh: `megatron rlhf --use_ray true --config "$SCRIPT_DIR/…"` with no prefix on its line
    plan = plan_of(MAIN / "run_colocate.sh")
    assert plan is not None and plan.framework == "megatron-swift" and value(plan, "gpu_count") == 4


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("animatediff_lora_sft.sh", "wyj123456/Realistic_Vision_V5.1_noVAE"),
        ("run_train_lora.sh", "AI-ModelScope/stable-diffusion-v2-1"),
    ],
)
def test_the_diffusion_examples_say_they_train_a_diffusion_model(name: str, model: str):
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    path = FIXTURES / "v2.4.0" / "diffusion" / name
    a = analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, gpu="A100-80GB"))
    assert a.estimate is None
    messages = " ".join(f.message for f in a.findings) + " " + " ".join(i.message for i in a.plan.issues)
    assert "a diffusion model" in messages and model in messages
    assert "does not name a model" not in messages


def test_a_tuner_a_plugin_registers_is_named_not_modelled():
    # v3.5.0 examples/train/multimodal/lora_llm_full_vit: `--train_type custom` is the CustomTuner its
    # custom_plugin.py adds to swift.plugin.extra_tuners (LoRA on the LLM, the ViT in full); the plugin is not read
    plan = plan_of(FIXTURES / "v3.5.0" / "tuners" / "lora_llm_full_vit_sft.sh")
    assert value(plan, "model_id") == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert value(plan, "peft_method") == "none"
    (u,) = [u for u in plan.unmodelled if u.key == "train_type"]
    assert u.value == "custom" and "extra_tuners" in u.what and "full fine-tune" in u.consequence
    assert not any("unknown tuner type" in i.message for i in plan.issues)
