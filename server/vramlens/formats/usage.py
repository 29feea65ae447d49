"""Usage commands for a script whose settings come from its command line (TRL's `examples/scripts/*.py`,
`HfArgumentParser`/`TrlParser`/argparse scripts): the command in the module docstring, else in a README next
to the script, is read as the script's command line.

Only lines that start a command (`python …`, `accelerate launch …`, `torchrun …`, `deepspeed …`, `trl …`,
`VAR=value …`, optionally after a `$ ` prompt) and their `\\` continuations are read, by `formats.shell`, at
their own lines of the file, so a value keeps its range and an apostrophe in the prose cannot swallow the rest.
The first command that runs this script (same file name) wins; the assumptions say where the values came
from and how many other examples there were. Values the script sets in code win over the command line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

from vramlens.plan import IssueKind, Reference, Severity, Span, TrainingPlan
from vramlens.text import text_lines

_PARSERS = re.compile(
    r"\b(?:HfArgumentParser|TrlParser|ArgumentParser|parse_args|parse_args_into_dataclasses|"
    r"parse_args_and_config|fire\.Fire|tyro\.cli|jsonargparse|CLI\()"
)
_START = re.compile(
    r"[ \t]*(?:\$[ \t]+)?(?=(?:[A-Z_][A-Z0-9_]*=\S*[ \t]+)*"
    r"(?:python[0-9.]*|accelerate|torchrun|deepspeed|trl|uv|CUDA_VISIBLE_DEVICES=))"
)
_PARSER_CALL = re.compile(r"\b(?:HfArgumentParser|TrlParser|ArgumentParser)\s*\(|\.parse_args\w*\s*\(")
MAX_README_CHARS = 500_000


def wants_command_line(plan: TrainingPlan, text: str) -> bool:
    """The script trains but takes its model from the command line: it parses arguments and names no model."""
    return plan.model_id is None and bool(_PARSERS.search(text))


def command_view(lines: list[str], first: int, last: int) -> str:
    """The command lines among lines[first:last] (with their continuations), every other line blank."""
    out = [""] * len(lines)
    cont = False
    for i in range(first, min(last, len(lines))):
        line = lines[i]
        m = _START.match(line)
        if cont or m:
            if m and not cont:
                prompt = line[: m.end()]
                line = " " * len(prompt) + line[m.end() :]
            nxt = lines[i + 1] if i + 1 < min(last, len(lines)) else ""
            if not line.rstrip().endswith("\\") and nxt[:1] in (" ", "\t") and nxt.lstrip().startswith("--"):
                # a usage example whose first line lacks its `\\` (TRL v0.19.1 examples/scripts/sft_vlm.py:
                # `accelerate launch` then indented `--config_file=… \\` lines): read as the one command it shows
                line = line.rstrip() + " \\"
            out[i] = line
            cont = line.rstrip().endswith("\\")
    return "\n".join(out)


def _docstring_range(tree: ast.Module) -> tuple[int, int] | None:
    """0-based [first, last) lines of the module docstring's text."""
    if not tree.body:
        return None
    node = tree.body[0]
    if (
        type(node) is ast.Expr
        and type(node.value) is ast.Constant
        and isinstance(node.value.value, str)
        and node.end_lineno is not None
    ):  # ast.parse sets it on every node
        return node.lineno - 1, node.end_lineno
    return None


def _string_ranges(tree: ast.Module) -> list[tuple[int, int]]:
    """0-based [first, last) lines of the module docstring, then of every other string statement at module level:
    TRL puts some scripts' usage in a bare string after the imports (examples/scripts/ppo/ppo.py and rloo/rloo.py at
    TRL v0.12–v0.19)."""
    out = []
    first = _docstring_range(tree)
    if first is not None:
        out.append(first)
    for node in tree.body[1:]:
        if (
            type(node) is ast.Expr
            and type(node.value) is ast.Constant
            and isinstance(node.value.value, str)
            and node.end_lineno is not None
        ):
            out.append((node.lineno - 1, node.end_lineno))
    return out


def _runs_this_script(script_arg: str | None, name: str) -> bool:
    return bool(script_arg and PurePosixPath(script_arg.strip("'\"")).name == name)


def _first_command(view: str, path: str, script_name: str):
    """The first training command of a view that runs the script, and how many commands there are."""
    from vramlens.formats import shell

    # shell.analyze keeps the first launch; further examples are found by blanking the ones before
    found, count = None, 0
    remaining = view.split("\n")
    while True:
        # a `python` command that runs this very script (which trains: it has a plan) is a launch with any flags
        script, issues = shell.analyze("\n".join(remaining), path, trains=lambda s: _runs_this_script(s, script_name))
        launch = script.launch
        if launch is None:
            break
        count += 1
        if found is None and _runs_this_script(launch.script.text if launch.script else None, script_name):
            found = (script, issues)
        start, _ = script.index.pos(launch.command.start)
        end, _ = script.index.pos(launch.command.end)
        for i in range(start, min(end + 1, len(remaining))):
            remaining[i] = ""
        if count > 20:
            break
    return (found, count) if found is not None else None


def from_docstring(plan: TrainingPlan, text: str, tree: ast.Module, ctx) -> TrainingPlan | None:
    """The script's plan with the command line of its docstring's usage example (or its README's) merged
    under it; None when there is none to read."""
    if not wants_command_line(plan, text):
        return None
    name = Path(ctx.path).name
    lines = text_lines(text)  # the lines spans count (a lone \r breaks a line, as in the editor and in ast)
    for where in _string_ranges(tree):
        view = command_view(lines, *where)
        if view.strip():
            got = _first_command(view, ctx.path, name)
            if got is not None:
                (script, issues), count = got
                line = script.index.pos(script.launch.command.start)[0] + 1
                more = f"; {count - 1} other example(s) there" if count > 1 else ""
                what = "module docstring" if where == _docstring_range(tree) else "string at module level"
                return _merge(
                    plan,
                    script,
                    issues,
                    ctx,
                    f"the command line is the usage example in the {what} (line {line}){more}",
                )
    return from_readme(plan, text, ctx, name)


def from_readme(plan: TrainingPlan, text: str, ctx, name: str) -> TrainingPlan | None:
    """The first command in a README next to the script that runs it."""
    from vramlens.formats import markdown, references

    folder = Path(ctx.path).parent
    for readme in ("README.md", "readme.md", "README.MD"):
        candidate = folder / readme
        found, _refused = references.find(str(candidate.name), ctx.path, ctx.workspace)
        if found is None or found.parent.resolve() != folder.resolve():
            continue  # only a README beside the script, not the workspace's
        body = references._read(found, ctx)
        if not body or len(body) > MAX_README_CHARS:
            continue
        lines = body.split("\n")
        for block in markdown.shell_blocks(lines):
            view = markdown.block_view(lines, block)
            head = "\n" * block.first_line
            view = command_view((head + view).split("\n"), block.first_line, block.end_line)
            got = _first_command(view, str(found), name)
            if got is not None:
                (script, issues), count = got
                line = script.index.pos(script.launch.command.start)[0] + 1
                merged = _merge(
                    plan,
                    script,
                    issues,
                    ctx,
                    f"the command line is the usage example in {found.name} next to the script (line {line})",
                )
                # findings about README values are shown on the line where the script parses its arguments
                here = _parser_span(text, ctx.path)
                merged.references.append(
                    Reference(kind="usage", target=found.name, resolved_path=str(found), span=here)
                )
                if merged.model_span_hint is None or merged.model_span_hint.file != ctx.path:
                    merged.model_span_hint = here
                return merged
        break
    return None


_UNKNOWN = re.compile(r"`(\w+)` is only known when the script runs \((?:[\w.]*\.)?(\w+)\)")


def _answered(message: str, flags: set[str]) -> bool:
    """An "only known at run time" note about a value the command line gives (`model_args.model_name_or_path`)."""
    m = _UNKNOWN.match(message)
    return m is not None and (m.group(1) in flags or m.group(2) in flags)


# TRL's model arguments: `ModelConfig.model_name_or_path` (trl/trainer/model_config.py, v0.12 to main), parsed by
# `TrlParser((ScriptArguments, <Method>Config, ModelConfig))` in trl/scripts/*.py and examples/scripts/*.py
_TRL_MODEL_CONFIG = re.compile(r"\bModelConfig\b")


def name_command_line_model(plan: TrainingPlan, text: str, path: str) -> None:
    """A script that parses its command line and loads its model from a parsed field (`model_args.
    model_name_or_path`) but shows no usage example to read: its "only known when the script runs" note about the
    model says which command-line argument names the model (`--model_name_or_path`, TRL's `ModelConfig`)."""
    if not _PARSER_CALL.search(text):
        return
    for issue in plan.issues:
        m = _UNKNOWN.match(issue.message)
        if m is None or m.group(1) not in ("model", "from_pretrained", "model_name_or_path"):
            continue
        field = m.group(2)
        if not re.search(rf"\b\w+\.{re.escape(field)}\b", text):
            return
        owner = ", TRL's `ModelConfig`" if field == "model_name_or_path" and _TRL_MODEL_CONFIG.search(text) else ""
        issue.message = (
            f"`model` is a command-line argument of this script (`--{field}`{owner}), only known when it runs; "
            f"no usage example of it is read; it is not read"
        )
        return


def _parser_span(text: str, path: str) -> Span:
    """The line where the script parses its command line (the first parser call)."""
    for i, line in enumerate(text.split("\n")):
        m = _PARSER_CALL.search(line)
        if m:
            return Span(file=path, start_line=i, start_col=m.start(), end_line=i, end_col=len(line.rstrip()))
    return Span(file=path, start_line=0, start_col=0, end_line=0, end_col=0)


def _merge(plan: TrainingPlan, script, issues, ctx, note: str) -> TrainingPlan:
    from vramlens.formats import shell
    from vramlens.formats.settings import PlanBuilder

    b = PlanBuilder(script.index.file, "shell", None)
    b.plan.issues.extend(issues)
    shell.build_plan(b, script, ctx)
    cli = b.plan
    for issue in cli.issues:
        if issue.kind is IssueKind.REFERENCE:  # a file the example names is not here: not this run's launcher
            issue.message = (
                f"{issue.message}; the usage example is read without it, so what it sets (ZeRO stage, "
                f"process count) is not in the estimate"
            )
            issue.kind, issue.severity = IssueKind.NOT_READ, Severity.INFO
    # an argument the command line gives is no longer "only known when the script runs"
    flags = {shell._norm(n) for n, _, _ in script.flag_args}
    plan.issues = [i for i in plan.issues if not _answered(i.message, flags)]
    shell.merge_under(plan, cli, take_framework=plan.framework in (None, "transformers", "custom"))
    plan.read_notes.append(note)
    return plan
