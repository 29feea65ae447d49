import importlib.util

from vramlens.rules import Rule

RULE = Rule(
    id="VL008",
    name="bitsandbytes-missing",
    title="8-bit or paged optimizer without bitsandbytes installed",
    severity="warning",
    message="`{optimizer}` needs the bitsandbytes package, which is not installed in this environment; "
    "the run fails at optimizer creation (pip install bitsandbytes)",
    needs="resolution",
    fixes=(),
    why="""
Reports an 8-bit or paged optimizer (`adamw_bnb_8bit`, `paged_adamw_8bit`, `paged_adamw_32bit`,
`bitsandbytes.optim.*`) when the bitsandbytes package cannot be found in the Python environment vramlens
runs in.

The trainer imports bitsandbytes only when it builds the optimizer, after the model has loaded, so a
missing package costs the whole start-up before the run fails with an ImportError.

vramlens checks with `importlib.util.find_spec` and never imports the package. When the training
environment is another one than the editor's, declare it in the settings (`frameworkVersions:
{"bitsandbytes": "0.45"}`) and this check trusts the declaration.

Example: `optim: paged_adamw_8bit` in a fresh virtual environment with only transformers and peft.

Fix: `pip install bitsandbytes` in the training environment, or choose a torch optimizer.
""",
)


def installed(ctx) -> bool:
    if any(k.lower() == "bitsandbytes" for k in ctx.framework_versions):
        return True
    try:
        return importlib.util.find_spec("bitsandbytes") is not None
    except (ImportError, ValueError):
        return False


@RULE.check
def check(ctx):
    opt = ctx.rp.optimizer
    if opt.library != "bitsandbytes" or installed(ctx):
        return
    written = ctx.plan.optimizer.value if ctx.plan.optimizer is not None else opt.name
    yield ctx.finding(RULE, RULE.format(optimizer=written), ctx.where("optimizer"))
