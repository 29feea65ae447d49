"""A default a framework sets in its class body under a condition — transformers' `optim` is adamw_torch up to
4.53 and, from 4.54, adamw_torch_fused when torch >= 2.8 — read from the source, dumped with its condition, and
applied for the torch and transformers versions the run uses. The two differ by a state-sized temporary in every
optimizer step (foreach AdamW's `_foreach_sqrt(exp_avg_sq)`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_json import estimate_json
from vramlens.formats import parse_document
from vramlens.frameworks import schemas
from vramlens.frameworks.argdefs import flatten, read_module
from vramlens.resolve import Settings, resolve

SOURCE_4_54 = textwrap.dedent(
    """
    from dataclasses import dataclass, field

    @dataclass
    class TrainingArguments:
        default_optim = "adamw_torch"
        if is_torch_available():
            from .pytorch_utils import is_torch_greater_or_equal_than_2_8

            if is_torch_greater_or_equal_than_2_8:
                default_optim = "adamw_torch_fused"
            else:
                default_optim = "adamw_torch"
        optim: str = field(default=default_optim, metadata={"help": "The optimizer to use."})
        computed = compute()
        other: str = field(default=computed)
    """
)

PYTHON_SCRIPT = """from transformers import AutoModelForCausalLM, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
args = TrainingArguments(output_dir="out", per_device_train_batch_size=1, bf16=True)
"""
LLAMAFACTORY = """model_name_or_path: Qwen/Qwen2.5-0.5B
stage: sft
do_train: true
finetuning_type: full
cutoff_len: 512
output_dir: out
"""


def test_a_class_body_binding_is_read_with_its_conditions():
    args = {a.name: a for a in flatten(read_module(SOURCE_4_54, "training_args.py").classes, "TrainingArguments")}
    optim = args["optim"]
    assert optim.default == "adamw_torch" and optim.type == "str" and optim.default_text is None
    assert optim.default_when == (
        ("is_torch_available() and is_torch_greater_or_equal_than_2_8", "adamw_torch_fused"),
        ("is_torch_available() and not (is_torch_greater_or_equal_than_2_8)", "adamw_torch"),
    )
    # a name bound to something that is not a literal stays the source text it was
    assert (args["other"].default, args["other"].default_text) == (None, "computed")


def test_the_transformers_dumps_hold_the_release_s_own_default():
    """Read from the wheels on PyPI (scripts/dump_framework_schemas.py): 4.46.3 binds adamw_torch alone (the
    fused line is a comment), 4.54.0 onwards add the torch >= 2.8 condition."""
    old = schemas.argument("transformers", "optim", "4.46.3")
    assert old is not None and old["default"] == "adamw_torch" and "default_when" not in old
    for version in ("4.54.0", "4.57.6", "5.24.0"):
        new = schemas.argument("transformers", "optim", version)
        assert new is not None and new["default"] == "adamw_torch", version
        assert new["default_when"] == [
            ["is_torch_available() and is_torch_greater_or_equal_than_2_8", "adamw_torch_fused"]
        ], version
    assert schemas.pick_version("transformers", "4.53.3") == "4.46.3"


def _resolved(tmp_path: Path, text: str, name: str, **versions: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    plan = parse_document(text, str(path), workspace=tmp_path).plan
    assert plan is not None
    return resolve(plan, Settings(model_lookup=False, gpu="H100-80GB", framework_versions=versions))


@pytest.mark.parametrize(
    ("versions", "optimizer", "impl"),
    [
        ({"transformers": "4.46.3", "torch": "2.8.0"}, "adamw_torch", "foreach"),
        ({"transformers": "4.57.6", "torch": "2.4.1"}, "adamw_torch", "foreach"),
        ({"transformers": "4.57.6", "torch": "2.8.0"}, "adamw_torch_fused", "fused"),
        ({"transformers": "5.24.0", "torch": "2.13.0"}, "adamw_torch_fused", "fused"),
    ],
)
@pytest.mark.parametrize(("text", "name"), [(PYTHON_SCRIPT, "train.py"), (LLAMAFACTORY, "sft.yaml")])
def test_the_default_optimizer_is_the_one_those_versions_run(tmp_path, versions, optimizer, impl, text, name):
    res = _resolved(tmp_path, text, name, **versions)
    assert (res.resolved.optimizer.name, res.resolved.optimizer_impl) == (optimizer, impl)
    told = res.sources["optimizer"].framework
    assert told.startswith(f"transformers {schemas.pick_version('transformers', versions['transformers'])} ")
    if versions["transformers"] != "4.46.3":
        assert f"torch {versions['torch']} (the frameworkVersions setting)" in told


def test_a_workspace_pinned_to_an_older_stack_sees_the_foreach_step(tmp_path):
    """What a user sees: the same script, pinned to transformers 4.46 in requirements.txt, peaks higher by the
    optimizer step's temporary and says which release's default it applied."""
    (tmp_path / "train.py").write_text(PYTHON_SCRIPT, encoding="utf-8")

    def estimate() -> dict:
        return estimate_json("train.py", cwd=tmp_path)

    (tmp_path / "requirements.txt").write_text("transformers==4.57.6\ntorch==2.8.0\n", encoding="utf-8")
    fused = estimate()
    (tmp_path / "requirements.txt").write_text("transformers==4.57.6\ntorch==2.4.1\n", encoding="utf-8")
    foreach = estimate()
    text = json.dumps(foreach)
    assert "transformers 4.57.6 (TrainingArguments.optim: " in text and "does not hold for torch 2.4.1" in text
    # the optimizer step of foreach AdamW holds one more copy of the bf16 state: 0.49 B parameters, 0.92 GiB
    grew = foreach["phases_gib"]["optimizer-step"] - fused["phases_gib"]["optimizer-step"]
    assert 0.85 < grew < 1.0, grew
    (tmp_path / "requirements.txt").write_text("transformers==4.46.3\ntorch==2.4.1\n", encoding="utf-8")
    assert "transformers 4.46.3 (TrainingArguments.optim)" in json.dumps(estimate())
