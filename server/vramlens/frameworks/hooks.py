"""How a framework's run differs from the generic one, as hooks the resolver calls instead of testing its name.

`FrameworkHooks` holds every such quirk with the generic behaviour as its default; a framework that differs has
`frameworks/<name>/hooks.py` defining `HOOKS`, a `FrameworkHooks` (or a subclass overriding the methods) with its
own values and the upstream source each one comes from. `hooks_for(key)` returns them for a framework key of
`knowledge.frameworks.DEFAULTS` (the one list of framework names): the folder is the key with `-` spelled `_`.

The framework sets that other layers share (`knowledge.frameworks.BEHAVIOUR`, `HF_MODEL_FRAMEWORKS`,
`HF_TRAINER_FRAMEWORKS`, `FREEZES_VISION`, `REWARD_MODEL_WHEN_NAMED`, `BITSANDBYTES`) stay there, read through the
properties below, so the estimator and the benchmarks keep reading the same lists.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from vramlens.knowledge import frameworks

# Objectives whose configs are preference datasets of chosen/rejected (or labelled) pairs: TRL's preference configs
PREFERENCE_OBJECTIVES = ("dpo", "kto", "orpo", "cpo", "simpo", "rm")


@dataclass(frozen=True)
class AmpDefault:
    """A mixed-precision setting a framework derives from the loaded dtype when the config sets none."""

    amp_dtype: str
    note: str


@dataclass(frozen=True)
class SeqDefault:
    """A sequence length a framework truncates to for an objective when the config sets none."""

    value: int
    framework: str
    note: str


@dataclass(frozen=True)
class KbitPrep:
    """How a framework prepares a k-bit model for adapter training (the fields of the plan it decides) and what every
    view says about it."""

    kbit_upcast: bool
    kbit_embeddings_16bit: bool
    adapter_fp32: bool
    note: str


@dataclass(frozen=True)
class DistillLoss:
    """A framework's own distillation loss (the `ResolvedPlan.distill_*` fields) and what every view says about it."""

    form: str  # ResolvedPlan.distill_loss
    beta: float
    sft: bool
    note: str


@dataclass(frozen=True)
class FrameworkHooks:
    """A framework's quirks, each defaulting to the generic behaviour (a plain PyTorch loop)."""

    key: str = "transformers"
    # model: the model's RoPE positions are the builder's `max_seq_len` (torchtune), not the checkpoint's
    positions_from_builder: bool = False
    # precision: the model is loaded in the training (autocast) dtype when the config names no load dtype
    loads_in_amp_dtype: bool = False
    # optimizer: the rank of a low-rank optimizer (GaLore, APOLLO) without `rank=` (transformers trainer.py: 128)
    low_rank_default: int = 128
    # adapters: an explicit upcast setting decides whether adapters train in fp32 (LLaMA-Factory `upcast_trainable`)
    adapter_fp32_follows_upcast: bool = False
    # vision: the environment variables that cap a Qwen-VL image (pixels; tokens of 2 × 2 patches)
    image_pixel_env: tuple[str, ...] = ()
    image_token_env: tuple[str, ...] = ()
    # objective: GRPO without `beta` loads no reference model (TRL's beta=0.0)
    grpo_reference_free: bool = False
    # objective: a rollout's prompt is bounded by the sequence-length setting (tokenizer max_seq_len, cutoff_len)
    rollout_prompt_from_seq_len: bool = False
    # objective: its online-RL recipes train every weight (no adapters to switch to: a fix does not offer them)
    rl_full_only: bool = False
    # objective: the completion length of a rollout when the config sets none
    completion_len_default: int = 256
    # where that default comes from ("trl 1.16"); empty: not a framework's default, an assumption that is named
    completion_len_source: str = ""
    # objective: the per-device batch holds completions, not prompts (TRL GRPOTrainer's generation_batch_size)
    batch_counts_completions: bool = False
    # loss: under sequence parallelism the SFT loss is the framework's own cross-entropy on the 16-bit logits (no
    # fp32 upcast), chunked when the environment variable named here sets a chunk size
    sp_loss_16bit: bool = False
    sp_loss_chunk_env: str = ""
    # evaluation: it runs after the optimizer step with the gradients still allocated (they are zeroed when the next
    # step begins), not after a zero_grad that frees them (transformers' Trainer)
    evaluates_with_gradients: bool = False

    # --- the shared framework sets of knowledge/frameworks.py -------------------------------------------------
    @property
    def behaviour(self) -> dict[str, Any]:
        """How the step allocates (adapter_fp32, kbit_upcast, keep_logits, attn_mask, step flags)."""
        return frameworks.BEHAVIOUR[self.key]

    @property
    def hf_model(self) -> bool:
        """The step runs transformers' own model classes (their version-dependent choices apply)."""
        return self.key in frameworks.HF_MODEL_FRAMEWORKS

    @property
    def hf_trainer(self) -> bool:
        """The step is transformers' Trainer (its FSDP wrapping and gradient checkpointing apply)."""
        return self.key in frameworks.HF_TRAINER_FRAMEWORKS

    @property
    def freezes_vision(self) -> bool:
        return self.key in frameworks.FREEZES_VISION

    @property
    def reward_model_when_named(self) -> bool:
        """PPO holds a reward model only when one is named (else a function or an adapter on the policy)."""
        return self.key in frameworks.REWARD_MODEL_WHEN_NAMED

    @property
    def bitsandbytes(self) -> str | None:
        """The bitsandbytes release the framework runs with when nothing names one (None: a current release)."""
        return frameworks.BITSANDBYTES.get(self.key)

    def step_flags(self) -> dict[str, bool]:
        return frameworks.step_flags(self.key)

    def arch_as_run(self, arch):
        return frameworks.arch_as_run(self.key, arch)

    # --- methods a framework overrides ----------------------------------------------------------------------
    def builder_arch(self, arch, extra: dict[str, Any]):
        """The architecture as the framework's model builder makes it from the plan's `extra` settings."""
        return arch

    def amp_from_weights(self, weight_dtype: str) -> AmpDefault | None:
        """The mixed precision the framework turns on from the loaded dtype when the config sets none."""
        return None

    def seq_len_default(self, objective: str) -> SeqDefault | None:
        """A sequence length the objective's config defaults to where the framework's defaults hold none."""
        return None

    def evaluates(self, extra: Callable[[str], Any], version: str | None) -> bool:
        """Whether the run evaluates between training steps, from the settings kept by name (`extra`) and the
        framework's version (None: unknown). transformers' Trainer and its subclasses: `eval_strategy`
        (frameworks/evaluation.py); another loop is not known to evaluate."""
        from vramlens.frameworks.evaluation import trainer_evaluates

        return self.hf_trainer and trainer_evaluates(extra)

    def batch_of_completions(self, version: str | None, objective: str = "grpo") -> bool:
        """Whether the per-device batch of an online-RL run of `objective` holds completions rather than prompts
        (`batch_counts_completions`), at the framework's version (None: unknown, the newest)."""
        return self.batch_counts_completions

    def distill_loss(self, extra: Callable[[str], Any], version: str | None) -> DistillLoss | None:
        """The distillation loss when it is the framework's own, from the settings kept by name and the framework's
        version (None: the student's cross-entropy with the teacher's logits beside it)."""
        return None

    def kbit_preparation(
        self, env: dict, *, quant_bits: int | None, peft: str, objective: str, compute: str, sharded: bool
    ) -> KbitPrep | None:
        """How the trainer prepares a k-bit model for adapters, where it differs from `behaviour` (None: as that)."""
        return None

    def rope_caches(self, builder: Any, family: str, peft: str, layers: int) -> int:
        """RoPE caches the model allocates (1: one shared module)."""
        return 1


# Quirks several frameworks share because they run the same upstream code.
# TRL's GRPOTrainer (trl 1.16.0 trl/trainer/grpo_config.py): `beta=0.0` loads no reference model,
# `max_completion_length=512`, and `per_device_train_batch_size` counts completions
# (`generation_batch_size = per_device_train_batch_size × steps_per_generation`, steps_per_generation defaulting to
# gradient_accumulation_steps)
TRL_GRPO: dict[str, Any] = {
    "grpo_reference_free": True,
    "completion_len_default": 512,
    "completion_len_source": "trl 1.16",
    "batch_counts_completions": True,
}

GENERIC = FrameworkHooks()
_CACHE: dict[str, FrameworkHooks] = {}


def module_name(key: str) -> str:
    """The package of a framework key's folder (`ms-swift` → `vramlens.frameworks.ms_swift`)."""
    return "vramlens.frameworks." + key.replace("-", "_")


def hooks_for(framework_key: str | None) -> FrameworkHooks:
    """The hooks of a framework key (`knowledge.frameworks.DEFAULTS`); unknown keys get transformers' (as its
    defaults do: `frameworks.defaults_for`)."""
    key = framework_key if framework_key in frameworks.DEFAULTS else "transformers"
    found = _CACHE.get(key)
    if found is None:
        package = module_name(key)
        if importlib.util.find_spec(package) is not None and importlib.util.find_spec(package + ".hooks") is not None:
            found = replace(importlib.import_module(package + ".hooks").HOOKS, key=key)
        else:
            found = replace(GENERIC, key=key)
        _CACHE[key] = found
    return found
