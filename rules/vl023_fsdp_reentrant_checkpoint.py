from vramlens.estimate import estimate
from vramlens.rules import Rule

RULE = Rule(
    id="VL023",
    name="fsdp-reentrant-checkpoint",
    title="FSDP1 holds every layer's input gradient under reentrant checkpointing",
    severity="information",
    message="FSDP1 with transformers {transformers}'s reentrant checkpointing around each layer keeps every layer's "
    "checkpointed input and its gradient until the backward ends: +{cost} at the peak ({peak} → "
    "{peak_after} with use_reentrant: false)",
    needs="estimate",
    fixes=("non-reentrant-checkpointing",),
    why="""
Reports LoRA/QLoRA training under FSDP (version 1) where transformers' own gradient checkpointing is
reentrant and wraps each layer from the outside, and says what that costs.

Before transformers 4.52 (4.53 for most families outside Llama, Mistral, Qwen2/3, Phi-3, OLMo and
Gemma) the model's loop checkpoints each decoder layer from outside, and the HF Trainer asks for
`use_reentrant=True` unless told otherwise; under FSDP the layer is an FSDP unit. A LoRA layer's unit
holds only frozen weights (the Trainer wraps the adapters in units of their own), so FSDP registers its
reshard hook on the unit's inputs, and under a reentrant checkpoint that happens during the recompute,
on the checkpoint's own copy of the layer input. The hook keeps that input and its gradient alive until
the whole backward ends: one more hidden-state-sized tensor per layer at the first layer's backward
(measured with torch's FSDP over transformers 4.45's Llama and Mixtral). On Llama-2-70B at 2 × 4096
tokens that is about 10 GiB per GPU.

Example: an accelerate FSDP config with `gradient_checkpointing: true` and LoRA, with
`transformers==4.45.2` pinned in requirements.txt.

Fix: `gradient_checkpointing_kwargs: {use_reentrant: false}` (the same results), FSDP's own activation
checkpointing (`fsdp_activation_checkpointing: true`, non-reentrant inside each unit), or transformers
4.53 or newer.
""",
)

MIN_COST = 0.25 * 2**30  # report costs of at least 256 MiB


@RULE.check
def check(ctx):
    rp, est = ctx.rp, ctx.estimate
    if not rp.fsdp_keeps_block_grads:
        return
    after = estimate(rp.with_changes(fsdp_keeps_block_grads=False), limits=False)
    cost = est.device_bytes - after.device_bytes
    if cost < MIN_COST:
        return
    found = rp.version_of("transformers")
    message = RULE.format(
        transformers=found[0] if found else "4.x",
        cost=ctx.gib(cost),
        peak=ctx.gib(est.device_bytes),
        peak_after=ctx.gib(after.device_bytes),
    )
    fixer = ctx.fixer
    yield ctx.finding(
        RULE,
        message,
        ctx.where("grad_checkpointing", "ckpt_reentrant", "dist_strategy"),
        fixes=lambda: [
            fixer.make(c.id, c.label, c.changes, safe=True)
            for c in fixer.candidates()
            if c.id == "non-reentrant-checkpointing"
        ],
        data={"cost_gib": cost / 2**30},
    )
