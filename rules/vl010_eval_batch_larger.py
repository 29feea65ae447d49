from vramlens.plan import Origin
from vramlens.rules import Rule

RULE = Rule(
    id="VL010",
    name="eval-batch-larger",
    title="Evaluation batch larger than the training micro-batch",
    severity="warning",
    message="Eval batch {eval_batch}{origin} > train micro-batch {micro_batch}: evaluation holds {eval_batch} × "
    "{seq} tokens of logits at once ({logits}), an evaluation peak of about {eval_peak}, above the training "
    "peak of {train_peak} ({verdict})",
    needs="estimate",
    fixes=("set-value",),
    why="""
Reports an evaluation batch size larger than the training micro-batch, when the run evaluates and
the evaluation step would need more memory than the training step.

Evaluation does not keep activations for backward, but it computes the full logits of every sequence
in the batch (batch × sequence × vocabulary, in 16-bit and again in fp32 inside the loss), and the
trainer can keep predictions on the GPU between steps. With 128k–256k vocabularies the logits alone
reach tens of GiB, on top of the weights and optimizer state that stay resident. The run then trains
fine and dies at the first evaluation, hours in. PEFT's own benchmarks saw +2 GiB from an evaluation
batch of 50.

Example: transformers' `per_device_eval_batch_size` defaults to 8 while the config trains at
micro-batch 1 with `eval_strategy: steps`.

Fix: set the evaluation batch to the training micro-batch (this does not change training).
""",
)

# fp16/bf16 logits (2 bytes) plus the fp32 copy made inside the loss (4 bytes) per logit.
EVAL_LOGIT_BYTES = 6
PERSISTENT = ("weights", "quant_constants", "adapters", "optimizer", "buffers", "cuda_context")


def evaluates(ctx) -> bool:
    """Whether the config evaluates at all (a strategy other than "no", or do_eval)."""
    extra = ctx.plan.extra
    for key in ("eval_strategy", "evaluation_strategy"):
        if key in extra:
            return str(extra[key].value).strip().lower() not in ("no", "none", "false", "")
    if "do_eval" in extra:
        return str(extra["do_eval"].value).strip().lower() in ("true", "1", "yes")
    return False


@RULE.check
def check(ctx):
    rp, est = ctx.rp, ctx.estimate
    if rp.eval_batch <= rp.micro_batch or rp.arch.block == "encoder":
        return
    src = ctx.source("eval_batch")
    from_file = src is not None and src.origin == Origin.FILE
    if from_file:
        if any(k in ctx.plan.extra for k in ("eval_strategy", "evaluation_strategy", "do_eval")) and not evaluates(ctx):
            return
    elif not evaluates(ctx):
        return
    logits = rp.eval_batch * rp.seq_len * rp.arch.vocab * EVAL_LOGIT_BYTES
    eval_peak = sum(est.components.get(k, 0) for k in PERSISTENT) + logits
    if eval_peak <= est.device_bytes:
        return
    verdict = (
        f"fits {ctx.gpu_name}"
        if eval_peak <= est.usable_bytes
        else f"over the {ctx.gib(est.usable_bytes)} usable on {ctx.gpu_name}"
    )
    origin = f" ({src.framework} default)" if not from_file and src is not None and src.framework else ""
    message = RULE.format(
        eval_batch=rp.eval_batch,
        origin=origin,
        micro_batch=rp.micro_batch,
        seq=rp.seq_len,
        logits=ctx.gib(logits),
        eval_peak=ctx.gib(eval_peak),
        train_peak=ctx.gib(est.device_bytes),
        verdict=verdict,
    )
    fixer = ctx.fixer
    changes = {"eval_batch": rp.micro_batch}
    yield ctx.finding(
        RULE,
        message,
        ctx.where("eval_batch", "micro_batch"),
        fixes=lambda: [
            fixer.make("set-value", f"set the eval batch to {rp.micro_batch}", changes, safe=True, estimate_title=False)
        ],
        data={"eval_peak_gib": eval_peak / 2**30},
    )
