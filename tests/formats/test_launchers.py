"""Command lines of OpenRLHF, ms-swift run through a launcher, and PEFT's SFT example: their flags reach the plan,
and what the program does without a flag is filled in with its source."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.analysis import Settings, analyze
from vramlens.formats import parse_document
from vramlens.plan import Origin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "launchers"


def plan_of(name: str, text: str | None = None):
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8") if text is None else text
    return text, parse_document(text, str(path)).plan


def at(text: str, span) -> str:
    return text.split("\n")[span.start_line][span.start_col : span.end_col]


def test_openrlhf_deepspeed_module_reads_its_flags():
    text, plan = plan_of("openrlhf_sft.sh")
    assert plan.framework == "openrlhf" and plan.objective.value == "sft"
    assert plan.model_id.value == "meta-llama/Meta-Llama-3-8B"
    assert plan.micro_batch.value == 2 and at(text, plan.micro_batch.value_span) == "2"
    assert plan.global_batch.value == 256 and plan.seq_len.value == 4096
    assert plan.dist_strategy.value == "deepspeed" and plan.zero_stage.value == 2
    assert plan.amp_dtype.value == "bf16" and plan.weight_dtype.value == "bf16"
    assert plan.attn_impl.value == "flash_attention_2" and plan.grad_checkpointing.value is True
    assert plan.offload_optimizer.value is True and at(text, plan.offload_optimizer.span) == "--adam_offload"
    assert plan.gpu_count.value == 8


def test_openrlhf_python_module_lora_4bit_and_defaults():
    _, plan = plan_of("openrlhf_qlora.sh")
    assert plan.framework == "openrlhf"
    assert plan.peft_method.value == "lora" and plan.lora_r.value == 32 and plan.lora_alpha.value == 64
    assert plan.quant_bits.value == 4 and plan.quant_type.value == "nf4" and plan.quant_double.value is True
    assert plan.lora_targets.value == ["all-linear"] and plan.lora_targets.origin == Origin.DEFAULT
    assert plan.zero_stage.value == 2 and plan.zero_stage.origin == Origin.DEFAULT  # OpenRLHF's `--zero_stage` default
    assert "train_sft.py" in plan.zero_stage.note


def test_openrlhf_lora_rank_zero_is_full_fine_tuning_and_the_estimate_follows():
    text, _ = plan_of("openrlhf_qlora.sh")
    full = text.replace("    --load_in_4bit \\\n", "").replace("--lora_rank 32", "--lora_rank 0")
    _, plan = plan_of("openrlhf_qlora.sh", full)
    assert plan.peft_method.value == "none" and plan.quant_bits is None
    lora = analyze(text, str(FIXTURES / "openrlhf_qlora.sh"), Settings(gpu="A100-80GB")).estimate
    whole = analyze(full, str(FIXTURES / "openrlhf_qlora.sh"), Settings(gpu="A100-80GB")).estimate
    assert whole.device_bytes > 2 * lora.device_bytes


@pytest.mark.parametrize("name,objective,count", [("swift_torchrun.sh", "sft", 4), ("swift_accelerate.sh", "dpo", 2)])
def test_ms_swift_through_a_launcher_reads_swift_flags(name, objective, count):
    _, plan = plan_of(name)
    assert plan.framework == "ms-swift"
    assert (plan.objective.value if plan.objective else "sft") == objective
    assert plan.model_id.value.startswith("Qwen/")
    assert plan.gpu_count.value == count
    assert plan.weight_dtype.value == "bf16"


def test_ms_swift_torchrun_lora_and_deepspeed_preset():
    _, plan = plan_of("swift_torchrun.sh")
    assert plan.peft_method.value == "lora" and plan.lora_r.value == 16
    assert plan.zero_stage.value == 2 and plan.seq_len.value == 4096


def test_python_m_swift_cli_is_ms_swift():
    _, plan = plan_of(
        "swift_torchrun.sh",
        "python -m swift.cli.sft --model Qwen/Qwen2.5-7B-Instruct --train_type lora --per_device_train_batch_size 4\n",
    )
    assert plan.framework == "ms-swift" and plan.micro_batch.value == 4 and plan.peft_method.value == "lora"


def test_peft_example_qlora_flags_and_its_defaults():
    text, plan = plan_of("peft_sft_qlora.sh")
    assert plan.model_id.value == "mistralai/Mistral-7B-v0.1"
    assert plan.peft_method.value == "lora" and at(text, plan.peft_method.span) == "--use_peft_lora True"
    assert plan.quant_bits.value == 4 and plan.quant_double.value is True and plan.quant_compute_dtype.value == "bf16"
    assert plan.lora_r.value == 8 and plan.lora_dropout.value == 0.1
    assert plan.attn_impl.value == "flash_attention_2" and plan.ckpt_reentrant.value is True
    assert plan.seq_len.value == 2048 and plan.micro_batch.value == 8


def test_peft_example_lora_without_4bit_loads_fp32_weights_and_says_so():
    _, plan = plan_of("peft_sft_lora_multigpu.sh")
    assert plan.peft_method.value == "lora"
    assert plan.lora_r.value == 64 and plan.lora_r.origin == Origin.DEFAULT  # `--lora_r` default
    assert plan.weight_dtype.value == "fp32" and "utils.py" in plan.weight_dtype.note
    assert plan.attn_impl.value == "eager"


def test_peft_example_is_no_longer_a_full_fp32_fine_tune():
    text = (FIXTURES / "peft_sft_qlora.sh").read_text()
    est = analyze(text, str(FIXTURES / "peft_sft_qlora.sh"), Settings(gpu="A100-80GB")).estimate
    assert est.fits and est.device_bytes < 30 * 2**30  # was estimated as a 7B full fp32 fine-tune (>100 GiB)


def test_openrlhf_here_document_command_template():
    """OpenRLHF's own scripts: `read -r -d '' training_commands <<EOF … EOF` then
    `deepspeed --module $training_commands`."""
    text, plan = plan_of("openrlhf_heredoc.sh")
    assert plan.framework == "openrlhf" and plan.objective.value == "sft"
    assert plan.model_id.value == "meta-llama/Meta-Llama-3-8B"
    assert plan.micro_batch.value == 2 and at(text, plan.micro_batch.span) == "--micro_train_batch_size 2"
    assert plan.seq_len.value == 2048 and plan.zero_stage.value == 2 and plan.attn_impl.value == "flash_attention_2"
    assert plan.amp_dtype.value == "bf16" and plan.grad_checkpointing.value is True


def test_a_quoted_heredoc_variable_is_not_a_command_line():
    text = "read -r -d '' CMD <<EOF\n--micro_train_batch_size 4\nEOF\necho \"$CMD\"\n"
    _, plan = plan_of("openrlhf_heredoc.sh", text)
    assert plan is None


def test_openrlhf_ppo_through_ray_job_submit():
    text, plan = plan_of("openrlhf_ppo_ray.sh")
    assert plan.framework == "openrlhf" and plan.objective.value == "ppo"
    assert plan.model_id.value == "OpenRLHF/Llama-3-8b-sft-mixture"
    assert plan.micro_batch.value == 8 and plan.zero_stage.value == 3
    assert plan.prompt_len.value == 1024 and plan.completion_len.value == 1024
    assert plan.gpu_count.value == 2 and at(text, plan.gpu_count.span) == "--actor_num_gpus_per_node 2"
    one_line = (
        "ray job submit --address=http://127.0.0.1:8265 -- python3 -m openrlhf.cli.train_ppo_ray "
        "--pretrain meta-llama/Meta-Llama-3-8B --micro_train_batch_size 4\n"
    )
    _, plan = plan_of("openrlhf_ppo_ray.sh", one_line)
    assert plan.framework == "openrlhf" and plan.micro_batch.value == 4


SWIFT_COMMAND = (
    "swift sft --model Qwen/Qwen2.5-7B-Instruct --train_type lora --lora_rank 16 "
    "--per_device_train_batch_size 4 --gradient_accumulation_steps 4 --torch_dtype bfloat16 "
    "--max_length 4096 --gradient_checkpointing true\n"
)


def test_ms_swift_python_api_reads_as_its_command_line():
    text, plan = plan_of("swift_python_api.py")
    assert plan.format == "python" and plan.framework == "ms-swift"
    assert plan.model_id.value == "Qwen/Qwen2.5-7B-Instruct" and plan.peft_method.value == "lora"
    assert plan.lora_r.value == 16 and at(text, plan.lora_r.value_span) == "LORA_RANK"  # a module variable
    assert at(text, plan.micro_batch.value_span) == "4" and plan.seq_len.value == 4096  # `**common` entries
    settings = Settings(gpu="A100-80GB")
    a = analyze(text, str(FIXTURES / "swift_python_api.py"), settings)
    b = analyze(SWIFT_COMMAND, str(FIXTURES / "swift.sh"), settings)
    assert a.estimate.device_bytes == b.estimate.device_bytes > 0  # the same run, the same answer


def test_ms_swift_rlhf_is_dpo_unless_it_says_otherwise():
    text = (
        "from swift.llm import RLHFArguments, rlhf_main\n"
        "rlhf_main(RLHFArguments(model='Qwen/Qwen2.5-7B-Instruct', train_type='lora'{extra}))\n"
    )
    _, plan = plan_of("x.py", text.format(extra=""))
    assert plan.framework == "ms-swift" and plan.objective.value == "dpo"
    _, plan = plan_of("x.py", text.format(extra=", rlhf_type='kto'"))
    assert plan.objective.value == "kto"
    _, plan = plan_of("x.sh", "swift rlhf --model Qwen/Qwen2.5-7B-Instruct --train_type lora\n")
    assert plan.objective.value == "dpo"
    # a class of the same name from elsewhere is not ms-swift's
    _, plan = plan_of("x.py", "from mylib import TrainArguments\nTrainArguments(model='Qwen/Qwen2.5-7B')\n")
    assert plan is None or plan.framework != "ms-swift"


def test_run_clm_block_size_means_full_unpadded_blocks(tmp_path):
    """transformers' run_clm.py cuts the concatenated texts into `block_size` blocks: the estimate takes them as
    packed (no padding mask), from the YAML of its arguments and from its command line alike."""
    yaml_text = "model_name_or_path: meta-llama/Llama-3.2-1B\nblock_size: 2048\nper_device_train_batch_size: 4\n"
    shell = (
        "python run_clm.py --model_name_or_path meta-llama/Llama-3.2-1B --block_size 2048 "
        "--per_device_train_batch_size 4 --do_train\n"
    )
    for name, text in (("args.yaml", yaml_text), ("train.sh", shell)):
        f = tmp_path / name
        f.write_text(text)
        plan = parse_document(text, str(f)).plan
        assert plan.seq_len.value == 2048, name
        assert plan.packing.value is True and plan.packing.origin == Origin.DERIVED, name
        assert "no padding" in plan.packing.note, name
        r = analyze(text, str(f), Settings(workspace=tmp_path, gpu="A100-80GB"))
        assert r.estimate is not None and not r.resolution.resolved.attn_mask, name
