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


def _counted(config: dict, targets: list[str]) -> int:
    """The adapter parameters vramlens counts for LoRA over `targets` (as a config writes them) on `config`'s model;
    every target must be understood."""
    arch = arch_from_hf_config(config, f"tiny:{config['model_type']}")
    canonical, unknown = normalize_targets(targets, arch)
    assert not unknown, unknown
    return C.params(plan(**{**LORA, "lora_targets": canonical}, arch=arch)).adapter_params


@pytest.mark.parametrize(("model_type", "targets"), CASES, ids=[f"{t}-{'+'.join(n)[:40]}" for t, n in CASES])
def test_mixer_linear_targets_adapt_what_peft_adapts(model_type, targets):
    config = TINY_CONFIGS[model_type]
    assert _counted(config, targets) == _peft_trainable(config, targets)


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
    assert _counted(config, targets) == _peft_trainable(config, targets)


# ------------------------------------------------------------------- transformers' own fused q|k|v and ungated MLPs

# GLM and GLM-4 (same sizes; GLM-4 adds two norms): separate q/k/v/o, a fused gate_up_proj
TINY_GLM = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    intermediate_size=96,
    vocab_size=256,
    head_dim=16,
    pad_token_id=0,
)
FUSED_CASES = [
    (
        dict(model_type="mpt", d_model=64, n_heads=4, n_layers=2, vocab_size=256, expansion_ratio=4, max_seq_len=128),
        ["Wqkv", "out_proj", "up_proj", "down_proj"],
    ),
    (
        dict(model_type="codegen", n_embd=64, n_head=4, n_layer=2, vocab_size=256, n_positions=128, rotary_dim=8),
        ["qkv_proj", "out_proj", "fc_in", "fc_out"],
    ),
    (
        dict(
            model_type="persimmon",
            hidden_size=64,
            num_attention_heads=4,
            num_hidden_layers=2,
            intermediate_size=128,
            vocab_size=256,
        ),
        ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    ),
    (
        dict(
            model_type="gpt_neox_japanese",
            hidden_size=64,
            num_attention_heads=4,
            num_hidden_layers=2,
            intermediate_multiple_size=4,
            vocab_size=256,
        ),
        ["query_key_value", "dense"],
    ),
    (
        dict(model_type="openai-gpt", n_embd=64, n_head=4, n_layer=2, vocab_size=256, n_positions=128),
        ["c_attn", "c_proj", "c_fc"],
    ),
    (
        dict(
            model_type="dbrx",
            d_model=64,
            n_heads=4,
            n_layers=2,
            vocab_size=256,
            max_seq_len=128,
            attn_config={"kv_n_heads": 2, "rope_theta": 10000.0},  # transformers 5.24 reads it there
            ffn_config={"ffn_hidden_size": 96, "moe_num_experts": 4, "moe_top_k": 2},
        ),
        ["Wqkv", "out_proj"],
    ),
    (
        dict(TINY_GLM, model_type="glm4"),
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"],
    ),
    (
        dict(TINY_GLM, model_type="glm"),
        ["gate_up_proj", "down_proj"],
    ),
]


@pytest.mark.parametrize(("config", "targets"), FUSED_CASES, ids=[c["model_type"] for c, _ in FUSED_CASES])
def test_fused_qkv_and_ungated_mlps_adapt_what_peft_adapts(config, targets):
    """MPT's `Wqkv`, CodeGen's `qkv_proj`, Persimmon's and GPT-NeoX-Japanese's `query_key_value` and GPT-1's `c_attn`
    are one linear each (one adapter over q|k|v); Persimmon's and GPT-1's MLPs are ungated, so `dense_h_to_4h` and
    `c_fc` are their first linear."""
    assert _counted(config, targets) == _peft_trainable(config, targets)


# ----------------------------------------------------------------------------- remote-code families (never run)

TINY_QWEN1 = dict(
    model_type="qwen",
    hidden_size=64,
    num_attention_heads=4,
    kv_channels=16,
    num_hidden_layers=2,
    intermediate_size=256,
    vocab_size=256,
    no_bias=True,
    tie_word_embeddings=False,
)
TINY_CHATGLM = dict(
    model_type="chatglm",
    add_bias_linear=False,
    add_qkv_bias=True,
    multi_query_attention=True,
    multi_query_group_num=2,
    kv_channels=16,
    hidden_size=64,
    num_layers=2,
    num_attention_heads=4,
    ffn_hidden_size=96,
    padded_vocab_size=256,
    tie_word_embeddings=False,
)
TINY_INTERNLM2 = dict(
    model_type="internlm2",
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=96,
    vocab_size=256,
    bias=False,
    tie_word_embeddings=False,
)
TINY_BAICHUAN = dict(
    model_type="baichuan",
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=96,
    vocab_size=256,
    tie_word_embeddings=False,
)


def _remote_linears(cfg: dict) -> dict[str, tuple[int, int, bool]]:
    """One decoder layer's linears (dotted name → in, out, bias) as each family's remote modeling file declares
    them; peft adapts modules by name and nn.Linear shape, so this is what peft sees (the files are never run):
    - Qwen/Qwen-7B modeling_qwen.py: `QWenAttention.c_attn` h → 3·h with a bias, `c_proj` h → h; `QWenMLP.w1`/`w2`
      h → intermediate_size / 2 and its `c_proj` back;
    - THUDM/chatglm3-6b modeling_chatglm.py: `SelfAttention.query_key_value` h → heads·d + 2·groups·d with a bias,
      `dense` back; `MLP.dense_h_to_4h` h → 2·ffn_hidden_size (gate|up), `dense_4h_to_h` back;
    - baichuan-inc/Baichuan2-7B-Base modeling_baichuan.py: `Attention.W_pack` h → 3·h, `o_proj`; gate/up/down_proj;
    - internlm/internlm2-chat-7b modeling_internlm2.py: `InternLM2Attention.wqkv` h → (heads + 2·kv_heads)·d and
      `wo`; `InternLM2MLP` w1, w3 (h → intermediate_size) and w2 back."""
    h = cfg["hidden_size"]
    if cfg["model_type"] == "qwen":
        i = cfg["intermediate_size"] // 2
        return {
            "attn.c_attn": (h, 3 * h, True),
            "attn.c_proj": (h, h, False),
            "mlp.w1": (h, i, False),
            "mlp.w2": (h, i, False),
            "mlp.c_proj": (i, h, False),
        }
    if cfg["model_type"] == "chatglm":
        d, f = cfg["kv_channels"], cfg["ffn_hidden_size"]
        qkv = cfg["num_attention_heads"] * d + 2 * cfg["multi_query_group_num"] * d
        return {
            "self_attention.query_key_value": (h, qkv, True),
            "self_attention.dense": (h, h, False),
            "mlp.dense_h_to_4h": (h, 2 * f, False),
            "mlp.dense_4h_to_h": (f, h, False),
        }
    i = cfg["intermediate_size"]
    if cfg["model_type"] == "internlm2":
        d = h // cfg["num_attention_heads"]
        return {
            "attention.wqkv": (h, (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * d, False),
            "attention.wo": (h, h, False),
            "feed_forward.w1": (h, i, False),
            "feed_forward.w3": (h, i, False),
            "feed_forward.w2": (i, h, False),
        }
    return {
        "self_attn.W_pack": (h, 3 * h, False),
        "self_attn.o_proj": (h, h, False),
        "mlp.gate_proj": (h, i, False),
        "mlp.up_proj": (h, i, False),
        "mlp.down_proj": (i, h, False),
    }


def _remote_modules(cfg: dict):
    """The decoder layers (`_remote_linears`), nested under their parents' names."""

    def layer():
        root = torch.nn.Module()
        for name, (fan_in, fan_out, bias) in _remote_linears(cfg).items():
            parent, leaf = name.split(".")
            if not hasattr(root, parent):
                setattr(root, parent, torch.nn.Module())
            setattr(getattr(root, parent), leaf, torch.nn.Linear(fan_in, fan_out, bias=bias))
        return root

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(layer() for _ in range(cfg.get("num_hidden_layers") or cfg["num_layers"]))
    return model


REMOTE_CASES = [
    # Qwen's own finetune.py defaults to these (QwenLM/Qwen finetune.py `LoraArguments.lora_target_modules`)
    (TINY_QWEN1, ["c_attn", "c_proj", "w1", "w2"]),
    (TINY_QWEN1, ["c_attn"]),
    (TINY_QWEN1, ["attn.c_proj", "w2"]),
    (TINY_CHATGLM, ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]),
    (TINY_CHATGLM, ["query_key_value"]),  # peft's own default for chatglm
    (TINY_BAICHUAN, ["W_pack", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    (TINY_INTERNLM2, ["wqkv", "wo", "w1", "w2", "w3"]),
]


@pytest.mark.parametrize(
    ("config", "targets"), REMOTE_CASES, ids=[f"{c['model_type']}-{'+'.join(t)}" for c, t in REMOTE_CASES]
)
def test_remote_code_fused_linears_are_one_adapter_as_peft_makes_them(config, targets):
    """Where the remote modelling code computes q|k|v (ChatGLM: also gate|up) with one linear, peft adds one adapter
    of r·(in + the fused width) over it, not one per q, k and v; ChatGLM's `dense_h_to_4h` is its gated MLP's
    gate|up, not an ungated fc1."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_remote_modules(config), LoraConfig(r=LORA["lora_r"], target_modules=targets))
    assert _counted(config, targets) == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_an_ungated_mlp_name_in_a_gated_mlp_is_named_not_dropped():
    """`dense_h_to_4h` names an ungated MLP's first linear (GPT-NeoX); in Llama's gated MLP nothing has that name,
    so the target is reported as not recognised instead of vanishing."""
    arch = arch_from_hf_config(TINY_LLAMA_CONFIG, "tiny:llama")
    canonical, unknown = normalize_targets(["q_proj", "dense_h_to_4h"], arch)
    assert canonical == ("q",) and unknown == ["dense_h_to_4h"]
