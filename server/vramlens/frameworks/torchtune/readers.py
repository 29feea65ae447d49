"""The torchtune readers with logic (the key table, `keys.py`, says which key each one reads): the model builder,
the optimizer, the loss, the sequence length, and the launch the header comment describes.

`_component_` names a builder or class, its sibling keys are the keyword arguments (`recipes/*.py` and
`torchtune/config/` at torchtune bd2a0fc7; docs/config-sources.md). The model size and whether it is LoRA/QLoRA live
in the builder name: `torchtune.models.llama3_1.qlora_llama3_1_8b` is Llama 3.1 8B with an NF4 base and LoRA
adapters. OmegaConf `${key}` interpolations are resolved within the file (`${eval:...}` and anything unresolvable stays
unknown). The GPU count is not in the file: it comes from the `tune run --nproc_per_node N` line the header comment
usually carries.

A section reader gets the document's entries by dotted path (`index`: "model.lora_rank" → [its entry]; the keys of
the async GRPO recipe's `training:` section folded in, `dialect.apply`); `getter(index)` looks them up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from vramlens.formats.settings import PlanBuilder, Setting, Unknown, to_bool, to_int
from vramlens.formats.vocab import check_optimizer
from vramlens.knowledge import frameworks, optimizers
from vramlens.plan import IssueKind, Origin, Severity, Sourced, Span, text_lines

# builder family (module name) -> (Hugging Face organisation, repo name template)
# {size} is the builder's size token with "_" → "." and upper-case "B" (e.g. 1_5b → 1.5B)
FAMILIES: dict[str, tuple[str, str]] = {
    "llama2": ("meta-llama", "Llama-2-{size_lower}-hf"),
    "code_llama2": ("codellama", "CodeLlama-{size_lower}-hf"),
    "llama3": ("meta-llama", "Meta-Llama-3-{size}"),
    "llama3_1": ("meta-llama", "Llama-3.1-{size}"),
    "llama3_2": ("meta-llama", "Llama-3.2-{size}"),
    "llama3_2_vision": ("meta-llama", "Llama-3.2-{size}-Vision"),
    "llama3_3": ("meta-llama", "Llama-3.3-{size}-Instruct"),
    "mistral": ("mistralai", "Mistral-{size}-v0.1"),
    "gemma": ("google", "gemma-{size_lower}"),
    "gemma2": ("google", "gemma-2-{size_lower}"),
    "qwen2": ("Qwen", "Qwen2-{size}"),
    "qwen2_5": ("Qwen", "Qwen2.5-{size}"),
    "qwen3": ("Qwen", "Qwen3-{size}"),
    "phi3": ("microsoft", "Phi-3-mini-4k-instruct"),
    "phi4": ("microsoft", "phi-4"),
    "llama4": ("meta-llama", "Llama-4-{size}"),
}
# builders whose name does not follow family_size
SPECIAL: dict[str, str] = {
    "llama4_scout_17b_16e": "meta-llama/Llama-4-Scout-17B-16E",
    "llama4_maverick_17b_128e": "meta-llama/Llama-4-Maverick-17B-128E",
    "phi3_mini": "microsoft/Phi-3-mini-4k-instruct",
    "phi4_14b": "microsoft/phi-4",
    "qwen3_30b_a3b_instruct": "Qwen/Qwen3-30B-A3B",
    "qwen3_30b_a3b_base": "Qwen/Qwen3-30B-A3B-Base",
}

_BUILDER = re.compile(r"^torchtune\.models\.(?P<family>[a-z0-9_]+)\.(?P<prefix>lora_|qlora_)?(?P<name>[a-z0-9_]+)$")

# torchtune LoRA module names → the names vramlens' target normalisation understands
LORA_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}

CHUNKED_LOSSES = {"torchtune.modules.loss.CEWithChunkedOutputLoss"}
FUSED_LOSSES = {"torchtune.modules.loss.LinearCrossEntropyLoss"}
DTYPES = {"bf16": "bf16", "fp32": "fp32", "fp16": "fp16", "fp64": "fp32"}

_RUN = re.compile(r"tune\s+run\s+(?P<args>.*)")
# the headers of torchtune's multi-node configs describe the launch in words instead of a `tune run` line (torchtune
# recipes/configs/llama3_3/70B_full_multinode.yaml: "full finetuning in full_finetune_distributed.py", "To launch on
# 2 nodes w/ 8 devices on a SLURM cluster")
_RECIPE_FILE = re.compile(r"\b(?P<recipe>[a-z0-9_]+_distributed)\.py\b")
_NODES = re.compile(r"\b(?P<nodes>\d+)\s+nodes?\s+(?:w/|with)\s+(?P<devices>\d+)\s+(?:devices|gpus)\b", re.I)


def builder_max_seq_len(package: str, name: str) -> int | None:
    """The positions a torchtune builder gives its RoPE caches where they differ from the checkpoint config the
    catalog holds for the model: Qwen2.5's instruct builders and its 0.5B and 3B 32,768, its base builders 131,072
    (torchtune 0.6.1 models/qwen2_5/_model_builders.py `max_seq_len`)."""
    if package == "qwen2_5":
        return 131072 if name.endswith("_base") else 32768
    return None


def model_id_for_builder(component: str) -> tuple[str | None, str | None]:
    """(Hugging Face model id, "lora"/"qlora"/None) for a torchtune model builder path."""
    m = _BUILDER.match(component.strip())
    if not m:
        return None, None
    family, prefix, name = m.group("family"), m.group("prefix"), m.group("name")
    peft = prefix[:-1] if prefix else None
    if name in SPECIAL:
        return SPECIAL[name], peft
    fam = FAMILIES.get(family)
    if fam is None or not name.startswith(family + "_"):
        return None, peft
    rest = name[len(family) + 1 :]
    variant = ""
    for suffix in ("_instruct", "_base"):
        if rest.endswith(suffix):
            variant, rest = suffix[1:], rest[: -len(suffix)]
    sm = re.fullmatch(r"(\d+(?:_\d+)?)b", rest)
    if not sm:
        if "{" not in fam[1]:
            return f"{fam[0]}/{fam[1]}", peft
        return None, peft
    size_num = sm.group(1).replace("_", ".")
    repo = fam[1].format(size=f"{size_num}B", size_lower=f"{size_num}b")
    if family == "qwen2_5" and variant == "instruct":
        repo += "-Instruct"
    elif family == "qwen3" and variant == "base":
        repo += "-Base"
    return f"{fam[0]}/{repo}", peft


# --- OmegaConf interpolation ----------------------------------------------------------------------

_INTERP = re.compile(r"\$\{([^${}]+)\}")


def _lookup(root: Any, dotted: str) -> Any:
    node = root
    for part in dotted.strip().split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(dotted)
    return node


def interpolate(value: Any, root: Any, depth: int = 0) -> Any:
    """Resolve `${a.b}` references against the document (OmegaConf semantics for absolute keys).
    A value that is exactly one reference takes the referenced value's type."""
    if not isinstance(value, str) or "${" not in value:
        return value
    if depth > 10:
        return Unknown(value)
    if value.strip().startswith("${eval:") or "${oc." in value or "${env:" in value:
        return Unknown(value)
    whole = _INTERP.fullmatch(value.strip())
    try:
        if whole:
            return interpolate(_lookup(root, whole.group(1)), root, depth + 1)

        def sub(m: re.Match) -> str:
            v = interpolate(_lookup(root, m.group(1)), root, depth + 1)
            if isinstance(v, Unknown):
                raise KeyError(m.group(1))
            return str(v)

        return _INTERP.sub(sub, value)
    except KeyError:
        return Unknown(value)


# --- reading ----------------------------------------------------------------------------------------


# --- reading: the entries of the key table ------------------------------------------------------------

Index = dict[str, list[Setting]]
# where `dialect.apply` keeps the text an interpolated value was written as (copies of the entries, original value)
WRITTEN = "$written"
# the sections a model builder may be under: `model`, the PPO recipe's `policy_model`, the distillation recipe's
# `student_model` (torchtune recipes/ppo_full_finetune_single_device.py, knowledge_distillation_single_device.py)
MODEL_SECTIONS = ("model", "policy_model", "student_model")


def dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def getter(index: Index) -> Callable[..., Setting | None]:
    """`get("model", "lora_rank")`: the entry at that path, None when absent or unresolved."""

    def get(*path: str) -> Setting | None:
        found = index.get(dotted(path))
        return found[0] if found else None

    return get


def model(b: PlanBuilder, s: Setting, index: Index) -> None:
    """The model builder (under `model:`, or the first of `policy_model`/`student_model` that is a section)."""
    get = getter(index)
    for name in MODEL_SECTIONS:
        if is_section(index, name):
            _model(b, get(name, "_component_"), get, name)
            return


def is_section(index: Index, name: str) -> bool:
    """Whether the document's top level has the mapping `name` (an entry holding one, or entries under it)."""
    return any(
        s.path[0] == name and (len(s.path) > 1 or isinstance(s.value, dict))
        for key, entries in index.items()
        if key != WRITTEN
        for s in entries
    )


def batch(concept: str) -> Callable[[PlanBuilder, Setting, Index], None]:
    """A whole number (at least 1), with the `${...}` it was written as."""

    def read(b: PlanBuilder, s: Setting, index: Index) -> None:
        written = next((w.value for w in index.get(WRITTEN, []) if w.path == s.path), None)
        note = f"`{written}` → {s.value}" if written is not None else None
        b.set_int(concept, s, minimum=1, note=note)

    return read


def tokenizer(b: PlanBuilder, s: Setting, index: Index) -> None:
    """`tokenizer.max_seq_len` bounds the sequence; null: the longest sample in a batch decides."""
    t = getter(index)("tokenizer", "max_seq_len")
    if t is None:
        return
    if t.value is None:
        b.remember(t, value="null")
        b.issue(
            IssueKind.ASSUMED,
            "`tokenizer.max_seq_len: null`: samples are not truncated, so the sequence length is that of "
            "the longest sample in a batch — vramlens assumes a length; set `max_seq_len` to bound memory",
            t,
            severity=Severity.INFO,
        )
    else:
        b.set_int("seq_len", t, minimum=1)


def dataset(b: PlanBuilder, s: Setting, index: Index) -> None:
    """Without a sequence length from the tokenizer (unless it says null): the dataset's; then `packed`."""
    get = getter(index)
    t = get("tokenizer", "max_seq_len")
    if b.plan.seq_len is None and (t is None or t.value is not None):
        _dataset_seq_len(b, get)
    t = get("dataset", "packed")
    if t is not None:
        b.set_bool("packing", t)


def compile_(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, dict):
        b.set("compile", True, s, note="`compile` options given")
    else:
        b.set_bool("compile", s)


def dtype(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    d = DTYPES.get(str(s.value).strip().lower())
    if d is None:
        b.unknown(s, "dtype", ("bf16", "fp32"))
    else:
        b.set("weight_dtype", d, s, note="torchtune trains in this dtype (no autocast)")
        b.set("amp_dtype", "none", s, note="torchtune does not autocast: weights, grads and states in `dtype`")


def optimizer(b: PlanBuilder, s: Setting, index: Index) -> None:
    _optimizer(b, getter(index))


def loss(b: PlanBuilder, s: Setting, index: Index) -> None:
    t = getter(index)("loss", "_component_")
    if t is not None and isinstance(t.value, str):
        if t.value in CHUNKED_LOSSES:
            b.set("loss_impl", "chunked", t)
        elif t.value in FUSED_LOSSES:
            b.set("loss_impl", "fused", t, note="linear + cross-entropy computed in chunks: no full logits tensor")
        else:
            b.remember(t)


def quantizer(b: PlanBuilder, s: Setting, index: Index) -> None:
    """`quantizer:` of a QAT recipe (recipes/qat_distributed.py, qat_single_device.py: `quantizer.prepare(model)`
    swaps the linears for fake-quantized ones before training; recipes/configs/llama2/1B_full_qat_single_device.yaml).
    A configuration without an optimizer is a quantization config (formats/purpose.py), not read here."""
    get = getter(index)
    t = get("quantizer", "_component_")
    if t is None or not isinstance(t.value, str):
        return
    from vramlens.knowledge import qat

    cls = t.value.rsplit(".", 1)[-1]  # torchtune/training/quantization.py re-exports torchao's quantizers
    if cls in qat.QUANTIZERS:
        name, default_group = qat.QUANTIZERS[cls]
        g = get("quantizer", "groupsize")
        group = to_int(g.value) if g is not None else None
        b.set("qat", f"{name}:{group or default_group}", t, note=f"`{cls}`: fake-quantized linears (torchao)")
    elif "QAT" in cls:
        b.unmodelled(
            t,
            f"quantization-aware training (`{cls}`)",
            "estimated as 16-bit training: the fake-quantized copies each linear keeps are not counted",
            key="quantizer._component_",
        )
    else:
        b.remember(t)


def fsdp_cpu_offload(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("offload_params", True, s)
        b.set("offload_optimizer", True, s, note="FSDP CPU offload runs the optimizer step on the CPU")


def launch(b: PlanBuilder, ctx: Any, index: Index) -> None:
    """The launch the header comment describes (not a key: `dialect.apply` runs it after the table)."""
    _recipe_from_header(b, ctx, getter(index))


def torchtune_version(get) -> tuple[str, str] | None:
    """(version, where it was found): the release a config's own component paths belong to
    (`torchtune.utils.FullModelHFCheckpointer`, `torchtune.utils.metric_logging.…`: 0.1–0.2; 0.3.0 moved them to
    `torchtune.training.`)."""
    for key in ("checkpointer", "metric_logger", "profiler"):
        s = get(key, "_component_")
        if s is not None and isinstance(s.value, str) and s.value.startswith("torchtune.utils."):
            return "0.2.1", f"`{s.value}` (a torchtune 0.1–0.2 path)"
    return None


def _dataset_seq_len(b: PlanBuilder, get) -> None:
    """Without the tokenizer's `max_seq_len`: the dataset's own (torchtune ≤ 0.2 truncates in the dataset builder),
    given or the builder's default at that release."""
    s = get("dataset", "max_seq_len")
    if s is not None and s.value is not None:
        b.set_int("seq_len", s, minimum=1)
        return
    comp = get("dataset", "_component_")
    found = torchtune_version(get)
    if comp is None or not isinstance(comp.value, str) or found is None:
        return
    n = frameworks.torchtune_dataset_seq_len(comp.value, found[0])
    if n:
        b.set(
            "seq_len",
            n,
            comp,
            origin=Origin.DEFAULT,
            framework="torchtune",
            note=f"`{comp.value}` truncates to `max_seq_len` {n} by default in torchtune {found[0]} (from "
            f"{found[1]}; {frameworks.TORCHTUNE_02_LABEL})",
        )


# A family's component builder (`torchtune.models.llama2.llama2`, `lora_llama2`, `qwen2.qwen2`, ...) takes the model's
# sizes as arguments instead of naming a checkpoint (torchtune v0.6.1 models/llama2/_component_builders.py `llama2`:
# vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, max_seq_len, intermediate_dim=None; torchtune
# recipes/configs/llama2/1B_qat_single_device.yaml builds TinyLlama that way). argument -> the size read
COMPONENT_SIZES = {
    "num_layers": "num_layers",
    "embed_dim": "hidden_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_kv_heads",
    "intermediate_dim": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_seq_len": "max_position_embeddings",
}
# families whose component builder ties the output projection to the token embedding unless told otherwise
# (torchtune v0.6.1 models/qwen2/_component_builders.py `qwen2(..., tie_word_embeddings=False)`: untied by default;
# gemma's `gemma(...)` always ties)
TIED_BY_DEFAULT = {"gemma", "gemma2"}


def _scale_hidden_dim_for_mlp(dim: int, multiple_of: int = 256) -> int:
    """The MLP width torchtune's llama builders use when `intermediate_dim` is not given (torchtune v0.6.1
    torchtune/models/llama2/_model_utils.py and llama3/_model_utils.py `scale_hidden_dim_for_mlp`)."""
    hidden = int(2 * (4 * dim) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _component_shape(b: PlanBuilder, comp: Setting, get, model_key: str) -> bool:
    """A family's component builder with its sizes: keep them as the model's shape (`PlanBuilder.shape`); False when
    the builder is not one or the sizes are not all given."""
    m = _BUILDER.match(comp.value.strip())
    if m is None or m.group("name") != m.group("family"):
        return False
    sizes: dict[str, tuple[Setting, int]] = {}
    for arg, name in COMPONENT_SIZES.items():
        s = get(model_key, arg)
        n = to_int(s.value) if s is not None and not isinstance(s.value, bool) else None
        if s is not None and n is not None:
            sizes[name] = (s, n)
    if not all(k in sizes for k in ("num_layers", "hidden_size", "num_attention_heads")):
        return False
    for name, (s, v) in sizes.items():
        b.shape(name, Setting(key=s.key, path=s.path, value=v, span=s.span, value_span=s.value_span))
    family = m.group("family")
    if "intermediate_size" not in sizes and family.startswith(("llama", "code_llama")):
        width = _scale_hidden_dim_for_mlp(sizes["hidden_size"][1])
        b.shape("intermediate_size", Setting(key=comp.key, path=comp.path, value=width, span=comp.span))
    # every torchtune decoder family builds a gated MLP (SwiGLU, GeGLU for gemma) and RMSNorm
    b.shape("activation", Setting(key=comp.key, path=comp.path, value="swiglu", span=comp.span))
    b.shape("norm", Setting(key=comp.key, path=comp.path, value="rmsnorm", span=comp.span))
    tie = get(model_key, "tie_word_embeddings")
    tied = to_bool(tie.value) if tie is not None else None
    if not (tied if tied is not None else family in TIED_BY_DEFAULT):
        b.shape("no_weight_tying", Setting(key=comp.key, path=comp.path, value=True, span=comp.span))
    b.plan.read_notes.append(
        f"the model is given by its sizes: torchtune component builder `{comp.value.strip()}` with "
        + ", ".join(f"{s.key} {v}" for s, v in sizes.values())
    )
    return True


def _model(b: PlanBuilder, comp: Setting | None, get, model_key: str) -> None:
    if comp is None or not isinstance(comp.value, str):
        return
    model_id, peft = model_id_for_builder(comp.value)
    name = comp.value.rsplit(".", 1)[-1]
    if model_id is None and _component_shape(b, comp, get, model_key):
        pass  # the model is given by its sizes (resolve.arch_from_sizes)
    elif model_id is None:
        b.set("model_id", comp.value, comp, note=f"torchtune builder `{name}` (not in vramlens' builder table)")
    else:
        b.set("model_id", model_id, comp, note=f"torchtune builder `{name}` → {model_id}")
    b.plan.model_span_hint = comp.value_span
    m = _BUILDER.match(comp.value.strip())
    if m:  # the builder's package (llama3_1, qwen2_5, ...): its RoPE layout (resolve.torchtune_rope_caches)
        b.remember(
            Setting(
                key=comp.key,
                path=("torchtune_builder",),
                value=m.group("family"),
                span=comp.span,
                value_span=comp.value_span,
            )
        )
        positions = builder_max_seq_len(m.group("family"), m.group("name"))
        if positions:
            b.remember(
                Setting(
                    key=comp.key,
                    path=("torchtune_max_seq_len",),
                    value=positions,
                    span=comp.span,
                    value_span=comp.value_span,
                )
            )
    if peft == "qlora":
        b.set("peft_method", "qlora", comp, note="`qlora_` builder: NF4 base weights + LoRA")
        b.set("quant_bits", 4, comp)
        b.set("quant_type", "nf4", comp)
    elif peft == "lora":
        b.set("peft_method", "lora", comp, note="`lora_` builder")
    elif model_id is not None:
        b.set("peft_method", "none", comp, note="full-weight builder: every parameter trains")
    s = get(model_key, "use_dora")
    if s is not None and to_bool(s.value):
        b.set("peft_method", "dora", s, override=True)
    s = get(model_key, "quantize_base")
    if s is not None and to_bool(s.value):
        b.set("quant_bits", 4, s, override=True)
        b.set("quant_type", "nf4", s)
    for key, concept in (("lora_rank", "lora_r"), ("lora_alpha", "lora_alpha"), ("lora_dropout", "lora_dropout")):
        s = get(model_key, key)
        if s is not None:
            (b.set_int if concept == "lora_r" else b.set_float)(concept, s)
    attn = get(model_key, "lora_attn_modules")
    if attn is not None and isinstance(attn.value, list):
        targets = [LORA_MODULES.get(str(m), str(m)) for m in attn.value]
        mlp = get(model_key, "apply_lora_to_mlp")
        out = get(model_key, "apply_lora_to_output")
        if mlp is not None and to_bool(mlp.value):
            targets += ["gate_proj", "up_proj", "down_proj"]
        if out is not None and to_bool(out.value):
            targets.append("lm_head")
        b.set("lora_targets", targets, attn, note="lora_attn_modules + apply_lora_to_mlp/output")


def _optimizer(b: PlanBuilder, get) -> None:
    s = get("optimizer", "_component_")
    if s is None or not isinstance(s.value, str):
        return
    cls = s.value.strip()
    check_optimizer(b, s, "class")
    spec = optimizers.lookup_optimizer(cls)
    b.set("optimizer", cls, s, note=f"≈ `{spec.name}`" if spec is not None else None)
    fused = get("optimizer", "fused")
    foreach = get("optimizer", "foreach")
    if fused is not None and to_bool(fused.value):
        b.set("optimizer_impl", "fused", fused)
        if not cls.startswith("torch.optim."):
            b.issue(
                IssueKind.CONFLICTING_SETTINGS,
                f"`fused: True` is an argument of torch.optim optimizers; `{cls}` does not accept it",
                fused,
            )
    elif foreach is not None and to_bool(foreach.value) is not None:
        b.set("optimizer_impl", "foreach" if to_bool(foreach.value) else "forloop", foreach)
    cpu = get("optimizer", "offload_gradients")
    if "CPUOffloadOptimizer" in cls:
        b.set("offload_optimizer", True, s, note="torchao CPUOffloadOptimizer keeps states on the CPU")
        if cpu is not None:
            b.remember(cpu)


def _recipe_from_header(b: PlanBuilder, ctx, get) -> None:
    """`tune run [--nproc_per_node N] <recipe> --config ...` in the header: distributed recipes use FSDP.

    Headers may show several commands (e.g. fine-tune the teacher first); the last one is the launch
    of this config."""
    header = _header_lines(getattr(ctx, "text", None) or "")
    last = None
    for i, line in header:
        m = _RUN.search(line)
        if m:
            last = (i, line, m)
    if last is None:
        _launch_in_words(b, header, get)
        return
    i, line, m = last
    args = m.group("args").split()
    words = [w for w in args if not w.startswith("-") and "=" not in w and not w.isdigit()]
    recipe = words[0] if words else ""
    nproc = _flag(args, "--nproc_per_node", "--nproc-per-node")
    nnodes = _flag(args, "--nnodes") or 1
    col = line.index(m.group(0))
    sp = Span(file=b.plan.source_file, start_line=i, start_col=col, end_line=i, end_col=len(line.rstrip()))
    if nproc:
        b.plan.gpu_count = b.plan.gpu_count or Sourced(
            value=nproc * nnodes,
            origin=Origin.ASSUMED,
            key="comment",
            span=sp,
            value_span=sp,
            note=f"from the launch line in the header: `{m.group(0).strip()[:120]}`",
        )
    if "distributed" in recipe:
        _fsdp(b, recipe, get)


def _fsdp(b: PlanBuilder, recipe: str, get) -> None:
    reshard = get("fsdp_reshard_after_forward")
    stage = 2 if reshard is not None and to_bool(reshard.value) is False else 3
    b.set(
        "dist_strategy",
        "fsdp",
        origin=Origin.DERIVED,
        framework="torchtune",
        note=f"recipe `{recipe}` (from the header comment) shards with FSDP2",
    )
    b.set(
        "zero_stage",
        stage,
        origin=Origin.DERIVED,
        framework="torchtune",
        note="fsdp_reshard_after_forward " + ("on" if stage == 3 else "off"),
    )


def _header_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the comment block a config starts with (blank lines included; at most 80 lines)."""
    out = []
    for i, line in enumerate(text_lines(text)[:80]):
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            break
        out.append((i, line))
    return out


def _launch_in_words(b: PlanBuilder, header: list[tuple[int, str]], get) -> None:
    """A header without a `tune run` line that names a distributed recipe file and the nodes × devices it runs on."""
    recipe, devices = None, None
    for i, line in header:
        recipe = recipe or _RECIPE_FILE.search(line)
        if devices is None:
            n = _NODES.search(line)
            if n:
                col = line.index(n.group(0))
                devices = (
                    n,
                    Span(
                        file=b.plan.source_file, start_line=i, start_col=col, end_line=i, end_col=col + len(n.group(0))
                    ),
                )
    if recipe is None:
        return
    _fsdp(b, recipe.group("recipe"), get)
    if devices is not None and b.plan.gpu_count is None:
        n, sp = devices
        b.plan.gpu_count = Sourced(
            value=int(n.group("nodes")) * int(n.group("devices")),
            origin=Origin.ASSUMED,
            key="comment",
            span=sp,
            value_span=sp,
            note=f'from the header comment: "{n.group(0)}"',
        )


def _flag(args: list[str], *names: str) -> int | None:
    for j, a in enumerate(args):
        for n in names:
            if a == n and j + 1 < len(args) and args[j + 1].isdigit():
                return int(args[j + 1])
            if a.startswith(n + "=") and a[len(n) + 1 :].isdigit():
                return int(a[len(n) + 1 :])
    return None
