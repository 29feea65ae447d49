"""`vramlens trace` on a config file: the estimate's JSON contract with the traced peak."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trace_plans import need, tiny_config


def _run(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "trace", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, VRAMLENS_CALIBRATION=str(tmp_path / "cal.jsonl")),
    )


def test_trace_json_has_the_estimate_contract_and_records_calibration(tmp_path):
    need("torch")
    cfg = tiny_config(tmp_path)
    done = _run(tmp_path, str(cfg), "--format", "json", "--gpu", "A100-40GB")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for key in (
        "file",
        "format",
        "model",
        "gpu",
        "peak",
        "phase",
        "components_gib",
        "fits",
        "headroom_gib",
        "max_micro_batch",
        "max_seq_len",
        "assumptions",
        "timeline",
        "exact",
    ):
        assert key in out
    assert out["exact"] is True and out["max_micro_batch"] is None and out["gpu"]["name"] == "A100-40GB"
    assert out["model"]["params"] == 256 * 1000 * 2 + 2 * (2 * 256 * 256 + 2 * 256 * 64 + 3 * 256 * 512 + 2 * 256) + 256
    assert [t["phase"] for t in out["timeline"]][:4] == ["fwd", "loss", "bwd-loss", "bwd"]
    # the reserved level: the traced sequence replayed through the allocator's rules (the model when it was capped)
    assert any(
        "replayed through the caching allocator's rules" in a or "allocator model" in a for a in out["assumptions"]
    )
    record = json.loads((tmp_path / "cal.jsonl").read_text().splitlines()[-1])
    assert record["source"] == "trace" and record["measured_allocated"] == out["trace"]["allocated_bytes"]


def test_trace_text_and_errors(tmp_path):
    need("torch")
    cfg = tiny_config(tmp_path)
    done = _run(tmp_path, str(cfg), "--no-record")
    assert done.returncode == 0, done.stderr
    assert "exact trace" in done.stdout and "timeline" in done.stdout
    assert not (tmp_path / "cal.jsonl").exists()
    missing = _run(tmp_path, "nope.yaml")
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_trace_reports_the_real_backend_and_its_versions(tmp_path):
    need("torch")
    need("transformers")
    import importlib.metadata as md

    tiny_config(tmp_path)
    cfg = tmp_path / "axolotl.yaml"  # the model's own loss (a TRL config needs trl for TRL's loss)
    cfg.write_text(
        "base_model: ./tiny-model\nsequence_len: 128\nmicro_batch_size: 2\nbf16: true\n"
        "optimizer: adamw_torch_fused\nsample_packing: true\n"
    )
    done = _run(tmp_path, str(cfg), "--format", "json", "--no-record")
    assert done.returncode == 0, done.stderr
    t = json.loads(done.stdout)["trace"]
    assert t["backend"] == "transformers" and t["fallback_reason"] is None
    assert t["versions"]["transformers"] == md.version("transformers")
    assert t["versions"]["torch"] == md.version("torch")
    synthetic = json.loads(
        _run(tmp_path, str(cfg), "--format", "json", "--no-record", "--backend", "synthetic").stdout
    )["trace"]
    assert synthetic["backend"] == "synthetic"
    text = _run(tmp_path, str(cfg), "--no-record").stdout
    assert "on the transformers backend" in text and f"transformers {md.version('transformers')}" in text


def test_trace_falls_back_to_the_synthetic_model_and_says_why(tmp_path):
    need("torch")
    model = tmp_path / "tiny-t5"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 128, "num_layers": 2, '
        '"num_decoder_layers": 2, "num_heads": 4, "d_kv": 32, "d_ff": 256, "vocab_size": 500, '
        '"feed_forward_proj": "gated-gelu"}'
    )
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: ./tiny-t5\nper_device_train_batch_size: 2\nmax_seq_length: 64\n")
    done = _run(tmp_path, str(cfg), "--format", "json", "--no-record")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["trace"]["backend"] == "synthetic" and out["exact"] is False
    assert "t5" in out["trace"]["fallback_reason"]
    assert any("real libraries not used" in a for a in out["assumptions"])
    forced = _run(tmp_path, str(cfg), "--format", "json", "--no-record", "--backend", "transformers")
    assert forced.returncode == 4 and "cannot trace this step" in forced.stderr
