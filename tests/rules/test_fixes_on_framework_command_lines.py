"""Fixes on the command lines of frameworks that define their own flags (OpenRLHF, verl, Megatron): written in the
program's own spelling or not written at all, and a micro-batch read from a token budget changed through that budget.
Every written fix is applied to the text and the edited file estimated again: its peak is the one the title says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vramlens.text import apply_edits

# OpenRLHF v0.11 (dotted flags), dynamic batching: micro-batches packed up to a token budget
OPENRLHF_DYNAMIC = """
python3 -m openrlhf.cli.train_ppo_ray \\
   --actor.num_gpus_per_node 8 \\
   --vllm.num_engines 4 \\
   --train.colocate_all \\
   --vllm.gpu_memory_utilization 0.5 \\
   --actor.model_name_or_path meta-llama/Meta-Llama-3-8B \\
   --reward.model_name_or_path meta-llama/Meta-Llama-3-8B \\
   --train.batch_size 128 \\
   --rollout.batch_size 1024 \\
   --data.max_len 2048 \\
   --ds.zero_stage 3 \\
   --actor.gradient_checkpointing_enable \\
   --ds.packing_samples \\
   --train.dynamic_batch_enable{budget}
"""

# OpenRLHF up to v0.9.1 (flat flags, `--bf16`), no dynamic batching
OPENRLHF_FLAT = """
ray job submit --address="http://127.0.0.1:8265" -- python3 -m openrlhf.cli.train_ppo_ray \\
   --actor_num_gpus_per_node 8 \\
   --vllm_num_engines 2 \\
   --pretrain meta-llama/Llama-3.2-1B \\
   --reward_pretrain meta-llama/Llama-3.2-1B \\
   --micro_train_batch_size {micro} \\
   --train_batch_size 128 \\
   --prompt_max_len 1024 \\
   --generate_max_len 1024 \\
   --zero_stage 2 \\
   --bf16{extra}
"""

# verl GRPO with dynamic batch sizes (examples/grpo_trainer/run_qwen2-7b_seq_balance.sh's settings)
VERL_DYNAMIC = """
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=1024 \\
    data.max_prompt_length=512 \\
    data.max_response_length=1024 \\
    actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct \\
    actor_rollout_ref.model.use_remove_padding=True \\
    actor_rollout_ref.actor.ppo_mini_batch_size=256 \\
    actor_rollout_ref.actor.use_dynamic_bsz=True \\
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24000 \\
    actor_rollout_ref.rollout.name=vllm \\
    actor_rollout_ref.rollout.n=5 \\
    trainer.n_gpus_per_node=8 \\
    trainer.nnodes=1
"""


def fix_titled(a, start: str):
    vl001 = [f for f in a.findings if f.rule_id == "VL001"]
    assert vl001, [(f.rule_id, f.message) for f in a.findings]
    return next(f for f in vl001[0].fixes if f.title.startswith(start))


def written_fixes(a):
    """The fixes that edit the file and say the peak they lead to (out of memory, room for a larger batch, …)."""
    for finding in a.findings:
        yield from (fix for fix in finding.fixes if fix.edits and "→ peak" in fix.title)


def peak_in_title(fix) -> float:
    m = re.search(r"→ peak ([\d.]+) GiB", fix.title)
    assert m, fix.title
    return float(m.group(1))


def applied(run, a, fix, gpu: str, original: str | None = None):
    """The file (`original`: its text before any fix) with the fix's edits, estimated again, written beside it."""
    assert fix.edits, fix.note
    if original is None:
        with open(a.path, encoding="utf-8") as f:
            original = f.read()
    text = apply_edits(original, fix.edits)
    return text, run(text, name="fixed.sh", gpu=gpu)


def test_openrlhf_dynamic_batching_reads_micro_batches_from_the_token_budget(run):
    a = run(OPENRLHF_DYNAMIC.format(budget=" \\\n   --train.max_tokens_per_gpu 16384"), name="train.sh", gpu="H100")
    plan = a.plan
    # 16,384 tokens hold 8 sequences of 2,048 (prompt + response) for the update, the critic's and the rollout's
    # forwards (the rollout budget defaults to the train budget)
    assert plan.micro_batch.value == 8 and plan.micro_batch.per_unit == 2048
    assert plan.logprob_micro_batch.value == 8
    assert "train.max_tokens_per_gpu" in plan.micro_batch.key
    assert a.resolution.resolved.micro_batch == 8
    named = {u.key for u in plan.unmodelled}
    assert not named & {"train.dynamic_batch_enable", "train.max_tokens_per_gpu"}, named


def test_openrlhf_dynamic_batching_uses_the_default_budget_and_writes_it_when_lowered(run):
    a = run(OPENRLHF_DYNAMIC.format(budget=""), name="train.sh", gpu="A100-40GB")
    # `--train.max_tokens_per_gpu` 16192 by default (openrlhf/cli/train_ppo_ray.py): 7 sequences of 2,048
    assert a.plan.micro_batch.value == 7
    fix = fix_titled(a, "Lower `train.max_tokens_per_gpu` to")
    text, again = applied(run, a, fix, "A100-40GB")
    assert re.search(r"--train\.max_tokens_per_gpu \d+", text), text
    assert "micro_train_batch_size" not in text and "gradient_accumulation_steps" not in text
    assert round(again.estimate.device_bytes / 2**30, 1) == peak_in_title(fix)


def test_openrlhf_ring_attention_splits_the_budget_across_its_ranks(run):
    text = OPENRLHF_DYNAMIC.format(budget=" \\\n   --train.max_tokens_per_gpu 16384 \\\n   --ds.ring_attn_size 2")
    a = run(text, name="train.sh", gpu="H100")
    # get_minimum_num_micro_batch_size multiplies the budget by the ring size, whose ranks split each sequence
    assert a.plan.micro_batch.value == 16


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("", 8),  # `--micro_rollout_batch_size` 8 by default up to v0.9
        (" \\\n   --micro_rollout_batch_size 16", 16),
    ],
)
def test_openrlhf_rollout_forwards_run_at_the_rollout_micro_batch(run, extra, expected):
    a = run(OPENRLHF_FLAT.format(micro=2, extra=extra), name="train.sh", gpu="H100")
    assert a.plan.logprob_micro_batch.value == expected
    assert a.plan.micro_batch.value == 2
    assert a.resolution.resolved.logprob_micro_batch == expected


def test_openrlhf_fixes_use_its_own_flags(run):
    a = run(OPENRLHF_FLAT.format(micro=16, extra=""), name="train.sh", gpu="A10G")
    vl001 = [f for f in a.findings if f.rule_id == "VL001"]
    assert vl001
    for fix in vl001[0].fixes:
        with open(a.path, encoding="utf-8") as f:
            text = apply_edits(f.read(), fix.edits) if fix.edits else ""
        # OpenRLHF's parser stops on flags it does not define: accumulation follows from --train_batch_size, and
        # the optimizer is DeepSpeed's Adam
        assert "--gradient_accumulation_steps" not in text and "--optim" not in text, fix.title
    # the micro-batch trade alone fits here: offered as "Make it fit"
    smaller = next(f for f in vl001[0].fixes if f.changes.get("micro_batch"))
    text, again = applied(run, a, smaller, "A10G")
    assert re.search(r"--micro_train_batch_size (1|2|4|8)\b", text)
    assert "--train_batch_size 128" in text
    assert round(again.estimate.device_bytes / 2**30, 1) == peak_in_title(smaller)
    # the critic trains at the policy's micro-batch: the applied fix changes both, as the title's estimate did
    assert again.plan.critic_micro_batch.value == again.plan.micro_batch.value


def test_verl_budget_fix_edits_the_budget_and_its_followers(run):
    a = run(VERL_DYNAMIC, name="train.sh", gpu="A10G")
    assert a.plan.micro_batch.value == 24000 // 1536 and a.plan.micro_batch.per_unit == 1536
    fix = fix_titled(a, "Lower `actor_rollout_ref.actor.ppo_max_token_len_per_gpu` to")
    text, again = applied(run, a, fix, "A10G")
    assert "ppo_max_token_len_per_gpu=24000" not in text
    assert re.search(r"ppo_max_token_len_per_gpu=\d+ ", text)
    assert "--gradient_accumulation_steps" not in text and "--optim" not in text
    # the log-prob budget defaults to the actor's (ppo_trainer.yaml interpolation): it follows the edit, in the
    # title's estimate as in the edited file
    assert again.plan.logprob_micro_batch.value == again.plan.micro_batch.value
    assert round(again.estimate.device_bytes / 2**30, 1) == peak_in_title(fix)


def test_verl_megatron_checkpointing_fix_writes_megatrons_full_recompute(run):
    """verl's Megatron workers recompute by `override_transformer_config`, and Megatron-Core's full recompute needs a
    method and a layer count beside the granularity (transformer_config.py `__post_init__` refuses `full` without
    them): the fix writes all three, as verl's own Megatron examples do, and the file reads back checkpointed."""
    original = (FIXTURES / "verl" / "b178a3cd" / "run_qwen3moe-30b_megatron_96gb.sh").read_text(encoding="utf-8")
    a = run(original, name="train.sh", gpu="H20")
    fix = next(f for f in written_fixes(a) if f.title.startswith("Make it fit with safe fixes only"))
    text, again = applied(run, a, fix, "H20", original)
    prefix = "actor_rollout_ref.actor.megatron.override_transformer_config."
    for written in ("recompute_granularity=full", "recompute_method=uniform", "recompute_num_layers=1"):
        assert prefix + written in text
    assert "enable_gradient_checkpointing" not in text and "recompute_granularity=True" not in text
    assert again.plan.grad_checkpointing.value is True
    assert round(again.estimate.device_bytes / 2**30, 1) == peak_in_title(fix)


VERL_PPO_CRITIC = """
python3 -m verl.trainer.main_ppo \\
    data.train_batch_size=256 \\
    data.max_prompt_length=512 \\
    data.max_response_length=512 \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct \\
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \\
    actor_rollout_ref.rollout.name=vllm \\
    critic.model.path=Qwen/Qwen2.5-7B-Instruct \\
    critic.model.enable_gradient_checkpointing=False \\
    critic.ppo_micro_batch_size_per_gpu=4 \\
    algorithm.adv_estimator=gae \\
    trainer.n_gpus_per_node=8
"""


@pytest.mark.parametrize(
    "text",
    [
        OPENRLHF_DYNAMIC.format(budget=" \\\n   --train.max_tokens_per_gpu 16384"),
        OPENRLHF_DYNAMIC.format(budget=""),
        OPENRLHF_FLAT.format(micro=16, extra=""),
        VERL_DYNAMIC,
        VERL_PPO_CRITIC,
    ],
    ids=["openrlhf-budget", "openrlhf-default-budget", "openrlhf-flat", "verl-budget", "verl-critic"],
)
@pytest.mark.parametrize("gpu", ["A10G", "A100-40GB"])
def test_every_written_fix_gives_the_peak_its_title_says(run, text, gpu):
    """Each fix with edits, applied to the file and the file read again: the estimate is the title's, whatever the
    fix changes (budgets, their followers, capped completions, adapters, the engine's share, the allocator)."""
    a = run(text, name="train.sh", gpu=gpu)
    with open(a.path, encoding="utf-8") as f:
        original = f.read()
    checked = 0
    for fix in written_fixes(a):
        _, again = applied(run, a, fix, gpu, original)
        assert round(again.estimate.device_bytes / 2**30, 1) == peak_in_title(fix), fix.title
        checked += 1
    assert checked >= 2


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    "name",
    [
        "megatron/ms-swift-v3.12.6/pretrain.sh",  # `--recompute_granularity selective` → `full`, not `True`
        "ms-swift/main-3602360a/dense_colocate.sh",
        "llamafactory/v0.9.5/badam_llama3_full_sft.yaml",  # no 8-bit AdamW in place of BAdam (it switched BAdam off)
        "ms-swift/v4.5.2/llamapro_train.sh",  # LoRA in place of LLaMA-Pro: its added blocks go too
        "objectives/torchtune_ppo.yaml",  # no adapters: torchtune's PPO recipe trains the full policy
        "objectives/torchtune_lora_dpo.yaml",  # the DPO loss is not a cross-entropy to swap
        "openrlhf/v0.11.0/train_ppo_ray_slurm.sh",  # no `export` inside a `bash -c` string or for a Ray job
        "verl/v0.5.0/sft/run_qwen_05_sp2.sh",  # the SFT trainer's micro-batch key, not the PPO actor's
        # Megatron's full recompute with its method and layer count, not `recompute_granularity=True`
        "verl/b178a3cd/run_qwen3moe-30b_megatron_96gb.sh",
    ],
)
def test_fixes_of_real_configs_give_the_peak_their_titles_say(run, name):
    """Every fix with edits on configs from the frameworks' own repositories, applied and read again: the file still
    reads as the same kind of run and its estimate is the title's."""
    original = (FIXTURES / name).read_text(encoding="utf-8")
    suffix = "." + name.rsplit(".", 1)[-1]
    a = run(original, name="config" + suffix, gpu="A10G")
    assert a.estimate is not None, a.error
    checked = 0
    for fix in written_fixes(a):
        again = run(apply_edits(original, fix.edits), name="fixed" + suffix, gpu="A10G")
        assert again.estimate is not None, (fix.title, again.error)
        before = a.plan.objective.value if a.plan.objective else None
        after = again.plan.objective.value if again.plan.objective else None
        assert after == before, fix.title
        assert round(again.estimate.device_bytes / 2**30, 1) == peak_in_title(fix), fix.title
        checked += 1
    assert checked >= 1
