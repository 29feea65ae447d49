"""What a rule's check sees: the document, every stage's result (each may be missing), and helpers to
place a finding on the right line and to offer fixes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from vramlens.estimate import GIB
from vramlens.estimate.result import COMPONENT_LABELS
from vramlens.fixes import replacement
from vramlens.plan import ParseIssue, Sourced, Span, TrainingPlan, iter_text_lines, text_lines
from vramlens.rules.model import Finding, Related, Rule
from vramlens.settings import DEFAULT_HEADROOM

if TYPE_CHECKING:
    from vramlens.estimate import Estimate
    from vramlens.fixes import Fix, Fixer
    from vramlens.resolve import Resolution, ResolveError
    from vramlens.resolved import ResolvedPlan

# Which settings each memory component answers to, most direct first: a finding about a component goes on
# the line of the first of these that the document writes.
COMPONENT_CONCEPTS: dict[str, tuple[str, ...]] = {
    "optimizer": ("optimizer", "optimizer_impl", "zero_stage", "offload_optimizer", "model_id"),
    "temporaries": ("optimizer", "optimizer_impl", "model_id"),
    "gradients": ("model_id", "peft_method", "zero_stage"),
    "weights": ("model_id", "weight_dtype", "quant_bits", "zero_stage"),
    "quant_constants": ("quant_bits", "quant_type", "model_id"),
    "adapters": ("peft_method", "lora_r", "lora_targets", "model_id"),
    "activations": ("micro_batch", "seq_len", "grad_checkpointing"),
    "logits": ("micro_batch", "seq_len", "loss_impl"),
    "buffers": ("dist_strategy", "zero_stage"),
    "allocator": ("alloc_conf", "micro_batch"),
    "cuda_context": ("model_id",),
}
# Components that are not one setting's doing: never the "dominant" one.
OVERHEAD = ("allocator", "cuda_context")
_OPTIMIZER_FAMILY_LABELS = {
    "adamw": "AdamW",
    "adam": "Adam",
    "sgd": "SGD",
    "lion": "Lion",
    "adafactor": "Adafactor",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "ademamix": "AdEMAMix",
    "galore": "GaLore",
    "apollo": "APOLLO",
    "lomo": "LOMO",
}


@dataclass
class RuleContext:
    text: str
    """The document's text."""
    path: str
    """The document's path (as the parser saw it; span.file of its own spans)."""
    plan: TrainingPlan | None = None
    """The parsed plan; None when the text is not a training config or could not be read."""
    parse_issues: list[ParseIssue] = field(default_factory=list)
    """Issues from parsing: the plan's own, or those that stopped parsing."""
    resolution: "Resolution | None" = None
    """Defaults applied, model and GPU looked up; None when resolving failed."""
    resolve_error: "ResolveError | None" = None
    """Why resolving failed, when it did."""
    estimate: "Estimate | None" = None
    """The peak-memory estimate; None when there is no resolution."""
    headroom: float = DEFAULT_HEADROOM
    """Fraction of usable memory to keep free."""
    framework_versions: dict[str, str] = field(default_factory=dict)
    """Versions the user declared, e.g. {"bitsandbytes": "0.45"} (an installed package, for VL008)."""
    fixer: "Fixer | None" = None
    """Makes fixes (re-estimated plan changes); None without an estimate."""
    _lines: tuple[str, list[str]] | None = field(default=None, init=False, repr=False, compare=False)

    # -- convenience -------------------------------------------------------------------------------

    @property
    def rp(self) -> "ResolvedPlan | None":
        return self.resolution.resolved if self.resolution is not None else None

    @property
    def gpu_name(self) -> str:
        return self.rp.gpu.name if self.rp is not None else "the GPU"

    @staticmethod
    def gib(n: float) -> str:
        return f"{n / GIB:.1f} GiB"

    def source(self, concept: str) -> Sourced | None:
        """Where a concept's value came from: the file, a default, a fix... (resolution first, then plan)."""
        if self.resolution is not None and concept in self.resolution.sources:
            return self.resolution.sources[concept]
        return getattr(self.plan, concept, None) if self.plan is not None else None

    def in_document(self, span: Span | None) -> bool:
        if span is None:
            return False
        if span.file in ("", self.path):
            return True
        try:
            return Path(span.file).resolve() == Path(self.path).resolve()
        except (OSError, ValueError):
            return False

    def span_of(self, *concepts: str, value: bool = False) -> Span | None:
        """The span of the first concept that is written in this document (None if none is)."""
        if self.plan is None:
            return None
        for concept in concepts:
            s = getattr(self.plan, concept, None)
            if s is None:
                continue
            span = (s.value_span or s.span) if value else (s.span or s.value_span)
            if self.in_document(span):
                return span
        return None

    @property
    def anchor(self) -> Span:
        """Where to report something that belongs to no single key: the model line, else the first line
        with content."""
        span = self.span_of("model_id")
        if span is None and self.plan is not None and self.in_document(self.plan.model_span_hint):
            span = self.plan.model_span_hint
        return span or self.first_line()

    def first_line(self) -> Span:
        for i, line in enumerate(iter_text_lines(self.text)):
            stripped = line.strip()
            if stripped and not stripped.startswith(("#", "//", "<!--")):
                return Span(
                    file=self.path,
                    start_line=i,
                    start_col=len(line) - len(line.lstrip()),
                    end_line=i,
                    end_col=len(line.rstrip()),
                )
        return Span(file=self.path, start_line=0, start_col=0, end_line=0, end_col=0)

    def where(self, *concepts: str) -> Span:
        """The span of the first concept written in this document, else the anchor."""
        return self.span_of(*concepts) or self.anchor

    @property
    def lines(self) -> list[str]:
        """The document's lines, split once per analysis (not once per finding: 60,000 findings on a
        1 MB text would split it 60,000 times)."""
        if self._lines is None or self._lines[0] is not self.text:
            self._lines = (self.text, text_lines(self.text))
        return self._lines[1]

    def clamp(self, span: Span | None) -> Span:
        """A span that lies inside this document (parse issues may point past the end or into another file)."""
        if span is not None and not self.in_document(span) and self.plan is not None:
            # a problem inside a referenced file is shown on the line that references it
            for ref in self.plan.references:
                if (
                    ref.resolved_path
                    and ref.span is not None
                    and self.in_document(ref.span)
                    and Path(ref.resolved_path) == Path(span.file)
                ):
                    span = ref.span
                    break
        if span is None or not self.in_document(span):
            return self.anchor
        lines = self.lines or [""]
        last = len(lines) - 1

        def pos(line: int, col: int) -> tuple[int, int]:
            if line > last:
                return last, len(lines[last])
            line = max(line, 0)
            return line, max(0, min(col, len(lines[line])))

        sl, sc = pos(span.start_line, span.start_col)
        el, ec = pos(span.end_line, span.end_col)
        if (el, ec) < (sl, sc):
            el, ec = sl, sc
        return Span(file=self.path, start_line=sl, start_col=sc, end_line=el, end_col=ec)

    def text_at(self, span: Span | None) -> str | None:
        """The document text a single-line span covers (None for other files or multi-line spans)."""
        if span is None or not self.in_document(span) or span.start_line != span.end_line:
            return None
        lines = self.lines
        if span.start_line >= len(lines):
            return None
        return lines[span.start_line][span.start_col : span.end_col]

    def locate_in(self, span: Span | None, needle: str) -> Span | None:
        """The span of `needle` inside a single-line `span` of this document, if it occurs there."""
        text = self.text_at(span)
        if not needle or text is None or span is None:
            return None
        i = text.find(needle)
        if i < 0:
            return None
        col = span.start_col + i
        return Span(
            file=span.file,
            start_line=span.start_line,
            start_col=col,
            end_line=span.start_line,
            end_col=col + len(needle),
        )

    @staticmethod
    def narrow(span: Span, start: int, end: int) -> Span:
        """Characters [start, end) of a single-line span."""
        return Span(
            file=span.file,
            start_line=span.start_line,
            start_col=span.start_col + start,
            end_line=span.start_line,
            end_col=span.start_col + end,
        )

    def finding(
        self,
        rule: Rule,
        message: str,
        span: Span | None = None,
        *,
        related: Iterable[Related] = (),
        fixes: Callable[[], list["Fix"]] | list["Fix"] | None = None,
        data: dict[str, Any] | None = None,
    ) -> Finding:
        return Finding(
            rule_id=rule.id,
            severity=rule.severity,
            message=message,
            span=self.clamp(span),
            related=list(related),
            name=rule.name,
            data=dict(data or {}),
            fix_source=fixes,
        )

    def issue_findings(self, rule: Rule) -> list[Finding]:
        """The parse issues of the kinds this rule owns, as findings of the rule; an issue that names a
        replacement carries it as a fix."""
        return [
            self.finding(rule, rule.format(detail=issue.message), issue.span, fixes=self._suggested(issue))
            for issue in self.parse_issues
            if issue.kind in rule.owns
        ]

    def _suggested(self, issue: ParseIssue) -> list["Fix"] | None:
        if not issue.suggestion or issue.span is None or self.text_at(issue.span) is None:
            return None
        return [
            replacement(
                issue.span, self._quoted_like(issue.span, issue.suggestion), f"Replace with `{issue.suggestion}`"
            )
        ]

    def _quoted_like(self, span: Span, text: str) -> str:
        """`text` with the quotes that the value at `span` is written with."""
        written = self.text_at(span) or ""
        if text[:1] in "'\"":
            return text
        if len(written) >= 2 and written[0] == written[-1] and written[0] in "'\"":
            return f"{written[0]}{text}{written[0]}"
        return text

    def related(self, message: str, *concepts: str) -> Related:
        return Related(span=self.where(*concepts), message=message)

    # -- memory components -------------------------------------------------------------------------

    def _needed(self, what: str, value: Any) -> Any:
        """`value` (the resolved plan, the estimate), which the helper calling this needs: the engine runs a rule
        only once what it `needs` is there (rules.engine._ready)."""
        if value is None:
            raise ValueError(f"a rule helper needs the {what}, which this file does not have")
        return value

    def optimizer_label(self) -> str:
        rp: ResolvedPlan = self._needed("resolved plan", self.rp)
        opt = rp.optimizer
        label = _OPTIMIZER_FAMILY_LABELS.get(opt.family, opt.name)
        if opt.eight_bit:
            label = f"8-bit {label}"
        return ("paged " + label) if opt.paged else label

    def component_label(self, name: str) -> str:
        if name == "optimizer" and self.rp is not None:
            master = " and fp32 master weights" if self.rp.master_weights else ""
            return f"{self.optimizer_label()} states{master}"
        if name == "temporaries" and self.estimate is not None and self.estimate.phase == "optimizer-step":
            return "optimizer-step temporaries"
        return COMPONENT_LABELS.get(name, name)

    def dominant_component(self) -> str:
        """The largest memory component at the peak (overheads excluded)."""
        est: Estimate = self._needed("estimate", self.estimate)
        parts = {k: v for k, v in est.components.items() if k not in OVERHEAD}
        return max(parts, key=lambda k: parts[k])

    def component_span(self, name: str) -> Span:
        return self.where(*COMPONENT_CONCEPTS.get(name, ("model_id",)))

    def breakdown(self, limit: int = 4) -> list[Related]:
        """The largest components at the peak, each pointing at the setting that drives it."""
        est: Estimate = self._needed("estimate", self.estimate)
        parts = sorted(((v, k) for k, v in est.components.items() if v > 0 and k not in OVERHEAD), reverse=True)[:limit]
        return [Related(self.component_span(k), f"{self.component_label(k)}: {self.gib(v)}") for v, k in parts]

    def memory_fixes(self) -> Callable[[], list["Fix"]] | None:
        """A lazy list of fixes that lower the peak: "make it fit" first, then each other change on its own (a change
        that is what "make it fit" does is not offered twice)."""
        fixer = self.fixer
        if fixer is None:
            return None
        from vramlens.fixes import distinct

        return lambda: distinct([fixer.make_it_fit(), fixer.make_it_fit_safe(), *fixer.memory_fixes()])
