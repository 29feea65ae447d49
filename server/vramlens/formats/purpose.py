"""Files that configure or launch something other than training: inference, generation, evaluation, merging,
export and quantization. They name a model and often a batch size, but no training step runs, so they get no
estimate and no out-of-memory finding — only a note saying what they are (VL018).

Recognised from the frameworks' own vocabularies:
- torchtune recipes without an optimizer or a loss: `generate` (`prompt`, `max_new_tokens`), `eleuther_eval`
  (`tasks`), `quantize` (`quantizer`) — torchtune recipes/configs/generation.yaml, eleuther_evaluation.yaml,
  quantization.yaml (v0.6);
- LLaMA-Factory: `export_dir` (examples/merge_lora/*.yaml, `llamafactory-cli export`, incl.
  `export_quantization_bit`), `infer_backend` (examples/inference/*.yaml), `task` + `n_shot` (`llamafactory-cli
  eval`), `do_predict` without `do_train`, a model and a `template` with no `stage` or `dataset`, a v1
  `peft_config.export_dir` (`llamafactory-cli merge`); the helper scripts `scripts/llama_pro.py`,
  `scripts/pissa_init.py`, `scripts/loftq_init.py` (examples/extras/llama_pro/expand.sh, examples/extras/pissa/
  init.sh);
- mergekit configs (`merge_method`), and command lines of `llamafactory-cli export|chat|eval|webchat|webui|api`,
  `tune run generate|eleuther_eval|quantize`, `axolotl inference|merge-lora|quantize|evaluate`, `swift infer|
  export|eval|deploy|merge-lora|app`, `trl chat`, `vllm serve`, `lm_eval`, `mergekit-yaml`.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

# --- YAML / JSON configs -------------------------------------------------------------------------------------


def config_purpose(dialect: str | None, keys: set[str], data: dict) -> str | None:
    """What a config that is not a training run is for ("a LLaMA-Factory merge/export config"), or None."""
    from vramlens.formats import nemo_automodel, verl

    if (what := verl.config_purpose(keys, data)) is not None:
        return what
    if (what := nemo_automodel.config_purpose(keys, data)) is not None:
        return what
    if "merge_method" in keys and ({"models", "slices", "base_model"} & keys):
        return "a mergekit merge config"
    if dialect == "torchtune" and not ({"optimizer", "loss", "optimizer_in_bwd"} & keys):
        if {"prompt", "max_new_tokens"} & keys:
            return "a torchtune generation config"
        if "tasks" in keys:
            return "a torchtune evaluation config (eleuther_eval)"
        if "quantizer" in keys:
            return "a torchtune quantization config"
    peft = data.get("peft_config")
    if "model" in keys and isinstance(peft, dict) and "export_dir" in peft and "train_dataset" not in keys:
        # LLaMA-Factory v1: `peft_config.export_dir` is read only by `llamafactory-cli merge` (src/llamafactory/v1/
        # launcher.py → plugins/model_plugins/peft.py `merge_and_export_model`, v0.9.5 to main;
        # examples/v1/train_lora/export_lora.yaml), and a v1 run trains on its `train_dataset`
        return "a LLaMA-Factory v1 merge/export config (`peft_config.export_dir`, no `train_dataset`)"
    if (dialect in ("llamafactory", "llamafactory-v1", "hf") or "template" in keys) and not _true(data.get("do_train")):
        if "export_dir" in keys:
            what = "quantization export" if "export_quantization_bit" in keys else "merge/export"
            return f"a LLaMA-Factory {what} config (`llamafactory-cli export`)"
        if "infer_backend" in keys:
            return "a LLaMA-Factory inference config (`llamafactory-cli chat`)"
        if "task" in keys and "n_shot" in keys:
            return "a LLaMA-Factory evaluation config (`llamafactory-cli eval`)"
        if _true(data.get("do_predict")) and "stage" in keys:
            return "a LLaMA-Factory prediction config (do_predict without do_train)"
        if {"model_name_or_path", "template"} <= keys and not keys & {"stage", "dataset", "output_dir"}:
            # a model and its chat template, nothing to train on: LLaMA-Factory v0.8.3 examples/inference/
            # llama3.yaml and llava1_5.yaml, run by `llamafactory-cli chat` (examples/README.md at v0.8.3)
            return "a LLaMA-Factory inference config (a model and its chat `template`, no `stage` or `dataset`)"
    return None


def _true(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


# --- command lines -------------------------------------------------------------------------------------------

# program → subcommands that do not train (any subcommand for the programs mapped to None)
_COMMANDS: dict[str, frozenset[str] | None] = {
    "llamafactory-cli": frozenset({"export", "chat", "eval", "webchat", "webui", "api", "env", "version"}),
    "lmf": frozenset({"export", "chat", "eval", "webchat", "webui", "api", "env", "version"}),
    "tune": frozenset({"download", "cp", "ls", "validate", "cat"}),
    "axolotl": frozenset(
        {
            "inference",
            "merge-lora",
            "merge_lora",
            "merge-sharded-fsdp-weights",
            "quantize",
            "evaluate",
            "preprocess",
            "fetch",
            "lm-eval",
            "vllm-serve",
            "delinearize-llama4",
        }
    ),
    "swift": frozenset({"infer", "export", "eval", "deploy", "merge-lora", "app", "web-ui", "sample"}),
    # Megatron-SWIFT's checkpoint conversion (ms-swift v4.0.0 swift/cli/_megatron/export.py; `megatron sft|pt|rlhf`
    # train: formats.megatron)
    "megatron": frozenset({"export"}),
    "trl": frozenset({"chat", "env", "vllm-serve", "vllm_serve"}),
    "vllm": None,
    "lm_eval": None,
    "lm-eval": None,
    "mergekit-yaml": None,
    "mergekit-moe": None,
    "huggingface-cli": None,
    "hf": None,
    "sglang": None,
    "text-generation-launcher": None,
}
COMMAND_HEADS = frozenset(_COMMANDS)
_TUNE_RECIPES = re.compile(r"^(?:dev/)?(?:generate\w*|eleuther_eval\w*|quantize\w*|generation\w*|eval\w*)$")
_MODULES = re.compile(
    r"^(?:vllm\.|sglang\.|lm_eval|mergekit|axolotl\.cli\.(?:inference|merge|quantize|evaluate|"
    r"preprocess)|swift\.cli\.(?:infer|export|eval|deploy|merge)|llamafactory\.(?:chat|eval|api)|"
    # verl's generation and evaluation entry points (verl/trainer/main_generation.py, main_eval.py)
    r"verl\.trainer\.main_(?:generation|eval)|"
    # DeepSpeed's checkpoint conversion (deepspeed/checkpoint/ds_to_universal.py; OpenRLHF v0.8.0+
    # examples/scripts/ckpt_ds_zero_to_universal.sh)
    r"deepspeed\.checkpoint\.)"
)
# a script whose file name says it does not train (and nothing in it says train / finetune / sft); Megatron-LM
# examples/post_training/modelopt (core_v0.13.0, main): mmlu.py (MMLU evaluation), prune.py (ModelOpt pruning),
# validate.py (speculative-decoding acceptance rate), offline_feature_extract.py (hidden states of a base model);
# examples/multimodal/combine_state_dicts.py (merges a language and a vision checkpoint), tools/checkpoint/
# checkpoint_inspector.py (checkpoint format conversion, examples/megatron_fsdp/sbatch_checkpoint_convert.sh);
# data preparation: tools/preprocess_data.py (tokenizes a corpus into Megatron's indexed dataset;
# examples/academic_paper_scripts/detxoify_lm/annotations/preprocess.sh) and tasks/msdp/preprocessing.py
# (examples/academic_paper_scripts/msdp/data_processing.sh, prep_resp_gen.sh), core_r0.8.0 to main
_SCRIPT = re.compile(
    r"(?:^|[_\-./])(?:infer|inference|generate|generation|chat|eval|evaluate|evaluation|merge|"
    r"merge_lora|export|convert|quantize|quantization|serve|server|api_demo|cli_demo|web_demo|"
    r"llama_pro|pissa_init|loftq_init|predict|benchmark_inference|vllm_infer|mmlu|prune|validate|"
    r"feature_extract|combine_state_dicts|checkpoint_inspector|preprocess|preprocessing)(?:[_\-.]|$)",
    re.I,
)
_TRAINS = re.compile(r"train|finetune|fine_tune|sft|dpo|ppo|grpo|pretrain|rlhf|kto|orpo", re.I)


def command_purpose(words: list[str]) -> str | None:
    """What a command line that does not train does (`llamafactory-cli export ...` → "`llamafactory-cli
    export`"), or None when it may train (or is not a known command)."""
    if not words:
        return None
    prog = words[0].rsplit("/", 1)[-1]
    sub = words[1] if len(words) > 1 else ""
    if prog in _COMMANDS:
        subs = _COMMANDS[prog]
        if subs is None or sub in subs:
            return f"`{prog}{' ' + sub if sub and subs is not None else ''}`"
        if prog == "tune" and sub == "run":
            recipe = next((w for w in words[2:] if not w.startswith("-") and not w.isdigit()), "")
            if _TUNE_RECIPES.match(recipe):
                return f"`tune run {recipe}`"
        return None
    return None


# Environment set-up: package installs and container management (OpenRLHF examples/scripts/build_openrlhf.sh
# `pip install`, docker_run.sh `docker build` / `docker image rm`, nvidia_docker_install.sh, v0.3.0 to main). They
# say a script does not train only when nothing else in it runs python or a launcher (shell.analyze); `docker run`
# is left out: it may start a training command inside the container.
_SETUP: dict[str, frozenset[str] | None] = {
    "pip": None,
    "pip3": None,
    "docker": frozenset({"build", "image", "images", "pull", "push", "rm", "rmi", "ps", "login", "tag", "stop"}),
}
SETUP_HEADS = frozenset(_SETUP)


def setup_purpose(words: list[str]) -> str | None:
    """`pip install …` / `docker build …` → "`pip install` (environment set-up)"; None for other commands. A
    `docker run … <image> bash` ends in an interactive shell (OpenRLHF v0.6.0+ docker_run.sh): set-up too."""
    prog = words[0].rsplit("/", 1)[-1] if words else ""
    sub = words[1] if len(words) > 1 else ""
    if prog == "docker" and sub == "run" and len(words) > 3 and words[-1].rsplit("/", 1)[-1] in ("bash", "sh", "zsh"):
        return "`docker run … bash` (an interactive container)"
    if prog not in _SETUP or (_SETUP[prog] is not None and sub not in _SETUP[prog]):  # type: ignore[operator]
        return None
    return f"`{prog}{' ' + sub if sub and not sub.startswith('-') else ''}` (environment set-up)"


def module_purpose(module: str) -> str | None:
    """`python -m <module>` that does not train (vLLM, lm-eval, mergekit, axolotl's inference/merge CLIs)."""
    return f"`python -m {module}`" if _MODULES.match(module) else None


def script_purpose(script: str) -> str | None:
    """A script run by python/torchrun/accelerate/deepspeed whose name says what it does instead of training
    (`scripts/llama_pro.py`, `vllm_infer.py`, `merge_lora.py`)."""
    name = PurePosixPath(script).name
    stem = name.rsplit(".", 1)[0]
    if not name or _TRAINS.search(stem):
        return None
    return f"the script `{name}`" if _SCRIPT.search(stem) else None
