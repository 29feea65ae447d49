from vramlens.plan import IssueKind
from vramlens.rules import Rule

RULE = Rule(
    id="VL018",
    name="not-a-training-run",
    title="Not a training run: no estimate",
    severity="information",
    message="{detail}",
    needs="text",
    owns=(IssueKind.NOT_TRAINING,),
    fixes=(),
    why="""
Reports a config or script that names a model but does not train it: an inference, generation or chat
config, an evaluation, a merge or export (LoRA merge, quantization, mergekit), or a helper script that
prepares a model (LLaMA-Factory's `llama_pro.py`, `pissa_init.py`). No training step runs, so vramlens
estimates nothing for it and reports no out-of-memory finding.

This is information, not a problem with the file.

Example: a LLaMA-Factory `examples/merge_lora/llama3_lora_sft.yaml` (`export_dir`, `adapter_name_or_path`), a
torchtune `generation.yaml` (`prompt`, `max_new_tokens`, no optimizer), or `llamafactory-cli export merge.yaml`.

Fix: none needed. If the file does train, it lacks what a training config has (an optimizer or loss in
torchtune, `do_train`/`stage` in LLaMA-Factory) or its script's name says otherwise; open an issue with it.
""",
)


@RULE.check
def check(ctx):
    # The parsers report these as parse issues of the kind this rule owns (formats.purpose).
    return ctx.issue_findings(RULE)
