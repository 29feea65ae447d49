from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL021",
    name="setting-not-read",
    title="Setting not read",
    severity="information",
    message="{detail}",
    needs="text",
    owns=(IssueKind.NOT_READ,),
    why="""
Reports settings in the file that do not reach the estimate, or do not reach the training run: a value
computed when a script runs (`--per_device_train_batch_size $BS`, `batch_size=args.bs`), settings passed
through `**kwargs`, a config named by URL (vramlens never downloads), a config packaged inside an
installed framework, a key under its old name that current versions ignore, flags after a `#` comment
that bash never passes to the training command, an axolotl key that neither axolotl nor a plugin it
ships defines (its config model drops it), a plugin's key whose plugin `plugins:` does not list.

vramlens opens files without running them, so a value that only exists at run time is unknown to it;
the estimate uses the framework's default instead and lists it among its assumptions. A key the
framework ignores, or flags bash drops, change nothing in the run either, which is rarely what was meant.

Example:

    torchrun train.py --per_device_train_batch_size $BATCH   # $BATCH is set by the caller

Fix: write the value into the file, or add `# vramlens: ignore[VL021]` when the default shown is the
one you want to judge the config by; rename an old key to its current name; move a comment off the
command's continuation lines.
""",
)


@RULE.check
def check(ctx):
    # The parsers report what they could not read as parse issues of the kind this rule owns.
    return ctx.issue_findings(RULE)
