"""Megatron-core layouts (pipeline, tensor, sequence, expert parallelism, the distributed optimizer) against
Megatron-LM's own formula: megatron/training/theoretical_memory_usage.py at NVIDIA/Megatron-LM 00caa53a
(`compute_weight_and_optimizer_memory`, `compute_activation_memory` with sequence parallelism and selective recompute,
`compute_activation_memory_without_sp` otherwise), re-implemented below from that file for a GPT layer
(LayerNorm, GELU MLP of 4h, full attention heads), and LLaMA-Factory's Megatron example judged as its header says it
ran."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from model_shapes import QWEN3_30B_A3B as MOE_30B_A3B
from vramlens.estimate import GIB, estimate
from vramlens.estimate import components as C
from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.resolved import ResolvedPlan

H100 = GpuSpec(name="H100", memory_gib=79.2, usable_gib=79.2, bf16=True)
ADAM = OptimizerSpec(name="adamw_torch", states=2)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "megatron"


def gpt(h=4096, layers=32, heads=32, vocab=51200, tied=False) -> ModelArch:
    return ModelArch(
        id=f"gpt-{layers}L-{h}h",
        family="gpt2",
        mlp="gelu",
        norm="layernorm",
        hidden=h,
        layers=layers,
        heads=heads,
        intermediate=4 * h,
        vocab=vocab,
        tied_embeddings=tied,
    )


# --- Megatron-LM 00caa53a theoretical_memory_usage.py, re-implemented (dense GPT, no MTP, no MLA) -----------------


def megatron_weight_and_optimizer(a) -> float:
    norm_size = 2  # LayerNorm: weight and bias
    layer = 2 * a.hidden_size * (a.ffn_hidden_size + norm_size) + 2 * a.hidden_size * a.hidden_size * 2
    embedding = a.hidden_size * a.padded_vocab_size
    block = layer * a.num_layers + norm_size * a.hidden_size
    most_loaded = (block / a.pipeline_model_parallel_size + embedding) / a.tensor_model_parallel_size
    if a.untie_embeddings_and_output_weights and a.pipeline_model_parallel_size == 1:
        most_loaded += embedding / a.tensor_model_parallel_size
    per_param = 18 if not a.use_distributed_optimizer else 6 + 12 / a.data_parallel_size
    return most_loaded * per_param


def _schedule(a, memory: float, num_microbatches: int) -> float:
    pp = a.pipeline_model_parallel_size
    if a.virtual_pipeline_model_parallel_size is not None:
        memory *= 1 + (pp - 1) / (pp * a.virtual_pipeline_model_parallel_size)
    if a.virtual_pipeline_model_parallel_size is None and pp > 1:
        memory *= min(1, num_microbatches / pp)
    return memory


def megatron_activation(a, num_microbatches: int) -> float:
    s, b, h, pp, t = (
        a.seq_length,
        a.micro_batch_size,
        a.hidden_size,
        a.pipeline_model_parallel_size,
        a.tensor_model_parallel_size,
    )
    if a.sequence_parallel and a.recompute_granularity == "selective":
        mem = s * b * h * (18 + 4 * a.ffn_hidden_size / h) * a.num_layers
        mem += 8 * s * b * pp + s * b * h * pp
        mem = _schedule(a, mem, num_microbatches)
        if pp == 1:
            mem += s * b * h * 4 * (1 + a.padded_vocab_size / h)
        return mem / t
    mem = s * b * h * (10 + 24 / t) * a.num_layers
    mem += 8 * s * b * pp + s * b * h * pp
    mem = _schedule(a, mem, num_microbatches)
    if pp == 1:
        mem += (s * b * a.padded_vocab_size / t + s * b * h) * 2
    return mem * 1.05


def megatron_args(arch: ModelArch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp=None) -> SimpleNamespace:
    return SimpleNamespace(
        hidden_size=arch.hidden,
        ffn_hidden_size=arch.intermediate,
        num_layers=arch.layers,
        padded_vocab_size=arch.vocab,
        untie_embeddings_and_output_weights=not arch.tied_embeddings,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        data_parallel_size=dp,
        use_distributed_optimizer=dist_opt,
        seq_length=seq,
        micro_batch_size=mbs,
        sequence_parallel=sp,
        recompute_granularity="selective" if sp else None,
        virtual_pipeline_model_parallel_size=vpp,
    )


def plan(arch, tp=1, pp=1, dp=1, mbs=1, seq=2048, sp=False, dist_opt=False, vpp=1, m=1, **kw) -> ResolvedPlan:
    base = dict(
        arch=arch,
        optimizer=ADAM,
        gpu=H100,
        strategy="megatron",
        weight_dtype="bf16",
        compute_dtype="bf16",
        tensor_parallel=tp,
        pipeline_parallel=pp,
        world_size=dp,
        micro_batch=mbs,
        seq_len=seq,
        sequence_parallel=sp,
        distributed_optimizer=dist_opt,
        virtual_pipeline=vpp,
        grad_accum=m,
        attn_impl="flash_attention_2",
    )
    base.update(kw)
    return ResolvedPlan(**base)


# (arch, tp, pp, dp, micro-batch, seq, sequence parallel, distributed optimizer, virtual stages, micro-batches)
LAYOUTS = [
    (gpt(), 2, 1, 4, 1, 2048, True, True, None, 4),
    (gpt(), 4, 4, 2, 1, 4096, True, False, None, 8),
    (gpt(), 2, 4, 8, 2, 2048, True, True, 2, 16),
    (gpt(h=2048, layers=24, heads=16, tied=True), 1, 2, 16, 4, 1024, True, True, None, 32),
    (gpt(h=5120, layers=40, heads=40), 8, 2, 4, 1, 8192, True, True, 4, 8),
    (gpt(), 2, 4, 2, 1, 2048, False, True, None, 2),  # without SP: 10 + 24/t, fewer micro-batches than stages
    (gpt(h=2048, layers=24, heads=16), 4, 2, 1, 2, 2048, False, False, None, 8),
]


@pytest.mark.parametrize("arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp, m", LAYOUTS)
def test_first_stage_matches_megatron_theoretical_memory(arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp, m):
    rp = plan(arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp or 1, m)
    first = C.stages(rp)[0]
    w, g, o = C.megatron_state_bytes(rp, first)
    args = megatron_args(arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp)
    assert w + g + o == pytest.approx(megatron_weight_and_optimizer(args), rel=1e-4)
    acts, _ = C.megatron_activations(rp, first)
    if pp == 1:  # the formula counts the output layer on the only stage, with its fp32 logits but not the
        # 16-bit logits the loss holds beside them (components.megatron_head_per_token)
        acts += seq * mbs * C.megatron_head_per_token(rp)
        acts -= seq * mbs * C.MEGATRON_LOGITS_16BIT_BYTES * arch.vocab / tp
    expected = megatron_activation(args, m)
    if not sp:
        expected /= 1.05  # the formula's allowance for misc temporaries, not an activation
    assert acts == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp, m", [l for l in LAYOUTS if l[2] == 1])
def test_single_stage_estimate_is_the_formula_total(arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp, m):
    """With one stage the estimate's allocated peak is the formula's weights + optimizer + activations."""
    args = megatron_args(arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp)
    est = estimate(plan(arch, tp, pp, dp, mbs, seq, sp, dist_opt, vpp or 1, m), limits=False)
    expected = megatron_weight_and_optimizer(args) + megatron_activation(args, m)
    expected += seq * mbs * C.MEGATRON_LOGITS_16BIT_BYTES * arch.vocab / tp  # 16-bit logits beside the fp32 ones
    assert est.allocated_bytes == pytest.approx(expected, rel=1e-3)


def test_pipeline_stages_divide_weights_and_keep_micro_batches_in_flight():
    arch = gpt()
    one = estimate(plan(arch, dp=8, m=8), limits=False)
    four = estimate(plan(arch, pp=4, dp=2, m=8), limits=False)
    # a quarter of the layers (plus the embedding or the output layer) per stage
    assert four.components["weights"] < 0.4 * one.components["weights"]
    # the first stage holds 4 micro-batches of its 8 layers: the activations of 32 layers, as without pipelining
    first = C.stages(plan(arch, pp=4, dp=2, m=8))[0]
    assert first.in_flight == 4
    few = C.stages(plan(arch, pp=4, dp=2, m=2))[0]
    assert few.in_flight == 2  # only 2 micro-batches per step
    inter = C.stages(plan(arch, pp=4, dp=2, m=8, vpp=2))[0]
    assert inter.in_flight == pytest.approx(4 * (1 + 3 / 8))  # Megatron's interleaving penalty


def test_expert_parallelism_divides_the_experts_and_their_states():
    moe = MOE_30B_A3B
    states = {}
    for ep in (1, 2, 8):  # world 64: PP 4 × DP 16
        rp = plan(moe, pp=4, dp=16, dist_opt=True, m=8, expert_parallel=ep)
        states[ep] = C.megatron_state_bytes(rp, C.stages(rp)[0])
    # weights and gradients of the experts fall with EP (the attention and embedding stay whole)
    assert states[2][0] < 0.6 * states[1][0] and states[8][0] < 0.2 * states[1][0]
    assert states[8][1] < 0.2 * states[1][1]
    # the experts' optimizer state shards over world ÷ (EP × PP): the same bytes per rank whatever EP is
    assert states[8][2] == pytest.approx(states[1][2], rel=0.05)
    # world 8 (PP 4 × DP 2) with EP 2 leaves one expert-data-parallel rank: the experts' states are not sharded
    assert C.megatron_dp(plan(moe, pp=4, dp=2, dist_opt=True, expert_parallel=2)) == (2, 1)


def test_context_and_sequence_parallel_divide_activations():
    arch = gpt()
    base = C.megatron_activations(plan(arch, tp=4, m=1), C.stages(plan(arch, tp=4))[0])[0]
    sp = C.megatron_activations(plan(arch, tp=4, sp=True), C.stages(plan(arch, tp=4))[0])[0]
    cp = C.megatron_activations(plan(arch, tp=4, context_parallel=2), C.stages(plan(arch, tp=4))[0])[0]
    assert sp < base and sp == pytest.approx(base * 34 / 4 / (10 + 24 / 4), rel=0.01)
    assert cp == pytest.approx(base / 2, rel=0.01)


def test_full_recompute_keeps_layer_inputs():
    arch = gpt()
    rp = plan(arch, tp=2, sp=True, grad_checkpointing=True)
    acts, _ = C.megatron_activations(rp, C.stages(rp)[0])
    no = C.megatron_activations(plan(arch, tp=2, sp=True), C.stages(rp)[0])[0]
    per_layer_full = 2048 * 4096 * 34 / 2
    # 32 checkpointed inputs (2sbh / t each) and one layer recomputed
    assert acts == pytest.approx(32 * 2048 * 4096 * 2 / 2 + per_layer_full + 2048 * (8 + 4096) / 2, rel=0.01)
    assert acts < no / 10


def run_cli(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def test_llamafactory_megatron_qwen3_moe_fits_as_its_header_says():
    """LLaMA-Factory examples/megatron/qwen3_moe_full.yaml: "GPU memory: 8 * 78GB" with PP 4, EP 2, the distributed
    optimizer and full recompute. It must fit an 80 GB card, near the stated figure."""
    path = (
        Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory" / "ff6d4d12" / "megatron_qwen3_moe_full.yaml"
    )
    d = run_cli("--gpu", "8xA100-80GB", str(path))
    assert d["fits"] is True
    stated = 78e9 / GIB  # the header's 78 GB per GPU
    assert d["peak"]["device_gib"] == pytest.approx(stated, rel=0.08)
    comps = d["components_gib"]
    assert comps["optimizer"] > comps["weights"]  # fp32 main weights + Adam, experts not sharded (EDP 1)
