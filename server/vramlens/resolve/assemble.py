"""The last stage: the `ResolvedPlan` the estimator reads, built from the parts the stages returned, each field the
file's value, the framework's default or what a stage decided."""

from __future__ import annotations

from vramlens.knowledge import peft_methods
from vramlens.knowledge.frameworks import VERL_CRITIC_LAYOUT
from vramlens.resolve import evaluation
from vramlens.resolve.adapters import AdapterPart, _adapter_rank
from vramlens.resolve.common import (
    FUSED_KERNELS,
    Approximate,
    Context,
    liger_kernels,
    liger_kernels_note,
    liger_loss,
    verl_fused_head,
)
from vramlens.resolve.distribution import DistributionPart, _megatron_layout, pipeline_split, zero_sizes
from vramlens.resolve.gpu import GpuPart
from vramlens.resolve.model import ModelPart
from vramlens.resolve.optimizer import OptimizerPart
from vramlens.resolve.precision import TrainedPrecisionPart
from vramlens.resolve.sequence import SequencePart
from vramlens.resolve.versions import VersionsPart
from vramlens.resolved import ResolvedPlan


def _fused_lora_kernels(ctx: Context, arch) -> bool:
    """Fused LoRA kernels a config switches on (axolotl's `lora_*_kernel`), where the estimate's fused LoRA step
    holds: a gated MLP and no routed experts (components.unsloth_kernels); elsewhere they are named as not modelled."""
    said = ctx.plan.fused_lora
    if said is None or not said.value:
        return False
    if arch.is_moe or arch.mlp not in ("swiglu", "geglu"):
        ctx.unmodelled(
            said,
            "fused_lora",
            "true",
            "fused LoRA kernels on a model with routed experts or an ungated MLP",
            "estimated as PEFT's LoRA layers",
        )
        return False
    return True


def build_plan(
    ctx: Context,
    m: ModelPart,
    g: GpuPart,
    a: AdapterPart,
    o: OptimizerPart,
    d: DistributionPart,
    w: TrainedPrecisionPart,
    s: SequencePart,
    v: VersionsPart,
) -> ResolvedPlan:
    plan, val, hooks = ctx.plan, ctx.val, ctx.hooks
    arch, peft, quant_bits, strategy, zero = m.arch, a.peft, a.quant_bits, d.strategy, d.zero
    attn = v.run.attention
    qval = val if quant_bits else (lambda concept: None)
    return ResolvedPlan(
        arch=arch,
        framework=ctx.fw_key,
        remote_code=m.remote_code,
        weight_dtype=w.weight_dtype,
        compute_dtype=w.compute,
        amp=w.amp,
        fsdp_mixed_precision=w.amp and strategy == "fsdp" and bool(val("fsdp_mixed_precision")),
        micro_batch=s.micro,
        grad_accum=s.ga,
        seq_len=int(s.seq or 2048),
        packing=bool(val("packing")),
        eval_batch=int(val("eval_batch") or s.micro),
        evaluation=(evaluates := evaluation.evaluates(ctx)),
        eval_with_gradients=evaluates and hooks.evaluates_with_gradients,
        eval_loss_impl=evaluation.eval_loss_impl(ctx, val("loss_impl") or "standard") if evaluates else None,
        grad_checkpointing=bool(val("grad_checkpointing")),
        activation_offload=bool(val("activation_offload")),
        attn_impl=attn
        if attn in ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention", "xformers")
        else "other",
        repeat_kv=v.run.repeat_kv,
        loss_shifted_copy=v.run.loss_shifted_copy,
        versions=tuple((k, ver.version, ver.source) for k, ver in v.env.items()),
        attn_mask=not bool(val("packing")) and hooks.behaviour.get("attn_mask", True),
        compile=bool(val("compile")),
        rope_caches=hooks.rope_caches(ctx.extra("torchtune_builder"), arch.family, peft, arch.layers),
        loss_impl=val("loss_impl") or "standard",
        liger_loss=liger_loss(plan),
        verl_fused_head=verl_fused_head(plan),
        **_sp_loss(ctx, d, val("loss_impl") or "standard"),
        keep_logits=hooks.behaviour["keep_logits"],
        fused_kernels=tuple(k for k in val("fused_kernels") or () if k in FUSED_KERNELS),
        liger_kernels=_liger_kernels(ctx, arch),
        **_qat(ctx),
        float8_linears=_float8_linears(ctx),
        float8_all_gather=bool(val("float8_linears")) and bool(val("float8_all_gather")),
        optimizer=o.opt,
        optimizer_impl=o.impl if o.impl in ("foreach", "fused", "forloop") else "fused",
        optimizer_in_bwd=bool(val("optimizer_in_bwd")),
        set_to_none=bool(val("zero_grad_set_to_none") if val("zero_grad_set_to_none") is not None else True),
        master_weights=w.master,
        peft=peft,
        lora_r=_adapter_rank(plan, peft, val),
        lora_alpha=float(val("lora_alpha") or 16) if peft not in ("none", "ia3", "vera") else 0.0,
        lora_dropout=(
            float(val("lora_dropout") or 0.0)
            if peft not in ("none", "ia3", "vera")
            else float(plan.lora_dropout.value or 0.0)
            if peft == "vera" and plan.lora_dropout
            else 0.0
        ),
        lora_targets=a.targets,
        feedforward_targets=a.feedforward,
        modules_to_save=a.modules_to_save,
        adapter_fp32=v.adapter_fp32,
        kbit_upcast=v.kbit_upcast,
        experts_kbit=bool(qval("experts_quantized")),
        expert_targets=_expert_targets(val("expert_targets")) if peft in ("lora", "qlora") else (),
        kbit_embeddings_16bit=v.kbit_embeddings_16bit,
        trainable_fp32=w.trainable_fp32,
        low_rank=o.low_rank,
        low_rank_targets=o.low_rank_targets,
        low_rank_proj_quant=isinstance(o.proj_bits, int) and o.proj_bits < 16,
        **a.partial,
        quant_bits=_kbit_layers_noted(ctx, arch.family, quant_bits),
        quant_type=str(qval("quant_type") or "nf4"),
        quant_double=bool(qval("quant_double")),
        quant_storage=v.storage if v.storage in ("bf16", "fp16", "fp32") else "uint8",
        quant_keeps_input=v.keeps_input,
        **{**hooks.step_flags(), **({"fused_lora": True} if _fused_lora_kernels(ctx, arch) else {})},
        strategy=strategy,
        zero_stage=int(zero) if strategy in ("deepspeed", "fsdp") else 0,
        world_size=d.shard_ranks,
        shard_group=_shard_group(ctx, d),
        critic_layout=_critic_layout(ctx),
        offload_optimizer=bool(val("offload_optimizer")),
        offload_params=bool(val("offload_params")),
        offload_params_idle=bool(val("offload_params_idle")),
        offload_optimizer_idle=bool(val("offload_optimizer_idle")),
        offload_idle_scope=str(val("offload_idle_scope") or "update"),
        critic_micro_batch=int(val("critic_micro_batch") or 0),
        critic_grad_checkpointing=None if (gc := val("critic_grad_checkpointing")) is None else bool(gc),
        teacher_sharding=str(ts) if (ts := val("teacher_sharding")) in ("whole", "zero3", "zero3_offload") else None,
        models_apart=tuple(val("models_apart") or ()),
        critic_group=tuple(val("critic_group") or ()),
        **(zero_sizes(ctx) if strategy == "deepspeed" else {}),
        tensor_parallel=int(d.tp),
        context_parallel=int(d.cp),
        pipeline_parallel=int(d.pp),
        devices_per_process=d.devices,
        **(_megatron_layout(val) | pipeline_split(ctx, arch.layers, int(d.pp))),
        **_partial_checkpointing(val),
        fsdp_full_state_dict=str(val("fsdp_state_dict_type") or "").upper().startswith("FULL"),
        fsdp_keeps_block_grads=v.keeps_block_grads,
        fsdp_version=int(val("fsdp_version") or 0) if strategy == "fsdp" else 0,
        scalar_head=a.head != "causal-lm",
        gpu=g.gpu,
        gpu_count=d.count,
        expandable_segments="expandable_segments:true" in s.alloc.replace(" ", "").lower(),
        headroom=ctx.settings.headroom,
    )


def _kbit_layers_noted(ctx: Context, family: str, quant_bits: int | None) -> int | None:
    """The plan's k-bit width; with 4-bit base weights, what the estimate does not model for the family over them
    (`models.NOT_MODELLED_KBIT`) joins the assumptions."""
    from vramlens.knowledge.models import NOT_MODELLED_KBIT

    if quant_bits and (note := NOT_MODELLED_KBIT.get(family)):
        ctx.assumptions.append(Approximate(f"approximate: `{family}`: {note}"))
    return quant_bits


def _qat(ctx: Context) -> dict:
    """torchao's fake-quantized linears (`qat`): the layout whose saved tensors knowledge/qat.py measured, and a
    note that the figures are that torchao release's."""
    from vramlens.knowledge import qat

    found = qat.layout(ctx.val("qat"))
    if found is None:
        return {}
    name, group = found
    ctx.assumptions.append(
        Approximate(
            f"quantization-aware training, {qat.SAVED[name].title}: each linear's fake-quantized weight "
            f"{'and input ' if qat.SAVED[name].input else ''}copies kept for the backward, "
            f"as torchao {qat.TORCHAO_MEASURED} keeps them (measured); other torchao releases may keep others"
        )
    )
    return {"qat": name, "qat_group": group}


def _float8_linears(ctx: Context) -> bool:
    """torchao's float8 training linears, counted as the bf16 linears they replace: `matmul_with_hp_or_float8_args`
    saves its high-precision input and weight for the backward and casts them to fp8 again there (torchao 0.17
    float8/float8_linear.py), so what a step keeps is a bf16 step's (tests/trace/test_float8_linears.py); the fp8
    copies one linear makes at a time are not counted, which the assumptions say."""
    on = bool(ctx.val("float8_linears"))
    if on:
        gathered = " (and FSDP's fp8 all-gather counted at bf16)" if ctx.val("float8_all_gather") else ""
        ctx.assumptions.append(
            Approximate(
                "float8 linears (torchao) counted as bf16 linears: they keep their bf16 inputs and weights for the "
                f"backward; the fp8 copies of one linear's input, weight and output gradient not counted{gathered}"
            )
        )
    return on


def _liger_kernels(ctx: Context, arch) -> bool:
    """Whether the fused kernels are Liger's; their estimate's note (`liger_kernels_note`) joins the assumptions."""
    note = liger_kernels_note(ctx.plan, arch.family, arch.norm, arch.mlp, arch.is_moe)
    if note is not None:
        ctx.assumptions.append(note)
    return liger_kernels(ctx.plan)


def _sp_loss(ctx: Context, d: DistributionPart, loss_impl: str) -> dict:
    """The framework's own sequence-parallel loss (`FrameworkHooks.sp_loss_16bit`), as ResolvedPlan fields: with
    context parallelism and the standard loss, the cross-entropy on the 16-bit logits, chunked by the chunk size the
    environment sets (`sp_loss_chunk_env`; 0 or unset: one call over every token)."""
    hooks = ctx.hooks
    if not hooks.sp_loss_16bit or int(d.cp or 1) <= 1 or loss_impl != "standard" or d.strategy == "megatron":
        return {}
    chunk = 0
    said = ctx.plan.extra.get(hooks.sp_loss_chunk_env) if hooks.sp_loss_chunk_env else None
    if said is not None and said.value is not None:
        try:
            chunk = max(int(str(said.value).strip()), 0)
        except ValueError:
            chunk = 0
    chunked = f", in chunks of {chunk:,} tokens ({hooks.sp_loss_chunk_env})" if chunk else ""
    ctx.assumptions.append(
        Approximate(
            f"{ctx.fw_label}'s sequence-parallel loss: cross-entropy on this rank's 16-bit logits{chunked}, as its "
            "trainer's code reads; not checked against a trace, and the figures its chunked examples state are higher"
        )
    )
    return {"loss_16bit": True, "loss_chunk_tokens": chunk}


def _partial_checkpointing(val) -> dict:
    """Checkpointing of some blocks or some ops, the vocabulary-parallel loss and whether a compiled model's loss is
    compiled too, as ResolvedPlan fields."""
    every = val("checkpoint_every")
    mode = val("selective_recompute")
    return {
        "checkpoint_every": int(every) if isinstance(every, int) and every >= 1 else 1,
        "selective_recompute": mode if mode in ("op", "core_attention") else "none",
        "recompute_modules": tuple(val("recompute_modules") or ("core_attn",)),
        "loss_parallel": bool(val("loss_parallel")),
        "compile_loss": val("compile_loss") is not False,
    }


def _expert_targets(names) -> tuple[str, ...]:
    """The expert stacks a `target_parameters` list names, canonical ("gate_up", "down", "router"), however a reader
    passed them (already canonical, or peft's parameter names)."""
    kinds = [peft_methods.expert_parameter(n) for n in names or ()]
    return tuple(dict.fromkeys(k for k in kinds if k is not None))


def _critic_layout(ctx: Context) -> tuple[int, int, int, int, int] | None:
    """A Megatron critic's own layout (TP, PP, CP, EP, expert TP; 0 for expert TP: its TP), where the reader found
    one other than the policy's (knowledge.frameworks.VERL_CRITIC_LAYOUT), said in every view."""
    if not ctx.val("value_model") or ctx.val("dist_strategy") != "megatron":
        return None
    said = ctx.plan.extra.get(VERL_CRITIC_LAYOUT)
    if said is None:
        return None
    tp, pp, cp, ep, etp = (max(int(n or 0), 0) for n in said.value)
    ctx.assumptions.append(f"{said.note}, not the policy's: the critic's weights, gradients and optimizer state by it")
    return max(tp, 1), max(pp, 1), max(cp, 1), max(ep, 1), etp


def _shard_group(ctx: Context, d: DistributionPart) -> int:
    """HSDP: the ranks FSDP shards over, the data-parallel ranks of one replica (0: every one of them). Replicas
    that do not divide the sharding ranks are said and left out."""
    replicas = int(ctx.val("dp_replicas") or 1)
    if replicas <= 1 or d.strategy != "fsdp":
        return 0
    if d.shard_ranks % replicas:
        ctx.assumptions.append(
            Approximate(
                f"{replicas} data-parallel replicas do not divide the {d.shard_ranks} sharding GPUs: estimated as "
                "sharded over all of them"
            )
        )
        return 0
    group = d.shard_ranks // replicas
    ctx.assumptions.append(f"HSDP: FSDP shards over {group} GPU(s) and replicates across {replicas} groups of them")
    return group
