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
  TRANSFORMER_BASED_WRAP builds from `_no_split_modules`), with adapters peft's `fsdp_auto_wrap_policy` (each
  trainable leaf linear a unit of its own besides, as the HF Trainer sets it), `use_orig_params=True`, FULL_SHARD
  or SHARD_GRAD_OP, `MixedPrecision(param_dtype, reduce_dtype=float32)`.

FSDP2 with tensor parallelism (`tensor_parallel` > 1): a 2-D device mesh (dp_shard × tp) over the fake process
group of dp × tp ranks, the model's linears and embeddings made DTensors by `parallelize_module` with the plan
torchtitan's `apply_tp` writes for a Llama block (`TP_BLOCK`, `TP_ENDS`), then `fully_shard` over the dp mesh as
its `apply_fsdp` does (torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py). Sequence parallelism and
loss parallelism are not traced (the norms, the residual stream and the logits are replicated on every tp rank).

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
    if cfg.tensor_parallel > 1 and (why := tp_unsupported(cfg)) is not None:
        return why
    if not torch.distributed.is_available():
        return "this torch build has no torch.distributed"
    return hf.unsupported(cfg)


# torchtitan's tensor-parallel plan for a Llama block and the model's ends (torchtitan v0.2.2
# torchtitan/models/llama3/infra/parallelize.py `apply_tp`: attention wq/wk/wv ColwiseParallel, wo RowwiseParallel,
# feed_forward w1/w3 ColwiseParallel, w2 RowwiseParallel, tok_embeddings RowwiseParallel(input_layouts=Replicate()),
# output ColwiseParallel), by the names transformers gives the same modules (models/llama/modeling_llama.py), less
# torchtitan's sequence parallelism: the layouts it sets to Shard(1) (the embeddings' output, the norms'
# SequenceParallel, the blocks' PrepareModuleInput, wo's and w2's outputs) stay Replicate, the plain tensor-parallel
# plan of torch's tutorial (docs.pytorch.org/tutorials/intermediate/TP_tutorial.html), and the LM head's output is
# gathered (no loss parallelism)
TP_BLOCK = {
    "self_attn.q_proj": "colwise",
    "self_attn.k_proj": "colwise",
    "self_attn.v_proj": "colwise",
    "self_attn.o_proj": "rowwise",
    "mlp.gate_proj": "colwise",
    "mlp.up_proj": "colwise",
    "mlp.down_proj": "rowwise",
}
TP_ENDS = {"model.embed_tokens": "rowwise", "lm_head": "colwise"}


def tp_unsupported(cfg: StepConfig) -> str | None:
    """Why the dp × tp step cannot be traced, or None."""
    a, tp = cfg.arch, cfg.tensor_parallel
    if cfg.fsdp_version != 2:
        return "tensor parallelism is traced with FSDP2 (`fully_shard` over the data-parallel mesh) only"
    if cfg.sequence_parallel or cfg.loss_parallel:
        return "sequence and loss parallelism are not traced (the traced plan replicates the norms and the logits)"
    if cfg.peft != "none":
        return "adapters under tensor parallelism are not traced (the plan's linears are the base model's)"
    if a.is_moe or a.mlp not in ("swiglu", "geglu") or a.block != "decoder" or a.kv_lora_rank:
        return "the tensor-parallel plan is a Llama block's (q/k/v/o projections, a gated MLP)"
    if a.tied_embeddings:
        return "tied embeddings under tensor parallelism are not traced (the plan shards them as two modules)"
    dims = {"heads": a.heads, "K/V heads": a.n_kv_heads, "intermediate": a.intermediate, "vocab": a.vocab}
    uneven = [f"{n} {v}" for n, v in dims.items() if v % tp]
    if uneven:
        return f"{', '.join(uneven)} not divisible by the {tp} tensor-parallel ranks"
    return None


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
    tp = (
        [
            f"tensor parallelism over {cfg.tensor_parallel} ranks traced on a {cfg.world_size} × "
            f"{cfg.tensor_parallel} (dp_shard × tp) mesh with torchtitan's Llama plan (q/k/v, gate/up column-parallel, "
            "o, down row-parallel, embeddings row-parallel, LM head column-parallel), without sequence or loss "
            "parallelism"
        ]
        if cfg.tensor_parallel > 1
        else []
    )
    return [
        f"FSDP{cfg.fsdp_version} {mode} traced as rank 0 of {cfg.world_size} under torch's fake process group "
        f"({how}{mp}); collectives send nothing but their buffers are allocated",
        *tp,
        "the FSDP the config names (`fsdp_version`); where it names none, FSDP2 unless the plan keeps FSDP1's "
        "per-block gradients (estimate/components/sharding.py `fsdp_version`)",
    ] + hf.description(cfg)


@once_per_process
def install_mesh_outside_fake() -> None:
    """Build device meshes with the dispatch modes off. A mesh computes its rank's coordinates from its rank map with
    tensor ops (torch 2.13 distributed/device_mesh.py `_compute_coordinates_from_mesh`: `(mesh_tensor == rank)
    .nonzero()`), whose output shape a fake tensor cannot know; FSDP2 makes a dp × tp mesh for every DTensor
    parameter when it shards it (distributed/fsdp/_fully_shard/_fsdp_param.py `_init_sharding_spec_tp` →
    `DeviceMesh._concatenate`), inside the trace. The rank map is host bookkeeping, no device memory."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.utils._python_dispatch import _disable_current_modes

    original = DeviceMesh._concatenate

    def concatenate(device_mesh_list):
        with _disable_current_modes():
            return original(device_mesh_list)

    DeviceMesh._concatenate = staticmethod(concatenate)  # type: ignore[method-assign]


def fake_process_group(world_size: int, rank: int = 0) -> None:
    """torch.distributed initialised afresh as rank `rank` of `world_size` on the fake backend. Afresh on every call:
    a world left by an earlier trace carries the groups and names other libraries made on it (DeepSpeed's data
    parallel groups, a device mesh's dimension groups), and a later trace that reused it would resolve a group by a
    name that another library's teardown has since destroyed."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())


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
    tp = cfg.tensor_parallel
    fake_process_group(cfg.world_size * tp)
    install_resize_tracking()
    install_fake_data_ptr_check()
    step = hf.build_meta(cfg)
    if cfg.fsdp_version == 2:
        from torch.distributed.device_mesh import init_device_mesh

        if tp > 1:
            install_mesh_outside_fake()
            # torchtitan v0.2.2 torchtitan/distributed/parallel_dims.py `build_mesh`: ("dp_shard", "tp"), tp innermost
            step.mesh = init_device_mesh("cpu", (cfg.world_size, tp), mesh_dim_names=("dp_shard", "tp"))
        else:
            step.mesh = init_device_mesh("cpu", (cfg.world_size,))
    return step


def parallelize(model, tp_mesh) -> None:
    """`TP_BLOCK` and `TP_ENDS` applied with torch's `parallelize_module`: each named linear's weight becomes a
    DTensor sharded over the tp mesh (ColwiseParallel: Shard(0) of the weight, a Replicate input, a local output of
    the rank's heads or intermediate columns; RowwiseParallel: Shard(1), its Partial output all-reduced to
    Replicate; torch 2.13 torch/distributed/tensor/parallel/style.py)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def style(kind: str, end: bool):
        if kind == "colwise":
            return ColwiseParallel(output_layouts=Replicate()) if end else ColwiseParallel()
        return RowwiseParallel(input_layouts=Replicate()) if end else RowwiseParallel()

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    blocks = [m for m in base.modules() if type(m) in hf.block_classes(model)]
    names = {n for n, _ in base.named_modules()}
    missing = [n for n in TP_ENDS if n not in names] + [
        n for n in TP_BLOCK if blocks and n not in {k for k, _ in blocks[0].named_modules()}
    ]
    if missing or not blocks:
        raise RuntimeError(f"the model has no {', '.join(missing) or 'decoder blocks'} for the tensor-parallel plan")
    parallelize_module(base, tp_mesh, {n: style(k, True) for n, k in TP_ENDS.items()})
    for block in blocks:
        parallelize_module(block, tp_mesh, {n: style(k, False) for n, k in TP_BLOCK.items()})


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

        mesh = step.mesh
        if cfg.tensor_parallel > 1:
            parallelize(step.model, mesh["tp"])
            mesh = mesh["dp_shard"]  # torchtitan `apply_fsdp`: fully_shard over the data-parallel mesh
        kw: dict[str, Any] = dict(
            mesh=mesh,
            reshard_after_forward=cfg.reshard_after_forward,
            mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
        )
        for m in [m for m in step.model.modules() if type(m) in classes]:
            fully_shard(m, **kw)
        fully_shard(step.model, **kw)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        policy: Any = ModuleWrapPolicy(classes)
        if cfg.peft != "none":
            # the HF Trainer wraps every trainable leaf linear (peft's lora_A, lora_B) in a unit of its own beside the
            # blocks (transformers 5.24 distributed/fsdp.py `update_fsdp_plugin_peft` sets peft 0.21.2
            # utils/other.py `fsdp_auto_wrap_policy`): the blocks' flat parameters are frozen
            from peft.utils.other import fsdp_auto_wrap_policy

            policy = fsdp_auto_wrap_policy(step.model)
        step.model = FullyShardedDataParallel(
            step.model,
            auto_wrap_policy=policy,
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
