from vramlens.fixes import replacement
from vramlens.rules import Rule

RULE = Rule(
    id="VL017",
    name="unknown-model-or-gpu",
    title="Model or GPU unknown: no estimate",
    severity="information",
    message="No memory estimate: {detail}",
    needs="plan",
    fixes=("replace-value",),
    why="""
Reports a config for which vramlens cannot estimate memory because it does not know the model or the
GPU: the model is not in the built-in catalog, not a local folder with a `config.json`, not in the local
Hugging Face cache, and its `config.json` could not be fetched from the Hub (lookup turned off with
`model_lookup = false` / `--offline` / `HF_HUB_OFFLINE=1`, a gated or private repository without a token that
has access, no connection); or the GPU name (from the settings or the config) is not in the GPU catalog.
While the editor is still asking the Hub, this says so, and the estimate follows when the answer arrives.

This is information, not a problem with the config: the run itself may be fine.

Example: `model_name_or_path: my-org/private-model-13b` with no Hugging Face token that can read it.

Fix: log in (`huggingface-cli login`) or set HF_TOKEN for a gated or private model, point the config at a
local copy of the model (a folder with `config.json`), or pick a GPU from the list (`vramlens.listGpus` in
the editor). When a close name exists, a quick fix replaces it.
""",
)


@RULE.check
def check(ctx):
    err = ctx.resolve_error
    if err is None:
        return
    concept = getattr(err, "concept", None) or "model_id"
    span = ctx.span_of(concept) or ctx.anchor
    suggestion = err.suggestion
    if isinstance(suggestion, (list, tuple)):
        suggestion = suggestion[0] if suggestion else None
    fixes = None
    sourced = getattr(ctx.plan, concept, None)
    if suggestion and sourced is not None and isinstance(sourced.value, str):
        where = ctx.locate_in(ctx.span_of(concept, value=True), sourced.value)
        if where is not None:
            fixes = [replacement(where, suggestion, f"Replace with `{suggestion}`")]
    yield ctx.finding(RULE, RULE.format(detail=str(err)), span, fixes=fixes)
