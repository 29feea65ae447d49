"""Linear inputs: what a block's linears and their LoRA adapters keep of their inputs for backward."""

from __future__ import annotations

from typing import NamedTuple

from vramlens.estimate.components.adapters import (
    VECTOR_METHODS,
    adalora_per_token,
    miss_per_token,
    vector_adapter_per_token,
)
from vramlens.estimate.components.common import (
    HF_C_ATTN_FAMILIES,
    HF_FUSED_GATE_UP,
    HF_ONE_QKV_LINEAR,
    HF_ROPE_QKV,
    adapter_computes_fp32,
    amp_fp32_stream,
    compiled_block,
    fp32_residual,
    has_linear,
    unsloth_kernels,
)
from vramlens.estimate.components.experts import (
    expert_bytes,
    expert_parameters,
    expert_passes,
    experts_adaptable,
    moves_mlp_targets,
)
from vramlens.estimate.components.sharding import fsdp1_adapter_input_upcast
from vramlens.estimate.shapes import mla_linears
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.resolved import ResolvedPlan


def amp_input_casts(rp: ResolvedPlan, group: str, present: list[str]) -> int:
    """16-bit copies kept of one fp32 input under AMP: autocast casts an activation for each linear that reads it
    (only leaf weights go into autocast's cache: `cached_cast` in aten/src/ATen/autocast_mode.cpp, torch 2.13,
    caches `arg.requires_grad() && arg.is_leaf()` tensors), and each matmul keeps its cast for the weight's
    gradient. q, k and v read the attention norm's fp32 output (three copies), gate and up the MLP norm's (two);
    a fused q|k|v or gate|up linear reads it once; down reads the 16-bit act(gate)·up product, no cast."""
    if group == "down" or rp.arch.is_moe and group != "q":
        return 1
    fused = rp.fused_qkv or (
        rp.framework in HF_MODEL_FRAMEWORKS and rp.arch.family in HF_ROPE_QKV | HF_C_ATTN_FAMILIES | HF_ONE_QKV_LINEAR
    )
    if group == "q" and fused or group == "gate" and rp.arch.family in HF_FUSED_GATE_UP:
        return 1
    return max(len(present), 1)


def adapter_input(rp: ResolvedPlan) -> tuple[bool, int]:
    """(whether each LoRA adapter keeps its own cast of its input, bytes per element of that cast). PEFT casts each
    adapter's input to the adapter dtype in every module (`_cast_input_dtype` in peft src/peft/tuners/lora/layer.py);
    under autocast lora_A then runs in 16-bit and keeps its own 16-bit cast of that input (one per module, activations
    are not in autocast's cache), so the bytes kept per element are c, not 4. FSDP1's mixed precision over fp32
    adapters in units of their own casts the same way (`fsdp1_adapter_input_upcast`)."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    autocast = fp32_residual(rp) or fsdp1_adapter_input_upcast(rp)
    adapter_fp32 = (adapter_computes_fp32(rp) and c == 2) or autocast
    return adapter_fp32, c if autocast else (4 if adapter_fp32 else c)


def o_input_per_token(rp: ResolvedPlan) -> float:
    """What o's adapter keeps of its input beyond the attention's output, which attention keeps anyway (eager's is a
    fresh reshape): its own cast of it, or under LoRA dropout its dropped copy and a 1-byte mask."""
    targets = set(rp.lora_targets)
    if rp.peft == "none" or not ("all-linear" in targets or "o" in targets):
        return 0.0
    adapter_fp32, a = adapter_input(rp)
    if rp.lora_dropout > 0:
        return (a + 1) * rp.arch.q_dim
    if adapter_fp32:
        return a * rp.arch.q_dim
    return 0.0


def o_keeps_attention_output(rp: ResolvedPlan) -> bool:
    """Whether o keeps the attention output itself: its adapter reads it as it is (no cast or dropout of its own), or
    it is a 4-bit linear of bitsandbytes < 0.43.2 (`quant_keeps_input`)."""
    targets = set(rp.lora_targets)
    keeps_quant_input = rp.quant_bits == 4 and rp.quant_keeps_input
    return ("all-linear" in targets or "o" in targets) and o_input_per_token(rp) == 0 or keeps_quant_input


# canonical names of the attention linears of multi-head latent attention (`estimate.shapes.mla_linears`)
MLA_NAMES = frozenset({"q", "k", "v", "q_a", "q_b", "kv_a", "kv_b"})


def mla_groups(rp: ResolvedPlan, c: int) -> list[tuple[float, tuple[str, ...]]]:
    """The input groups of DeepSeek's multi-head latent attention (transformers 5.24
    models/deepseek_v3/modeling_deepseek_v3.py `DeepseekV3Attention.forward`): q_a (or the full-rank q_proj) and
    kv_a_proj_with_mqa both read the attention norm's output, one tensor; q_b reads q_a_layernorm's output and kv_b
    kv_a_layernorm's, each its own (o's input is the attention output: `o_input_per_token`)."""
    arch = rp.arch
    groups: list[tuple[float, tuple[str, ...]]] = [(c * arch.hidden, ("q", "q_a", "kv_a"))]
    if arch.q_lora_rank:
        groups.append((c * arch.q_lora_rank, ("q_b",)))
    groups.append((c * (arch.kv_lora_rank or 0), ("kv_b",)))
    return groups


class LinearInputs(NamedTuple):
    """What one block's linears keep of their inputs per token, in bytes."""

    total: float  # every linear of the block
    down: float  # of it, the down projection's input (+ an adapted expert stack's, kept inside the MLP)
    down_copy: float  # of `down`, a copy an adapter keeps in its own dtype
    mlp: float  # of it, the MLP linears'
    qkv: float  # of it, the q/k/v linears'
    qkv_adapters: float  # the q/k/v linears', counted only when adapters keep them (0 in a full fine-tune)
    o: float  # of it, o's adapter's own copy of the attention output (`o_input_per_token`)


def linear_inputs_per_token(rp: ResolvedPlan) -> LinearInputs:
    """What one block's linears keep of their inputs (docs/memory-model.md, "Activations"). Linear inputs are kept only
    when the linear has a trainable weight or a LoRA adapter in the same dtype; a PEFT fp32 adapter keeps its own fp32
    copy of the input instead (`_cast_input_dtype` in peft src/peft/tuners/lora/layer.py: +4·in per target). LoRA
    dropout keeps a dropped copy of each targeted linear's input plus a 1-byte mask (`lora_dropout` in the same
    `forward`). bitsandbytes < 0.43.2 keeps the input of every 4-bit linear as well (`quant_keeps_input`). A fused
    q|k|v linear (litgpt, `fused_qkv`, and the families transformers fuses) has one adapter and one dropout, and
    `zero_pad` keeps the adapter output when only some of q, k, v adapt (benchmarks/litgpt_vs_estimate.py). Under
    AMP each linear keeps its own 16-bit cast of an fp32 input (`amp_input_casts`); unsloth's kernels and IA3/VeRA
    keep what their own products need."""
    arch = rp.arch
    h, q = arch.hidden, arch.q_dim
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    compiled = compiled_block(rp)
    amp = amp_fp32_stream(rp)
    hf_fused = rp.arch.family in HF_ROPE_QKV and rp.framework in HF_MODEL_FRAMEWORKS
    hf_gate_up = rp.arch.family in HF_FUSED_GATE_UP and rp.framework in HF_MODEL_FRAMEWORKS
    hf_c_attn = rp.arch.family in HF_C_ATTN_FAMILIES and rp.framework in HF_MODEL_FRAMEWORKS
    hf_one_qkv = rp.arch.family in HF_ONE_QKV_LINEAR and rp.framework in HF_MODEL_FRAMEWORKS
    expert_down_in = 0.0
    if arch.is_moe:
        k = expert_passes(rp)
        inter = arch.moe_intermediate or arch.intermediate
        # an adapted expert stack's grouped_mm keeps its input, the act(gate)·up product for down (`mlp_per_token`)
        if "down" in {e.name for e in expert_parameters(rp)}:
            expert_down_in = k * inter * expert_bytes(rp)
        down_in = c * inter * k
    else:
        down_in = c * arch.intermediate
    # linear-input groups: (input width, member linears)
    groups = [
        *(mla_groups(rp, c) if arch.kv_lora_rank else [(c * h, ("q", "k", "v"))]),
        (c * h, ("gate", "up", "fc1")),
        (down_in, ("down", "fc2")),
    ]
    mla = {l.name for l in mla_linears(arch, 1)} if arch.kv_lora_rank else set()
    adapter_fp32, a = adapter_input(rp)  # a: bytes per element of the adapter's kept input
    dropout = not full and rp.lora_dropout > 0
    keeps_quant_input = rp.quant_bits == 4 and rp.quant_keeps_input
    targets = set(rp.lora_targets)
    all_lin = "all-linear" in targets
    linear_inputs = 0.0
    expert_mlp = arch.is_moe and not full and not experts_adaptable(rp)
    # adapters the routed experts cannot take still reach a shared expert's nn.Linear gate/up/down (transformers 5.24
    # models/qwen3_5_moe/modeling_qwen3_5_moe.py `Qwen3_5MoeSparseMoeBlock.shared_expert`, a `Qwen3_5MoeMLP`), where
    # peft leaves the MLP names in target_modules (no conversion of them to the fused experts: `moves_mlp_targets`)
    shared_mlp = expert_mlp and arch.shared_experts > 0 and not moves_mlp_targets(rp)
    if shared_mlp:
        shared = arch.shared_expert_intermediate or arch.moe_intermediate or arch.intermediate
        groups[-1] = (c * shared * arch.shared_experts, ("down", "fc2"))
    down_input = down_copy = mlp_inputs = 0.0
    qkv_in = 0.0
    group_inputs: dict[str, float] = {}
    for size, members in groups:
        before = linear_inputs
        mlp_group = members[0] in ("gate", "down")  # not MLA's q_b and kv_b groups
        if members[0] == "gate":
            qkv_in = before  # what the q/k/v group keeps (the groups run in order)
        present = [m for m in members if (m in mla if mla and m in MLA_NAMES else has_linear(arch, m))]
        if expert_mlp and members[0] != "q" and not shared_mlp:
            present = []  # no adapter reaches the routed experts
        if full:
            linear_inputs += size * (amp_input_casts(rp, members[0], present) if amp else 1)
            if members[0] == "down":
                down_input = linear_inputs - before
            if mlp_group:
                mlp_inputs += linear_inputs - before
            continue
        hit = [m for m in present if all_lin or m in targets]
        width = size / c
        if (rp.fused_qkv or hf_fused or hf_c_attn or hf_one_qkv) and members[0] == "q" and hit:
            hit = ["qkv"]  # one adapter (one dropout) on the fused linear
        if hf_gate_up and members[0] == "gate" and hit:
            hit = ["gate_up"]  # Phi-3's gate_up_proj, Granite-4's input_linear: one adapter for gate and up
        if dropout:
            # each adapter keeps its own dropped copy of the input + a 1-byte mask (CUDA native_dropout);
            # the input itself (and a cast copy of it) is not kept by the adapter
            linear_inputs += len(hit) * (a + 1) * width
            kept_by_adapter = False
            adapter_copy = a * width if hit else 0.0
        elif adapter_fp32:
            # PEFT casts the input separately in every module; compiled, the identical casts are computed once
            linear_inputs += (min(len(hit), 1) if compiled else len(hit)) * a * width
            kept_by_adapter = False
            adapter_copy = a * width if hit else 0.0
        else:
            linear_inputs += size if hit else 0  # lora_A keeps the input itself, shared by the group
            kept_by_adapter = bool(hit)
            adapter_copy = 0.0
        if keeps_quant_input and present and not kept_by_adapter:
            linear_inputs += size  # the 4-bit matmul keeps the 16-bit input itself
        if members[0] == "down":
            down_input = linear_inputs - before
            down_copy = adapter_copy
        group_inputs[members[0]] = linear_inputs - before
        if mlp_group:
            mlp_inputs += linear_inputs - before
    down_input += expert_down_in
    o_extra = o_input_per_token(rp)
    linear_inputs += o_extra
    if keeps_quant_input and not full and rp.attn_impl == "eager":
        linear_inputs += c * q
    if rp.fused_qkv and not full and not all_lin:
        adapted = [d for m, d in (("q", q), ("k", arch.kv_dim), ("v", arch.kv_dim)) if m in targets]
        if 0 < len(adapted) < 3:
            linear_inputs += c * sum(adapted)  # zero_pad's index_copy keeps the adapter output (source)

    if unsloth_kernels(rp):
        # unsloth/kernels/fast_lora.py: LoRA_QKV saves X, LoRA_MLP saves X, e = X·G and g = X·U (h = f(e)·g and the
        # down projection's input are recomputed in backward), LoRA_W (o) saves its input, SDPA's output; the fp32
        # LoRA weights are cast to the activations' dtype inside the kernels, so no fp32 input copies exist
        linear_inputs = (
            c
            * h
            * sum(1 for members in (("q", "k", "v"), ("gate", "up")) if any(all_lin or m in targets for m in members))
        )
        down_input = down_copy = 0.0
    if rp.peft in VECTOR_METHODS:
        # IA3 / VeRA: the frozen base linears keep nothing; each adapter keeps what its own products need
        linear_inputs, down_input, down_copy = vector_adapter_per_token(rp)
    elif rp.adapter_method == "bone":
        linear_inputs, down_input, down_copy = miss_per_token(rp)
    linear_inputs += adalora_per_token(rp)
    return LinearInputs(
        total=linear_inputs,
        down=down_input,
        down_copy=down_copy,
        mlp=mlp_inputs,
        qkv=qkv_in,
        qkv_adapters=group_inputs.get("q", 0.0),
        o=o_extra,
    )
