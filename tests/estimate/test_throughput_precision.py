"""A k-bit model prepared with peft's `prepare_model_for_kbit_training` runs its activations in fp32 (fp32 norm
weights promote every normed tensor), which QLoRA users see as a slower step than the same run with 16-bit norms
(fms-acceleration's accelerated-peft plugin, torchtune)."""

from __future__ import annotations

from vramlens.estimate.throughput import throughput
from vramlens.knowledge.gpus import gpu_by_name
from vramlens.knowledge.models import lookup_model
from vramlens.knowledge.optimizers import lookup_optimizer
from vramlens.resolved import ResolvedPlan


def _plan(model: str = "mistralai/Mistral-7B-v0.1", **kw) -> ResolvedPlan:
    base = {
        "arch": lookup_model(model),
        "framework": "transformers",
        "weight_dtype": "bf16",
        "compute_dtype": "bf16",
        "micro_batch": 4,
        "seq_len": 4096,
        "packing": True,
        "attn_mask": False,
        "grad_checkpointing": True,
        "attn_impl": "flash_attention_2",
        "optimizer": lookup_optimizer("adamw_torch"),
        "peft": "qlora",
        "lora_r": 16,
        "lora_alpha": 16,
        "lora_dropout": 0.1,
        "lora_targets": ("q", "k", "v", "o"),
        "quant_bits": 4,
        "quant_double": True,
        "gpu": gpu_by_name("A100-80GB"),
    }
    return ResolvedPlan(**{**base, **kw})


def test_fp32_norm_weights_slow_a_qlora_step_by_the_casts_and_fp32_elementwise_traffic():
    upcast = throughput(_plan(kbit_upcast=True)).tokens_per_s
    kept = throughput(_plan(kbit_upcast=False)).tokens_per_s
    assert 1.08 <= kept / upcast <= 1.5


def test_the_upcast_changes_nothing_where_activations_stay_16_bit():
    # a 16-bit LoRA model is not k-bit prepared; Gemma's RMSNorm casts its output back to the input dtype
    lora = {"peft": "lora", "quant_bits": None}
    assert (
        throughput(_plan(kbit_upcast=True, **lora)).tokens_per_s
        == throughput(_plan(kbit_upcast=False, **lora)).tokens_per_s
    )
    gemma = "google/gemma-7b"
    assert (
        throughput(_plan(gemma, kbit_upcast=True)).tokens_per_s
        == throughput(_plan(gemma, kbit_upcast=False)).tokens_per_s
    )
