"""Speed of the framework semantics the memory estimate follows: partial fine-tuning (freeze tuning, LLaMA-Pro,
BAdam, LISA) has no weight gradients for frozen layers and no backward below the lowest trained one; GaLore and
APOLLO keep small states but project every targeted matrix (and GaLore re-takes an SVD now and then); task heads
have no vocabulary logits. Checked through `vramlens estimate --format json`, as a user sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "semantics"

LLAMAFACTORY = """\
model_name_or_path: meta-llama/Llama-2-7b-hf
stage: sft
do_train: true
dataset: alpaca_en_demo
template: llama2
cutoff_len: 1024
per_device_train_batch_size: 4
gradient_accumulation_steps: 1
learning_rate: 1.0e-5
bf16: true
{extra}
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VRAMLENS_CALIBRATION": "off", "HF_HUB_OFFLINE": "1"},
    )


def _throughput(path: Path, cwd: Path, gpu: str = "A100-80GB") -> dict:
    out = _cli("estimate", str(path), "--gpu", gpu, "--format", "json", cwd=cwd)
    assert out.returncode in (0, 1), out.stderr
    t = json.loads(out.stdout)["throughput"]
    assert t is not None
    return t


def _llamafactory(tmp_path: Path, name: str, extra: str) -> dict:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(LLAMAFACTORY.format(extra=extra))
    return _throughput(cfg, tmp_path)


def test_freeze_tuning_of_the_last_layers_skips_the_backward_of_the_frozen_ones(tmp_path):
    full = _llamafactory(tmp_path, "full", "finetuning_type: full")
    last = _llamafactory(tmp_path, "last", "finetuning_type: freeze\nfreeze_trainable_layers: 2")
    first = _llamafactory(tmp_path, "first", "finetuning_type: freeze\nfreeze_trainable_layers: -2")
    # the last 2 of 32 layers: forward everywhere, backward (and recompute) through 2 → mostly one forward pass
    assert last["tokens_per_s"] > 2.5 * full["tokens_per_s"]
    # the first 2: backward runs through every layer, but only 2 layers' weight gradients are taken
    assert full["tokens_per_s"] < first["tokens_per_s"] < last["tokens_per_s"]
    ratio = first["parts_s"]["matmuls"] / full["parts_s"]["matmuls"]
    # full with checkpointing: forward, recompute, input and weight gradients (4 passes); first-2: ≈ 3 + 2/32
    assert 0.70 <= ratio <= 0.82
    assert last["parts_s"]["optimizer"] < full["parts_s"]["optimizer"] / 10


def test_llama_pro_and_badam_back_propagate_further_than_the_last_layers(tmp_path):
    last = _llamafactory(tmp_path, "last8", "finetuning_type: freeze\nfreeze_trainable_layers: 8")
    pro = _llamafactory(tmp_path, "pro", "finetuning_type: freeze\nfreeze_trainable_layers: 8\nuse_llama_pro: true")
    last1 = _llamafactory(tmp_path, "last1", "finetuning_type: freeze\nfreeze_trainable_layers: 1")
    badam = _llamafactory(tmp_path, "badam", "finetuning_type: full\nuse_badam: true\nbadam_mode: layer")
    full = _llamafactory(tmp_path, "full", "finetuning_type: full")
    # LLaMA-Pro's 8 expanded blocks are spread through the model (the lowest is layer 3): backward through 29 layers
    assert pro["tokens_per_s"] < last["tokens_per_s"]
    # BAdam trains one block at a time, each in turn: on average the backward runs through half of the model
    assert full["tokens_per_s"] < badam["tokens_per_s"] < last1["tokens_per_s"]


def test_lisa_trains_the_embedding_so_the_backward_reaches_every_layer(tmp_path):
    lisa = _throughput(FIXTURES / "axolotl_lisa.yaml", tmp_path)
    text = (FIXTURES / "axolotl_lisa.yaml").read_text()
    plain = tmp_path / "no_lisa.yaml"
    plain.write_text("\n".join(line for line in text.splitlines() if not line.startswith("lisa_")) + "\n")
    full = _throughput(plain, tmp_path)
    # the same passes through every layer, fewer weight gradients: faster, but not by skipping the backward
    assert full["tokens_per_s"] < lisa["tokens_per_s"] < 1.4 * full["tokens_per_s"]


def test_galore_keeps_small_states_but_pays_for_its_projections(tmp_path):
    base = "finetuning_type: full\npure_bf16: true\n"
    adamw = _llamafactory(tmp_path, "adamw", base)
    galore = _llamafactory(tmp_path, "galore", base + "use_galore: true\ngalore_target: all\ngalore_rank: 128")
    galore_big = _llamafactory(tmp_path, "galore512", base + "use_galore: true\ngalore_target: all\ngalore_rank: 512")
    apollo = _llamafactory(tmp_path, "apollo", base + "use_apollo: true\napollo_target: all\napollo_rank: 128")
    # the update itself reads far less state than AdamW's
    assert galore["parts_s"]["optimizer"] < 0.8 * adamw["parts_s"]["optimizer"]
    # the projections (and GaLore's SVD every 200 steps) are extra, and grow with the rank
    assert "low-rank projection" not in adamw["parts_s"]
    assert 0 < galore["parts_s"]["low-rank projection"] < galore_big["parts_s"]["low-rank projection"]
    # APOLLO projects with a random matrix: one GEMM and no SVD
    assert 0 < apollo["parts_s"]["low-rank projection"] < galore["parts_s"]["low-rank projection"]
    assert galore["step_s"] > adamw["step_s"] - adamw["parts_s"]["optimizer"]


def test_a_classification_head_has_no_vocabulary_logits_to_compute(tmp_path):
    cls = _throughput(FIXTURES / "swift_seq_cls.sh", tmp_path)
    lm = _throughput(FIXTURES / "swift_causal_lm.sh", tmp_path)
    assert "loss" in lm["parts_s"] and "loss" not in cls["parts_s"]
    # Qwen2.5-7B's 152k × 3584 LM head is about a tenth of the model's linear FLOPs: gone with the head
    assert cls["parts_s"]["matmuls"] < 0.95 * lm["parts_s"]["matmuls"]
    assert cls["tokens_per_s"] > lm["tokens_per_s"]


def test_dora_recomputing_x_times_w_is_slower_before_peft_014_and_with_dropout(tmp_path):
    """DoRA computes its own x @ W in every adapted linear before peft 0.14 and whenever its input is dropped out
    (peft 0.13.2 tuners/lora/dora.py; 0.14.0 passes the base layer's output when dropout is off)."""
    dora = LLAMAFACTORY.format(extra="finetuning_type: lora\nuse_dora: true\nlora_target: all\nlora_dropout: {d}\n")

    def speed(dropout: float, peft: str) -> float:
        folder = tmp_path / f"{dropout}-{peft}"
        folder.mkdir()
        (folder / "requirements.txt").write_text(f"peft=={peft}\n")
        path = folder / "train.yaml"
        path.write_text(dora.replace("{d}", str(dropout)))
        return _throughput(path, folder)["tokens_per_s"]

    reuses = speed(0.0, "0.14.0")
    assert speed(0.0, "0.13.2") < 0.9 * reuses
    assert speed(0.05, "0.14.0") < 0.9 * reuses
