"""verl (volcengine/verl) PPO-family runs: `python3 -m verl.trainer.main_ppo key=value …` and its YAML configs.

verl configures its trainer with hydra: the launch line's `key=value` overrides (also `+key=value`, `key=[a,b]`,
quoted values) are merged over `verl/trainer/config/ppo_trainer.yaml` (`--config-name=ppo_megatron_trainer` for the
Megatron workers). The defaults of each release are dumped from verl's own wheel by `scripts/dump_verl_defaults.py`
into `frameworks/schemas/verl/<version>.json`; the newest one applies unless the workspace pins verl.

What the run does, as read from verl's workers (verl/workers/fsdp_workers.py at v0.4.1 and v0.7.0):
- the actor is loaded in fp32 (`torch_dtype = torch.float32 if self._is_actor else torch.bfloat16`, or
  `fsdp_config.model_dtype`) with FSDP mixed precision `param_dtype` bf16, FlashAttention-2
  (`attn_implementation="flash_attention_2"`), non-reentrant checkpointing (`use_reentrant: False`) and
  `torch.optim.AdamW`; FSDP shards over every GPU of the run (`fsdp_size: -1`);
- the per-GPU micro-batch is `ppo_micro_batch_size_per_gpu`, or the older global `ppo_micro_batch_size` divided
  by `world_size // ulysses_sequence_parallel_size`; the mini-batch `ppo_mini_batch_size × rollout.n` is divided the
  same way, so gradient accumulation is mini ÷ micro;
- the critic (a value model) is built when `algorithm.adv_estimator` is `gae`, the reference policy when
  `actor.use_kl_loss` or `algorithm.use_kl_in_reward` (verl/trainer/main_ppo.py `need_reference_policy`, v0.4.1
  `use_reference_policy`); with LoRA the reference is the actor with its adapters off;
- the rollout engine (vLLM or SGLang) lives in the same process as the actor (the hybrid engine) and takes
  `gpu_memory_utilization` of each GPU (SGLang's `mem_fraction_static` is set from the same key); it gives that
  memory back while the actor trains (`_release`, by release);
- the reference policy is loaded in bf16 (fp32 from 0.6, whose FSDPEngineConfig sets `model_dtype`) and kept on the
  CPU by FSDP's CPU offload (`_reference`); the actor's FSDP MixedPrecision gathers bf16 parameters unit by unit, so
  autocast caches no weight copies (`fsdp_mixed_precision`).

Also read: a launch's own hydra config (`--config-path`/`--config-name` of a YAML that builds on verl's trainer
config), a config fragment by the launch script that composes it, verl's SFT trainers
(`-m verl.trainer.fsdp_sft_trainer`, and from 0.6 the engine-based `-m verl.trainer.sft_trainer`), the
split-placement example trainer, a SkyPilot task's `run:` script, and the files beside a run that configure none
(multi-turn tool/interaction configs, a Ray runtime environment).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from vramlens.formats.settings import PlanBuilder, Setting, shown, to_bool, to_float, to_int
from vramlens.plan import IssueKind, Origin, Severity, Sourced

SCHEMAS = Path(__file__).resolve().parents[1] / "frameworks" / "schemas" / "verl"
FRAMEWORK = "verl"
WORKERS = "verl/workers/fsdp_workers.py"

# `python -m` modules that run verl's PPO trainer: verl's own, and the recipes built on it (verl's recipe/dapo/
# main_dapo.py, recipe/prime/main_prime.py, ... take the same config tree)
_TRAINER_MODULE = re.compile(
    r"^(?:verl\.trainer\.main_ppo|recipe\.\w+\.main_\w+|verl\.trainer\.fsdp_sft_trainer|verl\.trainer\.sft_trainer(?:_ray)?)$"
)
_SFT_MODULE = re.compile(r"^verl\.trainer\.fsdp_sft_trainer$")
# verl's engine-based SFT trainer (verl/trainer/sft_trainer.py from 0.6.0; sft_trainer_ray.py its Ray launcher, the
# same `sft_trainer_engine` config)
_SFT_ENGINE_MODULE = re.compile(r"^verl\.trainer\.sft_trainer(_ray)?$")
_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?([^,}]+)(?:,([^}]*))?\}$")
_MAX_INTERPOLATION_DEPTH = 8

ADV_OBJECTIVE = {"gae": "ppo", "rloo": "rloo"}  # every other estimator (grpo, reinforce_plus_plus, remax, ...)
# needs no critic: the group of rollout.n samples is the baseline
CONFIG_NAMES = ("ppo_trainer", "ppo_megatron_trainer")
DTYPES = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}


def is_trainer_module(module: str) -> bool:
    return bool(_TRAINER_MODULE.match(module or ""))


# verl's split-placement example trainer (examples/split_placement/main_ppo_split.py): main_ppo's config tree, its
# own `@hydra.main(config_path="config", config_name="ppo_trainer_split")`
SPLIT_SCRIPT = "main_ppo_split.py"


def is_trainer_script(name: str) -> bool:
    return name == SPLIT_SCRIPT


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", version.replace("post", "")) if p)


@lru_cache(maxsize=1)
def versions() -> tuple[str, ...]:
    """The dumped verl versions, oldest first."""
    return tuple(sorted((p.stem for p in SCHEMAS.glob("*.json")), key=_version_key))


@lru_cache(maxsize=16)
def _dump(version: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{version}.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=32)
def defaults(version: str, config: str = "ppo_trainer") -> dict[str, Any]:
    """{dotted key: default} of one trainer config at one version (an interpolation as its `${…}` text)."""
    out = {}
    for a in _dump(version)["arguments"]:
        if a["owner"] == config:
            out[a["name"]] = a["default_text"] if a["default_text"] is not None else a["default"]
    return out


def pick_version(pinned: str | None) -> str:
    """The dump that describes a pinned version (frameworks.schemas.pick_version: its own minor's, else the newest
    at or below it); the newest one when nothing is pinned."""
    from vramlens.frameworks import schemas

    return schemas.pick_version(FRAMEWORK, pinned) or versions()[-1]


class Config:
    """The launch's overrides over one version's defaults, with OmegaConf interpolations resolved."""

    def __init__(self, given: dict[str, Setting], version: str, config: str):
        self.given = given
        self.version = version
        self.config = config
        self.label = f"verl {version} ({config}.yaml)"
        self.defaults = defaults(version, config)
        self.unknown: set[str] = set()  # keys set from values only known when the script runs

    def known(self, key: str) -> bool:
        return key in self.given or key in self.defaults

    def get(self, key: str, depth: int = 0) -> Setting | None:
        """The setting in force for `key`: the file's, else a default (a Setting without a span)."""
        s = self.given.get(key)
        if s is not None:
            return s
        if key not in self.defaults:
            return None
        value = self.defaults[key]
        m = _INTERPOLATION.match(value) if isinstance(value, str) else None
        if m and depth < _MAX_INTERPOLATION_DEPTH:
            target = m.group(1).strip()
            if target.startswith("."):  # relative to the key's own section
                target = key.rsplit(".", 1)[0] + target
            found = self.get(target, depth + 1)
            if found is not None:
                return found
            value = _scalar(m.group(2)) if m.group(2) is not None else None
        return Setting(key=key, path=(key,), value=None if value == "???" else value)

    def is_default(self, s: Setting) -> bool:
        return s.span is None and self.given.get(s.key) is not s

    def value(self, key: str) -> Any:
        s = self.get(key)
        return None if s is None else s.value


def _scalar(text: str) -> Any:
    t = text.strip().strip("'\"")
    if t.lower() in ("null", "none", ""):
        return None
    for conv in (to_int, to_float):
        v = conv(t)
        if v is not None:
            return v
    return to_bool(t) if to_bool(t) is not None and t.lower() in ("true", "false") else t


class _Reader:
    def __init__(self, b: PlanBuilder, cfg: Config):
        self.b = b
        self.cfg = cfg

    def put(
        self,
        concept: str,
        value: Any,
        s: Setting | None,
        note: str | None = None,
        *,
        derived: bool = False,
        per_unit: int | None = None,
    ) -> None:
        """Set a concept from a setting of the file, or from verl's default (its key kept, origin DEFAULT);
        `per_unit`: the value is read from the token budget `s` holds, in sequences of that many tokens."""
        budget = to_int(s.value) if per_unit and s is not None else None
        if s is not None and self.cfg.is_default(s):
            origin = Origin.DERIVED if derived else Origin.DEFAULT
            framework = self.cfg.label
            self.b.set(
                concept, value, s, note=note, origin=origin, framework=framework, per_unit=per_unit, budget=budget
            )
        else:
            origin = Origin.DERIVED if derived else Origin.FILE
            self.b.set(concept, value, s, note=note, origin=origin, per_unit=per_unit, budget=budget)

    def int(self, key: str, minimum: int = 0) -> tuple[int | None, Setting | None]:
        s = self.cfg.get(key)
        if s is None or s.value is None:
            return None, s
        v = to_int(s.value)
        if v is None or v < minimum:
            if not self.cfg.is_default(s):
                self.b.issue(
                    IssueKind.INVALID_VALUE,
                    f"`{s.key}` should be a whole number of at least {minimum}, got {shown(s.value)}",
                    s,
                )
            return None, s
        return v, s

    def bool(self, key: str) -> tuple[bool | None, Setting | None]:
        s = self.cfg.get(key)
        if s is None or s.value is None:
            return None, s
        v = to_bool(s.value)
        if v is None and not self.cfg.is_default(s):
            self.b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be true or false, got {shown(s.value)}", s)
        return v, s

    def text(self, key: str) -> tuple[str | None, Setting | None]:
        s = self.cfg.get(key)
        if s is None or s.value is None or isinstance(s.value, (dict, list)):
            return None, s
        return str(s.value).strip(), s


def read(
    b: PlanBuilder,
    given: dict[str, Setting],
    *,
    version: str | None = None,
    config: str | None = None,
    unknown: set[str] | None = None,
) -> None:
    """Fill the plan from verl settings (`given`: dotted key → Setting as written) over verl's defaults; `unknown`:
    the keys the launch sets from values only known when it runs (already reported)."""
    config = config if config in CONFIG_NAMES else "ppo_trainer"
    cfg = Config(given, version or pick_version(None), config)
    cfg.unknown = unknown or set()
    r = _Reader(b, cfg)
    b.plan.framework = FRAMEWORK
    megatron = config == "ppo_megatron_trainer" or cfg.value("actor_rollout_ref.actor.strategy") == "megatron"
    if megatron:
        _megatron_recompute(r, A + "actor.megatron.")
    _model(r, megatron)
    world = _gpus(r)
    _objective(r)
    _batch(r, world, megatron)
    _distribution(r, megatron, world)
    _rollout(r)
    _reference(r, megatron)
    _allocator(r)
    _not_modelled(r, megatron)


# verl from v0.6.0 turns the caching allocator's expandable segments on for the training phases and off only around
# the rollout's weight sync (v0.6.0 and v0.7.0 verl/workers/fsdp_workers.py and megatron_workers.py `rollout_mode`:
# `set_expandable_segments(False)`, `trainer_mode`: `set_expandable_segments(True)`, through
# verl/utils/device.py `torch.cuda.memory._set_allocator_settings`)
EXPANDABLE_FROM = (0, 6, 0)


def _allocator(r: _Reader) -> None:
    """The allocator setting verl's workers apply themselves where the launch sets none (EXPANDABLE_FROM)."""
    if r.b.plan.alloc_conf is None and _version_key(r.cfg.version) >= EXPANDABLE_FROM:
        r.b.set(
            "alloc_conf",
            "expandable_segments:True",
            origin=Origin.DEFAULT,
            framework=f"verl {r.cfg.version}",
            note="verl's workers turn expandable segments on for the update (workers/fsdp_workers.py `trainer_mode`)",
        )


A = "actor_rollout_ref."


def _model(
    r: _Reader, megatron: bool, m: str = A + "model.", fsdp: str = A + "actor.fsdp_config.", source: str = WORKERS
) -> None:
    """The model section (`m`: verl's hf_model config, `actor_rollout_ref.model.` in the PPO trainer) and the FSDP
    dtype keys (`fsdp`: the actor's fsdp_config, the SFT trainer's `engine.`), as `source` builds the model."""
    from vramlens.formats import shell

    b, cfg = r.b, r.cfg
    path, s = r.text(m + "path")
    if path and not cfg.is_default(s):
        b.set("model_id", path, s)
    elif s is not None and not cfg.is_default(s):  # `model.path=$HF_MODEL_PATH` after `HF_MODEL_PATH=""`
        b.issue(
            IssueKind.ASSUMED,
            f"`{m}path` is empty: the script leaves the model to be filled in",
            s,
            severity=Severity.INFO,
        )
    elif path and m + "path" not in cfg.unknown and any(i.message.startswith(shell.COMMENT_CUT) for i in b.plan.issues):
        b.issue(
            IssueKind.ASSUMED,
            f"`{m}path` is not set where the launch command ends (a `#` comment cuts it): the run's model is "
            f"in flags verl never sees, and verl's default `{path}` is not the one meant, so the model is unknown",
            severity=Severity.INFO,
        )
    elif path and m + "path" not in cfg.unknown:
        # verl loads its default folder (verl/trainer/config/ppo_trainer.yaml `actor_rollout_ref.model.path:
        # ~/models/deepseek-llm-7b-chat`), outside the workspace: the model is looked up by the folder's name
        b.set(
            "model_id",
            path,
            note=f"`{m}path` is not set: verl's default `{path}`",
            origin=Origin.DEFAULT,
            framework=cfg.label,
        )
    on, s = r.bool(m + "enable_gradient_checkpointing")
    if on is not None:
        r.put("grad_checkpointing", on, s)
    on, s = r.bool(m + "trust_remote_code")
    if on is not None:
        r.put("trust_remote_code", on, s)
    b.set(
        "ckpt_reentrant",
        False,
        note=f"verl enables checkpointing with use_reentrant=False ({source})",
        origin=Origin.DEFAULT,
        framework=cfg.label,
    )
    on, s = r.bool(m + "enable_activation_offload")
    if on is not None:
        r.put("activation_offload", on, s)
    dtype, s = r.text(fsdp + "model_dtype")
    if dtype is not None and dtype.lower() in DTYPES:
        r.put("weight_dtype", DTYPES[dtype.lower()], s)
    elif not megatron:
        b.set(
            "weight_dtype",
            "fp32",
            note=f"verl loads the trained model in fp32 ({source})",
            origin=Origin.DEFAULT,
            framework=cfg.label,
        )
    param, s = r.text(fsdp + "mixed_precision.param_dtype")
    if param is not None and param.lower() in DTYPES:
        r.put("amp_dtype", DTYPES[param.lower()], s)
    else:
        b.set(
            "amp_dtype",
            "bf16",
            note=f"FSDP mixed precision param_dtype bf16 ({source})",
            origin=Origin.DEFAULT,
            framework=cfg.label,
        )
    if not megatron:
        b.set(
            "fsdp_mixed_precision",
            True,
            note=f"FSDP MixedPrecision(param_dtype, reduce_dtype fp32): each unit's "
            f"parameters gathered in param_dtype, no autocast weight copies ({source})",
            origin=Origin.DEFAULT,
            framework=cfg.label,
        )
    b.set(
        "attn_impl",
        "flash_attention_2",
        note=f"verl loads the model with attn_implementation=flash_attention_2 ({source})",
        origin=Origin.DEFAULT,
        framework=cfg.label,
    )
    b.set(
        "optimizer",
        "torch.optim.AdamW",
        note=f"verl builds torch.optim.AdamW ({source})",
        origin=Origin.DEFAULT,
        framework=cfg.label,
    )
    on, s = r.bool(m + "use_remove_padding")
    if on:
        r.put(
            "packing",
            True,
            s,
            note="padding removed: the micro-batch's sequences run unpadded through "
            "FlashAttention's varlen kernel, as packed sequences do",
        )
    rank, s = r.int(m + "lora_rank")
    if not rank and megatron:
        _megatron_lora(r, m)
        return
    if rank:
        r.put("peft_method", "lora", s, note=f"lora_rank {rank} > 0: PEFT LoRA on the actor")
        r.put("lora_r", rank, s)
        alpha = r.cfg.get(m + "lora_alpha")
        if alpha is not None and to_float(alpha.value) is not None:
            r.put("lora_alpha", to_float(alpha.value), alpha)
        _put_targets(r, r.cfg.get(m + "target_modules"))


# Megatron-Core's LoRA module names and the Hugging Face projections they hold (megatron/core/transformer:
# `linear_qkv` is q/k/v fused, `linear_proj` the attention output, `linear_fc1` the gate and up projections fused,
# `linear_fc2` the down projection)
MCORE_LORA_MODULES = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}


def _megatron_lora(r: _Reader, m: str = A + "model.") -> None:
    """The Megatron workers' LoRA: `actor_rollout_ref.model.lora.rank` > 0 (verl 0.7.0 hf_model.yaml `lora:`
    section, applied through Megatron-Bridge's PEFT by verl/workers/megatron_workers.py; `target_modules` in
    Megatron-Core's module names, default all four of them)."""
    rank, s = r.int(m + "lora.rank")
    if not rank:
        return
    kind, ks = r.text(m + "lora.type")
    if kind and kind.lower() not in ("lora",):
        r.b.unmodelled(ks, f"Megatron-Bridge PEFT `{kind}`", "estimated as LoRA", key=m + "lora.type")
    r.put("peft_method", "lora", s, note=f"lora.rank {rank} > 0: Megatron-Bridge LoRA on the actor")
    r.put("lora_r", rank, s)
    alpha = r.cfg.get(m + "lora.alpha")
    if alpha is not None and to_float(alpha.value) is not None:
        r.put("lora_alpha", to_float(alpha.value), alpha)
    targets = r.cfg.get(m + "lora.target_modules")
    value = targets.value if targets is not None else None
    names = (
        [str(x) for x in value]
        if isinstance(value, list)
        else [p.strip() for p in str(value or "").strip("[]").split(",") if p.strip()]
    )
    names = [n.strip("'\" ") for n in names]
    if names and set(MCORE_LORA_MODULES) <= set(names):
        r.put("lora_targets", ["all-linear"], targets, note="every Megatron-Core linear layer of the blocks")
    elif names:
        hf = [h for n in names for h in MCORE_LORA_MODULES.get(n, (n,))]
        r.put("lora_targets", hf, targets, note="Megatron-Core module names as the Hugging Face projections they hold")


def _gpus(r: _Reader) -> int:
    per_node, s = r.int("trainer.n_gpus_per_node", 1)
    nodes, ns = r.int("trainer.nnodes", 1)
    per_node = per_node or 1
    r.put("gpu_count", per_node, s)
    world = per_node * (nodes or 1)
    if (nodes or 1) > 1:
        r.b.set("world_size", world, ns, origin=Origin.DERIVED, note=f"{per_node} GPUs per node × {nodes} nodes")
    else:
        r.put("world_size", world, s)
    return world


def _objective(r: _Reader) -> None:
    from vramlens.formats.objective import set_objective

    b, cfg = r.b, r.cfg
    adv, s = r.text("algorithm.adv_estimator")
    adv = (adv or "gae").lower()
    obj = ADV_OBJECTIVE.get(adv, "grpo")
    note = None if adv in ADV_OBJECTIVE else f"adv_estimator `{adv}`: group-relative advantages, no critic"
    set_objective(b, obj, s, note=note, origin=Origin.DEFAULT if s is None or cfg.is_default(s) else Origin.FILE)
    enable, es = r.bool("critic.enable")
    if enable is not None and es is not None and not cfg.is_default(es):
        # `critic.enable` decides where it is set (verl 2026 HEAD verl/trainer/ppo/utils.py `need_critic`: "if
        # config.critic.enable is not None: return bool(config.critic.enable)")
        r.put("value_model", bool(enable), es)
    else:
        r.put(
            "value_model",
            obj == "ppo",
            s,
            derived=True,
            note="GAE trains a critic (value model)" if obj == "ppo" else "no critic without GAE",
        )
    if obj == "ppo" and enable is not False:
        critic, cs = r.text("critic.model.path")
        actor = cfg.value(A + "model.path")
        if critic and not cfg.is_default(cs) and critic != actor:
            b.set("critic_model_id", critic, cs)
    kl_loss, ks = r.bool(A + "actor.use_kl_loss")
    kl_reward, rs = r.bool("algorithm.use_kl_in_reward")
    if kl_reward is None:  # before `use_kl_in_reward`, the KL penalty was always in reward
        kl_reward, rs = (obj == "ppo"), None
    needs_ref = bool(kl_loss) or bool(kl_reward)
    why = ks if kl_loss else rs if kl_reward else (ks or rs)
    r.put(
        "reference_free",
        not needs_ref,
        why,
        derived=True,
        note="a KL term (use_kl_loss or use_kl_in_reward) needs the reference policy"
        if needs_ref
        else "no KL term (use_kl_loss and use_kl_in_reward off): no reference policy",
    )
    rm, ms = r.bool("reward_model.enable")
    if rm:
        path, ps = r.text("reward_model.model.path")
        if path:
            r.put("reward_model_id", path, ps)
        loop, ls = r.bool("reward_model.use_reward_loop")
        if loop and ls is not None and not cfg.is_default(ls):
            # verl main verl/trainer/ppo/ray_trainer.py: with `use_reward_loop` no reward-model worker is built; the
            # reward loop serves the model with its own engine (`reward_model.rollout`), on the actor's GPUs unless
            # `reward_model.enable_resource_pool` gives it GPUs of its own
            b.unmodelled(
                ls,
                "the reward model served by the reward loop's own inference engine (`reward_model.rollout`)",
                "counted as frozen weights beside the actor",
                key="reward_model.use_reward_loop",
            )
    prompt, s = r.int("data.max_prompt_length", 1)
    if prompt:
        r.put("prompt_len", prompt, s)
    response, s = r.int("data.max_response_length", 1)
    if response:
        r.put("completion_len", response, s)


def _log_prob_batch(r: _Reader, dp: int, seq: int) -> None:
    """The sequences of one no-grad log-prob forward: the actor's recomputation of the old policy's log-probs
    (`rollout.log_prob_*`) and the reference's (`ref.log_prob_*`, when a KL term needs it), each in micro-batches of
    its own (verl b178a3cd5 verl/workers/fsdp_workers.py `compute_log_prob` / `compute_ref_log_prob`:
    `log_prob_micro_batch_size_per_gpu`, the deprecated global `log_prob_micro_batch_size` ÷ the data-parallel
    ranks, or with `log_prob_use_dynamic_bsz` micro-batches filled up to `log_prob_max_token_len_per_gpu` tokens).
    The larger of the two sizes the estimate's log-prob phase; the other is read alongside it. `dp` and `seq`: the
    data-parallel ranks and the max prompt + response, as `_batch` reads them."""
    b = r.b
    reference = b.plan.reference_free is None or not b.plan.reference_free.value
    found: list[tuple[int, Setting, str | None]] = []
    for role in ("rollout", "ref") if reference else ("rollout",):
        key = A + role + "."
        dynamic, _ = r.bool(key + "log_prob_use_dynamic_bsz")
        if dynamic:
            tokens, ts = r.int(key + "log_prob_max_token_len_per_gpu", 1)
            if tokens and seq and ts is not None:
                n = max(1, tokens // seq)
                note = (
                    f"{role}.log_prob_use_dynamic_bsz: micro-batches filled up to {tokens:,} tokens, {n} sequence(s) "
                    f"of {seq:,} (max prompt + response)"
                )
                found.append((n, ts, note, seq))
            continue
        per_gpu, ps = r.int(key + "log_prob_micro_batch_size_per_gpu", 1)
        if per_gpu and ps is not None:
            found.append((per_gpu, ps, None, None))
            continue
        total, ts = r.int(key + "log_prob_micro_batch_size", 1)
        if total and ts is not None:
            n = max(1, total // dp)
            found.append((n, ts, f"{role}.log_prob_micro_batch_size {total} ÷ {dp} data-parallel ranks", None))
    if not found:
        return
    n, s, note, per_unit = max(found, key=lambda f: f[0])
    r.put("logprob_micro_batch", n, s, note=note, derived=note is not None, per_unit=per_unit)
    b.plan.read_alongside.extend(other.key for _, other, _, _ in found if other is not s and other.key)


def _ulysses(b: PlanBuilder, sp: int, s: Setting | None) -> None:
    """Ulysses sequence parallelism (DeepSpeed-Ulysses, arXiv:2309.14509) as verl runs it: each of `sp` GPUs holds
    1/sp of every sequence's tokens (verl b178a3cd5 verl/workers/actor/dp_actor.py: `ulysses_pad_and_slice_inputs`
    before the model, the logits of the local slice, `gather_outputs_and_unpad` on the per-token log-probs only),
    and attention trades it with an all-to-all for every token of 1/sp of the heads
    (verl/models/transformers/monkey_patch.py `_ulysses_flash_attention_forward`): the saved tensors of a layer are
    those of seq_len/sp tokens, as under context parallelism. FSDP still shards over every GPU, and the data-parallel
    ranks are world ÷ sp. Not counted: the K/V heads repeated up to sp when there are fewer (`repeat_kv`), and the
    all-to-all's send and receive buffers."""
    b.set(
        "context_parallel",
        sp,
        s,
        note=f"Ulysses sequence parallelism: each GPU holds 1/{sp} of every sequence's tokens (all-to-all attention "
        "over 1/sp of the heads); K/V heads repeated up to sp and the all-to-all buffers not counted",
    )


def _actor_sp(r: _Reader) -> tuple[int, Setting | None]:
    """The actor's Ulysses size and the setting it comes from. From 0.6 verl also has
    `actor.fsdp_config.ulysses_sequence_parallel_size` (verl/trainer/config/engine/fsdp.yaml; dp_actor.yaml calls the
    actor's own key deprecated for it), but only the new engine worker reads it: `trainer.use_legacy_worker_impl`
    auto (the default) or enable runs verl/workers/fsdp_workers.py, which splits by the actor's own key alone
    (`self.config.actor.get("ulysses_sequence_parallel_size", 1)`), and `ActorConfig.__post_init__` copies that one
    into fsdp_config, never back (verl main 2026-07 verl/trainer/main_ppo.py, verl/workers/config/actor.py)."""
    sp, s = r.int(A + "actor.ulysses_sequence_parallel_size", 1)
    engine, es = r.int(A + "actor.fsdp_config.ulysses_sequence_parallel_size", 1)
    if not engine or engine <= 1 or es is None or r.cfg.is_default(es) or (sp or 1) > 1:
        return sp or 1, s
    if str(r.cfg.value("trainer.use_legacy_worker_impl") or "auto").strip().lower() == "disable":
        return engine, es
    r.b.issue(
        IssueKind.NOT_READ,
        f"`{es.key}` is read only by verl's new engine worker (`trainer.use_legacy_worker_impl=disable`); the "
        "default legacy FSDP worker splits sequences by `actor_rollout_ref.actor.ulysses_sequence_parallel_size`, so "
        "this run has no sequence parallelism",
        es,
        severity=Severity.INFO,
    )
    return sp or 1, s


def _batch(r: _Reader, world: int, megatron: bool) -> None:
    b, cfg = r.b, r.cfg
    sp, sp_setting = _actor_sp(r)
    dp = max(1, world // sp)
    n = to_int(cfg.value(A + "rollout.n")) or 1
    seq = (to_int(cfg.value("data.max_prompt_length")) or 0) + (to_int(cfg.value("data.max_response_length")) or 0)
    dynamic, ds = r.bool(A + "actor.use_dynamic_bsz")
    micro: int | None = None
    if dynamic:
        tokens, ts = r.int(A + "actor.ppo_max_token_len_per_gpu", 1)
        if tokens and seq:
            micro = max(1, tokens // seq)
            r.put(
                "micro_batch",
                micro,
                ts,
                derived=True,
                per_unit=seq,
                note=f"use_dynamic_bsz: micro-batches filled up to ppo_max_token_len_per_gpu={tokens:,} tokens, "
                f"{micro} sequence(s) of {seq:,} (max prompt + response)",
            )
    if micro is None:
        per_gpu, s = r.int(A + "actor.ppo_micro_batch_size_per_gpu", 1)
        if per_gpu:
            micro = per_gpu
            r.put("micro_batch", micro, s)
        else:
            total, s = r.int(A + "actor.ppo_micro_batch_size", 1)
            if total:
                micro = max(1, total // dp)
                b.set(
                    "micro_batch",
                    micro,
                    s,
                    origin=Origin.DERIVED,
                    note=f"ppo_micro_batch_size {total} ÷ {dp} data-parallel ranks ({WORKERS})",
                )
    if micro is None:
        micro = 1
        b.set("micro_batch", 1, origin=Origin.ASSUMED, note="assumed 1")
        b.issue(
            IssueKind.ASSUMED,
            f"verl needs `{A}actor.ppo_micro_batch_size_per_gpu` (or use_dynamic_bsz): "
            "none is set, so a micro-batch of 1 sequence is assumed",
            severity=Severity.INFO,
        )
    mini, ms = r.int(A + "actor.ppo_mini_batch_size", 1)
    if mini and not dynamic:
        per_rank = mini * n // dp
        b.set(
            "grad_accum",
            max(1, per_rank // micro),
            ms,
            origin=Origin.DERIVED,
            note=f"ppo_mini_batch_size {mini} × rollout.n {n} ÷ {dp} ranks = {per_rank} sequences per update "
            f"on each GPU, in micro-batches of {micro}",
        )
    _critic_batch(r, dp, seq, megatron)
    if sp > 1 and not megatron:  # Megatron workers split sequences with their own context parallelism
        _ulysses(b, sp, sp_setting)
    _log_prob_batch(r, dp, seq)


_MEGATRON_LAYOUT_NAMES = (
    ("tensor_model_parallel_size", "TP"),
    ("pipeline_model_parallel_size", "PP"),
    ("context_parallel_size", "CP"),
    ("expert_model_parallel_size", "EP"),
)


def _megatron_critic(r: _Reader) -> None:
    """The Megatron workers' critic builds its own Megatron-Core model by `critic.megatron.*` (verl main
    verl/workers/megatron_workers.py `CriticWorker`; ppo_megatron_trainer.yaml gives it a layout of its own, TP 1,
    PP 1 by default, not the actor's), resident beside the actor unless offloaded (components.megatron
    `megatron_value_model`): a layout other than the actor's is kept for it, its offload between its updates named."""
    from vramlens.knowledge.frameworks import VERL_CRITIC_LAYOUT

    own, actor = [], []
    said = None
    for key, _ in _MEGATRON_LAYOUT_NAMES + (("expert_tensor_parallel_size", "expert TP"),):
        s = r.cfg.get("critic.megatron." + key)
        mine = to_int(s.value) if s is not None else None
        theirs = to_int(r.cfg.value(A + "actor.megatron." + key))
        own.append(mine or 0)
        actor.append(theirs or 0)
        if (mine or 0) != (theirs or 0) and said is None:
            said = s
    if said is not None:
        layout = ", ".join(f"{short} {n or 1}" for (_, short), n in zip(_MEGATRON_LAYOUT_NAMES, own))
        default = r.cfg.is_default(said)
        r.b.plan.extra[VERL_CRITIC_LAYOUT] = Sourced(
            value=tuple(own),
            origin=Origin.DEFAULT if default else Origin.FILE,
            framework=r.cfg.label if default else None,
            key=said.key,
            span=said.span,
            note=f"the critic's own Megatron layout: {layout}",
        )
    for key in ("param_offload", "grad_offload", "optimizer_offload"):
        on, s = r.bool("critic.megatron." + key)
        if on and s is not None:
            r.b.unmodelled(
                s,
                f"the critic's {key.split('_')[0]} offloaded to the CPU between its updates",
                "the critic counted resident on the GPU",
                key="critic.megatron." + key,
            )


def _critic_batch(r: _Reader, dp: int, seq: int, megatron: bool = False) -> None:
    """The critic trains in `update_critic`, before the actor's update and apart from it (verl v0.4.1/v0.7.0
    verl/trainer/ppo/ray_trainer.py `fit`; workers/critic/dp_critic.py `update_critic`), in micro-batches of its own:
    `critic.ppo_micro_batch_size_per_gpu`, the global `critic.ppo_micro_batch_size` ÷ DP, or with `use_dynamic_bsz`
    (default: the actor's) up to `critic.ppo_max_token_len_per_gpu` tokens (default 32768)."""
    b = r.b
    if b.plan.value_model is None or not b.plan.value_model.value:
        return
    # the critic's own checkpointing: the FSDP workers' CriticWorker `_build_critic_model_optimizer`
    # (`critic_module.gradient_checkpointing_enable()` under `config.model.enable_gradient_checkpointing`); the
    # Megatron workers' `critic.megatron.override_transformer_config.recompute_granularity` (`_megatron_recompute`)
    if megatron:
        gs = r.cfg.get("critic.megatron.override_transformer_config.recompute_granularity")
        gc = gs is not None and gs.value is not None
        if gs is not None:
            r.put("critic_grad_checkpointing", gc, gs)
    else:
        gc, gs = r.bool("critic.model.enable_gradient_checkpointing")
        if gs is not None and gc is not None:
            r.put("critic_grad_checkpointing", gc, gs)  # as written, else verl's default (on)
    if megatron:
        _megatron_critic(r)
    apart = [("critic.ulysses_sequence_parallel_size", A + "actor.ulysses_sequence_parallel_size", "Ulysses split")]
    for key, actor_key, what in apart:
        s, theirs = r.cfg.get(key), r.cfg.value(actor_key)
        if s is not None and not r.cfg.is_default(s) and str(s.value).lower() != str(theirs).lower():
            b.unmodelled(
                s,
                f"the critic's {what} set apart from the actor's",
                "the critic's activations estimated with the actor's",
                key=key,
            )
    dynamic, _ = r.bool("critic.use_dynamic_bsz")
    if dynamic:
        tokens, ts = r.int("critic.ppo_max_token_len_per_gpu", 1)
        if tokens and seq:
            note = f"critic use_dynamic_bsz: up to {tokens:,} tokens, {max(1, tokens // seq)} sequence(s) of {seq:,}"
            r.put("critic_micro_batch", max(1, tokens // seq), ts, note=note, derived=True, per_unit=seq)
        return
    per_gpu, s = r.int("critic.ppo_micro_batch_size_per_gpu", 1)
    if per_gpu:
        r.put("critic_micro_batch", per_gpu, s)
        return
    total, s = r.int("critic.ppo_micro_batch_size", 1)
    if total:
        note = f"critic.ppo_micro_batch_size {total} ÷ {dp} data-parallel ranks"
        r.put("critic_micro_batch", max(1, total // dp), s, note=note, derived=True)


def _distribution(
    r: _Reader, megatron: bool, world: int, section: str | None = None, strategy_key: str = A + "actor.strategy"
) -> None:
    """The actor's parallelism and offload: `section` holds the engine's keys (the PPO actor's `megatron.` or
    `fsdp_config.`, the SFT trainer's `engine.`)."""
    b = r.b
    strategy, s = r.text(strategy_key)
    if megatron:
        r.put("dist_strategy", "megatron", s)
        for key, concept in (
            ("tensor_model_parallel_size", "tensor_parallel"),
            ("pipeline_model_parallel_size", "pipeline_parallel"),
            ("context_parallel_size", "context_parallel"),
        ):
            v, ps = r.int((section or A + "actor.megatron.") + key, 1)
            if v:
                r.put(concept, v, ps)
        section = section or A + "actor.megatron."
        for key, concept, kind in MEGATRON_LAYOUT:
            v, ks = r.int(section + key, 1) if kind == "int" else r.bool(section + key)
            if v is not None:
                r.put(concept, v, ks)
        _megatron_dispatcher(r, section)
        _megatron_transformer_overrides(r, section)
    else:
        fsdp2 = (strategy or "").lower() == "fsdp2"
        _other_actor_engine(r, strategy, s, section)
        section = section or A + "actor.fsdp_config."
        r.put("dist_strategy", "fsdp", s)
        reshard, rs = r.bool(section + "reshard_after_forward")
        # `reshard_after_forward` reaches FSDP2's fully_shard from v0.4.0 (verl/workers/fsdp_workers.py and
        # engine/fsdp/transformer_impl.py `fsdp_kwargs`); the PPO workers' FSDP1 turns false into SHARD_GRAD_OP from
        # v0.7.0 (fsdp_workers.py `fsdp_enable_zero3` → fsdp_utils.py `get_sharding_strategy`, #4659), the engine's
        # FSDP1 stays FULL_SHARD
        if reshard is False and (fsdp2 or (section != "engine." and _version_key(r.cfg.version) >= (0, 7, 0))):
            r.put(
                "zero_stage",
                2,
                rs,
                note="reshard_after_forward false: each FSDP unit keeps its parameters gathered from its forward to "
                "its backward (SHARD_GRAD_OP-like)",
            )
        else:
            if reshard is False and rs is not None:
                b.remember(rs)  # FSDP1 where verl does not pass it on: FULL_SHARD either way
            r.put("zero_stage", 3, s, derived=True, note="FSDP FULL_SHARD over every GPU of the run")
        r.put("fsdp_version", 2 if fsdp2 else 1, s, derived=True)
        # -1, or a size of the whole run or more: one FSDP group of every GPU (verl main verl/workers/fsdp_workers.py
        # and verl/workers/engine/fsdp/utils.py `create_device_mesh`: `if fsdp_size < 0 or fsdp_size >= world_size`)
        size, fs = r.int(section + "fsdp_size", -1)
        if size and 0 < size < world:
            # `init_device_mesh(("ddp", "fsdp"), (world // fsdp_size, fsdp_size))`: HYBRID_SHARD, FSDP groups of
            # fsdp_size GPUs replicated across the rest
            if world % size:
                b.unmodelled(
                    fs,
                    f"hybrid sharding (FSDP groups of {size} GPUs, which do not divide the {world})",
                    "sharded over every GPU of the run",
                    key=section + "fsdp_size",
                )
            else:
                b.set(
                    "dp_replicas", world // size, fs, note=f"HSDP: FSDP groups of {size} GPUs, {world // size} replicas"
                )
    # `param_offload` / `optimizer_offload` move the actor's weights, gradients and optimizer state to the CPU between
    # its updates, and back before each one: the actor is never wrapped in FSDP's CPUOffload ("We force turn off
    # CPUOffload for actor because it causes incorrect results when using grad accumulation"). v0.4.1
    # verl/workers/fsdp_workers.py `update_actor` (load_fsdp_model_to_gpu / load_fsdp_optimizer before
    # `update_policy`, offload after), `compute_log_prob` (the weights loaded, the optimizer left on the CPU);
    # v0.7.0 verl/workers/engine/base.py `BaseEngineCtx._context_switch` (train mode: model, optimizer and
    # gradients to the GPU; eval mode: the model only); the Megatron workers alike (megatron_workers.py
    # `load_megatron_model_to_gpu`, `load_megatron_optimizer`)
    on, s = r.bool(section + "param_offload")
    if on is not None:
        note = "on the GPU for each update; on the CPU between updates" if on else None
        r.put("offload_params_idle", on, s, note=note)
    on, s = r.bool(section + "optimizer_offload")
    if on is not None:
        note = "on the GPU for each update; on the CPU while the policy generates and scores log-probs" if on else None
        r.put("offload_optimizer_idle", on, s, note=note)
    if not megatron and (strategy or "").lower() == "fsdp2":
        # FSDP2's CPUOffloadPolicy for the actor: parameters and gradients live in host memory and AdamW steps
        # there (verl v0.5.0 to main verl/workers/fsdp_workers.py `_build_model_optimizer`: `if role == "actor"
        # and fsdp_config.offload_policy: cpu_offload = CPUOffloadPolicy(pin_memory=True)`)
        on, s = r.bool(section + "offload_policy")
        if on and not r.cfg.is_default(s):
            note = "offload_policy: FSDP2 CPUOffloadPolicy keeps the actor's shards and AdamW's states on the CPU"
            r.put("offload_params", True, s, note=note)
            r.put("offload_optimizer", True, s, note=note)
    if megatron:
        # verl's Megatron workers move the gradient buffers and the reference's weights to the CPU between uses
        # (verl main verl/workers/megatron_workers.py `_is_offload_grad`, `_ref_is_offload_param`)
        _megatron_optimizer(r, A + "actor.optim." if section.startswith(A) else "optim.")
        _megatron_precision(r, section)
        key = section + "grad_offload"
        on, s = r.bool(key)
        if on and not r.cfg.is_default(s) and not (b.plan.offload_params_idle and b.plan.offload_params_idle.value):
            b.unmodelled(
                s,
                "the actor's gradient buffers offloaded to the CPU between updates",
                "on the GPU for the update, as estimated; the rollout phase counted with them on the GPU too",
                key=key,
            )
        if section.startswith(A):
            # the reference's weights come to the GPU for its log-prob pass only (megatron_workers.py
            # `compute_ref_log_prob`: load_megatron_model_to_gpu before, offload_megatron_model_to_cpu after)
            on, s = r.bool(A + "ref.megatron.param_offload")
            if on is not None and not r.cfg.is_default(s):
                note = "on the GPU only for its log-prob pass" if on else None
                r.put("ref_offload", on, s, note=note)


def _megatron_precision(r: _Reader, section: str) -> None:
    """A Megatron model's weights in `<section>dtype` (default bfloat16): the PPO actor's `actor.megatron.dtype` (up to
    v0.6.0 built in bf16 whatever the key: megatron_workers.py `self.param_dtype = torch.bfloat16`; from v0.6.1
    `PrecisionType.to_dtype(self.config.actor.megatron.dtype)`) and the SFT engine's `engine.dtype` (from v0.6.1,
    workers/engine/megatron/transformer_impl.py `param_dtype`); fp32 master weights and Adam's states in
    megatron-core's optimizer, sharded over the data-parallel ranks with `use_distributed_optimizer` (default true)."""
    dtype, s = r.text(section + "dtype")
    if dtype is not None and dtype.lower() in DTYPES and _version_key(r.cfg.version) >= _version_key("0.6.1"):
        r.put("weight_dtype", DTYPES[dtype.lower()], s, note="the Megatron model's parameter dtype")
    else:
        r.b.set(
            "weight_dtype",
            "bf16",
            note="verl's Megatron workers build the actor in bf16, fp32 master weights in the optimizer",
            origin=Origin.DEFAULT,
            framework=r.cfg.label,
        )
    on, s = r.bool(section + "use_distributed_optimizer")
    if on is not None:
        r.put("distributed_optimizer", on, s)


# Megatron's OptimizerConfig fields an `override_optimizer_config` entry sets that vramlens reads here, and those it
# reads as Megatron-LM's flags of the same names (formats/megatron.py HANDLERS, or IRRELEVANT: e.g.
# `overlap_cpu_optimizer_d2h_h2d` only moves the hybrid optimizer's copies onto side streams); the others are named as
# not modelled
_MEGATRON_OPTIMIZER_READ = ("optimizer_cpu_offload", "optimizer_offload_fraction")
_MEGATRON_OPTIMIZER_FLAGS = ("use_precision_aware_optimizer", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


def _megatron_optimizer(r: _Reader, optim: str) -> None:
    """`optim.override_optimizer_config.<field>` of a Megatron actor: each entry overrides a field of megatron-core's
    `OptimizerConfig` (verl main verl/utils/megatron/optimizer.py `init_megatron_optim_config`: `for k, v in
    override_config.items(): optim_args[k] = v`). `optimizer_cpu_offload` builds Megatron's hybrid CPU optimizer,
    which keeps `optimizer_offload_fraction` (default 1.0) of Adam's states and fp32 main weights on the CPU through
    the update (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py)."""
    from vramlens.formats.megatron import HANDLERS
    from vramlens.formats.megatron import IRRELEVANT as MEGATRON_IRRELEVANT

    b, prefix = r.b, optim + "override_optimizer_config."
    cpu, cs = r.bool(prefix + "optimizer_cpu_offload")
    if cpu:
        r.put("offload_optimizer", True, cs, note="Megatron's hybrid optimizer: Adam steps on the CPU")
        fs = r.cfg.get(prefix + "optimizer_offload_fraction")
        v = to_float(fs.value) if fs is not None else None
        if v is not None and 0 <= v <= 1:
            r.put("optimizer_offload_fraction", v, fs, note=f"{v:g} of the optimizer on the CPU")
        elif fs is not None and not r.cfg.is_default(fs):
            b.issue(
                IssueKind.INVALID_VALUE,
                f"`{fs.key}` should be a fraction between 0 and 1, got {shown(fs.value)}",
                fs,
            )
    for key, s in r.cfg.given.items():
        field = key[len(prefix) :] if key.startswith(prefix) else None
        if not field or field in _MEGATRON_OPTIMIZER_READ or field in MEGATRON_IRRELEVANT or s.value in (None, ""):
            continue  # a field Megatron-LM's own flag of the same name changes nothing estimated for
        if field in _MEGATRON_OPTIMIZER_FLAGS:
            HANDLERS[field](b, s)
        else:
            b.unmodelled(s, f"Megatron optimizer setting `{field}={shown(s.value)}`", "estimated without it", key=key)


def _rollout(r: _Reader) -> None:
    b, cfg = r.b, r.cfg
    name, s = r.text(A + "rollout.name")
    if name is None:
        b.issue(
            IssueKind.ASSUMED, f"`{A}rollout.name` is not set (verl requires it): vLLM assumed", severity=Severity.INFO
        )
        name = "vllm"
    name = name.lower()
    if name == "sglang_async":
        # v0.4's deprecated spelling of the SGLang rollout (v0.4.1 verl/workers/fsdp_workers.py `_build_rollout`:
        # `elif rollout_name in ["sglang", "sglang_async"]`, "'sglang_async' has been deprecated and merged into
        # 'sglang'")
        name = "sglang"
    if name in ("vllm", "sglang"):
        engine = "vLLM" if name == "vllm" else "SGLang (mem_fraction_static)"
        r.put(
            "generation",
            "vllm-colocate",
            s,
            note=f"{engine} in the actor's process (verl's hybrid engine), holding its share of each GPU",
        )
        share = r.cfg.get(A + "rollout.gpu_memory_utilization")
        v = to_float(share.value) if share is not None else None
        if v is not None and 0 < v <= 1:
            r.put("vllm_memory_share", v, share)
        elif share is not None and not cfg.is_default(share):
            b.issue(
                IssueKind.INVALID_VALUE,
                f"`{share.key}` should be a fraction of the GPU between 0 and 1, got {shown(share.value)}",
                share,
            )
        _release(r)
    elif name == "trtllm":
        # verl's TensorRT-LLM rollout runs colocated with the actor and sleeps like vLLM (`enable_sleep`, `release`
        # when free_cache_engine); its KV cache takes `free_gpu_memory_fraction=gpu_memory_utilization` of the
        # memory free when it starts (verl main verl/workers/rollout/trtllm_rollout/trtllm_async_server.py
        # `launch_server`, `sleep`)
        r.put("generation", "vllm-colocate", s, note="TensorRT-LLM colocated with the actor, holding its share")
        share = r.cfg.get(A + "rollout.gpu_memory_utilization")
        v = to_float(share.value) if share is not None else None
        if v is not None and 0 < v <= 1:
            r.put("vllm_memory_share", v, share)
            b.unmodelled(
                share,
                "TensorRT-LLM's KV cache as a fraction of the memory free when it starts (free_gpu_memory_fraction)",
                "estimated as that share of the whole GPU, as vLLM's gpu_memory_utilization",
                key=A + "rollout.gpu_memory_utilization",
            )
        _release(r)
    elif name in ("hf", "naive"):
        r.put("generation", "generate", s, note="transformers generate() in the actor's process")
    else:
        b.unmodelled(s, f"rollout engine `{name}`", "estimated without its memory", key=A + "rollout.name")
    n, ns = r.int(A + "rollout.n", 1)
    if n:
        r.put("num_generations", n, ns)


def _release(r: _Reader) -> None:
    """Whether the rollout engine gives its memory back while the actor trains.

    From v0.5.0 `rollout.free_cache_engine` (default true) decides: vLLM is built with
    `enable_sleep_mode=config.free_cache_engine` and put to sleep after each rollout (v0.5.0 verl/workers/rollout/
    vllm_rollout/vllm_rollout_spmd.py; v0.7.0 vllm_rollout.py `release`: `sleep(level=VLLM_SLEEP_LEVEL)`, level 2
    from vLLM 0.8.5, verl/third_party/vllm/__init__.py; SGLang `release_memory_occupation`, sglang_rollout.py).
    v0.3 and v0.4 release it after every rollout whatever the key says: `LLM(enable_sleep_mode=True)` and
    `sleep(level=1)` when the hybrid engine leaves generation (v0.4.1 verl/workers/sharding_manager/fsdp_vllm.py
    `__exit__`, fsdp_sglang.py `release_memory_occupation`). v0.2 (vLLM up to 0.6.3) offloads the weights and
    frees the KV cache only with free_cache_engine (v0.2.0.post2 vllm_rollout.py `free_cache_engine`)."""
    b, cfg = r.b, r.cfg
    eager, es = r.bool(A + "rollout.enforce_eager")
    if eager is not None:
        # vLLM captures CUDA graphs unless `enforce_eager` (verl's default True up to v0.5.0, False from v0.6.1:
        # verl/trainer/config/rollout/rollout.yaml "Whether to disable CUDA graph")
        r.put("generation_eager", bool(eager), es)
    free, fs = r.bool(A + "rollout.free_cache_engine")
    version = _version_key(cfg.version)
    always = _version_key("0.3") <= version < _version_key("0.5")
    if always:
        b.set(
            "generation_sleeps",
            True,
            origin=Origin.DEFAULT,
            framework=cfg.label,
            note=f"verl {cfg.version} puts the rollout engine to sleep after every rollout (sleep level 1: weights "
            "to CPU memory, KV cache freed), whatever free_cache_engine says",
        )
    elif free is not None:
        level = (
            "weights and KV cache released" if version >= _version_key("0.5") else "weights offloaded, KV cache freed"
        )
        r.put(
            "generation_sleeps",
            bool(free),
            fs,
            note=f"free_cache_engine: the rollout engine's {level} while the actor trains"
            if free
            else "free_cache_engine false: the rollout engine keeps its share through the step",
        )


def _reference(r: _Reader, megatron: bool) -> None:
    """verl's FSDP workers build the reference policy in bf16 (`torch.float32 if self._is_actor else
    torch.bfloat16`, or `ref.fsdp_config.model_dtype`) and always wrap it with CPU offload ("We force reference
    policy to use CPUOffload to save memory": `CPUOffload(offload_params=True)`, FSDP2 `CPUOffloadPolicy`), in
    v0.2.0.post2, v0.4.1 and v0.7.0 verl/workers/fsdp_workers.py `_build_model_optimizer`."""
    b = r.b
    if megatron or b.plan.reference_free is None or b.plan.reference_free.value or b.plan.peft_method is not None:
        return
    dtype, s = r.text(A + "ref.fsdp_config.model_dtype")
    if dtype is not None and dtype.lower() in DTYPES:
        r.put(
            "ref_dtype",
            DTYPES[dtype.lower()],
            s,
            note="ref.fsdp_config.model_dtype (verl's FSDPEngineConfig sets it to fp32 from 0.6)"
            if r.cfg.is_default(s)
            else None,
        )
    else:
        b.set(
            "ref_dtype",
            "bf16",
            note=f"verl loads the reference policy in bf16 ({WORKERS})",
            origin=Origin.DEFAULT,
            framework=r.cfg.label,
        )
    b.set(
        "ref_offload",
        True,
        note=f"verl wraps the reference policy with FSDP CPU offload: its weights stay in host "
        f"memory and one unit at a time is gathered for its forward ({WORKERS})",
        origin=Origin.DEFAULT,
        framework=r.cfg.label,
    )


def _not_modelled(r: _Reader, megatron: bool) -> None:
    b = r.b
    on, s = r.bool(A + "model.use_fused_kernels")
    backend, _ = r.text(A + "model.fused_kernel_options.impl_backend")
    if on and (megatron or (backend or "torch") != "torch"):
        # verl's Triton `linear_cross_entropy`: the Megatron workers' fused forward (v0.5.0 and later
        # verl/models/mcore/model_forward_fused.py `_fused_GPTModel_forward`), and the FSDP workers' with
        # `impl_backend: triton` (verl/models/transformers/dense_common.py)
        b.set(
            "loss_impl",
            "fused",
            s,
            note="verl's fused kernels: the log-probs and entropy by splits of the vocabulary (Triton "
            "linear_cross_entropy), never the whole logits",
        )
    elif on:
        # the FSDP workers patch the model's forward to return the log-probs and entropy from the backbone output
        # through FusedLinearForPPO, the default `impl_backend: torch` (verl/models/transformers/dense_common.py,
        # verl/trainer/config/model/hf_model.yaml)
        b.set(
            "loss_impl",
            "fused",
            s,
            note="verl's fused kernels: the log-probs and entropy 512 tokens at a time (FusedLinearForPPO), never "
            "the whole logits",
        )
    for key, what in (
        ("model.use_liger", "Liger kernels"),
        ("actor.entropy_from_logits_with_chunking", "entropy computed from the logits in chunks"),
        ("actor.entropy_checkpointing", "entropy recomputed in the backward"),
    ):
        on, s = r.bool(A + key)
        if on:
            b.unmodelled(s, what, "estimated without them", key=A + key)
    if b.plan.value_model is not None and b.plan.value_model.value:
        for key in ("critic.model.fsdp_config.param_offload", "critic.model.fsdp_config.optimizer_offload"):
            on, s = r.bool(key)
            actor = b.plan.offload_params_idle if key.endswith("param_offload") else b.plan.offload_optimizer_idle
            if on is not None and actor is not None and on != actor.value:
                b.unmodelled(
                    s,
                    f"the critic's {key.rsplit('.', 1)[-1]} set apart from the actor's",
                    "the critic estimated with the actor's offload settings",
                    key=key,
                )


# --- the SFT trainer ------------------------------------------------------------------------------------------

# verl/trainer/config/sft_trainer.yaml, the keys that change memory; the same from v0.2.0.post2 to main (2026-01)
# except where SFT_DEFAULTS_BEFORE_0_4 says (v0.4.1 turned gradient checkpointing on and moved to FSDP2)
SFT_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 256,
    "data.micro_batch_size_per_gpu": 4,
    "data.max_length": 1024,
    "model.partial_pretrain": "~/models/gemma-1.1-7b-it",
    "model.fsdp_config.model_dtype": "fp32",
    "model.fsdp_config.cpu_offload": False,
    "model.fsdp_config.offload_params": False,
    "model.enable_gradient_checkpointing": True,
    "model.lora_rank": 0,
    "model.lora_alpha": 16,
    "model.target_modules": "all-linear",
    "model.use_liger": False,
    "model.strategy": "fsdp2",
    "ulysses_sequence_parallel_size": 1,
    "use_remove_padding": False,
}
SFT_DEFAULTS_BEFORE_0_4: dict[str, Any] = {"model.enable_gradient_checkpointing": False, "model.strategy": "fsdp"}
SFT_TRAINER = "verl/trainer/fsdp_sft_trainer.py"


def read_sft(
    b: PlanBuilder, given: dict[str, Setting], *, version: str | None = None, gpus=None, unknown: set[str] = frozenset()
) -> None:
    """`verl.trainer.fsdp_sft_trainer` (verl/trainer/fsdp_sft_trainer.py, v0.3.0.post1 and v0.5.0): the model
    `model.partial_pretrain` loaded in `fsdp_config.model_dtype` (fp32; fp32 always before 0.4) with
    FlashAttention-2, optional PEFT LoRA (`lora_rank` > 0, `lora_alpha`, `target_modules`), non-reentrant
    checkpointing, FSDP FULL_SHARD over every rank with MixedPrecision(param_dtype=bf16, reduce fp32),
    `CPUOffload(offload_params=offload_params)` when `cpu_offload`, `optim.AdamW`. Each rank runs micro-batches
    of `data.micro_batch_size_per_gpu` samples padded to `data.max_length` (SFTDataset), `train_batch_size ÷ dp`
    samples a step; `data.micro_batch_size` is declared but never read."""
    version = version or pick_version(None)
    cfg = Config(given, version, "sft_trainer")
    old = _version_key(version) < _version_key("0.4")
    cfg.defaults = {**SFT_DEFAULTS, **(SFT_DEFAULTS_BEFORE_0_4 if old else {})}
    r = _Reader(b, cfg)
    b.plan.framework = FRAMEWORK
    note = {"origin": Origin.DEFAULT, "framework": cfg.label}
    set_objective_sft(b)
    path, s = r.text("model.partial_pretrain")
    if path and not cfg.is_default(s):
        b.set("model_id", path, s)
    elif path and "model.partial_pretrain" not in unknown:
        b.issue(
            IssueKind.ASSUMED,
            f"`model.partial_pretrain` is not set: verl's default `{path}` is a placeholder, so the model is unknown",
            severity=Severity.INFO,
        )
    dtype, s = r.text("model.fsdp_config.model_dtype")
    if not old and dtype is not None and dtype.lower() in DTYPES:
        r.put("weight_dtype", DTYPES[dtype.lower()], s)
    else:
        b.set("weight_dtype", "fp32", note=f"verl {version} loads the model in fp32 ({SFT_TRAINER})", **note)
    b.set("amp_dtype", "bf16", note=f"FSDP MixedPrecision param_dtype bf16 ({SFT_TRAINER})", **note)
    b.set(
        "fsdp_mixed_precision", True, note=f"FSDP MixedPrecision(param_dtype=bf16, reduce fp32) ({SFT_TRAINER})", **note
    )
    b.set("attn_impl", "flash_attention_2", note=f"attn_implementation=flash_attention_2 ({SFT_TRAINER})", **note)
    b.set("optimizer", "torch.optim.AdamW", note=f"optim.AdamW ({SFT_TRAINER})", **note)
    on, s = r.bool("model.enable_gradient_checkpointing")
    if on is not None:
        r.put("grad_checkpointing", on, s)
    b.set("ckpt_reentrant", False, note=f"gradient_checkpointing_kwargs use_reentrant=False ({SFT_TRAINER})", **note)
    on, s = r.bool("use_remove_padding")
    if on:
        r.put(
            "packing", True, s, note="padding removed: the samples run unpadded through FlashAttention's varlen kernel"
        )
    length, s = r.int("data.max_length", 1)
    if length:
        r.put("seq_len", length, s, note=None if on else "SFTDataset pads every sample to max_length")
    rank, s = r.int("model.lora_rank")
    if rank:
        r.put("peft_method", "lora", s, note=f"lora_rank {rank} > 0: PEFT LoRA")
        r.put("lora_r", rank, s)
        alpha = cfg.get("model.lora_alpha")
        if alpha is not None and to_float(alpha.value) is not None:
            r.put("lora_alpha", to_float(alpha.value), alpha)
        _put_targets(r, cfg.get("model.target_modules"))
    strategy, s = r.text("model.strategy")
    r.put("dist_strategy", "fsdp", s)
    r.put("zero_stage", 3, s, derived=True, note=f"FSDP FULL_SHARD over every rank ({SFT_TRAINER})")
    r.put("fsdp_version", 2 if (strategy or "").lower() == "fsdp2" else 1, s, derived=True)
    cpu, cs = r.bool("model.fsdp_config.cpu_offload")
    params, ps = r.bool("model.fsdp_config.offload_params")
    offload = bool(cpu) and bool(params)
    why = ps if params else cs
    for concept in ("offload_params", "offload_optimizer"):
        r.put(
            concept,
            offload,
            why,
            derived=True,
            note="cpu_offload with offload_params: FSDP CPUOffload keeps parameters, gradients and AdamW's states "
            "in host memory"
            if offload
            else None,
        )
    if "data.micro_batch_size" in given and "data.micro_batch_size_per_gpu" not in given:
        b.issue(
            IssueKind.ASSUMED,
            "`data.micro_batch_size` is not read by verl's SFT trainer (deprecated): each GPU runs "
            "`data.micro_batch_size_per_gpu` samples, default 4",
            given["data.micro_batch_size"],
            severity=Severity.INFO,
        )
    micro, s = r.int("data.micro_batch_size_per_gpu", 1)
    if micro:
        r.put("micro_batch", micro, s)
    if gpus is not None:
        gpus()
    sp, ss = r.int("ulysses_sequence_parallel_size", 1)
    world = b.plan.world_size.value if b.plan.world_size is not None else None
    world = world or (b.plan.gpu_count.value if b.plan.gpu_count is not None else None)
    batch, bs = r.int("data.train_batch_size", 1)
    if world and batch and micro:
        dp = max(1, int(world) // (sp or 1))
        b.set(
            "grad_accum",
            max(1, batch // dp // micro),
            bs,
            origin=Origin.DERIVED,
            note=f"train_batch_size {batch} ÷ {dp} data-parallel ranks, in micro-batches of {micro}",
        )
    if sp and sp > 1:
        _ulysses(b, sp, ss)
    on, s = r.bool("model.use_liger")
    if on:
        b.unmodelled(s, "Liger kernels", "estimated without them", key="model.use_liger")


def set_objective_sft(b: PlanBuilder, trainer: str = "fsdp_sft_trainer") -> None:
    from vramlens.formats.objective import set_objective

    set_objective(b, "sft", None, note=f"verl's SFT trainer ({trainer})", origin=Origin.DEFAULT)


# --- the engine-based SFT trainer -----------------------------------------------------------------------------

SFT_ENGINE_CONFIG = "sft_trainer_engine"
FSDP_ENGINE = "verl/workers/engine/fsdp/transformer_impl.py"
MEGATRON_ENGINE = "verl/workers/engine/megatron/transformer_impl.py"
ENGINE_GROUPS = ("model", "engine", "optim")  # the config groups a launch picks an option of (`engine=megatron`)
# the SFT trainer's engines (and optimizer options) that are not modelled: each brings its own data-parallel
# layout, parallel sizes, offload and precision keys (verl/trainer/config/engine/<name>.yaml, optim/<name>.yaml)
UNMODELLED_ENGINES = {
    "veomni": "verl's VeOmni engine",  # 0.7.0
    "automodel": "verl's NeMo Automodel engine",  # 0.8.0-0.9.1
    "torchtitan": "verl's torchtitan engine",  # 0.8.0-0.9.1
    "mindspeed": "verl's MindSpeed engine (Ascend NPUs)",  # 0.8.0
}
# the Megatron workers' layout keys beyond tensor/pipeline/context parallelism — the PPO actor's `megatron.` section
# (verl/trainer/config/ppo_megatron_trainer.yaml, from v0.5.0 verl/trainer/config/engine/megatron.yaml) and the
# SFT engine's `engine.` — as Megatron-LM's arguments of the same names set them (formats/megatron.py HANDLERS)
MEGATRON_LAYOUT = (
    ("virtual_pipeline_model_parallel_size", "virtual_pipeline", "int"),
    ("expert_model_parallel_size", "expert_parallel", "int"),
    ("expert_tensor_parallel_size", "expert_tensor_parallel", "int"),
    ("sequence_parallel", "sequence_parallel", "bool"),
    ("use_distributed_optimizer", "distributed_optimizer", "bool"),
)


def sft_engine_versions() -> tuple[str, ...]:
    """The dumped versions that have the engine-based SFT trainer's config, oldest first."""
    return tuple(v for v in versions() if SFT_ENGINE_CONFIG in _dump(v).get("composes", {}))


def sft_engine_defaults(version: str, choices: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """hydra's composition of `sft_trainer_engine.yaml` at one version: the chosen option of each config group of
    its `defaults:` list (the launch's `engine=…`, else the file's), then the file's own values over them (`_self_`
    comes last). Returns the defaults and the option of each group; an option the version lacks adds nothing."""
    data = _dump(version)
    out: dict[str, Any] = {}
    chosen = {}
    for group, option in data["composes"][SFT_ENGINE_CONFIG].items():
        chosen[group] = choices.get(group) or option
        out.update(defaults(version, f"{SFT_ENGINE_CONFIG}:{group}/{chosen[group]}"))
    out.update(defaults(version, SFT_ENGINE_CONFIG))
    return out, chosen


def read_sft_engine(
    b: PlanBuilder,
    given: dict[str, Setting],
    *,
    version: str | None = None,
    gpus=None,
    unknown: set[str] = frozenset(),
    ray: bool = False,
) -> None:
    """`torchrun … -m verl.trainer.sft_trainer key=value …` (verl/trainer/sft_trainer.py, v0.6.1 to main; `python
    -m verl.trainer.sft_trainer_ray` places the same trainer on `trainer.nnodes × n_gpus_per_node` Ray workers).
    The config is `sft_trainer_engine.yaml` composed with the chosen `model`, `engine` and `optim` options; the
    model (`model.path`, hf_model.yaml) is built by the engine: FSDP (verl/workers/engine/fsdp/transformer_impl.py:
    loaded in `engine.model_dtype`, FSDP or FSDP2 by `engine.strategy` over `engine.fsdp_size` GPUs, Ulysses
    sequence parallelism, `param_offload` / `optimizer_offload`) or Megatron-Core (megatron/transformer_impl.py:
    `engine.dtype`, tensor/pipeline/context parallel sizes). Each data-parallel rank takes `data.train_batch_size ÷
    dp` samples a step, in micro-batches of `data.micro_batch_size_per_gpu`, or with `data.use_dynamic_bsz` of up
    to `data.max_token_len_per_gpu` tokens (verl/workers/engine/utils.py `prepare_micro_batches`)."""
    known = sft_engine_versions()
    below = [v for v in known if not version or _version_key(v) <= _version_key(version)]
    picked = below[-1] if below else known[0]
    choices = {
        g: str(given[g].value).strip()
        for g in ENGINE_GROUPS
        if g in given and given[g].value is not None and not isinstance(given[g].value, (dict, list))
    }
    cfg = Config(given, picked, SFT_ENGINE_CONFIG)
    cfg.defaults, chosen = sft_engine_defaults(picked, choices)
    cfg.unknown = set(unknown)
    r = _Reader(b, cfg)
    b.plan.framework = FRAMEWORK
    if version and not below:
        b.issue(
            IssueKind.ASSUMED,
            f"verl {version} has no `verl.trainer.sft_trainer` (it came in 0.6.0): read with verl {picked}'s defaults",
            severity=Severity.INFO,
        )
    set_objective_sft(b, "sft_trainer")
    engine = chosen.get("engine", "fsdp")
    if engine in UNMODELLED_ENGINES or chosen.get("optim") in UNMODELLED_ENGINES:
        group = "engine" if engine in UNMODELLED_ENGINES else "optim"
        b.unmodelled(
            given.get(group),
            f"{UNMODELLED_ENGINES[chosen[group]]}"
            + (" (its own data-parallel layout, parallel sizes, offload and precision)" if group == "engine" else "")
            + ("" if group == "engine" else "'s optimizer options"),
            "estimated as verl's FSDP engine with its defaults",
            key=group,
        )
        engine = "fsdp"
        cfg.defaults, _ = sft_engine_defaults(picked, {"model": chosen["model"]})
    elif f"{SFT_ENGINE_CONFIG}:engine/{engine}" not in _dump(picked)["configs"]:
        b.issue(
            IssueKind.ASSUMED,
            f"`engine={engine}` is not an engine config of verl {picked} (verl/trainer/config/engine/): "
            "estimated with the FSDP engine",
            given.get("engine"),
            severity=Severity.WARNING,
        )
        engine = "fsdp"
        cfg.defaults, _ = sft_engine_defaults(picked, {**choices, "engine": "fsdp"})
    megatron = engine == "megatron"
    if gpus is not None and not ray:
        gpus()
    world = _gpus(r) if ray else _world(b)
    if megatron:
        _megatron_engine(r)
    _model(r, megatron, "model.", "engine.", MEGATRON_ENGINE if megatron else FSDP_ENGINE)
    _distribution(r, megatron, world, "engine.", "engine.strategy")
    _sft_engine_batch(r, world, megatron)
    _sft_engine_not_modelled(r, megatron)


# the PPO actor's engines beside FSDP/FSDP2 and Megatron: `actor.strategy: veomni` (verl 0.7+ engine_workers.py reads
# `actor.veomni`), and FSDP's `fsdp_config.strategy: fsdp_turbo` (verl 0.9.1 engine/fsdp.yaml "fsdp or fsdp2 or
# fsdp_turbo"; engine/fsdp/fsdp_turbo_impl.py registers backend "fsdp_turbo", built from `fsdp_config.turbo_config`)
_ACTOR_ENGINES = {"veomni": "verl's VeOmni engine", "fsdp_turbo": "verl's FSDP-Turbo engine (the fsdp_turbo package)"}


def _other_actor_engine(r: _Reader, strategy: str | None, s: Setting | None, section: str | None) -> None:
    """Name an actor engine the reader does not model (estimated as verl's FSDP engine)."""
    if section is not None:
        return  # the SFT trainer's engine is chosen by its `engine` group (read_sft_engine)
    inner, ins = r.text(A + "actor.fsdp_config.strategy")
    for name, setting in ((strategy, s), (inner, ins)):
        engine = _ACTOR_ENGINES.get((name or "").lower())
        if engine is not None:
            r.b.unmodelled(
                setting,
                f"{engine}: its own sharding plan, parallel sizes and precision",
                "estimated as verl's FSDP engine",
            )
            return


def _world(b: PlanBuilder) -> int:
    world = b.plan.world_size.value if b.plan.world_size is not None else None
    world = world or (b.plan.gpu_count.value if b.plan.gpu_count is not None else None)
    return int(world or 1)


def _megatron_engine(r: _Reader) -> None:
    """The Megatron engine's precision, layout and recompute, before the shared model reading (the first value
    set stands): Megatron-Core builds the model in `engine.dtype` (megatron/transformer_impl.py `param_dtype`); its
    recompute is `override_transformer_config.recompute_*` (null granularity: none), not the Hugging Face
    model's gradient checkpointing."""
    dtype, s = r.text("engine.dtype")
    if dtype is not None and dtype.lower() in DTYPES:
        r.put(
            "amp_dtype", DTYPES[dtype.lower()], s, note=f"Megatron-Core parameters in engine.dtype ({MEGATRON_ENGINE})"
        )
    name, ns = r.text("optim.optimizer")
    if (name or "").lower() == "adam":
        # verl/workers/config/optimizer.py McoreOptimizerConfig → Megatron-Core's (distributed) Adam, fp32 states
        r.put("optimizer", "torch.optim.AdamW", ns, note="optim.optimizer adam: Megatron-Core's Adam, fp32 states")
    _megatron_recompute(r, "engine.")


# megatron-core TransformerConfig fields an `override_transformer_config` entry sets, read elsewhere
# (`_megatron_recompute`, `_megatron_dispatcher`)
_TRANSFORMER_READ = ("recompute_granularity", "recompute_method", "recompute_num_layers", "attention_backend")
# fields read as the Megatron-LM flag that sets them (megatron/training/arguments.py `core_transformer_config_from_args`
# maps `--decoder-first-pipeline-num-layers` to `num_layers_in_first_pipeline_stage`, core_v0.13.0 and main)
_TRANSFORMER_AS_FLAG = {
    "num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
    "num_layers_in_last_pipeline_stage": "decoder_last_pipeline_num_layers",
    "recompute_modules": "recompute_modules",
    "use_flash_attn": "use_flash_attn",
}
# fields that change nothing estimated when true, the value verl's `hf_to_mcore_config` gives them (verl main
# verl/models/mcore/config_converter.py) and Megatron-LM's own: the fused SwiGLU keeps only its input for the backward
# (megatron/core/fusions/fused_bias_swiglu.py; unfused, `silu` and the product keep a third tensor), grouped GEMMs, a
# pipeline's outputs freed once sent; the pipeline split's embedding and loss stages when false (the default)
_TRANSFORMER_WHEN_TRUE = frozenset({"bias_activation_fusion", "moe_grouped_gemm", "deallocate_pipeline_outputs"})
_TRANSFORMER_WHEN_FALSE = frozenset({"account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"})
# fields that change nothing estimated whatever their value: kernel choices whose saved tensors are the same (RoPE,
# the masked softmax of unfused attention, layer norm, bias-dropout, the weight gradient's accumulation, the MoE
# permutation), loss coefficients, the router's logits dtype (a few bytes a token × expert), the shared experts' stream
_TRANSFORMER_IRRELEVANT = frozenset(
    {
        "apply_rope_fusion",
        "masked_softmax_fusion",
        "persist_layer_norm",
        "bias_dropout_fusion",
        "gradient_accumulation_fusion",
        "moe_permute_fusion",
        "moe_aux_loss_coeff",
        "moe_z_loss_coeff",
        "moe_router_dtype",
        "moe_shared_expert_overlap",
    }
)


def _megatron_transformer_overrides(r: _Reader, section: str) -> None:
    """Every other `<section>override_transformer_config.<field>` the file sets: each overrides a field of
    megatron-core's TransformerConfig (verl main verl/workers/megatron_workers.py: `hf_to_mcore_config(hf_config, dtype,
    **override_transformer_config)`, or the bridge's `set_extra_args`). Read, known to change nothing, or named as
    not modelled — never dropped."""
    from vramlens.formats import megatron

    prefix = section + "override_transformer_config."
    for key, s in r.cfg.given.items():
        field = key[len(prefix) :] if key.startswith(prefix) else None
        if not field or field in _TRANSFORMER_READ or field in megatron.FLEX_DISPATCHER_FLAGS or s.value in (None, ""):
            continue
        if field in _TRANSFORMER_AS_FLAG:
            megatron.HANDLERS[_TRANSFORMER_AS_FLAG[field]](r.b, s)
        elif (
            field in _TRANSFORMER_IRRELEVANT
            or (field in _TRANSFORMER_WHEN_TRUE and to_bool(s.value) is True)
            or (field in _TRANSFORMER_WHEN_FALSE and to_bool(s.value) is False)
        ):
            r.b.remember(s)
        else:
            r.b.unmodelled(
                s, f"Megatron transformer setting `{field}={shown(s.value)}`", "estimated without it", key=key
            )


def _megatron_dispatcher(r: _Reader, section: str) -> None:
    """The Megatron model's token dispatcher: `<section>override_transformer_config.moe_token_dispatcher_type` and
    its backend, as Megatron-LM's flags of the same names (formats/megatron.py `token_dispatcher`), over the section's
    expert-parallel layout (verl examples/grpo_trainer/run_qwen3moe-30b_megatron_96gb.sh: `flex` with
    `moe_enable_deepep=True`)."""
    from vramlens.formats import megatron

    overrides = section + "override_transformer_config."
    layout = ("expert_model_parallel_size", "tensor_model_parallel_size", "expert_tensor_parallel_size")
    keys = [(overrides + k, k) for k in megatron.FLEX_DISPATCHER_FLAGS] + [(section + k, k) for k in layout]
    by = {k: s for key, k in keys if (s := r.cfg.get(key)) is not None and s.value is not None}
    megatron.token_dispatcher(r.b, by)  # `hf_to_mcore_config` gives alltoall (verl/models/mcore/config_converter.py)


def _megatron_recompute(r: _Reader, section: str) -> None:
    """A Megatron model's recompute: `<section>override_transformer_config.recompute_*`, read as Megatron-LM's
    flags of the same names; with no granularity (verl's default, null, or no such key before v0.5.0) Megatron-Core
    recomputes nothing. `model.enable_gradient_checkpointing` applies to Hugging Face models only: verl's Megatron
    workers never read it (v0.3.0.post1 verl/workers/megatron_workers.py `_build_model_optimizer` takes it and leaves it
    unused; v0.4.1 to main megatron_workers.py, engine/megatron/transformer_impl.py;
    the overrides reach `hf_to_mcore_config` / the bridge's `set_extra_args`). Called before the model's own keys
    are read (the first value set stands)."""
    from vramlens.formats import megatron

    b, cfg = r.b, r.cfg
    overrides = section + "override_transformer_config."
    for key in _TRANSFORMER_READ:
        s = cfg.get(overrides + key)
        if s is not None and s.value is not None and not cfg.is_default(s):
            megatron.HANDLERS[key](b, s)
    granularity = cfg.get(overrides + "recompute_granularity")
    if granularity is None or granularity.value is None:
        note = (
            "no recompute_granularity: Megatron-Core recomputes nothing (model.enable_gradient_checkpointing "
            "applies to Hugging Face models only)"
        )
        if granularity is not None:
            r.put("grad_checkpointing", False, granularity, note=note)
        else:
            b.set("grad_checkpointing", False, note=note, origin=Origin.DEFAULT, framework=cfg.label)


def _sft_engine_batch(r: _Reader, world: int, megatron: bool) -> None:
    b, cfg = r.b, r.cfg
    length, ls = r.int("data.max_length", 1)
    pad, _ = r.text("data.pad_mode")
    if length:
        # verl main verl/utils/dataset/multiturn_sft_dataset.py `__getitem__`: `right` pads each sample to
        # max_length (data.truncation past it), `no_padding` keeps its own length, cut at max_length
        note = (
            "pad_mode right: every sample padded to max_length"
            if pad == "right"
            else f"pad_mode {pad}: each sample at its own length, estimated at max_length (the longest one kept)"
            if pad
            else None
        )
        r.put("seq_len", length, ls, note=note)
    sp_key = "engine.ulysses_sequence_parallel_size"
    sp, ss = (None, None) if megatron else r.int(sp_key, 1)
    sp = sp or 1
    if megatron:
        split = 1
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
            split *= to_int(cfg.value("engine." + key)) or 1
    else:
        split = sp
    dp = max(1, world // split)
    batch, bs = r.int("data.train_batch_size", 1)
    per_rank = batch // dp if batch else None
    dynamic, _ = r.bool("data.use_dynamic_bsz")
    micro: int | None = None
    if dynamic:
        tokens, ts = r.int("data.max_token_len_per_gpu", 1)
        if tokens and length:
            micro = max(1, tokens // length)
            fit = micro
            micro = min(micro, per_rank) if per_rank else micro
            cap = f" ({fit} fit, but a rank takes {per_rank} a step)" if micro < fit else ""
            r.put(
                "micro_batch",
                micro,
                ts,
                derived=True,
                per_unit=length,
                note=f"use_dynamic_bsz: micro-batches filled up to max_token_len_per_gpu={tokens:,} tokens "
                f"(verl/workers/engine/utils.py `prepare_micro_batches`), estimated as {micro} sample(s) of "
                f"max_length {length:,}{cap}",
            )
    if micro is None:
        micro, s = r.int("data.micro_batch_size_per_gpu", 1)
        if micro:
            r.put("micro_batch", micro, s)
    if batch and micro and not dynamic:
        b.set(
            "grad_accum",
            max(1, batch // dp // micro),
            bs,
            origin=Origin.DERIVED,
            note=f"train_batch_size {batch} ÷ {dp} data-parallel ranks, in micro-batches of {micro}",
        )
    if sp > 1:
        _ulysses(b, sp, ss)


def _sft_engine_not_modelled(r: _Reader, megatron: bool) -> None:
    b, cfg = r.b, r.cfg
    for key, what in (
        ("model.use_liger", "Liger kernels"),
        ("model.use_fused_kernels", "verl's fused log-prob/entropy kernels"),
        ("model.tiled_mlp.enabled", "TiledMLP (the MLP run in tiles)"),
    ):
        on, s = r.bool(key)
        if on:
            b.unmodelled(s, what, "estimated without them", key=key)
    # the optimizer: verl/workers/config/optimizer.py `build_optimizer` imports `optim.optimizer_impl` and builds
    # `optim.optimizer` (torch.optim.AdamW by default; Megatron's distributed Adam for the Megatron engine)
    for key in ("optim.optimizer_impl", "optim.optimizer", "optim.override_optimizer_config"):
        s = cfg.get(key)
        if s is None or cfg.is_default(s) or s.value in (None, {}, "") or s.value == cfg.defaults.get(key):
            continue
        b.unmodelled(s, f"optimizer setting `{key}={shown(s.value)}`", "estimated with AdamW's states", key=key)


def _launcher_gpus(reader, launch, script) -> None:
    """The GPUs of a torchrun launch (`--nproc_per_node`, `--nnodes`), as formats.shell reads them."""
    from vramlens.formats import shell

    shell._gpu_count(reader, launch, script.env)


# --- files beside a run that are not one -----------------------------------------------------------------------

_RAY_RUNTIME_ENV = {"working_dir", "env_vars", "excludes", "pip", "py_modules", "conda", "uv", "py_executable"}


def config_purpose(keys: set[str], data: Any) -> str | None:
    """What a YAML file of a verl workspace that configures no run is: the multi-turn rollout's tool and interaction
    configs (`tools:` / `interaction:` lists of `class_name: verl.tools.…` / `verl.interactions.…` entries, named by
    `actor_rollout_ref.rollout.multi_turn.tool_config_path` / `interaction_config_path`: verl
    verl/tools/utils/tool_registry.py `initialize_tools_from_config`, verl/interactions/utils/
    interaction_registry.py), and a Ray runtime environment (`ray job submit --runtime-env`: `working_dir`,
    `env_vars`, `pip`, ... — Ray's RuntimeEnv fields), or None."""
    for key, what in (
        ("tools", "a verl multi-turn tool config (rollout.multi_turn.tool_config_path)"),
        ("interaction", "a verl multi-turn interaction config (rollout.multi_turn.interaction_config_path)"),
    ):
        entries = data.get(key) if isinstance(data, dict) else None
        if (
            isinstance(entries, list)
            and entries
            and all(isinstance(e, dict) and "class_name" in e for e in entries)
            and len(keys) <= 2
        ):
            return what
    if keys and keys <= _RAY_RUNTIME_ENV and {"working_dir", "env_vars"} & keys:
        return "a Ray runtime environment (`ray job submit --runtime-env`)"
    return None


# --- the two ways in ------------------------------------------------------------------------------------------


def detect(data: Any, keys: set[str]) -> float:
    """A verl trainer config: its top-level `actor_rollout_ref` section (ppo_trainer.yaml and configs copied from
    it)."""
    if "actor_rollout_ref" in keys and isinstance(data.get("actor_rollout_ref"), dict):
        return 1.0
    if _skypilot_run(data, keys) is not None:
        return 1.0
    return 0.0


_LAUNCH_IN_TEXT = re.compile(
    r"-m\s+(?:verl\.trainer\.main_ppo|verl\.trainer\.(?:fsdp_)?sft_trainer(?:_ray)?|recipe\.\w+\.main_\w+)\b"
)


def _skypilot_run(data: Any, keys: set[str]) -> str | None:
    """The `run:` script of a SkyPilot task (`resources`, `num_nodes`, `setup`, `run`: SkyPilot's task YAML) that
    launches verl (verl examples/skypilot/verl-ppo.yaml), or None."""
    run = data.get("run") if isinstance(data, dict) else None
    if isinstance(run, str) and "resources" in keys and _LAUNCH_IN_TEXT.search(run):
        return run
    return None


def apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx) -> None:
    """The YAML dialect: every leaf entry of the file is an override of verl's defaults; a SkyPilot task: the verl
    launch of its `run:` script."""
    run = _skypilot_run(data, {str(k) for k in data})
    if run is not None:
        return _apply_skypilot(b, data, run, ctx)
    given = {}
    for s in settings:
        if isinstance(s.value, dict) or not all(isinstance(p, str) for p in s.path):
            continue
        key = ".".join(s.path)
        s.key = key
        given[key] = s
    config = "ppo_megatron_trainer" if _names_megatron(data.get("defaults")) else "ppo_trainer"
    if A + "model.path" not in given and isinstance(data.get("defaults"), list):
        _from_composing_launch(b, given, ctx)
    read(b, given, version=_pinned(ctx), config=config)


def _apply_skypilot(b: PlanBuilder, data: dict, run: str, ctx) -> None:
    """SkyPilot runs the `run:` script on every node with SKYPILOT_NUM_NODES (`num_nodes`) and
    SKYPILOT_NUM_GPUS_PER_NODE (the count of `resources.accelerators: H100:8`) set (SkyPilot docs, "Environment
    variables"); they are set here before the script is read."""
    from vramlens.formats import shell
    from vramlens.formats.settings import PlanBuilder as Builder

    known = []
    nodes = to_int(data.get("num_nodes"))
    if nodes:
        known.append(f"SKYPILOT_NUM_NODES={nodes}")
    resources = data.get("resources")
    accel = resources.get("accelerators") if isinstance(resources, dict) else None
    m = re.fullmatch(r"\s*[\w.-]+:(\d+)\s*", accel) if isinstance(accel, str) else None
    if m:
        known.append(f"SKYPILOT_NUM_GPUS_PER_NODE={m.group(1)}")
    script, _ = shell.analyze("".join(f"{k}\n" for k in known) + run, ctx.path)
    launch = script.launch
    b.plan.framework = FRAMEWORK
    if launch is None or launch.tool != "verl":
        b.issue(
            IssueKind.NOT_READ,
            "the SkyPilot task's `run:` script names verl's trainer, but its launch line could not be read",
            severity=Severity.WARNING,
        )
        return
    scratch = Builder(ctx.path, "shell", None)
    given, config, _, unknown = _overrides(scratch, shell._Reader(script, scratch), script)
    # the block's own positions are not the file's: its values are kept without them
    given = {k: Setting(key=k, path=tuple(k.split(".")), value=s.value) for k, s in given.items()}
    for issue in scratch.plan.issues:
        issue.span = None
        b.plan.issues.append(issue)
    b.plan.read_notes.append("a SkyPilot task: the verl launch line of its `run:` script is read")
    if m := _SFT_ENGINE_MODULE.match(launch.script.text if launch.script else ""):
        return read_sft_engine(b, given, version=_pinned(ctx), unknown=unknown, ray=bool(m.group(1)))
    if _SFT_MODULE.match(launch.script.text if launch.script else ""):
        return read_sft(b, given, version=_pinned(ctx), unknown=unknown)
    read(b, given, version=_pinned(ctx), config=config if config in CONFIG_NAMES else "ppo_trainer", unknown=unknown)


MAX_LAUNCH_SCRIPTS = 200  # shell scripts looked at for the launch that composes a config fragment
MAX_LAUNCH_CHARS = 100_000


def _from_composing_launch(b: PlanBuilder, given: dict[str, Setting], ctx) -> None:
    """A hydra config fragment (a `defaults:` list over verl's trainer config, no model: verl's
    examples/sglang_multiturn/config/*.yaml) is only run by a launch that names it (`--config-name <stem>`) and
    sets the rest on its command line: the nearest such script of the workspace (the fragment's folder, then the
    folders above it) is read, and its overrides join the fragment's values (the launch's win, as in hydra)."""
    from vramlens import file_access
    from vramlens.formats import references, shell
    from vramlens.formats.settings import PlanBuilder as Builder

    workspace = getattr(ctx, "workspace", None)
    if workspace is None or not getattr(ctx, "path", None):
        return
    here = Path(ctx.path).resolve().parent
    root = Path(workspace).resolve()
    if here != root and root not in here.parents:
        return
    stem = Path(ctx.path).stem
    names = re.compile(
        r"(?:--config-name|--config_name|-cn)[= ]['\"]?" + re.escape(stem) + r"(?:\.yaml)?['\"]?(?=\s|\\|$)"
    )
    seen = 0
    folders = [here, *[p for p in here.parents if p == root or root in p.parents]][:4]
    looked: set[Path] = set()
    for folder in folders:
        for script_path in sorted(folder.rglob("*.sh"), key=lambda p: (len(p.parts), str(p))):
            if script_path in looked:
                continue
            looked.add(script_path)
            seen += 1
            if seen > MAX_LAUNCH_SCRIPTS:
                return
            if file_access.resolved_inside(script_path, file_access.allowed_roots(workspace, ctx.path)) is None:
                continue
            text = references._read(script_path, ctx)
            if not text or len(text) > MAX_LAUNCH_CHARS or not names.search(text):
                continue
            script, _ = shell.analyze(text, str(script_path))
            launch = script.launch
            if launch is None or launch.tool != "verl":
                continue
            scratch = Builder(str(script_path), "shell", None)
            launched, name, _, _ = _overrides(scratch, shell._Reader(script, scratch), script)
            if name != stem or A + "model.path" not in launched:
                continue
            for key, s in launched.items():
                given[key] = Setting(key=key, path=tuple(key.split(".")), value=s.value)
            rel = script_path.relative_to(root) if root in script_path.parents else script_path.name
            b.plan.read_notes.append(
                f"a hydra config fragment: read as `{rel}` launches it (--config-name {stem}), with that command "
                "line's overrides"
            )
            b.issue(
                IssueKind.ASSUMED,
                f"this config names no model: it is estimated as `{rel}` launches it, with "
                f"`{A}model.path={shown(launched[A + 'model.path'].value)}` and that command line's other overrides",
                severity=Severity.INFO,
            )
            return


def _names_megatron(defaults_list: Any) -> bool:
    return isinstance(defaults_list, list) and any("megatron" in str(d) for d in defaults_list)


def _pinned(ctx) -> str | None:
    workspace = getattr(ctx, "workspace", None)
    if workspace is None:
        return None
    from vramlens import environment

    found = environment.workspace_pins(workspace).get("verl")
    return pick_version(found.version) if found is not None and found.version else None


def apply_launch(b: PlanBuilder, reader, script, ctx) -> None:
    """`python3 -m verl.trainer.main_ppo key=value …` (`formats.shell` hands the recognised launch here): hydra's
    `key=value`, `+key=value` and `++key=value` overrides, `--config-name` (hydra's `-cn`) and `--config-path`
    (`-cp`); `torchrun … -m verl.trainer.fsdp_sft_trainer key=value …` is verl's SFT trainer."""
    launch = script.launch
    given, config, config_path, unknown = _overrides(b, reader, script)
    module = launch.script.text if launch.script else ""
    if m := _SFT_ENGINE_MODULE.match(module):
        gpus = lambda: _launcher_gpus(reader, launch, script)  # noqa: E731
        return read_sft_engine(b, given, version=_pinned(ctx), gpus=gpus, unknown=unknown, ray=bool(m.group(1)))
    if _SFT_MODULE.match(module):
        gpus = lambda: _launcher_gpus(reader, launch, script)  # noqa: E731
        return read_sft(b, given, version=_pinned(ctx), gpus=gpus, unknown=unknown)
    split = is_trainer_script(Path(module).name)
    if split and config == "ppo_trainer" and not any(_is_config_name(a.text) for a in launch.args):
        config = "ppo_trainer_split"
    if config not in CONFIG_NAMES:
        config = _composed_config(b, given, config, config_path, script, ctx)
    read(b, given, version=_pinned(ctx), config=config, unknown=unknown)
    if split:
        _split_placement(b)


def _split_placement(b: PlanBuilder) -> None:
    """examples/split_placement/main_ppo_split.py `main_task` (v0.3.0.post1 to 2026 HEAD): two resource pools, the
    actor with its rollout and reference on one, the critic and the reward model on the other; on one node each takes
    `n_gpus_per_node // 2` GPUs, else each takes `nnodes // 2` whole nodes. The estimate is the actor's pool, with the
    critic's models on GPUs of their own (as OpenRLHF's Ray groups: `models_apart`), the critic's pool the same size."""
    plan = b.plan
    world = int(plan.world_size.value) if plan.world_size is not None and plan.world_size.value else 1
    per_node = int(plan.gpu_count.value) if plan.gpu_count is not None and plan.gpu_count.value else world
    nodes = max(1, world // max(per_node, 1))
    if nodes // 2 == 0 and per_node // 2 > 0:
        pool, pool_node, how = per_node // 2, per_node // 2, f"n_gpus_per_node {per_node} // 2 on the node"
    else:
        pool, pool_node, how = per_node * (nodes // 2), per_node, f"nnodes {nodes} // 2 nodes of {per_node} GPUs"
    if pool < 1:
        b.unmodelled(
            None,
            "split placement over a single GPU (main_ppo_split.py needs two resource pools)",
            "estimated as verl's colocated placement",
            key="split_placement",
        )
        return
    note = f"split placement (main_ppo_split.py): the actor's resource pool, {how}"
    b.set("world_size", pool, origin=Origin.DERIVED, framework="verl", note=note, override=True)
    b.set("gpu_count", pool_node, origin=Origin.DERIVED, framework="verl", note=note, override=True)
    b.set(
        "models_apart",
        ["value_model", "reward_model"],
        origin=Origin.DERIVED,
        framework="verl",
        note="split placement: the critic and the reward model on a resource pool of their own",
    )
    b.set(
        "critic_group",
        ["reward_model"],
        origin=Origin.DERIVED,
        framework="verl",
        note="split placement: the reward model on the critic's pool",
    )


def _is_config_name(text: str) -> bool:
    return text.split("=", 1)[0] in ("--config-name", "--config_name", "-cn")


def _overrides(b: PlanBuilder, reader, script) -> tuple[dict[str, Setting], str, str | None, set[str]]:
    """The launch line's hydra overrides {dotted key: Setting}, its config name, its config path as written
    (the raw text when it names a variable the script leaves unknown) and the keys set from values only known
    when the script runs."""
    from vramlens.formats import shell

    launch = script.launch
    given: dict[str, Setting] = {}
    unknown: set[str] = set()
    config = "ppo_trainer"
    config_path: str | None = None
    args = launch.args[launch.script_args_start : launch.script_args_end]
    skip = False
    for i, a in enumerate(args[: shell.MAX_ARGS]):
        if skip:
            skip = False
            continue
        t = a.text
        raw = shell.raw_text(script.text, a.word)
        flag = (t or raw).split("=", 1)[0]
        if flag in ("--config-name", "--config_name", "-cn", "--config-path", "--config_path", "-cp"):
            if "=" in (t or raw):
                value = t.split("=", 1)[1] if t else _raw_value(script, raw.split("=", 1)[1])
            else:
                nxt = args[i + 1] if i + 1 < len(args) else None
                skip = nxt is not None
                value = (nxt.text or _raw_value(script, shell.raw_text(script.text, nxt.word))) if nxt else ""
            value = value.strip().strip("'\"").rstrip("\\").strip("'\"")
            if flag in ("--config-name", "--config_name", "-cn"):
                config = Path(value).name.removesuffix(".yaml").removesuffix(".yml") or config
            else:
                config_path = value or None
            continue
        if a.value is None:
            t = raw.strip("'\"")  # `actor_rollout_ref.model.path=$HF_MODEL_PATH` with HF_MODEL_PATH unknown
        if t.startswith("-") or "=" not in t:
            continue
        key = t.split("=", 1)[0].lstrip("+")
        if not key or key.startswith("~") or not re.fullmatch(r"[\w.]+", key):
            continue
        eq = raw.find("=")
        s = shell._override_setting(reader, key, a, eq)
        if s is None:
            continue
        s.key = key
        if s.unresolved:
            if not _matters(key):
                continue
            written = raw.split("=", 1)[1].strip()
            source = _raw_value(script, written)
            shown_as = f"`{written}`" + (f" (`{source}`)" if source and source != written.strip("'\"") else "")
            if key in (A + "model.path", "model.path") and (folder := _FOLDER_TAIL.search(source or "")):
                # `$HDFS_ROOT/model/Qwen3-30B-A3B-Base`: a folder under a variable only known when the script runs,
                # named after its model; the model is looked up by that name (knowledge/models.py `find_model`)
                s.value, s.unresolved = folder.group(1) + folder.group(2), False
                b.issue(
                    IssueKind.ASSUMED,
                    f"`{key}` is set from {shown_as}, whose folder is only known when the script runs; the model is "
                    f"taken from the folder's name `{folder.group(2).rsplit('/', 1)[-1]}`",
                    s,
                    severity=Severity.INFO,
                )
                given[key] = s
                continue
            b.issue(
                IssueKind.NOT_READ,
                f"`{key}` is set from {shown_as}, only known when the script runs; it is not read, so verl's "
                "default is shown",
                s,
                severity=Severity.INFO,
            )
            unknown.add(key)
            continue
        given[key] = s
    if len(args) > shell.MAX_ARGS:
        b.issue(
            IssueKind.NOT_READ,
            f"the training command has more than {shell.MAX_ARGS:,} arguments; only the "
            f"first {shell.MAX_ARGS:,} are read",
            severity=Severity.INFO,
        )
    return given, config, config_path, unknown


def _matters(key: str) -> bool:
    """Whether an override's value changes what is estimated: a model path, or a name that may change memory or
    speed (frameworks/irrelevant.py `judged`); data files, names and folders do not."""
    from vramlens.frameworks import irrelevant

    return key.endswith(("model.path", "partial_pretrain")) or irrelevant.judged(key)


_VAR_REF = re.compile(r"\$(?:\{(\w+)[^}]*\}|(\w+))")
# a path after its last variable (`${RAY_DATA_HOME}/models/Qwen3-VL-8B-Instruct`): (the variable, the folders)
_FOLDER_TAIL = re.compile(r"(\$\{?\w+\}?)((?:/[\w.+-]+)+)/?[\"'}]*$")


def _raw_value(script, raw: str) -> str:
    """A word the script only knows when it runs, as text: `"$CONFIG_PATH"` becomes the text of CONFIG_PATH's
    assignment (`$PROJECT_DIR/examples/sglang_multiturn/config`), one level deep; its variables stay as written."""
    raw = raw.strip().strip("'\"")
    m = _VAR_REF.fullmatch(raw)
    if m:
        var = script.env.get(m.group(1) or m.group(2))
        if var is not None and var.value is not None:
            return var.value
        if var is not None and var.value_range is not None:
            return script.text[var.value_range[0] : var.value_range[1]].strip().strip("'\"")
    return raw


def _composed_config(b: PlanBuilder, given: dict[str, Setting], name: str, config_path: str | None, script, ctx) -> str:
    """A launch's own hydra config (`--config-path=$PROJECT_DIR/examples/sglang_multiturn/config
    --config-name=gsm8k_multiturn_grpo`): the YAML is composed over verl's trainer config named in its `defaults`
    list and under the launch line's overrides (hydra's order: defaults, the primary config, the command line).
    Its values join `given` (the launch's win); returns the verl trainer config it builds on."""
    from vramlens.formats import references
    from vramlens.formats.yaml_doc import YamlError, load_yaml

    found = None
    for target in _config_candidates(name, config_path):
        found, _ = references.find(target, ctx.path, getattr(ctx, "workspace", None))
        if found is not None:
            break
    text = references._read(found, ctx) if found is not None else None
    where = f"{config_path}/{name}.yaml" if config_path else f"{name}.yaml"
    if text is None:
        b.issue(
            IssueKind.NOT_READ,
            f"hydra config `{where}` (--config-name) was not found in the workspace: only the launch line's "
            "overrides over verl's ppo_trainer.yaml are read",
            severity=Severity.WARNING,
        )
        return "ppo_trainer"
    try:
        data, settings = load_yaml(text, str(found))
    except YamlError as exc:
        b.issue(IssueKind.NOT_READ, f"hydra config `{where}` could not be read: {exc}", severity=Severity.WARNING)
        return "ppo_trainer"
    if not isinstance(data, dict):
        return "ppo_trainer"
    for s in settings:
        if isinstance(s.value, dict) or not all(isinstance(p, str) for p in s.path) or s.path[0] in _HYDRA_KEYS:
            continue
        key = ".".join(s.path)
        if key not in given:
            given[key] = Setting(key=key, path=tuple(s.path), value=s.value)
    b.plan.read_notes.append(
        f"hydra config `{found.name}` (--config-name {name}) read under the launch line's overrides"
    )
    return "ppo_megatron_trainer" if _names_megatron(data.get("defaults")) else "ppo_trainer"


_HYDRA_KEYS = ("hydra", "defaults")


def _config_candidates(name: str, config_path: str | None) -> list[str]:
    """Where a launch's `--config-name` YAML may lie: its --config-path (as written, or the literal tail after the
    last variable, taken from the workspace root), else a `config/` folder beside the script."""
    file = name if name.endswith((".yaml", ".yml")) else name + ".yaml"
    out = []
    if config_path:
        if "$" not in config_path:
            out.append(f"{config_path.rstrip('/')}/{file}")
        tail = _VAR_REF.split(config_path)[-1].strip("/")
        tail = re.sub(r"^[^/]*\)/?", "", tail)  # after `$(pwd)`
        if tail:
            out.append(f"{tail}/{file}")
    out += [f"config/{file}", file]
    return list(dict.fromkeys(out))


def _put_targets(r: _Reader, targets) -> None:
    """`target_modules`: a list, or a string such as `all-linear` or `[q_proj, v_proj]`."""
    if targets is None or targets.value is None:
        return
    value = targets.value
    names = (
        [str(x) for x in value]
        if isinstance(value, list)
        else [p.strip() for p in str(value).strip("[]").split(",") if p.strip()]
    )
    r.put("lora_targets", names, targets)
