"""Completion of keys and values: config keys from the JSON Schemas in `schemas/` (or the HF/TRL key
table), values from the schemas' enums and the knowledge base (optimizer names, attention
implementations, dtypes, model ids), GPU names in the `# vramlens: gpu=` directive comment."""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from lsprotocol import types

from vramlens.lsp.convert import Lines

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer

log = logging.getLogger(__name__)

TRIGGER_CHARACTERS = [":", "=", " ", "-"]
SCHEMA_DIRS = (Path(__file__).resolve().parents[3] / "schemas", Path(__file__).resolve().parents[1] / "schemas")

_DIRECTIVE = re.compile(r"(?:#|//|<!--)\s*vramlens:(?P<rest>.*)$", re.IGNORECASE)
_DIRECTIVE_VALUE = re.compile(r"(?P<key>gpu|count)\s*=\s*(?P<value>[^\s=]*)$", re.IGNORECASE)
_YAML_VALUE = re.compile(r"^\s*(?:-\s+)?(?P<key>[\w.-]+)\s*:\s+['\"]?(?P<value>[^\s'\"#]*)$")
_YAML_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[\w.-]*)$")
_PY_KWARG = re.compile(r"(?P<key>\w+)\s*=\s*['\"](?P<value>[^'\"\s]*)$")
_FLAG_VALUE = re.compile(r"--(?P<key>[\w-]+)(?:\s+|=)['\"]?(?P<value>[^\s'\"]*)$")
_FLAG = re.compile(r"(?:^|\s)--(?P<key>[\w-]*)$")

ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention", "eager")
DTYPES = ("bfloat16", "float16", "float32", "auto")
BOOLEANS = ("true", "false")
OPTIMIZER_KEYS = {"optim", "optimizer", "optimizer_type", "optim_type"}
ATTENTION_KEYS = {"attn_implementation", "attention_implementation", "attn_impl"}
MODEL_KEYS = {
    "model_name_or_path",
    "base_model",
    "model_id",
    "model_name",
    "pretrained_model_name_or_path",
    "base_model_config",
    "tokenizer_name_or_path",
}
DTYPE_KEYS = {"torch_dtype", "dtype", "bnb_4bit_compute_dtype", "bnb_4bit_quant_storage", "model_dtype"}


# --------------------------------------------------------------------------- vocabularies


def _gpus() -> list[tuple[str, str]]:
    from vramlens.knowledge import gpus

    return [(g.name, f"{g.memory_gib:g} GiB, {gpus.usable_text(g.usable_gib)} usable") for g in gpus.all_gpus()]


def _optimizers() -> list[tuple[str, str]]:
    from vramlens.knowledge import optimizers

    out = []
    for spec in optimizers.all_optimizers():
        state = (
            "no state"
            if spec.states == 0
            else f"{spec.states:g} state{'s' if spec.states != 1 else ''} × "
            + (f"{spec.state_bytes:g} B" if spec.state_bytes is not None else "param dtype")
        )
        out.append((spec.name, f"{state}{' · paged' if spec.paged else ''} · {spec.library}"))
    return out


def _models() -> list[tuple[str, str]]:
    from vramlens.knowledge import models

    out = []
    for arch in models.all_models():
        size = f"{arch.params_b:g} B" if arch.params_b else arch.family
        out.append((arch.id, f"{size} · {arch.family}"))
    return out


@functools.cache
def schema_properties(fmt: str) -> dict[str, dict]:
    """Top-level properties of `schemas/<format>.schema.json` (empty when there is no schema)."""
    for folder in SCHEMA_DIRS:
        for name in (f"{fmt}.schema.json", f"{fmt}.json"):
            path = folder / name
            if path.is_file():
                try:
                    data = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    log.warning("cannot read schema %s", path)
                    return {}
                props = data.get("properties")
                return props if isinstance(props, dict) else {}
    return {}


def _hf_keys() -> dict[str, dict]:
    from vramlens.formats import hf

    keys = set(hf.HANDLERS) | set(hf.TRAINING_ARGUMENT_KEYS) | set(hf.TRL_KEYS)
    return {k: {} for k in sorted(keys)}


def keys_for(fmt: str) -> dict[str, dict]:
    props = schema_properties(fmt)
    if props:
        return props
    if fmt in ("hf", "trl", "unknown", ""):
        return _hf_keys()
    return {}


def values_for(key: str, fmt: str) -> list[tuple[str, str]]:
    k = key.lower().lstrip("-").replace("-", "_")
    prop = keys_for(fmt).get(key) or keys_for(fmt).get(k) or {}
    if isinstance(prop.get("enum"), list):
        return [(str(v).lower() if isinstance(v, bool) else str(v), "") for v in prop["enum"] if v is not None]
    if k in OPTIMIZER_KEYS:
        return _optimizers()
    if k in ATTENTION_KEYS:
        return [(a, "") for a in ATTENTION]
    if k in MODEL_KEYS:
        return _models()
    if k in DTYPE_KEYS:
        return [(d, "") for d in DTYPES]
    if prop.get("type") == "boolean":
        return [(b, "") for b in BOOLEANS]
    return []


# --------------------------------------------------------------------------- the request


def _items(
    values: Iterable[tuple[str, str]],
    prefix: str,
    rng: types.Range,
    kind: types.CompletionItemKind,
    suffix: str = "",
    docs: Callable[[str], str | None] | None = None,
) -> list[types.CompletionItem]:
    low = prefix.lower()
    out = []
    for i, (label, detail) in enumerate(values):
        if low and low not in label.lower():
            continue
        doc = docs(label) if docs else None
        out.append(
            types.CompletionItem(
                label=label,
                kind=kind,
                detail=detail or None,
                sort_text=f"{i:05d}",
                documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=doc) if doc else None,
                text_edit=types.TextEdit(range=rng, new_text=label + suffix),
            )
        )
    return out


def completion(ls: "VramlensServer", params: types.CompletionParams) -> types.CompletionList | None:
    uri = params.text_document.uri
    doc = ls.workspace.text_documents.get(uri)
    if doc is None:
        return None
    lines = Lines(doc)
    line, col = lines.server_position(params.position)
    if line >= len(lines.index):
        return None
    before = lines.line(line)[:col]

    def replace(n: int) -> types.Range:
        return types.Range(start=lines.position(line, col - n), end=lines.position(line, col))  # clamped to the line

    # 1. the directive comment: `# vramlens: gpu=A100-40GB count=2`
    if m := _DIRECTIVE.search(before):
        rest = m.group("rest")
        if v := _DIRECTIVE_VALUE.search(rest):
            value = v.group("value")
            if v.group("key").lower() == "gpu":
                return types.CompletionList(
                    False, _items(_gpus(), value, replace(len(value)), types.CompletionItemKind.Value)
                )
            return types.CompletionList(
                False,
                _items(
                    [(n, "") for n in ("1", "2", "4", "8")], value, replace(len(value)), types.CompletionItemKind.Value
                ),
            )
        ends = re.search(r"[\w-]*$", rest)  # `*`: matches (empty) at the end at least
        word = ends.group(0) if ends is not None else ""
        keys = [
            ("gpu", "GPU to check against"),
            ("count", "GPUs per node"),
            ("ignore", "suppress rules on this line"),
            ("ignore-file", "suppress rules in this file"),
        ]
        suffixes = {"gpu": "=", "count": "=", "ignore": "[", "ignore-file": "["}
        return types.CompletionList(
            False,
            [
                types.CompletionItem(
                    label=k,
                    detail=d,
                    kind=types.CompletionItemKind.Keyword,
                    text_edit=types.TextEdit(range=replace(len(word)), new_text=k + suffixes[k]),
                )
                for k, d in keys
                if k.startswith(word.lower())
            ],
        )
    if re.search(r"(^|\s)#", before):
        return None  # inside an ordinary comment

    result = ls.analyzer.cached(uri) or ls.analyzer.results.get(uri)
    plan = result.plan if result is not None else None
    fmt = plan.format if plan is not None else ""
    suffix = Path(doc.path or "").suffix.lower()

    # 2. values after `key: `, `key="`, `--flag `
    for pattern in (_YAML_VALUE, _PY_KWARG, _FLAG_VALUE):
        if m := pattern.search(before):
            if pattern is _YAML_VALUE and suffix in (".py", ".sh"):
                continue
            value = m.group("value")
            values = values_for(m.group("key"), fmt)
            if values:
                return types.CompletionList(
                    False, _items(values, value, replace(len(value)), types.CompletionItemKind.Value)
                )
            return None

    # 3. keys: `--per_dev` in scripts, a bare word at the start of a YAML line
    if suffix == ".sh" or doc.language_id == "shellscript":
        if m := _FLAG.search(before):
            word = m.group("key")
            return types.CompletionList(
                False,
                _items([(k, "") for k in _hf_keys()], word, replace(len(word)), types.CompletionItemKind.Property),
            )
        return None
    if suffix in ("", ".yaml", ".yml") or doc.language_id == "yaml":
        if m := _YAML_KEY.match(before):
            if m.group("indent") and plan is not None and plan.format not in ("torchtune", "axolotl", "llamafactory"):
                return None
            word = m.group("key")
            present = set(re.findall(r"^([\w.-]+)\s*:", doc.source, re.MULTILINE))
            props = keys_for(fmt)
            values = [(k, "") for k in props if k not in present]

            def docs(key: str) -> str | None:
                p = props.get(key) or {}
                return p.get("markdownDescription") or p.get("description")

            return types.CompletionList(
                False, _items(values, word, replace(len(word)), types.CompletionItemKind.Property, ": ", docs)
            )
    return None
