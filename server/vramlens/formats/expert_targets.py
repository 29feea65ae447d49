"""peft's `LoraConfig.target_parameters` as frameworks pass it through: LoRA on a MoE model's routed-expert
parameters (transformers 5's fused `experts.gate_up_proj` / `experts.down_proj` stacks) and on its router
(`mlp.gate.weight`), read into the plan's `expert_targets` ("gate_up", "down", "router")."""

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
