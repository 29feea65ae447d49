"""Memory fixes that only preference, RL and distillation runs have, as `fixes.Candidate`s.

  precompute-ref        DPO/KTO: reference log-probs computed once before training, so no reference model is
                        held (trl 1.16.0 dpo_config.py `precompute_ref_log_probs`; axolotl the same key)
  peft-reference        a PEFT run that loads a separate reference: drop `ref_model`, the base model with its
                        adapters disabled is the reference (trl 1.16.0 dpo_trainer.py `use_adapter`)
  vllm-share            colocated vLLM: a smaller `vllm_gpu_memory_utilization` (its KV cache shrinks, the
                        weights stay), or generation on a separate `vllm serve` (`vllm_mode: server`)
  fewer-generations     GRPO/RLOO: fewer completions per prompt (`num_generations`)
  shorter-completions   online RL: a shorter `max_completion_length`

Ranks follow fixes.py's order: the same results first (precompute, PEFT base, where vLLM runs), then changes to
the training itself (group size, completion length) after the micro-batch.
"""

from __future__ import annotations

from vramlens.fixes import Candidate
from vramlens.plan import TrainingPlan
from vramlens.resolved import ResolvedPlan

FIX_IDS = {
    "precompute-ref": "precompute the reference log-probs (no reference model during training)",
    "peft-reference": "use the PEFT base model (adapters disabled) as the reference",
    "vllm-share": "a smaller vLLM memory share",
    "vllm-server": "generation on a separate vLLM server",
    "fewer-generations": "fewer generations per prompt",
    "shorter-completions": "shorter completions",
}


# where `precompute_ref_log_probs` exists: TRL's DPOConfig/KTOConfig, and axolotl, which passes it through
PRECOMPUTE_FRAMEWORKS = ("trl", "axolotl", "transformers")


def candidates(rp: ResolvedPlan, plan: TrainingPlan) -> list[Candidate]:
    out: list[Candidate] = []
    if rp.reference == "copy" and rp.objective in ("dpo", "kto") and rp.framework in PRECOMPUTE_FRAMEWORKS:
        out.append(
            Candidate(
                "precompute-ref",
                "precompute the reference log-probs",
                {"precompute_ref": True},
                3,
                conflicts=("peft-reference",),
            )
        )
    if rp.reference == "copy" and rp.peft != "none" and plan.ref_model_id is not None and plan.ref_model_id.span:
        # a reference the config names (not one the framework always loads, as OpenRLHF's)
        out.append(
            Candidate(
                "peft-reference",
                "use the PEFT base model as the reference (no `ref_model`)",
                {"ref_model_id": None},
                3,
                conflicts=("precompute-ref",),
            )
        )
    if rp.generation == "vllm-colocate":
        share = round(max(rp.vllm_memory_share / 2, 0.1), 2)
        if share < rp.vllm_memory_share:
            out.append(
                Candidate(
                    "vllm-share",
                    f"lower vLLM's memory share to {share:g}",
                    {"vllm_memory_share": share},
                    4,
                    conflicts=("vllm-server",),
                )
            )
        out.append(
            Candidate(
                "vllm-server",
                "generate on a separate vLLM server (`vllm_mode: server`)",
                {"generation": "vllm-server"},
                4,
                conflicts=("vllm-share",),
            )
        )
    if rp.objective in ("grpo", "rloo") and plan.num_generations is not None and plan.num_generations.value > 2:
        out.append(
            Candidate(
                "fewer-generations",
                f"sample {plan.num_generations.value // 2} generations per prompt",
                {"num_generations": plan.num_generations.value // 2},
                7,
            )
        )
    if rp.generation != "none" and rp.logits_tokens and rp.logits_tokens > 128:
        out.append(
            Candidate(
                "shorter-completions",
                f"cap completions at {rp.logits_tokens // 2} tokens",
                {"completion_len": rp.logits_tokens // 2},
                7,
            )
        )
    return out
