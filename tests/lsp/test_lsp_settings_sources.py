"""Settings parsing and merging, project files, and the nvidia-smi reading (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.lsp.config import SettingsStore, client_trusts, read_client_settings
from vramlens.lsp.gpu_detect import parse_nvidia_smi
from vramlens.settings import DEFAULT_HEADROOM, Settings, merge
from vramlens.workspace_config import find_workspace_config


def test_settings_accept_every_client_shape():
    flat = read_client_settings({"gpu": "A100-40GB", "gpuCount": 2, "headroom": 0.2})
    nested = read_client_settings({"vramlens": {"gpu": "A100-40GB", "gpu_count": 2, "headroom": 0.2}})
    wrapped = read_client_settings(
        {"settings": {"vramlens": {"gpu": "A100-40GB", "gpu-count": "2", "headroom": "0.2"}}}
    )
    assert flat == nested == wrapped == {"gpu": "A100-40GB", "gpu_count": 2, "headroom": 0.2}


def test_bad_values_are_reported_and_ignored():
    problems: list[str] = []
    s = merge(
        [
            read_client_settings(
                {"gpu": 40, "gpuCount": "many", "headroom": 3, "severity": {"VL001": "loud", "vl004": "warn"}}, problems
            )
        ]
    )
    assert s.gpu is None and s.gpu_count is None and s.headroom == DEFAULT_HEADROOM
    assert s.severity == {"VL004": "warning"}
    assert len(problems) == 4
    assert any("`headroom` = 3" in p and "0 to 0.9" in p for p in problems)


def test_one_alias_table_for_every_spelling():
    """camelCase (editors), kebab and snake (TOML) name the same field; the severity words are one table."""
    for key in ("frameworkVersions", "framework-versions", "framework_versions"):
        assert merge([read_client_settings({key: {"trl": "1.7"}})]).framework_versions == {"trl": "1.7"}
    levels = merge(
        [read_client_settings({"severity": {"vl001": "info", "VL002": "warn", "VL003": "ignore", "VL004": "disabled"}})]
    ).severity
    assert levels == {"VL001": "information", "VL002": "warning", "VL003": "off", "VL004": "off"}
    assert Settings().headroom == DEFAULT_HEADROOM == 0.10


@pytest.mark.parametrize(
    "options",
    [
        None,
        {},
        {"trusted": False},
        {"trusted": "true"},
        {"trusted": "false"},
        {"trusted": 1},
        {"trusted": 0},
        {"trusted": None},
        {"trusted": [True]},
        {"vramlens": {"trusted": "yes"}},
        {"settings": {"trusted": 1}},
    ],
)
def test_only_a_json_true_trusts(options):
    assert client_trusts(options) is False


def test_trusted_true_trusts_at_the_top_or_in_the_section():
    assert client_trusts({"trusted": True})
    assert client_trusts({"vramlens": {"trusted": True}})


def test_project_file_wins_over_editor_and_nearest_file_wins(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.vramlens]\ngpu = "A10G"\nseverity = { VL004 = "off" }\n')
    team = tmp_path / "team"
    team.mkdir()
    (team / ".vramlens.toml").write_text("gpu-count = 4\n")
    doc = team / "cfg.yaml"
    store = SettingsStore(editor={"gpu": "H100-SXM", "gpu_count": 1, "headroom": 0.05})
    near = store.for_document(doc, tmp_path)
    assert near.values.gpu == "H100-SXM" and near.values.gpu_count == 4 and near.values.headroom == 0.05
    assert near.project_file == team / ".vramlens.toml"
    top = store.for_document(tmp_path / "cfg.yaml", tmp_path)
    assert top.values.gpu == "A10G" and top.gpu_origin == "pyproject.toml"
    assert top.values.severity == {"VL004": "off"}


def test_search_stops_at_the_workspace_root(tmp_path: Path):
    (tmp_path / ".vramlens.toml").write_text('gpu = "A10G"\n')
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    assert find_workspace_config(ws / "sub" / "cfg.yaml", ws) is None
    assert find_workspace_config(ws / "sub" / "cfg.yaml", None).values["gpu"] == "A10G"


def test_broken_project_file_is_reported_and_adds_no_settings(tmp_path: Path):
    (tmp_path / ".vramlens.toml").write_text('gpu = "A10G\n')
    project = find_workspace_config(tmp_path / "cfg.yaml", tmp_path)
    assert project.values == {} and "not valid TOML" in project.problems[0]
    assert SettingsStore().for_document(tmp_path / "cfg.yaml", tmp_path).values.gpu is None


def test_a_project_file_cannot_grant_trust(tmp_path: Path):
    (tmp_path / ".vramlens.toml").write_text("trusted = true\n")
    project = find_workspace_config(tmp_path / "cfg.yaml", tmp_path)
    assert "trusted" not in project.values and project.unknown == ("trusted",)


def test_nvidia_smi_output_is_read_to_a_catalog_gpu():
    out = "NVIDIA A100-SXM4-40GB, 40960 MiB\nNVIDIA A100-SXM4-40GB, 40960 MiB\n"
    gpu = parse_nvidia_smi(out)
    assert gpu is not None and gpu.name == "A100-40GB" and gpu.count == 2
    unknown = parse_nvidia_smi("NVIDIA Futurecard 9000, 24576 MiB\n")
    assert unknown is not None and "24" in unknown.name
    assert parse_nvidia_smi("") is None


def test_trace_python_setting_nested_and_dotted():
    assert read_client_settings({"vramlens": {"trace": {"python": "/envs/train/bin/python", "server": "off"}}}) == {
        "trace_python": "/envs/train/bin/python"
    }
    assert read_client_settings({"trace.python": "/envs/a/bin/python"}) == {"trace_python": "/envs/a/bin/python"}
    problems: list[str] = []
    assert read_client_settings({"trace": {"python": 3}}, problems) == {} and problems


def test_the_local_gpu_count_does_not_override_a_launchers_process_count(tmp_path):
    """nvidia-smi found one GPU on this machine: a config launched on 8 processes is still estimated on 8, and a
    config without a launcher on the GPUs found here."""
    from vramlens.analysis import analyze

    (tmp_path / "zero3.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
        "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 8\n",
        encoding="utf-8",
    )
    launch = tmp_path / "run.sh"
    launch.write_text(
        "accelerate launch --config_file zero3.yaml train.py --model_name_or_path "
        "meta-llama/Llama-3.1-8B --per_device_train_batch_size 1\n",
        encoding="utf-8",
    )
    plain = tmp_path / "sft.yaml"
    plain.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 1\n", encoding="utf-8")
    store = SettingsStore(detected={"gpu": "A100-80GB", "gpu_count": 1})
    for path, gpus in ((launch, 8), (plain, 1)):
        settings = store.for_document(path, tmp_path).values.model_copy(update={"workspace": tmp_path})
        a = analyze(path.read_text(encoding="utf-8"), str(path), settings)
        assert a.resolution.resolved.gpu_count == gpus
    store = SettingsStore(detected={"gpu": "H100", "gpu_count": 4})
    settings = store.for_document(plain, tmp_path).values.model_copy(update={"workspace": tmp_path})
    assert analyze(plain.read_text(encoding="utf-8"), str(plain), settings).resolution.resolved.gpu_count == 4
