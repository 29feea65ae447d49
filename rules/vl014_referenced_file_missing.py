from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL014",
    name="referenced-file-missing",
    title="Referenced file missing or unreadable",
    severity="error",
    message="{detail}",
    needs="text",
    owns=(IssueKind.REFERENCE,),
    fixes=(),
    why="""
Reports a file the config points at that cannot be found or read: a DeepSpeed JSON (`deepspeed:
ds_config.json`), an accelerate config, a base config it inherits from.

The trainer opens these files at start-up and stops when one is missing; when it is found but cannot
be parsed, the run stops the same way. The estimate also misses what the file would have said (ZeRO
stage, offloading, batch sizes), so it may be far off.

Paths are looked up relative to the config's own folder and then the workspace root, the folder most
launchers are started from.

Example: `deepspeed: configs/zero3.json` in a repository whose file is `configs/ds_zero3.json`.

Fix: correct the path, or add the file.
""",
)


@RULE.check
def check(ctx):
    # Reference following (formats.references) reports these as parse issues of the kind this rule owns.
    return ctx.issue_findings(RULE)
