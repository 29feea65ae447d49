"""Jupyter notebooks (.ipynb): code cells read as Python, `!cmd` lines and `%%bash` cells as shell.

A notebook is analysed as one text, its *cell text*: every code cell's source after a marker line
`# %% [cell N]` (`# %% [cell N] shell` for a cell whose own language is shell, as VS Code records it) (N is
the cell's place in the notebook from 1, markdown cells counted, as editors number them; the percent format
jupytext and VS Code use), in notebook order. The CLI builds it from the .ipynb JSON (nbformat 4,
`cells[].source`; nbformat 3, `worksheets[0].cells[].input`), the language server from the cells the editor
syncs (LSP 3.17 notebook documents); both give the same text, so the same answer. Spans point into the cell
text; `CellText.locate` maps a line back to (cell, line in the cell), since each cell line is kept whole.

The cell text is read through two views of the same length, line for line:
- the Python view blanks what IPython, not Python, reads: `!cmd` and `%magic` lines (with their `\\`
  continuations), `x = !cmd`, `%%` cell magics other than `%%capture`/`%%time`/`%%timeit` and
  `%%writefile x.py` (whose body is Python: the script a later `!python x.py` runs), and a cell that still does
  not parse (an unfinished cell cannot hide the rest);
- the shell view keeps only `!cmd` lines (the `!` becomes a space) and the bodies of `%%bash`, `%%sh`,
  `%%shell` (Colab) and `%%script bash|sh` cells.
The Python view is read first (`formats.python_calls`: a `SFTTrainer(...)` in a cell); when it holds no
training call, the shell view (`formats.shell`: `!accelerate launch train.py --flags`).
IPython's `{var}`/`$var` expansion inside `!` lines is not done: such a value is unknown.
The `!pip install` / `%pip install` lines (and `pip install` in shell cells) that pin a library step memory depends
on (`"transformers==4.46.3"`) name the run's version of it (`TrainingPlan.installs`).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass, field

from vramlens.plan import Span, TrainingPlan

MAX_NOTEBOOK_CHARS = 20_000_000  # outputs (images) make notebooks large; the code itself is small
MARKER = "# %% [cell {n}]"
SHELL_MARKER = "# %% [cell {n}] shell"
_MARKER = re.compile(r"# %% \[cell (\d+)\]( shell)?\Z")
_SHELL_CELL = re.compile(r"%%(?:bash|sh|shell|script[ \t]+(?:bash|sh))\b")
_PY_CELL_MAGICS = ("%%capture", "%%time", "%%timeit")
_WRITE_PY = re.compile(r"%%(?:writefile|file)(?:[ \t]+-a)?[ \t]+(\S+\.py)[ \t]*$")
_LINE_MAGIC = re.compile(r"[ \t]*(?:[!%]|[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*[!%](?!=))")
_SHELL_LINE = re.compile(r"([ \t]*)!(?!=)")
SHELL_LANGUAGES = frozenset({"shellscript", "bash", "sh", "shell"})
# `%env NAME=value` / `%env NAME value`: IPython sets os.environ, which the kernel's training and every later
# `!` command see
# `!pip install …`, `%pip install …`, `!python -m pip install …` (in a shell cell without the `!`)
_PIP_INSTALL = re.compile(r"[ \t]*[!%]?[ \t]*(?:python3?[ \t]+-m[ \t]+|uv[ \t]+)?(pip3?[ \t]+install\b.*)$")
_ENV_MAGIC = re.compile(r"([ \t]*)%env[ \t]+([A-Za-z_][A-Za-z0-9_]*)(?:[ \t]*=[ \t]*|[ \t]+)(\S(?:.*\S)?)[ \t]*$")
_EXPORT = re.compile(r"([ \t]*)export[ \t]+([A-Za-z_][A-Za-z0-9_]*=.*)$")


@dataclass
class CellText:
    """The code cells of a notebook as one text."""

    text: str
    starts: list[int] = field(default_factory=list)  # line of each cell's first source line (after its marker)
    numbers: list[int] = field(default_factory=list)  # each code cell's place in the notebook (from 1)
    languages: list[str] = field(default_factory=list)  # each cell's language ("python" unless the editor says)

    @classmethod
    def join(
        cls, sources: list[str], numbers: list[int] | None = None, languages: list[str] | None = None
    ) -> "CellText":
        numbers = list(numbers or range(1, len(sources) + 1))
        lines: list[str] = []
        starts: list[int] = []
        languages = list(languages or ["python"] * len(sources))
        for n, src, language in zip(numbers, sources, languages):
            lines.append((SHELL_MARKER if language in SHELL_LANGUAGES else MARKER).format(n=n))
            starts.append(len(lines))
            lines.extend(_split(src))
        return cls("\n".join(lines), starts, numbers, languages)

    @classmethod
    def parse(cls, text: str) -> "CellText":
        """Recover the cells from a cell text (markers with increasing numbers)."""
        starts: list[int] = []
        numbers: list[int] = []
        languages: list[str] = []
        for i, line in enumerate(text.split("\n")):
            m = _MARKER.match(line)
            if m and int(m.group(1)) > (numbers[-1] if numbers else 0):
                starts.append(i + 1)
                numbers.append(int(m.group(1)))
                languages.append("shellscript" if m.group(2) else "python")
        return cls(text, starts, numbers, languages)

    def locate(self, line: int) -> tuple[int, int]:
        """A cell-text line → (cell index from 0, line in that cell); a marker line counts as its cell's line 0."""
        cell = 0
        for i, start in enumerate(self.starts):
            if start - 1 <= line:
                cell = i
            else:
                break
        if not self.starts:
            return 0, line
        return cell, max(0, line - self.starts[cell])

    def cell_lines(self, index: int) -> tuple[int, int]:
        """The cell-text lines [start, end) of one cell's source."""
        start = self.starts[index]
        end = self.starts[index + 1] - 1 if index + 1 < len(self.starts) else len(self.text.split("\n"))
        return start, end


def _split(src: str) -> list[str]:
    """A cell's lines as editors count them (a final line break adds no line)."""
    src = src.replace("\r\n", "\n").replace("\r", "\n")
    return src.split("\n")


def is_notebook(path: str) -> bool:
    return path.lower().endswith(".ipynb")


def from_json(text: str) -> CellText | None:
    """The cell text of an .ipynb file; None when it is not a notebook in a language vramlens reads."""
    if len(text) > MAX_NOTEBOOK_CHARS:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    meta = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
    lang = (meta.get("language_info") or {}).get("name") if isinstance(meta.get("language_info"), dict) else None
    kernel = (meta.get("kernelspec") or {}).get("language") if isinstance(meta.get("kernelspec"), dict) else None
    if (lang or kernel or "python").lower() != "python":
        return None  # an R or Julia notebook
    cells = data.get("cells")
    key = "source"
    if cells is None and isinstance(data.get("worksheets"), list) and data["worksheets"]:
        ws = data["worksheets"][0]
        cells, key = (ws.get("cells") if isinstance(ws, dict) else None), "input"
    if not isinstance(cells, list):
        return None
    sources, numbers, languages = [], [], []
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        cell_meta = cell["metadata"] if isinstance(cell.get("metadata"), dict) else {}
        vscode_meta = cell_meta["vscode"] if isinstance(cell_meta.get("vscode"), dict) else {}
        language = vscode_meta.get("languageId")  # VS Code keeps a cell's own language there
        languages.append(language if isinstance(language, str) else "python")
        src = cell.get(key, "")
        if isinstance(src, list):
            src = "".join(s for s in src if isinstance(s, str))
        if not isinstance(src, str):
            languages.pop()
            continue
        sources.append(src)
        numbers.append(number)
    return CellText.join(sources, numbers, languages)


def document_text(text: str, path: str) -> str:
    """The text an .ipynb document is analysed as: its cell text (JSON is converted, a cell text kept)."""
    if not is_notebook(path) or not text.lstrip().startswith("{"):
        return text
    cells = from_json(text)
    return cells.text if cells is not None else ""


def views(cells: CellText) -> tuple[str, str]:
    """(Python view, shell view) of a cell text: same lines, each kept in the view that reads it, blank in the other."""
    lines = cells.text.split("\n")
    py = [""] * len(lines)
    sh = [""] * len(lines)
    for index, start in enumerate(cells.starts):
        _, end = cells.cell_lines(index)
        body = lines[start:end]
        first = body[0].strip() if body else ""
        language = cells.languages[index] if index < len(cells.languages) else "python"
        if language in SHELL_LANGUAGES or _SHELL_CELL.match(first):
            skip = 0 if language in SHELL_LANGUAGES else 1
            for k in range(start + skip, end):
                sh[k] = lines[k]
            continue
        if first.startswith("%%") and not first.startswith(_PY_CELL_MAGICS) and not _WRITE_PY.match(first):
            continue  # %%html, %%writefile x.yaml, …: not code vramlens reads
        cont_shell = cont_magic = False
        for k in range(start, end):
            line = lines[k]
            if k == start and first.startswith("%%"):
                continue
            if cont_shell or cont_magic or _LINE_MAGIC.match(line):
                m = _SHELL_LINE.match(line)
                if cont_shell or m:
                    sh[k] = line if cont_shell or m is None else m.group(1) + " " + line[m.end() :]
                    cont_shell = line.rstrip().endswith("\\")
                else:
                    cont_magic = line.rstrip().endswith("\\")
                continue
            py[k] = line
        src = "\n".join(py[k] for k in range(start, end))
        try:
            ast.parse(src)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            for k in range(start, end):
                py[k] = ""
    return "\n".join(py), "\n".join(sh)


def parse_notebook(text: str, ctx) -> TrainingPlan | None:
    """`formats.TEXT_PARSERS` entry for .ipynb files (the .ipynb JSON or its cell text)."""
    from vramlens.formats import python_calls, shell

    text = document_text(text, ctx.path)
    if not text:
        return None
    cells = CellText.parse(text)
    py, sh = views(cells)
    installs = _installs(cells)
    if hasattr(ctx, "installs"):
        ctx.installs = {**installs, **ctx.installs}  # what the notebook's own commands run is read at its pins
    plan = python_calls.parse_python(py, ctx)
    view = "python"
    if plan is not None and plan.model_id is None:
        plan = _with_command_line(plan, cells, sh, ctx)
    if plan is None:
        plan = shell.parse_script(sh, ctx, fmt="shell")
        view = "shell"
    if plan is None:
        return None
    _env_magics(plan, cells)
    plan.installs = {**plan.installs, **installs}  # named by their cells
    plan.format = "notebook"
    plan.extra["notebook_view"] = _view_marker(view)
    return plan


def _env_magics(plan: TrainingPlan, cells: CellText) -> None:
    """`%env PYTORCH_CUDA_ALLOC_CONF=…` and `%env CUDA_VISIBLE_DEVICES=…` lines of Python cells."""
    from vramlens.formats.settings import PlanBuilder, Setting
    from vramlens.formats.shell import ALLOC_VARS

    lines = cells.text.split("\n")
    b = PlanBuilder.wrap(plan)
    for index, start in enumerate(cells.starts):
        if cells.languages[index] in SHELL_LANGUAGES:
            continue
        _, end = cells.cell_lines(index)
        for k in range(start, end):
            m = _ENV_MAGIC.match(lines[k])
            if m is None:
                continue
            name, value = m.group(2), m.group(3).strip("'\"")
            span = Span(file=plan.source_file, start_line=k, start_col=len(m.group(1)), end_line=k, end_col=m.end(3))
            vspan = Span(file=plan.source_file, start_line=k, start_col=m.start(3), end_line=k, end_col=m.end(3))
            s = Setting(key=name, path=(name,), value=value, span=span, value_span=vspan)
            if name in ALLOC_VARS:
                b.set("alloc_conf", value, s, override=True)  # the kernel's environment: what the run sees
            elif name == "CUDA_VISIBLE_DEVICES":
                n = len([x for x in value.replace(" ", "").split(",") if x])
                if n:
                    b.set("gpu_count", n, s)


def _installs(cells: CellText) -> dict[str, tuple[str, str]]:
    """The library and framework versions the notebook's `pip install` lines pin (`TrainingPlan.installs`), the
    first of each."""
    from vramlens import environment

    installs: dict[str, tuple[str, str]] = {}
    for k, line in enumerate(cells.text.split("\n")):
        m = _PIP_INSTALL.match(line)
        if m is None:
            continue
        try:
            words = shlex.split(m.group(1), comments=True)
        except ValueError:  # an unclosed quote
            words = m.group(1).split()
        cell, _ = cells.locate(k)
        where = f"`pip install` in cell {cells.numbers[cell] if cells.numbers else cell + 1}"
        for name, version in environment.pip_install_pins(words).items():
            installs.setdefault(name, (version, where))
    return installs


def _with_command_line(plan: TrainingPlan, cells: CellText, sh: str, ctx) -> TrainingPlan:
    """A script written by `%%writefile x.py` and run by a `!python x.py --flags` line: the flags are its command
    line (formats.usage does the same for a script's docstring)."""
    from vramlens.formats import shell, usage

    lines = cells.text.split("\n")
    written = {
        m.group(1).rsplit("/", 1)[-1]
        for start in cells.starts
        if start < len(lines)
        for m in [_WRITE_PY.match(lines[start].strip())]
        if m
    }
    if not written:
        return plan
    script, issues = shell.analyze(sh, ctx.path)
    launch = script.launch
    name = launch.script.text.rsplit("/", 1)[-1] if launch is not None and launch.script is not None else None
    if launch is None or name not in written:
        return plan
    line = script.index.pos(launch.command.start)[0]
    cell, _ = cells.locate(line)
    return usage._merge(
        plan,
        script,
        issues,
        ctx,
        f"the command line is the `{name}` command in cell {cells.numbers[cell] if cells.numbers else cell + 1}",
    )


def _view_marker(view: str):
    from vramlens.plan import Origin, Sourced

    return Sourced(value=view, origin=Origin.DERIVED, note="the notebook's cells read as " + view)


def view_of(plan: TrainingPlan) -> str:
    s = plan.extra.get("notebook_view")
    return s.value if s is not None else "python"


def render(text: str, plan: TrainingPlan, changes: dict):
    """Edits for a notebook: made in the view the plan came from, whose lines are the cell text's own."""
    from vramlens.formats import render_code

    cells = CellText.parse(text)
    py, sh = views(cells)
    as_view = plan.model_copy(update={"format": view_of(plan)})
    local = plan.alloc_conf
    if (
        "alloc_conf" in changes
        and local is not None
        and local.value_span is not None
        and _ENV_MAGIC.match(text.split("\n")[local.value_span.start_line])
    ):
        from vramlens.formats.render import RenderResult, TextEdit

        rest = {k: v for k, v in changes.items() if k != "alloc_conf"}  # an `%env` line: its value is replaced
        result = render(text, plan, rest) if rest else RenderResult([])
        if result is not None:
            result.edits.append(TextEdit(local.value_span, str(changes["alloc_conf"])))
        return result
    if as_view.format == "python":
        return render_code.render_python(py, as_view, changes)
    result = render_code.render_shell(sh, as_view, changes)
    if result is not None:
        for edit in result.edits:
            cell, _ = cells.locate(edit.span.start_line)
            if (
                cells.starts
                and cells.languages[cell] not in SHELL_LANGUAGES
                and not _SHELL_CELL.match(text.split("\n")[cells.starts[cell]].strip())
            ):
                # a new `export X=v` line in a cell of `!` commands: each `!` runs its own shell, so the variable
                # is set for the kernel and every later command instead
                # (indented as the `!` line it goes before, whose `!` the shell view shows as a space)
                here = text.split("\n")[edit.span.start_line] if edit.span.start_line < len(text.split("\n")) else ""
                bang = _SHELL_LINE.match(here)
                indent = bang.group(1) if bang else ""
                edit.new_text = "\n".join(
                    _EXPORT.sub(lambda m: f"{indent}%env {m.group(2)}", line) for line in edit.new_text.split("\n")
                )
    return result


def cell_span(cells: CellText, span: Span) -> tuple[int, Span]:
    """A span in the cell text → (cell index, the span in that cell's own lines; clipped to the cell)."""
    cell, line = cells.locate(span.start_line)
    start, end = cells.cell_lines(cell) if cells.starts else (0, span.end_line + 1)
    start_col = span.start_col if span.start_line >= start else 0
    if span.end_line < end:
        end_line, end_col = span.end_line - start, span.end_col
    else:
        end_line, end_col = max(0, end - 1 - start), 10**6
    if span.start_line < start:
        end_line, end_col = 0, 0
    return cell, span.model_copy(
        update={"start_line": line, "start_col": start_col, "end_line": max(end_line, line), "end_col": end_col}
    )


_CELL_TYPE = re.compile(r'\s*"cell_type":\s*"(\w+)"')
_SOURCE_LIST = re.compile(r'\s*"source":\s*\[\s*$')
_SOURCE_LINE = re.compile(r'(\s*)("(?:[^"\\]|\\.)*")\s*,?\s*$')


def json_positions(json_text: str, cells: CellText):
    """Where each cell-text line sits in the .ipynb file itself, when the file keeps one source line per JSON line
    (as Jupyter, VS Code and Colab write it): a function (line, col) → (file line, file col), or None when the
    file is laid out otherwise. SARIF points into the file, which code-scanning shows as it is."""
    file_lines = json_text.split("\n")
    text_lines = cells.text.split("\n")
    where: dict[int, tuple[int, int]] = {}  # cell-text line -> (file line, column of the string's start)
    kind, code_index, i = None, -1, 0
    while i < len(file_lines):
        m = _CELL_TYPE.match(file_lines[i])
        if m:
            kind = m.group(1)
        elif _SOURCE_LIST.match(file_lines[i]):
            if kind == "code":
                code_index += 1
                if code_index >= len(cells.starts):
                    return None
                start, end = cells.cell_lines(code_index)
                k = start
                i += 1
                while i < len(file_lines) and not file_lines[i].strip().startswith("]"):
                    sm = _SOURCE_LINE.match(file_lines[i])
                    if sm is None or k >= end:
                        return None
                    try:
                        piece = json.loads(sm.group(2))
                    except ValueError:
                        return None
                    if piece.rstrip("\n") != text_lines[k]:
                        return None
                    where[k] = (i, len(sm.group(1)) + 1)
                    k += 1
                    i += 1
            kind = None
        i += 1
    if code_index + 1 != len(cells.starts):
        return None

    def position(line: int, col: int) -> tuple[int, int] | None:
        if line not in where:
            return None
        file_line, start = where[line]
        prefix = text_lines[line][:col]
        return file_line, start + len(json.dumps(prefix, ensure_ascii=False)) - 2

    return position


def write_cells(json_text: str, new_cell_text: str) -> str | None:
    """The .ipynb file with its code cells' sources replaced by those of `new_cell_text` (an edited cell text), in
    the file's own layout; None when that layout cannot be reproduced exactly (then nothing is written): the file
    is re-serialised unchanged first, and only when that gives back the very same text are the new sources put in."""
    try:
        data = json.loads(json_text)
    except (ValueError, RecursionError):
        return None
    layout = _layout(json_text, data)
    if layout is None or not isinstance(data.get("cells"), list):
        return None
    new = CellText.parse(new_cell_text)
    code = [c for c in data["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    if len(code) != len(new.starts):
        return None
    lines = new_cell_text.split("\n")
    for index, cell in enumerate(code):
        start, end = new.cell_lines(index)
        src = lines[start:end]
        joined = "\n".join(src)
        cell["source"] = (
            joined
            if isinstance(cell.get("source"), str)
            else [line + "\n" for line in src[:-1]] + ([src[-1]] if src and src[-1] else [])
        )
    return _dump(data, layout)


def _layout(text: str, data) -> tuple | None:
    """(indent, sort_keys, ensure_ascii, trailing newline) that reproduce `text` from `data`, if any does."""
    for indent in (1, 2, 0, 4, None):
        for sort_keys in (True, False):
            for ensure_ascii in (False, True):
                layout = (indent, sort_keys, ensure_ascii, text.endswith("\n"))
                if _dump(data, layout) == text:
                    return layout
    return None


def _dump(data, layout: tuple) -> str:
    indent, sort_keys, ensure_ascii, newline = layout
    out = json.dumps(
        data,
        indent=indent,
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
        separators=(",", ": ") if indent is not None else None,
    )
    return out + ("\n" if newline else "")
