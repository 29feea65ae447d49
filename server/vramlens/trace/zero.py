"""The ZeRO backend: rank 0's view of a DeepSpeed ZeRO-2 or ZeRO-3 training step across `world_size` ranks, on one
CPU process, run by DeepSpeed's own engine and optimizers (deepspeed 0.19.8 runtime/engine.py `DeepSpeedEngine`,
runtime/zero/stage_1_and_2.py `DeepSpeedZeroOptimizer`, runtime/zero/stage3.py `DeepSpeedZeroOptimizer_Stage3`).

The model is the real-library backend's (`trace.hf`: transformers' own model, peft's adapters), built in the plan's
16-bit dtype, handed with the plan's torch optimizer to `deepspeed.initialize` under torch's fake process group as
the sharded backend sets it up (`trace.sharded.fake_process_group`): collectives send nothing, every buffer DeepSpeed
allocates for them is counted. DeepSpeed runs on its CPU accelerator (`DS_ACCELERATOR=cpu`, deepspeed 0.19.8
accelerator/cpu_accelerator.py: streams and events are no-ops, so the overlapped reduce of `overlap_comm` runs in
order). ZeRO-3 partitions the parameters when the engine is made (runtime/zero/parameter_offload.py
`DeepSpeedZeRoOffload` wraps the module in `zero.Init(module=...)`), which leaves rank 0 what the HF Trainer's
`zero.Init` at load leaves it. The configuration is the HF Trainer's (`ds_config`): its "auto" sizes from the hidden
size, `gradient_clipping` from `max_grad_norm`.

Two steps run and the second is reported: ZeRO-3 records the order modules run in during the first and prefetches
by it from the second on (runtime/zero/partitioned_param_coordinator.py `reset_step`, `fetch_sub_module`), and the
optimizer states are made at the first step. The step runs under fake tensors like any other trace, or on real CPU
tensors at small shapes as the check; the two agree byte for byte (tests/trace/test_zero_trace.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vramlens.trace import hf
from vramlens.trace import optim as O
from vramlens.trace.config import StepConfig
from vramlens.trace.hf import once_per_process
from vramlens.trace.sharded import fake_process_group
from vramlens.trace.tracker import LiveBytes

# transformers 5.24 integrations/deepspeed.py `HfTrainerDeepSpeedConfig.trainer_config_finalize`: "auto" fills of
# reduce_bucket_size (h²), stage3_prefetch_bucket_size (0.9·h²), stage3_param_persistence_threshold (10·h); the rest
# as the ZeRO-2 and ZeRO-3 examples of transformers' docs/source/en/deepspeed.md set them (sub_group_size,
# stage3_max_live_parameters and stage3_max_reuse_distance 1e9; the 5e8 all-gather bucket is DeepSpeed's default,
# deepspeed 0.19.8 runtime/zero/config.py). The plan's own sizes (`StepConfig.zero_*`) replace them.
SIZES = (
    "reduce_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
)
MAX_GRAD_NORM = 1.0  # transformers TrainingArguments.max_grad_norm, filled into `gradient_clipping`


def ds_config(cfg: StepConfig, stage: int) -> dict:
    """The DeepSpeed configuration the HF Trainer hands `deepspeed.initialize` for the plan."""
    h = cfg.arch.hidden

    def size(given: int | None, auto: int) -> int:
        return auto if given is None else given

    overlap = cfg.zero_overlap_comm if cfg.zero_overlap_comm is not None else stage >= 3  # DeepSpeed's default
    zero: dict = {"stage": stage, "overlap_comm": overlap, "contiguous_gradients": True}
    zero["reduce_bucket_size"] = size(cfg.zero_reduce_bucket, h * h)
    if stage >= 3:
        zero.update(
            sub_group_size=10**9,
            stage3_prefetch_bucket_size=size(cfg.zero3_prefetch_bucket, int(0.9 * h * h)),
            stage3_param_persistence_threshold=size(cfg.zero3_persistence_threshold, 10 * h),
            stage3_max_live_parameters=size(cfg.zero3_max_live_params, 10**9),
            stage3_max_reuse_distance=size(cfg.zero3_max_reuse_distance, 10**9),
        )
    else:
        zero.update(allgather_partitions=True, allgather_bucket_size=5 * 10**8, reduce_scatter=True)
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "gradient_accumulation_steps": cfg.grad_accum,
        "gradient_clipping": MAX_GRAD_NORM,
        "bf16": {"enabled": cfg.compute_dtype == "bf16"},
        "fp16": {"enabled": cfg.compute_dtype == "fp16"},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }


def unsupported(cfg: StepConfig, stage: int) -> str | None:
    """Why this backend cannot trace the plan's ZeRO step, or None."""
    if cfg.world_size <= 1 or stage not in (2, 3):
        return "not a ZeRO-2 or ZeRO-3 plan across several ranks"
    if cfg.compute_dtype not in ("bf16", "fp16") or cfg.param_dtype != cfg.compute_dtype or cfg.autocast:
        return "DeepSpeed's 16-bit ZeRO optimizer is traced over 16-bit weights (its bf16/fp16 mode)"
    if cfg.quant_bits is not None:
        return "4-bit weights under ZeRO are not traced"
    if O.uses_bitsandbytes(cfg) or cfg.optimizer_family not in ("adamw", "adam"):
        return "the ZeRO trace runs torch's Adam/AdamW as DeepSpeed's client optimizer"
    if not torch.distributed.is_available():
        return "this torch build has no torch.distributed"
    if importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed in the trace interpreter"
    return hf.unsupported(dataclasses.replace(cfg, master_weights=False))  # the master weights are DeepSpeed's


@once_per_process
def install_deepspeed_on_cpu() -> None:
    """DeepSpeed on its CPU accelerator as rank 0 of a launcher's ranks, its collectives through torch.distributed.

    - The CPU accelerator (deepspeed 0.19.8 accelerator/real_accelerator.py `set_accelerator`, what
      `DS_ACCELERATOR=cpu` selects) and `LOCAL_RANK`, which the engine requires of a launcher (runtime/engine.py
      `_do_args_sanity_check`).
    - No shared-memory collectives: `TorchBackend` JIT-compiles and uses DeepSpeed's shm op on the CPU accelerator
      (comm/torch.py `build_shm_op`), which would compile C++ and bypass the fake process group.
    - Rank 0's answers to DeepSpeed's cross-rank consistency checks (runtime/zero/utils.py
      `assert_lst_len_same_as_other_ranks`, `get_lst_from_rank0`: rank 0 broadcasts its own list and reads it back,
      which a fake tensor cannot read): its own list, what the broadcast returns on rank 0."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("LOCAL_RANK", "0")
    from deepspeed.accelerator import set_accelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    set_accelerator(CPU_Accelerator())
    setattr(importlib.import_module("deepspeed.comm.torch"), "build_shm_op", lambda: None)
    utils = importlib.import_module("deepspeed.runtime.zero.utils")
    setattr(utils, "assert_lst_len_same_as_other_ranks", lambda lst: None)
    setattr(utils, "get_lst_from_rank0", lambda lst: list(lst))


class FakeScalars(TorchDispatchMode):
    """Reads of a fake tensor's value answer as a healthy step's would: no inf or NaN in any gradient (DeepSpeed's
    overflow flags, runtime/zero/stage_1_and_2.py `has_overflow`, stage3.py `_has_inf_or_nan`) and a finite gradient
    norm (read for clipping and logging). Under the fake mode; real tensors pass through."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import FakeTensor

        if func is torch.ops.aten._local_scalar_dense.default and isinstance(args[0], FakeTensor):
            dtype = args[0].dtype
            return False if dtype == torch.bool else (1.0 if dtype.is_floating_point else 0)
        return func(*args, **(kwargs or {}))


def description(cfg: StepConfig, stage: int) -> list[str]:
    return [
        f"DeepSpeed ZeRO-{stage} traced as rank 0 of {cfg.world_size} under torch's fake process group (DeepSpeed's "
        "own engine and ZeRO optimizer on its CPU accelerator, the HF Trainer's configuration with the plan's sizes: "
        + ", ".join(f"{k} {v:,}" for k, v in ds_config(cfg, stage)["zero_optimization"].items() if k in SIZES)
        + f", overlap_comm {'on' if ds_config(cfg, stage)['zero_optimization']['overlap_comm'] else 'off'}, "
        "contiguous gradients, gradient clipping); collectives send nothing but their buffers are "
        "allocated",
        "the second step reported: ZeRO-3 prefetches by the module order it records in the first",
    ] + hf.description(cfg)


def run(cfg: StepConfig, stage: int, *, real: bool = False, steps: int = 2) -> dict:
    """Trace (or, with real=True, execute on CPU) the plan's ZeRO step as rank 0; returns raw byte counts: the last
    step's peak, its forward-backward and optimizer-step peaks, what stays live after it. ZeRO-3 replaces
    `torch.nn.functional.linear` with its own for the rest of the process (deepspeed 0.19.8 runtime/zero/
    partition_parameters.py `_enable_mem_efficient_linear`: "This will persist unless manually reset"): the step is
    traced with it, and the process gets torch's back afterwards."""
    linear = torch.nn.functional.linear
    try:
        return _run(cfg, stage, real=real, steps=steps)
    finally:
        torch.nn.functional.linear = linear


def _run(cfg: StepConfig, stage: int, *, real: bool, steps: int) -> dict:
    install_deepspeed_on_cpu()
    import deepspeed

    # every trace runs in a new world: DeepSpeed forgets the groups it made over the old one, as its own teardown of
    # the world does (deepspeed 0.19.8 utils/groups.py `_release_process_group_references`), also when something else
    # destroyed that world first (its cached clone of the world group would outlive it)
    importlib.import_module("deepspeed.utils.groups")._release_process_group_references(None)
    fake_process_group(cfg.world_size)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = hf.build_meta(dataclasses.replace(cfg, master_weights=False))
    tr = LiveBytes()
    with contextlib.ExitStack() as modes:
        if not real:
            from torch._subclasses.fake_tensor import FakeTensorMode

            modes.enter_context(FakeTensorMode(allow_non_fake_inputs=True))  # meta parameters enter as non-fake
            modes.enter_context(FakeScalars())
        modes.enter_context(tr)
        tr.set_phase("build")
        model = hf.materialize(model, "cpu", real)
        params_total = hf.param_count(model)
        trainable: list[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
        params_trainable = sum(p.numel() for p in trainable)  # before ZeRO-3 empties the parameters
        optimizer = O.make_optimizer(dataclasses.replace(cfg, master_weights=False), trainable)
        # the model is on the CPU already: the engine's `module.to(device)` (runtime/engine.py
        # `_configure_distributed_model`) would swap every fake parameter for itself, which a parameter the
        # tracker holds a weak reference to cannot be
        model.to = lambda *args, **kwargs: model  # type: ignore[method-assign]
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config(cfg, stage))
        batch = hf.make_batch(cfg, "cpu", real)
        phases = {}
        for _ in range(steps):
            tr.reset_peak()
            for micro in range(cfg.grad_accum):
                tr.set_phase("fwd")
                extra = {k: batch[k] for k in ("attention_mask", "pixel_values", "token_type_ids") if k in batch}
                out = engine(batch["ids"], batch["labels"], mark=tr.set_phase, **extra)  # as `step.forward_backward`
                loss = out["loss"]
                del out
                tr.set_phase("bwd-loss")
                engine.backward(loss)
                del loss
                if micro < cfg.grad_accum - 1:
                    engine.step()  # not at the boundary: DeepSpeed only counts the micro-step
            phases["forward-backward"], at_fb = tr.peak, tr.peak_phase
            tr.reset_peak()
            tr.set_phase("opt")
            engine.step()  # the optimizer step at the boundary, then DeepSpeed's zero_grad
            phases["optimizer-step"] = tr.peak
            tr.set_phase("idle")
        live_end = tr.cur
    fb, op = phases["forward-backward"], phases["optimizer-step"]
    not_traced = [n for n in cfg.not_traced if "one unsharded replica" not in n]
    return {
        "peak_bytes": int(max(fb, op)),
        "phase": "forward-backward" if fb >= op else "optimizer-step",
        "peak_at": at_fb if fb >= op else "opt",
        "phases": {k: int(v) for k, v in phases.items()},
        "persistent_bytes": int(live_end),
        "steps": steps,
        "params_total": int(params_total),
        "params_trainable": int(params_trainable),
        "seconds": round(time.perf_counter() - t0, 2),
        "real": real,
        "backend": "zero",
        "torch": torch.__version__,
        "deepspeed": deepspeed.__version__,
        "assumptions": list(cfg.assumptions) + description(cfg, stage),
        "not_traced": not_traced,
    }
