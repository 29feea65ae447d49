"""The sharded backend: rank 0's view of an FSDP training step across `world_size` ranks, on one CPU process.

The model is the real-library backend's (`trace.hf`: transformers' own model, peft's adapters) and is then
sharded as the frameworks shard it, under torch's fake process group, whose collectives return at once without
sending anything (torch 2.13 torch/testing/_internal/distributed/fake_pg.py `FakeStore`, `dist.init_process_group(
"fake", ...)`; torch's own test/distributed/test_fake_pg.py `test_fsdp_fake_e2e` runs FSDP's step so). Every buffer
a collective writes into is still allocated by FSDP, so the tracker (`trace.tracker`) counts what rank 0 holds:
its parameter, gradient and optimizer shards, the unsharded parameters of the units being computed and
prefetched, the reduce-scatter inputs and outputs. The step runs under fake tensors like any other trace (the
engine), or on real CPU tensors at small shapes as the check.

Wrapping, one unit per decoder block and the root over the rest (embeddings, final norm, LM head):
- FSDP2: `fully_shard` on every module of the model's `_no_split_modules` classes, then on the root, as torch's
  FSDP2 example does (torch 2.13 torch/distributed/fsdp/_fully_shard/_fully_shard.py `fully_shard` docstring) and
  accelerate's FSDP2 path with TRANSFORMER_BASED_WRAP (accelerate 1.15 utils/fsdp_utils.py `fsdp2_prepare_model`;
  accelerate 1.15 also puts the input embedding and the final norm with the LM head in units of their own, which
  is not followed here); `reshard_after_forward` False for SHARD_GRAD_OP; `MixedPrecisionPolicy(param_dtype=
  compute dtype, reduce_dtype=float32)` when the plan gathers 16-bit weights (`fsdp_mixed_precision`).
- FSDP1: `FullyShardedDataParallel` with `ModuleWrapPolicy` over the same classes (what accelerate's
  TRANSFORMER_BASED_WRAP builds from `_no_split_modules`), `use_orig_params=True` (needed by frozen and trainable
  parameters in one unit), FULL_SHARD or SHARD_GRAD_OP, `MixedPrecision(param_dtype, reduce_dtype=float32)`.

FSDP frees and re-allocates its unsharded parameters by resizing their storage in place, which no op dispatch
sees: `install_resize_tracking` reports each `UntypedStorage.resize_` to the active tracker (`LiveBytes.resized`).
"""

from __future__ import annotations

from typing import Any

import torch

from vramlens.trace import hf
from vramlens.trace.config import StepConfig
from vramlens.trace.hf import DTYPES, once_per_process
from vramlens.trace.tracker import LiveBytes


def unsupported(cfg: StepConfig) -> str | None:
    """Why this backend cannot trace the plan's step, or None."""
    if cfg.world_size <= 1 or cfg.fsdp_version not in (1, 2):
        return "not an FSDP plan across several ranks"
    if cfg.quant_bits is not None:
        return "4-bit weights under FSDP (bitsandbytes' quantized storage) are not traced sharded"
    if cfg.fsdp_version == 1 and cfg.peft != "none" and cfg.adapter_fp32 and cfg.param_dtype != "fp32":
        # torch 2.13 distributed/fsdp/_flat_param.py `_validate_tensors_to_flatten`: "Must flatten tensors with
        # uniform dtype"
        return (
            f"FSDP1 flattens each unit's parameters into one tensor of one dtype: peft's fp32 adapters beside "
            f"{cfg.param_dtype} weights cannot be flattened (FSDP1 raises the same on a GPU)"
        )
    if not torch.distributed.is_available():
        return "this torch build has no torch.distributed"
    return hf.unsupported(cfg)


def description(cfg: StepConfig) -> list[str]:
    mode = "FULL_SHARD" if cfg.reshard_after_forward else "SHARD_GRAD_OP"
    how = (
        "`fully_shard` on each decoder block and the root"
        if cfg.fsdp_version == 2
        else "FullyShardedDataParallel, one unit per decoder block and the root, use_orig_params"
    )
    mp = (
        f", parameters gathered in {cfg.compute_dtype} and gradients reduced in fp32"
        if cfg.fsdp_mixed_precision
        else ""
    )
    return [
        f"FSDP{cfg.fsdp_version} {mode} traced as rank 0 of {cfg.world_size} under torch's fake process group "
        f"({how}{mp}); collectives send nothing but their buffers are allocated",
        "the plan does not record which FSDP runs: FSDP2 is traced unless the plan keeps FSDP1's per-block "
        "gradients (trace.config `fsdp_version`)",
    ] + hf.description(cfg)


def fake_process_group(world_size: int) -> None:
    """torch.distributed initialised as rank 0 of `world_size` on the fake backend (again if the size changed)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_backend() == "fake" and dist.get_world_size() == world_size:
            return
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())


@once_per_process
def install_resize_tracking() -> None:
    """Report every `UntypedStorage.resize_` to the trackers on the dispatch mode stack. FSDP1 frees its unsharded
    flat parameter with `_typed_storage()._resize_(0)` (torch 2.13 distributed/utils.py `_free_storage`, which
    resizes the untyped storage), FSDP2 its all-gather outputs with `untyped_storage().resize_(0)` and back
    (distributed/fsdp/_fully_shard/_fsdp_param.py `free_storage`/`alloc_storage`)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    original = torch.UntypedStorage.resize_

    def resize_(self, size):
        out = original(self, size)
        for mode in _get_current_dispatch_mode_stack():
            if isinstance(mode, LiveBytes):
                mode.resized(self, int(size))
        return out

    # FSDP frees and re-gathers by resizing storages in place: no dispatched op shows it, so the method is wrapped
    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]


@once_per_process
def install_fake_data_ptr_check() -> None:
    """FSDP1 asserts that an unsharded flat parameter is allocated by its data pointer (torch 2.13
    distributed/fsdp/_flat_param.py `_writeback_orig_params` calls distributed/utils.py `_data_ptr_allocated`,
    `tensor.untyped_storage().data_ptr() > 0`); a fake tensor's storage has no data pointer, so for fake tensors
    the storage's size answers (what FSDP resizes to free it)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.distributed.fsdp import _flat_param

    original = _flat_param._data_ptr_allocated

    def data_ptr_allocated(tensor: torch.Tensor) -> bool:
        if isinstance(tensor, FakeTensor):
            return tensor.untyped_storage().size() > 0
        return original(tensor)

    _flat_param._data_ptr_allocated = data_ptr_allocated


def build_meta(cfg: StepConfig) -> hf.HFStep:
    """The real-library model on `meta`, with the process group and (FSDP2) the device mesh made here, outside the
    fake mode: the mesh reads its rank map with `tolist()`, which a fake tensor cannot answer."""
    fake_process_group(cfg.world_size)
    install_resize_tracking()
    install_fake_data_ptr_check()
    step = hf.build_meta(cfg)
    if cfg.fsdp_version == 2:
        from torch.distributed.device_mesh import init_device_mesh

        step.mesh = init_device_mesh("cpu", (cfg.world_size,))
    return step


def materialize(step: hf.HFStep, device, real: bool) -> hf.HFStep:
    """The real-library model, allocated, then sharded (FSDP1 or FSDP2) over the fake process group."""
    step = hf.materialize(step, device, real)
    step.params_total = hf.param_count(step)  # before sharding: FSDP1's parameters become shard views
    cfg = step.cfg
    classes = hf.block_classes(step.model)
    if not classes:
        raise RuntimeError("the model names no decoder block class (`_no_split_modules`) to shard by")
    param_dtype = DTYPES[cfg.compute_dtype] if cfg.fsdp_mixed_precision else None
    reduce_dtype = torch.float32 if cfg.fsdp_mixed_precision else None
    if cfg.fsdp_version == 2:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        kw: dict[str, Any] = dict(
            mesh=step.mesh,
            reshard_after_forward=cfg.reshard_after_forward,
            mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
        )
        for m in [m for m in step.model.modules() if type(m) in classes]:
            fully_shard(m, **kw)
        fully_shard(step.model, **kw)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        step.model = FullyShardedDataParallel(
            step.model,
            auto_wrap_policy=ModuleWrapPolicy(classes),
            use_orig_params=True,
            device_id=torch.device(device),
            sharding_strategy=ShardingStrategy.FULL_SHARD
            if cfg.reshard_after_forward
            else ShardingStrategy.SHARD_GRAD_OP,
            mixed_precision=MixedPrecision(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
            if cfg.fsdp_mixed_precision
            else None,
        )
    return step


def param_count(step: hf.HFStep) -> int:
    return step.params_total


quant_constants = hf.quant_constants
make_batch = hf.make_batch
