"""verl's engine-based SFT trainer (`torchrun … -m verl.trainer.sft_trainer key=value …`, verl/trainer/sft_trainer.py
from 0.6.0), as verl's own launches at main write it (tests/fixtures/verl/main-2026-01-29/sft_engine/, SOURCE beside
them): the config is `sft_trainer_engine.yaml` composed with the `model`, `engine` and `optim` options its launch
picks, over the defaults dumped from verl's wheels (frameworks/schemas/verl/<version>.json `composes`)."""

from __future__ import annotations

import os
from pathlib import Path

from vramlens.analysis import analyze
from vramlens.formats import parse_document, verl
from vramlens.settings import Settings

SFT = Path(__file__).resolve().parents[1] / "fixtures" / "verl" / "main-2026-01-29" / "sft_engine"


def plan_of(path: Path, before: str = ""):
    """`before`: environment the script reads (`BACKEND=megatron`), set ahead of it as a caller would."""
    return parse_document(before + path.read_text(encoding="utf-8"), str(path)).plan


def analysed(path: Path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, model_lookup=False))


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


def unmodelled(plan) -> dict[str, str]:
    return {u.key: u.what for u in plan.unmodelled}


def test_lora_launch_with_sequence_parallelism_and_hybrid_sharding_is_read_and_estimated():
    # NUM_GPUS=4; model.lora_rank=32, lora_alpha=16, target_modules=all-linear; engine=fsdp with
    # engine.strategy=fsdp2, engine.ulysses_sequence_parallel_size=2, engine.fsdp_size=2; data.use_dynamic_bsz=True
    # with max_token_len_per_gpu=2048 and sft_trainer_engine.yaml's max_length 1024
    path = SFT / "run_qwen2_5_05b_sft_peft_sp2.sh"
    plan = plan_of(path)
    assert plan.framework == "verl" and value(plan, "objective") == "sft"
    assert value(plan, "model_id").endswith("/models/Qwen/Qwen2.5-0.5B-Instruct")
    assert value(plan, "world_size") == 4
    assert value(plan, "dist_strategy") == "fsdp" and value(plan, "fsdp_version") == 2
    assert value(plan, "peft_method") == "lora" and value(plan, "lora_r") == 32 and value(plan, "lora_alpha") == 16
    assert value(plan, "lora_targets") == ["all-linear"]
    assert value(plan, "seq_len") == 1024 and value(plan, "packing") is True
    assert value(plan, "micro_batch") == 2048 // 1024 and "max_token_len_per_gpu" in plan.micro_batch.note
    assert value(plan, "grad_checkpointing") is True and value(plan, "weight_dtype") == "fp32"
    gaps = unmodelled(plan)
    # Ulysses over 2 GPUs: each holds half of every sequence's tokens, as under context parallelism
    assert value(plan, "context_parallel") == 2 and "Ulysses" in plan.context_parallel.note
    assert "engine.ulysses_sequence_parallel_size" not in gaps
    # engine.fsdp_size 2 of 4 GPUs: HYBRID_SHARD over a (ddp 2, fsdp 2) mesh (verl/workers/engine/fsdp/utils.py
    # `create_device_mesh`), FSDP groups of 2
    assert "engine.fsdp_size" not in gaps and value(plan, "dp_replicas") == 2
    a = analysed(path)
    assert a.estimate is not None, a.error
    assert a.resolution.resolved.shard_group == 2


def test_e2e_launch_reads_fsdp1_defaults_and_a_whole_run_fsdp_size():
    # one GPU, engine.strategy=fsdp (FSDP_STRATEGY default), engine.fsdp_size=${NUM_GPUS}=1: one FSDP group of the
    # whole run (create_device_mesh), so nothing unmodelled; train_batch_size 128, use_dynamic_bsz
    path = SFT / "run_sft_engine.sh"
    plan = plan_of(path)
    assert value(plan, "model_id").endswith("/models/Qwen/Qwen2.5-0.5B")
    assert value(plan, "fsdp_version") == 1 and value(plan, "zero_stage") == 3
    assert value(plan, "micro_batch") == 2 and value(plan, "seq_len") == 1024
    assert value(plan, "peft_method") is None
    assert unmodelled(plan) == {}
    a = analysed(path)
    assert a.estimate is not None, a.error


def test_dynamic_batch_is_bounded_by_the_samples_a_rank_takes():
    # 8 GPUs, SP 2 → 4 data-parallel ranks of 96 ÷ 4 = 24 samples; 65536 tokens would fit 32 of max_length 2048
    plan = plan_of(SFT / "run_qwen3_vl_2b.sh")
    assert value(plan, "model_id").endswith("/model/Qwen3-VL-2B-Instruct")
    assert value(plan, "seq_len") == 2048
    assert value(plan, "micro_batch") == 24 and "32 fit" in plan.micro_batch.note
    assert value(plan, "fsdp_version") == 2
    assert value(plan, "context_parallel") == 2 and "engine.ulysses_sequence_parallel_size" not in unmodelled(plan)


def test_megatron_engine_group_override_reads_its_parallel_sizes():
    # BACKEND=megatron: `engine=megatron optim=megatron` with TP_SIZE=2, PP_SIZE=2, CP_SIZE=1 (the script's defaults);
    # megatron.yaml: recompute_granularity null, sequence_parallel and the distributed optimizer on
    plan = plan_of(SFT / "run_qwen3_vl_2b.sh", "BACKEND=megatron\n")
    assert value(plan, "dist_strategy") == "megatron"
    assert value(plan, "tensor_parallel") == 2 and value(plan, "pipeline_parallel") == 2
    assert value(plan, "context_parallel") == 1
    assert value(plan, "sequence_parallel") is True and value(plan, "distributed_optimizer") is True
    assert value(plan, "grad_checkpointing") is False
    assert value(plan, "amp_dtype") == "bf16"
    # 8 ÷ (TP 2 × PP 2) = 2 data-parallel ranks of 48 samples; 65536 ÷ 2048 = 32 fit
    assert value(plan, "micro_batch") == 32
    assert "engine.ulysses_sequence_parallel_size" not in unmodelled(plan)


def test_defaults_are_composed_per_version_from_the_dump():
    # hf_model.yaml's use_remove_padding: False at 0.6.1, True at 0.7.0; engine/fsdp.yaml strategy fsdp in both
    old, _ = verl.sft_engine_defaults("0.6.1", {})
    new, chosen = verl.sft_engine_defaults("0.7.0", {"engine": "megatron"})
    assert old["model.use_remove_padding"] is False and old["engine.strategy"] == "fsdp"
    assert new["model.use_remove_padding"] is True and chosen["engine"] == "megatron"
    assert new["engine.tensor_model_parallel_size"] == 1 and "engine.strategy" not in new
    assert new["data.use_dynamic_bsz"] is True and new["data.max_token_len_per_gpu"] == 8192
    assert verl.sft_engine_versions()[0] == "0.6.1"


def test_megatron_engine_builds_its_weights_in_engine_dtype():
    # workers/engine/megatron/transformer_impl.py `param_dtype` = engine.dtype (bfloat16 by default), the same rule as
    # the PPO Megatron actor's `actor.megatron.dtype`: 16-bit weights, fp32 master weights in the optimizer
    plan = plan_of(SFT / "run_qwen3_vl_2b.sh", "BACKEND=megatron\n")
    assert value(plan, "weight_dtype") == "bf16" and value(plan, "amp_dtype") == "bf16"


def test_veomni_engine_is_named_as_not_modelled():
    # the launch's `engine=veomni` branch (BACKEND=veomni): VeOmni's own layout and precision keys
    plan = plan_of(SFT / "run_sft_engine.sh", "BACKEND=veomni\n")
    gaps = unmodelled(plan)
    assert "VeOmni engine" in gaps.get("engine", ""), gaps
    assert value(plan, "dist_strategy") == "fsdp"


def test_an_engine_verl_0_9_adds_is_named_not_read_as_fsdp_in_silence(tmp_path):
    # verl 0.8.0-0.9.1 engine/torchtitan.yaml and engine/automodel.yaml: their own data-parallel shard sizes,
    # activation checkpointing and precision keys, which the FSDP engine's reading does not see
    for engine, name in (("torchtitan", "torchtitan engine"), ("automodel", "NeMo Automodel engine")):
        script = tmp_path / f"{engine}.sh"
        script.write_text(
            "pip install verl==0.9.1\n"
            "torchrun --nproc_per_node=8 -m verl.trainer.sft_trainer \\\n"
            "    model.path=Qwen/Qwen2.5-7B-Instruct data.micro_batch_size_per_gpu=2 \\\n"
            f"    engine={engine} optim={engine} engine.activation_checkpoint=full\n",
            encoding="utf-8",
        )
        plan = plan_of(script)
        gaps = unmodelled(plan)
        assert name in gaps.get("engine", ""), gaps
        assert "estimated as verl's FSDP engine" in " ".join(u.consequence for u in plan.unmodelled)
        assert value(plan, "world_size") == 8


def test_ppo_actor_engines_beside_fsdp_and_megatron_are_named(tmp_path):
    # verl 0.9.1: `actor.strategy=veomni` (engine_workers.py reads `actor.veomni`) and
    # `actor.fsdp_config.strategy=fsdp_turbo` (engine/fsdp.yaml: "fsdp or fsdp2 or fsdp_turbo")
    for key, value, name in (
        ("actor_rollout_ref.actor.strategy", "veomni", "VeOmni engine"),
        ("actor_rollout_ref.actor.fsdp_config.strategy", "fsdp_turbo", "FSDP-Turbo engine"),
    ):
        script = tmp_path / f"{value}.sh"
        script.write_text(
            "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
            "    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct actor_rollout_ref.rollout.name=vllm \\\n"
            f"    trainer.n_gpus_per_node=8 {key}={value}\n",
            encoding="utf-8",
        )
        plan = plan_of(script)
        gaps = unmodelled(plan)
        assert name in gaps.get(key, ""), gaps
    # FSDP and FSDP2 are the engines the reader models
    script.write_text(script.read_text().replace("fsdp_turbo", "fsdp2"), encoding="utf-8")
    assert not any("engine" in k for k in unmodelled(plan_of(script)))
