"""Catalog entries from frameworks' per-model Megatron argument files (scripts/import_catalog_mcore.py, THUDM/slime
scripts/models/*.sh read by vramlens' own shell + Megatron reader) and remote-code models written from their published
config.json and modeling file (models_imported_remote.json)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from scripts_module import load_script
from vramlens.analysis import analyze
from vramlens.formats import parse_document
from vramlens.knowledge import models
from vramlens.knowledge.models import arch_from_hf_config, param_count
from vramlens.resolve.model import arch_from_sizes
from vramlens.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data"
FIXTURES = ROOT / "tests" / "fixtures"
SLIME = FIXTURES / "slime" / "624b824a"
SLIME_MIRROR = Path(os.environ.get("VRAMLENS_MIRRORS", "/work/.mirror")) / "THUDM+slime" / "repo"


def _script():
    return load_script("import_catalog_mcore")


def _data(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def _slime_arch(name: str):
    """The model vramlens' Megatron reader builds from a slime model file, sourced by a launch as slime's run scripts
    source it."""
    text = (SLIME / name).read_text(encoding="utf-8") + _script().LAUNCH
    plan = parse_document(text, str(SLIME / name)).plan
    assert plan is not None
    return arch_from_sizes(plan)


# ------------------------------------------------------------------------------------------- the Megatron reader


def test_megatron_ffn_hidden_size_is_the_width_of_each_gated_branch():
    """Megatron's `--ffn-hidden-size` with `--swiglu`: linear_fc1 is 2 × ffn wide (megatron/core/transformer/mlp.py),
    so Qwen2.5-7B's 18944 is the branch width, not a GPT-NeoX total to divide by 3 (which gave 3.8 B)."""
    arch = _slime_arch("qwen2.5-7B.sh")
    assert arch.intermediate == 18944
    qwen = models.find_model("Qwen/Qwen2.5-7B", None, None).arch
    assert abs(param_count(arch) / param_count(qwen) - 1) < 0.001


def test_megatron_heads_that_do_not_divide_the_width_take_the_head_size_given():
    """GLM-4.5-Air: 96 heads of `--kv-channels 128` on a 4096-wide model (a model the reader used to drop)."""
    arch = _slime_arch("glm4.5-106B-A12B.sh")
    assert arch is not None and arch.heads == 96 and arch.head_dim == 128
    assert arch.num_experts == 128 and arch.dense_layers == 1 and arch.shared_experts == 1


def test_multi_latent_attention_files_are_read_with_their_mla_sizes():
    """slime scripts/models/glm4.7-30B-A3B.sh (GLM-4.7-Flash): `--multi-latent-attention --q-lora-rank 768
    --kv-lora-rank 512 --qk-head-dim 192 --qk-pos-emb-head-dim 64 --v-head-dim 256` over 64 routed experts and one
    shared: the low-rank projections are read, and MLA is no reason to call the count approximate."""
    name = "glm4.7-30B-A3B.sh"
    arch, why = _script().read_file(name, (SLIME / name).read_text(encoding="utf-8"))
    assert (arch.kv_lora_rank, arch.q_lora_rank, arch.mla_head_dims) == (512, 768, (192, 64, 256))
    assert arch.kv_heads is None and why == []


def test_glm47_flash_is_mla_and_moe_as_transformers_builds_it():
    """GLM-4.7-Flash is transformers 5.24's glm4_moe_lite: `Glm4MoeLiteAttention(DeepseekV3Attention)` (MLA) over
    GLM-4.5's routed + shared experts. Its catalog entry is written under the family the estimate sizes MLA with
    (as deepseek-ai/DeepSeek-V3 is), not as a Mixtral with multi-head attention, and counts what transformers builds
    from the same sizes."""
    from transformers import Glm4MoeLiteConfig

    arch = models.lookup_model("zai-org/GLM-4.7-Flash")
    assert arch is not None and arch.family == models.lookup_model("deepseek-ai/DeepSeek-V3").family
    assert arch.kv_lora_rank == 512 and arch.q_lora_rank == 768 and arch.mla_head_dims == (192, 64, 256)
    assert not arch.approximate
    sizes = {"hidden_size": arch.hidden, "num_hidden_layers": arch.layers, "num_attention_heads": arch.heads}
    sizes |= {"num_key_value_heads": arch.heads, "intermediate_size": arch.intermediate, "vocab_size": arch.vocab}
    sizes |= {"moe_intermediate_size": arch.moe_intermediate, "n_routed_experts": arch.num_experts}
    sizes |= {"n_shared_experts": arch.shared_experts, "num_experts_per_tok": arch.experts_per_token}
    sizes |= {"kv_lora_rank": 512, "q_lora_rank": 768, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64}
    sizes |= {"v_head_dim": 256, "tie_word_embeddings": False}
    sizes["mlp_layer_types"] = ["dense"] * arch.dense_layers + ["sparse"] * (arch.layers - arch.dense_layers)
    built = arch_from_hf_config(Glm4MoeLiteConfig(**sizes).to_dict(), "glm4_moe_lite")
    assert built is not None and built.params_total
    assert abs(param_count(arch) / built.params_total - 1) < 0.001


# ----------------------------------------------------------------------------------------------- the data files


def _taken_before() -> set[str]:
    """Ids whose entry here yields to transformers' defaults that agree with it and build the model's own layer
    kinds (scripts/import_catalog_transformers.py `agrees_with`)."""
    return {
        e["id"]
        for e in _data("models_imported_transformers.json")["models"]
        if e.get("agrees_with", "").startswith("THUDM/slime")
    }


def test_every_entry_maps_to_an_architecture_in_the_catalog():
    taken = _taken_before()
    for name in ("models_imported_mcore.json", "models_imported_remote.json"):
        data = _data(name)
        assert data["generated_by"] == "scripts/import_catalog_mcore.py"
        for entry in data["models"]:
            assert entry["source"]
            for spelling in (entry["id"], *entry.get("aliases", ())):
                arch = models.find_model(spelling, None, None).arch
                assert arch is not None, spelling
                if entry["id"] in taken:
                    assert arch.source.startswith("transformers ") and entry["source"] in arch.approximate
            if entry["id"] not in taken:
                assert round(param_count(arch) / 1e9, 3) == entry["params_b"], entry["id"]


def test_flags_the_reader_does_not_model_make_the_entry_approximate():
    by_id = {e["id"]: e for e in _data("models_imported_mcore.json")["models"]}
    # gated DeltaNet layers from a custom layer spec, gated attention; MLA; a shell-loop --moe-layer-freq
    assert "custom layer spec" in by_id["Qwen/Qwen3-Next-80B-A3B-Instruct"]["approximate"]
    assert "gated attention" in by_id["Qwen/Qwen3.5-35B-A3B"]["approximate"]
    moonlight = by_id["moonshotai/Moonlight-16B-A3B"]["approximate"]
    assert "--moe-layer-freq" in moonlight
    # Megatron's GPT layers only: exact
    assert "approximate" not in by_id["zai-org/GLM-4.5-Air"]
    assert "approximate" not in by_id["MiniMaxAI/MiniMax-M2"]
    taken = _taken_before()
    assert {"Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3.5-35B-A3B"} <= taken
    for entry in by_id.values():
        arch = models.find_model(entry["id"], None, None).arch
        if entry["id"] not in taken:
            assert arch.approximate == entry.get("approximate", "")


def test_cross_checks_against_the_catalog_hold():
    checked = _data("models_imported_mcore.json")["checked"]
    exact = [c for c in checked if c["exact"]]
    assert len(exact) >= 10
    for c in exact:
        assert c["same_sizes"] and abs(c["ratio"] - 1) <= _script().AGREE, c


@pytest.mark.skipif(not SLIME_MIRROR.exists(), reason="no THUDM/slime mirror under the mirrors folder")
def test_data_file_is_what_the_source_gives_now():
    assert _script().main(["--check", "--git-dir", str(SLIME_MIRROR)]) == 0


# ----------------------------------------------------------------------------------------------- remote code


def test_chatglm_counts_its_grouped_query_key_value_and_gated_mlp():
    """modeling_chatglm.py: query_key_value is heads·kv_channels + 2·groups·kv_channels wide with a bias, the MLP's
    dense_h_to_4h 2 × ffn_hidden_size; the count is by construction, not approximate."""
    arch = models.find_model("THUDM/chatglm3-6b", None, None).arch
    h, layers, qkv = 4096, 28, 4096 + 2 * 2 * 128
    per_layer = h * qkv + qkv + 4096 * h + 3 * h * 13696 + 2 * h
    assert arch.kv_heads == 2 and arch.approximate == ""
    assert param_count(arch) == layers * per_layer + 2 * 65024 * h + h


def test_remote_code_families_in_the_catalog_are_by_construction():
    assert models.find_model("Qwen/Qwen-7B-Chat", None, None).arch.intermediate == 22016 // 2
    baichuan = models.find_model("baichuan-inc/Baichuan2-7B-Chat", None, None).arch
    config = _data("models_imported_remote.json")["models"]
    cfg = next(e["config"] for e in config if e["id"] == "baichuan-inc/Baichuan2-7B-Base")
    assert baichuan.approximate == "" and param_count(baichuan) == param_count(arch_from_hf_config(cfg, "b"))
    # ALiBi (13B) is not modelled: said so
    assert "ALiBi" in models.find_model("baichuan-inc/Baichuan2-13B-Chat", None, None).arch.approximate


# ----------------------------------------------------------------------------------------------- held-out files


def test_held_out_verl_moonlight_run_is_estimated_and_says_it_is_approximate():
    """verl examples/grpo_trainer/run_moonlight16b_math_megatron.sh (tests/fixtures/verl/b178a3cd, SOURCE beside it):
    moonshotai/Moonlight-16B-A3B, not in the catalog before, estimated with the Hub off."""
    path = FIXTURES / "verl" / "b178a3cd" / "run_moonlight16b_math_megatron.sh"
    os.environ["HF_HUB_OFFLINE"] = "1"
    a = analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, model_lookup=False))
    assert a.error is None and a.estimate is not None
    assert a.resolution is not None and a.resolution.resolved.arch.id == "moonshotai/Moonlight-16B-A3B"
    assert any("--moe-layer-freq" in str(x) for x in a.resolution.assumptions)
    assert a.resolution.resolved.arch.kv_lora_rank == 512  # MLA sized as MLA, not as multi-head attention


def test_checkpoints_slime_trains_from_another_models_file_resolve_to_its_shapes():
    """slime's run script for GLM-4.7 sources the GLM-4.5 355B file; its GLM-4.7-Flash page downloads the checkpoint
    under the organisation's former name; its GLM-5.2 744B-A40B page names the checkpoint its file builds."""
    glm45, glm47 = models.lookup_model("zai-org/GLM-4.5"), models.lookup_model("zai-org/GLM-4.7")
    assert glm45 is not None and glm47 is glm45
    flash = models.lookup_model("THUDM/GLM-4.7-Flash")
    assert flash is not None and flash.id == "zai-org/GLM-4.7-Flash"
    glm52 = models.lookup_model("zai-org/GLM-5.2")
    assert glm52 is not None and glm52.source.startswith("THUDM/slime scripts/models/glm5.2-744B-A40B.sh")
    assert abs(param_count(glm52) / 744e9 - 1) < 0.05 and glm52.approximate
    if SLIME_MIRROR.is_dir():
        import subprocess

        def show(path: str) -> str:
            git = ["git", f"--git-dir={SLIME_MIRROR}", "show", f"624b824a898ab0ec1fcb4d373004c7f3852bf515:{path}"]
            return subprocess.run(git, check=True, capture_output=True, text=True).stdout

        assert 'source "${SCRIPT_DIR}/models/glm4.5-355B-A32B.sh"' in show("scripts/run-glm4.7-355B-A32B.sh")
        assert "hf download zai-org/GLM-4.7 " in show("docs/en/examples/glm4.7-355B-A32B.md")
        assert "hf download THUDM/GLM-4.7-Flash " in show("docs/en/examples/glm4.7-30B-A3B.md")
        assert "hf download zai-org/GLM-5.2 " in show("docs/en/examples/glm5.2-744B-A40B.md")
