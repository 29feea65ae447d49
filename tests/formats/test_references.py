"""References to other files: found next to the config or in the workspace, merged with spans into the
referenced file, never overriding the config's own values; missing ones are VL014."""

from __future__ import annotations

from pathlib import Path

from vramlens.formats import parse_document
from vramlens.formats.references import locate_torchtune_config
from vramlens.plan import IssueKind

DS = (
    '{\n  "zero_optimization": {\n    "stage": 3,\n    "offload_param": {"device": "cpu"}\n  },\n'
    '  "train_micro_batch_size_per_gpu": 4\n}\n'
)
AXO = "base_model: m/x\nsequence_len: 512\nnum_epochs: 1\n"


def test_deepspeed_file_next_to_the_config(tmp_path: Path):
    (tmp_path / "ds.json").write_text(DS)
    cfg = tmp_path / "cfg.yaml"
    text = AXO + "micro_batch_size: 2\ndeepspeed: ds.json\n"
    p = parse_document(text, str(cfg)).plan
    assert (p.dist_strategy.value, p.zero_stage.value, p.offload_params.value) == ("deepspeed", 3, True)
    assert p.zero_stage.span.file == str((tmp_path / "ds.json").resolve()) and p.zero_stage.span.start_line == 2
    assert p.micro_batch.value == 2 and p.micro_batch.span.file == str(cfg)  # the config's own value wins
    assert p.references[0].resolved_path == str((tmp_path / "ds.json").resolve())
    assert not [i for i in p.issues if i.kind == IssueKind.REFERENCE]


def test_deepspeed_path_resolved_against_the_workspace_root(tmp_path: Path):
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "deepspeed" / "z3.json").write_text(DS)
    (tmp_path / "examples" / "train").mkdir()
    cfg = tmp_path / "examples" / "train" / "cfg.yaml"
    text = "model_name_or_path: m/x\nstage: sft\ncutoff_len: 512\ndeepspeed: examples/deepspeed/z3.json\n"
    assert parse_document(text, str(cfg)).plan.zero_stage is None  # not next to it
    p = parse_document(text, str(cfg), workspace=tmp_path).plan
    assert p.zero_stage.value == 3


def test_missing_reference_is_vl014_on_the_path(tmp_path: Path):
    text = AXO + "micro_batch_size: 2\ndeepspeed: configs/my_zero.json\n"
    p = parse_document(text, str(tmp_path / "cfg.yaml"), workspace=tmp_path).plan
    issue = next(i for i in p.issues if i.kind == IssueKind.REFERENCE)
    assert issue.severity.value == "error" and "configs/my_zero.json" in issue.message
    assert (issue.span.start_line, issue.span.start_col) == (4, 11)
    assert p.dist_strategy.value == "deepspeed" and p.zero_stage is None


def test_known_packaged_presets(tmp_path: Path):
    # axolotl's deepspeed_configs/zero2.json offloads the optimizer even though its name does not say so
    p = parse_document(
        AXO + "micro_batch_size: 1\ndeepspeed: deepspeed_configs/zero2.json\n", str(tmp_path / "cfg.yaml")
    ).plan
    assert (p.zero_stage.value, p.offload_optimizer.value) == (2, True)
    assert any(i.kind == IssueKind.REFERENCE and i.severity.value == "warning" for i in p.issues)
    # an ms-swift preset name is not a path: no issue
    p = parse_document(
        "model_name_or_path: m/x\nper_device_train_batch_size: 1\ndeepspeed: zero3_offload\n",
        str(tmp_path / "cfg.yaml"),
    ).plan
    assert (p.zero_stage.value, p.offload_optimizer.value, p.offload_params.value) == (3, True, True)
    assert "ms-swift" in p.zero_stage.note and not [i for i in p.issues if i.kind == IssueKind.REFERENCE]


def test_accelerate_deepspeed_config_file(tmp_path: Path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "z.json").write_text(DS)
    text = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds/z.json\nnum_processes: 4\n"
    p = parse_document(text, str(tmp_path / "acc.yaml")).plan
    assert (p.format, p.zero_stage.value, p.world_size.value) == ("accelerate", 3, 4)


def test_open_buffers_win_over_the_disk(tmp_path: Path):
    (tmp_path / "ds.json").write_text(DS)
    edited = DS.replace('"stage": 3', '"stage": 1')
    p = parse_document(
        AXO + "micro_batch_size: 1\ndeepspeed: ds.json\n",
        str(tmp_path / "cfg.yaml"),
        read_file=lambda path: edited if path.name == "ds.json" else None,
    ).plan
    assert p.zero_stage.value == 1


def test_broken_referenced_file(tmp_path: Path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3,}')
    p = parse_document(AXO + "micro_batch_size: 1\ndeepspeed: ds.json\n", str(tmp_path / "cfg.yaml")).plan
    assert any(i.kind == IssueKind.REFERENCE and "cannot read" in i.message for i in p.issues)


def test_remote_references_are_not_fetched(tmp_path: Path):
    p = parse_document(
        AXO + "micro_batch_size: 1\ndeepspeed: https://example.com/ds.json\n", str(tmp_path / "cfg.yaml")
    ).plan
    assert any(i.kind == IssueKind.NOT_READ and "remote" in i.message for i in p.issues)


def test_torchtune_packaged_config_names(tmp_path: Path):
    conf = tmp_path / "recipes" / "configs" / "llama3_1"
    conf.mkdir(parents=True)
    (conf / "8B_full.yaml").write_text("batch_size: 2\n")
    assert (
        locate_torchtune_config("llama3_1/8B_full", str(tmp_path / "run.sh"), tmp_path)
        == (conf / "8B_full.yaml").resolve()
    )
    assert locate_torchtune_config("llama3_1/no_such_config", str(tmp_path / "run.sh"), tmp_path) is None


def test_torchtune_packaged_configs_come_from_the_installed_torchtune(tmp_path: Path):
    """With torchtune installed (the trace extra), a packaged name resolves to the config torchtune ships."""
    import importlib.util

    import pytest

    spec = importlib.util.find_spec("recipes")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtune's packaged configs are not installed")
    found = locate_torchtune_config("llama3_1/8B_lora_single_device", str(tmp_path / "run.sh"), tmp_path)
    assert found is not None and found.parts[-3:] == ("configs", "llama3_1", "8B_lora_single_device.yaml")
