"""Safe YAML/JSON loading that keeps the exact source range of every key and value.

The document is read from libyaml's event stream (PyYAML's C parser) and built into plain Python
data here, with PyYAML's own YAML 1.1 rules for plain scalars: `2e-5` stays a string, `no` becomes
False, `500_000` is an int — exactly what the training frameworks that use `yaml.safe_load` see.
Only the standard scalar types are constructed (never Python objects). Every mapping entry becomes
a `Setting` with its key path and lazily built spans: building spans for thousands of entries
nobody looks at was most of the cost of a parse.

JSON files are read by the same parser (JSON is YAML flow syntax) with JSON's number rules
(`1e9` is a number in JSON, a string in YAML 1.1), tabs blanked and `//` comments allowed.
Duplicate keys keep the last value, as PyYAML does, and are reported.

Why events and not PyYAML's composed nodes (`yaml.compose` with CSafeLoader + SafeConstructor), tried and
measured with PyYAML 6.0.3 on libyaml 0.2.5: libyaml's composer (`_compose_node` in PyYAML's yaml/_yaml.pyx)
recurses in C once per nesting level, and some 30,000 levels (a 60 KB file) crash the process with SIGSEGV
before any depth cap can run — PyYAML 6.0.4's nesting control (PyYAML CHANGES, #1010) does nothing on libyaml
< 0.2.6; the whole node tree is built before the node cap applies (a 2 MB flow sequence: 2.6 s and +266 MiB,
against 0.26 s and +1.4 MiB here); an alias node is its anchor's node, so the alias's own position is lost;
`yaml.compose` refuses an anchor defined twice; and composing alone cost 3.0 ms of the 4.7 ms this whole loader
takes on a 2,000-line config.
"""

from __future__ import annotations

import re
import reprlib
import sys
from typing import Any, cast

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from vramlens.formats.settings import Setting, shown
from vramlens.plan import IssueKind, ParseIssue, Severity, Span
from vramlens.text import LineIndex

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_YAML_BYTES = 2_000_000  # larger files are not training configs
MAX_YAML_NODES = 200_000  # bounds huge documents, and what aliases expand to ("billion laughs")
MAX_YAML_DEPTH = 100  # nesting; real configs nest a handful of levels
# A mapping or sequence used as a key (`? [a, b]: x`, or `{{…}: 1}` in flow text) is named by a short repr:
# `str()` of nested ones quotes the inner key's text again at each level (its backslashes double), so 50
# nested `{` took exponential time and memory. reprlib (Python standard library) bounds depth, items and
# string lengths.
_KEY_REPR = reprlib.Repr()
_KEY_REPR.maxlevel, _KEY_REPR.maxstring, _KEY_REPR.maxother = 3, 60, 60
MAX_DUPLICATE_REPORTS = 1_000  # duplicate keys reported one by one; past that, one line says how many more

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"
_IMPLICIT = Resolver.yaml_implicit_resolvers
_WILDCARD = _IMPLICIT.get(None, [])
_BOOL_VALUES = SafeConstructor.bool_values
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?\Z")
_JSON_WORDS = {"true": True, "false": False, "null": None}
_TAG_CACHE: dict[str, str] = {}  # plain scalar text -> resolved tag (the rules never change)
_YAML_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")  # libyaml's
_YAML_ONLY_BREAK = re.compile("[\x85\u2028\u2029]")


class YamlError(ValueError):
    """The text is not YAML we will read; `span` points at the problem when known."""

    def __init__(self, message: str, span: Span | None = None):
        super().__init__(message)
        self.span = span


def is_json_path(file: str) -> bool:
    return file.lower().endswith((".json", ".jsonc", ".json5"))


# The most digits an integer may have: CPython's own limit for converting between int and str
# (sys.int_info.default_max_str_digits, 4,300; docs.python.org/3/library/stdtypes.html#int-max-str-digits).
# Base-60 parts are checked against it before any arithmetic: `59:59:…` folds one part at a time into an
# ever larger int, quadratic in the text (300 KB took 1.2 s per parse, 2 MB over 5 minutes).
MAX_INT_DIGITS = 4_300
_MAX_BASE60_PARTS = int(MAX_INT_DIGITS / 1.7781512503836436) + 1  # log10(60) = 1.778…


class IntTooLarge(ValueError):
    """An integer scalar longer than MAX_INT_DIGITS digits (or base-60 parts worth as many)."""


def _yaml_int(value: str) -> int:
    """PyYAML's construct_yaml_int (YAML 1.1: 0b, 0x, leading-0 octal, base 60, underscores)."""
    if value.count(":") >= _MAX_BASE60_PARTS:
        raise IntTooLarge(value)
    value = value.replace("_", "")
    sign = 1
    if value[0] == "-":
        sign = -1
    if value[0] in "+-":
        value = value[1:]
    if value == "0":
        return 0
    if value.startswith("0b"):
        return sign * int(value[2:], 2)
    if value.startswith("0x"):
        return sign * int(value[2:], 16)
    if value[0] == "0":
        return sign * int(value, 8)
    if ":" in value:
        return sign * _sexagesimal([int(part) for part in value.split(":")])
    if len(value) > MAX_INT_DIGITS:
        raise IntTooLarge(value)
    return sign * int(value)


def _yaml_float(value: str) -> float:
    """PyYAML's construct_yaml_float."""
    value = value.replace("_", "").lower()
    sign = 1
    if value[0] == "-":
        sign = -1
    if value[0] in "+-":
        value = value[1:]
    if value == ".inf":
        return sign * float("inf")
    if value == ".nan":
        return float("nan")
    if ":" in value:
        return sign * _sexagesimal([float(part) for part in value.split(":")])
    return sign * float(value)


def _sexagesimal(digits: list):
    """YAML 1.1 base-60 numbers (`1:30` = 90), most significant part first."""
    result = digits[0] * 0
    for d in digits:
        result = result * 60 + d
    return result


class _Scalars:
    """Turns scalar events into Python values, as `yaml.safe_load` (or `json.loads`) would."""

    def __init__(self, json_mode: bool):
        self.json_mode = json_mode
        self.constructor = SafeConstructor()

    def tag_of(self, ev) -> str:
        tag = ev.tag
        if tag is not None and tag != "!":
            return tag
        if ev.style or not ev.implicit[0]:
            return _STR
        v = ev.value
        hit = _TAG_CACHE.get(v)
        if hit is not None:
            return hit
        tag = _STR
        for t, regexp in _IMPLICIT.get(v[0], ()) if v else _IMPLICIT.get("", ()):
            if regexp.match(v):
                tag = t
                break
        else:
            for t, regexp in _WILDCARD:
                if regexp.match(v):
                    tag = t
                    break
        if len(_TAG_CACHE) < 50_000 and len(v) < 64:
            _TAG_CACHE[v] = tag
        return tag

    def value(self, ev) -> Any:
        v = ev.value
        if self.json_mode and not ev.style and ev.tag is None:
            if v in _JSON_WORDS:
                return _JSON_WORDS[v]
            m = _JSON_NUMBER.match(v)
            if m:
                if m.group(1) or m.group(2):
                    return float(v)
                try:
                    return int(v)
                except ValueError:  # past CPython's int/str conversion limit (sys.get_int_max_str_digits())
                    raise YamlError(
                        f"the integer `{v[:20]}…` has {len(v.lstrip('-')):,} digits, more than vramlens "
                        f"reads ({sys.get_int_max_str_digits():,}); no setting needs a number that "
                        f"large",
                        _mark_span("", ev.start_mark, ev.end_mark),
                    ) from None
        tag = self.tag_of(ev)
        if tag == _STR:
            return v
        if tag == _NULL:
            return None
        try:
            if tag == _BOOL:
                return _BOOL_VALUES[v.lower()]
            if tag == _INT:
                return _yaml_int(v)
            if tag == _FLOAT:
                return _yaml_float(v)
            if tag == _MERGE:
                return v
            node = yaml.ScalarNode(tag, v, ev.start_mark, ev.end_mark, style=ev.style or None)
            return self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError:
            raise _tag_error(tag, _mark_span("", ev.start_mark, ev.end_mark)) from None
        except IntTooLarge:
            raise YamlError(
                f"the integer `{v[:40]}…` ({len(v):,} characters) is larger than any setting can "
                f"use (over {MAX_INT_DIGITS:,} digits); vramlens does not read it",
                _mark_span("", ev.start_mark, ev.end_mark),
            ) from None
        except Exception:  # an explicit tag on text that is not of its type: `!!float y`, `!!timestamp x`
            short = tag.replace("tag:yaml.org,2002:", "!!")
            raise YamlError(
                f"`{short} {shown(v)}` is not a valid {short} value", _mark_span("", ev.start_mark, ev.end_mark)
            ) from None


def _tag_error(tag: str, span: Span | None) -> YamlError:
    short = tag.replace("tag:yaml.org,2002:", "!!")
    return YamlError(
        f"YAML tag `{short}` is not read: vramlens reads plain data only and never constructs objects from a config",
        span,
    )


def _mark_span(file: str, s, e) -> Span:
    return Span(file=file, start_line=s.line, start_col=s.column, end_line=e.line, end_col=e.column)


def prepare_json(text: str) -> str:
    """Blank what JSON allows but YAML does not (tabs between tokens, `//` and `/* */` comments),
    keeping every character's position."""
    if "\t" not in text and "/" not in text:
        return text
    out = list(text)
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "\t":
            out[i] = " "
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
            continue
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    out[k] = " "
            i = j
            continue
        i += 1
    return "".join(out)


_COLLECTION_TAGS = {"!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}
_NOKEY = object()
_ITEMS = object()


class _Frame:
    __slots__ = (
        "is_map",
        "data",
        "path",
        "key",
        "key_ev",
        "key_is_merge",
        "setting",
        "setting_index",
        "anchor",
        "first",
        "last_end",
        "entries",
        "merges",
        "item_sources",
        "start_ev",
        "no_replay",
        "size",
    )

    def __init__(self, is_map: bool, data, path: tuple, anchor, first: int, start_ev):
        self.is_map = is_map
        self.data = data
        self.path = path
        self.key = _NOKEY
        self.key_ev = None
        self.key_is_merge = False
        self.setting: Setting | None = None  # the entry whose key was just read (None once its value is)
        self.setting_index = 0
        self.anchor = anchor
        self.first = first  # index of the first Setting emitted inside this node
        self.last_end = None  # end mark of the last child (block collections end there)
        self.entries: dict | None = None  # key -> (first, end) Setting index range, for duplicates
        self.merges: list | None = None  # `<<:` sources, one list of (mapping, anchor record) per `<<` key
        self.item_sources: list | None = None  # for a sequence under `<<:`: anchor records of its aliases
        self.start_ev = start_ev
        self.no_replay = False  # a sequence of `<<:` sources: its aliases are merged, not repeated
        self.size = 1  # values inside, with every alias counted as what it stands for


def load_yaml(text: str, file: str = "", issues: list[ParseIssue] | None = None) -> tuple[Any, list[Setting]]:
    """Load one YAML (or JSON) document. Returns the data and a Setting per mapping entry, in
    document order. Duplicate keys are reported into `issues` when a list is given."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlError(
            f"file is too large to be a training config ({len(text) / 1e6:.1f} MB; vramlens reads "
            f"YAML/JSON files up to {MAX_YAML_BYTES / 1e6:g} MB)"
        )
    return _load(text, file, is_json_path(file), issues, "file")


def load_value(text: str, json: bool = False) -> Any:
    """One YAML value given as text — a `key=value` override on a command line (`lora_target='[q_proj,v_proj]'`),
    a conda `environment.yml` — or, with `json=True`, one JSON value (`--fsdp_config '{"min_num_params": 1}'`),
    read as `yaml.safe_load` (or `json.loads`) would read it and with the bounds of a whole config: at most
    MAX_YAML_BYTES of text, MAX_YAML_NODES values with every alias counted as what it stands for, MAX_YAML_DEPTH
    levels of nesting. Raises YamlError, whose message says which bound was passed, for text over a bound or
    text that is not YAML (JSON). Every YAML or JSON value vramlens reads from a user's files goes through here
    or `load_yaml`: PyYAML's own loaders expand aliases without a bound and recurse once per nesting level,
    as does `json.loads`."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlError(
            f"the value is too large to be a setting ({len(text) / 1e6:.1f} MB; vramlens reads "
            f"YAML/JSON values up to {MAX_YAML_BYTES / 1e6:g} MB)"
        )
    return _load(text, "", json, None, "value")[0]


def _load(
    text: str, file: str, json_mode: bool, issues: list[ParseIssue] | None, what: str
) -> tuple[Any, list[Setting]]:
    if json_mode:
        text = prepare_json(text)
    remap = _EditorLines(text) if _YAML_ONLY_BREAK.search(text) else None
    first_issue = len(issues) if issues is not None else 0
    loader = _Loader(text)
    try:
        data, settings = _compose(loader, file, _Scalars(json_mode), issues, what)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        span = None
        if mark is not None:
            line, col = remap.pos(mark.line, mark.column) if remap else (mark.line, mark.column)
            span = _error_span(text, file, line, col)
        if "nesting depth" in str(exc.problem):  # PyYAML >= 6.0.4's own cap, met before ours
            raise YamlError(_too_deep(what), span) from None
        raise YamlError(f"YAML syntax error: {exc.problem or exc}", span) from None
    except yaml.reader.ReaderError as exc:
        line, col = LineIndex(text).pos(exc.position)
        raise YamlError(
            f"not a text file: it contains the control character U+{exc.character:04X} "
            f"(line {line + 1}, column {col + 1})",
            _error_span(text, file, line, col),
        ) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"YAML error: {exc}") from None
    except YamlError as exc:
        if exc.span is not None and remap is not None:
            exc.span = remap.span(exc.span)
        if exc.span is not None and not exc.span.file:
            exc.span = exc.span.model_copy(update={"file": file})
        raise
    finally:
        loader.dispose()
    if remap is not None:
        for setting in settings:
            remap.setting(setting)
        if issues is not None:
            for k in range(first_issue, len(issues)):
                span = issues[k].span
                if span is not None:
                    issues[k] = issues[k].model_copy(update={"span": remap.span(span)})
    return data, settings


def _too_deep(what: str) -> str:
    if what == "file":
        return f"YAML nested more than {MAX_YAML_DEPTH} levels deep: not a training config"
    return f"the value nests more than {MAX_YAML_DEPTH} levels deep"


def _error_span(text: str, file: str, line: int, col: int) -> Span:
    """One character at (line, col), moved inside the text: libyaml reports errors at the end of the
    stream on the line after the last one."""
    idx = LineIndex(text)
    if line >= len(idx):
        line, col = len(idx) - 1, len(idx.line(len(idx) - 1))
    length = len(idx.line(line))
    col = min(col, length)
    return Span(file=file, start_line=line, start_col=col, end_line=line, end_col=min(col + 1, length))


class _EditorLines:
    """YAML 1.1 (libyaml) also ends lines at U+0085, U+2028 and U+2029; editors and LSP end them only at
    \n, \r\n and \r. Moves libyaml's (line, column) positions onto the editor's lines."""

    def __init__(self, text: str):
        self.yaml_starts = [0] + [m.end() for m in _YAML_BREAK.finditer(text)]
        self.editor = LineIndex(text)

    def pos(self, line: int, col: int) -> tuple[int, int]:
        if line >= len(self.yaml_starts):
            return len(self.editor), 0  # past the end (`_error_span` moves it back)
        return self.editor.pos(self.yaml_starts[line] + col)

    def span(self, span: Span) -> Span:
        sl, sc = self.pos(span.start_line, span.start_col)
        el, ec = self.pos(span.end_line, span.end_col)
        return span.model_copy(update={"start_line": sl, "start_col": sc, "end_line": el, "end_col": ec})

    def setting(self, s: Setting) -> None:
        if s._coords is None:
            return
        f, kl, kc, kel, kec, vl, vc, el, ec = s._coords
        s._coords = (f, *self.pos(kl, kc), *self.pos(kel, kec), *self.pos(vl, vc), *self.pos(el, ec))
        s._span = s._value_span = s._key_span = None


def _compose(loader, file: str, scalars: _Scalars, issues, what: str) -> tuple[Any, list[Setting]]:
    get_event = loader.get_event
    ScalarEvent, AliasEvent = yaml.ScalarEvent, yaml.AliasEvent
    MappingStartEvent, SequenceStartEvent = yaml.MappingStartEvent, yaml.SequenceStartEvent
    MappingEndEvent, SequenceEndEvent = yaml.MappingEndEvent, yaml.SequenceEndEvent
    DocumentStartEvent, StreamEndEvent = yaml.DocumentStartEvent, yaml.StreamEndEvent
    settings: list[Setting] = []
    stack: list[_Frame] = []
    anchors: dict[str, tuple] = {}  # name -> (value, path, settings inside, start_ev, end_mark)
    dropped: list[tuple[int, int]] = []
    duplicates = 0
    last_duplicate = None
    budget = MAX_YAML_NODES
    sizes: dict[int, int] = {}  # id(anchor record) -> its size (aliases share data; a consumer expands it)
    documents = 0
    not_read = "; the file is not read" if what == "file" else ""  # a value's reader names the setting
    root: Any = None
    have_root = False

    def deliver(value, start_ev, end_mark, anchor_record, size: int = 1) -> None:
        """A node is complete: hand it to its parent (as a key, a value or a sequence item)."""
        nonlocal root, have_root, duplicates, last_duplicate
        if not stack:
            root, have_root = value, True
            return
        parent = stack[-1]
        parent.size += size
        if parent.size > MAX_YAML_NODES:
            raise YamlError(
                f"YAML aliases expand to more than {MAX_YAML_NODES:,} values (an alias bomb, "
                f'"billion laughs"?){not_read}',
                _mark_span(file, start_ev.start_mark, end_mark),
            )
        parent.last_end = end_mark
        if not parent.is_map:
            parent.data.append(value)
            if anchor_record is not None:
                if parent.item_sources is None:
                    parent.item_sources = []
                parent.item_sources.append(anchor_record)
            return
        if parent.key is _NOKEY:  # this node is a key
            if isinstance(value, (list, dict)):
                value = _KEY_REPR.repr(value)
            parent.key = value
            parent.key_ev = start_ev
            parent.key_is_merge = (
                isinstance(start_ev, ScalarEvent)
                and value == "<<"
                and not start_ev.style
                and scalars.tag_of(start_ev) == _MERGE
            )
            km_s, km_e = start_ev.start_mark, end_mark
            s = Setting.at(
                str(value),
                parent.path + (value,),
                None,
                (file, km_s.line, km_s.column, km_e.line, km_e.column, 0, 0, 0, 0),
            )
            parent.setting = s
            parent.setting_index = len(settings)
            settings.append(s)
            return
        # this node is the value of parent.key
        key = parent.key
        s = cast(Setting, parent.setting)  # set when the key was delivered
        kc = cast(tuple, s._coords)  # made by `Setting.at`: coordinates, not spans
        vs = start_ev.start_mark
        if isinstance(start_ev, ScalarEvent) and value is None and vs.index == end_mark.index:
            # `key:` with nothing after it: a zero-width value right after the colon
            vl, vc, el, ec = kc[3], kc[4] + 1, kc[3], kc[4] + 1
        else:
            vl, vc, el, ec = vs.line, vs.column, end_mark.line, end_mark.column
        s._coords = (file, kc[1], kc[2], kc[3], kc[4], vl, vc, el, ec)
        s.value = value
        if parent.key_is_merge:
            # the `<<` entry and what an inline source wrote under it: its keys are placed by the merge below
            dropped.append((parent.setting_index, len(settings)))
            sources = []
            if isinstance(value, dict) and anchor_record is not None:
                sources.append((value, anchor_record))
            elif isinstance(value, list) and anchor_record is not None and anchor_record[0] is _ITEMS:
                sources.extend(zip(value, anchor_record[1]))
            else:
                raise YamlError(
                    "`<<` merge key needs a mapping alias or a list of mapping aliases", _mark_span(file, vs, end_mark)
                )
            if parent.merges is None:
                parent.merges = []
            parent.merges.append(sources)
        else:
            data = parent.data
            if parent.entries is None:
                parent.entries = {}
            try:
                if key in parent.entries:
                    dropped.append(parent.entries[key])
                    duplicates += 1
                    if issues is not None and duplicates > MAX_DUPLICATE_REPORTS:
                        last_duplicate = s.key_span
                    elif issues is not None:
                        issues.append(
                            ParseIssue(
                                kind=IssueKind.DUPLICATE_KEY,
                                message=f"duplicate key `{key}`: YAML keeps the last value",
                                severity=Severity.WARNING,
                                span=s.key_span,
                            )
                        )
                parent.entries[key] = (parent.setting_index, len(settings))
                data[key] = value
            except TypeError:
                data[str(key)] = value
        parent.key = _NOKEY
        parent.setting = None

    def replay(record, path: tuple) -> None:
        """An alias repeats an anchored node: repeat its entries under the alias's path."""
        nonlocal budget
        _, apath, inner = record[0], record[1], record[2]
        n = len(apath)
        budget -= len(inner)
        if budget < 0:
            raise YamlError(f"YAML aliases repeat more than {MAX_YAML_NODES:,} settings{not_read}")
        for s in inner:
            c = Setting.at(s.key, path + s.path[n:], s.value, s._coords)
            settings.append(c)

    while True:
        ev = get_event()
        budget -= 1
        if budget < 0:
            raise YamlError(
                f"YAML document has more than {MAX_YAML_NODES:,} nodes: too large to be a training config"
                if what == "file"
                else f"the value holds more than {MAX_YAML_NODES:,} values"
            )
        cls = ev.__class__
        if cls is ScalarEvent:
            value = scalars.value(ev)
            record: tuple | None = None
            if ev.anchor is not None:
                record = (value, _child_path(stack), [], ev, ev.end_mark)
                anchors[ev.anchor] = record
                sizes[id(record)] = 1
            deliver(value, ev, ev.end_mark, record)
        elif cls is MappingStartEvent or cls is SequenceStartEvent:
            if ev.tag is not None and ev.tag not in _COLLECTION_TAGS:
                raise _tag_error(ev.tag, _mark_span(file, ev.start_mark, ev.end_mark))
            if len(stack) >= MAX_YAML_DEPTH:
                raise YamlError(_too_deep(what), _mark_span(file, ev.start_mark, ev.end_mark))
            path = _child_path(stack)
            f = _Frame(
                cls is MappingStartEvent, {} if cls is MappingStartEvent else [], path, ev.anchor, len(settings), ev
            )
            if stack and stack[-1].key_is_merge and stack[-1].key is not _NOKEY:
                f.no_replay = True
            stack.append(f)
        elif cls is MappingEndEvent or cls is SequenceEndEvent:
            f = stack.pop()
            if f.merges:
                # as https://yaml.org/type/merge.html and PyYAML up to 6.0.3 (SafeConstructor.flatten_mapping)
                # build it: the mapping's own keys win, then a later `<<` key's sources over an earlier one's, and
                # within one `<<: [*a, *b]` the earlier alias (PyYAML 6.0.4 dedupes merged keys by the identity
                # of their strings, so its answer depends on their length)
                own = set(f.data)
                for source, record in (pair for group in reversed(f.merges) for pair in group):
                    for k, v in source.items():
                        if k in own:
                            continue
                        own.add(k)
                        f.data[k] = v
                        inner = [s for s in record[2] if s.path[len(record[1]) :][:1] == (k,)]
                        replay((None, record[1], inner), f.path)
            flow = getattr(f.start_ev, "flow_style", False)
            end_mark = ev.end_mark if (flow or f.last_end is None) else f.last_end
            record = None
            if f.anchor is not None:
                record = (f.data, f.path, settings[f.first :], f.start_ev, end_mark)
                anchors[f.anchor] = record
                sizes[id(record)] = f.size
            elif f.item_sources is not None and len(f.item_sources) == len(f.data):
                record = (_ITEMS, f.item_sources)
            elif f.is_map and (f.no_replay or (stack and stack[-1].no_replay)):
                # an inline merge source (`<<: {lr: 1}` or an item of `<<: [...]`): merged as an anchored one is
                record = (f.data, f.path, settings[f.first :], f.start_ev, end_mark)
            deliver(f.data, f.start_ev, end_mark, record, f.size)
        elif cls is AliasEvent:
            record = anchors.get(ev.anchor)
            if record is None:
                raise YamlError(
                    f"unknown or recursive YAML alias `*{ev.anchor}`", _mark_span(file, ev.start_mark, ev.end_mark)
                )
            path = _child_path(stack)
            top = stack[-1] if stack else None
            if top is not None and (
                (not top.is_map and not top.no_replay)
                or (top.is_map and top.key is not _NOKEY and not top.key_is_merge)
            ):
                replay(record, path)
            deliver(record[0], ev, ev.end_mark, record, sizes.get(id(record), 1))
        elif cls is DocumentStartEvent:
            documents += 1
            if documents > 1:
                raise YamlError(
                    "expected a single YAML document, found several (`---`)",
                    _mark_span(file, ev.start_mark, ev.end_mark),
                )
        elif cls is StreamEndEvent:
            break
    if last_duplicate is not None:
        issues.append(
            ParseIssue(
                kind=IssueKind.DUPLICATE_KEY,
                message=f"{duplicates - MAX_DUPLICATE_REPORTS:,} more duplicate keys after the first "
                f"{MAX_DUPLICATE_REPORTS:,} (YAML keeps the last value of each); the last one is here",
                severity=Severity.WARNING,
                span=last_duplicate,
            )
        )
    if dropped:
        drop: set[int] = set()
        for a, b in dropped:
            drop.update(range(a, b))
        settings = [s for i, s in enumerate(settings) if i not in drop]
    return (root if have_root else None), settings


def _child_path(stack: list[_Frame]) -> tuple:
    """The key path of the node that starts now."""
    if not stack:
        return ()
    f = stack[-1]
    if f.is_map:
        return f.path if f.key is _NOKEY else f.path + (f.key,)
    return f.path + (len(f.data),)


# --- several documents in one file (`---`) -------------------------------------------------------

_DOC_MARKER = re.compile(r"(?:---|\.\.\.)(?:[ \t]|$)")

# Each document of a file is analysed alone — parsed, resolved, estimated, checked, and each fix estimated again —
# so a file costs one analysis per document (measured on 2 shared cores: 0.25 s each with the fixes `check` lists;
# a file of 150 documents took `check` 92 s and `check --fix` 212 s, 15 s and 19 s within this budget, and 1,000
# documents 4.4 s and 6.0 s). The configs vramlens reads have one document (every YAML file of the shared corpus of
# 143 framework configs) or a few (a Kubernetes Job around a config, two runs in one file: at most 2 among the test
# fixtures); 10 leaves room for those and holds a file of thousands of `---` to 10 analyses. Past it the rest of the
# file is not analysed, and a VL021 at the first document left out says so.
MAX_YAML_DOCUMENTS = 10
# Every document is read at its own line numbers, as a view of the whole file with the other documents' lines blank
# and its full-line comments kept, so each costs its own text plus the file's comments and line breaks. All views
# together are held to what one document may be (twice MAX_YAML_BYTES, as analysis.MAX_DOCUMENT_CHARS): a file of
# many lines or comments is not read once per document. The first document is always read (alone it is bounded
# like any file).
MAX_DOCUMENTS_CHARS = 2 * MAX_YAML_BYTES


class Documents:
    """The documents of a multi-document YAML stream within the budgets above."""

    def __init__(self, views: list[str], skipped: int = 0, skipped_span: Span | None = None, why: str = ""):
        self.views = views  # one per document analysed, in file order
        self.skipped = skipped  # documents after them, not analysed
        self.skipped_span = skipped_span  # the first line of the first one left out
        self.why = why  # which budget they are past

    def skipped_message(self) -> str:
        first = len(self.views) + 1
        which = f"document {first}" if self.skipped == 1 else f"documents {first}–{first + self.skipped - 1:,}"
        return f"{which} of this file {'is' if self.skipped == 1 else 'are'} not analysed: {self.why}"


def split_documents(text: str) -> Documents | None:
    """A YAML stream of several documents as one text per document, each the whole file with every other
    document's lines blank (full-line comments kept: directives such as `# vramlens: gpu=…` and suppressions
    apply to the file), so each document is read alone at its own line numbers. None for a single document.
    A column-0 `---` or `...` always ends a document (block scalars are indented, flow scalars rarely span one).
    At most MAX_YAML_DOCUMENTS views, MAX_DOCUMENTS_CHARS of text in all, are built; the rest are counted."""
    if "\n---" not in text and "\n..." not in text:
        return None
    lines = text.split("\n")
    docs: list[list[int]] = [[]]
    for i, line in enumerate(lines):
        if _DOC_MARKER.match(line):
            docs.append([])
            continue
        docs[-1].append(i)
    docs = [d for d in docs if any(_content(lines[i]) for i in d)]
    if len(docs) < 2:
        return None
    comment = [line.lstrip().startswith("#") for line in lines]
    out = Documents([])
    size = 0
    for n, doc in enumerate(docs):
        if n == MAX_YAML_DOCUMENTS:
            out.why = f"vramlens analyses the first {MAX_YAML_DOCUMENTS} documents of a file"
        else:
            keep = {i for i in doc if not lines[i].startswith("%")}
            view = "\n".join(line if i in keep or comment[i] else "" for i, line in enumerate(lines))
            size += len(view)
            if n == 0 or size <= MAX_DOCUMENTS_CHARS:
                out.views.append(view)
                continue
            out.why = (
                f"each document is read with the file's {len(lines):,} lines and its comments, and vramlens "
                f"reads up to {MAX_DOCUMENTS_CHARS / 1e6:g} MB of text for all of a file's documents"
            )
        first = next(i for i in doc if _content(lines[i]))
        out.skipped = len(docs) - n
        out.skipped_span = Span(
            file="", start_line=first, start_col=0, end_line=first, end_col=len(lines[first].rstrip())
        )
        break
    return out


def document_views(text: str) -> list[str] | None:
    """The views of `split_documents` (the documents within its budgets); None for a single document."""
    docs = split_documents(text)
    return docs.views if docs is not None else None


def _content(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#") and not s.startswith("%")
