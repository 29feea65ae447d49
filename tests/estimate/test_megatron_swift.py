"""Megatron-SWIFT layouts by megatron-core's rules: experts kept whole on tensor-parallel ranks (ms-swift's
`expert_tensor_parallel_size` default), the frozen reference copy of full-weight DPO, and the routed tokens of a
sequence-parallel shard."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from model_shapes import QWEN3_30B_A3B
from vramlens.estimate import components as C
from vramlens.knowledge.schema import GpuSpec, OptimizerSpec
from vramlens.resolved import ResolvedPlan

MOE_SFT = """# 8 GPUs
NPROC_PER_NODE=8 \\
megatron sft \\
    --model Qwen/Qwen3-30B-A3B \\
    --tensor_model_parallel_size 4 \\
    --expert_model_parallel_size 2 \\
    --sequence_parallel true \\
    --micro_batch_size 1 \\
    --global_batch_size 16 \\
    --recompute_granularity full \\
    --recompute_method uniform \\
    --recompute_num_layers 1 \\
    --max_length 4096 {extra}
"""

DPO = """NPROC_PER_NODE=4 \\
megatron rlhf \\
    --rlhf_type dpo \\
    --model Qwen/Qwen2.5-7B-Instruct \\
    --tensor_model_parallel_size 4 \\
    --sequence_parallel true \\
    --micro_batch_size 1 \\
    --global_batch_size 16 \\
    --recompute_granularity full \\
    --recompute_method uniform \\
    --recompute_num_layers 1 \\
    --max_length 2048 {extra}
"""


def run_cli(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", "--gpu", "H100", str(path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def estimate_script(tmp_path: Path, name: str, text: str) -> dict:
    path = tmp_path / name
    path.write_text(text)
    return run_cli(path)


def test_swift_keeps_experts_whole_on_tensor_parallel_ranks(tmp_path):
    """ms-swift's `expert_tensor_parallel_size` defaults to 1 (not Megatron-LM's TP): each TP rank holds all of its
    EP group's experts, so the default estimates like an explicit 1 and well above an explicit ETP of 4."""
    default = estimate_script(tmp_path, "default.sh", MOE_SFT.format(extra=""))
    etp1 = estimate_script(tmp_path, "etp1.sh", MOE_SFT.format(extra="\\\n    --expert_tensor_parallel_size 1"))
    etp4 = estimate_script(tmp_path, "etp4.sh", MOE_SFT.format(extra="\\\n    --expert_tensor_parallel_size 4"))
    assert default["components_gib"] == etp1["components_gib"]
    # the experts are ~95 % of Qwen3-30B-A3B: whole experts on each TP rank weigh about 4× the ETP 4 split
    assert default["components_gib"]["weights"] > 3 * etp4["components_gib"]["weights"]
    # expert data parallelism: 8 ÷ (ETP 1 × EP 2) = 4 shards of their optimizer state, not 8 ÷ (4 × 2) = 1
    assert default["components_gib"]["optimizer"] < 3 * etp4["components_gib"]["optimizer"]


def test_full_dpo_holds_a_reference_copy_with_the_policy_layout(tmp_path):
    full = estimate_script(tmp_path, "full.sh", DPO.format(extra=""))
    lora = estimate_script(tmp_path, "lora.sh", DPO.format(extra="\\\n    --tuner_type lora"))
    comps = full["components_gib"]
    # the policy's 16-bit weights over TP 4, once more for the frozen copy
    assert comps["reference"] == pytest.approx(comps["weights"], rel=0.01)
    assert comps["reference"] > 3.0
    assert lora["components_gib"].get("reference", 0) == 0  # LoRA turns the adapters off instead


H100 = GpuSpec(name="H100", memory_gib=79.2, usable_gib=79.2, bf16=True)


def moe_plan(**kw) -> ResolvedPlan:
    base = dict(
        arch=QWEN3_30B_A3B,
        optimizer=OptimizerSpec(name="adamw_torch", states=2),
        gpu=H100,
        strategy="megatron",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=1,
        seq_len=4096,
        attn_impl="flash_attention_2",
        expert_parallel=4,
        world_size=4,
    )
    base.update(kw)
    return ResolvedPlan(**base)


def test_routed_tokens_come_from_the_sequence_parallel_shard():
    """With whole experts (ETP 1) and sequence parallelism, a TP rank routes only its shard's tokens: every tensor
    an MoE layer saves is divided by TP. With ETP = TP the experts see the shards gathered back, split in width."""

    def per_rank(rp: ResolvedPlan) -> float:
        split, repl = C.megatron_layer_per_token(rp, moe=True)
        tp = max(rp.tensor_parallel, 1)
        return split / tp + repl / (tp if rp.sequence_parallel else 1)

    one = per_rank(moe_plan())
    whole = per_rank(moe_plan(tensor_parallel=4, sequence_parallel=True, expert_tensor_parallel=1))
    assert whole == pytest.approx(one / 4, rel=1e-6)
    split = per_rank(moe_plan(tensor_parallel=4, sequence_parallel=True, expert_tensor_parallel=4))
    # the gathered fc1 input (2h per chosen expert) is not divided by TP
    assert split - whole == pytest.approx(8 * 2 * 2048 * (1 - 1 / 4), rel=1e-6)


def test_lora_on_experts_under_megatron_gets_no_peft_fused_expert_notes(tmp_path):
    """Megatron-SWIFT wraps megatron-core's grouped expert linears in its own LoRA (ms-swift v3.10.0
    swift/megatron/tuners/lora.py `LoraParallelLinear`: LoRA A/B as TEGroupedLinear, dropout allowed), not peft's
    lora.ParamWrapper over transformers' fused expert parameters: nothing here stops at get_peft_model."""
    extra = "\\\n    --tuner_type lora \\\n    --target_modules all-linear \\\n    --lora_dropout 0.05"
    d = estimate_script(tmp_path, "moe_lora.sh", MOE_SFT.format(extra=extra))
    said = " ".join(d["assumptions"])
    assert "ParamWrapper" not in said and "get_peft_model" not in said
