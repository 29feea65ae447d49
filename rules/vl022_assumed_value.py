from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL022",
    name="assumed-value",
    title="Value left open by the config",
    severity="information",
    message="{detail}",
    needs="text",
    owns=(IssueKind.ASSUMED,),
    why="""
Reports a setting that decides the estimate but that the file leaves open, so vramlens had to assume
a value: LLaMA-Factory without `cutoff_len` (whose default changed from 1024 to 2048 in 2024-11),
torchtune's `tokenizer.max_seq_len: null` (sequences as long as the longest sample), an old TRL
config whose defaults have changed since, `use_cpu: true` in an accelerate config.

The estimate is only as good as the value assumed; the framework version the run uses may pick a
different one, and the peak moves with it.

Example (LLaMA-Factory):

    model_name_or_path: meta-llama/Llama-3.1-8B
    stage: sft              # no cutoff_len: the default of the installed version applies

Fix: write the value you train with into the file.
""",
)


@RULE.check
def check(ctx):
    # The parsers report each value they had to assume as a parse issue of the kind this rule owns.
    return ctx.issue_findings(RULE)
