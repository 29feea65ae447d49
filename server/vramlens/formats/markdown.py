"""README launch commands: fenced shell code blocks in Markdown (```bash, ```sh, ```shell, ```console).

Each block is read by `formats.shell` on a copy of its lines in which `$ ` prompts become spaces and
console output lines (no prompt, not a continuation) are blank, told the block's first line, so line
and column numbers stay the Markdown file's own.

Which block: the first one that contains a training command. Blocks are read independently
(variables or exports from an earlier block do not carry over), because a README usually shows
alternatives — a single-GPU and a multi-GPU command, say — and merging them would describe a run
nobody launches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vramlens.formats import shell
from vramlens.formats.settings import PlanBuilder
from vramlens.plan import TrainingPlan
from vramlens.text import text_lines

SHELL_INFOS = frozenset(
    {
        "bash",
        "sh",
        "shell",
        "console",
        "zsh",
        "shell-session",
        "shellsession",
        "sh-session",
        "bash-session",
        "terminal",
        "shellscript",
    }
)
CONSOLE_INFOS = frozenset({"console", "shell-session", "shellsession", "sh-session", "bash-session", "terminal"})
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([^\s`{]*)")
_PROMPT = re.compile(r"([ \t]*)([$%])( |$)")
_PS2 = re.compile(r"([ \t]*)(>)( |$)")


@dataclass
class Block:
    first_line: int  # 0-based line of the first content line
    end_line: int  # exclusive
    info: str
    console: bool  # lines carry `$ ` prompts
    indent: str  # indentation of the fence


def shell_blocks(lines: list[str]) -> list[Block]:
    """Fenced code blocks whose info string names a shell."""
    out: list[Block] = []
    i, n = 0, len(lines)
    while i < n:
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).lower()
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        j = i + 1
        while j < n:
            s = lines[j].strip()
            if s.startswith(fence[0] * len(fence)) and not s.strip(fence[0]):
                break
            j += 1
        if info in SHELL_INFOS:
            body = lines[i + 1 : j]
            prompted = any(_PROMPT.match(line) for line in body)
            out.append(Block(i + 1, j, info, info in CONSOLE_INFOS or prompted, indent))
        i = j + 1
    return out


def block_view(lines: list[str], block: Block) -> str:
    """The block's lines with only its commands left (prompts become spaces, output lines blank)."""
    out: list[str] = []
    continued = False
    for line in lines[block.first_line : block.end_line]:
        if not block.console:
            out.append(line)
            continue
        m = _PROMPT.match(line)
        if m and not continued:
            line = m.group(1) + " " + line[m.end(2) :]
        elif continued:
            m2 = _PS2.match(line)
            if m2:
                line = m2.group(1) + " " + line[m2.end(2) :]
        else:
            out.append("")
            continue
        out.append(line)
        continued = line.rstrip().endswith("\\")
    return "\n".join(out)


def training_block(text: str, path: str) -> tuple[Block, str, shell.ShellScript, list] | None:
    """The first block with a training command: (block, its view, the analysed script, issues)."""
    lines = text_lines(text)  # the lines spans count (a lone \r breaks a line, as in the editor)
    for block in shell_blocks(lines):
        view = block_view(lines, block)
        script, issues = shell.analyze(view, path, first_line=block.first_line)
        if script.launch is not None:
            return block, view, script, issues
    return None


def parse_markdown(text: str, ctx) -> TrainingPlan | None:
    """`formats.TEXT_PARSERS` entry for .md files."""
    if len(text) > shell.MAX_SHELL_CHARS or "```" not in text and "~~~" not in text:
        return None
    found = training_block(text, ctx.path)
    plan = None
    if found is not None:
        _block, _view, script, issues = found
        b = PlanBuilder(ctx.path, "markdown", None)
        b.plan.issues.extend(issues)
        shell.build_plan(b, script, ctx)
        b.plan.format = "markdown"
        plan = b.plan
    if plan is None or plan.model_id is None:
        # no command, or one that names no model: a Python block that trains a named model
        # (`python_calls.parse_markdown_python`)
        from vramlens.formats import python_calls

        in_python = python_calls.parse_markdown_python(text, ctx)
        if in_python is not None:
            in_python.format = "markdown"
            return in_python
    return plan
