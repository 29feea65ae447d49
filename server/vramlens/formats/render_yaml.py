"""Plan changes → text edits for YAML and JSON configs, in each format's own spelling.

`optim: paged_adamw_8bit` in HF/TRL YAML, `optimizer: paged_adamw_8bit` in axolotl,
`_component_: bitsandbytes.optim.PagedAdamW8bit` under `optimizer:` in torchtune (dropping `fused:`,
which bitsandbytes optimizers do not take), `disable_gradient_checkpointing: false` in LLaMA-Factory,
`enable_activation_checkpointing: True` in torchtune (the document's own boolean spelling).

An existing entry has its value replaced in place, keeping its quote style and trailing comment.
A missing entry is added after a related key of the same mapping (or after the mapping's last entry)
with that key's indentation; in JSON and flow mappings it is added after the related entry with a
comma, so the document stays valid. A value read from a referenced file (a DeepSpeed JSON) is edited
in that file. What a format cannot express (the allocator setting in an axolotl YAML) produces no edit
and a note that says where to make the change.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable, Protocol, cast

from vramlens.formats import accelerate, deepspeed, litgpt, neox
from vramlens.formats.render import RENDERERS, RenderResult, TextEdit
from vramlens.formats.yaml_doc import YamlError, is_json_path, load_value, load_yaml
from vramlens.frameworks import keys as key_table
from vramlens.frameworks.axolotl import keys as axolotl_keys
from vramlens.frameworks.keys import ALLOC_NOTE
from vramlens.frameworks.keys import note as _note
from vramlens.frameworks.keys import write_at as _simple
from vramlens.frameworks.llamafactory import keys as llamafactory_keys
from vramlens.frameworks.torchtune import keys as torchtune_keys
from vramlens.frameworks.transformers import keys as transformers_keys
from vramlens.knowledge import optimizers
from vramlens.plan import Sourced, Span, TrainingPlan
from vramlens.text import LINE_BREAK, LineIndex, line_ending


class _Entry(Protocol):
    """A `Setting` as the YAML loader makes it (`Setting.at`, from coordinates): all three spans are there."""

    key: str
    path: tuple
    value: Any

    @property
    def span(self) -> Span: ...

    @property
    def key_span(self) -> Span: ...

    @property
    def value_span(self) -> Span: ...


@functools.lru_cache(maxsize=2)
def _settings(text: str, file: str) -> tuple[_Entry, ...]:
    """The document's entries, parsed once per text: every fix offered for one analysis renders its change into
    the same document (a 1.5 MB file parsed per fix made 60,000 findings' fixes take 10 s)."""
    return cast("tuple[_Entry, ...]", tuple(load_yaml(text, file)[1]))


@functools.lru_cache(maxsize=2)
def _sharing(text: str, file: str, json_doc: bool) -> tuple[dict[tuple[int, int], tuple], list[tuple]]:
    """(key position → the path written there, [(start, end, name, line) of each anchored value (`&b`) that an
    alias (`*b`) uses]) for `_Doc`: an entry an alias or a `<<:` merge repeats under another path keeps the key
    position of the anchored entry it repeats (formats.yaml_doc), so the first path seen at a key position is where
    the entry is written. Once per text, as `_settings`."""
    written_at: dict[tuple[int, int], tuple] = {}
    settings = _settings(text, file)
    for s in settings:
        if s.key_span is not None:
            written_at.setdefault((s.key_span.start_line, s.key_span.start_col), s.path)
    if json_doc or "&" not in text or "*" not in text:
        return written_at, []
    aliased = {m[1] for m in _ALIAS.finditer(text)}
    index = LineIndex(text)
    anchors = []
    for s in settings:
        vs = s.value_span
        if vs is None or s.key_span is None or written_at[(s.key_span.start_line, s.key_span.start_col)] != s.path:
            continue
        m = _ANCHOR.match(text, index.offset(vs.start_line, vs.start_col))
        if m is not None and m[1] in aliased:
            anchors.append(((vs.start_line, vs.start_col), (vs.end_line, vs.end_col), m[1], vs.start_line + 1))
    return written_at, anchors


class _Doc:
    """One YAML/JSON document being edited: its entries by path, its style, the pending edits."""

    def __init__(self, text: str, plan: TrainingPlan):
        self.text = text
        self.plan = plan
        self.file = plan.source_file
        self.json = is_json_path(self.file)
        self.index = LineIndex(text)  # lines as spans count them: \n, \r\n and a lone \r end a line
        self.lines = LINE_BREAK.split(text)
        self.eol = line_ending(text)
        self.by_path: dict[tuple, _Entry] = {}
        for s in _settings(text, self.file):
            self.by_path[s.path] = s
        # `[ \t]*`, not `\s*`: `\s` also matches line breaks, so each of n blank lines started a scan over the
        # rest of them (quadratic: a document of a multi-document file is read with the other documents' lines blank)
        stripped = re.sub(r"(?m)^[ \t]*#.*$", "", text).lstrip()
        self.flow_root = stripped.startswith("{")
        self.edits: list[TextEdit] = []
        self.inserts: dict[tuple[int, int], list[str]] = {}
        self.notes: list[str] = []
        self.bool_words = self._bool_style()
        self.unit = self._indent_unit()
        self.quote = "'" if text.count("'") >= text.count('"') else '"'
        self.done: set[str] = set()  # concepts already written as part of another change
        self.pending: dict[tuple, Any] = {}  # path -> value written by this render (later writes win)
        self.handles: dict[tuple, TextEdit] = {}
        self.new_blocks: dict[tuple, tuple[dict, tuple]] = {}  # missing parent -> (entries, after)
        self.added: dict[tuple, tuple] = {}  # path added here -> (line, col, separator, indent, flow, quoted keys)
        # Changing an entry inside an anchored node that an alias uses changes every user of it, so such a change is
        # written as an override in the mapping being fixed (own keys win over merged ones:
        # https://yaml.org/type/merge.html), or refused with the reason (`_sharing`, `_shared`).
        self.written_at, self.shared_nodes = _sharing(text, self.file, self.json)
        self.alias_overrides: dict[tuple, dict] = {}  # mapping written as an alias -> entries it overrides
        self.refused: list[str] = []  # why a change was not written (a shared definition)

    # --- style -------------------------------------------------------------------------------------

    def _bool_style(self) -> tuple[str, str]:
        if self.json:
            return "true", "false"
        cap = low = 0
        for s in self.by_path.values():
            if isinstance(s.value, bool):
                t = self.slice(s.value_span)
                if t[:1] in ("T", "F"):
                    cap += 1
                elif t[:1] in ("t", "f"):
                    low += 1
        return ("True", "False") if cap > low else ("true", "false")

    def _indent_unit(self) -> int:
        for s in self.by_path.values():
            if len(s.path) == 2 and not isinstance(s.path[0], int):
                parent = self.by_path.get(s.path[:1])
                if (
                    parent is not None
                    and parent.key_span is not None
                    and s.key_span is not None
                    and s.key_span.start_line > parent.key_span.start_line
                ):
                    d = s.key_span.start_col - parent.key_span.start_col
                    if d > 0:
                        return d
        return 2 if not self.json else 4

    def slice(self, span: Span | None) -> str:
        if span is None:
            return ""
        return self.text[
            self.index.offset(span.start_line, span.start_col) : self.index.offset(span.end_line, span.end_col)
        ]

    def scalar(self, value: Any, old: str = "") -> str:
        """A value in this document's spelling (keeping the old value's quotes for strings)."""
        if self.json:
            return json.dumps(value)
        if isinstance(value, bool):
            return self.bool_words[0] if value else self.bool_words[1]
        if value is None:
            return "null"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            r = repr(value)
            if "e" in r and "." not in r:  # YAML 1.1 reads 2e-05 as a string
                r = r.replace("e", ".0e")
            return r
        if isinstance(value, (list, tuple)):
            q = next((c for c in old if c in ("'", '"')), "") if old.lstrip().startswith("[") else ""
            return "[" + ", ".join(self.scalar(v, q) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {self.scalar(v)}" for k, v in value.items()) + "}"
        text = str(value)
        q = old[:1] if old[:1] in ("'", '"') else ""
        if not q and _plain_ok(text):
            return text
        q = q or self.quote
        if q == "'":
            return "'" + text.replace("'", "''") + "'"
        return json.dumps(text)

    # --- anchors and aliases ------------------------------------------------------------------------

    def _anchor_at(self, line: int, col: int) -> tuple | None:
        """The innermost aliased anchored value whose text holds (line, col)."""
        inside = [a for a in self.shared_nodes if a[0] <= (line, col) < a[1]]
        return max(inside, key=lambda a: a[0]) if inside else None

    def _own(self, s: _Entry) -> bool:
        """Is `s` written at its own path (not repeated there by an alias or a merge)?"""
        return s.key_span is None or self.written_at.get((s.key_span.start_line, s.key_span.start_col)) == s.path

    def _local_mapping(self, parent: tuple) -> bool:
        """Can entries be added to the mapping at `parent` without changing another path's settings?"""
        if not parent:
            return True
        p = self.by_path.get(parent)
        if p is None:
            return parent[:-1] == () or self._local_mapping(parent[:-1])
        if p.value_span is None or not self._own(p):
            return False
        return self._anchor_at(p.value_span.start_line, p.value_span.start_col) is None

    def _shared(self, s: _Entry) -> str | None:
        """None when `s` may be changed where it is written; `_OVERRIDE` when it comes from an anchored node
        through an alias or merge and its own mapping can override it; else why it is not changed."""
        vs = s.value_span or s.key_span
        anchor = self._anchor_at(vs.start_line, vs.start_col) if vs is not None else None
        if anchor is None:
            return None
        if not self._own(s) and self._local_mapping(s.path[:-1]):
            return _OVERRIDE
        key = ".".join(map(str, s.path))
        return (
            f"`{key}` is set in the YAML anchor `&{anchor[2]}` (line {anchor[3]}), which `*{anchor[2]}` also "
            f"uses: changing it there would change every user of that anchor, so set `{key}` by hand where "
            f"it applies"
        )

    def _refuse_parent(self, parent: tuple) -> None:
        p = self.by_path.get(parent)
        anchor = self._anchor_at(p.value_span.start_line, p.value_span.start_col) if p and p.value_span else None
        where = f"the YAML anchor `&{anchor[2]}` (line {anchor[3]})" if anchor else "a mapping an alias repeats"
        self.refused.append(
            f"`{'.'.join(map(str, parent))}` is {where}, which an alias also uses: an entry "
            f"added there would change every user of it"
        )

    # --- reading -----------------------------------------------------------------------------------

    def get(self, path: tuple) -> _Entry | None:
        return self.by_path.get(path)

    def value(self, path: tuple) -> Any:
        if path in self.pending:
            return self.pending[path]
        s = self.by_path.get(path)
        return None if s is None else s.value

    def children(self, parent: tuple) -> list[_Entry]:
        n = len(parent) + 1
        return [s for p, s in self.by_path.items() if len(p) == n and p[:-1] == parent and not isinstance(p[-1], int)]

    def entry_end_line(self, s: _Entry) -> int:
        return s.span.end_line if s.span is not None else s.key_span.end_line

    # --- writing -----------------------------------------------------------------------------------

    def _span(self, l1: int, c1: int, l2: int | None = None, c2: int | None = None) -> Span:
        return Span(
            file=self.file,
            start_line=l1,
            start_col=c1,
            end_line=l1 if l2 is None else l2,
            end_col=c1 if c2 is None else c2,
        )

    def replace(self, span: Span, text: str) -> TextEdit:
        edit = TextEdit(span, text)
        self.edits.append(edit)
        return edit

    def insert(self, line: int, col: int, text: str) -> None:
        self.inserts.setdefault((line, col), []).append(text)

    def set(self, path: tuple, value: Any, after: tuple = ()) -> None:
        """Set `path` to `value`: in place when the entry exists, else added next to `after`."""
        if path in self.pending:
            self.pending[path] = value
            handle = self.handles.get(path)
            if handle is not None:  # rewrite the earlier edit of this entry
                self.edits.remove(handle)
                self.handles.pop(path)
                self._replace_value(self.by_path[path], value, path)
            else:
                self._update_block(path, value)
            return
        self.pending[path] = value
        s = self.by_path.get(path)
        if s is not None:
            shared = self._shared(s)
            if shared is None:
                self._replace_value(s, value, path)
            elif shared is _OVERRIDE:
                self._add(path, value, after)
            else:
                self.refused.append(shared)
            return
        self._add(path, value, after)

    def _update_block(self, path: tuple, value: Any) -> None:
        for parent, (entries, _) in self.new_blocks.items():
            if path[: len(parent)] == parent:
                node = entries
                for k in path[len(parent) : -1]:
                    node = node.setdefault(k, {})
                node[path[-1]] = value
                return

    def _replace_value(self, s: _Entry, value: Any, path: tuple | None = None) -> None:
        edit = self._replace_value_edit(s, value)
        if path is not None and edit is not None:
            self.handles[path] = edit

    def _replace_value_edit(self, s: _Entry, value: Any) -> TextEdit | None:
        vs = s.value_span
        ks = s.key_span
        old = self.slice(vs)
        if isinstance(s.value, (dict, list)) and not old.lstrip().startswith(("[", "{")):
            # a block collection: the new value goes right after the colon, replacing the block
            colon = self.lines[ks.end_line].find(":", ks.end_col)
            start = (ks.end_line, (colon + 1) if colon >= 0 else ks.end_col + 1)
            return self.replace(self._span(start[0], start[1], vs.end_line, vs.end_col), " " + self.scalar(value))
        new = self.scalar(value, old)
        if vs.start_col == vs.end_col and vs.start_line == vs.end_line and old == "":
            line = self.lines[vs.start_line]
            col = min(vs.start_col, len(line))
            return self.replace(self._span(vs.start_line, col, vs.end_line, col), " " + new)
        return self.replace(vs, new)

    def _entry_text(self, key: Any, value: Any, indent: int, flow: bool, quoted_keys: bool) -> str:
        if flow:
            k = json.dumps(str(key)) if (self.json or quoted_keys) else str(key)
            return f"{k}: {self.scalar(value) if not self.json else json.dumps(value)}"
        if isinstance(value, dict):
            inner = indent + self.unit
            parts = [f"{key}:"]
            for k, v in value.items():
                parts.append(self.eol + " " * inner + self._entry_text(k, v, inner, False, False))
            return "".join(parts)
        return f"{key}: {self.scalar(value)}"

    def _add(self, path: tuple, value: Any, after: tuple) -> None:
        parent, key = path[:-1], path[-1]
        if not self._local_mapping(parent):
            self._refuse_parent(parent)
            return
        if parent in self.by_path and self.slice(self.by_path[parent].value_span).startswith("*"):
            # `train: *b`: becomes `train: {<<: *b, key: value}` (written once, in `result`)
            self.alias_overrides.setdefault(parent, {})[key] = value
            return
        if parent and (parent not in self.by_path or self.by_path[parent].value is None):
            # a missing parent mapping: collect its entries and write the block once, at the end
            top = parent
            while top not in self.by_path and top[:-1] and top[:-1] not in self.by_path:
                top = top[:-1]
            entries, _ = self.new_blocks.setdefault(top, ({}, after if top == parent else ()))
            node = entries
            for k in path[len(top) : -1]:
                node = node.setdefault(k, {})
            node[key] = value
            return
        siblings = [s for s in self.children(parent) if self._own(s)]  # not the entries a merge repeats
        anchor = None
        for a in after:
            a_path = a if isinstance(a, tuple) else parent + (a,)
            if a_path in self.added and a_path[:-1] == parent:
                # right after an entry this render adds: same place, same indentation
                line, col, sep, indent, flow, quoted = self.added[a_path]
                text = sep + self._entry_text(key, value, indent, flow, quoted)
                self.insert(line, col, text + (self.eol if col == 0 and not flow else ""))
                self.added[path] = self.added[a_path]
                return
            if a_path in self.by_path and a_path[:-1] == parent and self._own(self.by_path[a_path]):
                anchor = self.by_path[a_path]
                break
        if anchor is None and siblings:
            anchor = max(siblings, key=lambda s: (self.entry_end_line(s), s.key_span.start_col))
        flow = self.flow_root if not parent else self.slice(self.by_path[parent].value_span).lstrip().startswith("{")
        if anchor is None:
            if not parent:
                if self.flow_root:
                    self.notes.append(f"add `{key}` to the document")
                    return
                text = self.text
                prefix = "" if (not text or text.endswith(("\n", "\r"))) else self.eol
                last = len(self.lines) - 1
                self.insert(
                    last, len(self.lines[last]), prefix + self._entry_text(key, value, 0, False, False) + self.eol
                )
                return
            p = self.by_path[parent]
            if p.value is None or p.value == {}:
                self._replace_value(p, {key: value}, parent)
                return
            if self._add_beside_merge(p, key, value):
                return
            self.notes.append(f"add `{key}` under `{'.'.join(map(str, parent))}`")
            return
        quoted = self.slice(anchor.key_span)[:1] in ('"', "'")
        if flow:
            vs = anchor.value_span
            same_line = anchor.key_span.start_line == (self.by_path[parent].value_span.start_line if parent else -1)
            indent = anchor.key_span.start_col
            sep = ", " if same_line else "," + self.eol + " " * indent
            self.insert(vs.end_line, vs.end_col, sep + self._entry_text(key, value, indent, True, quoted))
            self.added[path] = (vs.end_line, vs.end_col, sep, indent, True, quoted)
            return
        indent = anchor.key_span.start_col
        end = self.entry_end_line(anchor)
        entry = " " * indent + self._entry_text(key, value, indent, False, False)
        if end + 1 < len(self.lines):
            self.insert(end + 1, 0, entry + self.eol)
            self.added[path] = (end + 1, 0, " " * indent, indent, False, False)
        else:
            self.insert(end, len(self.lines[end]), self.eol + entry)
            self.added[path] = (end, len(self.lines[end]), self.eol + " " * indent, indent, False, False)

    def delete(self, path: tuple) -> bool:
        """Remove an entry that sits on lines of its own (block style); False when it cannot."""
        s = self.by_path.get(path)
        if s is None:
            return True
        shared = self._shared(s)
        if shared is not None:  # an entry of a shared anchor, or one a merge brings in
            self.refused.append(
                shared
                if shared is not _OVERRIDE
                else f"`{'.'.join(map(str, path))}` comes from a YAML anchor that an alias also uses: "
                f"it cannot be removed for this section alone"
            )
            return True
        ks = s.key_span
        if self.lines[ks.start_line][: ks.start_col].strip():
            return False
        if self.json or (path[:-1] and self.slice(self.by_path[path[:-1]].value_span).lstrip().startswith("{")):
            return False
        if self.flow_root and not path[:-1]:
            return False
        end = self.entry_end_line(s)
        if end + 1 < len(self.lines):
            self.replace(self._span(ks.start_line, 0, end + 1, 0), "")
        else:
            start_line = ks.start_line
            if start_line > 0:
                self.replace(self._span(start_line - 1, len(self.lines[start_line - 1]), end, len(self.lines[end])), "")
            else:
                self.replace(self._span(0, 0, end, len(self.lines[end])), "")
        return True

    def replace_entry(self, path: tuple, key: str, value: Any) -> None:
        """Replace a whole `old_key: value` entry with `key: value` (renamed keys)."""
        s = self.by_path[path]
        shared = self._shared(s)
        if shared is not None:
            self.refused.append(
                shared
                if shared is not _OVERRIDE
                else f"`{'.'.join(map(str, path))}` comes from a YAML anchor that an alias also uses: "
                f"rename it to `{key}` by hand"
            )
            return
        self.replace(s.span, self._entry_text(key, value, s.key_span.start_col, self.json, False))

    def append_item(self, path: tuple, item: Any, after: tuple = ()) -> None:
        """Add an item to a list (`plugins:`), creating the list when missing."""
        s = self.by_path.get(path)
        if s is None or s.value is None:
            if s is None:
                self._add(path, [item], after)
            else:
                self._replace_value(s, [item], path)
            return
        if not isinstance(s.value, list):
            self.notes.append(f"add `{item}` to `{'.'.join(map(str, path))}`")
            return
        if item in s.value:
            return
        shared = self._shared(s)
        if shared is _OVERRIDE:  # the list comes from an anchor: this section gets its own copy
            self._add(path, [*s.value, item], after)
            return
        if shared is not None:
            self.refused.append(shared)
            return
        old = self.slice(s.value_span)
        if old.lstrip().startswith("["):
            vs = s.value_span
            line = self.lines[vs.end_line]
            close = line.rfind("]", 0, vs.end_col)
            sep = ", " if s.value else ""
            self.insert(vs.end_line, close, sep + self.scalar(item))
            return
        first = s.value_span.start_col
        end = self.entry_end_line(s)
        entry = " " * first + "- " + self.scalar(item)
        if end + 1 < len(self.lines):
            self.insert(end + 1, 0, entry + self.eol)
        else:
            self.insert(end, len(self.lines[end]), self.eol + entry)

    def external(self, sourced: Sourced, value: Any) -> bool:
        """Edit a value read from a referenced file in that file (same spelling rules)."""
        vs = sourced.value_span
        if vs is None or vs.file == self.file or sourced.span is None:
            return False
        if vs.file.startswith("preset:") or not vs.file:
            return False
        text = json.dumps(value) if is_json_path(vs.file) else _yaml_plain(value)
        self.edits.append(TextEdit(vs, text))
        return True

    def _add_beside_merge(self, p: _Entry, key: Any, value: Any) -> bool:
        """Add `key: value` to the mapping `p` whose only entries come from a `<<:` merge: next to the `<<` key
        (before it: own keys win over merged ones wherever they stand)."""
        vs = p.value_span
        text = self.slice(vs)
        if text.lstrip().startswith("{"):
            brace = self.index.offset(vs.start_line, vs.start_col) + text.index("{") + 1
            line, col = self.index.pos(brace)
            self.insert(line, col, self._entry_text(key, value, 0, True, False) + ", ")
            return True
        for line in range(vs.start_line, vs.end_line + 1):
            stripped = self.lines[line].lstrip()
            if stripped.startswith("<<"):
                indent = len(self.lines[line]) - len(stripped)
                self.insert(line, 0, " " * indent + self._entry_text(key, value, indent, False, False) + self.eol)
                return True
        return False

    def result(self) -> RenderResult:
        blocks, self.new_blocks = self.new_blocks, {}
        for top, (entries, after) in blocks.items():
            if top in self.by_path:  # `key: null` → `key: {a: 1}`
                self._replace_value(self.by_path[top], entries, top)
            else:
                self._add(top, entries, after)
        for parent, entries in self.alias_overrides.items():
            p = self.by_path[parent]
            items = ", ".join(self._entry_text(k, v, 0, True, False) for k, v in entries.items())
            self.replace(p.value_span, "{<<: " + self.slice(p.value_span) + ", " + items + "}")
        if self.refused:  # a change only half written would be worse than none
            return RenderResult([], "; ".join(dict.fromkeys(self.refused + self.notes)))
        for (line, col), texts in self.inserts.items():
            self.edits.append(TextEdit(self._span(line, col), "".join(texts)))
        self.edits.sort(key=lambda e: (e.span.file, e.span.start_line, e.span.start_col))
        note = "; ".join(dict.fromkeys(self.notes)) if self.notes else None
        return RenderResult(self.edits, note)


_OVERRIDE = "set it in its own mapping"  # `_Doc._shared`: written over the merged entry (compared with `is`)
_ANCHOR = re.compile(r"&([^\s,\[\]{}]+)")
_ALIAS = re.compile(r"(?:^|[\s\[{,:-])\*([^\s,\[\]{}]+)", re.M)


def _plain_ok(text: str) -> bool:
    if not text or text != text.strip() or "\n" in text:
        return False
    if text[0] in "!&*[]{},#|>@`\"'%-?:" or ": " in text or " #" in text or text.endswith(":"):
        return False
    try:
        return load_value(f"k: {text}") == {"k": text}
    except YamlError:
        return False


def _yaml_plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if _plain_ok(value) else json.dumps(value)
    return json.dumps(value)


# === the formats ================================================================================

Handler = Callable[[_Doc, Any, dict], None]


def _targets_text(value) -> Any:
    if isinstance(value, (list, tuple)) and [str(v) for v in value] == ["all-linear"]:
        return "all-linear"
    return list(value) if isinstance(value, (list, tuple)) else value


def _render(handlers: dict[str, Handler], order: tuple = ()) -> Callable:
    def writer(text: str, plan: TrainingPlan, changes: dict[str, Any]) -> RenderResult:
        doc = _Doc(text, plan)
        keys = sorted(changes, key=lambda c: order.index(c) if c in order else len(order))
        for concept in keys:
            if concept in doc.done:
                continue
            value = changes[concept]
            current = getattr(plan, concept, None)
            handler = handlers.get(concept)
            local = (
                current is not None and current.value_span is not None and current.value_span.file == plan.source_file
            )
            if current is not None and not local and doc.external(current, value):
                continue  # the value lives in a referenced file: edit it there
            if handler is None:
                if (
                    concept in _DS_CONCEPTS
                    and plan.dist_strategy is not None
                    and plan.dist_strategy.value == "deepspeed"
                ):
                    ref = next((r for r in plan.references if r.kind == "deepspeed"), None)
                    where = f"the DeepSpeed config `{ref.target}`" if ref else "the DeepSpeed config"
                    doc.notes.append(f"set `{_DS_KEYS[concept]}` in {where}")
                else:
                    doc.notes.append(f"`{concept}` cannot be set in this {plan.format} config")
                continue
            handler(doc, value, changes)
        return doc.result()

    return writer


def _mark_done(doc: _Doc, *concepts: str) -> None:
    doc.done.update(concepts)


# concepts that live in the DeepSpeed file when the document itself does not set them
# (where, from the DeepSpeed key table)
_DS_KEYS = {
    concept: ".".join(deepspeed.key_for(concept).path)
    for concept in ("zero_stage", "offload_optimizer", "offload_params")
}
_DS_CONCEPTS = set(_DS_KEYS)


# --- HF / TRL ------------------------------------------------------------------------------------


# The HF and TRL writers are generated from their key tables (frameworks/transformers/keys.py).


def objective_handlers(prefix: tuple = ()) -> dict[str, Handler]:
    """TRL's keys for the objective fixes (fixes_objective), top-level or under axolotl's `trl:`."""

    def generation(doc: _Doc, value: Any, changes: dict) -> None:
        if value == "vllm-server":
            doc.set(prefix + ("vllm_mode",), "server", after=(prefix + ("use_vllm",)) if prefix else ("use_vllm",))
            doc.notes.append("start the server with `trl vllm-serve --model …` on GPUs the training does not use")

    def ref_model(doc: _Doc, value: Any, changes: dict) -> None:
        doc.notes.append("remove the reference model setting: PEFT disables the adapters for the reference")

    return {
        "precompute_ref": _simple(("precompute_ref_log_probs",), after=("beta", "rl_beta", "rl")),
        "vllm_memory_share": _simple((prefix + ("vllm_gpu_memory_utilization",),), after=("use_vllm",)),
        "generation": generation,
        "num_generations": _simple((prefix + ("num_generations",),)),
        "completion_len": _simple((prefix + ("max_completion_length",),)),
        "ref_model_id": ref_model,
    }


# --- accelerate --------------------------------------------------------------------------------------


def _accelerate_handlers() -> dict[str, Handler]:
    def kind(doc: _Doc) -> str:
        return str(doc.value(("distributed_type",)) or "").upper()

    def zero(doc: _Doc, value: Any, changes: dict) -> None:
        if kind(doc) == "DEEPSPEED" or ("deepspeed_config",) in doc.by_path:
            if ("deepspeed_config", "deepspeed_config_file") in doc.by_path:
                doc.notes.append("the ZeRO stage is in the DeepSpeed file named by `deepspeed_config_file`")
                return
            doc.set(accelerate.key_for("zero_stage").path, value)
        elif kind(doc) == "FSDP":
            if ("fsdp_config", "fsdp_reshard_after_forward") in doc.by_path or doc.value(
                ("fsdp_config", "fsdp_version")
            ) == 2:
                doc.set(("fsdp_config", "fsdp_reshard_after_forward"), value >= 3)
            else:
                doc.set(
                    ("fsdp_config", "fsdp_sharding_strategy"),
                    {3: "FULL_SHARD", 2: "SHARD_GRAD_OP", 0: "NO_SHARD"}.get(value, "FULL_SHARD"),
                )
        else:
            doc.notes.append("sharding needs `distributed_type: DEEPSPEED` or `FSDP`")

    def offload(concept: str) -> Handler:
        def handler(doc: _Doc, value: Any, changes: dict) -> None:
            if kind(doc) == "FSDP":
                doc.set(("fsdp_config", "fsdp_offload_params"), bool(value))
                _mark_done(doc, "offload_optimizer", "offload_params")
            elif kind(doc) == "DEEPSPEED":
                doc.set(accelerate.key_for(concept).path, "cpu" if value else "none")
            else:
                doc.notes.append("CPU offload needs DeepSpeed or FSDP")

        return handler

    def gc(doc: _Doc, value: Any, changes: dict) -> None:
        if kind(doc) == "FSDP":
            doc.set(("fsdp_config", "fsdp_activation_checkpointing"), bool(value))
        else:
            doc.notes.append("gradient checkpointing is a training setting: set it in the training config")

    def amp(doc: _Doc, value: Any, changes: dict) -> None:
        doc.set(
            accelerate.key_for("amp_dtype").path,
            {"none": "no"}.get(value, value),
            after=("machine_rank", "main_training_function"),
        )

    def grad_accum(doc: _Doc, value: Any, changes: dict) -> None:
        path = accelerate.key_for("grad_accum").path
        if path in doc.by_path:
            doc.set(path, value)
        else:
            doc.notes.append("gradient accumulation is a training setting: set it in the training config")

    return {
        "world_size": _simple((accelerate.key_for("world_size").path,), after=("num_machines",)),
        "amp_dtype": amp,
        "zero_stage": zero,
        "offload_optimizer": offload("offload_optimizer"),
        "offload_params": offload("offload_params"),
        "grad_checkpointing": gc,
        "grad_accum": grad_accum,
        "fsdp_state_dict_type": _simple((("fsdp_config", "fsdp_state_dict_type"),)),
        "alloc_conf": _note(ALLOC_NOTE),
    }


# --- DeepSpeed JSON ------------------------------------------------------------------------------------


def _deepspeed_handlers() -> dict[str, Handler]:
    key_for = deepspeed.key_for

    def offload(concept: str) -> Handler:
        section, key, device = key_for(concept).path  # zero_optimization.offload_*.device

        def handler(doc: _Doc, value: Any, changes: dict) -> None:
            if (section, key) in doc.by_path and isinstance(doc.value((section, key)), dict):
                doc.set((section, key, device), "cpu" if value else "none")
            else:
                doc.set((section, key), {device: "cpu" if value else "none", "pin_memory": True}, after=("stage",))

        return handler

    def amp(doc: _Doc, value: Any, changes: dict) -> None:
        if value in ("bf16", "fp16"):
            doc.set((value, "enabled"), True)
            other = "fp16" if value == "bf16" else "bf16"
            if doc.value((other, "enabled")) is True:
                doc.set((other, "enabled"), False)

    def whole(concept: str, after: str) -> Handler:
        return _simple((key_for(concept).path,), after=(key_for(after).path[-1],))

    return {
        "micro_batch": whole("micro_batch", after="grad_accum"),
        "grad_accum": whole("grad_accum", after="micro_batch"),
        "global_batch": whole("global_batch", after="micro_batch"),
        "zero_stage": _simple((key_for("zero_stage").path,)),
        "offload_optimizer": offload("offload_optimizer"),
        "offload_params": offload("offload_params"),
        "amp_dtype": amp,
        "alloc_conf": _note(ALLOC_NOTE),
    }


# --- litgpt ----------------------------------------------------------------------------------------


def _litgpt_handlers() -> dict[str, Handler]:
    LORA_SWITCHES, key_for = litgpt.LORA_SWITCHES, litgpt.key_for
    quantize, precision = key_for("quant_bits").path, key_for("weight_dtype").path

    def quant(doc: _Doc, value: Any, changes: dict) -> None:
        word = {4: "bnb.nf4", 8: "bnb.int8-training"}.get(value)
        if word is None:
            doc.notes.append(f"litgpt cannot load {value}-bit weights")
            return
        doc.set(quantize, word, after=precision)
        prec = str(doc.value(precision) or "")
        if prec.endswith("-mixed"):
            doc.set(precision, prec.replace("-mixed", "-true"))

    def peft(doc: _Doc, value: Any, changes: dict) -> None:
        _mark_done(doc, "quant_bits")
        if value in ("lora", "qlora"):
            if key_for("lora_r").path not in doc.by_path:
                doc.set(key_for("lora_r").path, changes.get("lora_r", 16), after=("num_nodes", "devices"))
            if value == "qlora" or changes.get("quant_bits") == 4:
                quant(doc, 4, changes)
            doc.notes.append("run it with `litgpt finetune_lora`")
        else:
            doc.notes.append("run `litgpt finetune_full` to train every weight")

    def targets(doc: _Doc, value: Any, changes: dict) -> None:
        t = _targets_text(value)
        wanted = set(value) if t != "all-linear" else {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"}
        for key, mods in LORA_SWITCHES.items():
            if key == "lora_head" and t == "all-linear":
                on = False
            else:
                on = bool(wanted & set(mods))
            doc.set((key,), on, after=("lora_dropout", "lora_alpha", "lora_r"))

    def optimizer(doc: _Doc, value: Any, changes: dict) -> None:
        cls = optimizers.class_path(str(value)) or str(value)
        if ("optimizer", "class_path") in doc.by_path:
            doc.set(("optimizer", "class_path"), cls)
        else:
            doc.set(("optimizer",), cls, after=("seed",))

    def grad_accum(doc: _Doc, value: Any, changes: dict) -> None:
        micro = changes.get("micro_batch") or doc.value(key_for("micro_batch").path) or 4
        world = doc.plan.world_size.value if doc.plan.world_size is not None else 1
        doc.set(key_for("global_batch").path, int(micro) * int(value) * int(world), after=("log_interval",))

    def micro(doc: _Doc, value: Any, changes: dict) -> None:
        doc.set(key_for("micro_batch").path, value, after=(key_for("global_batch").path[-1],))

    return {
        "micro_batch": micro,
        "grad_accum": grad_accum,
        "seq_len": _simple((key_for("seq_len").path,)),
        "quant_bits": quant,
        "peft_method": peft,
        "lora_r": _simple((key_for("lora_r").path,), after=("num_nodes",)),
        "lora_alpha": _simple((key_for("lora_alpha").path,), after=("lora_r",)),
        "lora_dropout": _simple((key_for("lora_dropout").path,), after=("lora_alpha",)),
        "lora_targets": targets,
        "optimizer": optimizer,
        "grad_checkpointing": _note("litgpt decides activation checkpointing itself (on with FSDP)"),
        "alloc_conf": _note(ALLOC_NOTE),
    }


# --- GPT-NeoX ----------------------------------------------------------------------------------------


def _neox_handlers() -> dict[str, Handler]:
    def key(doc: _Doc, name: str) -> tuple:
        hy = name.replace("_", "-")
        if (hy,) in doc.by_path:
            return (hy,)
        if (name,) in doc.by_path:
            return (name,)
        hyphens = sum(1 for p in doc.by_path if len(p) == 1 and "-" in str(p[0]))
        return (hy,) if hyphens > len(doc.by_path) / 4 else (name,)

    def simple(concept: str, after: str) -> Handler:
        """Write the concept's key (from the key table) after the key of `after` (a concept, or a shape key)."""
        name = neox.key_for(concept).path[0]
        after_name = after if after in neox.BY_NAME else neox.key_for(after).path[0]

        def handler(doc: _Doc, value: Any, changes: dict) -> None:
            doc.set(key(doc, name), value, after=(key(doc, after_name)[0],))

        return handler

    def optimizer(doc: _Doc, value: Any, changes: dict) -> None:
        if "8bit" in str(value):
            doc.set(key(doc, neox.key_for("optimizer").path[0]), True, after=(key(doc, "optimizer")[0],))
        else:
            doc.notes.append(f"GPT-NeoX optimizer `{value}`: set `optimizer.type`")

    return {
        "micro_batch": simple("micro_batch", after="grad_accum"),
        "grad_accum": simple("grad_accum", after="micro_batch"),
        "grad_checkpointing": simple("grad_checkpointing", after="micro_batch"),
        "seq_len": simple("seq_len", after="num_attention_heads"),
        "zero_stage": _simple((deepspeed.key_for("zero_stage").path,)),
        "optimizer": optimizer,
        "alloc_conf": _note(ALLOC_NOTE),
    }


# --- custom ----------------------------------------------------------------------------------------


def _custom_writer(text: str, plan: TrainingPlan, changes: dict[str, Any]) -> RenderResult:
    """No schema: only values the plan read from this file can be changed, in place."""
    doc = _Doc(text, plan)
    for concept, value in changes.items():
        current = getattr(plan, concept, None)
        if current is not None and current.value_span is not None and current.value_span.file == plan.source_file:
            s = next((x for x in doc.by_path.values() if x.value_span == current.value_span), None)
            if s is not None:
                doc.set(s.path, value)
                continue
        if concept == "alloc_conf":
            doc.notes.append(ALLOC_NOTE.format(value=value, fmt="custom"))
        else:
            doc.notes.append(f"`{concept}` is not in this file: vramlens does not know this trainer's key for it")
    return doc.result()


_ORDER = ("peft_method", "quant_bits", "lora_r", "lora_alpha", "lora_dropout", "lora_targets")

RENDERERS.update(
    {
        "hf": _render(key_table.handlers(transformers_keys.KEYS), _ORDER),
        "trl": _render(key_table.handlers(transformers_keys.KEYS_TRL), _ORDER),
        "axolotl": _render(key_table.handlers(axolotl_keys.KEYS), _ORDER),
        "llamafactory": _render(key_table.handlers(llamafactory_keys.KEYS), _ORDER),
        "llamafactory-v1": _render(key_table.handlers(llamafactory_keys.KEYS_V1), _ORDER),
        "torchtune": _render(key_table.handlers(torchtune_keys.KEYS), _ORDER),
        "accelerate": _render(_accelerate_handlers(), _ORDER),
        "deepspeed": _render(_deepspeed_handlers(), _ORDER),
        "litgpt": _render(_litgpt_handlers(), _ORDER),
        "gpt-neox": _render(_neox_handlers(), _ORDER),
        "custom": _custom_writer,
    }
)
