"""What every stage of the resolver shares: the resolution it returns, the errors and assumptions it records, and the
`Context` a stage reads the plan's values through (the file's, else the framework's defaults, with provenance)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramlens.frameworks.hooks import FrameworkHooks
from vramlens.knowledge.frameworks import Defaults
from vramlens.knowledge.liger import LIGER_VERSION, liger_glu, liger_rms_norm
from vramlens.plan import Origin, Sourced, TrainingPlan, Unmodelled
from vramlens.resolved import ResolvedPlan, unmodelled_text
from vramlens.settings import Settings

DEFAULT_GPU = "A100-80GB"
# The Triton kernels a run can swap in for transformers' own (ResolvedPlan.fused_kernels)
FUSED_KERNELS = ("rms_norm", "rope", "swiglu", "cross_entropy")
# The sequence length assumed when neither the file nor its framework gives one (a plain Trainer script tokenizes
# its data itself): a common training length, never more than the model's positions.
ASSUMED_SEQ_LEN = 2048
# How a user names the GPU when none was named (shown wherever the assumed one is).
CHOOSE_GPU = (
    "choose one with `--gpu`, the `gpu` setting (`.vramlens.toml`, `[tool.vramlens]` or the editor's "
    "`vramlens.gpu`) or a `# vramlens: gpu=…` comment in the file"
)


def no_bf16_note(gpu_name: str) -> str:
    """What every view says when bf16 is asked for on a GPU without it (the CLI's assumptions, the hover).

    PyTorch 2.3 and later count emulated bf16 as supported: `torch.cuda.is_bf16_supported()` tries to create a bf16
    tensor when the compute capability is below 8.0 (torch/cuda/__init__.py, pytorch/pytorch#115924), so
    transformers' `bf16=True` check passes (training_args.py `is_torch_bf16_gpu_available`, transformers 5.x) and
    the run computes bf16 in fp32 arithmetic without tensor cores. The memory is that of bf16 (2 bytes per value);
    the speed is estimated at the GPU's fp32 rate (estimate/throughput.py `compute_rate_dtype`)."""
    return (
        f"{gpu_name} has no bf16: PyTorch emulates it (fp32 arithmetic, no tensor cores) and older versions "
        "refuse it; estimated as bf16 at the fp32 rate — fp16 runs at the fp16 tensor-core rate"
    )


def shown_compute_dtype(compute_dtype: str, gpu_bf16: bool) -> str:
    """The compute dtype as the run has it: bf16 on a GPU without bf16 units is emulated."""
    return "bf16 (emulated)" if compute_dtype == "bf16" and not gpu_bf16 else compute_dtype


class ResolveError(ValueError):
    """The plan cannot be estimated (e.g. unknown model); `concept` names the culprit."""

    def __init__(self, message: str, concept: str | None = None, suggestion: str | None = None):
        super().__init__(message)
        self.concept = concept
        self.suggestion = suggestion


class Approximate(str):
    """An assumption that makes the figure approximate (a value guessed, or a setting estimated as something it is
    not): listed with the other assumptions, and collected into `ResolvedPlan.approximate`, which every view shows.
    An assumed GPU is not one of them: the figure is exact for the GPU it names, and every view says it is assumed."""


def approximate_reasons(plan: TrainingPlan, assumptions: list[str]) -> tuple[str, ...]:
    """Why the estimate is approximate: each setting read and not modelled, then each `Approximate` assumption."""
    reasons = [unmodelled_text(u) for u in plan.unmodelled]
    reasons += [str(a) for a in assumptions if isinstance(a, Approximate)]
    return tuple(dict.fromkeys(reasons))


# Pre-quantized checkpoints whose layers are not bitsandbytes': the weights and constants are counted as stored
# (estimate/components.py `quantized_bytes_per_param`), the rest of the step as a bitsandbytes 4-bit layer's.
PREQUANTIZED_NOTES = {
    "gptq": "pre-quantized GPTQ checkpoint: packed weights and group constants counted as stored; its kernels' "
    "activations and workspace estimated as bitsandbytes 4-bit's",
    "awq": "pre-quantized AWQ checkpoint: packed weights and group constants counted as stored; its kernels' "
    "activations and workspace estimated as bitsandbytes 4-bit's",
    "aqlm": "pre-quantized AQLM checkpoint (2-bit codebooks): its weights estimated at 8 bits per parameter, its "
    "kernels as bitsandbytes'",
    # quantizers applied while loading, whose layout the estimate takes from bitsandbytes' (estimate/components/
    # parameters.py `quantized_bytes_per_param`); transformers HqqConfig: group_size 64, a 16-bit scale and zero per
    # group (hqq/core/quantize.py `BaseQuantizeConfig`) — at 4 bits bitsandbytes' 4/64 bytes per weight without
    # double quantization
    "hqq": "HQQ quantization: its packed weights and group constants estimated as bitsandbytes', its kernels too",
    "eetq": "EETQ int8 weight-only quantization: a byte per weight; its kernels estimated as bitsandbytes'",
    "quanto": "optimum-quanto quantization: weights at its bit width with bitsandbytes' constants and kernels",
}


@dataclass
class Resolution:
    resolved: ResolvedPlan
    sources: dict[str, Sourced]  # concept → where its value came from (file, default, ...)
    assumptions: list[str] = field(default_factory=list)

    @property
    def gpu_assumed(self) -> bool:
        """No setting, config key, `# vramlens: gpu=…` directive or detection named the GPU: it is DEFAULT_GPU or
        one a comment mentions, an assumption every view names as such (`gpu_assumption`)."""
        source = self.sources.get("gpu_name")
        return source is not None and source.origin == Origin.ASSUMED

    @property
    def gpu_assumption(self) -> str | None:
        """Why the GPU is assumed, in the words every view uses; None when it was named."""
        return gpu_assumption(self.sources)


def gpu_assumption(sources: dict[str, Sourced], short: bool = False, escape=str) -> str | None:
    """Why the GPU of a resolution (its `sources`) is assumed, in the words every view uses — in a few words with
    `short` (a code lens title); None when a setting, a config key, a directive or detection named it. `escape`
    is applied to the words quoted from the file (Markdown views escape them)."""
    source = sources.get("gpu_name")
    if source is None or source.origin != Origin.ASSUMED:
        return None
    if source.key == "comment":
        return (
            "assumed from a comment"
            if short
            else f"{escape(comment_gpu_phrase(source))}, which is not a setting — {CHOOSE_GPU}"
        )
    return "assumed: no GPU named" if short else f"no GPU named — {CHOOSE_GPU}"


def comment_gpu_phrase(source: Sourced) -> str:
    """ "taken from the comment `tested on an A100 80GB` (line 3)" for a GPU read from a comment."""
    line = f" (line {source.span.start_line + 1})" if source.span is not None else ""
    note = source.note or "from a comment"
    return f"taken {note}{line}"


def _value(plan: TrainingPlan, concept: str, defaults: dict, fw_label: str, sources: dict):
    s = getattr(plan, concept, None)
    if s is not None:
        sources[concept] = s
        return s.value
    if concept in defaults:
        v = defaults[concept]
        sources[concept] = Sourced(
            value=v, origin=Origin.DEFAULT, framework=getattr(defaults, "labels", {}).get(concept, fw_label)
        )
        return v
    return None


def _extra_value(plan: TrainingPlan, key: str) -> Any:
    said = plan.extra.get(key)
    return None if said is None else said.value


def _whole(value) -> int | None:
    """A positive whole number written as one (262144, "262144", "512*512"), else None."""
    text = str(value).replace("_", "").strip()
    try:
        parts = [int(p) for p in text.split("*")] if text else []
    except ValueError:
        return None
    out = 1
    for p in parts:
        out *= p
    return out if parts and 0 < out < 2**40 else None


@dataclass
class Context:
    """One resolution in progress: the plan, the settings, the framework's defaults and hooks, and the provenance
    (`sources`) and `assumptions` every stage adds to."""

    plan: TrainingPlan
    settings: Settings
    fw_key: str
    fw_label: str
    defaults: Defaults  # knowledge.frameworks.defaults_for's, with the run's release and library versions
    hooks: FrameworkHooks
    sources: dict[str, Sourced] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)

    def val(self, concept: str):
        """The concept's value: the file's, else the framework's default (recording where it came from)."""
        return _value(self.plan, concept, self.defaults, self.fw_label, self.sources)

    def extra(self, key: str) -> Any:
        return _extra_value(self.plan, key)

    def unmodelled(self, said: Sourced | None, key: str, value: str, what: str, consequence: str) -> None:
        """Name a setting the file states that the estimate does not model (every view shows it), once per key;
        `key` stands where the setting has none."""
        name = (said.key if said is not None else None) or key
        if any(u.key == name for u in self.plan.unmodelled):
            return
        self.plan.unmodelled.append(
            Unmodelled(
                key=name, value=value, what=what, consequence=consequence, span=said.span if said is not None else None
            )
        )


def liger_loss(plan: TrainingPlan) -> bool:
    """Whether the plan's fused loss is Liger's fused linear cross-entropy (the setting that asked for it names
    Liger: `use_liger_kernel`, `enable_liger_kernel`, axolotl's `liger_fused_linear_cross_entropy`, …)."""
    said = plan.loss_impl
    if said is None or said.value != "fused":
        return False
    return "liger" in f"{said.key or ''} {said.note or ''}".lower()


def verl_fused_head(plan: TrainingPlan) -> str:
    """Which of verl's fused log-prob heads the plan's fused loss is (`…model.use_fused_kernels`): "triton" for
    `linear_cross_entropy` (the reader names it in its note), "torch" for `FusedLinearForPPO`; "" for neither."""
    said = plan.loss_impl
    if said is None or said.value != "fused" or "use_fused_kernels" not in (said.key or ""):
        return ""
    return "triton" if "linear_cross_entropy" in (said.note or "") else "torch"


def liger_kernels(plan: TrainingPlan) -> bool:
    """Whether the plan's fused RMSNorm/RoPE/SwiGLU kernels are Liger's (the setting that switched them on names
    Liger: `use_liger_kernel`, axolotl's `liger_rms_norm`, a script's `apply_liger_kernel_to_*`), whatever its loss."""
    said = plan.fused_kernels
    if said is None or not said.value:
        return False
    return "liger" in f"{said.key or ''} {said.note or ''}".lower()


def liger_kernels_note(plan: TrainingPlan, family: str, norm: str, mlp: str, moe: bool) -> Approximate | None:
    """What makes an estimate with Liger's kernels approximate: their saved tensors are read from Liger-Kernel's
    source, not traced (estimate/components/liger.py; its RoPE saves cos and sin, as transformers' does); a model type
    Liger swaps no norm or MLP of runs transformers' layers (`knowledge.liger`)."""
    if not liger_kernels(plan):
        return None
    kernels = set(plan.fused_kernels.value or ()) if plan.fused_kernels is not None else set()
    parts = []
    if "rms_norm" in kernels and norm == "rmsnorm" and liger_rms_norm(family):
        parts.append("RMSNorm: its input and fp32 1/rms")
    if "swiglu" in kernels and mlp in ("swiglu", "geglu") and not moe and liger_glu(family):
        parts.append(f"{'GeGLU' if mlp == 'geglu' else 'SwiGLU'}: gate and up, no act(gate)")
    if not parts:
        return Approximate(
            f"Liger kernels: liger_kernel {LIGER_VERSION} swaps no norm or MLP of `{family}` here; counted as "
            "transformers' layers"
        )
    return Approximate(
        f"Liger kernels' saved tensors read from liger_kernel {LIGER_VERSION} source, not traced ({'; '.join(parts)})"
    )
