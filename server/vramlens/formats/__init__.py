"""parse: text of one document → `TrainingPlan` (or None when it is not a training config).

The syntax is chosen from the file name and content (YAML/JSON, Python, shell, Markdown); for
YAML/JSON the dialect is chosen by content, since file names are arbitrary: each dialect scores
how sure it is, and the best score above `MIN_SCORE` wins. References to other files (a DeepSpeed
JSON, an accelerate config, a base config) are then followed and merged by `formats.references`.
Finally GPU hints are read from comments (`formats.hints`): a `# vramlens: gpu=... count=...`
directive in any format, and what config authors write about their hardware.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from vramlens.formats import (
    accelerate,
    custom,
    deepspeed,
    hf,
    hints,
    litgpt,
    nemo_automodel,
    neox,
    openinstruct,
    purpose,
    verl,
)
from vramlens.formats.settings import PlanBuilder, Setting
from vramlens.formats.yaml_doc import YamlError, load_yaml
from vramlens.frameworks import recognise
from vramlens.frameworks.axolotl import dialect as axolotl
from vramlens.frameworks.llamafactory import dialect as llamafactory
from vramlens.frameworks.ms_swift import dialect as ms_swift
from vramlens.frameworks.torchtune import dialect as torchtune
from vramlens.plan import IssueKind, ParseIssue, Severity, Span, TrainingPlan

MIN_SCORE = 0.5


@dataclass
class ParseContext:
    """What a parser may know besides the text."""

    path: str  # the document's path (or URI path); may not exist on disk
    workspace: Path | None = None  # workspace root, for resolving references
    read_file: Callable[[Path], str | None] | None = None  # how to read referenced files (the LSP passes open buffers)
    depth: int = 0  # reference-following depth
    text: str = ""  # the document's text (dialects read header comments)
    # the scripts this document's launch lines run, looked up and read once per parse (`references.read_launched`)
    launched: dict[str, Any] = field(default_factory=dict)
    # what the document's own `pip install` lines pin (a notebook's `!pip install` cells), for what it runs
    installs: dict[str, tuple[str, str]] = field(default_factory=dict)
    # the `frameworkVersions` setting (distribution → version): the releases the run is told it uses
    releases: Mapping[str, str] = field(default_factory=dict)


@dataclass
class YamlDialect:
    """A YAML/JSON config family: how sure it is about a document and how it fills a plan."""

    name: str  # plan.format, e.g. "axolotl"
    framework: str | None  # whose defaults apply (a key of knowledge.frameworks.DEFAULTS)
    detect: Callable[[Any, set[str]], float]
    apply: Callable[[PlanBuilder, Any, list[Setting], ParseContext], None]


def _hf_detect(data: Any, keys: set[str]) -> float:
    return hf.detect_score(keys)


def _hf_apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx: ParseContext) -> None:
    keys = {str(k) for k in data}
    if hf.looks_like_trl(keys):
        b.plan.format, b.plan.framework = "trl", "trl"
    hf.apply(b, settings)
    hf.drift_notes(b, keys)
    if b.plan.format == "hf" and b.plan.model_id is None and not keys & set(hf.MODEL_KEYS):
        pass  # TrainingArguments alone: the model is named by the script that loads this file


def _ds_apply(b: PlanBuilder, data: Any, settings: list[Setting], ctx: ParseContext) -> None:
    deepspeed.apply(b, settings)
    if b.plan.dist_strategy is None and data.get("zero_optimization") is not None:
        b.set("dist_strategy", "deepspeed")


# Registered YAML/JSON dialects, most specific first (ties go to the earlier entry).
YAML_DIALECTS: list[YamlDialect] = [
    YamlDialect("torchtune", "torchtune", torchtune.detect, torchtune.apply),
    YamlDialect("verl", "verl", verl.detect, verl.apply),
    YamlDialect("gpt-neox", "custom", neox.detect, neox.apply),
    YamlDialect("nemo-automodel", "transformers", nemo_automodel.detect, nemo_automodel.apply),
    YamlDialect("accelerate", "transformers", accelerate.detect, accelerate.apply),
    YamlDialect("ms-swift", "ms-swift", ms_swift.detect, ms_swift.apply),
    YamlDialect("llamafactory", "llamafactory", llamafactory.detect, llamafactory.apply),
    YamlDialect("llamafactory-v1", "llamafactory", llamafactory.detect_v1, llamafactory.apply_v1),
    YamlDialect("axolotl", "axolotl", axolotl.detect, axolotl.apply),
    YamlDialect("axolotl-cloud", "axolotl", axolotl.detect_cloud, axolotl.apply_cloud),
    YamlDialect("litgpt", "litgpt", litgpt.detect, litgpt.apply),
    YamlDialect("deepspeed", "deepspeed", lambda d, k: deepspeed.detect_score(k), _ds_apply),
    YamlDialect("open-instruct", "open-instruct", openinstruct.detect, openinstruct.apply),
    YamlDialect("hf", "transformers", _hf_detect, _hf_apply),
    YamlDialect("custom", "custom", custom.detect, custom.apply),
]

# Other syntaxes: suffix → parser(text, ctx) -> TrainingPlan | None (Python, shell, Markdown register here).
TEXT_PARSERS: dict[str, Callable[[str, ParseContext], TrainingPlan | None]] = {}

YAML_SUFFIXES = {".yaml", ".yml", ".json", ".jsonc", ""}
# suffixes that are certainly not YAML/JSON configs when no reader is registered for them
NOT_YAML_SUFFIXES = {".py", ".sh", ".bash", ".md", ".markdown", ".txt", ".rst", ".ipynb", ".toml", ".cfg", ".ini"}


@dataclass
class ParseResult:
    plan: TrainingPlan | None
    issues: list[ParseIssue] = field(default_factory=list)  # problems that stopped parsing (syntax errors)


def parse_document(
    text: str,
    path: str,
    workspace: Path | None = None,
    read_file: Callable[[Path], str | None] | None = None,
    releases: Mapping[str, str] | None = None,
) -> ParseResult:
    """Parse one document. `plan` is None when the text is not a training config (or cannot be read).
    `releases`: the `frameworkVersions` setting, the framework releases whose arguments the file is read against."""
    text = _encodable(text)
    ctx = ParseContext(path=path, workspace=workspace, read_file=read_file, text=text, releases=dict(releases or {}))
    suffix = Path(path).suffix.lower()
    parser = TEXT_PARSERS.get(suffix)
    if parser is None and (suffix not in YAML_SUFFIXES or text.startswith("#!")):
        parser = _parser_by_content(text)
        if parser is None and suffix in NOT_YAML_SUFFIXES:
            return ParseResult(None)
    if parser is not None:
        plan = parser(text, ctx)
        if plan is not None and plan.purpose is not None:
            return not_training(plan.purpose.value, ctx.path, plan.purpose.span)
        if plan is not None:
            hints.apply_hints(PlanBuilder.wrap(plan), text)
        return ParseResult(plan)
    result = parse_yaml_text(text, ctx)
    if result.issues and suffix not in YAML_SUFFIXES:
        return ParseResult(None)  # an unknown kind of file that is not YAML either: not a config
    return result


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(text: str) -> str:
    """Lone surrogates (a client may send them as JSON escapes) cannot be encoded as UTF-8, which the YAML
    and Python parsers do first: each becomes U+FFFD, one character for one, so positions do not move."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


def _parser_by_content(text: str):
    head = text[:200]
    first = head.split("\n", 1)[0]
    if head.startswith("#!") and "python" in first:
        return TEXT_PARSERS.get(".py")
    if head.startswith("#!") and "sh" in first:
        return TEXT_PARSERS.get(".sh")
    return None


def best_dialect(data: Any, keys: set[str]) -> YamlDialect | None:
    """The dialect most sure about this mapping, or None when none reaches MIN_SCORE."""
    best, best_score = None, 0.0
    for dialect in YAML_DIALECTS:
        score = dialect.detect(data, keys)
        if score > best_score:
            best, best_score = dialect, score
            if score >= 1.0:  # certain: later (less specific) dialects cannot win a tie
                break
    return best if best is not None and best_score >= MIN_SCORE else None


_TOP_KEY = re.compile(r"^([A-Za-z_][\w.-]*)[ \t]*:", re.MULTILINE)


def looks_like_training_config(text: str) -> bool:
    """Whether YAML text that does not load reads like a training config: its top-level keys (found line by line,
    without loading) are enough for one of the dialects. `vramlens check` reports such a file (VL016) instead of
    passing over it as "not a config"."""
    keys = {m[1] for m in _TOP_KEY.finditer(text[: 1 << 16])}
    return bool(keys) and best_dialect(dict.fromkeys(keys), keys) is not None


def parse_yaml_text(text: str, ctx: ParseContext) -> ParseResult:
    load_issues: list[ParseIssue] = []
    try:
        data, settings = load_yaml(text, ctx.path, load_issues)
    except YamlError as exc:
        return ParseResult(
            None, [ParseIssue(kind=IssueKind.UNREADABLE, message=str(exc), span=exc.span, severity=Severity.ERROR)]
        )
    if not isinstance(data, dict):
        return ParseResult(None)
    if not ctx.text:
        ctx.text = text
    keys = {str(k) for k in data}
    best = best_dialect(data, keys)
    if (what := purpose.config_purpose(best.name if best else None, keys, data)) is not None:
        return not_training(what, ctx.path)
    if best is None:
        return ParseResult(None)
    builder = PlanBuilder(ctx.path, best.name, best.framework)
    builder.plan.issues.extend(load_issues)
    hints.apply_directive(builder, text)
    best.apply(builder, data, settings, ctx)
    _objective(builder, best.name, data, settings, ctx)
    recognise.apply(builder, settings, ctx.workspace, told=ctx.releases)
    from vramlens.formats.references import follow_references

    follow_references(builder, ctx)
    _prequantized(builder)
    hints.apply_comment_hints(builder, text)
    return ParseResult(builder.plan)


def _objective(b: PlanBuilder, dialect: str, data: dict, settings: list[Setting], ctx: ParseContext) -> None:
    """What the run optimises, in the dialect's spelling (formats.objective)."""
    from vramlens.formats import objective

    top = objective.by_key(settings)
    if dialect in ("llamafactory", "llamafactory-v1"):
        objective.apply_llamafactory(b, top)
    elif dialect in ("axolotl", "axolotl-cloud"):
        objective.apply_axolotl(b, top, settings)
    elif dialect == "hf":
        objective.guess_hf_yaml(b, {str(k) for k in data}, ctx.path)
    objective.finish(b, ctx.path)


def _prequantized(b: PlanBuilder) -> None:
    """A pre-quantized checkpoint (`...-GPTQ`, `...-AWQ`, `...-bnb-4bit`) loads in 4 bits with no key saying so."""
    plan = b.plan
    if plan.model_id is None or plan.quant_bits is not None:
        return
    found = hf.prequantized(plan.model_id.value)
    if found is None:
        return
    from vramlens.plan import Origin

    bits, method = found
    where = plan.model_id
    note = f"`{where.value}` is a pre-quantized ({method}) checkpoint"
    b.plan.quant_bits = where.model_copy(update={"value": bits, "origin": Origin.DERIVED, "note": note})
    b.plan.quant_type = where.model_copy(update={"value": method, "origin": Origin.DERIVED, "note": note})


def not_training(what: str, path: str, span: Span | None = None) -> ParseResult:
    """No plan for a file that is not a training run (`formats.purpose`), with the note saying what it is."""
    return ParseResult(
        None,
        [
            ParseIssue(
                kind=IssueKind.NOT_TRAINING,
                message=f"{what}: not a training run, so no memory estimate",
                span=span or span_of_file_start(path),
                severity=Severity.INFO,
            )
        ],
    )


def parse_file(path: str | Path, workspace: Path | None = None) -> ParseResult:
    p = Path(path)
    text = p.read_text(encoding="utf-8", errors="replace")
    return parse_document(text, str(p), workspace=workspace)


def span_of_file_start(path: str) -> Span:
    return Span(file=path, start_line=0, start_col=0, end_line=0, end_col=0)


# Python, shell and Markdown readers (imported last: they call parse_document for referenced configs).
from vramlens.formats import markdown, notebook, python_calls, shell, torchtitan, torchtitan_python  # noqa: E402


def _parse_python(text: str, ctx: ParseContext) -> TrainingPlan | None:
    """A torchtitan config registry (`Trainer.Config` functions), else a Python training script."""
    return torchtitan_python.parse_python(text, ctx) or python_calls.parse_python(text, ctx)


TEXT_PARSERS[".py"] = _parse_python
TEXT_PARSERS[".sh"] = TEXT_PARSERS[".bash"] = shell.parse_shell
# MDX (Markdown with components) keeps Markdown's fenced blocks: Hugging Face docs pages, e.g. TRL v0.12's
# docs/source/sft_trainer.mdx
TEXT_PARSERS[".md"] = TEXT_PARSERS[".markdown"] = TEXT_PARSERS[".mdx"] = markdown.parse_markdown
TEXT_PARSERS[".ipynb"] = notebook.parse_notebook
TEXT_PARSERS[".toml"] = torchtitan.parse_toml
