"""What a training step allocates that depends on the installed library versions, each with its source.

Pure data and comparisons: no import of the libraries themselves. The versions come from
`vramlens.environment` (settings, workspace pins, the trace interpreter's metadata, else `NEWEST`).
Each choice read from the transformers releases' own source (the wheels on PyPI):
- `loss/loss_utils.py` ForCausalLMLoss up to 4.48.x: `logits = logits.float()` then
  `shift_logits = logits[..., :-1, :].contiguous()` — a second fp32 copy of the logits while the loss runs;
  from 4.49.0 the labels are padded and shifted instead (`labels = nn.functional.pad(labels, (0, 1), ...)`).
- `integrations/sdpa_attention.py`: up to 4.53.x SDPA always calls `repeat_kv` for grouped K/V; from 4.54.0
  `use_gqa_in_sdpa` passes grouped K/V natively (`enable_gqa`) when no mask is given (torch ≥ 2.5).
- `models/gemma2/modeling_gemma2.py`: `_supports_sdpa = True` up to 4.57.x, `False` in 5.x ("sdpa does not
  support softcapping"): the model runs eager attention.
And one from torch: from 1.13 `torch.cuda` sets `CUDA_MODULE_LOADING=LAZY` unless the user set it (pytorch/pytorch
PR #86509, "[1.13] Sets CUDA_MODULE_LOADING to LAZY when not set by the user"); before, every kernel of torch's
CUDA libraries is loaded when the context is created, which makes the context itself much larger.
"""
from __future__ import annotations

# The newest releases this knowledge was checked against: what an unpinned environment is assumed to run.
NEWEST = {"transformers": "5.24.0", "peft": "0.21.2", "trl": "1.16.0", "bitsandbytes": "0.50.2",
          "accelerate": "1.15.0", "torch": "2.13.0"}

SHIFTED_LOGITS_UNTIL = (4, 49, 0)      # ForCausalLMLoss keeps a shifted fp32 copy below this
NATIVE_GQA_FROM = (4, 54, 0)           # SDPA without a mask reads grouped K/V natively from this
GEMMA2_EAGER_FROM = (5, 0, 0)          # Gemma-2 has no SDPA path from this
OWN_EAGER_ATTENTION = {"bloom"}        # families whose modelling code writes attention out (no attention interface)
LAZY_CUDA_MODULES_FROM = (1, 13, 0)    # torch loads CUDA kernels lazily from this


def parse(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string such as "4.48.1", "v5.0", "==0.13.2", "4.57.0.dev0"; None when
    it has no leading number."""
    if not version:
        return None
    parts: list[int] = []
    for piece in str(version).strip().lstrip("v=<>~^! ").split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        return None
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def at_least(version: str | None, floor: tuple[int, int, int], package: str = "transformers") -> bool:
    """Whether `version` of `package` is at or above `floor`; an unknown version counts as the newest known."""
    v = parse(version) or parse(NEWEST[package])
    return v >= floor


def loss_keeps_shifted_logits(transformers: str | None) -> bool:
    return not at_least(transformers, SHIFTED_LOGITS_UNTIL)


def sdpa_repeats_kv(transformers: str | None, masked: bool) -> bool:
    """Whether transformers' SDPA path materialises full-head K/V for grouped-query attention."""
    return masked or not at_least(transformers, NATIVE_GQA_FROM)


def cuda_modules_load_eagerly(torch: str | None) -> bool:
    """Whether torch loads every CUDA kernel when it creates the context (before 1.13; unknown counts as newest)."""
    return not at_least(torch, LAZY_CUDA_MODULES_FROM, "torch")


def attention_as_run(family: str, requested: str, transformers: str | None) -> str:
    """The attention the model runs: Gemma-2 in transformers 5 has no SDPA path (eager instead); BLOOM computes its
    ALiBi attention itself whatever is requested (transformers 5.24 models/bloom/modeling_bloom.py
    `BloomAttention.forward`: `alibi.baddbmm`, an fp32 softmax cast back, `torch.bmm`), as eager attention does."""
    if family in OWN_EAGER_ATTENTION:
        return "eager"
    if family == "gemma2" and requested == "sdpa" and at_least(transformers, GEMMA2_EAGER_FROM):
        return "eager"
    return requested
