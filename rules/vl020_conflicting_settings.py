from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL020",
    name="conflicting-settings",
    title="Settings the framework refuses together",
    severity="warning",
    message="{detail}",
    needs="text",
    fixes=("replace-value",),
    owns=(IssueKind.CONFLICTING_SETTINGS,),
    why="""
Reports settings that are each valid but that the training framework refuses, or reads differently,
when they are written together: axolotl's legacy `flash_attention: true` next to `attn_implementation`,
`adapter: lora` on a 4-bit model where axolotl expects `adapter: qlora`, litgpt's `quantize: bnb.*`
with a `*-mixed` precision, torchtune's `fused: True` on an optimizer class that has no such argument.

The framework stops at start-up (after the model has been downloaded and loaded, for some of these) or
trains something other than what the file appears to say; the estimate follows the reading the
message describes.

Example (axolotl):

    load_in_4bit: true
    adapter: lora          # axolotl expects `adapter: qlora` for a 4-bit base model

Fix: keep one of the settings, as the message says; where the right value is clear, a quick fix writes it.
""",
)


@RULE.check
def check(ctx):
    # The format parsers know each framework's combinations and report them as issues of the kind this rule owns.
    return ctx.issue_findings(RULE)
