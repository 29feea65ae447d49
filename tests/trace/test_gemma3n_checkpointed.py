"""Gemma-3n's text decoder under gradient checkpointing against the real libraries at small shapes: the step peaks
while the lowest block is recomputed, holding that block's recomputed forward, what the model kept before its first
block, the recomputed K/V path of every K/V-storing layer above it (kept by transformers' `KVSharingDict`), and the
gradients made by then (estimate/components/gemma3n.py). Skips with a reason where torch, transformers or peft are
not installed."""

from __future__ import annotations

import warnings

import pytest
from test_new_architectures import row_plan
from tiny_configs import TINY_CONFIGS
from trace_plans import assert_estimate_matches_trace, need
from vramlens.estimate.components import gemma3n

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")


# (mode, sequence length, micro batch): the hybrids grid's rows (256 × 2: before, 0.79 in full and 0.84 under LoRA),
# a shorter sequence than the 64-token sliding window (no mask) and one sequence of 512
ROWS = [("full", 256, 2), ("lora", 256, 2), ("full", 40, 2), ("lora", 512, 1)]


@pytest.mark.parametrize("mode,seq_len,micro_batch", ROWS, ids=[f"{m}-{s}x{b}" for m, s, b in ROWS])
def test_checkpointed_estimate_follows_the_real_library_trace(mode, seq_len, micro_batch):
    """The estimate is within ±3 % of the traced peak, and both put it in the backward (the recompute), not at the
    loss as before."""
    rp = row_plan("gemma3n_text", mode, True, seq_len=seq_len, micro_batch=micro_batch)
    traced = assert_estimate_matches_trace(rp, phase="recompute")
    assert traced["peak_at"] == "backward"


def _config(**changes):
    from transformers import AutoConfig

    keys = {k: v for k, v in TINY_CONFIGS["gemma3n_text"].items() if k != "model_type"}
    keys.update(changes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoConfig.for_model("gemma3n_text", **keys), keys


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {
            "num_hidden_layers": 6,
            "layer_types": ["sliding_attention"] * 2 + ["full_attention"] + ["sliding_attention"] * 3,
            "activation_sparsity_pattern": [0.0] * 6,
            "num_kv_shared_layers": 3,
        },
        {"num_kv_shared_layers": 0},
    ],
    ids=["tiny", "six-layers", "no-sharing"],
)
def test_store_layers_are_transformers_kv_producers(changes):
    """The layers whose recomputed K/V stay alive are those transformers marks "store"."""
    from trace_plans import plan
    from vramlens.knowledge.models import arch_from_hf_config

    config, keys = _config(**changes)
    rp = plan(arch=arch_from_hf_config(dict(keys, model_type="gemma3n_text"), "tiny-gemma3n"), seq_len=64)
    assert gemma3n.store_layers(rp) == [i for i, m in enumerate(config.kv_sharing_modes) if m == "store"]


def test_gradients_not_made_at_the_lowest_recompute_are_the_real_modules():
    """The parameters whose gradients are not made yet at the lowest block's recompute: layer 0's, the per-layer
    embeddings', per_layer_model_projection's and its norm's, the AltUp projections', less the tied embedding (the
    head's gradient of it is alive) — counted on transformers' own model."""
    from transformers import AutoModelForCausalLM

    config, _ = _config()
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(config).model
    before = ("embed_tokens_per_layer", "per_layer_model_projection", "per_layer_projection_norm", "altup_projections")
    real = sum(p.numel() for p in model.layers[0].parameters())
    real += sum(p.numel() for n, p in model.named_parameters() if n.startswith(before))
    real -= model.embed_tokens.weight.numel() if config.tie_word_embeddings else 0
    assert gemma3n.grads_not_made_at_lowest_recompute(row_plan("gemma3n_text", "full", True)) == real
    assert gemma3n.grads_not_made_at_lowest_recompute(row_plan("gemma3n_text", "lora", True)) == 0
