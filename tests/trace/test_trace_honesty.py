"""`vramlens trace` says in its first lines what it was: an exact trace, a synthetic stand-in, or a supervised step
standing in for another objective (then the verdict is the estimate's, never the stand-in's); only an exact trace is
recorded for calibration. Run as a user runs it: the CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trace_plans import need, tiny_config

# a wide, shallow Llama: one SFT step fits a T4, the DPO step (chosen + rejected, a frozen reference copy) does not
WIDE = (
    '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 2, '
    '"num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 4096, "vocab_size": 64000, '
    '"torch_dtype": "bfloat16", "tie_word_embeddings": false}'
)
DPO = (
    "# trl dpo --config dpo.yaml\nmodel_name_or_path: ./wide\nbeta: 0.1\nmax_length: 2048\n"
    "per_device_train_batch_size: 4\nbf16: true\ngradient_checkpointing: true\n"
)


def _cli(tmp_path, command, *args):
    return subprocess.run(
        [sys.executable, "-m", "vramlens", command, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, VRAMLENS_CALIBRATION=str(tmp_path / "cal.jsonl")),
    )


def _wide(tmp_path):
    (tmp_path / "wide").mkdir()
    (tmp_path / "wide" / "config.json").write_text(WIDE)


def test_a_dpo_trace_says_it_ran_one_sft_step_and_shows_the_estimates_verdict(tmp_path):
    need("torch")
    _wide(tmp_path)
    (tmp_path / "dpo.yaml").write_text(DPO)
    estimate = json.loads(_cli(tmp_path, "estimate", "dpo.yaml", "--gpu", "T4", "--format", "json").stdout)
    assert estimate["objective"] == "dpo" and estimate["fits"] is False

    done = _cli(tmp_path, "trace", "dpo.yaml", "--gpu", "T4")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[:6]
    assert first[0].endswith(
        "SFT step only — the DPO objective's chosen/rejected pair and reference model were not traced"
    ), first
    peak = next(line for line in first if line.lstrip().startswith("peak"))
    assert "no fit verdict" in peak and "fits" not in peak.replace("no fit verdict", "")
    verdict = next(line for line in first if line.lstrip().startswith("estimate"))
    assert f"{estimate['peak']['device_gib']:.2f} GiB" in verdict and "OUT OF MEMORY" in verdict
    assert "exact trace" not in done.stdout
    assert not (tmp_path / "cal.jsonl").exists()  # a stand-in step is never recorded


def test_a_lora_dpo_trace_in_json_is_inexact_and_takes_the_estimates_verdict(tmp_path):
    need("torch")
    _wide(tmp_path)
    (tmp_path / "dpo.yaml").write_text(DPO + "use_peft: true\nlora_r: 16\nlora_target_modules: all-linear\n")
    estimate = json.loads(_cli(tmp_path, "estimate", "dpo.yaml", "--gpu", "T4", "--format", "json").stdout)
    done = _cli(tmp_path, "trace", "dpo.yaml", "--gpu", "T4", "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["exact"] is False and out["objective"] == "dpo" and out["verdict_from"] == "estimate"
    assert out["not_traced"] == [
        "SFT step only — the DPO objective's chosen/rejected pair and reference forward "
        "(the PEFT base, adapters disabled) were not traced"
    ]
    assert out["trace"]["title"] == out["not_traced"][0]
    assert out["fits"] is estimate["fits"] and out["estimate"]["device_gib"] == estimate["peak"]["device_gib"]
    assert not (tmp_path / "cal.jsonl").exists()


def test_an_unmapped_architecture_is_titled_a_synthetic_stand_in_and_not_recorded(tmp_path):
    need("torch")
    model = tmp_path / "tiny-cohere"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "cohere", "architectures": ["CohereForCausalLM"], "hidden_size": 128, "num_hidden_layers": 2, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 500, '
        '"torch_dtype": "bfloat16"}'
    )
    (tmp_path / "train.yaml").write_text(
        "model_name_or_path: ./tiny-cohere\nper_device_train_batch_size: 2\nmax_seq_length: 64\nbf16: true\n"
    )
    done = _cli(tmp_path, "trace", "train.yaml", "--gpu", "A10G")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.endswith("synthetic stand-in, approximate: architecture `cohere` has no real-library mapping")
    assert "exact trace" not in done.stdout
    assert not (tmp_path / "cal.jsonl").exists()  # recorded before: scaled every later estimate of the model


def test_the_synthetic_model_on_request_is_not_exact_either(tmp_path):
    need("torch")
    cfg = tiny_config(tmp_path)
    done = _cli(tmp_path, "trace", str(cfg), "--backend", "synthetic", "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["exact"] is False and out["trace"]["backend"] == "synthetic"
    assert out["not_traced"] == ["real libraries not used: the synthetic model was requested"]
    assert out["trace"]["title"] == "synthetic stand-in, approximate: the synthetic model was requested"
    assert out["verdict_from"] == "trace" and isinstance(out["fits"], bool)
    assert not (tmp_path / "cal.jsonl").exists()
