"""OpenRLHF's example folder holds set-up scripts beside its training scripts (pip install, docker, DeepSpeed
checkpoint conversion): each is named as not a training run (VL018) with what it runs, never "not a config"; a set-up
command in front of a training command leaves the script a training script."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openrlhf"
SETUP = {
    "v0.3.0/not_training/build_openrlhf.sh": "`pip install`",
    "v0.3.0/not_training/docker_run.sh": "`docker image`",
    "v0.3.0/not_training/nvidia_docker_install.sh": "`docker ps`",
    "v0.11.0/not_training/docker_run.sh": "`docker run … bash`",
    "v0.11.0/not_training/ckpt_ds_zero_to_universal.sh": "`python -m deepspeed.checkpoint.ds_to_universal`",
}


def run(path: Path, text: str | None = None):
    text = path.read_text(encoding="utf-8") if text is None else text
    return analyze(text, str(path), Settings(workspace=path.parent, gpu="A100-80GB"))


@pytest.mark.parametrize("name", sorted(SETUP))
def test_a_set_up_script_is_not_a_training_run_and_says_what_it_runs(name: str):
    a = run(FIXTURES / name)
    assert a.estimate is None
    assert [f.rule_id for f in a.findings] == ["VL018"], [f.message for f in a.findings]
    assert SETUP[name] in a.findings[0].message and "not a training run" in a.findings[0].message


def test_pip_install_before_a_training_script_does_not_make_it_set_up(tmp_path: Path):
    text = "pip install -r requirements.txt\npython finetune.py\n"
    a = run(tmp_path / "run.sh", text)
    assert "VL018" not in [f.rule_id for f in a.findings]


def test_docker_run_of_a_training_command_is_not_set_up(tmp_path: Path):
    text = "docker run --gpus all -v $PWD:/w img python train.py --per_device_train_batch_size 2\n"
    a = run(tmp_path / "run.sh", text)
    assert "VL018" not in [f.rule_id for f in a.findings]
