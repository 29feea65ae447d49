"""Checkpointing of some blocks or some ops, through the public estimator: torchtitan's every-N-th-block and op-level
selective checkpointing, sequence parallelism and the vocabulary-parallel loss of its tensor-parallel plan, and
Megatron's selective recompute of the core attention (Korthikanti et al. 2022, §4)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan

H100 = GpuSpec(name="H100-96GB", memory_gib=96.0, usable_gib=94.85, bf16=True)
ADAMW = OptimizerSpec(name="torch.optim.AdamW", family="adamw", states=2)
LLAMA_8B = ModelArch(
    id="meta-llama/Llama-3.1-8B",
    family="llama",
    hidden=4096,
    layers=32,
    heads=32,
    kv_heads=8,
    intermediate=14336,
    vocab=128256,
)


def titan(**changes) -> ResolvedPlan:
    """torchtitan's Llama 3.1 8B step: fp32 parameters under FSDP2 bf16 mixed precision over 8 GPUs."""
    base = dict(
        arch=LLAMA_8B,
        framework="torchtitan",
        optimizer=ADAMW,
        gpu=H100,
        seq_len=8192,
        micro_batch=2,
        weight_dtype="fp32",
        compute_dtype="bf16",
        amp=True,
        fsdp_mixed_precision=True,
        strategy="fsdp",
        zero_stage=3,
        world_size=8,
        packing=True,
        attn_mask=False,
        objective="pretrain",
    )
    base.update(changes)
    return ResolvedPlan(**base)


def activations(rp: ResolvedPlan) -> int:
    return estimate(rp, limits=False).components["activations"]


def test_op_level_saves_every_other_matmul_and_attention():
    """torchtitan's save list on a Llama block: the input, wq (1st mm), wv (3rd), the attention's output and fp32
    logsumexp, w1 (5th) and w2 (7th); wk, wo and w3 (the even ones) and everything pointwise are recomputed."""
    rp = titan(selective_recompute="op")
    h, q, kv, inter = 4096, 4096, 1024, 14336
    assert C.op_saved_per_token(rp) == 2 * h + 2 * q + 2 * kv + 2 * q + 4 * 32 + 2 * inter + 2 * h
    assert C.saved_per_token(rp)[0] == 32 * C.op_saved_per_token(rp)
    tokens = 2 * 8192
    assert activations(rp) >= tokens * 32 * C.op_saved_per_token(rp)


@pytest.mark.parametrize("batch, seq", [(1, 4096), (2, 8192), (4, 2048)])
def test_op_level_lies_between_full_and_no_checkpointing(batch, seq):
    """The peak with op-level selective checkpointing: above full checkpointing, well below none (before, the
    setting was ignored and the estimate was that of no checkpointing)."""
    peaks = {
        name: estimate(titan(micro_batch=batch, seq_len=seq, **kw), limits=False).device_bytes
        for name, kw in {"none": {}, "op": {"selective_recompute": "op"}, "full": {"grad_checkpointing": True}}.items()
    }
    assert peaks["full"] < peaks["op"] < peaks["none"]
    none_acts, op_acts = (
        activations(titan(micro_batch=batch, seq_len=seq)),
        activations(titan(micro_batch=batch, seq_len=seq, selective_recompute="op")),
    )
    assert op_acts < 0.5 * none_acts


@pytest.mark.parametrize("every", [2, 3, 4, 8])
def test_every_nth_block(every):
    """⌊L/n⌋ of the L blocks keep only their input, the rest everything; n = 1 is full checkpointing."""
    rp = titan(grad_checkpointing=True, checkpoint_every=every)
    k = 32 // every
    assert C.checkpointed_blocks(rp) == k
    one = C.activations_per_token(rp)[1]
    assert C.saved_per_token(rp)[0] == pytest.approx(k * C.block_input_per_token(rp) + (32 - k) * one)
    full, none = (activations(titan(grad_checkpointing=True)), activations(titan()))
    assert full < activations(rp) < none
    if every < 8:
        assert activations(rp) < activations(titan(grad_checkpointing=True, checkpoint_every=every * 2))
    assert activations(titan(grad_checkpointing=True, checkpoint_every=1)) == full


def test_fsdp_mixed_precision_checkpoints_16bit_block_inputs():
    """FSDP's MixedPrecision casts the forward's inputs to bf16: the checkpointed block inputs are 2h, not the 4h
    of an autocast fp32 residual stream."""
    assert C.block_input_per_token(titan(grad_checkpointing=True)) == 2 * 4096
    assert C.block_input_per_token(titan(grad_checkpointing=True, fsdp_mixed_precision=False)) == 4 * 4096


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_sequence_parallel_shards_checkpoints_and_loss_parallel_the_logits(tp):
    plain = titan(grad_checkpointing=True, tensor_parallel=tp, world_size=8 // tp if tp < 8 else 1)
    sp = plain.with_changes(sequence_parallel=True)
    assert C.checkpoint_per_token(sp) == pytest.approx(C.checkpoint_per_token(plain) / tp)
    assert activations(sp) < activations(plain)
    lp = sp.with_changes(loss_parallel=True)
    logits = estimate(sp, limits=False).components["logits"]
    # DTensor's loss-parallel cross-entropy: 16 bytes per logit of the rank's vocabulary shard
    assert estimate(lp, limits=False).components["logits"] == pytest.approx(2 * 8192 * 16 * 128256 / tp, rel=1e-6)
    assert estimate(lp, limits=False).components["logits"] < logits


GPT = ModelArch(
    id="gpt-24L-2048h",
    family="gpt2",
    mlp="gelu",
    norm="layernorm",
    hidden=2048,
    layers=24,
    heads=16,
    intermediate=8192,
    vocab=51200,
)


def megatron(**changes) -> ResolvedPlan:
    base = dict(
        arch=GPT,
        framework="custom",
        optimizer=ADAMW,
        gpu=H100,
        seq_len=2048,
        micro_batch=4,
        strategy="megatron",
        tensor_parallel=2,
        sequence_parallel=True,
        weight_dtype="bf16",
        compute_dtype="bf16",
        master_weights=True,
    )
    base.update(changes)
    return ResolvedPlan(**base)


@pytest.mark.parametrize("seq", [1024, 2048, 4096])
def test_megatron_selective_recompute_drops_the_unfused_attention_scores(seq):
    """Unfused core attention keeps 5·a·s bytes per token per layer (softmax output, dropout mask and output:
    Korthikanti et al. 5as²b), split over TP; selective recompute keeps none of them and rebuilds one layer's in
    backward. Fused attention keeps none either way."""
    eager = megatron(seq_len=seq, attn_impl="eager")
    selective = eager.with_changes(selective_recompute="core_attention")
    tokens = 4 * seq
    scores = 5 * 16 * seq * tokens / 2  # per layer, split over TP 2
    saved = activations(eager) - activations(selective)
    assert saved == pytest.approx(24 * scores - scores, rel=1e-3)
    fused = megatron(seq_len=seq)
    assert activations(fused) == activations(fused.with_changes(selective_recompute="core_attention"))


@pytest.mark.parametrize("flags", ["--recompute-granularity selective", "--recompute_granularity selective"])
def test_megatron_flags_read_selective_and_backend(tmp_path, flags):
    """`--recompute-granularity selective` is read as core-attention recompute, `--attention-backend local` as an
    unfused attention; the estimate of the unfused run drops by the score matrices when selective is on."""
    base = (
        "torchrun --nproc_per_node 2 pretrain_gpt.py --tensor-model-parallel-size 2 --sequence-parallel "
        "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --ffn-hidden-size 8192 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 4 --vocab-size 51200 --bf16 --attention-backend local"
    )
    out = {}
    for name, extra in (("plain", ""), ("selective", flags)):
        script = tmp_path / f"{name}.sh"
        script.write_text(f"{base} {extra}\n")
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "vramlens",
                "estimate",
                "--format",
                "json",
                "--offline",
                "--gpu",
                "H100",
                str(script),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        out[name] = json.loads(run.stdout)
    sel = out["selective"]
    assert sel["sources"]["selective_recompute"]["value"] == "core_attention"
    assert sel["sources"]["attn_impl"]["value"] == "eager"
    assert sel["sources"]["grad_checkpointing"]["value"] is False
    assert sel["components_gib"]["activations"] < out["plain"]["components_gib"]["activations"] - 5
