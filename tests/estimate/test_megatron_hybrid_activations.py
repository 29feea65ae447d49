"""Megatron-LM hybrid Mamba/attention runs: each layer's saved activations by its kind (estimate/components/megatron.py
`megatron_hybrid_layer_per_token`). The reference is written here from the code that saves the tensors, independently
of the estimator: megatron-core core_v0.15.0 / d98e8a64 (megatron/core/ssm/mamba_layer.py `MambaLayer`,
megatron/core/ssm/mamba_mixer.py `MambaMixer.forward` and its training path, megatron/core/transformer/
transformer_layer.py with megatron/core/models/mamba/mamba_layer_specs.py `mamba_stack_spec`) and mamba_ssm v2.3.1
(mamba_ssm/ops/triton/ssd_combined.py `MambaSplitConv1dScanCombinedFn.forward`: `ctx.save_for_backward(zxbcdt, …,
out_x, …)`; mamba_ssm/ops/triton/layernorm_gated.py `LayerNormFn.forward`: `ctx.save_for_backward(x, weight, bias,
mean, rstd, z)`, rstd fp32 per row and group)."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.estimate.components import megatron
from vramlens.estimate.components.pipeline import stages
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "megatron"
V015 = FIXTURES / "Megatron-LM-core_v0.15.0" / "mamba" / "train.sh"

# bytes a layer keeps per token outside its mixer, whatever its kind: the norm's input and the input of the linear the
# norm is fused into (TELayerNormColumnParallelLinear, 16-bit each) and the bias-dropout-add's 1-byte mask; replicated
# over the TP ranks unless sequence parallelism splits them (Korthikanti et al. 2022 count a transformer layer's two
# halves at 5h each: 10h)
SUBLAYER_REPLICATED = 2 + 2 + 1


def hand_per_token(
    *,
    h: int,
    q_dim: int,
    kv_dim: int,
    ffn: int,
    mamba: tuple[int, int, int, int] = (0, 0, 0, 0),
    experts: int = 0,
    topk: int = 0,
    moe_ffn: int = 0,
    shared: int = 0,
    etp: int = 1,
) -> dict[str, tuple[int, int]]:
    """(split over TP, replicated) bytes per token of each kind of hybrid layer, bf16, flash attention, ungated
    (squared-ReLU / GELU) MLPs. mamba: (heads H, head width P, groups G, state N)."""
    nh, p, g, n = mamba
    i = nh * p
    repl = SUBLAYER_REPLICATED * h
    return {
        # `MambaMixer._ssm_training` (core_v0.15.0 `ssm_training`): in_proj's output z|x|B|C|dt made contiguous and
        # saved by the fused kernel as `zxbcdt`; the kernel's `out_x` (the scan output before the z gate); the gated
        # RMSNorm's input and its fp32 rstd per group; out_proj's input
        "linear_attention": (2 * (2 * i + 2 * g * n + nh) + 2 * i + 2 * i + 4 * g + 2 * i, repl),
        # attention-only TransformerLayer: Q, K, V and the core attention's output (linear_proj's input)
        "full_attention": (2 * q_dim + 2 * kv_dim + 2 * kv_dim + 2 * q_dim, repl),
        # MLPLayer: linear_fc1's output (the activation's input) and the activation's output (linear_fc2's input)
        "mlp": (2 * ffn + 2 * ffn, repl),
        # MoE-only layer: the shared expert as an MLP; the router's fp32 logits; per routed copy of a token the
        # experts' fc1 input gathered over expert TP, their fc1 output and activation, the unpermuted output
        "moe": (4 * shared, repl + 4 * experts + topk * (2 * h * etp + 4 * moe_ffn + 2 * h)),
    }


def _analyze(path: Path):
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, model_lookup=False))


def _written(tmp_path: Path, flags: str):
    path = tmp_path / "train.sh"
    path.write_text(
        "torchrun --nproc_per_node 8 pretrain_hybrid.py --micro-batch-size 1 --seq-length 1024 --global-batch-size 8 "
        f"--bf16 {flags}\n"
    )
    return _analyze(path)


TINY = (
    "--hybrid-layer-pattern M*-E --hidden-size 256 --num-attention-heads 4 --group-query-attention "
    "--num-query-groups 2 --kv-channels 96 --ffn-hidden-size 512 --squared-relu --num-experts 4 --moe-router-topk 2 "
    "--moe-ffn-hidden-size 128 --moe-shared-expert-intermediate-size 96 --mamba-num-heads 8 --mamba-head-dim 32 "
    "--mamba-num-groups 2 --mamba-state-dim 16 --disable-bias-linear --normalization RMSNorm "
    "--position-embedding-type none --padded-vocab-size 1024 --tensor-model-parallel-size 2 --sequence-parallel "
    "--moe-token-dispatcher-type alltoall"  # (Megatron-LM's default, allgather: test_a_hybrid_stage_holds_its_...)
)
TINY_HAND = hand_per_token(
    h=256, q_dim=4 * 96, kv_dim=2 * 96, ffn=512, mamba=(8, 32, 2, 16), experts=4, topk=2, moe_ffn=128, shared=96, etp=2
)


def test_each_kind_of_layer_keeps_what_megatron_core_saves(tmp_path: Path):
    a = _written(tmp_path, TINY)
    assert a.estimate is not None, a.error
    rp = a.resolution.resolved
    assert (rp.tensor_parallel, rp.sequence_parallel, rp.attn_impl) == (2, True, "sdpa")
    for kind, (split, repl) in TINY_HAND.items():
        assert megatron.megatron_hybrid_layer_per_token(rp, kind) == (split, repl), kind


def test_a_hybrid_stage_holds_its_layers_by_kind(tmp_path: Path):
    # one of each kind, split and replicated parts both over TP = SP = 2, and the first stage's token ids (int64)
    # and embedding dropout mask (theoretical_memory_usage)
    a = _written(tmp_path, TINY)
    rp = a.resolution.resolved
    (only,) = stages(rp)
    tokens = 1024
    per_token = sum(split / 2 + repl / 2 for split, repl in TINY_HAND.values()) + (8 + 256) / 2
    acts, a2a = megatron.megatron_activations(rp, only)
    assert acts == int(tokens * per_token)
    # the one MoE layer's all-to-all: each chosen expert's token sent and received, from the rank's SP shard
    assert a2a == 2 * 2 * 2 * 256 * tokens // 2
    # Megatron-LM's default all-gather dispatcher: the TP × EP group's (2 × 1) tokens gathered on each rank — their
    # routing map and probabilities over 4 experts, hidden states in the global buffer, and the combine's 16-bit
    # and fp32 rows (MoEAllGatherTokenDispatcher)
    gathered = _written(tmp_path, TINY.replace("alltoall", "allgather")).resolution.resolved
    assert gathered.ep_dispatch == "all_gather"
    assert megatron.megatron_activations(gathered, only)[1] == 2 * tokens // 2 * (8 * 256 + 4 * 5)


def test_pipeline_stages_hold_consecutive_layers_of_the_pattern(tmp_path: Path):
    # `MambaStack._select_layers_for_pipeline_parallel` (core_v0.15.0 megatron/core/ssm/mamba_block.py): rank r holds
    # layers [r·L/PP, (r+1)·L/PP); 1F1B keeps PP − r micro-batches in flight
    a = _written(
        tmp_path,
        "--hybrid-layer-pattern MMM* --hidden-size 256 --num-attention-heads 4 --mamba-num-groups 2 "
        "--mamba-state-dim 16 --disable-bias-linear --normalization RMSNorm --position-embedding-type none "
        "--padded-vocab-size 1024 --pipeline-model-parallel-size 2",
    )
    assert a.estimate is not None, a.error
    rp = a.resolution.resolved
    assert rp.grad_accum >= 2
    hand = hand_per_token(h=256, q_dim=256, kv_dim=256, ffn=1024, mamba=(8, 64, 2, 16))
    mamba, attention = (sum(hand[k]) for k in ("linear_attention", "full_attention"))
    first, last = stages(rp)
    assert megatron.megatron_activations(rp, first)[0] == int(1024 * (2 * (2 * mamba + 8 + 256)))
    assert megatron.megatron_activations(rp, last)[0] == int(1024 * (mamba + attention))


def test_examples_mamba_train_sh_falls_from_the_all_transformer_figure():
    # core_v0.15.0 examples/mamba/train.sh: 48 layers `M-M-M--M-*M…` (20 Mamba, 4 attention, 24 MLP), h 1024, 16
    # heads in 8 query groups, ffn 4h, Mamba-2 mixers of 32 heads of 64 (d_inner 2h), 8 groups, state 128; TP 1,
    # micro-batch 4 of 4,096 tokens
    a = _analyze(V015)
    assert a.estimate is not None, a.error
    rp = a.resolution.resolved
    kinds = dict(rp.arch.layer_kinds)
    assert kinds == {"state space": 20, "attention": 4, "dense mlp": 24}
    hand = hand_per_token(h=1024, q_dim=1024, kv_dim=512, ffn=4096, mamba=(32, 64, 8, 128))
    per_layer = {k: sum(v) for k, v in hand.items()}
    assert (per_layer["linear_attention"], per_layer["full_attention"], per_layer["mlp"]) == (29792, 11264, 21504)
    tokens = 4 * 4096
    embedding = 8 + 1024
    layers = 20 * per_layer["linear_attention"] + 4 * per_layer["full_attention"] + 24 * per_layer["mlp"]
    assert a.estimate.components["activations"] == tokens * (layers + embedding)
    # every layer sized as a Megatron transformer layer (attention and an MLP), as before layers had kinds
    split, repl = megatron.megatron_layer_per_token(rp, moe=False)
    all_transformer = tokens * (48 * (split + repl) + embedding)
    fall = tokens * sum(
        n * (split + repl - per_layer[k]) for k, n in (("linear_attention", 20), ("full_attention", 4), ("mlp", 24))
    )
    assert all_transformer - a.estimate.components["activations"] == fall > 0
    reasons = " ".join(a.estimate.approximate)
    assert "sized by layer kind" in reasons and "whatever its kind" not in reasons


def test_the_unfused_mamba_path_is_named(tmp_path: Path):
    # `--disable-mamba-mem-eff-path` (`use_mamba_mem_eff_path` False): causal_conv1d and `mamba_chunk_scan_combined`
    a = _written(tmp_path, TINY + " --disable-mamba-mem-eff-path")
    assert a.estimate is not None, a.error
    assert any("--disable-mamba-mem-eff-path" in r for r in a.estimate.approximate)
    assert not any("--disable-mamba-mem-eff-path" in r for r in _written(tmp_path, TINY).estimate.approximate)
