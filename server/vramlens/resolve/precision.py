"""Precision stages: the dtypes the model is loaded and computed in (`resolve_precision`), then how the trained weights
are held once the adapters, optimizer and sharding are known (`resolve_trained_precision`: the framework's fp32
upcast of trainable weights, DeepSpeed's and BAdam's fp32 master copies)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramlens.knowledge.schema import GpuSpec, ModelArch
from vramlens.plan import Origin, Sourced
from vramlens.resolve.common import Context, no_bf16_note
from vramlens.resolve.vision import tower_trains_in_full

if TYPE_CHECKING:
    from vramlens.resolve.adapters import AdapterPart
    from vramlens.resolve.distribution import DistributionPart
    from vramlens.resolve.optimizer import OptimizerPart


@dataclass(frozen=True)
class PrecisionPart:
    amp_dtype: str  # autocast dtype ("none", "bf16", "fp16", "fp8")
    weight_dtype: str  # the dtype the weights are loaded in
    amp: bool  # fp32 weights under 16-bit autocast
    compute: str  # the dtype the matmuls run in


def resolve_precision(ctx: Context, arch: ModelArch, gpu: GpuSpec) -> PrecisionPart:
    plan, val, sources = ctx.plan, ctx.val, ctx.sources
    amp_dtype = val("amp_dtype") or "none"
    weight_dtype = val("weight_dtype") or "auto"
    if weight_dtype == "auto":
        weight_dtype = arch.stored_dtype if arch.stored_dtype in ("fp32", "bf16", "fp16") else "bf16"
        sources["weight_dtype"] = Sourced(
            value=weight_dtype,
            origin=Origin.DERIVED,
            note="dtype auto → the checkpoint's stored dtype",
            framework=ctx.fw_label,
        )
    if weight_dtype not in ("fp32", "bf16", "fp16"):
        weight_dtype = "bf16"
    if amp_dtype in ("bf16", "fp16") and ctx.hooks.loads_in_amp_dtype and plan.weight_dtype is None:
        weight_dtype = amp_dtype
    derived = ctx.hooks.amp_from_weights(weight_dtype) if plan.amp_dtype is None else None
    if derived is not None:
        amp_dtype = derived.amp_dtype
        sources["amp_dtype"] = Sourced(
            value=amp_dtype, origin=Origin.DERIVED, framework=ctx.fw_label, note=derived.note
        )
    if amp_dtype == "bf16" and not gpu.bf16:
        ctx.assumptions.append(no_bf16_note(gpu.name))
    amp = weight_dtype == "fp32" and amp_dtype in ("bf16", "fp16", "fp8")
    compute = weight_dtype if not amp else ("fp16" if amp_dtype == "fp16" else "bf16")
    if compute == "fp16" and amp_dtype == "bf16":
        compute = "bf16"
    return PrecisionPart(amp_dtype, weight_dtype, amp, compute)


@dataclass(frozen=True)
class TrainedPrecisionPart:
    weight_dtype: str
    compute: str
    amp: bool
    adapter_fp32: bool  # adapters train in fp32
    trainable_fp32: bool  # the trained layers in fp32, the frozen rest as loaded
    master: bool  # an fp32 master copy of the trained 16-bit weights


def resolve_trained_precision(
    ctx: Context, precision: PrecisionPart, adapters: AdapterPart, optimizer: OptimizerPart, dist: DistributionPart
) -> TrainedPrecisionPart:
    val, assumptions = ctx.val, ctx.assumptions
    weight_dtype, compute, amp, amp_dtype = (
        precision.weight_dtype,
        precision.compute,
        precision.amp,
        precision.amp_dtype,
    )
    strategy, zero, quant_bits, peft = dist.strategy, dist.zero, adapters.quant_bits, adapters.peft
    adapter_fp32 = ctx.hooks.behaviour["adapter_fp32"]
    trainable_fp32 = False
    upcast = val("trainable_fp32")
    if upcast and strategy == "megatron":
        upcast = False  # LLaMA-Factory's Megatron workflow (mcore_adapter) casts itself
    if upcast and not quant_bits and ((strategy == "deepspeed" and int(zero or 0) >= 3) or strategy == "fsdp"):
        # LLaMA-Factory 01d87b82 src/llamafactory/model/adapter.py `init_adapter`: "ZeRO3 / FSDP detected, remaining
        # trainable params in float32" — no upcast; the sharding engine keeps the fp32 copy
        upcast = False
    if upcast is not None and ctx.hooks.adapter_fp32_follows_upcast:
        adapter_fp32 = bool(upcast)  # pure_bf16 (or ZeRO-3/FSDP without quantization): 16-bit adapters
    if upcast and peft == "none":
        if adapters.partial["trained_layers"] is None:
            weight_dtype = "fp32"  # every weight trains: fp32 weights under autocast
            amp = amp_dtype in ("bf16", "fp16", "fp8")
            compute = ("fp16" if amp_dtype == "fp16" else "bf16") if amp else "fp32"
        elif weight_dtype != "fp32":
            trainable_fp32 = True  # the trained layers in fp32, the frozen rest as loaded
        assumptions.append(
            f"{ctx.fw_label} upcasts the trainable weights to fp32 (no `pure_bf16`): "
            f"{'fp32 weights' if adapters.partial['trained_layers'] is None else 'fp32 trained layers'}"
            f"{', bf16 autocast' if amp_dtype == 'bf16' else ''}"
        )
    master = strategy == "deepspeed" and amp_dtype in ("bf16", "fp16") and peft == "none"
    if strategy == "deepspeed" and amp_dtype in ("bf16", "fp16") and tower_trains_in_full(ctx.plan, peft):
        # a vision tower trained in full beside LoRA: DeepSpeed's 16-bit ZeRO optimizer keeps an fp32 master
        # partition of every trainable parameter (deepspeed v0.16.4 runtime/zero/stage_1_and_2.py
        # `single_partition_of_fp32_groups`); the loaded weights and the adapters' precision stay as they are
        master = True
    elif master:
        weight_dtype, compute, amp = (
            ("fp16" if amp_dtype == "fp16" else "bf16"),
            ("fp16" if amp_dtype == "fp16" else "bf16"),
            False,
        )
    if optimizer.opt.name == "badam" and peft == "none" and strategy != "deepspeed" and weight_dtype != "fp32":
        # BAdam (Ledzy/BAdam bf989dcb src/badam/block_optim.py `switch_trainable_params`, `step_single_gpu`): the
        # active block's 16-bit weights get an fp32 copy (`param.clone().float()`) that Adam updates with fp32 states,
        # copied back to the 16-bit weights after each step (under ZeRO-3 DeepSpeed keeps that copy instead)
        master = True
    return TrainedPrecisionPart(weight_dtype, compute, amp, adapter_fp32, trainable_fp32, master)
