"""QLoRA of Qwen3-Next against the real libraries at small shapes: the linears transformers' bitsandbytes integration
quantizes and peft adapts in its gated DeltaNet, attention and MoE layers, what the gated DeltaNet mixer keeps once
peft's k-bit preparation has made its stream fp32 and autocast runs its conv and matmuls in 16 bits
(estimate/components/quant.py `kbit_deltanet_bytes`), and the estimate of the whole step. Skips with a reason where
torch, transformers, peft or bitsandbytes are not installed."""

from __future__ import annotations

import warnings

import pytest
from tiny_configs import TINY_CONFIGS
from trace_plans import assert_estimate_matches_trace, need, plan

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")
need("bitsandbytes")

from test_new_architectures import MODES, row_plan  # noqa: E402
from vramlens.estimate import components as C  # noqa: E402
from vramlens.knowledge.models import arch_from_hf_config  # noqa: E402

# the gated DeltaNet's linears: Qwen3-Next's fused input projections, Qwen3.5's split ones
DELTANET_LINEARS = {
    "qwen3_next": ("in_proj_qkvz", "in_proj_ba", "out_proj"),
    "qwen3_5_text": ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"),
}


def kept_bytes(fn, module) -> int:
    """Bytes of the distinct storages autograd still keeps for backward once `fn` has returned (its output held),
    parameters excluded. What a branch of the graph the output does not reach saved (the chunk loop's last state
    update, whose state is discarded) is freed with that branch, as it is in a training step."""
    import weakref

    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    packed: list = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            packed.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    live = {}
    for ref in packed:
        t = ref()
        if t is not None:
            live[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    del out
    return sum(live.values())


def kbit_mixer(config: dict):
    """Layer 0's gated DeltaNet of a real Qwen3-Next (or Qwen3.5), prepared as a QLoRA run holds it: its nn.Linear
    modules bitsandbytes 4-bit (NF4, bf16 compute), every other parameter fp32 (peft's prepare_model_for_kbit_training),
    nothing trained."""
    import bitsandbytes as bnb
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **keys))
    mixer = model.model.layers[0].linear_attn
    for name in DELTANET_LINEARS[config["model_type"]]:
        lin = getattr(mixer, name)
        q = bnb.nn.Linear4bit(
            lin.in_features, lin.out_features, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4"
        )
        q.weight = bnb.nn.Params4bit(lin.weight.data.float(), requires_grad=False, quant_type="nf4")
        setattr(mixer, name, q.to("cpu"))
    for p in mixer.parameters():
        if p.dtype != torch.uint8:
            p.data = p.data.float()
        p.requires_grad_(False)
    return mixer


@pytest.mark.parametrize(
    "sizes", [{}, dict(linear_num_key_heads=4, linear_value_head_dim=16, linear_conv_kernel_dim=3)]
)
@pytest.mark.parametrize("model_type", sorted(DELTANET_LINEARS))
def test_kbit_gated_deltanet_keeps_what_the_estimate_says(model_type, sizes):
    """Under 16-bit autocast with the fp32 stream of a k-bit model, the gated DeltaNet keeps, for backward, the bytes
    `deltanet_bytes` counts for a QLoRA plan (before, the 16-bit step's figure: 3-7 % more here), positions filling,
    padding and fitting in one chunk of the scan; Qwen3.5's, whose gate z is its own linear's output, the same."""
    config = dict(TINY_CONFIGS[model_type], **sizes)
    rp0 = plan(arch=arch_from_hf_config(config, f"tiny-{model_type}"), **MODES["qlora"])
    mixer = kbit_mixer(config)
    for batch, positions in [(2, 256), (2, 128), (1, 100), (3, 37), (2, 64)]:
        x = torch.randn(batch, positions, config["hidden_size"], requires_grad=True)  # the fp32 stream

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return mixer(x)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = kept_bytes(step, mixer)
        rp = rp0.model_copy(update={"seq_len": positions, "micro_batch": batch})
        assert C.deltanet_per_token(rp) * batch * positions == pytest.approx(real, rel=1e-9), (batch, positions)


def test_qwen3_next_qlora_quantizes_and_adapts_what_the_libraries_do():
    """The tiny Qwen3-Next's 4-bit weights are its nn.Linear modules' (the DeltaNet's in_proj_qkvz, in_proj_ba and
    out_proj, the attention layer's q (with its output gate), k, v, o, the shared experts and their gate), not four
    attention layers'; its LoRA adapters are the ones peft makes (q, k, v, o in the one attention layer, the fused
    experts' gate_up and down), as the real model holds them."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    rp = row_plan("qwen3_next", "qlora", False)
    keys = {k: v for k, v in TINY_CONFIGS["qwen3_next"].items() if k != "model_type"}
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3_next", **keys))
        linears = sum(
            m.weight.numel()
            for n, m in model.named_modules()
            if type(m) is torch.nn.Linear and not n.endswith("lm_head")
        )
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        lora = LoraConfig(r=rp.lora_r, lora_alpha=rp.lora_alpha, target_modules=targets)
        peft_model = get_peft_model(model, lora)
    adapters = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    p = C.params(rp)
    assert p.quantized_bytes == linears // 2  # bitsandbytes packs two 4-bit weights a byte
    assert p.adapter_params == adapters


# the QLoRA rows of the hybrids grid (benchmarks/trace_vs_estimate.py --grid hybrids): 1.037 and 1.043 before the
# DeltaNet's linears, adapters and k-bit mixer were sized as the libraries make them
@pytest.mark.parametrize("ckpt", [False, True], ids=["qlora", "qlora-ckpt"])
def test_qwen3_next_qlora_estimate_follows_the_real_library_trace(ckpt):
    assert_estimate_matches_trace(row_plan("qwen3_next", "qlora", ckpt))
