"""The step's FLOPs two ways: counted by torch's `FlopCounterMode` on the real-library trace (transformers, peft and
bitsandbytes under fake tensors, `vramlens.trace.flops`), and by the estimator's own matmul list
(`vramlens.estimate.throughput.flop_count`), which the speed model runs on. They must agree exactly, by phase
(forward, backward, activation-checkpointing recompute) and by op family (matmul, attention), over small
Llama/Qwen/Mistral-like shapes, full / LoRA / QLoRA, checkpointing on and off, several sequence lengths, batches and
attention kernels. Skips with a reason where torch or transformers are not installed (CI installs the trace extra)."""

from __future__ import annotations

import pytest
from trace_plans import ARCHS, LORA, TINY_LLAMA, need, plan
from vramlens.estimate.throughput import flop_count
from vramlens.knowledge.schema import ModelArch

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")

from vramlens.trace import engine  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

QLORA = dict(LORA, peft="qlora", quant_bits=4, quant_double=True)
MISTRAL = ModelArch(
    id="tiny-mistral", family="mistral", hidden=192, layers=3, heads=6, kv_heads=2, intermediate=448, vocab=700
)
QWEN3 = ARCHS["qwen3"]  # q/k norms, head_dim 64 ≠ hidden / heads, tied embeddings

GRID = {
    "llama-full": dict(),
    "llama-full-ckpt": dict(grad_checkpointing=True),
    "llama-full-ckpt-causal-b3-s96": dict(grad_checkpointing=True, attn_mask=False, micro_batch=3, seq_len=96),
    "llama-lora": dict(LORA),
    "llama-lora-ckpt": dict(LORA, grad_checkpointing=True),
    "llama-lora-qv-ckpt-accum2": dict(LORA, lora_targets=("q", "v"), grad_checkpointing=True, grad_accum=2),
    "llama-lora-eager": dict(LORA, attn_impl="eager", seq_len=64),
    "qwen3-full-ckpt-s200": dict(arch=QWEN3, grad_checkpointing=True, seq_len=200),
    "qwen3-lora-causal": dict(LORA, arch=QWEN3, attn_mask=False, micro_batch=1, seq_len=256),
    "mistral-lora-r16-ckpt": dict(LORA, arch=MISTRAL, lora_r=16, grad_checkpointing=True, micro_batch=4, seq_len=64),
    "mistral-full-eager": dict(arch=MISTRAL, attn_impl="eager"),
    "llama-qlora-ckpt": dict(QLORA, grad_checkpointing=True),
    "mistral-qlora": dict(QLORA, arch=MISTRAL, seq_len=96),
}


@pytest.mark.parametrize("changes", GRID.values(), ids=GRID.keys())
def test_estimated_flops_equal_flop_counter_modes(changes):
    if changes.get("quant_bits"):
        need("bitsandbytes")
    rp = plan(**changes)
    traced = engine.run(step_config(rp), backend="transformers")["flops"]
    estimated = flop_count(rp)
    assert traced["total"] > 0
    assert estimated["by_phase_family"] == traced["by_phase_family"]
    assert estimated["attention_causal"] == traced["attention_causal"]
    assert estimated["total"] == traced["total"]


def test_checkpointing_adds_the_recompute_the_trace_counts():
    """Checkpointing a full fine-tune recomputes each block's forward but its last matmul (torch's early stop):
    the recompute phase is the blocks' forward less the down projections, not the whole forward."""
    rp = plan(arch=TINY_LLAMA, grad_checkpointing=True)
    traced = engine.run(step_config(rp), backend="transformers")["flops"]
    tokens, down = 2 * 128, 512 * 256  # micro-batch × sequence; the down projection
    blocks_forward = traced["by_phase_family"]["forward"]["matmul"] - 2 * tokens * 256 * 1000  # less LM head
    assert traced["by_phase_family"]["recompute"]["matmul"] == blocks_forward - 2 * tokens * down * 2  # 2 layers


def test_trace_cli_shows_the_counted_work(tmp_path):
    """`vramlens trace` reports the step's FLOPs by phase in its JSON and in one line of its text."""
    import json
    import os
    import subprocess
    import sys

    from trace_plans import tiny_config

    cfg = tiny_config(tmp_path)  # checkpointing on: a recompute phase

    def run(*args):
        done = subprocess.run(
            [sys.executable, "-m", "vramlens", "trace", str(cfg), "--no-record", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ),
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    flops = json.loads(run("--format", "json"))["trace"]["flops"]
    assert flops["by_phase"]["recompute"] > 0 and flops["total"] == sum(flops["by_phase"].values())
    assert "TFLOP per step (FlopCounterMode)" in run()
