"""Paths written in a config cannot make vramlens read outside the workspace and the Hugging Face cache:
`../../`, absolute paths and symlinks that lead out are refused with an issue saying why. A subprocess
with an audit hook proves that no file outside was even opened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from vramlens.analysis import Settings, analyze
from vramlens.formats import parse_document
from vramlens.plan import IssueKind

DS3 = json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})
TINY_QWEN = {
    "model_type": "qwen2",
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
}
HF = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n"


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A workspace, a folder beside it with a DeepSpeed JSON, an accelerate config and a model folder,
    and symlinks in the workspace that point at them."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "configs").mkdir(parents=True)
    (outside / "model").mkdir(parents=True)
    (outside / "ds.json").write_text(DS3)
    (outside / "acc.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\nnum_processes: 8\n"
    )
    (outside / "model" / "config.json").write_text(json.dumps(TINY_QWEN))
    (ws / "ds_inside.json").write_text(DS3)
    (ws / "ds_link.json").symlink_to(outside / "ds.json")
    (ws / "model_link").symlink_to(outside / "model")
    (ws / "local_model").mkdir()
    (ws / "local_model" / "config.json").write_text(json.dumps(TINY_QWEN))
    return {"ws": ws, "outside": outside}


def _vl014(plan) -> list[str]:
    return [i.message for i in plan.issues if i.kind == IssueKind.REFERENCE]


@pytest.mark.parametrize(
    "target",
    [
        "../outside/ds.json",
        "../../outside/ds.json",
        "{outside}/ds.json",
        "ds_link.json",
        "configs/../../outside/ds.json",
    ],
)
def test_deepspeed_references_outside_the_workspace_are_not_read(tree, target):
    ws = tree["ws"]
    target = target.format(outside=tree["outside"])
    cfg = ws / "configs" / "train.yaml"
    plan = parse_document(HF + f"deepspeed: {target}\n", str(cfg), workspace=ws).plan
    assert plan.zero_stage is None  # the ZeRO-3 file was not merged
    messages = _vl014(plan)
    assert any("outside the workspace" in m and "not read" in m for m in messages), messages


def test_the_same_reference_inside_the_workspace_is_read(tree):
    ws = tree["ws"]
    plan = parse_document(HF + "deepspeed: ds_inside.json\n", str(ws / "configs" / "train.yaml"), workspace=ws).plan
    assert plan.zero_stage.value == 3 and not _vl014(plan)


def test_without_a_workspace_the_documents_folder_is_the_limit(tree):
    ws = tree["ws"]
    plan = parse_document(HF + "deepspeed: ../../outside/ds.json\n", str(ws / "configs" / "train.yaml")).plan
    assert plan.zero_stage is None
    assert any("outside this file's folder" in m for m in _vl014(plan))


def test_launch_scripts_do_not_follow_config_files_out(tree):
    ws, outside = tree["ws"], tree["outside"]
    script = (
        f"accelerate launch --config_file {outside}/acc.yaml train.py --model_name_or_path Qwen/Qwen2.5-0.5B\n"
        f"deepspeed train.py --deepspeed ../outside/ds.json --model_name_or_path Qwen/Qwen2.5-0.5B\n"
    )
    plan = parse_document(script, str(ws / "run.sh"), workspace=ws).plan
    assert plan.zero_stage is None and plan.world_size is None
    assert sum("outside the workspace" in m for m in _vl014(plan)) >= 1


@pytest.mark.parametrize("name", ["{outside}/model", "../outside/model", "model_link", "~/../../{outside}/model"])
def test_local_model_folders_outside_the_workspace_are_not_read(tree, name):
    ws = tree["ws"]
    name = name.format(outside=tree["outside"])
    text = f"model_name_or_path: {name}\nper_device_train_batch_size: 2\n"
    analysis = analyze(text, str(ws / "train.yaml"), Settings(gpu="A100-80GB", workspace=ws))
    assert analysis.estimate is None
    vl017 = [f.message for f in analysis.findings if f.rule_id == "VL017"]
    assert vl017 and ("outside the workspace" in vl017[0] or "unknown model" in vl017[0]), vl017
    if name != "model_link":  # a symlink's name does not look like a path: reported as unknown
        assert "outside the workspace" in vl017[0] and "not read" in vl017[0]


def test_a_local_model_folder_inside_the_workspace_is_read(tree):
    ws = tree["ws"]
    analysis = analyze(
        "model_name_or_path: local_model\nper_device_train_batch_size: 2\n",
        str(ws / "train.yaml"),
        Settings(gpu="A100-80GB", workspace=ws),
    )
    assert analysis.estimate is not None and analysis.resolution.resolved.arch.hidden == 512


def test_the_hugging_face_cache_is_readable(tree, tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    snap = cache / "models--acme--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(TINY_QWEN))
    (cache / "models--acme--tiny" / "refs").mkdir()
    (cache / "models--acme--tiny" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    ws = tree["ws"]
    analysis = analyze(
        "model_name_or_path: acme/tiny\nper_device_train_batch_size: 2\n",
        str(ws / "train.yaml"),
        Settings(gpu="A100-80GB", workspace=ws),
    )
    assert analysis.estimate is not None and analysis.resolution.resolved.arch.hidden == 512


AUDIT = textwrap.dedent("""
    import json, os, sys
    outside = os.path.realpath(sys.argv[1])
    opened = []

    def hook(event, args):
        if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if os.path.realpath(path).startswith(outside):
                opened.append((event, path))

    from vramlens.analysis import Settings, analyze
    sys.addaudithook(hook)
    ws = sys.argv[2]
    for name, text in json.loads(sys.argv[3]):
        analyze(text, os.path.join(ws, name), Settings(gpu="A100-80GB", workspace=__import__("pathlib").Path(ws)))
    print(json.dumps(opened))
""")


def test_nothing_outside_the_workspace_is_opened(tree):
    ws, outside = tree["ws"], tree["outside"]
    docs = [
        ("a.yaml", HF + "deepspeed: ../outside/ds.json\n"),
        ("b.yaml", HF + f"deepspeed: {outside}/ds.json\n"),
        ("c.yaml", HF + "deepspeed: ds_link.json\n"),
        ("d.yaml", f"model_name_or_path: {outside}/model\nper_device_train_batch_size: 2\n"),
        ("e.yaml", "model_name_or_path: model_link\nper_device_train_batch_size: 2\n"),
        ("f.sh", f"accelerate launch --config_file {outside}/acc.yaml train.py --model_name_or_path x/y\n"),
        ("g.py", f"from transformers import TrainingArguments\nTrainingArguments(deepspeed='{outside}/ds.json')\n"),
        ("h.yaml", f"base_model: {outside}/model\nmicro_batch_size: 1\nsequence_len: 512\n"),
    ]
    env = {**os.environ, "HF_HUB_CACHE": str(ws / "no-cache")}
    out = subprocess.run(
        [sys.executable, "-c", AUDIT, str(outside), str(ws), json.dumps(docs)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
