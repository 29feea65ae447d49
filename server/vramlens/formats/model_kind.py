"""What a reader knows of the model beyond a name: a model built whole from the file's own fields, or a run that
trains a kind of model vramlens does not estimate.

- `set_built_arch`: the file states the model's architecture field by field (NeMo AutoModel's
  `NeMoAutoModelForCausalLM.from_config` with an inline `config:`, a torchtitan flavor with routed experts), so the
  reader builds the `ModelArch` itself; the model stage (`resolve/model.py`) takes it when no model id is named.
- `set_other_kind`: the file trains something else (a diffusion transformer, a speculative-decoding draft head, an
  embedding retriever): the run is recognised, and the one message every view gives instead of an estimate names that
  kind, the value that says so, and why there is no estimate.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from vramlens.formats.settings import PlanBuilder, Setting
from vramlens.plan import IssueKind, Origin, Sourced, TrainingPlan

if TYPE_CHECKING:
    from vramlens.knowledge.schema import ModelArch

BUILT_ARCH = "model.built_arch"  # plan.extra: the ModelArch as JSON
OTHER_KIND = "model.other_kind"  # plan.extra: the message for a run that trains another kind of model


def set_built_arch(b: PlanBuilder, arch: ModelArch, where: Setting | None, note: str) -> None:
    """The run's model is `arch`, built from the file's own fields (`where` names them)."""
    # with the config.json the arch keeps for the layers no field holds (`ModelArch.hf_config_json`, which a plain
    # dump leaves out): a Nemotron-H's layer pattern and mixer sizes
    b.plan.extra[BUILT_ARCH] = Sourced(
        value=json.dumps({**arch.model_dump(mode="json"), "hf_config_json": arch.hf_config_json}),
        origin=Origin.FILE if where is not None else Origin.DEFAULT,
        key=where.key if where is not None else None,
        span=where.span if where is not None else None,
        value_span=where.value_span if where is not None else None,
        note=note,
    )
    # the vocabulary is the built model's (the model stage names a vocabulary it had to assume)
    anchor = where or Setting("model", ("model",), None)
    b.shape("vocab_size", Setting(anchor.key, anchor.path, arch.vocab, span=anchor.span, value_span=anchor.value_span))
    b.plan.read_notes.append(note)
    if where is not None and where.span is not None:
        b.plan.model_span_hint = where.span


def built_arch(plan: TrainingPlan) -> ModelArch | None:
    """The model a reader built from the file's fields (`set_built_arch`), if one did."""
    from vramlens.knowledge.schema import ModelArch

    s = plan.extra.get(BUILT_ARCH)
    if s is None or not isinstance(s.value, str):
        return None
    return ModelArch.model_validate_json(s.value)


def set_other_kind(b: PlanBuilder, where: Setting | None, kind: str, detail: str) -> None:
    """The run trains `kind` (e.g. "a diffusion model"), which vramlens does not estimate: one warning at `where` and
    the message the estimate gives instead of "the config does not name a model"."""
    message = f"training of {kind}, which vramlens does not estimate: {detail}"
    b.plan.extra[OTHER_KIND] = Sourced(
        value=message,
        key=where.key if where is not None else None,
        span=where.span if where is not None else None,
        value_span=where.value_span if where is not None else None,
    )
    b.issue(IssueKind.UNKNOWN_VALUE, message, where)


def other_kind(plan: TrainingPlan) -> str | None:
    """The message for a run that trains a kind of model vramlens does not estimate (`set_other_kind`)."""
    s = plan.extra.get(OTHER_KIND)
    return s.value if s is not None and isinstance(s.value, str) else None
