"""Command-line framework examples read at versions other than the ones their readers were written against
(tests/fixtures/<framework>/<version>/, each with its SOURCE): the values the files state, and scripts that run
something other than training named as such."""

from __future__ import annotations

from pathlib import Path

from vramlens.formats import parse_document

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def parsed(path: Path):
    return parse_document(path.read_text(encoding="utf-8"), str(path))


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


# --- NeMo AutoModel v0.4.0: benchmark recipes state their node count ------------------------------------------


def test_nemo_automodel_benchmark_nodes_multiply_the_headers_gpus_per_node():
    # header: `automodel …/deepseek_v3_te_deepep.yaml --nproc-per-node 8`; benchmark.num_nodes: 32; dp_size unset
    plan = parsed(FIXTURES / "nemo_automodel" / "v0.4.0" / "deepseek_v3_te_deepep.yaml").plan
    assert value(plan, "model_id") == "deepseek-ai/DeepSeek-V3"
    assert value(plan, "world_size") == 32 * 8
    assert plan.world_size.key is not None and "num_nodes" in plan.world_size.key


def test_nemo_automodel_single_node_benchmark_keeps_the_headers_count():
    plan = parsed(FIXTURES / "nemo_automodel" / "main-36044ad3" / "qwen3_moe_30b_te_deepep.yaml").plan
    assert value(plan, "world_size") == 8


# --- ms-swift v2.4.0: inference scripts run through `python llm_infer.py` -------------------------------------


def test_swift_2_x_infer_script_is_named_as_not_training():
    # `PYTHONPATH=../../.. CUDA_VISIBLE_DEVICES=0 python llm_infer.py --ckpt_dir … --max_new_tokens 2048 …`
    result = parsed(FIXTURES / "ms-swift" / "v2.4.0" / "not_training" / "infer.sh")
    assert result.plan is None
    assert any("llm_infer.py" in i.message and "not a training run" in i.message for i in result.issues)


# --- TRL main: a usage example run as `python -i script.py …` -------------------------------------------------


def test_python_i_usage_example_is_a_run_of_the_script():
    # examples/scripts/ppo/ppo.py: the first example is `python -i examples/scripts/ppo/ppo.py …
    # --per_device_train_batch_size 64`, the second `accelerate launch … --per_device_train_batch_size 1`
    path = FIXTURES / "trl" / "f2cd5771" / "examples" / "scripts" / "ppo" / "ppo.py"
    plan = parsed(path).plan
    assert value(plan, "model_id") == "EleutherAI/pythia-1b-deduped"
    assert value(plan, "micro_batch") == 64
    line = path.read_text(encoding="utf-8").splitlines()[plan.micro_batch.span.start_line]
    assert "--per_device_train_batch_size 64" in line


def test_workspace_script_that_imports_a_trainer_is_a_launch_without_known_flags(tmp_path):
    # TRL main examples/scripts/openenv/echo.py (imports GRPOTrainer; `--model` defaults to Qwen/Qwen3-0.6B), run
    # from a shell script with only its own flags; a tool script beside it is not a launch
    echo = FIXTURES / "trl" / "f2cd5771" / "examples" / "scripts" / "openenv" / "echo.py"
    (tmp_path / "echo.py").write_text(echo.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "prep.py").write_text("import json\n", encoding="utf-8")
    run = tmp_path / "run.sh"
    run.write_text("python prep.py data/raw.jsonl\npython echo.py --env-host http://localhost:8001\n")
    plan = parsed(run).plan
    assert plan is not None and value(plan, "model_id") == "Qwen/Qwen3-0.6B"
    run.write_text("python prep.py data/raw.jsonl\n")
    assert parsed(run).plan is None


# --- Megatron-LM: a training script other than pretrain_*.py, the model given by its flags --------------------


def test_megatron_finetune_script_with_model_flags_is_megatron():
    # detxoify_lm/finetune_gpt_distributed-1.3b.sh: `python -m torch.distributed.run … finetune_gpt.py
    # --num-layers 24 --hidden-size 2048 --num-attention-heads 32 --micro-batch-size 4 --seq-length 2048 …`
    plan = parsed(FIXTURES / "megatron" / "Megatron-LM-d98e8a64" / "finetune_gpt_distributed-1.3b.sh").plan
    assert plan.framework == "megatron"
    assert value(plan, "micro_batch") == 4 and value(plan, "seq_len") == 2048
    extra = {k: v.value for k, v in plan.extra.items()} if hasattr(plan, "extra") else {}
    assert extra.get("arch.num_layers") == 24 and extra.get("arch.hidden_size") == 2048


def test_megatron_swift_export_is_named_as_not_training():
    # ms-swift v4.0.0 examples/megatron/export/lora.sh: `megatron export --model … --to_hf true …`
    result = parsed(FIXTURES / "ms-swift" / "v4.0.0" / "not_training" / "megatron_export_lora.sh")
    assert result.plan is None
    assert any("`megatron export`" in i.message and "not a training run" in i.message for i in result.issues)
