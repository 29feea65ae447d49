"""Follow references from one config to another and merge what they say into the plan.

Kinds (docs/config-sources.md, "File references"): `deepspeed` (a DeepSpeed JSON: HF/axolotl/LLaMA-Factory
`deepspeed:`, accelerate `deepspeed_config_file`, LLaMA-Factory v1 `dist_config.config_file`, or a
packaged preset name such as ms-swift's `zero3_offload`), `accelerate` (an accelerate config, from
a launch line's `--config_file`), `torchtune-config` (a torchtune config by packaged name such as
`llama3_1/8B_full`, or by path) and `base` (another config of the same format whose values this one
overrides).

A path is looked up relative to the referring file's folder, then the workspace root (LLaMA-Factory,
axolotl and HF resolve `deepspeed:` against the working directory, usually the repo root). Values
from the referenced file never override the document's own; their spans point into the referenced
file. A file that cannot be found is a VL014 issue on the reference — an error, or a warning when
the name is a known packaged file whose contents vramlens knows (then those contents are used).
Only files inside the workspace (or, without one, the document's folder) and the Hugging Face cache
are read (`vramlens.file_access`); a reference that leads elsewhere is a VL014 warning saying so.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from vramlens import file_access
from vramlens.formats.settings import PlanBuilder, Setting
from vramlens.knowledge import deepspeed as deepspeed_presets
from vramlens.plan import IssueKind, Severity

MAX_DEPTH = 4
MAX_REFERENCED_BYTES = 1_000_000
# A script a launch line runs (`read_launched`), as `formats.python_calls` (MAX_PYTHON_CHARS): larger files are
# not training scripts.
MAX_LAUNCHED_CHARS = 500_000
REMOTE = ("http://", "https://", "s3://", "gs://", "hf://")


def candidates(target: str, doc_path: str, workspace: Path | None) -> list[Path]:
    t = file_access.expand_user(target)
    if t.is_absolute():
        return [t]
    out = [Path(doc_path).parent / t]
    if workspace is not None:
        out.append(Path(workspace) / t)
    return out


def find(target: str, doc_path: str, workspace: Path | None) -> tuple[Path | None, bool]:
    """(the file, as the workspace check resolved it; whether a candidate was skipped because it lies outside what
    may be read). Candidates outside are skipped before they are looked at, so nothing tells whether they exist.
    The path is where the file was when it was checked — a folder on the way may be swapped for a link since —
    so it is read with `_read`, which checks the file it opens against the same folders."""
    roots = file_access.allowed_roots(workspace, doc_path)
    refused = False
    for c in candidates(target, doc_path, workspace):
        if len(str(c)) > file_access.MAX_PATH_CHARS:
            continue  # no file has such a name: not found (not "outside the workspace")
        real = file_access.resolved_inside(c, roots)
        if real is None:
            refused = True
            continue
        try:
            if real.is_file():
                return real, False
        except (OSError, ValueError):
            continue
    return None, refused


@dataclass(frozen=True)
class LaunchedScript:
    """The script a launch line runs, as `read_launched` found it: its path and text, the folder it was found
    from when that is not the line's own folder or the workspace root, or why it could not be read."""

    path: Path | None = None
    text: str | None = None
    run_from: str | None = None
    why_not: str | None = None  # "is not in the workspace", "lies outside the workspace", "is larger than …"


def read_launched(target: str, ctx) -> LaunchedScript:
    """The script a launch line runs (`_find_launched`), read once per parse: the launch reader, the script's
    argument reader and the no-model explainer all ask for it, and they get the same answer from `ctx.launched`."""
    cache = getattr(ctx, "launched", None)  # a ParseContext's; a bare context is looked up each time
    if cache is not None and target in cache:
        return cache[target]
    found, run_from, refused = _find_launched(target, ctx.path, ctx.workspace)
    if found is None:
        why = "lies outside the workspace, which vramlens does not read" if refused else "is not in the workspace"
        out = LaunchedScript(why_not=why)
    else:
        text = _read(found, ctx)
        if text is None or len(text) > MAX_LAUNCHED_CHARS:
            out = LaunchedScript(path=found, run_from=run_from, why_not=_unread_reason(found, text))
        else:
            out = LaunchedScript(path=found, text=text, run_from=run_from)
    if cache is not None:
        cache[target] = out
    return out


def read_beside(script: Path, name: str, ctx) -> tuple[Path, str] | None:
    """(path, text) of the module file `name` in the launched script's own folder (`from multimodal_args import
    ...` in Megatron-LM's examples/multimodal/train.py), only where the script's references may be read."""
    roots = file_access.allowed_roots(ctx.workspace, ctx.path)
    real = file_access.resolved_inside(script.parent / name, roots)
    try:
        if real is None or not real.is_file():
            return None
    except (OSError, ValueError):
        return None
    text = _read(real, ctx)
    return None if text is None or len(text) > MAX_LAUNCHED_CHARS else (real, text)


def _unread_reason(path: Path, text: str | None) -> str:
    if text is not None:
        return f"is larger than vramlens reads ({len(text):,} characters; at most {MAX_LAUNCHED_CHARS:,})"
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size > MAX_REFERENCED_BYTES:
        return f"is larger than vramlens reads ({size:,} bytes; at most {MAX_REFERENCED_BYTES:,})"
    return "could not be read (not a regular UTF-8 text file)"


def _find_launched(target: str, doc_path: str, workspace: Path | None) -> tuple[Path | None, str | None, bool]:
    """(the script a launch line runs, the folder it was found from, relative to the workspace root, when that is
    not the line's own folder or the workspace root; whether a candidate was skipped as outside what may be read).
    A relative script path is relative to where the line is run, which a launch script in a subfolder does not
    say: Qwen's `finetune/finetune_lora_single_gpu.sh` runs `python finetune.py` from the repository root, as its
    README says (QwenLM/Qwen README.md, "Finetuning"). So after `find`'s folders, each folder between the line's
    and the workspace root is tried, nearest first — never one outside the workspace."""
    found, refused = find(target, doc_path, workspace)
    if found is not None or workspace is None or file_access.expand_user(target).is_absolute():
        return found, None, refused
    root = file_access.resolved_inside(Path(workspace), None)
    folder = file_access.resolved_inside(Path(doc_path).parent, None)
    if root is None or folder is None or root not in folder.parents:
        return None, None, refused
    roots = file_access.allowed_roots(workspace, doc_path)
    for parent in folder.parents:
        if parent == root:
            break
        real = file_access.resolved_inside(parent / target, roots)
        try:
            if real is not None and real.is_file():
                return real, parent.relative_to(root).as_posix(), refused
        except (OSError, ValueError):
            continue
    return None, None, refused


def locate(target: str, doc_path: str, workspace: Path | None) -> Path | None:
    return find(target, doc_path, workspace)[0]


def locate_torchtune_config(name: str, doc_path: str, workspace: Path | None) -> Path | None:
    """A torchtune config by packaged name (`llama3_1/8B_full`) or by path."""
    n = name.strip()
    if n.endswith((".yaml", ".yml")):
        return locate(n, doc_path, workspace)
    rel = n + ".yaml"
    roots: list[Path] = []
    if workspace is not None:
        roots += [Path(workspace) / "recipes" / "configs", Path(workspace)]
    roots.append(Path(doc_path).parent)
    packaged = _packaged_configs()
    allowed = file_access.allowed_roots(workspace, doc_path) + packaged
    for root in roots + packaged:
        real = file_access.resolved_inside(root / rel, allowed)
        if real is None:
            continue  # `../` out of the workspace or out of torchtune's packaged configs
        try:
            if real.is_file():
                return real
        except (OSError, ValueError):
            continue
    return None


def _packaged_configs() -> list[Path]:
    """The folders of configs torchtune installs (as the package `recipes`, `recipes/configs`), resolved."""
    try:
        spec = importlib.util.find_spec("recipes")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return []
    return [
        r
        for r in (file_access.resolved_inside(Path(p) / "configs", None) for p in spec.submodule_search_locations)
        if r is not None
    ]


def _read(path: Path, ctx, doc_path: str | None = None) -> str | None:
    """The editor's buffer of `path` (as `find` returned it) when it is open, else the file on disk — only if the
    file opened lies where `find` looks for the references of `doc_path` (default: the document's) or among
    torchtune's packaged configs, is regular and within MAX_REFERENCED_BYTES."""
    if ctx.read_file is not None:
        try:
            text = ctx.read_file(path)
        except (OSError, ValueError):  # ValueError: not UTF-8
            text = None
        if text is not None:
            return text if len(text) <= MAX_REFERENCED_BYTES else None
    roots = file_access.allowed_roots(ctx.workspace, doc_path or ctx.path) + _packaged_configs()
    try:
        return file_access.read_text_checked(path, MAX_REFERENCED_BYTES, roots=roots)
    except OSError:
        return None


_LABEL = {
    "deepspeed": "DeepSpeed config",
    "accelerate": "accelerate config",
    "torchtune-config": "torchtune config",
    "base": "base config",
}


def follow_references(builder: PlanBuilder, ctx) -> None:
    """Resolve every reference of the plan (also those added by referenced files), merging their values."""
    seen: set[str] = {str(Path(ctx.path).resolve())} if ctx.path else set()
    i = 0
    refs = builder.plan.references
    while i < len(refs):
        ref = refs[i]
        i += 1
        if ref.resolved_path is not None:
            continue
        _follow(builder, ctx, ref, seen)


def _follow(builder: PlanBuilder, ctx, ref, seen: set[str]) -> None:
    from vramlens.formats import deepspeed

    label = _LABEL.get(ref.kind, "referenced file")
    where = ref.span.file if ref.span is not None and ref.span.file else ctx.path
    depth = ctx.depth + (0 if where == ctx.path else 1)
    target = ref.target.strip()
    if target.startswith(REMOTE):
        builder.issue(
            IssueKind.NOT_READ,
            f"{label} `{target}` is remote: vramlens does not download it; its settings are not included",
            span=ref.span,
            severity=Severity.INFO,
        )
        return
    refused = False
    if ref.kind == "torchtune-config":
        found = locate_torchtune_config(target, where, ctx.workspace)
    else:
        found, refused = find(target, where, ctx.workspace)
    if found is None:
        known = deepspeed_presets.preset(target) if ref.kind == "deepspeed" else None
        missing = (
            file_access.refusal(label, target, ctx.workspace)
            if refused
            else f"{label} `{target}` not found (looked next to this file"
            f"{' and in the workspace root' if ctx.workspace else ''})"
        )
        if known is not None:
            source, contents = known
            is_name = "/" not in target and not target.endswith(".json")
            if not is_name:
                builder.issue(
                    IssueKind.REFERENCE,
                    f"{missing}; estimated with the contents of {source}",
                    span=ref.span,
                    severity=Severity.WARNING,
                )
            anchor = Setting(key=target, path=("deepspeed",), value=contents, span=ref.span, value_span=ref.span)
            deepspeed.apply_dict(builder, contents, anchor, note=f"from {source}")
            ref.resolved_path = f"preset:{target}"
            return
        builder.issue(
            IssueKind.REFERENCE, missing, span=ref.span, severity=Severity.WARNING if refused else Severity.ERROR
        )
        return
    ref.resolved_path = str(found)
    if str(found) in seen or depth >= MAX_DEPTH:
        return
    seen.add(str(found))
    text = _read(found, ctx, where)
    if text is None:
        builder.issue(IssueKind.REFERENCE, f"cannot read {label} `{target}`", span=ref.span, severity=Severity.ERROR)
        return
    from vramlens.formats.yaml_doc import YamlError, load_yaml

    try:
        data, settings = load_yaml(text, str(found))
    except YamlError as exc:
        builder.issue(
            IssueKind.REFERENCE, f"cannot read {label} `{target}`: {exc}", span=ref.span, severity=Severity.ERROR
        )
        return
    if not isinstance(data, dict):
        builder.issue(
            IssueKind.REFERENCE,
            f"{label} `{target}` is not a mapping of settings",
            span=ref.span,
            severity=Severity.ERROR,
        )
        return
    if ref.kind == "deepspeed":
        deepspeed.apply(builder, settings)
        if builder.plan.dist_strategy is None:
            builder.set(
                "dist_strategy",
                "deepspeed",
                Setting(key=ref.target, path=(), value=ref.target, span=ref.span, value_span=ref.span),
            )
        return
    _merge_dialect(builder, ctx, ref, found, text, data, settings, depth)


def _merge_dialect(builder: PlanBuilder, ctx, ref, found: Path, text: str, data: dict, settings, depth: int) -> None:
    """Parse a referenced config with its own dialect and copy what this plan leaves unset."""
    from vramlens import formats
    from vramlens.plan import PLAN_CONCEPTS

    sub_ctx = formats.ParseContext(
        path=str(found), workspace=ctx.workspace, read_file=ctx.read_file, depth=depth + 1, text=text
    )
    keys = {str(k) for k in data}
    wanted = {"accelerate": "accelerate", "torchtune-config": "torchtune"}.get(ref.kind, builder.plan.format)
    dialect = next((d for d in formats.YAML_DIALECTS if d.name == wanted), None)
    if dialect is None or dialect.detect(data, keys) < formats.MIN_SCORE:
        dialect = formats.best_dialect(data, keys)
    if dialect is None:
        builder.issue(
            IssueKind.REFERENCE,
            f"`{ref.target}` is not a training config vramlens recognises",
            span=ref.span,
            severity=Severity.WARNING,
        )
        return
    sub = PlanBuilder(str(found), dialect.name, dialect.framework)
    dialect.apply(sub, data, settings, sub_ctx)
    follow_references(sub, sub_ctx)
    for name in PLAN_CONCEPTS:
        v = getattr(sub.plan, name)
        if v is not None and getattr(builder.plan, name) is None:
            setattr(builder.plan, name, v)
    for ref2 in sub.plan.references:
        if ref2 not in builder.plan.references:
            builder.plan.references.append(ref2)
    for issue in sub.plan.issues:
        if issue.kind == IssueKind.REFERENCE or issue.severity == Severity.ERROR:
            builder.plan.issues.append(issue)
    if ref.kind == "torchtune-config" and builder.plan.format in ("unknown", "shell", "python"):
        builder.plan.framework = builder.plan.framework or "torchtune"
