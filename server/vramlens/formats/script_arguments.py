"""A launch line that runs a Python script of the workspace (`python finetune.py --use_lora`, `torchrun … train.py`,
`deepspeed train.py`, `accelerate launch train.py`) is read by that script's own argument definitions.

The script is read with `ast` (`frameworks.argdefs`: its `@dataclass`/`HfArgumentParser` classes and its
`argparse` arguments, with what it imports by name from a module beside it: `_with_imports`), never run, and only
inside the workspace (`formats.references.find`, bounded like any other Python file). Megatron-LM's own scripts
(the `megatron` tool) are read for the flags they add to Megatron's (`extra_args_provider`). Then:

- each flag of the line that the launch reader does not know already (`shell.is_known_key`) and that the script
  defines is mapped by name and type to a plan concept (`frameworks.concepts.match`, or a method switch such as
  `--use_lora`, `--q_lora`) and applied through the same handler as the flag that usually sets that concept;
- each argument the line does not give and whose default the script states is applied the same way when it
  changes memory (the script's `model_max_length`, its `lora_target_modules` list, its default model), with the
  note "finetune.py default, line 57" — adapter settings only when the run trains an adapter;
- a script argument that looks like it changes memory or speed and maps to nothing is recorded as not modelled.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import PurePosixPath
from typing import Any

from vramlens.formats.settings import PlanBuilder, Setting, to_bool
from vramlens.frameworks import argdefs, concepts
from vramlens.plan import IssueKind, Severity, Span
from vramlens.text import text_lines

MAX_DEFAULTS = 2_000  # arguments of one script looked at; real ones define a few dozen to a few hundred
LAUNCHERS = frozenset({"python", "torchrun", "deepspeed", "accelerate"})
ADAPTER_METHODS = frozenset(
    {"lora", "qlora", "dora", "vera", "ia3", "other", "adalora", "loha", "lokr", "oft", "boft", "fourierft", "bone"}
)
ADAPTER_CONCEPTS = frozenset(
    {"lora_r", "lora_alpha", "lora_dropout", "lora_targets", "modules_to_save", "feedforward_targets"}
)
QUANT_CONCEPTS = frozenset({"quant_type", "quant_double", "quant_storage_dtype", "quant_compute_dtype"})
# Names of arguments that change memory or speed (an unmapped one is reported as not modelled); names of
# bookkeeping arguments (paths, logging, evaluation, saving) never are.
_MEMORY_WORDS = re.compile(
    r"galore|apollo|badam|lisa|offload|quant|4bit|8bit|int4|int8|fp8|nf4|bits?(?:_|$)|checkpointing|flash|xformers|"
    r"sdpa|zero|fsdp|deepspeed|compile|liger|unsloth|packing|precision|dtype|batch_size|seq_len|max_len|"
    r"sequence_len|context_len|block_size|rank|lora|peft|adapter|freeze|trainable|parallel|gpus?(?:_|$)|fused|"
    r"recompute|shard|vllm|num_generations"
)
_BOOKKEEPING = re.compile(
    r"path|dir|file|name|log|save|eval|seed|print|report|wandb|hub|push|token|url|port|"
    r"output|cache|resume|steps|epoch|lr|learning_rate|warmup|weight_decay|beta|eps|"
    r"scheduler|worker|verbose|debug|dropout|alpha"
)


def apply(b: PlanBuilder, launch, settings: list[Setting], ctx) -> None:
    """Read the launched script's argument definitions into the plan (see the module docstring). Nothing happens
    when the launch does not run a `.py` file of the workspace, or when that file cannot be read or parsed."""
    if launch.tool not in LAUNCHERS | {"megatron"} or launch.script is None or launch.script.value is None:
        return  # Megatron-LM's `pretrain_*.py` (or its own script) runs under the `megatron` tool
    target = launch.script.value
    if not target.endswith(".py"):
        return
    label = PurePosixPath(target).name
    found = _read_module(target, ctx)
    if found is None:
        if launch.tool == "megatron":
            return  # Megatron-LM's own flags are read by its reader; recognise names those no release defines
        return _name_unread_flags(b, settings, label, _why_unread(target, ctx))
    path, source, module, run_from = found
    if run_from is not None:
        b.plan.read_notes.append(
            f"`{target}` is not beside this file: read from {run_from}/, the line taken as run from there"
        )
    args = _arguments(module)
    if not args:
        return _model_load_literals(b, module, path, text_lines(source), label)
    index = _index(args)
    given: set[str] = set()
    from vramlens.formats import megatron, shell

    for s in settings:
        hit = index.get(concepts.normalize(s.path[0]))
        if hit is None:
            continue
        arg, negated = hit
        given.add(arg.name)
        if shell.is_known_key(s.path[0]) or s.unresolved or (launch.tool == "megatron" and megatron.known(s.path[0])):
            continue  # read by the launch reader already (or its value is unknown)
        if s.key not in b.plan.read_alongside:  # the script's own flag, not one its framework must define
            b.plan.read_alongside.append(s.key)
        value = s.value
        if negated:
            flag = to_bool(value)
            value = (not flag) if flag is not None else value
        _apply_arg(
            b,
            arg,
            Setting(
                key=s.key, path=(arg.name,), value=value, span=s.span, value_span=s.value_span, key_span=s.key_span
            ),
            label,
            note=None,
        )
    _apply_defaults(b, [a for a in args if a.name not in given], path, text_lines(source), label)
    _model_load_literals(b, module, path, text_lines(source), label)


def _builds_parser(fn) -> bool:
    """Whether a function makes an ArgumentParser of its own (a tool's `main`), rather than adding arguments to the
    one it is given (`add_multimodal_extra_args(parser)`)."""
    import ast

    return any(
        isinstance(n, ast.Call) and (getattr(n.func, "id", None) or getattr(n.func, "attr", "")) == "ArgumentParser"
        for n in ast.walk(fn)
    )


def _model_load_literals(b: PlanBuilder, module: argdefs.ModuleArgs, path: str, lines: list[str], label: str) -> None:
    """What the script's own model load writes as a constant (`from_pretrained(..., trust_remote_code=True)` in QwenLM
    Qwen's finetune.py), where the line and the script's arguments set nothing for it."""
    for name, (value, line) in module.model_load_literals.items():
        concept = concepts.match(name, "bool")
        if concept is None or getattr(b.plan, concept.name) is not None or not isinstance(value, bool):
            continue
        at = max(line - 1, 0)
        span = Span(
            file=path, start_line=at, start_col=0, end_line=at, end_col=len(lines[at]) if at < len(lines) else 0
        )
        setting = Setting(key=name, path=(name,), value=value, span=span, value_span=span, key_span=span)
        b.set(concept.name, value, setting, note=f"{label} line {line}: from_pretrained({name}={value})")


# a model given by its sizes on the command line (Megatron-LM megatron/training/arguments.py
# `_add_network_size_args`; nanoGPT-style `--n_layer`/`--n_embd`)
_SIZE_FLAG = re.compile(r"(?<![\w-])--(?:num[-_]layers|hidden[-_]size|n_layer|n_embd)\b")


def explain_no_model(b: PlanBuilder, launch, span: Span, ctx) -> None:
    """A launch of a Python script that names no model: a note saying where the model would come from, which the
    estimate's "does not name a model" message then quotes — the script is not in the workspace to read (a docs
    page's `accelerate launch train.py`: TRL v0.19.1 docs/source/speeding_up_training.md), or the model is the
    script's command-line argument and the line does not give it (`--model_name_or_path`, in the script's own
    definitions or TRL's `ModelConfig`, which TRL's example scripts parse: trl/trainer/model_config.py, v0.12 to
    main). Nothing for a run whose model is named, given by its sizes (read or not: Megatron-LM's `--num-layers`
    `--hidden-size`), or of another kind."""
    from vramlens.formats import model_kind

    plan = b.plan
    if (
        plan.model_id is not None
        or launch.tool not in LAUNCHERS
        or launch.script is None
        or not launch.script.text.endswith(".py")
        or any(k.startswith("arch.") for k in plan.extra)
        or any(_SIZE_FLAG.search(a.text) for a in launch.args)
        or model_kind.built_arch(plan) is not None
        or model_kind.other_kind(plan) is not None
    ):
        return
    flags = {concepts.normalize(a.text.split("=", 1)[0].lstrip("-")) for a in launch.args if a.text.startswith("--")}
    if any(f == "model_name_or_path" or getattr(concepts.match(f, None), "name", None) == "model_id" for f in flags):
        return  # the line gives the model, with a value not known before the run: the reader's own note says so
    name = PurePosixPath(launch.script.text).name
    found = _read_module(launch.script.text, ctx)
    if found is None:
        message = (
            f"`model` is not on this command line, and `{name}`, the script it runs, "
            f"{_why_unread(launch.script.text, ctx)}: the model that script loads is not read"
        )
    else:
        path, source, module, _run_from = found
        args = [
            a
            for a in _arguments(module)
            if getattr(concepts.match(a.name, _type_hint(a)), "name", None) == "model_id" and a.default is None
        ]
        if args:
            flag = f"`--{args[0].name}`"
        elif re.search(r"\bModelConfig\b", source):
            flag = "`--model_name_or_path`, TRL's `ModelConfig`"
        else:
            return
        message = f"`model` is a command-line argument of `{name}` ({flag}), and this command line does not give it"
    b.issue(IssueKind.NOT_READ, message, span=span, severity=Severity.INFO)


def apply_own_defaults(plan, text: str, path: str) -> None:
    """A script read on its own that takes its model from its own arguments and names none elsewhere (no usage
    example gives one): its argument definitions' defaults, as `python script.py` with no arguments runs it (TRL
    main examples/scripts/openenv/echo.py: `parser.add_argument("--model", default="Qwen/Qwen3-0.6B")`, then
    `GRPOTrainer(model=args.model, ...)`). The model argument only: the script's other values are read where its
    code uses them (an `args.x` there stays unknown, with the note saying so)."""
    try:
        module = argdefs.read_module(text, path)
    except argdefs.SourceRefused:
        return
    args = [a for a in _arguments(module) if getattr(concepts.match(a.name, _type_hint(a)), "name", None) == "model_id"]
    if not args:
        return
    b = PlanBuilder.wrap(plan)
    label = PurePosixPath(path.replace("\\", "/")).name
    _apply_defaults(b, args[:1], path, text_lines(text), label)
    if plan.model_id is not None:
        plan.read_notes.append(
            f"the model is {label}'s own default for its argument (the script run without arguments)"
        )


def _name_unread_flags(b: PlanBuilder, settings: list[Setting], label: str, why: str) -> None:
    """The launched script is not in the workspace (or cannot be read): its own flags are not known, so each one the
    launch reader does not know and that looks like it changes memory or speed (it maps to a plan concept or a
    method switch, or its name says so: `--use_lora`, `--q_lora`) is named as not taken into account, instead of
    the run being estimated without it. transformers' `TrainingArguments` are not among them: the launch reader
    reads the line as HfArgumentParser does (`formats.shell`), and what it leaves of them it leaves by name
    (`frameworks.irrelevant`)."""
    from vramlens.formats import shell
    from vramlens.frameworks import schemas

    for s in settings:
        name = s.path[0]
        if shell.is_known_key(name) or schemas.argument("transformers", name) is not None:
            continue
        n = concepts.normalize(name)
        hint = "bool" if s.value is None or to_bool(s.value) is not None else None
        mapped = concepts.switch(n) is not None or concepts.match(n, hint) is not None
        if mapped or _memory_name(n):
            b.unmodelled(
                s,
                f"--{name} ({label} argument)",
                f"not taken into account: {label}, the script this line runs, {why}",
                key=name,
            )


def _read_module(target: str, ctx) -> tuple[str, str, argdefs.ModuleArgs, str | None] | None:
    """(path, text, argument definitions, the folder it was found from when not beside the line or at the workspace
    root: `references.read_launched`) of the script a launch line runs, with what it imports from the modules
    beside it (`_with_imports`); None when it is not there to read (why: `_why_unread`)."""
    from vramlens.formats import references

    if not ctx.path:
        return None
    script = references.read_launched(target, ctx)
    if script.text is None or script.path is None:
        return None
    module, _refused = _parsed(script.text, str(script.path))
    if module is None:
        return None
    return str(script.path), script.text, _with_imports(module, script.text, script.path, ctx), script.run_from


MAX_IMPORTED = 8  # modules beside a script read for what it imports from them


def _with_imports(module: argdefs.ModuleArgs, text: str, path, ctx) -> argdefs.ModuleArgs:
    """The script's definitions with what it imports by name from a module in its own folder: the `add_argument`
    calls of an imported function (Megatron-LM examples/multimodal/train.py `from multimodal_args import
    add_multimodal_extra_args`, handed to `pretrain` as its `extra_args_provider`: a function adding arguments to
    the parser it is given) and, where the script's HfArgumentParser names them, the dataclasses (`from arguments
    import ModelArguments`). Nothing else of those modules is taken: a function that builds a parser of its own is
    another tool's."""
    from pathlib import Path

    from vramlens.formats import references

    parsers, classes = list(module.parsers), dict(module.classes)
    for name, imported in _local_imports(text)[:MAX_IMPORTED]:
        found = references.read_beside(Path(path), f"{name}.py", ctx)
        if found is None:
            continue
        where, source = found
        seen = {p.name for p in parsers}
        parsers += [a for a in _added_arguments(source, str(where), imported) if a.name not in seen]
        if module.hf_parsers:
            got, _ = _parsed(source, str(where))
            if got is not None:
                classes = {**got.classes, **classes}
    if len(parsers) == len(module.parsers) and len(classes) == len(module.classes):
        return module
    return dataclasses.replace(module, parsers=parsers, classes=classes)


@functools.lru_cache(maxsize=16)
def _local_imports(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """(module, names) of each `from module import names` at the top of a script whose module is a plain name (or
    `.name`): the modules that may sit beside it. Parsed once per text, as `_parsed` is."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    wanted: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level in (0, 1) and "." not in node.module:
            wanted.setdefault(node.module, set()).update(a.name for a in node.names)
    return tuple((m, frozenset(names)) for m, names in wanted.items())


@functools.lru_cache(maxsize=16)
def _added_arguments(source: str, path: str, imported: frozenset[str]) -> tuple[argdefs.ArgDef, ...]:
    """The `add_argument` calls of the functions `imported` from a module's `source` that add arguments to the
    parser they are given (`_builds_parser` false). Callers only read the result."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    out: list[argdefs.ArgDef] = []
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name in imported and not _builds_parser(fn):
            got, _ = _parsed(ast.get_source_segment(source, fn) or "", path)
            if got is not None:
                out += [a for a in got.parsers if a.name not in {o.name for o in out}]
    return tuple(out)


def _why_unread(target: str, ctx) -> str:
    """Why `_read_module` found nothing to read for `target`, as the end of "`finetune.py`, the script this line
    runs, …"."""
    from vramlens.formats import references

    if not ctx.path:
        return "is not in the workspace"
    script = references.read_launched(target, ctx)
    if script.text is None or script.path is None:
        return script.why_not or "is not in the workspace"
    _module, refused = _parsed(script.text, str(script.path))
    return f"was not read ({refused})" if refused else "is not in the workspace"


@functools.lru_cache(maxsize=16)
def _parsed(text: str, path: str) -> tuple[argdefs.ModuleArgs | None, str | None]:
    """(the script's argument definitions (`argdefs.read_module`), why the source was refused), parsed once for
    the launch reader and the no-model explainer of every view of one document. Callers only read the result."""
    try:
        return argdefs.read_module(text, path), None
    except argdefs.SourceRefused as e:
        return None, str(e).split(": ", 1)[-1]


def _arguments(module: argdefs.ModuleArgs) -> list[argdefs.ArgDef]:
    out = []
    for arg in argdefs.iter_arguments(module):
        out.append(arg)
        if len(out) >= MAX_DEFAULTS:
            break
    return out


def _index(args: list[argdefs.ArgDef]) -> dict[str, tuple[argdefs.ArgDef, bool]]:
    """Every spelling a command line may use → (the argument, whether the spelling negates it: `--no-x`). The
    dataclass fields as HfArgumentParser adds them: `--name`, `--name-with-dashes`, and `--no_name` for a bool
    field that defaults to True (transformers `hf_argparser.py`, `_parse_dataclass_field`)."""
    index: dict[str, tuple[argdefs.ArgDef, bool]] = {}
    for a in args:
        for spelling in (a.name, *a.aliases):
            n = concepts.normalize(spelling)
            negated = n.startswith("no_") and not concepts.normalize(a.name).startswith("no_")
            index.setdefault(n, (a, negated))
        if a.type == "bool" and a.default is True:
            index.setdefault("no_" + concepts.normalize(a.name), (a, True))
    return index


def _type_hint(arg: argdefs.ArgDef) -> str | None:
    return arg.annotation or arg.type


def _apply_arg(b: PlanBuilder, arg: argdefs.ArgDef, s: Setting, label: str, note: str | None) -> None:
    """Apply one script argument's value: through the launch reader's handler for its own name when it has one,
    else through the handler of the concept it maps to; record it as not modelled when it maps to nothing and
    looks like it changes memory or speed."""
    from vramlens.formats import shell

    handler = shell.handler_for("python", arg.name)
    switch = concepts.switch(arg.name)
    concept = concepts.match(arg.name, _type_hint(arg))
    before = _snapshot(b)
    if handler is not None:
        handler(b, s)
    elif switch is not None and concept is not None:
        if to_bool(s.value):
            name, value = switch
            _apply_concept(
                b,
                concepts.CONCEPTS[name],
                Setting(key=s.key, path=s.path, value=value, span=s.span, value_span=s.value_span, key_span=s.key_span),
            )
    elif concept is not None:
        _apply_concept(b, concept, s)
    elif _looks_memory_relevant(arg) and (arg.type != "bool" or to_bool(s.value)):
        b.unmodelled(s, f"--{arg.name} ({label} argument)", "not taken into account by the estimate", key=arg.name)
        return
    if note:
        _annotate(b, before, s, note)


def _apply_concept(b: PlanBuilder, concept: concepts.Concept, s: Setting) -> None:
    """Set `concept` from `s` through the handler of the first spelling the launch reader knows for it, else by
    the concept's type."""
    from vramlens.formats import shell

    key = _handled_spelling(concept.name)
    if key is not None:
        shell.handler_for("python", key)(
            b, Setting(key=s.key, path=(key,), value=s.value, span=s.span, value_span=s.value_span, key_span=s.key_span)
        )
    elif concept.type == "int":
        b.set_int(concept.name, s)
    elif concept.type == "float":
        b.set_float(concept.name, s)
    elif concept.type == "bool":
        b.set_bool(concept.name, s)
    elif s.value is not None:
        b.set(concept.name, s.value, s)


_SPELLINGS: dict[str, str | None] = {}


def _handled_spelling(concept: str) -> str | None:
    """The first spelling of `concept` that the launch reader has a handler for (and that means that concept)."""
    if concept not in _SPELLINGS:
        from vramlens.formats import shell

        _SPELLINGS[concept] = next(
            (
                sp
                for sp in concepts.CONCEPTS[concept].spellings
                if "." not in sp
                and shell.handler_for("python", sp) is not None
                and getattr(concepts.match(sp), "name", None) == concept
            ),
            None,
        )
    return _SPELLINGS[concept]


def _looks_memory_relevant(arg: argdefs.ArgDef) -> bool:
    return _memory_name(concepts.normalize(arg.name))


def _memory_name(n: str) -> bool:
    return bool(_MEMORY_WORDS.search(n)) and not _BOOKKEEPING.search(n)


def _apply_defaults(b: PlanBuilder, args: list[argdefs.ArgDef], path: str, lines: list[str], label: str) -> None:
    """The script's own defaults of the arguments the line does not give: memory-relevant ones only, adapter and
    quantization details only when the run trains an adapter or quantizes, and never over a value the line set."""
    later = []
    for arg in args:
        if arg.default is None or arg.default_text is not None:
            continue
        concept = concepts.match(arg.name, _type_hint(arg))
        if concept is None:
            if _looks_memory_relevant(arg) and arg.type == "bool" and arg.default is True:
                _apply_arg(b, arg, _default_setting(arg, path, lines), label, note=None)
            continue
        if not concept.memory and concepts.switch(arg.name) is None:
            continue
        if concept.name in ADAPTER_CONCEPTS or concept.name in QUANT_CONCEPTS:
            later.append((arg, concept))
            continue
        _apply_arg(b, arg, _default_setting(arg, path, lines), label, _note(label, arg))
    adapter = b.plan.peft_method is not None and b.plan.peft_method.value in ADAPTER_METHODS
    quantized = b.plan.quant_bits is not None
    for arg, concept in later:
        if adapter if concept.name in ADAPTER_CONCEPTS else quantized:
            _apply_arg(b, arg, _default_setting(arg, path, lines), label, _note(label, arg))


def _note(label: str, arg: argdefs.ArgDef) -> str:
    return f"{label} default, line {arg.line}"


def _default_setting(arg: argdefs.ArgDef, path: str, lines: list[str]) -> Setting:
    """A Setting for a default, placed on the line of the script that defines it."""
    line = max(arg.line - 1, 0)
    end = len(lines[line]) if line < len(lines) else 0
    span = Span(file=path, start_line=line, start_col=0, end_line=line, end_col=end)
    return Setting(key=arg.name, path=(arg.name,), value=arg.default, span=span, value_span=span, key_span=span)


def _snapshot(b: PlanBuilder) -> dict[str, Any]:
    from vramlens.plan import PLAN_CONCEPTS

    return {name: getattr(b.plan, name) for name in PLAN_CONCEPTS}


def _annotate(b: PlanBuilder, before: dict[str, Any], s: Setting, note: str) -> None:
    """Give the values `s` just set the note that says where they come from."""
    for name, old in before.items():
        new = getattr(b.plan, name)
        if new is not None and new is not old and new.note is None:
            setattr(b.plan, name, new.model_copy(update={"note": note}))
