"""A launch line that runs a workspace script is read by that script's own argument definitions (`vramlens estimate`
as a user runs it): the script's defaults, its own flags mapped to plan concepts, and what it cannot map."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_json import estimate_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QWEN = FIXTURES / "qwen" / "2df8e8ac"
RUN_CLM = FIXTURES / "transformers" / "3c354ea2" / "run_clm_no_trainer.py"
# Qwen-7B's config.json (hub cache), as the Hub serves it: shapes only
QWEN_7B = {
    "architectures": ["QWenLMHeadModel"],
    "model_type": "qwen",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "intermediate_size": 22016,
    "vocab_size": 151936,
    "max_position_embeddings": 8192,
    "seq_length": 8192,
    "kv_channels": 128,
}


def estimate(path: Path, cwd: Path) -> dict:
    hub = cwd / "hub" / "models--Qwen--Qwen-7B"
    if not hub.exists():
        (hub / "refs").mkdir(parents=True)
        (hub / "refs" / "main").write_text("0123abcd", encoding="utf-8")
        (hub / "snapshots" / "0123abcd").mkdir(parents=True)
        (hub / "snapshots" / "0123abcd" / "config.json").write_text(json.dumps(QWEN_7B), encoding="utf-8")
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off", "HF_HUB_CACHE": str(cwd / "hub"), "HF_HUB_OFFLINE": "1"}
    return estimate_json(path, cwd=cwd, env=env, timeout=300)


def _qwen_launch(tmp_path: Path, script: str, head: str, drop=(), model: str | None = "Qwen/Qwen-7B") -> Path:
    """Qwen's own launch script with its model filled in (the script takes it from `-m`), run by `head`."""
    shutil.copy(QWEN / "finetune.py", tmp_path / "finetune.py")
    text = (QWEN / "finetune" / script).read_text(encoding="utf-8")
    text = text.replace("python finetune.py", head + " finetune.py").replace("$DATA", "data.json")
    lines = [ln for ln in text.splitlines() if not any(ln.strip().startswith(d) for d in drop)]
    text = "\n".join(lines) + "\n"
    text = text.replace("$MODEL", model) if model else re.sub(r"\n\s*--model_name_or_path \$MODEL \\", "", text)
    (tmp_path / "finetune").mkdir(exist_ok=True)
    path = tmp_path / "finetune" / script
    path.write_text(text, encoding="utf-8")
    return path


def _from(result: dict, concept: str) -> str:
    return result["sources"][concept]["from"]


@pytest.mark.parametrize("head", ["python", "torchrun --nproc_per_node 1", "deepspeed", "accelerate launch"])
def test_qwen_lora_takes_the_script_targets(tmp_path, head):
    result = estimate(_qwen_launch(tmp_path, "finetune_lora_single_gpu.sh", head), tmp_path)
    src = result["sources"]
    assert result["model"]["id"] == "Qwen/Qwen-7B"
    assert src["peft_method"]["value"] == "lora" and "use_lora" in _from(result, "peft_method")
    assert src["lora_targets"]["value"] == ["c_attn", "c_proj", "w1", "w2"]
    assert "finetune.py:58" in _from(result, "lora_targets")  # the LoraArguments default
    assert src["seq_len"]["value"] == 512  # the line's --model_max_length
    assert result["params_trainable"] < result["model"]["params"] / 10


def test_a_launch_script_in_a_subfolder_of_a_repository_inside_the_workspace_reads_the_repository_script(tmp_path):
    """The workspace holds the repository one folder down: `python finetune.py` in `Qwen/finetune/x.sh` is run from
    the repository root (Qwen's README), which is neither the line's folder nor the workspace root."""
    repo = tmp_path / "Qwen"
    repo.mkdir()
    path = _qwen_launch(repo, "finetune_lora_single_gpu.sh", "python")
    result = estimate(path, tmp_path)
    assert result["sources"]["peft_method"]["value"] == "lora"
    assert result["params_trainable"] < result["model"]["params"] / 10
    assert any("`finetune.py` is not beside this file: read from Qwen/" in a for a in result["assumptions"])


def test_a_script_not_in_the_workspace_names_its_flags_instead_of_dropping_them(tmp_path):
    """Without finetune.py its own flags mean nothing known: `--use_lora` is named as not taken into account (the
    estimate is the full fine-tune the known flags describe, and says so), never silently dropped."""
    path = _qwen_launch(tmp_path, "finetune_lora_single_gpu.sh", "python")
    (tmp_path / "finetune.py").unlink()
    result = estimate(path, tmp_path)
    unmodelled = {u["key"]: u for u in result["unmodelled"]}
    assert "use_lora" in unmodelled, result["unmodelled"]
    assert "finetune.py, the script this line runs, is not in the workspace" in unmodelled["use_lora"]["consequence"]
    assert "lazy_preprocess" not in unmodelled and "data_path" not in unmodelled  # bookkeeping, not memory
    assert result["approximate"]


def test_a_script_that_does_not_parse_says_so_instead_of_not_in_the_workspace(tmp_path):
    """The script is there but is not Python that parses (a merge conflict left in it): the flags are named as
    not taken into account, with that reason — not "not in the workspace", which would send the user looking for
    a file that is right there."""
    path = _qwen_launch(tmp_path, "finetune_lora_single_gpu.sh", "python")
    script = tmp_path / "finetune.py"
    script.write_text("<<<<<<< HEAD\n" + script.read_text(encoding="utf-8"), encoding="utf-8")
    result = estimate(path, tmp_path)
    consequence = {u["key"]: u for u in result["unmodelled"]}["use_lora"]["consequence"]
    assert "finetune.py, the script this line runs, was not read (not Python that parses" in consequence
    assert "not in the workspace" not in consequence


def test_a_script_larger_than_is_read_says_how_large(tmp_path):
    path = _qwen_launch(tmp_path, "finetune_lora_single_gpu.sh", "python")
    script = tmp_path / "finetune.py"
    script.write_text(script.read_text(encoding="utf-8") + "#" * 600_000 + "\n", encoding="utf-8")
    result = estimate(path, tmp_path)
    consequence = {u["key"]: u for u in result["unmodelled"]}["use_lora"]["consequence"]
    assert "is larger than vramlens reads" in consequence and "at most 500,000" in consequence


def test_the_launched_script_is_looked_up_and_read_once_per_parse(tmp_path, monkeypatch):
    """The launch reader, the script's argument reader and the no-model explainer all ask for the script: one
    lookup and one read per document parse."""
    from vramlens import formats
    from vramlens.formats import references

    path = _qwen_launch(tmp_path, "finetune_lora_single_gpu.sh", "python")
    calls = []
    real = references._find_launched
    monkeypatch.setattr(
        references,
        "_find_launched",
        lambda *a: calls.append(a[0]) or real(*a),  # type: ignore[func-returns-value]
    )
    plan = formats.parse_document(path.read_text(encoding="utf-8"), str(path), workspace=tmp_path).plan
    assert plan is not None and plan.peft_method.value == "lora"
    assert calls == ["finetune.py"]


def test_qwen_qlora_and_the_script_defaults(tmp_path):
    path = _qwen_launch(tmp_path, "finetune_qlora_single_gpu.sh", "python", drop=("--model_max_length",), model=None)
    result = estimate(path, tmp_path)
    src = result["sources"]
    assert result["model"]["id"] == "Qwen/Qwen-7B"  # ModelArguments' default
    assert "finetune.py:26" in _from(result, "model_id")
    assert src["peft_method"]["value"] == "qlora" and src["quant_bits"]["value"] == 4
    assert src["lora_targets"]["value"] == ["c_attn", "c_proj", "w1", "w2"]
    assert src["seq_len"]["value"] == 8192 and "finetune.py:44" in _from(result, "seq_len")


def test_full_finetune_does_not_take_adapter_defaults(tmp_path):
    path = _qwen_launch(tmp_path, "finetune_lora_single_gpu.sh", "python", drop=("--use_lora",))
    result = estimate(path, tmp_path)
    assert "lora_targets" not in result["sources"]
    assert result["params_trainable"] == result["model"]["params"]


@pytest.mark.parametrize("model_flag", ["--config_name gpt2-xl", "--config_name=gpt2-xl"])
def test_run_clm_no_trainer_config_name_is_the_model(tmp_path, model_flag):
    shutil.copy(RUN_CLM, tmp_path / "run_clm_no_trainer.py")
    launch = tmp_path / "train.sh"
    launch.write_text(
        "accelerate launch run_clm_no_trainer.py \\\n    --dataset_name wikitext \\\n"
        f"    {model_flag} \\\n    --tokenizer_name gpt2 \\\n    --block_size 1024 \\\n"
        "    --output_dir /tmp/test-clm\n",
        encoding="utf-8",
    )
    result = estimate(launch, tmp_path)
    assert result["model"]["id"] == "gpt2-xl" and "config_name" in _from(result, "model_id")
    assert result["sources"]["seq_len"]["value"] == 1024
    assert result["sources"]["micro_batch"]["value"] == 8  # the script's argparse default
    assert "run_clm_no_trainer.py:" in _from(result, "micro_batch")


CUSTOM = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--model-path", default="gpt2-xl")
p.add_argument("--lora-rank", type=int, default=8)
p.add_argument("--peft", action="store_true")
p.add_argument("--ctx", dest="max_seq_len", type=int, default=2048)
p.add_argument("--gc", dest="gradient_checkpointing", action=argparse.BooleanOptionalAction, default=True)
p.add_argument("--offload-activations-to-nvme", action="store_true")
p.add_argument("--galore-update-proj-gap", type=int, default=200)
p.add_argument("--log_dir", default="runs")
args = p.parse_args()
"""


def test_custom_argparse_script_by_its_own_names(tmp_path):
    (tmp_path / "train.py").write_text(CUSTOM, encoding="utf-8")
    launch = tmp_path / "run.sh"
    launch.write_text(
        "torchrun --nproc_per_node 2 train.py --peft --lora-rank 32 --ctx 4096 --no-gc "
        "--offload-activations-to-nvme --galore-update-proj-gap 50 --log_dir x\n",
        encoding="utf-8",
    )
    result = estimate(launch, tmp_path)
    src = result["sources"]
    assert result["model"]["id"] == "gpt2-xl" and "train.py:4" in _from(result, "model_id")
    assert src["peft_method"]["value"] == "lora"
    assert src["lora_r"]["value"] == 32
    assert src["seq_len"]["value"] == 4096
    assert src["grad_checkpointing"]["value"] is False  # --no-gc of a BooleanOptionalAction
    unmodelled = {u["key"] for u in result["unmodelled"]}
    assert unmodelled == {"offload_activations_to_nvme", "galore_update_proj_gap"}


def test_scripts_outside_the_workspace_or_too_large_are_not_read(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "outside.py").write_text(CUSTOM, encoding="utf-8")
    (work / "big.py").write_text(CUSTOM + "#" * 600_000 + "\n", encoding="utf-8")
    for target in ("../outside.py", "big.py"):
        launch = work / "run.sh"
        launch.write_text(
            f"python {target} --model_name_or_path gpt2 --per_device_train_batch_size 2 --peft\n", encoding="utf-8"
        )
        result = estimate(launch, work)
        assert result["model"]["id"] == "gpt2"
        assert "peft_method" not in result["sources"]  # the script's --peft was not read


ARGUMENTS_PY = """
from dataclasses import dataclass, field

@dataclass
class ModelArguments:
    model_name_or_path: str = "gpt2-xl"

@dataclass
class TrainArguments:
    model_max_length: int = 512
    use_lora: bool = False
"""
SIBLING_MAIN = """
from transformers import HfArgumentParser, TrainingArguments
from arguments import ModelArguments, TrainArguments
from tools import unrelated

parser = HfArgumentParser((ModelArguments, TrainArguments, TrainingArguments))
model_args, train_args, training_args = parser.parse_args_into_dataclasses()
"""
TOOLS_PY = """
import argparse

def unrelated():
    p = argparse.ArgumentParser()
    p.add_argument("--per_device_train_batch_size", type=int, default=64)
    p.add_argument("--model_max_length", type=int, default=99999)
"""


def test_argument_classes_imported_from_a_module_beside_the_script_are_read(tmp_path):
    """`from arguments import ModelArguments, TrainArguments` beside the script, handed to HfArgumentParser: their
    fields are the script's flags and defaults; a function imported from another module that builds a parser of
    its own (a tool's `main`) is not the script's: its defaults are not applied."""
    (tmp_path / "arguments.py").write_text(ARGUMENTS_PY, encoding="utf-8")
    (tmp_path / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (tmp_path / "finetune.py").write_text(SIBLING_MAIN, encoding="utf-8")
    launch = tmp_path / "run.sh"
    launch.write_text("torchrun --nproc_per_node 2 finetune.py --use_lora --model_max_length 2048\n", encoding="utf-8")
    result = estimate(launch, tmp_path)
    src = result["sources"]
    assert result["model"]["id"] == "gpt2-xl"
    assert src["peft_method"]["value"] == "lora" and src["seq_len"]["value"] == 2048
    assert src["micro_batch"]["value"] != 64


MULTIMODAL_TRAIN = """
from megatron.training import pretrain
from multimodal_args import add_multimodal_extra_args

if __name__ == "__main__":
    pretrain(None, None, None, extra_args_provider=add_multimodal_extra_args)
"""
MULTIMODAL_ARGS = """
def add_multimodal_extra_args(parser):
    group = parser.add_argument_group(title="multimodal arguments")
    group.add_argument("--freeze-ViT", action="store_true", default=False)
    group.add_argument("--image-tag-type", type=str, default="")
    return parser
"""


def test_megatron_flags_a_launched_script_adds_are_its_own(tmp_path):
    """Megatron-LM examples/multimodal/train.py adds its flags by `extra_args_provider` from multimodal_args.py:
    they are not flagged as flags no Megatron-LM release defines, and the one that may change memory is named as
    not modelled; a flag neither defines still is."""
    (tmp_path / "train.py").write_text(MULTIMODAL_TRAIN, encoding="utf-8")
    (tmp_path / "multimodal_args.py").write_text(MULTIMODAL_ARGS, encoding="utf-8")
    launch = tmp_path / "run.sh"
    launch.write_text(
        "torchrun --nproc_per_node 8 train.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
        "--seq-length 2048 --micro-batch-size 1 --freeze-ViT --image-tag-type nvlm --frobnicate 1\n",
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", "--format", "json", "--offline", str(launch)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    messages = [f["message"] for f in json.loads(out.stdout)["files"][0]["findings"]]
    not_defined = [m for m in messages if "is not an argument of Megatron-LM" in m]
    assert len(not_defined) == 1 and "`frobnicate`" in not_defined[0], messages
    assert any("freeze_ViT" in m and "not modelled" in m for m in messages), messages
