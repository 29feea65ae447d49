"""Liger's RMSNorm and SwiGLU kernels save other tensors than transformers' layers (estimate/components/liger.py).

Triton does not run on the CPU, so the kernels are replaced by stand-ins that allocate and save what Liger's autograd
functions do (linkedin/Liger-Kernel ead96b6, liger-kernel 0.8.2, src/liger_kernel/ops/rms_norm.py
`LigerRMSNormFunction.forward`: `Y = torch.empty(...)`, an fp32 `RSTD` per row, `ctx.save_for_backward(X, W, RSTD)`;
ops/swiglu.py `LigerSiLUMulFunction.forward`: `c = torch.empty_like(a)`, `ctx.save_for_backward(a, b)`), patched into
a small transformers Qwen2 model the way monkey_patch.py's `_patch_rms_norm_module` / `_patch_swiglu_module` do. What
autograd saves in its forward, with and without them, is compared with the estimate's change."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from vramlens.analysis import analyze
from vramlens.estimate.components import activations_per_token
from vramlens.estimate.components.liger import final_norm_per_token as liger_final_norm
from vramlens.estimate.components.norms import final_norm_per_token
from vramlens.settings import Settings

transformers = pytest.importorskip("transformers")

H, INTER, HEADS, KV_HEADS, LAYERS, VOCAB = 256, 704, 4, 2, 2, 512
BATCH, SEQ = 2, 64


class RMSNormStandIn(torch.autograd.Function):
    """Liger's RMSNorm ("llama" casting mode): a new output, the fp32 1/rms per row; saves X, W and RSTD."""

    @staticmethod
    def forward(ctx, X, W, eps):
        shape = X.shape
        X = X.view(-1, shape[-1])
        Y = torch.empty_like(X)
        RSTD = torch.empty(X.shape[0], dtype=torch.float32)
        RSTD.copy_(torch.rsqrt(X.float().pow(2).mean(-1) + eps))
        Y.copy_(W * (X.float() * RSTD[:, None]).to(X.dtype))
        ctx.eps = eps
        ctx.save_for_backward(X, W, RSTD)
        return Y.view(shape)

    @staticmethod
    def backward(ctx, dY):
        X, W, RSTD = ctx.saved_tensors
        with torch.enable_grad():
            x, w = X.detach().requires_grad_(), W.detach().requires_grad_()
            y = w * (x.float() * RSTD[:, None]).to(x.dtype)
            dX, dW = torch.autograd.grad(y, (x, w), dY.reshape(y.shape))
        return dX.view(dY.shape), dW, None


class SiLUMulStandIn(torch.autograd.Function):
    """Liger's SwiGLU: c = silu(a) · b into a new tensor; saves a and b (silu(a) is recomputed in backward)."""

    @staticmethod
    def forward(ctx, a, b):
        c = torch.empty_like(a)
        c.copy_(F.silu(a) * b)
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        with torch.enable_grad():
            x, y = a.detach().requires_grad_(), b.detach().requires_grad_()
            return torch.autograd.grad(F.silu(x) * y, (x, y), dc)


def _model(liger: bool, trains: bool, amp: bool):
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        hidden_size=H,
        intermediate_size=INTER,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        num_hidden_layers=LAYERS,
        vocab_size=VOCAB,
        attn_implementation="sdpa",
    )
    model = transformers.Qwen2Model(config).to(torch.float32 if amp else torch.bfloat16)
    model.requires_grad_(trains)
    if liger:
        norms = [model.norm] + [
            n for layer in model.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)
        ]
        for norm in norms:
            norm.forward = lambda x, n=norm: RMSNormStandIn.apply(x, n.weight, n.variance_epsilon)
        for layer in model.layers:
            mlp = layer.mlp
            mlp.forward = lambda x, m=mlp: m.down_proj(SiLUMulStandIn.apply(m.gate_proj(x), m.up_proj(x)))
    return model


def _saved_bytes(liger: bool, trains: bool, amp: bool) -> int:
    """The bytes of the distinct storages autograd saves in one forward, parameters aside: bf16 weights, or fp32
    weights under bf16 autocast."""
    model = _model(liger, trains, amp)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    embeds = torch.randn(BATCH, SEQ, H, dtype=torch.float32 if amp else torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out = model(inputs_embeds=embeds).last_hidden_state
    out.float().sum().backward()  # the stand-ins' backward runs
    return sum(seen.values())


QWEN = "model_name_or_path: Qwen/Qwen2.5-1.5B\nper_device_train_batch_size: 2\nmax_length: 64\nbf16: true\n"
LORA = "use_peft: true\nlora_target_modules: all-linear\n"


def _plan(tmp_path: Path, text: str, amp: bool = False):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    a = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False))
    rp = a.resolution.resolved
    tiny = rp.arch.model_copy(
        update=dict(
            hidden=H,
            intermediate=INTER,
            heads=HEADS,
            kv_heads=KV_HEADS,
            head_dim=None,
            layers=LAYERS,
            vocab=VOCAB,
            params_total=0,
            params_by_kind=(),
        )
    )
    # as the stand-in model runs: bf16 weights, or fp32 ones under autocast; no checkpointing
    weights = "fp32" if amp else "bf16"
    return rp.model_copy(update={"arch": tiny, "amp": amp, "weight_dtype": weights, "grad_checkpointing": False})


def _estimated_change(rp) -> float:
    """What the estimate's activations and final norm change by with Liger's kernels, for BATCH × SEQ tokens."""
    plain = rp.model_copy(update={"liger_kernels": False})
    layers = activations_per_token(rp)[0] - activations_per_token(plain)[0]
    final = liger_final_norm(rp, final_norm_per_token(rp)) - final_norm_per_token(rp)
    return (layers + final) * BATCH * SEQ


@pytest.mark.parametrize(
    "trains,amp",
    [(True, False), (False, False), (True, True), (False, True)],
    ids=["full", "frozen", "full-amp", "frozen-amp"],
)
def test_liger_kernels_save_what_their_autograd_functions_declare(tmp_path, trains, amp):
    rp = _plan(tmp_path, QWEN + "use_liger_kernel: true\n" + ("" if trains else LORA), amp)
    assert rp.liger_kernels and set(rp.fused_kernels) >= {"rms_norm", "swiglu"}
    assert rp.compute_dtype == "bf16" and rp.peft == ("none" if trains else "lora")
    measured = _saved_bytes(True, trains, amp) - _saved_bytes(False, trains, amp)
    estimated = _estimated_change(rp)
    assert measured < 0  # Liger keeps less: no fp32 norm input, no act(gate)
    assert estimated == pytest.approx(measured, rel=0.03), (estimated, measured)


def test_liger_kernels_are_named_approximate_not_unmodelled(tmp_path):
    text = QWEN + "use_liger_kernel: true\n"
    path = tmp_path / "config.yaml"
    path.write_text(text)
    rp = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False)).resolution.resolved
    assert not rp.unmodelled
    assert any("Liger kernels' saved tensors read from liger_kernel" in r for r in rp.approximate), rp.approximate


def test_a_model_type_liger_does_not_patch_keeps_transformers_layers(tmp_path):
    # liger_kernel 0.8.2 monkey_patch.py: `apply_liger_kernel_to_qwen3_vl(swiglu=False)` by default, gpt2 has no entry
    rp = _plan(tmp_path, QWEN + "use_liger_kernel: true\n")
    for family in ("gpt2", "qwen3_vl"):
        other = rp.model_copy(update={"arch": rp.arch.model_copy(update={"family": family})})
        plain = other.model_copy(update={"liger_kernels": False})
        if family == "gpt2":
            assert activations_per_token(other) == activations_per_token(plain)
        else:  # its RMSNorm is swapped, its MLP is not
            norm_only = other.model_copy(update={"fused_kernels": ("rms_norm",)})
            assert activations_per_token(other) == activations_per_token(norm_only)
