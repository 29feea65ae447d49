"""Optimizer lookup: every spelling of an optimizer found in training configs -> its state-memory model.

Spellings are compared ignoring case, "_", "-" and spaces ("adamw_bnb_8bit" == "AdamW-BNB-8bit"). Dotted class paths
(`bitsandbytes.optim.PagedAdamW8bit`, `torch.optim.AdamW`) are catalog aliases. DeepSpeed's `optimizer.type` values
mean DeepSpeed's own fused/CPU optimizers, so a caller reading a DeepSpeed config passes `context="deepspeed"` and
"AdamW" resolves to `deepspeed_adamw` rather than torch's AdamW.
"""

from __future__ import annotations

import difflib
import functools
import re

from vramlens.knowledge.data import index_spellings, load
from vramlens.knowledge.schema import OptimizerSpec

_IGNORED = re.compile(r"[\s_\-]+")


def _norm(text: str) -> str:
    return _IGNORED.sub("", text.strip().lower())


@functools.cache
def _index() -> tuple[dict[str, OptimizerSpec], dict[str, OptimizerSpec]]:
    """(by normalized spelling, by canonical name)."""
    specs = [
        OptimizerSpec(**{**e, "aliases": tuple(e.get("aliases", ()))}) for e in load("optimizers.yaml")["optimizers"]
    ]
    by_spelling = index_spellings(specs, lambda s: s.name, _norm, "optimizers.yaml")
    return by_spelling, {s.name: s for s in specs}


def lookup_optimizer(text: str, context: str | None = None) -> OptimizerSpec | None:
    """The spec for an optimizer spelling (HF `optim`, axolotl, torchtune class path, bnb class, ...); None if unknown.

    `context="deepspeed"` reads bare type names the way a DeepSpeed JSON means them.
    """
    by_spelling, _ = _index()
    if context and (spec := by_spelling.get(_norm(f"{context}:{text}"))):
        return spec
    return by_spelling.get(_norm(text))


def optimizer_by_name(name: str) -> OptimizerSpec | None:
    """The catalog entry with this canonical name (e.g. "paged_adamw_8bit")."""
    return _index()[1].get(name)


def all_optimizer_names() -> tuple[str, ...]:
    """Canonical names of every catalog optimizer (for completion)."""
    return tuple(_index()[1])


def all_optimizers() -> tuple[OptimizerSpec, ...]:
    """Every catalog optimizer."""
    return tuple(_index()[1].values())


@functools.cache
def hf_names() -> tuple[str, ...]:
    """The values transformers' `TrainingArguments(optim=...)` accepts (TRL, LLaMA-Factory and axolotl too)."""
    return tuple(n for spec in all_optimizers() for n in spec.hf_names)


@functools.cache
def axolotl_names() -> tuple[str, ...]:
    """The values axolotl's `optimizer` accepts: transformers' and its own."""
    return hf_names() + tuple(n for spec in all_optimizers() for n in spec.axolotl_names)


@functools.cache
def class_paths() -> tuple[str, ...]:
    """Every class path a torchtune `_component_` or litgpt `class_path` is known to name."""
    return tuple(c for spec in all_optimizers() for c in spec.class_paths)


def class_path(name: str) -> str | None:
    """The class a torchtune/litgpt config names for an optimizer (its first class path). A torch optimizer whose
    name means the fused implementation (`adamw_torch_fused`) is its family's torch class, written with
    `fused: True`."""
    spec = lookup_optimizer(name)
    if spec is None:
        return None
    if spec.class_paths:
        return spec.class_paths[0]
    if spec.library == "torch" and spec.default_impl == "fused":
        base = next(
            (
                s
                for s in all_optimizers()
                if s.library == "torch" and s.family == spec.family and s.class_paths and s.default_impl == "foreach"
            ),
            None,
        )
        return base.class_paths[0] if base is not None else None
    return None


def eight_bit_variant(family: str, paged: bool) -> OptimizerSpec | None:
    """The bitsandbytes 8-bit optimizer of a family that transformers can name, paged or not
    ("adamw", False -> adamw_bnb_8bit)."""
    return next(
        (
            s
            for s in all_optimizers()
            if s.library == "bitsandbytes" and s.family == family and s.eight_bit and s.paged == paged and s.hf_names
        ),
        None,
    )


def suggest_optimizer(text: str, limit: int = 3) -> list[str]:
    """Canonical names closest to an unknown spelling: "adamw_8bit_bnb" -> ["adamw_bnb_8bit", ...]."""
    by_spelling, _ = _index()
    close = difflib.get_close_matches(_norm(text), list(by_spelling), n=limit * 4, cutoff=0.6)
    return list(dict.fromkeys(by_spelling[c].name for c in close))[:limit]
