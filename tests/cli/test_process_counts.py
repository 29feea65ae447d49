"""Process counts from the launcher reach the GPU count, `--num-gpus` overrides them, and `vramlens check` on
a folder reports a config-looking YAML that does not parse (VL016) instead of passing over it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ACCELERATE = """compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
mixed_precision: bf16
num_machines: 1
num_processes: 8
"""


def vramlens(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


def estimate(path: Path, *flags: str) -> dict:
    out = vramlens("estimate", str(path), "--format", "json", *flags, cwd=path.parent)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    return result[0] if isinstance(result, list) else result


def test_accelerate_num_processes_is_the_gpu_count_and_num_gpus_overrides_it(tmp_path):
    (tmp_path / "zero3.yaml").write_text(ACCELERATE, encoding="utf-8")
    launch = tmp_path / "run.sh"
    launch.write_text(
        "accelerate launch --config_file zero3.yaml train.py --model_name_or_path "
        "meta-llama/Llama-3.1-8B --per_device_train_batch_size 1 --bf16\n",
        encoding="utf-8",
    )
    eight = estimate(launch)
    assert eight["gpu"]["count"] == 8
    two = estimate(launch, "--num-gpus", "2")
    assert two["gpu"]["count"] == 2
    # ZeRO-3 over 2 ranks instead of 8: each rank holds 4× the weight and optimizer shards
    assert two["components_gib"]["weights"] == pytest.approx(4 * eight["components_gib"]["weights"], rel=0.01)
    assert two["peak"]["device_gib"] > eight["peak"]["device_gib"]


def test_torchrun_and_cuda_visible_devices_give_the_count(tmp_path):
    launch = tmp_path / "run.sh"
    launch.write_text(
        "export CUDA_VISIBLE_DEVICES=0,1,2,3\ntorchrun --nproc_per_node 4 train.py "
        "--model_name_or_path meta-llama/Llama-3.1-8B --per_device_train_batch_size 1\n",
        encoding="utf-8",
    )
    assert estimate(launch)["gpu"]["count"] == 4
    assert estimate(launch, "--gpu", "2xA100-80GB")["gpu"]["count"] == 2


def test_check_reports_a_training_yaml_that_does_not_parse(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "sft.yaml").write_text(
        "base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: [1, 2\nsequence_len: 4096\n", encoding="utf-8"
    )
    (tmp_path / "configs" / "k8s.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: [a\n", encoding="utf-8")
    out = vramlens("check", "configs", cwd=tmp_path)
    assert out.returncode != 0
    assert "sft.yaml:3" in out.stdout and "VL016" in out.stdout
    assert "k8s.yaml" not in out.stdout  # not a training config: passed over, as before
