from vramlens.plan import Origin
from vramlens.rules import Rule

RULE = Rule(
    id="VL007",
    name="fp32-weights-by-default",
    title="Weights loaded in fp32 by default",
    severity="warning",
    message="Weights load in fp32, {why_fp32}: {weights} of weights{more}; loading them in bf16 gives a peak of "
    "{peak_after} instead of {peak}",
    needs="estimate",
    fixes=("set-value",),
    why="""
Reports a run whose model weights are loaded in fp32 because a framework default says so, not because
the config asks for it.

fp32 weights take 4 bytes per parameter, twice bf16; under full fine-tuning the gradients and the AdamW
state follow the weights' dtype, so the whole persistent footprint doubles (16 instead of 8 bytes per
parameter). Mixed precision (`bf16: true`) does not change this: autocast computes in bf16 but keeps
the fp32 weights. Several defaults load fp32 silently: TRL's `ModelConfig.dtype` defaulted to float32,
and transformers before v5 loaded checkpoints in fp32 unless `torch_dtype` was given.

Example: `trl sft --model_name_or_path Qwen/Qwen2.5-7B --bf16` without `--dtype bfloat16` holds 28 GiB
of fp32 weights where 14 GiB would do.

Fix: set the load dtype explicitly (`torch_dtype: bfloat16` / `dtype: bfloat16`), or keep fp32 on purpose
(fp32 master weights for stability) by writing it in the config, which silences this warning.
""",
)


@RULE.check
def check(ctx):
    rp, est = ctx.rp, ctx.estimate
    if rp.weight_dtype != "fp32":
        return
    src = ctx.source("weight_dtype")
    if src is None or src.origin == Origin.FILE:
        return
    if not ctx.rp.gpu.bf16:
        return  # fp32 weights with fp16 autocast is the right choice there
    fixer = ctx.fixer
    changes = {"weight_dtype": "bf16"}
    after = fixer.evaluate(changes)
    if after is None or after.device_bytes >= est.device_bytes:
        return
    why_fp32 = f"the default of {src.framework}" if src.framework else (src.note or "a default")
    more = " plus fp32 gradients and optimizer state" if rp.peft == "none" else ""
    message = RULE.format(
        why_fp32=why_fp32,
        weights=ctx.gib(est.components["weights"]),
        more=more,
        peak_after=ctx.gib(after.device_bytes),
        peak=ctx.gib(est.device_bytes),
    )
    yield ctx.finding(
        RULE,
        message,
        ctx.anchor,
        fixes=lambda: [fixer.make("set-value", "load the weights in bf16", changes)],
        data={"saving_gib": (est.device_bytes - after.device_bytes) / 2**30},
    )
