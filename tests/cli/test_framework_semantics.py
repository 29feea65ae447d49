"""`vramlens estimate` reads each framework's own training semantics: LLaMA-Factory's fp32
upcast of trainable weights, ms-swift's AMP from `torch_dtype`, open-instruct's defaults, freeze tuning, LLaMA-Pro,
LISA and GaLore, unsloth's step and task heads — run as a user runs it (a subprocess on fixture configs written in
the style of each project)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "semantics"


def cli(name: str, *args: str, gpu: str = "H100-80GB") -> dict:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", name, "--gpu", gpu, *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=FIXTURES,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def parts(result: dict) -> dict:
    return result["components_gib"]


def gib(n_params: float, bytes_per_param: float, ranks: int = 1) -> float:
    return n_params * bytes_per_param / ranks / 2**30


# --- 1. LLaMA-Factory precision --------------------------------------------------------------------------------------


def test_llamafactory_full_tuning_upcasts_trainable_weights_to_fp32_unless_pure_bf16():
    amp, pure = cli("llamafactory_full_sft.yaml"), cli("llamafactory_full_pure_bf16.yaml")
    n = amp["model"]["params"]
    assert parts(amp)["weights"] == pytest.approx(gib(n, 4), abs=0.02)  # fp32 weights under bf16 autocast
    assert parts(pure)["weights"] == pytest.approx(gib(n, 2), abs=0.02)
    for name in ("weights", "gradients", "optimizer"):
        assert parts(amp)[name] == pytest.approx(2 * parts(pure)[name], rel=0.01), name
    assert amp["peak"]["device_gib"] > 1.9 * pure["peak"]["device_gib"] * 0.95
    assert any("upcasts the trainable weights to fp32" in a for a in amp["assumptions"])
    assert not any("upcasts" in a for a in pure["assumptions"])


def test_llamafactory_zero3_keeps_16bit_weights_with_an_fp32_master_copy():
    ds3 = cli("llamafactory_full_ds3.yaml", "--num-gpus", "8")
    n = ds3["model"]["params"]
    assert parts(ds3)["weights"] == pytest.approx(gib(n, 2, 8), abs=0.02)  # no upcast: DeepSpeed holds fp32
    assert parts(ds3)["optimizer"] == pytest.approx(gib(n, 12, 8), abs=0.05)  # fp32 master + two fp32 states
    assert not any("upcasts" in a for a in ds3["assumptions"])


def test_llamafactory_lora_adapters_are_fp32_unless_pure_bf16():
    amp, pure = cli("llamafactory_lora_sft.yaml"), cli("llamafactory_lora_pure_bf16.yaml")
    assert parts(amp)["adapters"] == pytest.approx(2 * parts(pure)["adapters"], rel=0.05)
    assert parts(amp)["optimizer"] == pytest.approx(2 * parts(pure)["optimizer"], rel=0.05)


# --- 2. ms-swift -----------------------------------------------------------------------------------------------------


def test_swift_bfloat16_under_zero3_is_amp_with_fp32_master_weights():
    z3, ddp = cli("swift_full_zero3.sh"), cli("swift_full_ddp.sh")
    n, ranks = z3["model"]["params"], z3["gpu"]["count"]
    assert ranks == 8
    assert z3["sources"]["amp_dtype"]["from"].startswith("derived")
    assert parts(z3)["weights"] == pytest.approx(gib(n, 2, 8), abs=0.02)
    assert parts(z3)["optimizer"] == pytest.approx(gib(n, 12, 8), abs=0.05)
    # without DeepSpeed the same flags train bf16 weights with bf16 AdamW states (HF Trainer, no master copy)
    assert parts(ddp)["optimizer"] == pytest.approx(2 * parts(ddp)["weights"], rel=0.01)


# --- 3. open-instruct ------------------------------------------------------------------------------------------------


def test_open_instruct_yaml_is_read_with_open_instructs_defaults():
    result = cli("open_instruct_sft.yaml")
    n = result["model"]["params"]
    assert result["format"] == "open-instruct"
    assert result["gpu"]["count"] == 8  # the documented 8-process launch
    assert parts(result)["weights"] == pytest.approx(gib(n, 2, 8), abs=0.02)  # bf16, ZeRO-3
    assert result["fits"]
    one = cli("open_instruct_sft.yaml", "--num-gpus", "1")
    assert one["gpu"]["count"] == 1 and not one["fits"]


def test_open_instruct_qlora_uses_its_paged_bitsandbytes_adamw():
    result = cli("open_instruct_qlora.yaml")
    assert result["format"] == "open-instruct"
    assert result["sources"]["optimizer"]["from"].startswith("derived")
    assert parts(result)["optimizer_paged"] > 0 and parts(result)["quant_constants"] > 0


def test_open_instruct_dpo_tune_cache_holds_no_reference_model():
    cached, live = cli("open_instruct_dpo_cache.sh"), cli("open_instruct_dpo.sh")
    assert cached["objective"] == live["objective"] == "dpo"  # dpo_norm is DPO with a reference
    assert parts(cached)["reference"] == 0
    assert parts(live)["reference"] == pytest.approx(parts(live)["weights"], rel=0.01)


# --- 4. freeze tuning, LLaMA-Pro, LISA, GaLore -----------------------------------------------------------------------


def test_freeze_tuning_trains_the_last_two_layers_only():
    freeze, full = cli("llamafactory_freeze_sft.yaml"), cli("llamafactory_full_sft.yaml")
    n = full["model"]["params"]
    layer = (n - 2 * 32000 * 4096) / 32  # Llama-2-7B: one decoder layer
    assert freeze["params_trainable"] == pytest.approx(2 * layer, rel=0.02)
    assert parts(freeze)["gradients"] == pytest.approx(gib(2 * layer, 4), rel=0.02)  # fp32 trained layers
    assert parts(freeze)["optimizer"] < 0.1 * parts(full)["optimizer"]
    assert any("2 layer(s) train" in a for a in freeze["assumptions"])


def test_frozen_layers_below_the_trained_ones_save_no_activations(tmp_path):
    # without checkpointing every layer in the autograd graph keeps its activations; freezing all but the last two
    # leaves 30 of Llama-2-7B's 32 layers outside the graph, freezing all but the first two leaves none outside it
    base = (FIXTURES / "llamafactory_freeze_sft.yaml").read_text() + "disable_gradient_checkpointing: true\n"
    results = {}
    for n in (2, -2):
        cfg = tmp_path / f"freeze{n}.yaml"
        cfg.write_text(base + f"freeze_trainable_layers: {n}\n")
        results[n] = cli(str(cfg))
    last, first = parts(results[2])["activations"], parts(results[-2])["activations"]
    assert first > 4  # GiB: 4 × 1024 tokens through 32 layers
    assert first * 2 / 32 <= last < first * 0.08  # two layers' worth, and the final norm
    assert results[2]["params_trainable"] == results[-2]["params_trainable"]


def test_llama_pro_trains_the_expanded_blocks():
    pro = cli("llamafactory_llama_pro.yaml")
    freeze = cli("llamafactory_freeze_sft.yaml")
    assert pro["params_trainable"] == pytest.approx(4 * freeze["params_trainable"], rel=0.01)  # 8 blocks, not 2


def test_badam_layer_mode_trains_one_block_in_16_bit():
    badam, full = cli("llamafactory_badam.yaml"), cli("llamafactory_full_sft.yaml")
    n = full["model"]["params"]
    layer = (n - 2 * 32000 * 4096) / 32
    assert badam["params_trainable"] == pytest.approx(layer, rel=0.02)
    assert parts(badam)["weights"] == pytest.approx(gib(n, 2), abs=0.02)  # no fp32 upcast with BAdam
    assert parts(badam)["gradients"] == pytest.approx(gib(layer, 2), rel=0.05)


def test_lisa_trains_its_active_layers_with_embedding_and_head():
    axolotl, lmflow = cli("axolotl_lisa.yaml"), cli("lmflow_lisa.sh")
    n = axolotl["model"]["params"]
    outer = 2 * 32000 * 4096
    layer = (n - outer) / 32
    assert axolotl["params_trainable"] == pytest.approx(4 * layer + outer, rel=0.02)
    assert lmflow["params_trainable"] == pytest.approx(layer + outer, rel=0.02)


def test_galore_keeps_rank_r_optimizer_states():
    r128, r512, global_step = (
        cli("llamafactory_galore.yaml"),
        cli("llamafactory_galore_r512.yaml"),
        cli("llamafactory_galore_global.yaml"),
    )
    full_states = 2 * parts(r128)["weights"]  # bf16 AdamW over every weight
    assert parts(r128)["optimizer"] < 0.2 * full_states
    assert parts(r128)["optimizer"] < parts(r512)["optimizer"] < full_states
    assert parts(r128)["gradients"] == 0  # layerwise: stepped in backward
    assert parts(global_step)["gradients"] == pytest.approx(parts(global_step)["weights"], rel=0.01)


def test_transformers_galore_reads_its_targets_and_rank_from_the_training_arguments():
    galore, adamw = cli("trl_galore_sft.yaml"), cli("trl_adamw_sft.yaml")
    assert galore["sources"]["optimizer_rank"]["from"].startswith("optim_args")
    assert parts(galore)["weights"] == parts(adamw)["weights"]
    assert parts(galore)["optimizer"] < 0.1 * parts(adamw)["optimizer"]
    assert parts(galore)["gradients"] == parts(adamw)["gradients"]  # full gradients, projected states


# --- 5. unsloth ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["unsloth_llama31_8b_t4.py", "unsloth_gemma2_9b_t4.py", "unsloth_qwen3_14b_t4.py"])
def test_unsloth_colab_notebooks_fit_on_a_t4(name):
    result = cli(name, gpu="T4")
    assert result["format"] == "python"
    assert result["fits"], result["peak"]
    assert parts(result)["logits"] == 0  # chunked, fused loss
    assert parts(result)["quant_constants"] > 0


def test_unsloth_loads_4bit_by_default_and_offloads_checkpoints():
    default, explicit = cli("unsloth_default_4bit.py", gpu="T4"), cli("unsloth_llama31_8b_t4.py", gpu="T4")
    assert default["peak"] == explicit["peak"]
    assert default["sources"]["quant_bits"]["from"].startswith("default")
    plain = cli("unsloth_plain_checkpointing.py", gpu="T4")
    assert plain["phases_gib"]["forward-backward"] > explicit["phases_gib"]["forward-backward"]


# --- 6. task heads ---------------------------------------------------------------------------------------------------


def test_token_classification_has_no_vocabulary_logits():
    head, lm = cli("token_classification.py"), cli("causal_lm_same_backbone.py")
    assert parts(head)["logits"] == 0 and parts(lm)["logits"] > 10
    assert head["peak"]["device_gib"] < 0.6 * lm["peak"]["device_gib"]


def test_regression_and_sequence_classification_drop_the_lm_head():
    reg = cli("sequence_regression.py")
    assert parts(reg)["logits"] == 0
    seq, causal = cli("swift_seq_cls.sh"), cli("swift_causal_lm.sh")
    assert parts(seq)["logits"] == 0 and parts(causal)["logits"] > 1
    # Qwen2.5-7B keeps an untied LM head (152,064 × 3,584) that the classifier replaces
    assert causal["model"]["params"] - seq["model"]["params"] == pytest.approx(152064 * 3584, rel=0.01)


def test_axolotl_reward_model_trains_pairs_with_a_score_head():
    result = cli("axolotl_reward_model.yaml")
    assert result["objective"] == "rm"
    assert parts(result)["logits"] == 0
    assert any("sequence-classification head" in a for a in result["assumptions"])


def test_axolotl_embeddings_skip_upcast_keeps_the_embeddings_in_16_bits():
    """axolotl's `embeddings_skip_upcast` leaves a k-bit model's embeddings and LM head in bf16 where peft's
    preparation would upcast them to fp32 (axolotl src/axolotl/loaders/model.py `_configure_embedding_dtypes`,
    patch_manager.py `patch_peft_prep_code`): 2 bytes less per parameter of Llama-3.1-8B's untied embedding and head
    (128,256 × 4,096 each). The setting was read by no one before."""
    upcast, kept = cli("axolotl_qlora_upcast.yaml"), cli("axolotl_qlora_embeddings_skip_upcast.yaml")
    assert parts(upcast)["weights"] - parts(kept)["weights"] == pytest.approx(gib(2 * 128256 * 4096, 2), abs=0.01)
    assert any(a.startswith("embeddings_skip_upcast") for a in kept["assumptions"])
    assert kept["peak"]["device_gib"] < upcast["peak"]["device_gib"]
