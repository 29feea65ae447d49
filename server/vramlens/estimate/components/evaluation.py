"""The evaluation pass run during training: one forward of the evaluation batch under `torch.no_grad()`, with labels.

transformers' Trainer evaluates between optimizer steps (transformers 5.24 trainer.py `_maybe_log_save_evaluate`,
after `optimizer.step()` and `model.zero_grad()`): `evaluation_loop` → `prediction_step` runs the model's forward
with the labels under `torch.no_grad()` at `per_device_eval_batch_size`, while the weights and the optimizer state
stay allocated. Nothing is saved for backward, so the blocks hold about one block's activations at a time; the LM
head and the loss hold what the model's forward makes of them (resolve/evaluation.py: the loss the evaluation
forward runs, e.g. full logits under Liger, which fuses only in training).
"""

from __future__ import annotations

from vramlens.estimate.components.activations import activations_per_token
from vramlens.estimate.components.logits import (
    head_loss_bytes,
    logits_per_token,
    loss_forward_per_token,
    loss_parallel_per_token,
    swift_dpo_per_logit,
    swift_dpo_rows,
    trl_fused_head,
)
from vramlens.resolved import ResolvedPlan


def eval_tokens(rp: ResolvedPlan) -> tuple[int, int]:
    """Tokens of one evaluation batch on this rank, and those whose logits are computed."""
    cp = max(rp.context_parallel, 1)
    seqs = rp.eval_batch * rp.sequences_per_example
    return seqs * (rp.seq_len // cp), seqs * ((rp.logits_tokens or rp.seq_len) // cp)


def eval_forward_activations(rp: ResolvedPlan) -> int:
    """The blocks' working set in the no-grad forward: one block's activations for the evaluation batch (as a
    no-grad reference forward, `objectives.no_grad_forward`)."""
    tokens, _ = eval_tokens(rp)
    _, one_layer = activations_per_token(rp)
    return int(tokens * one_layer)


def eval_head_loss(rp: ResolvedPlan) -> int:
    """The LM head's logits and the loss's temporaries for the evaluation batch, with no gradient: the loss's forward
    as the training logits component counts it (`logits.loss_forward_per_token`), under the loss the evaluation
    forward runs (`ResolvedPlan.eval_loss_impl`). A fused loss that also fuses in evaluation holds no logits."""
    if rp.scalar_head:
        return 0
    _, logit_tokens = eval_tokens(rp)
    impl = rp.eval_loss_impl or rp.loss_impl
    e = rp if impl == rp.loss_impl else rp.with_changes(loss_impl=impl)
    if e.loss_parallel:
        return int(logit_tokens * loss_parallel_per_token(e))
    if impl == "fused":
        return 0
    if trl_fused_head(e):
        return head_loss_bytes(e, logit_tokens, backward=False)
    if impl == "chunked":
        return int(logit_tokens * logits_per_token(e))
    if swift_dpo_rows(e):  # ms-swift's DPO scores the evaluation batch as its reference forward does
        e = e.with_changes(micro_batch=rp.eval_batch)
        return int(logit_tokens * swift_dpo_per_logit(e, "reference") * e.arch.vocab)
    return int(logit_tokens * loss_forward_per_token(e))
