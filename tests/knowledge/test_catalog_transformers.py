"""Catalog entries from transformers' own config classes (their defaults, for the checkpoint their docstring names)
and from mlc-llm's published config.json copies (scripts/import_catalog_transformers.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_json import estimate_json
from importer_check import assert_reproduced
from scripts_module import load_script
from vramlens.knowledge import models
from vramlens.knowledge.schema import ModelArch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog_transformers.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data"
TRANSFORMERS_DATA = DATA / "models_imported_transformers.json"
MLC_DATA = DATA / "models_imported_mlc.json"
MLC_MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "mlc-ai+mlc-llm" / "repo"


def _script():
    return load_script("import_catalog_transformers")


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
        if entry.get("agrees_with"):
            continue  # held to the other source's shapes, not to the name (GLM-5 states no size)
        # defaults that build a size other than the one the name states are left out
        built, stated, _ = script.sized(entry["id"], arch)
        assert stated and abs(built / stated - 1) <= script.SIZE_TOLERANCE, (entry["id"], built, stated)


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
        # the catalog entry wins, unless it is approximate and these defaults agree with it (`agrees_with`)
        written = {m["id"].lower(): m for m in data["models"]}
        if record["id"].lower() in written:
            assert not record["differs"] and written[record["id"].lower()]["agrees_with"], record["id"]


def test_the_approximate_label_states_how_often_defaults_reproduce_published_shapes():
    data = _data(TRANSFORMERS_DATA)
    agree = sum(1 for r in data["checked"] if not r["differs"])
    assert 0 < agree < len(data["checked"])  # "similar" is not "equal": that is why every entry is approximate
    said = f"reproduce the published shapes of {agree} of {len(data['checked'])} checkpoints checked"
    assert all(said in m["approximate"] for m in data["models"] if not m.get("agrees_with"))


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
    result = estimate_json(config, cwd=tmp_path, env=env, offline=False)
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
    assert_reproduced(SCRIPT, MLC_MIRROR, sha, "--only", "mlc")


def test_an_omni_config_json_is_read_as_its_thinker(tmp_path):
    """Qwen2.5-Omni / Qwen3-Omni write `thinker_config` (text_config + vision/audio towers) beside the talker's:
    the model trained is the thinker, and a local config.json of either is read as it."""
    transformers = pytest.importorskip("transformers")
    for cls in (transformers.Qwen2_5OmniConfig, transformers.Qwen3OmniMoeConfig):
        config = json.loads(json.dumps(cls().to_dict(), default=str))
        text = config["thinker_config"]["text_config"]
        folder = tmp_path / cls.__name__
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        arch = models.lookup_model(str(folder), workspace=tmp_path)
        thinker = models.arch_from_hf_config(config["thinker_config"], "thinker")
        assert arch is not None and thinker is not None, cls.__name__
        assert (arch.hidden, arch.layers, arch.vocab) == (
            text["hidden_size"],
            text["num_hidden_layers"],
            text["vocab_size"],
        )
        assert arch.num_experts == text.get("num_experts", 0)
        assert models.param_count(arch) == models.param_count(thinker) and arch.vision_params > 0


def test_a_mixture_of_experts_name_stating_its_parameters_per_token_is_sized_by_them():
    script = _script()
    assert script.stated_active("Qwen1.5-MoE-A2.7B") == 2.7
    assert script.stated_active("Qwen3-30B-A3B") == 3
    assert script.stated_active("Llama-4-Scout-17B-16E") == 17
    assert script.stated_active("Meta-Llama-3-8B") is None and script.stated_active("MAGA-7B") is None
    moe = models.lookup_model("Qwen/Qwen1.5-MoE-A2.7B")
    assert moe is not None and moe.source.startswith("transformers ") and moe.approximate
    built, stated, what = script.sized(moe.id, moe)
    assert what == " per token" and stated == 2.7 and abs(built / stated - 1) <= script.SIZE_TOLERANCE
    assert models.param_count(moe) / 1e9 > 4 * built  # 60 experts, 4 per token: the weights held are the total
    scout = models.lookup_model("meta-llama/Llama-4-Scout-17B-16E")
    assert scout is not None and scout.is_moe
    assert script.sized(scout.id, scout)[1:] == (17, " per token")
    # a name's total wins where it states one and no experts count; a model with no idle experts is not sized
    # per token ("A13B" over defaults that build one expert: left out, its name states no total)
    one_expert = moe.model_copy(update={"id": "x/Foo-A13B", "num_experts": 1, "experts_per_token": 1})
    assert script.sized(one_expert.id, one_expert)[1:] == (None, "")
    assert script.sized("Qwen/Qwen3-30B-A3B", moe)[1:] == (30, "")


def test_a_multimodal_name_stating_its_language_model_size_is_sized_by_it():
    """Qwen/Qwen2.5-Omni-7B names its thinker's Qwen2.5-7B language model; its towers, talker and vocoder make 10.7B
    in all. Defaults that fit neither count are still left out."""
    pytest.importorskip("transformers")
    script = _script()
    omni = models.lookup_model("Qwen/Qwen2.5-Omni-7B")
    assert omni is not None and omni.source.startswith("transformers ") and omni.vision_params > 0
    built, stated, what = script.sized(omni.id, omni)
    assert what == " in the language model" and stated == 7 and abs(built / stated - 1) <= script.SIZE_TOLERANCE
    assert (models.param_count(omni) + omni.vision_params) / 1e9 > stated * (1 + script.SIZE_TOLERANCE)
    # the same shapes under a name that states 2.2B: neither the language model nor the whole fits it
    built, stated, what = script.sized("HuggingFaceTB/SmolVLM2-2.2B-Instruct", omni)
    assert what == "" and abs(built / stated - 1) > script.SIZE_TOLERANCE


def test_a_checkpoint_named_by_unrelated_classes_is_taken_from_the_one_its_org_spells():
    """CohereConfig and Cohere2Config both name CohereForAI/c4ai-command-r-v01, whose name spells neither model_type:
    the org does (`cohere`, not `cohere2`). GLM-4.5, named by glm4_moe and glm4_moe_lite, stays left out."""
    pytest.importorskip("transformers")
    classes, report = _script().transformers_classes()
    chosen = {model_id: cls.__name__ for model_id, _, cls in classes}
    assert chosen["CohereForAI/c4ai-command-r-v01"] == "CohereConfig"
    assert "zai-org/GLM-4.5" not in chosen and any("left out zai-org/GLM-4.5:" in line for line in report)


def test_defaults_agreeing_with_an_approximate_entry_of_another_family_are_taken_before_it():
    """slime's Megatron flags for Qwen3-Next describe a custom layer spec the Megatron reader counts as GPT layers
    (filed as `mixtral`); transformers' Qwen3NextConfig defaults state the same sizes and build the model's own
    gated DeltaNet layers, so the catalog takes them, and says where they agree."""
    by_id = {e["id"]: e for e in _data(TRANSFORMERS_DATA)["models"]}
    entry = by_id["Qwen/Qwen3-Next-80B-A3B-Instruct"]
    assert entry["agrees_with"].startswith("THUDM/slime scripts/models/qwen3-next-80B-A3B.sh")
    arch = models.lookup_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert arch is not None and arch.family == "qwen3_next"
    assert dict(arch.layer_kinds)["linear attention"] == 36 and dict(arch.layer_kinds)["attention"] == 12
    assert "every shape field the estimate compares agrees with THUDM/slime" in arch.approximate
    # the published Qwen3-Next-80B-A3B architecture: 79,674,391,296 parameters in its safetensors
    # (tests/knowledge/configs/SOURCES.md, Qwen3-Coder-Next)
    assert models.param_count(arch) == 79_674_391_296
    # an approximate entry no other source confirms is not taken before anything
    assert all(e.get("agrees_with") is None or e["approximate"] for e in by_id.values())
