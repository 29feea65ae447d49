"""Values vramlens cannot use are reported as what they are, never as "VL016 internal error, please report it",
and one file's odd text never stops the report on the files after it. `vramlens check` runs as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFIG = "model_name_or_path: gpt2\nper_device_train_batch_size: 8\n"


def check(*files: str, cwd: Path, hub: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    if hub is not None:
        hub.mkdir(exist_ok=True)
        env["HF_HUB_CACHE"] = str(hub)  # a cache that exists: the lookup really runs
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "check", *files, "--gpu", "A100-80GB"],
        cwd=cwd,
        capture_output=True,
        timeout=120,
        env=env,
    )


def text(done: subprocess.CompletedProcess) -> str:
    out = done.stdout.decode("utf-8") + done.stderr.decode("utf-8")
    assert "internal error" not in out and "please report" not in out and "Traceback" not in out, out[-3000:]
    return out


def test_a_json_integer_of_a_million_digits(tmp_path: Path):
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": ' + "9" * 10**6 + "}")
    out = text(check("ds.json", cwd=tmp_path))
    assert "1,000,000 digits" in out and "VL016" in out


def test_a_model_id_of_300_characters(tmp_path: Path):
    for name, model in (("long-name.yaml", "org/" + "a" * 300), ("long-org.yaml", "o" * 300 + "/model")):
        (tmp_path / name).write_text(f"model_name_or_path: {model}\nper_device_train_batch_size: 8\n")
    out = text(check("long-name.yaml", "long-org.yaml", cwd=tmp_path, hub=tmp_path / "hub"))
    assert out.count("unknown model") == 2, out


def test_a_local_config_json_of_100000_brackets(tmp_path: Path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("[" * 100_000)
    (tmp_path / "train.yaml").write_text("model_name_or_path: ./model\nper_device_train_batch_size: 8\n")
    out = text(check("train.yaml", cwd=tmp_path))
    assert "nested too deeply" in out


def test_a_lone_surrogate_in_a_python_literal_is_shown_escaped_and_later_files_are_reported(tmp_path: Path):
    (tmp_path / "a_train.py").write_text(
        "from transformers import TrainingArguments\n"
        "args = TrainingArguments(output_dir='o', optim='\\ud800', "
        "per_device_train_batch_size=4)\n# vramlens: gpu=A100-80GB\n"
    )
    (tmp_path / "b_later.yaml").write_text(CONFIG)
    done = check("a_train.py", "b_later.yaml", cwd=tmp_path)
    out = text(done)
    assert "`\\ud800`" in out  # the optimizer's name, as an escape
    assert "b_later.yaml: peak" in out and "2 config(s) checked" in out


def test_directive_values_are_bounded_like_the_settings(tmp_path: Path):
    (tmp_path / "train.yaml").write_text("# vramlens: gpu=A100-80GB count=1000000000 headroom=-3\n" + CONFIG)
    out = text(check("train.yaml", cwd=tmp_path))
    assert "`count=1000000000` in the vramlens directive should be a whole number from 1 to 65536" in out
    assert "`headroom` is not read from a vramlens directive" in out


def test_a_home_folder_of_a_user_that_does_not_exist(tmp_path: Path):
    """`~0` names the home of user "0": pathlib raises RuntimeError for it (found by the long fuzz profile)."""
    (tmp_path / "run.sh").write_text(
        "deepspeed --num_gpus 8 train.py --deepspeed ~0 --model_name_or_path gpt2 --per_device_train_batch_size 4\n"
    )
    (tmp_path / "train.yaml").write_text("model_name_or_path: ~nosuchuser0/model\nper_device_train_batch_size: 8\n")
    out = text(check("run.sh", "train.yaml", cwd=tmp_path))
    assert "2 config(s) checked" in out
