"""Liger's fused linear cross-entropy under ms-swift: a weighted `--loss_scale` keeps the full logits."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "v3.5.0"


def _analyze(path: Path, text: str | None = None):
    text = path.read_text(encoding="utf-8") if text is None else text
    return analyze(text, str(path), Settings(workspace=path.parent, model_lookup=False))


def test_weighted_loss_scale_runs_the_loss_on_full_logits_despite_liger():
    # examples/train/agent/loss_scale/train.sh: `--loss_scale hermes` (tool calls weighted 2.0) with
    # `--use_liger_kernel true`: ms-swift pops the labels and computes the loss from the logits itself
    path = FIXTURES / "agent_loss_scale_train.sh"
    weighted = _analyze(path)
    assert weighted.plan.loss_impl is not None and weighted.plan.loss_impl.value == "standard"
    assert weighted.estimate is not None and weighted.estimate.components["logits"] > 2**30

    # the same run with 0/1 weights (`default`): no per-token scale, the model's own (fused) loss runs
    plain = _analyze(path, path.read_text(encoding="utf-8").replace("--loss_scale hermes", "--loss_scale default"))
    assert plain.plan.loss_impl is not None and plain.plan.loss_impl.value == "fused"
    assert plain.estimate is not None
    # no full logits: Liger's gradient buffers only (the head's weight gradient: `modules_to_save lm_head` trains it)
    assert plain.estimate.components["logits"] < weighted.estimate.components["logits"] / 5
    assert plain.estimate.device_bytes < weighted.estimate.device_bytes


def test_strategy_plus_weighted_type_is_weighted():
    # ms-swift 4.x swift/loss_scale/mapping.py `get_loss_scale`: `last_round+react` is REACTLossScale
    path = FIXTURES / "agent_loss_scale_train.sh"
    a = _analyze(path, path.read_text(encoding="utf-8").replace("--loss_scale hermes", "--loss_scale last_round+react"))
    assert a.plan.loss_impl is not None and a.plan.loss_impl.value == "standard"
