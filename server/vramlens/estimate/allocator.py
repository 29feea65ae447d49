"""From allocated bytes to what the GPU shows: the caching allocator's reserved level and the CUDA context.

- reserved: PyTorch's caching allocator keeps every freed block cached; a request that no cached block can hold
  gets a new segment. The reserved level is therefore built here by construction: the estimator's own tensors of
  one training step — weights, gradients, optimizer states created at the first step, the saved activations of
  each block, the loss's logit-sized tensors, in the order a step makes and frees them — are replayed through the
  allocator's rules (`vramlens.trace.allocator_replay`: `c10/cuda/CUDACachingAllocator.cpp` at pytorch/pytorch
  commit 001074d25084fdb87a799823e395a50f5ec044d3 — 512 B rounding, 2 MiB small segments, 20 MiB segments below
  10 MiB, kRoundLarge = 2 MiB above, best-fit reuse, splitting, `expandable_segments`). Two steps are replayed:
  the first step's optimizer states and gradients fill the blocks its loss freed, so the second step's logits
  need segments of their own (what `torch.cuda.max_memory_reserved` shows after step 1). What the replay holds
  above its own allocated peak is added to the estimator's allocated peak. Plans the sequence does not describe
  (sharded, pipelined, encoder-decoder, scalar heads) keep a slack on the transient bytes.
  The replay costs 0.1–0.5 s per new plan of 80 blocks in pure Python (7–15 thousand events;
  `benchmarks/reserved_model_speed.py`), too slow for diagnostics on every keystroke and for searches over
  micro-batch sizes, so it is used only when `VRAMLENS_RESERVED_MODEL=replay` is set
  (`benchmarks/reserved_vs_replay.py` compares both); otherwise the slack model below gives the reserved level.
- device: + CUDA context and library workspaces, outside torch's counters: ~0.3–1.0 GB with the lazy module
  loading torch uses from 1.13 (pytorch/pytorch PR #86509: 287 MB lazy against 667 MB eager for one small tensor;
  vramcalc 0.1.2 README: ~0.75 GB on A6000); NCCL adds ~0.5–1 GB per rank. Before torch 1.13 every kernel loads
  with the context: 1343 MB measured for the context alone on a V100 with CUDA 11.2 (transformers
  docs/source/en/model_memory_anatomy.md at commit 0016acf7, "the CUDA kernels alone take up 1.3GB").
"""

from __future__ import annotations

import os
from functools import lru_cache

from vramlens.estimate.components.dispatch import ep_dispatch_buffers
from vramlens.knowledge import versions
from vramlens.resolved import ResolvedPlan

MIB = 1 << 20
CONTEXT_BYTES = 600 * MIB  # CUDA context + cuBLAS/cuDNN handles, single process, lazy module loading
EAGER_CONTEXT_BYTES = 1343 * MIB  # the context with every kernel loaded (torch before 1.13)
NCCL_BYTES = 700 * MIB  # per rank when world_size > 1
TRANSIENT = ("activations", "logits", "temporaries", "buffers")


def reserved_bytes(rp: ResolvedPlan, allocated: int, parts: dict[str, int]) -> int:
    """`torch.cuda.max_memory_reserved` of the run: the allocated peak plus what the caching allocator holds
    cached above it (`step_sequence` replayed through the allocator's rules)."""
    if os.environ.get("VRAMLENS_RESERVED_MODEL") != "replay":
        return _slack_reserved(rp, allocated, parts)
    cached = _cached_slack(rp, tuple(sorted(parts.items())))
    return _slack_reserved(rp, allocated, parts) if cached is None else int(allocated + cached)


@lru_cache(maxsize=256)
def _cached_slack(rp: ResolvedPlan, parts: tuple[tuple[str, int], ...]) -> int | None:
    """What the replayed step sequence reserves above its allocated peak (None: no sequence for the plan)."""
    events = step_sequence(rp, dict(parts))
    if events is None:
        return None
    from vramlens.trace.allocator_replay import AllocatorSettings, replay

    r = replay(events, AllocatorSettings(expandable_segments=rp.expandable_segments))
    return max(r.peak_reserved - r.peak_allocated, 0)


def _slack_reserved(rp: ResolvedPlan, allocated: int, parts: dict[str, int]) -> int:
    """Plans without a step sequence: a slack on the transient bytes (fms-acceleration
    `scripts/benchmarks/refs/a100_80gb.csv`: nvidia-smi ÷ allocated 1.06–1.90 on A100s; docs/memory-model.md)."""
    transient = sum(parts.get(k, 0) for k in TRANSIENT)
    if rp.expandable_segments:
        slack = 0.02 * transient + 0.01 * allocated
    else:
        slack = 0.15 * transient + 0.03 * allocated
    if rp.quant_bits == 4:
        slack += 0.05 * allocated  # many mid-sized dequantization temporaries
    return int(allocated + slack + 64 * MIB)


def _prefix(sizes: list[int], total: int) -> list[int]:
    """The leading `sizes` that fit in `total` bytes (at least the first)."""
    out: list[int] = []
    for x in sizes:
        if out and sum(out) + x > total:
            break
        out.append(x)
    return out


def _scaled(shapes: list[int], total: int) -> list[int]:
    """`shapes` (element counts) as tensors of `total` bytes: at a whole number of bytes per element each tensor
    has its exact size and what is left over (norm weights, biases) is one tensor more; below one byte per element
    (k-bit weights) each tensor takes its share of the total."""
    n = sum(shapes)
    if not n or total <= 0:
        return []
    width = total // n
    if width == 0:
        return [int(total * x / n) for x in shapes]
    rest = total - width * n
    return [x * width for x in shapes] + ([rest] if rest else [])


def _chunks(total: int, sizes: list[int]) -> list[int]:
    """`total` bytes as tensors of the given sizes in turn (the last one cut short)."""
    out: list[int] = []
    i = 0
    while total > 0 and sizes:
        size = min(sizes[i % len(sizes)], total)
        out.append(size)
        total -= size
        i += 1
    return out


def step_sequence(rp: ResolvedPlan, parts: dict[str, int]) -> list[tuple] | None:
    """The allocations and frees of two training steps of a single-GPU decoder, built from the estimator's own
    tensors at their real sizes (None where the plan is sharded, pipelined or not a decoder with an LM head).

    - build: the weights, one tensor per linear of every block (q, k, v, o and the MLP's two or three) and the
      embedding (and an untied LM head), together `weights` + `quant_constants`; the adapters likewise; weights,
      gradients and optimizer states each at its exact size (`_scaled`).
    - forward: each block's saved activations as the block's own tensors in the order it makes them
      (`_block_pattern`), the block's share of `activations`, then the final norm's; under checkpointing each
      block keeps its input, its forward makes the recomputed block's tensors in turn with at most the MLP's
      intermediates live together (transformers' LlamaMLP: `down_proj(act_fn(gate_proj(x)) * up_proj(x))`), and
      backward recomputes one block at a time.
    - loss (transformers' `ForCausalLMLoss`, loss/loss_utils.py: `logits.float()` then `cross_entropy`): the
      16-bit logits, their fp32 upcast and the fp32 log-softmax; its backward two fp32 gradients, then the 16-bit
      one. Other losses hold `logits` as fp32 logit-sized tensors.
    - backward: the final norm's tensors freed after the head's backward, then block by block from the top, each
      linear's weight gradient (full fine-tuning) made before the input it saved is freed; with tied embeddings
      the embedding's gradient and the sum that becomes `.grad` at the end.
    - optimizer: at the first step its states, one per state and trainable tensor (torch/optim/adamw.py
      `_init_group`: `zeros_like(param)`, lazily at step 0); then the gradients are freed (`zero_grad(set_to_none)`).
    """
    from vramlens.estimate import components as C

    arch = rp.arch
    if (
        arch.block != "decoder"
        or rp.scalar_head
        or rp.strategy != "none"
        or max(rp.world_size, rp.gpu_count, rp.tensor_parallel, rp.pipeline_parallel, rp.context_parallel, 1) > 1
        or arch.layers < 1
    ):
        return None
    p = C.params(rp)
    c = 4 if rp.compute_dtype == "fp32" else 2
    seqs = rp.micro_batch * rp.sequences_per_example
    tok = seqs * rp.seq_len
    h, inter, layers, V = arch.hidden, arch.intermediate, arch.layers, arch.vocab
    q = arch.heads * (arch.head_dim or h // arch.heads)
    kv = (arch.kv_heads or arch.heads) * (arch.head_dim or h // arch.heads)
    mlp = 3 if arch.mlp in ("swiglu", "geglu") else 2
    block = [h * q, h * kv, h * kv, q * h] + [h * inter] * mlp
    embed = [V * h] + ([] if arch.tied_embeddings else [V * h])
    shapes = block * layers + embed
    weights = _scaled(shapes, parts.get("weights", 0) + parts.get("quant_constants", 0))
    full = rp.peft == "none"
    grads = _scaled(shapes, C.gradients(rp, p)) if full else []
    states_total = parts.get("optimizer", 0)
    n_states = max(round(rp.optimizer.states), 1)
    if full:
        states = _scaled(shapes * n_states, states_total)
    else:
        adapter_shapes = [max(x, 1) for x in _adapter_shapes(rp)] * layers
        states = _scaled(adapter_shapes * n_states, states_total)
    adapters = _scaled(_adapter_shapes(rp) * layers, parts.get("adapters", 0)) if not full else []
    other = sum(parts.get(k, 0) for k in ("reference", "reward_model", "value_model", "teacher", "buffers"))

    if not parts.get("activations") and not parts.get("logits"):
        # an optimizer-step peak: the step's saved tensors are those of its forward-backward phase
        from vramlens.estimate import _phases

        parts = {**parts, "activations": _phases(rp)[1]["forward-backward"].get("activations", 0)}
    saved = parts.get("activations", 0)
    recompute = C.recomputes(rp)
    all_layers, one_layer = C.activations_per_token(rp)
    pattern, made_after = _block_pattern(rp, tok, c, q, kv)
    # the model's final RMSNorm keeps what `final_norm_per_token` counts: its fp32 input, then the normalised value
    # and the head's input only where the norm and the head train (a block's norm pattern, cut to that many bytes)
    final_norm = _prefix(pattern[:3], int(tok * C.final_norm_per_token(rp)))
    final_norm = final_norm if made_after[0] and saved > sum(pattern[:3]) * (layers + 1) else []
    per_block = (saved - sum(final_norm)) // layers
    block_tensors = _chunks(per_block, pattern)
    recomputed = _chunks(int(tok * one_layer), pattern) if recompute else []

    ev: list[tuple] = []
    ids = iter(range(1 << 62))

    def alloc(size: int) -> int:
        key = next(ids)
        ev.append(("alloc", key, size, 0))
        return key

    def free(key: int) -> None:
        ev.append(("free", key, 0, 0))

    for size in weights + adapters + ([other] if other else []):
        alloc(size)
    logit32, logit16 = tok * V * 4, tok * V * c
    # transformers' ForCausalLMLoss holds 12 bytes per logit at the start of backward (14 with the logits kept)
    per_logit = C.logits_per_token(rp) / V if V else 0.0
    standard = rp.loss_impl == "standard" and c != 4 and not C.compiled_block(rp) and per_logit >= 12
    state_keys: list[int] = []
    for step in range(2):
        kept = []
        for _ in range(layers):
            # a checkpointed block's forward still makes its intermediates and keeps only its output
            # (torch/utils/checkpoint.py: the reentrant forward runs the block under `no_grad`, the non-reentrant one
            # drops what it saves), each freed once used: at most the MLP's `mlp` intermediates live together
            # (transformers 5.24 models/llama/modeling_llama.py `LlamaMLP.forward`). Their blocks are cached before
            # the loss asks for the logits' blocks, which therefore need segments of their own.
            window: list[int] = []
            for x in recomputed:
                window.append(alloc(x))
                if len(window) > mlp:
                    free(window.pop(0))
            made = []
            for j, x in enumerate(block_tensors):
                made.append(alloc(x))
                if not recompute and made_after[j % len(pattern)]:
                    free(alloc(made_after[j % len(pattern)]))
            kept.append(made)
            for transient in window:
                free(transient)
        norm_keys = [alloc(x) for x in final_norm]
        if final_norm:
            free(alloc(made_after[0]))
        if standard:
            lg = alloc(logit16)
            up = alloc(logit32) if c != 4 else None
            ls = alloc(logit32)
            for key in (up, lg):
                if key is not None:
                    free(key)
            g1, g2 = alloc(logit32), alloc(logit32)
            free(g1)
            free(ls)
            g16 = alloc(logit16) if c != 4 else None
            free(g2)
            loss = [g16] if g16 is not None else []
        else:
            loss = [alloc(x) for x in _chunks(int(tok * per_logit * V), [logit32])]
        # the LM head's weight gradient comes first in backward (with tied embeddings the embedding's)
        head = len(shapes) - 1  # the last of `shapes`; past it, what `_scaled` left over
        g_keys = [alloc(grads[head])] if grads else []
        for key in norm_keys:  # the final norm's backward runs next and releases what it saved
            free(key)
        for i in reversed(range(layers)):
            extra = []
            for j, x in enumerate(recomputed):  # the block's forward again, its transients with it
                extra.append(alloc(x))
                if made_after[j % len(pattern)]:
                    free(alloc(made_after[j % len(pattern)]))
            # each linear's weight gradient is made before the input it saved is freed, from the block's last
            # linear back (autograd releases a node's saved tensors once the node has run)
            held = extra + kept[i]
            block_grads = grads[i * len(block) : (i + 1) * len(block)][::-1]
            for n, size in enumerate(block_grads, 1):
                g_keys.append(alloc(size))
                while len(held) > (len(extra) + len(kept[i])) * (len(block_grads) - n) // len(block_grads):
                    free(held.pop())
            for key in held:
                free(key)
            if i == layers - 1:
                for key in loss:
                    free(key)
        if grads:
            g_keys += [alloc(x) for x in grads[layers * len(block) : head] + grads[head + 1 :]]
            if arch.tied_embeddings:
                # the embedding's own gradient (`embedding_dense_backward`) meets the head's, which already holds
                # `.grad`: the traced step (torch 2.14.1) makes their sum as a new tensor, which becomes `.grad`,
                # then frees the head's gradient and the embedding's
                first, own = g_keys[0], alloc(grads[head])
                g_keys[0] = alloc(grads[head])
                free(first)
                free(own)
        if step == 0:
            state_keys = [alloc(x) for x in states]
        for key in g_keys:
            free(key)
    del state_keys
    return ev


def _block_pattern(rp: ResolvedPlan, tok: int, c: int, q: int, kv: int) -> tuple[list[int], list[int]]:
    """The tensors one decoder block saves for backward, in bytes and in the order its forward makes them, and
    beside each the bytes of a tensor made right after it and freed at once (0: none)
    (transformers 5.24 models/llama/modeling_llama.py `LlamaDecoderLayer`, SDPA): per norm its fp32 input
    (`LlamaRMSNorm`: `hidden_states.to(torch.float32)`, in a 16-bit model; then its square, `pow(2)`, freed once
    its mean is taken) and its normalised and weighted outputs;
    K and V, then q and K after RoPE, the attention's output; the MLP's gate, up, act(gate) and their product
    (`LlamaMLP`), or fc1's output and its activation in a two-linear MLP. Under AMP over fp32 weights the stream
    and the norms are fp32 and autocast keeps 16-bit copies of the weights beside the inputs: that block is taken
    as its MLP intermediates and hidden-sized tensors at the compute width."""
    from vramlens.estimate.components.common import amp_fp32_stream

    arch = rp.arch
    h = tok * arch.hidden * c
    inter = tok * arch.intermediate * c
    if amp_fp32_stream(rp):
        amp = [inter] * (3 if arch.mlp in ("swiglu", "geglu") else 2) + [h] * 4
        return amp, [0] * len(amp)
    rms = arch.norm == "rmsnorm" and c == 2
    norm_in = tok * arch.hidden * 4 if rms else h
    gated = arch.mlp in ("swiglu", "geglu")
    attn = [norm_in, h, h, tok * kv * c, tok * q * c, tok * kv * c, tok * q * c]
    saved = attn + [norm_in, h, h] + [inter] * (4 if gated else 2)
    after = [0] * len(saved)
    if rms:
        after[0] = after[len(attn)] = norm_in
    return saved, after


def _adapter_shapes(rp: ResolvedPlan) -> list[int]:
    """Element counts of one block's adapter tensors (LoRA's A and B of every targeted linear)."""
    arch = rp.arch
    r = max(rp.lora_r, 1)
    h, inter = arch.hidden, arch.intermediate
    out = []
    for target in rp.lora_targets or ("q", "v"):
        width = inter if target in ("gate", "up", "down") else h
        out += [r * h, r * width]
    return out


def _eager_torch(rp: ResolvedPlan) -> tuple[str, str] | None:
    """(version, source) of the run's torch when it loads every CUDA kernel with the context (before 1.13)."""
    torch = rp.version_of("torch")
    return torch if torch and versions.cuda_modules_load_eagerly(torch[0]) else None


def cuda_context_bytes(rp: ResolvedPlan) -> int:
    """The CUDA context with the handles of one process, by how the torch in use loads its kernels."""
    return EAGER_CONTEXT_BYTES if _eager_torch(rp) else CONTEXT_BYTES


def context_bytes(rp: ResolvedPlan) -> int:
    """Everything outside torch's counters: the CUDA context, plus NCCL's buffers when ranks talk, plus DeepEP's
    expert-parallel buffers (components.dispatch.ep_dispatch_buffers)."""
    nccl = NCCL_BYTES if rp.world_size > 1 or rp.gpu_count > 1 else 0
    return cuda_context_bytes(rp) + nccl + ep_dispatch_buffers(rp)


def device_bytes(rp: ResolvedPlan, allocated: int, parts: dict[str, int]) -> int:
    return reserved_bytes(rp, allocated, parts) + context_bytes(rp)


def device_range(rp: ResolvedPlan, allocated: int, device: int) -> tuple[int, int]:
    """A plausible range for the device level: allocation-level model error (±5 % traced) and the spread of
    allocator slack (run-to-run variation of ~10 % is common: torchtune PR #961 measured 20.2–24.1 GB)."""
    low = int(allocated * 0.97 + cuda_context_bytes(rp) * 0.5)
    high = int(device * 1.10)
    return low, high


def assumptions(rp: ResolvedPlan) -> list[str]:
    out = []
    if torch := _eager_torch(rp):
        out.append(
            f"torch {torch[0]} ({torch[1]}): CUDA kernels load with the context (lazy loading is "
            f"torch's default from 1.13) — CUDA context {EAGER_CONTEXT_BYTES / (1 << 30):.1f} GiB"
        )
    if not rp.expandable_segments:
        out.append("allocator: default caching allocator (no expandable_segments) — fragmentation slack included")
    if rp.correction != 1.0:
        out.append(
            f"calibrated: allocated memory scaled ×{rp.correction:.3f} by local traces/probes of this "
            "architecture (VRAMLENS_CALIBRATION=off to disable)"
        )
    if rp.optimizer.paged:
        out.append(
            "paged optimizer states live in CUDA unified memory: counted on the GPU, may page to the CPU under pressure"
        )
    return out
