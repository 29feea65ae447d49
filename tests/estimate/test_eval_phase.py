"""The evaluation pass during training: a no-grad forward of the evaluation batch beside the training state, where a
loss that fuses only in training (Liger) builds the full logits."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.report import render_text
from vramlens.settings import Settings

SWIFT = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "v3.5.0" / "agent_qwen2_5.sh"

LIGER_SFT = """\
model_name_or_path: Qwen/Qwen2.5-3B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: 1
per_device_eval_batch_size: 1
gradient_accumulation_steps: 8
max_length: 8192
packing: true
use_liger_kernel: true
output_dir: out
"""


def _analyze(text: str, path: str = "/tmp/eval_phase/train.yaml", versions: dict[str, str] | None = None):
    a = analyze(text, path, Settings(model_lookup=False, framework_versions=versions or {}))
    assert a.estimate is not None, a.error
    return a


def _swift(text: str | None = None, version: str | None = None):
    text = SWIFT.read_text(encoding="utf-8") if text is None else text
    return _analyze(text, str(SWIFT), {"ms-swift": version} if version else None)


def test_liger_run_that_evaluates_peaks_in_evaluation_with_full_logits():
    on = _analyze(LIGER_SFT + "eval_strategy: steps\neval_steps: 100\n")
    est, rp = on.estimate, on.resolution.resolved
    assert rp.loss_impl == "fused"  # training never builds the logits
    assert est.phase == "evaluation"
    # the evaluation forward holds the 16-bit logits and their fp32 log-softmax at least
    assert est.components["logits"] >= rp.seq_len * rp.arch.vocab * (2 + 4)
    assert "peak phase: evaluation" in render_text("train.yaml", on.plan, on.resolution, est)

    plain = _analyze(LIGER_SFT)
    assert est.device_bytes > plain.estimate.device_bytes
    assert est.phases["evaluation"] > max(v for k, v in est.phases.items() if k != "evaluation")


def test_eval_off_changes_nothing():
    base = _analyze(LIGER_SFT).estimate
    off = _analyze(LIGER_SFT + 'eval_strategy: "no"\neval_steps: 100\n').estimate
    assert "evaluation" not in base.phases and "evaluation" not in off.phases
    assert off.device_bytes == base.device_bytes and off.phase == base.phase


def test_unfused_run_peak_unchanged_by_evaluation_at_the_training_batch():
    plain = LIGER_SFT.replace("use_liger_kernel: true\n", "")
    base = _analyze(plain).estimate
    on = _analyze(plain + "eval_strategy: epoch\n").estimate
    assert "evaluation" in on.phases  # the pass is there, below the training step's own peak
    assert on.phase == base.phase and on.device_bytes == base.device_bytes


def test_ms_swift_evaluates_by_default_before_3_6():
    # ms-swift v3.5.0 splits 1 % of the data off for validation and evaluates at every save (`eval_steps 100`)
    old = _swift(version="3.5.0")
    assert old.resolution.resolved.evaluation
    assert old.estimate.phase == "evaluation"
    # from 3.6.0 no split by default: with no validation set nothing is evaluated
    new = _swift(version="4.0.0")
    assert not new.resolution.resolved.evaluation
    assert "evaluation" not in new.estimate.phases
    assert new.estimate.device_bytes < old.estimate.device_bytes


def test_ms_swift_validation_set_settings():
    text = SWIFT.read_text(encoding="utf-8")
    flag = "    --eval_steps 100 \\\n"
    assert flag in text
    no_split = _swift(text.replace(flag, flag + "    --split_dataset_ratio 0 \\\n"), version="3.5.0")
    assert "evaluation" not in no_split.estimate.phases
    no_eval = _swift(text.replace(flag, flag + "    --eval_strategy no \\\n"), version="3.5.0")
    assert "evaluation" not in no_eval.estimate.phases
    val_set = _swift(text.replace(flag, flag + "    --val_dataset my/val.jsonl \\\n"), version="4.0.0")
    assert val_set.estimate.phase == "evaluation"
    split = _swift(text.replace(flag, flag + "    --split_dataset_ratio 0.01 \\\n"), version="4.0.0")
    assert split.estimate.phase == "evaluation"
    # evaluation by generation holds a KV cache, not the batch's logits: no loss-forward phase
    generating = _swift(text.replace(flag, flag + "    --predict_with_generate true \\\n"), version="3.5.0")
    assert "evaluation" not in generating.estimate.phases


def test_an_evaluation_batch_that_overflows_at_any_micro_batch_is_named():
    # the evaluation batch is not the micro batch: when its pass alone overflows, every view says that is why even
    # micro batch 1 does not fit, instead of blaming the training step
    text = LIGER_SFT.replace("per_device_eval_batch_size: 1", "per_device_eval_batch_size: 64")
    a = _analyze(text + "eval_strategy: steps\neval_steps: 100\n")
    est = a.estimate
    assert est.max_micro_batch is None and est.phase == "evaluation"
    phase, allocated = est.peak_at_one
    assert phase == "evaluation" and allocated > est.usable_bytes
    text_view = render_text("train.yaml", a.plan, a.resolution, est)
    assert "at micro batch 1 the evaluation phase peaks" in text_view
    from vramlens.report import estimate_json

    assert estimate_json("train.yaml", a.plan, a.resolution, est)["peak_at_micro_batch_1"]["phase"] == "evaluation"
    # a run that fits says nothing of it
    assert _analyze(LIGER_SFT).estimate.peak_at_one is None
