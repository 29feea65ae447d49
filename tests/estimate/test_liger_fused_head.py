"""Liger's fused linear cross-entropy computes the head's gradients in its forward and keeps them for backward
(linkedin/Liger-Kernel ead96b6 src/liger_kernel/ops/fused_linear_cross_entropy.py): the hidden states' gradient
always, the head weight's gradient when the head trains. Cut-Cross-Entropy computes its gradients in backward."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.estimate.components.logits import head_loss_bytes
from vramlens.settings import Settings

LIGER = """base_model: meta-llama/Llama-3.1-8B
sequence_len: 4096
micro_batch_size: 1
bf16: true
plugins:
  - axolotl.integrations.liger.LigerPlugin
liger_fused_linear_cross_entropy: true
datasets:
  - path: tatsu-lab/alpaca
    type: alpaca
"""
CCE = LIGER.replace(
    "axolotl.integrations.liger.LigerPlugin", "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
)
CCE = CCE.replace("liger_fused_linear_cross_entropy: true", "cut_cross_entropy: true")
LORA = "adapter: lora\nlora_r: 16\nlora_alpha: 32\nlora_target_linear: true\n"

# Llama-3.1-8B: hidden 4096, vocabulary 128,256 (its config.json)
H, V, TOKENS = 4096, 128256, 4096


def _analyze(tmp_path: Path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    a = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False))
    assert a.estimate is not None
    return a


def test_full_fine_tune_holds_the_head_weight_gradient_from_forward(tmp_path):
    a = _analyze(tmp_path, LIGER)
    rp = a.resolution.resolved
    assert rp.loss_impl == "fused" and rp.liger_loss
    # grad_input (bf16 hidden states) + fp32 loss_1d per token, and grad_weight = zeros_like(bf16 weight)
    assert a.estimate.components["logits"] == TOKENS * (2 * H + 4) + V * H * 2


def test_lora_holds_only_the_hidden_states_gradient(tmp_path):
    a = _analyze(tmp_path, LIGER + LORA)
    assert a.estimate.components["logits"] == TOKENS * (2 * H + 4)


def test_while_a_chunk_runs_its_logits_and_product_are_alive(tmp_path):
    rp = _analyze(tmp_path, LIGER + LORA).resolution.resolved
    # chunk = next_power_of_2(cdiv(4096, cdiv(128256, 4096))) = next_power_of_2(cdiv(4096, 32)) = 128 tokens
    chunk = 128
    assert head_loss_bytes(rp, TOKENS, backward=False) == TOKENS * (2 * H + 4) + chunk * (V + H) * 2


def test_cut_cross_entropy_keeps_no_gradient_buffers(tmp_path):
    cce = _analyze(tmp_path, CCE)
    assert cce.resolution.resolved.loss_impl == "fused" and not cce.resolution.resolved.liger_loss
    assert cce.estimate.components["logits"] == 0
    assert _analyze(tmp_path, LIGER).estimate.device_bytes > cce.estimate.device_bytes
