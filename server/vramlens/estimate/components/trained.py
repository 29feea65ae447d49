"""Which layers train: the trainable parameters of a partial run (freeze tuning, LLaMA-Pro, LISA, BAdam) and how
far its backward reaches."""

from __future__ import annotations

from vramlens.estimate.components.common import ATTN_LINEARS
from vramlens.estimate.shapes import shapes
from vramlens.resolved import ResolvedPlan


def trained_params(rp: ResolvedPlan) -> tuple[int, int]:
    """(trainable parameters, the largest trainable tensor's parameters) of a full-precision run: every weight, or
    with `trained_layers` set only those layers (their `trained_modules`: attention and/or MLP linears, else the whole
    layer with its norms) plus the `trained_extra` embedding / LM head. Freeze tuning and LLaMA-Pro
    (LLaMA-Factory 01d87b82 src/llamafactory/model/adapter.py `_setup_freeze_tuning`: `freeze_trainable_layers`
    layers, `freeze_trainable_modules`, `freeze_extra_modules`) and LISA (LMFlow / axolotl: `lisa_activated_layers`
    / `lisa_n_layers` layers at a time, the embedding and LM head outside `model.layers` stay trainable)."""
    s = shapes(rp.arch)
    head = 0 if rp.scalar_head else s.lm_head_params
    total = s.total - (s.lm_head_params - head)
    biggest_linear = s.largest_linear
    if rp.trained_layers is None:
        return total, max(s.embed_params, head, biggest_linear)
    layers = counted_layers(rp)
    n = max(0, min(int(rp.trained_layers), layers))
    if rp.trained_modules:
        names: set[str] = set()
        if "attn" in rp.trained_modules:
            names.update(ATTN_LINEARS)
        if "mlp" in rp.trained_modules:
            names.update(("gate", "up", "down", "fc1", "fc2"))
        per_layer = sum(l.params for l in s.linears if l.name in names) / layers
        largest = max((l.in_features * l.out_features for l in s.linears if l.name in names), default=0)
    else:
        per_layer = (s.linear_params + s.other_params) / layers  # linears, norms and biases of one layer
        largest = biggest_linear
    trainable = int(n * per_layer)
    if "embed" in rp.trained_extra:
        trainable += s.embed_params
        largest = max(largest, s.embed_params)
    if "lm_head" in rp.trained_extra and head:
        trainable += head
        largest = max(largest, head)
    return min(trainable, total), (largest if n or trainable else 0)


def counted_layers(rp: ResolvedPlan) -> int:
    """The layers `trained_layers` counts (as in `trained_params`): the decoder's, and an encoder-decoder's both."""
    return max(rp.arch.layers + (rp.arch.encoder_layers or 0 if rp.arch.block == "encoder-decoder" else 0), 1)


def backward_layers(rp: ResolvedPlan, worst: bool = False) -> float:
    """How many layers the backward pass runs through: on average over the run, or with `worst` at the step that
    reaches deepest (what the activations' peak follows: nothing below it is saved). Autograd stops below the lowest
    layer with a trainable weight when nothing beneath it trains (LLaMA-Factory 01d87b82
    src/llamafactory/model/model_utils/checkpointing.py `get_custom_gradient_checkpointing_func`: "Only applies
    gradient checkpointing to trainable layers", so frozen blocks are neither recomputed nor back-propagated).
    Where the trained layers sit (`trained_where`): the last n → n layers; the first n → all of them; LLaMA-Pro's
    expanded blocks (every L/n-th, the lowest at L/n − 1) → L − L/n + 1; a window that moves (BAdam's one block
    in turn, LISA's n sampled layers: the lowest of n uniform draws sits at (L − n)/(n + 1) on average) →
    L − (L − n)/(n + 1). A trained embedding (LISA) or vision tower needs every layer's backward."""
    layers = counted_layers(rp)
    if (
        rp.peft != "none"
        or rp.trained_layers is None
        or "embed" in rp.trained_extra
        or (rp.arch.vision_params and not rp.vision_frozen)
    ):
        return float(layers)
    n = max(0, min(int(rp.trained_layers), layers))
    if n == 0:
        return 0.0
    where = rp.trained_where
    if where == "first":
        return float(layers)
    if where == "spread":
        return float(layers - layers // n + 1)
    if where == "rotating":
        return float(layers) if worst else layers - (layers - n) / (n + 1)
    return float(n)


def weight_grad_share(rp: ResolvedPlan, linear: str) -> float:
    """Share of a block linear's instances whose weight trains (its weight-gradient GEMM runs): all of them in a
    full fine-tune, none under PEFT (the adapters have their own), `trained_layers` of the layers when only those
    (and, with `trained_modules`, only their attention or MLP linears) train."""
    if rp.peft != "none":
        return 0.0
    if rp.trained_layers is None:
        return 1.0
    if rp.trained_modules:
        names = (ATTN_LINEARS if "attn" in rp.trained_modules else ()) + (
            ("gate", "up", "down", "fc1", "fc2") if "mlp" in rp.trained_modules else ()
        )
        if linear not in names:
            return 0.0
    layers = counted_layers(rp)
    return max(0, min(int(rp.trained_layers), layers)) / layers
