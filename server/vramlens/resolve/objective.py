"""Objective stage: what preference optimisation, online RL and distillation add to the step — paired sequences, the
reference, reward, value and teacher models, and a rollout's generation."""

from __future__ import annotations

from vramlens.frameworks.hooks import FrameworkHooks
from vramlens.knowledge import versions
from vramlens.knowledge.frameworks import Defaults
from vramlens.plan import Origin, Sourced, TrainingPlan
from vramlens.resolve.common import Approximate, Context, _extra_value
from vramlens.resolve.model import hub_lookup
from vramlens.resolved import ResolvedPlan
from vramlens.settings import Settings

PAIRED = ("dpo", "orpo", "simpo", "cpo", "rm")
ONLINE = ("ppo", "grpo", "rloo", "online-dpo")


def objective_fields(
    plan: TrainingPlan,
    rp: ResolvedPlan,
    hooks: FrameworkHooks,
    settings: Settings,
    sources: dict,
    assumptions: list[str],
    defaults: Defaults,
) -> dict:
    """What the objective changes in the step: paired sequences, the reference model, generation,
    reward/value models, the teacher. Semantics from trl 1.16.0 (trainer/dpo_trainer.py `_compute_loss`: chosen
    and rejected concatenated into one batch, the reference forward under no_grad after the policy's; with a
    PEFT model and no `ref_model` the adapters are disabled instead of loading a copy; `precompute_ref_log_probs`
    drops the reference; grpo_config.py `beta=0.0` loads no reference, rloo_config.py `beta=0.05` does;
    `generation_batch_size = per_device_train_batch_size × steps_per_generation`, `steps_per_generation` defaulting
    to `gradient_accumulation_steps`; vLLM colocated with `vllm_gpu_memory_utilization=0.3`)."""
    from vramlens.knowledge import models

    # defaults read from the framework's own argument dump at the run's version (knowledge/frameworks.py
    # DUMPED_DEFAULTS: TRL's GRPOConfig.max_completion_length is 256 up to 0.29 and 512 in 1.x; PPO's
    # response_length 53), each with where it was read
    labels = defaults.labels

    def dumped(concept: str, note: str):
        if concept not in labels:
            return None
        v = defaults[concept]
        sources[concept] = Sourced(value=v, origin=Origin.DEFAULT, framework=labels[concept], note=note.format(v))
        return v

    obj = plan.objective.value if plan.objective is not None else "sft"
    if plan.objective is not None:
        sources["objective"] = plan.objective
    else:
        sources["objective"] = Sourced(
            value="sft",
            origin=Origin.DEFAULT,
            framework=hooks.key,
            note="no preference, RL or distillation setting: supervised fine-tuning",
        )
    out: dict = {"objective": obj}
    if obj == "sft" or obj == "pretrain":
        return out

    def src(name: str):
        s = getattr(plan, name)
        if s is not None:
            sources[name] = s
            return s.value
        return None

    if obj in PAIRED:
        out["sequences_per_example"] = 2  # chosen + rejected in one concatenated forward
    if obj == "rm":
        out["scalar_head"] = True  # AutoModelForSequenceClassification: a 1-wide score head
    ref_free = src("reference_free")
    if ref_free is None and obj in ("grpo", "rloo") and (beta := dumped("kl_beta", "KL coefficient {}")) is not None:
        # TRL's KL coefficient at the run's version: GRPO's 0.04 up to 0.18, 0.0 since (no reference model)
        ref_free = float(beta) == 0.0
        if ref_free:
            assumptions.append(f"{obj.upper()} with {labels['kl_beta']} beta=0.0: no reference model is loaded")
    if ref_free is None:
        # TRL GRPO's KL coefficient defaults to 0.0 (no reference); RLOO's to 0.05; other frameworks keep one
        ref_free = obj == "grpo" and hooks.grpo_reference_free
        if obj == "grpo" and ref_free:
            assumptions.append("GRPO with TRL's default beta=0.0: no reference model is loaded")
    needs_ref = (
        obj in ("dpo", "kto", "online-dpo", "ppo", "grpo", "rloo")
        and not ref_free
        and obj not in ("orpo", "simpo", "cpo", "rm")
    )
    if needs_ref and src("precompute_ref") and obj not in ONLINE:
        needs_ref = False
    if needs_ref:
        named = src("ref_model_id")
        out["reference"] = "adapters-off" if rp.peft != "none" and not named else "copy"
        if out["reference"] == "copy":
            if (arch := _named_model(named, plan, rp, settings, assumptions, "reference model")) is not None:
                out["reference_arch"] = arch
            dtype = src("ref_dtype")
            if dtype in ("fp32", "bf16", "fp16"):
                out["reference_dtype"] = dtype
            out["reference_offloaded"] = bool(src("ref_offload"))
    if obj in ONLINE:
        prompt = src("prompt_len")
        completion = src("completion_len")
        if prompt is None and plan.seq_len is not None and hooks.rollout_prompt_from_seq_len:
            # torchtune's tokenizer max_seq_len / LLaMA-Factory's cutoff_len bound the prompt of a rollout
            prompt = int(plan.seq_len.value)
            assumptions.append(
                f"every prompt taken as {prompt:,} tokens long (`{plan.seq_len.key or 'the sequence length'}`, the "
                "most it can be): a rollout batch is padded to its longest prompt, so shorter prompts peak lower"
            )
        if prompt is None:
            prompt = dumped("prompt_len", "max_prompt_length={}: longer prompts are truncated")
        if prompt is None:
            prompt = 512
            assumptions.append(
                Approximate("prompt length not set, and the trainer does not truncate prompts: assumed 512 tokens")
            )
        if completion is None:
            completion = dumped("completion_len", "{} new tokens at most")
        if completion is None:
            completion = hooks.completion_len_default
            if hooks.completion_len_source:
                sources["completion_len"] = Sourced(
                    value=completion,
                    origin=Origin.DEFAULT,
                    framework=hooks.completion_len_source,
                    note=f"max_completion_length={completion}",
                )
            else:
                assumptions.append(Approximate(f"completion length not set: assumed {completion} tokens"))
        gen = src("generation") or "generate"
        if gen == "vllm-colocate" and not src("generation_eager"):
            # vLLM captures CUDA graphs unless `enforce_eager` (TRL's colocated LLM(...) does not pass it: trl 1.16.0
            # trl/generation/vllm_generation.py); their pool is torch's, outside the engine's memory share, and
            # stays through sleep mode (vllm/device_allocator/cumem.py releases only its own pool's allocations)
            assumptions.append(
                Approximate(
                    "the colocated rollout engine's CUDA graphs (captured unless enforce_eager) are not counted: they "
                    "hold memory beyond its share, kept while it sleeps"
                )
            )
        # samples per prompt: TRL's group size is inside its per-device batch (below); others default to one
        groups = src("num_generations") or 1
        if obj == "online-dpo":
            # trl 1.16.0 experimental/online_dpo/online_dpo_trainer.py: two completions per prompt
            # (`prompt_ids.repeat(2, 1)`), both through the policy in one forward
            gen_seqs = 2 * rp.micro_batch
            out["sequences_per_example"] = 2
        elif hooks.batch_of_completions(defaults.release, obj):
            # completions, not prompts, in the batch of TRL's GRPOTrainer (ms-swift's and axolotl's subclass it)
            gen_seqs = rp.micro_batch * max(rp.grad_accum, 1)  # generation_batch_size per device
        else:
            gen_seqs = rp.micro_batch * int(groups)
        if (apart := src("generation_batch")) and obj != "online-dpo":
            # the framework's own generation batch (torchtune: `forward_batch_size` prompts at a time)
            gen_seqs = int(apart)
            out["generation_batch"] = gen_seqs
        share = src("vllm_memory_share")
        if gen == "vllm-colocate" and share is None:
            share = dumped("vllm_memory_share", "vllm_gpu_memory_utilization={}")
        if gen == "vllm-colocate" and share is None:
            share = 0.3
            sources["vllm_memory_share"] = Sourced(
                value=share, origin=Origin.DEFAULT, framework="trl 1.16", note="vllm_gpu_memory_utilization=0.3"
            )
        out.update(
            seq_len=int(prompt) + int(completion),
            logits_tokens=int(completion),
            generation=gen,
            generations_per_example=int(gen_seqs) // max(rp.micro_batch, 1),
            generation_len=int(prompt) + int(completion),
            logprob_micro_batch=int(lp) if (lp := src("logprob_micro_batch")) else None,
            vllm_memory_share=float(share or 0.0) if gen == "vllm-colocate" else 0.0,
            generation_sleeps=gen == "vllm-colocate" and bool(src("generation_sleeps")),
        )
        if obj == "ppo":
            value = src("value_model")
            out["value_model"] = True if value is None else bool(value)
            critic = src("critic_model_id") if out["value_model"] else None
            if (arch := _named_model(critic, plan, rp, settings, assumptions, "critic model")) is not None:
                out["value_arch"] = arch
            out["reward_model"] = not hooks.reward_model_when_named or src("reward_model_id") is not None
        elif src("reward_model_id") is not None:
            out["reward_model"] = True
        if out.get("reward_model"):
            named_rm = src("reward_model_id")
            if (arch := _named_model(named_rm, plan, rp, settings, assumptions, "reward model")) is not None:
                out["reward_arch"] = arch
        apart = [m for m in src("models_apart") or () if out.get(m)]  # of the models the run has
        if apart:
            with_critic = "reward_model" in (src("critic_group") or ()) and out.get("value_model")
            what = {
                "value_model": "the critic" + (" with the reward model" if with_critic else ""),
                "reward_model": "the reward model",
                "reference": "the reference",
            }
            listed = [what[m] for m in apart if not (m == "reward_model" and with_critic)]
            assumptions.append(
                f"on GPUs of their own: {', '.join(listed)}: the peak is the actor's GPUs'"
                + (", or the critic's in its `critic-update` phase" if "value_model" in apart else "")
            )
    online_teacher = obj in ONLINE and src("teacher_model_id") is not None
    if online_teacher:
        # on-policy distillation inside an RL objective: ms-swift's GRPO with `--teacher_model` (OPD-RL) loads the
        # teacher and runs its per-token log-probs in a no-grad forward of each batch (ms-swift 2026
        # swift/rlhf_trainers/grpo_trainer.py `_compute_teacher_logps`; swift/pipelines/train/rlhf.py passes the
        # teacher to GKD and GRPO alike)
        assumptions.append("on-policy distillation: the teacher's per-token log-probs in a no-grad forward")
    served = _extra_value(plan, "teacher_model_server")
    if obj in ("gkd", "kd") and src("teacher_model_id") is None and served not in (None, ""):
        # ms-swift's `teacher_model_server`: the teacher runs behind its own server and sends its top-k log-probs
        # with each batch (swift/rlhf_trainers/gkd_trainer.py); nothing of it is on these GPUs
        assumptions.append(f"the teacher is served apart (`teacher_model_server` {served}): none on these GPUs")
    elif obj in ("gkd", "kd") or online_teacher:
        tid = src("teacher_model_id")
        teacher = (
            models.find_model(tid, settings.workspace, hub_lookup(settings), settings.any_model_folder).arch
            if tid
            else None
        )
        if teacher is None:
            teacher = rp.arch
            assumptions.append(
                Approximate(
                    f"teacher model {'`' + tid + '` unknown' if tid else 'not named'}: assumed the size of the student"
                )
            )
        out["teacher"] = teacher
        dtype = _teacher_dtype(plan, rp, hooks, defaults.env, teacher, tid, sources)
        if dtype is not None and dtype != rp.weight_dtype:
            out["teacher_dtype"] = dtype
            said = sources["teacher_dtype"]
            assumptions.append(
                said.note or f"the teacher's weights in {dtype}" + (f" (`{said.key}`)" if said.key else "")
            )
    return out


def _named_model(
    named: str | None, plan: TrainingPlan, rp: ResolvedPlan, settings: Settings, assumptions: list, what: str
):
    """The shapes of a reference, reward or critic model the config names beside the policy, when they are not the
    policy's: None for the policy's own checkpoint, for the policy's shapes, or for a model that cannot be found
    (then sized as the policy's, said as an approximation)."""
    from vramlens.knowledge import models

    if not named or not isinstance(named, str) or (plan.model_id is not None and named == plan.model_id.value):
        return None
    found = models.find_model(named, settings.workspace, hub_lookup(settings), settings.any_model_folder, by_name=True)
    if found.arch is None:
        why = found.problem or found.not_by_name or "not in the catalog, and not looked up"
        assumptions.append(Approximate(f"{what} `{named}` not found ({why}): sized as the policy"))
        return None
    if found.assumed:
        assumptions.append(Approximate(f"{what}: {found.assumed}"))
    return None if found.arch == rp.arch else found.arch


def _teacher_dtype(
    plan: TrainingPlan,
    rp: ResolvedPlan,
    hooks: FrameworkHooks,
    env: dict,  # the run's library versions (Defaults.env)
    teacher,
    named: str | None,
    sources: dict,
) -> str | None:
    """The teacher's weight dtype where it is loaded apart from the student (None: the student's).

    TRL's distillation trainers load a teacher named by its id with `AutoModelForCausalLM.from_pretrained(teacher,
    **teacher_model_init_kwargs)` (trl v0.12.2 to v0.29 trainer/gkd_trainer.py, v1.0.0 to v1.9.0
    experimental/gkd/gkd_trainer.py; GOLD alike), so without a `dtype` there it takes transformers' default: fp32
    before transformers 5, the checkpoint's stored dtype (`dtype="auto"`) from 5.0 (modeling_utils.py
    `from_pretrained`). DeepSpeed's engine casts the prepared teacher to its 16-bit dtype, as it does the student
    (TRL `prepare_deepspeed`). Other frameworks load the teacher in the student's dtype (ms-swift's
    `--teacher_model` takes `--torch_dtype`)."""
    stored = teacher.stored_dtype if teacher.stored_dtype in ("fp32", "bf16", "fp16") else "bf16"
    told = plan.teacher_dtype
    if told is not None:
        sources["teacher_dtype"] = told
        return stored if told.value == "auto" else told.value
    if hooks.key != "trl" or not named or rp.strategy == "deepspeed":
        return None
    tv = env["transformers"]
    v5 = versions.at_least(tv.version, (5, 0, 0))
    dtype = stored if v5 else "fp32"
    sources["teacher_dtype"] = Sourced(
        value=dtype,
        origin=Origin.DEFAULT,
        framework=f"transformers {tv.version}",
        note=f"TRL loads the teacher `{named}` with from_pretrained and no dtype (none in `teacher_model_init_kwargs`):"
        f" transformers {tv.version} ({tv.source}) loads "
        + (f"its stored dtype, {dtype}" if v5 else "it in fp32 (its default before 5.0)"),
    )
    return dtype


def distill_fields(ctx: Context) -> dict:
    """The distillation loss when it is the framework's own (`FrameworkHooks.distill_loss`, at the framework's
    version): the `ResolvedPlan.distill_*` fields, and a note saying which loss is counted."""
    loss = ctx.hooks.distill_loss(ctx.extra, ctx.defaults.release)
    if loss is None:
        return {}
    ctx.assumptions.append(loss.note)
    return {"distill_loss": loss.form, "distill_beta": loss.beta, "distill_sft": loss.sft}
