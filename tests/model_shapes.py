"""Published models' shapes that more than one estimator test builds a plan on."""

from __future__ import annotations

from vramlens.knowledge.schema import ModelArch

# Qwen3-30B-A3B's shapes (its config.json on the Hub, Qwen/Qwen3-30B-A3B): 48 layers, 128 experts, top-8,
# moe_intermediate_size 768
QWEN3_30B_A3B = ModelArch(
    id="qwen3-30b-a3b",
    family="qwen3_moe",
    hidden=2048,
    layers=48,
    heads=32,
    kv_heads=4,
    head_dim=128,
    intermediate=6144,
    vocab=151936,
    num_experts=128,
    experts_per_token=8,
    moe_intermediate=768,
)
