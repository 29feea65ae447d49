"""FSDP1 under a reentrant checkpoint placed around each unit (what transformers before 4.52/4.53 does: the model's
loop checkpoints `decoder_layer.__call__`, and under FSDP the layer is the unit) keeps every block's checkpointed
input and that input's gradient until the backward ends, when the units' weights need no gradient (a LoRA model:
the adapters sit in units of their own). Run here with torch's real FSDP on CPU (one gloo rank on loopback) over
blocks of frozen linears with trainable adapters: one block-input-sized tensor more per layer, none with a
non-reentrant checkpoint. The estimator counts L − 2 more at the first block's backward (components.
fsdp_kept_block_grads: the count measured the same way with transformers 4.45.2's own Llama and Mixtral under
FSDP1). Skips with a reason where torch is missing (CI installs the trace extra)."""

from __future__ import annotations

import functools
import socket

import pytest
from trace_plans import LORA, plan
from vramlens.estimate import components as C

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
dist = pytest.importorskip("torch.distributed", reason="torch without distributed support")
if not dist.is_available():
    pytest.skip("torch built without distributed support", allow_module_level=True)

from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: E402
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402
from vramlens.trace.tracker import LiveBytes  # noqa: E402

HIDDEN, TOKENS = 64, 512


class Adapter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(HIDDEN, 8, bias=False)
        self.b = torch.nn.Linear(8, HIDDEN, bias=False)

    def forward(self, x):
        return self.b(self.a(x))


class Block(torch.nn.Module):
    """A frozen linear with a trainable adapter beside it, then a frozen MLP: a LoRA layer's shape."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)
        self.adapter = Adapter()
        self.up = torch.nn.Linear(HIDDEN, 16 * HIDDEN)
        self.down = torch.nn.Linear(16 * HIDDEN, HIDDEN)
        for m in (self.proj, self.up, self.down):
            m.requires_grad_(False)

    def forward(self, x):
        h = x + self.proj(x) + self.adapter(x)
        return h + self.down(torch.nn.functional.gelu(self.up(h)))


class Stack(torch.nn.Module):
    def __init__(self, layers: int, reentrant: bool):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
        self.reentrant = reentrant

    def forward(self, x):
        for block in self.blocks:  # transformers 4.x: the loop checkpoints the (wrapped) layer
            x = checkpoint(block.__call__, x, use_reentrant=self.reentrant)
        return x


@pytest.fixture(scope="module")
def one_rank():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if dist.is_initialized():
        dist.destroy_process_group()  # an in-process sharded trace leaves torch's fake backend up
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _peak(layers: int, *, fsdp: bool, reentrant: bool) -> int:
    torch.manual_seed(0)
    model = Stack(layers, reentrant)
    if fsdp:
        # the adapters in units of their own, then each block (peft utils/other.py `fsdp_auto_wrap_policy`)
        policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: isinstance(m, (Adapter, Block)))
        model = FSDP(model, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
    x = torch.randn(TOKENS, HIDDEN, requires_grad=True)  # transformers' enable_input_require_grads
    with LiveBytes() as live:
        model(x).sum().backward()
    return live.peak


def _extra_per_layer(*, reentrant: bool) -> float:
    """How many block inputs FSDP adds per layer: the growth of (FSDP peak − plain peak) from 4 to 8 layers, over 4."""
    block_input = TOKENS * HIDDEN * 4
    extra = {n: _peak(n, fsdp=True, reentrant=reentrant) - _peak(n, fsdp=False, reentrant=reentrant) for n in (4, 8)}
    return (extra[8] - extra[4]) / 4 / block_input


def test_reentrant_checkpoint_around_fsdp_units_keeps_every_block_input_gradient(one_rank):
    # one block-input-sized gradient more per layer, as the estimator counts (`fsdp_kept_block_grads`)
    assert _extra_per_layer(reentrant=True) == pytest.approx(1.0, abs=0.15)
    rp = plan(**LORA, grad_checkpointing=True, fsdp_keeps_block_grads=True)
    saved = int(rp.seq_len * rp.micro_batch * C.checkpoint_per_token(rp))
    n = C.counted_layers(rp)
    assert C.fsdp_kept_block_grads(rp, saved) == pytest.approx((n - 2) * saved / n, rel=1e-6)


def test_non_reentrant_checkpoint_keeps_nothing_per_layer_under_fsdp(one_rank):
    assert _extra_per_layer(reentrant=False) == pytest.approx(0.0, abs=0.15)
