"""torchtune configs resolved and estimated as torchtune's own code runs them (checked against its step traced on
torchtune 0.6.1: tests/trace/test_torchtune_backend.py, benchmarks/results/trace_real_torchtune_vs_estimate.txt)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("VRAMLENS_CALIBRATION", "off")

from vramlens.estimate import GIB, estimate  # noqa: E402
from vramlens.estimate import components as C  # noqa: E402
from vramlens.formats import parse_document  # noqa: E402
from vramlens.resolve import resolve  # noqa: E402
from vramlens.settings import Settings  # noqa: E402

CONFIG = """model:
  _component_: torchtune.models.{builder}
  lora_attn_modules: ['q_proj', 'v_proj']
  lora_rank: 8
  lora_alpha: 16
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/tokenizer.model
  max_seq_len: 2048
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
batch_size: 2
optimizer:
  _component_: torch.optim.AdamW
  fused: True
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
dtype: bf16
enable_activation_checkpointing: {ckpt}
"""


def resolved(tmp_path: Path, builder: str, ckpt: bool = True):
    text = CONFIG.format(builder=builder, ckpt=ckpt)
    f = tmp_path / "config.yaml"
    f.write_text(text)
    plan = parse_document(text, str(f), workspace=tmp_path).plan
    assert plan.framework == "torchtune"
    return resolve(plan, Settings(workspace=tmp_path, gpu="A100-80GB")).resolved


def test_torchtune_runs_causal_attention_without_a_padding_mask(tmp_path):
    rp = resolved(tmp_path, "llama3_1.lora_llama3_1_8b")
    assert not rp.attn_mask
    assert C.attention_mask_bytes(rp) == (0, 0)


def test_rope_caches_follow_the_lora_builder(tmp_path):
    """Llama 3.1/3.2's LoRA builders share one RoPE module; Llama 3's, Mistral's and Qwen2.5's give each layer its
    own, each an fp32 cache of the builder's positions (Qwen2.5's instruct builders: 32,768)."""
    shared = resolved(tmp_path, "llama3_1.lora_llama3_1_8b")
    per_layer = resolved(tmp_path, "llama3.lora_llama3_8b")
    qwen = resolved(tmp_path, "qwen2_5.lora_qwen2_5_7b_instruct")
    qwen_base = resolved(tmp_path, "qwen2_5.lora_qwen2_5_7b_base")
    full = resolved(tmp_path, "qwen2_5.qwen2_5_7b_instruct")
    assert (shared.rope_caches, per_layer.rope_caches, qwen.rope_caches, full.rope_caches) == (1, 32, 28, 1)
    assert (qwen.arch.max_position, qwen_base.arch.max_position) == (32768, 131072)
    # [32768 positions × 2 × 128] fp32 per layer for Qwen2.5-7B: 28 × 32 MiB
    assert C.model_buffers(qwen) == 28 * C.torchtune_rope_cache_bytes(qwen.arch)
    assert round(C.model_buffers(qwen) / GIB, 3) == 0.875
    # Llama 3 8B: 32 caches of 8192 × 128 fp32; Llama 3.1 8B: one of 131072 × 128
    assert C.model_buffers(per_layer) == 32 * (8192 * 128 + 64) * 4
    assert C.model_buffers(shared) == (131072 * 128 + 64) * 4
    gap = estimate(per_layer, limits=False).allocated_bytes - estimate(shared, limits=False).allocated_bytes
    assert gap == C.model_buffers(per_layer) - C.model_buffers(shared)


def test_chunked_loss_holds_the_fp32_log_softmax_beside_the_logits(tmp_path):
    """torchtune's CEWithChunkedOutputLoss upcasts each chunk and keeps its fp32 log-softmax: while it runs, the
    16-bit logits + every chunk's fp32 log-softmax + one fp32 chunk = 6.5 bytes per logit (before: 4)."""
    rp = resolved(tmp_path, "llama3_1.lora_llama3_1_8b")
    assert C.eager_chunked_ce(rp) and C.chunked_ce_per_logit(rp) == 6.5
    compiled = rp.with_changes(compile=True)  # the recipe compiles the loss: not this model
    assert not C.eager_chunked_ce(compiled)
    fp32 = rp.with_changes(weight_dtype="fp32", compute_dtype="fp32", peft="none")
    tokens = 4096
    # fp32 full fine-tune: the head's backward over the chunks is the larger (three head-weight gradients)
    assert C.head_loss_bytes(fp32, tokens) == C.chunked_head_backward_bytes(fp32, tokens) > tokens * 8 * rp.arch.vocab


def test_full_fine_tune_keeps_the_fp32_normalised_value_of_each_norm(tmp_path):
    """torchtune's RMSNorm applies its weight in fp32 (a 16-bit weight with an fp32 input cannot take torch's fused
    kernel): a full fine-tune keeps 4 bytes per norm element for the weight's gradient where transformers keeps 2."""
    rp = resolved(tmp_path, "llama3_1.llama3_1_8b", ckpt=False)
    hf = rp.with_changes(framework="transformers")
    assert C.fp32_norm_weights(rp) and not C.fp32_norm_weights(hf)
    all_layers, _ = C.activations_per_token(rp)
    hf_layers, _ = C.activations_per_token(hf)
    assert all_layers - hf_layers == rp.arch.layers * 2 * 2 * rp.arch.hidden
