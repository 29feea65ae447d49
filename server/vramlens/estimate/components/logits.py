"""The LM head and the loss: logits, log-softmax and their gradients under each loss implementation (standard,
chunked, fused, vocabulary-parallel)."""

from __future__ import annotations

from vramlens.estimate.components.common import DTYPE_BYTES, compiled_block, fp32_residual
from vramlens.estimate.components.t5 import hf_t5, t5_loss_per_token
from vramlens.resolved import ResolvedPlan

# Families whose causal LM soft-caps its logits by default (`final_logit_softcapping`: transformers 5.24
# models/gemma2/configuration_gemma2.py 30.0, models/gemma3n/configuration_gemma3n.py `Gemma3nTextConfig` 30.0;
# `Gemma3nForCausalLM.forward` divides, takes tanh and multiplies as Gemma-2 does)
LOGIT_SOFTCAP_FAMILIES = {"gemma2", "gemma3n_text"}


def swift_dpo_rows(rp: ResolvedPlan) -> int:
    """Rows of ms-swift's DPO log-prob loop, or 0 where it does not run. ms-swift scores DPO outside the model (v4.0.0
    swift/rlhf_trainers/dpo_trainer.py `concatenated_forward` → rlhf_mixin.py `get_per_token_logps`; v3.5.0
    swift/trainers/rlhf_trainer/dpo_trainer.py): the model returns the 16-bit logits (no labels, no upcast), and TRL's
    `selective_log_softmax` (trl 0.15–0.28 trainer/utils.py, the pins of those releases: `trl>=0.15,<0.29`) takes
    `log_softmax` one row (sequence) at a time for 16-bit logits; its `nll_loss` is the chosen rows' log-probs (v3.6
    on; v3.5 runs a separate cross-entropy on the chosen half). Chosen and rejected are 2 × micro-batch rows, or one
    packed row under `padding_free` / `packing`. Sequence parallelism takes another path (`sequence_parallel_size`)."""
    if rp.framework != "ms-swift" or rp.objective != "dpo" or rp.scalar_head or rp.arch.block == "encoder":
        return 0
    if DTYPE_BYTES[rp.compute_dtype] == 4 or rp.loss_impl in ("fused", "chunked") or rp.context_parallel > 1:
        return 0
    return 1 if rp.packing else max(rp.micro_batch * rp.sequences_per_example, 1)


def swift_dpo_per_logit(rp: ResolvedPlan, phase: str) -> float:
    """Bytes per logit of ms-swift's DPO head (`swift_dpo_rows`), c the compute dtype's size, r the rows — traced with
    LiveBytes over that code on 16-bit CPU tensors: "held" after the policy's forward, every row's 16-bit log-softmax
    output (c; the logits themselves are freed when `concatenated_forward` returns, `mean(-1)` and `gather` save
    none); "forward" the end of the policy's forward (2c); "reference" a forward under no_grad (the reference's, or
    the evaluation's), its logits and one row's log-softmax (c + c/r);
    "backward" the peak of the policy's backward: the saved log-softmax and the logits' gradient, and for a single
    packed row its gather's gradient beside them (2c, + c for one row)."""
    rows = swift_dpo_rows(rp)
    c = float(DTYPE_BYTES[rp.compute_dtype])
    if phase == "held":
        return c
    if phase == "forward":  # the end of the policy's forward: its logits beside every row's log-softmax
        return 2 * c
    if phase == "reference":
        return c + c / rows
    return 2 * c + (c if rows == 1 else 0.0)


# ms-swift's GKD loss over the full logits (`ResolvedPlan.distill_loss`), traced with LiveBytes over its code on
# 16-bit CPU tensors (v4.0.0 swift/rlhf_trainers/gkd_trainer.py `compute_loss` + `generalized_jsd_loss`, the 3.12
# form; v4.6.0.dev0 swift/rlhf_trainers/gkd_loss.py `gkd_loss` + `jsd_loss`, the 4.3 form), 2,048 and 1,024 scored
# tokens: at the peak of the loss's forward it holds (a) bytes per logit of every scored token and (b) bytes per
# logit of one chunk (`SWIFT_GKD_CHUNK` tokens). (a): the student's and the teacher's 16-bit logits, each masked
# to the scored tokens and divided by the temperature (12), and what every chunk's autograd graph keeps for
# backward until the loss's backward runs — the student's log-softmax and, by beta, the stacked mixture and its
# logsumexp, exp(target) and (target − input) of each `kl_div` (JSD: 14; forward KL, beta 0: 4; reverse KL, beta
# 1: 6). (b): the chunk's unsaved temporaries. `distill_sft`: the model's own cross-entropy on the student's
# logits (transformers' `ForCausalLMLoss`: the fp32 upcast's log-softmax saved, 4).
SWIFT_GKD_CHUNK = 512  # `chunk_size=512`
SWIFT_GKD_PER_LOGIT = {
    # (form, beta kind): (a, b)
    ("swift-jsd-3.12", "jsd"): (26.0, 12.0),
    ("swift-jsd-3.12", "forward-kl"): (16.0, 6.0),
    ("swift-jsd-3.12", "reverse-kl"): (18.0, 4.0),
    ("swift-jsd-4.3", "jsd"): (26.0, 4.0),
    ("swift-jsd-4.3", "forward-kl"): (16.0, 6.0),
    ("swift-jsd-4.3", "reverse-kl"): (18.0, 4.0),
}
SWIFT_GKD_SFT_PER_LOGIT = 4.0
# of (a), the teacher's: its 16-bit logits, their masked selection and their temperature-scaled copy
SWIFT_GKD_TEACHER_PER_LOGIT = 6.0


def swift_gkd_bytes(rp: ResolvedPlan, tokens: int) -> tuple[int, int] | None:
    """(the student's head and the loss, the teacher's logits) in bytes at the peak of ms-swift's GKD loss for
    `tokens` scored positions (`SWIFT_GKD_PER_LOGIT`), or None where that loss does not run (another framework's,
    Liger's fused JSD, a top-k or API teacher)."""
    if not rp.distill_loss or rp.teacher is None or rp.loss_impl != "standard" or rp.scalar_head:
        return None
    kind = "forward-kl" if rp.distill_beta == 0 else "reverse-kl" if rp.distill_beta == 1 else "jsd"
    per, chunk = SWIFT_GKD_PER_LOGIT[(rp.distill_loss, kind)]
    per += SWIFT_GKD_SFT_PER_LOGIT if rp.distill_sft else 0.0
    vocab = max(rp.arch.vocab, rp.teacher.vocab)  # the smaller side is padded to the larger (`_align_vocab`)
    teacher = int(tokens * vocab * SWIFT_GKD_TEACHER_PER_LOGIT)
    total = int(tokens * vocab * per + min(tokens, SWIFT_GKD_CHUNK) * vocab * chunk)
    return total - teacher, teacher


def logits_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token held by the LM head and the loss at the start of backward.

    Standard HF loss (transformers ≥ 4.46 upcasts inside the loss): fp32 log-softmax output plus the
    NLL and log-softmax gradients = 12 bytes per logit, +2 if the 16-bit logits stay referenced
    (`ForCausalLMLoss`, src/transformers/loss/loss_utils.py; traced, docs/memory-model.md).
    Chunked CE (torchtune, TRL chunked_nll): 16-bit logits + one fp32 chunk ≈ 4; litgpt (128-token chunks, the
    chunk list held through backward, Fabric casting it to fp32): fp32 logits + their log-softmax = 8. Fused linear-CE
    (Liger, Cut-Cross-Entropy): no full logits ≈ 0 (Liger's gradient buffers: `liger_head_bytes`).
    """
    V = rp.arch.vocab
    if rp.arch.block == "encoder":
        return 0.0
    if rp.loss_impl == "fused":
        return 0.0
    if rp.loss_impl == "xentropy":
        return xentropy_per_token(rp, backward=True)
    if swift_dpo_rows(rp):
        return swift_dpo_per_logit(rp, "backward") * V
    if eager_chunked_ce(rp):
        return chunked_ce_per_logit(rp) * V
    if rp.loss_impl == "chunked":
        # the held logits and their log-softmax (or gradients): 2 × 2 bytes, 2 × 4 when the loop gets fp32 logits;
        # + Gemma-2's soft-capping, applied per chunk in 16-bit: tanh keeps its output
        held = 8.0 if rp.logits_fp32 else 4.0
        return (held + (2.0 if rp.arch.family in LOGIT_SOFTCAP_FAMILIES else 0.0)) * V
    if hf_t5(rp) and rp.loss_impl == "standard" and not compiled_block(rp):
        return t5_loss_per_token(rp, backward=True)
    if compiled_block(rp) and rp.compile_loss:
        # the loss compiled with the model (transformers computes it inside the model's forward): the partitioner
        # keeps the fp32 log-softmax (4 bytes per logit, tests/trace/test_compile_partitioner.py) and backward writes
        # the logits' gradient in one fused kernel (2, or 4 in fp32), with no fp32 gradients in between
        if rp.compute_dtype == "fp32":
            return 8.0 * V
        return (6.0 + (2.0 if rp.keep_logits else 0.0)) * V
    if sp_loss_16bit(rp):
        # ms-swift's sequence-parallel loss (v3.5.0 swift/trainers/sequence_parallel/ulysses.py
        # `loss_scale_sp_func`, v4.0.0 swift/trainers/utils.py `per_token_loss_func_sp`): `CrossEntropyLoss` on the
        # model's 16-bit logits, no upcast. Backward holds the log-softmax output, the NLL gradient and the logits'
        # gradient, c bytes each. With `CELOSS_PARALLEL_SIZE` its `ChunkedCrossEntropyLoss` saves only the logits and
        # writes each chunk's gradient over them (`logits[l_start:l_end] = grad_chunk`): c per logit, the chunk's
        # own tensors counted in `head_loss_bytes`.
        c = DTYPE_BYTES[rp.compute_dtype]
        return (float(c) if rp.loss_chunk_tokens else 3.0 * c + (c if rp.keep_logits else 0.0)) * V
    per = 12.0 + (2.0 if rp.keep_logits else 0.0)
    if rp.compute_dtype == "fp32":
        per = 12.0
    if rp.loss_shifted_copy:
        # transformers < 4.49 ForCausalLMLoss: while the loss runs, the 16-bit logits, their fp32 upcast, the shifted
        # contiguous fp32 copy and the fp32 log-softmax are all alive (loss/loss_utils.py of 4.48.3)
        per = max(per, (4.0 if rp.compute_dtype == "fp32" else 6.0) + 8.0)
    if rp.arch.family in LOGIT_SOFTCAP_FAMILIES:
        per += 2.0  # final_logit_softcapping: tanh(logits / cap) keeps its 16-bit output
    return per * V


def xentropy_per_token(rp: ResolvedPlan, backward: bool) -> float:
    """Bytes per token of flash-attn's softmax cross-entropy kernel (`loss_impl` "xentropy"; flash-attn v1.0.9
    flash_attn/losses/cross_entropy.py `SoftmaxCrossEntropyLossFn`, the `xentropy_cuda_lib` extension that
    llm-foundry 061f2c7 setup.py installs for `loss_fn: fused_crossentropy`, modeling_mpt.py's default). The forward
    reads the logits in their own dtype (no upcast) and returns fp32 losses and log-sum-exp per row;
    `ctx.save_for_backward(logits, lse, labels)` keeps the logits. Its backward, `inplace_backward=False` by
    default, writes the logits' gradient into a new tensor of their dtype beside them."""
    c = DTYPE_BYTES[rp.compute_dtype]
    return (2.0 if backward else 1.0) * c * rp.arch.vocab + 8.0


def sp_loss_16bit(rp: ResolvedPlan) -> bool:
    """ms-swift's own SFT loss under sequence parallelism (`ResolvedPlan.loss_16bit`): its Seq2SeqTrainer pops the
    labels when `sequence_parallel_size > 1` and computes the loss itself (v4.0.0 swift/trainers/seq2seq_trainer.py
    `compute_loss`); its preference and RL trainers compute their own."""
    return rp.loss_16bit and rp.objective in ("sft", "pretrain") and not rp.scalar_head and rp.arch.block != "encoder"


def loss_parallel_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token a vocabulary-parallel cross-entropy holds at its peak on one tensor-parallel rank
    (`loss_parallel`: torchtitan's `F.cross_entropy(pred.float(), …)` under `loss_parallel()` over logits sharded
    along the vocabulary).
    Run eagerly, DTensor's own kernels compute it (torch 2.13 torch/distributed/tensor/parallel/loss.py): `_log_softmax`
    keeps its fp32 output, and the backward `_nll_loss_and_log_softmax_backward` computes
    `(zeros_like(x) + exp(x)) * grad_output` beside it, 4 fp32 logit-sized tensors at once: 16 bytes per logit of the
    rank's shard. A compiled loss (`compile_loss`) is counted as `logits_per_token`'s, over the shard."""
    tp = max(rp.tensor_parallel, 1)
    if compiled_block(rp) and rp.compile_loss:
        return logits_per_token(rp) / tp
    return 16.0 * rp.arch.vocab / tp


# torchtune 0.6.1 modules/loss/ce_chunked_output_loss.py `CEWithChunkedOutputLoss(num_output_chunks=8)`, the value
# every torchtune config keeps
TORCHTUNE_CE_CHUNKS = 8


def eager_chunked_ce(rp: ResolvedPlan) -> bool:
    """torchtune's CEWithChunkedOutputLoss run eagerly: its recipes compile `compute_cross_entropy` only with
    `compile: True` (torchtune 0.6.1 training/_compile.py `compile_loss`)."""
    return rp.loss_impl == "chunked" and rp.framework == "torchtune" and not rp.compile


def chunked_ce_per_logit(rp: ResolvedPlan) -> float:
    """Bytes per logit torchtune's chunked loss holds at its peak (traced on torchtune 0.6.1 under fake tensors,
    benchmarks/results/trace_real_torchtune_vs_estimate.txt). The model returns its logits as 8 chunks in the
    compute dtype; `compute_cross_entropy` runs `F.cross_entropy(chunk.float(), ...)` per chunk, whose log-softmax
    keeps its fp32 output for backward. While the loss runs: every chunk's logits (c), every chunk's fp32
    log-softmax (4) and the fp32 upcast of the chunk in flight (4 ÷ 8; none when the logits are fp32, `.float()`
    returning them as they are). Backward runs every chunk's loss before the output projection's: the first one
    (the last chunk) holds the log-softmax outputs (4) and that chunk's two fp32 gradients (8 ÷ 8); the recipe has
    dropped the logits by then (`del logits` in `_loss_step`). The larger of the two."""
    c = DTYPE_BYTES[rp.compute_dtype]
    forward = c + 4.0 + (4.0 if c != 4 else 0.0) / TORCHTUNE_CE_CHUNKS
    backward = 4.0 + 8.0 / TORCHTUNE_CE_CHUNKS
    return max(forward, backward) + (2.0 if rp.arch.family == "gemma2" else 0.0)


def chunked_head_backward_bytes(rp: ResolvedPlan, tokens: int) -> int:
    """What the LM head's backward holds after torchtune's chunked loss has run its backward (every chunk's loss runs
    first: torch's autograd takes the ready node created last, and the head's per-chunk matmuls were created before
    the loss): the logits' gradients in the compute dtype, less the chunks already through the head, and, when the
    head trains, three head-weight-sized tensors while each chunk's weight gradient is accumulated into the sum of
    the chunks before it (traced on real CPU tensors and under fake tensors alike: c × (N − 2) ÷ N bytes per logit
    + 3 × the head weight's gradient, tests/trace/test_torchtune_backend.py)."""
    arch = rp.arch
    c = DTYPE_BYTES[rp.compute_dtype]
    n = TORCHTUNE_CE_CHUNKS
    out = tokens * arch.vocab * c * (n - 2) / n
    if head_trains(rp):
        out += 3 * arch.vocab * arch.hidden * DTYPE_BYTES[rp.weight_dtype]
    return int(out)


def trl_fused_head(rp: ResolvedPlan) -> bool:
    """TRL's chunked `nll` loss: SFTTrainer (trl ≥ 1.7, `loss_type` "nll", formerly "chunked_nll", the default) adds
    a fused LM head to the model (trl 1.16 trl/trainer/utils.py `add_fused_lm_head`) that never materialises the
    logits (`head_loss_bytes`). SFTTrainer's alone: the preference and RL trainers compute their own losses."""
    return (
        rp.loss_impl == "chunked"
        and rp.framework == "trl"
        and rp.objective == "sft"
        and rp.arch.block != "encoder"
        and not rp.scalar_head
    )


# trl 1.16 trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE; trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
TRL_TOKEN_TILE, TRL_VOCAB_TILE = 4096, 32768


def head_loss_bytes(rp: ResolvedPlan, tokens: int, backward: bool = True) -> int:
    """Bytes the LM head and the loss hold at the start of backward for `tokens` scored positions:
    `logits_per_token` per token, or under TRL's fused head (`trl_fused_head`) what its backward holds
    (trl 1.16 trl/kernels/chunked_logprob.py `ChunkedLogProbFunction`): one [4096 tokens × 32768 vocabulary] tile
    in the compute dtype (`mm_buf`, reused for every tile; the CUDA kernels fold it in place), the hidden states it
    saved (a contiguous copy of the shifted backbone output), fp32 accumulators for the hidden states' gradient and,
    when the head trains, for the head weight's gradient, each cast to its tensor's dtype on return (a second copy
    while the fp32 one is alive; none when the tensor is fp32), and per-token fp32 log Z, entropy and log-probs.
    A chunk of hidden states and the head's weight tile are cast to the compute dtype when they are in fp32 under
    autocast. With `backward` False, what its forward holds: the tile, the casts, the saved hidden states and the
    per-token statistics, no gradient accumulators."""
    if eager_chunked_ce(rp):
        return max(int(tokens * logits_per_token(rp)), chunked_head_backward_bytes(rp, tokens))
    if rp.loss_impl == "fused" and rp.liger_loss and rp.arch.block != "encoder":
        return liger_head_bytes(rp, tokens, backward)
    if rp.loss_impl == "fused" and rp.verl_fused_head == "triton":
        return verl_triton_head_bytes(rp, tokens, rp.arch.vocab, backward)
    if rp.loss_impl == "fused" and rp.verl_fused_head:
        return verl_fused_head_bytes(rp, tokens, backward)
    if sp_loss_16bit(rp) and rp.loss_chunk_tokens:
        # the chunk in flight in backward: its log-softmax output, NLL gradient and logits' gradient (c bytes each)
        chunk = min(tokens, rp.loss_chunk_tokens) * rp.arch.vocab * 3 * DTYPE_BYTES[rp.compute_dtype]
        return int(tokens * logits_per_token(rp)) + chunk
    if not trl_fused_head(rp):
        return int(tokens * logits_per_token(rp))
    arch = rp.arch
    h, V = arch.hidden, arch.vocab
    c = DTYPE_BYTES[rp.compute_dtype]
    hb = 4 if (fp32_residual(rp) or c == 4) else c  # the backbone output's dtype
    hw = 4 if (rp.amp or rp.weight_dtype == "fp32") else DTYPE_BYTES[rp.weight_dtype]  # the head weight's dtype
    tile_tokens = min(tokens, TRL_TOKEN_TILE)
    out = tile_tokens * min(V, TRL_VOCAB_TILE) * c
    if hb != c:
        out += tile_tokens * h * c  # hidden_chunk.to(compute_dtype)
    if hw != c:
        out += min(V, TRL_VOCAB_TILE) * h * c  # weight[start:end].to(compute_dtype)
    if not backward:
        return int(out + tokens * (hb * h + 7 * 4))  # running max, sums, target logit, log Z, entropy
    out += tokens * (hb * h + 4 * h + (hb * h if hb != 4 else 0) + 3 * 4)
    if head_trains(rp):
        out += V * h * (4 + (hw if hw != 4 else 0))
    return int(out)


VERL_PPO_CHUNK = 512  # verl FusedLinearForPPO(chunk_size=512)


def verl_fused_head_bytes(rp: ResolvedPlan, tokens: int, backward: bool = True) -> int:
    """What verl's fused log-prob/entropy head holds for `tokens` positions (`use_fused_kernels`: volcengine/verl
    verl/utils/experimental/torch_functional.py `FusedLinearForPPOFunction`, the model's forward patched to call it
    on the backbone output and the LM head's weight). It never makes the whole logits: its forward runs 512 tokens
    at a time and keeps the per-token log-probs and entropy (the hidden states' dtype); in a chunk the logits are
    upcast to fp32 and their softmax, log-softmax and the entropy's product are alive (4 fp32 tensors). Its backward
    allocates the hidden states' gradient (`zeros_like(hidden_states)`) and, when the head trains, the head weight's
    (`zeros_like(vocab_weights)`, the weight's dtype), and per chunk recomputes the fp32 logits and softmax, builds
    the one-hot targets, their difference with the softmax, its product with the log-probs' gradient and that
    gradient (6 fp32 tensors), then the chunk's weight gradient in the compute dtype before it is added."""
    arch = rp.arch
    h, V = arch.hidden, arch.vocab
    c = DTYPE_BYTES[rp.compute_dtype]
    hb = 4 if (fp32_residual(rp) or c == 4) else c  # the hidden states' dtype
    hw = 4 if (rp.amp or rp.weight_dtype == "fp32") else DTYPE_BYTES[rp.weight_dtype]  # the head weight's dtype
    chunk = min(tokens, VERL_PPO_CHUNK)
    out = tokens * 2 * hb  # log-probs and entropy
    if not backward:
        return int(out + chunk * V * 4 * 4)
    out += tokens * h * hb + chunk * V * 6 * 4
    if head_trains(rp):
        out += V * h * (hw + c)
    return int(out)


# verl/utils/kernel/kernels.py (volcengine/verl b178a3cd5; the same since the kernel came in c8908e197):
# `efficient_entropy_forward` reduces the logits of 1,024 vocabulary entries at a time, `efficient_entropy_backward`
# (its default `BackwardEnum._Split_Dlogits_N`) makes the logits' gradient 9,504 entries wide at a time
VERL_TRITON_FORWARD_SPLIT = 1024
VERL_TRITON_BACKWARD_SPLIT = 9504


def verl_triton_head_bytes(rp: ResolvedPlan, tokens: int, vocab: int, backward: bool = True) -> int:
    """What verl's Triton fused log-prob/entropy head holds for `tokens` positions over a `vocab`-row head weight
    (the rank's vocabulary shard under Megatron's tensor parallelism): verl/utils/kernel/linear_cross_entropy.py
    `LinearCrossEntropy` with verl/utils/kernel/kernels.py. Its forward returns fp32 log-probs and entropy and saves
    fp32 per-token maximum, accumulator and entropy term (5 fp32 a token), and while it runs holds each token's
    partial maximum, accumulator and entropy term for every 1,024-entry split of the vocabulary (3 fp32 per split).
    Its backward allocates the hidden states' gradient and the head weight's (`torch.empty_like(weight,
    dtype=hidden.dtype)`, whether the head trains or not) in the hidden states' dtype, and the logits' gradient for
    9,504 vocabulary entries at a time in that dtype. The whole logits are never made."""
    c = DTYPE_BYTES[rp.compute_dtype]
    h = rp.arch.hidden
    out = tokens * 5 * 4
    if not backward:
        return int(out + tokens * -(-vocab // VERL_TRITON_FORWARD_SPLIT) * 3 * 4)
    return int(out + tokens * h * c + vocab * h * c + tokens * VERL_TRITON_BACKWARD_SPLIT * c)


def liger_head_bytes(rp: ResolvedPlan, tokens: int, backward: bool = True) -> int:
    """What Liger's fused linear cross-entropy holds for `tokens` scored positions (linkedin/Liger-Kernel ead96b6
    src/liger_kernel/ops/fused_linear_cross_entropy.py `fused_linear_cross_entropy_forward`). Its forward computes
    the gradients too and saves them for backward: `grad_input = zeros_like(_input)` (the hidden states' dtype),
    `grad_weight = zeros_like(weight)` when the head trains (the weight's dtype), an fp32 `loss_1d` per token. The
    tokens run in chunks of `next_power_of_2(cdiv(BT, cdiv(V, H)))` (about BT·H ÷ V tokens), each chunk's logits
    computed in the compute dtype and turned into their gradient in place, then `grad_logits_chunk @ weight` into
    `grad_input`: while a chunk runs (`backward` False) its logits and that product are alive besides."""
    arch = rp.arch
    h, V = arch.hidden, arch.vocab
    c = DTYPE_BYTES[rp.compute_dtype]
    hb = 4 if (fp32_residual(rp) or c == 4) else c  # the hidden states' dtype
    hw = 4 if (rp.amp or rp.weight_dtype == "fp32") else DTYPE_BYTES[rp.weight_dtype]  # the head weight's dtype
    out = tokens * (hb * h + 4)
    if head_trains(rp):
        out += V * h * hw
    if not backward:
        inc = -(-V // h)
        chunk = min(tokens, 1 << max(0, (-(-tokens // inc) - 1).bit_length()))
        out += chunk * (V + h) * c
    return int(out)


def head_trains(rp: ResolvedPlan) -> bool:
    """Whether the LM head's weight gets a gradient."""
    arch = rp.arch
    return (
        rp.peft == "none"
        and (
            rp.trained_layers is None
            or "lm_head" in rp.trained_extra
            or (arch.tied_embeddings and "embed" in rp.trained_extra)
        )
    ) or "lm_head" in rp.modules_to_save


def loss_forward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token the LM head and the standard loss hold while the loss's forward runs: the 16-bit logits,
    their fp32 upcast and the fp32 log-softmax (transformers 5.24 loss/loss_utils.py ForCausalLMLoss:
    `logits = logits.float()`, then `cross_entropy`), + the shifted fp32 copy before 4.49 and Gemma-2's
    soft-capping output. Other losses: what they hold at the start of backward (`logits_per_token`)."""
    if rp.loss_impl == "xentropy" and rp.arch.block != "encoder":
        return xentropy_per_token(rp, backward=False)
    if rp.arch.block == "encoder" or rp.loss_impl != "standard" or compiled_block(rp):
        return logits_per_token(rp)  # (TRL's fused head: `head_loss_bytes`, at the phase's call)
    if swift_dpo_rows(rp):
        return swift_dpo_per_logit(rp, "forward") * rp.arch.vocab
    if hf_t5(rp):
        return t5_loss_per_token(rp, backward=False)
    c = DTYPE_BYTES[rp.compute_dtype]
    per = c + 4.0 + (4.0 if c != 4 else 0.0) + (4.0 if rp.loss_shifted_copy else 0.0)
    if rp.arch.family == "gemma2":
        per += c  # final_logit_softcapping: tanh(logits / cap) keeps its output
    return per * rp.arch.vocab
