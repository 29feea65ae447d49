"""The LM head and the loss, in the four ways a training loop computes them.

- standard: Hugging Face `ForCausalLMLoss` (transformers >= 4.46): the 16-bit logits are upcast to fp32 and
  the labels are shifted by padding, not by slicing the logits.
- chunked: torchtune's `CEWithChunkedOutputLoss`: the LM head runs on 8 chunks of the hidden states, each
  chunk's logits are upcast and passed to cross-entropy with reduction="sum".
- litgpt: litgpt's fine-tuning loop (litgpt/finetune/lora.py `fit`, litgpt/model.py `GPT.forward`,
  litgpt/utils.py `chunked_cross_entropy`): `model(ids, lm_head_chunk_size=128)` returns the list of
  `lm_head(x_i)` for `x_i in x.split(128, dim=1)` (each soft-capped for Gemma-2), the loop cuts the last
  position off the last chunk, and cross-entropy runs per chunk with reduction="none" in the logits' dtype
  before `torch.cat(...).sum() / n`. The loop keeps the list referenced through backward. The model runs
  inside Lightning Fabric, whose `_FabricModule.forward` hands the output to `precision.convert_output`, which
  casts every floating tensor to `torch.get_default_dtype()` (lightning/fabric/wrappers.py; plugins/precision
  half.py and bitsandbytes.py): the 16-bit chunks become fp32 once the whole list is made, so the held
  chunks and the cross-entropy are fp32 (`fabric_fp32=False` keeps them in the model's dtype).
- fused: a stand-in for Liger's fused linear cross-entropy (`ops/fused_linear_cross_entropy.py`). The real
  kernel is Triton; this function allocates what it allocates: a zero `grad_input` like the hidden states,
  a zero `grad_weight` like the LM-head weight when it is trained, an fp32 per-token loss, and one chunk of
  logits at a time (chunk = next_power_of_2(ceil(BT / ceil(V / H))) rows, so a chunk is about BT × H),
  whose softmax gradient is formed in place. Backward returns the saved gradients.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

CHUNKS = 8  # torchtune's default num_output_chunks
LITGPT_CHUNK = 128  # litgpt's finetune scripts: model(input_ids, lm_head_chunk_size=128)


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    return F.pad(labels, (0, 1), value=-100)[:, 1:]


def standard_loss(logits: torch.Tensor, labels: torch.Tensor, softcap: float | None = None) -> torch.Tensor:
    if softcap is not None:  # Gemma-2 final_logit_softcapping
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.float()
    target = shift_labels(labels).reshape(-1)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), target, ignore_index=-100)


def chunked_loss(hidden: torch.Tensor, head, labels: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    logits = [head(chunk) for chunk in hidden.chunk(CHUNKS, dim=1)]
    targets = [t.reshape(-1) for t in shift_labels(labels).chunk(CHUNKS, dim=1)]
    total = 0.0
    for chunk, target in zip(logits, targets):
        chunk = chunk.reshape(-1, chunk.size(-1))
        total = total + F.cross_entropy(chunk.float(), target, ignore_index=-100, reduction="sum")
    return total / labels.numel(), logits


def litgpt_loss(
    hidden: torch.Tensor, head, labels: torch.Tensor, softcap: float | None = None, fabric_fp32: bool = True
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    def clamp(chunk):  # litgpt `do_softcapping`, applied as each chunk is made
        return chunk if softcap is None else torch.tanh(chunk / softcap) * softcap

    logits = [clamp(head(x_i)) for x_i in hidden.split(LITGPT_CHUNK, dim=1)]
    if fabric_fp32:  # Fabric's convert_output, built while the model's list is alive
        logits = [chunk.float() for chunk in logits]
    logits[-1] = logits[-1][..., :-1, :]
    targets = labels[..., 1:]
    logit_chunks = [chunk.reshape(-1, chunk.size(-1)) for chunk in logits]
    target_chunks = [t.reshape(-1) for t in targets.split(logits[0].size(1), dim=1)]
    loss_chunks = [
        F.cross_entropy(chunk, t, ignore_index=-100, reduction="none") for chunk, t in zip(logit_chunks, target_chunks)
    ]
    # litgpt divides by the count of unmasked targets (a data-dependent scalar); every target counts here
    return torch.cat(loss_chunks).sum() / max(1, targets.numel()), logits


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


class FusedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target):
        BT, H = hidden.shape
        V = weight.shape[0]
        inc = -(-V // H)
        chunk = min(_next_power_of_2(-(-BT // inc)), BT)
        grad_input = torch.zeros_like(hidden)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss_1d = torch.zeros(BT, dtype=torch.float32, device=hidden.device)
        for start in range(0, BT, chunk):
            end = min(start + chunk, BT)
            x = hidden[start:end]
            logits = x @ weight.t()  # chunk × V in the input dtype
            logits.sub_(logits.amax(-1, keepdim=True))  # the kernel turns logits into d(loss)/d(logits) in place
            logits.exp_()
            logits.div_(logits.sum(-1, keepdim=True))
            grad_input[start:end] = logits @ weight
            if grad_weight is not None:
                grad_weight.addmm_(logits.t(), x)
            del logits
        ctx.save_for_backward(grad_input, grad_weight if grad_weight is not None else torch.empty(0))
        ctx.has_weight_grad = grad_weight is not None
        return loss_1d.sum() / BT

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors  # grad_output is 1 for a training loss: no rescale
        return grad_input, (grad_weight if ctx.has_weight_grad else None), None


def fused_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    h = hidden.reshape(-1, hidden.size(-1))
    if h.dtype != weight.dtype:
        h = h.to(weight.dtype)
    return FusedLinearCE.apply(h, weight, shift_labels(labels).reshape(-1))
