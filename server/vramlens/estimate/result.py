"""What the estimator returns: peak memory at three levels, the breakdown, the limits that fit."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from vramlens.plan import Unmodelled
from vramlens.resolved import Calibration
from vramlens.settings import DEFAULT_HEADROOM

GIB = 1 << 30

# Component keys, in display order. `optimizer_paged`, `allocator` and `cuda_context` are outside torch's
# allocated counter (the first lives in CUDA unified memory).
COMPONENTS = (
    "weights",
    "quant_constants",
    "adapters",
    "gradients",
    "optimizer",
    "optimizer_paged",
    "reference",
    "reward_model",
    "value_model",
    "teacher",
    "generation",
    "activations",
    "logits",
    "teacher_logits",
    "temporaries",
    "buffers",
    "allocator",
    "cuda_context",
)

COMPONENT_LABELS = {
    "weights": "weights",
    "quant_constants": "quantization constants",
    "adapters": "adapter weights",
    "gradients": "gradients",
    "optimizer": "optimizer state",
    "optimizer_paged": "optimizer state (paged, unified memory)",
    "activations": "activations",
    "logits": "logits and loss",
    "reference": "reference model (frozen copy)",
    "reward_model": "reward model",
    "value_model": "value model (weights, gradients, optimizer)",
    "teacher": "teacher model",
    "generation": "generation (KV cache / vLLM)",
    "teacher_logits": "teacher logits",
    "temporaries": "temporaries",
    "buffers": "communication buffers",
    "allocator": "allocator cache (reserved − allocated)",
    "cuda_context": "CUDA context and workspaces",
}


class Throughput(BaseModel):
    """How fast the step runs (vramlens.estimate.throughput)."""

    model_config = ConfigDict(frozen=True)

    tokens_per_s: float  # per GPU: tokens of the micro-batches (every sequence through the policy)
    run_tokens_per_s: float  # the whole run: per GPU × data-parallel ranks
    step_s: float  # one optimizer step: grad_accum micro-steps, the optimizer, unhidden communication
    mfu: float  # model FLOPs (forward + backward, no recompute) ÷ (time × dense peak)
    bound: str  # what limits the step: compute, memory, communication, overhead, generation, offload
    parts_s: dict[str, float]  # seconds per optimizer step by part

    def as_json(self) -> dict:
        return {
            "tokens_per_s": round(self.tokens_per_s, 1),
            "run_tokens_per_s": round(self.run_tokens_per_s, 1),
            "step_s": round(self.step_s, 4),
            "mfu": round(self.mfu, 4),
            "bound": self.bound,
            "parts_s": {k: round(v, 4) for k, v in self.parts_s.items()},
        }


class Estimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    allocated_bytes: int  # torch.cuda.max_memory_allocated at the peak
    reserved_bytes: int  # torch.cuda.max_memory_reserved (caching allocator)
    device_bytes: int  # what nvidia-smi shows for the process (+ CUDA context)
    low_bytes: int  # plausible range of device_bytes
    high_bytes: int
    components: dict[str, int]  # breakdown at the peak phase, summing to device_bytes
    phase: str  # "forward-backward", "optimizer-step", "recompute", "end-of-backward",
    # "loss-forward", "reference-forward", "generation", "teacher-forward",
    # "forward" (the last block's attention: DeBERTa-v2), "dora-weight-norm", "mixer-backward" (Jamba's scan),
    # "expert-dispatch" (an expert-parallel all-gather and all-reduce), "critic-update" (a critic's own step)
    phases: dict[str, int]  # allocated bytes at each candidate phase
    usable_bytes: int  # GPU memory a process can use
    fits: bool
    headroom_bytes: int  # usable − device (negative when it does not fit)
    max_micro_batch: int | None  # largest micro batch that fits (None when not even 1 fits)
    max_seq_len: int | None  # longest sequence that fits at this micro batch
    params_total: int
    params_trainable: int
    activation_bytes_per_sample: int  # saved activations + logits per extra sample, for "each +1 ≈" hovers
    headroom_fraction: float = (
        DEFAULT_HEADROOM  # the plan's headroom setting: below this share of usable memory a fit is tight
    )
    assumptions: tuple[str, ...] = ()
    objective: str = "sft"  # what the step optimises (ResolvedPlan.objective)
    throughput: Throughput | None = None  # speed of the step; None when the GPU's speed is not known
    calibration: Calibration | None = None  # the local trace/probe that scaled this estimate; None: the formulas alone
    unmodelled: tuple[Unmodelled, ...] = ()  # settings read that the estimate does not model (ResolvedPlan.unmodelled)
    approximate: tuple[str, ...] = ()  # why the figure is approximate (ResolvedPlan.approximate and the trace's)
    # when not even micro batch 1 fits: the phase that peaks then, with its allocated bytes (an evaluation batch or a
    # generation the micro batch does not bound can be what overflows)
    peak_at_one: tuple[str, int] | None = None

    def gib(self, name: str) -> float:
        return getattr(self, name) / GIB

    @property
    def is_approximate(self) -> bool:
        return bool(self.approximate)

    def not_even_one(self, seq_len: int) -> str:
        """Why not even micro batch 1 fits, for every view: the phase that then peaks, when it is not the step's own
        forward-backward."""
        text = f"even micro batch 1 does not fit at sequence length {seq_len:,}"
        if self.peak_at_one is not None and self.peak_at_one[0] not in ("forward-backward", "recompute"):
            phase, allocated = self.peak_at_one
            text += f": at micro batch 1 the {phase} phase peaks, {allocated / GIB:.1f} GiB allocated"
        return text

    @property
    def tight(self) -> bool:
        return self.fits and self.headroom_bytes < self.headroom_fraction * self.usable_bytes
