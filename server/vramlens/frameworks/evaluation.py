"""Whether a training run evaluates between its steps, from the settings that say so.

transformers' `eval_strategy` defaults to "no" (transformers 5.24 training_args.py); "steps" or "epoch" evaluate,
and Trainer refuses a run that sets them without an evaluation dataset (trainer.py `__init__`: "You have set
`args.eval_strategy` to ... but you didn't pass an `eval_dataset` to Trainer"). ms-swift's own rule is in
`frameworks/ms_swift/hooks.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vramlens.formats.settings import to_float

Extra = Callable[[str], Any]  # a setting the plan kept by name (`TrainingPlan.extra`), or None


def is_off(value: Any) -> bool:
    """An interval strategy (or flag) that turns the thing off: "no", false, 0."""
    return str(value).strip().strip("'\"").lower() in ("no", "none", "false", "0", "intervalstrategy.no")


def as_ratio(value: Any) -> float | None:
    """A ratio as written, quoted or not (`formats.settings.to_float`: finite numbers only)."""
    return to_float(str(value).strip().strip("'\""))


def eval_strategy(extra: Extra) -> Any:
    """`eval_strategy` as written, or its name before transformers 4.41 (`evaluation_strategy`); None when unset."""
    said = extra("eval_strategy")
    return extra("evaluation_strategy") if said is None else said


def by_generation(extra: Extra) -> bool:
    """Evaluation by generation (`predict_with_generate`, transformers 5.24 trainer_seq2seq.py `prediction_step`:
    `self.model.generate(...)`) holds a KV cache and one position's logits, not the forward of a whole batch with its
    loss: the evaluation phase is not counted for it."""
    said = extra("predict_with_generate")
    return said is not None and not is_off(said)


def trainer_evaluates(extra: Extra) -> bool:
    """transformers' Trainer: evaluation runs when `eval_strategy` is set to anything but "no"."""
    strategy = eval_strategy(extra)
    return strategy is not None and not is_off(strategy) and not by_generation(extra)
