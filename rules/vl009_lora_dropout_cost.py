from vramlens.estimate import estimate
from vramlens.rules import Rule

RULE = Rule(
    id="VL009",
    name="lora-dropout-cost",
    title="LoRA dropout costs activation memory",
    severity="information",
    message="LoRA dropout {dropout}{origin} keeps a dropped copy of every adapted layer's input: +{cost} at the "
    "peak ({peak} → {peak_after} with lora_dropout: 0)",
    needs="estimate",
    fixes=("set-value",),
    why="""
Reports the memory that LoRA dropout costs when it is above zero and the peak is in the forward and
backward pass.

PEFT applies dropout to the input of each adapted layer before the LoRA branch, and the dropped copy
(plus a one-byte mask per element) is saved for backward: about (2 + 1) × in_features bytes per token
for every targeted module, or 5 × in_features with fp32 adapters. With all linear layers targeted this
adds several GiB at long sequences. Dropout 0, PEFT's default,
skips the copy entirely.

Example: `lora_dropout: 0.05` with `lora_target_linear: true` on Llama-3-8B at 4096 tokens per
micro-batch.

Fix: `lora_dropout: 0`, unless the dropout is a deliberate regularisation choice for a small dataset.
""",
)

MIN_COST = 0.05 * 2**30  # report costs of at least 50 MiB


@RULE.check
def check(ctx):
    rp, est = ctx.rp, ctx.estimate
    if rp.peft == "none" or rp.lora_dropout <= 0:
        return
    after = estimate(rp.with_changes(lora_dropout=0.0), limits=False)
    cost = est.device_bytes - after.device_bytes
    if cost < MIN_COST:
        return
    src = ctx.source("lora_dropout")
    origin = (
        f" ({src.framework} default)" if src is not None and src.framework and src.origin.value == "default" else ""
    )
    message = RULE.format(
        dropout=f"{rp.lora_dropout:g}",
        origin=origin,
        cost=ctx.gib(cost),
        peak=ctx.gib(est.device_bytes),
        peak_after=ctx.gib(after.device_bytes),
    )
    fixer = ctx.fixer
    yield ctx.finding(
        RULE,
        message,
        ctx.where("lora_dropout", "peft_method", "lora_r", "lora_targets"),
        fixes=lambda: [fixer.make("set-value", "set lora_dropout to 0", {"lora_dropout": 0.0})],
        data={"cost_gib": cost / 2**30},
    )
