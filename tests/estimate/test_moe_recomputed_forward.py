"""LoRA and QLoRA of gpt-oss and LoRA of Llama-4's text decoder, every block checkpointed, against the real libraries
(transformers, peft, bitsandbytes) at small shapes. The top block is recomputed when the first backward node that
needs its saved tensors runs, and its recomputed forward, not its backward, is the step's peak: gpt-oss's at its
experts' gate (the gathered tokens and per-pair biases, the clamped up and the gate's output alive as locals, every
layer's eager mask held by its checkpoint), Llama-4's at its shared expert's down projection (the repeated input and
the routed experts' output alive as locals, the chunked attention's mask held); at longer sequences gpt-oss's
peaks in its attention's sink softmax instead (estimate/components/experts.py
`recomputed_experts_forward_per_token`, llama4.py `recomputed_moe_forward_per_token`). Before they were counted
these rows read 0.87-0.94 of the real trace. Skips with a reason where torch, transformers, peft or bitsandbytes are
not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from trace_plans import assert_estimate_matches_trace, need, trace_step  # noqa: E402

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")

from test_new_architectures import row_plan  # noqa: E402

# (model_type, mode, sequence length, micro batch): the hybrids grid's shape (256 × 2) and others where the recompute
# is the step's peak: gpt-oss at 512 × 2, where it peaks in the attention's sink softmax (three score-sized tensors,
# two masks of s² each), and a short sequence under QLoRA; Llama-4 below its attention chunk (64 × 2: no chunked
# mask) and above it with one sequence
ROWS = [
    ("gpt_oss", "lora", 256, 2),
    ("gpt_oss", "lora", 512, 2),
    ("gpt_oss", "qlora", 256, 2),
    ("gpt_oss", "qlora", 100, 1),
    ("llama4_text", "lora", 256, 2),
    ("llama4_text", "lora", 64, 2),
    ("llama4_text", "lora", 192, 1),
]


@pytest.mark.parametrize(
    "model_type,mode,seq_len,micro_batch", ROWS, ids=[f"{t}-{m}-ckpt-{s}x{b}" for t, m, s, b in ROWS]
)
def test_checkpointed_moe_adapter_estimate_follows_the_real_library_trace(model_type, mode, seq_len, micro_batch):
    if mode == "qlora":
        need("bitsandbytes")
    assert_estimate_matches_trace(
        row_plan(model_type, mode, True, seq_len=seq_len, micro_batch=micro_batch), phase="recompute"
    )


def test_the_fake_trace_of_a_checkpointed_gpt_oss_step_equals_its_execution():
    """The real-library trace runs on fake tensors; executed on real CPU tensors the same step peaks at the same
    bytes, so the figures above are what the libraries allocate."""
    rp = row_plan("gpt_oss", "lora", True, seq_len=64, micro_batch=1)
    fake = trace_step(rp)
    real = trace_step(rp, real=True)
    assert fake["peak_bytes"] == real["peak_bytes"]
