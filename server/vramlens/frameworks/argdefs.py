"""Argument definitions of a Python module, read with `ast` (never imported or run).

A training script or a framework declares its arguments in a few ways, all read here:

- `@dataclass` classes (what `transformers.HfArgumentParser` turns into command-line flags): annotated fields,
  `field(default=..., default_factory=..., metadata={"help": ..., "aliases": [...]})`;
- pydantic models (`BaseModel` subclasses; axolotl's config): fields and `Field(default, description=, alias=)`;
- argparse: `add_argument("--a", "--a-b", "-a", dest=, type=, default=, action=, choices=, nargs=, required=,
  help=)` on any parser, group or subparser variable, and `set_defaults(...)`;
- torchtune-style recipe reads of an OmegaConf config: `cfg.get("key", default)`, `cfg.key`, `cfg["key"]`.

Semantics followed (CPython 3.11 `Lib/argparse.py`, `Lib/dataclasses.py`):
- argparse's `dest` is the first long option string without its prefix, `-` replaced by `_`
  (`_get_optional_kwargs`); `store_true`/`store_false` default to False/True; `append`/`extend` and `nargs`
  of `+`, `*` or a count > 1 give a list; `BooleanOptionalAction` adds `--no-<name>`.
- a dataclass field without a default is required; a subclass that redefines a field keeps its place
  in the field order and changes its default (`_process_class` collects fields base first, in reverse MRO).
- `HfArgumentParser` adds each dataclass field as `--<name>` and, for fields with `_` in the name, `--<a-b>`
  (transformers 4.40+ `hf_argparser.py`, `_parse_dataclass_field`); `metadata["aliases"]` adds more.

Hostile sources are bounded: a source over 2 MB or with more than `MAX_BRACES` braces is refused before
`ast.parse` (CPython 3.11 parses an f-string's placeholders in quadratic time), the AST is walked iteratively,
and every recursive step (annotations, inheritance, nested dataclasses, literal values) has a depth limit.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

from vramlens.text import text_lines

MAX_SOURCE_CHARS = 2 * 2**20
MAX_BRACES = 20_000  # as formats/python_calls.py: a real script or framework module has a few hundred
MAX_DEPTH = 12  # annotation nesting, base-class chains, nested dataclass fields
HELP_CHARS = 300
TEXT_CHARS = 200
MAX_FLAT = 10_000  # arguments `flatten` returns (transformers' TrainingArguments has ~120)

SCALARS = {
    "bool": "bool",
    "int": "int",
    "float": "float",
    "str": "str",
    "bytes": "str",
    "Path": "str",
    "PathLike": "str",
    "complex": "float",
}
LISTS = {
    "list",
    "List",
    "tuple",
    "Tuple",
    "Sequence",
    "MutableSequence",
    "set",
    "Set",
    "frozenset",
    "FrozenSet",
    "Iterable",
    "Collection",
    "ListConfig",
}
DICTS = {"dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "DictConfig", "TypedDict"}
TRANSPARENT = {"Optional", "Annotated", "Final", "InitVar", "Required", "NotRequired"}
UNIONS = {"Union"}
ENUM_BASES = {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ExplicitEnum"}
PYDANTIC_BASES = {"BaseModel", "BaseSettings", "GenericModel", "RootModel"}
DATACLASS_DECORATORS = {
    "dataclass",
    "dataclasses.dataclass",
    "pydantic.dataclasses.dataclass",
    "struct.dataclass",
    "flax.struct.dataclass",
    "chex.dataclass",
    "attr.dataclass",
    "attrs.define",
    "define",
    "attr.s",
    "attrs.frozen",
    "frozen",
}
CONFIG_RECEIVER = "cfg"  # a recipe's OmegaConf config variable (torchtune, hydra scripts)
CONFIG_PARAMETERS = {"conf", "config", "hparams"}  # the same when they are a function's parameter
CONFIG_TYPES = {"DictConfig", "OmegaConf", "ListConfig"}


class SourceRefused(ValueError):
    """The source is too large, too dense or not Python: nothing was read."""


@dataclass(frozen=True)
class ArgDef:
    name: str  # without dashes: "per_device_train_batch_size"; nested dataclass fields dotted
    aliases: tuple[str, ...] = ()
    type: str | None = None  # "bool" | "int" | "float" | "str" | "list" | "dict" | "enum" | None
    default: Any = None  # literal default (ast.literal_eval), else None
    default_text: str | None = None  # source text of a non-literal default
    required: bool = False
    choices: tuple | None = None
    help: str | None = None  # capped at 300 chars
    owner: str = ""  # class name or parser variable
    line: int = 0
    annotation: str | None = None  # source text of a field's annotation (dataclass/pydantic/plain)
    # a default bound in the class body (`default_optim = "adamw_torch"` then `if is_torch_greater_or_equal_than_2_8:
    # default_optim = "adamw_torch_fused"` in transformers' TrainingArguments): `default` is the unconditional value,
    # each (condition source text, value) a later assignment under that condition, in source order
    default_when: tuple[tuple[str, Any], ...] = ()


@dataclass
class ClassArgs:
    bases: tuple[str, ...]
    fields: list[ArgDef]
    kind: str  # "dataclass" | "pydantic" | "plain"
    line: int = 0


@dataclass
class ModuleArgs:
    classes: dict[str, ClassArgs]
    parsers: list[ArgDef]
    config_reads: list[ArgDef]
    enums: dict[str, tuple] = field(default_factory=dict)  # enum class name → member values
    hf_parsers: list[tuple[str, ...]] = field(default_factory=list)  # HfArgumentParser((A, B, C)) class names
    # literal keyword arguments of the model loads (`AutoModelForCausalLM.from_pretrained(..., trust_remote_code=
    # True)`): keyword → (value, line) of the first load that writes it as a constant (MODEL_LOAD_LITERALS)
    model_load_literals: dict[str, tuple[Any, int]] = field(default_factory=dict)


# --- source text ---------------------------------------------------------------------------------


class _Source:
    """Source segments by ast position (UTF-8 byte columns), from lines split once."""

    def __init__(self, text: str):
        self.lines = text_lines(text)
        self._enc: dict[int, bytes] = {}

    def _line(self, n: int) -> bytes:
        enc = self._enc.get(n)
        if enc is None:
            enc = self._enc[n] = self.lines[n - 1].encode("utf-8") if 0 < n <= len(self.lines) else b""
        return enc

    def segment(self, node: ast.AST, cap: int = TEXT_CHARS) -> str | None:
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is None or end is None:
            return None
        if start == end:
            raw = self._line(start)[node.col_offset : node.end_col_offset]
        else:
            parts = [self._line(start)[node.col_offset :]]
            size = len(parts[0])
            for n in range(start + 1, end + 1):
                if size > cap * 4:
                    break
                part = self._line(n)[: node.end_col_offset] if n == end else self._line(n)
                parts.append(part)
                size += len(part) + 1
            raw = b"\n".join(parts)
        text = raw[: cap * 4].decode("utf-8", errors="replace")
        return text if len(text) <= cap else text[: cap - 1] + "…"


def _literal(node: ast.AST | None) -> tuple[bool, Any]:
    """(True, value) when `node` is a literal (`ast.literal_eval`), else (False, None)."""
    if node is None:
        return False, None
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain (iterative), else None."""
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
        if len(parts) > 64:
            return None
    if type(node) is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _last(name: str | None) -> str:
    return (name or "").rsplit(".", 1)[-1]


def _text(node: ast.AST | None) -> str | None:
    """A help text: a string constant, implicitly concatenated strings, or None."""
    ok, value = _literal(node)
    if ok and isinstance(value, str):
        value = " ".join(value.split())
        return value if len(value) <= HELP_CHARS else value[: HELP_CHARS - 1] + "…"
    return None


def _type_of_value(value: Any) -> str | None:
    for t, name in (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "str"),
        ((list, tuple, set), "list"),
        (dict, "dict"),
    ):
        if isinstance(value, t):
            return name
    return None


# --- annotations ---------------------------------------------------------------------------------


def _annotation_type(
    node: ast.AST | None, enums: dict[str, tuple], depth: int = 0, prefer: str | None = None
) -> tuple[str | None, tuple | None]:
    """(type, choices) of an annotation: Optional/Union/Annotated see through, Literal gives an enum; of a union's
    members, an enum wins, then the type of the default (`prefer`), then the first."""
    if node is None or depth > MAX_DEPTH:
        return None, None
    if type(node) is ast.Constant:
        if isinstance(node.value, str) and len(node.value) <= TEXT_CHARS:  # a string annotation
            try:
                return _annotation_type(ast.parse(node.value, mode="eval").body, enums, depth + 1, prefer)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return None, None
        return None, None
    if type(node) is ast.BinOp and type(node.op) is ast.BitOr:  # X | None
        return _union([node.left, node.right], enums, depth, prefer)
    name = _last(_dotted(node.value if type(node) is ast.Subscript else node))
    if type(node) is ast.Subscript:
        args = node.slice.elts if type(node.slice) is ast.Tuple else [node.slice]
        if name == "Literal":
            values = [v for ok, v in map(_literal, args) if ok]
            return "enum", tuple(values)
        if name in TRANSPARENT:
            return _annotation_type(args[0], enums, depth + 1, prefer)
        if name in UNIONS:
            return _union(args, enums, depth, prefer)
    if name in SCALARS:
        return SCALARS[name], None
    if name in LISTS:
        return "list", None
    if name in DICTS:
        return "dict", None
    if name in enums:
        return "enum", enums[name]
    return None, None


def _union(
    members: list[ast.AST], enums: dict[str, tuple], depth: int, prefer: str | None
) -> tuple[str | None, tuple | None]:
    """A union's type (`Optional[int]` → int; `Union[List[str], str] = ""` → str)."""
    found = [
        _annotation_type(m, enums, depth + 1)
        for m in members
        if not (type(m) is ast.Constant and m.value is None) and _dotted(m) != "None"
    ]
    types = [t for t in found if t[0]]
    if any(t[0] == "enum" for t in types):  # Union[OptimizerNames, str]: the enum's values are the choices
        return next(t for t in types if t[0] == "enum")
    return next((t for t in types if t[0] == prefer), types[0] if types else (None, None))


# --- classes -------------------------------------------------------------------------------------


def _decorator_kind(cls: ast.ClassDef) -> str | None:
    for dec in cls.decorator_list:
        target = dec.func if type(dec) is ast.Call else dec
        name = _dotted(target)
        if name in DATACLASS_DECORATORS or _last(name) == "dataclass":
            return "dataclass"
    return None


def _is_enum(cls: ast.ClassDef) -> bool:
    return any(_last(_dotted(b)) in ENUM_BASES for b in cls.bases)


def _enum_values(cls: ast.ClassDef) -> tuple:
    values = []
    for st in cls.body:
        if type(st) is ast.Assign and len(st.targets) == 1 and type(st.targets[0]) is ast.Name:
            ok, value = _literal(st.value)
            values.append(value if ok else st.targets[0].id)
    return tuple(values)


def _call_name(node: ast.AST | None) -> str:
    return _last(_dotted(node.func)) if type(node) is ast.Call else ""


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _factory_default(node: ast.expr, src: _Source) -> tuple[bool, Any, str | None]:
    """`default_factory=list` → [], `=lambda: [...]` → the list; else its source text."""
    name = _dotted(node)
    if name in ("list", "dict", "set", "tuple"):
        return True, {"list": [], "dict": {}, "set": [], "tuple": []}[name], None
    if type(node) is ast.Lambda:
        ok, value = _literal(node.body)
        if ok:
            return True, value, None
    return False, None, src.segment(node)


def _default_guess(value: ast.expr | None) -> Any:
    """The literal default of a field's value (`= 3`, `field(default=3)`, `Field(3)`), for choosing a union's type."""
    if _call_name(value) in ("field", "Field"):
        value = value.args[0] if _call_name(value) == "Field" and value.args else _kw(value, "default")
    return _literal(value)[1]


def _field(
    st: ast.AnnAssign | ast.Assign, owner: str, kind: str, help_after: str | None, src: _Source, enums: dict[str, tuple]
) -> ArgDef | None:
    target = st.target if type(st) is ast.AnnAssign else st.targets[0]
    name = target.id
    annotation = st.annotation if type(st) is ast.AnnAssign else None
    if (
        annotation is not None
        and _last(_dotted(annotation.value if type(annotation) is ast.Subscript else annotation)) == "ClassVar"
    ):
        return None
    value = st.value
    t, choices = _annotation_type(annotation, enums, prefer=_type_of_value(_default_guess(value)))
    has_default, default, default_text, help_, aliases = value is not None, None, None, None, []
    call = _call_name(value)
    if call in ("field", "Field", "ib", "attrib"):
        has_default = False
        positional = value.args[0] if call == "Field" and value.args else None
        d = positional if positional is not None else _kw(value, "default")
        factory = _kw(value, "default_factory") or _kw(value, "factory")
        if d is not None and not (type(d) is ast.Constant and d.value is Ellipsis):
            has_default = True
            ok, default = _literal(d)
            default_text = None if ok else src.segment(d)
        elif factory is not None:
            has_default = True
            _, default, default_text = _factory_default(factory, src)
        metadata = _kw(value, "metadata")
        if type(metadata) is ast.Dict:
            for k, v in zip(metadata.keys, metadata.values):
                key = k.value if type(k) is ast.Constant else None
                if key == "help":
                    help_ = _text(v)
                elif key == "aliases":
                    ok, al = _literal(v)
                    aliases += [al] if isinstance(al, str) else list(al) if ok and isinstance(al, (list, tuple)) else []
                elif key == "choices":
                    ok, ch = _literal(v)
                    if ok and isinstance(ch, (list, tuple)):
                        choices = tuple(ch)
        help_ = help_ or _text(_kw(value, "description")) or _text(_kw(value, "help"))
        for key in ("alias", "validation_alias"):
            ok, al = _literal(_kw(value, key))
            if ok and isinstance(al, str):
                aliases.append(al)
        ok, ch = _literal(_kw(value, "choices"))
        if ok and isinstance(ch, (list, tuple)):
            choices = tuple(ch)
    elif value is not None:
        ok, default = _literal(value)
        default_text = None if ok else src.segment(value)
    if t is None and has_default and default_text is None:
        t = _type_of_value(default)
    aliases = tuple(a.lstrip("-") for a in aliases if isinstance(a, str) and a.lstrip("-") != name)
    return ArgDef(
        name=name,
        aliases=aliases,
        type=t,
        default=default,
        default_text=default_text,
        required=not has_default and kind != "plain",
        choices=choices,
        help=help_ or help_after,
        owner=owner,
        line=st.lineno,
        annotation=src.segment(annotation) if annotation is not None else None,
    )


def _class_bindings(body: list[ast.stmt], src: _Source) -> dict[str, tuple[Any, tuple[tuple[str, Any], ...]]]:
    """Names a class body binds to literals before its fields use them: name → (unconditional value, the
    (condition, value) pairs of later assignments under `if` tests, conditions joined with `and`). A name
    assigned a non-literal anywhere is left out."""
    out: dict[str, tuple[Any, list[tuple[str, Any]]]] = {}
    spoiled: set[str] = set()

    def walk(stmts: list[ast.stmt], tests: tuple[str, ...]) -> None:
        for st in stmts:
            if type(st) is ast.If:
                test = src.segment(st.test) or "?"
                walk(st.body, (*tests, test))
                if st.orelse:
                    walk(st.orelse, (*tests, f"not ({test})"))
            elif type(st) is ast.Assign and len(st.targets) == 1 and type(st.targets[0]) is ast.Name:
                name = st.targets[0].id
                ok, value = _literal(st.value)
                if not ok:
                    spoiled.add(name)
                elif not tests:
                    out[name] = (value, [])
                elif name in out:
                    out[name][1].append((" and ".join(tests), value))

    walk(body, ())
    return {k: (v, tuple(w)) for k, (v, w) in out.items() if k not in spoiled}


def _class_args(cls: ast.ClassDef, kind: str, src: _Source, enums: dict[str, tuple]) -> ClassArgs:
    fields: list[ArgDef] = []
    body = cls.body
    bindings = _class_bindings(body, src)
    for i, st in enumerate(body):
        if type(st) is ast.AnnAssign and type(st.target) is ast.Name:
            pass
        elif (
            type(st) is ast.Assign
            and len(st.targets) == 1
            and type(st.targets[0]) is ast.Name
            and not st.targets[0].id.startswith("_")
        ):
            if kind != "plain" and _call_name(st.value) not in ("field", "Field"):
                continue  # a dataclass's un-annotated class attribute is not a field
        else:
            continue
        nxt = body[i + 1] if i + 1 < len(body) else None
        help_after = _text(nxt.value) if type(nxt) is ast.Expr and type(nxt.value) is ast.Constant else None
        arg = _field(st, cls.name, kind, help_after, src, enums)
        if arg is not None and arg.default_text in bindings:
            value, when = bindings[arg.default_text]
            arg = replace(arg, default=value, default_text=None, default_when=when)
            if arg.type is None:
                arg = replace(arg, type=_type_of_value(value))
        if arg is not None and not arg.name.startswith("__"):
            fields.append(arg)
    return ClassArgs(bases=tuple(filter(None, map(_dotted, cls.bases))), fields=fields, kind=kind, line=cls.lineno)


def flatten(classes: dict[str, ClassArgs], root: str, limit: int = MAX_FLAT) -> list[ArgDef]:
    """Every argument of class `root`: inherited fields first (a subclass's redefinition keeps the place and takes
    the new default), then fields typed by another class of `classes` expanded as dotted names
    (`model.model_name_or_path`). Bases are found by their last name part; unknown bases add nothing. At most
    `limit` arguments (nested classes can multiply: a class whose every field is another such class)."""
    merged: dict[str, dict[str, ArgDef]] = {}
    nested: dict[str | None, str | None] = {}
    out: list[ArgDef] = []
    stack: list = [(_last(root), "", (_last(root),))]  # classes to expand and arguments, in field order
    work = 0  # fields looked at, expanded or not
    while stack and len(out) < limit and work < 4 * limit:
        item = stack.pop()
        if isinstance(item, ArgDef):
            out.append(item)
            continue
        name, prefix, seen = item
        fields = merged.get(name)
        if fields is None:
            fields = merged[name] = _own_and_inherited(classes, name, (), 0)
        work += len(fields)
        entries: list = []
        for f in fields.values():
            if f.annotation not in nested:
                nested[f.annotation] = _nested_class(classes, f.annotation)
            inner = nested[f.annotation]
            if inner and inner not in seen and len(seen) <= MAX_DEPTH:
                entries.append((inner, prefix + f.name + ".", seen + (inner,)))
            else:
                entries.append(
                    replace(f, name=prefix + f.name, aliases=tuple(prefix + a for a in f.aliases)) if prefix else f
                )
        stack.extend(reversed(entries))
    return out[:limit]


def _own_and_inherited(classes: dict[str, ClassArgs], name: str, seen: tuple, depth: int) -> dict[str, ArgDef]:
    cls = classes.get(_last(name))
    if cls is None or _last(name) in seen or depth > MAX_DEPTH:
        return {}
    out: dict[str, ArgDef] = {}
    for base in reversed(cls.bases):
        out.update(_own_and_inherited(classes, base, seen + (_last(name),), depth + 1))
    for f in cls.fields:
        out[f.name] = f
    return out


def _nested_class(classes: dict[str, ClassArgs], annotation: str | None) -> str | None:
    """The class of `classes` a field's annotation names (`ModelConfig`, `Optional[ModelConfig]`)."""
    if not annotation:
        return None
    try:
        node = ast.parse(annotation, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for _ in range(MAX_DEPTH):
        if type(node) is ast.Constant and isinstance(node.value, str) and len(node.value) <= TEXT_CHARS:
            try:
                node = ast.parse(node.value, mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return None
            continue
        if type(node) is ast.Subscript and _last(_dotted(node.value)) in TRANSPARENT | UNIONS:
            args = node.slice.elts if type(node.slice) is ast.Tuple else [node.slice]
            node = next(
                (a for a in args if _dotted(a) != "None" and not (type(a) is ast.Constant and a.value is None)), None
            )
            continue
        if type(node) is ast.BinOp and type(node.op) is ast.BitOr:
            node = node.right if _dotted(node.left) == "None" else node.left
            continue
        break
    name = _last(_dotted(node)) if node is not None else ""
    cls = classes.get(name)
    return name if cls is not None and cls.kind in ("dataclass", "pydantic") else None


# --- argparse ------------------------------------------------------------------------------------


def _add_argument(call: ast.Call, owner: str, src: _Source) -> ArgDef | None:
    options = []
    for a in call.args:
        ok, value = _literal(a)
        if not ok or not isinstance(value, str):
            return None
        options.append(value)
    if not options:
        return None
    flags = [o for o in options if o[:1] in "-+"]
    dest_node = _kw(call, "dest")
    ok, dest = _literal(dest_node)
    if not flags:  # a positional argument
        name = options[0]
    else:
        long = next((o for o in flags if o[1:2] in "-+"), flags[0])
        name = long.lstrip("-+").replace("-", "_")
    if ok and isinstance(dest, str):
        name = dest
    action_node = _kw(call, "action")
    ok, action = _literal(action_node)
    action = action if ok and isinstance(action, str) else _last(_dotted(action_node)) if action_node else None
    t = None
    type_node = _kw(call, "type")
    if type_node is not None:
        tname = _last(_dotted(type_node)) or ""
        t = SCALARS.get(tname) or ("bool" if "bool" in tname.lower() else "dict" if tname == "loads" else None)
    default_node = _kw(call, "default")
    has_default = default_node is not None
    ok, default = _literal(default_node)
    default_text = src.segment(default_node) if has_default and not ok else None
    aliases = [o.lstrip("-+") for o in flags]
    if action in ("store_true", "store_false"):
        t = "bool"
        if not has_default:
            default = action == "store_false"
    elif action == "BooleanOptionalAction":
        t = "bool"
        aliases += ["no-" + o.lstrip("-+") for o in flags if o.startswith("--")]
    elif action in ("append", "extend", "append_const"):
        t = "list"
    elif action == "count":
        t = "int"
    elif action == "store_const" and t is None:
        ok_c, const = _literal(_kw(call, "const"))
        t = _type_of_value(const) if ok_c else None
    ok_n, nargs = _literal(_kw(call, "nargs"))
    if ok_n and (nargs in ("+", "*") or isinstance(nargs, int) and nargs > 1):
        t = "list"
    ok_c, choices = _literal(_kw(call, "choices"))
    choices = tuple(choices) if ok_c and isinstance(choices, (list, tuple, set, frozenset)) else None
    if choices is not None and t in (None, "str"):
        t = "enum"
    if t is None and has_default and default_text is None:
        t = _type_of_value(default)
    ok_r, required = _literal(_kw(call, "required"))
    required = bool(required) if ok_r else not flags and nargs not in ("?", "*")
    aliases = tuple(dict.fromkeys(a for a in aliases if a != name))
    return ArgDef(
        name=name,
        aliases=aliases,
        type=t,
        default=default,
        default_text=default_text,
        required=required,
        choices=choices,
        help=_text(_kw(call, "help")),
        owner=owner,
        line=call.lineno,
    )


def _set_defaults(call: ast.Call, owner: str, parsers: list[ArgDef], index: dict[str, int], src: _Source) -> None:
    """`set_defaults(a=1)` changes argument a's default (argparse: it wins over add_argument's default) or adds a
    dest of its own. `index` maps names to positions in `parsers`."""
    for kw in call.keywords:
        if kw.arg is None:
            continue
        ok, value = _literal(kw.value)
        text = None if ok else src.segment(kw.value)
        if kw.arg in index:
            i = index[kw.arg]
            parsers[i] = replace(parsers[i], default=value if ok else None, default_text=text, required=False)
        else:
            parsers.append(
                ArgDef(
                    name=kw.arg,
                    type=_type_of_value(value) if ok else None,
                    default=value if ok else None,
                    default_text=text,
                    owner=owner,
                    line=call.lineno,
                )
            )
            index[kw.arg] = len(parsers) - 1


# --- config reads --------------------------------------------------------------------------------


def _config_names(tree: ast.Module) -> set[str]:
    """Variables that hold a recipe's config: `cfg`, parameters annotated DictConfig, and parameters named
    `conf`/`config`/`hparams` (a module-level `config = AutoConfig...` is a model config, not the run's), unless the
    module imports that name (torchtune's `from torchtune import config` is a module)."""
    imported = set()
    names = {CONFIG_RECEIVER}
    for node in ast.walk(tree):
        if type(node) in (ast.Import, ast.ImportFrom):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif type(node) is ast.arg:
            annotation = _last(_dotted(node.annotation)) if node.annotation is not None else None
            if annotation in CONFIG_TYPES or (node.arg in CONFIG_PARAMETERS and annotation in (None, "dict", "Dict")):
                names.add(node.arg)
    return names - imported


def _config_read(node: ast.AST, receivers: set[str], chained: set[int]) -> tuple[str, ast.expr | None] | None:
    """("a.b", default node) for `cfg.a.b`, `cfg.a.get("b", d)`, `cfg["a"]["b"]`; None otherwise."""
    default = None
    if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "get" and node.args:
        ok, key = _literal(node.args[0])
        if not ok or not isinstance(key, str):
            return None
        default = node.args[1] if len(node.args) > 1 else _kw(node, "default")
        parts, node = [key], node.func.value
    elif id(node) in chained or type(node) not in (ast.Attribute, ast.Subscript) or type(node.ctx) is not ast.Load:
        return None
    else:
        parts = []
    for _ in range(64):
        if type(node) is ast.Attribute:
            parts.append(node.attr)
            node = node.value
        elif type(node) is ast.Subscript and type(node.slice) is ast.Constant and isinstance(node.slice.value, str):
            parts.append(node.slice.value)
            node = node.value
        else:
            break
    if type(node) is not ast.Name or node.id not in receivers or not parts:
        return None
    return ".".join(reversed(parts)), default


# --- the module ----------------------------------------------------------------------------------


def read_module(source: str, filename: str = "<script>", enums: dict[str, tuple] | None = None) -> ModuleArgs:
    """Every argument definition of a Python source. `enums`: enum classes defined elsewhere (name → values), for
    annotations that name them. Raises SourceRefused when the source is over 2 MB, has more than MAX_BRACES braces
    or does not parse."""
    if len(source) > MAX_SOURCE_CHARS:
        raise SourceRefused(
            f"{filename}: {len(source):,} characters; argument definitions are read from at most {MAX_SOURCE_CHARS:,}"
        )
    if source.count("{") > MAX_BRACES:
        raise SourceRefused(f"{filename}: more than {MAX_BRACES:,} braces; not parsed")
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise SourceRefused(f"{filename}: not Python that parses ({type(e).__name__})") from None
    src = _Source(source)
    nodes = list(ast.walk(tree))
    class_nodes = [n for n in nodes if type(n) is ast.ClassDef]
    enums = {**(enums or {}), **{c.name: _enum_values(c) for c in class_nodes if _is_enum(c)}}
    kinds: dict[str, str] = {}
    for c in class_nodes:
        if _is_enum(c):
            continue
        kind = _decorator_kind(c) or ("pydantic" if any(_last(_dotted(b)) in PYDANTIC_BASES for b in c.bases) else None)
        if kind:
            kinds[c.name] = kind
    for _ in range(MAX_DEPTH):  # a subclass of a pydantic model in this module is one too
        grew = False
        for c in class_nodes:
            if (
                c.name not in kinds
                and not _is_enum(c)
                and any(kinds.get(_last(_dotted(b))) == "pydantic" for b in c.bases)
            ):
                kinds[c.name] = "pydantic"
                grew = True
        if not grew:
            break
    classes: dict[str, ClassArgs] = {}
    for c in class_nodes:
        if _is_enum(c):
            continue
        args = _class_args(c, kinds.get(c.name, "plain"), src, enums)
        if args.fields or c.name in kinds:
            classes[c.name] = args
    parsers: list[ArgDef] = []
    index: dict[str, int] = {}
    hf_parsers: list[tuple[str, ...]] = []
    load_literals: dict[str, tuple[Any, int]] = {}
    calls = [n for n in nodes if type(n) is ast.Call]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        func = call.func
        if type(func) is ast.Attribute and func.attr == "add_argument":
            arg = _add_argument(call, _dotted(func.value) or "", src)
            if arg is not None:
                index.setdefault(arg.name, len(parsers))
                parsers.append(arg)
        elif type(func) is ast.Attribute and func.attr == "set_defaults":
            _set_defaults(call, _dotted(func.value) or "", parsers, index, src)
        elif _last(_dotted(func)) == "HfArgumentParser" and call.args:
            a = call.args[0]
            elts = a.elts if type(a) in (ast.Tuple, ast.List) else [a]
            hf_parsers.append(tuple(filter(None, map(_dotted, elts))))
        elif (
            type(func) is ast.Attribute
            and func.attr == "from_pretrained"
            and _MODEL_CLASS.search(_last(_dotted(func.value)))
        ):
            for kw in call.keywords:
                if kw.arg in MODEL_LOAD_LITERALS and type(kw.value) is ast.Constant:
                    load_literals.setdefault(kw.arg, (kw.value.value, call.lineno))
    return ModuleArgs(
        classes=classes,
        parsers=parsers,
        config_reads=_config_reads(tree, nodes, src),
        enums=enums,
        hf_parsers=hf_parsers,
        model_load_literals=load_literals,
    )


# Keyword arguments of a script's model load read where written as constants, and the classes that load a model
# (not a tokenizer, config or processor): `AutoModelForCausalLM`, `transformers.LlamaForCausalLM`, `AutoModel`, …
MODEL_LOAD_LITERALS = ("trust_remote_code",)
_MODEL_CLASS = re.compile(r"Model|For[A-Z]|LM")


def _config_reads(tree: ast.Module, nodes: list[ast.AST], src: _Source) -> list[ArgDef]:
    receivers = _config_names(tree)
    chained = set()
    for n in nodes:  # only the outermost of `cfg.a.b` is a read; `cfg.a.get(...)` is read by the call
        if type(n) in (ast.Attribute, ast.Subscript):
            chained.add(id(n.value))
        elif type(n) is ast.Call:
            chained.add(id(n.func))
    reads: dict[str, ArgDef] = {}
    for n in sorted(
        (n for n in nodes if type(n) in (ast.Call, ast.Attribute, ast.Subscript)),
        key=lambda n: (n.lineno, n.col_offset),
    ):
        found = _config_read(n, receivers, chained)
        if found is None:
            continue
        name, default_node = found
        ok, default = _literal(default_node)
        text = src.segment(default_node) if default_node is not None and not ok else None
        arg = ArgDef(
            name=name,
            type=_type_of_value(default) if ok and default is not None else None,
            default=default if ok else None,
            default_text=text,
            required=default_node is None,
            owner=_receiver(n),
            line=n.lineno,
        )
        old = reads.get(name)
        if old is None or (old.required and not arg.required):
            reads[name] = arg if old is None else replace(arg, line=old.line)
    return list(reads.values())


def _receiver(node: ast.AST) -> str:
    for _ in range(66):
        if type(node) is ast.Call:
            node = node.func
        elif type(node) in (ast.Attribute, ast.Subscript):
            node = node.value
        else:
            break
    return node.id if type(node) is ast.Name else ""


def iter_arguments(module: ModuleArgs) -> Iterator[ArgDef]:
    """Every argument a command line of this module can give: the HfArgumentParser dataclasses' fields (all
    dataclasses when no parser names them), then argparse's."""
    roots = [_last(n) for group in module.hf_parsers for n in group] or [
        n for n, c in module.classes.items() if c.kind == "dataclass"
    ]
    seen = set()
    for root in roots:
        if len(seen) >= MAX_FLAT:
            break
        for arg in flatten(module.classes, root, MAX_FLAT - len(seen)):
            if arg.name not in seen:
                seen.add(arg.name)
                yield arg
    for arg in module.parsers:
        if arg.name not in seen:
            seen.add(arg.name)
            yield arg
