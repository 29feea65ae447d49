"""Measure what torchao's fake-quantized linears keep for the backward (knowledge/qat.py `SAVED`).

    python scripts/measure_qat_saved.py

Needs torch and torchao (the `trace` extra's environment). For each QAT layout a bf16 `nn.Linear(1024, 4096)` is
prepared as its framework prepares it, run forward on 64 tokens of a non-leaf bf16 input under
`torch.autograd.graph.saved_tensors_hooks`, and the distinct tensors autograd saves are summed, leaving out the
parameter and the input themselves: weight-shaped ones per weight element, token-shaped ones per input element.
Each layout is measured with the weight trained and frozen (an adapter's base), and at group sizes 32 to 256, whose
difference gives the per-group part. Runs on the CPU in seconds.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

warnings.filterwarnings("ignore")


HIDDEN = 1024  # the linear's input width: a figure per input element above a whole number is a per-token one × HIDDEN


def measure(prepare, frozen: bool, h: int = HIDDEN, f: int = 4096, tokens: int = 64) -> tuple[float, float]:
    m = prepare(nn.Linear(h, f, bias=False).to(torch.bfloat16))
    for p in m.parameters():
        p.requires_grad_(not frozen)
    leaf = torch.randn(tokens, h, dtype=torch.bfloat16, requires_grad=True)
    x = leaf * 1.0  # a non-leaf input that nothing else saves
    seen: dict[int, tuple[int, tuple[int, ...]]] = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = (t.numel() * t.element_size(), tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(x)
    own = {p.untyped_storage().data_ptr() for p in m.parameters()} | {leaf.untyped_storage().data_ptr()}
    weights = sum(p.numel() for p in m.parameters())
    w = sum(n for k, (n, shape) in seen.items() if k not in own and shape[0] != tokens)
    a = sum(n for k, (n, shape) in seen.items() if k not in own and shape[0] == tokens)
    return w / weights, a / (tokens * h)


def layouts() -> dict:
    """knowledge/qat.py's layouts → a function of the group size that prepares a linear as its framework does."""
    from torchao.quantization import Int4WeightOnlyConfig, Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.qat import Int8DynActInt4WeightQATQuantizer, QATConfig

    def config(make):
        def prepare(m):
            s = nn.Sequential(m)
            quantize_(s, QATConfig(make(), step="prepare"))
            return s[0]

        return prepare

    return {
        # axolotl src/axolotl/utils/quantization.py `get_quantization_config`
        "int4-weight": lambda g: config(lambda: Int4WeightOnlyConfig(group_size=g, version=2)),
        "int8-dynamic-int4": lambda g: config(
            lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(g))
        ),
        # torchtune recipes/qat_distributed.py: `quantizer.prepare(model)`
        "8da4w-linear": lambda g: (
            lambda m: (
                Int8DynActInt4WeightQATQuantizer(groupsize=g, scales_precision=torch.bfloat16)
                .prepare(nn.Sequential(m))
                .to(torch.bfloat16)[0]
            )
        ),
    }


def main() -> None:
    import torchao

    print(f"torch {torch.__version__}, torchao {torchao.__version__}")
    print("layout              group  weight B/elem  frozen  input B/elem  frozen")
    for name, make in layouts().items():
        for g in (32, 64, 128, 256):
            (w, a), (wf, af) = measure(make(g), False), measure(make(g), True)
            print(f"{name:18s} {g:6d} {w:14.4f} {wf:7.4f} {a:13.4f} {af:7.4f}")


if __name__ == "__main__":
    main()
