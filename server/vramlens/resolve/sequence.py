"""Sequence stage: the sequence length (the file's, the framework's default for the objective, else an assumed one
within the model's positions) and the batch: micro batch, accumulation (from a global batch when only that is
given), the attention implementation asked for and the allocator settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramlens.knowledge.schema import ModelArch
from vramlens.plan import Origin, Sourced
from vramlens.resolve.common import ASSUMED_SEQ_LEN, Approximate, Context

# Objectives whose sequence is a rollout's prompt + completion (resolve/objective.py), not the sequence-length setting
ROLLOUT_OBJECTIVES = ("ppo", "grpo", "rloo", "online-dpo")


@dataclass(frozen=True)
class SequencePart:
    seq: Any  # tokens per sequence (None for a rollout objective without one: the objective stage sets it)
    objective: str
    micro: int
    ga: int
    attn: str  # the attention implementation the config asks for
    alloc: str  # PYTORCH_CUDA_ALLOC_CONF


def resolve_sequence(ctx: Context, arch: ModelArch, dp: int) -> SequencePart:
    plan, val, sources, fw_label, defaults = ctx.plan, ctx.val, ctx.sources, ctx.fw_label, ctx.defaults
    seq = val("seq_len")
    objective = plan.objective.value if plan.objective is not None else "sft"
    default = ctx.hooks.seq_len_default(objective) if seq is None else None
    if default is not None:
        seq = default.value
        sources["seq_len"] = Sourced(value=seq, origin=Origin.DEFAULT, framework=default.framework, note=default.note)
    if seq is None and objective not in ROLLOUT_OBJECTIVES:
        seq = ASSUMED_SEQ_LEN
        why = (
            f"{fw_label} has no sequence-length setting (the script's tokenization decides)"
            if "seq_len" not in defaults
            else "sequence length not set"
        )
        taken = f"{seq} tokens"
        if arch.max_position and arch.max_position < seq:
            seq = arch.max_position
            taken = f"the model's max_position_embeddings, {seq} tokens"
        sources["seq_len"] = Sourced(value=seq, origin=Origin.ASSUMED, note=f"{why}; {taken}")
        ctx.assumptions.append(Approximate(f"{why}: assumed {taken}"))
    assumed = getattr(sources.get("seq_len"), "origin", None) == Origin.ASSUMED  # already said, as approximate
    packing = plan.packing
    padding_free = packing is not None and bool(packing.value) and "padding_free" in (packing.key or "")
    if seq is not None and not assumed and objective not in ROLLOUT_OBJECTIVES:
        if not val("packing"):
            ctx.assumptions.append(
                f"every batch taken as {int(seq):,} tokens long (the sequence length): without packing a batch is "
                "padded only to its longest sample, so data shorter than that peaks lower"
            )
        elif padding_free and packing is not None:
            # padding-free batches concatenate the samples as they are (TRL's DataCollatorWithFlattening, ms-swift's
            # padding_free): a row holds the micro batch's own tokens, not a pack filled to the length
            ctx.assumptions.append(
                f"`{packing.key}`: every sample taken as {int(seq):,} tokens long (the sequence length), the most a "
                "padding-free row of the micro batch can hold; data shorter than that peaks lower"
            )
    alloc = val("alloc_conf") or ""
    attn = val("attn_impl") or "sdpa"
    micro = int(val("micro_batch") or 1)
    ga = int(val("grad_accum") or 1)
    if plan.global_batch is not None and plan.grad_accum is None:
        ga = max(1, plan.global_batch.value // max(1, micro * dp))
        sources["grad_accum"] = Sourced(value=ga, origin=Origin.DERIVED, note="global batch ÷ (micro batch × GPUs)")
    return SequencePart(seq, objective, micro, ga, attn, alloc)
