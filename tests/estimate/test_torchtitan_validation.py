"""torchtitan's `[validation]`: when enabled, a no-grad forward of `validation.local_batch_size` sequences runs after
each validated step, while that step's gradients are still allocated (torchtitan v0.2.2 train.py zeroes them when
the next step begins); off by default."""

from __future__ import annotations

from vramlens.estimate import estimate
from vramlens.formats import parse_document
from vramlens.resolve import Settings, resolve

BASE = """\
[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 1
seq_len = 2048
steps = 100

[parallelism]
data_parallel_shard_degree = -1
"""


def _run(extra: str = ""):
    plan = parse_document(BASE + extra, "train.toml").plan
    resolution = resolve(plan, Settings(gpu="H100", gpu_count=8))
    return plan, resolution.resolved, estimate(resolution.resolved)


def test_no_validation_phase_unless_it_is_enabled():
    _, rp, est = _run()
    assert not rp.evaluation and "evaluation" not in est.phases
    _, rp, est = _run("\n[validation]\nlocal_batch_size = 16\n")  # set, but not enabled
    assert not rp.evaluation and "evaluation" not in est.phases


def test_an_enabled_validation_runs_its_batch_beside_the_gradients():
    _, rp, est = _run("\n[validation]\nenable = true\nlocal_batch_size = 16\n")
    assert rp.evaluation and rp.eval_batch == 16 and rp.eval_with_gradients
    _, small_rp, small = _run("\n[validation]\nenable = true\nlocal_batch_size = 1\n")
    assert small_rp.eval_batch == 1
    # the gradients of the step are counted in the validation phase, and a larger batch costs more
    assert est.phases["evaluation"] > small.phases["evaluation"]
    without = estimate(small_rp.with_changes(eval_with_gradients=False)).phases["evaluation"]
    assert small.phases["evaluation"] > without
    # JobConfig's default validation batch (8) when enabled without one
    _, rp, _ = _run("\n[validation]\nenable = true\n")
    assert rp.eval_batch == 8


def test_a_validation_length_other_than_the_training_one_is_named():
    plan, rp, _ = _run("\n[validation]\nenable = true\nseq_len = 8192\n")
    assert any(u.key == "validation.seq_len" and "8192" in u.what for u in plan.unmodelled), plan.unmodelled
    assert any("validation" in r for r in rp.approximate)
    plan, _, _ = _run("\n[validation]\nenable = true\nseq_len = 2048\n")
    assert not plan.unmodelled
