from vramlens.rules import Rule

RULE = Rule(
    id="VL011",
    name="fsdp-full-state-dict",
    title="FSDP FULL_STATE_DICT checkpoints gather the whole model",
    severity="warning",
    message="FSDP `{state_dict_type}` gathers the unsharded model to save a checkpoint: up to {gathered} more "
    "on rank 0 while saving, with {free} free at the training peak; use SHARDED_STATE_DICT",
    needs="estimate",
    fixes=("set-value",),
    why="""
Reports FSDP training that saves checkpoints with `FULL_STATE_DICT`.

To write a full state dict, FSDP all-gathers every sharded parameter into complete tensors, unit by
unit, on top of the training state that is still resident; with several units in flight and the
optimizer state gathered as well, the saving step can peak well above the training step. PEFT's FSDP
guide reports a run at 72 GB during training reaching 80 GB while saving. The run then dies at its first
checkpoint, after hours of training.

Example: `fsdp_state_dict_type: FULL_STATE_DICT` in an accelerate FSDP config for a 70B fine-tune.

Fix: save with `SHARDED_STATE_DICT` during training (each rank writes its own shard; merge the shards
once at the end with `accelerate merge-weights` or `torch.distributed.checkpoint`), or only switch to a
full state dict for the final save.
""",
)


@RULE.check
def check(ctx):
    rp, est = ctx.rp, ctx.estimate
    if rp.strategy != "fsdp" or not rp.fsdp_full_state_dict:
        return
    gathered = est.params_total * (2 if rp.compute_dtype != "fp32" else 4)
    state = ctx.plan.fsdp_state_dict_type.value if ctx.plan.fsdp_state_dict_type is not None else "FULL_STATE_DICT"
    message = RULE.format(state_dict_type=state, gathered=ctx.gib(gathered), free=ctx.gib(max(est.headroom_bytes, 0)))
    fixer = ctx.fixer
    yield ctx.finding(
        RULE,
        message,
        ctx.where("fsdp_state_dict_type", "dist_strategy"),
        fixes=lambda: [
            fixer.make(
                "set-value",
                "save SHARDED_STATE_DICT checkpoints",
                {"fsdp_state_dict_type": "SHARDED_STATE_DICT"},
                estimate_title=False,
            )
        ],
        data={"gathered_gib": gathered / 2**30},
    )
