"""`vramlens plan`: every value with the range it was read from, and the defaults resolve filled in."""

from __future__ import annotations

import json
import subprocess
import sys

from vramlens.cli import main

CONFIG = """\
base_model: NousResearch/Llama-3.2-1B
sequence_len: 2048
micro_batch_size: 2
num_epochs: 1
optimizer: adamw_8bit_bnb
"""


def test_plan_text_shows_ranges_defaults_and_issues(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG)
    assert main(["plan", str(cfg), "--gpu", "A100-40GB"]) == 0
    out = capsys.readouterr().out
    assert "axolotl" in out
    assert "micro_batch" in out and "3:19-3:20 (micro_batch_size)" in out
    assert "default [axolotl" in out  # e.g. gradient checkpointing, filled in by resolve
    assert "VL015" in out and "adamw_bnb_8bit" in out


def test_plan_json(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG)
    assert main(["plan", str(cfg), "--format", "json", "--no-resolve"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "axolotl" and data["training_config"] is True
    seq = data["settings"]["seq_len"]
    assert seq["value"] == 2048 and seq["value_span"]["start_line"] == 1 and seq["key"] == "sequence_len"
    assert "defaults" not in data


def test_plan_of_a_file_that_is_not_a_config(tmp_path, capsys):
    f = tmp_path / "compose.yaml"
    f.write_text("services:\n  web:\n    image: nginx\n")
    assert main(["plan", str(f)]) == 0
    assert "not a training config" in capsys.readouterr().out


def test_write_schemas(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "plan", "--write-schemas", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (tmp_path / "axolotl.schema.json").is_file() and "torchtune.schema.json" in out.stdout
