from vramlens.rules import Rule

RULE = Rule(
    id="VL005",
    name="bf16-unsupported",
    title="bf16 on a GPU without bf16 support",
    severity="error",
    message="{what} bf16, but {gpu} has no bf16 support (compute capability {cc}); {advice}",
    needs="resolution",
    fixes=("set-value",),
    why="""
Reports bf16 training, bf16 weights or a bf16 compute dtype of 4-bit layers
(`BitsAndBytesConfig(bnb_4bit_compute_dtype=torch.bfloat16)`) on a GPU that cannot compute in bfloat16
(NVIDIA before Ampere: T4, V100, P100, RTX 20xx; compute capability below 8.0).

PyTorch 2.3 and later count emulated bf16 as supported (`torch.cuda.is_bf16_supported()` creates a bf16
tensor when the compute capability is below 8.0), so transformers accepts `bf16=True` there and the run
computes bf16 in fp32 arithmetic without tensor cores: several times slower than fp16. Older versions
refuse it ("Your setup doesn't support bf16/gpu"). vramlens estimates the speed of such a run at the GPU's
fp32 rate.

Example: `bf16: true` in a config launched on a Colab T4.

Fix: use fp16 throughout (`fp16: true`; fp16 weights and `bnb_4bit_compute_dtype=torch.float16` where the
file sets them to bf16): the fix changes every bf16 setting of the file at once and its title gives the
speed the run gains. Or pick a GPU with bf16 (A10G, A100, L4, H100, RTX 30xx/40xx). `bf16: auto` is not
reported: it falls back by itself.
""",
)

# (concept, what the message says, advice, the fix's label); the fix sets every one the file writes as bf16
_CONCEPTS = (
    ("amp_dtype", "Mixed precision is set to", "use fp16 mixed precision", "fp16 mixed precision"),
    ("weight_dtype", "Weights are loaded in", "load them in fp16 (or fp32 for fp16 mixed precision)", "fp16 weights"),
    (
        "quant_compute_dtype",
        "The 4-bit layers compute in",
        "set `bnb_4bit_compute_dtype` to float16",
        "fp16 compute in the 4-bit layers",
    ),
)


def _is_auto(ctx, sourced) -> bool:
    if sourced.value_span is None or not ctx.in_document(sourced.value_span):
        return False
    s = sourced.value_span
    lines = ctx.text.splitlines()
    if s.start_line >= len(lines) or s.start_line != s.end_line:
        return False
    return lines[s.start_line][s.start_col : s.end_col].strip("'\" ").lower() == "auto"


def _bf16_in_document(ctx, concept: str) -> bool:
    sourced = getattr(ctx.plan, concept)
    if sourced is None or sourced.value != "bf16" or _is_auto(ctx, sourced) or ctx.span_of(concept) is None:
        return False
    # the 4-bit compute dtype only where the file writes it (a launcher that implies it offers no key to change)
    return concept != "quant_compute_dtype" or "compute_dtype" in str(sourced.key or "")


@RULE.check
def check(ctx):
    gpu = ctx.rp.gpu
    if gpu.bf16:
        return
    fixer = ctx.fixer
    found = [c for c in _CONCEPTS if _bf16_in_document(ctx, c[0])]
    # one change for all of them: a partial switch (fp16 autocast over bf16 weights, or bf16 4-bit layers under
    # fp16) leaves part of the step in emulated bf16, so its speed would not be what the title says
    changes = {concept: "fp16" for concept, *_ in found}
    label = "use " + (found[0][3] if len(found) == 1 else "fp16 throughout: " + ", ".join(c[3] for c in found))
    for concept, what, advice, _ in found:
        message = RULE.format(what=what, gpu=gpu.name, cc=gpu.compute_capability or "below 8.0", advice=advice)
        yield ctx.finding(
            RULE,
            message,
            ctx.span_of(concept),
            fixes=(lambda: [fixer.make("set-value", label, changes)]) if fixer else None,
        )
