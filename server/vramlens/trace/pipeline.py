"""Pipeline parallelism: one pipeline rank's training step, as torchtitan runs it on torch's own pipelining, traced on
one CPU process.

The model is the real-library backend's (`trace.hf`: transformers' causal LM), cut into stages as torchtitan cuts
its Llama (torchtitan b5bcd76 torchtitan/distributed/pipeline_parallel.py `_generate_llm_fqn_per_model_part`: the
embeddings and the output modules each weigh one layer by default, `pipeline_parallel_first_stage_less_layers` =
`pipeline_parallel_last_stage_less_layers` = 1; `_split_module` keeps the stage's modules and sets the others to
None): the first stage runs the embeddings and its layers, the last its layers, the final norm and the LM head, and
the schedule's loss (torchtitan components/loss.py `cross_entropy_loss`: `cross_entropy(pred.float(), labels,
reduction="sum")`) per micro-batch. The rank's stage is a `PipelineStage` with its input and output shapes given
(static metadata), run by `ScheduleGPipe`, `Schedule1F1B` or `ScheduleInterleaved1F1B` over M micro-batches with
`scale_grads=False` and `return_outputs=False`, as torchtitan builds and steps it (`_build_pipeline_schedule`;
trainer.py `pp_forward_backward_step`), then the plan's optimizer steps over the rank's parameters. Checkpointing
is transformers' own per layer (non-reentrant `torch.utils.checkpoint`), as torchtitan's full activation
checkpointing wraps each block (torchtitan/distributed/activation_checkpoint.py, `checkpoint_wrapper`).

The process group is torch's fake one (world = pp, this process the traced rank): its point-to-point sends and
receives return at once without sending anything (torch 2.14 `FakeProcessGroup`), so the rank runs its whole
schedule without peers; every buffer they write into is still allocated by the stage (torch 2.14
torch/distributed/pipelining/stage.py `_setup_forward_recv_info`: one activation receive buffer per micro-batch on a
stage that is not the first; `_create_grad_recv_info`: one gradient receive buffer per micro-batch on a stage that
is not the last), and the schedule decides the static metadata locally under a fake group (schedules.py
`_initialize_stages`). Nothing is patched. The received activations are whatever the buffer held (zeros on real
CPU tensors): the step's allocations do not depend on the values.

With one stage (pp = 1) the step is torchtitan's without pipeline parallelism: the whole model's forward, the loss,
the logits dropped, the backward, once per micro-batch (trainer.py `_forward_backward_body`), the reference a
pipeline rank is compared with.

The step runs under fake tensors like the engine's traces, or on real CPU tensors at small shapes as the check.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from vramlens.trace import hf
from vramlens.trace import optim as O
from vramlens.trace.config import StepConfig
from vramlens.trace.hf import DTYPES
from vramlens.trace.sharded import fake_process_group
from vramlens.trace.tracker import LiveBytes, by_category

SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B")


def stage_layers(layers: int, stages: int, input_weight: int = 1, output_weight: int = 1) -> list[list[int]]:
    """The decoder layers of each of `stages` stages (torchtitan `_generate_llm_fqn_per_model_part`): the embeddings
    count as `input_weight` layers on the first stage and the norm and output as `output_weight` on the last, and
    the effective layers are split evenly, the first `extra` stages one more."""
    if stages == 1:
        return [list(range(layers))]
    effective = layers + input_weight + output_weight
    per, extra = divmod(effective, stages)
    out, cur = [], 0
    for s in range(stages):
        n = per + (s < extra) - (input_weight if s == 0 else 0) - (output_weight if s == stages - 1 else 0)
        take = list(range(cur, min(cur + max(n, 0), layers)))
        cur += len(take)
        out.append(take)
    return out


def rank_stages(rank: int, pp: int, schedule: str) -> list[int]:
    """The stage indices on pipeline rank `rank`: one for GPipe and 1F1B, two looped for Interleaved1F1B
    (torchtitan `_get_pp_rank_to_stage_indices_mapping`, style "loop": `pp_rank + s * pp_degree`; two stages per
    rank by default, `_get_pipeline_metadata`)."""
    per_rank = 2 if schedule == "Interleaved1F1B" else 1
    return [rank + s * pp for s in range(per_rank)]


class StageModule(nn.Module):
    """One stage of a transformers Llama-like causal LM: the embeddings on the first, the stage's decoder layers, the
    final norm and the LM head on the last. The layers are called as the model calls them (transformers 5.24
    models/llama/modeling_llama.py `LlamaModel.forward`: rotary embeddings of the positions, no mask, SDPA's causal
    kernel), the stage's input is the previous stage's hidden states."""

    def __init__(self, causal_lm: nn.Module, layers: list[int], first: bool, last: bool):
        super().__init__()
        base: Any = causal_lm.model
        self.embed_tokens = base.embed_tokens if first else None
        self.layers = nn.ModuleList([base.layers[i] for i in layers])
        self.rotary_emb = base.rotary_emb
        self.norm = base.norm if last else None
        self.lm_head = causal_lm.lm_head if last else None

    def forward(self, x):
        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        pe = self.rotary_emb(h, position_ids=pos)
        for layer in self.layers:
            h = layer(h, attention_mask=None, position_embeddings=pe, position_ids=pos)
        if self.norm is not None:
            h = self.lm_head(self.norm(h))
        return h


def unsupported(cfg: StepConfig) -> str | None:
    """Why the pipeline trace cannot run the plan's step, or None."""
    a = cfg.arch
    if a.block != "decoder" or a.is_moe or a.family not in ("llama", "mistral", "qwen2", "qwen3"):
        return "the pipeline trace cuts a Llama-like decoder (embeddings, decoder layers, norm, LM head)"
    if a.tied_embeddings:
        return "tied embeddings across pipeline stages are not traced"
    if cfg.peft != "none" or cfg.quant_bits is not None:
        return "the pipeline trace runs full fine-tunes of 16-bit weights"
    if cfg.autocast:
        return "the pipeline trace computes in the weights' dtype (no autocast)"
    if not torch.distributed.is_available():
        return "this torch build has no torch.distributed"
    return hf.unsupported(cfg)


def _schedule_class(schedule: str):
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    return {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B, "Interleaved1F1B": ScheduleInterleaved1F1B}[schedule]


def run(cfg: StepConfig, pp: int, rank: int, microbatches: int, schedule: str = "1F1B", real: bool = False) -> dict:
    """Trace (or, with real=True, execute on CPU) one step of pipeline rank `rank` of `pp`, with `microbatches`
    micro-batches of `cfg.micro_batch` sequences (given apart: a step config runs two at most); returns the rank's
    peak allocated bytes and its parts. The peak is the steady state's, as the engine counts it: the larger of the
    forward-backward's peak with the optimizer state the first step created, and the optimizer step's peak."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of {SCHEDULES}")
    from torch.distributed.pipelining import PipelineStage

    torch.manual_seed(0)
    fake_process_group(pp, rank)
    group = torch.distributed.group.WORLD
    ids_of = rank_stages(rank, pp, schedule)
    n_stages = pp * len(ids_of)
    split = stage_layers(cfg.arch.layers, n_stages)
    step = hf.build_meta(cfg)  # transformers' model on meta (checkpointing enabled on its layers when the plan says)
    dtype = DTYPES[cfg.param_dtype]
    m, mb, seq, h, vocab = microbatches, cfg.micro_batch, cfg.seq_len, cfg.arch.hidden, cfg.arch.vocab

    fake: contextlib.AbstractContextManager = contextlib.nullcontext()
    if not real:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake = FakeTensorMode(allow_non_fake_inputs=True)
    tr = LiveBytes()
    with fake, tr:
        tr.set_phase("build")
        step = hf.materialize(step, "cpu", real)
        lm = step.model
        modules = [StageModule(lm, split[i], i == 0, i == n_stages - 1) for i in ids_of]
        # the layers, embeddings and head of the other ranks' stages are dropped: freed before the step
        del lm.model.layers, lm.model.embed_tokens, lm.lm_head, lm.model.norm
        params: list[torch.Tensor] = [p for mod in modules for p in mod.parameters()]
        for p in params:
            tr.label([p], "weights")
        ids = torch.randint(0, vocab, (m * mb, seq))

        def meta(i: int, output: bool) -> torch.Tensor:
            """Stage `i`'s input (token ids on the first) or output (logits on the last), one micro-batch: the static
            metadata a stage needs under a fake group; hidden states carry gradients between stages."""
            if i == 0 and not output:
                return torch.empty((mb, seq), dtype=torch.long, device="meta")
            if i == n_stages - 1 and output:
                return torch.empty((mb, seq, vocab), dtype=dtype, device="meta")
            return torch.empty((mb, seq, h), dtype=dtype, device="meta", requires_grad=True)

        def loss_fn(pred, labels):
            # torchtitan `cross_entropy_loss` (sum over the micro-batch's tokens), divided by the step's tokens
            flat = pred.flatten(0, 1).float()
            return nn.functional.cross_entropy(flat, labels.flatten(0, 1), reduction="sum") / (m * mb * seq)

        optimizer = O.make_optimizer(cfg, params)
        tr.reset_peak()
        tr.set_phase("fwd")
        if pp == 1:
            # torchtitan's step without pipeline parallelism (trainer.py `_forward_backward_body`: `pred =
            # model_parts[0](inputs)`, `loss = self.loss_fn(pred, labels)`, `del pred`, `loss.backward()`), once per
            # micro-batch (gradient accumulation)
            for chunk in ids.chunk(m):
                pred = modules[0](chunk)
                loss = loss_fn(pred, chunk)
                del pred
                loss.backward()
                del loss
        else:
            stages = [
                PipelineStage(
                    mod,
                    i,
                    n_stages,
                    torch.device("cpu"),
                    input_args=meta(i, False),
                    output_args=meta(i, True),
                    group=group,
                )
                for mod, i in zip(modules, ids_of)
            ]
            cls = _schedule_class(schedule)
            kw = dict(n_microbatches=m, loss_fn=loss_fn, scale_grads=False)
            sched = cls(stages, **kw) if schedule == "Interleaved1F1B" else cls(stages[0], **kw)
            args = (ids,) if any(s.is_first for s in stages) else ()
            targets = {"target": ids, "losses": []} if any(s.is_last for s in stages) else {}
            sched.step(*args, return_outputs=False, **targets)
        fb_peak, fb_recs = tr.peak, tr.peak_records()
        tr.label([p.grad for p in params if p.grad is not None], "gradients")
        tr.reset_peak()
        tr.set_phase("opt")
        optimizer.step()
        tr.label(O.state_tensors(optimizer), "optimizer")
        op_peak = tr.peak
        optimizer.zero_grad(set_to_none=True)
        live = by_category(tr.live_records(), _classify)
    state = live.get("optimizer", 0)
    parts = by_category(fb_recs, _classify)
    parts["optimizer"] = parts.get("optimizer", 0) + state
    return {
        "peak_bytes": int(max(fb_peak + state, op_peak)),
        "phases": {"forward-backward": int(fb_peak + state), "optimizer-step": int(op_peak)},
        "components": {k: int(v) for k, v in parts.items() if v},
        "persistent": {k: int(v) for k, v in live.items() if v},
        "stages": ids_of,
        "layers": [split[i] for i in ids_of],
        "params": sum(p.numel() for p in params),
    }


def _classify(rec) -> str:
    if rec.cat in ("weights", "gradients", "optimizer"):
        return rec.cat
    return "buffers" if rec.phase == "build" else "activations"
