"""Command-line vocabularies of training programs that take their settings as flags: OpenRLHF, ms-swift run
through a launcher, and PEFT's SFT example script. `formats.shell` recognises the command and hands each
flag to the handlers here; what the program does when a flag is absent is applied afterwards, with its source.

OpenRLHF (`python -m openrlhf.cli.train_sft|train_dpo|train_rm|train_kto|train_ppo_ray|…`, `deepspeed --module
openrlhf.cli.…`, `torchrun … openrlhf/cli/train_sft.py`, `ray job submit … -- python3 -m openrlhf.cli.train_ppo_ray`,
where `--actor_num_gpus_per_node` is the actor's own GPU group): flags and defaults from openrlhf/cli/train_sft.py
(OpenRLHF commit f2afba47: `--micro_train_batch_size` 8, `--train_batch_size` 128 global, `--max_len` 2048,
`--zero_stage` 2, `--bf16`, `--flash_attn`, `--gradient_checkpointing`, `--adam_offload`, `--lora_rank` 0,
`--lora_alpha` 16, `--lora_dropout` 0, `--target_modules` all-linear, `--load_in_4bit`, `--packing_samples`,
`--ring_attn_size`); later releases spell precision `--param_dtype bf16|fp16` and attention
`--attn_implementation`. The model is loaded by openrlhf/models/actor.py (commit 01b8a23d): bf16 with `--bf16`
(else the checkpoint's dtype), FlashAttention-2 with `--flash_attn` (else eager), 4-bit NF4 with double
quantization under `--load_in_4bit`, LoRA through PEFT when `--lora_rank` > 0. DeepSpeed runs the step
(openrlhf/utils/deepspeed/deepspeed_utils.py `get_train_ds_config`: ZeRO stage, bf16, Adam states offloaded
to the CPU with `--adam_offload`).

From v0.10.2 OpenRLHF spells its flags in dotted sections (`--model.model_name_or_path`, `--train.micro_batch_size`,
`--ds.zero_stage`, `--ds.lora.rank`, …): `OPENRLHF_DOTTED` maps each to the flat flag it replaced, and the defaults
absent flags take are those of the entry point's own parser at the release the flags' spelling belongs to
(vramlens.frameworks.schemas).

ms-swift through a launcher (`torchrun … swift/cli/sft.py`, `accelerate launch … swift/cli/sft.py`,
`python -m swift.cli.sft`, 1.x's `python llm_sft.py`): the same flags as `swift sft|pt|rlhf` (the entry points in
swift/cli/). ms-swift 1.x/2.x flags (`--model_type` from its model registry, `--sft_type`, `--model_id_or_path`,
`--batch_size`, `--lora_target_modules DEFAULT|ALL`, `--quantization_bit 0`) and the memory-saving methods of every
release (`--use_galore`, LLaMA-Pro) are read at the end of this module.

PEFT's SFT example (huggingface/peft examples/sft/train.py and utils.py, commit 493e7539 / 93288afb): model
flags beside SFTConfig's — `--use_peft_lora`, `--lora_r` (64), `--lora_alpha` (16), `--lora_dropout` (0.1),
`--lora_target_modules` (q,k,v,o,down,up,gate projections), `--use_4bit_quantization`, `--use_nested_quant`,
`--bnb_4bit_compute_dtype` (float16), `--bnb_4bit_quant_type` (nf4), `--bnb_4bit_quant_storage_dtype`,
`--use_8bit_quantization`, `--use_flash_attn` (else eager), `--use_reentrant`; the model is loaded with
`torch_dtype=quant_storage_dtype or torch.float32` — fp32 weights unless 4-bit, so `--bf16 True` is AMP.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from vramlens.formats import deepspeed, hf, moe_experts
from vramlens.formats.settings import PlanBuilder, Setting, to_bool, to_int
from vramlens.plan import IssueKind, Origin, Severity

OPENRLHF_CLI = "openrlhf/cli/train_sft.py (OpenRLHF f2afba47)"
OPENRLHF_ACTOR = "openrlhf/models/actor.py (OpenRLHF 01b8a23d)"
PEFT_EXAMPLE = "PEFT examples/sft/utils.py (93288afb)"

_OPENRLHF_MODULE = re.compile(r"openrlhf[./]cli[./](\w+)")
# ms-swift 1.x/2.x's example entry points examples/pytorch/llm/llm_sft.py and llm_dpo.py (v1.7.3: `from swift.llm import
# sft_main; sft_main()`), run as `python llm_sft.py --model_type …` from its example scripts
_SWIFT_SCRIPT = re.compile(r"(?:^|/)(?:swift/cli/(sft|pt|rlhf)|llm_(sft|dpo))\.py$")
_SWIFT_MODULE = re.compile(r"swift\.cli\.(sft|pt|rlhf)$")
# OpenRLHF before v0.3.8 kept its entry points in examples/ (v0.3.0: examples/train_sft.py, train_dpo.py, train_rm.py,
# train_kto.py, train_kd.py, train_ppo.py, train_ppo_ray.py; openrlhf/cli/ from v0.3.8), and its example scripts ran
# them as `deepspeed ../train_dpo.py …` or `ray job submit … -- python3 examples/train_ppo_ray.py …`. The names are
# common, so the script is OpenRLHF's only with OpenRLHF's own `--pretrain` and `--micro_train_batch_size` flags
# (examples/train_sft.py at v0.3.0: `parser.add_argument("--pretrain", …)`, `--micro_train_batch_size`).
_OPENRLHF_EXAMPLE = re.compile(r"(?:^|/)(train_(?:sft|dpo|rm|kto|kd|ppo|ppo_ray|prm)|batch_inference)\.py$")
_OPENRLHF_OWN_FLAGS = frozenset({"--pretrain", "--micro_train_batch_size"})


def program(script: str, module: bool, flags: Iterable[str] = ()) -> tuple[str, str] | None:
    """(tool, subcommand) of a script or module a launcher runs, for the programs read here; `flags`: the words
    after a script, which tell OpenRLHF's pre-v0.3.8 `examples/train_*.py` from other scripts of the same name."""
    m = _OPENRLHF_MODULE.search(script)
    if m:
        return "openrlhf", m.group(1)
    m = None if module else _OPENRLHF_EXAMPLE.search(script)
    if m and _OPENRLHF_OWN_FLAGS <= {f.split("=", 1)[0] for f in flags}:
        return "openrlhf", m.group(1)
    m = (_SWIFT_MODULE if module else _SWIFT_SCRIPT).search(script)
    if m:
        sub = m.group(1) or m.group(m.re.groups)
        return "swift", "rlhf" if sub == "dpo" else sub
    return None


# --- OpenRLHF --------------------------------------------------------------------------------------

# OpenRLHF entry points that do not train: openrlhf/cli/batch_inference.py (vLLM generation, reward labelling;
# run before training in examples/scripts/train_iterative_dpo_llama.sh and train_rejection_sampling_llama.sh at
# v0.9.0), serve_rm.py (a reward model behind an HTTP server), and before v0.3.8 examples/batch_inference.py
_OPENRLHF_NOT_TRAINING = {
    "batch_inference": "OpenRLHF batch inference (generation or reward labelling)",
    "serve_rm": "OpenRLHF's reward model server",
}


# ms-swift 1.x/2.x's example entry points that do not train, run as `python llm_infer.py --ckpt_dir …` by the
# infer.sh beside each training script (v2.4.0 examples/pytorch/llm/llm_infer.py: `from swift.llm import infer_main;
# infer_main()`; rome_infer.py, app.py: the web UI; examples/pytorch/animatediff/animatediff_infer.py)
_SWIFT_NOT_TRAINING_SCRIPT = re.compile(r"(?:^|/)(llm_infer|rome_infer|animatediff_infer)\.py$")


# ms-swift 1.x/2.x's diffusion example entry points (v1.5.0–v2.6.1 examples/pytorch/animatediff/animatediff_sft.py:
# `from swift.aigc import animatediff_sft`, an AnimateDiff motion module on a Stable Diffusion UNet;
# examples/pytorch/stable_diffusion/finetune_stable_diffusion.py: modelscope's Stable Diffusion LoRA trainer)
_SWIFT_DIFFUSION_SCRIPT = re.compile(r"(?:^|/)(animatediff_sft|finetune_stable_diffusion\w*)\.py$")


def swift_diffusion_script(script: str) -> str | None:
    """What an ms-swift diffusion example entry point trains ("an AnimateDiff video diffusion model"), or None."""
    m = _SWIFT_DIFFUSION_SCRIPT.search(script)
    if m is None:
        return None
    if m.group(1) == "animatediff_sft":
        return "an AnimateDiff video diffusion model (ms-swift's `animatediff_sft.py`)"
    return f"a Stable Diffusion model (ms-swift's `{m.group(1)}.py`)"


def script_not_training(script: str) -> str | None:
    """What a known non-training example script of a program read here does, or None."""
    m = _SWIFT_NOT_TRAINING_SCRIPT.search(script)
    return f"ms-swift's `{m.group(1)}.py` (inference)" if m else None


def not_training(tool: str, subcommand: str | None) -> str | None:
    """What a recognised program does when it is not training, or None."""
    return _OPENRLHF_NOT_TRAINING.get(subcommand or "") if tool == "openrlhf" else None


def _bf16(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("amp_dtype", "bf16", s, note="DeepSpeed bf16 (fp32 master weights in the optimizer)")
        b.set("weight_dtype", "bf16", s, note=f"the model is loaded in bf16 ({OPENRLHF_ACTOR})")


def _param_dtype(b: PlanBuilder, s: Setting) -> None:
    v = str(s.value).strip().lower()
    if v in ("bf16", "fp16"):
        b.set("amp_dtype", v, s)
        b.set("weight_dtype", v, s)
    else:
        b.unknown(s, "parameter dtype", ("bf16", "fp16"))


def _zero_stage(b: PlanBuilder, s: Setting) -> None:
    stage = to_int(s.value)
    if stage is None or not 0 <= stage <= 3:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be 0, 1, 2 or 3, got {s.value!r}", s)
    b.set("dist_strategy", "deepspeed", s)
    b.set("zero_stage", stage, s)


def _adam_offload(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("dist_strategy", "deepspeed", s)
        b.set("offload_optimizer", True, s, note="Adam states on the CPU (DeepSpeed offload_optimizer)")


def _lora_rank(b: PlanBuilder, s: Setting) -> None:
    r = to_int(s.value)
    if r is None:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be a whole number, got {s.value!r}", s)
    if r > 0:
        b.set("peft_method", "lora", s)
        b.set("lora_r", r, s)
    else:
        b.set("peft_method", "none", s, note="`--lora_rank 0`: full fine-tuning")


def _load_in_4bit(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        note = f"NF4 with double quantization ({OPENRLHF_ACTOR})"
        b.set("quant_bits", 4, s, note=note)
        b.set("quant_type", "nf4", s, note=note)
        b.set("quant_double", True, s, note=note)
        b.set("quant_compute_dtype", "bf16", s, note=note)


def _flash(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("attn_impl", "flash_attention_2", s)


def _micro(b: PlanBuilder, s: Setting) -> None:
    b.set_int("micro_batch", s, minimum=1)


def _global(b: PlanBuilder, s: Setting) -> None:
    b.set_int("global_batch", s, minimum=1, note="OpenRLHF `--train_batch_size` is the global batch")


def _seq(b: PlanBuilder, s: Setting) -> None:
    b.set_int("seq_len", s, minimum=1)


def _ring(b: PlanBuilder, s: Setting) -> None:
    b.set_int("context_parallel", s, minimum=1)


def _packing(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("packing", True, s)


def _actor_gpus(b: PlanBuilder, s: Setting) -> None:
    n = to_int(s.value)
    if n is not None and n >= 1:
        note = "OpenRLHF (Ray): the actor trains on its own group of GPUs; the estimate is for one of them"
        b.set("gpu_count", n, s, note=note)
        b.set("world_size", n, s, note=note)


def _via(name: str) -> Callable[[PlanBuilder, Setting], None]:
    return lambda b, s: hf.HANDLERS[name](b, s)


# OpenRLHF from v0.10.2 (commit ed62d0e2 "dotted config hierarchy", in every release since) spells its flags in
# dotted sections; `openrlhf/utils/config.py` `hierarchize` turns them into nested namespaces. The flags that matter to
# memory, as the v0.11.0 parsers define them (openrlhf/cli/train_sft.py, train_dpo.py, train_rm.py, train_ppo_ray.py
# at 3c3be623), each with the flat flag it replaced (the example scripts' rename in ed62d0e2), so both spellings go
# through the same handlers.
OPENRLHF_DOTTED: dict[str, str] = {
    "model.model_name_or_path": "pretrain",
    "actor.model_name_or_path": "pretrain",
    "reward.model_name_or_path": "reward_pretrain",
    "reward.remote_url": "remote_rm_url",
    "critic.model_name_or_path": "critic_pretrain",
    "train.micro_batch_size": "micro_train_batch_size",
    "train.batch_size": "train_batch_size",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "rollout.batch_size": "rollout_batch_size",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "rollout.max_new_tokens": "max_new_tokens",
    "data.max_len": "max_len",
    "ds.zero_stage": "zero_stage",
    "ds.param_dtype": "param_dtype",
    "ds.attn_implementation": "attn_implementation",
    "ds.adam_offload": "adam_offload",
    "ds.load_in_4bit": "load_in_4bit",
    "ds.packing_samples": "packing_samples",
    "ds.ring_attn_size": "ring_attn_size",
    "ds.use_liger_kernel": "use_liger_kernel",
    "ds.tensor_parallel_size": "ds_tensor_parallel_size",
    "ds.deepcompile": "deepcompile",
    "ds.zpg": "zpg",
    "ds.grad_accum_dtype": "grad_accum_dtype",
    "ds.lora.rank": "lora_rank",
    "ds.lora.alpha": "lora_alpha",
    "ds.lora.dropout": "lora_dropout",
    "ds.lora.target_modules": "target_modules",
    "model.gradient_checkpointing_enable": "gradient_checkpointing",
    "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "model.gradient_checkpointing_reentrant": "gradient_checkpointing_use_reentrant",
    "actor.gradient_checkpointing_reentrant": "gradient_checkpointing_use_reentrant",
    "actor.num_gpus_per_node": "actor_num_gpus_per_node",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm.enable_sleep": "vllm_enable_sleep",
    "vllm.enforce_eager": "enforce_eager",
    "ds.enable_sleep": "deepspeed_enable_sleep",
    "train.colocate_all": "colocate_all_models",
    "train.colocate_actor_ref": "colocate_actor_ref",
    "train.colocate_critic_reward": "colocate_critic_reward",
    "ref.offload": "ref_offload",
    "train.dynamic_batch_enable": "use_dynamic_batch",
    "train.max_tokens_per_gpu": "train_max_tokens_per_gpu",
    "rollout.max_tokens_per_gpu": "rollout_max_tokens_per_gpu",
    "ref.model_name_or_path": "ref_pretrain",
    "algo.kl.init_coef": "init_kl_coef",
}


def openrlhf_spelling(flat: str, dotted: bool, program: str | None = None) -> str:
    """A flat OpenRLHF flag as a command line of its release spells it: flat, or dotted from v0.10.2
    (OPENRLHF_DOTTED), in the section the program uses where two sections spell it (`--actor.*` in train_ppo_ray,
    `--model.*` elsewhere)."""
    if not dotted:
        return flat
    names = [d for d, f in OPENRLHF_DOTTED.items() if f == flat]
    section = "actor." if program and "ppo" in program else "model."
    return next((d for d in names if d.startswith(section)), names[0] if names else flat)


def openrlhf_flag(name: str) -> str:
    """The flat flag name an OpenRLHF flag stands for (dotted flags of v0.10.2+ → the flags they replaced)."""
    return OPENRLHF_DOTTED.get(name, name)


def _reentrant_gc(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("ckpt_reentrant", True, s)


def _optim(b: PlanBuilder, s: Setting) -> None:
    # v0.10.2+ `--optim adam|muon` (train_sft.py): DeepSpeed's Muon keeps one momentum buffer for the 2-D weights
    v = str(s.value).strip().lower()
    if v == "muon":
        b.set("optimizer", "muon", s)
    elif v != "adam":
        b.unknown(s, "optimizer", ("adam", "muon"))


def _not_default(what: str, consequence: str, default=False) -> Callable[[PlanBuilder, Setting], None]:
    """A flag that changes memory or speed in a way the estimate does not model, recorded when it is not at its
    default."""

    def handler(b: PlanBuilder, s: Setting) -> None:
        v = to_bool(s.value) if isinstance(default, bool) else to_int(s.value)
        if v is not None and v != default:
            b.unmodelled(s, what, consequence)

    return handler


def _deepspeed_sleep(b: PlanBuilder, s: Setting) -> None:
    """`--deepspeed_enable_sleep`: between its updates each DeepSpeed model's optimizer states, fp32 master weights and
    gradient buffers go to the CPU (`offload_states`), and come back before the next update (OpenRLHF v0.9.0
    openrlhf/utils/deepspeed/deepspeed_utils.py `offload_deepspeed_states`: optim_states, contiguous_grad_buffer,
    hp_params, and lp_grads from DeepSpeed 0.16.5; the 16-bit weights stay; trainer/ppo_trainer.py `ppo_train`:
    `reload_states` before `fit`, `offload_states` after). The update phase holds them all; the rollout and the
    log-prob passes run without the optimizer state."""
    on = to_bool(s.value)
    if on is None:
        return
    note = "optimizer states and fp32 master weights on the CPU between updates" if on else None
    b.set("offload_optimizer_idle", on, s, note=note)


OPENRLHF_HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    # --ds.experts_implementation (v0.10 on: eager, batched_mm, grouped_mm, deepgemm), handed to from_pretrained
    **dict.fromkeys(("experts_implementation", "ds.experts_implementation"), moe_experts.read_experts_implementation),
    "pretrain": _via("model_name_or_path"),
    "micro_train_batch_size": _micro,
    "train_batch_size": _global,
    "max_len": _seq,
    "zero_stage": _zero_stage,
    "bf16": _bf16,
    "param_dtype": _param_dtype,
    "flash_attn": _flash,
    "attn_implementation": _via("attn_implementation"),
    "gradient_checkpointing": _via("gradient_checkpointing"),
    "adam_offload": _adam_offload,
    "lora_rank": _lora_rank,
    "lora_alpha": _via("lora_alpha"),
    "lora_dropout": _via("lora_dropout"),
    "target_modules": _via("lora_target_modules"),
    "load_in_4bit": _load_in_4bit,
    "packing_samples": _packing,
    "ring_attn_size": _ring,
    "use_liger_kernel": _via("use_liger_kernel"),
    "actor_num_gpus_per_node": _actor_gpus,
    "gradient_checkpointing_use_reentrant": _reentrant_gc,
    "optim": _optim,
    "ds_tensor_parallel_size": deepspeed.autotp,
    "deepcompile": _not_default("DeepSpeed DeepCompile", "estimated as eager DeepSpeed"),
    "zpg": _not_default("ZeRO++ hierarchical partitioning (`zpg`)", "estimated with plain ZeRO partitions", 1),
    "grad_accum_dtype": lambda b, s: (
        b.unmodelled(s, "DeepSpeed gradient accumulation dtype", "estimated with the default accumulation dtype")
        if s.value not in (None, True, "")
        else None
    ),
    # OpenRLHF v0.11.0 (3c3be623) openrlhf/trainer/ppo_utils/samples_generator.py: the engines wake before each
    # rollout and `sleep` (level 1) after it; train_ppo_ray.py turns the flag off without --train.colocate_all
    "vllm_enable_sleep": lambda b, s: (
        b.set("generation_sleeps", bool(to_bool(s.value)), s) if to_bool(s.value) is not None else None
    ),
    "deepspeed_enable_sleep": _deepspeed_sleep,
    # vLLM captures no CUDA graphs (openrlhf/trainer/ray/vllm_engine.py `create_vllm_engines(enforce_eager=…)`)
    "enforce_eager": lambda b, s: (
        b.set("generation_eager", bool(to_bool(s.value)), s) if to_bool(s.value) is not None else None
    ),
}


def openrlhf_release(written: set[str]) -> str | None:
    """The release of OpenRLHF's command line the flags as written belong to, as a dumped schema version
    (vramlens.frameworks.schemas): dotted flags → the newest dump (v0.10.2+); `--param_dtype` → "0.10.1", the newest
    flat one (v0.9.2 replaced `--bf16` and `--flash_attn` with `--param_dtype`, default bf16, and
    `--attn_implementation`, default flash_attention_2); None for the older `--bf16`/`--flash_attn` CLI (no dump: its
    defaults are knowledge.frameworks' table, read at f2afba47) or flags that do not tell."""
    from vramlens.frameworks import schemas

    if any("." in n for n in written):
        return schemas.pick_version("openrlhf")
    if "param_dtype" in written:
        return schemas.pick_version("openrlhf", "0.10.1")
    return None


def openrlhf_defaults(b: PlanBuilder, written: set[str] = frozenset(), module: str | None = None) -> None:
    """What OpenRLHF's training entry points do when a flag is absent (beyond knowledge.frameworks' table), for the
    release its flags (`written`, as spelled) belong to and the entry point (`train_sft`, `train_ppo_ray`, …): the
    defaults of that entry point's own parser at that release (schemas/openrlhf/<version>.json)."""
    from vramlens.frameworks import schemas

    plan = b.plan
    release = openrlhf_release(written)
    dotted = any("." in n for n in written)
    owner = module if module in ("train_sft", "train_dpo", "train_rm", "train_ppo_ray") else "train_sft"

    def default(concept: str, flat: str, convert=lambda v: v) -> None:
        name = openrlhf_spelling(flat, dotted, module)
        v = schemas.default("openrlhf", name, release, owner=owner) if release else None
        if v is not None and getattr(plan, concept) is None:
            b.set(
                concept,
                convert(v),
                origin=Origin.DEFAULT,
                framework="openrlhf",
                note=f"`--{name}` {v} (OpenRLHF {release} openrlhf/cli/{owner}.py)",
            )

    # `param_dtype` "bf16": the model loads in it and DeepSpeed runs bf16 (openrlhf/models/actor.py `torch_dtype =
    # convert_to_torch_dtype(param_dtype)`, utils/deepspeed/deepspeed_utils.py `"bf16": {"enabled": param_dtype ==
    # "bf16"}`)
    default("amp_dtype", "param_dtype")
    default("weight_dtype", "param_dtype")
    default("attn_impl", "attn_implementation")
    if module in ("train_rm", "train_prm", "train_ppo", "train_ppo_ray"):
        default("micro_batch", "micro_train_batch_size")  # 1 (4 in train_ppo_ray.py up to v0.9.x), not SFT's 8
        if plan.micro_batch is None and module != "train_prm":
            # the `--bf16` CLI (v0.8.0 `micro_train_batch_size`): train_rm.py 1, train_ppo_ray.py 4
            micro = 1 if module == "train_rm" else 4
            b.set(
                "micro_batch",
                micro,
                origin=Origin.DEFAULT,
                framework="openrlhf",
                note=f"`--micro_train_batch_size` {micro} (OpenRLHF v0.8.0 openrlhf/cli/{module}.py)",
            )
    if plan.dist_strategy is None:
        b.set(
            "dist_strategy",
            "deepspeed",
            origin=Origin.DEFAULT,
            framework="openrlhf",
            note=f"OpenRLHF trains through DeepSpeed ({OPENRLHF_CLI})",
        )
    default("zero_stage", "zero_stage")
    if plan.zero_stage is None:
        b.set("zero_stage", 2, origin=Origin.DEFAULT, framework="openrlhf", note=f"`--zero_stage` 2 ({OPENRLHF_CLI})")
    if plan.peft_method is not None and plan.peft_method.value == "lora":
        default("lora_targets", "target_modules", lambda v: [v] if isinstance(v, str) else list(v))
        if plan.lora_targets is None:
            b.set(
                "lora_targets",
                ["all-linear"],
                origin=Origin.DEFAULT,
                framework="openrlhf",
                note=f"`--target_modules` all-linear ({OPENRLHF_CLI})",
            )
    if plan.quant_bits is not None and plan.peft_method is None:
        b.issue(
            IssueKind.CONFLICTING_SETTINGS,
            "`--load_in_4bit` without `--lora_rank`: OpenRLHF trains a 4-bit model only through LoRA adapters",
            severity=Severity.INFO,
        )


# --- PEFT's SFT example ------------------------------------------------------------------------------


def _use_peft_lora(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("peft_method", "lora", s)


def _use_8bit(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("quant_bits", 8, s)
        b.set("quant_type", "int8", s)


def _reentrant(b: PlanBuilder, s: Setting) -> None:
    v = to_bool(s.value)
    if v is not None:
        b.set("ckpt_reentrant", v, s)


PEFT_EXAMPLE_HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    "use_peft_lora": _use_peft_lora,
    "use_4bit_quantization": _via("load_in_4bit"),
    "use_8bit_quantization": _use_8bit,
    "use_nested_quant": _via("bnb_4bit_use_double_quant"),
    "bnb_4bit_quant_storage_dtype": _via("bnb_4bit_quant_storage"),
    "use_reentrant": _reentrant,
}
PEFT_EXAMPLE_FLAGS = frozenset(PEFT_EXAMPLE_HANDLERS) | {"use_flash_attn", "use_unsloth", "chat_template_format"}
PEFT_EXAMPLE_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "up_proj", "gate_proj"]


def peft_example_defaults(b: PlanBuilder) -> None:
    """PEFT's examples/sft: the model flags' defaults and how the model is loaded, where no flag says."""
    plan = b.plan

    def default(concept: str, value, note: str) -> None:
        if getattr(plan, concept) is None:
            b.set(concept, value, origin=Origin.DEFAULT, framework="peft-examples", note=f"{note} ({PEFT_EXAMPLE})")

    lora = plan.peft_method is not None and plan.peft_method.value in ("lora", "qlora")
    if lora:
        default("lora_r", 64, "`--lora_r` 64")
        default("lora_alpha", 16.0, "`--lora_alpha` 16")
        default("lora_dropout", 0.1, "`--lora_dropout` 0.1")
        default("lora_targets", PEFT_EXAMPLE_TARGETS, "`--lora_target_modules` all attention and MLP projections")
    if plan.quant_bits is not None and plan.quant_bits.value == 4:
        default("quant_type", "nf4", "`--bnb_4bit_quant_type` nf4")
        default("quant_double", False, "`--use_nested_quant` off")
        default("quant_compute_dtype", "fp16", "`--bnb_4bit_compute_dtype` float16")
    else:
        default("weight_dtype", "fp32", "the model is loaded with torch_dtype float32 unless 4-bit")
    default("attn_impl", "eager", "eager attention unless `--use_flash_attn`")


# --- ms-swift: the 1.x/2.x command line and the memory-saving methods of every release -----------------------------
# ms-swift 1.x (swift/llm/utils/argument.py at v1.7.3, bbcd13a9): `--model_type qwen-7b-chat` (a registered type),
# `--model_id_or_path`, `--sft_type lora|full|longlora|qalora|adalora|ia3|llamapro` (default lora), `--batch_size`
# (per device, default 1), `--lora_target_modules` (default ['DEFAULT']: the type's registered targets; `ALL`: every
# linear layer; `EMBEDDING`: the embedding too; `_prepare_target_modules`), `--quantization_bit 0|4|8` (0: none),
# `--max_length` 2048. ms-swift 3.x renamed them `--model`, `--train_type` (4.x `--tuner_type`),
# `--per_device_train_batch_size`, `--target_modules` (default all-linear).
SWIFT_1X = "swift/llm/utils/argument.py (ms-swift v1.7.3)"
SWIFT_REGISTRY = "swift/llm/utils/model.py (ms-swift v1.7.3; hf_model_id from v2.6.1)"
SWIFT_TRAINER_ARGS = "swift/trainers/arguments.py (ms-swift v4.5.2, 1613a0d4)"
SWIFT_TUNER_ARGS = "swift/arguments/tuner_args.py (ms-swift v4.5.2, 1613a0d4)"
SWIFT_LEGACY_FLAGS = frozenset({"sft_type", "model_id_or_path", "batch_size", "lora_target_modules"})


def swift_model_type(b: PlanBuilder, s: Setting) -> None:
    """`--model_type`: in 1.x/2.x the model itself (a registered type); in 3.x/4.x an architecture beside `--model`."""
    from vramlens.knowledge.frameworks import swift_model_type as registered

    entry = registered(s.value) if isinstance(s.value, str) else None
    model = entry and (entry["hf_model_id"] or entry["model_id"])
    if not model:
        return b.remember(s)
    b.set("model_id", model, s, note=f"ms-swift model_type `{s.value}` is `{model}` ({swift_registered_in(entry)})")


def swift_registered_in(entry: dict) -> str:
    """Where ms-swift registers a model type: swift/llm/utils/model.py, or the example entry points' own
    examples/pytorch/llm/custom.py, at the release the registry was read from (scripts/dump_swift_model_types.py)."""
    return f"{entry.get('file') or 'swift/llm/utils/model.py'}, ms-swift {entry.get('tag') or 'v1.7.3'}"


def swift_model_path(b: PlanBuilder, s: Setting) -> None:
    """`--model_id_or_path` (1.x/2.x) or `--model` names the weights (`--model_type` then only picks the loader). A
    ModelScope id that ms-swift registers (1.x downloads from ModelScope unless `--use_hf`) is read as the Hub id the
    registry gives it."""
    from vramlens.knowledge.frameworks import swift_hub_id

    if isinstance(s.value, str) and s.value.strip():
        model = s.value.strip()
        hub = swift_hub_id(model)
        note = f"ModelScope `{model}` is `{hub}` on the Hugging Face Hub ({SWIFT_REGISTRY})" if hub else None
        b.set("model_id", hub or model, s, override=True, note=note)


def swift_batch_size(b: PlanBuilder, s: Setting) -> None:
    b.set_int("micro_batch", s, minimum=1, note="ms-swift 1.x `--batch_size` is per device")


def _swift_galore(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set(
            "optimizer",
            "galore_adamw",
            s,
            override=True,
            note=f"`--use_galore` replaces the trainer's optimizer with GaLore AdamW ({SWIFT_TRAINER_ARGS})",
        )


# ms-swift 3.x/4.x `--optimizer`, "the optimizer plugin to use (takes priority over `--optim`)"
# (swift/trainers/arguments.py): a name of `optimizers_map` (swift/plugin/optimizer.py at v3.5.0,
# swift/optimizers/mapping.py at v4.x) → the optimizer it builds. `multimodal` and `lorap` build `--optim`'s optimizer
# with per-group learning rates, `default` is `--optim` itself: None. Muon (Moonlight's examples/toy_train.py `Muon`,
# which `muon` imports; `muonclip`, swift/optimizers/muonclip.py `MuonClip`) keeps one momentum buffer for the
# matrices and AdamW's two states for the rest.
SWIFT_OPTIMIZERS: dict[str, str | None] = {
    "default": None,
    "multimodal": None,
    "lorap": None,
    "galore": "galore_adamw",
    "muon": "muon",
    "muonclip": "muon",
}


def _swift_optimizer(b: PlanBuilder, s: Setting) -> None:
    name = str(s.value or "").strip()
    if not name:
        return
    if name not in SWIFT_OPTIMIZERS:
        return b.unmodelled(
            s,
            f"an optimizer plugin registered in ms-swift's `optimizers_map` (`{name}`)",
            "estimated with `--optim`'s optimizer",
        )
    optimizer = SWIFT_OPTIMIZERS[name]
    if optimizer is None:
        return b.remember(s)
    b.set("optimizer", optimizer, s, override=True, note=f"ms-swift `--optimizer {name}` ({SWIFT_TRAINER_ARGS})")


def _swift_count(b: PlanBuilder, s: Setting) -> None:
    """A layer count read after every flag (`swift_finish`): checked here, kept for then."""
    n = to_int(s.value)
    if n is None or n < 0:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be a whole number, got {s.value!r}", s)
    b.remember(s)


SWIFT_METHOD_SIZES = (
    "boft_block_size",
    "boft_n_butterfly_factor",
    "adalora_init_r",
    "fourier_n_frequency",
    "reft_rank",
    "adapter_length",
)

SWIFT_METHOD_HANDLERS: dict[str, Callable[[PlanBuilder, Setting], None]] = {
    "model_id_or_path": swift_model_path,
    "model_type": swift_model_type,
    "batch_size": swift_batch_size,
    "use_galore": _swift_galore,
    "optimizer": _swift_optimizer,
    # swift/arguments/sft_args.py (4.x; 3.x swift/llm/argument/train_args.py): written into the DeepSpeed config as
    # `tensor_parallel.autotp_size`
    "deepspeed_autotp_size": deepspeed.autotp,
    "quant_method": hf.quant_method,
    "lora_dropout_p": lambda b, s: hf.HANDLERS["lora_dropout"](b, s),
    "galore_rank": lambda b, s: b.set_int("optimizer_rank", s, minimum=1),
    "galore_target_modules": hf._targets_handler("optimizer_targets"),
    # 1.x/2.x targets of the other tuners, which become target_modules (v2.6.1 swift/llm/utils/argument.py; 1.7.3
    # swift/llm/tuner.py hands ia3_target_modules to IA3Config)
    **dict.fromkeys(
        ("ia3_target_modules", "vera_target_modules", "boft_target_modules"), hf._targets_handler("lora_targets")
    ),
    "llamapro_num_new_blocks": _swift_count,
    # the sizes of the PEFT methods beyond LoRA (swift/llm/argument/tuner_args.py at v3.5.0 and
    # swift/arguments/tuner_args.py at v4.0.0: `boft_block_size: int = 4`, `boft_n_butterfly_factor: int = 1`,
    # `adalora_init_r: int = 12`, `fourier_n_frequency: int = 2000`, `reft_rank: int = 4`, `adapter_length: int =
    # 128`), kept for the adapters stage (knowledge/peft_methods.METHOD_SETTINGS)
    **{k: _swift_count for k in SWIFT_METHOD_SIZES},
    **{
        k: PlanBuilder.remember
        for k in (
            "galore_optim_per_parameter",
            "galore_quantization",
            "galore_proj_quant",
            "galore_proj_bits",
            "galore_with_embedding",
            "lora_target_modules",
        )
    },
}


def swift_finish(b: PlanBuilder, settings: list[Setting]) -> None:
    """After every flag: what depends on several of them (the type's registered targets, GaLore per parameter,
    LLaMA-Pro), and the 1.x defaults where its flags are spelled the 1.x way. (LISA's `lisa_activated_layers` is
    read by the HF table, formats/hf.py.)"""
    from vramlens.knowledge.frameworks import swift_model_entry
    from vramlens.knowledge.frameworks import swift_model_type as registered

    plan = b.plan
    by_key = {s.path[0]: s for s in settings if s.path and not s.unresolved}
    mt = by_key.get("model_type")
    entry = registered(mt.value) if mt is not None and isinstance(mt.value, str) else None
    legacy = bool(SWIFT_LEGACY_FLAGS & set(by_key)) or entry is not None
    path = by_key.get("model_id_or_path")
    if entry is None and path is not None:
        entry = swift_model_entry(str(path.value).strip())  # 1.x infers the type from the model id
    if plan.model_id is None and mt is not None and entry is None:
        b.issue(
            IssueKind.NOT_READ,
            f"`{mt.key} {mt.value}` is not a model type of ms-swift 1.x/2.x's registry "
            f"({SWIFT_REGISTRY}), and no `--model` names the weights",
            mt,
        )

    lora = plan.peft_method is None or plan.peft_method.value in ("lora", "qlora", "dora")
    targets = by_key.get("lora_target_modules")
    words = hf._targets(targets.value) if targets is not None else (["DEFAULT"] if legacy else None)
    if lora and words is not None and plan.lora_targets is None:
        upper = [w.upper() for w in words]
        names = [w for w in words if w.upper() not in ("DEFAULT", "AUTO", "ALL", "EMBEDDING", "ALL-LINEAR")]
        note = None
        if "ALL" in upper or "ALL-LINEAR" in upper:
            names = ["all-linear"]
            note = "`ALL`: every linear layer"
        elif "DEFAULT" in upper or "AUTO" in upper:
            if entry is not None and entry["lora_targets"]:
                names = list(dict.fromkeys(entry["lora_targets"] + names))
                note = f"`DEFAULT`: the model type's registered targets ({swift_registered_in(entry)})"
            elif not names:
                names = ["all-linear"] if not legacy else []
        if names:
            origin = Origin.FILE if targets is not None else Origin.DEFAULT
            if targets is None:
                b.set(
                    "lora_targets",
                    names,
                    origin=origin,
                    framework="ms-swift",
                    note=f"`--lora_target_modules` default DEFAULT{': ' + note if note else ''} ({SWIFT_1X})",
                )
            else:
                b.set("lora_targets", names, targets, note=note)
        if "EMBEDDING" in upper:
            b.unmodelled(
                targets,
                "LoRA on the embedding (`EMBEDDING`)",
                "estimated without an embedding adapter",
                key=f"{targets.key} EMBEDDING",
            )

    # ms-swift (v2.0–v4.5.2 swift/optimizers/galore/utils.py `_create_optimizer_and_scheduler`): with
    # `--galore_optim_per_parameter` each parameter gets its own optimizer, all stepped together by
    # `GaloreOptimizerWrapper.step` at the optimizer step; no gradient hook is registered, so every gradient is held
    # until then as with one optimizer (not galore_torch's per-layer update in backward)
    galore = plan.optimizer is not None and plan.optimizer.value == "galore_adamw"
    quantized = by_key.get("galore_quantization")
    if galore and quantized is not None and to_bool(quantized.value):
        # `--galore_quantization`: q_galore_torch's QGaLoreAdamW8bit (bitsandbytes 8-bit states) on the model's own
        # 16-bit weights (ms-swift does not quantize them); `--galore_proj_quant` stores the projections in
        # `--galore_proj_bits` (default 4) bits (swift/trainers/arguments.py)
        b.set(
            "optimizer",
            "q_galore_adamw8bit",
            quantized,
            override=True,
            note="`--use_galore` + `--galore_quantization`: Q-GaLore's 8-bit AdamW (QGaLoreAdamW8bit)",
        )
        proj = by_key.get("galore_proj_quant")
        if proj is not None and to_bool(proj.value):
            bits = by_key.get("galore_proj_bits")
            if bits is not None:
                b.set_int("optimizer_proj_bits", bits, minimum=1)
            else:
                b.set(
                    "optimizer_proj_bits",
                    4,
                    proj,
                    origin=Origin.DEFAULT,
                    framework="ms-swift",
                    note="`--galore_proj_bits` default 4",
                )

    method = next((by_key[k] for k in ("tuner_type", "train_type", "sft_type") if k in by_key), None)
    if method is not None and str(method.value).strip().lower() == "llamapro":
        # ms-swift (swift/tuners/llamapro.py): copies `llamapro_num_new_blocks` (default 4, tuner_args.py) decoder
        # blocks into the model, spread over `llamapro_num_groups` groups, and trains only those
        blocks = by_key.get("llamapro_num_new_blocks")
        count = to_int(blocks.value) if blocks is not None else 4
        b.set("peft_method", "freeze", method, override=True, note="LLaMA-Pro trains only its new blocks")
        b.set(
            "trained_layers",
            count,
            blocks or method,
            override=True,
            note=f"{count} new block(s)"
            f"{'' if blocks else ' (`llamapro_num_new_blocks` default 4, ' + SWIFT_TUNER_ARGS + ')'}",
        )
        b.set(
            "trained_where", "spread", method, override=True, note="LLaMA-Pro's new blocks are spread through the model"
        )
        b.set(
            "added_layers",
            count,
            blocks or method,
            override=True,
            note=f"LLaMA-Pro copies {count} decoder block(s) into the model",
        )

    scale = by_key.get("loss_scale")
    if (
        scale is not None
        and plan.loss_impl is not None
        and plan.loss_impl.value == "fused"
        and weighted_loss_scale(scale)
    ):
        # A weighted `--loss_scale` puts a per-token `loss_scale` in every batch, and ms-swift's Seq2SeqTrainer then
        # pops `labels` before the forward and computes the loss itself from the logits (v3.5.0
        # swift/trainers/trainers.py `compute_loss`; v4.0.0 swift/trainers/seq2seq_trainer.py, which warns "The
        # cross_entropy loss function defined in Liger Kernel will not take effect, potentially leading to increased
        # GPU memory consumption"): without labels Liger's forward writes the full logits
        b.set(
            "loss_impl",
            "standard",
            scale,
            override=True,
            note=f"`--loss_scale {scale.value}` weights tokens: ms-swift computes the loss from the full logits, "
            "so Liger's fused linear cross-entropy does not run",
        )


# ms-swift's loss scales whose weights are not all 0 or 1 (v3.5.0 swift/plugin/loss_scale/config/*.json,
# `keep_loss_scale`; v4.0.0 swift/loss_scale/agent.py and config/*.json, `is_loss_scale_binary`): agentflan (3.0),
# alpha_umi, hermes, qwen and react (2.0). `default`, `last_round`, `all` and `ignore_empty_think` are 0/1 weights,
# which the template drops (`loss_scale = None`), so the model's own loss runs.
SWIFT_WEIGHTED_LOSS_SCALES = frozenset({"agentflan", "alpha_umi", "hermes", "qwen", "react"})


def weighted_loss_scale(s: Setting) -> bool:
    """`--loss_scale hermes` or `last_round+react` (4.x: a strategy, `+`, a loss scale type)."""
    if not isinstance(s.value, str):
        return False
    return s.value.strip().lower().split("+", 1)[-1] in SWIFT_WEIGHTED_LOSS_SCALES
