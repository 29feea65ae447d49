"""A cancelled trace stops at the next block, in forward and in backward, on every backend: the worker answers a
cancel within its grace period however long the model's forward is (a 70B forward at 4k tokens takes longer than
that on a loaded machine), instead of being killed and restarted."""

from __future__ import annotations

import importlib

import pytest
from trace_plans import need, plan
from vramlens.knowledge.schema import ModelArch

need("torch")

from vramlens.trace import engine  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402
from vramlens.trace.tracker import TraceCancelled  # noqa: E402

DEEP = ModelArch(id="deep-llama", family="llama", hidden=64, layers=8, heads=4, kv_heads=2, intermediate=128, vocab=256)
BLOCKS = {
    "synthetic": ("vramlens.trace.model", "Block"),
    # the layer's MLP: transformers wraps the layer class's own `forward` for checkpointing
    "transformers": ("transformers.models.llama.modeling_llama", "LlamaMLP"),
    "torchtune": ("torchtune.modules", "TransformerSelfAttentionLayer"),
}


@pytest.mark.parametrize("backend", ["synthetic", "transformers", "torchtune"])
@pytest.mark.parametrize("during", ["forward", "backward"])
def test_a_cancel_is_taken_at_the_next_block(backend, during, monkeypatch):
    need("transformers" if backend == "transformers" else "torch")
    if backend == "torchtune":
        need("torchtune")
    # backward with checkpointing: every block's forward is run again there, so a late stop shows as recomputes
    ckpt = during == "backward"
    rp = plan(arch=DEEP, grad_checkpointing=ckpt, **({"framework": "torchtune"} if backend == "torchtune" else {}))
    cfg = step_config(rp)
    stop = {"asked": False, "phase": None}
    runs_after: list[str] = []  # block forwards (or recomputes) that began after the cancel

    def on_progress(message: str, fraction: float) -> None:
        if during in message:
            stop["phase"] = during
            stop["asked"] = stop["asked"] or during == "forward"

    module, name = BLOCKS[backend]
    block = getattr(importlib.import_module(module), name)
    forward = block.forward

    def counted(self, *args, **kwargs):  # the block's own forward: a recompute runs it too
        if stop["asked"]:
            runs_after.append(name)
        elif stop["phase"] == "backward":  # the first block recomputed in backward: cancel from inside it
            stop["asked"] = True
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(block, "forward", counted)
    with pytest.raises(Exception) as info:
        engine.run(cfg, steps=1, progress=on_progress, should_stop=lambda: stop["asked"], backend=backend)
    assert stop["asked"]
    assert isinstance(info.value, TraceCancelled) or "TraceCancelled" in repr(info.value)
    # forward: the cancel lands while the first block runs, so at most that block runs after it; backward: the
    # cancel lands inside the last block's recompute, and no other block is recomputed
    assert len(runs_after) <= (1 if during == "forward" else 0), runs_after
