"""Run one training step of the synthetic model under the live-bytes tracker and report the peak.

Fake mode (the trace): the model is built on `meta`, moved with `to_empty()` into a `FakeTensorMode` on the
fake "cpu" device (fake "cuda" aborts in a CPU build of torch and fake "meta" picks SDPA's math kernel:
docs/memory-model.md, "How the traced figures were measured"), and the step runs without allocating memory.
Real mode (the check): the same code on real CPU tensors. Both give byte-identical peaks
(tests/trace/test_trace_exact.py).

One step is enough (optimizer state is created lazily in the first `step()`, `_init_group` in
`torch/optim/adam.py`; docs/memory-model.md): the steady-state peak is
max(step-0 forward/backward peak + the optimizer state step 0 created, step-0 optimizer-step peak).
Gradients that persist into the next forward (`zero_grad(set_to_none=False)`) need two steps.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch

from vramlens.trace import model as M
from vramlens.trace import optim as O
from vramlens.trace.config import StepConfig
from vramlens.trace.flops import StepFlops
from vramlens.trace.step import forward_backward, optimizer_step
from vramlens.trace.tracker import LiveBytes, TraceCancelled, by_category

Progress = Callable[[str, float], None]

PHASE_LABELS = {
    "fwd": "forward",
    "loss": "LM head and loss",
    "bwd-loss": "backward through the loss",
    "bwd": "backward",
    "opt": "optimizer step",
    "zero": "zero_grad",
    "build": "build",
}
LABELLED = ("weights", "adapters", "quant_constants", "gradients", "optimizer")


def classify(rec) -> str:
    """A storage's estimate component: its label, else by the phase that allocated it."""
    if rec.cat in LABELLED:
        return rec.cat
    if rec.phase in ("build", "init"):
        return "weights"
    if rec.phase == "fwd":
        return "activations"
    if rec.phase in ("loss", "bwd-loss"):
        return "logits"
    return "temporaries"


def steps_needed(cfg: StepConfig) -> int:
    return 1 if cfg.set_to_none else 2


def run(
    cfg: StepConfig,
    *,
    real: bool = False,
    steps: int | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    backend: str = "synthetic",
) -> dict:
    """Trace (or, with real=True, execute on CPU) the plan's training step; returns raw byte counts.
    backend "transformers": the real Hugging Face libraries (`trace.hf`); "torchtune": torchtune's own model and loss
    (`trace.torchtune_backend`); "fsdp": the Hugging Face model sharded by FSDP, rank 0 of the plan's ranks
    (`trace.sharded`); "synthetic": the plain-torch model (`trace.model`)."""
    if backend == "transformers":
        from vramlens.trace import hf as B
    elif backend == "torchtune":
        from vramlens.trace import torchtune_backend as B
    elif backend == "fsdp":
        from vramlens.trace import sharded as B
    else:
        B = M
    t0 = time.perf_counter()
    steps = steps or steps_needed(cfg)
    say = progress or (lambda msg, frac: None)
    torch.manual_seed(0)
    uses_bnb = cfg.quant_bits is not None or O.uses_bitsandbytes(cfg)
    if uses_bnb:
        O.warm_bitsandbytes()

    def on_ops(n: int) -> None:
        say(f"{PHASE_LABELS.get(tr.phase, tr.phase)}: {n:,} ops", -1.0)

    def check() -> None:
        if should_stop is not None and should_stop():
            raise TraceCancelled()

    tr = LiveBytes(on_ops=on_ops)
    if real:
        fake = contextlib.nullcontext()
    else:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake = FakeTensorMode(allow_non_fake_inputs=True)  # meta parameters enter as non-fake inputs

    say("building the model", 0.02)
    model = B.build_meta(cfg)
    check()
    model.tick = check
    with fake, tr:
        tr.set_phase("build")
        model = B.materialize(model, "cpu", real)
        peft = cfg.peft != "none"
        for p in model.parameters():
            tr.label([p], "adapters" if (peft and p.requires_grad) else "weights")
        tr.label(list(model.buffers()), "weights")
        tr.label(B.quant_constants(model), "quant_constants")
        trainable = [p for p in model.parameters() if p.requires_grad]
        batch = M.make_batch(cfg, "cpu") if B is M else B.make_batch(cfg, "cpu", real)
    optimizer = O.make_optimizer(cfg, trainable) if O.uses_bitsandbytes(cfg) else None  # outside the fake mode

    timeline: list[dict] = []
    segments: list[dict] = []
    state = {"step": 0}

    def close(name: str) -> None:
        after, peak = tr.next_phase(name)
        prev = state.get("phase")
        if prev is not None:
            timeline.append(
                {
                    "step": state["step"],
                    "micro": state["micro"],
                    "phase": prev,
                    "after_bytes": after,
                    "peak_bytes": peak,
                }
            )
        if name == "fwd":
            state["micro"] += 1
        state["phase"] = name

    def mark(phase: str) -> None:
        check()
        if phase == "opt":
            tr.label([p.grad for p in trainable if p.grad is not None], "gradients")
            segments.append(
                {
                    "step": state["step"],
                    "kind": "forward-backward",
                    "peak": tr.peak,
                    "at": tr.peak_phase,
                    "recs": tr.peak_records(),
                }
            )
            close(phase)
            tr.reset_peak()
            say(f"step {state['step']}: optimizer", 0.85)
            return
        if phase == "zero":
            tr.label([p.grad for p in trainable if p.grad is not None], "gradients", only_unlabelled=True)
            tr.label(O.state_tensors(optimizer), "optimizer")
            segments.append(
                {
                    "step": state["step"],
                    "kind": "optimizer-step",
                    "peak": tr.peak,
                    "at": tr.peak_phase,
                    "recs": tr.peak_records(),
                }
            )
        close(phase)
        if phase == "fwd":
            say(f"step {state['step']}: forward", 0.1)
        elif phase == "bwd-loss":
            say(f"step {state['step']}: backward", 0.45)

    n_params = B.param_count(model)
    n_trainable = sum(p.numel() for p in trainable)
    flops = StepFlops(lambda: tr.phase)  # below the tracker: it sees the model's own ops
    with fake, flops, tr:
        if optimizer is None:
            optimizer = O.make_optimizer(cfg, trainable)
        O.route_paged_states(optimizer, tr)
        for step in range(steps):
            state["step"] = step
            state["phase"] = None
            state["micro"] = -1
            flops.reset()  # the figures are the last step's
            tr.reset_peak()
            tr.next_phase("fwd")
            forward_backward(model, batch, cfg, mark, "cpu")
            optimizer_step(optimizer, cfg, mark)
            close("idle")
        live_end = by_category(tr.live_records(), classify)

    fb = [s for s in segments if s["kind"] == "forward-backward"]
    op = [s for s in segments if s["kind"] == "optimizer-step"]
    opt_state = live_end.get("optimizer", 0)
    last_fb, last_op = fb[-1], op[-1]
    fb_parts = by_category(last_fb["recs"], classify)
    fb_total = last_fb["peak"]
    if steps == 1:  # one-step shortcut: add the state step 0 created
        fb_total += opt_state
        fb_parts["optimizer"] = fb_parts.get("optimizer", 0) + opt_state
    op_parts = by_category(last_op["recs"], classify)
    if fb_total >= last_op["peak"]:
        peak, phase, at, parts = fb_total, "forward-backward", last_fb["at"], fb_parts
    else:
        peak, phase, at, parts = last_op["peak"], "optimizer-step", last_op["at"], op_parts
    replay = allocator_replays(tr, steps)
    say("done", 1.0)
    return {
        "peak_bytes": int(peak),
        "phase": phase,
        "peak_at": PHASE_LABELS.get(at, at),
        "components": {k: int(v) for k, v in parts.items() if v},
        "phases": {"forward-backward": int(fb_total), "optimizer-step": int(last_op["peak"])},
        "persistent": {k: int(v) for k, v in live_end.items() if v},
        "timeline": timeline,
        "steps": steps,
        "params_total": int(n_params),
        "params_trainable": int(n_trainable),
        "ops": tr.n_ops,
        "seconds": round(time.perf_counter() - t0, 2),
        "real": real,
        "backend": backend,
        "torch": torch.__version__,
        "bitsandbytes": _bnb_version() if uses_bnb else None,
        "paged_bytes": tr.outside_bytes,
        "allocator_replay": replay,
        "flops": flops.result(),
        "assumptions": list(cfg.assumptions)
        + (
            [
                f"paged optimizer states ({tr.outside_bytes / 2**30:.2f} GiB) are CUDA unified memory outside the "
                "caching allocator: not in the allocated peak"
            ]
            if tr.outside_bytes
            else []
        ),
        "not_traced": list(cfg.not_traced)
        + (
            [
                "a vision-language model's vision tower and projector (the synthetic model is its language model; the "
                "real-library backend builds Gemma-3's whole)"
            ]
            if backend == "synthetic" and cfg.arch.vision_params
            else []
        ),
    }


def allocator_replays(tr: LiveBytes, steps: int) -> dict:
    """The recorded allocation sequence replayed through the caching allocator (`trace.allocator_replay`), with the
    default settings and with `expandable_segments:True`, on a device without a limit: what
    `torch.cuda.max_memory_reserved()` would show after the traced steps."""
    from vramlens.trace.allocator_replay import AllocatorSettings, replay

    events = tr.events if steps > 1 else tr.events + next_forward_backward(tr.events)
    return {
        "events": len(events),
        "capped": tr.events_capped,
        "default": replay(events).to_json(),
        "expandable_segments": replay(events, AllocatorSettings(expandable_segments=True)).to_json(),
    }


FORWARD_BACKWARD = ("fwd", "loss", "bwd-loss", "bwd")


def next_forward_backward(events: list) -> list:
    """A one-step trace stands for the steady state with the optimizer state step 0 created (see `run`): the
    sequence goes on with step 0's forward and backward again, while everything step 0 left behind stays live.
    Frees of storages made before that forward are left out (they were step 0's to free)."""
    out, made = [], set()
    for op, key, nbytes, stream, phase in events:
        if phase not in FORWARD_BACKWARD:
            continue
        if op == "alloc":
            made.add(key)
            out.append((op, ("next", key), nbytes, stream, phase))
        elif key in made:
            out.append((op, ("next", key), nbytes, stream, phase))
    return out


def _bnb_version() -> str | None:
    try:
        import bitsandbytes

        return bitsandbytes.__version__
    except ImportError:
        return None
