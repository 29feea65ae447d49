from vramlens.rules import Rule

RULE = Rule(
    id="VL025",
    name="remote-code-not-trusted",
    title="The model needs its own code, which the run does not trust",
    severity="error",
    message="{model} is defined by its checkpoint's own code ({cls}, its config.json's auto_map) and transformers "
    "ships no class for `{family}`: {why}, so loading stops — set `trust_remote_code: true` if you trust that code",
    needs="resolution",
    why="""
Reports a run whose model transformers cannot build by itself: the checkpoint's config.json names its own
modeling code in `auto_map` (InternLM2, older ChatGLM, Baichuan, MiniCPM and other models written for
`trust_remote_code`), transformers ships no class for its `model_type`, and the run does not pass
`trust_remote_code=True`. transformers then refuses to load it ("… contains custom code which must be
executed to correctly load the model"; `resolve_trust_remote_code` in transformers'
dynamic_module_utils.py) before the first step.

Where the framework decides without the config: TRL, LLaMA-Factory, axolotl and verl default to false;
ms-swift and OpenRLHF pass `trust_remote_code=True` themselves and are never reported.

Example (TRL):

    model_name_or_path: internlm/internlm2_5-7b-chat
    # trust_remote_code is false by default: loading stops

Fix: set `trust_remote_code: true` (`--trust_remote_code` on a command line) once you have read the
repository's modeling code — it runs with your permissions. With it, every view says the estimate sizes
transformers-style layers for that code.
""",
)


@RULE.check
def check(ctx):
    rp = ctx.rp
    if rp is None or rp.remote_code != "refused":
        return
    said = ctx.source("trust_remote_code")
    written = ctx.span_of("trust_remote_code")
    if written is not None:
        why = f"`{said.key if said is not None and said.key else 'trust_remote_code'}` is false"
    else:
        whose = said.framework if said is not None and said.framework else "the framework"
        why = f"`trust_remote_code` is not set, and {whose} defaults it to false"
    model = ctx.plan.model_id.value if ctx.plan is not None and ctx.plan.model_id is not None else "the model"
    message = RULE.format(model=f"`{model}`", cls=rp.arch.remote_code, family=rp.arch.family, why=why)
    yield ctx.finding(RULE, message, written or ctx.anchor)
