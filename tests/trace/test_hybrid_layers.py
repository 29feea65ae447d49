"""Activations of layers that are not attention, against the real library at small shapes: what transformers'
Mamba block keeps for backward (saved-tensor hooks on a real `MambaBlock`, torch path), full and LoRA, with and
without checkpointing; the linears LoRA can reach in it (peft's own injection); and how a Mamba config.json is
labelled. Skips with a reason where torch, transformers or peft are not installed."""

from __future__ import annotations

import json
import warnings

import pytest
from tiny_configs import TINY_CONFIGS
from trace_plans import LORA, assert_estimate_matches_trace, need, plan, trace_step
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.estimate.shapes import shapes, targeted
from vramlens.knowledge.models import arch_from_hf_config

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")


def mamba_config(**sizes) -> dict:
    base = dict(
        model_type="mamba",
        hidden_size=40,
        num_hidden_layers=1,
        vocab_size=64,
        state_size=8,
        intermediate_size=96,
        time_step_rank=4,
        conv_kernel=4,
    )
    base.update(sizes)
    return base


def saved_bytes(fn, model) -> int:
    """Bytes of the distinct storages autograd saves while `fn` runs, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def real_block(config: dict, lora: tuple[str, ...] = (), adapter_fp32: bool = True):
    """Layer 0 of a real `MambaForCausalLM` in bf16 (LoRA on `lora` via peft) and the model holding it."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    keys = {k: v for k, v in config.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("mamba", **keys)).to(torch.bfloat16)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(r=LORA["lora_r"], lora_alpha=16, lora_dropout=0.0, target_modules=list(lora)),
            autocast_adapter_dtype=adapter_fp32,
        )
        return model.base_model.model.backbone.layers[0], model
    return model.backbone.layers[0], model


SHAPES = [
    dict(),
    dict(hidden_size=64, intermediate_size=128, state_size=16, time_step_rank=8, conv_kernel=2),
    dict(hidden_size=48, intermediate_size=144, state_size=4, time_step_rank=3, conv_kernel=3),
]
RUNS = [(2, 3), (1, 8), (3, 5)]  # (sequences, positions)


@pytest.mark.parametrize("sizes", SHAPES, ids=["small", "wide-state", "narrow-state"])
@pytest.mark.parametrize("method", ["full", "lora-16bit", "lora-fp32"])
def test_mamba_block_keeps_what_the_estimate_says(sizes, method):
    """A Mamba block on transformers' torch path keeps, for backward, the bytes `mamba_layer_bytes` counts: per token,
    per sequence (the padded conv output, the recurrence's first and last states) and per layer (A, D)."""
    config = mamba_config(**sizes)
    arch = arch_from_hf_config(config, "tiny-mamba")
    lora = method != "full"
    changes = dict(LORA, lora_targets=("all-linear",), adapter_fp32=method == "lora-fp32") if lora else {}
    names = tuple(l.name for l in targeted(arch, ("all-linear",))) if lora else ()
    block, model = real_block(config, names, adapter_fp32=method == "lora-fp32")
    for batch, positions in RUNS:
        x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = saved_bytes(lambda: block(x), model)
        rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **changes)
        est = C.mamba_layer_per_token(rp, kernels=False) * batch * positions
        assert est == pytest.approx(real, rel=0.005), (batch, positions)


def test_checkpointed_mamba_block_keeps_its_input():
    config = mamba_config()
    arch = arch_from_hf_config(config, "tiny-mamba")
    block, model = real_block(config)
    x = torch.randn(2, 6, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    real = saved_bytes(lambda: torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False), model)
    rp = plan(arch=arch, seq_len=6, micro_batch=2, grad_checkpointing=True)
    assert C.block_input_per_token(rp) * 12 == real


@pytest.mark.parametrize("sizes", SHAPES[:2], ids=["small", "wide-state"])
def test_all_linear_lora_adapts_what_peft_adapts(sizes):
    """ "all-linear" on a Mamba model: in_proj, x_proj and dt_proj get adapters; peft refuses out_proj and conv1d.
    The adapters the estimate counts are the ones peft makes (trainable parameters equal)."""
    config = mamba_config(**sizes, num_hidden_layers=2)
    arch = arch_from_hf_config(config, "tiny-mamba")
    adapted = targeted(arch, ("all-linear",))
    assert sorted(l.name for l in adapted) == ["dt_proj", "in_proj", "x_proj"]
    _, model = real_block(config, tuple(l.name for l in adapted))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == sum(l.count * LORA["lora_r"] * (l.in_features + l.out_features) for l in adapted)
    # the mixer's linears, conv, A and D, the norms and the embedding add up to what transformers builds
    assert shapes(arch).total == sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)


def test_mamba_estimate_follows_the_kernels_and_says_so():
    arch = arch_from_hf_config(mamba_config(hidden_size=256, intermediate_size=512, num_hidden_layers=4), "m")
    assert "sized as attention" not in arch.approximate
    assert "mamba_ssm" in arch.approximate and "not traced" in arch.approximate
    rp = plan(arch=arch, seq_len=1024, micro_batch=2)
    _, one = C.activations_per_token(rp)
    assert one == C.mamba_layer_per_token(rp, kernels=True)
    # the kernel keeps no per-step states: far less than the torch path, which keeps (12 + 2)·I·N per token
    assert one * 4 < C.mamba_layer_per_token(rp, kernels=False)
    assert estimate(rp, limits=False).allocated_bytes > 0


@pytest.mark.parametrize(
    "model_type,kernels",
    [
        ("mamba2", "mamba_ssm"),
        ("falcon_h1", "mamba_ssm"),
        ("jamba", "mamba_ssm"),
        ("bamba", "mamba_ssm"),
        ("granitemoehybrid", "mamba_ssm"),
        ("qwen3_next", "flash-linear"),
        ("qwen3_5_text", "flash-linear"),
        ("qwen3_5_moe_text", "flash-linear"),
    ],
)
def test_modelled_mixers_say_which_path_they_assume(model_type, kernels):
    """The Mamba mixers of Mamba-2, Falcon-H1 and Jamba and Qwen3-Next's gated DeltaNet are no longer sized as
    attention layers: the estimate says it sizes them as transformers' torch path, without the kernels."""
    arch = arch_from_hf_config(TINY_CONFIGS[model_type], f"tiny-{model_type}")
    assert "sized as attention" not in arch.approximate
    assert "torch path" in arch.approximate and kernels in arch.approximate


# Mamba-2 mixers (transformers 5.24 `Mamba2Mixer`, `FalconH1Mixer`) at shapes that pad the last chunk, fill it, or
# fit in one chunk; n_groups below and equal to the heads; Falcon-H1 with and without its gated RMSNorm
MAMBA2_MIXERS = [
    ("mamba2", {}),
    ("mamba2", dict(n_groups=8, chunk_size=16, state_size=8)),
    ("falcon_h1", {}),
    ("falcon_h1", dict(mamba_rms_norm=True, mamba_n_groups=2, mamba_chunk_size=32)),
]


def real_mixer(model_type: str, config: dict):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **keys)).to(torch.bfloat16)
    model.train()
    layer = model.model.layers[0] if model_type == "falcon_h1" else model.backbone.layers[0]
    return (layer.mamba if model_type == "falcon_h1" else layer.mixer), model


@pytest.mark.parametrize("model_type,sizes", MAMBA2_MIXERS, ids=["mamba2", "mamba2-groups", "falcon-h1", "gated"])
@pytest.mark.parametrize("method", ["full", "frozen"])
def test_mamba2_mixer_keeps_what_the_estimate_says(model_type, sizes, method):
    """A Mamba-2 mixer on transformers' torch path (`causal_conv1d_fn`, `mamba2_chunk_scan`) keeps, for backward,
    the bytes `mamba2_mixer_bytes` counts, with every parameter training and with none (an adapter run whose
    targets are outside the mixer)."""
    config = dict(TINY_CONFIGS[model_type], **sizes)
    arch = arch_from_hf_config(config, f"tiny-{model_type}")
    mixer, model = real_mixer(model_type, config)
    for p in model.parameters():
        p.requires_grad_(method == "full")
    changes = LORA if method == "frozen" else {}
    for batch, positions in [(2, 128), (1, 100), (3, 37)]:
        x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = saved_bytes(lambda: mixer(x), model)
        rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **changes)
        assert C.mamba2_mixer_per_token(rp) * batch * positions == pytest.approx(real, rel=1e-9), (batch, positions)


# the other families built on transformers' Mamba-2 mixer (`BambaMixer`, `NemotronHMamba2Mixer`,
# `GraniteMoeHybridMambaLayer`: `Mamba2Mixer.forward` under their own config names), layer 0 of each tiny config
OTHER_MAMBA2_MIXERS = [
    ("bamba", {}),
    ("bamba", dict(mamba_n_groups=2, mamba_chunk_size=32, mamba_d_state=8)),
    ("nemotron_h", {}),
    ("granitemoehybrid", {}),
]


@pytest.mark.parametrize(
    "model_type,sizes", OTHER_MAMBA2_MIXERS, ids=["bamba", "bamba-groups", "nemotron-h", "granite-hybrid"]
)
@pytest.mark.parametrize("method", ["full", "frozen"])
def test_other_mamba2_mixers_keep_what_the_estimate_says(model_type, sizes, method):
    """Bamba's, Nemotron-H's and Granite-4's Mamba-2 mixers keep, for backward, the bytes `mamba2_mixer_bytes`
    counts from their own config names (before, their sizes were not read: the mixer was sized as attention)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(TINY_CONFIGS[model_type], **sizes)
    arch = arch_from_hf_config(config, f"tiny-{model_type}")
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **keys)).to(torch.bfloat16)
    model.train()
    layer = model.model.layers[0]
    mixer = layer.mixer if model_type == "nemotron_h" else layer.mamba
    for p in model.parameters():
        p.requires_grad_(method == "full")
    for batch, positions in [(2, 128), (1, 100), (3, 37)]:
        x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = saved_bytes(lambda: mixer(x), model)
        rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **(LORA if method == "frozen" else {}))
        assert C.mamba2_mixer_per_token(rp) * batch * positions == pytest.approx(real, rel=1e-9), (batch, positions)


@pytest.mark.parametrize("model_type", ["bamba", "granitemoehybrid"])
def test_hybrid_stack_reads_which_layers_are_mamba2(model_type):
    """A Bamba or Granite-4 hybrid stack: its Mamba-2 layers keep the mixer's activations in place of attention's,
    its attention layers (`attn_layer_indices`, `layer_types`) keep attention's. One more attention layer moves the
    estimate by one mixer less and one attention more; the estimate says which path it sizes the mixers on."""
    config = TINY_CONFIGS[model_type]
    arch = arch_from_hf_config(config, f"tiny-{model_type}")
    assert "sized as attention" not in arch.approximate and "torch path" in arch.approximate
    if model_type == "bamba":
        more = dict(config, attn_layer_indices=[0, 2])
    else:
        more = dict(config, layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"])
    rp = plan(arch=arch, seq_len=256, micro_batch=2)
    rp_more = plan(arch=arch_from_hf_config(more, f"tiny-{model_type}"), seq_len=256, micro_batch=2)
    assert C.mamba2_layer_flags(rp) == [True, True, False, True]
    assert C.mamba2_layer_flags(rp_more) == [False, True, False, True]
    lin = C.linear_inputs_per_token(rp)
    attention_part = C.attention_per_token(rp) + lin.qkv + lin.o
    total, _ = C.activations_per_token(rp)
    total_more, _ = C.activations_per_token(rp_more)
    assert total - total_more == pytest.approx(C.mamba2_mixer_per_token(rp) - attention_part)
    assert C.mamba2_mixer_per_token(rp) > attention_part  # the torch path's chunk scan keeps more than SDPA


def test_ssd_chunk_scan_by_hand():
    """`mamba2_chunk_scan` at batch 2, 100 positions, chunk 64 (two chunks, the last padded to 128), heads H = 8 of
    P = 32, state N = 16, fully trained, written out tensor by tensor from the modeling code's shapes."""
    arch = arch_from_hf_config(TINY_CONFIGS["mamba2"], "tiny-mamba2")
    z = C.mamba2_sizes(plan(arch=arch))
    assert z == (256, 8, 32, 2, 16, 4, 64, True)
    b, L, Lp, c, H, P, N, Q = 2, 100, 128, 2, 8, 32, 16, 64
    I = H * P
    f = 4  # fp32
    expected = b * (
        2 * c * L * H  # softplus and clamp inputs
        + 2 * f * L * H  # Δ in fp32 for x·Δ and for A·Δ
        + f * L * I  # x in fp32
        + f * Lp * I  # its padded copy, D's operand
        + 2 * f * Lp * I  # discretised x for the L·x and the chunk-state einsums
        + 3 * f * Lp * H * Q  # L, G, M
        + 5 * f * Lp * H * N  # C and B for G, B, B·decay, C for the output
        + 2 * f * Lp * H  # the decays in and out
        + f * Lp * I  # C·states
        + f * I * N * (3 + 2)  # chunk states: C + 1 for the inter-chunk einsum, C for the output einsum
        + f * H * 3 * 3  # chunk-to-chunk decay
    )
    _, per_seq, per_layer = C.ssd_chunk_scan_bytes(plan(arch=arch, seq_len=L, micro_batch=b), z)
    assert b * per_seq == expected
    assert per_layer == 2 * f * H + 2 * Q * Q + 2 * 3 * 3  # A and exp(A_log), the four segsum masks


# rows of the hybrids grid (benchmarks/trace_vs_estimate.py --grid hybrids) the estimate follows within ±3 % on the
# real libraries: Falcon-H1 full, full checkpointed and LoRA (its Mamba-2 mixers sized as attention: 0.46-0.66)
FALCON_ROWS = [("full", False), ("full", True), ("lora", False)]


@pytest.mark.parametrize("mode,ckpt", FALCON_ROWS, ids=["full", "full-ckpt", "lora"])
def test_falcon_h1_estimate_follows_the_real_library_trace(mode, ckpt):
    from test_new_architectures import row_plan

    assert_estimate_matches_trace(row_plan("falcon_h1", mode, ckpt))


@pytest.mark.parametrize("sizes", [{}, dict(mamba_d_state=16, mamba_dt_rank=4, mamba_d_conv=3)], ids=["tiny", "wide"])
@pytest.mark.parametrize("method", ["full", "frozen"])
def test_jamba_mixer_keeps_what_the_estimate_says(sizes, method):
    """Jamba's Mamba mixer on transformers' torch path (the recurrent `mamba_selective_scan`, RMSNorms on Δ, B, C)
    keeps, for backward, the bytes `jamba_mixer_bytes` counts."""
    config = dict(TINY_CONFIGS["jamba"], **sizes)
    arch = arch_from_hf_config(config, "tiny-jamba")
    from transformers import AutoConfig, AutoModelForCausalLM

    keys = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("jamba", **keys)).to(torch.bfloat16)
    mixer = model.model.layers[0].mamba
    for p in model.parameters():
        p.requires_grad_(method == "full")
    for batch, positions in [(2, 16), (1, 24), (3, 7)]:
        x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = saved_bytes(lambda: mixer(x), model)
        rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **(LORA if method == "frozen" else {}))
        assert C.jamba_mixer_per_token(rp) * batch * positions == pytest.approx(real, rel=1e-9), (batch, positions)


@pytest.mark.parametrize(
    "sizes", [{}, dict(linear_num_key_heads=4, linear_value_head_dim=16, linear_conv_kernel_dim=3)]
)
@pytest.mark.parametrize("method", ["full", "frozen"])
@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_text"])
def test_gated_deltanet_keeps_what_the_estimate_says(model_type, sizes, method):
    """Qwen3-Next's gated DeltaNet on transformers' torch path (`torch_chunk_gated_delta_rule`, its chunk loop, the
    gated RMSNorm) keeps, for backward, the bytes `deltanet_bytes` counts, key heads fewer than or as many as the
    value heads, positions filling, padding and fitting in one chunk; Qwen3.5's, its input projections split, the
    same."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(TINY_CONFIGS[model_type], **sizes)
    arch = arch_from_hf_config(config, f"tiny-{model_type}")
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **keys)).to(torch.bfloat16)
    mixer = model.model.layers[0].linear_attn
    for p in model.parameters():
        p.requires_grad_(method == "full")
    for batch, positions in [(2, 128), (1, 100), (3, 37)]:
        x = torch.randn(batch, positions, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = saved_bytes(lambda: mixer(x), model)
        rp = plan(arch=arch, seq_len=positions, micro_batch=batch, **(LORA if method == "frozen" else {}))
        assert C.deltanet_per_token(rp) * batch * positions == pytest.approx(real, rel=1e-9), (batch, positions)


@pytest.mark.parametrize("model_type", ["qwen3_5", "qwen3_5_moe"])
def test_a_qwen3_5_checkpoint_config_keeps_its_language_model_config(model_type):
    """A Qwen3.5 checkpoint's config.json is the vision-language composite (`Qwen3_5Config`: vision_config beside
    text_config). Its language model's config, which holds the layer pattern and the DeltaNet's sizes, is what the
    plan keeps, so that its linear-attention layers are sized as themselves and the trace builds that model."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type).to_dict()
    arch = arch_from_hf_config(config, f"Qwen/{model_type}")
    assert json.loads(arch.hf_config_json)["model_type"] == f"{model_type}_text" == arch.family
    assert "sized as attention" not in arch.approximate
    rp = plan(arch=arch, seq_len=4096, micro_batch=1)
    assert C.deltanet_per_token(rp) > 0
    kinds = dict(arch.layer_kinds)
    names = {l.name: l.count for l in shapes(arch).linears}
    assert names["in_proj_qkv"] == names["in_proj_z"] == names["out_proj"] == kinds["linear attention"]
    assert names["q"] == kinds["attention"]


def test_gated_deltanet_by_hand():
    """`deltanet_bytes` for the tiny Qwen3-Next (h 128, 2 key heads and 4 value heads of 32, conv kernel 4), fully
    trained, batch 1 of 100 positions (two chunks of 64, the last padded), written out from the modeling code."""
    arch = arch_from_hf_config(TINY_CONFIGS["qwen3_next"], "tiny-qwen3-next")
    rp = plan(arch=arch, seq_len=100, micro_batch=1)
    h, c, f, H, Hk, dk, dv, Q, L, Lp = 128, 2, 4, 4, 2, 32, 32, 64, 100, 128
    width = 2 * Hk * dk + H * dv
    per_token = c * h + c * width + c * H + 2 * f * H + 2 * f * H * (dk + 1)  # in_proj, conv, β, Δ, l2 norms
    per_token += 3 * f * H * dv + f * H + 2 * c * H * dv + c * H * dv  # gated norm, out_proj's input
    padded = f * H * (1 + dv + dk) + f * H * dk + 5 * f * H * Q + f * H * dk + 3 * f * H  # β, V, K, kβ, decays
    padded += f * H * (dv + dk) + 2 * f * H * dk + f * H * dv  # solves, decayed k and q, new values
    per_seq = c * width * (L + 3) + padded * Lp + 2 * f * H * dk * dv + f * H * 2  # conv output, chunk states
    assert C.deltanet_bytes(rp, C.deltanet_sizes(rp)) == (per_token, per_seq, 2 * f * H + Q * Q)


# rows of the hybrids grid the estimate follows within ±3 % on the real libraries: Qwen3-Next full, full
# checkpointed, LoRA and LoRA checkpointed (its gated DeltaNet layers sized as attention: 0.56-0.78); Qwen3.5 dense
# and MoE (sized as attention: 0.49-0.76; its attention's output gate and q/k norms, its Gemma-style norms' fp32
# products and, beside frozen fused experts, the shared expert's adapters and gated output uncounted: 0.90-0.95)
DELTANET_ROWS = [
    *((t, m, c) for t in ("qwen3_next", "qwen3_5_text") for m, c in (("full", False), ("full", True), ("lora", False))),
    ("qwen3_next", "lora", True),
    ("qwen3_5_text", "lora", True),
    ("qwen3_5_text", "qlora", True),
    ("qwen3_5_moe_text", "full", False),
    ("qwen3_5_moe_text", "full", True),
    ("qwen3_5_moe_text", "lora", False),
    ("qwen3_5_moe_text", "qlora", False),
    # checkpointed, its frozen experts recomputed to their un-permute (0.955 and 0.958 before it was counted)
    ("qwen3_5_moe_text", "lora", True),
    ("qwen3_5_moe_text", "qlora", True),
]


@pytest.mark.parametrize(
    "model_type,mode,ckpt", DELTANET_ROWS, ids=[f"{t}-{m}{'-ckpt' if c else ''}" for t, m, c in DELTANET_ROWS]
)
def test_gated_deltanet_models_follow_the_real_library_trace(model_type, mode, ckpt):
    from test_new_architectures import row_plan

    if mode != "full":
        need("peft")
    if mode == "qlora":
        need("bitsandbytes")
    assert_estimate_matches_trace(row_plan(model_type, mode, ckpt))


def test_granite_hybrid_lora_trains_the_adapters_peft_makes():
    """LoRA on q, k, v, o, gate, up, down reaches Granite-4's attention q/k/v/o_proj and its shared MLP's fused
    input_linear (gate|up: one adapter) and output_linear; none of the Mamba-2 mixers' linears. The estimate counts
    the adapters peft creates."""
    from test_new_architectures import row_plan

    rp = row_plan("granitemoehybrid", "lora", False, seq_len=64, micro_batch=1)
    traced = trace_step(rp)
    assert C.params(rp).adapter_params == traced["params_trainable"]


# rows of the hybrids grid the estimate follows within ±3 % on the real libraries: Bamba and Granite-4 hybrids,
# full and LoRA, with and without checkpointing (their Mamba-2 mixers sized as attention, the Mamba layers' weights
# counted for the attention ones: 0.42-0.64, and 1.14 for Granite's LoRA), Granite's LoRA checkpointed excepted
# (0.94)
BAMBA_ROWS = [
    ("bamba", "full", False),
    ("bamba", "full", True),
    ("bamba", "lora", False),
    ("bamba", "lora", True),
    ("granitemoehybrid", "full", False),
    ("granitemoehybrid", "full", True),
    ("granitemoehybrid", "lora", False),
]


@pytest.mark.parametrize(
    "model_type,mode,ckpt", BAMBA_ROWS, ids=[f"{t}-{m}{'-ckpt' if c else ''}" for t, m, c in BAMBA_ROWS]
)
def test_mamba2_hybrid_estimate_follows_the_real_library_trace(model_type, mode, ckpt):
    from test_new_architectures import row_plan

    assert_estimate_matches_trace(row_plan(model_type, mode, ckpt))
