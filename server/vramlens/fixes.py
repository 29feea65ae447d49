"""Fixes: changes to the plan that lower the peak, each re-estimated to title it and rendered to text edits.

A fix is a plan change (concept → new value, e.g. `{"grad_checkpointing": True}`). It is applied to a copy
of the `TrainingPlan`, resolved and estimated again (without the max-batch search) so its title can say what
it buys — "Enable gradient checkpointing → peak 38.2 GiB (fits A100-40GB)" — and rendered back to text in
the document's own format by `formats.render.render_change`.

"Make it fit" searches combinations of the memory-saving changes. Of those that fit with the configured
headroom and keep what is trained (changes 1–6 below), it picks the one predicted to run fastest (tokens per
second, vramlens.estimate.throughput): checkpointing alone may fit but cost 25 % of the speed where 8-bit Adam and
a fused loss fit at full speed. Only when none of those fits does it change what is trained (7–8), taking the
cheapest such combination and saying so in its title. The changes, cheapest first, and why they sit where they do:

  1. expandable_segments      allocator setting only: same math, same speed, less fragmentation
     non-reentrant checkpoint  (FSDP1 under transformers' reentrant checkpointing of LoRA layers) the same
                              recompute without FSDP holding every layer's input gradient: same math, same speed
  2. fused / chunked loss     a different kernel for the same loss (Liger fused linear-CE, chunked CE)
  3. fused AdamW              the same update in one kernel instead of foreach (no step temporaries)
  4. gradient checkpointing   same results, ~30 % more compute for the recomputed forward
  5. 8-bit AdamW states       quantized optimizer state: results change slightly
  6. smaller micro-batch      same global batch through more accumulation: slower steps, same math in
                              exact arithmetic (batch-dependent layers and throughput differ)
  7. LoRA                     trains adapters instead of the full model: a different fine-tune
  8. QLoRA                    LoRA over a 4-bit base model: the most invasive

Each change has cost 2^(rank-1), so one change outranks every combination of the cheaper ones; the search for a
plan that changes what is trained walks the subsets in increasing cost and returns the first that fits. A change
that does not lower the peak of the plan it is part of (a fused loss when the peak is the optimizer step) is left
out of it: it would add a dependency or cost speed for nothing.

LoRA and QLoRA instead of a full fine-tune keep the learning rate as written, and their titles say that it usually
needs to be about 10× higher (LLaMA-Factory's examples: train_full/llama3_full_sft.yaml 1.0e-5 against
train_lora/llama3_lora_sft.yaml 1.0e-4; axolotl's examples/llama-3: fft-8b.yaml 2e-5 against lora-8b.yml 0.0002).

Every fix is `safe` or `unsafe`, as ruff's fix levels (https://docs.astral.sh/ruff/linter/#fix-safety): a safe fix
keeps what is trained and the results (in exact arithmetic) and needs nothing new installed — the allocator setting,
chunked or torchtune's linear cross-entropy, fused AdamW, gradient checkpointing, a smaller micro-batch with more
accumulation (the same global batch; `transformers` ≥ 4.46 normalises the loss over the accumulated tokens,
https://github.com/huggingface/transformers/pull/34191); an unsafe one changes what or how it trains — 8-bit
optimizer states, LoRA/QLoRA instead of the full model, fp16 instead of bf16, shorter sequences or completions,
fewer generations — or needs another package (Liger). `check --fix` applies the safe ones, `--unsafe-fixes` both; "make
it fit" is safe when all of its changes are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

from vramlens.calibration import calibrate
from vramlens.estimate import GIB, Estimate, estimate
from vramlens.formats.render import TextEdit, render_change
from vramlens.knowledge import optimizers
from vramlens.knowledge.liger import DEFAULT_KERNELS as LIGER_KERNELS
from vramlens.knowledge.liger import DEFAULT_KERNELS_NOTE as LIGER_KERNELS_NOTE
from vramlens.plan import Origin, Sourced, Span, TrainingPlan
from vramlens.report import speed_change
from vramlens.resolve import resolve
from vramlens.resolved import ResolvedPlan
from vramlens.settings import Settings
from vramlens.text import line_ending, with_line_ending

log = logging.getLogger(__name__)


# Frameworks whose configs can switch on Liger's fused linear cross-entropy.
LIGER_FRAMEWORKS = ("transformers", "trl", "axolotl", "llamafactory")
# Frameworks where the key that fix writes (`use_liger_kernel`, `enable_liger_kernel`) also swaps in Liger's RMSNorm,
# RoPE and SwiGLU kernels, as their readers record it (frameworks/transformers/readers.py `_liger`,
# frameworks/llamafactory/readers.py `liger`): the fix's preview counts them too
LIGER_KERNEL_FRAMEWORKS = ("transformers", "trl", "llamafactory")
# Frameworks with an optimizer *name* for fused AdamW (others set `fused: True` on the optimizer).
NAMED_OPTIMIZER_FRAMEWORKS = ("transformers", "trl", "axolotl", "llamafactory")

# Fix ids, what they do (rule files list the ids they offer).
FIX_IDS = {
    "make-it-fit": "the fastest combination of the memory fixes below that fits with the headroom and keeps what "
    "is trained (else the cheapest that trains adapters instead)",
    "make-it-fit-safe": "the fastest combination of safe fixes only that fits, when the fastest plan needs an "
    "unsafe one (what `check --fix` applies without --unsafe-fixes)",
    "expandable-segments": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "fused-loss": "fused linear cross-entropy (Liger) or chunked cross-entropy",
    "fused-adamw": "fused AdamW instead of foreach",
    "grad-checkpointing": "enable gradient checkpointing",
    "non-reentrant-checkpointing": "gradient checkpointing with use_reentrant=False (FSDP1 then keeps no layer's "
    "input gradient to the end of the backward)",
    "8bit-adam": "8-bit AdamW states (bitsandbytes adamw_bnb_8bit / paged_adamw_8bit)",
    "smaller-micro-batch": "halve the micro-batch and double gradient accumulation until it fits",
    "lora": "train LoRA adapters instead of the full model",
    "qlora": "LoRA over a 4-bit (NF4) base model",
    "replace-value": "replace a value with the suggested spelling",
    "set-value": "set one setting to the suggested value",
}
# The memory changes offered one by one (`Fixer.memory_fixes`; fixes_objective adds its own ids).
MEMORY_FIX_IDS = frozenset(FIX_IDS) - {"make-it-fit", "make-it-fit-safe", "replace-value", "set-value"}


@dataclass
class Fix:
    """One code action: a plan change, its estimate, and the text edits that make it."""

    title: str
    changes: dict[str, Any]
    estimate_after: Estimate | None
    edits: list = field(default_factory=list)  # list[TextEdit]
    note: str | None = None  # why there are no edits, or what else to do
    kind: str = "quickfix"  # LSP code action kind
    id: str = ""  # one of FIX_IDS
    preferred: bool = False
    safe: bool = False  # keeps the training's results: `check --fix` applies it

    @property
    def applicability(self) -> str:
        """ "safe" (`check --fix` applies it) or "unsafe" (only with `--unsafe-fixes`)."""
        return "safe" if self.safe else "unsafe"

    @property
    def fits(self) -> bool | None:
        return None if self.estimate_after is None else self.estimate_after.fits


@dataclass(frozen=True)
class Candidate:
    """A memory-saving change the search may use."""

    id: str
    label: str  # "enable gradient checkpointing"
    changes: dict[str, Any]
    rank: int  # 1 = cheapest (see the module docstring)
    safe: bool = False
    conflicts: tuple[str, ...] = ()  # ids it cannot be combined with
    changes_training: bool = False  # trains something else (adapters instead of the full model)
    advice: str | None = None  # what else usually changes with it (ends its fix's title)


# A full fine-tune's learning rate is typically ~10× too low for LoRA (see the module docstring for the sources).
LORA_LEARNING_RATE = (
    "the learning rate is left as it is: LoRA usually trains at about 10× a full fine-tune's "
    "(e.g. 2e-4 instead of 2e-5)"
)
# A change "lowers the peak" of a plan when leaving it out raises the peak by at least this share.
MINIMUM_SAVING = 0.01


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


# batch sizes that can be read from one written value: verl's log-prob budget defaults to the actor's
# (`log_prob_max_token_len_per_gpu: ${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}`), OpenRLHF's critic trains
# at the actor's micro-batch
_BATCHES = ("micro_batch", "logprob_micro_batch", "critic_micro_batch")


def _batches(plan: TrainingPlan, changes: dict[str, Any]) -> dict[str, Sourced]:
    """The batch sizes a change makes, as the edited file is read again. A batch size read from a token budget
    (Sourced.per_unit, budget) counts sequences of prompt + completion: capping the completions fits more of them in
    the same budget. Batch sizes read from one written value (the same key at the same span, or at none: a default a
    fix would write) change with it: verl's log-prob budget interpolates the actor's, OpenRLHF's critic trains at the
    actor's micro-batch. A changed count is written back as a budget of the new length (formats.render_code)."""
    old_len, new_len = plan.completion_len, changes.get("completion_len")
    longer = (
        new_len - old_len.value
        if isinstance(new_len, int) and old_len is not None and isinstance(old_len.value, int)
        else 0
    )
    out: dict[str, Sourced] = {}
    written: dict[tuple, int] = {}  # (key, span) of a changed value -> the tokens (or count) the fix writes there
    for concept in _BATCHES:
        o, value = getattr(plan, concept, None), changes.get(concept)
        if o is not None and isinstance(value, int):
            per_unit = max(1, o.per_unit + longer) if o.per_unit else None
            out[concept] = o.model_copy(update={"value": value, "per_unit": per_unit, "origin": Origin.SETTING})
            if o.key is not None:
                written[(o.key, o.span)] = value * per_unit if per_unit else value
    for concept in _BATCHES:
        o = getattr(plan, concept, None)
        if o is None or concept in changes or not (o.per_unit or o.key):
            continue
        per_unit = max(1, o.per_unit + longer) if o.per_unit else None
        tokens = written.get((o.key, o.span), o.budget)
        if (o.key, o.span) in written:
            value = max(1, tokens // per_unit) if per_unit else tokens
            note = f"proposed fix: follows `{o.key}`"
        elif per_unit and tokens and longer:
            value, note = max(1, tokens // per_unit), "proposed fix: the same token budget, sequences of another length"
        else:
            continue
        out[concept] = o.model_copy(update={"value": value, "per_unit": per_unit, "budget": tokens, "note": note})
    return out


_PARTIAL_TRAINING = ("trained_layers", "trained_where", "added_layers", "trained_modules", "trained_extra")


def with_changes(plan: TrainingPlan, changes: dict[str, Any]) -> TrainingPlan:
    """A copy of the plan with concept values replaced (provenance: proposed by a fix)."""
    update: dict[str, Any] = {}
    for concept, value in changes.items():
        old = getattr(plan, concept, None)
        note = "proposed fix"
        if concept == "loss_impl" and value == "fused" and (plan.framework or "transformers") in LIGER_FRAMEWORKS:
            note += ": Liger's fused linear cross-entropy"  # what the fused-loss fix writes there (its buffers count)
        update[concept] = Sourced(
            value=value,
            origin=Origin.SETTING,
            note=note,
            key=old.key if old else None,
            span=old.span if old else None,
            value_span=old.value_span if old else None,
        )
    update.update(_batches(plan, changes))
    method = changes.get("peft_method")
    if method in ("lora", "qlora", "dora") and plan.peft_method is not None and plan.peft_method.value == "freeze":
        # adapters in place of a partial fine-tune (freeze tuning, LLaMA-Pro, LISA): which layers it trained, and the
        # blocks LLaMA-Pro adds, go with it (the frameworks read them only for those tuners)
        update.update(dict.fromkeys(_PARTIAL_TRAINING))
    fw = plan.framework or "transformers"
    if changes.get("loss_impl") == "fused" and fw in LIGER_KERNEL_FRAMEWORKS and "fused_kernels" not in changes:
        old = plan.fused_kernels
        kept = list(old.value or ()) if old is not None else []
        update["fused_kernels"] = Sourced(
            value=kept + [k for k in LIGER_KERNELS if k not in kept],
            origin=Origin.SETTING,
            note=f"proposed fix: {LIGER_KERNELS_NOTE}",
        )
    return plan.model_copy(update=update)


def change_key(fix: Fix) -> tuple:
    """What a fix changes: its text edits (file, range, new text), or its plan changes when it has no edits. Two
    fixes with the same key are one change, whatever their titles."""
    if fix.edits:
        return tuple(
            sorted(
                (e.span.file, e.span.start_line, e.span.start_col, e.span.end_line, e.span.end_col, e.new_text)
                for e in fix.edits
            )
        )
    return ("changes",) + tuple(sorted((k, repr(v)) for k, v in fix.changes.items()))


def distinct(fixes: list[Fix | None]) -> list[Fix]:
    """The fixes without repeats of the same change (the first one, e.g. "make it fit", stays)."""
    seen: set[tuple] = set()
    out = []
    for fix in fixes:
        if fix is None:
            continue
        key = change_key(fix)
        if key not in seen:
            seen.add(key)
            out.append(fix)
    return out


def replacement(span: Span, new_text: str, title: str, *, safe: bool = False, fix_id: str = "replace-value") -> Fix:
    """A fix that is a plain text replacement (a misspelt value), not a plan change."""
    return Fix(
        title=title,
        changes={},
        estimate_after=None,
        edits=[TextEdit(span=span, new_text=new_text)],
        id=fix_id,
        safe=safe,
        preferred=True,
    )


class Fixer:
    """Makes fixes for one analysed document. Estimates are cached per change set."""

    def __init__(self, text: str, plan: TrainingPlan, rp: ResolvedPlan, base: Estimate, settings: Settings):
        self.text = text
        self.plan = plan
        self.rp = rp
        self.base = base
        self.settings = settings
        self.headroom = settings.headroom
        self._cache: dict[tuple, Estimate | None] = {}
        self._rendered: dict[tuple, tuple[list, str | None]] = {}

    # -- estimates ---------------------------------------------------------------------------------

    @staticmethod
    def _key(changes: dict[str, Any]) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in changes.items()))

    def evaluate(self, changes: dict[str, Any]) -> Estimate | None:
        """The estimate after `changes` (None when the changed plan cannot be resolved)."""
        key = self._key(changes)
        if key not in self._cache:
            try:
                res = calibrate(resolve(with_changes(self.plan, changes), self.settings))
                self._cache[key] = estimate(res.resolved, limits=False)
            except Exception:  # a change the resolver rejects is a fix we do not offer
                log.debug("fix %s could not be estimated", changes, exc_info=True)
                self._cache[key] = None
        return self._cache[key]

    def target(self, est: Estimate) -> int:
        """Device bytes that count as a fit with the headroom kept free."""
        return int(est.usable_bytes * (1.0 - self.headroom))

    def fits(self, est: Estimate | None) -> bool:
        return est is not None and est.device_bytes <= self.target(est)

    def status(self, est: Estimate) -> str:
        gpu = self.rp.gpu.name
        if self.fits(est):
            return f"fits {gpu}"
        if est.fits:
            return f"tight on {gpu}, {est.headroom_bytes / est.usable_bytes:.0%} free"
        return f"still {gib(-est.headroom_bytes)} over {gpu}"

    def outcome(self, est: Estimate) -> str:
        """What a change comes to, for its title: "peak 24.0 GiB (fits A100-40GB), −24 % tokens/s"."""
        speed = speed_change(self.base, est)
        return f"peak {gib(est.device_bytes)} ({self.status(est)})" + (f", {speed}" if speed else "")

    # -- rendering ---------------------------------------------------------------------------------

    def render(self, changes: dict[str, Any]) -> tuple[list, str | None]:
        """(text edits, note) that write `changes` into the document."""
        key = self._key(changes)
        if key not in self._rendered:
            self._rendered[key] = self._render_now(changes)
        edits, note = self._rendered[key]
        return list(edits), note

    def _render_now(self, changes: dict[str, Any]) -> tuple[list, str | None]:
        try:
            result = render_change(self.text, self.plan, changes)
        except Exception:
            log.exception("rendering %s failed", changes)
            return [], "vramlens could not write this change into the file"
        if result is None:
            return [], f"a {self.plan.format} config cannot express this change"
        eol = line_ending(self.text)  # lines a fix adds to a CRLF file are CRLF too
        own = ("", self.plan.source_file)
        return [
            TextEdit(span=e.span, new_text=with_line_ending(e.new_text, eol)) if e.span.file in own else e
            for e in result.edits
        ], result.note

    def make(
        self,
        fix_id: str,
        label: str,
        changes: dict[str, Any],
        *,
        safe: bool = False,
        preferred: bool = False,
        estimate_title: bool = True,
        advice: str | None = None,
    ) -> Fix:
        """A fix for `changes`, titled with its new peak when `estimate_title` (and `advice` after it)."""
        est = self.evaluate(changes) if estimate_title else None
        title = label[:1].upper() + label[1:]
        if est is not None:
            title += f" → {self.outcome(est)}"
        if advice:
            title += f"; {advice}"
        edits, note = self.render(changes)
        return Fix(
            title=title,
            changes=dict(changes),
            estimate_after=est,
            edits=edits,
            note=note,
            id=fix_id,
            safe=safe,
            preferred=preferred,
        )

    # -- the memory-saving menu --------------------------------------------------------------------

    def candidates(self) -> list[Candidate]:
        """The memory-saving changes that apply to this plan, cheapest first."""
        rp, plan = self.rp, self.plan
        fw = rp.framework
        out: list[Candidate] = []
        if not rp.expandable_segments:
            from vramlens.rules.alloc_conf import with_expandable_segments

            conf = plan.alloc_conf.value if plan.alloc_conf is not None else None
            out.append(
                Candidate(
                    "expandable-segments",
                    "add PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                    {"alloc_conf": with_expandable_segments(conf)},
                    1,
                    safe=True,
                )
            )
        if rp.fsdp_keeps_block_grads:
            out.append(
                Candidate(
                    "non-reentrant-checkpointing",
                    "use non-reentrant gradient checkpointing",
                    {"ckpt_reentrant": False},
                    1,
                    safe=True,
                )
            )
        if rp.arch.block != "encoder" and rp.loss_impl != "fused":
            if fw in LIGER_FRAMEWORKS:  # unsafe: needs the liger-kernel package
                out.append(Candidate("fused-loss", "use Liger's fused linear cross-entropy", {"loss_impl": "fused"}, 2))
            elif fw == "torchtune":
                # its `loss` is the recipe's objective: only a cross-entropy recipe's can be the linear one (a DPO
                # or PPO config's `loss` is the preference or policy loss; rewriting it trains another objective)
                if rp.objective in ("sft", "pretrain"):
                    out.append(
                        Candidate(
                            "fused-loss", "use the linear cross-entropy loss", {"loss_impl": "fused"}, 2, safe=True
                        )
                    )
            elif rp.loss_impl == "standard":
                out.append(
                    Candidate("fused-loss", "use a chunked cross-entropy loss", {"loss_impl": "chunked"}, 2, safe=True)
                )
        opt = rp.optimizer
        if (
            opt.library == "torch"
            and opt.family in ("adamw", "adam")
            and rp.optimizer_impl == "foreach"
            and not rp.offload_optimizer
        ):
            changes = (
                {"optimizer": "adamw_torch_fused"}
                if fw in NAMED_OPTIMIZER_FRAMEWORKS and opt.family == "adamw"
                else {"optimizer_impl": "fused"}
            )
            out.append(
                Candidate(
                    "fused-adamw", "use fused AdamW instead of foreach", changes, 3, safe=True, conflicts=("8bit-adam",)
                )
            )
        if not rp.grad_checkpointing:
            out.append(
                Candidate(
                    "grad-checkpointing", "enable gradient checkpointing", {"grad_checkpointing": True}, 4, safe=True
                )
            )
        state_bytes = opt.state_bytes if opt.state_bytes is not None else 2
        eight_bit = optimizers.eight_bit_variant("adamw", opt.paged)
        if (
            opt.family in ("adamw", "adam")
            and opt.library != "other"  # not BAdam, Adam-mini, schedule-free …: another algorithm, not a cheaper state
            and state_bytes > 1.5
            and not rp.offload_optimizer
            and rp.peft == "none"
            and eight_bit is not None
        ):
            name = eight_bit.name
            out.append(
                Candidate("8bit-adam", f"use 8-bit AdamW ({name})", {"optimizer": name}, 5, conflicts=("fused-adamw",))
            )
        said = self.plan.micro_batch
        # a micro-batch computed from other settings (torchtune PPO's ppo_batch_size ÷ gradient_accumulation_steps,
        # GRPO's batch_size × grpo_samples) has no key of its own to write; torchtune's optimizer-in-backward refuses
        # gradient accumulation (recipes/full_finetune_single_device.py, ppo_full_finetune_single_device.py: "Please
        # set gradient_accumulation_steps=1, or optimizer_in_bwd=False")
        computed = said is not None and said.origin == Origin.DERIVED and not said.per_unit
        if rp.micro_batch > 1 and not computed and not rp.optimizer_in_bwd:
            out.append(Candidate("smaller-micro-batch", "lower the micro-batch", {}, 6, safe=True))
        full = rp.peft == "none"  # adapters instead of every weight: the learning rate usually changes too
        from vramlens.frameworks.hooks import hooks_for
        from vramlens.resolve.objective import ONLINE

        # the framework's RL recipes may have no adapter variant (FrameworkHooks.rl_full_only)
        adapters = not (rp.objective in ONLINE and hooks_for(self.plan.framework).rl_full_only)
        # Megatron-core builds its own layers: no bitsandbytes 4-bit base model under them, and adapters only
        # where Megatron-SWIFT adds them (Megatron-LM's own training scripts have none)
        megatron = rp.strategy == "megatron"
        adapters = adapters and not (megatron and self.plan.framework != "megatron-swift")
        if full and adapters and not rp.quant_bits:
            out.append(
                Candidate(
                    "lora",
                    "train LoRA adapters (r=16, all linear layers)",
                    {"peft_method": "lora", "lora_r": 16, "lora_targets": ["all-linear"]},
                    7,
                    conflicts=("qlora",),
                    changes_training=True,
                    advice=LORA_LEARNING_RATE,
                )
            )
        if adapters and not megatron and not rp.quant_bits and rp.peft in ("none", "lora", "dora"):
            qlora: dict[str, Any] = {"peft_method": "qlora", "quant_bits": 4}
            if full:
                qlora.update({"lora_r": 16, "lora_targets": ["all-linear"]})
            out.append(
                Candidate(
                    "qlora",
                    "train QLoRA (4-bit base model, LoRA r=16)",
                    qlora,
                    8,
                    conflicts=("lora",),
                    changes_training=True,
                    advice=LORA_LEARNING_RATE if full else None,
                )
            )
        from vramlens import fixes_objective

        out.extend(fixes_objective.candidates(rp, plan))
        return sorted(out, key=lambda c: c.rank)

    def _batch_steps(self, base_changes: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
        """The micro-batch/accumulation trades, one halving at a time: [(changes, label)]; the label says the
        change from the current values ("lower the micro-batch from 16 to 2 and raise accumulation from 1 to 8")."""
        mb0, ga0 = self.rp.micro_batch, self.rp.grad_accum
        mb, ga = mb0, ga0
        budget = self.plan.micro_batch if self.plan.micro_batch is not None and self.plan.micro_batch.per_unit else None
        out = []
        while mb > 1:
            mb, ga = mb // 2, ga * 2
            if budget is not None and budget.per_unit:
                # a micro-batch packed up to a token budget: the budget is what changes (Sourced.per_unit)
                label = (
                    f"lower `{budget.key}` to {mb * budget.per_unit:,} tokens ({mb} sequence(s) of {budget.per_unit:,}"
                    f" a micro-batch instead of {mb0}; same global batch)"
                )
            else:
                label = (
                    f"lower the micro-batch from {mb0} to {mb} and raise gradient accumulation from {ga0} to {ga}"
                    f" (same global batch)"
                )
            # a budget's micro-batches are as many as the update's sequences need: no accumulation count to raise
            trade = {"micro_batch": mb} if budget is not None else {"micro_batch": mb, "grad_accum": ga}
            out.append(({**base_changes, **trade}, label))
        return out

    def _fit_with_batch(self, base_changes: dict[str, Any]) -> tuple[dict[str, Any], str, Estimate | None]:
        """Halve the micro-batch until it fits (or reaches 1)."""
        steps = self._batch_steps(base_changes)
        changes, label, est = base_changes, "", None
        for changes, label in steps:
            est = self.evaluate(changes)
            if self.fits(est):
                break
        return changes, label, est

    def memory_fixes(self, minimum_saving: float = 0.01) -> list[Fix]:
        """One fix per applicable memory change that lowers the peak by at least `minimum_saving` of it."""
        out: list[Fix] = []
        floor = self.base.device_bytes * (1.0 - minimum_saving)
        for c in self.candidates():
            if c.id == "smaller-micro-batch":
                changes, label, est = self._fit_with_batch({})
                if est is None or est.device_bytes > floor:
                    continue
                out.append(self.make(c.id, label, changes, safe=c.safe))
                continue
            est = self.evaluate(c.changes)
            if est is None or est.device_bytes > floor:
                continue
            out.append(self.make(c.id, c.label, c.changes, safe=c.safe, advice=c.advice))
        return out

    def make_it_fit(self) -> Fix | None:
        """The fastest combination of memory changes that fits with the headroom and keeps what is trained (the
        same model trained the same way, the same global batch and sequence length); when none does, the cheapest
        combination that fits by changing what is trained (LoRA/QLoRA instead of the full model), titled so.
        None when nothing fits.

        Changes this document's format cannot express are left out of the first search, so its answer can
        be applied; when only they would make it fit, the answer comes without edits and says so."""
        everything = self.candidates()
        writable = [c for c in everything if self._writable(c)]
        fix = self._fastest([c for c in writable if not c.changes_training]) or self._search(writable)
        if fix is None and len(writable) < len(everything):
            fix = self._fastest([c for c in everything if not c.changes_training]) or self._search(everything)
            if fix is not None and not fix.note:
                fix.note = (
                    "some of these changes cannot be written into this file: make them where the run is configured"
                )
        return fix

    def make_it_fit_safe(self) -> Fix | None:
        """When the fastest plan that fits needs an unsafe fix (8-bit Adam, a fused loss from another package), the
        fastest plan of safe fixes only that fits, for `check --fix` and fix-on-save; None otherwise."""
        fastest = self.make_it_fit()
        if fastest is None or fastest.safe:
            return None
        safe = [c for c in self.candidates() if c.safe and not c.changes_training and self._writable(c)]
        fix = self._fastest(safe)
        if fix is None:
            return None
        fix.id = "make-it-fit-safe"
        fix.title = fix.title.replace("Make it fit: ", "Make it fit with safe fixes only: ", 1)
        fix.preferred = False
        return fix

    def _fastest(self, cands: list[Candidate]) -> Fix | None:
        """Of every combination of `cands` that fits, the one predicted to run fastest (ties: the cheaper)."""
        best: tuple[float, int, list[Candidate], tuple] | None = None
        for mask, subset, result in self._fitting_subsets(cands):
            speed = result[2].throughput.tokens_per_s if result[2].throughput is not None else 0.0
            if best is None or speed > best[0] * 1.0001:
                best = (speed, mask, subset, result)
        if best is None:
            return None
        _, _, subset, result = best
        return self._fit_fix(*self._without_idle(subset, result))

    def _without_idle(
        self, subset: list[Candidate], result: tuple
    ) -> tuple[list[Candidate], dict, list[str], Estimate]:
        """The plan without the changes that do not lower its peak (each left out in turn while the plan still
        fits and its peak rises by less than MINIMUM_SAVING): a fused loss adds a package, a smaller micro-batch
        costs speed, and neither buys anything when the peak is the optimizer step."""
        for c in list(subset):
            if len(subset) == 1:
                break
            trial = [x for x in subset if x is not c]
            fewer = self._subset_fits(trial)
            if fewer and fewer[2].device_bytes < result[2].device_bytes * (1 + MINIMUM_SAVING):
                subset, result = trial, fewer
        return (subset, *result)

    def _fit_fix(self, subset: list[Candidate], changes: dict[str, Any], labels: list[str], est: Estimate) -> Fix:
        changed = [c.label for c in subset if c.changes_training]
        head = "Make it fit" + (" (changes what is trained)" if changed else "")
        advice = "; ".join(dict.fromkeys(c.advice for c in subset if c.advice))
        edits, note = self.render(changes)
        title = f"{head}: " + " + ".join(labels) + f" → {self.outcome(est)}" + (f"; {advice}" if advice else "")
        return Fix(
            title=title,
            changes=changes,
            estimate_after=est,
            edits=edits,
            note=note,
            id="make-it-fit",
            preferred=not changed,
            safe=all(c.safe for c in subset),
        )

    def _writable(self, c: Candidate) -> bool:
        changes = c.changes or {"micro_batch": max(1, self.rp.micro_batch // 2), "grad_accum": self.rp.grad_accum * 2}
        return bool(self.render(changes)[0])

    def _search(self, cands: list[Candidate]) -> Fix | None:
        """Subsets in binary-counting order over the cheapest-first list: subset cost = Σ 2^position, so the
        first subset that fits is the cheapest by the ranking of the module docstring."""
        if not cands:
            return None
        # Quick exit: does even every change at once fit (of two conflicting changes, the stronger one)?
        everything: list[Candidate] = []
        for c in sorted(cands, key=lambda c: -c.rank):
            if not any(c.id in o.conflicts for o in everything):
                everything.append(c)
        if not self._subset_fits(everything):
            return None
        first = next(self._fitting_subsets(cands), None)
        return self._fit_fix(first[1], *first[2]) if first else None

    def _fitting_subsets(self, cands: list[Candidate]) -> Iterator[tuple[int, list[Candidate], tuple]]:
        """Every combination of `cands` without two conflicting changes that fits, in binary-counting order
        (bit i of the mask is `cands[i]`), with what `_subset_fits` found for it."""
        n = len(cands)
        for mask in range(1, 1 << n):
            subset = [cands[i] for i in range(n) if mask >> i & 1]
            ids = {c.id for c in subset}
            if any(set(c.conflicts) & ids for c in subset):
                continue
            result = self._subset_fits(subset)
            if result:
                yield mask, subset, result

    def _subset_fits(self, subset: list[Candidate]) -> tuple[dict[str, Any], list[str], Estimate] | None:
        changes: dict[str, Any] = {}
        labels: list[str] = []
        batch = False
        for c in subset:
            if c.id == "smaller-micro-batch":
                batch = True
                continue
            changes.update(c.changes)
            labels.append(c.label)
        if batch:
            changes, label, est = self._fit_with_batch(changes)
            labels.append(label)
        else:
            est = self.evaluate(changes)
        if est is not None and self.fits(est):
            return changes, labels, est
        return None
