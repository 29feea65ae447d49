"""`vramlens estimate` as a user runs it: a subprocess, its JSON contract, and the project settings it reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from shared_data import CORPUS, need

ROOT = Path(__file__).resolve().parents[2]
OOM_EXAMPLE = ROOT / "examples" / "llama3-8b-full-adamw-a100-40gb.yaml"
LITGPT_QLORA = CORPUS / "lightning" / "litgpt__finetune__llama-2-7b__qlora.yaml"
GIB = 2**30


def estimate(*args: str, cwd: Path) -> dict:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}  # the formulas' own figures, not a local calibration
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", *args, "--format", "json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_8b_full_adamw_on_a100_40gb_does_not_fit(tmp_path):
    result = estimate(str(OOM_EXAMPLE), cwd=tmp_path)
    result = result[0] if isinstance(result, list) else result
    assert result["fits"] is False and result["gpu"]["name"] == "A100-40GB"
    params = result["model"]["params"]
    parts = result["components_gib"]
    # pure bf16: 2 bytes per parameter of weights and of gradients, AdamW m and v in bf16: 4
    assert parts["weights"] * GIB == _approx(params * 2)
    assert parts["gradients"] * GIB == _approx(params * 2)
    assert parts["optimizer"] * GIB == _approx(params * 4)


def test_project_settings_name_the_bitsandbytes_release(tmp_path):
    config = tmp_path / "qlora.yaml"
    shutil.copy(need(LITGPT_QLORA), config)
    default = estimate(str(config), "--gpu", "A10G", cwd=tmp_path)
    (tmp_path / ".vramlens.toml").write_text('gpu = "A10G"\n[framework-versions]\nbitsandbytes = "0.45.0"\n')
    newer = estimate(str(config), cwd=tmp_path)
    default, newer = (r[0] if isinstance(r, list) else r for r in (default, newer))
    assert newer["gpu"]["name"] == "A10G"  # read from .vramlens.toml
    assert any("bitsandbytes 0.42.0" in a for a in default["assumptions"])
    assert not any("bitsandbytes" in a for a in newer["assumptions"])
    # bitsandbytes ≥ 0.43.2 no longer keeps each 4-bit linear's input: less activation memory
    assert newer["components_gib"]["activations"] < default["components_gib"]["activations"] - 0.5


class _approx:
    def __init__(self, value: float, rel: float = 0.005):
        self.value, self.rel = value, rel

    def __eq__(self, other) -> bool:
        return abs(other - self.value) <= self.rel * abs(self.value)

    def __repr__(self) -> str:
        return f"≈{self.value:.4g}"


def test_an_ia3_script_is_estimated_as_ia3_and_says_so(tmp_path):
    """peft's IA3Config: the text report names the method and the JSON counts peft's vectors (k and v outputs,
    down's input per layer), not a LoRA's or a full fine-tune's parameters."""
    script = tmp_path / "train_ia3.py"
    script.write_text(
        "import torch\n"
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "from peft import IA3Config, get_peft_model\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', torch_dtype=torch.bfloat16)\n"
        "model = get_peft_model(model, IA3Config(task_type='CAUSAL_LM'))\n"
        "args = TrainingArguments(output_dir='out', per_device_train_batch_size=2, bf16=True)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    result = estimate(str(script), cwd=tmp_path)
    result = result[0] if isinstance(result, list) else result
    assert result["sources"]["peft_method"]["value"] == "ia3"
    assert result["params_trainable"] == 16 * (512 + 512 + 8192)
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    text = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    ).stdout
    assert "B trainable · IA3" in text
