"""Words and tables for one analysed config: hover Markdown, inlay-hint labels, code-lens titles.

Pure functions of the pipeline's results (plan, resolution, estimate); no editor types here. Where a
text compares alternatives ("each +1 ≈ +2.3 GiB", "8-bit AdamW: 15.0 GiB"), the alternative is
re-estimated by changing one field of the resolved plan and calling the estimator again, so every
figure shown comes from the same model as the diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from vramlens import markup
from vramlens.estimate import estimate as _estimate
from vramlens.estimate.result import COMPONENT_LABELS, COMPONENTS, GIB, Estimate
from vramlens.knowledge import gpus, optimizers
from vramlens.knowledge.gpus import usable_text
from vramlens.plan import Origin, Sourced, Span, TrainingPlan
from vramlens.provenance import CONCEPT_TITLES, applied_defaults, by_source, default_phrase
from vramlens.provenance import show_value as _show
from vramlens.report import bar, calibration_line, method_text, objective_text, peak_mark, speed_text
from vramlens.resolve import gpu_assumption, no_bf16_note, shown_compute_dtype
from vramlens.resolved import ResolvedPlan

if TYPE_CHECKING:
    from vramlens.analysis import Analysis

MODEL = "model_id"
# Concepts whose hover is the whole budget.
BUDGET_CONCEPTS = {MODEL}
BAR_WIDTH = 20  # characters of the bars in the budget table


def gib(n: float) -> str:
    """Bytes as GiB with one decimal: 71.25 GiB -> "71.3"."""
    return f"{n / GIB:.1f}"


def table_gib(n: float) -> str:
    """Bytes for the GiB column of the breakdown table: one decimal, two below 0.1 GiB (LoRA adapters read 0.03 as
    in the CLI's table, not 0.0)."""
    return gib(n) if n >= 0.1 * GIB else f"{n / GIB:.2f}"


def figures(ctx: "Context", *components: str) -> str:
    """Memory components by the names of the breakdown table (`COMPONENT_LABELS`), zero ones left out:
    "activations 34.5 GiB · logits and loss 7.8 GiB". Every short label uses this, so an inlay hint, a hover
    and the diagnostic's breakdown name and round the same figure the same way."""
    return " · ".join(f"{COMPONENT_LABELS[k]} {amount(ctx.component(k))}" for k in components if ctx.component(k) > 0)


def amount(n: float) -> str:
    """Bytes for a label: GiB with one decimal, MiB below 0.1 GiB (LoRA adapters: "26 MiB", not "0.0 GiB")."""
    return f"{n / GIB:.1f} GiB" if n >= 0.1 * GIB else f"{n / 2**20:.0f} MiB"


def signed_gib(n: float) -> str:
    return f"{'+' if n >= 0 else '−'}{abs(n) / GIB:.1f}"


def gpu_label(rp: ResolvedPlan) -> str:
    return f"{rp.gpu_count}× {rp.gpu.name}" if rp.gpu_count > 1 else rp.gpu.name


def describe_origin(s: Sourced | None, this_file: str | None = None) -> str:
    """Where a value came from, as a short phrase: "set on line 12", "default of TRL 1.x"."""
    if s is None:
        return "not set"
    if s.origin == Origin.FILE:
        if s.span is None:
            return "set in the config"
        if this_file is not None and s.span.file not in ("", this_file):
            return f"set in {s.span.file.rsplit('/', 1)[-1]}, line {s.span.start_line + 1}"
        return f"set on line {s.span.start_line + 1}"
    if s.origin == Origin.DEFAULT:
        return default_phrase(s)
    if s.origin == Origin.SETTING:
        return "from your vramlens settings"
    if s.origin == Origin.DERIVED:
        return f"derived: {s.note}" if s.note else "derived from other settings"
    return f"assumed: {s.note}" if s.note else "assumed"


# --------------------------------------------------------------------------- finding the concept


def concept_at(plan: TrainingPlan, path: str, line: int, col: int) -> str | None:
    """The plan concept whose entry covers (line, col) of the document at `path`, innermost first."""
    best: tuple[int, str] | None = None
    for name, s in plan.settings().items():
        span = s.span
        if span is None or s.origin != Origin.FILE or not _same_file(span, path) or not span.contains(line, col):
            continue
        size = (span.end_line - span.start_line) * 10_000 + (span.end_col - span.start_col)
        if best is None or size < best[0]:
            best = (size, name)
    if best is not None:
        return best[1]
    hint = plan.model_span_hint
    if hint is not None and _same_file(hint, path) and hint.contains(line, col):
        return MODEL
    return None


def _same_file(span: Span, path: str) -> bool:
    """Spans carry the path the parser was given; references to other files carry theirs."""
    return span.file in ("", path)


def entries_in(plan: TrainingPlan, path: str) -> list[tuple[str, Span]]:
    """(concept, span) of every concept set in this document, in document order."""
    out = [
        (name, s.span)
        for name, s in plan.settings().items()
        if s.origin == Origin.FILE and s.span is not None and _same_file(s.span, path)
    ]
    if (
        plan.model_id is not None
        and not any(n == MODEL for n, _ in out)
        and plan.model_span_hint is not None
        and _same_file(plan.model_span_hint, path)
    ):
        out.append((MODEL, plan.model_span_hint))
    return sorted(out, key=lambda item: (item[1].start_line, item[1].start_col))


def model_span(plan: TrainingPlan, path: str) -> Span | None:
    """Where the document names its model (for the budget code lens)."""
    for name, span in entries_in(plan, path):
        if name == MODEL:
            return span
    return None


# --------------------------------------------------------------------------- what-if estimates


@dataclass
class Context:
    """Everything a renderer needs about one analysed document."""

    plan: TrainingPlan
    sources: dict[str, Sourced]
    assumptions: list[str]
    rp: ResolvedPlan
    est: Estimate
    path: str
    exact_gib: float | None = None

    def peak(self, **changes: Any) -> Estimate | None:
        """The estimate with some resolved fields changed (None when the change is not valid)."""
        try:
            return _estimate(self.rp.with_changes(**changes), limits=False)
        except Exception:  # a what-if must never break a hover
            return None

    def delta(self, **changes: Any) -> int | None:
        other = self.peak(**changes)
        return None if other is None else other.device_bytes - self.est.device_bytes

    def component(self, name: str, est: Estimate | None = None) -> int:
        return (est or self.est).components.get(name, 0)

    @property
    def gpu_assumed(self) -> bool:
        """No GPU named (nor detected): the figures are for `resolve.DEFAULT_GPU` or a GPU a comment mentions
        (`resolve.gpu_assumption` says which)."""
        source = self.sources.get("gpu_name")
        return source is not None and source.origin == Origin.ASSUMED


def context(analysis: "Analysis", path: str, exact_gib: float | None = None) -> Context | None:
    """A renderer context from an analysis result; None when it has no estimate."""
    res, est, plan = analysis.resolution, analysis.estimate, analysis.plan
    if res is None or est is None or plan is None:
        return None
    return Context(plan, dict(res.sources), list(res.assumptions), res.resolved, est, path, exact_gib)


# --------------------------------------------------------------------------- hover texts per concept


def _verdict(ctx: Context) -> str:
    e = ctx.est
    if not e.fits:
        return f"does **not fit**: {gib(-e.headroom_bytes)} GiB over"
    if e.tight:
        return f"fits, but tight: {gib(e.headroom_bytes)} GiB to spare"
    return f"fits with {gib(e.headroom_bytes)} GiB to spare"


def _peak_line(ctx: Context) -> str:
    line = (
        f"Peak {peak_mark(ctx.est)}{gib(ctx.est.device_bytes)} GiB of "
        f"{usable_text(ctx.rp.gpu.usable_gib)} GiB usable on "
        f"{gpu_label(ctx.rp)} — {_verdict(ctx)}"
    )
    if ctx.gpu_assumed:
        line += f"\n\n**{ctx.rp.gpu.name} is assumed**: {gpu_assumption(ctx.sources, escape=markup.text)}."
    if ctx.exact_gib is not None:
        line += f" · exact trace: {ctx.exact_gib:.1f} GiB"
    if (calibrated := calibration_line(ctx.est)) is not None:
        line += f"\n\n{markup.text(calibrated)}"
    if ctx.est.is_approximate:
        line += "\n\n**approximate**:\n" + "\n".join(f"- {markup.text(r)}" for r in ctx.est.approximate)
    return line


def _compare(ctx: Context, rows: list[tuple[str, Estimate | None]], component: str | None = None) -> list[str]:
    """A small table of alternatives: label, peak (and a component) for each."""
    head = "| | peak |" + (f" {COMPONENT_LABELS[component]} |" if component else "")
    lines = [head, "|---|---:|" + ("---:|" if component else "")]
    for label, est in rows:
        if est is None:
            continue
        fits = "" if est.device_bytes <= est.usable_bytes else " ✗"
        row = f"| {label} | {gib(est.device_bytes)} GiB{fits} |"
        if component:
            row += f" {gib(est.components.get(component, 0))} GiB |"
        lines.append(row)
    return lines if len(lines) > 3 else []


def _micro_batch(ctx: Context) -> list[str]:
    b = ctx.rp.micro_batch
    step = ctx.delta(micro_batch=b + 1)
    out = [
        f"{figures(ctx, 'activations', 'logits')} at {b} sample{'s' if b != 1 else ''} per GPU"
        + (f"; each +1 ≈ {signed_gib(step)} GiB" if step is not None else "")
    ]
    m = ctx.est.max_micro_batch
    if m is None:
        out.append(f"on {gpu_label(ctx.rp)}, {ctx.est.not_even_one(ctx.rp.seq_len)}")
    else:
        out.append(f"largest that fits on {ctx.rp.gpu.name}: **{m}**")
    ga = ctx.rp.grad_accum
    out.append(
        f"samples per optimizer step: {b} × {ga} accumulation × {ctx.rp.world_size} GPU"
        f"{'s' if ctx.rp.world_size != 1 else ''} = {b * ga * ctx.rp.world_size}"
    )
    return out


def _grad_accum(ctx: Context) -> list[str]:
    ga = ctx.rp.grad_accum
    out = ["accumulation adds no activation memory: it trades steps for memory"]
    if ga > 1:
        d = ctx.delta(grad_accum=1)
        if d:
            out.append(f"gradients stay allocated between micro-batches: {signed_gib(-d)} GiB vs no accumulation")
    return out


def _seq_len(ctx: Context) -> list[str]:
    s = ctx.rp.seq_len
    d = ctx.delta(seq_len=s + 1024)
    out = []
    if d is not None:
        out.append(f"each +1k tokens ≈ {signed_gib(d)} GiB (≈ {d / 1024 / 2**20:.2f} MiB per token)")
    m = ctx.est.max_seq_len
    out.append(
        f"longest that fits at this batch: **{m}**"
        if m
        else f"not even the shortest sequences fit at micro batch {ctx.rp.micro_batch}"
    )
    if ctx.rp.attn_impl == "eager":
        out.append("eager attention stores s² scores per head: cost grows quadratically")
    return out


def _toggle(ctx: Context, field: str, what: str) -> list[str]:
    now = bool(getattr(ctx.rp, field))
    other = ctx.peak(**{field: not now})
    if other is None:
        return []
    d = other.device_bytes - ctx.est.device_bytes
    if abs(d) < 0.05 * GIB:
        return [f"{what}: no memory difference in the estimate"]
    state = "on" if now else "off"
    flipped = "off" if now else "on"
    if d > 0:
        return [f"{what} is {state}: saves {gib(d)} GiB (peak would be {gib(other.device_bytes)} GiB {flipped})"]
    return [f"{what} is {state}: costs {gib(-d)} GiB (peak would be {gib(other.device_bytes)} GiB {flipped})"]


def _grad_checkpointing(ctx: Context) -> list[str]:
    return _toggle(ctx, "grad_checkpointing", "gradient checkpointing")


def _optimizer(ctx: Context) -> list[str]:
    opt = ctx.rp.optimizer
    out = [
        f"{markup.code(opt.name)}: optimizer state {gib(ctx.component('optimizer'))} GiB"
        + (f" + step temporaries {gib(ctx.component('temporaries'))} GiB" if ctx.component("temporaries") else "")
    ]
    rows: list[tuple[str, Estimate | None]] = [(f"{markup.text(opt.name)} (now)", ctx.est)]
    for name in ("adamw_torch_fused", "adamw_8bit", "paged_adamw_8bit", "adafactor"):
        if name == opt.name:
            continue
        spec = optimizers.lookup_optimizer(name)
        if spec is not None:
            rows.append(
                (
                    name,
                    ctx.peak(
                        optimizer=spec,
                        optimizer_impl="fused" if spec.default_impl == "fused" else ctx.rp.optimizer_impl,
                    ),
                )
            )
    out += _compare(ctx, rows, "optimizer")
    return out


def _optimizer_impl(ctx: Context) -> list[str]:
    rows = [
        (f"{impl}{' (now)' if impl == ctx.rp.optimizer_impl else ''}", ctx.peak(optimizer_impl=impl))
        for impl in ("foreach", "fused", "forloop")
    ]
    return ["the optimizer step's temporaries depend on the implementation"] + _compare(ctx, rows, "temporaries")


def _dtype(ctx: Context) -> list[str]:
    rows = []
    for d in ("fp32", "bf16", "fp16"):
        est = ctx.peak(weight_dtype=d, compute_dtype=d if d != "fp32" or not ctx.rp.amp else ctx.rp.compute_dtype)
        rows.append((f"{d}{' (now)' if d == ctx.rp.weight_dtype else ''}", est))
    out = [
        f"weights stored in {ctx.rp.weight_dtype}, computed in {_compute(ctx)}"
        + (" (autocast over fp32 weights)" if ctx.rp.amp else "")
    ]
    return out + _bf16_note(ctx) + _compare(ctx, rows, "weights")


def _amp_dtype(ctx: Context) -> list[str]:
    out = [
        f"compute dtype: {_compute(ctx)}; weights in {ctx.rp.weight_dtype}"
        + (" — autocast keeps 16-bit copies of the weights for backward" if ctx.rp.amp else "")
    ]
    return out + _bf16_note(ctx)


def _compute(ctx: Context) -> str:
    return shown_compute_dtype(ctx.rp.compute_dtype, ctx.rp.gpu.bf16)


def _bf16_note(ctx: Context) -> list[str]:
    return [no_bf16_note(ctx.rp.gpu.name)] if ctx.rp.compute_dtype == "bf16" and not ctx.rp.gpu.bf16 else []


def _lora_r(ctx: Context) -> list[str]:
    r = ctx.rp.lora_r
    out = [
        f"adapter weights {gib(ctx.component('adapters'))} GiB at r={r} "
        f"({ctx.est.params_trainable / 1e6:.1f} M trainable parameters)"
    ]
    d = ctx.delta(lora_r=r * 2)
    if d is not None:
        out.append(f"r={r * 2} would add {gib(d)} GiB to the peak (adapters, their gradients and optimizer state)")
    return out


def _lora_targets(ctx: Context) -> list[str]:
    targets = ctx.rp.lora_targets
    rows = [(f"{markup.text(_show(targets))} (now)", ctx.est)]
    if targets != ("q", "v"):
        rows.append(("q, v", ctx.peak(lora_targets=("q", "v"))))
    if targets != ("all-linear",):
        rows.append(("all-linear", ctx.peak(lora_targets=("all-linear",))))
    return [f"adapter weights {gib(ctx.component('adapters'))} GiB"] + _compare(ctx, rows, "adapters")


def _lora_dropout(ctx: Context) -> list[str]:
    if ctx.rp.lora_dropout <= 0:
        return ["dropout 0: no extra copies of the adapter inputs"]
    d = ctx.delta(lora_dropout=0.0)
    return (
        [f"dropout keeps a dropped copy of each adapted layer's input: {gib(-d)} GiB (0 would save it)"]
        if d is not None
        else []
    )


def _peft(ctx: Context) -> list[str]:
    rows = [(f"{ctx.rp.peft} (now)", ctx.est)]
    if ctx.rp.peft != "none":
        rows.append(("full fine-tune", ctx.peak(peft="none", quant_bits=None)))
    else:
        rows.append(("LoRA r=16, all-linear", ctx.peak(peft="lora", lora_r=16, lora_targets=("all-linear",))))
    return [
        f"trainable parameters: {ctx.est.params_trainable / 1e6:,.1f} M of {ctx.est.params_total / 1e9:.2f} B"
    ] + _compare(ctx, rows)


def _quant(ctx: Context) -> list[str]:
    out = [figures(ctx, "weights", "quant_constants")]
    rows = [(f"{ctx.rp.quant_bits or 16}-bit (now)", ctx.est)]
    for bits in (4, 8, None):
        if bits != ctx.rp.quant_bits:
            peft = ctx.rp.peft if ctx.rp.peft != "none" else "lora"
            if bits == 4:
                peft = "qlora"
            elif peft == "qlora":
                peft = "lora"
            rows.append((f"{bits or 16}-bit", ctx.peak(quant_bits=bits, peft=peft)))
    return out + _compare(ctx, rows, "weights")


def _attn(ctx: Context) -> list[str]:
    rows = []
    for impl in ("eager", "sdpa", "flash_attention_2"):
        rows.append(
            (
                f"{impl}{' (now)' if impl == ctx.rp.attn_impl else ''}",
                ctx.peak(attn_impl=impl, repeat_kv=impl in ("eager", "sdpa")),
            )
        )
    return ["attention keeps its inputs and outputs per layer; eager also the s² probabilities"] + _compare(
        ctx, rows, "activations"
    )


def _loss(ctx: Context) -> list[str]:
    rows = []
    for impl, label in (("standard", "standard cross-entropy"), ("chunked", "chunked"), ("fused", "fused linear + CE")):
        rows.append((f"{label}{' (now)' if impl == ctx.rp.loss_impl else ''}", ctx.peak(loss_impl=impl)))
    return [
        f"logits and loss buffers: {gib(ctx.component('logits'))} GiB "
        f"(vocabulary {ctx.rp.arch.vocab:,} × {ctx.rp.micro_batch * ctx.rp.seq_len:,} tokens)"
    ] + _compare(ctx, rows, "logits")


def _alloc_conf(ctx: Context) -> list[str]:
    now = ctx.rp.expandable_segments
    other = ctx.peak(expandable_segments=not now)
    out = [f"allocator cache (reserved − allocated): {gib(ctx.component('allocator'))} GiB"]
    if other is not None:
        if now:
            out.append(f"expandable segments on; without: peak {gib(other.device_bytes)} GiB")
        else:
            out.append(
                f"with `expandable_segments:True`: peak {gib(other.device_bytes)} GiB "
                f"({signed_gib(other.device_bytes - ctx.est.device_bytes)} GiB)"
            )
    return out


def _sharding(ctx: Context) -> list[str]:
    rp = ctx.rp
    out = [
        f"{rp.strategy if rp.strategy != 'none' else 'no sharding'}"
        + (f", stage {rp.zero_stage}" if rp.strategy in ("deepspeed", "fsdp") else "")
        + f", {rp.world_size} data-parallel rank{'s' if rp.world_size != 1 else ''}: estimate is per GPU"
    ]
    if rp.world_size > 1:
        rows = []
        for stage in (0, 1, 2, 3):
            strategy = rp.strategy if rp.strategy in ("deepspeed", "fsdp") else "deepspeed"
            rows.append(
                (
                    f"ZeRO-{stage}{' (now)' if stage == rp.zero_stage and rp.strategy == strategy else ''}",
                    ctx.peak(strategy=strategy if stage else "ddp", zero_stage=stage),
                )
            )
        out += _compare(ctx, rows)
    return out


def _gpus(ctx: Context) -> list[str]:
    rp = ctx.rp
    out = [
        f"{rp.gpu.name}: {rp.gpu.memory_gib:g} GiB, {usable_text(rp.gpu.usable_gib)} GiB usable"
        + ("" if rp.gpu.bf16 else ", no bf16")
    ]
    fitting = sorted(
        (g for g in gpus.all_gpus() if g.usable_gib * GIB >= ctx.est.device_bytes), key=lambda g: g.usable_gib
    )
    if fitting:
        out.append("smallest GPUs this peak fits on: " + ", ".join(g.name for g in fitting[:4]))
    else:
        out.append("no single GPU in the catalog holds this peak")
    return out


def _eval_batch(ctx: Context) -> list[str]:
    return [
        f"evaluation batch {ctx.rp.eval_batch} (training micro batch {ctx.rp.micro_batch}); evaluation keeps no "
        "activations for backward, but its logits scale with this batch"
    ]


def _toggler(field: str, what: str) -> Callable[[Context], list[str]]:
    return lambda ctx: _toggle(ctx, field, what)


AS_SFT = {
    "objective": "sft",
    "sequences_per_example": 1,
    "reference": "none",
    "scalar_head": False,
    "logits_tokens": None,
    "generation": "none",
    "generations_per_example": 0,
    "generation_len": 0,
    "vllm_memory_share": 0.0,
    "reward_model": False,
    "value_model": False,
    "teacher": None,
}


def _objective(ctx: Context) -> list[str]:
    """What the objective adds to the step, and the same step as plain SFT."""
    rp = ctx.rp
    out = [objective_text(rp), f"peak phase: {ctx.est.phase}"]
    if rp.objective in ("sft", "pretrain"):
        return out
    rows = [(rp.objective, ctx.est), ("the same step as SFT", ctx.peak(**AS_SFT))]
    if rp.reference == "copy" and rp.objective in ("dpo", "kto"):
        rows.append(("precomputed reference log-probs", ctx.peak(reference="none")))
    if rp.generation == "vllm-colocate":
        rows.append(("vLLM on a separate server", ctx.peak(generation="vllm-server", vllm_memory_share=0.0)))
    return out + _compare(ctx, rows)


HOVERS: dict[str, Callable[[Context], list[str]]] = {
    "objective": _objective,
    "reference_free": _objective,
    "precompute_ref": _objective,
    "generation": _objective,
    "vllm_memory_share": _objective,
    "num_generations": _objective,
    "completion_len": _objective,
    "teacher_model_id": _objective,
    "micro_batch": _micro_batch,
    "global_batch": _micro_batch,
    "grad_accum": _grad_accum,
    "seq_len": _seq_len,
    "packing": _toggler("packing", "packing"),
    "eval_batch": _eval_batch,
    "grad_checkpointing": _grad_checkpointing,
    "activation_offload": _toggler("activation_offload", "activation offloading"),
    "attn_impl": _attn,
    "loss_impl": _loss,
    "optimizer": _optimizer,
    "optimizer_impl": _optimizer_impl,
    "optimizer_in_bwd": _toggler("optimizer_in_bwd", "optimizer step in backward"),
    "zero_grad_set_to_none": _toggler("set_to_none", "zero_grad(set_to_none)"),
    "weight_dtype": _dtype,
    "amp_dtype": _amp_dtype,
    "peft_method": _peft,
    "lora_r": _lora_r,
    "lora_targets": _lora_targets,
    "lora_dropout": _lora_dropout,
    "quant_bits": _quant,
    "quant_type": _quant,
    "quant_double": _toggler("quant_double", "double quantization"),
    "dist_strategy": _sharding,
    "zero_stage": _sharding,
    "world_size": _sharding,
    "offload_optimizer": _toggler("offload_optimizer", "optimizer offload"),
    "offload_params": _toggler("offload_params", "parameter offload"),
    "alloc_conf": _alloc_conf,
    "gpu_name": _gpus,
    "gpu_count": _sharding,
    "node_count": _sharding,
}


def hover_markdown(ctx: Context, concept: str) -> str:
    """The hover for one concept: what it is set to, what it costs now, the alternatives, the provenance."""
    if concept in BUDGET_CONCEPTS:
        return budget_markdown(ctx)
    s = getattr(ctx.plan, concept, None)
    title = CONCEPT_TITLES.get(concept, concept.replace("_", " "))
    key = s.key if s is not None and s.key else concept
    value = _show(s.value) if s is not None else "?"
    lines = [f"**vramlens** · {title}: {markup.code(key)} = {markup.code(value)}", ""]
    body: list[str] = []
    renderer = HOVERS.get(concept)
    if renderer is not None:
        try:
            body = renderer(ctx)
        except Exception:  # one odd concept must not hide the rest of the hover
            body = []
    if body:
        table_started = False
        for item in body:
            if item.startswith("|"):
                if not table_started:
                    lines.append("")
                    table_started = True
                lines.append(item)
            else:
                lines.append(f"- {item}")
        lines.append("")
    lines.append(_peak_line(ctx))
    lines.append("")
    lines.append(
        f"_{markup.text(describe_origin(s, ctx.path))}_"
        + (f" — {markup.text(s.note)}" if s is not None and s.note else "")
    )
    effective = ctx.sources.get(concept)
    if s is not None and effective is not None and effective.origin != s.origin and effective.value != s.value:
        lines.append("")
        lines.append(
            f"_overridden: {markup.code(_show(effective.value))}, {markup.text(describe_origin(effective, ctx.path))}_"
        )
    return "\n".join(lines)


def budget_markdown(ctx: Context) -> str:
    """The whole budget: a table with a bar per component, the peak phase, the limits, the assumptions."""
    e, rp = ctx.est, ctx.rp
    name = ctx.plan.model_id.value if ctx.plan.model_id else rp.arch.id
    peft = method_text(rp)
    usable = e.usable_bytes
    scale = max(e.device_bytes, usable, 1)
    lines = [
        f"**vramlens** · {markup.code(name)} · {e.params_total / 1e9:.2f} B params, "
        f"{e.params_trainable / 1e9:.3g} B trainable · {peft} · {rp.framework}",
        "",
        f"objective: **{rp.objective}** — {objective_text(rp)}",
        "",
        _peak_line(ctx),
        "",
        f"range {gib(e.low_bytes)}–{gib(e.high_bytes)} GiB · allocated {gib(e.allocated_bytes)} · "
        f"reserved {gib(e.reserved_bytes)} · device {gib(e.device_bytes)} GiB · peak phase: **{e.phase}**",
        "",
        f"speed: {markup.text(speed_text(e))}",
        "",
        "| component | GiB | |",
        "|---|---:|---|",
    ]
    for key in COMPONENTS:
        v = e.components.get(key, 0)
        if v <= 0:
            continue
        lines.append(f"| {COMPONENT_LABELS[key]} | {table_gib(v)} | `{bar(v / scale, BAR_WIDTH) or '▏'}` |")
    lines.append(
        f"| **total on the device** | **{gib(e.device_bytes)}** | `{bar(e.device_bytes / scale, BAR_WIDTH)}` |"
    )
    lines.append(
        f"| {markup.text(rp.gpu.name)} usable | {usable_text(rp.gpu.usable_gib)} | `{bar(usable / scale, BAR_WIDTH)}` |"
    )
    if ctx.exact_gib is not None:
        lines.append(
            f"| exact trace (device) | {ctx.exact_gib:.1f} | `{bar(ctx.exact_gib * GIB / scale, BAR_WIDTH)}` |"
        )
    lines.append("")
    if len(e.phases) > 1:
        lines.append(
            "phases (allocated): "
            + " · ".join(f"{'**' + p + '**' if p == e.phase else p} {gib(v)}" for p, v in e.phases.items())
        )
        lines.append("")
    if e.max_micro_batch is None:
        lines.append(e.not_even_one(rp.seq_len))
    else:
        lines.append(
            f"largest micro batch that fits: **{e.max_micro_batch}**"
            + (f" · longest sequence at micro batch {rp.micro_batch}: **{e.max_seq_len}**" if e.max_seq_len else "")
        )
    for source, group in by_source(applied_defaults(ctx.sources)):
        lines.append("")
        lines.append(
            f"{markup.text(source.replace('default of', 'defaults of', 1))}: "
            + ", ".join(f"{markup.text(d.title)} {markup.code(d.value)}" for d in group)
        )
    notes = list(ctx.assumptions) + list(e.assumptions)
    if notes:
        lines.append("")
        lines.append("assumptions:")
        lines.extend(f"- {markup.text(n)}" for n in notes)
    return "\n".join(lines)


# --------------------------------------------------------------------------- short labels


def _inlay(ctx: Context, concept: str) -> str | None:
    rp = ctx.rp
    if concept == MODEL:
        return f"{figures(ctx, 'weights', 'quant_constants')} · peak {gib(ctx.est.device_bytes)} GiB"
    if concept in ("micro_batch", "global_batch"):
        return figures(ctx, "activations", "logits")
    if concept == "seq_len":
        d = ctx.delta(seq_len=rp.seq_len + 1024)
        return f"{signed_gib(d)} GiB per +1k tokens" if d is not None else None
    if concept == "optimizer":
        return figures(ctx, "optimizer")
    if concept == "grad_checkpointing":
        other = ctx.peak(grad_checkpointing=not rp.grad_checkpointing)
        if other is None:
            return None
        d = other.device_bytes - ctx.est.device_bytes
        return f"saves {gib(d)} GiB" if rp.grad_checkpointing else f"on would save {gib(-d)} GiB"
    if concept == "weight_dtype":
        return figures(ctx, "weights")
    if concept in ("quant_bits", "quant_type"):
        return figures(ctx, "weights", "quant_constants")
    if concept in ("lora_r", "lora_targets", "peft_method"):
        return figures(ctx, "adapters")
    if concept == "loss_impl":
        return figures(ctx, "logits")
    if concept == "alloc_conf":
        return figures(ctx, "allocator")
    if concept == "attn_impl":
        return figures(ctx, "activations")
    if concept == "gpu_name":
        return f"{usable_text(rp.gpu.usable_gib)} GiB usable"
    return None


def inlay_labels(ctx: Context) -> list[tuple[Span, str]]:
    """(entry span, label) for the memory-relevant lines of this document; one label per line."""
    by_line: dict[int, tuple[Span, list[str]]] = {}
    for concept, span in entries_in(ctx.plan, ctx.path):
        try:
            label = _inlay(ctx, concept)
        except Exception:
            label = None
        if not label:
            continue
        line = span.end_line
        if line in by_line:
            if label not in by_line[line][1]:  # two settings of one line (load_in_4bit: bits and type)
                by_line[line][1].append(label)
        else:
            by_line[line] = (span, [label])
    return [(span, " · ".join(labels)) for span, labels in by_line.values()]


def lens_title(ctx: Context) -> str:
    """The code lens on the model line: "peak 71.3 / 39.4 GiB on A100-40GB"."""
    e, rp = ctx.est, ctx.rp
    title = f"peak {peak_mark(e)}{gib(e.device_bytes)} / {usable_text(rp.gpu.usable_gib)} GiB on {gpu_label(rp)}"
    if e.is_approximate:
        title += f" (approximate: {len(e.approximate)} reason{'s' if len(e.approximate) > 1 else ''}, see the hover)"
    if ctx.gpu_assumed:
        title += f" ({gpu_assumption(ctx.sources, short=True)})"
    if not e.fits:
        title += " ✗ does not fit"
    elif e.tight:
        title += " ⚠ tight"
    if ctx.exact_gib is not None:
        title += f" · exact: {ctx.exact_gib:.1f} GiB"
    if e.calibration is not None:
        title += f" · calibrated ×{e.calibration.factor:.2f} ({e.calibration.source})"
    return title
