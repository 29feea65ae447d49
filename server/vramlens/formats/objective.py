"""The training objective of a config — SFT, a preference loss, online RL or distillation — in every framework's
spelling, and the settings only those objectives have (reference model, prompt/completion lengths, generation).

Spellings read:
  TRL         config/trainer classes (`DPOConfig`, `GRPOTrainer`, …), `trl dpo|grpo|… --config`, and in YAML recipes
              (TRL scripts pick the config class by script, so a YAML file says it by its keys or its file name:
              alignment-handbook `recipes/<model>/dpo/config_full.yaml`, open-instruct `dpo_beta`/`dpo_loss_type`).
              Keys and defaults from trl 1.16.0 `trainer/dpo_config.py`, `trainer/grpo_config.py`, `rloo_config.py`,
              `distillation_config.py`.
  LLaMA-Factory `stage: pt|sft|rm|ppo|dpo|kto` and `pref_loss: sigmoid|hinge|ipo|kto_pair|orpo|simpo`
              (src/llamafactory/hparams/finetuning_args.py), `ref_model`, `reward_model`, `max_new_tokens`.
  axolotl     `rl: dpo|ipo|kto|orpo|simpo|grpo` (src/axolotl/utils/schemas/enums.py `RLType`), `rl_beta`,
              `trl: {num_generations, max_completion_length, use_vllm, vllm_mode, …}`.
  torchtune   DPO/PPO/KD recipes by component: `torchtune.rlhf.loss.DPOLoss`/`RSOLoss`/`SimPOLoss`, PPO's
              `ref_policy_checkpointer`/`value_checkpointer`/`reward_and_value_model`, KD's `teacher_model`/`kd_loss`.
  ms-swift    `swift rlhf --rlhf_type dpo|orpo|simpo|kto|cpo|rm|ppo|grpo|gkd`, `--ref_model`, `--teacher_model`.
  OpenRLHF    `python -m openrlhf.cli.train_dpo|train_kto|train_rm|train_ppo|train_ppo_ray|train_kd|train_sft`.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Iterable

from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_float, to_int
from vramlens.plan import OBJECTIVES, Origin

# TRL config and trainer classes (trl 1.16.0 `trl/__init__.py` and `trl/experimental/*`).
TRL_CLASSES = {
    "SFT": "sft",
    "DPO": "dpo",
    "KTO": "kto",
    "BCO": "kto",
    "ORPO": "orpo",
    "CPO": "cpo",
    "Reward": "rm",
    "PRM": "rm",
    "PPO": "ppo",
    "GRPO": "grpo",
    "RLOO": "rloo",
    "OnlineDPO": "online-dpo",
    "XPO": "online-dpo",
    "NashMD": "online-dpo",
    "GKD": "gkd",
    "Distillation": "gkd",
    # TRL main trl/experimental/: async_grpo/async_grpo_trainer.py (GRPO with rollouts from a separate vLLM server),
    # gold/gold_trainer.py (`GOLDTrainer(SFTTrainer)`: on-policy distillation from a `teacher_model`, as GKD)
    "AsyncGRPO": "grpo",
    "GOLD": "gkd",
}
_CLASS = re.compile(r"^(?P<name>[A-Za-z]+?)(?:Config|Trainer)$")

# One word (a subcommand, `stage`, `rl`, `rlhf_type`, a module or file name part) → objective.
WORDS = {
    "sft": "sft",
    "pt": "pretrain",
    "pretrain": "pretrain",
    "pretraining": "pretrain",
    "dpo": "dpo",
    "ipo": "dpo",
    "rpo": "dpo",
    "kto": "kto",
    "kto_pair": "dpo",
    "bco": "kto",
    "orpo": "orpo",
    "simpo": "simpo",
    "cpo": "cpo",
    "rm": "rm",
    "reward": "rm",
    "reward_modeling": "rm",
    "prm": "rm",
    "ppo": "ppo",
    "ppo_ray": "ppo",
    "grpo": "grpo",
    "gspo": "grpo",
    "dapo": "grpo",
    "rloo": "rloo",
    "online_dpo": "online-dpo",
    "online-dpo": "online-dpo",
    "xpo": "online-dpo",
    "nash_md": "online-dpo",
    "gkd": "gkd",
    "kd": "kd",
    "distill": "kd",
    "distillation": "kd",
    "knowledge_distillation": "kd",
}
# Losses that need no reference model: ORPO/SimPO/CPO by construction (TRL `CPOConfig.loss_type="simpo"`,
# LLaMA-Factory `pref_loss: orpo|simpo`, open-instruct `dpo_loss_type: simpo`).
REFERENCE_FREE = {"orpo", "simpo", "cpo"}
ONLINE = {"ppo", "grpo", "rloo", "online-dpo"}
PAIRED = {"dpo", "orpo", "simpo", "cpo", "rm"}
DISTILL = {"gkd", "kd"}


def word(text: str) -> str | None:
    """The objective a single word names, if any."""
    return WORDS.get(str(text).strip().lower().replace("-", "_")) or WORDS.get(str(text).strip().lower())


def from_class(name: str) -> str | None:
    """`DPOConfig` / `GRPOTrainer` → the objective; None for other classes (TrainingArguments, Trainer)."""
    m = _CLASS.match(name)
    return TRL_CLASSES.get(m.group("name")) if m else None


def from_path(path: str) -> str | None:
    """A recipe's objective from its file name or folder (alignment-handbook `recipes/zephyr-7b-beta/dpo/
    config_full.yaml`, TRL `examples/scripts/dpo.py`, torchtune `8B_lora_dpo.yaml`, OpenRLHF `train_dpo_llama.sh`)."""
    parts = PurePosixPath(str(path).replace("\\", "/")).parts[-3:]
    found = None
    for part in parts:
        for w in re.split(r"[^A-Za-z0-9]+|_", PurePosixPath(part).stem.lower()):
            hit = WORDS.get(w)
            if hit and hit not in ("sft", "pretrain") and w not in ("rm", "pt", "reward", "distill"):
                found = hit
    return found


def set_objective(
    b: PlanBuilder,
    objective: str | None,
    setting: Setting | None = None,
    *,
    note: str | None = None,
    origin: Origin = Origin.FILE,
    override: bool = False,
) -> None:
    if objective not in OBJECTIVES:
        return
    b.set(
        "objective",
        objective,
        setting,
        note=note,
        origin=origin if setting is not None else Origin.DERIVED,
        override=override,
    )
    if objective in REFERENCE_FREE:
        b.set(
            "reference_free",
            True,
            setting,
            note=f"{objective.upper()} needs no reference model",
            origin=Origin.DERIVED,
            override=True,
        )


# --- Hugging Face / TRL keys (YAML recipes, Python keyword arguments, CLI flags) ----------------------------------


def _generation(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    use = by_key.get("use_vllm")
    if use is not None and to_bool(use.value):
        mode = by_key.get("vllm_mode")
        m = str(mode.value).strip().lower() if mode is not None and mode.value is not None else "colocate"
        # trl 1.16.0 grpo_config.py: vllm_mode default "colocate" (server before 0.23)
        b.set(
            "generation",
            "vllm-server" if m == "server" else "vllm-colocate",
            mode or use,
            note=None if mode is not None else "TRL's default vllm_mode is `colocate`",
        )
    elif use is not None:
        b.set("generation", "generate", use)
    share = by_key.get("vllm_gpu_memory_utilization")
    fraction = to_float(share.value) if share is not None else None
    if share is not None and fraction is not None:
        b.set("vllm_memory_share", fraction, share)
    level = by_key.get("sleep_level")
    n = to_int(level.value) if level is not None else None
    if level is not None and n is not None:
        # ms-swift's `sleep_level` (swift/arguments/rlhf_args.py, swift/megatron/arguments/megatron_args.py, 3602360a:
        # 0, 1 or 2): a colocated engine made with sleep mode is put to sleep at that level after each rollout
        # (swift/megatron/trainers/rollout_mixin.py `_init_rollout_engine`: `self.engine.engine.sleep(sleep_level)`)
        on = n > 0
        note = f"vLLM sleep level {n}: its weights and KV cache released after each rollout"
        b.set("generation_sleeps", on, level, note=note if on else None)
    eager = by_key.get("vllm_enforce_eager")
    if eager is not None and to_bool(eager.value) is not None:
        # ms-swift's `vllm_enforce_eager` (swift/arguments/rlhf_args.py → its colocated engine's `enforce_eager`)
        b.set("generation_eager", bool(to_bool(eager.value)), eager)
    sleep = by_key.get("vllm_enable_sleep_mode")
    if sleep is not None and to_bool(sleep.value) is not None:
        # trl 1.16.0 trl/generation/vllm_generation.py: the colocated LLM sleeps (level 2) after each generation and
        # wakes its weights for the weight sync, its KV cache just before generating
        on = bool(to_bool(sleep.value))
        b.set(
            "generation_sleeps",
            on,
            sleep,
            note="vLLM sleep mode: its weights and KV cache released after each generation" if on else None,
        )


def apply_hf_keys(b: PlanBuilder, settings: list[Setting]) -> None:
    """TRL's objective-specific keys (DPOConfig, GRPOConfig, GKDConfig, …), wherever they were written."""
    by_key = {str(s.key): s for s in settings if s.value is not None and len(getattr(s, "path", (s.key,))) <= 1}
    for key in ("max_prompt_length",):
        if key in by_key and to_int(by_key[key].value):
            b.set("prompt_len", to_int(by_key[key].value), by_key[key])
    for key in ("max_completion_length", "max_new_tokens", "generate_max_len", "max_generated_tokens"):
        if key in by_key and to_int(by_key[key].value):
            b.set("completion_len", to_int(by_key[key].value), by_key[key])
    for key in ("num_generations", "n_samples_per_prompt", "rloo_k"):
        if key in by_key and to_int(by_key[key].value):
            b.set("num_generations", to_int(by_key[key].value), by_key[key])
    s = by_key.get("precompute_ref_log_probs")
    if s is not None and to_bool(s.value) is not None:
        b.set("precompute_ref", bool(to_bool(s.value)), s)
    for key in ("ref_model", "ref_model_name_or_path", "ref_pretrain"):
        s = by_key.get(key)
        if s is not None and isinstance(s.value, str) and s.value.strip():
            b.set("ref_model_id", s.value.strip(), s)
    for key in ("reward_model", "reward_model_path", "reward_model_name_or_path", "reward_pretrain"):
        if key == "reward_model" and b.plan.framework == "llamafactory":
            continue  # LLaMA-Factory's reward_model is usually an adapter (apply_llamafactory)
        s = by_key.get(key)
        if s is not None and isinstance(s.value, str) and s.value.strip():
            b.set("reward_model_id", s.value.strip(), s)
    for key in ("teacher_model", "teacher_model_name_or_path", "teacher_model_id"):
        s = by_key.get(key)
        if s is not None and isinstance(s.value, str) and s.value.strip():
            b.set("teacher_model_id", s.value.strip(), s)
            set_objective(
                b, "gkd" if b.plan.framework == "trl" else "kd", s, note="a teacher model is named: distillation"
            )
    _teacher_deepspeed(b, by_key.get("teacher_deepspeed"))
    _generation(b, by_key)
    # open-instruct dpo_tune_cache.py: `dpo_loss_type: dpo|dpo_norm|simpo|wpo`, `dpo_beta`
    s = by_key.get("dpo_loss_type")
    if s is not None and isinstance(s.value, str):
        lt = s.value.strip().lower()
        # dpo_tune.py: "dpo" and "dpo_norm" (length-normalised) both compare against reference log-probs; only
        # "simpo" is reference-free
        set_objective(b, "simpo" if lt == "simpo" else "dpo", s)
    elif "dpo_beta" in by_key:
        set_objective(b, "dpo", by_key["dpo_beta"])
    s = by_key.get("loss_type")
    if (
        s is not None
        and isinstance(s.value, str)
        and s.value.strip().lower() == "simpo"
        and b.plan.objective is not None
        and b.plan.objective.value in ("cpo", "dpo")
    ):
        set_objective(b, "simpo", s, override=True)
    s = by_key.get("beta")
    if s is not None and to_float(s.value) is not None and b.plan.reference_free is None:
        # trl 1.16.0 grpo_config.py `beta`: "If 0.0 (default), the reference model is not loaded"; only the online
        # objectives read this (resolve), the DPO family always has a reference unless its loss is reference-free
        zero = to_float(s.value) == 0.0
        b.set(
            "reference_free",
            zero,
            s,
            note="KL coefficient 0: no reference model is loaded"
            if zero
            else "KL coefficient above 0: the reference model is loaded",
        )


def guess_hf_yaml(b: PlanBuilder, keys: set[str], path: str) -> None:
    """A TRL YAML recipe does not name its config class (the script does): its keys or its path say it."""
    if b.plan.objective is not None:
        return
    if keys & {"num_generations", "use_vllm", "vllm_mode", "reward_funcs", "reward_model_name_or_path"}:
        by_path = from_path(path)
        return set_objective(
            b,
            by_path if by_path in ONLINE else "grpo",
            note="GRPO-only keys (num_generations, use_vllm, reward_funcs)"
            if by_path not in ONLINE
            else f"the recipe's path names {by_path}",
        )
    hit = from_path(path)
    if hit is not None:
        return set_objective(b, hit, note=f"the recipe's path ({PurePosixPath(path).name}) names {hit.upper()}")
    if (
        keys & {"precompute_ref_log_probs", "max_prompt_length", "rpo_alpha", "ref_model_init_kwargs"}
        and "beta" in keys
    ):
        return set_objective(b, "dpo", note="DPOConfig keys (beta, max_prompt_length, precompute_ref_log_probs)")


# --- LLaMA-Factory ------------------------------------------------------------------------------------------------


def apply_llamafactory(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    stage = by_key.get("stage")
    if stage is not None and isinstance(stage.value, str):
        obj = {"pt": "pretrain", "sft": "sft", "rm": "rm", "ppo": "ppo", "dpo": "dpo", "kto": "kto"}.get(
            stage.value.strip().lower()
        )
        if obj == "dpo":
            loss = by_key.get("pref_loss")
            lt = str(loss.value).strip().lower() if loss is not None and loss.value is not None else "sigmoid"
            # LLaMA-Factory src/llamafactory/train/dpo/trainer.py: orpo and simpo compute no reference log-probs
            if lt in ("orpo", "simpo"):
                set_objective(b, lt, loss)
        set_objective(b, obj, stage)
    s = by_key.get("max_new_tokens")
    if s is not None and to_int(s.value):
        b.set("completion_len", to_int(s.value), s)
    s = by_key.get("ref_model")
    if s is not None and isinstance(s.value, str) and s.value.strip():
        b.set("ref_model_id", s.value.strip(), s)
    s = by_key.get("reward_model")
    kind = by_key.get("reward_model_type")
    kind_text = str(kind.value).strip().lower() if kind is not None and kind.value is not None else "lora"
    if s is not None and isinstance(s.value, str) and s.value.strip() and kind_text == "full":
        # finetuning_args.py `reward_model_type` defaults to "lora": the reward adapter is loaded onto the policy
        # (no second model); "full" loads a separate reward model, "api" queries a server
        b.set("reward_model_id", s.value.strip(), s)
    if b.plan.objective is not None and b.plan.objective.value == "ppo":
        # LLaMA-Factory PPO wraps the policy in trl's AutoModelForCausalLMWithValueHead: the value head shares the
        # policy's backbone (a scalar head), so there is no separate value model
        b.set("value_model", False, stage, origin=Origin.DERIVED, note="value head on the policy's backbone")
        b.set("generation", "generate", stage, origin=Origin.DERIVED, note="LLaMA-Factory PPO samples with generate()")


# --- axolotl ------------------------------------------------------------------------------------------------------


def apply_axolotl(b: PlanBuilder, by_key: dict[str, Setting], nested: list[Setting]) -> None:
    rl = by_key.get("rl")
    if rl is not None and isinstance(rl.value, str) and rl.value.strip():
        set_objective(b, word(rl.value), rl)
    s = by_key.get("precompute_ref_log_probs")
    if s is not None and to_bool(s.value) is not None:
        b.set("precompute_ref", bool(to_bool(s.value)), s)
    # axolotl reward modelling (docs/reward_modelling.qmd): `reward_model: true` trains TRL's RewardTrainer on chosen /
    # rejected pairs with a sequence-classification head; `process_reward_model: true` TRL's PRMTrainer
    for key in ("reward_model", "process_reward_model"):
        s = by_key.get(key)
        if s is not None and to_bool(s.value):
            set_objective(b, "rm", s)
            b.set(
                "task_head",
                "token-classification" if key == "process_reward_model" else "sequence-classification",
                s,
                origin=Origin.DERIVED,
            )
    trl = [e for e in nested if len(e.path) == 2 and e.path[0] == "trl"]
    if trl:
        kids = []
        for e in trl:
            c = Setting(str(e.path[1]), (str(e.path[1]),), e.value, e.span)
            c.value_span = e.value_span
            kids.append(c)
        apply_hf_keys(b, kids)


# --- torchtune ----------------------------------------------------------------------------------------------------


def apply_torchtune(b: PlanBuilder, data: dict, get) -> None:
    loss = get("loss", "_component_")
    name = str(loss.value) if loss is not None and isinstance(loss.value, str) else ""
    last = name.rsplit(".", 1)[-1]
    if last in ("DPOLoss", "RSOLoss", "IPOLoss"):
        set_objective(b, "dpo", loss)
    elif last == "SimPOLoss":
        set_objective(b, "simpo", loss)
    elif last == "PPOLoss":
        set_objective(b, "ppo", loss)
    elif "GRPO" in last:
        # torchtune recipes/dev/grpo_full_finetune_distributed.py: `torchtune.dev.rl.loss.GRPOSimpleLoss`,
        # `grpo_samples` completions per prompt, generated with a KV cache
        set_objective(b, "grpo", loss)
        b.set("generation", "generate", loss, origin=Origin.DERIVED, note="torchtune GRPO generates with a KV cache")
        s = get("grpo_samples")
        if s is not None and to_int(s.value):
            b.set("num_generations", to_int(s.value), s)
        _torchtune_grpo_batches(b, get, to_int(s.value) if s is not None else None)
    kd = get("kd_loss", "_component_")
    teacher = get("teacher_model", "_component_")
    if kd is not None or teacher is not None:
        set_objective(b, "kd", kd or teacher)
    if teacher is not None and isinstance(teacher.value, str):
        from vramlens.frameworks.torchtune.readers import model_id_for_builder

        tid, _ = model_id_for_builder(teacher.value)
        b.set(
            "teacher_model_id",
            tid or teacher.value,
            teacher,
            note=f"torchtune builder `{teacher.value.rsplit('.', 1)[-1]}`",
        )
    if any(k in data for k in ("ref_policy_checkpointer", "value_checkpointer", "reward_and_value_model")):
        s = get("ref_policy_checkpointer", "_component_") or get("value_checkpointer", "_component_")
        set_objective(b, "ppo", s, note="PPO recipe: reference policy, value and reward models")
        # torchtune recipes/ppo_full_finetune_single_device.py: one reward-and-value model builder, loaded twice
        # (the value model trains, the reward model is frozen)
        b.set("value_model", True, s, origin=Origin.DERIVED)
        b.set("generation", "generate", s, origin=Origin.DERIVED, note="torchtune PPO generates with a KV cache")
        _torchtune_value_sizes(b, data, get)
        _torchtune_ppo_batches(b, get)
        # `compile: True` compiles the four models (torchtune v0.3.0–v0.6.1 and main
        # recipes/ppo_full_finetune_single_device.py `_setup_models`: `training.compile_model(policy_model)` …): read
        # as written
    for key in ("max_generated_tokens",):
        s = get(key)
        if s is not None and to_int(s.value):
            b.set("completion_len", to_int(s.value), s)
    if b.plan.objective is None and "ref_checkpointer" in data:
        set_objective(b, "dpo", get("ref_checkpointer", "_component_"))


def _torchtune_ppo_batches(b: PlanBuilder, get) -> None:
    """torchtune's PPO recipe (recipes/ppo_full_finetune_single_device.py at v0.3.1, v0.6.1 and 010eab0) generates
    `batch_size` trajectories `forward_batch_size` prompts at a time (`generate_trajectory_batched`: generation with
    a KV cache, then the policy's, reference's, value and reward models' forwards of that chunk), then updates on
    mini-batches of `ppo_batch_size`, each in backward passes of `ppo_batch_size // gradient_accumulation_steps`
    (`_ppo_backward_batch_size`)."""
    ppo, ga_s = get("ppo_batch_size"), get("gradient_accumulation_steps")
    ga = max(1, to_int(ga_s.value) or 1) if ga_s is not None else 1
    if ppo is not None and to_int(ppo.value):
        n = max(1, int(to_int(ppo.value) or 1) // ga)
        b.set(
            "micro_batch",
            n,
            ppo,
            origin=Origin.DERIVED,
            override=True,
            note=f"ppo_batch_size {ppo.value} ÷ gradient_accumulation_steps {ga}: the sequences of each PPO backward "
            "pass (`_ppo_backward_batch_size`); `batch_size` counts the trajectories a step generates",
        )
    _torchtune_forward_batch(b, get, 1)


def _torchtune_grpo_batches(b: PlanBuilder, get, samples: int | None) -> None:
    """torchtune's GRPO recipe (recipes/dev/grpo_full_finetune_distributed.py at v0.6.1 and 010eab0) generates
    `grpo_samples` completions of each of `batch_size` prompts, `forward_batch_size` prompts at a time
    (`generate_trajectory_batched`), and `grpo_step` runs the whole trajectory, batch_size × grpo_samples sequences,
    through one forward and backward."""
    groups = max(1, samples or 1)
    s = get("batch_size")
    if s is not None and to_int(s.value) and groups > 1:
        n = int(to_int(s.value) or 1) * groups
        b.set(
            "micro_batch",
            n,
            s,
            origin=Origin.DERIVED,
            override=True,
            note=f"batch_size {s.value} prompts × grpo_samples {groups}: `grpo_step` trains on every completion of "
            "the step at once",
        )
    _torchtune_forward_batch(b, get, groups)


def _torchtune_forward_batch(b: PlanBuilder, get, groups: int) -> None:
    """`forward_batch_size` prompts (× `groups` completions each) generated and scored at a time."""
    f = get("forward_batch_size")
    if f is None or not to_int(f.value):
        return
    n = int(to_int(f.value) or 1) * groups
    each = f" × {groups} completions" if groups > 1 else ""
    b.set("generation_batch", n, f, note=f"forward_batch_size {f.value} prompts{each} generated at a time")
    b.set("logprob_micro_batch", n, f, note=f"forward_batch_size {f.value} prompts{each} scored at a time")


# the builder arguments that size a torchtune decoder (torchtune 0.6.1 models/llama2/_component_builders.py `llama2`,
# `llama2_classifier`; models/mistral `mistral_classifier`)
_TORCHTUNE_SIZES = ("num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim")


def _torchtune_value_sizes(b: PlanBuilder, data: dict, get) -> None:
    """The reward-and-value model is estimated as the policy's size; one built to other sizes (or from another base
    model) is named (torchtune recipes/ppo_full_finetune_single_device.py builds it from `reward_and_value_model`)."""
    rv, policy = data.get("reward_and_value_model"), data.get("policy_model")
    if not isinstance(rv, dict) or not isinstance(policy, dict):
        return
    if not any(k in policy for k in _TORCHTUNE_SIZES) and isinstance(policy.get("_component_"), str):
        # a named builder (`mistral_7b`): its sizes from the catalog model it builds
        from vramlens.frameworks.torchtune.readers import model_id_for_builder
        from vramlens.knowledge.models import lookup_model

        mid, _ = model_id_for_builder(policy["_component_"])
        arch = lookup_model(mid) if mid else None
        if arch is not None:
            sizes = (arch.layers, arch.heads, arch.n_kv_heads, arch.hidden, arch.intermediate)
            policy = {**policy, **dict(zip(_TORCHTUNE_SIZES, sizes))}
    differ = [
        f"{k} {rv[k]} (the policy's {policy[k]})"
        for k in _TORCHTUNE_SIZES
        if k in rv and k in policy and rv[k] != policy[k]
    ]
    base, built = rv.get("base_model_path"), policy.get("_component_")
    if isinstance(base, str) and isinstance(built, str) and base.rsplit(".", 1)[-1] != built.rsplit(".", 1)[-1]:
        differ.append(f"base model {base.rsplit('.', 1)[-1]} (the policy's {built.rsplit('.', 1)[-1]})")
    s = get("reward_and_value_model", "_component_")
    if differ and s is not None:
        b.unmodelled(
            s, f"a reward and value model of other sizes than the policy: {'; '.join(differ)}", "sized as the policy"
        )


# --- command lines: trl, swift, OpenRLHF modules --------------------------------------------------------------------

OPENRLHF_MODULES = {
    "train_sft": "sft",
    "train_dpo": "dpo",
    "train_kto": "kto",
    "train_rm": "rm",
    "train_prm": "rm",
    "train_ppo": "ppo",
    "train_ppo_ray": "ppo",
    "train_kd": "kd",
}


def from_launch(tool: str, subcommand: str | None, script: str | None) -> str | None:
    """The objective a launch command names by itself (`trl dpo`, `python -m openrlhf.cli.train_dpo`, `tune run
    lora_dpo_single_device`, `tune run knowledge_distillation_single_device`, a `dpo.py` script)."""
    if tool == "trl" and subcommand:
        return word(subcommand)
    if script:
        mod = script.rsplit(".", 1)[-1] if "/" not in script else PurePosixPath(script).stem
        if mod in OPENRLHF_MODULES:
            return OPENRLHF_MODULES[mod]
        if tool == "torchtune":
            low = script.lower()
            for key, obj in (("knowledge_distillation", "kd"), ("dpo", "dpo"), ("ppo", "ppo"), ("grpo", "grpo")):
                if key in low:
                    return obj
            return None
        return from_path(script)
    return None


def _teacher_deepspeed(b: PlanBuilder, s: Setting | None) -> None:
    """ms-swift's `teacher_deepspeed` (swift/arguments/rlhf_args.py `_init_teacher_deepspeed`: one of its presets
    zero0 … zero3_offload, or a DeepSpeed JSON): the teacher is prepared with it, built whole unless its stage is 3
    (swift/pipelines/train/rlhf.py: `disable_deepspeed_zero3()` when `zero_optimization.stage` is not 3); a preset's
    `_offload` keeps the ZeRO-3 parameters on the CPU (swift/config/zero3_offload.json `offload_param`)."""
    if s is None or not isinstance(s.value, str) or not s.value.strip():
        return
    name = s.value.strip().lower()
    m = re.fullmatch(r"zero([0-3])(_offload)?", name)
    if m is None:
        b.unmodelled(
            s, "a teacher DeepSpeed config given as a file", "the teacher estimated with the student's strategy"
        )
        return
    stage, offload = int(m.group(1)), bool(m.group(2))
    what = "zero3_offload" if stage == 3 and offload else "zero3" if stage == 3 else "whole"
    note = {
        "whole": f"ZeRO-{stage}: the teacher built whole on every GPU",
        "zero3": "ZeRO-3: the teacher's weights sharded over the GPUs",
        "zero3_offload": "ZeRO-3 with its parameters on the CPU",
    }[what]
    b.set("teacher_sharding", what, s, note=note)


def apply_swift(b: PlanBuilder, by_key: dict[str, Setting], subcommand: str | None = None) -> None:
    _swift_rollout_offload(b, by_key)
    s = by_key.get("rlhf_type")
    if s is not None and isinstance(s.value, str):
        set_objective(b, word(s.value), s)
        if word(s.value) == "gkd":
            # what ms-swift's GKD loss is (frameworks/ms_swift/hooks.py `distill_loss`)
            for key in ("beta", "sft_alpha", "gkd_logits_topk", "teacher_model_server"):
                if key in by_key:
                    b.remember(by_key[key])
    elif subcommand == "rlhf":
        # ms-swift swift/llm/argument/rlhf_args.py RLHFArguments: `rlhf_type ... = 'dpo'`
        b.set(
            "objective",
            "dpo",
            note="ms-swift's default rlhf_type for `swift rlhf`",
            origin=Origin.DEFAULT,
            framework="ms-swift",
        )
    elif subcommand in ("dpo", "orpo", "simpo"):
        # ms-swift 2.x swift/cli/main.py (v2.2.0–v2.6.1) `cli_main`: `swift dpo|orpo|simpo …` runs swift/cli/rlhf.py
        # with `--rlhf_type <subcommand>` (v2.0.x: swift/cli/dpo.py)
        note = f"`swift {subcommand}` is `swift rlhf --rlhf_type {subcommand}` (ms-swift 2.x)"
        set_objective(b, subcommand, note=note)


def _swift_rollout_offload(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    """ms-swift's `offload_model` / `offload_optimizer` move the policy's weights / optimizer states to the CPU while
    the colocated vLLM engine generates, and back for the update (ms-swift ff5128777d swift/rlhf_trainers/
    args_mixin.py: "offload ... when performing inference with vLLM"; grpo_trainer.py and megatron/trainers/
    rollout_mixin.py `_offload_model_and_optimizer`): offloads between updates, not during them."""
    for key, concept, what in (
        ("offload_model", "offload_params_idle", "the policy's weights"),
        ("offload_optimizer", "offload_optimizer_idle", "the optimizer states"),
    ):
        s = by_key.get(key)
        on = to_bool(s.value) if s is not None else None
        if on:
            b.set(
                "offload_idle_scope",
                "rollout",
                s,
                origin=Origin.DERIVED,
                note="ms-swift offloads only around the engine's generation (`offload_context`)",
            )
        if on is not None:
            b.set(
                concept,
                on,
                s,
                note=f"{what} on the CPU while vLLM generates, on the GPU for the update" if on else None,
            )


# OpenRLHF's rollout lengths. Up to v0.9 `--prompt_max_len` and `--generate_max_len` both default to 1024 and the
# update's length is their sum unless the deprecated `--max_len` says otherwise (v0.9.0 openrlhf/cli/train_ppo_ray.py:
# `max_len = args.max_len if args.max_len else args.prompt_max_len + args.generate_max_len`); from v0.10
# `--max_len` (`--data.max_len`) bounds prompt + response, 2048 by default, and `--max_new_tokens`
# (`--rollout.max_new_tokens`) defaults to what the prompt leaves of it (v0.10.0, 2026 HEAD: "If None, dynamically
# computed as max_len - prompt_len per sample")
OPENRLHF_LENGTHS = "OpenRLHF train_ppo_ray.py: prompt_max_len/generate_max_len 1024 to v0.9, max_len 2048 from v0.10"
OPENRLHF_TOTAL = 2048


def _openrlhf_lengths(b: PlanBuilder) -> None:
    """The prompt and completion lengths OpenRLHF runs with where the command leaves them out (OPENRLHF_LENGTHS):
    prompt + response = max_len where that is given, 1024 each otherwise, and the total never exceeds max_len."""

    def given(sourced: Any) -> int | None:
        return to_int(sourced.value) if sourced is not None else None

    total, prompt, completion = given(b.plan.seq_len), given(b.plan.prompt_len), given(b.plan.completion_len)
    if prompt is not None and completion is not None:
        return
    if prompt is None and completion is None:
        whole = total or OPENRLHF_TOTAL
        prompt, completion = whole // 2, whole - whole // 2
        why = f"half of the {whole} tokens prompt + response may take (`max_len`)" if total else "1024 each"
    elif prompt is None and completion is not None:
        prompt = total - completion if total and total > completion else 1024
        why = "what the response leaves of `max_len`" if total and total > completion else "1024"
    elif prompt is not None:
        completion = total - prompt if total and total > prompt else 1024
        why = "what the prompt leaves of `max_len`" if total and total > prompt else "1024"
    note = f"{why} ({OPENRLHF_LENGTHS})"
    b.set("prompt_len", prompt, origin=Origin.DEFAULT, framework="openrlhf", note=note)
    b.set("completion_len", completion, origin=Origin.DEFAULT, framework="openrlhf", note=note)


# OpenRLHF's Ray trainers place each model in an actor group of its own GPUs (`--ref_num_gpus_per_node`,
# `--critic_num_gpus_per_node`, ...) unless told to share: `--colocate_actor_ref` puts the reference on the actor's
# GPUs, `--colocate_critic_reward` the reward model on the critic's, `--colocate_all_models` everything (vLLM too) on
# one set (v0.5.0 to 2026 HEAD openrlhf/cli/train_ppo_ray.py `train`: one placement group per model unless
# colocated; HEAD spells them --train.colocate_actor_ref, --train.colocate_critic_reward, --train.colocate_all)
OPENRLHF_GROUPS = "OpenRLHF train_ppo_ray.py: a Ray actor group per model unless --colocate_*"


def _openrlhf_groups(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    """Which models a Ray run keeps off the actor's GPUs, and which share the critic's (OPENRLHF_GROUPS)."""

    def on(key: str) -> Setting | None:
        s = by_key.get(key)
        return s if s is not None and to_bool(s.value) is not False else None

    if on("colocate_all_models") is not None:
        return
    apart = ["value_model", "reward_model"] + ([] if on("colocate_actor_ref") is not None else ["reference"])
    with_critic = on("colocate_critic_reward")
    note = f"on GPUs of their own: {', '.join(m.replace('_', ' ') for m in apart)} ({OPENRLHF_GROUPS})" + (
        "; the reward model shares the critic's" if with_critic is not None else ""
    )
    critic_gpus = by_key.get("critic_num_gpus_per_node") or by_key.get("critic.num_gpus_per_node")
    actor_gpus = by_key.get("actor_num_gpus_per_node") or by_key.get("actor.num_gpus_per_node")
    counts = [to_int(g.value) if g is not None else None for g in (critic_gpus, actor_gpus)]
    if critic_gpus is not None and counts[0] and counts[1] and counts[0] != counts[1]:
        b.unmodelled(
            critic_gpus,
            f"the critic's own GPU count ({counts[0]} a node beside the actor's {counts[1]})",
            "its ZeRO shards sized as if its group had the actor's GPUs",
        )
    b.set("models_apart", apart, origin=Origin.DERIVED, framework="openrlhf", note=note)
    if with_critic is not None:
        b.set("critic_group", ["reward_model"], with_critic, note="--colocate_critic_reward")


# OpenRLHF's experience maker runs the no-grad forwards of a rollout (the actor's old log-probs, the reference's, the
# critic's values, the reward model's scores) over `--micro_rollout_batch_size` samples at a time (v0.8.0 to 2026 HEAD
# openrlhf/trainer/ppo_utils/experience_maker.py `split_rollout_samples`; the flag is `--rollout.micro_batch_size`
# from v0.10.2). With `--use_dynamic_batch` (`--train.dynamic_batch_enable`, v0.9.0 on) the micro-batch flags are not
# used: the replay buffer packs each update's micro-batches with up to `--train_max_tokens_per_gpu` tokens per GPU
# (× ring-attention ranks, which split them; trainer/ppo_utils/replay_buffer.py → utils/seqlen_balancing.py
# `get_minimum_num_micro_batch_size`, first fit), the critic's as the actor's (trainer/ray/ppo_critic.py), and the
# rollout's forwards with up to `--rollout_max_tokens_per_gpu`, which is the train budget when not given
# (cli/train_ppo_ray.py: "Set --rollout_max_tokens_per_gpu to --train_max_tokens_per_gpu").
OPENRLHF_MICRO = "OpenRLHF train_ppo_ray.py, trainer/ppo_utils/experience_maker.py and replay_buffer.py"


def _openrlhf_micro_batches(b: PlanBuilder, by_key: dict[str, Setting], written: Iterable[str]) -> None:
    """The sequences per GPU of the update's micro-batches and of the rollout's no-grad forwards (OPENRLHF_MICRO):
    under dynamic batching as many sequences of the longest rollout (prompt + response) as the token budget holds, the
    worst case the budget allows; else `--micro_rollout_batch_size` for the forwards (the release's default where
    absent: 8 up to v0.9, 1 from v0.10)."""
    from vramlens.formats import launchers
    from vramlens.frameworks import schemas

    written = set(written)
    release = launchers.openrlhf_release(written)

    def budget(flag: str) -> tuple[int | None, Setting | None, str]:
        """A token budget as written, else its default with the flag as this command line spells it (not in the
        text: a fix adds it)."""
        s = by_key.get(flag)
        if s is not None and to_int(s.value):
            return to_int(s.value), s, f"`--{s.key}` {to_int(s.value):,}"
        name = launchers.openrlhf_spelling(flag, any("." in n for n in written), "train_ppo_ray")
        v = to_int(
            schemas.default("openrlhf", name, release or schemas.pick_version("openrlhf"), owner="train_ppo_ray")
        )
        return (v, Setting(name, (name,), v), f"`--{name}` {v:,} by default") if v else (None, None, "")

    plan = b.plan
    # the budgets are read whether or not dynamic batching uses them (without it they change nothing)
    plan.read_alongside.extend(
        by_key[f].key for f in ("train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu") if f in by_key
    )
    dynamic = by_key.get("use_dynamic_batch")
    prompt, completion = (to_int(x.value) if x is not None else None for x in (plan.prompt_len, plan.completion_len))
    seq = (prompt or 0) + (completion or 0)
    if dynamic is not None and to_bool(dynamic.value) and seq:
        ring = by_key.get("ring_attn_size")
        ranks = max(1, to_int(ring.value) or 1) if ring is not None else 1
        train, train_s, train_said = budget("train_max_tokens_per_gpu")
        if train:
            per_gpu = max(1, seq // ranks)  # a fix writes the budget back for the sequences it asks for

            def packed(concept: str, tokens: int, s: Setting | None, note: str) -> int:
                n = max(1, tokens * ranks // seq)
                b.set(
                    concept,
                    n,
                    s,
                    origin=Origin.DERIVED,
                    note=note.format(n=n),
                    override=True,
                    per_unit=per_gpu,
                    budget=tokens,
                )
                return n

            split = f" × {ranks} ring-attention ranks" if ranks > 1 else ""
            packed(
                "micro_batch",
                train,
                train_s,
                f"dynamic batching: micro-batches packed up to {train_said} tokens{split}, {{n}} sequence(s) of "
                f"{seq:,} (prompt + response); `micro_train_batch_size` is not used ({OPENRLHF_MICRO})",
            )
            rollout, rollout_s, rollout_said = budget("rollout_max_tokens_per_gpu")
            if not rollout:
                rollout, rollout_s, rollout_said = train, train_s, f"the train budget, {train_said}"
            packed(
                "logprob_micro_batch",
                rollout,
                rollout_s,
                f"dynamic batching: the rollout's forwards packed up to {rollout_said} tokens, {{n}} sequence(s)",
            )
            return
    s = by_key.get("micro_rollout_batch_size")
    if s is not None:
        b.set_int("logprob_micro_batch", s, minimum=1)
        return
    v = schemas.default("openrlhf", "micro_rollout_batch_size", release, owner="train_ppo_ray") if release else 8
    if to_int(v):
        where = f"OpenRLHF {release}" if release else "OpenRLHF v0.8.0"
        b.set(
            "logprob_micro_batch",
            to_int(v),
            origin=Origin.DEFAULT,
            framework="openrlhf",
            note=f"`--micro_rollout_batch_size` {v} ({where} openrlhf/cli/train_ppo_ray.py)",
        )


def _openrlhf_reference(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    """OpenRLHF's reference model is a whole model of its own, loaded from `--ref_pretrain` (`--ref.model_name_or_path`)
    or else `--pretrain`, with or without LoRA: never the policy with its adapters off (v0.9.0 and 2026 HEAD
    openrlhf/cli/train_dpo.py `ref_model = Actor(args.ref_pretrain, …)`, train_ppo_ray.py `ReferenceModelActor`
    `init_model_from_pretrained(strategy, args.pretrain)`). A PPO run loads it only while the KL coefficient
    `--init_kl_coef` (`--algo.kl.init_coef`, default 0.01) is above 0 (train_ppo_ray.py: `ref_model = None`)."""
    s = by_key.get("init_kl_coef")
    obj = b.plan.objective.value if b.plan.objective is not None else None
    coef = to_float(s.value) if s is not None else None
    if obj in ONLINE and s is not None and coef is not None:
        off = coef <= 0
        note = "KL coefficient 0: OpenRLHF loads no reference model" if off else "KL coefficient above 0"
        b.set("reference_free", off, s, note=note)
    model = b.plan.model_id
    if model is not None and b.plan.ref_model_id is None and obj is not None:
        b.plan.ref_model_id = model.model_copy(
            update={
                "origin": Origin.DERIVED,
                "note": "OpenRLHF loads its reference model from the policy's checkpoint, a whole model with or "
                "without LoRA (openrlhf/cli/train_dpo.py, train_ppo_ray.py)",
            }
        )


def _openrlhf_default_critic(b: PlanBuilder, by_key: dict[str, Setting]) -> None:
    """With no critic named, OpenRLHF's GAE critic starts from the (first) reward model's checkpoint, or from the
    actor's when the reward comes from a remote URL (train_ppo_ray.py after `parse_args`, v0.6.0 to v0.11.0:
    `args.critic_pretrain = args.reward_pretrain.split(",")[0]` / `args.pretrain`)."""
    rm = by_key.get("reward_pretrain")
    if rm is None or not isinstance(rm.value, str) or not rm.value.strip() or "remote_rm_url" in by_key:
        return
    first = rm.value.split(",")[0].strip()
    b.set(
        "critic_model_id",
        first,
        rm,
        origin=Origin.DERIVED,
        framework="OpenRLHF",
        note="no --critic_pretrain: OpenRLHF's critic starts from the reward model's checkpoint",
    )


def apply_openrlhf(b: PlanBuilder, by_key: dict[str, Setting], written: Iterable[str] = ()) -> None:
    """OpenRLHF flags: `--max_len`, `--prompt_max_len`, `--generate_max_len`, `--n_samples_per_prompt`,
    `--micro_train_batch_size`, `--vllm_gpu_memory_utilization`, `--ref_offload`, `--critic_pretrain`, and the
    micro-batches of a PPO run (`_openrlhf_micro_batches`); `written`: the flags as spelled."""
    s = by_key.get("pretrain")
    if s is not None and isinstance(s.value, str) and s.value.strip():
        b.set("model_id", s.value.strip(), s)
    s = by_key.get("zero_stage")
    if s is not None and to_int(s.value) is not None:
        b.set("dist_strategy", "deepspeed", s)
        b.set("zero_stage", to_int(s.value), s)
    s = by_key.get("micro_train_batch_size")
    if s is not None:
        b.set_int("micro_batch", s, minimum=1)
    for key in ("max_len",):
        s = by_key.get(key)
        if s is not None:
            b.set_int("seq_len", s, minimum=1)
    s = by_key.get("prompt_max_len")
    if s is not None and to_int(s.value):
        b.set("prompt_len", to_int(s.value), s)
    for key in ("generate_max_len", "max_new_tokens"):
        s = by_key.get(key)
        if s is not None and to_int(s.value):
            b.set("completion_len", to_int(s.value), s)
    _openrlhf_lengths(b)
    s = by_key.get("vllm_num_engines")
    if s is not None and to_int(s.value):
        colocated = by_key.get("colocate_all_models")
        b.set(
            "generation",
            "vllm-colocate" if colocated is not None and to_bool(colocated.value) is not False else "vllm-server",
            s,
        )
    s = by_key.get("critic_pretrain")
    if s is not None:
        b.set("value_model", True, s)
        if isinstance(s.value, str) and s.value.strip():
            b.set("critic_model_id", s.value.strip(), s)
    else:
        _openrlhf_default_critic(b, by_key)
    if b.plan.objective is not None and b.plan.objective.value in ONLINE:
        _openrlhf_micro_batches(b, by_key, written)
    # a critic, where the run has one, trains in its own actor group, in `micro_train_batch_size` micro-batches like
    # the policy (OpenRLHF v0.9.0 openrlhf/trainer/ppo_trainer.py `ppo_train`: the critic group's `fit` before the
    # actor's); the estimate uses it only with a value model
    micro, obj = b.plan.micro_batch, b.plan.objective
    if (
        obj is not None
        and obj.value == "ppo"
        and micro is not None
        and to_int(micro.value)
        and not b.has("critic_micro_batch")
    ):
        # read from the policy's micro-batch setting (its key and span: a fix of that setting changes both)
        b.plan.critic_micro_batch = micro.model_copy(
            update={
                "value": to_int(micro.value),
                "origin": Origin.DERIVED,
                "note": "the critic's update runs apart from the policy's, in micro-batches of the same size",
            }
        )


def apply_launch(b: PlanBuilder, tool: str, subcommand: str | None, script: str | None, flags: list[Setting]) -> None:
    """A training command: the objective its program/subcommand/module names, then its flags."""
    by_flag = {str(s.path[0]): s for s in flags if s.path}
    obj = from_launch(tool, subcommand, script)
    if obj is not None:
        what = f"`{tool} {subcommand}`" if tool == "trl" else f"`{script}`"
        set_objective(b, obj, note=f"the command runs {what}", origin=Origin.DERIVED)
    if tool == "swift":
        apply_swift(b, by_flag, subcommand)
    elif tool == "megatron":  # Megatron-SWIFT's `megatron rlhf` (swift/megatron/trainers/rollout_mixin.py)
        _swift_rollout_offload(b, by_flag)
    if script and "openrlhf" in script:
        apply_openrlhf(b, by_flag, {str(s.key) for s in flags})
        if "ray" in script:
            _openrlhf_groups(b, by_flag)
    if tool not in ("axolotl", "llamafactory", "torchtune"):
        kids = []
        for s in flags:
            c = Setting(str(s.path[0]), (str(s.path[0]),), s.value, s.span, s.value_span)
            kids.append(c)
        apply_hf_keys(b, kids)
    if script and "openrlhf" in script:
        _openrlhf_reference(b, by_flag)
    finish(b, script or "")


def finish(b: PlanBuilder, path: str) -> None:
    """After a format read its keys: objective-specific settings that imply an objective."""
    plan = b.plan
    if plan.objective is not None:
        return
    if plan.teacher_model_id is not None:
        set_objective(b, "kd", note="a teacher model is named")


def by_key(settings: list[Setting]) -> dict[str, Setting]:
    return {str(s.key): s for s in settings if len(getattr(s, "path", (s.key,))) <= 1}
