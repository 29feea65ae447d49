"""Command lines and configs of OpenRLHF (flat and dotted CLIs), ms-swift 1.x to 4.x, LLaMA-Factory with unsloth and
torchtune 0.1, read from the frameworks' own example scripts and configs at those versions
(tests/fixtures/<framework>/<version>/, each with its SOURCE)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document
from vramlens.plan import IssueKind, Origin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPENRLHF = FIXTURES / "openrlhf" / "v0.11.0"
SWIFT1 = FIXTURES / "ms-swift" / "v1.7.3"
SWIFT4 = FIXTURES / "ms-swift" / "v4.5.2"
TORCHTUNE01 = FIXTURES / "torchtune" / "v0.1.1"
LLAMAFACTORY = FIXTURES / "llamafactory" / "v0.9.4"


def estimate(path: Path, cwd: Path | None = None) -> dict:
    args = [
        sys.executable,
        "-m",
        "vramlens",
        "estimate",
        "--offline",
        "--gpu",
        "A100-80GB",
        "--format",
        "json",
        str(path),
    ]
    done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return out[0] if isinstance(out, list) else out


def source(report: dict, concept: str):
    return report["sources"][concept]["value"]


def plan_of(path: Path, text: str | None = None):
    return parse_document(path.read_text(encoding="utf-8") if text is None else text, str(path)).plan


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


def unmodelled_keys(plan) -> list[str]:
    return [u.key for u in plan.unmodelled]


# --- OpenRLHF ------------------------------------------------------------------------------------------------------


def test_openrlhf_dotted_cli_heredoc_through_deepspeed_module_is_estimated():
    report = estimate(OPENRLHF / "train_sft.sh")
    assert report["model"]["id"] == "meta-llama/Meta-Llama-3-8B"
    assert source(report, "micro_batch") == 2 and source(report, "seq_len") == 2048
    assert source(report, "zero_stage") == 2 and source(report, "packing") is True
    assert source(report, "grad_checkpointing") is True and source(report, "amp_dtype") == "bf16"
    assert "train.micro_batch_size" in report["sources"]["micro_batch"]["from"]
    assert report["unmodelled"] == []


def test_openrlhf_dotted_lora_dpo_and_ppo_examples():
    plan = plan_of(OPENRLHF / "train_sft_mixtral_lora.sh")
    assert value(plan, "model_id") == "mistralai/Mixtral-8x7B-v0.1"
    assert value(plan, "peft_method") == "lora" and value(plan, "lora_r") == 64 and value(plan, "lora_alpha") == 64
    assert value(plan, "lora_targets") == ["all-linear"] and "--ds.lora.target_modules" in plan.lora_targets.note
    assert value(plan, "zero_stage") == 3 and value(plan, "micro_batch") == 4
    plan = plan_of(OPENRLHF / "train_dpo_llama.sh")
    assert value(plan, "objective") == "dpo" and value(plan, "micro_batch") == 1 and value(plan, "seq_len") == 8192
    plan = plan_of(OPENRLHF / "train_ppo_ray_hybrid_engine.sh")
    assert value(plan, "objective") == "ppo" and value(plan, "model_id") == "OpenRLHF/Llama-3-8b-sft-mixture"
    assert value(plan, "reward_model_id") == "OpenRLHF/Llama-3-8b-rm-700k"
    assert value(plan, "generation") == "vllm-colocate" and value(plan, "vllm_memory_share") == 0.5
    assert value(plan, "gpu_count") == 8 and value(plan, "zero_stage") == 3
    # `--train.dynamic_batch_enable`: micro-batches packed up to `--train.max_tokens_per_gpu 16384` tokens, 8
    # sequences of 2,048 (prompt + response), not train_ppo_ray.py's `--train.micro_batch_size` (unused then)
    assert value(plan, "micro_batch") == 8 and plan.micro_batch.origin == Origin.DERIVED
    assert plan.micro_batch.key == "train.max_tokens_per_gpu" and plan.micro_batch.per_unit == 2048
    assert value(plan, "logprob_micro_batch") == 8
    assert not {"train.dynamic_batch_enable", "train.max_tokens_per_gpu"} & set(unmodelled_keys(plan))
    assert value(plan, "generation_sleeps") is True and plan.generation_sleeps.key == "vllm.enable_sleep"


@pytest.mark.parametrize(
    "launch",
    [
        "deepspeed --module {args}",
        "python3 -m {args}",
        "torchrun --nproc_per_node 4 -m {args}",
        "ray job submit --address=http://127.0.0.1:8265 -- python3 -m {args}",
    ],
)
def test_openrlhf_dotted_flags_in_every_launch_form(launch):
    args = (
        "openrlhf.cli.train_sft --model.model_name_or_path=Qwen/Qwen2.5-7B --train.micro_batch_size 3 "
        "--data.max_len 3072 --ds.zero_stage 3 --ds.lora.rank 16 --ds.lora.target_modules q_proj v_proj "
        "--ds.adam_offload --model.gradient_checkpointing_enable"
    )
    plan = plan_of(OPENRLHF / "x.sh", launch.format(args=args) + "\n")
    assert plan.framework == "openrlhf"
    assert value(plan, "model_id") == "Qwen/Qwen2.5-7B" and value(plan, "micro_batch") == 3
    assert value(plan, "seq_len") == 3072 and value(plan, "zero_stage") == 3
    assert value(plan, "lora_r") == 16 and value(plan, "lora_targets") == ["q_proj", "v_proj"]
    assert value(plan, "offload_optimizer") is True and value(plan, "grad_checkpointing") is True


def test_openrlhf_defaults_follow_the_release_its_flags_belong_to():
    dotted = plan_of(
        OPENRLHF / "x.sh",
        "deepspeed --module openrlhf.cli.train_sft --model.model_name_or_path meta-llama/Meta-Llama-3-8B\n",
    )
    # v0.10.2+: `--ds.param_dtype` bf16 and `--ds.attn_implementation` flash_attention_2 unless given
    assert value(dotted, "amp_dtype") == "bf16" and value(dotted, "weight_dtype") == "bf16"
    assert value(dotted, "attn_impl") == "flash_attention_2" and dotted.attn_impl.origin == Origin.DEFAULT
    assert value(dotted, "micro_batch") is None  # train_sft.py's 8 comes from the framework table
    middle = plan_of(OPENRLHF / "x.sh", "deepspeed --module openrlhf.cli.train_sft --pretrain m/x --param_dtype fp16\n")
    assert value(middle, "amp_dtype") == "fp16" and value(middle, "attn_impl") == "flash_attention_2"
    old = plan_of(OPENRLHF / "x.sh", "deepspeed --module openrlhf.cli.train_sft --pretrain m/x\n")
    assert old.amp_dtype is None and old.attn_impl is None  # the `--bf16`/`--flash_attn` CLI: both off
    explicit = plan_of(
        OPENRLHF / "x.sh",
        "deepspeed --module openrlhf.cli.train_sft --model.model_name_or_path m/x "
        "--ds.param_dtype fp16 --ds.attn_implementation sdpa\n",
    )
    assert value(explicit, "amp_dtype") == "fp16" and value(explicit, "attn_impl") == "sdpa"


def test_deepspeed_autotp_shards_the_layers_and_zero_shards_the_rest(tmp_path):
    """OpenRLHF's `--ds_tensor_parallel_size` and a DeepSpeed config's `tensor_parallel.autotp_size` split every
    layer's linears over the tensor-parallel GPUs (deepspeed module_inject/auto_tp.py); ZeRO-2 then shards the
    gradients and optimizer states over the data-parallel rest: the weights per GPU halve, the ZeRO-2 states stay."""
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    def run(name: str, text: str):
        path = tmp_path / name
        path.write_text(text)
        return analyze(text, str(path), Settings(gpu="H100", gpu_count=8, workspace=tmp_path))

    line = (
        "deepspeed --module openrlhf.cli.train_sft --pretrain meta-llama/Meta-Llama-3-8B --zero_stage 2 --bf16 "
        "--micro_train_batch_size 2 --max_len 2048 --gradient_checkpointing{}\n"
    )
    one, two = run("one.sh", line.format("")), run("two.sh", line.format(" --ds_tensor_parallel_size 2"))
    c1, c2 = one.estimate.components, two.estimate.components
    assert c2["weights"] == pytest.approx(c1["weights"] / 2, rel=0.01)
    assert c2["optimizer"] == pytest.approx(c1["optimizer"], rel=0.01)
    assert two.estimate.device_bytes < one.estimate.device_bytes
    ds = run(
        "ds.json",
        '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}, "tensor_parallel": {"autotp_size": 4}}',
    )
    assert ds.plan.tensor_parallel.value == 4


def test_openrlhf_settings_it_cannot_model_are_named():
    plan = plan_of(
        OPENRLHF / "x.sh",
        "python3 -m openrlhf.cli.train_sft --model.model_name_or_path m/x "
        "--ds.tensor_parallel_size 2 --ds.deepcompile --ds.zpg 8 --optim muon\n",
    )
    assert {"ds.deepcompile", "ds.zpg"} <= set(unmodelled_keys(plan))
    assert value(plan, "optimizer") == "muon"
    # DeepSpeed AutoTP is read as tensor parallelism, labelled approximate (formats.deepspeed.autotp)
    assert value(plan, "tensor_parallel") == 2 and "ds.tensor_parallel_size" not in unmodelled_keys(plan)
    assert any("DeepSpeed AutoTP over 2 GPUs" in str(n) for n in plan.read_notes)
    quiet = plan_of(
        OPENRLHF / "x.sh",
        "python3 -m openrlhf.cli.train_sft --model.model_name_or_path m/x "
        "--ds.tensor_parallel_size 1 --ds.zpg 1 --optim adam\n",
    )
    assert quiet.unmodelled == [] and quiet.optimizer is None


# --- ms-swift 1.x --------------------------------------------------------------------------------------------------


def test_ms_swift_1x_example_with_model_id_or_path_and_all_targets():
    plan = plan_of(SWIFT1 / "qwen_7b_chat_lora_sft.sh")  # `python llm_sft.py --model_id_or_path qwen/Qwen-7B-Chat`
    assert plan.framework == "ms-swift"
    assert value(plan, "model_id") == "Qwen/Qwen-7B-Chat"  # the registry's Hub id for the ModelScope id
    assert value(plan, "micro_batch") == 1 and value(plan, "seq_len") == 2048
    assert value(plan, "peft_method") == "lora" and value(plan, "lora_r") == 8 and value(plan, "lora_dropout") == 0.05
    assert value(plan, "lora_targets") == ["all-linear"] and value(plan, "grad_checkpointing") is True


def test_ms_swift_1x_default_targets_are_the_model_types_own():
    plan = plan_of(SWIFT1 / "qwen_7b_chat_lora_ddp_ds_sft.sh")  # `--lora_target_modules DEFAULT`, `default-zero2`
    assert value(plan, "lora_targets") == ["c_attn"] and value(plan, "zero_stage") == 2
    assert value(plan, "gpu_count") == 2
    for model_type, model, targets in (
        ("qwen-7b-chat", "Qwen/Qwen-7B-Chat", ["c_attn"]),
        ("llama2-7b", "meta-llama/Llama-2-7b-hf", ["q_proj", "k_proj", "v_proj"]),
        ("chatglm3-6b", "THUDM/chatglm3-6b", ["query_key_value"]),
    ):
        for written in ("--lora_target_modules DEFAULT ", ""):  # written, or ms-swift 1.x's default
            plan = plan_of(
                SWIFT1 / "x.sh",
                f"swift sft --model_type {model_type} --sft_type lora {written}"
                "--batch_size 4 --quantization_bit 0 --max_length 1024\n",
            )
            assert value(plan, "model_id") == model and value(plan, "lora_targets") == targets
            assert value(plan, "micro_batch") == 4 and value(plan, "seq_len") == 1024
            assert plan.quant_bits is None  # `--quantization_bit 0`: no quantization
            assert not [i for i in plan.issues if i.kind in (IssueKind.INVALID_VALUE, IssueKind.UNKNOWN_VALUE)]


def test_ms_swift_1x_quantization_and_unknown_model_type():
    plan = plan_of(SWIFT1 / "x.sh", "swift sft --model_type qwen-7b-chat --quantization_bit 4\n")
    assert value(plan, "quant_bits") == 4
    plan = plan_of(SWIFT1 / "x.sh", "swift sft --model_type not-a-registered-type --sft_type lora\n")
    assert plan.model_id is None
    msg = [i.message for i in plan.issues if i.kind == IssueKind.NOT_READ]
    assert msg and "not-a-registered-type" in msg[0] and "registry" in msg[0]
    # ms-swift 3.x/4.x: `--model_type` names the architecture beside `--model`, which wins
    plan = plan_of(SWIFT1 / "x.sh", "swift sft --model_type qwen2_5 --model Qwen/Qwen2.5-7B-Instruct\n")
    assert value(plan, "model_id") == "Qwen/Qwen2.5-7B-Instruct"


def test_ms_swift_1x_galore_and_llamapro_examples():
    plan = plan_of(SWIFT1 / "qwen1half_7b_chat_galore_sft.sh")
    assert value(plan, "model_id") == "Qwen/Qwen1.5-7B-Chat" and value(plan, "seq_len") == 4096
    assert value(plan, "peft_method") == "none" and value(plan, "optimizer") == "galore_adamw"
    plan = plan_of(SWIFT1 / "yi_6b_chat_llamapro_sft.sh")
    assert value(plan, "model_id") == "01-ai/Yi-6B-Chat"
    assert value(plan, "peft_method") == "freeze" and value(plan, "trained_layers") == 4
    assert value(plan, "trained_where") == "spread" and value(plan, "added_layers") == 4
    assert "sft_type" not in unmodelled_keys(plan)


# --- ms-swift 3.x/4.x memory-saving methods --------------------------------------------------------------------------


def test_ms_swift_4x_galore_lisa_llamapro_are_not_full_adamw():
    lisa = plan_of(SWIFT4 / "lisa_train.sh")
    assert value(lisa, "trained_layers") == 2 and value(lisa, "trained_where") == "rotating"
    galore = plan_of(SWIFT4 / "galore_train_galore.sh")
    assert value(galore, "optimizer") == "galore_adamw"  # per-parameter optimizers, stepped together
    qgalore = estimate(SWIFT4 / "galore_train_qgalore.sh")
    assert qgalore["unmodelled"] == [] and qgalore["sources"]["optimizer"]["value"] == "q_galore_adamw8bit"
    llamapro = estimate(SWIFT4 / "llamapro_train.sh")
    assert llamapro["unmodelled"] == [] and llamapro["sources"]["added_layers"]["value"] == 4
    rank = plan_of(
        SWIFT4 / "x.sh",
        "swift sft --model Qwen/Qwen2.5-7B-Instruct --train_type full --use_galore true "
        "--galore_rank 64 --galore_target_modules q_proj v_proj\n",
    )
    assert value(rank, "optimizer_rank") == 64 and value(rank, "optimizer_targets") == ["q_proj", "v_proj"]


def test_ms_swift_lisa_estimate_is_below_full_fine_tuning(tmp_path):
    text = (SWIFT4 / "lisa_train.sh").read_text(encoding="utf-8")
    full = tmp_path / "full.sh"
    full.write_text(text.replace("    --lisa_activated_layers 2 \\\n", ""), encoding="utf-8")
    lisa = estimate(SWIFT4 / "lisa_train.sh")
    whole = estimate(full)
    assert lisa["params_trainable"] < whole["params_trainable"] / 4
    assert lisa["peak"]["device_gib"] < whole["peak"]["device_gib"]


# --- LLaMA-Factory 0.6's train_bash.py under a launcher ----------------------------------------------------------


def test_llamafactory_train_bash_under_accelerate_is_read_as_llamafactory():
    """LLaMA-Factory ≤ 0.7 ran `accelerate launch --config_file … src/train_bash.py --stage sft …` (its v0.6.3
    examples): the flags are LLaMA-Factory's (`--stage`, `--quantization_bit`), the accelerate config is the
    launcher's — FSDP with parameters offloaded to the CPU, over the two processes it names."""
    root = FIXTURES / "llamafactory" / "v0.6.3"
    path = root / "examples" / "extras" / "fsdp_qlora" / "sft.sh"
    plan = parse_document(path.read_text(encoding="utf-8"), str(path), workspace=root).plan
    assert unmodelled_keys(plan) == []
    assert value(plan, "peft_method") in ("lora", "qlora") and value(plan, "quant_bits") == 4
    assert value(plan, "dist_strategy") == "fsdp" and value(plan, "offload_params") is True
    report = estimate(path, cwd=root)
    assert report["gpu"]["count"] == 2 and report["unmodelled"] == []
    assert report["components_gib"].get("weights", 0) < 1  # the 4-bit 70B's weights live on the CPU


# --- LLaMA-Factory with unsloth ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["yaml", "override"])
def test_llamafactory_use_unsloth_offloads_checkpoints_and_names_what_is_not_modelled(tmp_path, how):
    base = (LLAMAFACTORY / "qwen3_lora_sft.yaml").read_text(encoding="utf-8")
    plain = tmp_path / "plain.yaml"
    plain.write_text(base, encoding="utf-8")
    if how == "yaml":
        target = tmp_path / "unsloth.yaml"
        target.write_text(base + "use_unsloth: true\ndisable_gradient_checkpointing: true\n", encoding="utf-8")
    else:
        target = tmp_path / "run.sh"
        target.write_text("llamafactory-cli train plain.yaml use_unsloth=true\n", encoding="utf-8")
    plan = plan_of(target)
    assert value(plan, "activation_offload") is True and value(plan, "grad_checkpointing") is True
    assert unmodelled_keys(plan) == ["use_unsloth"]
    with_unsloth, without = estimate(target, cwd=tmp_path), estimate(plain, cwd=tmp_path)
    assert [u["key"] for u in with_unsloth["unmodelled"]] == ["use_unsloth"] and without["unmodelled"] == []
    assert with_unsloth["components_gib"]["activations"] < without["components_gib"]["activations"]


def test_llamafactory_unsloth_gc_offloads_only_with_checkpointing(tmp_path):
    base = (LLAMAFACTORY / "qwen3_lora_sft.yaml").read_text(encoding="utf-8")
    on = tmp_path / "on.yaml"
    on.write_text(base + "use_unsloth_gc: true\n", encoding="utf-8")
    off = tmp_path / "off.yaml"
    off.write_text(base + "use_unsloth_gc: true\ndisable_gradient_checkpointing: true\n", encoding="utf-8")
    assert value(plan_of(on), "activation_offload") is True
    assert plan_of(off).activation_offload is None


# --- torchtune 0.1 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama2_7B_lora_single_device.yaml", "llama2_7B_full.yaml", "mistral_7B_full.yaml"])
def test_torchtune_0_1_recipes_use_that_versions_dataset_length(name):
    report = estimate(TORCHTUNE01 / name)
    assert source(report, "seq_len") == 512  # alpaca(_cleaned)_dataset's max_seq_len default in 0.1–0.2
    assert source(report, "micro_batch") == 2


def test_torchtune_dataset_length_given_or_by_release():
    text = (TORCHTUNE01 / "llama2_7B_lora_single_device.yaml").read_text(encoding="utf-8")
    given = text.replace("  train_on_input: True\n", "  train_on_input: True\n  max_seq_len: 1536\n")
    assert value(plan_of(TORCHTUNE01 / "x.yaml", given), "seq_len") == 1536
    slim = text.replace("alpaca_cleaned_dataset", "slimorca_dataset")
    assert value(plan_of(TORCHTUNE01 / "x.yaml", slim), "seq_len") == 1024
    # the same config with 0.3+ component paths is not a 0.1 config: no 0.1 dataset default
    current = text.replace("torchtune.utils.", "torchtune.training.")
    assert plan_of(TORCHTUNE01 / "x.yaml", current).seq_len is None


def test_ms_swift_target_regex_replaces_the_target_modules():
    """`--target_regex` (2.x also `--lora_target_regex`) replaces `--target_modules` whatever their order (ms-swift
    swift/arguments/tuner_args.py: `if self.target_regex: self.target_modules = self.target_regex`), and the estimate
    adapts what the pattern selects in the model's module paths."""
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    regex = r"^(model\.layers\.[0-9]+\.self_attn\.(q|v)_proj)$"
    for text in (
        f"swift sft --model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --target_modules all-linear "
        f"--target_regex '{regex}' --max_length 1024\n",
        f"swift sft --model Qwen/Qwen2.5-7B-Instruct --target_regex '{regex}' --tuner_type lora "
        f"--target_modules all-linear --max_length 1024\n",
    ):
        plan = plan_of(SWIFT1 / "x.sh", text)
        assert value(plan, "lora_targets") == [regex] and "replaces --target_modules" in plan.lora_targets.note
        resolved = analyze(text, str(SWIFT1 / "x.sh"), Settings(model_lookup=False)).resolution.resolved
        assert resolved.lora_targets == ("q", "v")
    text = (
        "swift sft --model_type qwen-7b-chat --sft_type lora --lora_target_regex 'transformer.h.[0-9]+.attn.c_attn'\n"
    )
    assert value(plan_of(SWIFT1 / "x.sh", text), "lora_targets") == ["transformer.h.[0-9]+.attn.c_attn"]


def test_ms_swift_target_parameters_are_lora_on_the_fused_experts():
    """`--target_parameters` reaches peft's LoraConfig as it is (ms-swift swift/pipelines/train/tuner.py): the fused
    expert stacks it names get adapters; a name that is no expert stack is said to be not modelled (was dropped)."""
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    text = (
        "swift sft --model Qwen/Qwen3-30B-A3B --tuner_type lora --target_modules q_proj v_proj "
        "--target_parameters mlp.experts.gate_up_proj mlp.experts.down_proj --max_length 1024\n"
    )
    plan = plan_of(SWIFT1 / "x.sh", text)
    assert value(plan, "expert_targets") == ["gate_up", "down"]
    resolved = analyze(text, str(SWIFT1 / "x.sh"), Settings(model_lookup=False)).resolution.resolved
    assert resolved.expert_targets == ("gate_up", "down")
    plan = plan_of(SWIFT1 / "x.sh", text.replace("mlp.experts.down_proj", "lm_head.weight"))
    assert value(plan, "expert_targets") == ["gate_up"]
    assert any("lm_head.weight" in u.what for u in plan.unmodelled)


def test_ms_swift_2x_other_tuners_target_modules_are_their_targets():
    """ms-swift 1.x/2.x `--ia3_target_modules` / `--vera_target_modules` / `--boft_target_modules` set the tuner's
    targets (v2.6.1 swift/llm/utils/argument.py: each becomes target_modules)."""
    for key in ("ia3_target_modules", "vera_target_modules", "boft_target_modules"):
        plan = plan_of(SWIFT1 / "x.sh", f"swift sft --model_type llama2-7b --sft_type ia3 --{key} k_proj v_proj\n")
        assert value(plan, "lora_targets") == ["k_proj", "v_proj"], key


@pytest.mark.parametrize(("impl", "named"), [("grouped_mm", False), ("eager", True), ("scattermoe", True)])
def test_an_experts_implementation_other_than_grouped_mm_is_named(tmp_path, impl, named):
    """transformers' experts implementation (axolotl `experts_implementation`, ms-swift `--experts_impl`, handed to
    from_pretrained): the estimate models grouped_mm, transformers 5's fused kernel, and names any other (it was
    listed as a backend name whose effect the estimate reads, which it did not)."""
    yaml_text = (
        "base_model: Qwen/Qwen3-30B-A3B\nadapter: lora\nlora_target_linear: true\nsequence_len: 2048\n"
        f"micro_batch_size: 1\nexperts_implementation: {impl}\n"
    )
    plan = parse_document(yaml_text, str(tmp_path / "axolotl.yaml")).plan
    assert plan.framework == "axolotl"
    assert any("implementation of the routed experts" in u.what for u in plan.unmodelled) is named
    text = f"swift sft --model Qwen/Qwen3-30B-A3B --tuner_type lora --experts_impl {impl}\n"
    plan = plan_of(SWIFT1 / "x.sh", text)
    assert any("implementation of the routed experts" in u.what for u in plan.unmodelled) is named


@pytest.mark.parametrize(("impl", "named"), [("grouped_mm", False), ("deepgemm", True)])
def test_openrlhf_experts_implementation_is_named_unless_grouped_mm(tmp_path, impl, named):
    text = (
        "deepspeed --module openrlhf.cli.train_sft --pretrain Qwen/Qwen3-30B-A3B --micro_train_batch_size 1 "
        f"--max_len 2048 --zero_stage 3 --ds.experts_implementation {impl}\n"
    )
    plan = parse_document(text, str(tmp_path / "sft.sh")).plan
    what = [u.what for u in plan.unmodelled if "experts" in u.what]
    assert bool(what) is named and len(what) <= 1, what


@pytest.mark.parametrize(
    "script,optimizer",
    [("optimizer_muon.sh", "muon"), ("optimizer_muonclip.sh", "muon")],
)
def test_ms_swift_optimizer_plugin_is_read(script, optimizer):
    # `--optimizer` picks from ms-swift's optimizers_map (swift/optimizers/mapping.py): Muon keeps one momentum
    # buffer for the matrices, not AdamW's two states
    plan = plan_of(SWIFT4 / script)
    assert value(plan, "optimizer") == optimizer and plan.optimizer.key == "optimizer"
    assert unmodelled_keys(plan) == []


def test_ms_swift_optimizer_plugin_without_its_own_optimizer_or_unknown():
    base = "swift sft --model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --optim adamw_torch --optimizer "
    same = plan_of(SWIFT4 / "x.sh", base + "multimodal --vit_lr 1e-5\n")  # `--optim`'s optimizer, per-group lr
    assert value(same, "optimizer") == "adamw_torch" and unmodelled_keys(same) == []
    custom = plan_of(SWIFT4 / "x.sh", base + "my_optimizer\n")
    assert unmodelled_keys(custom) == ["optimizer"]
    assert "optimizers_map" in custom.unmodelled[0].what


def test_ms_swift_quant_method_hqq_is_read_and_its_layout_named_as_approximate():
    plan = plan_of(SWIFT4 / "qlora_hqq.sh")
    assert value(plan, "quant_type") == "hqq" and value(plan, "quant_bits") == 4
    result = estimate(SWIFT4 / "qlora_hqq.sh")
    assert result["approximate"] and any("HQQ" in r for r in result["approximate_reasons"])


def test_llamafactory_fp8_is_read_by_its_backend(tmp_path):
    path = LLAMAFACTORY / "llama3_fp8_fsdp_sft.yaml"
    plan = plan_of(path)  # fp8_backend: torchao — torchao float8 linears (src/llamafactory/train/fp8_utils.py)
    assert value(plan, "float8_linears") is True and unmodelled_keys(plan) == []
    te = plan_of(path, path.read_text(encoding="utf-8").replace("fp8_backend: torchao", "fp8_backend: te"))
    assert value(te, "float8_linears") is None and unmodelled_keys(te) == ["fp8"]
    result = estimate(path)
    assert any("float8 linears" in r for r in result["approximate_reasons"])


def test_transformers_5_activation_checkpointing_spelling_is_read():
    # transformers 5 training_args.py: `gradient_checkpointing*` are deprecated aliases of `activation_checkpointing*`
    base = (
        "python run_clm.py --model_name_or_path Qwen/Qwen2.5-7B-Instruct --do_train "
        "--per_device_train_batch_size 4 --block_size 2048 --bf16 --output_dir x "
    )
    old = plan_of(Path("old.sh"), base + "--gradient_checkpointing true\n")
    new = plan_of(Path("new.sh"), base + "--activation_checkpointing\n")
    assert value(old, "grad_checkpointing") is True and value(new, "grad_checkpointing") is True
    # modeling_utils.py `activation_checkpointing_enable(kwargs, every_n_layers, offload)`
    kw = plan_of(
        Path("kw.sh"),
        base + "--activation_checkpointing --activation_checkpointing_kwargs "
        '\'{"every_n_layers": 2, "offload": true, "use_reentrant": false}\'\n',
    )
    assert value(kw, "checkpoint_every") == 2 and value(kw, "activation_offload") is True
    assert value(kw, "ckpt_reentrant") is False
