from vramlens.resolved import unmodelled_text
from vramlens.rules import Rule

RULE = Rule(
    id="VL024",
    name="not-modelled",
    title="Setting not modelled by the estimate",
    severity="warning",
    message="{detail}",
    needs="plan",
    why="""
Reports a setting that vramlens reads, that changes the memory or the speed of the run, and that the
estimate does not model: a LISA or GaLore switch of a framework whose variant vramlens has no formula
for, an optimizer offload it does not size, a kernel library that replaces whole layers. The estimate
goes on as the message says ("estimated as full AdamW"), so its figure is approximate: every view then
marks the peak as approximate and lists the reason (`vramlens estimate`, `--format json`
`"unmodelled"` and `"approximate_reasons"`, `vramlens check`'s summary, the hover and the code lens).

Example (transformers TrainingArguments):

    model_name_or_path: meta-llama/Llama-3.1-8B
    use_liger_kernel: true      # not modelled: use_liger_kernel (Liger kernels) — estimated without them

Fix: none in the file; read the estimate as an approximation, or measure the run with `vramlens trace`
or `vramlens probe`.
""",
)


@RULE.check
def check(ctx):
    for u in ctx.plan.unmodelled:
        yield ctx.finding(RULE, RULE.format(detail=unmodelled_text(u)), u.span or ctx.anchor)
