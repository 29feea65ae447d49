"""A model given by its sizes (`resolve.arch_from_sizes`): with routed experts it is the MoE model the catalog's
construction builds for a Hugging Face config with experts, and a head size other than hidden ÷ heads counts."""

from __future__ import annotations

import pytest
from vramlens.knowledge.models import param_count
from vramlens.plan import Sourced, TrainingPlan
from vramlens.resolve import arch_from_sizes


def plan_of(**sizes) -> TrainingPlan:
    plan = TrainingPlan(file="train.sh", format="shell")
    for name, value in sizes.items():
        plan.extra[f"arch.{name}"] = Sourced(value=value)
    return plan


# Qwen1.5-MoE-A2.7B's shapes as Megatron flags give them (its config.json: 24 layers, hidden 2048, 16 heads, 60
# experts of 1408, 4 per token, a shared expert of 5632, vocabulary 151936, untied embeddings)
QWEN15_MOE = dict(
    num_layers=24,
    hidden_size=2048,
    num_attention_heads=16,
    intermediate_size=5632,
    activation="swiglu",
    norm="RMSNorm",
    no_weight_tying=True,
    vocab_size=151936,
    num_experts=60,
    moe_intermediate_size=1408,
    experts_per_token=4,
    shared_expert_intermediate_size=5632,
)


def test_experts_make_a_moe_model_of_the_published_size():
    """Qwen1.5-MoE-A2.7B: "14.3B parameters in total and 2.7B activated parameters during runtime" (Qwen/Qwen1.5-MoE-
    A2.7B model card, https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B)."""
    arch = arch_from_sizes(plan_of(**QWEN15_MOE))
    assert arch is not None and arch.is_moe
    assert (arch.num_experts, arch.experts_per_token, arch.moe_intermediate) == (60, 4, 1408)
    assert arch.shared_experts == 1 and arch.shared_expert_intermediate == 5632
    assert arch.norm == "rmsnorm" and arch.mlp == "swiglu" and not arch.tied_embeddings
    assert param_count(arch) == pytest.approx(14.3e9, rel=0.01)


def test_leading_dense_layers_are_counted_dense():
    every = arch_from_sizes(plan_of(**QWEN15_MOE))
    some = arch_from_sizes(plan_of(**QWEN15_MOE, dense_layers=2))
    assert some is not None and every is not None and some.dense_layers == 2
    h = 2048
    moe_mlp = 60 * 3 * h * 1408 + h * 60 + 3 * h * 5632  # experts, router, shared expert
    assert param_count(every) - param_count(some) == 2 * (moe_mlp - 3 * h * 5632)


def test_head_size_other_than_hidden_over_heads():
    """Qwen3's heads are 128 wide at hidden 2048 and 32 heads (Megatron `--kv-channels 128`): Q and O are 4096 wide."""
    sizes = dict(num_layers=2, hidden_size=2048, num_attention_heads=32, num_kv_heads=4, vocab_size=1000)
    plain = arch_from_sizes(plan_of(**sizes))
    wide = arch_from_sizes(plan_of(**sizes, head_dim=128))
    assert plain is not None and wide is not None
    assert wide.q_dim == 4096 and plain.q_dim == 2048
    # per layer: q and o grow by 2048 columns each, k and v by 4 heads × 64
    assert param_count(wide) - param_count(plain) == 2 * (2 * 2048 * 2048 + 2 * 2048 * 4 * 64)


def test_dense_sizes_stay_dense():
    arch = arch_from_sizes(plan_of(num_layers=4, hidden_size=512, num_attention_heads=8))
    assert arch is not None and not arch.is_moe and arch.family == "gpt_neox"
