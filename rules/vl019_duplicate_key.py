from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL019",
    name="duplicate-key",
    title="Key written twice",
    severity="warning",
    message="{detail}",
    needs="text",
    owns=(IssueKind.DUPLICATE_KEY,),
    why="""
Reports a key that is written twice in the same mapping of a YAML or JSON config.

PyYAML, which every training framework here uses to load its configs, keeps the last value without a
word, and so does Python's `json`. The first value looks like it is in force but is not: a
`micro_batch_size: 2` near the top is silently replaced by a `micro_batch_size: 8` further down.
The estimate uses the value the framework uses, the last one.

Example:

    micro_batch_size: 2
    learning_rate: 2e-5
    micro_batch_size: 8      # this one wins

Fix: delete the copy you did not mean to keep.
""",
)


@RULE.check
def check(ctx):
    # The YAML/JSON composer reports each repeated key as a parse issue of the kind this rule owns.
    return ctx.issue_findings(RULE)
