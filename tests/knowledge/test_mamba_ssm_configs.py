"""config.json files in mamba_ssm's own format (the `state-spaces/*` checkpoints: mamba_ssm/models/config_mamba.py
`MambaConfig` fields, no `model_type`) are read as transformers' conversion scripts read them, and counted exactly as
transformers builds the converted model — not "estimated generically, every layer sized as attention"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from importer_check import assert_reproduced
from scripts_module import load_script
from vramlens.knowledge import models
from vramlens.knowledge.models import arch_from_hf_config, param_count
from vramlens.knowledge.ssm_configs import from_mamba_ssm, is_mamba_ssm

# the fields mamba_ssm's MambaConfig writes (state-spaces/mamba e9594ce mamba_ssm/models/config_mamba.py), at the
# sizes of the README's table ("2.8B | 64 | 2560")
MAMBA_2_8B = {
    "d_model": 2560,
    "n_layer": 64,
    "vocab_size": 50277,
    "ssm_cfg": {},
    "rms_norm": True,
    "residual_in_fp32": True,
    "fused_add_norm": True,
    "pad_vocab_size_multiple": 8,
}
MAMBA2 = {
    "d_model": 768,
    "d_intermediate": 0,
    "n_layer": 24,
    "vocab_size": 50277,
    "ssm_cfg": {"layer": "Mamba2"},
    "attn_layer_idx": [],
    "attn_cfg": {},
    "rms_norm": True,
    "residual_in_fp32": True,
    "fused_add_norm": True,
    "pad_vocab_size_multiple": 16,
    "tie_embeddings": True,
}


def _built(config: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = dict(config)
    model_type = hf.pop("model_type")
    hf.pop("architectures")
    cls = {"mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM"}[model_type]
    with torch.device("meta"):
        model = getattr(transformers, cls)(transformers.AutoConfig.for_model(model_type, **hf))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config", [MAMBA_2_8B, MAMBA2, {**MAMBA2, "ssm_cfg": {"layer": "Mamba2", "d_state": 64}}])
def test_counted_as_transformers_builds_the_conversion(config):
    assert is_mamba_ssm(config)
    hf, left_out = from_mamba_ssm(config)
    assert left_out == ""
    arch = arch_from_hf_config(config, "state-spaces/test")
    assert arch is not None
    assert arch.family == hf["model_type"]
    assert "generically" not in arch.approximate
    assert param_count(arch) == _built(hf)


def test_mamba_2_8b_is_2_8b():
    arch = arch_from_hf_config(MAMBA_2_8B, "state-spaces/mamba-2.8b")
    assert arch is not None and round(param_count(arch) / 1e9, 2) == 2.77  # not 6.84 B as attention layers


def test_attention_layers_and_mlps_it_cannot_hold_are_named():
    config = {**MAMBA2, "attn_layer_idx": [9, 18], "d_intermediate": 3072}
    arch = arch_from_hf_config(config, "state-spaces/mamba2attn-like")
    assert arch is not None
    assert "attn_layer_idx [9, 18]" in arch.approximate and "d_intermediate 3072" in arch.approximate


def test_transformers_configs_are_left_alone():
    assert not is_mamba_ssm({"model_type": "mamba", "d_model": 768, "n_layer": 24, "ssm_cfg": {}})
    assert not is_mamba_ssm({"hidden_size": 768, "num_hidden_layers": 24})


# the catalog's Mamba checkpoints (scripts/import_catalog_mamba.py: state-spaces/mamba's README table)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_catalog_mamba.py"
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_mamba.json"
MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "state-spaces+mamba" / "repo"

README = """
## Pretrained Models

Pretrained models are uploaded to
[Hugging Face](https://huggingface.co/state-spaces): `mamba-130m`, `mamba-2.8b`, `mamba2-2.7b`, `transformerpp-2.7b`,
as well as `mamba-2.8b-slimpj` and `mamba-9b`.

| Parameters | Layers | Model dim. |
|------------|--------|------------|
| 130M       | 24     | 768        |
| 2.8B       | 64     | 2560       |

## Evaluations
"""
CONFIG = """
@dataclass
class MambaConfig:
    d_model: int = 2560
    n_layer: int = 64
    vocab_size: int = 50277
    ssm_cfg: dict = field(default_factory=dict)
    pad_vocab_size_multiple: int = 8
    tie_embeddings: bool = True
"""


def test_the_readme_table_gives_the_sizes_of_the_names_it_states():
    data, report = load_script("import_catalog_mamba").build(README, CONFIG, "0" * 40)
    written = {m["id"]: (m["config"]["n_layer"], m["config"]["d_model"]) for m in data["models"]}
    assert written == {
        "state-spaces/mamba-130m": (24, 768),
        "state-spaces/mamba-2.8b": (64, 2560),
        "state-spaces/mamba-2.8b-slimpj": (64, 2560),
    }
    text = "\n".join(report)
    assert "left out mamba-9b: no row of the table states 9b" in text
    assert "left out mamba2-2.7b" in text and "left out transformerpp-2.7b" in text


def test_the_catalog_names_mamba_2_8b_offline():
    arch = models.lookup_model("state-spaces/mamba-2.8b")
    assert arch is not None and arch.family == "mamba" and round(param_count(arch) / 1e9, 2) == 2.77
    assert "state-spaces/mamba" in arch.source


def test_the_data_file_is_what_the_script_makes_from_the_readme():
    sha = json.loads(DATA.read_text(encoding="utf-8"))["source"].rsplit(" ", 1)[-1]
    assert_reproduced(SCRIPT, MIRROR, sha)
