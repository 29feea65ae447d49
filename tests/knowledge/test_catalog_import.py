"""The imported part of the model catalog (scripts/import_catalog.py from litgpt's config table) and fine-tunes
estimated with the shapes of the base their name states."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_json import estimate_json
from fake_hub import ZEPHYR_7B, FakeHub
from scripts_module import load_script
from vramlens.knowledge import models

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported.json"
# a bare clone of Lightning-AI/litgpt (the mirrors folder benchmarks/held_out.py reads); skipped without one
LITGPT_MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "Lightning-AI+litgpt" / "repo"


def _script():
    return load_script("import_catalog")


# Excerpt of Lightning-AI/litgpt litgpt/config.py (commit 26857050fe3f): the Config dataclass fields the import reads,
# one pythia entry with its `-deduped` copies, and the falcon loop that formats names.
LITGPT_EXCERPT = """
from copy import deepcopy
from dataclasses import dataclass, field


@dataclass
class Config:
    name: str = ""
    hf_config: dict = field(default_factory=dict)
    block_size: int = 4096
    n_layer: int = 16
    n_embd: int = 4096
    vocab_size: int = 50254
    padding_multiple: int = 512
    padded_vocab_size: int | None = None
    norm_class_name: str = "LayerNorm"
    parallel_residual: bool = True
    shared_attention_norm: bool = False
    n_head: int = 32
    head_size: int | None = None
    n_query_groups: int | None = None
    attn_bias: bool = False
    rotary_percentage: float = 0.25
    intermediate_size: int | None = None
    bias: bool = True
    mlp_class_name: str = "GptNeoxMLP"
    n_expert: int = 0
    n_expert_per_token: int = 0

    def __post_init__(self):
        raise RuntimeError("never run")


configs = []
pythia = [
    # https://huggingface.co/EleutherAI/pythia-1b/blob/main/config.json
    dict(
        name="pythia-1b",
        hf_config=dict(org="EleutherAI", name="pythia-1b"),
        block_size=2048,
        n_embd=2048,
        n_head=8,
        padding_multiple=128,
    ),
]
configs.extend(pythia)
for c in pythia:
    if c["name"] in ("pythia-14m", "pythia-31m"):
        continue
    copy = deepcopy(c)
    copy["name"] = f"{c['name']}-deduped"
    copy["hf_config"]["name"] = f"{c['hf_config']['name']}-deduped"
    configs.append(copy)

falcon = [
    dict(
        name="falcon-7b{}",
        hf_config=dict(org="tiiuae", name="falcon-7b{}"),
        block_size=2048,
        vocab_size=65024,
        padded_vocab_size=65024,
        n_layer=32,
        n_head=71,
        n_embd=4544,
        rotary_percentage=1.0,
        n_query_groups=1,
        bias=False,
        shared_attention_norm=True,
        sliding_window_indices=[1 if i % 2 == 0 else 0 for i in range(4)],
    ),
]
for c in falcon:
    for kind in ("", "-instruct"):
        copy = deepcopy(c)
        copy["name"] = c["name"].format(kind)
        copy["hf_config"]["name"] = c["hf_config"]["name"].format(kind)
        configs.append(copy)
name_to_config = {config["name"]: config for config in configs}
"""


def test_litgpt_table_is_read_with_its_defaults_and_loops_without_running_it():
    script = _script()
    configs, skipped = script.litgpt_configs(LITGPT_EXCERPT)
    names = [c["name"] for c in configs]
    assert names == ["pythia-1b", "pythia-1b-deduped", "falcon-7b", "falcon-7b-instruct"]
    pythia = configs[1]
    assert pythia["hf_config"] == {"org": "EleutherAI", "name": "pythia-1b-deduped"}
    # over the dataclass defaults, completed as Config.__post_init__ does: 16 layers, 50254 padded to 50304
    assert (pythia["n_layer"], pythia["padded_vocab_size"], pythia["intermediate_size"]) == (16, 50304, 8192)
    assert (pythia["head_size"], pythia["n_query_groups"]) == (256, 8)
    assert len(skipped) == 1 and skipped[0].endswith(": DictComp")  # name_to_config: said, not guessed
    entry, why = script.to_entry(configs[3])
    assert why == "" and entry is not None
    assert entry["id"] == "tiiuae/falcon-7b-instruct" and entry["kv_heads"] == 1 and entry["family"] == "falcon"


def test_a_name_no_rule_covers_is_skipped_with_the_reason():
    script = _script()
    configs, _ = script.litgpt_configs(LITGPT_EXCERPT.replace('name="pythia-1b"', 'name="acme-1b"'))
    entry, why = script.to_entry(configs[0])
    assert entry is None and "no family rule" in why


def test_imported_shapes_reproduce_every_hand_entry_litgpt_also_has():
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert data["source"].startswith("Lightning-AI/litgpt litgpt/config.py at ")
    assert len(data["checked"]) >= 50
    script = _script()
    for record in data["checked"]:
        hand = models.lookup_model(record["id"])
        assert hand is not None and hand.id == record["catalog"], record["id"]
        differ = {k: v for k, v in script._effective(record, hand).items() if v[0] != v[1]}
        assert not differ, (record["id"], differ)


def test_imported_models_are_in_the_catalog_with_their_source_and_a_size_that_fits_the_name():
    data = json.loads(DATA.read_text(encoding="utf-8"))
    imported = {m["id"] for m in data["models"]}
    assert {"EleutherAI/pythia-1b-deduped", "tiiuae/Falcon3-7B-Instruct", "codellama/CodeLlama-34b-hf"} <= imported
    script = _script()
    for model_id in imported:
        arch = models.lookup_model(model_id)
        assert arch is not None and arch.id == model_id and "litgpt" in arch.source
        assert arch.params_b == pytest.approx(models.param_count(arch) / 1e9, abs=1e-3)
    pythia = models.lookup_model("EleutherAI/pythia-1b")
    # pythia-1b: 1,011,781,632 parameters (EleutherAI/pythia README, "Models" table)
    assert models.param_count(pythia) == pytest.approx(1_011_781_632, rel=0.001)
    stated = script.stated_size("Falcon3-7B-Instruct")
    assert stated == 7 and abs(models.lookup_model("tiiuae/Falcon3-7B-Instruct").params_b / stated - 1) < 0.15


def test_hand_entries_win_over_imported_ones():
    arch = models.lookup_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert arch is not None and arch.id == "mistralai/Mixtral-8x7B-v0.1" and "litgpt Mixtral" in arch.source


@pytest.mark.skipif(not LITGPT_MIRROR.is_dir(), reason="no litgpt mirror")
def test_data_file_is_what_the_script_makes_from_the_recorded_commit():
    sha = json.loads(DATA.read_text(encoding="utf-8"))["source"].rsplit(" ", 1)[-1]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--git-dir", str(LITGPT_MIRROR), "--commit", sha, "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


# ----------------------------------------------------------------------------------------------- by name


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("OpenRLHF/Llama-3-8b-sft-mixture", "meta-llama/Meta-Llama-3-8B"),
        ("OpenLLMAI/Llama-2-7b-sft-model-ocra-500k", "meta-llama/Llama-2-7b-hf"),
        ("trl-lib/pythia-1b-deduped-tldr-sft", "EleutherAI/pythia-1b"),  # -1b and -1b-deduped: the same shapes
    ],
)
def test_a_fine_tune_named_after_its_base_gets_the_base_shapes_and_says_so(name, base):
    assert models.find_model(name).arch is None  # only when asked for (the estimate asks)
    found = models.find_model(name, by_name=True)
    assert found.arch is not None and found.arch.id == base
    assert found.assumed == f"shapes of {base} assumed from the name `{name}`; the Hub is off"


@pytest.mark.parametrize(
    "name",
    [
        "HuggingFaceH4/mistral-7b-sft-beta",  # Mistral-7B v0.1 (vocab 32000) or v0.3 (32768): no guess
        "huggyllama/llama-7b",  # LLaMA-1: no catalog series `llama`
        "alignment-handbook/zephyr-7b-sft-full",  # zephyr-7b-beta is a Mistral-7B alias, not a family
        "acme/7b-sft",  # a size and no series
        "./checkpoints/llama-2-7b-sft",  # a local folder, not a Hub id
        "models/llama3-8b-pro",  # a (missing) folder: LLaMA-Pro adds layers to its base
        "ISTA-DASLab/Meta-Llama-3-8B-Instruct-AQLM-2Bit-1x16",  # 2-bit weights: not the base's bf16
    ],
)
def test_no_base_is_guessed_between_different_shapes_or_for_a_path(name):
    found = models.find_model(name, by_name=True)
    assert found.arch is None or found.where != "catalog (by name)"


def test_a_pending_hub_answer_is_waited_for():
    from vramlens.knowledge.hub import HubAnswer

    found = models.find_model("OpenRLHF/Llama-3-8b-sft-mixture", hub=lambda _: HubAnswer(pending=True), by_name=True)
    assert found.arch is None and found.pending


def _estimate(config: Path, env: dict[str, str]) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    full.update(env, VRAMLENS_CALIBRATION="off")
    return estimate_json(config, cwd=config.parent, env=full, offline=False)


def test_the_estimate_says_the_shapes_are_assumed_and_the_hub_config_wins(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(
        "model_name_or_path: OpenRLHF/Llama-3-8b-sft-mixture\nper_device_train_batch_size: 1\nbf16: true\n",
        encoding="utf-8",
    )
    offline = _estimate(config, {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache")})
    assert offline["model"]["params"] == models.param_count(models.lookup_model("meta-llama/Meta-Llama-3-8B"))
    said = [a for a in offline["assumptions"] if "assumed from the name `OpenRLHF/Llama-3-8b-sft-mixture`" in a]
    assert said and "shapes of meta-llama/Meta-Llama-3-8B" in said[0]
    assert offline["approximate"] and any("assumed from the name" in a for a in offline["approximate_reasons"])
    hub = FakeHub({"OpenRLHF/Llama-3-8b-sft-mixture": ZEPHYR_7B})  # served: Mistral-7B's shapes
    try:
        online = _estimate(config, hub.env(tmp_path))
    finally:
        hub.close()
    assert abs(online["model"]["params"] - 7.24e9) < 0.01e9
    assert not any("assumed from the name" in a for a in online["assumptions"])


def test_a_misspelt_catalog_id_is_not_taken_for_a_fine_tune_of_it():
    from vramlens.knowledge.models import catalog_by_name, suggest_model

    assert catalog_by_name("Qwen/Qwen2.5-0.5B-Instrukt") is None
    assert suggest_model("Qwen/Qwen2.5-0.5B-Instrukt")[0].startswith("Qwen/Qwen2.5-0.5B")
    assert catalog_by_name("OpenRLHF/Llama-3-8b-sft-mixture") is not None
