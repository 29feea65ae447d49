"""The plan's optimizer, built so that its state and its step allocate what the real one allocates.

- torch optimizers (AdamW, Adam, SGD, RMSprop, Adagrad) with the plan's implementation passed explicitly:
  under fake tensors torch would otherwise pick the for-loop path, because it looks at the tensor type
  (`_default_to_fused_or_foreach` in `torch/optim/optimizer.py`). foreach AdamW makes one state-sized
  temporary, fused none.
- bitsandbytes optimizers (8-bit, paged, 32-bit) are the real classes. They must be constructed outside the
  fake mode (`create_dynamic_map` calls `.tolist()`), after one real call warms bnb's quantile-map cache.
  On a CPU device paged optimizers fall back to ordinary tensors; on a GPU their states live in CUDA
  unified memory, outside the caching allocator.
- `HFAdafactor` and `Lion` are stand-ins that allocate like transformers' `Adafactor` and lion-pytorch
  (torch's own Adafactor calls `.item()`, which fake tensors cannot answer).
- `StateAlloc` allocates a state layout without running any update rule: for 8-bit optimizers when
  bitsandbytes is missing (bnb's layout: uint8 states + fp32 absmax per 256-element block, fp32 states below
  4096 elements), torchao, and optimizers whose update is not reproduced.
- `MasterWeights`: fp32 master copies, fp32 gradient copies and fp32 states (Megatron/DeepSpeed-style).
"""

from __future__ import annotations

import math

import torch

from vramlens.trace.config import StepConfig

LR = 1e-5


def uses_bitsandbytes(cfg: StepConfig) -> bool:
    if cfg.optimizer_library != "bitsandbytes":
        return False
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return False
    return True


def warm_bitsandbytes() -> None:
    """One real call fills bnb's module-level quantile-map cache (`create_dynamic_map` in
    `bitsandbytes/functional.py` calls `.tolist()`, which fake tensors refuse; docs/memory-model.md)."""
    import bitsandbytes as bnb

    bnb.functional.quantize_blockwise(torch.randn(256))


def _impl_kwargs(impl: str) -> dict:
    if impl == "fused":
        return {"fused": True}
    if impl == "foreach":
        return {"foreach": True}
    return {"foreach": False}


def _torch(cls, params, impl: str, **kw):
    try:
        return cls(params, lr=LR, **_impl_kwargs(impl), **kw)
    except (RuntimeError, TypeError, ValueError):  # no fused kernel for this optimizer: foreach
        return cls(params, lr=LR, foreach=impl != "forloop", **kw)


def _bnb(cfg: StepConfig, params):
    import bitsandbytes as bnb

    fam, paged, eight = cfg.optimizer_family, cfg.optimizer_paged, low_bit(cfg.optimizer_state_bytes)
    O = bnb.optim
    if fam in ("adamw", "adam"):
        base = "AdamW" if fam == "adamw" else "Adam"
        cls = getattr(O, ("Paged" if paged else "") + base + ("8bit" if eight else "32bit"))
        return cls(params, lr=LR)
    if fam == "lion":
        cls = getattr(O, ("Paged" if paged else "") + "Lion" + ("8bit" if eight else "32bit"))
        return cls(params, lr=LR)
    if fam == "ademamix":
        cls = getattr(O, ("Paged" if paged else "") + "AdEMAMix" + ("8bit" if eight else "32bit"))
        return cls(params, lr=LR)
    if fam == "sgd":
        return (O.SGD8bit if eight else O.SGD32bit)(params, lr=LR, momentum=0.9)
    if fam == "rmsprop":
        return (O.RMSprop8bit if eight else O.RMSprop32bit)(params, lr=LR)
    if fam == "adagrad":
        return (O.Adagrad8bit if eight else O.Adagrad32bit)(params, lr=LR)
    return StateAlloc(params, cfg.optimizer_states, cfg.optimizer_state_bytes)


def low_bit(state_bytes: float | None) -> bool:
    """Quantized states: the catalog gives bytes per parameter including block constants (8-bit ≈ 1.016,
    4-bit ≈ 0.53)."""
    return state_bytes is not None and state_bytes < 2


def make_optimizer(cfg: StepConfig, params: list[torch.Tensor]):
    """The plan's optimizer over `params` (call outside a fake mode when `uses_bitsandbytes(cfg)`)."""
    if cfg.master_weights:
        return MasterWeights(params, lambda masters: _inner(cfg, masters))
    return _inner(cfg, params)


def _inner(cfg: StepConfig, params):
    fam, lib, impl = cfg.optimizer_family, cfg.optimizer_library, cfg.optimizer_impl
    if lib == "bitsandbytes":
        if uses_bitsandbytes(cfg):
            return _bnb(cfg, params)
        return StateAlloc(params, cfg.optimizer_states, cfg.optimizer_state_bytes)
    if lib == "torchao" or fam in ("galore", "apollo", "lomo", "other", "ademamix"):
        return StateAlloc(params, cfg.optimizer_states, cfg.optimizer_state_bytes)
    if fam == "adamw":
        return _torch(torch.optim.AdamW, params, impl)
    if fam == "adam":
        return _torch(torch.optim.Adam, params, impl)
    if fam == "sgd":
        return _torch(torch.optim.SGD, params, impl, momentum=0.9 if cfg.optimizer_states >= 1 else 0.0)
    if fam == "rmsprop":
        return _torch(torch.optim.RMSprop, params, impl)
    if fam == "adagrad":
        return _torch(torch.optim.Adagrad, params, impl)
    if fam == "adafactor":
        return HFAdafactor(params, lr=LR)
    if fam == "lion":
        return Lion(params, lr=LR)
    return StateAlloc(params, cfg.optimizer_states, cfg.optimizer_state_bytes)


PAGED_MIN_NUMEL = 100_000  # bitsandbytes pages a state only from 1e5 elements (optim/optimizer.py)


def route_paged_states(opt, tracker) -> None:
    """On a GPU, bitsandbytes' paged states are `cudaMallocManaged` buffers outside PyTorch's allocator, so
    `max_memory_allocated` does not see them. The fake "cpu" device takes bnb's CPU branch (ordinary
    tensors); make the tracker register those buffers as outside the allocator instead."""
    original = getattr(opt, "get_state_buffer", None)
    if original is None or not getattr(opt, "is_paged", False):
        return

    def get_state_buffer(p, dtype=torch.float32):
        if p.numel() < PAGED_MIN_NUMEL:
            return original(p, dtype=dtype)
        tracker.outside = True
        try:
            return original(p, dtype=dtype)
        finally:
            tracker.outside = False

    opt.get_state_buffer = get_state_buffer


def state_tensors(opt) -> list[torch.Tensor]:
    if isinstance(opt, MasterWeights):
        return opt.state_tensors()
    out = []
    for st in opt.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                out.append(v)
    return out


class StateAlloc(torch.optim.Optimizer):
    """Allocates `states` tensors per parameter on the first step (bnb's 8-bit layout for 1-byte states)
    and runs no update."""

    def __init__(
        self, params, states: float, state_bytes: float | None, blocksize: int = 256, min_8bit_size: int = 4096
    ):
        super().__init__(params, {"lr": LR})
        self.n_states, self.state_bytes = int(math.ceil(states)), state_bytes
        self.blocksize, self.min_8bit_size = blocksize, min_8bit_size

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None or self.state[p]:
                    continue
                st, n = self.state[p], p.numel()
                sb = self.state_bytes
                for i in range(self.n_states):
                    if low_bit(sb) and n >= self.min_8bit_size:
                        # packed states + one fp32 absmax per block (bnb/torchao blockwise layout)
                        st[f"state{i + 1}"] = torch.zeros(
                            math.ceil(n * min(sb, 1.0)), dtype=torch.uint8, device=p.device
                        )
                        st[f"absmax{i + 1}"] = torch.zeros(
                            -(-n // self.blocksize), dtype=torch.float32, device=p.device
                        )
                    elif low_bit(sb) or sb == 4:
                        st[f"state{i + 1}"] = torch.zeros_like(p, dtype=torch.float32)
                    elif sb == 2:
                        st[f"state{i + 1}"] = torch.zeros_like(p, dtype=torch.bfloat16)
                    else:
                        st[f"state{i + 1}"] = torch.zeros_like(p)


class HFAdafactor(torch.optim.Optimizer):
    """transformers.optimization.Adafactor as the HF Trainer builds it (scale_parameter=False,
    relative_step=False, beta1=None): per-parameter loop, fp32 copies of 16-bit grads and params,
    factored second moments for matrices."""

    def __init__(self, params, lr=LR, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, weight_decay=0.0):
        super().__init__(
            params,
            dict(lr=lr, eps=eps, clip_threshold=clip_threshold, decay_rate=decay_rate, weight_decay=weight_decay),
        )

    @staticmethod
    def _rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.dtype in (torch.float16, torch.bfloat16):
                    grad = grad.float()
                state = self.state[p]
                factored = grad.dim() >= 2
                if not state:
                    state["step"] = 0
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1], dtype=torch.float32, device=grad.device)
                        state["exp_avg_sq_col"] = torch.zeros(
                            grad.shape[:-2] + grad.shape[-1:], dtype=torch.float32, device=grad.device
                        )
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)
                p32 = p.float() if p.dtype in (torch.float16, torch.bfloat16) else p
                state["step"] += 1
                state["RMS"] = self._rms(p32)
                beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
                update = (grad**2) + group["eps"][0]
                if factored:
                    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                    row.mul_(beta2t).add_(update.mean(dim=-1), alpha=1.0 - beta2t)
                    col.mul_(beta2t).add_(update.mean(dim=-2), alpha=1.0 - beta2t)
                    r = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                    c = col.unsqueeze(-2).rsqrt()
                    update = torch.mul(r, c)
                    update.mul_(grad)
                else:
                    sq = state["exp_avg_sq"]
                    sq.mul_(beta2t).add_(update, alpha=1.0 - beta2t)
                    update = sq.rsqrt().mul_(grad)
                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(group["lr"])
                if group["weight_decay"]:
                    p32.add_(p32, alpha=-group["weight_decay"] * group["lr"])
                p32.add_(-update)
                if p.dtype in (torch.float16, torch.bfloat16):
                    p.copy_(p32)


class Lion(torch.optim.Optimizer):
    """lion-pytorch's update: one momentum state in the parameter dtype, two parameter-sized temporaries."""

    def __init__(self, params, lr=LR, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.clone().mul_(b1).add(p.grad, alpha=1 - b1).sign_()
                p.add_(update, alpha=-group["lr"])
                exp_avg.mul_(b2).add_(p.grad, alpha=1 - b2)


class MasterWeights:
    """fp32 master weights owned by the optimizer: created on the first step, fp32 gradient copies are made
    before each inner step and the result is copied back into the 16-bit parameters."""

    def __init__(self, params, make_inner):
        self.params = list(params)
        self._make_inner = make_inner
        self.masters: list[torch.Tensor] | None = None
        self.inner = None

    @torch.no_grad()
    def step(self):
        if self.masters is None:
            self.masters = [p.detach().float().requires_grad_(True) for p in self.params]
            self.inner = self._make_inner(self.masters)
        for m, p in zip(self.masters, self.params):
            m.grad = None if p.grad is None else p.grad.float()
        self.inner.step()
        for m, p in zip(self.masters, self.params):
            p.copy_(m)
            m.grad = None

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    def state_tensors(self) -> list[torch.Tensor]:
        out = list(self.masters or [])
        if self.inner is not None:
            out += state_tensors(self.inner)
        return out
