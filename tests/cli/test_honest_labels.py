"""What the command line says is what the run has: the speed on a GPU without bf16 is that of the precision the run
computes in, and the bf16→fp16 fix's title gives the speed its edit brings (every bf16 setting of the file, the
4-bit layers' compute dtype included); a GPU is taken only from settings, config keys, the directive and detection
(a comment's GPU is an assumption named as such, a file name none); the defaults are labelled with the objective's
own config class; a sequence length no framework sets is an assumption; `gpus` names the model as the file does;
quantization defaults are listed only for a quantized run; a GPU's usable memory reads the same everywhere."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LABELS = FIXTURES / "labels"


def vramlens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )
    assert out.returncode in (0, 1), out.stderr
    return out


def estimate_json(path: Path, *flags: str) -> dict:
    return json.loads(vramlens("estimate", path, "--format", "json", *flags).stdout)


def check_json(path: Path, *flags: str) -> dict:
    return json.loads(vramlens("check", path, "--format", "json", *flags).stdout)["files"][0]


def apply_json_edits(text: str, edits: list[dict]) -> str:
    """Apply `check --format json` edits (1-based lines and columns, end exclusive)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: dict) -> int:
        return starts[pos["line"] - 1] + pos["column"] - 1

    for e in sorted(edits, key=lambda e: (e["start"]["line"], e["start"]["column"]), reverse=True):
        text = text[: offset(e["start"])] + e["new_text"] + text[offset(e["end"]) :]
    return text


def speed_change(title: str) -> float:
    """The speed change a fix title states, as a fraction ("+602% tokens/s" → 6.02, "same speed" → 0)."""
    if "same speed" in title:
        return 0.0
    m = re.search(r"([+−-]\d+)% tokens/s", title)
    assert m, title
    return int(m.group(1).replace("−", "-")) / 100


# -- speed on a GPU without bf16 -------------------------------------------------------------------------------

T4_CASES = {
    "trl-yaml": ("views/qlora_mistral_t4.yaml", ()),
    "python-qlora": ("python/sft_trl_qlora.py", ("--gpu", "T4")),
    "python-4bit-compute-only": ("labels/t4_qlora.py", ()),
}


@pytest.mark.parametrize("case", list(T4_CASES), ids=list(T4_CASES))
def test_the_bf16_fix_title_gives_the_speed_its_edit_brings(case, tmp_path):
    source, flags = T4_CASES[case]
    path = tmp_path / Path(source).name
    shutil.copy(FIXTURES / source, path)
    before = estimate_json(path, *flags)
    assert before["gpu"]["name"] == "T4"
    # the estimate says what it computes in and at which rate, in its assumptions
    assert any("has no bf16: PyTorch emulates it" in a and "at the fp32 rate" in a for a in before["assumptions"]), (
        before["assumptions"]
    )
    findings = [f for f in check_json(path, *flags)["findings"] if f["rule"] == "VL005"]
    assert findings
    fixes = [fix for f in findings for fix in f["fixes"]]
    # every finding offers the same one change: the file's bf16 settings all at once
    assert len({json.dumps(fix["changes"], sort_keys=True) for fix in fixes}) == 1, fixes
    fix = fixes[0]
    path.write_text(apply_json_edits(path.read_text(), fix["edits"]))
    after = estimate_json(path, *flags)
    measured = after["throughput"]["tokens_per_s"] / before["throughput"]["tokens_per_s"] - 1
    assert abs(measured - speed_change(fix["title"])) <= 0.015, (fix["title"], measured)
    assert not [f for f in check_json(path, *flags)["findings"] if f["rule"] == "VL005"], path.read_text()
    assert "bfloat16" not in path.read_text() and "bf16: true" not in path.read_text()


def test_bf16_on_a_t4_runs_at_the_fp32_rate_and_fp16_at_the_fp16_rate(tmp_path):
    text = (FIXTURES / "views" / "qlora_mistral_t4.yaml").read_text()
    bf16, fp16 = tmp_path / "bf16.yaml", tmp_path / "fp16.yaml"
    bf16.write_text(text)
    fp16.write_text(text.replace("bf16: true", "fp16: true"))
    a, b = estimate_json(bf16), estimate_json(fp16)
    assert a["peak"] == b["peak"]  # 2 bytes per value either way
    # T4: 8.1 TFLOPS fp32, 65 fp16 (gpus.yaml): a compute-bound step is several times faster in fp16
    assert b["throughput"]["tokens_per_s"] > 5 * a["throughput"]["tokens_per_s"], (a["throughput"], b["throughput"])
    assert not any("has no bf16" in x for x in b["assumptions"])


def test_the_4bit_compute_dtype_is_flagged_and_fixed_in_a_script_and_a_notebook(tmp_path):
    script = tmp_path / "t4_qlora.py"
    shutil.copy(LABELS / "t4_qlora.py", script)
    source = script.read_text()
    notebook = tmp_path / "t4_qlora.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "metadata": {},
                        "execution_count": None,
                        "outputs": [],
                        "source": source.splitlines(keepends=True),
                    }
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            },
            indent=1,
        )
        + "\n"
    )
    for path in (script, notebook):
        found = [f for f in check_json(path)["findings"] if f["rule"] == "VL005"]
        assert any("bnb_4bit_compute_dtype" in f["message"] for f in found), found
        vramlens("check", path, "--fix", "--unsafe-fixes")
        text = path.read_text()
        assert "torch.float16" in text and "bfloat16" not in text, text
        assert not [f for f in check_json(path)["findings"] if f["rule"] == "VL005"]
    # on a GPU with bf16 the compute dtype is fine
    assert not [f for f in check_json(LABELS / "t4_qlora.py", "--gpu", "A10G")["findings"] if f["rule"] == "VL005"]


# -- where the GPU comes from ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "comment",
    [
        "# trl sft --config mistral-qlora-t4.yaml",
        "# see configs/h100/run.yaml",
        "# bash scripts/run_a100.sh",
        "# launched as train-l4.sh",
    ],
)
def test_a_file_name_in_a_comment_names_no_gpu(comment, tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(comment + "\n" + (LABELS / "file_name_comment.yaml").read_text().split("\n", 1)[1])
    data = estimate_json(path)
    assert data["gpu"]["name"] == "A100-80GB" and data["gpu"]["assumed"], data["gpu"]
    assert data["gpu"]["assumption"].startswith("no GPU named"), data["gpu"]
    text = vramlens("estimate", path).stdout
    assert "GPU     A100-80GB" in text and "(assumed: no GPU named" in text, text


@pytest.mark.parametrize(
    "comment, gpu", [("# this recipe was tested on a single L4.", "L4"), ("# Runs on 1x A10G in about an hour", "A10G")]
)
def test_a_gpu_in_prose_is_an_assumption_named_as_such_in_every_view(comment, gpu, tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(
        (LABELS / "prose_comment.yaml")
        .read_text()
        .replace((LABELS / "prose_comment.yaml").read_text().splitlines()[0], comment)
    )
    data = estimate_json(path)
    assert data["gpu"]["name"] == gpu and data["gpu"]["assumed"], data["gpu"]
    said = data["gpu"]["assumption"]
    assert said.startswith("taken from the comment") and "(line 1)" in said and "not a setting" in said, said
    assert "no GPU named" not in said
    for command in ("estimate", "check"):
        text = vramlens(command, path).stdout
        assert f"(assumed: {said})" in text and "no GPU named" not in text, text
    assert any(a.startswith(f"GPU {gpu} taken from the comment") for a in data["assumptions"]), data["assumptions"]
    # a setting names it: no assumption left
    named = estimate_json(path, "--gpu", "H100-SXM")
    assert named["gpu"]["name"] == "H100-SXM" and not named["gpu"]["assumed"] and named["gpu"]["assumption"] is None


# -- labels -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture, config_class",
    [
        ("objectives/trl_dpo_peft.yaml", "DPOConfig"),
        ("objectives/trl_dpo_full.yaml", "DPOConfig"),
        ("objectives/trl_grpo.yaml", "GRPOConfig"),
        ("objectives/trl_sft_peft.yaml", "SFTConfig"),
    ],
)
def test_the_defaults_name_the_objective_s_own_config_class(fixture, config_class):
    path = FIXTURES / fixture
    text = vramlens("estimate", path, "--gpu", "H100").stdout
    assert f"defaults of TRL 1.x ({config_class}/ModelConfig), applied:" in text, text
    others = {"DPOConfig", "GRPOConfig", "SFTConfig"} - {config_class}
    sources = estimate_json(path, "--gpu", "H100")["sources"]
    for shown in [text, json.dumps(sources), json.dumps(check_json(path, "--gpu", "H100")["findings"])]:
        assert not any(f"{other}/ModelConfig" in shown for other in others), shown


@pytest.mark.parametrize(
    "model, seq, why",
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", 2048, "2048 tokens"),
        ("openai-community/gpt2", 1024, "the model's max_position_embeddings, 1024 tokens"),
    ],
)
def test_a_plain_trainer_script_s_sequence_length_is_an_assumption_not_a_default(model, seq, why, tmp_path):
    path = tmp_path / "train.py"
    path.write_text((LABELS / "plain_trainer.py").read_text().replace("Qwen/Qwen2.5-0.5B-Instruct", model))
    data = estimate_json(path)
    source = data["sources"]["seq_len"]
    assert source["value"] == seq, source
    assert source["from"].startswith("assumed: ") and "no sequence-length setting" in source["from"], source
    assert why in source["from"] and "default of transformers" not in source["from"], source
    text = vramlens("estimate", path).stdout
    assert "sequence length:" not in text.split("  assumptions:")[0], text
    assert f"no sequence-length setting (the script's tokenization decides): assumed {why}" in text, text
    plan = vramlens("plan", path).stdout
    seq_row = next(line for line in plan.splitlines() if line.strip().startswith("seq_len"))
    assert "assumed" in seq_row and "default [transformers" not in seq_row, seq_row


def test_gpus_names_the_model_as_the_file_does():
    for fixture, model in (
        ("objectives/trl_dpo_peft.yaml", "meta-llama/Llama-3.1-8B-Instruct"),
        ("labels/axolotl_lora_16bit.yaml", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("labels/prose_comment.yaml", "mistralai/Mistral-7B-v0.1"),
    ):
        text = vramlens("gpus", FIXTURES / fixture).stdout
        assert text.splitlines()[0].startswith(f"{FIXTURES / fixture}: {model}, micro-batch"), text
        assert json.loads(vramlens("gpus", FIXTURES / fixture, "--format", "json").stdout)["model"] == model


def test_quantization_defaults_are_listed_only_for_a_quantized_run(tmp_path):
    plain = LABELS / "axolotl_lora_16bit.yaml"
    text = vramlens("estimate", plain).stdout
    data = estimate_json(plain)
    assert "double quantization" not in text and "quantized storage" not in text, text
    assert not {"quant_double", "quant_storage_dtype", "quant_type"} & set(data["sources"]), data["sources"]
    quantized = tmp_path / "qlora.yaml"
    quantized.write_text(plain.read_text().replace("adapter: lora", "adapter: qlora\nload_in_4bit: true"))
    text = vramlens("estimate", quantized).stdout
    assert "    - double quantization: true\n" in text, text


@pytest.mark.parametrize(
    "gpu, usable", [("A100-80GB", "79.2"), ("GH200-96GB", "94.9"), ("RTX 3080", "9.9"), ("T4", "14.6")]
)
def test_a_gpu_s_usable_memory_reads_the_same_in_every_view(gpu, usable):
    path = FIXTURES / "objectives" / "trl_dpo_peft.yaml"
    estimate = vramlens("estimate", path, "--gpu", gpu).stdout
    assert f"GPU     {gpu}: {usable} GiB usable per GPU" in estimate, estimate
    check = vramlens("check", path, "--gpu", gpu).stdout
    assert f" GiB of {usable} GiB usable on {gpu}" in check.splitlines()[0], check
    shown = re.findall(r"(\d+\.\d) GiB usable|of (\d+\.\d) GiB on", check)
    assert {a or b for a, b in shown} == {usable}, check
    table = vramlens("gpus", path, "--all").stdout
    row = next(line for line in table.splitlines() if line.strip().startswith(gpu + " "))
    assert f"/ {usable} " in row, row
