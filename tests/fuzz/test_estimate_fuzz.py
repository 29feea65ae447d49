"""The estimator on random resolved plans — catalog models and GPUs with every option combination, and
absurd ones (shapes up to 2^31, batch 10^9, sequence length 0, a GPU with almost no memory): no exception,
no hang, components that add up, and max-batch / max-sequence searches that stay in their bounds."""

from __future__ import annotations

import math
import typing

from fuzzing import count, fuzz_settings, hang_guard
from hypothesis import given
from hypothesis import strategies as st
from vramlens.estimate import COMPONENTS, estimate
from vramlens.knowledge import gpus, models, optimizers
from vramlens.knowledge.schema import GpuSpec, ModelArch
from vramlens.resolved import LINEAR_NAMES, ResolvedPlan

MAX_COUNT = 2**31 - 1  # what the parsers let through (formats.settings.MAX_COUNT)


def _choices(field: str) -> list:
    return list(typing.get_args(ResolvedPlan.model_fields[field].annotation))


small = st.integers(1, 64)
counts = st.one_of(st.integers(0, 16), st.integers(1, 4096), st.integers(0, MAX_COUNT))
dims = st.one_of(st.integers(1, 16384), st.integers(1, MAX_COUNT))


@st.composite
def archs(draw) -> ModelArch:
    if draw(st.booleans()):
        return draw(st.sampled_from(models.all_models()))
    heads = draw(st.integers(1, 256))
    return ModelArch(
        id="fuzz/model",
        family=draw(st.sampled_from(["llama", "gpt2", "phi", "gemma2", "qwen2", "t5", "bert", "x"])),
        block=draw(st.sampled_from(["decoder", "encoder", "encoder-decoder"])),
        mlp=draw(st.sampled_from(["swiglu", "geglu", "gelu", "relu"])),
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        hidden=draw(dims),
        layers=draw(st.one_of(st.integers(1, 200), dims)),
        encoder_layers=draw(st.integers(0, 100)),
        heads=heads,
        kv_heads=draw(st.one_of(st.none(), st.integers(1, heads))),
        head_dim=draw(st.one_of(st.none(), dims)),
        intermediate=draw(dims),
        vocab=draw(dims),
        tied_embeddings=draw(st.booleans()),
        attn_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()),
        num_experts=draw(st.one_of(st.just(0), st.integers(1, 512))),
        experts_per_token=draw(st.integers(0, 16)),
        moe_intermediate=draw(st.one_of(st.none(), dims)),
        shared_experts=draw(st.integers(0, 4)),
        shared_expert_intermediate=draw(st.one_of(st.none(), dims)),
        dense_layers=draw(st.integers(0, 8)),
        kv_lora_rank=draw(st.one_of(st.none(), st.integers(1, 2048))),
        max_position=draw(st.one_of(st.none(), dims)),
        stored_dtype=draw(st.sampled_from(["bf16", "fp32", "fp16"])),
    )


gpu_specs = st.one_of(
    st.sampled_from(gpus.all_gpus()),
    st.builds(
        lambda mem, frac, bf16: GpuSpec(name="fuzz-gpu", memory_gib=mem, usable_gib=mem * frac, bf16=bf16),
        st.floats(0.001, 1e6),
        st.floats(0.0, 1.0),
        st.booleans(),
    ),
)


@st.composite
def plans(draw) -> ResolvedPlan:
    arch = draw(archs())
    peft = draw(st.sampled_from(_choices("peft")))
    fields = dict(
        arch=arch,
        gpu=draw(gpu_specs),
        optimizer=draw(st.sampled_from(optimizers.all_optimizers())),
        framework=draw(
            st.sampled_from(["transformers", "trl", "axolotl", "llamafactory", "torchtune", "deepspeed", "custom"])
        ),
        weight_dtype=draw(st.sampled_from(_choices("weight_dtype"))),
        compute_dtype=draw(st.sampled_from(_choices("compute_dtype"))),
        amp=draw(st.booleans()),
        micro_batch=draw(st.one_of(small, counts)),
        grad_accum=draw(st.one_of(small, counts)),
        seq_len=draw(st.one_of(st.sampled_from([0, 1, 512, 2048, 8192, 131072]), counts)),
        packing=draw(st.booleans()),
        eval_batch=draw(counts),
        grad_checkpointing=draw(st.booleans()),
        activation_offload=draw(st.booleans()),
        attn_impl=draw(st.sampled_from(_choices("attn_impl"))),
        repeat_kv=draw(st.booleans()),
        compile=draw(st.booleans()),
        loss_impl=draw(st.sampled_from(_choices("loss_impl"))),
        keep_logits=draw(st.booleans()),
        optimizer_impl=draw(st.sampled_from(_choices("optimizer_impl"))),
        optimizer_in_bwd=draw(st.booleans()),
        set_to_none=draw(st.booleans()),
        master_weights=draw(st.booleans()),
        peft=peft,
        lora_r=draw(st.one_of(st.integers(0, 256), counts)) if peft != "none" else 0,
        lora_alpha=draw(st.floats(0, 1e6)),
        lora_dropout=draw(st.floats(0, 1)),
        lora_targets=tuple(draw(st.lists(st.sampled_from(LINEAR_NAMES), max_size=6, unique=True))),
        modules_to_save=tuple(draw(st.lists(st.sampled_from(["lm_head", "embed"]), max_size=2, unique=True))),
        adapter_fp32=draw(st.booleans()),
        kbit_upcast=draw(st.booleans()),
        quant_bits=draw(st.sampled_from([None, 4, 8])),
        quant_type=draw(st.sampled_from(["nf4", "fp4", "int8"])),
        quant_double=draw(st.booleans()),
        quant_storage=draw(st.sampled_from(_choices("quant_storage"))),
        strategy=draw(st.sampled_from(_choices("strategy"))),
        zero_stage=draw(st.integers(0, 3)),
        world_size=draw(st.one_of(st.integers(1, 1024), counts.filter(lambda n: n >= 1))),
        offload_optimizer=draw(st.booleans()),
        offload_params=draw(st.booleans()),
        tensor_parallel=draw(st.one_of(st.integers(1, 8), counts)),
        context_parallel=draw(st.one_of(st.integers(1, 8), counts)),
        fsdp_full_state_dict=draw(st.booleans()),
        fsdp_keeps_block_grads=draw(st.booleans()),
        images_per_sequence=draw(st.sampled_from([0, 1, 2, 64])),
        gpu_count=draw(st.integers(1, 1024)),
        expandable_segments=draw(st.booleans()),
        headroom=draw(st.floats(0, 0.9)),
        # online RL: the rollout engine, a critic in a step of its own, offloads between updates
        reference=draw(st.sampled_from(["none", "copy", "adapters-off"])),
        generation=draw(st.sampled_from(["none", "generate", "vllm-colocate", "vllm-server"])),
        generations_per_example=draw(st.integers(0, 16)),
        generation_len=draw(st.sampled_from([0, 1, 2048, 131072])),
        vllm_memory_share=draw(st.floats(0, 1)),
        generation_sleeps=draw(st.booleans()),
        value_model=draw(st.booleans()),
        critic_micro_batch=draw(st.one_of(st.just(0), small)),
        offload_params_idle=draw(st.booleans()),
        offload_optimizer_idle=draw(st.booleans()),
        offload_idle_scope=draw(st.sampled_from(["update", "rollout"])),
        # Megatron's precision-aware optimizer
        precision_aware_optimizer=draw(st.booleans()),
        exp_avg_dtype=draw(st.sampled_from(["fp32", "bf16", "fp16", "fp8"])),
        exp_avg_sq_dtype=draw(st.sampled_from(["fp32", "bf16", "fp16", "fp8"])),
        main_params_dtype=draw(st.sampled_from(["fp32", "fp16"])),
        fp8_recipe=draw(st.sampled_from(["", "delayed", "blockwise"])),
        distributed_optimizer=draw(st.booleans()),
    )
    return ResolvedPlan(**fields)


@fuzz_settings(3000)
@given(rp=plans())
def test_estimate_never_fails_and_stays_bounded(rp: ResolvedPlan):
    with hang_guard("estimate"):
        est = estimate(rp)
    count("estimate")
    numbers = [
        est.allocated_bytes,
        est.reserved_bytes,
        est.device_bytes,
        est.low_bytes,
        est.high_bytes,
        est.usable_bytes,
        *est.components.values(),
        *est.phases.values(),
    ]
    assert all(isinstance(n, (int, float)) and not (isinstance(n, float) and math.isnan(n)) for n in numbers), numbers
    assert all(v >= 0 for v in est.components.values()), est.components
    assert set(est.components) <= set(COMPONENTS)
    assert sum(est.components.values()) == est.device_bytes
    assert est.allocated_bytes <= est.reserved_bytes <= est.device_bytes
    assert est.fits == (est.device_bytes <= est.usable_bytes)
    assert est.max_micro_batch is None or 1 <= est.max_micro_batch <= 4096
    assert est.max_seq_len is None or (est.max_seq_len % 128 == 0 and 128 <= est.max_seq_len <= 1 << 20)
