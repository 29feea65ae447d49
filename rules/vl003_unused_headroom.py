from vramlens.estimate import estimate, max_micro_batch
from vramlens.plan import Origin
from vramlens.report import speed_change
from vramlens.rules import Rule

RULE = Rule(
    id="VL003",
    name="unused-headroom",
    title="Large unused GPU memory: a bigger micro-batch would fit",
    severity="information",
    message="Predicted peak {peak} uses {share} of {usable} on {gpu}: micro-batch {suggested}{accum} would fit "
    "(peak {peak_after}{speed})",
    needs="estimate",
    fixes=("set-value",),
    why="""
Reports a run that leaves more than half of the GPU's usable memory unused while a larger micro-batch
(a power-of-two multiple of the current one, keeping the configured headroom free) would fit. Only
when a GPU is named (in the config, the settings or on the command line), never for the assumed one.

Unused memory is unused throughput: a larger micro-batch makes better use of the GPU's matrix units,
and with gradient accumulation the same global batch takes fewer, larger steps. The message says how much
faster the larger micro-batch is predicted to run (tokens per second, vramlens.estimate.throughput).

Example: a LoRA run of a 1B model at micro-batch 2 with accumulation 8 peaks at 9 GiB on an
A100-80GB; micro-batch 16 with accumulation 1 keeps the global batch of 16 and still fits.

Fix: raise the micro-batch to the suggested value; when gradient accumulation is used, lower it by the
same factor so the global batch (and so the training's results) stays the same. This is information
only: throughput, not correctness.
""",
)

THRESHOLD = 0.5  # report when the peak uses less than this share of usable memory


@RULE.check
def check(ctx):
    est, rp = ctx.estimate, ctx.rp
    if not est.fits or est.device_bytes >= THRESHOLD * est.usable_bytes:
        return
    gpu = ctx.source("gpu_name")
    if gpu is None or gpu.origin == Origin.ASSUMED:
        return  # no GPU named: a bigger batch for a guessed GPU is no advice
    target = int(est.usable_bytes * (1 - ctx.headroom))
    largest = max_micro_batch(rp, target, hi=max(4096, rp.micro_batch))
    if largest is None:
        return
    limit = rp.micro_batch * rp.grad_accum if rp.grad_accum > 1 else largest
    suggested = rp.micro_batch
    while suggested * 2 <= min(largest, limit):
        suggested *= 2
    if suggested < 2 * rp.micro_batch:
        return
    changes = {"micro_batch": suggested}
    accum = ""
    if rp.grad_accum > 1:
        changes["grad_accum"] = max(1, rp.grad_accum * rp.micro_batch // suggested)
        accum = f" with accumulation {changes['grad_accum']}"
    after = estimate(rp.with_changes(**changes), limits=False)
    speed = speed_change(est, after)
    message = RULE.format(
        peak=ctx.gib(est.device_bytes),
        share=f"{est.device_bytes / est.usable_bytes:.0%}",
        usable=ctx.gib(est.usable_bytes),
        gpu=ctx.gpu_name,
        suggested=suggested,
        accum=accum,
        peak_after=ctx.gib(after.device_bytes),
        speed=f", {speed}" if speed else "",
    )
    fixer = ctx.fixer
    label = f"set micro-batch {suggested}" + (f", accumulation {changes['grad_accum']}" if accum else "")
    yield ctx.finding(
        RULE,
        message,
        ctx.where("micro_batch", "grad_accum"),
        fixes=lambda: [fixer.make("set-value", label, changes, safe=False)],
        data={"suggested_micro_batch": suggested, "peak_after_gib": after.device_bytes / 2**30},
    )
