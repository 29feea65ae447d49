"""Online RL memory phases as a user sees them in `vramlens estimate --format json`: a colocated generation engine
that sleeps while the policy trains (verl's free_cache_engine and its always-on sleep in 0.3-0.4, TRL's
`vllm_enable_sleep_mode`, OpenRLHF's `--vllm.enable_sleep`), verl's FSDP mixed precision (no autocast weight copies)
and verl's CPU-offloaded reference policy.

verl's own examples are judged on the GPUs they ran on: 80 GB NVIDIA cards (H100/A100-80GB), 8 per node as the
scripts say (`trainer.n_gpus_per_node=8`; run_gemma.sh: 2). verl's docs list the runs of these scripts among its
baselines (docs/algo/baseline.md at v0.4.1: deepseek-llm-7b-chat PPO, Qwen2-7B-Instruct GRPO with
run_qwen2-7b_seq_balance.sh; docs/algo/ppo.md: run_gemma.sh), so each fits in 80 GB at its settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VERL = FIXTURES / "verl"
GPU = "H100-80GB"
GPU_GIB = 80.0


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
            GPU,
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
    return result["sources"][concept]["value"] if concept in result["sources"] else None


def unmodelled(result: dict) -> set[str]:
    return {u["key"] for u in result.get("unmodelled", [])}


def with_overrides(tmp_path: Path, fixture: Path, *overrides: str, name: str = "run.sh") -> Path:
    """The example script with hydra overrides appended to its launch line (where its `$@` stands)."""
    text = fixture.read_text(encoding="utf-8")
    assert "$@" in text
    p = tmp_path / name
    p.write_text(text.replace("$@", " ".join(overrides)), encoding="utf-8")
    return p


# --- verl's examples, as they ran -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        "v0.4.1/run_deepseek7b_llm.sh",
        "v0.7.0/run_deepseek7b_llm.sh",
        "v0.4.1/run_qwen2-7b_seq_balance.sh",
        "v0.7.0/run_qwen2-7b_seq_balance.sh",
        "v0.4.1/run_deepseek7b_llm_sp2.sh",
        "v0.2.0.post2/run_gemma.sh",
    ],
)
def test_verl_examples_fit_the_80gb_gpus_they_ran_on(script):
    r = cli(VERL / script)
    assert r["fits"] is True and r["peak"]["device_gib"] < GPU_GIB, (r["phase"], r["phases_gib"])
    # the rollout engine's share is held while it generates (verl releases it while the actor trains)
    assert value(r, "generation_sleeps") is True
    assert r["phases_gib"]["generation"] > value(r, "vllm_memory_share") * GPU_GIB
    # nothing left "not modelled" about the release, the mixed precision or the reference's offload
    assert not unmodelled(r) & {
        "actor_rollout_ref.rollout.free_cache_engine",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision",
        "actor_rollout_ref.ref.fsdp_config.param_offload",
    }


@pytest.mark.parametrize("share", [0.4, 0.7])
def test_free_cache_engine_off_keeps_the_share_in_every_phase(tmp_path, share):
    fixture = VERL / "v0.7.0" / "run_deepseek7b_llm.sh"
    released = cli(
        with_overrides(
            tmp_path, fixture, f"actor_rollout_ref.rollout.gpu_memory_utilization={share}", name="released.sh"
        )
    )
    kept = cli(
        with_overrides(
            tmp_path,
            fixture,
            f"actor_rollout_ref.rollout.gpu_memory_utilization={share}",
            "actor_rollout_ref.rollout.free_cache_engine=False",
            name="kept.sh",
        )
    )
    assert value(released, "generation_sleeps") is True and value(kept, "generation_sleeps") is False
    for phase in ("forward-backward", "recompute", "optimizer-step", "reference-forward"):
        assert kept["phases_gib"][phase] - released["phases_gib"][phase] == pytest.approx(share * GPU_GIB, abs=0.02)
    assert kept["phases_gib"]["generation"] == pytest.approx(released["phases_gib"]["generation"], abs=0.02)
    assert kept["peak"]["allocated_gib"] > released["peak"]["allocated_gib"]


def test_sglang_rollout_is_released_like_vllm(tmp_path):
    r = cli(
        with_overrides(
            tmp_path, VERL / "v0.7.0" / "run_qwen2-7b_seq_balance.sh", "actor_rollout_ref.rollout.name=sglang"
        )
    )
    assert value(r, "generation_sleeps") is True
    kept = cli(
        with_overrides(
            tmp_path,
            VERL / "v0.7.0" / "run_qwen2-7b_seq_balance.sh",
            "actor_rollout_ref.rollout.name=sglang",
            "actor_rollout_ref.rollout.free_cache_engine=False",
            name="kept.sh",
        )
    )
    assert kept["phases_gib"]["forward-backward"] - r["phases_gib"]["forward-backward"] == pytest.approx(
        0.6 * GPU_GIB, abs=0.02
    )


def _verl_plan(version: str, *overrides: str):
    """verl's reader at one release (the public `formats.verl.read`), for the differences between releases."""
    from vramlens.formats import verl
    from vramlens.formats.settings import PlanBuilder, Setting

    given = {}
    for o in (
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "trainer.n_gpus_per_node=8",
        *overrides,
    ):
        key, v = o.split("=", 1)
        given[key] = Setting(key=key, path=(key,), value=v)
    b = PlanBuilder("run.sh", "shell", None)
    verl.read(b, given, version=version)
    return b.plan


@pytest.mark.parametrize(
    "version,free,sleeps",
    [
        ("0.4.1", "False", True),
        ("0.3.0.post1", "False", True),  # sleep(level=1) after every rollout
        ("0.5.0", "False", False),
        ("0.7.0", "False", False),  # free_cache_engine decides
        ("0.5.0", "True", True),
        ("0.2.0.post2", "True", True),
        ("0.2.0.post2", "False", False),
    ],
)
def test_release_follows_each_verl_version(version, free, sleeps):
    plan = _verl_plan(version, f"actor_rollout_ref.rollout.free_cache_engine={free}")
    assert plan.generation_sleeps.value is sleeps
    assert not [u for u in plan.unmodelled if "free_cache_engine" in (u.key or "")]


@pytest.mark.parametrize(
    "version,dtype",
    [("0.2.0.post2", "bf16"), ("0.4.1", "bf16"), ("0.5.0", "bf16"), ("0.6.1", "fp32"), ("0.7.0", "fp32")],
)
def test_reference_dtype_by_verl_version_and_always_offloaded(version, dtype):
    plan = _verl_plan(version)
    # fsdp_workers.py: `torch.float32 if self._is_actor else torch.bfloat16` unless `ref.fsdp_config.model_dtype`,
    # which verl's FSDPEngineConfig sets to fp32 from 0.6
    assert plan.ref_dtype.value == dtype and plan.ref_offload.value is True
    assert _verl_plan(version, "actor_rollout_ref.ref.fsdp_config.model_dtype=bfloat16").ref_dtype.value == "bf16"


@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"])
def test_verl_reference_policy_holds_no_gpu_memory_between_its_forwards(tmp_path, model):
    def run(kl: str) -> dict:
        return cli(
            with_overrides(
                tmp_path,
                VERL / "v0.7.0" / "run_qwen2-7b_seq_balance.sh",
                f"actor_rollout_ref.model.path={model}",
                f"actor_rollout_ref.actor.use_kl_loss={kl}",
                name=f"kl_{kl}.sh",
            )
        )

    with_ref, without = run("True"), run("False")
    assert value(with_ref, "ref_offload") is True
    assert with_ref["components_gib"]["reference"] == 0
    # the optimizer step holds what stays resident: the same with and without the reference policy
    assert with_ref["phases_gib"]["optimizer-step"] == pytest.approx(without["phases_gib"]["optimizer-step"], abs=0.01)


# --- verl's FSDP mixed precision ------------------------------------------------------------------------------


@pytest.mark.parametrize("checkpointing", ["True", "False"])
def test_verl_fsdp_mixed_precision_caches_no_weight_copies(tmp_path, checkpointing):
    r = cli(
        with_overrides(
            tmp_path,
            VERL / "v0.7.0" / "run_deepseek7b_llm.sh",
            f"actor_rollout_ref.model.enable_gradient_checkpointing={checkpointing}",
        )
    )
    assert value(r, "fsdp_mixed_precision") is True and value(r, "weight_dtype") == "fp32"
    # no end-of-forward phase where autocast's cache holds every block's bf16 weight copy
    assert "loss-forward" not in r["phases_gib"]
    assert "actor_rollout_ref.actor.fsdp_config.mixed_precision" not in unmodelled(r)


def test_fsdp_mixed_precision_removes_the_autocast_copies():
    """The public estimate: the same resolved verl plan with and without FSDP's mixed precision. Without it, autocast
    over the fp32 weights keeps 16-bit copies (the LM head's through backward, every trained block's until the end of
    the forward under checkpointing); with it there are none."""
    from vramlens.estimate import GIB, estimate
    from vramlens.estimate import components as C
    from vramlens.resolve import resolve
    from vramlens.settings import Settings

    for model, checkpointing in (
        ("Qwen/Qwen2.5-7B-Instruct", "True"),
        ("Qwen/Qwen2.5-0.5B-Instruct", "True"),
        ("Qwen/Qwen2.5-0.5B-Instruct", "False"),
    ):
        plan = _verl_plan(
            "0.7.0",
            f"actor_rollout_ref.model.path={model}",
            f"actor_rollout_ref.model.enable_gradient_checkpointing={checkpointing}",
        )
        rp = resolve(plan, Settings(gpu=GPU, model_lookup=False)).resolved
        assert rp.fsdp_mixed_precision and rp.amp
        autocast = rp.with_changes(fsdp_mixed_precision=False)
        kept = C.autocast_weight_cache(autocast, C.params(autocast))
        assert kept > 0.1 * GIB
        assert C.autocast_forward_cache(rp) == C.autocast_weight_cache(rp, C.params(rp)) == 0
        with_mp, without = estimate(rp, limits=False), estimate(autocast, limits=False)
        assert without.phases["forward-backward"] - with_mp.phases["forward-backward"] >= kept
        assert "loss-forward" not in with_mp.phases
        if checkpointing == "True":
            # the end of the forward, with every block's cached copy, is where autocast alone would peak
            assert C.autocast_forward_cache(autocast) > GIB * 0.5 and "loss-forward" in without.phases

            def training(e):
                return max(v for k, v in e.phases.items() if k not in ("generation", "reference-forward"))

            assert training(without) - training(with_mp) >= kept


# --- TRL GRPO and OpenRLHF sleep mode -------------------------------------------------------------------------


@pytest.mark.parametrize("share,accum", [(0.3, 4), (0.5, 1)])
def test_trl_grpo_with_and_without_vllm_sleep_mode(tmp_path, share, accum):
    base = (FIXTURES / "objectives" / "trl_grpo.yaml").read_text(encoding="utf-8")
    base = base.replace("vllm_gpu_memory_utilization: 0.3", f"vllm_gpu_memory_utilization: {share}")
    base = base.replace("gradient_accumulation_steps: 4", f"gradient_accumulation_steps: {accum}")
    awake, asleep = tmp_path / "awake.yaml", tmp_path / "asleep.yaml"
    awake.write_text(base, encoding="utf-8")
    asleep.write_text(base + "vllm_enable_sleep_mode: true\n", encoding="utf-8")
    a, s = cli(awake), cli(asleep)
    assert value(a, "generation_sleeps") is None and value(s, "generation_sleeps") is True
    assert s["sources"]["generation_sleeps"]["from"].startswith("vllm_enable_sleep_mode")
    for phase in ("forward-backward", "optimizer-step"):
        assert a["phases_gib"][phase] - s["phases_gib"][phase] == pytest.approx(share * GPU_GIB, abs=0.02)
    assert a["phases_gib"]["generation"] == pytest.approx(s["phases_gib"]["generation"], abs=0.02)
    assert s["peak"]["allocated_gib"] < a["peak"]["allocated_gib"]
    assert s["phases_gib"]["generation"] > share * GPU_GIB


def test_trl_grpo_sleep_mode_false_keeps_the_share(tmp_path):
    base = (FIXTURES / "objectives" / "trl_grpo.yaml").read_text(encoding="utf-8")
    off = tmp_path / "off.yaml"
    off.write_text(base + "vllm_enable_sleep_mode: false\n", encoding="utf-8")
    r = cli(off)
    assert value(r, "generation_sleeps") is False
    assert r["phases_gib"]["optimizer-step"] > 0.3 * GPU_GIB


def test_openrlhf_vllm_sleep_is_read_not_listed_as_unmodelled(tmp_path):
    from vramlens.formats import parse_document
    from vramlens.resolve import resolve
    from vramlens.settings import Settings

    text = (FIXTURES / "openrlhf" / "v0.11.0" / "train_ppo_ray_hybrid_engine.sh").read_text(encoding="utf-8")
    text = text.replace("OpenRLHF/Llama-3-8b-sft-mixture", "meta-llama/Meta-Llama-3-8B")
    results = {}
    for name, body in (("sleep", text), ("awake", text.replace("   --vllm.enable_sleep \\\n", ""))):
        plan = parse_document(body, str(tmp_path / f"{name}.sh")).plan
        assert "vllm.enable_sleep" not in {u.key for u in plan.unmodelled}
        results[name] = resolve(plan, Settings(gpu=GPU, model_lookup=False)).resolved
    assert results["sleep"].generation_sleeps and not results["awake"].generation_sleeps
    from vramlens.estimate import estimate

    sleep, awake = estimate(results["sleep"], limits=False), estimate(results["awake"], limits=False)
    assert awake.phases["optimizer-step"] - sleep.phases["optimizer-step"] == int(0.5 * GPU_GIB * 2**30)


def test_openrlhf_deepspeed_sleep_offloads_the_states_between_updates_not_during_them(tmp_path):
    """OpenRLHF's own colocated example on 8 H100s (`--ds.enable_sleep`): `offload_deepspeed_states` moves each
    DeepSpeed model's optimizer states and fp32 master weights to the CPU after its update and `reload_states` brings
    them back before the next (openrlhf/trainer/ppo_trainer.py `ppo_train`). The update phases are the same with and
    without it; the rollout holds vLLM's share and the 16-bit weights, not the policy's or the critic's states, and no
    ZeRO-3 gather of the critic (that is TRL's PPO `generate()`, not a vLLM rollout). The example fits."""
    path = FIXTURES / "openrlhf" / "v0.11.0" / "train_ppo_ray_hybrid_engine.sh"
    text = path.read_text(encoding="utf-8")
    (tmp_path / "awake.sh").write_text(text.replace("   --ds.enable_sleep \\\n", ""), encoding="utf-8")
    sleep, awake = cli(path), cli(tmp_path / "awake.sh")
    assert value(sleep, "offload_optimizer_idle") is True and value(awake, "offload_optimizer_idle") is None
    assert "ds.enable_sleep" not in unmodelled(sleep)
    for phase in ("forward-backward", "optimizer-step"):
        assert sleep["phases_gib"][phase] == awake["phases_gib"][phase]
    assert sleep["phases_gib"]["generation"] < awake["phases_gib"]["generation"] - 5
    assert sleep["components_gib"].get("temporaries", 0) < 1  # no ZeRO-3 gather of the critic for vLLM
    assert sleep["fits"]
    # the critic group trains apart from the actor's, at the same micro_train_batch_size
    assert value(sleep, "critic_micro_batch") == value(sleep, "micro_batch") and "critic-update" in sleep["phases_gib"]


SWIFT_GRPO = """CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 \\
swift rlhf \\
    --rlhf_type grpo \\
    --model Qwen/Qwen2.5-7B-Instruct \\
    --tuner_type full \\
    --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.4 --sleep_level 1 \\
    --deepspeed zero3 \\
    --beta 0.04 \\
    --per_device_train_batch_size 2 --max_completion_length 1024 --num_generations 8 {offload}
"""


def test_ms_swift_offload_model_and_optimizer_last_only_the_generation(tmp_path):
    """ms-swift's `--offload_model` / `--offload_optimizer` take the policy (with the reference) and the optimizer
    states off the GPU around vLLM's generation and load them back after it (swift/rlhf_trainers/grpo_trainer.py
    `offload_context`): the update and log-prob phases keep them; the generation phase does not."""
    kept, moved = tmp_path / "kept.sh", tmp_path / "moved.sh"
    kept.write_text(SWIFT_GRPO.format(offload=""), encoding="utf-8")
    moved.write_text(SWIFT_GRPO.format(offload="--offload_model true --offload_optimizer true"), encoding="utf-8")
    a, b = cli(kept), cli(moved)
    assert value(b, "offload_params_idle") is True and value(b, "offload_optimizer_idle") is True
    assert value(b, "offload_optimizer") is False  # the DeepSpeed preset's own offload stays off
    for phase in ("forward-backward", "optimizer-step", "reference-forward"):
        assert a["phases_gib"][phase] == b["phases_gib"][phase]
    assert b["phases_gib"]["generation"] < a["phases_gib"]["generation"] - 5


def test_megatron_swift_offload_model_and_optimizer_around_the_generation(tmp_path):
    """Megatron-SWIFT's `megatron rlhf` alike (swift/megatron/trainers/rollout_mixin.py `offload_context`: the
    weight and gradient buffers, the reference and the optimizer states off the GPU while vLLM generates)."""
    text = """NPROC_PER_NODE=8 megatron rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct \\
    --tensor_model_parallel_size 2 --beta 0.04 \\
    --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.5 --sleep_level 1 \\
    --micro_batch_size 2 --global_batch_size 64 --max_completion_length 1024 --num_generations 8 {offload}
"""
    kept, moved = tmp_path / "kept.sh", tmp_path / "moved.sh"
    kept.write_text(text.format(offload=""), encoding="utf-8")
    moved.write_text(text.format(offload="--offload_model true --offload_optimizer true"), encoding="utf-8")
    a, b = cli(kept), cli(moved)
    for phase in ("forward-backward", "optimizer-step"):
        assert a["phases_gib"][phase] == b["phases_gib"][phase]
    assert b["phases_gib"]["generation"] == pytest.approx(0.5 * GPU_GIB, abs=0.05)
    assert a["phases_gib"]["generation"] > b["phases_gib"]["generation"] + 10


@pytest.mark.parametrize(
    ("changes", "prompt", "completion"),
    [
        ({}, 1024, 1024),  # the example leaves the lengths out: --data.max_len's default 2048 total (v0.10+)
        ({"--data.max_len 2048": "--data.max_len 8192"}, 4096, 4096),
        ({"--data.max_len 2048": "--data.max_len 8192 --rollout.max_new_tokens 6000"}, 2192, 6000),
        ({"--data.max_len 2048": "--prompt_max_len 512 --generate_max_len 700"}, 512, 700),  # v0.9's flags
        ({"--data.max_len 2048": "--prompt_max_len 512"}, 512, 1024),  # v0.9's generate_max_len default
    ],
    ids=["defaults", "max-len", "max-new-tokens", "v0.9-flags", "v0.9-default-generate"],
)
def test_openrlhf_rollout_lengths_follow_its_max_len(tmp_path, changes, prompt, completion):
    """OpenRLHF bounds prompt + response by max_len (2048 by default from v0.10; prompt_max_len and
    generate_max_len, 1024 each, before): the update runs at that length, not at TRL's 512 + 512 the estimate
    assumed where the command left the lengths out."""
    text = (FIXTURES / "openrlhf" / "v0.11.0" / "train_ppo_ray_slurm.sh").read_text(encoding="utf-8")
    assert "--data.max_len 2048" in text
    for old, new in changes.items():
        text = text.replace(old, new)
    path = tmp_path / "run.sh"
    path.write_text(text, encoding="utf-8")
    result = cli(path)
    assert (value(result, "prompt_len"), value(result, "completion_len")) == (prompt, completion)
    assert not any("prompt length not set" in a for a in result["assumptions"])


@pytest.mark.parametrize(
    ("changes", "apart", "with_critic"),
    [
        ({}, ["value_model", "reward_model"], ["reward_model"]),  # --colocate_actor_ref, --colocate_critic_reward
        ({"--train.colocate_actor_ref": "--train.max_epochs 1"}, ["value_model", "reward_model", "reference"], None),
        ({"--train.colocate_critic_reward": "--train.colocate_all"}, None, None),
    ],
    ids=["actor-ref-and-critic-reward", "reference-apart", "all-colocated"],
)
def test_openrlhf_ray_groups_keep_each_model_on_its_own_gpus(tmp_path, changes, apart, with_critic):
    """OpenRLHF's Ray trainer gives each model an actor group of its own GPUs unless --colocate_* says otherwise:
    the actor's GPUs hold the actor (and the reference with --colocate_actor_ref), the critic's the critic (and the
    reward model with --colocate_critic_reward); the critic's step is estimated on its own GPUs. Before, every model
    was counted on one GPU. `--ds.adam_offload` takes the critic's optimizer state and gradients off its GPUs as it
    does the actor's (one DeepSpeed strategy)."""
    text = (FIXTURES / "openrlhf" / "v0.11.0" / "train_ppo_ray_slurm.sh").read_text(encoding="utf-8")
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    if apart is not None and "colocate_critic_reward" not in changes and with_critic is None:
        text = text.replace("--train.colocate_critic_reward", "--train.max_epochs 1")
    path = tmp_path / "run.sh"
    path.write_text(text, encoding="utf-8")
    result = cli(path)
    assert value(result, "models_apart") == apart and value(result, "critic_group") == with_critic
    parts, phases = result["components_gib"], result["phases_gib"]
    if apart is None:
        assert parts["value_model"] > 0 and parts["reward_model"] > 0
        return
    assert any(a.startswith("on GPUs of their own: the critic") for a in result["assumptions"])
    critic = phases["critic-update"]
    weights = parts["weights"]  # the actor's ZeRO-3 shard of its bf16 weights: the critic's is the same size
    # the critic's GPUs: its weights (no gradients or optimizer state: offloaded), the reward model with it, its step
    assert critic > 2 * weights if with_critic else critic > weights
    assert phases["forward-backward"] < 79.1 * 0.5  # the actor's GPUs: no critic, no reward model


@pytest.mark.parametrize(("override", "critic"), [(None, True), ("critic.enable=False", False)], ids=["gae", "off"])
def test_verl_critic_enable_decides_whether_a_critic_trains(tmp_path, override, critic):
    """verl's `critic.enable`, where set, decides whether a critic trains whatever the advantage estimator (2026 HEAD
    verl/trainer/ppo/utils.py `need_critic`); GAE trains one by default."""
    fixture = VERL / "v0.7.0" / "run_deepseek7b_llm.sh"
    path = with_overrides(tmp_path, fixture, *([override] if override else []))
    result = cli(path)
    assert value(result, "value_model") is critic
    assert ("critic-update" in result["phases_gib"]) is critic


@pytest.mark.parametrize("checkpointing", [True, False])
def test_verl_critic_checkpointing_is_its_own(tmp_path, checkpointing):
    """verl's critic checkpoints by its own `critic.model.enable_gradient_checkpointing` (default on; workers/
    fsdp_workers.py CriticWorker), whatever the actor does: its update keeps every block's activations without it.
    Before, the critic's step was sized with the actor's setting and the critic's was named as not modelled."""
    fixture = VERL / "v0.7.0" / "run_deepseek7b_llm.sh"
    base = cli(with_overrides(tmp_path, fixture, name="base.sh"))
    path = with_overrides(
        tmp_path, fixture, f"critic.model.enable_gradient_checkpointing={checkpointing}", name="critic.sh"
    )
    result = cli(path)
    assert value(result, "critic_grad_checkpointing") is checkpointing
    assert "critic.model.enable_gradient_checkpointing" not in unmodelled(result)
    assert value(base, "critic_grad_checkpointing") is True  # verl's default, read
    critic, before = result["phases_gib"]["critic-update"], base["phases_gib"]["critic-update"]
    if checkpointing:
        assert critic == before
    else:
        # every block's activations at the critic's micro-batch, where checkpointing kept the block inputs
        assert critic > before + 1.0
    assert result["phases_gib"]["forward-backward"] == base["phases_gib"]["forward-backward"]


@pytest.mark.parametrize("kl", [None, "0"])
def test_openrlhf_reference_is_a_whole_model_even_with_lora(tmp_path, kl):
    """OpenRLHF's reference model loads the policy's checkpoint as a model of its own (train_ppo_ray.py
    ReferenceModelActor), with or without LoRA: on the actor's GPUs under --colocate_actor_ref it is a full copy, not
    the policy with its adapters off. `--init_kl_coef 0` loads none."""
    text = (FIXTURES / "openrlhf" / "v0.11.0" / "train_ppo_ray_slurm.sh").read_text(encoding="utf-8")
    assert "--train.colocate_actor_ref" in text and "--ds.lora.rank" not in text
    text = text.replace("--train.colocate_actor_ref", "--train.colocate_actor_ref --ds.lora.rank 16")
    if kl is not None:
        assert "--algo.kl.init_coef 0.01" in text
        text = text.replace("--algo.kl.init_coef 0.01", f"--algo.kl.init_coef {kl}")
    path = tmp_path / "run.sh"
    path.write_text(text, encoding="utf-8")
    result = cli(path)
    assert value(result, "peft_method") == "lora"
    if kl is None:
        assert result["components_gib"]["reference"] > 0.9 * result["components_gib"]["weights"]
    else:
        assert value(result, "reference_free") is True
        assert result["components_gib"].get("reference", 0) == 0
