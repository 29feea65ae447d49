"""verl's own example runs at main and v0.5.0 (tests/fixtures/verl/<version>/, SOURCE beside them): dynamic
micro-batches, Megatron LoRA, the TensorRT-LLM rollout, a launch's own hydra config, the SFT trainer, the
split-placement trainer, and the files beside a run that configure none."""

from __future__ import annotations

import os
from pathlib import Path

from vramlens.analysis import analyze
from vramlens.formats import parse_document
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "verl"
MAIN = FIXTURES / "main-2026-01-29"
V050 = FIXTURES / "v0.5.0"


def plan_of(path: Path):
    return parse_document(path.read_text(encoding="utf-8"), str(path)).plan


def analysed(path: Path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, model_lookup=False))


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


def unmodelled(plan) -> dict[str, str]:
    return {u.key: u.what for u in plan.unmodelled}


def test_dynamic_batch_size_splits_by_tokens_and_the_benchmark_does_not_hold_the_micro_batch_against_it():
    # use_dynamic_bsz=True with ppo_micro_batch_size_per_gpu=2: verl packs micro-batches up to
    # ppo_max_token_len_per_gpu (default 16384) tokens of at most 512 + 1024 each, never reading the per-GPU size
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import held_out_cli

    path = MAIN / "run_seed_oss_36b.sh"
    plan = plan_of(path)
    assert value(plan, "model_id") == "ByteDance-Seed/Seed-OSS-36B-Base"
    assert value(plan, "micro_batch") == 16384 // 1536 and "ppo_max_token_len_per_gpu" in plan.micro_batch.note
    stated = held_out_cli.verl_stated(path, plan)
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" not in stated
    assert stated["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.6"


def test_megatron_actor_expert_parallelism_is_read():
    """verl examples/grpo_trainer/run_qwen3moe-30b_megatron_96gb.sh (tests/fixtures/verl/b178a3cd, SOURCE beside
    it): Qwen3-30B-A3B on one node of 8 H20s, `actor.megatron.expert_model_parallel_size=${ACTOR_EP}` (8). The PPO
    actor's expert-parallel sizes were not read: each GPU was given all 128 experts of every layer (weights 56.9
    GiB, fp32 gradients 113.7 GiB: 186.7 GiB)."""
    path = FIXTURES / "b178a3cd" / "run_qwen3moe-30b_megatron_96gb.sh"
    plan = plan_of(path)
    assert value(plan, "dist_strategy") == "megatron"
    assert (value(plan, "expert_parallel"), value(plan, "expert_tensor_parallel")) == (8, 1)
    assert plan.expert_parallel.key == "actor_rollout_ref.actor.megatron.expert_model_parallel_size"
    # `override_transformer_config.moe_token_dispatcher_type="flex"` with `moe_enable_deepep=True`: DeepEP's buffer
    assert value(plan, "ep_dispatch") == "deepep" and plan.ep_dispatch.key.endswith("moe_enable_deepep")
    a = analysed(path)
    rp = a.resolution.resolved
    assert rp.expert_parallel == 8
    arch = rp.arch
    experts = (arch.layers - arch.dense_layers) * arch.num_experts * 3 * arch.hidden * arch.moe_intermediate
    from vramlens.estimate import _phases

    def update_weights(r):
        return _phases(r)[1]["forward-backward"]["weights"]

    # each GPU holds 16 of the 128 experts of every MoE layer in the update: 7/8 of the experts' bf16 weights fewer
    assert update_weights(rp.with_changes(expert_parallel=1)) - update_weights(rp) == experts * 7 // 8 * 2


def test_megatron_actor_recomputes_only_by_its_transformer_config():
    """verl's Megatron workers never read `model.enable_gradient_checkpointing` (default true): Megatron-Core
    recomputes by `actor.megatron.override_transformer_config.recompute_granularity` (default null: nothing).
    run_qwen3moe-30b_megatron_96gb.sh sets none, so its activations are all stored; run_qwen2-7b_math_megatron_lora.sh
    sets full recompute of every layer."""
    none = plan_of(FIXTURES / "b178a3cd" / "run_qwen3moe-30b_megatron_96gb.sh")
    assert value(none, "grad_checkpointing") is False
    assert "Megatron-Core recomputes nothing" in none.grad_checkpointing.note
    full = plan_of(MAIN / "run_qwen2-7b_math_megatron_lora.sh")
    assert value(full, "grad_checkpointing") is True
    assert full.grad_checkpointing.key.endswith("override_transformer_config.recompute_granularity")
    assert (value(full, "recompute_method"), value(full, "recompute_layers")) == ("uniform", 1)


def test_megatron_lora_section_is_read():
    # actor_rollout_ref.model.lora.rank=256, alpha=512 under the Megatron workers (target_modules default: every
    # Megatron-Core linear layer)
    plan = plan_of(MAIN / "run_qwen2-7b_math_megatron_lora.sh")
    assert value(plan, "dist_strategy") == "megatron" and value(plan, "tensor_parallel") == 4
    assert value(plan, "peft_method") == "lora" and value(plan, "lora_r") == 256 and value(plan, "lora_alpha") == 512
    assert value(plan, "lora_targets") == ["all-linear"]


def test_tensorrt_llm_rollout_holds_its_share_and_says_how_it_is_approximated():
    a = analysed(MAIN / "run_qwen2-7b_math_trtllm.sh")
    assert a.estimate is not None
    assert value(a.plan, "generation") == "vllm-colocate" and value(a.plan, "vllm_memory_share") == 0.6
    assert "actor_rollout_ref.rollout.gpu_memory_utilization" in unmodelled(a.plan)
    assert "actor_rollout_ref.rollout.name" not in unmodelled(a.plan)


def test_a_launch_reads_its_own_hydra_config_under_its_overrides():
    # --config-path="$CONFIG_PATH" (from $(pwd)) --config-name='gsm8k_multiturn_megatron_grpo': that YAML builds on
    # ppo_megatron_trainer, so the run is Megatron's, with the launch line's parallel sizes
    plan = plan_of(MAIN / "sglang_multiturn" / "run_qwen2.5-3b_megatron_gsm8k_multiturn.sh")
    assert value(plan, "dist_strategy") == "megatron"
    assert value(plan, "tensor_parallel") == 2 and value(plan, "pipeline_parallel") == 2
    assert (value(plan, "prompt_len"), value(plan, "completion_len")) == (1024, 1024)
    assert any("gsm8k_multiturn_megatron_grpo.yaml" in n for n in plan.read_notes)


def test_a_launch_whose_hydra_config_is_missing_says_so(tmp_path):
    script = MAIN / "sglang_multiturn" / "run_qwen2.5-3b_megatron_gsm8k_multiturn.sh"
    copy = tmp_path / script.name
    copy.write_text(script.read_text(encoding="utf-8"), encoding="utf-8")
    plan = plan_of(copy)
    assert any("gsm8k_multiturn_megatron_grpo" in i.message and "not found" in i.message for i in plan.issues)


def test_sft_trainer_lora_example_is_estimated():
    # torchrun --nproc_per_node=$nproc_per_node -m verl.trainer.fsdp_sft_trainer … model.lora_rank=32
    a = analysed(V050 / "sft" / "run_qwen_05_peft.sh")
    assert a.plan.framework == "verl" and value(a.plan, "objective") == "sft"
    assert value(a.plan, "model_id") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert value(a.plan, "micro_batch") == 4 and value(a.plan, "seq_len") == 1024
    assert value(a.plan, "peft_method") == "lora" and value(a.plan, "lora_r") == 32
    assert value(a.plan, "lora_targets") == ["all-linear"] and value(a.plan, "grad_checkpointing") is True
    assert a.estimate is not None
    # the GPU count is the script's first argument: said, not guessed silently
    assert any("nproc_per_node" in i.message for i in a.plan.issues)


def test_sft_trainer_ignores_the_deprecated_global_micro_batch_and_reads_sequence_parallelism():
    plan = plan_of(V050 / "sft" / "run_qwen_05_sp2.sh")
    assert value(plan, "micro_batch") == 4 and value(plan, "packing") is True
    assert any("data.micro_batch_size" in i.message and "not read" in i.message for i in plan.issues)
    assert value(plan, "context_parallel") == 2 and "ulysses_sequence_parallel_size" not in unmodelled(plan)


def test_split_placement_trainer_is_read_with_its_config_and_its_two_resource_pools():
    """main_ppo_split.py: on one node of 8 GPUs the actor (with its rollout) takes 4 and the critic 4; the estimate
    is the actor's pool, the critic on GPUs of its own, its `critic-update` phase on the critic's pool; no reward
    model is counted beside it (the run scores with a function)."""
    a = analysed(MAIN / "split_placement" / "run_deepseek7b_llm.sh")
    assert a.plan.framework == "verl" and value(a.plan, "objective") == "ppo"
    assert value(a.plan, "model_id") == "deepseek-ai/deepseek-llm-7b-chat" and value(a.plan, "micro_batch") == 8
    assert "split_placement" not in unmodelled(a.plan) and a.estimate is not None
    assert value(a.plan, "world_size") == 4 and value(a.plan, "models_apart") == ["value_model", "reward_model"]
    assert not any("fsdp_size" in i.message for i in a.plan.issues)  # fsdp_size: -1 is every GPU
    assert a.resolution.resolved.world_size == 4 and not a.resolution.resolved.reward_model
    assert any("on GPUs of their own: the critic" in x for x in a.resolution.assumptions)
    phases = a.estimate.phases
    assert "critic-update" in phases and phases["critic-update"] > phases["forward-backward"]


def test_files_beside_a_run_are_not_training():
    for path in (
        MAIN / "not_training" / "gsm8k_tool_config.yaml",
        MAIN / "not_training" / "runtime_env.yaml",
    ):
        a = analysed(path)
        assert a.estimate is None and any(f.rule_id == "VL018" for f in a.findings), path.name


def test_a_model_path_from_an_unset_variable_names_the_value():
    # HF_MODEL_PATH=${HF_MODEL_PATH:-"${RAY_DATA_HOME}/models/Qwen3-VL-8B-Instruct"}, RAY_DATA_HOME never set
    # the folder's name is a model's: estimated by that name, approximately, saying the folder was not read
    a = analysed(MAIN / "run_qwen3_vl-8b-megatron.sh")
    assert a.estimate is not None
    said = " ".join(i.message for i in a.plan.issues)
    assert "$HF_MODEL_PATH" in said and "Qwen3-VL-8B-Instruct" in said
    assert any("`${RAY_DATA_HOME}`, only known when the script runs" in r for r in a.estimate.approximate)


def test_a_config_fragment_is_read_as_the_launch_that_composes_it():
    # gsm8k_multiturn_megatron_grpo.yaml names no model: run_qwen2.5-3b_megatron_gsm8k_multiturn.sh launches it with
    # --config-name and sets the model, the parallel sizes and the batch on its command line
    path = MAIN / "sglang_multiturn" / "config" / "gsm8k_multiturn_megatron_grpo.yaml"
    plan = analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=MAIN, model_lookup=False)).plan
    assert value(plan, "model_id") == "/user/longxiang1/models/Qwen/Qwen2.5-3B-Instruct"
    assert value(plan, "dist_strategy") == "megatron" and value(plan, "tensor_parallel") == 2
    assert value(plan, "micro_batch") == 16 and value(plan, "completion_len") == 1024
    assert any("run_qwen2.5-3b_megatron_gsm8k_multiturn.sh" in i.message for i in plan.issues)
    # without the launch in the workspace, the model is verl's default folder, said to be the default
    alone = plan_of(path)
    assert value(alone, "model_id") == "~/models/deepseek-llm-7b-chat" and "verl's default" in alone.model_id.note


def test_a_skypilot_task_is_read_by_the_verl_launch_of_its_run_script():
    # resources.accelerators H100:1, num_nodes 2; the run script passes $SKYPILOT_NUM_GPUS_PER_NODE and
    # $SKYPILOT_NUM_NODES to trainer.n_gpus_per_node / trainer.nnodes
    a = analysed(MAIN / "skypilot" / "verl-grpo.yaml")
    assert a.plan.framework == "verl" and value(a.plan, "objective") == "grpo"
    assert value(a.plan, "model_id") == "Qwen/Qwen2.5-7B-Instruct"
    assert value(a.plan, "gpu_count") == 1 and value(a.plan, "world_size") == 2
    assert a.estimate is not None


def test_ulysses_sequence_parallelism_splits_each_sequence_over_its_gpus():
    # verl v0.7.0 examples/ppo_trainer/run_deepseek7b_llm_sp2.sh:
    # actor_rollout_ref.actor.ulysses_sequence_parallel_size=2
    # (dp_actor.py `ulysses_pad_and_slice_inputs`: each GPU runs the model on half of every sequence's tokens)
    path = FIXTURES / "v0.7.0" / "run_deepseek7b_llm_sp2.sh"
    a = analysed(path)
    assert a.estimate is not None, a.error
    assert value(a.plan, "context_parallel") == 2 and "ulysses" not in " ".join(unmodelled(a.plan))
    text = path.read_text(encoding="utf-8").replace(
        "ulysses_sequence_parallel_size=2", "ulysses_sequence_parallel_size=1"
    )
    whole = analyze(text, str(path), Settings(workspace=path.parent, model_lookup=False))
    assert whole.estimate is not None
    # the rollout's memory is the peak either way; the actor's update holds half the activations and logits
    split, one = a.estimate.phases["forward-backward"], whole.estimate.phases["forward-backward"]
    assert split < one - 8 * 2**30


def test_log_prob_forwards_run_in_their_own_micro_batches():
    # verl workers/fsdp_workers.py `compute_log_prob` / `compute_ref_log_prob`: the old policy's and the reference's
    # log-probs in micro-batches of `log_prob_micro_batch_size_per_gpu` (64 here), not the actor's 32
    path = FIXTURES / "v0.7.0" / "run_deepseek7b_llm_sp2.sh"
    text = path.read_text(encoding="utf-8")
    a = analysed(path)
    assert value(a.plan, "logprob_micro_batch") == 64
    assert not [k for k in unmodelled(a.plan) if "log_prob" in k]
    smaller = text.replace("log_prob_micro_batch_size_per_gpu=64", "log_prob_micro_batch_size_per_gpu=8")
    b = analyze(smaller, str(path), Settings(workspace=path.parent, model_lookup=False))
    assert value(b.plan, "logprob_micro_batch") == 8
    assert a.estimate.phases["reference-forward"] > b.estimate.phases["reference-forward"]
    # a reference (KL loss) with a larger size of its own: the larger sizes the phase, the other is read beside it
    both = text.replace(
        "log_prob_micro_batch_size_per_gpu=64 \\",
        "log_prob_micro_batch_size_per_gpu=64 \\\n    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=128 \\\n"
        "    actor_rollout_ref.actor.use_kl_loss=True \\",
    )
    c = analyze(both, str(path), Settings(workspace=path.parent, model_lookup=False))
    assert value(c.plan, "logprob_micro_batch") == 128
    assert c.plan.logprob_micro_batch.key == "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"
    assert not [k for k in unmodelled(c.plan) if "log_prob" in k]


VERL_GRPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.max_prompt_length=1024 "
    "data.max_response_length=2048 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct "
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 actor_rollout_ref.rollout.name=vllm "
    "trainer.n_gpus_per_node=8{}\n"
)


def test_fused_kernels_score_the_tokens_by_chunks_without_the_whole_logits(tmp_path):
    """`actor_rollout_ref.model.use_fused_kernels=True` (FSDP workers, `impl_backend: torch`): verl's
    FusedLinearForPPO computes the log-probs and entropy 512 tokens at a time (verl/utils/experimental/
    torch_functional.py); it was named as not modelled and the whole logits counted. The Triton backend
    (`impl_backend: triton`) and the Megatron workers run verl's `linear_cross_entropy` by splits of the
    vocabulary (verl/utils/kernel/kernels.py): no whole logits either, under tensor parallelism over the rank's
    vocabulary shard."""

    def run(extra: str):
        path = tmp_path / "run.sh"
        text = VERL_GRPO.format(extra)
        path.write_text(text)
        return analyze(text, str(path), Settings(gpu="H100", workspace=tmp_path))

    plain, fused = run(""), run(" actor_rollout_ref.model.use_fused_kernels=True")
    assert fused.plan.unmodelled == [] and fused.resolution.resolved.verl_fused_head
    tokens = 4 * 2048  # the scored (response) positions
    vocab = fused.resolution.resolved.arch.vocab
    saved = plain.estimate.phases["forward-backward"] - fused.estimate.phases["forward-backward"]
    assert saved > 0.5 * tokens * vocab * 12  # most of the standard loss's fp32 logits and their gradients
    triton = run(
        " actor_rollout_ref.model.use_fused_kernels=True"
        " actor_rollout_ref.model.fused_kernel_options.impl_backend=triton"
    )
    assert triton.plan.unmodelled == [] and triton.resolution.resolved.verl_fused_head == "triton"
    saved = plain.estimate.phases["forward-backward"] - triton.estimate.phases["forward-backward"]
    assert saved > 0.5 * tokens * vocab * 12
    # the Megatron workers (tensor parallel 2): the output layer's logits and the vocab-parallel cross entropy
    # (6 bytes a logit over the rank's half of the vocabulary) give way to the Triton head
    megatron = " --config-name=ppo_megatron_trainer actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"
    mplain, mfused = run(megatron), run(megatron + " actor_rollout_ref.model.use_fused_kernels=True")
    assert mfused.plan.unmodelled == [] and mfused.resolution.resolved.verl_fused_head == "triton"
    assert mfused.resolution.resolved.strategy == "megatron"
    whole = 4 * (1024 + 2048) * vocab / 2 * 6  # the sequence's logits on this rank, 16-bit and fp32
    saved = mplain.estimate.phases["forward-backward"] - mfused.estimate.phases["forward-backward"]
    assert 0.6 * whole < saved < whole


def test_megatron_transformer_overrides_are_read_known_or_named(tmp_path):
    """Each `override_transformer_config.<field>` of verl's Megatron actor overrides a TransformerConfig field: the
    pipeline split's layer counts are read as Megatron-LM's flags, fusions verl already applies change nothing, an
    unfused SwiGLU (it keeps a third tensor) and the pipeline split's embedding stage are named — none is dropped."""
    o = " +actor_rollout_ref.actor.megatron.override_transformer_config."
    text = VERL_GRPO.format(
        " actor_rollout_ref.actor.strategy=megatron actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2"
        f"{o}num_layers_in_first_pipeline_stage=13{o}apply_rope_fusion=False{o}moe_router_dtype=fp32"
        f"{o}bias_activation_fusion=False{o}account_for_embedding_in_pipeline_split=True"
        f"{o}account_for_loss_in_pipeline_split=False"
    )
    path = tmp_path / "run.sh"
    path.write_text(text)
    plan = plan_of(path)
    assert value(plan, "first_stage_layers") == 13
    named = unmodelled(plan)
    assert sorted(k.rsplit(".", 1)[1] for k in named) == [
        "account_for_embedding_in_pipeline_split",
        "bias_activation_fusion",
    ]


def test_megatron_critic_is_held_by_its_own_layout():
    """verl examples/ppo_trainer/run_qwen2-7b_math_gsm8k_megatron.sh (tests/fixtures/verl/b178a3cd): the actor runs
    TP 2 × PP 2 over 8 GPUs, the critic (Qwen2-7B-Instruct) sets no layout, so ppo_megatron_trainer.yaml's own
    (critic/megatron_critic.yaml → engine/megatron.yaml: TP 1, PP 1) builds it whole on each GPU, resident beside
    the actor (CriticWorker, no offload by default). It was not counted under Megatron at all. By hand: its
    backbone with a one-wide head in bf16 (2 B), fp32 gradient buffers (4 B) and the distributed optimizer's fp32
    main weights and two Adam states over its 8 data-parallel ranks (12 B / 8)."""
    from vramlens.estimate import components as C

    a = analysed(FIXTURES / "b178a3cd" / "run_qwen2-7b_math_gsm8k_megatron.sh")
    rp = a.resolution.resolved
    assert (rp.tensor_parallel, rp.pipeline_parallel, rp.world_size) == (2, 2, 2)
    assert rp.value_model and rp.critic_layout == (1, 1, 1, 1, 0)
    n = C.value_params(rp)
    by_hand = n * (2 + 4) + n * 12 / 8
    assert abs(C.megatron_value_model(rp) / by_hand - 1) < 0.001
    from vramlens.estimate import _phases

    phases = _phases(rp)[1]
    assert set(phases) >= {"forward-backward", "generation"}
    assert all(parts["value_model"] == C.megatron_value_model(rp) for parts in phases.values())
    assert any("the critic's own Megatron layout: TP 1, PP 1" in str(x) for x in a.resolution.assumptions)
    # its own update (verl `update_critic`) at its micro-batch of 4, unsplit by TP: more activations than the
    # actor's TP-2 update holds, beside both models' state
    update = phases["critic-update"]
    assert update["activations"] > phases["forward-backward"]["activations"] > 0
    assert update["weights"] == phases["forward-backward"]["weights"] and update["logits"] == 0
    # with the actor's layout its busiest stage (half the layers and the embedding, over TP 2) holds under half
    assert C.megatron_value_model(rp.with_changes(critic_layout=None)) < 0.5 * C.megatron_value_model(rp)


GRPO_COMMAND = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=64 "
    "data.max_prompt_length=512 data.max_response_length=1024 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct "
    "actor_rollout_ref.actor.ppo_mini_batch_size=32 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 "
    "actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=8 trainer.nnodes=1 "
)


def test_verl_engine_ulysses_key_counts_only_under_the_new_worker():
    # verl main_ppo.py: `use_legacy_worker_impl` auto runs workers/fsdp_workers.py, which splits sequences by
    # `actor.ulysses_sequence_parallel_size` alone; the fsdp_config key is the new engine worker's
    key = "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2"
    legacy = parse_document(GRPO_COMMAND + key + "\n", "r.sh").plan
    assert legacy.context_parallel is None
    assert any("new engine worker" in i.message for i in legacy.issues)
    engine = parse_document(GRPO_COMMAND + key + " trainer.use_legacy_worker_impl=disable\n", "r.sh").plan
    assert engine.context_parallel.value == 2 and not any("new engine worker" in i.message for i in engine.issues)
