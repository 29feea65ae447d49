"""Python training scripts: the calls that decide memory, read with `ast` (never imported or run).

Recognised: `TrainingArguments(...)` and TRL's `SFTConfig`/`DPOConfig`/`GRPOConfig`/`ORPOConfig`/
`KTOConfig`/… keyword arguments (through the shared `formats.hf` table), `*.from_pretrained(...)`
(model id, dtype, attention, 4/8-bit), `BitsAndBytesConfig`, `LoraConfig` and unsloth's
`get_peft_model`, `gradient_checkpointing_enable()`, `prepare_model_for_kbit_training`,
`os.environ[...]` for the allocator, TRL trainers given a model name, torch/bitsandbytes/torchao
optimizer constructors, and, in a plain loop, `DataLoader(batch_size=…)` and `torch.autocast`.

Only the first call of each kind is read (a script with two configs describes two runs).
Values are literals or simple variables (`batch_size = 8` … `per_device_train_batch_size=batch_size`),
arithmetic and f-strings of those. Anything else — `**kwargs`, calls, attributes of unknown objects,
the `...` placeholder, a name bound more than once — is unknown: nothing is recorded for it, only an
info issue saying the default is shown instead. A file without a training call (a trainer, a
config class, an optimizer, a LoRA config, `.backward()`) is not a training config.
"""

from __future__ import annotations

import ast
import bisect
import math
import re
from typing import Any

from vramlens.formats import hf
from vramlens.formats.settings import PlanBuilder, Setting, to_bool
from vramlens.formats.shell import SWIFT_ENV_VARS, apply_hf_key, is_hf_key
from vramlens.plan import IssueKind, Origin, Severity, Span, TrainingPlan
from vramlens.text import iter_text_lines, text_lines

# Larger files are not training scripts; the bound also bounds ast.parse (densest code: ~200 MB, ~1 s at 500 KB).
MAX_PYTHON_CHARS = 500_000
# CPython 3.11 parses the placeholders of one f-string in time quadratic in their number (150,000 `{x}` in a
# 450 KB f-string: over a minute inside ast.parse; 3.12's PEP 701 parser is linear). Training scripts have
# a few hundred braces; a text with more is not parsed.
MAX_PYTHON_BRACES = 20_000

HF_CONFIGS = frozenset({"TrainingArguments", "Seq2SeqTrainingArguments", "UnslothTrainingArguments"})
TRL_CONFIGS = frozenset(
    {
        "SFTConfig",
        "DPOConfig",
        "GRPOConfig",
        "ORPOConfig",
        "KTOConfig",
        "CPOConfig",
        "RewardConfig",
        "PPOConfig",
        "RLOOConfig",
        "GKDConfig",
        "OnlineDPOConfig",
        "PRMConfig",
        "BCOConfig",
        "XPOConfig",
        "NashMDConfig",
    }
)
HF_TRAINERS = frozenset({"Trainer", "Seq2SeqTrainer"})
TRL_TRAINERS = frozenset(
    {
        "SFTTrainer",
        "DPOTrainer",
        "GRPOTrainer",
        "ORPOTrainer",
        "KTOTrainer",
        "CPOTrainer",
        "RewardTrainer",
        "PPOTrainer",
        "RLOOTrainer",
        "GKDTrainer",
        "OnlineDPOTrainer",
        "PRMTrainer",
        "BCOTrainer",
        "XPOTrainer",
        "NashMDTrainer",
        "UnslothTrainer",
    }
)
CONFIG_CLASSES = HF_CONFIGS | TRL_CONFIGS
# ms-swift's Python API (ms-swift 3.x/4.x swift/llm/__init__.py, docs "Pre-training and Fine-tuning" → Python):
# `sft_main(TrainArguments(...))`, `pt_main(PretrainArguments(...))`, `rlhf_main(RLHFArguments(...))` take the
# same arguments as `swift sft|pt|rlhf` (swift/llm/argument/train_args.py, rlhf_args.py); the subcommand each is
SWIFT_ARGUMENTS = {"TrainArguments": "sft", "SftArguments": "sft", "PretrainArguments": "pt", "RLHFArguments": "rlhf"}
OPTIMIZER_MODULES = (
    "torch.optim.",
    "bitsandbytes.optim.",
    "bnb.optim.",
    "torchao.optim.",
    "torchao.prototype.low_bit_optim.",
    "transformers.optimization.",
    "apex.optimizers.",
    "schedulefree.",
    "galore_torch.",
    "lion_pytorch.",
)
TOP_LEVEL_OPTIMIZERS = frozenset({"transformers.AdamW", "transformers.Adafactor", "bitsandbytes.optim.AdamW8bit"})
TORCH_DTYPES = frozenset({"float32", "float", "bfloat16", "float16", "half", "float8_e4m3fn", "float8_e5m2"})
ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF")
LORA_KEYS = {
    "r": "lora_r",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "target_modules": "lora_target_modules",
    "modules_to_save": "lora_modules_to_save",
    "use_dora": "use_dora",
}
# peft configs of vector adapters: class → (peft method, keyword → HF key)
VECTOR_ADAPTER_CONFIGS = {
    "IA3Config": (
        "ia3",
        {
            "target_modules": "lora_target_modules",
            "feedforward_modules": "ia3_feedforward_modules",
            "modules_to_save": "lora_modules_to_save",
        },
    ),
    "VeraConfig": (
        "vera",
        {
            "r": "vera_rank",
            "target_modules": "lora_target_modules",
            "vera_dropout": "vera_dropout",
            "modules_to_save": "lora_modules_to_save",
        },
    ),
}
MODEL_LOAD_KEYS = (
    "torch_dtype",
    "dtype",
    "attn_implementation",
    "load_in_4bit",
    "load_in_8bit",
    "use_flash_attention_2",
    "max_seq_length",
    "num_labels",
    "problem_type",
    "trust_remote_code",
)
_TRIGGER = re.compile(
    r"TrainingArguments|(?:Train|Sft|Pretrain|RLHF)Arguments\s*\(|Config\s*\(|Trainer\s*\(|from_pretrained|backward|optim|"
    r"gradient_checkpointing_enable|prepare_model_for_kbit_training|get_peft_model"
)


# names whose calls we read; a line without any of them holds no call of interest
_HOT = re.compile(
    r"Arguments|Config|Trainer|from_pretrained|get_peft_model|gradient_checkpointing_enable|"
    r"prepare_model_for_kbit_training|environ|putenv|optim|backward|DataLoader|autocast|compile|"
    r"bfloat16|half|\.to\b|AdamW|Adafactor|global|nonlocal|apply_liger_kernel_to_"
)


class _Unknown:
    """An expression whose value is only known at run time."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


UNKNOWN = _Unknown("")


def _is_unknown(v: Any) -> bool:
    return isinstance(v, _Unknown)


# --- positions -----------------------------------------------------------------------------------


class _Cols:
    """ast positions (1-based lines, UTF-8 byte columns) → Span (0-based lines, character columns)."""

    def __init__(self, text: str, file: str):
        self.lines = text_lines(text)  # as ast counts them: a lone \r ends a line too
        self.file = file
        self._cache: dict[int, bytes] = {}

    def col(self, lineno: int, byte_col: int) -> int:
        enc = self._cache.get(lineno)
        if enc is None:
            line = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
            enc = self._cache[lineno] = b"" if line.isascii() else line.encode("utf-8")
        if not enc:
            return byte_col
        return len(enc[:byte_col].decode("utf-8", errors="replace"))

    def span(self, node: ast.AST, end: ast.AST | None = None) -> Span:
        end = end or node
        return Span(
            file=self.file,
            start_line=node.lineno - 1,
            start_col=self.col(node.lineno, node.col_offset),
            end_line=end.end_lineno - 1,
            end_col=self.col(end.end_lineno, end.end_col_offset),
        )

    def source(self, node: ast.AST, limit: int = 60) -> str:
        try:
            if node.lineno == node.end_lineno:
                enc = self.lines[node.lineno - 1].encode("utf-8")
                s = enc[node.col_offset : node.end_col_offset].decode("utf-8", errors="replace")
            else:
                s = (
                    self.lines[node.lineno - 1].encode("utf-8")[node.col_offset :].decode("utf-8", errors="replace")
                    + " …"
                )
        except (AttributeError, IndexError):
            return "…"
        return s if len(s) <= limit else s[: limit - 1] + "…"


# --- scopes and simple values --------------------------------------------------------------------


class _Scope:
    __slots__ = ("parent", "bindings")

    def __init__(self, parent: "_Scope | None"):
        self.parent = parent
        self.bindings: dict[str, list] = {}  # name -> [value expr | None (bound some other way)]

    def bind(self, name: str, value: ast.expr | None) -> None:
        self.bindings.setdefault(name, []).append(value)

    def lookup(self, name: str) -> tuple["_Scope", list] | None:
        s = self
        while s is not None:
            b = s.bindings.get(name)
            if b is not None:
                return s, b
            s = s.parent
        return None


class _Collector:
    """One pass over the tree: scopes with their bindings, imports, and the nodes we care about."""

    def __init__(self, hot: list[int] | None = None):
        self.hot = hot  # sorted 1-based lines that may hold a call we read (None: all)
        self.module = _Scope(None)
        self.imports: dict[str, str] = {}  # local name -> dotted origin
        self.calls: list[tuple[ast.Call, _Scope]] = []
        self.env_assigns: list[tuple[ast.Assign, _Scope]] = []

    def run(self, tree: ast.Module) -> None:
        self._body(tree.body, self.module, self.module)

    def _body(self, stmts, scope: _Scope, fscope: _Scope) -> None:
        for st in stmts:
            self._stmt(st, scope, fscope)

    def _stmt(self, st: ast.stmt, scope: _Scope, fscope: _Scope) -> None:
        t = type(st)
        if t is ast.Assign:
            self._expr(st.value, scope)
            for tgt in st.targets:
                self._target(tgt, scope, st.value if len(st.targets) >= 1 else None)
                if type(tgt) is ast.Subscript:
                    self._expr(tgt, scope)
                    self.env_assigns.append((st, scope))
            return
        if t is ast.AnnAssign:
            if st.value is not None:
                self._expr(st.value, scope)
                self._target(st.target, scope, st.value)
            return
        if t is ast.AugAssign:
            self._expr(st.value, scope)
            self._target(st.target, scope, None)
            return
        if t is ast.Expr:
            self._expr(st.value, scope)
            return
        if t in (ast.FunctionDef, ast.AsyncFunctionDef):
            for d in st.decorator_list:
                self._expr(d, scope)
            a = st.args
            for d in a.defaults + [d for d in a.kw_defaults if d is not None]:
                self._expr(d, scope)
            scope.bind(st.name, None)
            if not self._is_hot(st):
                return  # no call we read in it: its locals cannot matter
            inner = _Scope(fscope)
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                inner.bind(arg.arg, None)
            self._body(st.body, inner, inner)
            return
        if t is ast.ClassDef:
            for e in st.bases + [k.value for k in st.keywords] + st.decorator_list:
                self._expr(e, scope)
            scope.bind(st.name, None)
            if self._is_hot(st):
                self._body(st.body, _Scope(fscope), fscope)
            return
        if t in (ast.Import, ast.ImportFrom):
            for al in st.names:
                if t is ast.Import:
                    local = al.asname or al.name.split(".")[0]
                    self.imports[local] = al.name if al.asname else al.name.split(".")[0]
                else:
                    local = al.asname or al.name
                    self.imports[local] = f"{st.module or ''}.{al.name}".lstrip(".")
                scope.bind(local, None)
            return
        if t in (ast.For, ast.AsyncFor):
            self._expr(st.iter, scope)
            self._target(st.target, scope, None)
        elif t in (ast.With, ast.AsyncWith):
            for item in st.items:
                self._expr(item.context_expr, scope)
                if item.optional_vars is not None:
                    self._target(item.optional_vars, scope, None)
        elif t in (ast.If, ast.While):
            self._expr(st.test, scope)
        elif t is ast.Return and st.value is not None:
            self._expr(st.value, scope)
        elif t in (ast.Global, ast.Nonlocal):
            outer = self.module if t is ast.Global else (fscope.parent or self.module)
            for n in st.names:  # rebound from inside a function: not one known value
                scope.bind(n, None)
                outer.bind(n, None)
        elif t is ast.Try or t.__name__ == "TryStar":
            for h in st.handlers:
                if h.name:
                    scope.bind(h.name, None)
                self._body(h.body, scope, fscope)
        elif t is ast.Match:
            self._expr(st.subject, scope)
            for case in st.cases:
                self._body(case.body, scope, fscope)
        # statement bodies (if/for/while/with/try)
        for name in ("body", "orelse", "finalbody"):
            sub = getattr(st, name, None)
            if sub and t is not ast.Match:
                self._body(sub, scope, fscope)

    def _target(self, tgt: ast.expr, scope: _Scope, value: ast.expr | None) -> None:
        tt = type(tgt)
        if tt is ast.Name:
            scope.bind(tgt.id, value)
        elif tt in (ast.Tuple, ast.List):
            vals = value.elts if type(value) in (ast.Tuple, ast.List) and len(value.elts) == len(tgt.elts) else None
            for i, e in enumerate(tgt.elts):
                self._target(e, scope, vals[i] if vals is not None else None)
        elif tt is ast.Starred:
            self._target(tgt.value, scope, None)

    def _is_hot(self, node: ast.AST) -> bool:
        """Does the node's line range hold a line that names a call we read (or `global`)?"""
        hot = self.hot
        if hot is None:
            return True
        k = bisect.bisect_left(hot, node.lineno)
        return k < len(hot) and hot[k] <= node.end_lineno

    def _expr(self, node: ast.expr, scope: _Scope) -> None:
        # Find calls (and walrus bindings) inside an expression, iteratively; skip expressions on lines
        # that name nothing we read (most of a long script).
        if not self._is_hot(node):
            return
        stack = [node]
        calls = self.calls
        while stack:
            n = stack.pop()
            t = type(n)
            if t is ast.Call:
                calls.append((n, scope))
            elif t is ast.NamedExpr:
                scope.bind(n.target.id, None)
            elif t is ast.Constant or t is ast.Name:
                continue
            elif t in (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp):
                continue  # values inside are not configuration
            for f in _child_fields(t):
                v = getattr(n, f, None)
                if v is None:
                    continue
                if type(v) is list:
                    stack.extend(x for x in v if isinstance(x, ast.AST))
                elif isinstance(v, ast.AST):
                    stack.append(v)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(t: type) -> tuple[str, ...]:
    """The fields of an expression node type that can hold sub-expressions (cached per type)."""
    f = _FIELDS.get(t)
    if f is None:
        f = _FIELDS[t] = tuple(
            name
            for name in t._fields
            if name not in ("ctx", "op", "ops", "id", "attr", "arg", "value_kind", "conversion", "kind")
        )
    return f


class _Evaluator:
    def __init__(self, col: _Collector, cols: _Cols):
        self.c = col
        self.cols = cols

    def dotted(self, node: ast.expr) -> str | None:
        """`torch.optim.AdamW` → "torch.optim.AdamW", with import aliases resolved (`bnb` → `bitsandbytes`)."""
        parts = []
        while type(node) is ast.Attribute:
            parts.append(node.attr)
            node = node.value
        if type(node) is not ast.Name:
            return None
        root = self.c.imports.get(node.id, node.id)
        parts.append(root)
        return ".".join(reversed(parts))

    def value(self, node: ast.expr, scope: _Scope, depth: int = 0) -> Any:
        if depth > 30:
            return _Unknown("too deep")
        t = type(node)
        if t is ast.Constant:
            v = node.value
            if v is Ellipsis:
                return _Unknown("the `...` placeholder")
            if isinstance(v, bytes):
                return _Unknown(self.cols.source(node))
            return v
        if t is ast.Name:
            return self._name(node, scope, depth)
        if t in (ast.List, ast.Tuple, ast.Set):
            out = []
            for e in node.elts:
                v = self.value(e, scope, depth + 1)
                if _is_unknown(v):
                    return v
                out.append(v)
            return out
        if t is ast.Dict:
            d = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    continue  # `**other`: its keys are not known
                kv = self.value(k, scope, depth + 1)
                if _is_unknown(kv) or not isinstance(kv, (str, int, float, bool)):
                    continue
                vv = self.value(v, scope, depth + 1)
                if not _is_unknown(vv):
                    d[kv] = vv
            return d
        if t is ast.BinOp:
            return self._binop(node, scope, depth)
        if t is ast.UnaryOp:
            v = self.value(node.operand, scope, depth + 1)
            if _is_unknown(v):
                return v
            if type(node.op) is ast.USub and isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v
            if type(node.op) is ast.UAdd and isinstance(v, (int, float)):
                return v
            if type(node.op) is ast.Not and isinstance(v, bool):
                return not v
            return _Unknown(self.cols.source(node))
        if t is ast.JoinedStr:
            return self._fstring(node, scope, depth)
        if t is ast.Attribute:
            d = self.dotted(node)
            if d is not None:
                head, _, last = d.rpartition(".")
                if head == "torch" and last in TORCH_DTYPES:
                    return d
                if head.endswith("OptimizerNames") and last.isupper():
                    return last.lower()
            return _Unknown(self.cols.source(node))
        if t is ast.Call:
            if type(node.func) is ast.Name and node.func.id == "dict" and not node.args:
                d = {}
                for kw in node.keywords:
                    if kw.arg is None:
                        continue
                    vv = self.value(kw.value, scope, depth + 1)
                    if not _is_unknown(vv):
                        d[kw.arg] = vv
                return d
            return _Unknown(self.cols.source(node))
        if t is ast.Subscript:
            base = self.value(node.value, scope, depth + 1)
            idx = self.value(node.slice, scope, depth + 1)
            if isinstance(base, dict) and not _is_unknown(idx) and isinstance(idx, (str, int)) and idx in base:
                return base[idx]
            if (
                isinstance(base, list)
                and isinstance(idx, int)
                and not isinstance(idx, bool)
                and -len(base) <= idx < len(base)
            ):
                return base[idx]
            return _Unknown(self.cols.source(node))
        return _Unknown(self.cols.source(node))

    def _name(self, node: ast.Name, scope: _Scope, depth: int) -> Any:
        found = scope.lookup(node.id)
        if found is None:
            return _Unknown(f"`{node.id}` is not assigned in this file")
        where, exprs = found
        values = []
        for e in exprs:
            if e is None:
                return _Unknown(f"`{node.id}` is set at run time")
            v = self.value(e, where, depth + 1)
            if _is_unknown(v):
                return _Unknown(f"`{node.id}` = {self.cols.source(e)}")
            values.append(v)
        if any(v != values[0] or type(v) is not type(values[0]) for v in values[1:]):
            return _Unknown(f"`{node.id}` is assigned {len(values)} different values")
        return values[0]

    def _binop(self, node: ast.BinOp, scope: _Scope, depth: int) -> Any:
        a = self.value(node.left, scope, depth + 1)
        if _is_unknown(a):
            return a
        b = self.value(node.right, scope, depth + 1)
        if _is_unknown(b):
            return b
        op = type(node.op)
        num = (int, float)
        try:
            if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
                if op is ast.Add:
                    return a + b
                if op is ast.Sub:
                    return a - b
                if op is ast.Mult:
                    return a * b
                if op is ast.Div:
                    return a / b
                if op is ast.FloorDiv:
                    return a // b
                if op is ast.Mod:
                    return a % b
                if op is ast.Pow and abs(b) <= 64 and abs(a) <= 2**32:
                    r = a**b
                    return (
                        r if not isinstance(r, complex) and (not isinstance(r, float) or math.isfinite(r)) else UNKNOWN
                    )
            if op is ast.Add and type(a) is type(b) and isinstance(a, (str, list)) and len(a) + len(b) <= 100_000:
                return a + b
            if (
                op is ast.Mult
                and isinstance(a, (str, list))
                and isinstance(b, int)
                and 0 <= b
                and len(a) * b <= 100_000
            ):
                return a * b
        except (ArithmeticError, ValueError, TypeError):
            pass
        return _Unknown(self.cols.source(node))

    def _fstring(self, node: ast.JoinedStr, scope: _Scope, depth: int) -> Any:
        out = []
        for part in node.values:
            if type(part) is ast.Constant:
                out.append(str(part.value))
                continue
            v = self.value(part.value, scope, depth + 1)
            if _is_unknown(v) or not isinstance(v, (str, int, float, bool)):
                return _Unknown(self.cols.source(node))
            spec = ""
            if part.format_spec is not None:
                s = self._fstring(part.format_spec, scope, depth + 1)
                if _is_unknown(s) or re.search(r"\d{4,}", s):
                    return _Unknown(self.cols.source(node))
                spec = s
            conv = {115: str, 114: repr, 97: ascii}.get(part.conversion)
            try:
                out.append(format(conv(v) if conv else v, spec))
            except (ValueError, TypeError):
                return _Unknown(self.cols.source(node))
        return "".join(out)


# --- the reader ----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, text: str, path: str):
        self.cols = _Cols(text, path)
        self.b = PlanBuilder(path, "python", None)
        self.signals: set[str] = set()  # "hf", "trl", "custom"
        self.loader_batches: list[Setting] = []
        self.seen: set[str] = set()  # kinds of call already read
        self.autocasts: list[Setting] = []
        self.swift: tuple[str, list[Setting]] | None = None  # ms-swift: (subcommand, its arguments' settings)
        # id(`X.from_pretrained(...)` call) → the trainer keyword (`teacher_model`, `ref_model`, …) it is passed to:
        # a model a trainer holds besides the one it trains (`_other_model_loads`)
        self.other_loads: dict[int, str] = {}

    def first(self, kind: str) -> bool:
        """True the first time a call of this kind is met."""
        if kind in self.seen:
            return False
        self.seen.add(kind)
        return True

    # settings
    def kw_setting(self, kw: ast.keyword, value: Any, key: str | None = None) -> Setting:
        """`key=value` with lazy spans: most keyword arguments are never looked at again."""
        c, v = self.cols, kw.value
        col = c.col(kw.lineno, kw.col_offset)
        s = Setting.at(
            key or kw.arg,
            (kw.arg,),
            value,
            (
                c.file,
                kw.lineno - 1,
                col,
                kw.lineno - 1,
                col + len(kw.arg),
                v.lineno - 1,
                c.col(v.lineno, v.col_offset),
                v.end_lineno - 1,
                c.col(v.end_lineno, v.end_col_offset),
            ),
        )
        s.unresolved = _is_unknown(value)
        return s

    def node_setting(self, key: str, node: ast.AST, value: Any, value_node: ast.AST | None = None) -> Setting:
        return Setting(
            key=key,
            path=(key,),
            value=value,
            span=self.cols.span(node),
            value_span=self.cols.span(value_node) if value_node is not None else None,
        )

    def unknown(self, s: Setting, v: _Unknown) -> None:
        why = f" ({v.why})" if v.why else ""
        self.b.issue(
            IssueKind.NOT_READ,
            f"`{s.key}` is only known when the script runs{why}; it is not read, so the framework default is shown",
            s,
            severity=Severity.INFO,
        )

    def splat(self, kw: ast.keyword, call_name: str, why: str = "") -> None:
        self.b.issue(
            IssueKind.NOT_READ,
            f"settings passed to `{call_name}` through `**{self.cols.source(kw.value, 40)}` are only known "
            f"when the script runs{' (' + why + ')' if why else ''}; they are not read, so the framework "
            f"defaults are shown for whatever they set",
            span=self.cols.span(kw.value),
            severity=Severity.INFO,
        )


def _trl_class(last: str, full: str) -> tuple[bool, bool]:
    """(a TRL config, a TRL trainer) not in the tables above: a `…Config` / `…Trainer` class imported from a `trl`
    module (TRL main `trl/experimental/<method>/`: `TPOConfig(_BaseConfig)`, `GOLDConfig(SFTConfig)`,
    `AsyncGRPOTrainer(_BaseTrainer)`; every TRL config extends `transformers.TrainingArguments` and every trainer
    takes the `model` to train)."""
    if not full.startswith("trl.") or last in CONFIG_CLASSES or last in TRL_TRAINERS or last == "ModelConfig":
        return False, False
    return last.endswith("Config") and not last.startswith("Generation"), last.endswith("Trainer")


def _kw(call: ast.Call, name: str) -> ast.keyword | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def parse_python(text: str, ctx) -> TrainingPlan | None:
    """`formats.TEXT_PARSERS` entry for .py files."""
    if len(text) > MAX_PYTHON_CHARS or text.count("{") > MAX_PYTHON_BRACES:
        return None
    if not _TRIGGER.search(text):
        return _named_for_something_else(text, ctx.path)
    try:
        tree = ast.parse(text, filename=ctx.path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    plan = read_tree(tree, text, ctx)
    if plan is None:
        return _named_for_something_else(text, ctx.path)
    from vramlens.formats import usage

    plan = usage.from_docstring(plan, text, tree, ctx) or plan
    if plan.model_id is None and usage.wants_command_line(plan, text):
        from vramlens.formats import script_arguments

        script_arguments.apply_own_defaults(plan, text, ctx.path)
    if plan.model_id is None:
        usage.name_command_line_model(plan, text, ctx.path)
    return plan


def _named_for_something_else(text: str, path: str) -> TrainingPlan | None:
    """A script with no training call whose file name says what it does instead (`formats.purpose.script_purpose`:
    TRL v0.19.1 trl/scripts/vllm_serve.py, the `trl vllm-serve` server; v0.12.2 examples/scripts/chat.py; main
    examples/scripts/ssd_eval.py): a plan that only carries that purpose (VL018). Code that does not parse is no
    script of any kind, and an empty file says nothing."""
    from vramlens.formats import purpose
    from vramlens.plan import Sourced

    if not text.strip():
        return None
    what = purpose.script_purpose(path.replace("\\", "/"))
    if what is None:
        return None
    try:
        ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    plan = TrainingPlan(source_file=path, format="python")
    plan.purpose = Sourced(value=f"{what}, which calls no trainer", origin=Origin.FILE)
    return plan


_MD_FENCE = re.compile(r"([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`{]*)")
PYTHON_INFOS = frozenset({"python", "py", "python3", "py3"})


def _python_blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """(fence line, end line exclusive, fence indentation) of every fenced Python block of a Markdown page."""
    out = []
    i, n = 0, len(lines)
    while i < n:
        m = _MD_FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group(2)
        j = i + 1
        while j < n and not (lines[j].strip().startswith(fence) and not lines[j].strip().strip(fence[0])):
            j += 1
        if m.group(3).lower() in PYTHON_INFOS:
            out.append((i, j, m.group(1)))
        i = j + 1
    return out


def parse_markdown_python(text: str, ctx) -> TrainingPlan | None:
    """A Markdown page's first fenced Python block that trains a named model, read as a Python script at its own
    lines (TRL's docs show their runs as Python: docs/source/sft_trainer.md at TRL main, "Quick start":
    `SFTTrainer(model="Qwen/Qwen3-0.6B", train_dataset=...)`). Each block is read alone: a page's blocks are
    alternatives or fragments, not one script. A block indented under a list item keeps its columns: its fence line
    becomes `if 1:`. None when no block names the model it trains."""
    if len(text) > MAX_PYTHON_CHARS or text.count("{") > MAX_PYTHON_BRACES:
        return None
    lines = text_lines(text)
    for fence, end, indent in _python_blocks(lines):
        body = "\n".join(lines[fence + 1 : end])
        if not _TRIGGER.search(body):
            continue
        src = "\n" * fence + ("if 1:" if indent else "") + "\n" + body
        try:
            tree = ast.parse(src, filename=ctx.path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # a fragment (`...`, a doctest prompt): not a runnable block
        plan = read_tree(tree, src, ctx)
        if plan is not None and plan.model_id is not None:
            plan.read_notes.append(f"the run is the Python block at line {fence + 2} of the page")
            return plan
    return None


def _hot_lines(tree: ast.Module, text: str) -> list[int]:
    """1-based numbers of the lines that mention a call name we read (or an optimizer imported by name)."""
    names = [
        al.asname or al.name
        for st in tree.body
        if type(st) is ast.ImportFrom and st.module and (st.module + ".").startswith(OPTIMIZER_MODULES)
        for al in st.names
    ]
    pattern = _HOT if not names else re.compile(_HOT.pattern + "|" + "|".join(re.escape(n) for n in names))
    search = pattern.search
    return [n for n, line in enumerate(iter_text_lines(text), 1) if search(line)]


def read_tree(tree: ast.Module, text: str, ctx) -> TrainingPlan | None:
    col = _Collector(_hot_lines(tree, text))
    col.run(tree)
    r = _Reader(text, ctx.path)
    ev = _Evaluator(col, r.cols)
    col.calls.sort(key=lambda cs: (cs[0].lineno, cs[0].col_offset))  # first writer wins: source order
    r.other_loads = _other_model_loads(col.calls)
    for call, scope in col.calls:
        _call(r, ev, call, scope)
    for st, scope in col.env_assigns:
        _environ_assign(r, ev, st, scope)
    if not r.signals:
        return None
    b = r.b
    _diffusion_trainer(r, col.calls)
    if r.swift is not None:
        _swift(r, ctx)
    elif "unsloth" in r.signals:
        b.plan.framework = "unsloth"  # FastLanguageModel/FastModel: unsloth's own step under TRL's trainer
    elif "trl" in r.signals:
        b.plan.framework = "trl"
    elif "hf" in r.signals:
        b.plan.framework = "transformers"
    else:
        b.plan.framework = "custom"
        for s in r.loader_batches:
            b.set_int("micro_batch", s, minimum=1)
        for s in r.autocasts:
            b.set("amp_dtype", s.value, s)
    from vramlens.formats.references import follow_references

    follow_references(b, ctx)
    return b.plan


# TRL's trainers of a Stable Diffusion pipeline (trl/trainer/ddpo_trainer.py, alignprop_trainer.py, v0.12 to v0.19;
# examples/scripts/ddpo.py and alignprop.py train `DefaultDDPOStableDiffusionPipeline(script_args.pretrained_model)`;
# the CLIP model those scripts load is the aesthetic scorer that rewards the images, not the model trained)
DIFFUSION_TRAINERS = {"DDPOTrainer": "ddpo_trainer.py", "AlignPropTrainer": "alignprop_trainer.py"}


def _diffusion_trainer(r: _Reader, calls: list) -> None:
    from vramlens.formats.model_kind import set_other_kind

    for call, _ in calls:
        func = call.func
        name = func.id if type(func) is ast.Name else func.attr if type(func) is ast.Attribute else ""
        if name in DIFFUSION_TRAINERS:
            set_other_kind(
                r.b,
                r.node_setting(name, func, name),
                "a diffusion model",
                f"`{name}` fine-tunes a Stable Diffusion pipeline (TRL trl/trainer/{DIFFUSION_TRAINERS[name]})",
            )
            r.b.plan.model_id = None
            return


def _call(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope) -> None:
    func = call.func
    if type(func) is ast.Name:
        last = func.id
    elif type(func) is ast.Attribute:
        last = func.attr
    else:
        return
    full = ev.dotted(func) or last
    trl_config, trl_trainer = _trl_class(last, full)
    # A script with two configs (or two models) describes two runs: only the first of each kind is read.
    if last in CONFIG_CLASSES or last in TRL_TRAINERS or trl_config or trl_trainer:
        from vramlens.formats import objective

        obj = objective.from_class(last)
        if obj is not None and r.b.plan.objective is None:
            objective.set_objective(r.b, obj, r.node_setting(last, call.func, last), note=f"TRL `{last}`")
        elif obj is None and (trl_config or trl_trainer) and r.b.plan.objective is None:
            what = f"the training objective of TRL's `{re.sub(r'(Config|Trainer)$', '', last)}` method"
            if not any(u.what == what for u in r.b.plan.unmodelled):  # its config and its trainer: said once
                r.b.unmodelled(
                    r.node_setting(last, call.func, None),
                    what,
                    "estimated as supervised fine-tuning of the policy alone",
                )
    if trl_config:
        r.signals.add("trl")
        if r.first("config"):
            _hf_kwargs(r, ev, call, scope, last)
        return
    if trl_trainer:
        r.signals.add("trl")
        if r.first("trainer"):
            _trainer(r, ev, call, scope, last)
        return
    if last in SWIFT_ARGUMENTS and full.split(".", 1)[0] == "swift":
        r.signals.add("swift")
        if r.first("config"):
            r.swift = (SWIFT_ARGUMENTS[last], [s for _, s in _keyword_settings(r, ev, call, scope, last)])
        return
    if last in CONFIG_CLASSES or (last == "ModelConfig" and full.startswith("trl")):
        r.signals.add("hf" if last in HF_CONFIGS else "trl")
        if r.first("model-config" if last == "ModelConfig" else "config"):
            _hf_kwargs(r, ev, call, scope, last)
        return
    if last in HF_TRAINERS or last in TRL_TRAINERS:
        r.signals.add("hf" if last in HF_TRAINERS else "trl")
        if r.first("trainer"):
            _trainer(r, ev, call, scope, last)
        return
    if last == "from_pretrained":
        role = r.other_loads.get(id(call))
        if role is not None:
            _other_model_load(r, ev, call, scope, role)
            return
        if "model" not in r.seen:
            _from_pretrained(r, ev, call, scope, full)
            if _is_unsloth(full):
                r.signals.add("unsloth")
                _unsloth_load(r, ev, call, scope)
            if "AutoLigerKernel" in full:
                _liger_patch(r, ev, call, scope, full)
        return
    if last.startswith("apply_liger_kernel_to_"):
        _liger_patch(r, ev, call, scope, last)
        return
    if last == "BitsAndBytesConfig":
        if r.first("bnb"):
            _bnb(r, ev, call, scope)
        return
    if last == "LoraConfig" or (last == "get_peft_model" and (_kw(call, "r") or _kw(call, "target_modules"))):
        r.signals.add("peft")
        if r.first("lora"):
            _lora(r, ev, call, scope, last)
        return
    if last in VECTOR_ADAPTER_CONFIGS:
        r.signals.add("peft")
        if r.first("lora"):
            _vector_adapter(r, ev, call, scope, last)
        return
    if last == "get_peft_model":
        r.signals.add("peft")
        return
    if last == "gradient_checkpointing_enable":
        r.signals.add("peft")
        s = r.node_setting(last, call, True)
        r.b.set("grad_checkpointing", True, s)
        kw = _kw(call, "gradient_checkpointing_kwargs")
        if kw is not None:
            v = ev.value(kw.value, scope)
            if not _is_unknown(v):
                apply_hf_key(r.b, "gradient_checkpointing_kwargs", r.kw_setting(kw, v))
        return
    if last == "prepare_model_for_kbit_training":
        r.signals.add("peft")
        kw = _kw(call, "use_gradient_checkpointing")
        if kw is None:
            s = r.node_setting(last, call, True)
            r.b.set("grad_checkpointing", True, s, note="prepare_model_for_kbit_training enables it by default")
        else:
            v = ev.value(kw.value, scope)
            s = r.kw_setting(kw, v)
            if _is_unknown(v):
                r.unknown(s, v)
            else:
                r.b.set_bool("grad_checkpointing", s)
        return
    if full.startswith("os.environ.") or full.startswith("environ.") or full == "os.putenv":
        return _environ_call(r, ev, call, scope, last)
    if _is_optimizer(full):
        r.signals.add("custom")
        if r.first("optimizer"):
            _optimizer(r, ev, call, scope, full)
        return
    if last == "backward":
        r.signals.add("custom")
        return
    if last == "DataLoader":
        kw = _kw(call, "batch_size")
        if kw is not None:
            v = ev.value(kw.value, scope)
            if not _is_unknown(v):
                r.loader_batches.append(r.kw_setting(kw, v))
        return
    if last == "autocast" and full.startswith("torch"):
        kw = _kw(call, "dtype")
        if kw is not None:
            v = hf.normalize_dtype(ev.value(kw.value, scope))
            if v in ("bf16", "fp16"):
                r.autocasts.append(r.kw_setting(kw, v))
        return
    if last == "compile" and full.startswith("torch"):
        r.b.set("compile", True, r.node_setting("torch.compile", call, True))
        return
    if last in ("bfloat16", "half") and not call.args and type(func) is ast.Attribute and "model" in full.lower():
        r.b.set("weight_dtype", "bf16" if last == "bfloat16" else "fp16", r.node_setting(last, call, True))
        return
    if last == "to" and type(func) is ast.Attribute and ("model" in full.lower() or _is_load(func.value)):
        arg = call.args[0] if call.args else (_kw(call, "dtype").value if _kw(call, "dtype") else None)
        if arg is not None:
            v = ev.value(arg, scope)
            d = hf.normalize_dtype(v) if isinstance(v, str) and v.startswith("torch.") else None
            if d in ("bf16", "fp16", "fp32"):
                r.b.set("weight_dtype", d, r.node_setting("to", call, v, arg))


def _swift(r: _Reader, ctx) -> None:
    """ms-swift's `TrainArguments(...)` & co.: read as the `swift <subcommand>` command line with those flags."""
    from vramlens.formats import objective, shell

    subcommand, settings = r.swift
    shell.apply_dialect(r.b, "ms-swift", settings, ctx, "swift")
    objective.apply_launch(r.b, "swift", subcommand, None, [s for s in settings if not s.unresolved])
    r.b.plan.framework = "ms-swift"


def _is_load(node: ast.expr) -> bool:
    """`X.from_pretrained(...)` (as in `X.from_pretrained(...).to(torch.bfloat16)`)."""
    return type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "from_pretrained"


def _apply(r: _Reader, s: Setting, name: str | None = None) -> None:
    name = name or s.path[0]
    if not apply_hf_key(r.b, name, s) and (name in hf.TRAINING_ARGUMENT_KEYS or name in hf.TRL_KEYS):
        r.b.remember(s)


def _kwargs(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, name: str, keys=None, rename=None):
    """Each keyword argument as a Setting (unknown ones reported), optionally only `keys`; `**{...}`,
    `**dict(...)` and `**name` of such a literal are read entry by entry (a later keyword wins, as in the call)."""
    for arg, s in _keyword_settings(r, ev, call, scope, name):
        if keys is not None and arg not in keys:
            continue
        target = rename.get(arg, arg) if rename else arg
        if s.unresolved:
            if is_hf_key(target):
                r.unknown(s, s.value)
            continue
        yield s, target


def _keyword_settings(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, name: str) -> list:
    """(keyword, Setting) for every keyword the call receives, splats expanded; an unknown value's Setting is
    `unresolved` with the `_Unknown` as its value. When one keyword comes twice (a splat, then an explicit
    one) the later wins."""
    out: dict[str, Setting] = {}
    for kw in call.keywords:
        if kw.arg is not None:
            v = ev.value(kw.value, scope)
            out.pop(kw.arg, None)
            out[kw.arg] = r.kw_setting(kw, v)
            continue
        entries = _splat_entries(r, ev, kw.value, scope)
        if isinstance(entries, _Unknown):
            r.splat(kw, name, entries.why)
            continue
        for key, setting in entries:
            out.pop(key, None)
            out[key] = setting
    return list(out.items())


_MUTATORS = ("update", "setdefault", "pop", "clear", "popitem")


def _splat_entries(r: _Reader, ev: _Evaluator, node: ast.expr, scope: _Scope, depth: int = 0):
    """The entries of a `**` argument written as a dict literal or `dict(key=value, …)` (directly or through a
    name bound once to one): [(key, Setting)], or `_Unknown` saying why not."""
    if depth > 5:
        return _Unknown("nested too deep")
    t = type(node)
    if t is ast.Name:
        found = scope.lookup(node.id)
        if found is None:
            return _Unknown(f"`{node.id}` is not assigned in this file")
        where, exprs = found
        if len(exprs) != 1 or exprs[0] is None:
            return _Unknown(f"`{node.id}` is set at run time or more than once")
        if _mutated(r.cols.lines, node.id):
            return _Unknown(f"`{node.id}` is changed after it is built")
        inner = _splat_entries(r, ev, exprs[0], where, depth + 1)
        if isinstance(inner, _Unknown) and not inner.why:
            return _Unknown(f"`{node.id}` = {r.cols.source(exprs[0], 40)}")
        return inner
    out: list = []
    if t is ast.Dict:
        for k, v in zip(node.keys, node.values):
            if k is None:  # `{**other, ...}`
                inner = _splat_entries(r, ev, v, scope, depth + 1)
                if isinstance(inner, _Unknown):
                    return inner
                out.extend(inner)
                continue
            key = ev.value(k, scope)
            if not isinstance(key, str):
                return _Unknown(f"a key of `{r.cols.source(node, 40)}` is only known at run time")
            value = ev.value(v, scope)
            out.append(
                (
                    key,
                    Setting(
                        key=key,
                        path=(key,),
                        value=value,
                        span=r.cols.span(k, v),
                        value_span=r.cols.span(v),
                        key_span=r.cols.span(k),
                        unresolved=_is_unknown(value),
                    ),
                )
            )
        return out
    if t is ast.Call and type(node.func) is ast.Name and node.func.id == "dict" and not node.args:
        for kw in node.keywords:
            if kw.arg is None:
                inner = _splat_entries(r, ev, kw.value, scope, depth + 1)
                if isinstance(inner, _Unknown):
                    return inner
                out.extend(inner)
                continue
            out.append((kw.arg, r.kw_setting(kw, ev.value(kw.value, scope))))
        return out
    return _Unknown("")


def _mutated(lines: list[str], name: str) -> bool:
    """Is the dict bound to `name` changed in place anywhere (`name[...] = `, `name.update(...)`, `name |= `)?"""
    pattern = re.compile(rf"\b{re.escape(name)}\s*(?:\[[^\]]*\]\s*=(?!=)|\.(?:{'|'.join(_MUTATORS)})\s*\(|\|=)")
    return any(pattern.search(line) for line in lines if name in line)


def _hf_kwargs(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, name: str) -> None:
    hf.apply(r.b, [s for s, _ in _kwargs(r, ev, call, scope, name)])


_MODEL_FIELD = re.compile(r"(?:model_)?(?:name_or_path|model_name|model_id|model_path)$")


def _trainer(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, name: str) -> None:
    kw = _kw(call, "model")
    named = kw is not None and type(kw.value) is ast.Attribute and _MODEL_FIELD.match(kw.value.attr)
    if kw is not None and named and "model" not in r.seen:
        # `GRPOTrainer(model=model_args.model_name_or_path, …)` (TRL main trl/scripts/grpo.py, reward.py, rloo.py):
        # a model id the trainer loads, from a parsed argument only known when the script runs
        v = ev.value(kw.value, scope)
        if _is_unknown(v):
            r.seen.add("model")
            r.unknown(r.kw_setting(kw, v), _Unknown(r.cols.source(kw.value)))
    _reward_funcs(r, ev, call, scope)
    for s, target in _kwargs(r, ev, call, scope, name):
        if target == "model":
            if isinstance(s.value, str):
                apply_hf_key(r.b, "model_name_or_path", s)
        elif target in OTHER_MODELS and isinstance(s.value, str) and s.value.strip():
            # `GKDTrainer(teacher_model="Qwen/Qwen2-1.5B-Instruct", …)`, `DPOTrainer(ref_model="…", …)`: an id the
            # trainer loads itself
            r.b.set(OTHER_MODELS[target][0], s.value.strip(), s)
        elif target in ("max_seq_length", "max_length", "packing", "dataset_text_field"):
            _apply(r, s)


# A trainer's keyword for a model it holds besides the one it trains → (the plan's id concept, its dtype concept):
# TRL's distillation trainers' `teacher_model` (GKDTrainer, GOLDTrainer, DistillationTrainer), the preference and RL
# trainers' `ref_model` (DPOTrainer, KTOTrainer, …; trl v1.9.0 trainer/dpo_trainer.py `__init__`), PPO's and RLOO's
# `reward_model` and PPO's `value_model` (trl v0.19.1 examples/scripts/ppo/ppo.py loads both as
# `AutoModelForSequenceClassification` before the policy)
OTHER_MODELS: dict[str, tuple[str, str | None]] = {
    "teacher_model": ("teacher_model_id", "teacher_dtype"),
    "ref_model": ("ref_model_id", "ref_dtype"),
    "reward_model": ("reward_model_id", None),
    "value_model": ("critic_model_id", None),
}


OTHER_MODEL_TITLES = {
    "teacher_model": "teacher model",
    "ref_model": "reference model",
    "reward_model": "reward model",
    "value_model": "value model",
}


def _reward_funcs(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope) -> None:
    """GRPO's and RLOO's `reward_funcs`: a string among them is a reward model's id, which the trainer loads as
    `AutoModelForSequenceClassification.from_pretrained(id, num_labels=1)` and holds beside the policy (trl v1.9.0
    trainer/grpo_trainer.py `__init__`); functions are not models."""
    kw = _kw(call, "reward_funcs")
    if kw is None:
        return
    nodes = kw.value.elts if type(kw.value) in (ast.List, ast.Tuple) else [kw.value]
    ids = [(n, v) for n in nodes if isinstance(v := ev.value(n, scope), str) and v.strip()]
    if not ids:
        return
    node, first = ids[0]
    r.b.set("reward_model_id", first.strip(), r.node_setting("reward_funcs", node, first, node))
    if len(ids) > 1:
        from vramlens.resolve import Approximate

        r.b.plan.read_notes.append(
            Approximate(f"{len(ids)} reward models in `reward_funcs`: the first, `{first}`, is counted alone")
        )


def _other_model_loads(calls: list[tuple[ast.Call, _Scope]]) -> dict[int, str]:
    """id(`X.from_pretrained(...)`) → the trainer keyword it is passed to, for each model a `…Trainer(...)` call
    takes besides the one it trains (`OTHER_MODELS`) through a name bound once to such a load (TRL's GKD documentation:
    `teacher_model = AutoModelForCausalLM.from_pretrained(…)`, then `GKDTrainer(model=model,
    teacher_model=teacher_model, …)`). That load is not the trained model's, wherever it stands in the script."""
    out: dict[int, str] = {}
    for call, scope in calls:
        func = call.func
        last = func.id if type(func) is ast.Name else func.attr if type(func) is ast.Attribute else ""
        if not last.endswith("Trainer"):
            continue
        for kw in call.keywords:
            if kw.arg not in OTHER_MODELS or type(kw.value) is not ast.Name:
                continue
            found = scope.lookup(kw.value.id)
            if found is not None and len(found[1]) == 1 and _is_load(found[1][0]):
                out[id(found[1][0])] = kw.arg
    return out


def _other_model_load(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, role: str) -> None:
    """The load of a model a trainer holds besides the one it trains (`_other_model_loads`): its id, and its dtype
    where the plan has one for that model, are that model's."""
    id_concept, dtype_concept = OTHER_MODELS[role]
    node = call.args[0] if call.args else None
    kw = next((k for k in call.keywords if k.arg in ("pretrained_model_name_or_path", "model_id")), None)
    node = node if node is not None else (kw.value if kw is not None else None)
    if node is not None:
        v = ev.value(node, scope)
        s = r.node_setting(role, node, v, node)
        if _is_unknown(v):
            from vramlens.resolve import Approximate

            r.unknown(s, v)
            r.b.plan.read_notes.append(
                Approximate(
                    f"the {OTHER_MODEL_TITLES[role]} (`{role}`) is only known when the script runs: sized as the policy"
                )
            )
            if role == "reward_model":
                # the trainer holds one (RLOO counts a reward model only where the script hands it one): of no
                # known id, so of the policy's shapes (resolve.objective `_named_model`)
                r.b.set(id_concept, "", s, note="a reward model whose id is only known when the script runs")
        elif isinstance(v, str) and v.strip():
            r.b.set(id_concept, v.strip(), s)
    for k in call.keywords if dtype_concept is not None else ():
        if k.arg in ("torch_dtype", "dtype"):
            v = ev.value(k.value, scope)
            d = hf.normalize_dtype(v) if isinstance(v, str) else None
            if d is not None and (d != "auto" or dtype_concept == "teacher_dtype"):
                r.b.set(dtype_concept, d, r.kw_setting(k, v))


_NOT_MODELS = ("Tokenizer", "Processor", "Config", "FeatureExtractor", "PeftModel", "Peft", "Pipeline")


def _from_pretrained(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, full: str) -> None:
    owner = full.rsplit(".", 2)[-2] if full.count(".") >= 1 else ""
    if any(x in owner for x in _NOT_MODELS) or not re.search(r"Model|For[A-Z]|LM", owner):
        return
    r.seen.add("model")
    if owner in IMAGE_TEXT_LOADERS:
        # the loader of TRL's vision-language scripts (trl examples/scripts/sft_vlm.py: AutoModelForImageTextToText
        # with an AutoProcessor): kept for the resolver's images-per-sequence (`resolve.images_per_sequence`)
        r.b.remember(
            Setting(
                key="model_class",
                path=("model_class",),
                value=owner,
                span=r.cols.span(call.func),
                value_span=r.cols.span(call.func),
            )
        )
    head = hf.task_head_of_class(owner)
    if head is not None:
        r.b.set("task_head", head, r.node_setting(owner, call.func, owner), note=f"`{owner}`: no vocabulary logits")
    node = call.args[0] if call.args else None
    key = None
    if node is None:
        for k in ("pretrained_model_name_or_path", "model_name", "model_id", "model_name_or_path"):
            kw = _kw(call, k)
            if kw is not None:
                node, key = kw.value, k
                break
    if node is not None:
        v = ev.value(node, scope)
        span_node = node if key is None else next(kw for kw in call.keywords if kw.arg == key)
        s = Setting(
            key=key or "from_pretrained",
            path=("model",),
            value=v,
            span=r.cols.span(span_node),
            value_span=r.cols.span(node),
            unresolved=_is_unknown(v),
        )
        if _is_unknown(v):
            r.unknown(s, v)
        elif isinstance(v, str):
            apply_hf_key(r.b, "model_name_or_path", s)
    dm = _kw(call, "device_map")
    if dm is not None and ev.value(dm.value, scope) in ("auto", "balanced"):
        # accelerate's balanced placement over every GPU the process sees (transformers modeling_utils
        # `_get_device_map`: get_balanced_memory + infer_auto_device_map); the Trainer then runs the model where it
        # lies, no data parallelism (transformers 5.24 trainer.py: `hf_device_map` on more than one GPU →
        # is_model_parallel). 0: "every visible GPU", resolved against the GPU count (one GPU: as before)
        v = ev.value(dm.value, scope)
        r.b.set("devices_per_process", 0, r.node_setting("device_map", dm, v, dm.value), note=f'device_map="{v}"')
    for s, target in _kwargs(r, ev, call, scope, "from_pretrained", keys=MODEL_LOAD_KEYS):
        if target in ("torch_dtype", "dtype") and s.value is None:
            continue  # unsloth dtype=None: detect (auto)
        _apply(r, s)


def _bnb(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope) -> None:
    settings = list(_kwargs(r, ev, call, scope, "BitsAndBytesConfig"))
    four = next((s for s, t in settings if t == "load_in_4bit" and to_bool(s.value)), None)
    if four is not None and not any(t == "bnb_4bit_quant_type" for _, t in settings):
        r.b.set("quant_type", "fp4", four, note="BitsAndBytesConfig's default 4-bit type is fp4")
    for s, target in settings:
        _apply(r, s)


UNSLOTH_LOADERS = ("FastLanguageModel", "FastModel", "FastVisionModel", "FastTextModel")
# Loaders that build a vision-language model for image-text data (transformers 5.24 models/auto/modeling_auto.py
# AutoModelForImageTextToText, its older name AutoModelForVision2Seq; unsloth's FastVisionModel)
IMAGE_TEXT_LOADERS = frozenset({"AutoModelForImageTextToText", "AutoModelForVision2Seq", "FastVisionModel"})


def _liger_patch(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, name: str) -> None:
    """Liger's patches (`apply_liger_kernel_to_llama(...)`, `AutoLigerKernelForCausalLM.from_pretrained`): by default
    fused linear cross-entropy, RMSNorm, RoPE and SwiGLU kernels (liger-kernel 0.5 liger_kernel/transformers/
    monkey_patch.py: `rope=True, cross_entropy=False, fused_linear_cross_entropy=True, rms_norm=True, swiglu=True`).
    The fused loss, the other kernels' speed and what they save (estimate/components/liger.py) are modelled."""

    def on(key: str) -> bool:
        kw = _kw(call, key)
        return kw is None or ev.value(kw.value, scope) is not False

    s = r.node_setting(name, call.func, True)
    if on("fused_linear_cross_entropy"):
        r.b.set("loss_impl", "fused", s, note="Liger fused linear cross-entropy")
    found = [(k, key) for k, key in (("RMSNorm", "rms_norm"), ("RoPE", "rope"), ("SwiGLU", "swiglu")) if on(key)]
    if found:
        kernels = [k for k, _ in found]
        names = " and ".join([", ".join(kernels[:-1]), kernels[-1]] if len(kernels) > 1 else kernels)
        r.b.set("fused_kernels", [key for _, key in found], s, note=f"Liger's {names} kernels")


def _is_unsloth(full: str) -> bool:
    return any(part in UNSLOTH_LOADERS for part in full.split("."))


def _unsloth_load(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope) -> None:
    """unsloth `FastLanguageModel.from_pretrained` / `FastModel.from_pretrained` (unslothai/unsloth 0050c73e
    unsloth/models/loader.py): load_in_4bit=True unless `load_in_8bit`, `load_in_16bit` or `full_finetuning` says
    otherwise (`full_finetuning=True` trains every weight, no adapters)."""
    values = {}
    for kw in call.keywords:
        if kw.arg in ("load_in_4bit", "load_in_8bit", "load_in_16bit", "full_finetuning"):
            v = ev.value(kw.value, scope)
            values[kw.arg] = (to_bool(v) if not _is_unknown(v) else None, kw)
    full_ft = values.get("full_finetuning", (None, None))
    if full_ft[0]:
        r.b.set(
            "peft_method",
            "none",
            r.kw_setting(full_ft[1], True),
            override=True,
            note="unsloth `full_finetuning=True`: every weight trains",
        )
    off = any(values.get(k, (None, None))[0] for k in ("load_in_8bit", "load_in_16bit", "full_finetuning"))
    four = values.get("load_in_4bit", (None, None))[0]
    if four is None and not off and r.b.plan.quant_bits is None:
        r.b.set(
            "quant_bits",
            4,
            r.node_setting("from_pretrained", call.func, True),
            origin=Origin.DEFAULT,
            framework="unsloth",
            note="unsloth loads in 4 bits unless told otherwise (load_in_4bit=True)",
        )
        r.b.set("quant_type", "nf4", origin=Origin.DEFAULT, framework="unsloth")
    # unsloth's patched models run its Triton RMSNorm, RoPE, SwiGLU and cross-entropy kernels (unsloth/models/llama.py:
    # fast_rms_layernorm, fast_rope_embedding, kernels/swiglu.py, fast_cross_entropy_loss)
    r.b.set(
        "fused_kernels",
        ["rms_norm", "rope", "swiglu", "cross_entropy"],
        r.node_setting("from_pretrained", call.func, True),
        origin=Origin.DEFAULT,
        framework="unsloth",
        note="unsloth's Triton RMSNorm, RoPE, SwiGLU and cross-entropy kernels",
    )
    kw = _kw(call, "use_gradient_checkpointing")
    if kw is not None:
        _unsloth_checkpointing(r, r.kw_setting(kw, ev.value(kw.value, scope)))


def _unsloth_checkpointing(r: _Reader, s: Setting) -> None:
    """`use_gradient_checkpointing`: "unsloth" checkpoints and offloads the checkpointed hidden states to the CPU
    (unsloth/models/_utils.py `Unsloth_Offloaded_Gradient_Checkpointer`); True is plain checkpointing."""
    if _is_unknown(s.value):
        return
    on = s.value == "unsloth" or to_bool(s.value)
    if on is None:
        return
    r.b.set("grad_checkpointing", bool(on), s, override=True)
    r.b.set(
        "activation_offload",
        s.value == "unsloth",
        s,
        override=True,
        note="unsloth offloads the checkpointed hidden states to the CPU" if s.value == "unsloth" else None,
    )


def _lora(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, name: str) -> None:
    r.b.set("peft_method", "lora", r.node_setting(name, call.func, True))
    kw = _kw(call, "task_type")
    if kw is not None:  # TaskType.SEQ_CLS or "SEQ_CLS"
        node = kw.value
        v = node.attr if type(node) is ast.Attribute else ev.value(node, scope)
        if isinstance(v, str):
            apply_hf_key(r.b, "task_type", r.kw_setting(kw, v))
    for s, target in _kwargs(
        r, ev, call, scope, name, keys=set(LORA_KEYS) | {"use_gradient_checkpointing"}, rename=LORA_KEYS
    ):
        if target == "use_gradient_checkpointing":  # unsloth get_peft_model: True or "unsloth"
            _unsloth_checkpointing(r, s)
            continue
        _apply(r, s, target)


def _vector_adapter(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, name: str) -> None:
    """peft's `IA3Config(target_modules=..., feedforward_modules=...)` and `VeraConfig(r=..., target_modules=...,
    vera_dropout=...)` (peft 0.21.2 tuners/ia3/config.py, tuners/vera/config.py)."""
    method, keys = VECTOR_ADAPTER_CONFIGS[name]
    r.b.set("peft_method", method, r.node_setting(name, call.func, True))
    for s, target in _kwargs(r, ev, call, scope, name, keys=set(keys), rename=keys):
        _apply(r, s, target)


def _is_optimizer(full: str) -> bool:
    if full in TOP_LEVEL_OPTIMIZERS:
        return True
    if ".lr_scheduler." in full or full.endswith(".lr_scheduler"):
        return False
    last = full.rsplit(".", 1)[-1]
    return full.startswith(OPTIMIZER_MODULES) and last[:1].isupper() and last not in ("Optimizer", "LBFGS")


def _optimizer(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, full: str) -> None:
    name = full.replace("bnb.optim.", "bitsandbytes.optim.", 1)
    s = r.node_setting(full, call.func, name, call.func)
    r.b.set("optimizer", name, s, override=True)
    fused, foreach = _kw(call, "fused"), _kw(call, "foreach")
    for kw, impl in ((fused, "fused"), (foreach, "foreach")):
        if kw is None:
            continue
        v = ev.value(kw.value, scope)
        ks = r.kw_setting(kw, v)
        if _is_unknown(v):
            r.unknown(ks, v)
        elif to_bool(v):
            r.b.set("optimizer_impl", impl, ks, override=True)
        elif impl == "foreach" and v is False and (fused is None or ev.value(fused.value, scope) is not True):
            r.b.set("optimizer_impl", "forloop", ks, override=True)


def _env_value(r: _Reader, name: str, value: Any, s: Setting) -> None:
    if name in ALLOC_VARS:
        if _is_unknown(value):
            return r.unknown(s, value)
        if isinstance(value, str):
            r.b.set("alloc_conf", value, s)
    elif name in SWIFT_ENV_VARS and not _is_unknown(value):
        r.b.remember(s)  # read by the resolver for ms-swift runs only
    elif name == "CUDA_VISIBLE_DEVICES" and isinstance(value, str):
        n = len([x for x in value.replace(" ", "").split(",") if x])
        if n:
            r.b.set("gpu_count", n, s)


def _environ_assign(r: _Reader, ev: _Evaluator, st: ast.Assign, scope: _Scope) -> None:
    for tgt in st.targets:
        if type(tgt) is not ast.Subscript:
            continue
        base = ev.dotted(tgt.value)
        if base not in ("os.environ", "environ"):
            continue
        name = ev.value(tgt.slice, scope)
        if not isinstance(name, str):
            continue
        value = ev.value(st.value, scope)
        s = Setting(
            key=name,
            path=(name,),
            value=value,
            span=r.cols.span(st),
            value_span=r.cols.span(st.value),
            unresolved=_is_unknown(value),
        )
        _env_value(r, name, value, s)


def _environ_call(r: _Reader, ev: _Evaluator, call: ast.Call, scope: _Scope, last: str) -> None:
    if last in ("setdefault", "putenv") and len(call.args) == 2:
        name = ev.value(call.args[0], scope)
        if isinstance(name, str):
            value = ev.value(call.args[1], scope)
            s = Setting(
                key=name,
                path=(name,),
                value=value,
                span=r.cols.span(call),
                value_span=r.cols.span(call.args[1]),
                unresolved=_is_unknown(value),
            )
            _env_value(r, name, value, s)
    elif last == "update":
        if call.args and type(call.args[0]) is ast.Dict:
            for k, v in zip(call.args[0].keys, call.args[0].values):
                if k is None:
                    continue
                name = ev.value(k, scope)
                if isinstance(name, str):
                    value = ev.value(v, scope)
                    s = Setting(
                        key=name,
                        path=(name,),
                        value=value,
                        span=r.cols.span(k, v),
                        value_span=r.cols.span(v),
                        unresolved=_is_unknown(value),
                    )
                    _env_value(r, name, value, s)
        for kw in call.keywords:
            if kw.arg:
                value = ev.value(kw.value, scope)
                _env_value(r, kw.arg, value, r.kw_setting(kw, value))
