"""The DPO step's estimate against a fake-tensor trace of the same step's memory order.

trl 1.16.0 trainer/dpo_trainer.py `_compute_loss`: chosen and rejected are concatenated into one batch of 2·b
sequences, the policy runs forward on it, then the reference runs under torch.no_grad() on the same batch (a frozen
second copy, or the policy with its adapters disabled), then backward. This script runs that order with vramlens'
synthetic model (vramlens.trace: HF-style Llama blocks, the loss the plan's framework uses) under FakeTensorMode and
the live-bytes tracker, and prints the traced peak beside the estimate. It checks the estimator's DPO terms — twice
the sequences, the reference copy's weights, the reference forward's transient on top of the held activations — not
TRL's own modelling code (the loss is the synthetic model's cross-entropy, not TRL's fused log-prob head).

    python benchmarks/dpo_trace_vs_estimate.py
"""

from __future__ import annotations

import sys

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from vramlens.estimate import GIB, _phases
from vramlens.formats import parse_document
from vramlens.resolve import Settings, resolve
from vramlens.trace import model as M
from vramlens.trace import optim as O
from vramlens.trace.config import step_config
from vramlens.trace.tracker import LiveBytes

RECIPE = """model_name_or_path: {model}
dtype: bfloat16
bf16: true
beta: 0.1
max_length: {seq}
max_prompt_length: 256
per_device_train_batch_size: {batch}
gradient_checkpointing: {gc}
optim: adamw_torch_fused
{extra}output_dir: out
"""

ROWS = [
    ("Llama-3.2-1B full", "meta-llama/Llama-3.2-1B", 1024, 2, "false", ""),
    ("Llama-3.2-1B full ckpt", "meta-llama/Llama-3.2-1B", 2048, 2, "true", ""),
    ("Llama-3.2-1B LoRA", "meta-llama/Llama-3.2-1B", 1024, 2, "false", "use_peft: true\nlora_r: 16\n"),
    ("Qwen2.5-1.5B full ckpt", "Qwen/Qwen2.5-1.5B", 2048, 1, "true", ""),
]


def trace(rp) -> tuple[int, int]:
    """(forward-backward peak incl. the optimizer state, optimizer-step peak) of the DPO step, in bytes."""
    cfg = step_config(rp.with_changes(micro_batch=rp.micro_batch * rp.sequences_per_example, grad_accum=1))
    tr = LiveBytes()
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    policy = M.build_meta(cfg)
    ref = M.build_meta(cfg) if rp.reference == "copy" else None
    with fake, tr:
        tr.set_phase("build")
        policy = M.materialize(policy, "cpu", False)
        if ref is not None:
            ref = M.materialize(ref, "cpu", False)
            ref.requires_grad_(False)
        trainable = [p for p in policy.parameters() if p.requires_grad]
        batch = M.make_batch(cfg, "cpu")
        optimizer = O.make_optimizer(cfg, trainable)
        peaks = []
        for _ in range(2):  # the second step has the optimizer state of the first
            tr.reset_peak()
            tr.next_phase("fwd")
            out = policy(batch["ids"], batch["labels"])
            loss = out["loss"]
            logits = out["logits"] if cfg.holds_logits else None
            del out
            with torch.no_grad():  # the reference after the policy, as _compute_loss runs them
                if ref is not None:
                    r = ref(batch["ids"], batch["labels"])
                else:
                    policy.eval()
                    r = policy(batch["ids"], batch["labels"])
                    policy.train()
                ref_loss = r["loss"].detach()
                del r
            tr.next_phase("bwd-loss")
            (loss + 0.0 * ref_loss).backward()
            del loss, logits, ref_loss
            fb = tr.peak
            tr.reset_peak()
            tr.next_phase("opt")
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            peaks.append((fb, tr.peak))
    return peaks[-1]


def main() -> int:
    print(f"{'setting':<26} {'trace GiB':>9} {'estimate GiB':>12} {'est÷trace':>9}  estimate phase")
    for label, model, seq, batch, gc, extra in ROWS:
        text = RECIPE.format(model=model, seq=seq, batch=batch, gc=gc, extra=extra)
        plan = parse_document(text, "dpo/config.yaml").plan
        rp = resolve(plan, Settings(gpu="H100-80GB")).resolved.with_changes(correction=1.0)
        totals, _, _, _ = _phases(rp)
        phase = max(totals, key=totals.get)
        fb, op = trace(rp)
        traced = max(fb, op)
        print(f"{label:<26} {traced / GIB:>9.2f} {totals[phase] / GIB:>12.2f} {totals[phase] / traced:>9.3f}  {phase}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
