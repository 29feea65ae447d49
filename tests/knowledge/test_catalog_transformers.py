"""Catalog entries from transformers' own config classes (their defaults, for the checkpoint their docstring names)
and from mlc-llm's published config.json copies (scripts/import_catalog_transformers.py)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.knowledge import models
from vramlens.knowledge.schema import ModelArch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog_transformers.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data"
TRANSFORMERS_DATA = DATA / "models_imported_transformers.json"
MLC_DATA = DATA / "models_imported_mlc.json"
MLC_MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "mlc-ai+mlc-llm" / "repo"


@functools.cache
def _script():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("import_catalog_transformers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _data(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _recorded_transformers_version() -> str:
    return _data(TRANSFORMERS_DATA)["source"].split()[1]


def _installed_transformers_version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def test_every_transformers_entry_maps_cites_its_class_and_says_it_is_approximate():
    data = _data(TRANSFORMERS_DATA)
    assert data["generated_by"] == "scripts/import_catalog_transformers.py"
    assert len(data["models"]) >= 40
    version = _recorded_transformers_version()
    script = _script()
    for entry in data["models"]:
        arch = models.lookup_model(entry["id"])
        assert arch is not None and arch.id == entry["id"], entry["id"]
        assert arch.source.startswith(f"transformers {version} ") and f"names {entry['id']})" in arch.source
        # the reason the entry states, beside whatever the mapping itself found approximate
        assert entry["approximate"] in arch.approximate and "defaults" in arch.approximate
        # defaults that build a size other than the one the name states are left out
        stated = script.stated_size(entry["id"].rsplit("/", 1)[-1])
        total = (models.param_count(arch) + arch.vision_params) / 1e9
        assert stated and abs(total / stated - 1) <= script.SIZE_TOLERANCE, (entry["id"], total, stated)


def test_every_mlc_entry_maps_and_cites_the_preset_and_commit():
    data = _data(MLC_DATA)
    sha = data["source"].rsplit(" ", 1)[-1]
    assert len(sha) == 40 and data["models"]
    for entry in data["models"]:
        assert entry["source"].startswith(f"mlc-ai/mlc-llm {sha[:12]} python/mlc_llm/model/model_preset.py")
        assert entry["config"]["_name_or_path"] == entry["id"]  # the preset states the checkpoint; none is guessed
        arch = models.lookup_model(entry["id"])
        assert arch is not None and arch.id == entry["id"] and arch.source == entry["source"]


@pytest.mark.parametrize("path", [TRANSFORMERS_DATA, MLC_DATA], ids=["transformers", "mlc"])
def test_cross_checks_with_catalog_entries_hold(path):
    """Each checkpoint also in the catalog was compared with it; the comparison recorded is what it gives now."""
    data = _data(path)
    assert data["checked"]
    script = _script()
    for record in data["checked"]:
        known = models.lookup_model(record["id"])
        assert known is not None and known.id == record["catalog"], record["id"]
        ours = ModelArch(id=record["id"], **{k: record[k] for k in script.FIELDS})
        assert script._compare(ours, known) == {k: list(v) for k, v in record["differs"].items()}, record["id"]
        assert record["id"].lower() not in {m["id"].lower() for m in data["models"]}  # the catalog entry wins


def test_the_approximate_label_states_how_often_defaults_reproduce_published_shapes():
    data = _data(TRANSFORMERS_DATA)
    agree = sum(1 for r in data["checked"] if not r["differs"])
    assert 0 < agree < len(data["checked"])  # "similar" is not "equal": that is why every entry is approximate
    said = f"reproduce the published shapes of {agree} of {len(data['checked'])} checkpoints checked"
    assert all(said in m["approximate"] for m in data["models"])


def test_a_multimodal_entry_maps_as_its_config_json_in_a_local_folder_does(tmp_path):
    entry = next(m for m in _data(TRANSFORMERS_DATA)["models"] if m["id"] == "meta-llama/Llama-3.2-11B-Vision")
    folder = tmp_path / "Llama-3.2-11B-Vision"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(entry["config"]), encoding="utf-8")
    local = models.lookup_model(str(folder), workspace=tmp_path)
    catalog = models.lookup_model("meta-llama/Llama-3.2-11B-Vision")
    assert local is not None and catalog is not None
    assert catalog.vision_params > 0 and catalog.family == local.family == "mllama_text_model"
    assert models.param_count(catalog) == models.param_count(local)
    same = {"hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "vision_params", "layer_kinds"}
    assert {k: getattr(catalog, k) for k in same} == {k: getattr(local, k) for k in same}


def test_a_config_naming_a_checkpoint_only_transformers_describes_is_estimated_and_said_approximate(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(
        "model_name_or_path: meta-llama/Llama-3.2-11B-Vision\nper_device_train_batch_size: 1\nbf16: true\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN",)}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "cache"), VRAMLENS_CALIBRATION="off")
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(config), "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    result = result[0] if isinstance(result, list) else result
    arch = models.lookup_model("meta-llama/Llama-3.2-11B-Vision")
    assert arch is not None and arch.vision_params > 0
    assert result["model"]["params"] == models.param_count(arch) + arch.vision_params  # language model + vision
    assert result["approximate"] and any("MllamaConfig defaults" in r for r in result["approximate_reasons"])


@pytest.mark.skipif(
    _installed_transformers_version() != _recorded_transformers_version(),
    reason="the data file was generated with another transformers version than the one installed",
)
def test_transformers_data_file_is_what_the_script_makes_now():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "transformers", "--check"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.skipif(not MLC_MIRROR.is_dir(), reason="no mlc-llm mirror")
def test_mlc_data_file_is_what_the_script_makes_from_the_recorded_commit():
    sha = _data(MLC_DATA)["source"].rsplit(" ", 1)[-1]
    has = subprocess.run(["git", f"--git-dir={MLC_MIRROR}", "cat-file", "-e", f"{sha}^{{commit}}"], check=False)
    if has.returncode != 0:
        pytest.skip(f"the mlc-llm mirror does not hold {sha}")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "mlc", "--git-dir", str(MLC_MIRROR), "--commit", sha, "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
