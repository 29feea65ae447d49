"""Plan changes → text edits for Python scripts, shell launch scripts and README shell blocks.

Python: an existing keyword argument's value is replaced in place; a missing one is added to the
call that owns it (`TrainingArguments`/`SFTConfig`… for trainer settings, `from_pretrained` for
loading, `LoraConfig`/`BitsAndBytesConfig` for adapters and quantization) in the call's own layout —
one argument per line with or without a trailing comma, or inline. The allocator setting becomes an
`os.environ[...]` line before the first top-level `import torch`/`transformers`/….

Shell: an existing `--flag value` (or `key=value` override, or `export VAR=value`) has its value
replaced, keeping its quotes; a missing flag is appended to the training command, on a new
continuation line when the command is written one flag per line (a trailing `\\` on the last line
is kept), inline otherwise. The allocator setting becomes an `export` line before the command.

A change the document cannot express (a DeepSpeed value, an optimizer constructed in code to an
8-bit one, LoRA in a plain script) yields no edits and a note saying where to make it.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any, Iterator, cast

from vramlens.formats import launchers, markdown, python_calls, shell
from vramlens.formats.render import RenderResult, TextEdit
from vramlens.knowledge import optimizers
from vramlens.plan import Sourced, Span, TrainingPlan
from vramlens.text import text_lines


def render_change_code(text: str, plan: TrainingPlan, changes: dict[str, Any]) -> RenderResult | None:
    """Edits for a Python, shell or Markdown document; None for other formats."""
    if plan.format == "python":
        return render_python(text, plan, changes)
    if plan.format == "shell":
        return render_shell(text, plan, changes)
    if plan.format == "markdown":
        return render_markdown(text, plan, changes)
    if plan.format == "notebook":
        from vramlens.formats import notebook

        return notebook.render(text, plan, changes)
    return None


class _Cannot(Exception):
    """The document cannot express a change; the message says where to make it instead."""


def _result(edits: list, notes: list[str]) -> RenderResult:
    return RenderResult(edits=edits, note="; ".join(notes) if notes else None)


def _local(plan: TrainingPlan, concept: str) -> Sourced | None:
    """The plan's value for `concept` if it was read from this document."""
    s = getattr(plan, concept, None)
    if s is None or s.span is None or s.span.file != plan.source_file:
        return None
    return s


def _entry_span(local: Sourced) -> Span:
    """The whole entry of a value `_local` returned (it returns only values with a span in this document)."""
    return cast(Span, local.span)


# === Python ======================================================================================


def _py_literal(value: Any, quote: str = '"') -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        body = value.replace("\\", "\\\\").replace(quote, "\\" + quote)
        return f"{quote}{body}{quote}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py_literal(v, quote) for v in value) + "]"
    return repr(value)


class _PyDoc:
    def __init__(self, text: str, plan: TrainingPlan):
        self.text = text
        self.file = plan.source_file
        self.tree = ast.parse(text)
        self.cols = python_calls._Cols(text, self.file)
        self.col = python_calls._Collector()
        self.col.run(self.tree)
        self.col.calls.sort(key=lambda cs: (cs[0].lineno, cs[0].col_offset))
        self.lines = text_lines(text)  # as ast counts them: a lone \r ends a line too
        self.quote = "'" if text.count("'") > 2 * text.count('"') else '"'
        self.inserts: dict[tuple[int, int], list[str]] = {}  # (line, col) -> texts, in order
        self.edits: list[TextEdit] = []
        self.overrides: dict[int, tuple[ast.keyword, dict[str, str]]] = {}  # `**name` -> keys set over it

    def dotted(self, node) -> str:
        ev = python_calls._Evaluator(self.col, self.cols)
        return ev.dotted(node) or ""

    def calls(self, *names: str) -> list[ast.Call]:
        out = []
        for call, _ in self.col.calls:
            f = call.func
            last = f.id if type(f) is ast.Name else f.attr if type(f) is ast.Attribute else None
            if last in names:
                out.append(call)
        return out

    def pos(self, lineno: int, byte_col: int) -> tuple[int, int]:
        return lineno - 1, self.cols.col(lineno, byte_col)

    def span(self, a: tuple[int, int], b: tuple[int, int] | None = None) -> Span:
        b = b or a
        return Span(file=self.file, start_line=a[0], start_col=a[1], end_line=b[0], end_col=b[1])

    def replace(self, node: ast.AST, new: str) -> None:
        self.edits.append(TextEdit(self.cols.span(node), new))

    def insert(self, at: tuple[int, int], new: str) -> None:
        self.inserts.setdefault(at, []).append(new)

    def dicts(self) -> Iterator[tuple[str, ast.expr]]:
        """(name, dict) for each module-level `name = dict(...)` / `name = {...}`."""
        value: ast.expr | None
        for st in self.tree.body:
            if type(st) is ast.Assign and len(st.targets) == 1:
                target, value = st.targets[0], st.value
            elif type(st) is ast.AnnAssign:
                target, value = st.target, st.value
            else:
                continue
            if type(target) is ast.Name and value is not None and _is_dict(value):
                yield target.id, value

    def shared_dict(self, span: Span) -> tuple[str, int] | None:
        """(name, places that use it) when `span` lies in a dict bound to a name (`common = dict(...)` or
        `common = {...}`) that more than one place uses, e.g. two `SFTConfig(**common)` calls."""
        at = (span.start_line, span.start_col)
        for name, value in self.dicts():
            node = self.cols.span(value)
            if (node.start_line, node.start_col) <= at < (node.end_line, node.end_col):
                uses = sum(
                    1 for n in ast.walk(self.tree) if type(n) is ast.Name and n.id == name and type(n.ctx) is ast.Load
                )
                return (name, uses) if uses > 1 else None
        return None

    def splat_entry(self, call: ast.Call, key: str) -> ast.expr | None:
        """The value node of `key` when `call` receives it through `**name` of a dict written in this file."""
        bound = dict(self.dicts())
        for kw in call.keywords:
            node = bound.get(kw.value.id) if kw.arg is None and type(kw.value) is ast.Name else None
            if type(node) is ast.Dict:
                found = next(
                    (v for k, v in zip(node.keys, node.values) if type(k) is ast.Constant and k.value == key), None
                )
            elif type(node) is ast.Call:  # `dict(...)` (`dicts` yields displays and these)
                found = next((k.value for k in node.keywords if k.arg == key), None)
            else:
                found = None
            if found is not None:
                return found
        return None

    def finish(self) -> list[TextEdit]:
        for kw, entries in self.overrides.values():
            name = ast.unparse(kw.value)  # the `name` of `**name` (`_edit_value` keeps only those)
            items = "".join(f", {_py_literal(k, self.quote)}: {v}" for k, v in entries.items())
            self.edits.append(TextEdit(self.cols.span(kw), f"**{{**{name}{items}}}"))
        for at, texts in self.inserts.items():
            new = "".join(texts)
            if at[0] >= len(self.lines) and self.lines and not self.text.endswith(("\n", "\r")):
                # a line after the last one of a file without a final line break: end that line first
                at, new = (len(self.lines) - 1, len(self.lines[-1])), "\n" + new
            self.edits.append(TextEdit(self.span(at), new))
        self.edits.sort(key=lambda e: (e.span.start_line, e.span.start_col))
        return self.edits


def _end(node: ast.stmt | ast.expr | ast.keyword) -> tuple[int, int]:
    """(end_lineno, end_col_offset): `ast.parse` sets both on every node (typeshed's `int | None` is for nodes made
    by hand)."""
    return node.end_lineno or 0, node.end_col_offset or 0


def _is_dict(node: ast.AST | None) -> bool:
    return type(node) is ast.Dict or (
        type(node) is ast.Call and type(node.func) is ast.Name and node.func.id == "dict" and not node.args
    )


def _edit_value(doc: _PyDoc, call: ast.Call | None, key: str, span: Span, new_text: str) -> None:
    """Replace the value of `key` at `span`. A value in a dict that more than one place uses (`common` splatted
    into two configs) is not changed there, where it would change the other run too: it is set over the dict in
    `call`, the one this run reads, `**common` → `**{**common, "key": value}` (in a dict display a later key
    wins: Python language reference, 6.2.7 "Dictionary displays"; an explicit `key=` beside `**common` would
    raise "got multiple values for keyword argument")."""
    shared = doc.shared_dict(span)
    if shared is None:
        doc.edits.append(TextEdit(span, new_text))
        return
    name, uses = shared
    kw = next(
        (
            k
            for k in (call.keywords if call is not None else ())
            if k.arg is None and type(k.value) is ast.Name and k.value.id == name
        ),
        None,
    )
    if kw is None or not key.isidentifier():
        raise _Cannot(
            f"`{key}` is set in `{name}` (line {span.start_line + 1}), which {uses} places use: "
            f"changing it there would change them all, so set `{key}` by hand for this run"
        )
    doc.overrides.setdefault(id(kw), (kw, {}))[1][key] = new_text


def _kw_of(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _quote_of(doc: _PyDoc, node: ast.AST) -> str:
    if type(node) is ast.Constant and isinstance(node.value, str):
        line = doc.lines[node.lineno - 1].encode("utf-8")
        ch = line[node.col_offset : node.col_offset + 1].decode("utf-8", "replace")
        if ch in ("'", '"'):
            return ch
    return doc.quote


def _set_kwarg(doc: _PyDoc, call: ast.Call, key: str, value: Any, pending: dict) -> None:
    """Replace `key=`'s value in `call`, or queue it to be added."""
    kw = _kw_of(call, key)
    if kw is not None:
        doc.replace(kw.value, _py_literal(value, _quote_of(doc, kw.value)))
        return
    node = doc.splat_entry(call, key)
    if node is not None:  # `key` comes from `**name`: a `key=` beside it would be given twice
        return _edit_value(doc, call, key, doc.cols.span(node), _py_literal(value, _quote_of(doc, node)))
    pending.setdefault(id(call), (call, []))[1].append(f"{key}={_py_literal(value, doc.quote)}")


def _add_kwargs(doc: _PyDoc, call: ast.Call, items: list[str]) -> None:
    """Add keyword arguments to a call in its own layout."""
    args: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    call_end_line, call_end_col = _end(call)
    close = doc.pos(call_end_line, call_end_col - 1)  # the ")"
    if not args:
        doc.insert(close, ", ".join(items))
        return
    last = max(args, key=_end)
    last_end = doc.pos(*_end(last))
    first_arg = min(args, key=lambda a: (a.lineno, a.col_offset))
    line_text = doc.lines[last.lineno - 1]
    start_col = doc.cols.col(last.lineno, last.col_offset)
    own_line = not line_text[:start_col].strip() and last.lineno > call.lineno
    if not own_line or first_arg.lineno == call.lineno and last.lineno == call.lineno:
        doc.insert(last_end, "".join(f", {it}" for it in items))
        return
    indent = line_text[: len(line_text) - len(line_text.lstrip())]
    rest = doc.lines[last_end[0]][last_end[1] :]
    stripped = rest.lstrip()
    trailing_comma = stripped.startswith(",")
    close_on_line = close[0] == last_end[0]
    if trailing_comma and not close_on_line:
        at = (last_end[0], len(doc.lines[last_end[0]].rstrip("\r")))
        doc.insert(at, "".join(f"\n{indent}{it}," for it in items))
    else:
        doc.insert(last_end, "".join(f",\n{indent}{it}" for it in items))


def _import_line(doc: _PyDoc) -> int:
    """0-based line after the module docstring, `from __future__` imports and leading comments."""
    line = 0
    body = doc.tree.body
    for st in body:
        if (
            type(st) is ast.Expr
            and type(st.value) is ast.Constant
            and isinstance(st.value.value, str)
            and st is body[0]
        ) or (type(st) is ast.ImportFrom and st.module == "__future__"):
            line = _end(st)[0]
        else:
            break
    while line < len(doc.lines) and line == 0 and doc.lines[line].startswith("#"):
        line += 1
    return line


def _ensure_import(doc: _PyDoc, module: str, name: str) -> None:
    if name in doc.col.imports:
        return
    imports = [st for st in doc.tree.body if type(st) in (ast.Import, ast.ImportFrom)]
    line = _end(imports[-1])[0] if imports else _import_line(doc)
    key = (line, 0)
    stmt = f"from {module} import {name}\n"
    if stmt not in doc.inserts.get(key, []):
        doc.insert(key, stmt)


def _config_call(doc: _PyDoc) -> ast.Call | None:
    calls = doc.calls(*python_calls.CONFIG_CLASSES)
    return calls[0] if calls else None


def _model_call(doc: _PyDoc) -> ast.Call | None:
    for call in doc.calls("from_pretrained"):
        owner = doc.dotted(call.func).rsplit(".", 2)[-2] if "." in doc.dotted(call.func) else ""
        if re.search(r"Model|For[A-Z]|LM", owner) and not any(x in owner for x in python_calls._NOT_MODELS):
            return call
    return None


HF_KWARGS = {
    "micro_batch": "per_device_train_batch_size",
    "grad_accum": "gradient_accumulation_steps",
    "eval_batch": "per_device_eval_batch_size",
    "grad_checkpointing": "gradient_checkpointing",
    "optimizer": "optim",
    "packing": "packing",
    "compile": "torch_compile",
    "activation_offload": "activation_offloading",
}
TRL_ONLY = {"packing", "activation_offload"}
INVERTED_KEYS = {"disable_gradient_checkpointing"}


def render_python(text: str, plan: TrainingPlan, changes: dict[str, Any]) -> RenderResult | None:
    try:
        doc = _PyDoc(text, plan)
    except (SyntaxError, ValueError):
        return None
    pending: dict[int, tuple[ast.Call, list[str]]] = {}
    notes: list[str] = []
    changes = dict(changes)
    peft = changes.pop("peft_method", None)
    lora = {k: changes.pop(k) for k in ("lora_r", "lora_alpha", "lora_dropout", "lora_targets") if k in changes}
    quant = changes.pop("quant_bits", None)
    for concept, value in changes.items():
        try:
            _py_change(doc, plan, concept, value, pending)
        except _Cannot as exc:
            notes.append(str(exc))
    if peft is not None or lora or quant is not None:
        try:
            _py_peft(doc, plan, peft, lora, quant, pending)
        except _Cannot as exc:
            notes.append(str(exc))
    for call, items in pending.values():
        _add_kwargs(doc, call, items)
    edits = doc.finish()
    if notes:
        return _result([], notes)
    return _result(edits, [])


def _py_change(doc: _PyDoc, plan: TrainingPlan, concept: str, value: Any, pending: dict) -> None:
    cur = getattr(plan, concept, None)
    if cur is not None and cur.value == value and cur.origin.value == "file":
        return
    if concept == "alloc_conf":
        return _py_alloc(doc, plan, value)
    if concept == "optimizer_impl":
        return _py_optimizer_impl(doc, plan, value, pending)
    local = _local(plan, concept)
    config = _config_call(doc)
    if concept == "optimizer" and local is not None and local.key and "." in local.key:
        line = _entry_span(local).start_line + 1
        raise _Cannot(
            f"the optimizer is constructed in code (`{local.key}` on line {line}): "
            f"replace it with the `{value}` optimizer there"
        )
    if concept == "quant_compute_dtype":
        if not _edit_dtype_in_place(doc, local, value):
            raise _Cannot("set `bnb_4bit_compute_dtype` where the `BitsAndBytesConfig` is built")
        return
    if concept == "weight_dtype" and _edit_dtype_in_place(doc, local, value):
        return  # e.g. `model_init_kwargs={"dtype": "bfloat16"}` of a TRL config
    if concept in HF_KWARGS:
        if (
            local is not None
            and local.value_span is not None
            and (config is None or local.key == HF_KWARGS[concept] or local.key == "use_gradient_checkpointing")
        ):
            return _edit_value(doc, config, local.key or "", local.value_span, _py_literal(value, doc.quote))
        if config is None:
            if concept == "grad_checkpointing" and value is True:
                return _py_enable_gc(doc, plan)
            raise _Cannot(f"no TrainingArguments/SFTConfig call to set `{HF_KWARGS[concept]}` on")
        name = doc.dotted(config.func).rsplit(".", 1)[-1]
        if concept in TRL_ONLY and name in python_calls.HF_CONFIGS:
            raise _Cannot(f"`{HF_KWARGS[concept]}` is a TRL setting; `{name}` has no such argument")
        return _set_kwarg(doc, config, HF_KWARGS[concept], value, pending)
    if concept == "loss_impl":
        if config is None:
            raise _Cannot(
                "a plain training loop computes its own loss: use a chunked or fused (Liger, "
                "cut-cross-entropy) loss in the loop"
            )
        if value == "fused":
            return _set_kwarg(doc, config, "use_liger_kernel", True, pending)
        name = doc.dotted(config.func).rsplit(".", 1)[-1]
        if value == "chunked" and name == "SFTConfig":
            return _set_kwarg(doc, config, "loss_type", "chunked_nll", pending)
        raise _Cannot(f"`{name}` has no chunked loss; set `use_liger_kernel=True` for a fused one")
    if concept in ("attn_impl", "weight_dtype"):
        model = _model_call(doc)
        if model is None:
            raise _Cannot("no `from_pretrained(...)` call to set the model's loading options on")
        if concept == "attn_impl":
            return _set_kwarg(doc, model, "attn_implementation", value, pending)
        key = "torch_dtype" if _kw_of(model, "torch_dtype") else "dtype"
        word = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(value, value)
        return _set_kwarg(doc, model, key, word, pending)
    if concept == "amp_dtype":
        if config is None:
            raise _Cannot("a plain training loop sets precision with torch.autocast")

        def given(key: str) -> bool:  # written in the call, or brought in by `**name`
            return _kw_of(config, key) is not None or doc.splat_entry(config, key) is not None

        if value in ("bf16", "fp16"):
            other = "fp16" if value == "bf16" else "bf16"
            if given(other):
                _set_kwarg(doc, config, other, False, pending)
            return _set_kwarg(doc, config, value, True, pending)
        for k in ("bf16", "fp16"):
            if given(k):
                _set_kwarg(doc, config, k, False, pending)
        return
    if concept == "seq_len":
        if local is not None and local.value_span is not None:
            return _edit_value(doc, config, local.key or "", local.value_span, _py_literal(value))
        name = doc.dotted(config.func).rsplit(".", 1)[-1] if config is not None else ""
        if config is not None and name in python_calls.TRL_CONFIGS:
            return _set_kwarg(doc, config, "max_length", value, pending)
        raise _Cannot("the sequence length is set where the data is tokenized in this script")
    raise _Cannot(
        f"a Python script cannot set `{concept}` directly: set it on the launch command or in the "
        f"DeepSpeed/accelerate config"
    )


def _edit_dtype_in_place(doc: _PyDoc, local, value: str) -> bool:
    """Rewrites a dtype the file gives on one line (`torch.bfloat16`, `"bfloat16"`) where it is written."""
    if local is None or local.value_span is None or local.value_span.start_line != local.value_span.end_line:
        return False
    vs = local.value_span
    old = doc.lines[vs.start_line][vs.start_col : vs.end_col]
    if not _DTYPE_LITERAL.fullmatch(old):
        # the setting's value is a dict holding the dtype (`model_init_kwargs={"dtype": "bfloat16"}`): rewrite the
        # dtype entry inside it, nothing else
        inner = list(_DTYPE_ENTRY.finditer(old))
        if len(inner) != 1:
            return False
        start = vs.start_col + inner[0].start(2)
        vs = vs.model_copy(update={"start_col": start, "end_col": start + len(inner[0].group(2))})
        old = inner[0].group(2)
    word = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(value, value)
    quote = old[0] if old[:1] in ("'", '"') else doc.quote
    doc.edits.append(TextEdit(vs, f"torch.{word}" if old.startswith("torch.") else _py_literal(word, quote)))
    return True


_DTYPE_LITERAL = re.compile(r"""torch\.\w+|(["'])\w+\1""")
_DTYPE_ENTRY = re.compile(r"""(["']?(?:torch_)?dtype["']?\s*[:=]\s*)(torch\.\w+|(["'])\w+\3)""")


def _py_enable_gc(doc: _PyDoc, plan: TrainingPlan) -> None:
    """`model.gradient_checkpointing_enable()` after the model is loaded (plain loops)."""
    model = _model_call(doc)
    for st in ast.walk(doc.tree):
        if type(st) is ast.Assign and st.value is model and type(st.targets[0]) is ast.Name:
            line = doc.lines[st.lineno - 1]
            indent = line[: len(line) - len(line.lstrip())]
            doc.insert((_end(st)[0], 0), f"{indent}{st.targets[0].id}.gradient_checkpointing_enable()\n")
            return
    raise _Cannot("call `model.gradient_checkpointing_enable()` after loading the model")


def _py_optimizer_impl(doc: _PyDoc, plan: TrainingPlan, value: str, pending: dict) -> None:
    for call, _ in doc.col.calls:
        full = doc.dotted(call.func)
        if full.startswith("torch.optim."):
            foreach = _kw_of(call, "foreach")
            if value == "fused":
                if foreach is not None:
                    doc.replace(foreach, "fused=True")
                    return
                return _set_kwarg(doc, call, "fused", True, pending)
            if value == "foreach":
                fused = _kw_of(call, "fused")
                if fused is not None:
                    doc.replace(fused, "foreach=True")
                    return
                return _set_kwarg(doc, call, "foreach", True, pending)
    config = _config_call(doc)
    if config is not None and value == "fused":
        return _set_kwarg(doc, config, "optim", "adamw_torch_fused", pending)
    raise _Cannot(f"no torch optimizer constructor to make {value}")


def _py_alloc(doc: _PyDoc, plan: TrainingPlan, value: str) -> None:
    local = _local(plan, "alloc_conf")
    if local is not None and local.value_span is not None:
        node = _node_at(doc, local.value_span)
        quote = _quote_of(doc, node) if node is not None else doc.quote
        doc.edits.append(TextEdit(local.value_span, _py_literal(value, quote)))
        return
    target: ast.Import | ast.ImportFrom | None = None
    for st in doc.tree.body:
        if type(st) is ast.Import and any(a.name.split(".")[0] in _ML for a in st.names):
            target = st
            break
        if type(st) is ast.ImportFrom and (st.module or "").split(".")[0] in _ML:
            target = st
            break
    line = target.lineno - 1 if target is not None else _import_line(doc)
    os_before = any(
        type(st) is ast.Import and any(a.name == "os" and a.asname is None for a in st.names) and st.lineno - 1 < line
        for st in doc.tree.body
    )
    new = (
        "" if os_before else "import os\n"
    ) + f"os.environ[{_py_literal('PYTORCH_CUDA_ALLOC_CONF', doc.quote)}] = {_py_literal(value, doc.quote)}\n"
    doc.insert((line, 0), new)


_ML = ("torch", "transformers", "trl", "peft", "unsloth", "accelerate", "bitsandbytes", "deepspeed")


def _node_at(doc: _PyDoc, span: Span) -> ast.AST | None:
    for node in ast.walk(doc.tree):
        if getattr(node, "lineno", None) == span.start_line + 1 and isinstance(node, ast.expr):
            if doc.cols.col(node.lineno, node.col_offset) == span.start_col:
                return node
    return None


def _py_peft(doc: _PyDoc, plan: TrainingPlan, peft: str | None, lora: dict, quant: int | None, pending: dict) -> None:
    want_lora = peft in ("lora", "qlora", "dora") or bool(lora)
    if peft == "qlora" and quant is None:
        quant = 4
    if quant:
        _py_quant(doc, plan, quant, pending)
    if not want_lora:
        return
    kw = {"lora_r": "r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout", "lora_targets": "target_modules"}
    lconfs = doc.calls("LoraConfig") or [c for c in doc.calls("get_peft_model") if _kw_of(c, "r")]
    if lconfs:
        for concept, value in lora.items():
            if concept == "lora_targets" and list(value) == ["all-linear"]:
                value = "all-linear"
            _set_kwarg(doc, lconfs[0], kw[concept], value, pending)
        return
    trainers = doc.calls(*python_calls.TRL_TRAINERS)
    if trainers and _kw_of(trainers[0], "peft_config") is None:
        r = lora.get("lora_r", 16)
        targets = lora.get("lora_targets", ["all-linear"])
        targets = "all-linear" if list(targets) == ["all-linear"] else list(targets)
        q = doc.quote
        _ensure_import(doc, "peft", "LoraConfig")
        pending.setdefault(id(trainers[0]), (trainers[0], []))[1].append(
            f"peft_config=LoraConfig(r={r}, lora_alpha={2 * int(r)}, target_modules={_py_literal(targets, q)}, "
            f"task_type={_py_literal('CAUSAL_LM', q)})"
        )
        return
    raise _Cannot(
        "wrap the model in LoRA adapters: `model = peft.get_peft_model(model, LoraConfig(r=16, "
        'target_modules="all-linear"))` before training'
    )


def _py_quant(doc: _PyDoc, plan: TrainingPlan, bits: int, pending: dict) -> None:
    key = f"load_in_{bits}bit"
    other = "load_in_8bit" if bits == 4 else "load_in_4bit"
    bnbs = doc.calls("BitsAndBytesConfig")
    if bnbs:
        kw = _kw_of(bnbs[0], other)
        if kw is not None and _kw_of(bnbs[0], key) is None:
            doc.replace(kw, f"{key}=True")
            return
        if kw is not None:
            _set_kwarg(doc, bnbs[0], other, False, pending)
        return _set_kwarg(doc, bnbs[0], key, True, pending)
    model = _model_call(doc)
    if model is None:
        raise _Cannot("load the model with `quantization_config=BitsAndBytesConfig(load_in_4bit=True)`")
    owner = doc.dotted(model.func)
    if "FastLanguageModel" in owner or "FastModel" in owner or _kw_of(model, key) or _kw_of(model, other):
        given = _kw_of(model, other)
        if given is not None and _kw_of(model, key) is None:
            doc.replace(given, f"{key}=True")
            return
        return _set_kwarg(doc, model, key, True, pending)
    if _kw_of(model, "quantization_config") is not None:
        raise _Cannot("the model's `quantization_config` is built elsewhere: set `load_in_4bit=True` there")
    q = doc.quote
    _ensure_import(doc, "transformers", "BitsAndBytesConfig")
    pending.setdefault(id(model), (model, []))[1].append(
        f"quantization_config=BitsAndBytesConfig({key}=True"
        + (
            f", bnb_4bit_quant_type={_py_literal('nf4', q)}, bnb_4bit_compute_dtype={_py_literal('bfloat16', q)}"
            if bits == 4
            else ""
        )
        + ")"
    )


# === shell =======================================================================================

# concept -> flag name per tool (None: the tool cannot take it on the command line)
HF_FLAGS = {
    "micro_batch": "per_device_train_batch_size",
    "grad_accum": "gradient_accumulation_steps",
    "eval_batch": "per_device_eval_batch_size",
    "grad_checkpointing": "gradient_checkpointing",
    "optimizer": "optim",
    "packing": "packing",
    "compile": "torch_compile",
    "activation_offload": "activation_offloading",
    "attn_impl": "attn_implementation",
}
TOOL_FLAGS = {
    "swift": {**HF_FLAGS, "attn_impl": "attn_impl", "seq_len": "max_length"},
    "trl": {**HF_FLAGS, "seq_len": "max_length"},
    "llamafactory": {**HF_FLAGS, "seq_len": "cutoff_len", "attn_impl": "flash_attn"},
    "axolotl": {
        "micro_batch": "micro-batch-size",
        "grad_accum": "gradient-accumulation-steps",
        "grad_checkpointing": "gradient-checkpointing",
        "optimizer": "optimizer",
        "seq_len": "sequence-len",
        "packing": "sample-packing",
        "eval_batch": "eval-batch-size",
    },
    "torchtune": {
        "micro_batch": "batch_size",
        "grad_accum": "gradient_accumulation_steps",
        "grad_checkpointing": "enable_activation_checkpointing",
        "seq_len": "tokenizer.max_seq_len",
        "compile": "compile",
    },
}
# the programs whose command lines take transformers' TrainingArguments flags (an HF example script, a TRL script or
# one of the user's own, run by a launcher); other programs define their own flags, and a concept without an entry in
# TOOL_FLAGS is not written on their command lines
HF_TOOLS = frozenset({"python", "torchrun", "accelerate", "deepspeed"})
TOOL_FLAGS.update(
    {
        # OpenRLHF's flat flags (up to v0.10.1; openrlhf/cli/train_*.py). There is no accumulation flag (it follows
        # from --train_batch_size) and no optimizer choice beyond Adam (v0.10.2+: `--optim adam|muon`).
        "openrlhf": {
            "micro_batch": "micro_train_batch_size",
            "grad_checkpointing": "gradient_checkpointing",
            "seq_len": "max_len",
            "packing": "packing_samples",
            "vllm_memory_share": "vllm_gpu_memory_utilization",
        },
        # verl's hydra overrides (verl/trainer/config/ppo_trainer.yaml): accumulation follows from ppo_mini_batch_size
        "verl": {
            "micro_batch": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "grad_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
            "vllm_memory_share": "actor_rollout_ref.rollout.gpu_memory_utilization",
            "completion_len": "data.max_response_length",
        },
        # Megatron-LM's arguments (megatron/training/arguments.py): accumulation follows from --global-batch-size
        "megatron": {"micro_batch": "micro-batch-size", "seq_len": "seq-length"},
    }
)

# the adapter settings each program's command line takes (a concept without an entry is not written there)
ADAPTER_FLAGS: dict[str, dict[str, str]] = {
    "swift": {
        "lora_r": "lora_rank",
        "lora_alpha": "lora_alpha",
        "lora_targets": "target_modules",
        "quant_bits": "quant_bits",
    },
    "llamafactory": {
        "lora_r": "lora_rank",
        "lora_alpha": "lora_alpha",
        "lora_targets": "lora_target",
        "quant_bits": "quantization_bit",
    },
    "axolotl": {
        "lora_r": "lora-r",
        "lora_alpha": "lora-alpha",
        "lora_targets": "lora-target-linear",
        "quant_bits": "load-in-4bit",
    },
    "trl": {
        "lora_r": "lora_r",
        "lora_alpha": "lora_alpha",
        "lora_targets": "lora_target_modules",
        "quant_bits": "load_in_4bit",
    },
    # OpenRLHF's flat flags (openrlhf/cli/train_*.py), spelled dotted on a v0.10.2+ command line (`_tool_name`)
    "openrlhf": {
        "lora_r": "lora_rank",
        "lora_alpha": "lora_alpha",
        "lora_targets": "target_modules",
        "quant_bits": "load_in_4bit",
    },
    # Megatron-SWIFT's `MegatronTunerMixin` (ms-swift v4.6.0 swift/megatron/arguments/megatron_args.py; no 4-bit
    # loading: Megatron-core builds its own layers); Megatron-LM's own scripts have no adapters (fixes.py)
    "megatron": {
        "lora_r": "lora_rank",
        "lora_alpha": "lora_alpha",
        "lora_targets": "target_modules",
    },
    # verl's FSDP actor model (ppo_trainer.yaml `actor_rollout_ref.model.*`; no 4-bit loading)
    "verl": {
        "lora_r": "actor_rollout_ref.model.lora_rank",
        "lora_alpha": "actor_rollout_ref.model.lora_alpha",
        "lora_targets": "actor_rollout_ref.model.target_modules",
    },
}
# programs whose LoRA is switched on by a rank above 0, not by a method name
RANK_SWITCHED = frozenset({"openrlhf", "verl"})


# programs that take no accumulation count: they derive it from a global batch (OpenRLHF `--train_batch_size`, verl
# `ppo_mini_batch_size`, Megatron `--global-batch-size`), which a smaller micro-batch leaves as it is
ACCUMULATION_FOLLOWS = frozenset({"openrlhf", "verl", "megatron"})


def _tool_name(doc: "_ShDoc", name: str) -> str:
    """A flag as this command line spells it: an OpenRLHF flag dotted on a v0.10.2+ command line
    (formats.launchers.openrlhf_spelling), any other as it is."""
    if doc.launch.tool != "openrlhf":
        return name
    dotted = any("." in n for n, _, _ in doc.args.flags)
    return launchers.openrlhf_spelling(name, dotted, doc.launch.subcommand)


# concepts whose value is written as it is (no change of key or meaning)
SH_DIRECT = frozenset(
    {
        "micro_batch",
        "grad_accum",
        "eval_batch",
        "grad_checkpointing",
        "optimizer",
        "packing",
        "compile",
        "activation_offload",
        "seq_len",
        "attn_impl",
        "completion_len",
        "vllm_memory_share",
    }
)


def _sh_word(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    s = str(value)
    return s if re.fullmatch(r"[A-Za-z0-9_./:,=+@%-]+", s) else shlex.quote(s)


class _ShDoc:
    def __init__(
        self, text: str, view: str, plan: TrainingPlan, console: bool, script: shell.ShellScript, launch: shell.Launch
    ):
        self.text = view
        self.original = text  # the document (differs from `view` in a Markdown file's prompts)
        self.plan = plan
        self.console = console
        self.script = script
        self.launch = launch  # `script.launch`
        self.idx = self.script.index
        self.args = shell.collect_args(self.script)
        self.edits: list[TextEdit] = []
        self.appended: list[str] = []  # new "--flag value" texts for the command
        self.longer = 0  # tokens a change of the completion length adds to each sequence of a token budget

    def span(self, start: int, end: int | None = None) -> Span:
        return self.idx.span(start, start if end is None else end)

    def replace_span(self, span: Span, value_text: str) -> None:
        start = self.idx.offset(span.start_line, span.start_col)
        end = self.idx.offset(span.end_line, span.end_col)
        old = self.text[start:end]
        if old[:1] in ("'", '"') and old[-1:] == old[:1] and value_text[:1] not in ("'", '"'):
            value_text = old[0] + value_text + old[0]
        self.edits.append(TextEdit(span, value_text))


def _sh_value(key: str, concept: str, value: Any, tool: str) -> str:
    n = key.lstrip("-").replace("-", "_")
    if concept == "grad_checkpointing" and n.rsplit(".", 1)[-1] == "recompute_granularity":
        # Megatron's checkpointing is a granularity (megatron/training/arguments.py: full, selective; Megatron-SWIFT
        # also none): on is `full`, off the core attention's selective recompute
        return "full" if value else "selective"
    if concept == "lora_targets" and list(value) == ["all-linear"]:
        return "all" if n == "lora_target" else "all-linear"
    if concept == "peft_method":
        if n in ("use_peft", "lora_enable"):
            return "True" if value in ("lora", "qlora", "dora") else "False"
        if n == "q_lora":
            return "True" if value == "qlora" else "False"
        return "lora" if value in ("lora", "qlora") else str(value)
    if concept == "optimizer" and tool == "torchtune":
        return optimizers.class_path(value) or value
    if isinstance(value, bool):
        if n in shell.EXTRA_HANDLERS or tool in ("llamafactory", "swift", "axolotl"):
            return "true" if value else "false"
    return _sh_word(value)


def render_shell(
    text: str,
    plan: TrainingPlan,
    changes: dict[str, Any],
    view: str | None = None,
    console: bool = False,
    first_line: int = 0,
) -> RenderResult | None:
    view = view if view is not None else text
    script, _ = shell.analyze(view, plan.source_file, first_line)
    if script.launch is None:
        return None
    doc = _ShDoc(text, view, plan, console, script, script.launch)
    notes: list[str] = []
    changes = dict(changes)
    if isinstance(changes.get("completion_len"), int) and plan.completion_len is not None:
        doc.longer = changes["completion_len"] - int(plan.completion_len.value)
    if changes.get("peft_method") == "qlora" and "quant_bits" not in changes:
        changes["quant_bits"] = 4
    peft_failed = False
    for concept, value in changes.items():
        if peft_failed and concept in ("lora_r", "lora_alpha", "lora_dropout", "lora_targets", "quant_bits"):
            continue  # one note for the whole adapter change
        try:
            _sh_change(doc, concept, value)
        except _Cannot as exc:
            notes.append(str(exc))
            peft_failed = peft_failed or concept == "peft_method"
    if notes:
        return _result([], notes)
    if doc.appended:
        _append_flags(doc)
    doc.edits.sort(key=lambda e: (e.span.start_line, e.span.start_col))
    return _result(doc.edits, [])


def _flag_text(tool: str, name: str, value_text: str | None) -> str:
    if tool in ("llamafactory", "torchtune", "verl"):
        return f"{name}={value_text}"
    return f"--{name}" if value_text is None else f"--{name} {value_text}"


def _put_flag(doc: _ShDoc, name: str, value_text: str | None) -> None:
    """Set `--name value` (or `name=value`): the command's own occurrence if it has one (its value may be
    unknown, e.g. `$(expr …)`), else a new flag."""
    n = name.replace("-", "_")
    for fname, flag, vals in doc.args.flags:
        if fname.replace("-", "_") != n:
            continue
        w = flag.word
        if vals and vals[0] is flag:
            eq = doc.text.find("=", w.start, w.end)
            doc.replace_span(doc.span(eq + 1, w.end), value_text if value_text is not None else "True")
        elif vals:
            doc.replace_span(doc.span(vals[0].word.start, vals[-1].word.end), value_text or "True")
        elif value_text is not None:
            doc.edits.append(TextEdit(doc.span(w.end), " " + value_text))
        return
    for key, a, eq in doc.args.overrides:
        if key.replace("-", "_") == n:
            doc.replace_span(doc.span(a.word.start + eq + 1, a.word.end), value_text or "true")
            return
    # one flag per name among those the fix adds: a later change of it (the rank after the LoRA switch) replaces it
    doc.appended[:] = [
        f for f in doc.appended if re.split(r"[ =]", f.lstrip("-"), maxsplit=1)[0].replace("-", "_") != n
    ]
    doc.appended.append(_flag_text(doc.launch.tool, name, value_text))


def _sh_change(doc: _ShDoc, concept: str, value: Any) -> None:
    plan, tool = doc.plan, doc.launch.tool
    cur = getattr(plan, concept, None)
    if cur is not None and cur.value == value and cur.origin.value == "file":
        return
    if concept == "alloc_conf":
        return _sh_alloc(doc, value)
    if concept == "grad_accum" and tool in ACCUMULATION_FOLLOWS:
        return  # the global batch stays as written, and accumulation follows from it
    if cur is not None and cur.per_unit and cur.key and isinstance(value, int):
        # a count read from a token budget: the budget that holds `value` sequences (Sourced.per_unit), edited where
        # the command writes it, else added
        budget = str(value * max(1, cur.per_unit + doc.longer))
        if (local := _local(plan, concept)) is not None and local.value_span is not None:
            return doc.replace_span(local.value_span, budget)
        return _put_flag(doc, cur.key.lstrip("-"), budget)
    local = _local(plan, concept)
    if local is not None and local.key and concept in SH_DIRECT:
        return _sh_edit_existing(doc, local, concept, value)
    if concept == "grad_checkpointing" and tool == "verl" and cur is not None and cur.key:
        if cur.key.endswith("override_transformer_config.recompute_granularity") and value:
            # verl's Megatron workers recompute by Megatron-Core's TransformerConfig, whose full recompute needs a
            # method and a layer count beside the granularity (megatron/core/transformer/transformer_config.py
            # `__post_init__`): every layer, one at a time, as verl's own Megatron examples write it
            prefix = cur.key[: -len("recompute_granularity")]
            for key, text in (("recompute_granularity", "full"), ("recompute_method", "uniform")):
                _put_flag(doc, prefix + key, text)
            return _put_flag(doc, prefix + "recompute_num_layers", "1")
    if tool == "verl" and cur is not None and cur.key and "." in cur.key and concept in SH_DIRECT:
        # a default of the trainer's own config, under its key there (`data.micro_batch_size_per_gpu` in the SFT
        # trainer, `actor_rollout_ref.actor.…` in the PPO one): an override of that key
        return _put_flag(doc, cur.key, _sh_value(cur.key, concept, value, tool))
    if concept == "optimizer_impl":
        if tool == "torchtune" and value == "fused":
            return _put_flag(doc, "optimizer.fused", "True")
        if value == "fused" and tool in (
            "torchrun",
            "accelerate",
            "deepspeed",
            "python",
            "trl",
            "swift",
            "llamafactory",
        ):
            return _sh_change(doc, "optimizer", "adamw_torch_fused")
        raise _Cannot(f"set the optimizer to {value} in the training script")
    if concept == "loss_impl":
        return _sh_loss(doc, value)
    if concept in ("peft_method", "lora_r", "lora_targets", "lora_alpha", "quant_bits"):
        return _sh_peft(doc, concept, value)
    if concept == "grad_checkpointing" and tool == "llamafactory":
        return _put_flag(doc, "disable_gradient_checkpointing", "false" if value else "true")
    if concept == "optimizer" and tool == "torchtune":
        return _put_flag(doc, "optimizer._component_", optimizers.class_path(value) or value)
    flags = TOOL_FLAGS.get(tool, HF_FLAGS if tool in HF_TOOLS else {})
    name = flags.get(concept)
    if name is not None:
        name = _tool_name(doc, name)
    if name is None:
        where = ": set it in the config file" if tool in ("llamafactory", "torchtune", "axolotl", "swift") else ""
        raise _Cannot(f"`{concept}` cannot be set on this {tool} command line{where}")
    if tool == "openrlhf" and isinstance(value, bool):  # argparse `store_true` switches
        if not value:
            raise _Cannot(f"remove `--{name}` from the command")
        return _put_flag(doc, name, None)
    _put_flag(doc, name, _sh_value(name, concept, value, tool))


def _sh_edit_existing(doc: _ShDoc, local: Sourced, concept: str, value: Any) -> None:
    key = local.key or ""  # the caller checks it is set
    span = _entry_span(local)
    n = key.lstrip("-").replace("-", "_")
    tool = doc.launch.tool
    inverted = n in INVERTED_KEYS
    negated = n.startswith("no_") and shell.is_known_key(n[3:])
    if isinstance(value, bool) and (inverted or negated):
        if negated and local.value_span is None:
            if value is True:  # `--no_X` bare → `--X`
                doc.replace_span(span, "--" + key[3:])
            return
        value = not value
    if local.value_span is None:  # a bare boolean flag: give it a value
        if isinstance(value, bool):
            return doc.edits.append(
                TextEdit(
                    Span(
                        file=span.file,
                        start_line=span.end_line,
                        start_col=span.end_col,
                        end_line=span.end_line,
                        end_col=span.end_col,
                    ),
                    " " + _sh_value(key, concept, value, tool),
                )
            )
        raise _Cannot(f"`{key}` has no value to change")
    if concept in ("gpu_count", "world_size", "zero_stage", "offload_optimizer", "offload_params", "dist_strategy"):
        raise _Cannot(f"change `{key}` on the launch command by hand")
    doc.replace_span(local.value_span, _sh_value(key, concept, value, tool))


def _sh_loss(doc: _ShDoc, value: str) -> None:
    tool = doc.launch.tool
    local = _local(doc.plan, "loss_impl")
    if local is not None and local.value_span is not None and local.key:
        n = local.key.replace("-", "_")
        if value == "fused" and n in ("use_liger_kernel", "enable_liger_kernel", "use_liger"):
            return doc.replace_span(local.value_span, "true" if tool in ("llamafactory", "swift") else "True")
        if value == "chunked" and n == "loss_type":
            return doc.replace_span(local.value_span, "chunked_nll")
    if value == "fused":
        if tool == "torchtune":
            return _put_flag(doc, "loss._component_", "torchtune.modules.loss.LinearCrossEntropyLoss")
        if tool == "axolotl":
            raise _Cannot("axolotl turns on Liger through `plugins:` in the YAML config")
        name = "enable_liger_kernel" if tool == "llamafactory" else "use_liger_kernel"
        return _put_flag(doc, name, "true" if tool in ("llamafactory", "swift") else "True")
    if value == "chunked" and (tool == "trl" or doc.plan.framework == "trl"):
        return _put_flag(doc, "loss_type", "chunked_nll")
    raise _Cannot(f"this {tool} command has no chunked loss flag; a fused loss (Liger) saves more")


def _sh_peft(doc: _ShDoc, concept: str, value: Any) -> None:
    plan, tool = doc.plan, doc.launch.tool
    if concept == "peft_method":
        local = _local(plan, "peft_method")
        flags = ADAPTER_FLAGS.get(tool, {})
        if tool in RANK_SWITCHED and (value == "lora" or value == "qlora" and "quant_bits" in flags):
            # LoRA is on with a rank above 0 (OpenRLHF `--lora_rank`, verl `model.lora_rank`, both 0 by default);
            # QLoRA adds the 4-bit loading (quant_bits), where the program has it
            if plan.peft_method is not None and plan.peft_method.value == "lora":
                return None
            return _put_flag(doc, _tool_name(doc, flags["lora_r"]), "16")
        if local is not None and local.value_span is not None:
            return doc.replace_span(local.value_span, _sh_value(local.key or "", concept, value, tool))
        if value not in ("lora", "qlora", "dora"):
            raise _Cannot(f"set the tuning method to {value} in the config")
        if tool == "swift":
            return _put_flag(doc, "tuner_type", "lora")
        if tool == "megatron" and plan.framework == "megatron-swift" and value == "lora":
            # `train_type` until ms-swift 4.0 renamed it (v3.12.6 swift/megatron/argument/megatron_args.py)
            release = plan.framework_release or ""
            return _put_flag(doc, "train_type" if release.startswith(("2.", "3.")) else "tuner_type", "lora")
        if tool == "llamafactory":
            return _put_flag(doc, "finetuning_type", "lora")
        if tool == "axolotl":
            return _put_flag(doc, "adapter", value if value in ("lora", "qlora") else "lora")
        if tool == "trl" or plan.framework == "trl":
            return _put_flag(doc, "use_peft", None)
        raise _Cannot("this script's arguments have no LoRA switch: add LoRA in the training script")
    if tool == "openrlhf" and concept == "quant_bits" and value != 4:
        raise _Cannot("OpenRLHF loads a model in 4 bits only (`--load_in_4bit`)")
    local = _local(plan, concept)
    if local is not None and concept == "quant_bits" and local.key:
        n = local.key.replace("-", "_")
        if n in ("load_in_4bit", "load_in_8bit", "q_lora"):
            if value not in (4, 8):
                raise _Cannot(f"`{local.key}` switches 4- or 8-bit loading only")
            sep = "-" if "-" in local.key else "_"
            return doc.replace_span(
                _entry_span(local), f"--load{sep}in{sep}{value}bit" + (" True" if local.value_span else "")
            )
    if local is not None and local.value_span is not None:
        return doc.replace_span(local.value_span, _sh_value(local.key or "", concept, value, tool))
    names = ADAPTER_FLAGS.get(tool) or (ADAPTER_FLAGS["trl"] if plan.framework == "trl" else None)
    if names is None or concept not in names:
        raise _Cannot(f"this {tool} command cannot set `{concept}`: add it in the training script or config")
    name = _tool_name(doc, names[concept])
    if concept == "quant_bits" and name.rsplit(".", 1)[-1] in ("load_in_4bit", "load-in-4bit"):
        if value != 4:
            name = name.replace("4", "8")
        return _put_flag(doc, name, "true" if tool == "axolotl" else None)
    if concept == "lora_targets" and name == "lora-target-linear":
        return _put_flag(doc, name, "true")
    _put_flag(doc, name, _sh_value(name, concept, value, tool))


def _ray_job(launch: shell.Launch) -> bool:
    """The program runs as a Ray job (`ray job submit … -- python3 …`): its environment is the job's runtime
    environment, not the submitting shell's."""
    words = [a.text.rsplit("/", 1)[-1] for a in launch.args[: launch.script_args_start]]
    return any(words[i : i + 3] == ["ray", "job", "submit"] for i in range(len(words)))


def _sh_alloc(doc: _ShDoc, value: str) -> None:
    local = _local(doc.plan, "alloc_conf")
    if local is not None and local.value_span is not None:
        return doc.replace_span(local.value_span, _sh_word(value))
    if doc.launch.command.depth > 0 or _ray_job(doc.launch):
        # an `export` line would land inside the `bash -c` string or in a shell whose environment the job does not
        # get (a Ray job runs in its `--runtime-env-json` env_vars)
        where = "the Ray job's runtime environment (`env_vars`)" if _ray_job(doc.launch) else "the `bash -c` script"
        raise _Cannot(f"set PYTORCH_CUDA_ALLOC_CONF={value} in {where}")
    start = doc.launch.command.start
    line, _ = doc.idx.pos(start)
    line_start = doc.idx.line_start(line)
    line_text = doc.idx.line(line)
    indent = line_text[: len(line_text) - len(line_text.lstrip())]
    prompt = ""
    if doc.console:
        prompt = "$ "
        indent = indent[:-2] if indent.endswith("  ") else indent
    doc.edits.append(
        TextEdit(doc.span(line_start), f"{indent}{prompt}export PYTORCH_CUDA_ALLOC_CONF={_sh_word(value)}\n")
    )


def _append_flags(doc: _ShDoc) -> None:
    """Add the new flags after the script's last argument, in the command's layout."""
    idx = doc.idx
    last = doc.args.last
    word = last.word if last is not None else doc.launch.command.words[-1]
    end = word.end
    first_line, _ = idx.pos(doc.launch.command.start)
    last_line, _ = idx.pos(word.start)
    line_start = idx.line_start(last_line)
    line_text = idx.line(last_line)  # the lines spans count: a lone \r ends one too
    rest = line_text[end - line_start :]
    if last_line == first_line:
        doc.edits.append(TextEdit(doc.span(end), "".join(f" {f}" for f in doc.appended)))
        return
    indent = line_text[: len(line_text) - len(line_text.lstrip())]
    original_lines = text_lines(doc.original)
    if last_line < len(original_lines):  # keeps a console block's `> ` prompt
        indent = original_lines[last_line][: len(indent)]
    if rest.rstrip().endswith("\\"):  # trailing `\` on the last line: keep it on every new line
        at = end + len(rest)
        doc.edits.append(TextEdit(doc.span(at), "".join(f"\n{indent}{f} \\" for f in doc.appended)))
    else:
        doc.edits.append(TextEdit(doc.span(end), "".join(f" \\\n{indent}{f}" for f in doc.appended)))


# === Markdown ====================================================================================


def render_markdown(text: str, plan: TrainingPlan, changes: dict[str, Any]) -> RenderResult | None:
    found = markdown.training_block(text, plan.source_file)
    if found is None:
        return None
    block, view, _script, _issues = found
    return render_shell(text, plan, changes, view=view, console=block.console, first_line=block.first_line)
