"""A fix never changes a definition that another part of the file also uses: a YAML anchor that an alias or a
`<<:` merge repeats elsewhere, a Python dict that two `SFTConfig(**common)` calls splat. The change is written as
an override in the section being fixed when the format can say so (own keys win over merged ones; `**common` →
`**{**common, "key": value}`), else the fix has no edits and its note says why; the other users keep their
values."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
import yaml
from vramlens.formats import parse_document
from vramlens.formats.render import render_change
from vramlens.text import apply_edits

pytest.importorskip("vramlens.formats.render_yaml")


def change(text: str, changes: dict, path: str):
    plan = parse_document(text, path).plan
    assert plan is not None
    result = render_change(text, plan, changes)
    assert result is not None
    return apply_edits(text, result.edits, path), result


# -- YAML: a torchtune optimizer taken from an anchor ------------------------------------------------------------

TORCHTUNE = """\
output_dir: /tmp/out
model:
  _component_: torchtune.models.llama3_1.llama3_1_8b
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/tok
  max_seq_len: 4096
adamw: &opt
  _component_: torch.optim.AdamW
  lr: 2e-5
  fused: False
{optimizer}
reference_optimizer: *opt
batch_size: 8
enable_activation_checkpointing: False
dtype: bf16
device: cuda
"""
TT = "/ws/full_finetune.yaml"


@pytest.mark.parametrize(
    "optimizer",
    [
        "optimizer: *opt",  # a plain alias
        "optimizer:\n  <<: *opt",  # a block mapping that only merges the anchor
        "optimizer: {<<: *opt}",  # a flow mapping that only merges it
        "optimizer:\n  <<: *opt\n  lr: 1e-5",  # a merge beside keys of its own
    ],
    ids=["alias", "block-merge", "flow-merge", "merge-and-own-keys"],
)
def test_an_anchored_optimizer_is_overridden_in_its_own_section(optimizer):
    text = TORCHTUNE.format(optimizer=optimizer)
    new, result = change(text, {"optimizer_impl": "fused"}, TT)
    assert result.edits, result.note
    data = yaml.safe_load(new)
    assert data["optimizer"]["fused"] is True  # the run being fixed
    assert data["adamw"]["fused"] is False and data["reference_optimizer"]["fused"] is False  # the others
    assert data["optimizer"]["_component_"] == "torch.optim.AdamW"  # the rest still comes from the anchor
    assert parse_document(new, TT).plan.optimizer_impl.value == "fused"


def test_an_entry_of_an_anchor_its_own_section_defines_is_refused_with_the_reason():
    """`optimizer: &opt {...}` used again as `reference_optimizer: *opt`: no override can be written inside the
    anchor itself, so the fix has no edits and says which anchor."""
    text = TORCHTUNE.format(optimizer="").replace("adamw: &opt", "optimizer: &opt")
    new, result = change(text, {"optimizer_impl": "fused"}, TT)
    assert new == text and not result.edits
    assert "`&opt` (line 8)" in result.note and "optimizer.fused" in result.note


def test_a_change_that_must_remove_a_merged_key_is_refused_whole():
    """8-bit AdamW drops `fused:` (bitsandbytes takes no such argument); a merged `fused` cannot be removed for one
    section, and writing only the new class would leave a broken optimizer: no edit at all."""
    text = TORCHTUNE.format(optimizer="optimizer: *opt")
    new, result = change(text, {"optimizer": "adamw_bnb_8bit"}, TT)
    assert new == text and not result.edits and "cannot be removed" in result.note


def test_an_anchor_no_alias_uses_is_edited_in_place():
    text = (
        TORCHTUNE.format(optimizer="")
        .replace("adamw: &opt", "optimizer: &opt")
        .replace("reference_optimizer: *opt\n", "")
    )
    new, result = change(text, {"optimizer_impl": "fused"}, TT)
    assert "  fused: True\n" in new and yaml.safe_load(new)["optimizer"]["fused"] is True


# -- YAML: top-level keys merged from an anchor that another section merges too ------------------------------------

TRL = """\
base: &b
  per_device_train_batch_size: 16
  gradient_checkpointing: false
eval_defaults:
  <<: *b
model_name_or_path: mistralai/Mistral-7B-v0.1
<<: *b
torch_dtype: bfloat16
bf16: true
max_length: 4096
output_dir: out
"""


def test_top_level_keys_merged_from_an_anchor_are_set_at_the_top_level():
    new, result = change(TRL, {"micro_batch": 4, "grad_accum": 4, "grad_checkpointing": True}, "/ws/sft.yaml")
    data = yaml.safe_load(new)
    assert (
        data["per_device_train_batch_size"],
        data["gradient_accumulation_steps"],
        data["gradient_checkpointing"],
    ) == (4, 4, True)
    assert data["base"] == data["eval_defaults"] == {"per_device_train_batch_size": 16, "gradient_checkpointing": False}
    assert new.startswith(TRL.split("model_name_or_path")[0])  # the anchor's lines are untouched


def test_a_scalar_anchor_another_key_aliases_is_refused():
    text = (
        "model_name_or_path: Qwen/Qwen2.5-7B\nper_device_train_batch_size: &bs 16\n"
        "per_device_eval_batch_size: *bs\nmax_length: 4096\nbf16: true\noutput_dir: out\n"
    )
    new, result = change(text, {"micro_batch": 4}, "/ws/sft.yaml")
    assert new == text and not result.edits and "`&bs`" in result.note


# -- Python: a dict two configs splat ------------------------------------------------------------------------------

DICT_CALL = """\
from trl import SFTConfig, SFTTrainer

common = dict(
    per_device_train_batch_size=16,
    gradient_accumulation_steps=1,
    max_length=4096,
    bf16=True,
)
train_args = SFTConfig(output_dir="out/a", **common)
{second}trainer = SFTTrainer(model="Qwen/Qwen2.5-7B", args=train_args)
"""
DICT_LITERAL = DICT_CALL.replace(
    """common = dict(
    per_device_train_batch_size=16,
    gradient_accumulation_steps=1,
    max_length=4096,
    bf16=True,
)""",
    """common = {
    "per_device_train_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "max_length": 4096,
    "bf16": True,
}""",
)
SECOND = 'eval_args = SFTConfig(output_dir="out/b", **common)\n'
PY = "/ws/train.py"


def _configs(text: str) -> list[dict]:
    """Each SFTConfig call's keyword arguments, as Python would pass them (`**` dicts expanded)."""
    tree = ast.parse(text)
    env: dict = {}
    for st in tree.body:
        if type(st) is ast.Assign and getattr(st.targets[0], "id", "") == "common":
            env["common"] = eval(compile(ast.Expression(st.value), PY, "eval"), {"dict": dict})
    out = []
    for node in ast.walk(tree):
        if type(node) is ast.Call and getattr(node.func, "id", "") == "SFTConfig":
            kwargs: dict = {}
            for kw in node.keywords:
                value = eval(compile(ast.Expression(kw.value), PY, "eval"), dict(env))
                if kw.arg is None:
                    assert not set(value) & set(kwargs), "a keyword given twice"
                    kwargs.update(value)
                else:
                    assert kw.arg not in kwargs, "a keyword given twice"
                    kwargs[kw.arg] = value
            out.append(kwargs)
    return out


@pytest.mark.parametrize("template", [DICT_CALL, DICT_LITERAL], ids=["dict-call", "dict-literal"])
def test_a_dict_two_configs_splat_is_overridden_in_the_config_the_run_reads(template):
    text = template.replace("{second}", SECOND)
    new, result = change(text, {"micro_batch": 4, "grad_accum": 4}, PY)
    train, other = _configs(new)
    assert (train["per_device_train_batch_size"], train["gradient_accumulation_steps"]) == (4, 4)
    assert (other["per_device_train_batch_size"], other["gradient_accumulation_steps"]) == (16, 1)  # unchanged
    assert parse_document(new, PY).plan.micro_batch.value == 4

    new, _ = change(text, {"amp_dtype": "fp16"}, PY)  # a key added beside `**common` is not given twice
    train, other = _configs(new)
    assert (train.get("bf16"), train.get("fp16")) == (False, True) and other["bf16"] is True


@pytest.mark.parametrize("template", [DICT_CALL, DICT_LITERAL], ids=["dict-call", "dict-literal"])
def test_a_dict_one_config_splats_is_edited_in_place(template):
    text = template.replace("{second}", "")
    new, _ = change(text, {"micro_batch": 4, "grad_accum": 4}, PY)
    assert "**common)" in new  # the call is as it was: the dict holds the change
    (train,) = _configs(new)
    assert (train["per_device_train_batch_size"], train["gradient_accumulation_steps"]) == (4, 4)


def test_a_shared_dict_the_config_reads_through_another_name_is_refused():
    text = DICT_CALL.replace("{second}", SECOND).replace(
        'train_args = SFTConfig(output_dir="out/a", **common)',
        'train_kwargs = {**common, "output_dir": "out/a"}\ntrain_args = SFTConfig(**train_kwargs)',
    )
    new, result = change(text, {"micro_batch": 4}, PY)
    assert new == text and not result.edits
    assert "`per_device_train_batch_size` is set in `common`" in result.note


# -- what `check --fix` says ---------------------------------------------------------------------------------------

SHARED_BATCH = (
    "model_name_or_path: mistralai/Mistral-7B-v0.1\ntorch_dtype: bfloat16\nbf16: true\n"
    "per_device_train_batch_size: &bs 32\nper_device_eval_batch_size: *bs\nmax_length: 4096\n"
    "output_dir: out\n"
)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_check_fix_says_why_it_left_a_change_to_a_shared_anchor(tmp_path, fmt):
    """The micro-batch trade would edit `&bs`, which the eval batch uses too: --fix leaves it and says why in
    `not_applied` (JSON) and in its text output, never an empty list."""
    config = tmp_path / "sft.yaml"
    config.write_text(SHARED_BATCH, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", config.name, "--gpu", "A100-80GB", "--fix", "--format", fmt],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if fmt == "json":
        lines = json.loads(run.stdout)["files"][0]["not_applied"]
    else:
        lines = [line.strip() for line in run.stdout.splitlines() if "not applied" in line]
    refused = [x for x in lines if "micro-batch" in x]
    assert refused and "`&bs` (line 4)" in refused[0] and "not applied" in refused[0], run.stdout
    assert "per_device_train_batch_size: &bs 32\nper_device_eval_batch_size: *bs\n" in config.read_text("utf-8")
