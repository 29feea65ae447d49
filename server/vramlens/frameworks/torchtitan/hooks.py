"""torchtitan: its validation runs inside the training loop, after the optimizer step, with the gradients kept.

torchtitan v0.2.2 torchtitan/train.py `Trainer.train`: `if self.job_config.validation.enable and
self.validator.should_validate(self.step): self.validator.validate(self.model_parts, self.step)` after `train_step`,
whose first line is `self.optimizers.zero_grad()` — the gradients of the step just taken stay allocated through the
validation; components/validate.py `Validator.validate` runs the model's forward and loss under `@torch.no_grad()` at
`validation.local_batch_size` (read into the plan's evaluation batch by formats/torchtitan.py).
"""

from collections.abc import Callable
from typing import Any

from vramlens.formats.settings import to_bool
from vramlens.frameworks.hooks import FrameworkHooks

VALIDATION_SWITCH = "validation.enable"  # the plan's `extra` key formats/torchtitan.py keeps the switch under


class TorchtitanHooks(FrameworkHooks):
    def evaluates(self, extra: Callable[[str], Any], version: str | None) -> bool:
        """`[validation] enable = true` (default false, torchtitan v0.2.2 config/job_config.py `Validation`)."""
        return bool(to_bool(extra(VALIDATION_SWITCH)))


HOOKS = TorchtitanHooks(evaluates_with_gradients=True)
