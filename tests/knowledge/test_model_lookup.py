"""Any Hugging Face model: local folders, the local cache, the Hub (a fake one on loopback), generic
architectures and vision-language models — as `vramlens estimate` shows them, run as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_hub import MAMBA_2_8B, QWEN2_VL_7B, ZEPHYR_7B, FakeHub
from vramlens.knowledge import models

REPOS = {
    "alignment-handbook/zephyr-7b-sft-full": ZEPHYR_7B,
    "Qwen/Qwen2-VL-7B-Instruct": QWEN2_VL_7B,
    "state-spaces/mamba-2.8b-hf": MAMBA_2_8B,
    "acme/private-13b": 401,
    "meta-llama/gated-70b": 403,
}


@pytest.fixture
def hub():
    server = FakeHub(dict(REPOS))
    yield server
    server.close()


def run_estimate(config: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    full.update(env, VRAMLENS_CALIBRATION="off")
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(config), "--format", "json", *flags],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env=full,
    )


def write(tmp_path: Path, name: str, model: str, extra: str = "") -> Path:
    path = tmp_path / name
    path.write_text(
        f"model_name_or_path: {model}\nper_device_train_batch_size: 1\nbf16: true\n"
        f"gradient_checkpointing: true\n{extra}",
        encoding="utf-8",
    )
    return path


def test_a_fine_tune_unknown_to_the_catalog_is_estimated_from_its_hub_config(hub, tmp_path):
    config = write(tmp_path, "sft.yaml", "alignment-handbook/zephyr-7b-sft-full")
    out = run_estimate(config, hub.env(tmp_path))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)[0] if out.stdout.startswith("[") else json.loads(out.stdout)
    assert abs(result["model"]["params"] - 7.24e9) < 0.01e9  # Mistral-7B's shapes: 7,241,732,096
    assert any("config.json (hub)" in a for a in result["assumptions"])
    assert hub.requests == [("GET", "/alignment-handbook/zephyr-7b-sft-full/resolve/main/config.json")]
    # cached: the second run reads the local Hugging Face cache, even offline
    again = run_estimate(config, {**hub.env(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0, again.stderr
    assert len(hub.requests) == 1


def test_lookup_off_by_flag_or_environment_asks_nothing(hub, tmp_path):
    config = write(tmp_path, "sft.yaml", "alignment-handbook/zephyr-7b-sft-full")
    offline = run_estimate(config, hub.env(tmp_path), "--offline")
    assert offline.returncode == 2 and "--offline" in offline.stderr
    env_off = run_estimate(config, {**hub.env(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert env_off.returncode == 2 and "HF_HUB_OFFLINE is set" in env_off.stderr
    (tmp_path / ".vramlens.toml").write_text("model_lookup = false\n", encoding="utf-8")
    project_off = run_estimate(config, hub.env(tmp_path))
    assert project_off.returncode == 2 and "not looked up" in project_off.stderr
    assert hub.requests == []


def test_private_and_gated_repositories_say_what_is_missing(hub, tmp_path):
    private = run_estimate(write(tmp_path, "a.yaml", "acme/private-13b"), hub.env(tmp_path))
    assert private.returncode == 2
    assert "huggingface-cli login" in private.stderr and "HF_TOKEN" in private.stderr
    gated = run_estimate(
        write(tmp_path, "b.yaml", "meta-llama/gated-70b"),
        {**hub.env(tmp_path), "HF_TOKEN": "hf_test_token_without_access"},
    )
    assert gated.returncode == 2
    assert "gated" in gated.stderr and "token in use has no access" in gated.stderr
    unknown = run_estimate(write(tmp_path, "c.yaml", "nobody/no-such-model"), hub.env(tmp_path))
    assert unknown.returncode == 2 and "is not a model on the Hugging Face Hub" in unknown.stderr


def test_an_architecture_without_a_dedicated_model_is_estimated_and_marked_approximate(hub, tmp_path):
    out = run_estimate(write(tmp_path, "mamba.yaml", "state-spaces/mamba-2.8b-hf"), hub.env(tmp_path))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    result = result[0] if isinstance(result, list) else result
    assert any(a.startswith("approximate: `mamba`") for a in result["assumptions"])
    assert 2.5e9 < result["model"]["params"] < 3.0e9  # published: 2.77 B


def test_a_vision_language_model_counts_its_vision_tower(hub, tmp_path):
    """LLaMA-Factory freezes the vision tower by default: its weights count, it is not trained; a TRL full
    fine-tune trains it."""
    lf = tmp_path / "lf.yaml"
    lf.write_text(
        "model_name_or_path: Qwen/Qwen2-VL-7B-Instruct\nstage: sft\ndo_train: true\n"
        "finetuning_type: full\nper_device_train_batch_size: 1\nbf16: true\ncutoff_len: 2048\n",
        encoding="utf-8",
    )
    trl = write(tmp_path, "trl.yaml", "Qwen/Qwen2-VL-7B-Instruct")
    counts = {}
    for config in (lf, trl):
        out = run_estimate(config, hub.env(tmp_path))
        assert out.returncode == 0, out.stderr
        text = subprocess.run(
            [sys.executable, "-m", "vramlens", "estimate", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **hub.env(tmp_path), "HF_HUB_OFFLINE": "1"},
        )
        found = re.search(r"([\d.]+) B params, ([\d.]+) B trainable", text.stdout)
        assert found, text.stdout + text.stderr
        counts[config.name] = (float(found[1]), float(found[2]), text.stdout)
    # Qwen2-VL-7B: 7.62 B in the language model + 0.68 B in the vision tower and merger
    assert counts["lf.yaml"][:2] == (8.29, 7.62)
    assert "vision tower: 0.68 B parameters, frozen" in counts["lf.yaml"][2]
    lf.write_text(lf.read_text(encoding="utf-8") + "freeze_vision_tower: false\n", encoding="utf-8")
    text = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(lf)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **hub.env(tmp_path), "HF_HUB_OFFLINE": "1"},
    )
    assert "8.29 B params, 8.29 B trainable" in text.stdout, text.stdout + text.stderr
    assert counts["trl.yaml"][:2] == (8.29, 8.29)
    assert "vision tower: 0.68 B parameters, trained" in counts["trl.yaml"][2]


def test_vision_configs_of_other_families_map_their_towers():
    llava = {
        "model_type": "llava",
        "text_config": {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "intermediate_size": 11008,
            "vocab_size": 32064,
        },
        "vision_config": {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "image_size": 336,
            "patch_size": 14,
        },
    }
    arch = models.arch_from_hf_config(llava, "llava-hf/llava-1.5-7b-hf")
    assert arch is not None and arch.hidden == 4096 and not arch.approximate
    assert arch.image_patches == 576  # (336 / 14)²
    assert 0.30e9 < arch.vision_params < 0.33e9  # CLIP ViT-L/14 0.30 B + projector 0.02 B


def test_absolute_model_folder_outside_the_workspace(tmp_path):
    folder = tmp_path / "elsewhere" / "my-model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(ZEPHYR_7B), encoding="utf-8")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert models.find_model(str(folder), workspace).arch is None  # an untrusted editor workspace
    assert "outside the workspace" in models.local_config_problem(str(folder), workspace)
    found = models.find_model(str(folder), workspace, any_folder=True)  # the CLI, a trusted workspace
    assert found.arch is not None and found.arch.hidden == 4096 and found.where == "local folder"
    config = write(workspace, "sft.yaml", str(folder))
    out = run_estimate(config, {"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr


def test_a_peft_adapter_is_estimated_as_its_base_model(tmp_path):
    """A repository (or folder) holding a PEFT adapter has no config.json: its adapter_config.json names the base
    model, whose shapes are used (alignment-handbook/zephyr-7b-sft-qlora adapts mistralai/Mistral-7B-v0.1)."""
    adapter = {
        "files": {
            "adapter_config.json": {
                "peft_type": "LORA",
                "r": 16,
                "base_model_name_or_path": "mistralai/Mistral-7B-v0.1",
            }
        }
    }
    hub = FakeHub({"alignment-handbook/zephyr-7b-sft-qlora": adapter})
    try:
        out = run_estimate(write(tmp_path, "dpo.yaml", "alignment-handbook/zephyr-7b-sft-qlora"), hub.env(tmp_path))
    finally:
        hub.close()
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    result = result[0] if isinstance(result, list) else result
    assert abs(result["model"]["params"] - 7.24e9) < 0.01e9
    assert any(
        "the base model of the adapter `alignment-handbook/zephyr-7b-sft-qlora`" in a for a in result["assumptions"]
    )
    folder = tmp_path / "saves" / "lora"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps(adapter["files"]["adapter_config.json"]), encoding="utf-8")
    found = models.find_model("saves/lora", tmp_path)
    assert found.arch is not None and found.arch.id == "mistralai/Mistral-7B-v0.1"


def test_an_unreachable_hub_is_said_so(tmp_path):
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "HF_ENDPOINT": f"http://127.0.0.1:{port}",
        "HF_HUB_CACHE": str(tmp_path / "cache"),
        "HF_HOME": str(tmp_path / "hf"),
    }
    out = run_estimate(write(tmp_path, "sft.yaml", "alignment-handbook/zephyr-7b-sft-full"), env)
    assert out.returncode == 2
    assert "the Hugging Face Hub could not be reached" in out.stderr and "Retrying" not in out.stderr


def test_huggingface_hub_is_never_imported(hub, tmp_path):
    """The lookup is made with the standard library (knowledge/hub.py says why)."""
    script = (
        "import sys\n"
        "import vramlens.lsp.server\n"
        "from vramlens.analysis import analyze\n"
        "analyze('model_name_or_path: Qwen/Qwen2.5-0.5B\\nper_device_train_batch_size: 1\\n', 'a.yaml')\n"
        "print('after a catalog model:', 'huggingface_hub' in sys.modules)\n"
        "a = analyze('model_name_or_path: alignment-handbook/zephyr-7b-sft-full\\n'\n"
        "            'per_device_train_batch_size: 1\\n', 'b.yaml')\n"
        "print('after a lookup:', 'huggingface_hub' in sys.modules, a.estimate is not None)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, **hub.env(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert "after a catalog model: False" in out.stdout and "after a lookup: False True" in out.stdout
