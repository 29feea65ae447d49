from vramlens.estimate import estimate
from vramlens.rules import Rule

RULE = Rule(
    id="VL004",
    name="missing-expandable-segments",
    title="PYTORCH_CUDA_ALLOC_CONF does not enable expandable_segments",
    severity="warning",
    message="{reason}: without `expandable_segments:True` the caching allocator's fragmentation costs about "
    "{slack} here; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (peak {peak} → {peak_after})",
    needs="estimate",
    fixes=("expandable-segments",),
    why="""
Reports a run that does not set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` when the fit is tight
(less free memory than the headroom, or over the limit), or when sequence lengths vary from batch to
batch (no packing) and less than a quarter of the GPU's memory is free.

PyTorch's caching allocator keeps freed blocks in fixed-size segments. When tensor sizes change (padded
batches of varying length, evaluation between training steps), new largest requests cannot reuse the
old segments and memory is reserved but unusable: measured `nvidia-smi` peaks are 6–90 % above
`max_memory_allocated` in published A100 runs. With expandable segments the allocator grows one mapping
per stream instead, and reserved memory stays close to what is allocated (PyTorch PR #96995; the
CUDA-semantics docs). It does not change the training's results or speed in practice.

Example: a run predicted at 38 GiB of 39.4 GiB usable, with 4 GiB of that being allocator slack.

Fix: set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` in the launch environment (or the config's
`env:` block where the format has one). Other options in the variable are kept.
""",
)

VARYING_LENGTHS_FREE = 0.25  # with unpacked batches, warn when less than this share is free


@RULE.check
def check(ctx):
    est, rp = ctx.estimate, ctx.rp
    if rp.expandable_segments:
        return
    tight = est.headroom_bytes < ctx.headroom * est.usable_bytes
    varying = not rp.packing and est.headroom_bytes < VARYING_LENGTHS_FREE * est.usable_bytes
    if not (tight or varying):
        return
    after = estimate(rp.with_changes(expandable_segments=True), limits=False)
    if after.device_bytes >= est.device_bytes:
        return
    fixer = ctx.fixer
    reason = "Over the limit" if not est.fits else "Tight fit" if tight else "Batch lengths vary (no packing)"
    message = RULE.format(
        reason=reason,
        slack=ctx.gib(est.device_bytes - after.device_bytes),
        peak=ctx.gib(est.device_bytes),
        peak_after=ctx.gib(after.device_bytes),
    )
    span = ctx.span_of("alloc_conf") or (
        ctx.component_span(ctx.dominant_component()) if tight else ctx.where("packing", "seq_len", "micro_batch")
    )
    yield ctx.finding(
        RULE,
        message,
        span,
        fixes=lambda: [
            fixer.make(c.id, c.label, c.changes, safe=True, preferred=True)
            for c in fixer.candidates()
            if c.id == "expandable-segments"
        ],
        data={"saving_gib": (est.device_bytes - after.device_bytes) / 2**30},
    )
