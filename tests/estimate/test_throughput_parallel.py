"""Tensor parallelism in the step-time model: tokens/s per GPU counts every GPU of a tensor-parallel group, a
rank gathers and reduces only its slice of the weights, and a data-parallel group that spans nodes because of the
tensor-parallel ranks inside it runs its collectives over the network."""

from __future__ import annotations

import pytest
from vramlens.estimate.throughput import throughput
from vramlens.knowledge.gpus import gpu_by_name
from vramlens.knowledge.models import lookup_model
from vramlens.knowledge.optimizers import lookup_optimizer
from vramlens.resolved import ResolvedPlan


def _plan(**kw) -> ResolvedPlan:
    base = {
        "arch": lookup_model("meta-llama/Llama-3.1-70B"),
        "framework": "custom",
        "weight_dtype": "bf16",
        "compute_dtype": "bf16",
        "micro_batch": 2,
        "grad_accum": 2,
        "seq_len": 4096,
        "packing": True,
        "grad_checkpointing": True,
        "attn_impl": "flash_attention_2",
        "optimizer": lookup_optimizer("adamw_torch"),
        "peft": "lora",
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_targets": ("q", "k", "v", "o", "gate", "up", "down"),
        "strategy": "fsdp",
        "zero_stage": 3,
        "world_size": 4,
        "tensor_parallel": 2,
        "gpu": gpu_by_name("H100-SXM"),
        "gpu_count": 8,
    }
    return ResolvedPlan(**{**base, **kw})


def test_tokens_per_gpu_divide_a_tensor_parallel_groups_tokens_by_its_gpus():
    """Two tensor-parallel ranks work on the same 2 × 2 × 4096 tokens of each step: per GPU, half of them."""
    t = throughput(_plan())
    assert t.tokens_per_s * t.step_s == pytest.approx(2 * 2 * 4096 / 2, rel=1e-6)
    # the run: every data-parallel group's tokens once
    assert t.run_tokens_per_s * t.step_s == pytest.approx(4 * 2 * 2 * 4096, rel=1e-6)


def test_a_tensor_parallel_rank_gathers_only_its_slice_of_the_weights():
    """FSDP over TP-2 ranks all-gathers half the weights a TP-1 rank does (NVLink inside one node)."""
    tp1 = throughput(_plan(tensor_parallel=1, grad_checkpointing=False, micro_batch=1))
    tp2 = throughput(_plan(tensor_parallel=2, grad_checkpointing=False, micro_batch=1))
    # the same data-parallel group (4 ranks): the collectives' volume per rank halves with TP 2
    comm1 = tp1.parts_s.get("communication (exposed)", 0.0)
    comm2 = tp2.parts_s.get("communication (exposed)", 0.0)
    assert comm1 > 0
    assert comm2 < 0.75 * comm1


def test_fsdp_over_tensor_parallel_ranks_that_span_two_nodes_runs_over_the_network():
    """TP 2 × FSDP 8 needs 16 GPUs: two 8-GPU nodes, so FSDP's collectives cross the network (400 Gb/s per GPU),
    slower than the TP 2 × FSDP 4 run inside one node, however the compute is the same per GPU."""
    one_node = throughput(_plan(world_size=4, grad_checkpointing=False, micro_batch=1, grad_accum=1))
    two_nodes = throughput(_plan(world_size=8, grad_checkpointing=False, micro_batch=1, grad_accum=1))
    assert two_nodes.parts_s["communication (exposed)"] > 2 * one_node.parts_s["communication (exposed)"]
    assert two_nodes.tokens_per_s < one_node.tokens_per_s


def _titan(**kw) -> ResolvedPlan:
    """torchtitan's Llama 3.1 8B on 4 nodes of 8 H200s: FSDP over 32 ranks, compile, float8 linears."""
    base = {
        "arch": lookup_model("meta-llama/Llama-3.1-8B"),
        "framework": "torchtitan",
        "weight_dtype": "fp32",
        "amp": True,
        "compute_dtype": "bf16",
        "micro_batch": 2,
        "seq_len": 8192,
        "packing": True,
        "attn_impl": "sdpa",
        "attn_mask": False,
        "selective_recompute": "op",
        "compile": True,
        "float8_linears": True,
        "optimizer": lookup_optimizer("adamw_torch"),
        "strategy": "fsdp",
        "zero_stage": 3,
        "world_size": 32,
        "gpu": gpu_by_name("H200"),
        "gpu_count": 8,
    }
    return ResolvedPlan(**{**base, **kw})


def test_float8_all_gather_moves_the_linears_weights_at_one_byte_and_speeds_up_a_communication_bound_run():
    """One 2048-token sequence per GPU: the step is short enough that FSDP's gathers outlast the compute."""
    short = {"micro_batch": 1, "seq_len": 2048}
    bf16 = throughput(_titan(**short))
    fp8 = throughput(_titan(**short, float8_all_gather=True))
    assert fp8.parts_s["communication (exposed)"] < 0.5 * bf16.parts_s["communication (exposed)"]
    assert fp8.tokens_per_s > 1.1 * bf16.tokens_per_s
    # without float8 linears there is nothing to gather in fp8
    plain = throughput(_titan(**short, float8_linears=False))
    assert throughput(_titan(**short, float8_linears=False, float8_all_gather=True)).tokens_per_s == plain.tokens_per_s


def test_fsdp_across_nodes_scales_nearly_flat_when_every_gpu_has_its_own_network_port():
    """NCCL runs one ring per network port, so the node's 8 ports carry a collective together: an 8B full fine-tune
    under FSDP keeps most of its per-GPU speed from one node to eight (llm-foundry's published MPT runs scale flat
    from 16 to 128 GPUs), rather than dropping to the speed of a single 400 Gb/s port."""
    plan = {
        "arch": lookup_model("meta-llama/Llama-3.1-8B"),
        "peft": "none",
        "lora_targets": (),
        "weight_dtype": "fp32",
        "amp": True,
        "micro_batch": 2,
        "grad_accum": 1,
        "grad_checkpointing": False,
        "tensor_parallel": 1,
    }
    one_node = throughput(_plan(**plan, world_size=8)).tokens_per_s
    for world in (16, 64):
        assert throughput(_plan(**plan, world_size=world)).tokens_per_s > 0.85 * one_node


def test_fsdp_with_context_parallel_ranks_in_its_group_stays_inside_one_node():
    """torchtitan shards FSDP over the data- and context-parallel ranks together (parallelisms/parallel_dims.py
    `dp_shard_cp`), and the plan's world_size counts them both: FSDP 4 × CP 2 is one group of 8 GPUs, one node, its
    collectives over NVLink like FSDP 8 × CP 1's. The per-rank volume is the same, so is the time (long sequences:
    both overlap with the compute but for the last unit's share)."""
    plan = {"micro_batch": 1, "seq_len": 16384, "world_size": 8}
    cp1 = throughput(_titan(**plan))
    cp2 = throughput(_titan(**plan, context_parallel=2))
    assert cp2.parts_s["communication (exposed)"] == pytest.approx(cp1.parts_s["communication (exposed)"], rel=0.01)
