"""Unknown values get a VL015 issue on the value, with the spelling the format accepts."""

from __future__ import annotations

import pytest
from vramlens.formats import parse_document
from vramlens.plan import IssueKind


def vl015(text: str, path: str = "/ws/cfg.yaml"):
    plan = parse_document(text, path).plan
    assert plan is not None
    found = [i for i in plan.issues if i.kind == IssueKind.UNKNOWN_VALUE]
    return plan, found


def test_hf_optimizer_typo():
    plan, found = vl015("model_name_or_path: m/x\nper_device_train_batch_size: 1\noptim: adamw_8bit_bnb\n")
    assert found[0].suggestion == "adamw_bnb_8bit"
    assert (found[0].span.start_line, found[0].span.start_col, found[0].span.end_col) == (2, 7, 21)
    assert plan.optimizer.value == "adamw_8bit_bnb"  # kept as written; resolve decides what it costs


def test_removed_hf_optimizer():
    _, found = vl015("model_name_or_path: m/x\nper_device_train_batch_size: 1\noptim: adamw_hf\n")
    assert found and found[0].suggestion == "adamw_torch" and "removed" in found[0].message


def test_axolotl_accepts_its_own_optimizers():
    base = "base_model: m/x\nmicro_batch_size: 1\nsequence_len: 512\nnum_epochs: 1\n"
    assert not vl015(base + "optimizer: ao_adamw_8bit\n")[1]
    assert vl015(base + "optimizer: pagedadamw_8bit\n")[1][0].suggestion == "paged_adamw_8bit"


@pytest.mark.parametrize(
    "text,suggestion",
    [
        # transformers rejects short forms
        ("model_name_or_path: m/x\nper_device_train_batch_size: 1\nattn_implementation: flash\n", "flash_attention_2"),
        (
            "model_name_or_path: m/x\nper_device_train_batch_size: 1\nattn_implementation: flash_attention2\n",
            "flash_attention_2",
        ),
        ("base_model: m/x\nmicro_batch_size: 1\nsequence_len: 512\nnum_epochs: 1\nattn_implementation: sdp\n", "sdpa"),
        ("model_name_or_path: m/x\nstage: sft\ncutoff_len: 512\nflash_attn: fa_2\n", "fa2"),
    ],
)
def test_attention_spellings(text, suggestion):
    assert vl015(text)[1][0].suggestion == suggestion


def test_hub_kernels_are_accepted():
    assert not vl015(
        "model_name_or_path: m/x\nper_device_train_batch_size: 1\n"
        "attn_implementation: kernels-community/vllm-flash-attn3\n"
    )[1]


@pytest.mark.parametrize(
    "text,suggestion",
    [
        ("model_name_or_path: m/x\nstage: sft\ncutoff_len: 512\nfinetuning_type: lora_\n", "lora"),
        ("distributed_type: DEEPSPEEED\nnum_processes: 2\n", "DEEPSPEED"),
        ("distributed_type: MULTI_GPU\nmixed_precision: bf61\nnum_processes: 2\n", "bf16"),
        (
            "checkpoint_dir: checkpoints/m/x\nprecision: bf16-true\nquantize: nf4\ndevices: 1\n"
            "train:\n  micro_batch_size: 1\n",
            "bnb.nf4",
        ),
        (
            "checkpoint_dir: checkpoints/m/x\nprecision: bf16_true\ndevices: 1\ntrain:\n  micro_batch_size: 1\n",
            "bf16-true",
        ),
        ("model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\nbatch_size: 1\ndtype: bf61\n", "bf16"),
        ("base_model: m/x\nmicro_batch_size: 1\nsequence_len: 512\nnum_epochs: 1\nadapter: qlorra\n", "qlora"),
    ],
)
def test_enumerated_values(text, suggestion):
    found = vl015(text)[1]
    assert found and found[0].suggestion == suggestion, found


def test_torchtune_optimizer_class_near_miss():
    text = (
        "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\nbatch_size: 1\n"
        "optimizer:\n  _component_: bitsandbytes.optim.PagedAdamW8Bit\n"
    )
    assert vl015(text)[1][0].suggestion == "bitsandbytes.optim.PagedAdamW8bit"
    # any other class is the user's own business
    assert not vl015(text.replace("bitsandbytes.optim.PagedAdamW8Bit", "my_project.optim.Sophia"))[1]


def test_unknown_model_ids_are_left_to_resolve():
    assert not vl015("model_name_or_path: not-a/real-model\nper_device_train_batch_size: 1\n")[1]
