"""ZeRO's sizes read from a DeepSpeed config (formats.deepspeed `_size`) and resolved as what runs the config fills
them (resolve.distribution `zero_sizes`): a number is that size; "auto" is the HF Trainer's fill (the estimator's
default, None) where transformers' Trainer or accelerate runs the step, and DeepSpeed's own defaults where the
config reaches `deepspeed.initialize` as written (OpenRLHF)."""

from __future__ import annotations

import pytest
from vramlens.formats import parse_document
from vramlens.plan import Sourced
from vramlens.resolve import resolve
from vramlens.settings import Settings

SIZES = ("zero_reduce_bucket", "zero3_prefetch_bucket", "zero3_persistence_threshold", "zero3_max_live_params")
SIZES += ("zero3_max_reuse_distance",)

DS_NUMBERS = """{
  "train_micro_batch_size_per_gpu": 1,
  "bf16": {"enabled": true},
  "zero_optimization": {
    "stage": 3,
    "reduce_bucket_size": 5e8,
    "allgather_bucket_size": 2e8,
    "stage3_prefetch_bucket_size": "10000000",
    "stage3_param_persistence_threshold": 0,
    "stage3_max_live_parameters": 300000000,
    "stage3_max_reuse_distance": 1e8
  }
}
"""

HF_AUTO = """model_name_or_path: Qwen/Qwen2.5-7B
per_device_train_batch_size: 1
bf16: true
deepspeed:
  zero_optimization:
    stage: 3
    reduce_bucket_size: auto
    stage3_prefetch_bucket_size: auto
    stage3_param_persistence_threshold: auto
    stage3_max_live_parameters: auto
    stage3_max_reuse_distance: auto
"""


def resolved(text: str, path: str, framework: str | None = None):
    plan = parse_document(text, path).plan
    if framework is not None:
        plan.framework = framework
    plan.model_id = plan.model_id or Sourced(value="Qwen/Qwen2.5-7B")  # a DeepSpeed JSON names no model
    return plan, resolve(plan, Settings(gpu="H100", gpu_count=8))


def test_numbers_are_the_sizes_and_nothing_is_named_not_modelled():
    plan, res = resolved(DS_NUMBERS, "ds_config.json")
    rp = res.resolved
    assert [getattr(rp, n) for n in SIZES] == [500_000_000, 10_000_000, 0, 300_000_000, 100_000_000]
    assert plan.unmodelled == [] and plan.issues == []
    assert plan.extra["zero_optimization.allgather_bucket_size"].value == 2e8  # read, allocates nothing


def test_auto_under_the_hf_trainer_is_its_fill():
    plan, res = resolved(HF_AUTO, "train.yaml")
    assert [getattr(plan, n).value for n in SIZES] == ["auto"] * 5
    assert [getattr(res.resolved, n) for n in SIZES] == [None] * 5  # h², 0.9·h², 10·h; DeepSpeed's 1e9 limits
    assert not any("`auto`" in str(a) for a in res.assumptions)


def test_auto_that_nothing_fills_is_deepspeeds_default():
    # OpenRLHF writes "auto" into the config it hands deepspeed.initialize itself (get_train_ds_config)
    text = "deepspeed --module openrlhf.cli.train_sft --pretrain Qwen/Qwen2.5-7B --zero_stage 3 --bf16\n"
    _, res = resolved(text, "train.sh")
    assert res.resolved.framework == "openrlhf"
    assert [getattr(res.resolved, n) for n in SIZES] == [5 * 10**8, 5 * 10**7, 10**5, 10**9, 10**9]


def test_auto_under_a_loop_of_unknown_kind_is_named():
    _, res = resolved(HF_AUTO, "train.yaml", framework="custom")
    assert [getattr(res.resolved, n) for n in SIZES] == [None] * 5
    assert any("DeepSpeed `auto` (reduce_bucket_size, " in str(a) for a in res.assumptions), res.assumptions


@pytest.mark.parametrize("key,value", [("reduce_bucket_size", 0), ("stage3_max_live_parameters", -1)])
def test_a_size_out_of_deepspeeds_range_is_an_issue(key, value):
    text = f'{{"zero_optimization": {{"stage": 3, "{key}": {value}}}}}'
    plan = parse_document(text, "ds_config.json").plan
    assert any(key in i.message for i in plan.issues), plan.issues


@pytest.mark.parametrize("written, expected", [("true", True), ("false", False), (None, None)])
def test_overlap_comm_sets_zero_2s_reduce_buckets(written, expected):
    # one reduce bucket, or two under overlap_comm (deepspeed 0.19.8 runtime/zero/stage_1_and_2.py `setup_buckets`);
    # unwritten, DeepSpeed's default: off below ZeRO-3 (runtime/zero/config.py `overlap_comm_valid`)
    from vramlens.estimate.components.buffers import zero2_reduce_buckets

    line = f'"overlap_comm": {written}, ' if written else ""
    text = '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
    text += f'"zero_optimization": {{"stage": 2, {line}"reduce_bucket_size": 5e8}}}}'
    plan, res = resolved(text, "ds_config.json")
    assert (plan.zero_overlap_comm.value if plan.zero_overlap_comm else None) is expected
    rp = res.resolved
    assert rp.zero_overlap_comm is expected
    assert zero2_reduce_buckets(rp) == (2 if expected else 1)
