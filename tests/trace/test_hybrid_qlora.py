"""QLoRA of the Mamba-2 hybrids against the real libraries at small shapes: transformers' bitsandbytes integration
quantizes the mixers' in_proj and out_proj, peft's k-bit preparation makes the stream fp32, and under the Trainer's
autocast the mixer keeps 16-bit casts where a 16-bit step keeps fp32 upcasts (estimate/components/quant.py). Skips with
a reason where torch, transformers, peft or bitsandbytes are not installed."""

from __future__ import annotations

import pytest
from trace_plans import assert_estimate_matches_trace, need, trace_step

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")
need("bitsandbytes")

from test_new_architectures import row_plan  # noqa: E402
from vramlens.estimate import components as C  # noqa: E402

# QLoRA rows of the hybrids grid (benchmarks/trace_vs_estimate.py --grid hybrids), and shorter sequences: one chunk of
# the scan (64 positions) and a padded last chunk (100). Before the k-bit mixer was modelled: 1.06-1.13
ROWS = [
    ("falcon_h1", 256, 2),
    ("bamba", 256, 2),
    ("granitemoehybrid", 256, 2),
    ("bamba", 64, 2),
    ("falcon_h1", 100, 1),
]


@pytest.mark.parametrize("model_type,seq_len,micro_batch", ROWS, ids=[f"{t}-{s}x{b}" for t, s, b in ROWS])
def test_mamba2_hybrid_qlora_estimate_follows_the_real_library_trace(model_type, seq_len, micro_batch):
    assert_estimate_matches_trace(row_plan(model_type, "qlora", False, seq_len=seq_len, micro_batch=micro_batch))


def test_falcon_h1_mixer_linears_are_4bit():
    """Falcon-H1's mixer in_proj and out_proj are nn.Linear modules, quantized as the attention and MLP linears are:
    the estimate's 4-bit weights are the trace's (packed bytes, 4 bits a weight), not fp32 weights."""
    rp = row_plan("falcon_h1", "qlora", False, seq_len=16, micro_batch=1)
    traced = trace_step(rp)
    p = C.params(rp)
    # the real model's weights: packed 4-bit linears and fp32 embeddings, head, norms, conv1d, A_log, D, dt_bias
    assert p.quantized_bytes + p.frozen_bytes == pytest.approx(traced["persistent"]["weights"], rel=0.02)
