"""Megatron-SWIFT (`megatron sft|pt|rlhf`, ms-swift's Megatron trainers): how its run differs from the generic one
(`hooks`)."""
