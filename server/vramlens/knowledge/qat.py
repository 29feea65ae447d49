"""Quantization-aware training (torchao fake quantization): what a fake-quantized linear keeps for its backward.

torchao's QAT swaps each `nn.Linear` for a fake-quantized one (`quantize_(model, QATConfig(base, step="prepare"))`,
or torchtune's `Int8DynActInt4WeightQATQuantizer.prepare`). Its forward rounds the weight (and with an activation
layout, the input) to the low-bit grid in full precision and multiplies by the rounded copies; autograd keeps those
copies and the rounding's intermediates for the backward. The weights themselves stay 16-bit and train as usual.

The bytes below were measured with torchao 0.17.0 and torch 2.14.1 by `scripts/measure_qat_saved.py` (a bf16
nn.Linear prepared as each layout, the tensors autograd saves counted with `torch.autograd.graph.saved_tensors_hooks`,
the parameter and the input themselves left out): per weight element of the linear, and per element of its input.
Other torchao releases may keep other intermediates; the estimate says which release these figures are from.
"""

from __future__ import annotations

from typing import NamedTuple

TORCHAO_MEASURED = "0.17.0"


class QatSaved(NamedTuple):
    """Bytes a fake-quantized linear keeps for its backward beyond the plain linear's own saved input."""

    weight: float  # per weight element, trained weight (rounded copy, fp32 intermediates); `per_group` added
    per_group: float  # per quantization group of the weight (scales, zero points), trained weight
    weight_frozen: float  # per weight element, frozen weight (only the rounded copy the input gradient needs)
    # per input element, the copies of its input a linear keeps in place of the 16-bit input a plain linear keeps
    # (0: it keeps that plain input, shared with the linears that read the same tensor)
    input: float
    input_frozen: float  # the same for a frozen weight (whose plain linear keeps nothing of its input)
    per_token: float  # per token of its input: the activation rounding's scale and zero point
    title: str


# layout -> what it keeps (scripts/measure_qat_saved.py, torchao 0.17.0)
SAVED: dict[str, QatSaved] = {
    # axolotl `qat: {weight_dtype: int4}` (src/axolotl/utils/quantization.py `get_quantization_config`:
    # `Int4WeightOnlyConfig(group_size=…, version=2)`)
    "int4-weight": QatSaved(18.125, 0.0, 2.0, 0.0, 0.0, 0.0, "int4 weights (torchao Int4WeightOnlyConfig)"),
    # axolotl `qat: {weight_dtype: int4, activation_dtype: int8}` (`Int8DynamicActivationIntxWeightConfig(
    # weight_dtype=torch.int4, weight_granularity=PerGroup(group_size))`)
    "int8-dynamic-int4": QatSaved(
        4.0,
        4.0,
        2.0,
        4.0,
        2.0,
        4.0,
        "int8 dynamic activations, int4 weights (torchao Int8DynamicActivationIntxWeightConfig)",
    ),
    # torchtune `quantizer: {_component_: torchtune.training.quantization.Int8DynActInt4WeightQATQuantizer}`
    # (torchao `Int8DynActInt4WeightQATQuantizer`, its `Int8DynActInt4WeightQATLinear`)
    "8da4w-linear": QatSaved(
        4.0,
        4.0,
        2.0,
        6.0,
        4.0,
        8.0,
        "int8 dynamic activations, int4 weights (torchao Int8DynActInt4WeightQATQuantizer)",
    ),
}

# torchao's QAT quantizer classes (torchao.quantization.qat) → (layout, their default group size): torchtune's
# `quantizer:` names the class, NeMo AutoModel builds it from `quantizer_type`
# (nemo_automodel/components/quantization/qat.py `QATConfig.create_quantizer`)
QUANTIZERS: dict[str, tuple[str, int]] = {"Int8DynActInt4WeightQATQuantizer": ("8da4w-linear", 256)}

# the 16-bit input a plain linear keeps for its weight's gradient
PLAIN_INPUT_BYTES = 2.0


def layout(value: str | None) -> tuple[str, int] | None:
    """("int8-dynamic-int4", 32) from the plan's "int8-dynamic-int4:32"; None when it is none of SAVED."""
    if not value:
        return None
    name, _, group = str(value).partition(":")
    if name not in SAVED:
        return None
    return name, int(group) if group.isdigit() and int(group) > 0 else 0
