from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL015",
    name="unknown-value",
    title="Unknown or invalid value",
    severity="warning",
    message="{detail}",
    needs="text",
    fixes=("replace-value",),
    owns=(IssueKind.UNKNOWN_VALUE, IssueKind.INVALID_VALUE),
    why="""
Reports a setting whose value vramlens does not recognise or cannot use, as the config's parser found
it: an optimizer name that is not in the catalog, a dtype or attention implementation that does not
exist, a batch size that is not a whole number. When a known value is close, the message says which, \
and a quick fix replaces it.

The training frameworks reject most of these at start-up ("`adamw_8bt` is not a valid OptimizerNames"),
some only after the model has loaded; others accept a typo and fall back to a default that costs memory.
Either way the estimate has to assume something, and says what.

Example: `optim: adamw_bnb_8bt` → did you mean `adamw_bnb_8bit`?

Fix: use one of the accepted values; the quick fix applies the suggestion.
""",
)


@RULE.check
def check(ctx):
    # Parsers report these as parse issues of the kinds this rule owns, with the suggestion when one is close.
    return ctx.issue_findings(RULE)
