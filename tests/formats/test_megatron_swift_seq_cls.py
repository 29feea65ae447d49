"""Megatron-SWIFT's `--task_type seq_cls --num_labels N`: its GPTModel swaps the output layer for a hidden ×
num_labels linear (ms-swift v4.0.0 swift/megatron/model/gpt_model.py `OutputLayerLinear(config.hidden_size,
self.args.num_labels, ...)`), so the run holds no vocabulary head and no vocabulary-wide logits."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

FULL = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "v4.0.0" / "megatron_seq_cls" / "full.sh"


def run(text: str, tmp_path: Path):
    path = tmp_path / "full.sh"
    path.write_text(text)
    a = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False))
    assert a.resolution is not None and a.estimate is not None, a.error
    return a.resolution.resolved, a.estimate


def test_seq_cls_example_has_a_classification_head(tmp_path):
    text = FULL.read_text()
    rp, est = run(text, tmp_path)
    assert (rp.strategy, rp.scalar_head) == ("megatron", True)
    assert est.components["logits"] == 0
    causal, causal_est = run(
        text.replace("    --task_type seq_cls \\\n", "").replace("    --num_labels 265 \\\n", ""), tmp_path
    )
    assert not causal.scalar_head
    assert causal_est.components["logits"] > 0
    assert causal_est.params_total > est.params_total  # the vocabulary head is gone
