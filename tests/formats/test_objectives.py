"""Preference, RL and distillation configs read as what they are, in every framework's spelling."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.estimate import GIB, estimate
from vramlens.estimate.shapes import shapes
from vramlens.formats import parse_document, parse_file
from vramlens.plan import Origin
from vramlens.resolve import Settings, resolve

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "objectives"


def run(name: str, gpu: str = "H100-80GB"):
    plan = parse_file(FIXTURES / name).plan
    assert plan is not None, name
    res = resolve(plan, Settings(gpu=gpu))
    return plan, res.resolved, estimate(res.resolved, limits=False)


# (fixture, objective, reference, sequences per example, generation)
CASES = [
    ("trl_dpo_full.yaml", "dpo", "copy", 2, "none"),
    ("trl_dpo_peft.yaml", "dpo", "adapters-off", 2, "none"),
    ("trl_dpo_precompute.yaml", "dpo", "none", 2, "none"),
    ("trl_sft_peft.yaml", "sft", "none", 1, "none"),
    ("handbook/dpo/config_full.yaml", "dpo", "copy", 2, "none"),
    ("open_instruct_dpo.yaml", "dpo", "copy", 2, "none"),  # dpo_norm: length-normalised, with a reference
    ("trl_grpo.yaml", "grpo", "none", 1, "vllm-colocate"),
    ("dpo_train.py", "dpo", "copy", 2, "none"),
    ("orpo_train.py", "orpo", "none", 2, "none"),
    ("grpo_train.py", "grpo", "copy", 1, "generate"),
    ("gkd_train.py", "gkd", "none", 1, "none"),
    ("online_dpo_train.py", "online-dpo", "copy", 2, "generate"),
    ("llamafactory_dpo.yaml", "dpo", "copy", 2, "none"),
    ("llamafactory_orpo.yaml", "orpo", "none", 2, "none"),
    ("llamafactory_kto.yaml", "kto", "adapters-off", 1, "none"),
    ("llamafactory_rm.yaml", "rm", "none", 2, "none"),
    ("llamafactory_ppo.yaml", "ppo", "adapters-off", 1, "generate"),
    ("axolotl_dpo.yaml", "dpo", "adapters-off", 2, "none"),
    ("axolotl_orpo.yaml", "orpo", "none", 2, "none"),
    ("axolotl_grpo.yaml", "grpo", "copy", 1, "vllm-colocate"),
    ("torchtune_lora_dpo.yaml", "dpo", "adapters-off", 2, "none"),
    ("torchtune_kd.yaml", "kd", "none", 1, "none"),
    ("torchtune_ppo.yaml", "ppo", "copy", 1, "generate"),
    ("torchtune_grpo.yaml", "grpo", "copy", 1, "generate"),
    ("swift_dpo.sh", "dpo", "copy", 2, "none"),
    ("swift_grpo.sh", "grpo", "adapters-off", 1, "vllm-colocate"),
    ("swift_gkd.sh", "gkd", "none", 1, "none"),
    ("trl_cli_grpo.sh", "grpo", "none", 1, "vllm-server"),
    ("openrlhf_dpo.sh", "dpo", "copy", 2, "none"),
]


@pytest.mark.parametrize("name,objective,reference,sequences,generation", CASES, ids=[c[0] for c in CASES])
def test_each_spelling_is_read_as_its_objective(name, objective, reference, sequences, generation):
    plan, rp, est = run(name)
    if objective == "sft":
        assert plan.objective is None  # nothing says otherwise: supervised fine-tuning
    else:
        assert plan.objective is not None and plan.objective.value == objective
    assert est.objective == objective
    assert rp.reference == reference
    assert rp.sequences_per_example == sequences
    assert rp.generation == generation
    # a frozen copy is its own component, the PEFT base and reference-free losses add none
    assert (est.components["reference"] > 0) == (reference == "copy")


def test_the_objective_points_at_the_text_that_says_it():
    plan = parse_file(FIXTURES / "llamafactory_orpo.yaml").plan
    assert plan.objective.key == "pref_loss" and plan.objective.span.start_line == 5
    plan = parse_file(FIXTURES / "axolotl_dpo.yaml").plan
    assert plan.objective.key == "rl" and plan.objective.span.start_line == 1


def test_full_dpo_counts_the_frozen_reference_as_bf16_weights():
    _, rp, est = run("trl_dpo_full.yaml")
    # Llama-3.1-8B: 8,030,261,248 parameters × 2 bytes = 14.96 GiB, unsharded on one GPU
    assert round(est.components["reference"] / GIB, 2) == 14.96
    assert est.components["reference"] == est.components["weights"]
    assert "reference-forward" in est.phases


def test_peft_dpo_has_no_second_copy_and_twice_the_activations_of_sft():
    _, _, dpo = run("trl_dpo_peft.yaml")
    _, _, sft = run("trl_sft_peft.yaml")
    assert dpo.components["reference"] == 0 and dpo.components["weights"] == sft.components["weights"]
    dpo_fb = dpo.phases["forward-backward"]
    assert dpo_fb > sft.phases["forward-backward"]
    # chosen and rejected: twice the saved activations per example (SFT's fused `nll` head holds no logits, DPO's
    # loss holds them for both sequences)
    assert dpo.activation_bytes_per_sample >= 1.8 * sft.activation_bytes_per_sample


def test_precomputed_reference_log_probs_drop_the_copy():
    _, _, with_ref = run("trl_dpo_full.yaml")
    _, _, pre = run("trl_dpo_precompute.yaml")
    assert pre.components["reference"] == 0 and "reference-forward" not in pre.phases
    assert pre.allocated_bytes < with_ref.allocated_bytes


def test_zero3_shards_the_reference_like_the_policy():
    text = (FIXTURES / "openrlhf_dpo.sh").read_text().replace("deepspeed --module", "deepspeed --num_gpus 8 --module")
    plan = parse_document(text, "train_dpo.sh").plan
    rp = resolve(plan, Settings(gpu="H100-80GB")).resolved
    est = estimate(rp, limits=False)
    assert rp.zero_stage == 3 and rp.world_size == 8
    assert est.components["reference"] == pytest.approx(14.96 * GIB / 8, rel=0.01)


def test_reward_model_has_a_scalar_head_and_no_vocabulary_logits():
    _, rp, est = run("llamafactory_rm.yaml")
    assert rp.scalar_head and est.components["logits"] == 0


def test_grpo_colocated_vllm_holds_its_share_of_the_gpu():
    _, rp, est = run("trl_grpo.yaml")
    assert rp.vllm_memory_share == 0.3
    assert est.components["generation"] == int(0.3 * rp.gpu.memory_gib * GIB)
    # the policy update sees prompt + completion, and logits only for the completion
    assert rp.seq_len == 512 + 1024 and rp.logits_tokens == 1024


def test_grpo_with_generate_has_a_generation_phase_with_the_kv_cache():
    _, rp, est = run("grpo_train.py")
    assert "generation" in est.phases
    # TRL: 4 completions per step × 4 steps per generation, each prompt (512 assumed) + 2048 completion tokens
    assert rp.micro_batch * rp.generations_per_example == 16 and rp.generation_len == 512 + 2048
    kv = 16 * rp.generation_len * rp.arch.layers * 2 * rp.arch.kv_dim * 2
    assert est.phases["generation"] - est.phases["optimizer-step"] >= kv - est.components["gradients"]


def test_ppo_holds_reference_reward_and_a_trained_value_model():
    _, rp, est = run("torchtune_ppo.yaml")
    assert rp.reward_model and rp.value_model and rp.generation_len == 512 + 128
    parts = est.components
    # the reward model is the policy's backbone with a one-wide score head in place of the (tied) vocabulary head:
    # torchtune's classifier builders add `output` = Linear(embed_dim, 1) beside the kept token embeddings
    assert parts["reward_model"] == parts["reference"] + rp.arch.hidden * 2 > 0
    assert parts["value_model"] > 3 * parts["reward_model"]  # weights + gradients + AdamW states
    assert {"generation", "reference-forward"} <= set(est.phases)


def test_torchtune_ppo_compile_is_read_as_written(tmp_path):
    # every torchtune release with the PPO recipe (v0.3.0 to v0.6.1 and main, recipes/ppo_full_finetune_single_device.py
    # `_setup_models`) compiles its four models when `compile: True`; the calls were commented out only in a
    # development commit (010eab0) that no release contains
    text = (FIXTURES / "torchtune_ppo.yaml").read_text(encoding="utf-8") + "\ncompile: True\n"
    plan = parse_document(text, str(tmp_path / "ppo.yaml")).plan
    assert plan.objective.value == "ppo" and plan.compile.value is True
    assert plan.compile.origin == Origin.FILE


def test_distillation_adds_the_teacher_and_its_logits():
    _, rp, est = run("torchtune_kd.yaml")
    assert rp.teacher is not None and rp.teacher.id.endswith("Llama-3.1-8B")
    assert round(est.components["teacher"] / GIB, 2) == 14.96
    assert est.components["teacher_logits"] > 0 or "teacher-forward" == est.phase
    _, rp, est = run("gkd_train.py")
    assert rp.teacher.id.startswith("Qwen/Qwen2.5-14B") and est.components["teacher"] > est.components["weights"]


# TRL's GKD documentation writes the teacher as a model the script loads and hands to the trainer; its scripts pass
# an id the trainer loads itself (trl docs/source/gkd_trainer.md; trl/scripts/gkd.py)
GKD_LOADED = """
import torch
from transformers import AutoModelForCausalLM
from trl import GKDConfig, GKDTrainer

teacher_model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct"{teacher_dtype})
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", torch_dtype=torch.bfloat16)
args = GKDConfig(output_dir="out", per_device_train_batch_size=4, bf16=True, max_length=1024)
trainer = GKDTrainer(model=model, teacher_model=teacher_model, args=args)
"""
GKD_BY_ID = """
from trl import GKDConfig, GKDTrainer

args = GKDConfig(output_dir="out", per_device_train_batch_size=4, bf16=True, max_length=1024,
                 model_init_kwargs={{"torch_dtype": "bfloat16"}}{teacher_kwargs})
trainer = GKDTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", teacher_model="Qwen/Qwen2.5-7B-Instruct", args=args)
"""


def _gkd(tmp_path, text: str, transformers: str | None = None):
    tmp_path.mkdir(exist_ok=True)
    if transformers:
        (tmp_path / "requirements.txt").write_text(f"transformers=={transformers}\n")
    plan = parse_document(text, str(tmp_path / "gkd.py")).plan
    res = resolve(plan, Settings(gpu="A100-80GB", workspace=tmp_path))
    return plan, res, estimate(res.resolved, limits=False)


@pytest.mark.parametrize(
    "text", [GKD_LOADED.format(teacher_dtype=""), GKD_BY_ID.format(teacher_kwargs="")], ids=["loaded", "by-id"]
)
def test_a_trl_teacher_handed_to_the_trainer_is_read_as_the_teacher(tmp_path, text):
    """`GKDTrainer(teacher_model=…)`, a loaded model or an id: the teacher was "not named" and sized as the student
    (0.5B instead of 7B), and a teacher loaded before the student would have been read as the model trained."""
    plan, res, est = _gkd(tmp_path, text)
    rp = res.resolved
    assert plan.model_id.value == "Qwen/Qwen2.5-0.5B-Instruct"
    assert plan.teacher_model_id.value == "Qwen/Qwen2.5-7B-Instruct"
    assert rp.teacher is not None and rp.teacher.params_b > 7
    assert est.components["teacher"] > 10 * est.components["weights"]
    # the teacher's load comes first in GKD_LOADED: its dtype-less load is not the student's dtype
    assert rp.weight_dtype == "bf16"


def test_a_trl_teacher_loads_in_transformers_default_dtype(tmp_path):
    """TRL loads the teacher with `from_pretrained` and whatever `teacher_model_init_kwargs` give: with no dtype,
    fp32 under transformers 4 (twice the bytes of the bf16 student's dtype), its stored bf16 under transformers 5."""
    _, res4, est4 = _gkd(tmp_path / "a", GKD_BY_ID.format(teacher_kwargs=""), transformers="4.46.3")
    assert res4.resolved.teacher_dtype == "fp32"
    assert any("loads it in fp32" in str(a) for a in res4.assumptions)
    _, res5, est5 = _gkd(tmp_path / "b", GKD_BY_ID.format(teacher_kwargs=""), transformers="5.2.0")
    assert res5.resolved.teacher_dtype is None  # bf16, the student's
    assert est4.components["teacher"] == pytest.approx(2 * est5.components["teacher"], rel=1e-6)
    told = GKD_BY_ID.format(teacher_kwargs=', teacher_model_init_kwargs={"torch_dtype": "bfloat16"}')
    _, res, est = _gkd(tmp_path / "c", told, transformers="4.46.3")
    assert res.resolved.teacher_dtype is None and est.components["teacher"] == est5.components["teacher"]
    loaded = GKD_LOADED.format(teacher_dtype=", torch_dtype=torch.float32")
    plan, res, _ = _gkd(tmp_path / "d", loaded)
    assert plan.teacher_dtype.value == "fp32" and res.resolved.teacher_dtype == "fp32"


def test_a_reference_loaded_before_the_policy_is_not_read_as_the_policy(tmp_path):
    """`ref_model = AutoModelForCausalLM.from_pretrained(…)` above the policy's load: the first load was taken for
    the model trained (and its dtype for the policy's)."""
    text = """
import torch
from transformers import AutoModelForCausalLM
from trl import DPOConfig, DPOTrainer
ref = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.float32)
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", torch_dtype=torch.bfloat16)
trainer = DPOTrainer(model=model, ref_model=ref, args=DPOConfig(output_dir="out", bf16=True))
"""
    plan, res, est = _gkd(tmp_path, text)
    assert plan.model_id.value == "Qwen/Qwen2.5-0.5B-Instruct" and plan.weight_dtype.value == "bf16"
    assert plan.ref_model_id.value == "Qwen/Qwen2.5-0.5B" and res.resolved.reference_dtype == "fp32"
    assert est.components["reference"] == pytest.approx(2 * est.components["weights"], rel=0.01)


def test_ppo_scores_models_loaded_before_the_policy_are_not_the_policy(tmp_path):
    """TRL's PPO example loads the value and reward models (`AutoModelForSequenceClassification`) before the policy
    (trl v0.19.1 examples/scripts/ppo/ppo.py): the first load was read as the model trained, its classification head
    with it, and the policy's vocabulary logits were dropped."""
    text = """
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
from trl import PPOConfig, PPOTrainer
value_model = AutoModelForSequenceClassification.from_pretrained("Qwen/Qwen2.5-1.5B-Instruct", num_labels=1)
reward_model = AutoModelForSequenceClassification.from_pretrained("Qwen/Qwen2.5-1.5B-Instruct", num_labels=1)
policy = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
ref_policy = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
trainer = PPOTrainer(args=PPOConfig(output_dir="out"), model=policy, ref_model=ref_policy,
                     reward_model=reward_model, value_model=value_model)
"""
    plan, res, est = _gkd(tmp_path, text)
    assert plan.model_id.value == "Qwen/Qwen2.5-7B-Instruct" and plan.task_head is None
    assert plan.reward_model_id.value == plan.critic_model_id.value == "Qwen/Qwen2.5-1.5B-Instruct"
    assert res.resolved.reward_arch is not None and res.resolved.value_arch == res.resolved.reward_arch
    assert not res.resolved.scalar_head  # the policy keeps its vocabulary logits


def test_an_rloo_reward_model_of_unknown_id_is_held_as_the_policy(tmp_path):
    """trl v0.12.2 examples/scripts/rloo/rloo.py loads its reward model from `training_args.reward_model_path`, an
    argument only known when the script runs, and hands it to RLOOTrainer. RLOO counts a reward model only where the
    script gives one: it is held, sized as the policy (its id unknown), and said to be; before, it was said to be
    sized as the policy and not counted at all."""
    text = """
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, HfArgumentParser
from trl import RLOOConfig, RLOOTrainer
parser = HfArgumentParser(RLOOConfig)
training_args = parser.parse_args_into_dataclasses()[0]
reward_model = AutoModelForSequenceClassification.from_pretrained(training_args.reward_model_path, num_labels=1)
policy = AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-1b-deduped")
ref_policy = AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-1b-deduped")
trainer = RLOOTrainer(config=training_args, policy=policy, ref_policy=ref_policy, reward_model=reward_model)
"""
    plan, res, est = _gkd(tmp_path, text)
    assert plan.model_id.value == "EleutherAI/pythia-1b-deduped"
    assert plan.reward_model_id is not None and plan.reward_model_id.value == ""
    assert res.resolved.objective == "rloo" and res.resolved.reward_model and res.resolved.reward_arch is None
    assert est.components["reward_model"] > 0
    assert any("reward model (`reward_model`) is only known when the script runs" in str(a) for a in res.assumptions)


def test_a_grpo_reward_model_named_in_reward_funcs_is_held(tmp_path):
    """A string in GRPO's `reward_funcs` is a reward model TRL loads and keeps beside the policy (TRL's GRPO
    documentation: `reward_funcs="weqweasdas/RM-Gemma-2B"`); it was not counted. Functions are not models."""
    base = """
from trl import GRPOConfig, GRPOTrainer
def format_reward(completions, **kwargs):
    return [1.0 for _ in completions]
trainer = GRPOTrainer(model="Qwen/Qwen2.5-7B-Instruct", reward_funcs={funcs},
                      args=GRPOConfig(output_dir="out", bf16=True))
"""
    plan, res, est = _gkd(tmp_path / "one", base.format(funcs='[format_reward, "Qwen/Qwen2.5-1.5B-Instruct"]'))
    assert plan.reward_model_id.value == "Qwen/Qwen2.5-1.5B-Instruct" and res.resolved.reward_model
    assert est.components["reward_model"] > 0
    plan, res, _ = _gkd(tmp_path / "fn", base.format(funcs="format_reward"))
    assert plan.reward_model_id is None and not res.resolved.reward_model
    plan, _, _ = _gkd(tmp_path / "two", base.format(funcs='["Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B"]'))
    assert any("2 reward models" in str(n) for n in plan.read_notes)


def test_a_named_reference_or_reward_model_is_sized_as_itself(tmp_path):
    """A reference or reward model the config names, of other shapes than the policy, was sized as a copy of the
    policy; a reward model's vocabulary head was counted too (it has a one-wide score head instead)."""
    from vramlens.estimate.components import scalar_head_params
    from vramlens.knowledge.models import find_model

    text = """
from transformers import AutoModelForCausalLM
from trl import DPOConfig, DPOTrainer
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", dtype="bfloat16")
ref = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-1.5B-Instruct", dtype="bfloat16")
trainer = DPOTrainer(model=model, ref_model=ref, args=DPOConfig(output_dir="out", bf16=True))
"""
    _, res, est = _gkd(tmp_path / "dpo", text)
    big = find_model("Qwen/Qwen2.5-1.5B-Instruct").arch
    assert res.resolved.reference_arch == big
    assert est.components["reference"] == pytest.approx(2 * shapes(big).total, rel=0.001)
    line = (
        "deepspeed --module openrlhf.cli.train_ppo --pretrain Qwen/Qwen2.5-7B-Instruct "
        "--reward_pretrain Qwen/Qwen2.5-1.5B-Instruct --micro_train_batch_size 2 --bf16 --zero_stage 2\n"
    )
    plan = parse_document(line, str(tmp_path / "ppo.sh")).plan
    res = resolve(plan, Settings(gpu="H100-80GB", workspace=tmp_path))
    est = estimate(res.resolved, limits=False)
    assert res.resolved.reward_model and res.resolved.reward_arch == big
    assert est.components["reward_model"] == pytest.approx(2 * scalar_head_params(big), rel=0.001)
    # a tied head: the embedding stays, and a score head is added
    assert scalar_head_params(big) == shapes(big).total + big.hidden
    # OpenRLHF's GAE critic starts from the reward model's checkpoint when none is named (train_ppo_ray.py), from the
    # actor's when the reward is remote, from `--critic_pretrain` when given
    assert res.resolved.value_arch == big
    assert plan.critic_model_id.value == "Qwen/Qwen2.5-1.5B-Instruct"
    for extra in (" --critic_pretrain Qwen/Qwen2.5-7B-Instruct", " --remote_rm_url http://rm"):
        plan = parse_document(line.replace("\n", extra + "\n"), str(tmp_path / "ppo.sh")).plan
        assert resolve(plan, Settings(gpu="H100-80GB", workspace=tmp_path)).resolved.value_arch is None, extra
    # verl's `critic.model.path` (it was named as not modelled, and the critic sized as the actor)
    verl = (
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae actor_rollout_ref.model.path="
        "Qwen/Qwen2.5-7B-Instruct critic.model.path=Qwen/Qwen2.5-1.5B-Instruct trainer.n_gpus_per_node=8\n"
    )
    plan = parse_document(verl, str(tmp_path / "verl.sh")).plan
    assert not any(u.key == "critic.model.path" for u in plan.unmodelled)
    assert resolve(plan, Settings(gpu="H100-80GB", workspace=tmp_path)).resolved.value_arch == big


def _fixes(name: str):
    from vramlens.fixes import Fixer

    path = FIXTURES / name
    plan = parse_file(path).plan
    settings = Settings(gpu="H100-80GB")
    rp = resolve(plan, settings).resolved
    base = estimate(rp, limits=False)
    return base, {
        f.id: f
        for f in Fixer(path.read_text(), plan, rp, base, settings.model_copy(update={"headroom": 0.1})).memory_fixes()
    }


def test_fixes_for_a_full_dpo_run_precompute_the_reference_and_say_the_new_peak():
    base, fixes = _fixes("trl_dpo_full.yaml")
    fix = fixes["precompute-ref"]
    assert fix.estimate_after.components["reference"] == 0
    assert f"peak {fix.estimate_after.device_bytes / GIB:.1f} GiB" in fix.title
    assert base.device_bytes - fix.estimate_after.device_bytes >= 14.96 * GIB
    assert [e.new_text for e in fix.edits] == ["precompute_ref_log_probs: true\n"]


def test_fixes_for_colocated_vllm_lower_its_share_or_move_it_to_a_server():
    base, fixes = _fixes("axolotl_grpo.yaml")
    share, server = fixes["vllm-share"], fixes["vllm-server"]
    assert server.estimate_after.components["generation"] == 0 and "peak" in server.title
    assert 0 < share.estimate_after.components["generation"] < base.components["generation"]
    assert [e.new_text for e in share.edits] == ["0.17"] and [e.new_text for e in server.edits] == ["server"]
    assert "shorter-completions" in fixes


def test_zero3_gathers_the_whole_policy_to_generate():
    text = "# vramlens: gpu=H100-80GB count=8\n" + (FIXTURES / "grpo_train.py").read_text().replace(
        "beta=0.04)", "beta=0.04, fsdp='full_shard')"
    )
    plan = parse_document(text, "grpo_train.py").plan
    rp = resolve(plan, Settings()).resolved
    est = estimate(rp, limits=False)
    assert rp.zero_stage == 3 and rp.world_size == 8
    full = est.params_total * 2  # bf16 weights, gathered for generate()
    assert est.phases["generation"] - est.components["weights"] >= full * 7 / 8


def test_torchtune_ppo_reward_and_value_model_of_other_sizes_is_named():
    """The reward-and-value model is estimated at the policy's size; torchtune builds it from its own arguments
    (recipes/ppo_full_finetune_single_device.py), so one of other sizes is named, compared with the policy's builder
    (torchtune's mistral/7B_full_ppo_low_memory.yaml, its classifier given 16 layers)."""
    plan, rp, est = run("torchtune_ppo_smaller_value_model.yaml", gpu="A100-80GB")
    named = [u.what for u in plan.unmodelled]
    assert named == ["a reward and value model of other sizes than the policy: num_layers 16 (the policy's 32)"]
    text = (FIXTURES / "torchtune_ppo_smaller_value_model.yaml").read_text(encoding="utf-8")
    same = parse_document(text.replace("  num_layers: 16\n", "  num_layers: 32\n"), "ppo.yaml").plan
    assert not same.unmodelled
    # the prompt of a rollout is taken at the tokenizer's max_seq_len, the most it can be, and that is said
    assert rp.generation_len == 512 + 58
    said = [str(a) for a in resolve(plan, Settings(gpu="A100-80GB")).assumptions]
    assert any(a.startswith("every prompt taken as 512 tokens long (`max_seq_len`") for a in said)


SWIFT_GRPO_TEACHER = """
NPROC_PER_NODE=8 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct \\
    --teacher_model Qwen/Qwen2.5-14B-Instruct \\
    --tuner_type full --torch_dtype bfloat16 --per_device_train_batch_size 1 --num_generations 8 \\
    --max_completion_length 1024 --max_length 2048 --deepspeed zero2 --use_vllm true --vllm_mode server{extra}
"""


@pytest.mark.parametrize(
    "extra, share",
    [("", 1.0), (" --teacher_deepspeed zero3", 1 / 8), (" --teacher_deepspeed zero3_offload", 0.0)],
    ids=["student-zero2", "teacher-zero3", "teacher-zero3-offload"],
)
def test_grpo_with_a_teacher_loads_it_as_its_deepspeed_setup_says(tmp_path, extra, share):
    """ms-swift's GRPO with `--teacher_model` (on-policy distillation) loads the teacher and runs its per-token
    log-probs in a no-grad forward: the teacher was dropped from GRPO runs. `--teacher_deepspeed` prepares it apart
    from the student: ZeRO-3 shards it, its `_offload` preset keeps it on the CPU, another stage builds it whole."""
    path = tmp_path / "run.sh"
    path.write_text(SWIFT_GRPO_TEACHER.format(extra=extra), encoding="utf-8")
    plan = parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    assert plan.objective.value == "grpo" and plan.teacher_model_id.value == "Qwen/Qwen2.5-14B-Instruct"
    assert not any(u.key == "teacher_deepspeed" for u in plan.unmodelled)
    rp = resolve(plan, Settings(gpu="H100-80GB", model_lookup=False)).resolved
    assert rp.teacher is not None and rp.teacher.id.startswith("Qwen/Qwen2.5-14B")
    est = estimate(rp, limits=False)
    whole = 14_770_033_664 * 2  # Qwen2.5-14B's parameters in bf16 (its config.json)
    assert est.components.get("teacher", 0) == pytest.approx(whole * share, rel=0.01)
    assert est.components.get("teacher_logits", 0) == 0  # per-token log-probs only, not the teacher's logits
    if share:
        assert "teacher-forward" in est.phases


def test_a_served_teacher_is_not_on_the_students_gpus(tmp_path):
    """ms-swift GKD with `--teacher_model_server` and no `--teacher_model` (examples/train/rlhf/gkd/teacher_server.sh):
    the teacher runs behind its own server; it was counted as a student-sized model on the student's GPUs."""
    path = tmp_path / "run.sh"
    path.write_text(
        "NPROC_PER_NODE=4 swift rlhf --rlhf_type gkd --model Qwen/Qwen2.5-7B-Instruct "
        "--teacher_model_server http://localhost:8000 --gkd_logits_topk 64 --per_device_train_batch_size 2 "
        "--max_length 2048 --torch_dtype bfloat16\n",
        encoding="utf-8",
    )
    plan = parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    res = resolve(plan, Settings(gpu="H100-80GB", model_lookup=False))
    assert res.resolved.objective == "gkd" and res.resolved.teacher is None
    est = estimate(res.resolved, limits=False)
    assert est.components.get("teacher", 0) == 0 and "teacher-forward" not in est.phases
    assert any("served apart" in str(a) for a in res.assumptions)


TORCHTUNE = Path(__file__).resolve().parents[1] / "fixtures" / "torchtune"


def test_torchtune_ppo_update_and_rollout_batches():
    """torchtune v0.3.1 mistral/7B_full_ppo_low_memory.yaml: 64 trajectories a step (`batch_size`), generated and
    scored 16 prompts at a time (`forward_batch_size`), updated in mini-batches of 32 (`ppo_batch_size`) with no
    accumulation: each backward pass holds 32 sequences, the KV cache 16 (recipes/ppo_full_finetune_single_device.py
    `generate_trajectory_batched`, `_ppo_backward_batch_size`). Read as one micro-batch of 64 before, it estimated
    both phases at twice or four times their batch."""
    plan = parse_file(TORCHTUNE / "v0.3.1" / "mistral_7B_full_ppo_low_memory.yaml").plan
    assert plan is not None
    assert plan.micro_batch.value == 32 and plan.micro_batch.origin == Origin.DERIVED
    assert plan.generation_batch.value == 16 and plan.logprob_micro_batch.value == 16
    assert not [u for u in plan.unmodelled if u.key in ("forward_batch_size", "ppo_batch_size")]
    res = resolve(plan, Settings(gpu="H100-80GB"))
    rp = res.resolved
    assert rp.micro_batch == 32 and rp.generation_batch == 16
    est = estimate(rp, limits=False)
    wider = resolve(
        plan.model_copy(update={"generation_batch": plan.generation_batch.model_copy(update={"value": 64})}),
        Settings(gpu="H100-80GB"),
    )
    assert estimate(wider.resolved, limits=False).phases["generation"] > est.phases["generation"]


def test_torchtune_grpo_trains_every_completion_at_once():
    """torchtune main dev/3B_full_grpo.yaml: one prompt (`batch_size: 1`) × 16 completions (`grpo_samples`), and
    `grpo_step` runs the whole trajectory through one forward and backward (recipes/dev/
    grpo_full_finetune_distributed.py): 16 sequences a backward pass, not one."""
    plan = parse_file(TORCHTUNE / "bd2a0fc7" / "dev_3B_full_grpo.yaml").plan
    assert plan is not None and plan.objective.value == "grpo"
    assert plan.micro_batch.value == 16 and plan.generation_batch.value == 16
    rp = resolve(plan, Settings(gpu="H100-80GB")).resolved
    assert rp.micro_batch == 16 and rp.generation_batch == 16


def test_derived_micro_batch_and_optimizer_in_backward_offer_no_accumulation_trade():
    """The PPO backward batch is ppo_batch_size ÷ gradient_accumulation_steps, which has no key of its own, and the
    config keeps `optimizer_in_bwd: True`, which torchtune refuses with gradient accumulation: no fix offers to
    lower the micro-batch by raising accumulation (it wrote `batch_size` before, which the recipe then rejects)."""
    from vramlens.analysis import analyze

    path = TORCHTUNE / "v0.3.1" / "mistral_7B_full_ppo_low_memory.yaml"
    a = analyze(path.read_text(encoding="utf-8"), str(path), Settings(gpu="A100-40GB", model_lookup=False))
    titles = [f.title for finding in a.findings for f in (finding.fixes or ())]
    assert titles and not any("micro-batch" in t for t in titles)
