"""QLoRA traces of models whose code reads a linear's weight directly, on the real libraries at small shapes: the
trace quantizes them as a user's from_pretrained does (Jamba's mixer takes its quantized path once the config says
the model is quantized) or leaves the linears it cannot quantize unquantized and says so (Gemma-3n's AltUp
coefficients). Before, both stopped with a RuntimeError from the uint8 weight. Skips with a reason where torch,
transformers, peft or bitsandbytes are not installed."""

from __future__ import annotations

import pytest
from test_new_architectures import row_plan
from trace_plans import need, trace_step

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")
need("bitsandbytes")


def test_gemma3n_qlora_traces_with_the_altup_coefficients_unquantized():
    rp = row_plan("gemma3n_text", "qlora", False, seq_len=32, micro_batch=1)
    traced = trace_step(rp)
    assert traced["peak_bytes"] > 0
    assert any("correction_coefs and prediction_coefs left unquantized" in a for a in traced["assumptions"])


def test_jamba_qlora_traces_its_mixer_on_the_quantized_path():
    traced = trace_step(row_plan("jamba", "qlora", False, seq_len=16, micro_batch=1))
    assert traced["peak_bytes"] > 0
    assert not any("unquantized" in a for a in traced["assumptions"])
