from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL006",
    name="fp16-and-bf16",
    title="fp16 and bf16 both enabled",
    severity="error",
    message="{detail}",
    needs="text",
    owns=(IssueKind.PRECISION_CONFLICT,),
    fixes=(),
    why="""
Reports a config that switches on both fp16 and bf16 mixed precision.

Transformers' `TrainingArguments` raises "At most one of fp16 and bf16 can be True" when both are set,
and DeepSpeed rejects a config whose `fp16.enabled` and `bf16.enabled` are both true; other launchers
silently pick one, so the memory estimate (and the training's numerics) depend on which.

Example:

    bf16: true
    fp16: true

Fix: keep one of them: bf16 on Ampere or newer GPUs, fp16 on older ones.
""",
)


@RULE.check
def check(ctx):
    # The parsers know both keys and report the conflict as a parse issue of the kind this rule owns.
    return ctx.issue_findings(RULE)
