"""No framework argument that sets something the estimate models is dropped without a word.

For each dumped argument of a framework's newest release that maps to a plan concept (`concepts.match`), a minimal
config of that framework is read with the argument set to a value other than its default: the reader must read it
(a concept changes, or it is recorded as read), name it as not modelled, or say something about it. What stays
silent must be listed in CONTEXTUAL with the reason it changes nothing in that minimal config (it only takes effect
together with another setting, which the readers then read)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from vramlens.formats import parse_document
from vramlens.frameworks import concepts, schemas

BASES = {
    "axolotl": (
        "ax.yaml",
        "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nmicro_batch_size: 1\nsequence_len: 1024\n"
        "lora_target_linear: true\ndatasets:\n  - path: x\n    type: alpaca\n",
    ),
    "llamafactory": (
        "lf.yaml",
        "model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: identity\ntemplate: llama3\ncutoff_len: 1024\nper_device_train_batch_size: 1\noutput_dir: x\n",
    ),
    "ms-swift": (
        "r.sh",
        "swift sft --model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --per_device_train_batch_size 1 "
        "--max_length 1024 \\\n",
    ),
    "trl": (
        "r.sh",
        "trl sft --model_name_or_path Qwen/Qwen2.5-7B-Instruct --dataset_name x --per_device_train_batch_size 1 "
        "--max_length 1024 \\\n",
    ),
    "openrlhf": (
        "r.sh",
        "deepspeed --module openrlhf.cli.train_sft --pretrain Qwen/Qwen2.5-7B-Instruct --micro_train_batch_size 1 "
        "--max_len 1024 \\\n",
    ),
    "torchtune": (
        "cfg.yaml",
        "model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n  lora_attn_modules: ['q_proj', 'v_proj']\n"
        "  lora_rank: 8\n  lora_alpha: 16\ntokenizer:\n  _component_: torchtune.models.llama3.llama3_tokenizer\n"
        "  path: /tmp/tokenizer.model\n  max_seq_len: 2048\noptimizer:\n  _component_: torch.optim.AdamW\n"
        "  lr: 3e-4\nbatch_size: 2\nepochs: 1\ndtype: bf16\nenable_activation_checkpointing: True\n",
    ),
    "transformers": (
        "r.sh",
        "python run_clm.py --model_name_or_path Qwen/Qwen2.5-7B-Instruct --do_train "
        "--per_device_train_batch_size 1 --block_size 1024 --output_dir x \\\n",
    ),
}

ONLY_WITH = "only takes effect together with another setting"
CONTEXTUAL: dict[tuple[str, str], str] = {
    ("axolotl", "base_model_config"): "the config.json to read when it differs from `base_model`'s",
    ("axolotl", "max_packed_sequence_len"): "an older release's packing length, superseded by `sequence_len`",
    ("axolotl", "max_prompt_len"): f"{ONLY_WITH}: an RL objective (`rl:`)",
    ("axolotl", "optim_args"): f"{ONLY_WITH}: an optimizer that takes arguments (GaLore's rank is read with it)",
    ("axolotl", "optim_target_modules"): f"{ONLY_WITH}: a GaLore/APOLLO optimizer",
    ("axolotl", "qgalore_proj_bits"): f"{ONLY_WITH}: Q-GaLore",
    ("axolotl", "torch_compile_backend"): "which compiler backend, not whether the model is compiled",
    ("axolotl", "world_size"): "set by axolotl from the launcher's WORLD_SIZE, not a config value",
    ("llamafactory", "badam_mode"): f"{ONLY_WITH}: `use_badam`",
    ("llamafactory", "infer_dtype"): "the dtype of inference, not of training",
    ("llamafactory", "reward_model"): f"{ONLY_WITH}: `stage: ppo`",
    ("ms-swift", "galore_proj_bits"): f"{ONLY_WITH}: `--use_galore` with `--galore_proj_quant`",
    ("ms-swift", "llamapro_num_new_blocks"): f"{ONLY_WITH}: `--tuner_type llamapro`",
    ("ms-swift", "max_model_len"): "the rollout engine's (vLLM's) context length",
    ("ms-swift", "vllm_mode"): f"{ONLY_WITH}: `--use_vllm`",
    ("ms-swift", "model_type"): "with `--model` given, the loader's architecture, not the model",
    ("ms-swift", "packing_length"): f"{ONLY_WITH}: `--packing true`",
    ("ms-swift", "quant_method"): "bnb, the method the estimate sizes by default, picked as the sample",
    ("ms-swift", "response_length"): f"{ONLY_WITH}: `swift rlhf --rlhf_type ppo`",
    ("trl", "lora_task_type"): f"{ONLY_WITH}: `--use_peft`",
    ("trl", "precompute_ref_batch_size"): f"{ONLY_WITH}: `--precompute_ref_log_probs`",
    ("trl", "vllm_mode"): f"{ONLY_WITH}: `--use_vllm`",
    ("torchtune", "forward_batch_size"): f"{ONLY_WITH}: a PPO recipe (its rollout batch)",
    ("torchtune", "max_new_tokens"): f"{ONLY_WITH}: a generation or PPO recipe",
    ("torchtune", "max_seq_length"): "read by the evaluation and generation recipes, not the fine-tuning ones",
    ("torchtune", "packed"): "packing is the dataset's `packed` (`dataset.packed`), read there",
    ("transformers", "bf16_full_eval"): "evaluation's precision, not the training step's",
    ("transformers", "optim_args"): f"{ONLY_WITH}: an optimizer that takes arguments",
}


def _sample(a: dict):
    """A value other than the argument's default, of its type (None: no such value to try)."""
    t, d, choices = a.get("type"), a.get("default"), a.get("choices")
    for c in choices or ():
        if c != d:
            return c
    if t == "bool":
        return not bool(d)
    if t == "int":
        return (d if isinstance(d, int) else 0) * 2 + 3
    if t == "float":
        return (d if isinstance(d, (int, float)) else 0.0) * 2 + 0.3
    if t == "str":
        return "x1"
    return None


def _with(framework: str, name: str, value) -> str:
    file, base = BASES[framework]
    if file.endswith(".sh"):
        shown = str(value).lower() if isinstance(value, bool) else value
        return base + f"  --{name} {shown}\n"
    return base + yaml.safe_dump({name: value})


def silent(framework: str) -> list[str]:
    file, base = BASES[framework]
    before = parse_document(base, file).plan
    out = []
    for a in schemas.schema(framework)["arguments"]:
        name = a["name"]
        if "." in name or a.get("plugin") or concepts.match(name, a.get("type")) is None:
            continue
        value = _sample(a)
        if value is None:
            continue
        plan = parse_document(_with(framework, name, value), file).plan
        if plan is None:
            continue
        read = name in plan.read_alongside or any(getattr(plan, k) != getattr(before, k) for k in plan.settings())
        named = any(u.key == name for u in plan.unmodelled) or len(plan.issues) > len(before.issues)
        if not (read or named):
            out.append(name)
    return sorted(set(out))


@pytest.mark.parametrize("framework", sorted(BASES))
def test_no_argument_of_a_modelled_concept_is_dropped_silently(framework):
    found = silent(framework)
    unexplained = [n for n in found if (framework, n) not in CONTEXTUAL]
    assert not unexplained, (
        f"{framework} {schemas.pick_version(framework)}: arguments that set a modelled concept and that the reader "
        f"neither reads nor names: {unexplained}"
    )
    # the list stays true: an entry whose argument is now read is removed
    stale = [n for (fw, n) in CONTEXTUAL if fw == framework and n not in found]
    assert not stale, f"{framework}: read now, remove from CONTEXTUAL: {stale}"


# verl's arguments are Hydra overrides of one config (`actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2`); its
# dumps record which config defines each (`owner`), and a launch picks the config with `--config-name`
VERL_LAUNCH = {
    "ppo_trainer": "python3 -m verl.trainer.main_ppo \\\n",
    "ppo_megatron_trainer": (
        "python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml \\\n"
    ),
}
VERL_OVERRIDES = (
    "    algorithm.adv_estimator=grpo \\\n    data.train_batch_size=32 \\\n    data.max_prompt_length=512 \\\n"
    "    data.max_response_length=512 \\\n    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct \\\n"
    "    actor_rollout_ref.actor.ppo_mini_batch_size=16 \\\n"
    "    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\\n"
    "    actor_rollout_ref.rollout.name=vllm \\\n    actor_rollout_ref.rollout.n=4 \\\n"
)
VERL_END = "    trainer.n_gpus_per_node=8 trainer.nnodes=1\n"


@pytest.mark.parametrize("config", sorted(VERL_LAUNCH))
def test_no_verl_override_of_a_modelled_concept_is_dropped_silently(config):
    base = VERL_LAUNCH[config] + VERL_OVERRIDES
    before = parse_document(base + VERL_END, "run.sh").plan
    silent, probed = [], 0
    for a in schemas.schema("verl")["arguments"]:
        name = a["name"]
        if a.get("owner") != config or concepts.match(name, a.get("type")) is None:
            continue
        value = _sample(a)
        if value is None:
            continue
        probed += 1
        shown = str(value).lower() if isinstance(value, bool) else value
        plan = parse_document(base + f"    {name}={shown} \\\n" + VERL_END, "run.sh").plan
        read = name in plan.read_alongside or any(getattr(plan, k) != getattr(before, k) for k in plan.settings())
        named = any(u.key == name for u in plan.unmodelled) or len(plan.issues) > len(before.issues)
        if not (read or named):
            silent.append(name)
    assert probed > 50  # the dump's arguments of that config that set a modelled concept
    assert not silent, f"verl {schemas.pick_version('verl')} {config}: overrides neither read nor named: {silent}"


# torchtitan's job config is TOML tables (`[parallelism] tensor_parallel_degree = 2`); its dumped arguments are
# dotted by table
TORCHTITAN_BASE = {
    "model": {"name": "llama3", "flavor": "8B", "hf_assets_path": "./assets/hf/Llama-3.1-8B"},
    "training": {"local_batch_size": 1, "seq_len": 2048, "steps": 100},
    "parallelism": {"data_parallel_shard_degree": -1},
}
TORCHTITAN_CONTEXTUAL = {
    "model.hf_assets_path": "the tokenizer's and checkpoint's folder: the model is `name` and `flavor`, read",
    "parallelism.disable_loss_parallel": f"{ONLY_WITH}: tensor parallelism",
    "parallelism.expert_tensor_parallel_degree": f"{ONLY_WITH}: expert parallelism of a MoE flavor",
    "parallelism.pipeline_parallel_first_stage_less_layers": f"{ONLY_WITH}: pipeline parallelism",
    "parallelism.pipeline_parallel_last_stage_less_layers": f"{ONLY_WITH}: pipeline parallelism",
    "parallelism.pipeline_parallel_layers_per_stage": f"{ONLY_WITH}: pipeline parallelism",
    "parallelism.pipeline_parallel_schedule": f"{ONLY_WITH}: pipeline parallelism",
    "quantize.linear.float8.enable_fsdp_float8_all_gather": f"{ONLY_WITH}: float8 linears (`converters`)",
    "validation.local_batch_size": f"{ONLY_WITH}: `[validation] enable = true`",
    "validation.seq_len": f"{ONLY_WITH}: `[validation] enable = true`",
}


def _toml(table: dict, prefix: str = "") -> str:
    """A TOML document of nested tables (values: bool, int, float, str)."""

    def literal(v) -> str:
        return str(v).lower() if isinstance(v, bool) else json.dumps(v) if isinstance(v, str) else str(v)

    plain = [f"{k} = {literal(v)}" for k, v in table.items() if not isinstance(v, dict)]
    out = ([f"[{prefix}]"] if prefix and plain else []) + plain
    for k, v in table.items():
        if isinstance(v, dict):
            out.append(_toml(v, f"{prefix}.{k}" if prefix else k))
    return "\n".join(out) + "\n"


def test_no_torchtitan_argument_of_a_modelled_concept_is_dropped_silently():
    before = parse_document(_toml(TORCHTITAN_BASE), "t.toml").plan
    found, probed = [], 0
    for a in schemas.schema("torchtitan")["arguments"]:
        name = a["name"]
        if concepts.match(name, a.get("type")) is None or (value := _sample(a)) is None:
            continue
        probed += 1
        config = copy.deepcopy(TORCHTITAN_BASE)
        *tables, key = name.split(".")
        where = config
        for t in tables:
            where = where.setdefault(t, {})
        where[key] = value
        plan = parse_document(_toml(config), "t.toml").plan
        read = name in plan.read_alongside or any(getattr(plan, k) != getattr(before, k) for k in plan.settings())
        named = any(u.key in (name, key) for u in plan.unmodelled) or len(plan.issues) > len(before.issues)
        if not (read or named):
            found.append(name)
    assert probed > 20
    unexplained = [n for n in found if n not in TORCHTITAN_CONTEXTUAL]
    assert not unexplained, f"torchtitan {schemas.pick_version('torchtitan')}: neither read nor named: {unexplained}"
    stale = [n for n in TORCHTITAN_CONTEXTUAL if n not in found]
    assert not stale, f"torchtitan: read now, remove from TORCHTITAN_CONTEXTUAL: {stale}"
