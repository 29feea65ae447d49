from vramlens.rules import Rule

RULE = Rule(
    id="VL001",
    name="predicted-oom",
    title="Predicted out of memory",
    severity="error",
    message="Predicted peak {peak} > {usable} usable on {gpu} ({top} {top_size})",
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
Reports a training step whose estimated peak GPU memory is larger than what one GPU can give the process.

The estimate is the device-level peak (what `nvidia-smi` shows): persistent memory (weights, gradients,
optimizer state) plus the largest transient phase of the step (activations and logits at the start of
backward, or the optimizer step's temporaries), plus the caching allocator's slack and the CUDA context.
A run over this limit dies with `torch.OutOfMemoryError`, usually in the first step, after model loading
and data preparation have already cost minutes.

The finding sits on the setting behind the largest component: the `optim` line when optimizer state
dominates, the batch or sequence line for activations and logits, the model line for weights and
gradients. Related locations list the breakdown.

Example: a full fine-tune of Llama-3-8B with AdamW in bf16 on an A100-40GB needs about 16 GiB of weights,
16 GiB of gradients and 32 GiB of AdamW state before a single activation: it cannot fit.

Fix: "Make it fit" applies the cheapest set of changes whose estimate fits with the configured headroom,
preferring changes that keep the training's results (allocator settings, fused kernels, gradient
checkpointing) over 8-bit optimizer state, a smaller micro-batch with more accumulation, and finally
LoRA or QLoRA. Each change is also offered on its own, titled with the peak it would give.
""",
)


@RULE.check
def check(ctx):
    est = ctx.estimate
    if est.fits:
        return
    top = ctx.dominant_component()
    message = RULE.format(
        peak=ctx.gib(est.device_bytes),
        usable=ctx.gib(est.usable_bytes),
        gpu=ctx.gpu_name,
        top=ctx.component_label(top),
        top_size=ctx.gib(est.components[top]),
    )
    yield ctx.finding(
        RULE,
        message,
        ctx.component_span(top),
        related=ctx.breakdown(),
        fixes=ctx.memory_fixes(),
        data={
            "peak_gib": est.device_bytes / 2**30,
            "usable_gib": est.usable_bytes / 2**30,
            "dominant": top,
            "phase": est.phase,
        },
    )
