"""Settings of a MoE model's routed experts as frameworks pass them through to transformers and peft: peft's
`LoraConfig.target_parameters` (LoRA on the fused `experts.gate_up_proj` / `experts.down_proj` stacks and on the
router's `mlp.gate.weight`, read into the plan's `expert_targets`) and transformers' `experts_implementation`."""

from __future__ import annotations

from vramlens.formats.settings import PlanBuilder, Setting
from vramlens.knowledge.peft_methods import EXPERT_PARAMETERS, expert_parameter


def read_target_parameters(b: PlanBuilder, s: Setting, names: dict[str, str] = EXPERT_PARAMETERS) -> None:
    """Each routed-expert stack named gets a `lora.ParamWrapper`, rank r per expert; `mlp.gate.weight` is the router.
    Others (a parameter that is no expert stack, or one `names` does not spell) are named as not modelled."""
    v = s.value
    if v is None or v == "" or v == []:
        return
    found: list[str] = []
    other: list[str] = []
    for name in [v] if isinstance(v, str) else list(v) if isinstance(v, list) else []:
        kind = expert_parameter(name, names)
        if kind is None:
            other.append(str(name))
        elif kind not in found:
            found.append(kind)
    if found:
        b.set("expert_targets", found, s)
    if other:
        b.unmodelled(
            s,
            f"LoRA on parameters that are no MoE expert stack ({', '.join(other)[:120]})",
            "estimated without adapters on them",
        )


# transformers 5.24 integrations/moe.py `ALL_EXPERTS_FUNCTIONS`: "grouped_mm" (one grouped matmul over the fused
# stacks, what the estimate models: estimate/components/experts.py), "batched_mm" (each token's experts' weights
# gathered and multiplied in a batch), "eager" (a loop over the experts); from_pretrained(experts_implementation=...)
MODELLED_EXPERTS_IMPLEMENTATION = "grouped_mm"


def read_experts_implementation(b: PlanBuilder, s: Setting) -> None:
    """A MoE model's experts implementation: grouped_mm is the one the estimate models; another is named."""
    v = str(s.value or "").strip().lower()
    if v in ("", "none", "null", MODELLED_EXPERTS_IMPLEMENTATION):
        b.remember(s)
        b.plan.read_alongside.append(s.key)  # read: the modelled kernel (not "not modelled" by its name alone)
        return
    b.unmodelled(
        s,
        f"the `{v}` implementation of the routed experts (transformers' ExpertsInterface, integrations/moe.py)",
        f"estimated as {MODELLED_EXPERTS_IMPLEMENTATION}, transformers 5's fused experts kernel",
    )
