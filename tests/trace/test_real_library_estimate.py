"""The estimate against the real-library trace (transformers/peft under fake tensors, `vramlens.trace.hf`) where
the estimate follows how a family's modelling code or autocast allocates: AMP's per-linear casts, norms that apply
their weight in fp32, autocast's weight cache alive through the loss. Shapes are small (two blocks) but
activation-heavy, so each effect is several percent of the peak; the estimate without it missed these rows by 4–9 %.
Skips with a reason where torch or transformers are not installed (CI installs the trace extra)."""

from __future__ import annotations

import pytest
from trace_plans import ARCHS, LORA, TINY_LLAMA, need, plan
from vramlens.estimate import estimate
from vramlens.knowledge.schema import ModelArch

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")

from vramlens.trace import engine  # noqa: E402
from vramlens.trace.config import step_config  # noqa: E402

MID = dict(hidden=512, layers=2, heads=8, intermediate=1024, vocab=4000)
AMP = dict(amp=True, weight_dtype="fp32")


def mid(arch: ModelArch, kv_heads: int, **changes) -> ModelArch:
    return arch.model_copy(update=dict(id=arch.id + "-mid", **MID, kv_heads=kv_heads, **changes))


def traced(rp) -> dict:
    return engine.run(step_config(rp), backend="transformers")


def ratio(**changes) -> float:
    rp = plan(seq_len=1024, attn_mask=False, repeat_kv=False, **changes)
    return estimate(rp, limits=False).allocated_bytes / traced(rp)["peak_bytes"]


def test_amp_keeps_a_16bit_cast_of_the_fp32_stream_for_each_linear():
    """Under autocast q, k and v each cast the norm's fp32 output (gate and up likewise) and each matmul keeps
    its own copy; a trained norm keeps its fp32 normalised value."""
    assert ratio(arch=mid(TINY_LLAMA, 4), **AMP) == pytest.approx(1.0, abs=0.015)


def test_amp_qk_norms_read_the_16bit_projections():
    """Qwen3's q/k norms normalise the 16-bit projections: their normalised value stays 16-bit under AMP."""
    assert ratio(arch=mid(ARCHS["qwen3"], 4, head_dim=64), **AMP) == pytest.approx(1.0, abs=0.015)


OLMO2 = ModelArch(id="tiny-olmo2", family="olmo2", hidden=128, layers=2, heads=4, intermediate=256, vocab=500)
GEMMA3 = ModelArch(
    id="tiny-gemma3",
    family="gemma3_text",
    mlp="geglu",
    hidden=128,
    layers=2,
    heads=4,
    kv_heads=1,
    head_dim=64,
    intermediate=256,
    vocab=500,
    tied_embeddings=True,
)


@pytest.mark.parametrize(
    "arch,changes",
    [
        (mid(ARCHS["gemma2"], 4), dict(attn_impl="eager")),  # transformers 5: Gemma-2 has no SDPA path
        (mid(GEMMA3, 2, head_dim=64), {}),
        (mid(OLMO2, 8), {}),
    ],
    ids=["gemma2", "gemma3", "olmo2"],
)
def test_norms_that_apply_their_weight_in_fp32_keep_the_fp32_normalised_value(arch, changes):
    """Gemma's `output * (1.0 + self.weight.float())` and OLMo-2's `(self.weight * hidden_states)` before the cast:
    a full fine-tune in bf16 keeps 4 bytes per element of each norm's normalised value, not 2."""
    assert ratio(arch=arch, **changes) == pytest.approx(1.0, abs=0.015)


WIDE = TINY_LLAMA.model_copy(
    update=dict(id="tiny-llama-wide", hidden=1024, heads=8, kv_heads=2, intermediate=4096, vocab=12000)
)


def test_amp_with_checkpointing_holds_the_weight_copies_through_the_loss():
    """Autocast caches each trainable weight's 16-bit copy until the model's forward returns, and the loss runs
    inside it: with checkpointing the loss's forward holds every copy, though no block saves them for backward."""
    rp = plan(arch=WIDE, seq_len=512, attn_mask=False, repeat_kv=False, grad_checkpointing=True, **AMP)
    est = estimate(rp, limits=False)
    raw = traced(rp)
    loss_peak = next(t["peak_bytes"] for t in raw["timeline"] if t["phase"] == "loss")
    loss_peak += raw["persistent"].get("optimizer", 0)  # one traced step: the state the step creates
    assert est.phases["loss-forward"] == pytest.approx(loss_peak, rel=0.015)
    assert est.phases["loss-forward"] > est.phases["forward-backward"]


def test_frozen_weights_are_not_cached_by_autocast():
    """Under LoRA the base weights do not require grad: autocast casts them afresh at each use and caches none."""
    rp = plan(arch=WIDE, seq_len=512, attn_mask=False, repeat_kv=False, grad_checkpointing=True, **AMP, **LORA)
    est = estimate(rp, limits=False)
    assert "loss-forward" not in est.phases
    assert est.allocated_bytes / traced(rp)["peak_bytes"] == pytest.approx(1.0, abs=0.015)


QLORA = dict(LORA, peft="qlora", quant_bits=4, quant_double=True)
# Phi-3's tokenizer pads with id 32000: the vocabulary must hold it
PHI3 = ModelArch(id="mid-phi3", family="phi3", hidden=1024, layers=6, heads=8, intermediate=2048, vocab=32064)


def test_qlora_fused_qkv_hands_sdpa_16bit_copies():
    """A k-bit Phi-3's qkv_proj returns fp32 (bitsandbytes returns the input's dtype): autocast gives SDPA 16-bit
    copies of q, k and v, so no view of the fused output is kept (in 16-bit it is, through V)."""
    need("bitsandbytes")
    assert ratio(arch=PHI3, **QLORA) == pytest.approx(1.0, abs=0.015)


# a small vocabulary: the checkpointed block's backward, not the loss, is the peak
NARROW = TINY_LLAMA.model_copy(
    update=dict(id="tiny-llama-narrow", hidden=512, layers=4, heads=8, kv_heads=2, intermediate=1792, vocab=1000)
)


def recompute_ratio(**changes) -> float:
    rp = plan(arch=NARROW, seq_len=1024, attn_mask=False, repeat_kv=False, grad_checkpointing=True, **changes)
    est = estimate(rp, limits=False)
    raw = traced(rp)
    assert est.phase == "recompute" and raw["peak_at"] == "backward"
    return est.allocated_bytes / raw["peak_bytes"]


@pytest.mark.parametrize(
    "changes",
    [
        {},  # full fine-tune: the product the down projection kept is freed
        dict(LORA, adapter_fp32=False),  # lora_A keeps the product itself
        LORA,  # fp32 adapter: peaks inside the down projection's backward
    ],
    ids=["full", "lora-16bit", "lora-fp32"],
)
def test_checkpointed_block_backward_peak(changes):
    """The last block's backward holds every checkpoint and the block's recomputed activations; past the down
    projection's backward, what it kept of its input is gone (the estimate that kept it was 5 % high)."""
    assert recompute_ratio(**changes) == pytest.approx(1.0, abs=0.03)


def test_checkpointed_qlora_backward_holds_no_head_copy_and_few_adapter_gradients():
    """By the first block's backward the LM head's backward has freed its 16-bit weight copy, and only that
    block's adapters have gradients yet."""
    need("bitsandbytes")
    assert recompute_ratio(**QLORA) == pytest.approx(1.0, abs=0.015)


def test_checkpointed_dora_recomputes_the_weight_norm_beside_the_identity():
    """DoRA's lora_B(lora_A(eye)) keeps the in × in identity alive (lora_A saved it) while the weight norm's
    weight-sized temporaries are made."""
    assert recompute_ratio(**dict(LORA, peft="dora")) == pytest.approx(1.0, abs=0.015)


def test_dora_keeps_what_the_installed_peft_keeps():
    """What DoRA adds to LoRA, estimated for the installed peft and traced with it: from 0.14 the base layer's
    output is reused; peft 0.13 (traced in an environment with transformers 4.48.1 / peft 0.13.2) recomputes x @ W
    in fp32 and keeps an fp32 cast of each adapted weight — 1.5 × what 0.21.2 adds at this shape."""
    from importlib.metadata import version

    arch = mid(TINY_LLAMA, 2)
    pins = (("peft", version("peft"), "installed"), ("transformers", version("transformers"), "installed"))
    est, real = {}, {}
    for peft in ("lora", "dora"):
        rp = plan(arch=arch, seq_len=1024, attn_mask=False, repeat_kv=False, versions=pins, **dict(LORA, peft=peft))
        est[peft], real[peft] = estimate(rp, limits=False).allocated_bytes, traced(rp)["peak_bytes"]
    assert (est["dora"] - est["lora"]) / (real["dora"] - real["lora"]) == pytest.approx(1.0, abs=0.02)


# StableLM-alpha-3B's block (GPT-NeoX), two layers
NEOX = ModelArch(
    id="mid-neox",
    family="gpt_neox",
    mlp="gelu",
    norm="layernorm",
    hidden=4096,
    layers=2,
    heads=32,
    intermediate=16384,
    vocab=50688,
    attn_bias=True,
    mlp_bias=True,
)


def test_gpt_neox_qkv_is_one_linear_with_one_adapter():
    """GPT-NeoX computes q|k|v with one `query_key_value` linear: LoRA on q, k and v is one adapter with one fp32
    copy of its input, not three (counting three put this two-layer model 7 % high, the real StableLM-alpha-3B rows
    8–11 %)."""
    need("peft")
    assert ratio(arch=NEOX, **LORA) == pytest.approx(1.0, abs=0.035)


def test_trl_puts_the_embeddings_of_a_kbit_model_back_in_16bit():
    """TRL's SFTTrainer before 0.26 upcasts a k-bit model's other weights to fp32 (peft's
    prepare_model_for_kbit_training) and then, with bf16, casts the embeddings and LM head back: the real step
    holds 2 bytes per embedding weight, not 4, and the estimate follows it."""
    need("bitsandbytes")
    arch = TINY_LLAMA.model_copy(update=dict(MID, id="mid-llama-vocab", kv_heads=4, vocab=32000))
    base = dict(arch=arch, seq_len=256, attn_mask=False, repeat_kv=False, **QLORA)
    upcast, cast_back = plan(**base), plan(**base, kbit_embeddings_16bit=True)
    traced_upcast, traced_back = traced(upcast)["peak_bytes"], traced(cast_back)["peak_bytes"]
    embedding_bytes = 2 * 32000 * 512 * 2  # embedding and LM head, 2 bytes saved per weight
    assert traced_upcast - traced_back >= 0.9 * embedding_bytes
    assert estimate(cast_back, limits=False).allocated_bytes / traced_back == pytest.approx(1.0, abs=0.015)


# DeBERTa-v3's layout (relative attention over 2 × 256 buckets, shared keys, c2p|p2c) in six narrow blocks, at its
# 512 positions: the attention's s × s and s × 512 tensors are most of the peak
DEBERTA = ModelArch(
    id="mid-deberta-v3",
    family="deberta-v2",
    block="encoder",
    mlp="gelu",
    norm="layernorm",
    hidden=256,
    layers=6,
    heads=4,
    intermediate=1024,
    vocab=2000,
    tied_embeddings=True,
    attn_bias=True,
    mlp_bias=True,
    max_position=512,
)
BERT = ModelArch(
    id="mid-bert",
    family="bert",
    block="encoder",
    mlp="gelu",
    norm="layernorm",
    hidden=512,
    layers=4,
    heads=8,
    intermediate=2048,
    vocab=30522,
    tied_embeddings=True,
    attn_bias=True,
    mlp_bias=True,
    max_position=512,
)


def encoder_ratio(arch: ModelArch, **changes) -> tuple[float, str]:
    from vramlens.knowledge import versions

    attn = versions.attention_as_run(arch.family, "sdpa", None)
    rp = plan(
        arch=arch,
        seq_len=512,
        micro_batch=4,
        attn_mask=False,
        repeat_kv=False,
        scalar_head=True,
        attn_impl=attn,
        **changes,
    )
    est = estimate(rp, limits=False)
    return est.allocated_bytes / traced(rp)["peak_bytes"], est.phase


@pytest.mark.parametrize(
    "changes", [{}, AMP, dict(LORA, lora_targets=("q", "k", "v", "o", "fc1", "fc2"))], ids=["full", "amp", "lora"]
)
def test_deberta_disentangled_attention(changes):
    """DeBERTa-v2's attention keeps the scaled key beside the key, the c2p/p2c scores `torch.gather` keeps as its
    source, the relative-position keys and queries and the inverted mask, and its forward peaks in the last block's
    attention with every layer's output held (as a BERT block with SDPA the estimate was 0.42–0.59 of the trace).
    A few MiB at the forward's peak, the same for any depth, are not modelled: 1–2 % of this six-block model, under
    0.5 % of deberta-v3-base's rows."""
    if changes.get("peft"):
        need("peft")
    r, phase = encoder_ratio(DEBERTA, **changes)
    assert phase == "forward"
    assert r == pytest.approx(1.0, abs=0.025)


@pytest.mark.parametrize("changes", [{}, AMP], ids=["bf16", "amp"])
def test_checkpointed_encoder_has_no_tied_head_gradient(changes):
    """An encoder's classification head ties nothing to the embeddings and holds no vocabulary-sized gradient: the
    checkpointed backward peaks at the first block (every gradient, one checkpoint), with no out-of-place sum of two
    embedding gradients after it (which put bert-large 7 % high)."""
    r, phase = encoder_ratio(BERT, grad_checkpointing=True, **changes)
    assert phase != "end-of-backward"
    assert r == pytest.approx(1.0, abs=0.02)


# T5 v1.1 / Flan-T5's block (gated-gelu, untied head), two encoder and two decoder layers; a vocabulary large enough
# that the loss is the peak, as in the published models
T5_MID = ModelArch(
    id="mid-t5",
    family="t5",
    block="encoder-decoder",
    mlp="geglu",
    hidden=512,
    layers=2,
    encoder_layers=2,
    heads=8,
    head_dim=64,
    intermediate=1024,
    vocab=16000,
)


@pytest.mark.parametrize(
    "changes",
    [
        {},  # 16-bit: T5LayerNorm keeps its 16-bit input, gelu_new its pieces
        AMP,  # CUDA autocast: gelu_new's pow and the log-softmax in fp32
        LORA,
        dict(LORA, grad_checkpointing=True),
        QLORA,  # `wo` stays unquantized (fp32 after the k-bit upcast)
        dict(attn_mask=True),  # a padded batch: the encoder's and cross-attentions' biases per row
    ],
    ids=["full", "amp", "lora", "lora-ckpt", "qlora", "padded"],
)
def test_t5_encoder_decoder_follows_the_real_step(changes):
    """T5ForConditionalGeneration on the real modelling code: the relative position bias SDPA keeps per
    self-attention, dropout masks after every sublayer and inside the MLP, the encoder output the cross-attentions
    read, and T5's own loss on the LM head's output (3 × 2 bytes per logit in 16-bit, not ForCausalLMLoss's 14)."""
    need("peft")
    if changes.get("quant_bits"):
        need("bitsandbytes")
    rp = plan(**{**dict(arch=T5_MID, seq_len=512, micro_batch=2, attn_mask=False, repeat_kv=False), **changes})
    assert estimate(rp, limits=False).allocated_bytes / traced(rp)["peak_bytes"] == pytest.approx(1.0, abs=0.03)


# peft's IA3 and VeRA (peft 0.21.2 tuners/ia3/layer.py, tuners/vera/layer.py): what each adapted linear keeps
IA3 = dict(peft="ia3", lora_targets=("k", "v", "down"), feedforward_targets=("down",))
VERA = dict(peft="vera", lora_r=64, lora_targets=("q", "v"))


@pytest.mark.parametrize(
    "changes",
    [IA3, dict(IA3, adapter_fp32=False), VERA, dict(VERA, adapter_fp32=False)],
    ids=["ia3", "ia3-16bit", "vera", "vera-16bit"],
)
def test_vector_adapters_keep_what_their_products_need(changes):
    """IA3 keeps each scaled output (k, v) and the down projection's input cast to the vector's dtype; VeRA keeps
    the r-wide x·Aᵀ and the out-wide B projection per adapted linear; the frozen base linears keep nothing (the LoRA
    formula, which keeps each adapter's input, put these 4–6 % high at full size). Twelve layers: the first block,
    whose input needs no gradient under PEFT, keeps less than the others (the same for LoRA, not modelled)."""
    need("peft")
    deep = mid(TINY_LLAMA, 4).model_copy(update=dict(layers=12))
    assert ratio(arch=deep, **changes) == pytest.approx(1.0, abs=0.015)


def test_vector_adapter_parameters_and_vera_projections():
    """IA3 trains one vector per target (input-wide for the feedforward module); VeRA two (r and out wide) and
    holds the shared r × in and out × r projections frozen."""
    need("peft")
    arch = mid(TINY_LLAMA, 4)
    for changes in (IA3, VERA):
        rp = plan(arch=arch, seq_len=256, attn_mask=False, repeat_kv=False, **changes)
        raw = traced(rp)
        assert estimate(rp, limits=False).params_trainable == raw["params_trainable"]


# TRL's fused LM head (loss_type "nll"): no logits, one tile, fp32 gradient accumulators
NLL = dict(loss_impl="chunked", framework="trl")


@pytest.mark.parametrize(
    "changes", [NLL, dict(NLL, **LORA), dict(NLL, grad_checkpointing=True)], ids=["full", "lora", "full-ckpt"]
)
def test_trl_fused_head_holds_a_tile_and_fp32_gradients(changes):
    """trl 1.16 ChunkedLogProbFunction: the backward holds one [tokens × 32768] tile, the saved hidden states, the
    fp32 hidden-state gradient and, when the head trains, the fp32 head-weight gradient with its cast."""
    need("trl")
    arch = TINY_LLAMA.model_copy(update=dict(id="tiny-llama-vocab", vocab=40000, tied_embeddings=True))
    assert ratio(arch=arch, **changes) == pytest.approx(1.0, abs=0.02)


def test_pure_fp32_full_fine_tune():
    """fp32 weights and activations with no autocast: every saved tensor 4 bytes an element. With no mask the grouped
    K/V reach SDPA as they are, a call CUDA runs on the math kernel in fp32 (`components.attention.fp32_grouped_sdpa`)
    while the CPU's flash kernel takes it: the step is traced on the math kernel, as CUDA runs it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        got = ratio(arch=mid(TINY_LLAMA, 4), weight_dtype="fp32", compute_dtype="fp32")
    assert got == pytest.approx(1.0, abs=0.015)


# falcon-7b's block (multi-query attention, one LayerNorm for the parallel attention + MLP) at a few layers
FALCON_7B = ModelArch(
    id="falcon-7b-shallow",
    family="falcon",
    mlp="gelu",
    norm="layernorm",
    hidden=4544,
    layers=2,
    heads=71,
    kv_heads=1,
    intermediate=18176,
    vocab=65024,
    tied_embeddings=True,
)
TRANSFORMERS_5 = (("transformers", "5.24.0", "the test's libraries"),)


def falcon(layers: int, **changes):
    arch = FALCON_7B.model_copy(update=dict(layers=layers))
    return plan(arch=arch, seq_len=1024, attn_mask=False, versions=TRANSFORMERS_5, **{**LORA, "lora_r": 16, **changes})


def test_falcon_qlora_on_transformers_5_is_lora_under_autocast_over_fp32_weights():
    """transformers 5 leaves Falcon's `FalconLinear(nn.Linear)` unquantized and peft's k-bit preparation makes its
    weights fp32, but the Trainer's bf16 autocast still runs the step: each block keeps 16-bit casts of its frozen
    weights and of its linears' inputs, and the fp32 residual stream (LN inputs, SDPA's fp32 q/K/V). What each
    added block costs follows the trace (the estimate as a pure fp32 step missed 14 % of it at these shapes), and
    so does the whole step."""
    qlora = dict(peft="qlora", quant_bits=4, quant_double=True)
    est = {n: estimate(falcon(n, **qlora), limits=False).allocated_bytes for n in (2, 4)}
    real = {n: traced(falcon(n, **qlora))["peak_bytes"] for n in (2, 4)}
    assert (est[4] - est[2]) / (real[4] - real[2]) == pytest.approx(1.0, abs=0.01)
    assert est[4] / real[4] == pytest.approx(1.0, abs=0.03)


def test_falcon_lora_math_attention_output_is_not_kept_for_a_frozen_o():
    """SDPA's math kernel keeps q, K, V and the probabilities, not its output; with Falcon's dense projection frozen
    (its adapter keeps its own fp32 cast), nothing keeps the 16-bit output: per block the estimate follows the trace
    in bf16 LoRA too."""
    est = {n: estimate(falcon(n), limits=False).allocated_bytes for n in (2, 4)}
    real = {n: traced(falcon(n))["peak_bytes"] for n in (2, 4)}
    assert (est[4] - est[2]) / (real[4] - real[2]) == pytest.approx(1.0, abs=0.01)


def test_lora_under_amp_first_block_keeps_no_weight_copies():
    """Under autocast over fp32 weights with frozen embeddings (no checkpointing, so no `enable_input_require_grads`),
    the first block's input needs no gradient: its norm keeps no fp32 input and its frozen q/k/v keep no 16-bit
    weight casts (the estimate counting them missed by 1.4 % at this size)."""
    arch = TINY_LLAMA.model_copy(
        update=dict(id="llama-2048", hidden=2048, heads=16, kv_heads=4, intermediate=8192, vocab=32000)
    )
    assert ratio(arch=arch, **AMP, **LORA) == pytest.approx(1.0, abs=0.007)


# GLM and GLM-4 (THUDM/glm-4-9b-chat-hf's classes): separate q/k/v/o with biases, Phi-3's fused gate_up_proj; GLM-4
# adds a norm after the attention and after the MLP. The vocabulary is GLM-4's (its config class pads at 151329).
GLM_SIZES = dict(hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32, intermediate=1024, vocab=151552)


@pytest.mark.parametrize("family", ["glm", "glm4"])
@pytest.mark.parametrize("changes", [{}, LORA], ids=["full", "lora"])
def test_glm_fused_gate_up_mlp_is_estimated_as_transformers_runs_it(family, changes):
    arch = ModelArch(id=f"tiny-{family}", family=family, attn_bias=True, tied_embeddings=False, **GLM_SIZES)
    assert ratio(arch=arch, **changes) == pytest.approx(1.0, abs=0.01)
