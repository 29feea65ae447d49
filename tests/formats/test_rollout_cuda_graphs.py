"""A colocated vLLM engine captures CUDA graphs unless `enforce_eager`: their memory is outside its share and stays
while it sleeps, and is not counted, so every view says so; a run that turns them off is read as such. `enforce_eager`
was listed as a detail of the engine that changes nothing estimated, the wrong way round."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

NOTE = "CUDA graphs (captured unless enforce_eager) are not counted"

VERL = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.max_prompt_length=512 "
    "data.max_response_length=512 actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct "
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 actor_rollout_ref.rollout.name=vllm "
    "trainer.n_gpus_per_node=8{}\n"
)
OPENRLHF = (
    "python3 -m openrlhf.cli.train_ppo_ray --actor_num_gpus_per_node 8 --ref_num_gpus_per_node 8 "
    "--vllm_num_engines 8 --colocate_all_models --vllm_gpu_memory_utilization 0.5 "
    "--pretrain Qwen/Qwen2.5-0.5B-Instruct --micro_train_batch_size 4 --vllm_enable_sleep --zero_stage 3 --bf16{}\n"
)
SWIFT = (
    "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --use_vllm true --vllm_mode colocate "
    "--vllm_gpu_memory_utilization 0.4 --per_device_train_batch_size 4 --train_type full{}\n"
)


def said(tmp_path: Path, text: str) -> bool:
    path = tmp_path / "run.sh"
    path.write_text(text, encoding="utf-8")
    a = analyze(text, str(path), Settings(gpu="H100", model_lookup=False, workspace=tmp_path))
    assert a.estimate is not None and a.resolution.resolved.generation == "vllm-colocate", a.error
    assert not [u for u in a.plan.unmodelled if "enforce_eager" in u.key]
    return any(NOTE in str(x) for x in a.estimate.approximate)


def test_verl_captures_graphs_by_default_from_0_6(tmp_path):
    # verl/trainer/config/rollout/rollout.yaml: enforce_eager True up to v0.5.0, False from v0.6.1
    assert said(tmp_path, VERL.format(""))
    assert not said(tmp_path, VERL.format(" actor_rollout_ref.rollout.enforce_eager=True"))
    pinned = tmp_path / "pinned"
    pinned.mkdir()
    (pinned / "requirements.txt").write_text("verl==0.5.0\n", encoding="utf-8")  # the workspace's verl
    assert not said(pinned, VERL.format(""))


def test_openrlhf_enforce_eager_flag(tmp_path):
    assert said(tmp_path, OPENRLHF.format(""))
    assert not said(tmp_path, OPENRLHF.format(" --enforce_eager"))


def test_ms_swift_vllm_enforce_eager(tmp_path):
    assert said(tmp_path, SWIFT.format(""))
    assert not said(tmp_path, SWIFT.format(" --vllm_enforce_eager true"))


def test_trl_colocated_engine_always_captures_them(tmp_path):
    # trl 1.16.0 trl/generation/vllm_generation.py: the colocated LLM(...) is not passed enforce_eager
    text = (
        "# trl grpo --config grpo.yaml\nmodel_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 8\n"
        "num_generations: 8\nuse_vllm: true\nvllm_mode: colocate\noutput_dir: out\n"
    )
    path = tmp_path / "grpo.yaml"
    path.write_text(text, encoding="utf-8")
    a = analyze(text, str(path), Settings(gpu="H100", model_lookup=False, workspace=tmp_path))
    assert a.resolution.resolved.generation == "vllm-colocate"
    assert any(NOTE in str(x) for x in a.estimate.approximate)
