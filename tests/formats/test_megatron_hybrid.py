"""Megatron-LM's hybrid Mamba/attention runs (`pretrain_hybrid.py`, `pretrain_mamba.py`) read as the Nemotron-H model
of the same layers (formats/megatron_hybrid.py). Fixtures: Megatron-LM examples/mamba/train.sh at d98e8a64
(`--hybrid-layer-pattern`) and at core_v0.15.0 (`--num-layers` with the attention and MLP ratios); see the SOURCE
note beside each. The parameter reference is written here from megatron-core's module code, independently of the
reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.formats import megatron_hybrid
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "megatron"
MAIN = FIXTURES / "Megatron-LM-d98e8a64" / "mamba" / "train.sh"
V015 = FIXTURES / "Megatron-LM-core_v0.15.0" / "mamba" / "train.sh"
# examples/mamba/train.sh at d98e8a64, its "800M" arm
PATTERN_800M = "M-M-M--M-*M-M-M-M--*M-M-M-M-*M--M-M-M-*M-M--M-M-"


def megatron_core_params(
    pattern: str,
    *,
    h: int,
    heads: int,
    groups: int,
    kv_channels: int,
    ffn: int,
    vocab: int,
    untied: bool,
    mamba: tuple[int, int, int, int],
    experts: int = 0,
    moe_ffn: int = 0,
    shared: int = 0,
    linear_bias: bool = False,
    layernorm: bool = False,
) -> int:
    """What megatron-core (d98e8a64; core_v0.15.0 the same) builds for a hybrid pattern, no learned positions,
    ungated MLPs; with `linear_bias` (`add_bias_linear`) the attention, MLP, router and routed experts' biases, with
    `layernorm` a bias in every norm. mamba: (heads H, head width P, groups G, state N)."""
    nh, p, g, n = mamba
    i = nh * p
    conv = i + 2 * g * n
    per_kind = {
        # megatron/core/ssm/mamba_mixer.py `MambaMixer.__init__`: in_proj's fused norm and weight, conv1d weight
        # (d_conv 4) and bias, dt_bias, A_log, D, the gated RMSNorm, out_proj
        "M": h + h * (2 * i + 2 * g * n + nh) + conv * 4 + conv + 3 * nh + i + i * h,
        # megatron/core/transformer/attention.py `SelfAttention`: linear_qkv (with its fused norm), linear_proj
        "*": h + h * (heads + 2 * groups) * kv_channels + heads * kv_channels * h,
        # megatron/core/ssm/mlp_layer.py `MLPLayer` → megatron/core/transformer/mlp.py `MLP`: fc1 (fused norm), fc2
        "-": h + 2 * h * ffn,
        # megatron/core/transformer/moe: pre_mlp_layernorm, `TopKRouter.weight`, the grouped experts' fc1 and fc2,
        # `SharedExpertMLP`
        "E": h + experts * h + experts * 2 * h * moe_ffn + 2 * h * shared,
    }
    if linear_bias:
        # linear_qkv and linear_proj (attention.py `bias=self.config.add_bias_linear`), fc1 and fc2 (mlp.py), the
        # router's bias (moe/router.py `Router.__init__`), each grouped expert's fc1 and fc2 (moe/experts.py); the
        # Mamba mixer has none (`assert not bias`)
        per_kind["*"] += (heads + 2 * groups) * kv_channels + h
        per_kind["-"] += ffn + h
        per_kind["E"] += experts + experts * (moe_ffn + h)
    if layernorm:  # one norm per layer (fused into its first linear, or pre_mlp_layernorm) and the final norm
        per_kind = {k: v + h for k, v in per_kind.items()}
    layers = sum(per_kind[ch] for ch in pattern)
    # `LanguageModelEmbedding` word embeddings, the final norm, the output layer
    return layers + vocab * h + h + (h if layernorm else 0) + (vocab * h if untied else 0)


def _analyze(path: Path):
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, model_lookup=False))


def _written(tmp_path: Path, flags: str, script: str = "pretrain_hybrid.py"):
    path = tmp_path / "train.sh"
    path.write_text(
        f"torchrun --nproc_per_node 8 {script} --micro-batch-size 1 --seq-length 1024 --global-batch-size 8 --bf16 "
        f"{flags}\n"
    )
    return _analyze(path)


def _config(a) -> dict:
    return json.loads(a.resolution.resolved.arch.hf_config_json)


def test_examples_mamba_train_sh_is_estimated_with_megatron_cores_parameters():
    # `torchrun --nproc_per_node 8 ../../pretrain_hybrid.py … --hybrid-layer-pattern M-M-M--M-*M… --hidden-size 1024
    # --num-attention-heads 16 --group-query-attention --num-query-groups 8 --disable-bias-linear --normalization
    # RMSNorm --position-embedding-type none --untie-embeddings-and-output-weights`, vocabulary from a
    # SentencePiece model file (assumed: GPT-2's, padded to 50,304)
    a = _analyze(MAIN)
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert arch.family == "nemotron_h" and arch.layers == 48
    assert dict(arch.layer_kinds) == {"state space": 20, "attention": 4, "dense mlp": 24}
    assert _config(a)["hybrid_override_pattern"] == PATTERN_800M
    expected = megatron_core_params(
        PATTERN_800M,
        h=1024,
        heads=16,
        groups=8,
        kv_channels=64,
        ffn=4096,
        vocab=50304,
        untied=True,
        mamba=(32, 64, 8, 128),  # 2 · 1024 // 64 heads of 64, the TransformerConfig defaults
    )
    assert arch.params_total == expected == a.estimate.params_total
    plan = a.plan
    assert plan.tensor_parallel.value == 1 and plan.pipeline_parallel.value == 1
    assert plan.sequence_parallel.value is True and plan.distributed_optimizer.value is True
    assert plan.gpu_count.value == 8 and plan.micro_batch.value == 4 and plan.seq_len.value == 4096
    reasons = " ".join(a.estimate.approximate)
    assert "mamba_ssm" in reasons and "vocabulary not given" in reasons


def test_core_v0_15_ratios_allocate_the_pattern_main_writes_out():
    # core_v0.15.0 examples/mamba/train.sh: `pretrain_mamba.py --num-layers 48 --hybrid-attention-ratio 0.08
    # --hybrid-mlp-ratio 0.5`; d98e8a64 replaced those flags with the pattern Megatron allocates from them
    a = _analyze(V015)
    assert a.estimate is not None, a.error
    assert _config(a)["hybrid_override_pattern"] == PATTERN_800M
    assert a.resolution.resolved.arch.params_total == _analyze(MAIN).resolution.resolved.arch.params_total


def test_ratio_allocation_follows_megatron():
    # megatron/core/models/hybrid/hybrid_layer_allocation.py `pattern_from_ratios`: attention evenly spaced and
    # framed by Mamba layers, MLP layers among the Mamba layers; no ratio: all Mamba (the expected values are what
    # that function returns at d98e8a64)
    assert megatron_hybrid.pattern_from_ratios(4, 0.0, 0.0) == "MMMM"
    assert megatron_hybrid.pattern_from_ratios(10, 0.2, 0.0) == "MMM*MM*MMM"
    assert megatron_hybrid.pattern_from_ratios(48, 0.08, 0.5) == PATTERN_800M


def test_moe_hybrid_with_its_own_mamba_heads_counts_what_megatron_core_builds(tmp_path: Path):
    # `--mamba-num-heads` sets the mixer's width apart from the hidden size (d_inner = heads · head width); MoE layers
    # with a shared expert; squared-ReLU MLPs
    flags = (
        "--hybrid-layer-pattern ME*-ME --hidden-size 256 --num-attention-heads 4 --group-query-attention "
        "--num-query-groups 2 --kv-channels 96 --ffn-hidden-size 512 --squared-relu --num-experts 4 "
        "--moe-router-topk 2 --moe-ffn-hidden-size 128 --moe-shared-expert-intermediate-size 96 --mamba-num-heads 6 "
        "--mamba-head-dim 32 --mamba-num-groups 2 --mamba-state-dim 16 --disable-bias-linear --normalization RMSNorm "
        "--position-embedding-type none --untie-embeddings-and-output-weights --padded-vocab-size 1024 "
        "--tensor-model-parallel-size 2 --expert-model-parallel-size 2"
    )
    a = _written(tmp_path, flags)
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    expected = megatron_core_params(
        "ME*-ME",
        h=256,
        heads=4,
        groups=2,
        kv_channels=96,
        ffn=512,
        vocab=1024,
        untied=True,
        mamba=(6, 32, 2, 16),
        experts=4,
        moe_ffn=128,
        shared=96,
    )
    assert arch.params_total == expected
    assert (arch.num_experts, arch.experts_per_token) == (4, 2)
    assert a.plan.tensor_parallel.value == 2 and a.plan.expert_parallel.value == 2
    assert not any("not counted" in r for r in a.estimate.approximate), a.estimate.approximate


def test_the_config_builds_in_transformers_with_megatron_cores_count(tmp_path: Path):
    # the mapping is exact: transformers' NemotronH, built on meta from the config the run is read as, has the
    # parameters megatron-core builds
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    a = _written(
        tmp_path,
        "--hybrid-layer-pattern M*-EM --hidden-size 128 --num-attention-heads 4 --group-query-attention "
        "--num-query-groups 2 --num-experts 4 --moe-ffn-hidden-size 64 --moe-shared-expert-intermediate-size 32 "
        "--squared-relu --disable-bias-linear --normalization RMSNorm --position-embedding-type none "
        "--padded-vocab-size 512 --mamba-state-dim 16 --mamba-num-groups 2 --untie-embeddings-and-output-weights",
    )
    assert a.estimate is not None, a.error
    config = {k: v for k, v in _config(a).items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        model = transformers.NemotronHForCausalLM(transformers.NemotronHConfig(**config))
    built = sum(p.numel() for p in model.parameters())
    expected = megatron_core_params(
        "M*-EM",
        h=128,
        heads=4,
        groups=2,
        kv_channels=32,
        ffn=512,
        vocab=512,
        untied=True,  # transformers 5.24 `NemotronHForCausalLM` ties no weights (`_tied_weights_keys = {}`)
        mamba=(4, 64, 2, 16),
        experts=4,
        moe_ffn=64,
        shared=32,
    )
    assert built == expected == a.resolution.resolved.arch.params_total


def test_tied_embeddings_are_counted_once(tmp_path: Path):
    # Megatron ties the output layer to the word embedding unless `--untie-embeddings-and-output-weights`
    # (megatron/core/models/common/language_module/language_module.py `setup_embeddings_and_output_layer`)
    a = _written(
        tmp_path,
        "--hybrid-layer-pattern M*M- --hidden-size 256 --num-attention-heads 4 --disable-bias-linear "
        "--normalization RMSNorm --position-embedding-type none --padded-vocab-size 1024",
    )
    assert a.estimate is not None, a.error
    expected = megatron_core_params(
        "M*M-", h=256, heads=4, groups=4, kv_channels=64, ffn=1024, vocab=1024, untied=False, mamba=(8, 64, 8, 128)
    )
    assert a.resolution.resolved.arch.params_total == expected


def test_megatron_defaults_count_the_biases_megatron_core_builds(tmp_path: Path):
    # Megatron's defaults: LayerNorm (biases in every norm), linear biases (`add_bias_linear` True without
    # `--disable-bias-linear`: megatron/core/transformer/transformer_config.py), learned absolute positions (named,
    # not counted). Before, the biases were named "not counted" and the total was the bias-free model's.
    flags = "--hybrid-layer-pattern M*ME- --hidden-size 256 --num-attention-heads 4 --num-experts 4"
    a = _written(tmp_path, f"{flags} --padded-vocab-size 1024")
    assert a.estimate is not None, a.error
    sizes = dict(h=256, heads=4, groups=4, kv_channels=64, ffn=1024, vocab=1024, untied=False, experts=4, moe_ffn=1024)
    expected = megatron_core_params("M*ME-", mamba=(8, 64, 8, 128), linear_bias=True, layernorm=True, **sizes)
    assert a.resolution.resolved.arch.params_total == expected == a.estimate.params_total
    assert _config(a)["num_experts_per_tok"] == 2  # `moe_router_topk` default
    reasons = " ".join(a.estimate.approximate)
    assert "biases" not in reasons
    assert "learned absolute position embeddings not counted" in reasons


@pytest.mark.parametrize(
    "flags, why",
    [
        ("--hybrid-layer-pattern M*G-", "`G` (gated DeltaNet)"),
        ("--hybrid-layer-pattern M*M*/MM/MM", "multi-token prediction"),
        ("--hybrid-layer-pattern M-M- --swiglu", "gated (SwiGLU) MLPs"),
        (
            "--hybrid-layer-pattern M*M- --spec megatron.core.models.hybrid.hybrid_layer_specs "
            "gated_delta_product_stack_spec",
            "is not Megatron's hybrid stack spec",
        ),
        ("--hybrid-layer-pattern MEM*", "without `--num-experts`"),
        # megatron/core/transformer/moe/shared_experts.py `SharedExpertMLP.__init__`: `assert
        # config.add_bias_linear == False`, "bias is not supported in the shared experts"
        (
            "--hybrid-layer-pattern M*E --num-experts 4 --moe-shared-expert-intermediate-size 128",
            "shared experts with linear biases",
        ),
    ],
)
def test_hybrids_whose_layers_are_not_built_keep_the_refusal_with_the_reason(tmp_path: Path, flags: str, why: str):
    a = _written(tmp_path, f"{flags} --hidden-size 256 --num-attention-heads 4 --normalization RMSNorm")
    assert a.estimate is None
    assert a.error.startswith("training of a hybrid Mamba/attention model"), a.error
    assert why in a.error


def test_a_hybrid_pattern_outside_the_hybrid_entry_points_is_still_refused(tmp_path: Path):
    # pretrain_gpt.py builds a GPTModel: a hybrid pattern there is not read as Megatron's hybrid model
    a = _written(tmp_path, "--hybrid-layer-pattern M*M- --hidden-size 256 --num-attention-heads 4", "pretrain_gpt.py")
    assert a.estimate is None
    assert a.error.startswith("training of a hybrid Mamba/attention model")
    assert "`pretrain_gpt.py` builds its own model" in a.error
