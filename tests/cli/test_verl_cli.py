"""verl launch lines and configs through `vramlens estimate`, as a user runs it (a subprocess): verl's own example
scripts at two releases, and launch lines that vary the hydra override spellings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "verl"
GPU_GIB = 80.0  # H100-80GB


def cli(path: Path, *extra: str) -> dict:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramlens",
            "estimate",
            str(path),
            "--gpu",
            "H100-80GB",
            "--offline",
            "--format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=path.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def value(result: dict, concept: str):
    return result["sources"][concept]["value"]


def unmodelled(result: dict) -> set[str]:
    return {u["key"] for u in result.get("unmodelled", [])}


def script(tmp_path: Path, body: str, name: str = "run.sh") -> Path:
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    return p


@pytest.mark.parametrize("version", ["v0.4.1", "v0.7.0"])
def test_grpo_example_reads_model_batch_lengths_rollout_share_and_gpus(version):
    r = cli(FIXTURES / version / "run_qwen3-8b.sh")
    assert r["format"] == "shell" and r["objective"] == "grpo"
    assert r["model"]["id"] == "Qwen/Qwen3-8B"
    assert value(r, "micro_batch") == 32
    assert (value(r, "prompt_len"), value(r, "completion_len")) == (512, 1024)
    assert value(r, "offload_params_idle") is False and value(r, "offload_optimizer_idle") is False
    assert value(r, "num_generations") == 5
    assert r["gpu"]["count"] == 8 and value(r, "world_size") == 8
    # vLLM colocated with the actor holds gpu_memory_utilization=0.6 of each 80 GB GPU while it generates, and
    # sleeps while the actor trains
    assert value(r, "generation") == "vllm-colocate" and value(r, "vllm_memory_share") == 0.6
    assert r["phases_gib"]["generation"] > 0.6 * GPU_GIB and value(r, "generation_sleeps") is True
    # use_kl_loss=True: the reference policy is held, on the CPU (FSDP CPU offload); GRPO trains no critic; the
    # reward is a function
    assert value(r, "ref_offload") is True and r["components_gib"]["reference"] == 0
    assert r["components_gib"]["value_model"] == 0 and r["components_gib"]["reward_model"] == 0
    assert value(r, "grad_checkpointing") is True


@pytest.mark.parametrize("version", ["v0.4.1", "v0.7.0"])
def test_ppo_example_trains_a_critic_without_reward_model_or_reference(version):
    r = cli(FIXTURES / version / "run_deepseek7b_llm.sh")
    assert r["objective"] == "ppo" and r["model"]["id"] == "deepseek-ai/deepseek-llm-7b-chat"
    assert value(r, "micro_batch") == 16
    # ppo_mini_batch_size 256 × n 1 ÷ 8 GPUs = 32 sequences per update per GPU, in micro-batches of 16
    assert value(r, "grad_accum") == 2
    assert r["components_gib"]["value_model"] > 0
    assert r["components_gib"]["reward_model"] == 0  # a function reward: reward_model.enable is off
    assert r["components_gib"]["reference"] == 0  # use_kl_loss=False, use_kl_in_reward=False
    assert r["components_gib"]["generation"] == pytest.approx(0.4 * GPU_GIB, abs=0.01)


def test_oldest_release_example_and_ulysses_read_as_a_sequence_split():
    r = cli(FIXTURES / "v0.2.0.post2" / "run_gemma.sh")
    assert r["objective"] == "ppo" and r["model"]["id"] == "google/gemma-2-2b-it"
    assert r["gpu"]["count"] == 2 and value(r, "micro_batch") == 4
    sp = cli(FIXTURES / "v0.4.1" / "run_deepseek7b_llm_sp2.sh")
    # Ulysses over 2 GPUs: each holds half of every sequence's tokens (verl dp_actor.py `ulysses_pad_and_slice_inputs`)
    assert "actor_rollout_ref.actor.ulysses_sequence_parallel_size" not in unmodelled(sp)
    assert value(sp, "context_parallel") == 2
    # the micro-batch divides by data-parallel ranks (world ÷ sp): 256 × 1 ÷ (8 ÷ 2) = 64 per update, micro 32
    assert value(sp, "micro_batch") == 32 and value(sp, "grad_accum") == 2


def test_dynamic_batch_fills_micro_batches_up_to_the_token_budget():
    r = cli(FIXTURES / "v0.4.1" / "run_qwen2-7b_seq_balance.sh")
    # ppo_max_token_len_per_gpu=24000 over prompt 512 + response 1024 = 15 whole sequences
    assert value(r, "micro_batch") == 15
    assert r["sources"]["micro_batch"]["from"].startswith("derived")
    assert value(r, "generation") == "vllm-colocate"  # rollout.name=$rollout_name ("sglang") expanded


def test_sglang_async_is_v0_4s_spelling_of_the_sglang_rollout():
    """v0.4's deprecated `rollout.name=sglang_async` builds the SGLang rollout (v0.4.1 fsdp_workers.py
    `_build_rollout`), so its gpu_memory_utilization is the engine's share of each GPU."""
    r = cli(FIXTURES / "v0.4.1" / "run_qwen2.5-3b_instruct_search_multiturn.sh")
    assert value(r, "generation") == "vllm-colocate"
    assert value(r, "vllm_memory_share") == 0.5
    assert "actor_rollout_ref.rollout.name" not in unmodelled(r)


def test_override_spellings_old_global_micro_batch_nodes_lora_and_offload(tmp_path):
    r = cli(
        script(
            tmp_path,
            """#!/bin/bash
MODEL=Qwen/Qwen2.5-7B-Instruct
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.max_prompt_length=1024 data.max_response_length=2048 \\
    actor_rollout_ref.model.path="$MODEL" \\
    'actor_rollout_ref.actor.ppo_micro_batch_size=64' \\
    actor_rollout_ref.actor.ppo_mini_batch_size=128 \\
    +actor_rollout_ref.model.lora_rank=32 \\
    actor_rollout_ref.model.target_modules=[q_proj,v_proj] \\
    ++actor_rollout_ref.actor.fsdp_config.param_offload=True \\
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=true \\
    actor_rollout_ref.actor.use_kl_loss=False algorithm.use_kl_in_reward=False \\
    actor_rollout_ref.rollout.name=sglang actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \\
    actor_rollout_ref.rollout.n=8 \\
    trainer.n_gpus_per_node=4 trainer.nnodes=2 $@
""",
        )
    )
    assert r["model"]["id"] == "Qwen/Qwen2.5-7B-Instruct"
    assert value(r, "micro_batch") == 8  # the global ppo_micro_batch_size 64 ÷ 8 GPUs
    assert value(r, "world_size") == 8 and r["gpu"]["count"] == 4
    assert value(r, "peft_method") == "lora" and value(r, "lora_r") == 32
    assert value(r, "lora_targets") == ["q_proj", "v_proj"]
    assert value(r, "offload_params_idle") is True and value(r, "offload_optimizer_idle") is True
    assert r["components_gib"]["reference"] == 0  # no KL term
    # SGLang's share, released while the actor trains; the actor's weights and AdamW's states are on the CPU while
    # it generates, and on the GPU for the update
    assert r["phases_gib"]["generation"] == pytest.approx(0.3 * GPU_GIB, abs=0.05)
    assert r["components_gib"]["weights"] > 0 and r["components_gib"]["optimizer"] > 0
    assert (value(r, "prompt_len"), value(r, "completion_len"), value(r, "num_generations")) == (1024, 2048, 8)


def test_rollout_share_moves_the_peak_by_its_fraction_of_the_gpu(tmp_path):
    def run(share: float) -> dict:
        return cli(
            script(
                tmp_path,
                f"""python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \\
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_memory_utilization={share} \\
    trainer.n_gpus_per_node=1
""",
                name=f"run_{int(share * 10)}.sh",
            )
        )

    low, high = run(0.2), run(0.7)
    assert high["components_gib"]["generation"] - low["components_gib"]["generation"] == pytest.approx(
        0.5 * GPU_GIB, abs=0.02
    )
    assert high["peak"]["allocated_gib"] - low["peak"]["allocated_gib"] == pytest.approx(0.5 * GPU_GIB, abs=0.05)


def test_verl_yaml_config_opened_on_its_own_is_read_as_verl():
    r = cli(FIXTURES / "v0.4.1" / "ppo_trainer.yaml")
    assert r["format"] == "verl" and r["objective"] == "ppo"
    assert value(r, "generation") == "vllm-colocate" and value(r, "vllm_memory_share") == 0.5
    assert r["gpu"]["count"] == 8


def test_generation_entry_point_is_not_a_training_run(tmp_path):
    from vramlens.formats import parse_document
    from vramlens.plan import IssueKind

    p = script(
        tmp_path,
        "python3 -m verl.trainer.main_generation trainer.n_gpus_per_node=8 "
        "model.path=Qwen/Qwen2.5-7B-Instruct data.batch_size=256 rollout.gpu_memory_utilization=0.9\n",
    )
    result = parse_document(p.read_text(), str(p))
    assert result.plan is None
    assert [i.kind for i in result.issues] == [IssueKind.NOT_TRAINING]
    assert "verl.trainer.main_generation" in result.issues[0].message


def test_defaults_are_read_per_release():
    from vramlens.formats import verl

    assert {"0.4.1", "0.7.0"} <= set(verl.versions())
    old, new = verl.defaults("0.4.1"), verl.defaults("0.7.0")
    # verl turned padding removal on by default after 0.4 and made the rollout engine a required choice
    assert old["actor_rollout_ref.model.use_remove_padding"] is False
    assert new["actor_rollout_ref.model.use_remove_padding"] is True
    assert old["actor_rollout_ref.rollout.name"] == "vllm" and new["actor_rollout_ref.rollout.name"] == "???"
    assert verl.pick_version("0.4.1") == "0.4.1" and verl.pick_version("0.4.2") == "0.4.1"


def _offload_run(tmp_path: Path, name: str, offload: str, megatron: bool = False) -> dict:
    engine = "megatron" if megatron else "fsdp_config"
    return cli(
        script(
            tmp_path,
            f"""python3 -m verl.trainer.main_ppo {"--config-name=ppo_megatron_trainer " if megatron else ""}\\
    algorithm.adv_estimator=grpo data.max_prompt_length=1024 data.max_response_length=1024 \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct \\
    actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.actor.{engine}.param_offload={offload} \\
    actor_rollout_ref.actor.{engine}.optimizer_offload={offload} \\
    actor_rollout_ref.ref.{engine}.param_offload={offload} \\
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \\
    actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=8 $@
""",
            name=name,
        )
    )


def test_actor_offload_moves_state_off_the_gpu_between_updates_not_during_them(tmp_path):
    """verl never wraps the actor in FSDP's CPUOffload: `param_offload` / `optimizer_offload` load the weights and
    AdamW's states back before each update and offload them after (v0.4.1 fsdp_workers.py `update_actor`). The update
    phase is the same with and without them; the rollout holds the engine's share without the actor's state."""
    kept = _offload_run(tmp_path, "kept.sh", "False")
    moved = _offload_run(tmp_path, "moved.sh", "True")
    assert value(moved, "offload_params_idle") is True and value(moved, "offload_optimizer_idle") is True
    for phase in ("forward-backward", "optimizer-step"):
        assert moved["phases_gib"][phase] == kept["phases_gib"][phase]
    assert moved["phases_gib"]["generation"] == pytest.approx(0.5 * GPU_GIB, abs=0.05)
    assert kept["phases_gib"]["generation"] > moved["phases_gib"]["generation"] + 1


def test_megatron_actor_offload_keeps_the_update_and_adds_the_rollout_phase(tmp_path):
    """The Megatron workers alike (megatron_workers.py `load_megatron_model_to_gpu`, `load_megatron_optimizer`): the
    optimizer state stays counted in the update; the reference's `param_offload` keeps it off the GPU while the actor
    trains; the rollout is a phase of its own, the engine's share beside what is not offloaded."""
    kept = _offload_run(tmp_path, "kept.sh", "False", megatron=True)
    moved = _offload_run(tmp_path, "moved.sh", "True", megatron=True)
    assert moved["components_gib"]["optimizer"] == kept["components_gib"]["optimizer"] > 0
    assert kept["components_gib"]["reference"] > 0 and moved["components_gib"]["reference"] == 0
    assert moved["phases_gib"]["generation"] == pytest.approx(0.5 * GPU_GIB, abs=0.05)
    assert kept["phases_gib"]["generation"] > moved["phases_gib"]["generation"] + 1
    assert not unmodelled(moved)


def test_megatron_cpu_optimizer_override_is_read(tmp_path):
    """`+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=True` sets megatron-core's
    OptimizerConfig field (verl/utils/megatron/optimizer.py `init_megatron_optim_config`): Megatron's hybrid
    optimizer keeps Adam's states on the CPU through the update. `overlap_cpu_optimizer_d2h_h2d` only puts that
    optimizer's host copies on side streams (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py
    `_init_sub_optimizers`), as Megatron-LM's flag of that name, which is read as changing nothing estimated; a field
    the estimate does not know is still named."""
    path = FIXTURES / "main-2026-01-29" / "run_qwen3_vl-8b-megatron.sh"
    r = cli(path)
    assert value(r, "offload_optimizer") is True and value(r, "optimizer_offload_fraction") == 1
    assert r["components_gib"].get("optimizer", 0) == 0
    assert "overlap_cpu_optimizer_d2h_h2d=True" in path.read_text()
    assert not any(k.endswith("overlap_cpu_optimizer_d2h_h2d") for k in unmodelled(r))
    text = path.read_text().replace(
        "overlap_cpu_optimizer_d2h_h2d=True",
        "overlap_cpu_optimizer_d2h_h2d=True \\\n    "
        "+actor_rollout_ref.actor.optim.override_optimizer_config.no_such_field=3",
    )
    other = cli(script(tmp_path, text, name="other.sh"))
    assert any(k.endswith("override_optimizer_config.no_such_field") for k in unmodelled(other))


def test_critic_trains_in_its_own_step_at_its_own_micro_batch(tmp_path):
    """verl's `update_critic` runs apart from the actor's update (ray_trainer.py `fit`), in
    `critic.ppo_micro_batch_size_per_gpu` sequences: a critic micro-batch far above the actor's makes its step the
    peak; its activations scale with it and hold no vocabulary logits (a scalar head)."""

    def run(critic_micro: int) -> dict:
        return cli(
            script(
                tmp_path,
                f"""python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae \\
    data.max_prompt_length=1024 data.max_response_length=1024 \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct critic.model.path=Qwen/Qwen2.5-7B-Instruct \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 critic.ppo_micro_batch_size_per_gpu={critic_micro} \\
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_memory_utilization=0.1 \\
    trainer.n_gpus_per_node=8
""",
                name=f"critic_{critic_micro}.sh",
            )
        )

    small, large = run(2), run(32)
    assert value(small, "critic_micro_batch") == 2 and value(large, "critic_micro_batch") == 32
    assert small["phases_gib"]["critic-update"] < small["phases_gib"]["forward-backward"]
    assert large["phases_gib"]["critic-update"] > large["phases_gib"]["forward-backward"]
    assert large["phase"] == "critic-update"
    grown = large["phases_gib"]["critic-update"] - small["phases_gib"]["critic-update"]
    assert grown > 0 and large["phases_gib"]["forward-backward"] == small["phases_gib"]["forward-backward"]


def test_critic_checkpointing_is_read_and_its_ulysses_split_apart_is_named(tmp_path):
    """The critic's step is estimated with its own checkpointing (tests/cli/test_rollout_memory_phases.py) and with
    the actor's sequence split: a critic that sets its own split is named, not estimated as if it matched."""
    text = (FIXTURES / "v0.7.0" / "run_deepseek7b_llm.sh").read_text(encoding="utf-8")
    assert "critic.model.enable_gradient_checkpointing=True" in text
    same = cli(FIXTURES / "v0.7.0" / "run_deepseek7b_llm.sh")
    assert not {k for k in unmodelled(same) if k.startswith("critic.")}
    apart = script(
        tmp_path,
        text.replace(
            "critic.model.enable_gradient_checkpointing=True", "critic.model.enable_gradient_checkpointing=False"
        ),
    )
    assert "critic.model.enable_gradient_checkpointing" not in unmodelled(cli(apart))
    split = script(tmp_path, text.replace("$@", "critic.ulysses_sequence_parallel_size=2"))
    assert "critic.ulysses_sequence_parallel_size" in unmodelled(cli(split))
