"""Megatron-core memory terms, each from the code that allocates it: the fused vocab-parallel cross-entropy's
backward (`--cross-entropy-loss-fusion`, Megatron-SWIFT's default from ms-swift 4.0), and where a run's setting of it
comes from (Megatron-LM's flag, Megatron-SWIFT's argument and its default by version); the gradient buffers' dtype
(fp16 runs keep fp16 buffers unless `--accumulate-allreduce-grads-in-fp32`) and the fp32 copy the optimizer steps on."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_shapes import QWEN3_30B_A3B
from vramlens.estimate import components as C
from vramlens.formats import parse_document
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolve import Settings, resolve
from vramlens.resolved import ResolvedPlan

H100 = GpuSpec(name="H100", memory_gib=79.2, usable_gib=79.2, bf16=True)
# Qwen3-4B's shapes (its config.json): hidden 2560, 36 layers, 32 heads over 8 K/V heads of 128, vocabulary 151936
QWEN3_4B = ModelArch(
    id="qwen3-4b",
    family="qwen3",
    hidden=2560,
    layers=36,
    heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=9728,
    vocab=151936,
    tied_embeddings=True,
)


def plan(**kw) -> ResolvedPlan:
    base = dict(
        arch=QWEN3_4B,
        optimizer=OptimizerSpec(name="adamw_apex_fused", states=2),
        gpu=H100,
        strategy="megatron",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=4,
        seq_len=8192,
        attn_impl="sdpa",
        world_size=1,
    )
    base.update(kw)
    return ResolvedPlan(**base)


@pytest.mark.parametrize("tp, sp", [(1, False), (4, True), (2, False)])
def test_fused_cross_entropy_backward_holds_an_fp32_copy_of_the_softmax(tp, sp):
    # megatron-core core_v0.15.0 fusions/fused_cross_entropy.py `calculate_gradients`, compiled (jit.py
    # `jit_fuser = torch.compile`): the in-place `grad_2d[arange_1d, masked_target_1d] -= softmax_update` on the
    # saved fp32 softmax becomes a functional index_put into a new fp32 buffer, alive with the softmax and the
    # bf16 gradient: 4 + 4 + 2 bytes per logit of the rank's vocabulary share
    rp = plan(tensor_parallel=tp, sequence_parallel=sp, cross_entropy_fusion=True)
    tokens = rp.micro_batch * rp.seq_len
    logits = C.megatron_step(rp)["forward-backward"]["logits"]
    expected = tokens * (4 * 2560 / (tp if sp else 1) + (4 + 4 + 2) * 151936 / tp)
    assert logits == pytest.approx(expected, rel=1e-6)


def test_unfused_cross_entropy_keeps_six_bytes_per_logit():
    # tensor_parallel/cross_entropy.py runs eagerly: the gradient is made in place in the softmax, autograd casts it
    rp = plan(tensor_parallel=4, sequence_parallel=True, cross_entropy_fusion=False)
    logits = C.megatron_step(rp)["forward-backward"]["logits"]
    assert logits == pytest.approx(4 * 8192 * (4 * 2560 / 4 + 6 * 151936 / 4), rel=1e-6)


def test_fusion_moves_the_step_peak_by_the_softmax_copy():
    fused = C.megatron_step(plan(tensor_parallel=4, sequence_parallel=True, cross_entropy_fusion=True))
    plain = C.megatron_step(plan(tensor_parallel=4, sequence_parallel=True, cross_entropy_fusion=False))
    extra = sum(fused["forward-backward"].values()) - sum(plain["forward-backward"].values())
    assert extra == pytest.approx(4 * 8192 * 4 * 151936 / 4, abs=2)


SWIFT = """NPROC_PER_NODE=4 \\
megatron sft \\
    --model Qwen/Qwen3-4B \\
    --tensor_model_parallel_size 4 \\
    --sequence_parallel true \\
    --micro_batch_size 1 \\
    --max_length 4096 {extra}
"""

MEGATRON_LM = """torchrun --nproc_per_node 4 pretrain_gpt.py \\
    --num-layers 36 --hidden-size 2560 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 \\
    --micro-batch-size 1 --tensor-model-parallel-size 4 --bf16 {extra}
"""


def fusion(tmp_path: Path, text: str, name: str, **settings) -> bool:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    parsed = parse_document(text, str(path), workspace=tmp_path).plan
    assert parsed is not None
    return resolve(parsed, Settings(model_lookup=False, gpu="H100-80GB", **settings)).resolved.cross_entropy_fusion


def test_megatron_swift_fuses_the_cross_entropy_by_default_from_4_0(tmp_path):
    # ms-swift v4.0.0 swift/megatron/arguments/megatron_args.py `cross_entropy_loss_fusion: bool = True`;
    # v3.12.6 swift/megatron/argument/megatron_args.py `= False`
    assert fusion(tmp_path, SWIFT.format(extra=""), "a.sh")
    assert fusion(tmp_path, SWIFT.format(extra=""), "b.sh", framework_versions={"ms-swift": "4.0.0"})
    assert not fusion(tmp_path, SWIFT.format(extra=""), "c.sh", framework_versions={"ms-swift": "3.12.6"})
    off = SWIFT.format(extra="\\\n    --cross_entropy_loss_fusion false")
    assert not fusion(tmp_path, off, "d.sh")
    on = SWIFT.format(extra="\\\n    --cross_entropy_loss_fusion true")
    assert fusion(tmp_path, on, "e.sh", framework_versions={"ms-swift": "3.12.6"})


def test_megatron_lm_fuses_the_cross_entropy_only_with_the_flag(tmp_path):
    # core_v0.15.0 megatron/training/arguments.py: `--cross-entropy-loss-fusion`, action='store_true'
    assert not fusion(tmp_path, MEGATRON_LM.format(extra=""), "a.sh")
    assert fusion(tmp_path, MEGATRON_LM.format(extra="--cross-entropy-loss-fusion"), "b.sh")


def resolved(tmp_path: Path, text: str, name: str, **settings) -> ResolvedPlan:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    parsed = parse_document(text, str(path), workspace=tmp_path).plan
    assert parsed is not None
    return resolve(parsed, Settings(model_lookup=False, gpu="H100-80GB", **settings)).resolved


@pytest.mark.parametrize(
    "flags, dtype",
    [
        # megatron/training/arguments.py `validate_args`: bf16 turns `accumulate_allreduce_grads_in_fp32` on unless
        # `--grad-reduce-in-bf16` / `--main-grads-dtype bf16`; fp16 never does
        ("--bf16", "fp32"),
        ("--bf16 --grad-reduce-in-bf16", "bf16"),
        ("--bf16 --main-grads-dtype bf16", "bf16"),
        ("--fp16", "fp16"),
        ("--fp16 --accumulate-allreduce-grads-in-fp32", "fp32"),
    ],
)
def test_megatron_lm_gradient_buffer_dtype(tmp_path, flags, dtype):
    text = MEGATRON_LM.replace("--bf16 {extra}", flags)
    rp = resolved(tmp_path, text, "run.sh")
    assert rp.grad_buffer_dtype == dtype
    assert not [u for u in rp.unmodelled if "gradient" in u.what]


def test_megatron_swift_fp16_keeps_fp16_gradient_buffers(tmp_path):
    # ms-swift swift/megatron/arguments/megatron_args.py `_map_dtype`: only bf16 with fp32 main grads turns the
    # accumulation in fp32 on
    assert resolved(tmp_path, SWIFT.format(extra="\\\n    --fp16 true"), "a.sh").grad_buffer_dtype == "fp16"
    assert resolved(tmp_path, SWIFT.format(extra=""), "b.sh").grad_buffer_dtype == "fp32"
    # `--torch_dtype float16` (or float32) without --fp16/--bf16 trains in fp16 (base_args/model_args.py
    # `_init_mixed_precision`): fp16 weights and fp16 gradient buffers
    rp = resolved(tmp_path, SWIFT.format(extra="\\\n    --torch_dtype float16"), "c.sh")
    assert (rp.weight_dtype, rp.grad_buffer_dtype) == ("fp16", "fp16")
    rp = resolved(tmp_path, SWIFT.format(extra="\\\n    --torch_dtype float32"), "d.sh")
    assert (rp.weight_dtype, rp.grad_buffer_dtype) == ("fp16", "fp16")
    rp = resolved(tmp_path, SWIFT.format(extra="\\\n    --torch_dtype float16 \\\n    --bf16 true"), "e.sh")
    assert (rp.weight_dtype, rp.grad_buffer_dtype) == ("bf16", "fp32")


@pytest.mark.parametrize("distributed, dp", [(True, 4), (False, 4), (True, 1)])
def test_sixteen_bit_gradient_buffers_halve_the_gradients_and_the_step_copies_them_to_fp32(distributed, dp):
    # param_and_grad_buffer.py `grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype`; the optimizer's
    # `_copy_model_grads_to_main_grads` makes `.float()` copies: the rank's 1/DP shard under the distributed
    # optimizer, every parameter without it
    common = dict(weight_dtype="fp16", compute_dtype="fp16", distributed_optimizer=distributed, world_size=dp)
    wide = C.megatron_step(plan(**common))
    narrow = C.megatron_step(plan(grad_buffer_dtype="fp16", **common))
    n = wide["forward-backward"]["gradients"] / 4
    assert narrow["forward-backward"]["gradients"] == pytest.approx(2 * n, abs=1)
    assert wide["optimizer-step"]["gradients"] == wide["forward-backward"]["gradients"]
    copy = narrow["optimizer-step"]["gradients"] - narrow["forward-backward"]["gradients"]
    assert copy == pytest.approx(4 * n / (dp if distributed else 1), abs=2)


@pytest.mark.parametrize(
    "backend, named", [("", False), ("--attention-backend flash", False), ("--attention-backend unfused", True)]
)
def test_softmax_in_fp32_is_named_only_where_the_softmax_is_unfused(tmp_path, backend, named):
    # fusions/fused_softmax.py `forward_torch_softmax` casts the scores to fp32 in Megatron's unfused attention; a
    # fused or flash kernel keeps its own softmax whatever the flag says
    text = MEGATRON_LM.format(extra=f"--attention-softmax-in-fp32 {backend}")
    path = tmp_path / "run.sh"
    path.write_text(text, encoding="utf-8")
    plan = parse_document(text, str(path), workspace=tmp_path).plan
    assert plan is not None
    assert any(u.key.endswith("attention-softmax-in-fp32") for u in plan.unmodelled) is named


@pytest.mark.parametrize(
    "flags, per_param",
    [
        # Adam's two fp32 states and an fp32 master copy: 12 bytes (theoretical_memory_usage)
        ("", 12),
        # Transformer Engine's FusedAdam: fp32 states, the fp32 master weights of bf16 parameters as 16-bit
        # remainders (store_param_remainders): 10 bytes
        ("--use-precision-aware-optimizer", 10),
        ("--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", 6),
        ("--use-precision-aware-optimizer --exp-avg-dtype fp8 --exp-avg-sq-dtype bf16", 5),
        # an FP8 run of a recipe other than delayed scaling: Megatron keeps its own fp32 main parameters
        # (optimizer_config.py `use_precision_aware_optimizer_no_fp8_or_ds_fp8`)
        (
            "--fp8-format e4m3 --fp8-recipe blockwise --use-precision-aware-optimizer --exp-avg-dtype bf16 "
            "--exp-avg-sq-dtype bf16",
            8,
        ),
        (
            "--fp8-format e4m3 --fp8-recipe delayed --use-precision-aware-optimizer --exp-avg-dtype bf16 "
            "--exp-avg-sq-dtype bf16",
            6,
        ),
        # fp16 master weights: stored whole, no remainders
        ("--use-precision-aware-optimizer --main-params-dtype fp16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", 6),
    ],
)
def test_precision_aware_optimizer_state_bytes(tmp_path, flags, per_param):
    """megatron/core/optimizer/__init__.py: `--use-precision-aware-optimizer` builds Transformer Engine's FusedAdam
    with `master_weight_dtype`, `exp_avg_dtype`, `exp_avg_sq_dtype`; read from the flags, not named as unmodelled."""
    base = resolved(tmp_path, MEGATRON_LM.replace("{extra}", ""), "base.sh")
    rp = resolved(tmp_path, MEGATRON_LM.replace("{extra}", flags), "run.sh")
    assert {u.key for u in rp.unmodelled} <= {"fp8-format"}  # FP8 training itself stays named
    trained = C.megatron_step(base)["forward-backward"]["optimizer"] / 12
    assert C.megatron_step(rp)["forward-backward"]["optimizer"] == pytest.approx(per_param * trained, rel=1e-6)


def test_precision_aware_optimizer_reads_16_bit_gradients_in_place():
    # distrib_optimizer.py `_copy_model_grads_to_main_grads`: `shard_main_param.decoupled_grad = shard_model_grad`,
    # no `.float()` copy of bf16 gradient buffers at the step
    common = dict(grad_buffer_dtype="bf16", distributed_optimizer=True, world_size=4)
    copied = C.megatron_step(plan(**common))
    decoupled = C.megatron_step(plan(precision_aware_optimizer=True, **common))
    assert copied["optimizer-step"]["gradients"] > copied["forward-backward"]["gradients"]
    assert decoupled["optimizer-step"]["gradients"] == decoupled["forward-backward"]["gradients"]


def test_hybrid_cpu_optimizer_keeps_fp32_states_on_the_gpu_whatever_the_precision_aware_dtypes(tmp_path):
    # `--optimizer-cpu-offload` (which requires the precision-aware flag) builds HybridDeviceOptimizer, whose GPU Adam
    # gets neither the state dtypes nor Transformer Engine's master weights (`param_update_in_fp32=True`)
    offload = "--use-distributed-optimizer --optimizer-cpu-offload --optimizer-offload-fraction 0.2"
    plain = resolved(tmp_path, MEGATRON_LM.replace("{extra}", f"{offload} --use-precision-aware-optimizer"), "a.sh")
    low = resolved(
        tmp_path,
        MEGATRON_LM.replace("{extra}", f"{offload} --use-precision-aware-optimizer --exp-avg-dtype bf16"),
        "b.sh",
    )
    state = C.megatron_step(plain)["forward-backward"]["optimizer"]
    assert state > 0 and C.megatron_step(low)["forward-backward"]["optimizer"] == state


def activations(rp) -> int:
    return C.megatron_step(rp)["forward-backward"]["activations"]


@pytest.mark.parametrize(
    "modules, arch",
    [(("core_attn", "moe"), QWEN3_30B_A3B), (("core_attn", "mlp"), QWEN3_4B)],
    ids=["moe", "mlp"],
)
def test_selective_recompute_of_the_mlp_keeps_its_input_and_rebuilds_one_layer(modules, arch):
    """`--recompute-modules moe` (or `mlp`) checkpoints each layer's MoE layer (dense MLP) whole: every layer keeps
    the MLP half's replicated 5h and nothing inside it; the backward rebuilds one layer's at a time."""
    base = plan(arch=arch, selective_recompute="core_attention")
    recomputed = plan(arch=arch, selective_recompute="core_attention", recompute_modules=modules)
    moe = arch.num_experts > 0
    tokens = base.micro_batch * base.seq_len
    inside, _ = C.megatron._mlp_part(base, moe, True)
    _, kept_r = C.megatron._mlp_part(recomputed, moe, True)
    _, full_r = C.megatron._mlp_part(base, moe, True)
    per_layer = inside + full_r - kept_r
    assert kept_r == 5 * arch.hidden  # norm input, linear_fc1 input (the checkpoint's), dropout mask
    saved = activations(base) - activations(recomputed)
    assert saved == pytest.approx(tokens * per_layer * (arch.layers - 1), rel=0.01)


def test_moe_act_recompute_discards_the_experts_activation_output():
    base = plan(arch=QWEN3_30B_A3B, selective_recompute="core_attention")
    act = plan(arch=QWEN3_30B_A3B, selective_recompute="core_attention", recompute_modules=("core_attn", "moe_act"))
    tokens = base.micro_batch * base.seq_len
    # one 2-byte activation output per token, chosen expert and expert width, in every layer
    expected = tokens * QWEN3_30B_A3B.layers * 8 * 2 * 768
    assert activations(base) - activations(act) == pytest.approx(expected, rel=1e-6)


MEGATRON_MOE = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 48 --hidden-size 2048 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 4 --kv-channels 128 --ffn-hidden-size 6144 --swiglu "
    "--num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 --moe-grouped-gemm "
    "--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 "
    "--max-position-embeddings 4096 --vocab-size 151936 --bf16 --use-distributed-optimizer {extra}\n"
)


@pytest.mark.parametrize(
    "extra, modules",
    [
        ("--moe-layer-recompute", ["core_attn", "moe"]),
        ("--recompute-granularity selective --recompute-modules moe_act shared_experts", ["moe_act", "shared_experts"]),
        (
            "--recompute-granularity selective --recompute-modules core_attn moe --moe-layer-recompute",
            ["core_attn", "moe"],
        ),
    ],
    ids=["moe-layer-recompute", "modules", "both"],
)
def test_recompute_module_flags_are_read(tmp_path, extra, modules):
    """`--moe-layer-recompute` (deprecated, core_v0.13.0) is selective granularity with "moe" added; the modules
    the estimate models are read, not named as not modelled."""
    path = tmp_path / "run.sh"
    path.write_text(MEGATRON_MOE.format(extra=extra), encoding="utf-8")
    plan_ = parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    assert plan_.recompute_modules.value == modules
    assert plan_.selective_recompute.value == "core_attention"
    assert not {u.key for u in plan_.unmodelled} & {"moe-layer-recompute", "recompute-modules", "moe_layer_recompute"}
    rp = resolve(plan_, Settings(gpu="H100", model_lookup=False)).resolved
    assert rp.recompute_modules == tuple(modules)


def test_recompute_modules_the_estimate_does_not_model_are_named(tmp_path):
    path = tmp_path / "run.sh"
    extra = "--recompute-granularity selective --recompute-modules core_attn layernorm"
    path.write_text(MEGATRON_MOE.format(extra=extra), encoding="utf-8")
    plan_ = parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    assert plan_.recompute_modules.value == ["core_attn"]
    named = [u for u in plan_.unmodelled if "layernorm" in u.what]
    assert named and named[0].consequence == "those modules counted as stored"
