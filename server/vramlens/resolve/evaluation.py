"""Whether the run evaluates during training, and which loss its evaluation forward runs.

An evaluation pass is one more forward of the model, under `torch.no_grad()` with labels, at the evaluation batch,
while the training state stays allocated (transformers 5.24 trainer.py `evaluation_loop` → `prediction_step`).
Only a run known to evaluate gets the phase: a setting that says so, or a framework whose defaults turn it on
(`FrameworkHooks.evaluates`).
"""

from __future__ import annotations

from vramlens.resolve.common import Context, liger_loss


def evaluates(ctx: Context) -> bool:
    """Whether evaluation runs during training, by the framework's rule at the version the run uses. A sequence split
    over context/sequence-parallel ranks is not counted: the frameworks replace the loss there with their own
    sequence-parallel one (ms-swift's `sequence_parallel_size`, whose loss is not modelled in evaluation)."""
    if int(ctx.val("context_parallel") or 1) > 1:
        return False
    return ctx.hooks.evaluates(ctx.extra, ctx.defaults.release)


def eval_loss_impl(ctx: Context, loss_impl: str) -> str:
    """The loss the evaluation forward computes. Liger's fused linear cross-entropy runs only in training: its model
    forwards fuse when `self.training and labels is not None` and otherwise compute `logits = self.lm_head(...)` and
    the model's own loss (linkedin/Liger-Kernel ead96b6 src/liger_kernel/transformers/model/qwen2.py and llama.py:
    `skip_logits`), which is transformers' `ForCausalLMLoss` over the full logits. Other fused or chunked losses are
    counted as they run in training."""
    return "standard" if loss_impl == "fused" and liger_loss(ctx.plan) else loss_impl
