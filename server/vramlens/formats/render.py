"""Plan changes → minimal text edits in the document's own format and spelling.

    render_change(text, plan, {"micro_batch": 4, "grad_accum": 8}) -> RenderResult | None

`changes` maps plan concepts to new normalized values. Existing keys are edited in place (quotes,
comments and indentation kept); missing keys are added in the format's spelling next to a related
key. YAML/JSON formats are written by `formats.render_yaml`, Python/shell/Markdown documents by
`formats.render_code`. The result is None when no writer knows the document's format; a change the
format cannot express comes back as a RenderResult without edits whose `note` says where to make it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from vramlens.plan import Origin, Span, TrainingPlan
from vramlens.text import apply_edits  # noqa: F401  (edits are applied by vramlens.text; callers find it here too)


@dataclass
class TextEdit:
    """Replace `span` (0-based, end exclusive, in `span.file`) with `new_text`."""

    span: Span
    new_text: str


@dataclass
class RenderResult:
    edits: list[TextEdit] = field(default_factory=list)
    note: str | None = None  # what could not be written here, and where to do it instead


Renderer = Callable[[str, TrainingPlan, dict[str, Any]], "RenderResult | None"]

# plan.format -> writer; render_yaml registers the YAML/JSON formats on import
RENDERERS: dict[str, Renderer] = {}
CODE_FORMATS = ("python", "shell", "markdown", "notebook")


def render_change(text: str, plan: TrainingPlan, changes: dict[str, Any]) -> RenderResult | None:
    """Text edits that make `changes` in this document (see the module docstring)."""
    if not changes:
        return RenderResult([])
    said = plan.micro_batch
    if "micro_batch" in changes and said is not None and said.origin == Origin.DERIVED and not said.per_unit:
        # computed from other settings (torchtune PPO: ppo_batch_size ÷ gradient_accumulation_steps): no key holds it
        return RenderResult([], note=f"the micro-batch is computed from other settings ({said.note}): change those")
    if plan.format in CODE_FORMATS:
        from vramlens.formats.render_code import render_change_code  # imports this module: not at the top

        return render_change_code(text, plan, changes)
    from vramlens.formats import render_yaml  # noqa: F401  (registers the YAML/JSON writers)

    writer = RENDERERS.get(plan.format)
    if writer is None:
        return None
    return writer(text, plan, changes)
