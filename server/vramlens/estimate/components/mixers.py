"""Token mixers that are not attention, in stacks that mix them with attention layers: LFM2's gated short
convolutions. A layer of such a kind keeps its own mixer's activations in place of the attention's (its norms and
MLP are the block's)."""

from __future__ import annotations

from vramlens.estimate import shapes
from vramlens.estimate.components.common import mlp_bytes
from vramlens.estimate.components.linears import adapter_input
from vramlens.resolved import ResolvedPlan


def short_conv_layers(rp: ResolvedPlan) -> int:
    """How many layers of the stack are short convolutions (`estimate.shapes.short_conv_layers`)."""
    return shapes.short_conv_layers(rp.arch)


def first_layer_is_short_conv(rp: ResolvedPlan) -> bool:
    """Whether layer 0 is a short convolution (LFM2's `layer_types`, which start with "conv" in the published
    configs: LiquidAI/LFM2-1.2B config.json)."""
    import json

    if not short_conv_layers(rp) or not rp.arch.hf_config_json:
        return False
    kinds = json.loads(rp.arch.hf_config_json).get("layer_types") or []
    return bool(kinds) and kinds[0] == "conv"


def short_conv_per_token(rp: ResolvedPlan) -> float:
    """What one LFM2 short-convolution mixer keeps for backward per token (transformers 5.24
    models/lfm2/modeling_lfm2.py `Lfm2ShortConv.forward` and its `causal_conv1d_fn`; measured with saved-tensor hooks
    on the real module, tests/trace/test_new_architectures.py): in_proj's output B|C|x (3h: `B * x` and `C * conv`
    keep views of it), `B * x` (h: the depthwise conv1d keeps its input even with a frozen weight: aten's
    convolution saves input and weight together), the conv output before the slice to the sequence, L + K − 1
    positions of each sequence (the `C * out` product keeps the sliced view; causal-conv1d's CUDA kernel returns
    the L positions alone, K − 1 fewer per sequence), and the inputs of in_proj and out_proj when they train (or
    their adapters' copies). In a k-bit model the conv weight is fp32 (prepare_model_for_kbit_training) and so is
    the stream it convolves: these are fp32 (`mlp_bytes`)."""
    arch = rp.arch
    h = arch.hidden
    c = 2 if rp.compute_dtype != "fp32" else 4
    m = mlp_bytes(rp)
    k = _conv_kernel(rp)
    s = max(rp.seq_len, 1)
    keeps = m * (3 * h + h + h * (s + k - 1) / s)
    if rp.peft == "none":
        return keeps + 2 * c * h  # in_proj's and out_proj's inputs
    if "all-linear" in rp.lora_targets:
        _, a = adapter_input(rp)
        keeps += 2 * (a * h + a * rp.lora_r)  # each adapter's own copy of its input and lora_A's output
    return keeps


def _conv_kernel(rp: ResolvedPlan) -> int:
    """The conv kernel width (`conv_L_cache`, Lfm2Config default 3)."""
    import json

    if rp.arch.hf_config_json:
        k = json.loads(rp.arch.hf_config_json).get("conv_L_cache")
        if isinstance(k, int) and k > 0:
            return k
    return 3
