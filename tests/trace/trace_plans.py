"""Small resolved plans for the trace and probe tests (shapes small enough to run for real on CPU)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan

GPU = GpuSpec(name="A100-80GB", memory_gib=80.0, usable_gib=79.1, bf16=True)
ADAMW = OptimizerSpec(name="adamw_torch", family="adamw", states=2)
ADAMW_8BIT = OptimizerSpec(name="adamw_bnb_8bit", family="adamw", states=2, state_bytes=1, library="bitsandbytes")
PAGED_8BIT = OptimizerSpec(
    name="paged_adamw_8bit", family="adamw", states=2, state_bytes=1, library="bitsandbytes", paged=True
)
ADAFACTOR = OptimizerSpec(name="adafactor", family="adafactor", states=1, state_bytes=4, library="transformers")

TINY_LLAMA = ModelArch(
    id="tiny-llama", family="llama", hidden=256, layers=2, heads=8, kv_heads=2, intermediate=512, vocab=1000
)
# Qwen3-30B-A3B's block, narrowed: 32 fused experts of width 128, 4 per token (transformers 5's grouped_mm experts)
QWEN3_MOE_BLOCK = ModelArch(
    id="mid-qwen3-moe",
    family="qwen3_moe",
    hidden=256,
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=64,
    intermediate=512,
    moe_intermediate=128,
    num_experts=32,
    experts_per_token=4,
    vocab=1000,
)
ARCHS = {
    "llama": TINY_LLAMA,
    "mixtral": ModelArch(
        id="tiny-moe",
        family="mixtral",
        hidden=128,
        layers=2,
        heads=4,
        kv_heads=2,
        intermediate=256,
        vocab=500,
        num_experts=4,
        experts_per_token=2,
        shared_experts=1,
        dense_layers=1,
    ),
    "gpt2": ModelArch(
        id="tiny-gpt2",
        family="gpt2",
        mlp="gelu",
        norm="layernorm",
        hidden=128,
        layers=2,
        heads=4,
        intermediate=512,
        vocab=500,
        tied_embeddings=True,
        attn_bias=True,
        mlp_bias=True,
        max_position=256,
    ),
    "gpt_bigcode": ModelArch(
        id="tiny-starcoder",
        family="gpt_bigcode",
        mlp="gelu",
        norm="layernorm",
        hidden=128,
        layers=2,
        heads=4,
        kv_heads=1,
        intermediate=512,
        vocab=500,
        tied_embeddings=True,
        attn_bias=True,
        mlp_bias=True,
        max_position=256,
    ),
    "bert": ModelArch(
        id="tiny-bert",
        family="bert",
        block="encoder",
        mlp="gelu",
        norm="layernorm",
        hidden=128,
        layers=2,
        heads=4,
        intermediate=512,
        vocab=500,
        attn_bias=True,
        mlp_bias=True,
        max_position=256,
    ),
    "t5": ModelArch(
        id="tiny-t5",
        family="t5",
        block="encoder-decoder",
        mlp="geglu",
        hidden=128,
        layers=2,
        encoder_layers=2,
        heads=4,
        intermediate=256,
        vocab=500,
    ),
    "gemma2": ModelArch(
        id="tiny-gemma2",
        family="gemma2",
        mlp="geglu",
        hidden=128,
        layers=2,
        heads=4,
        kv_heads=2,
        intermediate=256,
        vocab=500,
        tied_embeddings=True,
    ),
    "qwen3": ModelArch(
        id="tiny-qwen3",
        family="qwen3",
        hidden=128,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=64,
        intermediate=256,
        vocab=500,
        tied_embeddings=True,
    ),
}
LORA = dict(peft="lora", lora_r=8, lora_alpha=16.0, lora_targets=("q", "k", "v", "o", "gate", "up", "down"))
# A 70B-sized plan: slow enough to trace (seconds) that it can be cancelled or time out mid-way.
BIG = ModelArch(
    id="big-llama", family="llama", hidden=8192, layers=80, heads=64, kv_heads=8, intermediate=28672, vocab=128256
)


def plan(**changes) -> ResolvedPlan:
    base = dict(arch=TINY_LLAMA, optimizer=ADAMW, gpu=GPU, seq_len=128, micro_batch=2, optimizer_impl="fused")
    base.update(changes)
    return ResolvedPlan(**base)


def need(module: str) -> None:
    """Skip when an optional module is missing — except in CI, which installs the `trace` extra."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed, but CI installs the trace extra")
        pytest.skip(f"{module} not installed", allow_module_level=True)


def tiny_config(tmp_path: Path) -> Path:
    """An HF/TRL YAML config whose model is a local folder with a tiny Llama config.json."""
    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, '
        '"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512, '
        '"vocab_size": 1000, "torch_dtype": "bfloat16", "tie_word_embeddings": false}'
    )
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        "model_name_or_path: ./tiny-model\nper_device_train_batch_size: 2\nmax_seq_length: 128\n"
        "bf16: true\noptim: adamw_torch_fused\ngradient_checkpointing: true\n"
    )
    return cfg


def trace_step(rp: ResolvedPlan, *, real: bool = False) -> dict:
    """The plan's training step traced on the real libraries (transformers, peft, bitsandbytes): fake tensors, or
    executed on CPU with real=True."""
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    return engine.run(step_config(rp), backend="transformers", real=real)


def assert_estimate_matches_trace(rp: ResolvedPlan, tol: float = 0.03, phase: str | None = None) -> dict:
    """Trace the step on the real libraries and assert the estimate's allocated bytes within ±tol of the traced peak
    (and, given phase, that the estimate peaks in that phase); returns the trace for further checks."""
    from vramlens.estimate import estimate

    traced = trace_step(rp)
    est = estimate(rp, limits=False)
    if phase is not None:
        assert est.phase == phase, f"the estimate peaks in {est.phase!r}, not {phase!r}"
    ratio = est.allocated_bytes / traced["peak_bytes"]
    assert ratio == pytest.approx(1.0, abs=tol), (
        f"estimate {est.allocated_bytes} B ÷ traced peak {traced['peak_bytes']} B = {ratio:.4f}, not within ±{tol}"
    )
    return traced
