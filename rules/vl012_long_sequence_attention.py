from vramlens.estimate import estimate
from vramlens.rules import Rule

RULE = Rule(
    id="VL012",
    name="long-sequence-attention",
    title="Eager attention or packing without a varlen kernel at long sequences",
    severity="warning",
    message="{detail}",
    needs="estimate",
    fixes=("set-value",),
    why="""
Reports attention settings whose memory grows with the square of the sequence length.

Eager attention materialises the full score and probability matrices, batch × heads × sequence²
(fp32 softmax plus a 16-bit copy), for every layer, and keeps them for backward; SDPA and
FlashAttention never do, and are O(sequence). At 4k tokens this is already several GiB per layer group;
at 32k it dominates everything else.

Packing several samples into one sequence needs attention that respects the sample boundaries. Flash
attention's variable-length kernels do this from the position ids at no cost; with `sdpa` or `eager`
the framework must build a block-diagonal mask of batch × sequence² elements instead (or the samples
attend to each other).

Example: `attn_implementation: eager` with `max_length: 8192`, or `sample_packing: true` with
`sdp_attention: true` at 16k tokens.

Fix: use `sdpa` instead of eager attention, and `flash_attention_2` (Ampere or newer GPUs) with
packing.
""",
)

MIN_COST = 0.5 * 2**30  # report costs of at least 0.5 GiB


def _flash_ok(gpu) -> bool:
    try:
        return float(gpu.compute_capability or 0) >= 8.0
    except ValueError:
        return False


@RULE.check
def check(ctx):
    rp, est = ctx.rp, ctx.estimate
    fixer = ctx.fixer
    better = "flash_attention_2" if _flash_ok(rp.gpu) else "sdpa"
    if rp.attn_impl == "eager":
        after = estimate(rp.with_changes(attn_impl="sdpa"), limits=False)
        cost = est.device_bytes - after.device_bytes
        if cost >= MIN_COST:
            detail = (
                f"Eager attention materialises the {rp.seq_len}² attention scores: +{ctx.gib(cost)} at the peak "
                f"({ctx.gib(est.device_bytes)} → {ctx.gib(after.device_bytes)} with sdpa)"
            )
            yield ctx.finding(
                RULE,
                RULE.format(detail=detail),
                ctx.where("attn_impl", "seq_len"),
                fixes=lambda: [fixer.make("set-value", f"use {better} attention", {"attn_impl": better})],
                data={"cost_gib": cost / 2**30},
            )
    elif rp.packing and rp.attn_impl == "sdpa" and rp.strategy != "megatron":
        # Megatron-core packs in its THD layout, the boundaries given to the fused kernels as cumulative sequence
        # lengths (megatron/core/packed_seq_params.py `PackedSeqParams`; ms-swift v4.6.0 swift/megatron/utils/utils.py
        # `get_packed_seq_params`): no mask is built
        mask = rp.micro_batch * rp.seq_len**2  # a boolean block-diagonal mask, one byte per element
        if mask >= MIN_COST and better != "sdpa":
            detail = (
                f"Packing with `sdpa` attention needs a {rp.micro_batch} × {rp.seq_len}² block-diagonal mask "
                f"(≈{ctx.gib(mask)} per step); flash_attention_2 packs by position ids at no cost"
            )
            yield ctx.finding(
                RULE,
                RULE.format(detail=detail),
                ctx.where("packing", "attn_impl", "seq_len"),
                fixes=lambda: [
                    fixer.make("set-value", "use flash_attention_2 attention", {"attn_impl": "flash_attention_2"})
                ],
                data={"cost_gib": mask / 2**30},
            )
