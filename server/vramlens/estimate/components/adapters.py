"""Adapter methods beyond plain LoRA: IA3 and VeRA (trained vectors) and DoRA (a magnitude per output): their
parameters and what they keep. What they keep is sized from the dtypes the step computes with
(`compute_weight_dtype`, `adapter_computes_fp32`): under FSDP's mixed precision the adapters are gathered in
16-bit with the rest of their unit, whatever dtype they are stored in."""

from __future__ import annotations

from vramlens.estimate.components.common import (
    DTYPE_BYTES,
    adapter_computes_fp32,
    compute_weight_dtype,
    fp32_residual,
    has_linear,
    linear_in_features,
    linear_out_features,
    mlp_bytes,
)
from vramlens.estimate.components.experts import experts_adaptable
from vramlens.estimate.shapes import targeted
from vramlens.knowledge import peft_methods, versions
from vramlens.resolved import ResolvedPlan

# Adapter methods that train vectors, not low-rank matrices (peft IA3, VeRA).
VECTOR_METHODS = ("ia3", "vera")


def _vector_targets(rp: ResolvedPlan):
    return [l for l in targeted(rp.arch, rp.lora_targets, experts_adaptable(rp)) if l.name not in ("lm_head", "embed")]


def vector_adapter_params(rp: ResolvedPlan) -> int:
    """Trainable parameters of IA3 and VeRA. IA3 (peft 0.21.2 `tuners/ia3/layer.py` IA3Layer.update_layer): one
    vector per targeted linear, of its input width for a feedforward module (`feedforward_modules`), else of its
    output width. VeRA (peft 0.21.2 `tuners/vera/layer.py` VeraLayer.update_layer): `vera_lambda_d` (r) and
    `vera_lambda_b` (out features) per targeted linear."""
    out = 0
    for lin in _vector_targets(rp):
        if rp.peft == "ia3":
            out += lin.count * (lin.in_features if lin.name in rp.feedforward_targets else lin.out_features)
        else:
            out += lin.count * (rp.lora_r + lin.out_features)
    return out


def vera_projection_params(rp: ResolvedPlan) -> int:
    """VeRA's frozen random projections, shared by every adapted linear: `vera_A` (r × the largest input width) and
    `vera_B` (the largest output width × r) (peft 0.21.2 `tuners/vera/model.py` `_find_dim`, `_init_vera_A_vera_B`);
    each layer slices them."""
    if rp.peft != "vera":
        return 0
    lins = _vector_targets(rp)
    if not lins:
        return 0
    return rp.lora_r * (max(l.in_features for l in lins) + max(l.out_features for l in lins))


def vector_adapter_per_token(rp: ResolvedPlan) -> tuple[float, float, float]:
    """(bytes kept per token and layer, of them the down projection's input, the adapter's own copy of it) under
    IA3 or VeRA. The base linears are frozen, so they keep nothing of their input; the adapters' products keep the
    operand the vector's gradient needs.
    IA3 (peft 0.21.2 `tuners/ia3/layer.py` Linear.forward): a feedforward module computes
    `(x.to(ia3_l.dtype) * ia3_l)` before the base layer, so the product keeps the input cast to the vector's dtype
    (fp32 under peft's default `autocast_adapter_dtype`); any other computes `base_layer(x) * ia3_l`, keeping the
    base output (the activations' dtype).
    VeRA (peft 0.21.2 `tuners/vera/layer.py` Linear.forward): `lambda_b * F.linear(lambda_d * F.linear(x, A), B)`
    with x cast to the vectors' dtype and A, B frozen: lambda_d's product keeps x·Aᵀ (r wide) and lambda_b's keeps
    the B projection (out wide), in the vectors' dtype, or 16-bit under autocast (F.linear returns it); the casts of
    x feed only frozen matmuls and are not kept. Dropout keeps its 1-byte mask."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    av = 4 if (adapter_computes_fp32(rp) or compute_weight_dtype(rp) == "fp32" or c == 4) else c
    layers = max(arch.layers, 1)
    total = down = 0.0
    for lin in _vector_targets(rp):
        per = lin.count / layers
        if rp.peft == "ia3":
            kept = av * lin.in_features if lin.name in rp.feedforward_targets else c * lin.out_features
        else:
            width = c if rp.amp and c == 2 else av
            kept = width * (rp.lora_r + lin.out_features) + (lin.in_features if rp.lora_dropout > 0 else 0)
        total += per * kept
        if lin.name in ("down", "fc2") and rp.peft == "ia3" and lin.name in rp.feedforward_targets:
            down += per * kept
    copy = down if (rp.peft == "ia3" and av != c) else 0.0
    return total, down, copy


def dora_targets(rp: ResolvedPlan) -> list[str]:
    """The block linears a DoRA adapter wraps (the dense ones: MoE experts are not nn.Linear modules here)."""
    if rp.peft != "dora":
        return []
    arch = rp.arch
    names = ("q", "k", "v", "o") + (() if arch.is_moe else ("gate", "up", "down", "fc1", "fc2"))
    all_lin = "all-linear" in rp.lora_targets
    return [n for n in names if has_linear(arch, n) and (all_lin or n in rp.lora_targets)]


def _dora_dtypes(rp: ResolvedPlan) -> tuple[int, int, bool]:
    c = 2 if rp.compute_dtype != "fp32" else 4
    autocast = fp32_residual(rp)
    a = c if autocast else (4 if (adapter_computes_fp32(rp) and c == 2) else c)
    return c, a, autocast


def dora_recomputes_base(rp: ResolvedPlan) -> bool:
    """Whether DoRA computes its own F.linear(x, weight.to(x.dtype)) in the adapter's input dtype rather than reuse
    the base layer's output: with dropout (any peft: the dropped input differs from the base layer's), and always
    before peft 0.14.0, whose `Linear.forward` never passes `base_result` (peft 0.13.2 `tuners/lora/layer.py`,
    `tuners/lora/dora.py`; `knowledge/versions.peft_dora_reuses_base_result`)."""
    if rp.lora_dropout > 0:
        return True
    pv = rp.version_of("peft")
    return not versions.peft_dora_reuses_base_result(pv[0] if pv else None)


def dora_version_notes(rp: ResolvedPlan) -> list[str]:
    """What the plan's peft version changes in DoRA's kept tensors (empty when nothing does)."""
    if not dora_targets(rp) or rp.lora_dropout > 0 or not dora_recomputes_base(rp):
        return []
    pv = rp.version_of("peft")
    copies = dora_weight_copies(rp)
    kept = f"; each block also keeps a {copies / 2**20:,.0f} MiB cast of its adapted weights" if copies else ""
    return [
        f"DoRA on peft {pv[0] if pv else versions.NEWEST['peft']}: every adapted linear recomputes x @ W in the "
        f"adapter's dtype instead of reusing the base layer's output (peft reuses it from 0.14.0) and keeps that "
        f"product for backward{kept}"
    ]


def dora_per_token(rp: ResolvedPlan, only: tuple[str, ...] | None = None) -> float:
    """What DoRA keeps per token beyond LoRA (peft 0.21.2 `tuners/lora/dora.py` DoraLinearLayer.forward):
    `result_dora = (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling` — the two products
    keep `base_result` and `lora_result` (out features each) for the magnitude's gradient. Without dropout
    `base_result` is the base layer's output (its dtype: 16-bit, fp32 from a k-bit linear fed fp32); with dropout,
    and with any peft before 0.14 (`dora_recomputes_base`), it is recomputed as F.linear(dropout(x), weight) in
    the adapter's input dtype (16-bit under autocast)."""
    names = [n for n in dora_targets(rp) if only is None or n in only]
    if not names:
        return 0.0
    c, a, autocast = _dora_dtypes(rp)
    base_b = a if dora_recomputes_base(rp) else (4 if mlp_bytes(rp) == 4 else c)
    return float(sum(linear_out_features(rp.arch, n) * (base_b + a) for n in names))


def dora_weight_copies(rp: ResolvedPlan) -> int:
    """Bytes per block that DoRA keeps for backward whatever the tokens: with dropout (and with any peft before
    0.14, `dora_recomputes_base`), F.linear(dropout(x), weight.to(x.dtype)) keeps the weight it multiplies by, a
    fresh copy when the base weight is quantized (`dequantize_module_weight`), cast to another dtype, or cast by
    autocast (peft 0.21.2 `dora.py`; the same line in peft 0.13.2). The other methods' weight-sized tensors kept
    per block (`method_weight_copies`) count here too."""
    names = dora_targets(rp)
    if not names or not dora_recomputes_base(rp):
        return method_weight_copies(rp)
    c, a, autocast = _dora_dtypes(rp)
    wb = DTYPE_BYTES[compute_weight_dtype(rp)]
    fresh = autocast or bool(rp.quant_bits) or a != wb
    if not fresh:
        return 0
    b = c if autocast else a
    return sum(linear_in_features(rp.arch, n) * linear_out_features(rp.arch, n) * b for n in names)


def dora_weight_norm_transient(rp: ResolvedPlan) -> int:
    """Bytes DoRA allocates for a moment in every adapted linear's forward to get the weight norm (peft 0.21.2
    `dora.py`): `get_lora_weight` runs lora_B(lora_A(eye(in))) — an in × in identity and the in × out product in
    the adapter dtype — then `get_weight_norm` adds `scaling * lora_weight` to a copy of the weight in the input's
    dtype (weight copy when the dtype differs or the weight is dequantized, scaled product and sum: 2–3 × in × out).
    The identity stays alive meanwhile: lora_A saved it for its weight's gradient, and lora_weight's graph holds
    that node until the forward drops lora_weight (traced with the real libraries, Mistral-7B DoRA checkpointed:
    the down projection's 14336² fp32 identity is live at the recompute peak beside the weight-sized tensors).
    The largest linear's counts."""
    names = dora_targets(rp)
    if not names:
        return 0
    c, a, autocast = _dora_dtypes(rp)
    aw = 4 if (adapter_computes_fp32(rp) or compute_weight_dtype(rp) == "fp32") else c
    copies = 3 if (rp.quant_bits or a != DTYPE_BYTES[compute_weight_dtype(rp)]) else 2
    arch = rp.arch
    return max(
        linear_in_features(arch, n) ** 2 * aw
        + linear_in_features(arch, n) * linear_out_features(arch, n) * (aw + copies * a)
        for n in names
    )


def _method_linears(rp: ResolvedPlan):
    return [l for l in targeted(rp.arch, rp.lora_targets, experts_adaptable(rp)) if l.name not in ("lm_head", "embed")]


def _adapter_product_bytes(rp: ResolvedPlan) -> int:
    """Bytes per element of what an adapter's matmuls make: the activations' dtype under autocast, else the
    adapters' (fp32 under peft's `autocast_adapter_dtype`)."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    if rp.amp and c == 2:
        return c
    return 4 if (adapter_computes_fp32(rp) or compute_weight_dtype(rp) == "fp32" or c == 4) else c


def adalora_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token and layer AdaLoRA keeps beyond LoRA's: peft 0.21.2 tuners/adalora/layer.py SVDLinear.forward
    computes `(dropout(x) @ (lora_A * lora_E).T @ lora_B.T) * scaling / ranknum`, and `ranknum` is a trainable
    parameter once peft has moved the adapter to the base layer's device (`method_adapter_params`), so the division
    keeps its numerator, an out-features-wide product, for each adapted linear (checked against peft's own adapters
    in the real-library trace: tests/trace/test_peft_methods_traced.py)."""
    if rp.adapter_method != "adalora":
        return 0.0
    layers = max(rp.arch.layers, 1)
    w = _adapter_product_bytes(rp)
    return sum(lin.count / layers * w * lin.out_features for lin in _method_linears(rp))


def adalora_mlp_backward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token AdaLoRA adds to a block's MLP backward: the gradients of the gate and up adapters' kept
    numerators, one MLP-wide tensor each in the adapters' product dtype, made while the MLP's backward runs (seen in
    the real-library trace of a checkpointed block: two fp32 `div` outputs the width of the MLP beside the MLP's own
    gradients)."""
    if rp.adapter_method != "adalora":
        return 0.0
    arch = rp.arch
    names = {lin.name for lin in _method_linears(rp)}
    hit = len(names & {"gate", "up", "fc1"})
    return hit * _adapter_product_bytes(rp) * (arch.moe_intermediate or arch.intermediate) if not arch.is_moe else 0.0


def miss_per_token(rp: ResolvedPlan) -> tuple[float, float, float]:
    """(bytes kept per token and layer, of them the down projection's, the adapter's own copy of its input) under
    MiSS (Bone): peft 0.21.2 tuners/miss/layer.py Linear.forward casts the input to the block's dtype and sums it
    over in/r groups of r, `torch.sum(dropout(x).reshape(..., in // r, r), dim=-2) @ miss`: the matmul keeps the
    r-wide sum for the block's gradient and nothing keeps the input (the base linears are frozen, the sum needs no
    operand); dropout keeps its 1-byte mask."""
    r = dict(rp.adapter_shape).get("r", 64)
    layers = max(rp.arch.layers, 1)
    w = _adapter_product_bytes(rp)
    total = down = 0.0
    for lin in _method_linears(rp):
        kept = lin.count / layers * (w * min(r, lin.in_features) + (lin.in_features if rp.lora_dropout > 0 else 0))
        total += kept
        if lin.name in ("down", "fc2"):
            down += kept
    return total, down, 0.0


def method_adapter_params(rp: ResolvedPlan) -> int:
    """Trainable parameters of a PEFT method beyond LoRA/DoRA/IA3/VeRA (knowledge/peft_methods.OTHER_METHODS), per
    adapted linear of in × out features (peft 0.21.2 `tuners/<method>/layer.py` `update_layer`):
    AdaLoRA lora_A (r × in), lora_B (out × r), lora_E (r); LoHa hada_w1_a/w2_a (out × r) and hada_w1_b/w2_b
    (r × in); LoKr lokr_w1 (out₁ × in₁) and lokr_w2_a (out₂ × r), lokr_w2_b (r × in₂) over `factorization` of each
    side (a full out₂ × in₂ lokr_w2 when r ≥ max(out₂, in₂)/2); OFT in/block blocks of block(block−1)/2 (the packed
    skew-symmetric entries); BOFT boft_R (factors × in/block × block × block) and boft_s (out); FourierFT
    n_frequency spectrum entries; Bone/MiSS miss_block (r × out). Per block: ms-swift's adapter (swift/tuners/
    adapter.py: Linear(hidden, L) and Linear(L, hidden) with biases) and LoReFT (pyreft: a hidden × r rotation and
    a Linear(hidden, r))."""
    method, shape = rp.adapter_method, dict(rp.adapter_shape)
    if not method:
        return 0
    h = rp.arch.hidden
    if method == "adapter":
        return rp.arch.layers * (2 * h * shape["r"] + shape["r"] + h)
    if method == "reft":
        return rp.arch.layers * (2 * h * shape["r"] + shape["r"])
    out = 0
    for lin in _method_linears(rp):
        i, o = lin.in_features, lin.out_features
        if method == "adalora":
            # lora_A, lora_B, lora_E, and `ranknum`: created on the CPU and moved to the base layer's device, it is
            # wrapped anew as a trainable parameter (peft 0.21.2 tuners_utils.py `_move_adapter_to_device_of_base_layer`
            # sets `adapter_layer[name] = item.to(device)` in a ParameterDict), one per adapted linear
            n = shape["r"] * (i + o + 1) + 1
        elif method == "loha":
            n = 2 * shape["r"] * (i + o)
        elif method == "lokr":
            (o1, o2), (i1, i2) = peft_methods.lokr_factors(o), peft_methods.lokr_factors(i)
            r = shape["r"]
            n = o1 * i1 + (o2 * i2 if r >= max(o2, i2) / 2 else r * (o2 + i2))
        elif method == "oft":
            b = shape["block"]
            n = (i // max(b, 1)) * b * (b - 1) // 2
        elif method == "boft":
            n = shape["factors"] * i * shape["block"] + o
        elif method == "fourierft":
            n = shape["frequencies"]
        else:  # bone
            n = shape["r"] * o
        out += lin.count * n
    return out


def method_frozen_bytes(rp: ResolvedPlan) -> int:
    """Bytes a method holds beside its trainable parameters for the whole run: BOFT's permutation matrices, an
    fp32 buffer of factors × in × in per adapted linear (peft 0.21.2 `tuners/boft/layer.py` `boft_P`, moved to the
    GPU with the model); AdaLoRA's rank allocator, three fp32 tensors the size of every adapter parameter
    (`ipt`, `exp_avg_ipt`, `exp_avg_unc`, peft 0.21.2 `tuners/adalora/layer.py` `RankAllocator.update_ipt`, run
    each step by ms-swift's AdaloraCallback)."""
    method, shape = rp.adapter_method, dict(rp.adapter_shape)
    if method == "boft":
        return sum(lin.count * shape["factors"] * lin.in_features**2 * 4 for lin in _method_linears(rp))
    if method == "adalora":
        return 3 * 4 * method_adapter_params(rp)
    return 0


def method_weight_copies(rp: ResolvedPlan) -> int:
    """Bytes per block of the weight-sized tensors a method's forward keeps for backward. LoHa, LoKr and FourierFT
    build each adapted linear's delta weight (out × in) and run F.linear(x, delta) (peft 0.21.2
    `tuners/lycoris_utils.py` `LycorisLayer` / `tuners/loha/layer.py` `_get_delta_activations`, `tuners/fourierft/
    layer.py` `get_delta_weight`): the delta, in the activations' dtype, stays for x's gradient. BOFT (peft 0.21.2
    `tuners/boft/layer.py` Linear.forward) rotates the input, `x @ boft_rotation`, keeping the in × in rotation,
    and its butterfly product keeps the permutation matrices cast to that dtype (`boft_P.to(x)`, saved by bmm)."""
    method = rp.adapter_method
    if method not in peft_methods.WEIGHT_SIZED_FORWARD:
        return 0
    c = 2 if rp.compute_dtype != "fp32" else 4
    layers = max(rp.arch.layers, 1)
    shape = dict(rp.adapter_shape)
    out = 0.0
    for lin in _method_linears(rp):
        per = lin.count / layers
        if method == "boft":
            out += per * (1 + shape["factors"]) * lin.in_features**2 * c
        else:
            out += per * lin.in_features * lin.out_features * c
    return int(out)
