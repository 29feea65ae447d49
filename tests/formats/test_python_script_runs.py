"""A `python script.py` command is a training run only when its flags are a trainer's (or it passes a config
file), not when a data-preparation script is given an output file."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings


def _analysis(tmp_path: Path, command: str):
    path = tmp_path / "run.sh"
    path.write_text(command + "\n")
    return analyze(path.read_text(), str(path), Settings(workspace=tmp_path, model_lookup=False))


def test_data_prep_with_an_output_file_is_not_a_training_run(tmp_path):
    (tmp_path / "prep.py").write_text(
        'import argparse, json\np = argparse.ArgumentParser()\np.add_argument("--out")\n'
        "json.dump([], open(p.parse_args().out, 'w'))\n"
    )
    a = _analysis(tmp_path, "python prep.py --out data.json")
    assert a.plan is None
    assert not any(f.rule_id == "VL017" for f in a.findings)


def test_a_config_file_passed_by_its_flag_still_counts(tmp_path):
    a = _analysis(tmp_path, "python train.py --config cfg.yaml")
    assert a.plan is not None


def test_a_deepspeed_file_of_a_trainer_flag_still_counts(tmp_path):
    a = _analysis(tmp_path, "python train.py --deepspeed ds.json --model_name_or_path gpt2")
    assert a.plan is not None and a.plan.model_id.value == "gpt2"
