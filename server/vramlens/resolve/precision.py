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
    deepspeed_casts: bool = False  # DeepSpeed's engine casts every floating parameter to its 16-bit dtype


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
    deepspeed_16bit = strategy == "deepspeed" and amp_dtype in ("bf16", "fp16")
    if upcast and deepspeed_16bit:
        upcast = False  # DeepSpeed's 16-bit engine casts the upcast weights back (`_deepspeed_16bit`)
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
    master = deepspeed_casts = False
    if deepspeed_16bit:
        # DeepSpeed's 16-bit mode holds every weight in the 16-bit dtype (the engine's cast, or ZeRO-3's `zero.Init`
        # at load), runs no autocast, and its optimizer keeps the fp32 master copy (`_deepspeed_16bit`)
        weight_dtype = compute = "fp16" if amp_dtype == "fp16" else "bf16"
        amp, trainable_fp32 = False, False
        deepspeed_casts, adapter_fp32, master = _deepspeed_16bit(ctx, compute, adapters, int(zero or 0), adapter_fp32)
    if optimizer.opt.name == "badam" and peft == "none" and strategy != "deepspeed" and weight_dtype != "fp32":
        # BAdam (Ledzy/BAdam bf989dcb src/badam/block_optim.py `switch_trainable_params`, `step_single_gpu`): the
        # active block's 16-bit weights get an fp32 copy (`param.clone().float()`) that Adam updates with fp32 states,
        # copied back to the 16-bit weights after each step (under ZeRO-3 DeepSpeed keeps that copy instead)
        master = True
    return TrainedPrecisionPart(weight_dtype, compute, amp, adapter_fp32, trainable_fp32, master, deepspeed_casts)


def _deepspeed_16bit(
    ctx: Context, dtype: str, adapters: AdapterPart, zero: int, adapter_fp32: bool
) -> tuple[bool, bool, bool]:
    """How DeepSpeed's bf16/fp16 mode holds an adapter run's trained parameters: (the engine casts the model, the
    adapters train in fp32, an fp32 master copy of the trained parameters).

    - The engine casts every floating-point parameter to the 16-bit dtype, adapters and `modules_to_save` copies
      included (deepspeed 0.19.8 runtime/engine.py `_configure_distributed_model`, `_cast_module_mixed_precision`;
      bitsandbytes' 4-bit weights, stored as uint8, are not in its `CASTABLE_DTYPES`), which undoes a framework's
      fp32 upcast of the adapters (peft `autocast_adapter_dtype`, LLaMA-Factory `upcast_trainable`) and of the
      k-bit model's other weights (peft `prepare_model_for_kbit_training`). The exception: a ZeRO-3 model that
      `zero.Init` partitioned as it loaded (transformers 5.24 modeling_utils.py: every unquantized model under a
      ZeRO-3 config) is not cast (`is_zero_init_model`), so the adapters made after the load keep the framework's
      dtype.
    - The ZeRO optimizer keeps an fp32 master partition of every trainable parameter and fp32 Adam states of it
      (runtime/zero/stage_1_and_2.py `single_partition_of_fp32_groups`, runtime/zero/stage3.py
      `fp32_partitioned_groups_flat`; without ZeRO, runtime/bf16_optimizer.py `BF16_Optimizer`), except where
      ZeRO-3's flat group of trained parameters is fp32 already (fp32 adapters alone: stage3.py
      `_create_fp32_partitions` shares it as the master; a 16-bit copy beside them is counted with a master).
    - Neither accelerate nor transformers' Trainer runs torch.autocast under DeepSpeed (accelerate 1.15
      accelerator.py `Accelerator.__init__`: `native_amp` stays False for DistributedType.DEEPSPEED; transformers
      5.24 trainer.py `autocast_smart_context_manager` is a null context)."""
    if adapters.peft == "none":
        return zero < 3, adapter_fp32, True  # ZeRO-3's `zero.Init` loads the weights in the 16-bit dtype
    partitioned_at_load = zero >= 3 and not adapters.quant_bits
    if not partitioned_at_load:
        ctx.assumptions.append(
            f"DeepSpeed's {dtype} engine casts the adapters"
            + (" and modules_to_save copies" if adapters.modules_to_save else "")
            + f" to {dtype}"
            + (" (not the 4-bit weights, stored as uint8)" if adapters.quant_bits == 4 else "")
            + " and keeps an fp32 master copy of every trained parameter, with fp32 optimizer states"
        )
        return True, False, True
    # the ZeRO-3 optimizer flattens every trained partition into one dtype, its first trained parameter's
    # (stage3.py `DeepSpeedZeroOptimizer_Stage3.__init__` `self.dtype`, `_create_fp16_partitions_with_defragmentation`):
    # a trained embedding copy or vision tower comes before the blocks' adapters in the model
    tower = tower_trains_in_full(ctx.plan, adapters.peft)
    adapter_fp32 = adapter_fp32 and "embed" not in adapters.modules_to_save and not tower
    master = not adapter_fp32 or bool(adapters.modules_to_save)
    held = "fp32" if adapter_fp32 else dtype
    ctx.assumptions.append(
        f"DeepSpeed ZeRO-3 partitions the model as it loads (zero.Init), so its engine does not cast it; its "
        f"optimizer holds the trained parameters in one dtype, {held} here, the adapters included"
        + (", with an fp32 master copy of every trained parameter" if master else " (their own fp32 master copy)")
    )
    return False, adapter_fp32, master
