from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL016",
    name="unreadable-config",
    title="Config could not be read",
    severity="error",
    message="{detail}",
    needs="text",
    owns=(IssueKind.UNREADABLE,),
    fixes=(),
    why="""
Reports a config file that cannot be read at all: a YAML or JSON syntax error, a document too large or
too deeply nested to be a training config, text that is not valid in its format.

The framework's own loader fails on the same text, so the run would not start; and without a readable
config vramlens can estimate nothing for it.

Example: a tab used for indentation in YAML, or a missing comma in a DeepSpeed JSON.

Fix: correct the syntax at the reported position.
""",
)


@RULE.check
def check(ctx):
    # The YAML/JSON loader reports these as parse issues of the kind this rule owns.
    return ctx.issue_findings(RULE)
