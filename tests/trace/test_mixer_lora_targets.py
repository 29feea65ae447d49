"""LoRA targets that name a model's own mixer linears — a gated DeltaNet's `in_proj_qkvz` (Qwen3.5's
`in_proj_qkv`, `in_proj_z`, ...), a Mamba mixer's or a
short convolution's `out_proj`, Qwen3-Next's `shared_expert_gate` — are read as peft reads them: a module is adapted
when its name is the target or ends with "." + the target (peft 0.21.2 tuners/tuners_utils.py
`check_target_module_exists`), so `out_proj` in Qwen3-Next is the DeltaNet's output projection and not the
attention's `o_proj`. The trainable parameters vramlens counts equal those peft makes on transformers' own build
of the tiny config (meta device, no weights). Skips with a reason where torch, transformers or peft are missing."""

from __future__ import annotations

import pytest
from tiny_configs import TINY_CONFIGS, TINY_GEMMA3_VLM
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
    # Qwen3.5's DeltaNet spells its input projections apart (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a)
    (
        "qwen3_5_text",
        ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "q_proj", "gate_proj", "down_proj"],
    ),
    ("qwen3_5_text", ["linear_attn.in_proj_qkv", "linear_attn.in_proj_z"]),
    # peft converts no target of Qwen3.5-MoE to its fused experts (transformers 5.24 conversion_mapping.py maps
    # qwen3_5_moe_text to the qwen3_5_text pattern, which peft 0.21.2 `_MOE_TARGET_MODULE_MAPPING` has no entry
    # for): gate/up/down_proj adapt the shared expert alone
    ("qwen3_5_moe_text", ["in_proj_qkv", "out_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate"]),
    ("lfm2", ["in_proj", "out_proj", "q_proj"]),  # out_proj: the short convolutions' and the attention's
    # LFM2-MoE: w1/w3/w2 adapt the leading dense layers' MLPs alone (no conversion to its fused experts in peft)
    ("lfm2_moe", ["in_proj", "out_proj", "q_proj", "w1", "w3", "w2"]),
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


# ----------------------------------------------------------------------------------------- regular expressions

TINY_LLAMA_CONFIG = dict(
    model_type="llama",
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
)
# as axolotl's examples write them (axolotl examples/llama-3-vision/lora-11b.yaml, examples/ebft/*.yaml)
LANGUAGE_MODEL_ONLY = r"model.language_model.layers.[\d]+.(mlp|self_attn).(up|down|gate|q|k|v|o)_proj"
SUFFIXES = r".*\.self_attn\.(q|k|v|o)_proj|.*\.mlp\.(gate|up|down)_proj"


def _vlm_trainable(config: dict, targets: str) -> int:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(cfg)
    model = get_peft_model(model, LoraConfig(r=LORA["lora_r"], target_modules=targets))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _resolved_adapters(config: dict, pattern: str, **changes):
    from vramlens.resolve.adapters import regex_targets

    arch = arch_from_hf_config(config, f"tiny:{config['model_type']}")
    targets, tower, notes = regex_targets(pattern, arch)
    rp = plan(**{**LORA, "lora_targets": targets}, arch=arch, tower_adapters=tower, **changes)
    return rp, notes


@pytest.mark.parametrize(
    "pattern",
    [r"model.layers.[\d]+.(mlp|self_attn).(up|down|gate|q|k|v|o)_proj", SUFFIXES, r".*(q|v)_proj"],
    ids=["prefixed", "suffixes", "q-and-v"],
)
def test_a_regex_target_adapts_what_peft_adapts(pattern):
    rp, notes = _resolved_adapters(TINY_LLAMA_CONFIG, pattern)
    assert not notes
    assert C.params(rp).adapter_params == _peft_trainable(TINY_LLAMA_CONFIG, pattern), rp.lora_targets


def test_a_regex_over_some_layers_is_counted_in_every_layer_and_says_so():
    pattern = r"model\.layers\.(1|3)\.self_attn\.(q|v)_proj"
    rp, notes = _resolved_adapters(TINY_LLAMA_CONFIG, pattern)
    assert rp.lora_targets == ("q", "v")
    assert notes == [f"LoRA target pattern selects {m}_proj in 2 of 4 layers: counted in every layer" for m in "qv"]
    assert C.params(rp).adapter_params == 2 * _peft_trainable(TINY_LLAMA_CONFIG, pattern)


@pytest.mark.parametrize(
    ("pattern", "tower"), [(LANGUAGE_MODEL_ONLY, False), (SUFFIXES, True)], ids=["language-model", "suffixes"]
)
def test_a_regex_over_the_language_model_leaves_the_vision_tower_without_adapters(pattern, tower):
    from vramlens.estimate.components.vision import vision_adapter_params

    rp, _ = _resolved_adapters(TINY_GEMMA3_VLM, pattern, images_per_sequence=1, vision_frozen=True)
    assert rp.tower_adapters is tower
    # the adapters on the tower's q/k/v (SigLIP's, which the suffixes reach) are among the plan's adapter parameters
    assert C.params(rp).adapter_params == _vlm_trainable(TINY_GEMMA3_VLM, pattern)
    assert (vision_adapter_params(rp) > 0) is tower


# ----------------------------------------------------------------------------------------- names one family reuses

TINY_GPT2 = dict(model_type="gpt2", n_embd=64, n_layer=3, n_head=4, vocab_size=256, n_positions=128)
TINY_BIGCODE = dict(model_type="gpt_bigcode", n_embd=64, n_layer=3, n_head=4, vocab_size=256, n_positions=128)


@pytest.mark.parametrize("config", [TINY_GPT2, TINY_BIGCODE], ids=["gpt2", "gpt_bigcode"])
@pytest.mark.parametrize(
    "targets", [["c_proj"], ["c_attn", "c_proj", "c_fc"], ["attn.c_proj"], ["mlp.c_proj", "c_attn"]]
)
def test_a_name_both_the_attention_and_the_mlp_use_adapts_both(config, targets):
    """GPT-2's and GPT-BigCode's `c_proj` is the attention's output projection and the MLP's: peft adapts both; with
    its parent's name (`attn.c_proj`) only that one."""
    arch = arch_from_hf_config(config, f"tiny:{config['model_type']}")
    canonical, unknown = normalize_targets(targets, arch)
    assert not unknown, unknown
    rp = plan(**{**LORA, "lora_targets": canonical}, arch=arch)
    assert C.params(rp).adapter_params == _peft_trainable(config, targets), canonical
