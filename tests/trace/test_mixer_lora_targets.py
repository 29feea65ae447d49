"""LoRA targets that name a model's own mixer linears — a gated DeltaNet's `in_proj_qkvz`, a Mamba mixer's or a
short convolution's `out_proj`, Qwen3-Next's `shared_expert_gate` — are read as peft reads them: a module is adapted
when its name is the target or ends with "." + the target (peft 0.21.2 tuners/tuners_utils.py
`check_target_module_exists`), so `out_proj` in Qwen3-Next is the DeltaNet's output projection and not the
attention's `o_proj`. The trainable parameters vramlens counts equal those peft makes on transformers' own build
of the tiny config (meta device, no weights). Skips with a reason where torch, transformers or peft are missing."""

from __future__ import annotations

import pytest
from tiny_configs import TINY_CONFIGS
from trace_plans import LORA, need, plan
from vramlens.estimate import components as C
from vramlens.knowledge.models import arch_from_hf_config
from vramlens.resolve import normalize_targets

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")

# (model_type, target_modules as a config writes them)
CASES = [
    (
        "qwen3_next",
        ["linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba", "linear_attn.out_proj", "shared_expert_gate"]
        + ["q_proj", "k_proj", "v_proj", "o_proj"],
    ),
    ("qwen3_next", ["out_proj"]),  # the DeltaNet's alone: Qwen3-Next's attention output is o_proj
    # peft moves every target ending in an MLP name to the fused routed experts, the shared expert's too
    # (peft 0.21.2 utils/transformers_weight_conversion.py `_convert_peft_config_moe`)
    ("qwen3_next", ["shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj", "q_proj"]),
    ("lfm2", ["in_proj", "out_proj", "q_proj"]),  # out_proj: the short convolutions' and the attention's
    ("bamba", ["in_proj", "out_proj", "q_proj", "o_proj"]),  # out_proj: the Mamba-2 mixer's
    ("granitemoehybrid", ["mamba.out_proj", "q_proj"]),
    ("jamba", ["in_proj", "x_proj", "out_proj", "q_proj"]),
]


def _peft_trainable(config: dict, targets: list[str]) -> int:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    lora = LoraConfig(r=LORA["lora_r"], lora_alpha=LORA["lora_alpha"], target_modules=targets)
    model = get_peft_model(model, lora)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize(("model_type", "targets"), CASES, ids=[f"{t}-{'+'.join(n)[:40]}" for t, n in CASES])
def test_mixer_linear_targets_adapt_what_peft_adapts(model_type, targets):
    config = TINY_CONFIGS[model_type]
    arch = arch_from_hf_config(config, f"tiny:{model_type}")
    canonical, unknown = normalize_targets(targets, arch)
    assert not unknown, unknown
    rp = plan(**{**LORA, "lora_targets": canonical}, arch=arch)
    assert C.params(rp).adapter_params == _peft_trainable(config, targets), canonical
