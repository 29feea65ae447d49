"""The estimator against hand-checked cases: traced peaks of HF-style modelling code
(the Llama-3-8B table and the per-term sources in docs/memory-model.md; GiB = 2^30 bytes)."""

import pytest
from vramlens.estimate import GIB, estimate
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan

LLAMA3_8B = ModelArch(
    id="meta-llama/Meta-Llama-3-8B",
    family="llama",
    hidden=4096,
    layers=32,
    heads=32,
    kv_heads=8,
    intermediate=14336,
    vocab=128256,
)
LLAMA32_1B = ModelArch(
    id="meta-llama/Llama-3.2-1B",
    family="llama",
    hidden=2048,
    layers=16,
    heads=32,
    kv_heads=8,
    intermediate=8192,
    vocab=128256,
    tied_embeddings=True,
)
H100 = GpuSpec(name="H100", memory_gib=79.2, usable_gib=79.2, bf16=True)
ADAMW = OptimizerSpec(name="adamw_torch", states=2)
ALL7 = ("q", "k", "v", "o", "gate", "up", "down")


def plan(arch=LLAMA3_8B, **kw) -> ResolvedPlan:
    # the traces of docs/memory-model.md ran HF's repeat_kv + SDPA with is_causal=True, i.e. without a padding mask
    base = dict(
        arch=arch,
        optimizer=ADAMW,
        gpu=H100,
        seq_len=2048,
        micro_batch=1,
        optimizer_impl="fused",
        weight_dtype="bf16",
        compute_dtype="bf16",
        attn_mask=False,
    )
    base.update(kw)
    return ResolvedPlan(**base)


def allocated_gib(**kw) -> float:
    return estimate(plan(**kw), limits=False).allocated_bytes / GIB


@pytest.mark.parametrize(
    "kw, traced",
    [
        (dict(), 60.88),  # pure bf16, fused AdamW: start of backward
        (dict(optimizer_impl="foreach"), 74.79),  # foreach: one state-sized temporary in step()
        (dict(grad_accum=2), 75.84),  # grads coexist with activations
        (dict(grad_checkpointing=True), 59.85),
        (dict(seq_len=4096, micro_batch=4), 172.93),
        (dict(seq_len=4096, micro_batch=4, grad_checkpointing=True), 72.87),
        (dict(seq_len=512, micro_batch=4), 60.88),
        (dict(peft="lora", lora_r=16, lora_targets=ALL7, adapter_fp32=False), 30.15),
        (dict(peft="lora", lora_r=16, lora_targets=ALL7, adapter_fp32=True), 37.15),
        (dict(peft="lora", lora_r=16, lora_targets=ALL7, adapter_fp32=True, grad_checkpointing=True), 18.89),
    ],
)
def test_llama3_8b_matches_traced_peak(kw, traced):
    assert allocated_gib(**kw) == pytest.approx(traced, rel=0.02)


@pytest.mark.parametrize(
    "kw, traced",
    [
        (dict(seq_len=512), 10.19),  # tied embeddings: end-of-backward temporary
        (dict(seq_len=2048, micro_batch=4), 32.79),
        (dict(seq_len=2048, micro_batch=4, grad_checkpointing=True), 19.28),
        (dict(seq_len=4096, micro_batch=4), 58.68),
    ],
)
def test_llama32_1b_matches_traced_peak(kw, traced):
    assert allocated_gib(arch=LLAMA32_1B, **kw) == pytest.approx(traced, rel=0.02)


def test_weights_grads_and_adamw_state_follow_the_precision_arithmetic():
    p = 8_030_261_248  # Llama-3-8B parameters
    pure = estimate(plan(optimizer_impl="foreach"), limits=False)
    assert pure.params_total == p
    assert pure.components["weights"] == 2 * p  # bf16 weights
    assert pure.components["gradients"] == 2 * p  # bf16 grads at the step
    assert pure.components["optimizer"] == 4 * p  # m and v in the param dtype
    assert pure.components["temporaries"] == 2 * p  # foreach sqrt(exp_avg_sq)
    amp = estimate(plan(weight_dtype="fp32", amp=True, optimizer_impl="fused"), limits=False)
    assert amp.components["weights"] == 4 * p
    assert amp.components["optimizer"] == 8 * p


def test_tensor_parallelism_splits_the_weights_and_their_states_before_fsdp_shards_them():
    """TP over 8 ranks holds an eighth of every weight, gradient and optimizer state; FSDP over 2 data-parallel ranks
    halves that again (torchtune's 70B multi-node config: TP 8 × FSDP 2 over 16 GPUs)."""
    from vramlens.estimate import components as C

    def parts(rp):
        ps = C.params(rp)
        return C.weights(rp, ps), C.gradients(rp, ps), C.optimizer_state(rp, ps)

    p = 8_030_261_248
    one = parts(plan())
    tp = parts(plan(tensor_parallel=8))
    both = parts(plan(tensor_parallel=8, strategy="fsdp", zero_stage=3, world_size=2, gpu_count=16))
    assert one == (2 * p, 2 * p, 4 * p)
    assert tp == tuple(x // 8 for x in one)
    assert both == tuple(x // 16 for x in one)
    # and the peak follows (the activations and logits are not all split: it is not a sixteenth)
    assert (
        estimate(
            plan(tensor_parallel=8, strategy="fsdp", zero_stage=3, world_size=2, gpu_count=16), limits=False
        ).allocated_bytes
        < estimate(plan(), limits=False).allocated_bytes / 4
    )


def test_phase_is_the_maximum_not_the_sum():
    est = estimate(plan(), limits=False)
    assert est.phase == "forward-backward"
    assert est.components["gradients"] == 0  # set_to_none and no accumulation
    assert est.allocated_bytes == max(est.phases.values())


def test_checkpointing_and_batch_move_the_peak_the_right_way():
    base = allocated_gib(seq_len=4096, micro_batch=2)
    assert allocated_gib(seq_len=4096, micro_batch=2, grad_checkpointing=True) < base
    assert allocated_gib(seq_len=4096, micro_batch=1) < base
    assert allocated_gib(seq_len=4096, micro_batch=2, loss_impl="fused") < base
    assert allocated_gib(seq_len=4096, micro_batch=2, attn_impl="eager") > base


def test_qlora_weights_are_about_half_a_byte_per_quantized_parameter():
    est = estimate(
        plan(peft="qlora", quant_bits=4, quant_double=True, lora_r=16, lora_targets=ALL7, kbit_upcast=False),
        limits=False,
    )
    # 6.98 B linear params × 0.5 B + 1.05 B embedding/head params × 2 B ≈ 5.2 GiB
    assert 5.0 < (est.components["weights"]) / GIB < 5.4
    assert 0.09 < est.components["quant_constants"] / GIB < 0.12


def test_fit_limits_are_consistent():
    est = estimate(
        plan(
            gpu=GpuSpec(name="A100-40GB", memory_gib=40, usable_gib=39.5, bf16=True),
            grad_checkpointing=True,
            optimizer=OptimizerSpec(name="adamw_bnb_8bit", states=2, state_bytes=1, library="bitsandbytes"),
        )
    )
    if est.fits:
        assert est.max_micro_batch >= 1
        bigger = estimate(
            plan(
                gpu=GpuSpec(name="A100-40GB", memory_gib=40, usable_gib=39.5, bf16=True),
                grad_checkpointing=True,
                micro_batch=est.max_micro_batch + 1,
                optimizer=OptimizerSpec(name="adamw_bnb_8bit", states=2, state_bytes=1, library="bitsandbytes"),
            ),
            limits=False,
        )
        assert not bigger.fits
    assert sum(est.components.values()) == est.device_bytes


QLORA_ALL7 = dict(peft="qlora", quant_bits=4, quant_double=True, lora_r=16, lora_alpha=16.0, lora_targets=ALL7)


@pytest.mark.parametrize(
    "kw, traced",
    [
        # exact traces of the same steps, padded batches (benchmarks/results/trace_vs_estimate.txt, rows 16, 22, 23)
        (dict(seq_len=4096, micro_batch=4, attn_mask=True), 176.93),
        (dict(QLORA_ALL7, attn_mask=True), 31.25),
        (dict(QLORA_ALL7, grad_checkpointing=True, seq_len=4096, micro_batch=2, attn_mask=True), 24.62),
    ],
)
def test_padded_batches_and_qlora_match_trace(kw, traced):
    assert allocated_gib(**kw) == pytest.approx(traced, rel=0.02)


def test_paged_optimizer_state_is_on_the_device_but_not_allocated():
    paged = OptimizerSpec(name="paged_adamw_8bit", states=2, state_bytes=1.016, paged=True, library="bitsandbytes")
    est = estimate(plan(optimizer=paged, seq_len=1024), limits=False)
    assert est.components["optimizer"] == 0
    assert est.components["optimizer_paged"] > 14 * GIB  # ~2 bytes per parameter, in unified memory
    assert est.allocated_bytes / GIB == pytest.approx(30.16, rel=0.02)  # trace row 18
    assert est.device_bytes > est.reserved_bytes + est.components["optimizer_paged"] - 1


def test_paged_states_that_do_not_fit_page_out_instead_of_running_out_of_memory():
    """Paged (unified-memory) optimizer states beyond what fits beside the rest move to host memory: the device
    holds what fits, the run is judged on what torch allocates, and the assumptions say how much pages out."""
    paged32 = OptimizerSpec(name="paged_adamw_32bit", states=2, state_bytes=4, paged=True, library="bitsandbytes")
    small = GpuSpec(name="A100-40GB", memory_gib=39.4, usable_gib=39.4, bf16=True)
    est = estimate(plan(optimizer=paged32, gpu=small, grad_checkpointing=True, seq_len=1024), limits=False)
    resident = est.reserved_bytes + est.components["cuda_context"]
    states = 2 * 4 * est.params_trainable  # fp32 exp_avg and exp_avg_sq
    assert resident < est.usable_bytes < resident + states  # everything at once would not fit
    assert est.fits and est.device_bytes == est.usable_bytes
    assert est.components["optimizer_paged"] == est.device_bytes - resident
    out = (states - est.components["optimizer_paged"]) / GIB
    assert any(f"{out:.1f} GiB of them do not fit" in a for a in est.assumptions), est.assumptions
    # on a GPU with room for them the states stay on the device whole
    roomy = estimate(
        plan(
            optimizer=paged32,
            grad_checkpointing=True,
            seq_len=1024,
            gpu=GpuSpec(name="B200", memory_gib=178, usable_gib=178, bf16=True),
        ),
        limits=False,
    )
    assert roomy.components["optimizer_paged"] == pytest.approx(states, rel=0.01)
    assert not any("page out" in a for a in roomy.assumptions)


def test_ppo_value_model_steps_in_backward_and_pages_its_states_like_the_policy():
    paged32 = OptimizerSpec(name="paged_adamw_32bit", states=2, state_bytes=4, paged=True, library="bitsandbytes")
    kw = dict(
        objective="ppo",
        value_model=True,
        reward_model=True,
        reference="copy",
        optimizer=paged32,
        grad_checkpointing=True,
        seq_len=512,
    )
    from vramlens.estimate.components import scalar_head_params

    # the value model: the policy's backbone with a one-wide score head in place of its vocabulary head
    weights = 2 * scalar_head_params(plan(**kw).arch)
    in_bwd = estimate(plan(optimizer_in_bwd=True, **kw), limits=False)
    after = estimate(plan(**kw), limits=False)
    assert in_bwd.components["value_model"] == pytest.approx(weights, rel=0.01)  # weights only: no gradients
    assert after.components["value_model"] == pytest.approx(2 * weights, rel=0.01)  # + bf16 gradients
    assert in_bwd.components["gradients"] == 0


def test_a_model_given_by_its_sizes_is_estimated(tmp_path):
    """GPT-NeoX configs name no hub id, only sizes: the estimate is built from them (Pythia-6.9B's shapes)."""
    from vramlens.estimate import estimate as run
    from vramlens.formats import parse_document
    from vramlens.resolve import resolve
    from vramlens.settings import Settings

    text = (
        '{"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "seq_length": 2048,\n'
        ' "max_position_embeddings": 2048, "no_weight_tying": true, "norm": "layernorm",\n'
        ' "train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 1}, "precision": "fp16"}\n'
    )
    plan = parse_document(text, str(tmp_path / "neox.yml")).plan
    res = resolve(plan, Settings(gpu="A100-80GB", gpu_count=8))
    est = run(res.resolved, limits=False)
    assert est.params_total == pytest.approx(6.86e9, rel=0.01)
    assert any("sizes" in a for a in res.assumptions)


def test_t5_module_names_map_to_their_mlp_linears():
    """T5's `wo` is the MLP's down projection in gated-gelu blocks (Flan-T5: wi_0, wi_1 → wo) and its second linear
    in relu ones (T5 v1.0: wi → wo); a LoRA on them adapts those linears, not nothing."""
    from vramlens.knowledge.models import lookup_model
    from vramlens.resolve import normalize_targets

    flan, t5 = lookup_model("google/flan-t5-base"), lookup_model("t5-base")
    assert normalize_targets(["q", "v", "wi_0", "wi_1", "wo"], flan) == (("q", "v", "gate", "up", "down"), [])
    assert normalize_targets(["q", "v", "wi", "wo"], t5) == (("q", "v", "fc1", "fc2"), [])


def test_every_catalog_family_estimates_degenerate_shapes():
    """A config being typed can hold `max_length: 0` or a micro batch of 1 token: every family's formulas (DeBERTa's
    relative positions, T5's biases, MoE routing, …) answer with bounded numbers instead of raising."""
    from vramlens.knowledge import gpus, models, optimizers

    one_per_family = {}
    for arch in models.all_models():
        one_per_family.setdefault((arch.family, arch.block), arch)
    gpu = gpus.lookup_gpu("A100-80GB")[0]
    for arch in one_per_family.values():
        for seq, ckpt in ((0, False), (0, True), (1, False)):
            rp = ResolvedPlan(
                arch=arch,
                optimizer=optimizers.lookup_optimizer("adamw_torch"),
                gpu=gpu,
                seq_len=seq,
                micro_batch=1,
                grad_checkpointing=ckpt,
                scalar_head=arch.block == "encoder",
            )
            est = estimate(rp)
            assert 0 < est.allocated_bytes < 2**50, (arch.id, seq, ckpt)


def test_fsdp_working_set_under_tensor_parallelism_is_the_ranks_slice():
    """FSDP2 over TP: the root's gathered embeddings and output, a block's unsharded gradients and their
    reduce-scatter input are the rank's tensor-parallel slice (torchtitan `apply_tp` shards tok_embeddings and
    output too), so 8-way TP holds an eighth of each; before, only the gathered blocks were divided."""
    from vramlens.estimate import components as C

    one = plan(strategy="fsdp", zero_stage=3, world_size=16, gpu_count=16)
    tp = plan(tensor_parallel=8, strategy="fsdp", zero_stage=3, world_size=16, gpu_count=128)
    assert C.fsdp_root_unsharded(tp) == pytest.approx(C.fsdp_root_unsharded(one) / 8, rel=1e-6)
    p1, p8 = C.params(one), C.params(tp)
    assert C.fsdp_backward_working_set(tp, p8) == pytest.approx(C.fsdp_backward_working_set(one, p1) / 8, rel=1e-6)
