"""QLoRA of a pure Mamba-2 model (`Mamba2ForCausalLM`, LoRA on in_proj) and of Nemotron-H (LoRA on its attention and
MLP linears) against the real libraries (transformers, peft, bitsandbytes) at small shapes. In a k-bit model the
stream is fp32 and the step runs under autocast: each LoRA adapter keeps a 16-bit cast of its input and a 16-bit
lora_A output (not fp32 copies), Nemotron-H's relu² MLP keeps an fp32 relu output, and a checkpointed Mamba-2 block
peaks at the end of its recomputed chunk scan, with the scan's locals alive (estimate/components/quant.py
`kbit_mamba2_recompute_bytes`). Before: 0.90-0.94 of the real trace checkpointed, 1.07 for Nemotron-H without.
Skips with a reason where torch, transformers, peft or bitsandbytes are not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from trace_plans import assert_estimate_matches_trace, need  # noqa: E402

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")
need("bitsandbytes")

from test_new_architectures import row_plan  # noqa: E402

# (model_type, checkpointing, sequence length, micro batch): the hybrids grid's shape (256 × 2: four chunks of 64),
# a padded last chunk (100 × 1) and one chunk (64 × 2)
ROWS = [
    ("mamba2", True, 256, 2),
    ("mamba2", True, 100, 1),
    ("nemotron_h", False, 256, 2),
    ("nemotron_h", True, 64, 2),
]


def kbit_plan(model_type: str, ckpt: bool, seq_len: int, micro_batch: int):
    rp = row_plan(model_type, "qlora", ckpt, seq_len=seq_len, micro_batch=micro_batch)
    if model_type == "mamba2":
        # no attention and no MLP: LoRA on in_proj, what peft can adapt in it (resolve/adapters.py)
        rp = rp.model_copy(update={"lora_targets": ("in_proj",)})
    return rp


@pytest.mark.parametrize(
    "model_type,ckpt,seq_len,micro_batch",
    ROWS,
    ids=[f"{t}-{'ckpt-' if c else ''}{s}x{b}" for t, c, s, b in ROWS],
)
def test_kbit_mamba2_estimate_follows_the_real_library_trace(model_type, ckpt, seq_len, micro_batch):
    assert_estimate_matches_trace(kbit_plan(model_type, ckpt, seq_len, micro_batch))
