"""What a Megatron-core step holds beyond Megatron-LM's theoretical formula, each from the code that allocates it:
the 16-bit logits beside the fp32 ones in the vocab-parallel cross entropy, Megatron-SWIFT's expert adapters and
their optimizer state sharded over the expert data-parallel group, the hybrid optimizer's GPU share below an offload
fraction of 1, and uneven pipeline stages. Fixtures: ms-swift v4.0.0 example scripts (tests/fixtures/ms-swift)."""

import os
from pathlib import Path

import pytest
from model_shapes import QWEN3_30B_A3B as MOE_30B_A3B
from vramlens.analysis import analyze
from vramlens.estimate import components as C
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan
from vramlens.settings import Settings

H100 = GpuSpec(name="H100", memory_gib=79.2, usable_gib=79.2, bf16=True)
ADAM = OptimizerSpec(name="adamw_torch", states=2)
SWIFT = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "v4.0.0"


def analysed(path: Path, text: str | None = None):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    text = path.read_text(encoding="utf-8") if text is None else text
    a = analyze(text, str(path), Settings(model_lookup=False))
    assert a.estimate is not None and a.resolution is not None, a.error
    return a


def moe_arch(layers: int = 48) -> ModelArch:
    return MOE_30B_A3B.model_copy(update={"layers": layers})


def plan(arch: ModelArch, **kw) -> ResolvedPlan:
    base = dict(
        arch=arch,
        optimizer=ADAM,
        gpu=H100,
        strategy="megatron",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=1,
        seq_len=4096,
        attn_impl="flash_attention_2",
    )
    base.update(kw)
    return ResolvedPlan(**base)


def test_loss_holds_16_bit_logits_beside_their_fp32_copy():
    # megatron/core/tensor_parallel/cross_entropy.py `calculate_logits_max` (`.float()`) while gpt_model.py still
    # holds the output layer's 16-bit logits; fused_cross_entropy.py casts the fp32 gradient to bf16 in backward
    for tp, sp in ((1, False), (4, True), (2, False)):
        rp = plan(moe_arch(), tensor_parallel=tp, sequence_parallel=sp)
        tokens = rp.micro_batch * rp.seq_len
        logits = C.megatron_step(rp)["forward-backward"]["logits"]
        expected = tokens * (4 * 2048 / (tp if sp else 1) + (4 + 2) * 151936 / tp)
        assert logits == pytest.approx(expected, rel=1e-6)


def test_expert_adapters_are_megatron_swift_grouped_lora_and_their_state_is_not_sharded_past_the_expert_group():
    # ms-swift v4.0.0 swift/megatron/tuners/lora.py: lora_A/lora_B over a TEGroupedLinear are grouped linears with
    # the base layer's num_gemms (one pair per expert); linear_fc1 fuses gate and up
    arch = moe_arch()
    r = 8
    per_expert = r * (2048 + 2 * 768) + r * (768 + 2048)
    expert_adapters = per_expert * 128 * 48
    # EP 4 over 4 ranks: one expert data-parallel rank, four data-parallel ranks for the dense adapters
    rp = plan(
        arch,
        peft="lora",
        lora_r=r,
        lora_targets=("all-linear",),
        expert_parallel=4,
        world_size=4,
        distributed_optimizer=True,
    )
    dense, experts = C.megatron_adapter_params(rp)
    assert experts == expert_adapters
    assert C.megatron_dp(rp) == (4, 1)
    _, grads, opt = C.megatron_state_bytes(rp, C.stages(rp)[0])
    on_rank = expert_adapters / 4  # the rank's 32 of 128 experts
    # fp32 main copy + Adam's two states: 12 bytes per adapter parameter of the rank's experts, unsharded
    assert opt > on_rank * 12
    assert opt == pytest.approx(on_rank * 12 + dense * 12 / 4, rel=0.01)
    assert grads == pytest.approx((on_rank + dense) * 4, rel=0.01)
    # more data-parallel ranks per expert group shard the experts' adapter state too
    wider = rp.model_copy(update={"world_size": 16})
    assert C.megatron_dp(wider) == (16, 4)
    assert C.megatron_state_bytes(wider, C.stages(wider)[0])[2] < opt / 3


def test_lora_moe_example_counts_the_experts_adapter_state_on_each_rank():
    # examples/megatron/lora/moe.sh (v4.0.0): Qwen3-30B-A3B, LoRA r 8 on all linears, EP 2 over 2 GPUs: each rank
    # keeps the optimizer state of its 64 experts' adapters whole
    a = analysed(SWIFT / "megatron_lora" / "moe.sh")
    rp = a.resolution.resolved
    assert rp.expert_parallel == 2 and C.megatron_dp(rp)[1] == 1
    dense, experts = C.megatron_adapter_params(rp)
    assert a.estimate.components["optimizer"] >= experts / 2 * 12


def test_partial_cpu_offload_keeps_the_rest_of_the_optimizer_on_the_gpu(tmp_path):
    # examples/models/qwen3_vl/mcore_full.sh (v4.0.0): `--optimizer_cpu_offload true --optimizer_offload_fraction
    # 0.2`; megatron-core's HybridDeviceOptimizer moves that share of the optimizer's parameters to the CPU and
    # keeps fp32 copies and Adam states of the others on the GPU
    a = analysed(SWIFT / "megatron_step" / "mcore_full.sh")
    rp = a.resolution.resolved
    assert rp.offload_optimizer and rp.optimizer_offload_fraction == pytest.approx(0.2)
    assert not any("optimizer_offload_fraction" in u.key for u in a.estimate.unmodelled)
    # (the hybrid optimizer's GPU share: fp32 states and copies, whatever the precision-aware flag says)
    whole_gpu = rp.model_copy(update={"offload_optimizer": False, "precision_aware_optimizer": False})
    on_gpu = C.megatron_step(whole_gpu)["forward-backward"]["optimizer"]
    assert a.estimate.components["optimizer"] == pytest.approx(0.8 * on_gpu, rel=0.01)
    # the default fraction, 1.0, keeps none of it
    whole = tmp_path / "mcore_full.sh"
    whole.write_text((SWIFT / "megatron_step" / "mcore_full.sh").read_text().replace("0.2", "1.0"))
    assert analysed(whole).estimate.components.get("optimizer", 0) == 0


def test_uneven_pipeline_stages_hold_the_layers_given():
    # examples/megatron/moe/moe.sh (v4.0.0): Qwen1.5-MoE-A2.7B (24 layers), PP 2, `--decoder_last_pipeline_num_layers
    # 11`: the first stage builds the other 13 (transformer_block.py `get_num_layers_to_build`)
    a = analysed(SWIFT / "megatron_step" / "moe.sh")
    rp = a.resolution.resolved
    assert rp.last_stage_layers == 11
    assert not any("pipeline_num_layers" in u.key for u in a.estimate.unmodelled)
    first, last = C.stages(rp)
    assert (first.layers, last.layers) == (rp.arch.layers - 11, 11)
    assert first.expert_params > last.expert_params
    # four stages, 2 layers on the first: the middle ones split the other 46 of 48 evenly
    rp4 = plan(moe_arch(), pipeline_parallel=4, first_stage_layers=2, world_size=1, grad_accum=8)
    assert C.stage_layer_counts(rp4) == (2, 16, 16)
    names = [st.name for st in C.stages(rp4)]
    assert names == ["first", "middle", "last"]
    middle = C.stages(rp4)[1]
    assert middle.layers == 16 and middle.in_flight == 3 and not middle.embedding and not middle.head
