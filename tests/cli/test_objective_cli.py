"""`vramlens estimate` on preference, RL and distillation configs, as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "objectives"


def cli(*args: str, fmt: str = "json"):
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", *args, "--gpu", "H100-80GB", "--format", fmt],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=FIXTURES,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if fmt == "json" else out.stdout


def test_full_dpo_recipe_reports_dpo_and_its_frozen_reference():
    result = cli("trl_dpo_full.yaml")
    assert result["objective"] == "dpo"
    assert result["components_gib"]["reference"] == 14.96
    assert result["components_gib"]["weights"] == 14.96
    assert "reference-forward" in result["phases_gib"]
    assert result["sources"]["objective"]["from"].startswith("derived")  # from the DPOConfig keys of the recipe


def test_peft_dpo_has_no_copy_and_at_least_twice_the_sft_activations():
    dpo = cli("trl_dpo_peft.yaml")
    sft = cli("trl_sft_peft.yaml")
    assert dpo["objective"] == "dpo" and sft["objective"] == "sft"
    assert dpo["components_gib"]["reference"] == 0

    # what the forward-backward holds beyond the weights and optimizer states: chosen and rejected sequences (SFT's
    # fused `nll` head holds no logits, DPO's loss holds them for both)
    def held(r):
        return r["phases_gib"]["forward-backward"] - r["phases_gib"]["optimizer-step"]

    assert held(dpo) >= 1.8 * held(sft)


def test_grpo_and_distillation_show_their_phases_in_the_breakdown():
    for name in (
        "trl_grpo.yaml",
        "grpo_train.py",
        "swift_grpo.sh",
        "axolotl_grpo.yaml",
        "torchtune_ppo.yaml",
        "torchtune_grpo.yaml",
        "llamafactory_ppo.yaml",
    ):
        result = cli(name)
        assert "generation" in result["phases_gib"], name
    for name in ("torchtune_kd.yaml", "gkd_train.py", "swift_gkd.sh"):
        result = cli(name)
        assert result["objective"] in ("kd", "gkd") and "teacher-forward" in result["phases_gib"], name
        assert result["components_gib"]["teacher"] > 0, name
    text = cli("trl_grpo.yaml", fmt="text")
    assert "trains  GRPO" in text and "vLLM colocated" in text and "phases (allocated): " in text
