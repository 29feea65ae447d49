from vramlens.rules import Rule

RULE = Rule(
    id="VL002",
    name="tight-fit",
    title="Tight fit: less free memory than the headroom",
    severity="warning",
    message="Tight fit: predicted peak {peak} leaves {free} ({share}) of {usable} usable on {gpu} free, "
    "less than the {headroom} headroom ({top} {top_size})",
    needs="estimate",
    fixes=(
        "make-it-fit",
        "expandable-segments",
        "fused-loss",
        "fused-adamw",
        "grad-checkpointing",
        "8bit-adam",
        "smaller-micro-batch",
        "lora",
        "qlora",
    ),
    why="""
Reports a run that is predicted to fit, but with less free GPU memory than the configured headroom
(10 % of usable memory unless set otherwise).

Estimates are not exact, and real runs vary: the caching allocator fragments when batch shapes change, a
long batch late in an epoch raises the activation peak, evaluation and checkpoint saving allocate on top
of training. A run this close to the limit often dies hours in, not in the first step.

Example: a LoRA run predicted at 38.5 GiB on an A100-40GB (39.4 GiB usable) has 0.9 GiB to spare; one
batch of maximum length after a run of short ones can push the reserved memory over.

Fix: the same changes as for a predicted OOM, aiming at a peak that leaves the headroom free; setting
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` alone often recovers the fragmentation margin.
Adjust the headroom in the settings (`headroom`) if your runs are known to be steady.
""",
)


@RULE.check
def check(ctx):
    est = ctx.estimate
    if not est.fits or est.headroom_bytes >= ctx.headroom * est.usable_bytes:
        return
    top = ctx.dominant_component()
    message = RULE.format(
        peak=ctx.gib(est.device_bytes),
        free=ctx.gib(est.headroom_bytes),
        share=f"{est.headroom_bytes / est.usable_bytes:.0%}",
        usable=ctx.gib(est.usable_bytes),
        gpu=ctx.gpu_name,
        headroom=f"{ctx.headroom:.0%}",
        top=ctx.component_label(top),
        top_size=ctx.gib(est.components[top]),
    )
    yield ctx.finding(
        RULE,
        message,
        ctx.component_span(top),
        related=ctx.breakdown(),
        fixes=ctx.memory_fixes(),
        data={"peak_gib": est.device_bytes / 2**30, "free_gib": est.headroom_bytes / 2**30},
    )
