"""torchtitan's Python configs: a `config_registry.py` of functions that return a `Trainer.Config`, selected on the
command line by `--module llama3 --config llama3_8b` (torchtitan main since its move from TOML job configs:
torchtitan/config/manager.py, torchtitan/models/llama3/config_registry.py at pytorch/torchtitan@b5bcd76c66).

The file is read with `ast` only: it is never imported or run. A config function is one `return Trainer.Config(...)`
with keyword arguments, or a copy of another config function of the same file (`config = llama3_8b()`) changed by
attribute assignments (`config.parallelism.tensor_parallel_degree = 8`, `config.compile = CompileConfig(...)`,
`config.model_spec = model_registry("8B", converters=[...])`). The values land on the same (section, key) paths as the
TOML job config's, and `formats.torchtitan.apply` turns them into the plan: one table for both spellings. Anything
else the function does (a loop, a branch, a helper given the config, a value that is not a literal) is named in a
"not read" issue, never replaced by a default in silence.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramlens.formats import torchtitan
from vramlens.formats.settings import PlanBuilder, Setting
from vramlens.plan import IssueKind, Severity, Span, TrainingPlan
from vramlens.text import LineIndex

FRAMEWORK_LABEL = "torchtitan main (Python config)"
MAX_CHARS = 300_000
MAX_DEPTH = 4  # config functions built from other config functions, at most this deep
# `--module` short names are looked up under these packages, in this order (torchtitan/config/manager.py at main)
MODULE_PREFIXES = ("torchtitan/models", "torchtitan/experiments", "torchtitan/experiments/rl/examples")

# Trainer.Config's defaults that differ from JobConfig's (torchtitan/trainer.py at main: `activation_checkpoint`
# defaults to `SelectiveAC.Config`, which is op-level SAC only; torchtitan/config/configs.py: TrainingConfig's
# num_tokens_per_microbatch_per_dp_rank 16384 over max_context_length 2048 = 8 rows)
DEFAULTS = {**torchtitan.DEFAULTS, "ac_option": "op", "pp_microbatches": 1}
TOKENS_DEFAULT = 16384
CONTEXT_DEFAULT = 2048

# activation checkpointing policies (torchtitan/distributed/activation_checkpoint.py at main)
AC_POLICIES = {"SelectiveAC": "selective", "FullAC": "full", "MemoryBudgetAC": "memory_budget"}
# model converters → the `model.converters` names the TOML reader knows (torchtitan/components/quantization at main)
CONVERTERS = {
    "Float8LinearConverter": "quantize.linear.float8",
    "MXFP8LinearConverter": "quantize.linear.mx",
    "Float8GroupedExpertsConverter": "quantize.grouped_mm.float8",
    "MXFP8GroupedExpertsConverter": "quantize.grouped_mm.mx",
}
# model_registry keywords that do not change memory: the attention kernel, the TP GEMM backend
MODEL_KEYWORDS_KEPT = frozenset({"attn_backend", "tp_gemm_backend", "converters"})
# TrainingConfig fields → the job config's names (the token form is turned into rows below)
TRAINING_KEYS = {
    "local_batch_size": "local_batch_size",
    "batch_size": "local_batch_size",
    "seq_len": "seq_len",
    "global_batch_size": "global_batch_size",
    "mixed_precision_param": "mixed_precision_param",
    "enable_cpu_offload": "enable_cpu_offload",
}
# Trainer.Config sections that do not change the training step's memory (data, logging, checkpoint files, …)
IGNORED_SECTIONS = frozenset(
    {
        "hf_assets_path",
        "dump_folder",
        "profiler",
        "metrics",
        "tokenizer",
        "dataloader",
        "lr_scheduler",
        "checkpoint",
        "comm",
        "validator",
        "debug",
        "override",
        "loss",
        "fault_tolerance",
    }
)


def _is_config_function(fn: ast.FunctionDef) -> bool:
    return fn.returns is not None and ast.unparse(fn.returns).endswith("Trainer.Config")


def config_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The file's top-level functions that return a `Trainer.Config`, by name, in source order."""
    return {st.name: st for st in tree.body if type(st) is ast.FunctionDef and _is_config_function(st)}


def is_registry(tree: ast.Module) -> bool:
    """A torchtitan config registry: it imports from torchtitan and defines a function returning Trainer.Config."""
    imports = any(
        (type(st) is ast.ImportFrom and (st.level > 0 or (st.module or "").startswith("torchtitan")))
        for st in tree.body
    )
    return imports and any(not name.startswith("_") for name in config_functions(tree))


def _model_name(tree: ast.Module, path: str) -> str | None:
    """The model package `model_registry` comes from: `from . import model_registry` in torchtitan/models/<name>/,
    or `from torchtitan.models.<name> import model_registry`."""
    for st in tree.body:
        if type(st) is not ast.ImportFrom or not any((a.asname or a.name) == "model_registry" for a in st.names):
            continue
        if st.level == 0 and st.module:
            return st.module.split(".")[-1]
        parts = Path(path).parent.parts
        up = st.level - 1
        if st.module:
            return st.module.split(".")[-1]
        return parts[-1 - up] if len(parts) > up else None
    return None


# ------------------------------------------------------------------------------------------------ the reader


@dataclass
class _Read:
    settings: dict[tuple[str, ...], Setting] = field(default_factory=dict)
    tokens: Setting | None = None
    context: Setting | None = None
    not_read: list[tuple[str, Span | None]] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # where values came from (another registry of the checkout)


class _Reader:
    def __init__(self, tree: ast.Module, text: str, path: str, ctx=None, seen: set[str] | None = None):
        self.functions = {st.name: st for st in tree.body if type(st) is ast.FunctionDef}
        self.path, self.ctx = path, ctx
        self.seen = seen if seen is not None else {path}  # registries read so far (each at most once: no cycles)
        # config functions imported from another registry of the checkout (torchtitan main torchtitan/experiments/
        # graph_trainer/llama3/config_registry.py `from torchtitan.models.llama3.config_registry import llama3_8b`)
        self.imported: dict[str, tuple[str, str]] = {
            (a.asname or a.name): (st.module or "", a.name)
            for st in tree.body
            if type(st) is ast.ImportFrom and st.level == 0 and (st.module or "").endswith(".config_registry")
            for a in st.names
        }
        self.constants: dict[str, ast.expr] = {}
        for st in tree.body:
            if type(st) is ast.Assign and len(st.targets) == 1 and type(st.targets[0]) is ast.Name:
                self.constants[st.targets[0].id] = st.value
        self.idx = LineIndex(text, path)
        self.model = _model_name(tree, path)
        # the file's own subclasses of Trainer.Config (torchtitan main torchtitan/models/kimi_k2_7/config_registry.py
        # `class _KimiTrainerConfig(Trainer.Config)`, whose `__post_init__` only checks and re-lays the optimizer)
        self.config_classes = {
            st.name
            for st in tree.body
            if type(st) is ast.ClassDef and any(ast.unparse(base).endswith("Trainer.Config") for base in st.bases)
        }

    # --- spans and values

    def span(self, node: ast.AST) -> Span | None:
        try:
            start = self.idx.starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
            end = self.idx.starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        except (IndexError, TypeError, AttributeError):
            return None
        return self.idx.span(start, end)

    def setting(
        self,
        path: tuple[str, ...],
        value: Any,
        node: ast.AST,
        value_node: ast.AST | None = None,
        key: str | None = None,
    ) -> Setting:
        return Setting(
            key or path[-1], path, value, span=self.span(node), value_span=self.span(value_node or node), key_span=None
        )

    def value(self, node: ast.expr, local: dict[str, ast.expr], depth: int = 0) -> Any:
        """A literal value: constants, lists/tuples of them, arithmetic, names bound to those. `_UNKNOWN` else."""
        if depth > 8:
            return _UNKNOWN
        if type(node) is ast.Constant:
            return node.value
        if type(node) is ast.Name:
            bound = local.get(node.id, self.constants.get(node.id))
            return self.value(bound, local, depth + 1) if bound is not None else _UNKNOWN
        if type(node) in (ast.List, ast.Tuple):
            items = [self.value(e, local, depth + 1) for e in node.elts]  # type: ignore[attr-defined]
            return _UNKNOWN if any(i is _UNKNOWN for i in items) else items
        if type(node) is ast.UnaryOp and type(node.op) is ast.USub:
            v = self.value(node.operand, local, depth + 1)
            return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else _UNKNOWN
        if type(node) is ast.BinOp and type(node.op) in _OPS:
            a, b = self.value(node.left, local, depth + 1), self.value(node.right, local, depth + 1)
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
                try:
                    return _OPS[type(node.op)](a, b)
                except (ZeroDivisionError, OverflowError):
                    return _UNKNOWN
        return _UNKNOWN

    def not_read(self, r: _Read, what: str, node: ast.AST) -> None:
        r.not_read.append((what, self.span(node)))

    # --- a config function

    def read(self, name: str, depth: int = 0, r: _Read | None = None) -> _Read:
        r = r or _Read()
        fn = self.functions.get(name)
        r.chain.append(name)
        if fn is None or depth > MAX_DEPTH:
            return r
        local: dict[str, ast.expr] = {}
        config_var: str | None = None
        for st in fn.body:
            if type(st) is ast.Expr and type(st.value) is ast.Constant:
                continue  # the docstring
            if type(st) in (ast.Assert, ast.Pass, ast.FunctionDef, ast.Import, ast.ImportFrom):
                continue
            if type(st) is ast.Return and st.value is not None:
                if type(st.value) is ast.Name and st.value.id == config_var:
                    return r
                if self._trainer_config(st.value, local, r):
                    return r
                if type(st.value) is ast.Call and self._imported(st.value, depth, r, st):
                    return r
                if (
                    type(st.value) is ast.Call
                    and type(st.value.func) is ast.Name
                    and st.value.func.id in self.functions
                ):
                    if st.value.args or st.value.keywords:
                        self._helper_arguments(st.value, r)
                    return self.read(st.value.func.id, depth + 1, r)
                self.not_read(r, f"the returned config `{ast.unparse(st.value)[:80]}`", st)
                return r
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                value = st.value
                if value is None or len(targets) != 1:
                    self.not_read(r, f"`{ast.unparse(st)[:80]}`", st)
                    continue
                target = targets[0]
                if type(target) is ast.Name:
                    call = value if type(value) is ast.Call else None
                    if config_var is None and call is not None and self._imported(call, depth, r, st):
                        config_var = target.id
                        continue
                    if call is not None and type(call.func) is ast.Name and call.func.id in self.functions:
                        if config_var is None and _is_config_function(self.functions[call.func.id]):
                            config_var = target.id
                            if call.args or call.keywords:
                                self._helper_arguments(call, r)
                            self.read(call.func.id, depth + 1, r)
                            continue
                    local[target.id] = value
                    continue
                dotted = _dotted(target)
                if dotted and config_var is not None and dotted[0] == config_var and len(dotted) >= 2:
                    self._attribute(dotted[1:], value, local, r, st)
                    continue
                self.not_read(r, f"`{ast.unparse(st)[:80]}`", st)
                continue
            if config_var is not None and any(type(n) is ast.Name and n.id == config_var for n in ast.walk(st)):
                self.not_read(r, f"`{ast.unparse(st).splitlines()[0][:80]}` (it may change the config)", st)
            elif type(st) not in (ast.Expr,):
                self.not_read(r, f"`{ast.unparse(st).splitlines()[0][:80]}`", st)
        return r

    def _imported(self, call: ast.Call, depth: int, r: _Read, st: ast.AST) -> bool:
        """`config = llama3_8b()` of a config function imported from another registry of the checkout, or
        `config = to_graph_trainer_config(llama3_8b(), model_registry)`: that function's values, read from its file
        (found from the module's dotted path, above this file or in the workspace root; read as referenced files
        are, `references._read`). False when the call is neither or the file cannot be read."""
        wrapper = ast.unparse(call.func).split(".")[-1]
        inner = call.args[0] if wrapper in GRAPH_WRAPPERS and call.args else call
        if type(inner) is not ast.Call or type(inner.func) is not ast.Name or inner.func.id not in self.imported:
            return False
        module, name = self.imported[inner.func.id]
        other = self._registry(module)
        if other is None or name not in other.functions or depth + 1 > MAX_DEPTH:
            return False
        if inner.args or inner.keywords:
            self._helper_arguments(inner, r)
        other.read(name, depth + 1, r)
        line = getattr(st, "lineno", 0)
        r.notes.append(f"`{name}()` (line {line}) read from {module.replace('.', '/')}.py, which this file imports")
        if inner is not call:
            _to_graph_trainer(self, r, call)
            r.notes.append(
                f"`{wrapper}` (line {line}): torchtitan's graph trainer keeps that config's values but not its "
                "`compile`, and turns any activation checkpointing into its selective (op-level) policy"
            )
        return True

    def _registry(self, module: str) -> _Reader | None:
        from vramlens import file_access
        from vramlens.formats import references

        if self.ctx is None:
            return None
        rel = Path(*module.split(".")).with_suffix(".py")
        allowed = [Path(a).resolve() for a in file_access.allowed_roots(self.ctx.workspace, self.path)]
        here = Path(self.path).resolve().parent
        roots = [d for d in (here, *here.parents) if any(d.is_relative_to(a) for a in allowed)]
        found = next((root / rel for root in roots if (root / rel).is_file()), None)
        if found is None or str(found) in self.seen:
            return None
        text = references._read(found, self.ctx)
        if text is None or len(text) > MAX_CHARS:
            return None
        try:
            tree = ast.parse(text, filename=str(found))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        self.seen.add(str(found))
        return _Reader(tree, text, str(found), self.ctx, self.seen)

    def _helper_arguments(self, call: ast.Call, r: _Read) -> None:
        for kw in call.keywords:
            if kw.arg not in MODEL_KEYWORDS_KEPT:
                self.not_read(r, f"the argument `{ast.unparse(kw)[:60]}` of `{ast.unparse(call.func)}`", kw)
        for arg in call.args:
            self.not_read(r, f"the argument `{ast.unparse(arg)[:60]}` of `{ast.unparse(call.func)}`", arg)

    def _trainer_config(self, node: ast.expr, local: dict[str, ast.expr], r: _Read) -> bool:
        if type(node) is not ast.Call or not (
            ast.unparse(node.func).endswith("Trainer.Config")
            or (type(node.func) is ast.Name and node.func.id in self.config_classes)
        ):
            return False
        r.settings.clear()
        r.tokens = r.context = None
        for a in node.args:
            self.not_read(r, f"the positional argument `{ast.unparse(a)[:60]}` of Trainer.Config", a)
        for kw in node.keywords:
            if kw.arg is None:
                self.not_read(r, f"`**{ast.unparse(kw.value)[:60]}`", kw)
            else:
                self._section(kw.arg, kw.value, local, r, kw)
        return True

    def _attribute(self, parts: list[str], value: ast.expr, local: dict[str, ast.expr], r: _Read, st: ast.AST) -> None:
        section = parts[0]
        if len(parts) == 1:
            self._section(section, value, local, r, st, replace=True)
            return
        if len(parts) == 2 and section in ("training", "parallelism", "compile", "optimizer"):
            self._field(section, parts[1], value, local, r, st)
            return
        if section in IGNORED_SECTIONS:
            return
        self.not_read(r, f"`{ast.unparse(st)[:80]}`", st)

    def _section(
        self, name: str, node: ast.expr, local: dict[str, ast.expr], r: _Read, where: ast.AST, replace: bool = False
    ) -> None:
        if name in IGNORED_SECTIONS:
            return
        if type(node) is ast.Name and node.id in local:
            node = local[node.id]
        if replace:
            for path in [p for p in r.settings if p[0] == name or (name == "model_spec" and p[0] == "model")]:
                del r.settings[path]
            if name == "training":
                r.tokens = r.context = None
        if name == "model_spec":
            return self._model(node, local, r, where)
        if name == "activation_checkpoint":
            return self._checkpointing(node, r, where)
        if name == "optimizer":
            return self._optimizer(node, local, r, where)
        if name in ("training", "parallelism", "compile"):
            if type(node) is not ast.Call:
                return self.not_read(r, f"`{name}={ast.unparse(node)[:60]}`", where)
            for a in node.args:
                self.not_read(r, f"the positional argument `{ast.unparse(a)[:60]}` of `{name}`", a)
            for kw in node.keywords:
                if kw.arg is None:
                    self.not_read(r, f"`**{ast.unparse(kw.value)[:60]}` in `{name}`", kw)
                else:
                    self._field(name, kw.arg, kw.value, local, r, kw)
            return
        self.not_read(r, f"Trainer.Config's `{name}`", where)

    def _field(self, section: str, key: str, node: ast.expr, local: dict[str, ast.expr], r: _Read, where) -> None:
        v = self.value(node, local)
        if v is _UNKNOWN:
            return self.not_read(r, f"`{section}.{key} = {ast.unparse(node)[:60]}` (not a literal)", where)
        if section == "training":
            if key == "num_tokens_per_microbatch_per_dp_rank":
                r.tokens = self.setting(("training", key), v, where, node)
            elif key == "max_context_length":
                r.context = self.setting(("training", key), v, where, node)
            elif key in TRAINING_KEYS:
                r.settings[("training", TRAINING_KEYS[key])] = self.setting(
                    ("training", TRAINING_KEYS[key]), v, where, node, key=key
                )
            elif key == "dtype" and v != "float32":
                self.not_read(r, f"training.dtype = {v!r} (parameters kept in {v})", where)
            return
        if section == "optimizer":
            if key == "implementation":
                r.settings[("optimizer", "implementation")] = self.setting(("optimizer", key), v, where, node)
            return
        r.settings[(section, key)] = self.setting((section, key), v, where, node)

    def _model(self, node: ast.expr, local: dict[str, ast.expr], r: _Read, where: ast.AST) -> None:
        if type(node) is not ast.Call or ast.unparse(node.func).split(".")[-1] != "model_registry":
            return self.not_read(r, f"the model `{ast.unparse(node)[:60]}` (not a `model_registry(...)` call)", where)
        flavor = self.value(node.args[0], local) if node.args else _UNKNOWN
        if not isinstance(flavor, str):
            return self.not_read(r, f"the flavor of `{ast.unparse(node)[:60]}`", node)
        if self.model is None:
            return self.not_read(r, "the model package `model_registry` comes from", node)
        r.settings[("model", "name")] = self.setting(("model", "name"), self.model, node.func, node.func)
        r.settings[("model", "flavor")] = self.setting(("model", "flavor"), flavor, node, node.args[0])
        for kw in node.keywords:
            if kw.arg == "converters":
                names = self._converters(kw.value, local, r)
                if names:
                    r.settings[("model", "converters")] = self.setting(("model", "converters"), names, kw, kw.value)
            elif kw.arg == "attn_backend":
                backend = self.value(kw.value, local)
                if isinstance(backend, str):
                    r.settings[("model", "attn_backend")] = self.setting(("model", "attn_backend"), backend, kw)
            elif kw.arg not in MODEL_KEYWORDS_KEPT:
                self.not_read(r, f"the model argument `{ast.unparse(kw)[:60]}`", kw)
        for a in node.args[1:]:
            self.not_read(r, f"the model argument `{ast.unparse(a)[:60]}`", a)

    def _converters(self, node: ast.expr, local: dict[str, ast.expr], r: _Read) -> list[str]:
        if type(node) is ast.Name and node.id in local:
            node = local[node.id]
        if type(node) not in (ast.List, ast.Tuple):
            self.not_read(r, f"the model converters `{ast.unparse(node)[:60]}`", node)
            return []
        out = []
        for e in node.elts:  # type: ignore[attr-defined]
            cls = ast.unparse(e.func).split(".")[0] if type(e) is ast.Call else None
            if cls in CONVERTERS:
                out.append(CONVERTERS[cls])
            else:
                self.not_read(r, f"the model converter `{ast.unparse(e)[:60]}` (its memory is not modelled)", e)
        return out

    def _checkpointing(self, node: ast.expr, r: _Read, where: ast.AST) -> None:
        mode: str | None = "none"
        if type(node) is ast.Constant and node.value is None:
            pass
        else:
            cls = ast.unparse(node.func).split(".")[0] if type(node) is ast.Call else None
            mode = AC_POLICIES.get(cls or "")
            if mode is None:
                return self.not_read(r, f"the activation checkpointing policy `{ast.unparse(node)[:60]}`", where)
        r.settings[("activation_checkpoint", "mode")] = self.setting(("activation_checkpoint", "mode"), mode, where)
        if mode == "selective":  # SelectiveAC is op-level only at main: no per-layer option
            r.settings[("activation_checkpoint", "selective_ac_option")] = self.setting(
                ("activation_checkpoint", "selective_ac_option"), "op", where
            )

    def _optimizer(self, node: ast.expr, local: dict[str, ast.expr], r: _Read, where: ast.AST) -> None:
        """`default_adamw(...)` (one AdamW group over every parameter: torchtitan/components/optimizer/optimizer.py
        at main) or `OptimizersContainer.Config(param_groups=[ParamGroupConfig(optimizer_name=...), ...])`."""
        name = None
        if type(node) is ast.Call and ast.unparse(node.func).split(".")[-1] == "default_adamw":
            name = "AdamW"
        elif type(node) is ast.Call and ast.unparse(node.func).startswith("OptimizersContainer"):
            names = set()
            for kw in node.keywords:
                if kw.arg == "implementation":
                    self._field("optimizer", "implementation", kw.value, local, r, kw)
                elif kw.arg == "param_groups" and type(kw.value) in (ast.List, ast.Tuple):
                    for g in kw.value.elts:  # type: ignore[attr-defined]
                        found = [k.value for k in getattr(g, "keywords", []) if k.arg == "optimizer_name"]
                        v = self.value(found[0], local) if found else _UNKNOWN
                        names.add(v if isinstance(v, str) else None)
            if len(names) == 1 and None not in names:
                name = names.pop()
            elif names:
                self.not_read(r, f"optimizer groups of different optimizers ({', '.join(map(str, names))})", where)
                return
        if name is None:
            return self.not_read(r, f"the optimizer `{ast.unparse(node)[:60]}`", where)
        r.settings[("optimizer", "name")] = self.setting(("optimizer", "name"), name, where)


class _Unknown:
    def __repr__(self) -> str:
        return "<unknown>"


_UNKNOWN = _Unknown()
_OPS = {
    ast.Mult: lambda a, b: a * b,
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.FloorDiv: lambda a, b: a // b,
}


# torchtitan main torchtitan/experiments/graph_trainer/configs.py `to_graph_trainer_config(base, model_registry)`:
# the base config's fields, the same model flavor from the graph trainer's registry, `compile` dropped (back to
# GraphTrainer.Config's default) and any activation checkpointing policy replaced by `SelectiveAC.Config()`
GRAPH_WRAPPERS = frozenset({"to_graph_trainer_config"})


def _to_graph_trainer(reader: _Reader, r: _Read, call: ast.Call) -> None:
    for path in [p for p in r.settings if p[0] == "compile"]:
        del r.settings[path]
    mode = r.settings.get(("activation_checkpoint", "mode"))
    if mode is not None and mode.value != "none":
        for key, value in (("mode", "selective"), ("selective_ac_option", "op")):
            r.settings[("activation_checkpoint", key)] = reader.setting(("activation_checkpoint", key), value, call)


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if type(node) is not ast.Name:
        return None
    return [node.id, *reversed(parts)]


def _rows(reader: _Reader, r: _Read) -> None:
    """torchtitan main states a micro batch in tokens: `num_tokens_per_microbatch_per_dp_rank` input-token slots per
    data-parallel rank, in rows of `max_context_length` (torchtitan/config/configs.py `TrainingConfig` at main).
    Read as local_batch_size = tokens // context and seq_len = context."""
    if r.tokens is None and r.context is None:
        return
    tokens = r.tokens.value if r.tokens is not None else TOKENS_DEFAULT
    context = r.context.value if r.context is not None else CONTEXT_DEFAULT
    if r.context is not None:
        c = r.context
        r.settings[("training", "seq_len")] = Setting(
            c.key, ("training", "seq_len"), context, span=c.span, value_span=c.value_span
        )
    anchor = r.tokens or r.context
    assert anchor is not None
    if isinstance(tokens, int) and isinstance(context, int) and context > 0 and tokens >= context:
        path = ("training", "local_batch_size")
        r.settings[path] = Setting(anchor.key, path, tokens // context, span=anchor.span, value_span=anchor.value_span)
        if tokens % context:
            r.not_read.append(
                (
                    f"num_tokens_per_microbatch_per_dp_rank {tokens} is not a whole number of {context}-token rows",
                    anchor.span,
                )
            )
    else:
        r.not_read.append((f"a micro batch of {tokens} tokens with a context of {context}", anchor.span))


def settings_of(
    tree: ast.Module, text: str, path: str, name: str, overrides: list[Setting] | None = None, ctx=None
) -> tuple[list[Setting], _Read] | None:
    """The Settings (job-config paths) of the config function `name`, and what was not read; None when the file has
    no such function. Command-line overrides of the token-form micro batch are applied before it becomes rows."""
    reader = _Reader(tree, text, path, ctx)
    if name not in reader.functions:
        return None
    r = reader.read(name)
    for o in overrides or []:
        if o.path == ("training", "num_tokens_per_microbatch_per_dp_rank"):
            r.tokens = o
        elif o.path == ("training", "max_context_length"):
            r.context = o
    _rows(reader, r)
    return list(r.settings.values()), r


def build(b: PlanBuilder, settings: list[Setting], r: _Read, overrides, world, world_note) -> None:
    torchtitan.apply(b, settings, overrides, world, world_note, defaults=DEFAULTS)
    for concept, value in list(vars(b.plan).items()):
        if getattr(value, "framework", None) == torchtitan.FRAMEWORK_LABEL:
            setattr(b.plan, concept, value.model_copy(update={"framework": FRAMEWORK_LABEL}))
    if (s := next((x for x in settings if x.path == ("model", "attn_backend")), None)) is not None:
        b.remember(s)
    b.plan.read_notes.extend(r.notes)
    for what, span in r.not_read:
        b.issue(
            IssueKind.NOT_READ,
            f"not read: {what}; the estimate goes without it",
            span=span,
            severity=Severity.WARNING,
        )


def parse_python(text: str, ctx) -> TrainingPlan | None:
    """A plan for a torchtitan config registry (its first config function, in source order), None for any other
    Python file."""
    if len(text) > MAX_CHARS or "Trainer.Config" not in text:
        return None
    try:
        tree = ast.parse(text, filename=ctx.path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not is_registry(tree):
        return None
    names = [n for n in config_functions(tree) if not n.startswith("_")]
    got = settings_of(tree, text, ctx.path, names[0], ctx=ctx)
    if got is None:
        return None
    settings, r = got
    b = PlanBuilder(ctx.path, "torchtitan", "torchtitan")
    build(b, settings, r, [], None, None)
    others = names[1:]
    b.plan.read_notes.append(
        f"the config `{names[0]}` (the file's first)"
        + (
            f"; it defines {len(others)} more, chosen with `--config <name>`: {', '.join(others[:12])}"
            if others
            else ""
        )
    )
    return b.plan


def find_registry(module: str, script_path: str, workspace: Path | None) -> Path | None:
    """The config_registry.py a `--module` names: a short name under torchtitan's model, experiment and RL example
    packages (in that order), or a dotted module path; looked up beside the script and in the workspace root."""
    roots = [Path(script_path).parent] + ([workspace] if workspace is not None else [])
    rel = module.replace(".", "/")
    candidates = [f"{p}/{rel}/config_registry.py" for p in MODULE_PREFIXES] + [f"{rel}/config_registry.py", f"{rel}.py"]
    for root in roots:
        for c in candidates:
            p = root / c
            try:
                if p.is_file():
                    return p
            except OSError:
                continue
    return None


def from_launch(
    b: PlanBuilder, module: tuple[str, Span | None], config: tuple[str, Span | None], overrides, world, world_note, ctx
) -> None:
    """A launch that selects `--config <function>` of `--module <package>`'s config registry: that function's values,
    with the command line's `--section.key value` overrides over them."""
    from vramlens.formats import references
    from vramlens.plan import Reference

    found = find_registry(module[0], ctx.path, ctx.workspace)
    ref = Reference(kind="config", target=f"{module[0]}:{config[0]}", span=config[1])
    b.plan.references.append(ref)
    text = references._read(found, ctx) if found is not None else None
    got = None
    if text is not None and found is not None:
        ref.resolved_path = str(found)
        try:
            tree = ast.parse(text, filename=str(found)) if len(text) <= MAX_CHARS else None
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        got = settings_of(tree, text, str(found), config[0], overrides, ctx) if tree is not None else None
    if got is None:
        why = (
            f"has no config function `{config[0]}`"
            if text is not None
            else "was not found (looked for torchtitan/models|experiments/<module>/config_registry.py next to this "
            "file and in the workspace root)"
        )
        b.issue(
            IssueKind.REFERENCE,
            f"torchtitan config registry of `--module {module[0]}` {why}: only the command line's values count",
            span=config[1] or module[1],
            severity=Severity.WARNING,
        )
        torchtitan.apply(b, [], overrides, world, world_note, defaults=DEFAULTS)
        return
    settings, r = got
    build(b, settings, r, overrides, world, world_note)
    b.plan.read_notes.append(f"the config `{config[0]}` of {found}")
