"""A checkpoint with its own modeling code (config.json `auto_map`): whether the run builds it, as each framework
decides `trust_remote_code`, is said in every estimate, and a model transformers cannot build without it is an
error when the run does not trust it (VL025)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.analysis import Settings, analyze

# A Llama-shaped checkpoint that ships its own code (as DeepSeek-V2's and Phi-3's config.json files do), and one of a
# model type transformers does not ship (InternLM2's config.json names only its own classes)
SHIPPED = {
    "architectures": ["LlamaForCausalLM"],
    "auto_map": {
        "AutoConfig": "configuration_x.XConfig",
        "AutoModel": "modeling_x.XModel",
        "AutoModelForCausalLM": "modeling_x.XForCausalLM",
    },
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 8,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
NOT_SHIPPED = {
    "architectures": ["InternLM2ForCausalLM"],
    "auto_map": {
        "AutoConfig": "configuration_internlm2.InternLM2Config",
        "AutoModel": "modeling_internlm2.InternLM2ForCausalLM",
        "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM",
    },
    "model_type": "internlm2",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 92544,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}

TRL = "model_name_or_path: ./m\n{trust}per_device_train_batch_size: 1\nmax_length: 1024\nbf16: true\n"
AXOLOTL = (
    "base_model: ./m\n{trust}micro_batch_size: 1\nsequence_len: 1024\nbf16: true\nadapter: lora\n"
    "lora_target_linear: true\ndatasets:\n  - path: x\n    type: alpaca\n"
)
SWIFT = "swift sft --model ./m --tuner_type lora --per_device_train_batch_size 1 --max_length 1024\n"
OPENRLHF = "deepspeed --module openrlhf.cli.train_sft --pretrain ./m --micro_train_batch_size 1 --max_len 1024\n"


def _analyse(tmp_path: Path, config: dict, name: str, text: str):
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    settings = Settings(workspace=tmp_path, model_lookup=False)
    return analyze(text, str(path), settings)


def _remote_notes(analysis) -> list[str]:
    return [r for r in analysis.resolution.resolved.approximate if "modeling_" in r]


@pytest.mark.parametrize(
    "name, text",
    [
        ("trl.yaml", TRL.format(trust="trust_remote_code: true\n")),
        ("ax.yaml", AXOLOTL.format(trust="trust_remote_code: true\n")),
        ("run.sh", SWIFT),  # ms-swift's loader passes trust_remote_code=True itself
        ("run.sh", OPENRLHF),  # OpenRLHF's actor passes trust_remote_code=True itself
    ],
)
def test_a_run_that_trusts_the_checkpoint_says_its_own_code_is_estimated_as_transformers_layers(tmp_path, name, text):
    analysis = _analyse(tmp_path, SHIPPED, name, text)
    assert analysis.resolution.resolved.remote_code == "built"
    (note,) = _remote_notes(analysis)
    assert "`modeling_x.XForCausalLM`" in note and "estimated as transformers' `llama`" in note
    assert "eager attention" in note
    assert not [f for f in analysis.findings if f.rule_id == "VL025"]


@pytest.mark.parametrize(
    "name, text",
    [
        ("trl.yaml", TRL.format(trust="")),
        ("trl.yaml", TRL.format(trust="trust_remote_code: false\n")),
        ("ax.yaml", AXOLOTL.format(trust="")),
    ],
)
def test_a_run_that_does_not_trust_a_shipped_model_builds_transformers_class_without_a_word(tmp_path, name, text):
    analysis = _analyse(tmp_path, SHIPPED, name, text)
    assert analysis.resolution.resolved.remote_code == ""
    assert _remote_notes(analysis) == []


def test_a_model_transformers_does_not_ship_is_an_error_when_the_run_does_not_trust_it(tmp_path):
    analysis = _analyse(tmp_path, NOT_SHIPPED, "trl.yaml", TRL.format(trust=""))
    assert analysis.resolution.resolved.remote_code == "refused"
    (finding,) = [f for f in analysis.findings if f.rule_id == "VL025"]
    assert finding.severity == "error"
    assert "modeling_internlm2.InternLM2ForCausalLM" in finding.message
    assert "TRL" in finding.message and "defaults it to false" in finding.message

    written = _analyse(tmp_path, NOT_SHIPPED, "ax.yaml", AXOLOTL.format(trust="trust_remote_code: false\n"))
    (finding,) = [f for f in written.findings if f.rule_id == "VL025"]
    assert finding.span.start_line == 1  # on the key that refuses it
    assert "`trust_remote_code` is false" in finding.message

    trusted = _analyse(tmp_path, NOT_SHIPPED, "trl.yaml", TRL.format(trust="trust_remote_code: true\n"))
    assert not [f for f in trusted.findings if f.rule_id == "VL025"]
    (note,) = _remote_notes(trusted)
    assert "sized from its config.json's sizes alone" in note


def test_a_script_of_its_own_is_read_where_it_loads_the_model(tmp_path):
    """A Python training file's `from_pretrained(..., trust_remote_code=True)` decides; a launch line whose script
    is not read leaves it open, and says so."""
    script = (
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('./m', trust_remote_code=True, torch_dtype='bfloat16')\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=1, bf16=True)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    analysis = _analyse(tmp_path, SHIPPED, "train.py", script)
    assert analysis.resolution.resolved.remote_code == "built"

    launch = "python train.py --model_name_or_path ./m --per_device_train_batch_size 1 --output_dir o\n"
    (tmp_path / "train.py").write_text("print('no arguments here')\n", encoding="utf-8")
    open_question = _analyse(tmp_path, SHIPPED, "run.sh", launch)
    assert open_question.resolution.resolved.remote_code == ""
    (note,) = _remote_notes(open_question)
    assert "built if the run passes `trust_remote_code=True`, which is not read here" in note

    # the launched script's own load, read with ast (QwenLM Qwen's finetune.py writes it so)
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    launched = _analyse(tmp_path, SHIPPED, "run.sh", launch)
    assert launched.resolution.resolved.remote_code == "built"
    assert "train.py line 2" in (launched.plan.trust_remote_code.note or "")


def test_the_cli_check_fails_on_a_model_it_cannot_load(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(NOT_SHIPPED), encoding="utf-8")
    (tmp_path / "trl.yaml").write_text(TRL.format(trust=""), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", "--offline", "trl.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "VL025" in done.stdout and "loading stops" in done.stdout


LLAMAFACTORY = (
    "model_name_or_path: ./m\nstage: sft\ndo_train: true\nfinetuning_type: lora\ndataset: identity\n"
    "template: default\ncutoff_len: 1024\nper_device_train_batch_size: 1\noutput_dir: x\n"
)


def test_llamafactory_trusts_every_checkpoint_before_it_had_the_setting(tmp_path):
    """LLaMA-Factory passed `trust_remote_code=True` itself before 0.9.2; from 0.9.2 its argument defaults to false."""
    newest = _analyse(tmp_path, NOT_SHIPPED, "lf.yaml", LLAMAFACTORY)
    assert newest.resolution.resolved.remote_code == "refused"
    assert [f for f in newest.findings if f.rule_id == "VL025"]

    (tmp_path / "requirements.txt").write_text("llamafactory==0.9.1\n", encoding="utf-8")
    older = _analyse(tmp_path, NOT_SHIPPED, "lf.yaml", LLAMAFACTORY)
    assert older.resolution.resolved.remote_code == "built"
    assert not [f for f in older.findings if f.rule_id == "VL025"]
    assert older.resolution.sources["trust_remote_code"].framework.startswith("LLaMA-Factory 0.9.1")
