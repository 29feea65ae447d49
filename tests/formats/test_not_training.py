"""Files that name a model but do not train it (inference, generation, evaluation, merge, export,
quantization, helper scripts) get a VL018 note and no estimate — never a predicted out-of-memory error; the
training configs of the corpus and the fixtures never get that note."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import CORPUS
from vramlens.analysis import analyze
from vramlens.cli.paths import iter_config_files
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NOT_TRAINING = sorted((FIXTURES / "not_training").iterdir())
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(path: Path):
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, gpu="A10G"))


@pytest.mark.parametrize("path", NOT_TRAINING, ids=lambda p: p.name)
def test_not_a_training_run_gets_a_note_and_no_estimate(path: Path):
    a = run(path)
    assert a.estimate is None
    ids = [f.rule_id for f in a.findings]
    assert ids == ["VL018"], [f.message for f in a.findings]
    note = a.findings[0]
    assert note.severity == "information" and "not a training run" in note.message


def test_the_note_points_at_the_command(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/bash\nset -e\nCUDA_VISIBLE_DEVICES=0 llamafactory-cli export merge.yaml\n", encoding="utf-8"
    )
    (note,) = run(script).findings
    assert note.span.start_line == 2 and "`llamafactory-cli export`" in note.message


def test_a_training_launch_in_the_same_script_wins(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("llamafactory-cli train train.yaml\nllamafactory-cli export merge.yaml\n", encoding="utf-8")
    (tmp_path / "train.yaml").write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\n"
        "finetuning_type: lora\nper_device_train_batch_size: 1\n",
        encoding="utf-8",
    )
    a = run(script)
    assert a.estimate is not None and "VL018" not in [f.rule_id for f in a.findings]


def _training_files() -> list[Path]:
    files = [p for p in iter_config_files([FIXTURES, EXAMPLES]) if "not_training" not in p.parts]
    if CORPUS.is_dir():
        files += list(iter_config_files([CORPUS]))
    return files


def test_no_training_config_is_called_not_training():
    called = [str(p) for p in _training_files() if any(f.rule_id == "VL018" for f in run(p).findings)]
    assert called == []
