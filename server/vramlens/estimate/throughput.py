"""How long one training step takes: tokens per second, step time, model FLOPs utilisation.

A roofline model, operation by operation, on one GPU. Each operation takes the longer of its arithmetic at the
GPU's dense tensor-core rate and its memory traffic at the GPU's bandwidth, each at the share of the peak that
well-formed kernels reach:

  linears       every nn.Linear of the blocks and the LM head: forward (2·T·in·out FLOPs; reads its input and
                weight, writes its output), the input-gradient GEMM in backward (always: earlier layers need it),
                the weight-gradient GEMM (only for weights that train), and the forward again for recomputed
                blocks under gradient checkpointing. Partial fine-tuning (freeze tuning, LLaMA-Pro, LISA, BAdam)
                runs weight gradients only for its trained layers, and backward and recompute only down to the
                lowest of them (components.backward_layers). Small micro-batches read the whole weight for few
                tokens and are bandwidth-bound: this is where a larger micro-batch gains speed. MoE: each routed
                expert sees its share (top-k / experts) of the tokens.
  LoRA          the adapters' own small GEMMs, their dropout, and (QLoRA) dequantising each 4-bit weight to the
                compute dtype every time it is used (bitsandbytes: forward, input gradient, recompute; a GPTQ
                checkpoint through auto-gptq's torch path: once per forward pass, `gptq_dequant_bytes`).
  attention     QKᵀ and AV: 4·T·s·d FLOPs per layer forward, halved for causal masks by kernels that skip masked
                blocks (FlashAttention/SDPA); backward ≈ 2.5× forward (FlashAttention recomputes the scores).
                Eager attention also writes and reads the s×s score matrices.
  elementwise   norms, residual adds, the MLP activation, rotary embeddings: memory-bound, their bytes by kernel
                (`elementwise_bytes`): transformers' eager RMSNorm, SwiGLU and RoPE are several kernels each, one
                each when fused (Liger / unsloth Triton kernels, torch.compile); the loss reads and writes the
                vocabulary-wide logits (`loss_bytes_per_logit`; a task head — classification, reward, regression —
                is a hidden × labels linear with none).
  float8        torchao Float8Linear: the blocks' GEMMs at the fp8 rate on half the bytes, plus the dynamic-scaling
                casts of their operands (`float8_peak`, `_float8_cast_bytes`); the LM head stays bf16.
  recompute     full checkpointing reruns the blocks' forward; torchtitan's op-level selective checkpointing
                half the linears; context parallelism runs attention over the whole sequence (× cp).
  optimizer     once per optimizer step: every trainable parameter's weight, gradient and state read and written
                (memory-bound); on the CPU over PCIe when offloaded. GaLore/APOLLO: states on the rank-r side only, plus
                the projections (and GaLore's periodic SVD) of every targeted matrix (`_low_rank_seconds`). Paged
                states that do not fit on the GPU cross PCIe in and out every step (`paging_seconds`).
  collectives   data parallelism moves gradients (DDP all-reduce, ZeRO/FSDP reduce-scatter) and, when sharded,
                parameters (all-gather) over the GPU link; they overlap with compute, so a step takes the longer of
                the two plus the last bucket that cannot overlap.
  overhead      eager PyTorch dispatches every operation from Python, one kernel launch each for those that
                compute: a step cannot be shorter than its dispatches (`launch_ops`: the ops of a block, of each
                LoRA adapter and of GPTQ's dequantisation, counted as the dispatcher runs them), so small models at
                small batches are launch-bound.

Efficiencies (shares of the datasheet peak):
  MATMUL_EFFICIENCY 0.70  large bf16/fp16 GEMMs through cuBLAS reach 70–80 % of the dense peak (NVIDIA, "Matrix
                          Multiplication Background User's Guide", docs.nvidia.com/deeplearning/performance);
                          the lower end, as a training step's GEMMs are not all large and square.
  attention         (`attention_efficiency`) by kernel, GPU generation, causal mask, head dim and sequence length,
                    from FlashAttention-2's published forward + backward benchmark (Dao, arXiv:2307.08691, Fig. 4
                    and 6): FlashAttention-2 28–61 % of the peak on A100, 14–33 % on H100 (it does not program
                    Hopper's wgmma tensor cores: Shah et al., "FlashAttention-3", arXiv:2407.08608, §1), lowest at
                    short sequences; 0.60 with FlashAttention-3 on Hopper.
  MEMORY_EFFICIENCY 0.80  streaming kernels reach ~80 % of the memory bandwidth.
  LINK_EFFICIENCY   0.70  NCCL bus bandwidth reaches ~70 % of the per-direction link rate.
Between nodes each GPU has one network port: 400 Gb/s on Hopper-class nodes (DGX H100 datasheet: 8× ConnectX-7),
200 Gb/s before (DGX A100 datasheet: 8× ConnectX-6); a collective over several nodes runs one NCCL ring per port, so
the ranks of a node together reach their ports' sum (capped by NVLink).
These are general properties of the hardware and libraries, not fitted to any measured run; the figures this
model gives are checked against published tokens/s tables by benchmarks/throughput.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from vramlens.estimate import components as C
from vramlens.estimate.result import Throughput
from vramlens.estimate.shapes import Linear, shapes, targeted
from vramlens.resolved import ResolvedPlan

MATMUL_EFFICIENCY = 0.70
MEMORY_EFFICIENCY = 0.80
LINK_EFFICIENCY = 0.70
CPU_OP_SECONDS = 8e-6  # one eager PyTorch op: dispatch and kernel launch from Python
PCIE_OFFLOAD_GBS = 25.0  # host↔device copies over PCIe Gen4 x16 in practice
CPU_ADAM_GBS = 40.0  # DeepSpeed CPUAdam streams states through host memory at about this rate


# Memory-bound ops of a block, in bytes moved per element of their width, (forward, backward), as eager PyTorch runs
# them and as one fused kernel does (Liger-Kernel / unsloth Triton kernels, or torch.compile's Inductor fusions).
# `cb`: the compute dtype's bytes.
def _rms_norm_bytes(cb: int, fused: bool) -> tuple[float, float]:
    """transformers' RMSNorm (models/llama/modeling_llama.py `LlamaRMSNorm.forward`) is six eager kernels:
    `.to(float32)`, `pow(2)`, `mean(-1)`, `* rsqrt`, `.to(dtype)`, `weight *` — (cb+4) + 8 + 4 + 8 + (4+cb) + 2cb
    bytes per element forward, and autograd runs each op's backward (≈ twice that). One Triton kernel
    (liger_kernel/ops/rms_norm.py, unsloth/kernels/rms_layernorm.py) reads x and writes y forward, reads x and dy
    and writes dx backward."""
    if fused:
        return 2 * cb, 3 * cb
    forward = (cb + 4) + 8 + 4 + 8 + (4 + cb) + 2 * cb
    return forward, 2 * forward


def _layer_norm_bytes(cb: int) -> tuple[float, float]:
    """torch.nn.LayerNorm is one native kernel each way (aten native_layer_norm / native_layer_norm_backward)."""
    return 2 * cb, 3 * cb


def _gated_act_bytes(cb: int, fused: bool) -> tuple[float, float]:
    """SwiGLU/GeGLU `act(gate) * up`: eager, the activation (read, write) and the product (2 reads, write) forward,
    their backwards (mul: 2 reads of saved inputs, the gradient, 2 writes; act: 2 reads, a write); one kernel
    (liger_kernel/ops/swiglu.py `LigerSiLUMulFunction`) reads gate and up and writes the product, and backward reads
    gate, up and the gradient and writes both input gradients."""
    if fused:
        return 3 * cb, 5 * cb
    return 5 * cb, 8 * cb


def _rope_bytes(cb: int, fused: bool) -> tuple[float, float]:
    """Rotary embedding of q or k (transformers `apply_rotary_pos_emb`: `q * cos + rotate_half(q) * sin`, where
    rotate_half is a neg and a cat): four eager kernels, ≈ 9 element reads and writes each way; one kernel
    (liger_kernel/ops/rope.py, unsloth/kernels/rope_embedding.py) reads and writes q once each way."""
    return (2 * cb, 2 * cb) if fused else (9 * cb, 9 * cb)


# families without rotary embeddings (ALiBi or learned positions)
NO_ROPE_FAMILIES = ("mpt", "gpt2", "gpt_bigcode", "bloom", "opt")
# Eager ops the dispatcher runs for one block, forward and backward: each op a Python call's dispatch and autograd
# bookkeeping, a kernel launch where it computes (views launch nothing but cost their dispatch and autograd's view
# record). Counted with a `TorchDispatchMode` over transformers 5.24 models/llama/modeling_llama.py
# `LlamaDecoderLayer` (eager RMSNorm and rotary embedding, SDPA; 47 kernels and 31 views forward, 75 and 74
# backward) and peft 0.21 tuners/lora/layer.py `Linear.forward` (fp32 adapters: the input cast, A, B, the scale,
# the cast back and the add; `lora_dropout` > 0 adds bernoulli_, div_ and mul forward and a mul backward);
# tests/estimate/test_throughput_ops.py counts them again. Qwen-1's remote block (modeling_qwen.py: eager RMSNorm,
# eager rotary in fp32, flash_attn_varlen_func) dispatches about the same number per layer.
OPS_FORWARD_PER_LAYER = 78
OPS_BACKWARD_PER_LAYER = 149
OPS_FORWARD_PER_ADAPTER = 12
OPS_BACKWARD_PER_ADAPTER = 17
OPS_DROPOUT = (4, 1)  # (forward, backward) of the adapter's dropout
# auto-gptq's torch dequantisation (`gptq_dequant_bytes`): shift, cast and mask of the zeros (v0.4.2: and +1) and of the
# weight, the subtraction and the scaling — 9 kernels — and 9 views (unsqueeze, expand, reshape) per linear per pass
OPS_GPTQ_DEQUANT = 18


class _Clock:
    """Seconds by part, each operation at the slower of its arithmetic and its memory traffic."""

    def __init__(self, peak_flops: float, bandwidth: float):
        self.peak = peak_flops
        self.bw = bandwidth
        self.parts: dict[str, float] = {}
        self.compute_bound = 0.0
        self.memory_bound = 0.0

    def op(
        self, part: str, flops: float, bytes_: float, efficiency: float = MATMUL_EFFICIENCY, times: float = 1.0
    ) -> None:
        t_c = flops / (self.peak * efficiency)
        t_m = bytes_ / (self.bw * MEMORY_EFFICIENCY)
        t = max(t_c, t_m) * times
        self.parts[part] = self.parts.get(part, 0.0) + t
        if t_c >= t_m:
            self.compute_bound += t
        else:
            self.memory_bound += t

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + seconds


def compute_rate_dtype(compute_dtype: str, gpu) -> str:
    """Whose datasheet rate the run's matmuls reach: the compute dtype's own, except bf16 on a GPU without bf16
    units, which PyTorch (2.3+) accepts and emulates in fp32 arithmetic — at best the fp32 rate
    (vramlens.resolve.no_bf16_note says so wherever the estimate is shown)."""
    if compute_dtype == "bf16" and (not gpu.bf16 or gpu.tflops_bf16 is None):
        return "fp32"
    return compute_dtype


def _peak(rp: ResolvedPlan) -> float | None:
    g = rp.gpu
    rate = {"bf16": g.tflops_bf16, "fp16": g.tflops_fp16, "fp32": g.tflops_fp32}[
        compute_rate_dtype(rp.compute_dtype, g)
    ]
    return rate * 1e12 if rate else None


def _hopper_or_newer(rp: ResolvedPlan) -> bool:
    cc = rp.gpu.compute_capability or ""
    try:
        return float(cc) >= 9.0
    except ValueError:
        return False


def sdpa_backend(rp: ResolvedPlan) -> str:
    """The kernel SDPA dispatches to (torch 2.2+ aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    `select_sdp_backend`: flash, then memory-efficient, then math): FlashAttention-2 needs no explicit mask and a
    16-bit dtype on sm80+; a padding mask selects the memory-efficient kernel; fp32 or pre-Ampere GPUs without
    it run the math path (the eager matmuls)."""
    cc = rp.gpu.compute_capability or ""
    try:
        ampere = float(cc) >= 8.0
    except ValueError:
        ampere = True
    if rp.compute_dtype in ("bf16", "fp16") and ampere and not rp.attn_mask:
        return "flash"
    return "efficient" if rp.compute_dtype in ("bf16", "fp16", "fp32") else "math"


# Attention forward + backward speed, TFLOPs/s, by sequence length 512, 1k, 2k, 4k, 8k, 16k (batch × seq = 16k
# tokens), FLOPs counted as flash-attn's benchmarks/benchmark_flash_attention.py counts them (causal: half the
# s×s products; backward 2.5 forwards), the same convention as `Matmul.executed` here. Dao, "FlashAttention-2"
# (arXiv:2307.08691), Fig. 4 (A100 80GB SXM4) and Fig. 6 (H100 80GB SXM5), reproduced as
# assets/flash2_a100_fwd_bwd_benchmark.png and assets/flash2_h100_fwd_bwd_benchmark.png in Dao-AILab/flash-attention
# (commit 0251105). Keys: (kernel, causal, head dim). The two FlashAttention-2 non-causal d=128 bars at 512 and 1k
# on A100 sit under the legend (≥ 148 by their height; 151, 173 as the paper's text labels read). The figures'
# "Triton" bars are OpenAI's kernel (flash-attn benchmarks/benchmark_flash_attention.py:
# `from triton.ops.flash_attention import attention as attention_triton`), not flash-attn's own Triton kernel, and
# are left out: no attention implementation here runs OpenAI's.
FA_SEQ_POINTS = (512, 1024, 2048, 4096, 8192, 16384)
FA_A100 = {  # of 312 dense bf16 TFLOPS
    ("fa2", True, 64): (88, 119, 140, 156, 165, 171),
    ("fa2", True, 128): (99, 133, 155, 173, 182, 189),
    ("fa2", False, 64): (132, 153, 162, 171, 175, 176),
    ("fa2", False, 128): (151, 173, 187, 196, 201, 203),
    ("xformers", True, 64): (51, 60, 66, 68, 69, 67),
    ("xformers", True, 128): (58, 72, 82, 87, 91, 92),
    ("xformers", False, 64): (68, 73, 76, 77, 75, 75),
    ("xformers", False, 128): (83, 91, 95, 96, 97, 98),
    ("fa1", True, 64): (58, 70, 77, 87, 92, 97),
    ("fa1", True, 128): (55, 62, 69, 76, 80, 83),
    ("fa1", False, 64): (91, 92, 104, 108, 110, 110),
    ("fa1", False, 128): (76, 72, 76, 80, 82, 83),
}
FA_H100 = {  # of 989 dense bf16 TFLOPS; FlashAttention-2 and FlashAttention (1) only
    ("fa2", True, 64): (141, 192, 232, 257, 273, 284),
    ("fa2", True, 128): (163, 221, 265, 294, 308, 328),
    ("fa2", False, 64): (215, 254, 274, 288, 294, 296),
    ("fa2", False, 128): (248, 294, 320, 326, 335, 338),
    ("fa1", True, 64): (104, 123, 136, 138, 149, 156),
    ("fa1", True, 128): (98, 109, 108, 126, 135, 137),
    ("fa1", False, 64): (157, 159, 161, 161, 166, 168),
    ("fa1", False, 128): (127, 127, 128, 131, 137, 139),
}
FA_PEAK = {"A100": 312.0, "H100": 989.0}


def _fa_share(table: dict, peak: float, kernel: str, causal: bool, d_head: int, seq: int) -> float:
    """The share of the peak a kernel reaches at this head dim and sequence length: interpolated in log2 of the
    sequence between the measured points (held at the ends) and linearly in the head dim between 64 and 128."""
    x = min(max(math.log2(max(seq, 1)), 9.0), 14.0) - 9.0
    i = min(int(x), 4)
    f = x - i
    d = min(max(d_head, 64), 128)
    w = (d - 64) / 64

    def at(hd: int) -> float:
        row = table[(kernel, causal, hd)]
        return row[i] + (row[i + 1] - row[i]) * f

    return ((1 - w) * at(64) + w * at(128)) / peak


def attention_efficiency(rp: ResolvedPlan) -> float:
    """Share of the tensor-core peak the attention kernels reach, forward and backward together, by kernel, GPU
    generation, causal mask, head dim and sequence length (`FA_A100`, `FA_H100`: FlashAttention-2's published
    benchmark). FlashAttention-2 (flash_attention_2, SDPA's flash backend since torch 2.2; flex_attention and
    xformers taken at its rate) reaches 28–61 % of the A100's peak but 14–33 % of the H100's, whose wgmma tensor
    cores it does not program (Shah et al., "FlashAttention-3", arXiv:2407.08608, §1);
    GPUs before Hopper take the A100's shares, Hopper and later the H100's. SDPA's memory-efficient kernel is
    xformers' CUTLASS kernel (torch/nn/functional.py `scaled_dot_product_attention` docs): the A100's xformers
    bars, and on Hopper the H100's FlashAttention-2 share scaled by their A100 ratio. flash-attn's Triton
    FlashAttention (flash_attn/flash_attn_triton.py at eff9fe6, which llm-foundry copies as llmfoundry/models/layers/
    flash_attn_triton.py for `attn_impl: triton`) at FlashAttention (1)'s shares: its docstring measures it against
    the CUDA FlashAttention of its day ("Triton forward is generally faster than CUDA forward, while Triton backward
    is generally slower ... Overall Triton forward + backward is slightly slower"), and the benchmark's "Triton"
    bars are another kernel (`FA_A100`).
    FlashAttention-3 0.60 on Hopper (Shah et al., abstract: 1.5–2.0× FlashAttention-2, up to 75 % of the peak;
    elsewhere it does not run: FlashAttention-2's). Eager and SDPA's math path are batched cuBLAS GEMMs (the s×s
    scores' traffic is in their bytes)."""
    impl = rp.attn_impl
    hopper = _hopper_or_newer(rp)
    if impl == "flash_attention_3" and hopper:
        return 0.60
    if impl == "eager" or (impl == "sdpa" and sdpa_backend(rp) == "math"):
        return MATMUL_EFFICIENCY
    causal = causal_skipping(rp)
    seq = max(rp.seq_len // max(rp.context_parallel, 1), 1)
    d = rp.arch.d_head

    def share(kernel: str) -> float:
        a100 = _fa_share(FA_A100, FA_PEAK["A100"], kernel, causal, d, seq)
        if not hopper:
            return a100
        if (kernel, causal, 64) in FA_H100:
            return _fa_share(FA_H100, FA_PEAK["H100"], kernel, causal, d, seq)
        h100 = _fa_share(FA_H100, FA_PEAK["H100"], "fa2", causal, d, seq)
        return h100 * a100 / _fa_share(FA_A100, FA_PEAK["A100"], "fa2", causal, d, seq)

    if impl == "sdpa" and sdpa_backend(rp) == "efficient":
        return share("xformers")
    if impl == "flash_attention_triton":
        return share("fa1")
    return share("fa2")


def network_gbs(rp: ResolvedPlan) -> float:
    """One GPU's share of the network between nodes, GB/s one direction."""
    return 50.0 if _hopper_or_newer(rp) else 25.0


def _linears(rp: ResolvedPlan) -> list[tuple[str, int, int, float, float, float]]:
    """(name, in, out, instances, tokens share, share of the instances whose weight trains) for every linear a
    token passes through, LM head included. A routed expert's instances see top-k/experts of the tokens. Partial
    full fine-tuning (freeze tuning, LLaMA-Pro, LISA, BAdam) trains only some layers' weights
    (components.weight_grad_share); its LM head trains when `trained_extra` names it."""
    arch = rp.arch
    s = shapes(arch)
    full = rp.peft == "none"
    out: list[tuple[str, int, int, float, float, float]] = []
    routed = (arch.layers - arch.dense_layers) * arch.num_experts if arch.is_moe else 0
    for lin in s.linears:
        share = 1.0
        if arch.is_moe and lin.name in ("gate", "up", "down", "fc1", "fc2") and lin.count == routed:
            share = arch.experts_per_token / arch.num_experts
        out.append((lin.name, lin.in_features, lin.out_features, lin.count, share, C.weight_grad_share(rp, lin.name)))
    if not rp.scalar_head and arch.block != "encoder":
        head_trains = (
            full and (rp.trained_layers is None or "lm_head" in rp.trained_extra)
        ) or "lm_head" in rp.modules_to_save
        out.append(("lm_head", arch.hidden, arch.vocab, 1, 1.0, 1.0 if head_trains else 0.0))
    elif rp.scalar_head:
        out.append(("score", arch.hidden, 1, 1, 1.0, 1.0))
    return out


# Families whose blocks end with a norm after the MLP (transformers 5.24 models/gemma2, gemma3 and olmo2
# modeling files: `post_feedforward_layernorm`): the norm saves its input, so the MLP's last matmul is recomputed.
POST_NORM_FAMILIES = ("gemma2", "gemma3", "gemma3_text", "olmo2", "olmo3")
BLOCK_INPUT_LINEARS = ("q", "k", "v", "qkv")  # the linears that read a block's (normalised) input
BLOCK_OUTPUT_LINEARS = ("down", "fc2")  # the MLP's last linear, before the residual add
FUSED_ATTENTION = (
    "sdpa",
    "flash_attention_2",
    "flash_attention_3",
    "flex_attention",
    "xformers",
    "flash_attention_triton",
)
# kernels that skip the score blocks above the diagonal of a causal mask (flash-attn csrc/flash_attn/src
# flash_fwd_kernel.h: `n_block_max` bounded by the diagonal when `Is_causal`; FlexAttention's block mask;
# xformers' causal bias; the Triton kernel, flash_attn_triton.py `end_n` bounded by `(start_m + 1) * BLOCK_M` when
# `IS_CAUSAL`): about half the products of the whole s×s matrix, the convention of flash-attn's
# benchmarks/benchmark_flash_attention.py `flops(..., causal)`. SDPA skips them only when called with `is_causal`
# and no mask (its flash kernel); with a padding mask it runs the memory-efficient kernel over every block.
CAUSAL_SKIPPING = ("flash_attention_2", "flash_attention_3", "flex_attention", "xformers", "flash_attention_triton")


@dataclass(frozen=True)
class Matmul:
    """One matmul of the step as `torch.utils.flop_counter.FlopCounterMode` counts it (2 FLOPs per multiply-add;
    attention: both products of the whole score matrix, `sdpa_flop_count`), and how many times it runs per
    micro-step, counted in instances, by phase. `executed`: the share of its FLOPs the kernel performs (a causal
    attention kernel that skips masked blocks: 0.5). `bytes`: what one run reads and writes."""

    part: str  # the time model's part: matmuls, adapters, attention
    name: str
    flops: float  # one run of one instance
    bytes: float
    forward: float
    recompute: float
    backward: float
    executed: float = 1.0

    @property
    def family(self) -> str:
        return "attention" if self.part == "attention" else "matmul"


def recompute_stops_early(rp: ResolvedPlan) -> bool:
    """Non-reentrant activation checkpointing (transformers' `use_reentrant: False`, as the trace runs it) stops
    recomputing a block once every tensor its forward saved for backward is back (torch 2.13 torch/utils/checkpoint.py
    `_StopRecomputationError`, on by default: `set_checkpoint_early_stop`), and autograd saves an op's inputs
    before the op runs (tools/autograd/gen_variable_type.py: `grad_fn->self_ = SavedVariable(self, false)` ahead
    of the redispatch). A block whose MLP ends in the down projection and the residual add (which saves nothing)
    therefore never recomputes that last matmul (or, when adapted, its LoRA B)."""
    return rp.grad_checkpointing and rp.arch.block == "decoder" and rp.arch.family not in POST_NORM_FAMILIES


def inputs_need_grad(rp: ResolvedPlan) -> bool:
    """Whether the first block's input requires grad, so that its q/k/v (and their adapters' A) compute an input
    gradient: a trained embedding, or PEFT under checkpointing, which calls `enable_input_require_grads()` (peft 0.21
    peft_model.py `prepare_model_for_gradient_checkpointing`; `prepare_model_for_kbit_training` with
    `use_gradient_checkpointing`). Without it autograd skips the product (its input needs no gradient)."""
    return rp.peft == "none" or rp.grad_checkpointing


def matmul_work(rp: ResolvedPlan, early_stop: bool = True) -> list[Matmul]:
    """Every matmul of one micro-step on one GPU: the linears (LM head included), the LoRA adapters' A and B, and
    attention's score and value products. Forward once; under checkpointing the blocks' forward again (but the
    last saving matmul, `recompute_stops_early`); backward the input gradient (2 FLOPs per multiply-add, as the
    forward) where the input needs one and the weight gradient where the weight trains; attention's backward
    is 2.5 forwards in a fused kernel (the scores recomputed: `sdpa_backward_flop_count`), 2 in eager.
    `early_stop=False`: a reentrant checkpoint, which recomputes the whole block."""
    arch = rp.arch
    cb = C.DTYPE_BYTES[rp.compute_dtype]
    cp, tp = max(rp.context_parallel, 1), max(rp.tensor_parallel, 1)
    seq = max(rp.seq_len // cp, 1)
    seqs = rp.micro_batch * rp.sequences_per_example
    T = seqs * seq
    ckpt = 1.0 if rp.grad_checkpointing else 0.0
    back = min(C.backward_layers(rp) / C.counted_layers(rp), 1.0)
    early = early_stop and recompute_stops_early(rp)
    first = 0.0 if inputs_need_grad(rp) else 1 / max(arch.layers, 1)  # layer 0's share: no input gradient
    adapted = {lin.name for lin in targeted(arch, rp.lora_targets)} if rp.peft != "none" else set()
    out: list[Matmul] = []
    for name, fin, fout, count, share, trains in _linears(rp):
        if name in ("lm_head", "score"):
            tokens = seqs * ((rp.logits_tokens or rp.seq_len) // cp) if name == "lm_head" else T
            out.append(
                Matmul(
                    "matmuls",
                    name,
                    2 * tokens * fin * fout,
                    cb * (tokens * (fin + fout) + fin * fout),
                    count,
                    0.0,
                    count * ((1.0 if back > 0 else 0.0) + trains),
                )
            )
            continue
        fout = fout / tp
        tokens = T * share
        skip = early and name in BLOCK_OUTPUT_LINEARS and name not in adapted
        grad_in = back - (first if name in BLOCK_INPUT_LINEARS else 0.0)
        out.append(
            Matmul(
                "matmuls",
                name,
                2 * tokens * fin * fout,
                cb * (tokens * (fin + fout) + fin * fout),
                count,
                count * (0.0 if skip else ckpt * back),
                count * (grad_in + trains),
            )
        )
    if rp.peft != "none":
        ab = 4 if rp.adapter_fp32 else cb
        r = max(rp.lora_r, 1)
        for lin in targeted(arch, rp.lora_targets):
            n, fin, fout = lin.count, lin.in_features, lin.out_features
            grad_in = 1.0 - (first if lin.name in BLOCK_INPUT_LINEARS else 0.0)
            out.append(
                Matmul(
                    "adapters",
                    lin.name + ".lora_A",
                    2 * T * fin * r,
                    ab * (T * (fin + r) + fin * r),
                    n,
                    n * ckpt,
                    n * (grad_in + 1.0),
                )
            )
            skip = early and lin.name in BLOCK_OUTPUT_LINEARS
            out.append(
                Matmul(
                    "adapters",
                    lin.name + ".lora_B",
                    2 * T * r * fout,
                    ab * (T * (r + fout) + r * fout),
                    n,
                    n * (0.0 if skip else ckpt),
                    n * 2.0,
                )
            )
    layers = arch.layers + (arch.encoder_layers or 0)
    d_attn = arch.heads * arch.d_head / tp
    fused = rp.attn_impl in FUSED_ATTENTION
    io = cb * T * (2 * d_attn + 2 * arch.n_kv_heads * arch.d_head / tp)  # q, out, k, v
    if not fused:  # eager: the s×s scores written, soft-maxed, read
        io += seqs * (arch.heads / tp) * seq * seq * (4 * cb + 4)
    out.append(
        Matmul(
            "attention",
            "attention",
            4 * T * seq * d_attn,
            io,
            layers,
            layers * ckpt * back,
            layers * back * (2.5 if fused else 2.0),
            0.5 if causal_skipping(rp) else 1.0,
        )
    )
    return out


def causal_skipping(rp: ResolvedPlan) -> bool:
    """Attention runs causal in a kernel that skips the masked blocks (`CAUSAL_SKIPPING`)."""
    if rp.arch.block != "decoder":
        return False
    return rp.attn_impl in CAUSAL_SKIPPING or (rp.attn_impl == "sdpa" and not rp.attn_mask)


def flop_count(rp: ResolvedPlan) -> dict:
    """The step's matmul FLOPs per optimizer step on one GPU, as `torch.utils.flop_counter.FlopCounterMode` counts
    them on the traced step (`vramlens.trace.flops`, the same keys): total, by phase (forward, backward,
    recompute, optimizer), by family (matmul, attention, other), by phase and family, and `attention_causal`, the
    attention FLOPs of causal calls to a kernel that skips the masked half. Elementwise ops, norms, the loss and
    the optimizer update count no FLOPs there, and none here. Not covered: MoE experts run with `_grouped_mm`
    (FlopCounterMode has no formula for it), DoRA's weight norm, an objective's extra models."""
    accum = max(rp.grad_accum, 1)
    by = {p: {"matmul": 0.0, "attention": 0.0, "other": 0.0} for p in ("forward", "backward", "recompute", "optimizer")}
    causal = 0.0
    for w in matmul_work(rp):
        for phase in ("forward", "recompute", "backward"):
            by[phase][w.family] += w.flops * getattr(w, phase) * accum
        if w.family == "attention" and w.executed < 1:
            causal += w.flops * (w.forward + w.recompute + w.backward) * accum
    by = {p: {f: round(v) for f, v in fams.items()} for p, fams in by.items()}
    return {
        "total": sum(sum(f.values()) for f in by.values()),
        "by_phase": {p: sum(f.values()) for p, f in by.items()},
        "by_family": {f: sum(by[p][f] for p in by) for f in ("matmul", "attention", "other")},
        "by_phase_family": by,
        "attention_causal": round(causal),
    }


def launch_ops(rp: ResolvedPlan) -> int:
    """Eager ops one micro-step dispatches from Python: every block's forward, its recompute under gradient
    checkpointing and its backward (backward and recompute down to the lowest layer that trains), each adapted
    linear's LoRA ops in the same passes, and the GPTQ dequantisation of each quantized linear per forward pass
    (`OPS_FORWARD_PER_LAYER` and after)."""
    arch = rp.arch
    layers = arch.layers + (arch.encoder_layers or 0)
    back = min(C.backward_layers(rp) / C.counted_layers(rp), 1.0)
    recompute = 1.0 if rp.grad_checkpointing else 0.0
    forwards = 1 + back * recompute
    n = layers * (OPS_FORWARD_PER_LAYER * forwards + OPS_BACKWARD_PER_LAYER * back)
    if rp.peft != "none":
        fwd, bwd = OPS_FORWARD_PER_ADAPTER, OPS_BACKWARD_PER_ADAPTER
        if rp.lora_dropout > 0:
            fwd, bwd = fwd + OPS_DROPOUT[0], bwd + OPS_DROPOUT[1]
        n += adapter_modules(rp) * (fwd * (1 + recompute) + bwd)
        if rp.quant_bits and gptq_torch_dequant(rp):
            n += linear_modules(rp, shapes(arch).linears) * OPS_GPTQ_DEQUANT * (1 + recompute)
    return int(n)


def adapter_modules(rp: ResolvedPlan) -> int:
    """LoRA adapter modules, each one peft `Linear` with its own forward: one per targeted linear module
    (`linear_modules`)."""
    return linear_modules(rp, targeted(rp.arch, rp.lora_targets))


def linear_modules(rp: ResolvedPlan, linears: Iterable[Linear]) -> int:
    """The nn.Linear modules (or their quantized replacements) these canonical linears are: one per linear, but one
    for q, k and v together where the model computes them with one linear (`fused_qkv`: litgpt's `qkv`, Qwen-1's
    `c_attn`; transformers' fused families, `C.fused_groups`) and one for gate and up where those are one. A
    Qwen-1 block is five (Qwen/Qwen-7B modeling_qwen.py on the Hugging Face Hub: `QWenAttention.c_attn`, `c_proj`;
    `QWenMLP.w1`, `w2`, `c_proj`)."""
    linears = list(linears)
    names = [lin.name for lin in linears]
    count = {lin.name: lin.count for lin in linears}
    groups = list(C.fused_groups(rp))
    if rp.fused_qkv and ("q", "k", "v") not in groups:
        groups.append(("q", "k", "v"))
    n = sum(count.values())
    for group in groups:
        hit = [name for name in names if name in group]
        n -= sum(count[name] for name in hit[1:])  # the group's first target stands for the fused linear
    return n


def gptq_torch_dequant(rp: ResolvedPlan) -> bool:
    """A GPTQ checkpoint fine-tuned through auto-gptq's `QuantLinear` with the exllama kernels off (QwenLM/Qwen
    finetune.py `GPTQConfig(bits=4, disable_exllama=True)`; auto_gptq/utils/import_utils.py
    `dynamically_import_QuantLinear` then picks nn_modules/qlinear/qlinear_cuda_old.py, qlinear_cuda.py with
    act-order): from `kernel_switch_threshold` (128) tokens on, its forward dequantises the whole weight with torch
    ops and multiplies with `torch.matmul`, which autograd differentiates."""
    return rp.quant_type == "gptq" and rp.quant_bits in (2, 4, 8)


def gptq_dequant_bytes(bits: int) -> float:
    """Bytes moved per weight element by auto-gptq's torch dequantisation (auto_gptq/nn_modules/qlinear/
    qlinear_cuda_old.py `QuantLinear.forward`, the same ops from v0.4.2 to v0.7.1): `bitwise_right_shift` of the
    packed int32 words expanded to one int32 per element (reads bits/8, writes 4); `.to(int8)` (int16 at 8 bits)
    reads 4 and writes i; `bitwise_and` reads and writes i; `weight - zeros` reads and writes i; `scales * (...)`
    reads i and writes the fp16 weight. The group zeros and scales are 1/128 of that and left out."""
    i = 2 if bits == 8 else 1
    return bits / 8 + 4 + (4 + i) + 2 * i + 2 * i + (i + 2)


def throughput(rp: ResolvedPlan, paged_out_bytes: float = 0.0) -> Throughput | None:
    """Time of one optimizer step of this plan on its GPU; None when the GPU's speed is not in the catalog.
    `paged_out_bytes`: paged optimizer states that do not fit on the GPU beside the rest (the memory estimate's),
    moved over PCIe every step (`paging_seconds`)."""
    peak = _peak(rp)
    if peak is None or not rp.gpu.memory_gbs:
        return None
    clock = _Clock(peak, rp.gpu.memory_gbs * 1e9)
    arch = rp.arch
    cb = C.DTYPE_BYTES[rp.compute_dtype]
    cp = max(rp.context_parallel, 1)
    seq = max(rp.seq_len // cp, 1)
    seqs = rp.micro_batch * rp.sequences_per_example
    T = seqs * seq  # tokens of one micro-step on this GPU
    accum = max(rp.grad_accum, 1)
    ckpt = rp.grad_checkpointing
    forwards = 2 if ckpt else 1  # recomputed blocks run their forward twice
    layers_total = arch.layers + (arch.encoder_layers or 0)
    # backward (and the recompute before it) runs only down to the lowest layer that trains
    back = min(C.backward_layers(rp) / C.counted_layers(rp), 1.0)

    # -- linears, adapters, attention: the matmuls of `matmul_work`, each at its passes -----------------------
    # (recompute in full: transformers' `gradient_checkpointing_enable()` defaults to the reentrant checkpoint)
    work = matmul_work(rp, early_stop=False)
    model_flops = sum(w.flops * w.executed * (w.forward + w.backward) for w in work)  # recompute left out
    ops: dict[tuple[str, str], list[float]] = {}  # an adapter's A and B timed together, as one small op
    for w in work:
        runs = w.forward + w.recompute + w.backward
        op = ops.setdefault((w.part, w.name.split(".")[0]), [0.0, 0.0])
        op[0] += w.flops * w.executed * runs
        op[1] += w.bytes * runs
    fp8 = float8_peak(rp)
    for (part, name), (flops, bytes_) in ops.items():
        if part == "attention":
            # context parallel: each rank's queries meet the keys of the whole sequence (ring attention passes
            # the K/V shards round: torch/distributed/tensor/experimental/_attention.py), cp × its local scores
            clock.op(part, flops * cp, bytes_, attention_efficiency(rp))
        elif fp8 and part == "matmuls" and name != "lm_head":
            clock.op(part, flops * peak / fp8, bytes_ / 2)  # fp8 operands: half the bytes, at the fp8 rate
        else:
            clock.op(part, flops, bytes_, MATMUL_EFFICIENCY)
    if rp.selective_recompute == "op" and not ckpt:
        # torchtitan's op-level selective checkpointing saves every other matmul's output (_apply_op_sac: `mm_count
        # % 2`), so backward recomputes half the blocks' linears (and the memory-bound ops between them)
        for w in work:
            if w.part == "matmuls" and w.name not in ("lm_head", "score"):
                rate = peak / fp8 if fp8 else 1.0
                clock.op("matmuls", w.flops * rate, w.bytes, times=0.5 * w.forward * back)
    if fp8:
        clock.op("float8 casts", 0, _float8_cast_bytes(rp, work, cb))

    # -- LoRA dropout and DoRA, 4-bit dequantisation -------------------------------------------------------
    if rp.peft != "none":
        for lin in targeted(arch, rp.lora_targets):
            if rp.lora_dropout > 0:  # dropout of the adapter's input: read, write, mask
                clock.op("adapters", 0, T * lin.in_features * (2 * cb + 1), times=lin.count * forwards)
            if rp.peft == "dora":  # DoRA: the weight norm of W + BA over every output row
                clock.op(
                    "adapters",
                    2 * lin.in_features * lin.out_features,
                    3 * cb * lin.in_features * lin.out_features,
                    times=lin.count * (forwards + 1),
                )
            if rp.peft == "dora" and C.dora_recomputes_base(rp):
                # DoRA computing its own x @ W (with dropout, or before peft 0.14): one more base-sized matmul per
                # adapted linear in each forward, and one for its input gradient
                ab = 4 if rp.adapter_fp32 else cb
                clock.op(
                    "adapters",
                    2 * T * lin.in_features * lin.out_features,
                    ab * T * (lin.in_features + lin.out_features) + cb * lin.in_features * lin.out_features,
                    times=lin.count * (forwards + back),
                )
        if rp.quant_bits:
            quant_params = sum(lin.params for lin in shapes(arch).linears)
            if gptq_torch_dequant(rp):
                # the dequantised weight is what autograd saves for the input gradient: once per forward pass
                clock.op("dequantize", 0, quant_params * gptq_dequant_bytes(rp.quant_bits or 4), times=forwards)
            else:
                # each use reads the packed weight and its constants and writes the dequantised copy
                packed, consts = C.quantized_bytes_per_param(rp)
                clock.op("dequantize", 0, quant_params * (packed + consts + cb), times=forwards + 1)

    if fp32_activations(rp):
        # every 4-bit linear fed the fp32 stream casts its input to the compute dtype and its output back (bnb
        # Linear4bit.forward: `x.to(self.compute_dtype)` … `out.to(inp_dtype)`), and the attention kernel casts
        # q, k, v down (transformers `_flash_attention_forward`: fp32 inputs `.to(target_dtype)`); autograd casts
        # their gradients the same way in backward. The attention output projection reads the 16-bit attention
        # output and writes 16-bit.
        casts = sum(lin.count * (lin.in_features + lin.out_features) for lin in shapes(arch).linears if lin.name != "o")
        casts += layers_total * (arch.q_dim + 2 * arch.kv_dim)
        clock.op("elementwise", 0, T * casts * (4 + cb), times=forwards + back)

    # -- elementwise and the loss ----------------------------------------------------------------------------
    fwd_b, bwd_b = elementwise_bytes(rp)
    recomputed = forwards - 1 if ckpt else (1.0 if rp.selective_recompute == "op" else 0.0)
    clock.op("elementwise", 0, T * fwd_b, times=layers_total * (1 + back * recomputed))
    clock.op("elementwise", 0, T * bwd_b, times=layers_total * back)
    if not rp.scalar_head and arch.block != "encoder":
        logit_tokens = seqs * ((rp.logits_tokens or rp.seq_len) // cp)
        clock.op("loss", 0, logit_tokens * arch.vocab * loss_bytes_per_logit(rp))

    # -- per micro-step → per optimizer step ---------------------------------------------------------------
    if rp.activation_offload:
        # each checkpointed block's input copied to the host in forward and back in backward (unsloth
        # `Unsloth_Offloaded_Gradient_Checkpointer`: non_blocking copies on the side), overlapped with the block
        moved = 2 * T * arch.hidden * cb * arch.layers * back
        clock.add(
            "activation offload (exposed)", max(moved / (PCIE_OFFLOAD_GBS * 1e9) - sum(clock.parts.values()), 0.0)
        )
    micro_s = sum(clock.parts.values())
    launch_s = launch_ops(rp) * CPU_OP_SECONDS * (0.25 if rp.compile else 1.0)
    overhead = max(launch_s - micro_s, 0.0)  # the GPU waits for Python only when it is faster
    compute_s = (micro_s + overhead) * accum
    parts = {k: v * accum for k, v in clock.parts.items()}
    if overhead:
        parts["launch overhead"] = overhead * accum

    # objective: the reference model's and the teacher's forwards, generation
    extra = _objective_seconds(rp, clock, T, model_flops) * accum
    if extra:
        parts.update({k: v * accum for k, v in clock.parts.items() if k.startswith("objective:")})
        compute_s += extra

    # -- optimizer step ------------------------------------------------------------------------------------
    p = C.params(rp)
    opt_s, where = _optimizer_seconds(rp, p)
    parts["optimizer"] = opt_s
    projection_s = _low_rank_seconds(rp, p)
    if projection_s:
        parts["low-rank projection"] = projection_s
        opt_s += projection_s
    paging_s = paging_seconds(paged_out_bytes)
    if paging_s:
        parts["optimizer paging"] = paging_s
    if rp.grad_accum > 1:  # gradients accumulated: read + written per extra micro-step
        parts["gradient accumulation"] = (
            (accum - 1) * 2 * p.trainable_bytes * C.shard_factor(rp, "gradients") / (clock.bw * MEMORY_EFFICIENCY)
        )

    # -- collectives ---------------------------------------------------------------------------------------
    comm_s, tail_s = _communication_seconds(rp, p)
    exposed = max(comm_s - compute_s, 0.0) + tail_s
    if comm_s:
        parts["communication (exposed)"] = exposed

    step_s = compute_s + opt_s + paging_s + parts.get("gradient accumulation", 0.0) + exposed
    tokens = T * accum  # of one tensor-parallel group: its ranks share every token's work
    tp = max(rp.tensor_parallel, 1)
    # a device map's GPUs run one after another (the forward passes the activations from one to the next): the step
    # takes the whole model's time and its tokens are shared by the process's GPUs, no data-parallel speed-up
    gpus = max(rp.devices_per_process, 1) if rp.strategy != "megatron" else 1
    per_gpu = tokens / step_s / tp / gpus
    dp = max(rp.world_size, 1) if rp.strategy != "none" else 1
    mfu = model_flops * accum / (step_s * peak * gpus)
    candidates = {
        "compute": clock.compute_bound * accum,
        "memory": clock.memory_bound * accum + opt_s,
        "communication": exposed,
        "overhead": overhead * accum,
        "generation": parts.get("objective: generation", 0.0),
    }
    if where == "cpu":
        candidates["offload"] = opt_s
        candidates["memory"] -= opt_s
    if paging_s:
        candidates["offload"] = candidates.get("offload", 0.0) + paging_s
    bound = max(candidates, key=candidates.get)
    return Throughput(
        tokens_per_s=per_gpu,
        run_tokens_per_s=per_gpu * tp * dp * gpus,
        step_s=step_s,
        mfu=mfu,
        bound=bound,
        parts_s=parts,
    )


def paging_seconds(paged_out_bytes: float) -> float:
    """Seconds per optimizer step that paged optimizer states beyond the GPU's free memory spend crossing PCIe.
    bitsandbytes keeps them in unified memory and, for every parameter it updates, prefetches its states to the GPU
    and waits (bitsandbytes 0.44 optim/optimizer.py `Optimizer8bit.step`: `prefetch_state(p)`, `update_step`,
    `torch.cuda.synchronize()`; csrc/pythonInterface.cpp `cprefetch`: `cudaMemPrefetchAsync`). The states do not
    all fit, so each step at least the part that does not fit comes in, and as much goes out to make room (updated
    the step before, so written back): twice that over the link, one migration after the other, nothing to
    overlap with."""
    return 2 * paged_out_bytes / (PCIE_OFFLOAD_GBS * 1e9)


# quantization methods whose models prepare_model_for_kbit_training leaves in their dtype (`fp32_activations`)
KBIT_KEEPS_DTYPE = ("gptq", "aqlm", "eetq", "hqq", "torchao")


def fp32_activations(rp: ResolvedPlan) -> bool:
    """A k-bit model prepared by peft's `prepare_model_for_kbit_training` (peft utils/other.py: every non-quantized
    fp16/bf16 parameter cast to fp32; TRL's `peft_module_casting_to_bf16` keeps the norms in fp32) runs its
    activations in fp32: transformers' RMSNorm returns `self.weight * hidden_states.to(input_dtype)` (models/llama
    modeling_llama.py `LlamaRMSNorm.forward`; Mistral, Qwen2 and Mixtral copy it), an fp32 weight times a 16-bit
    tensor, so every normed input is fp32, the 4-bit linears hand back their input's dtype, and from the first
    block's MLP on the residual stream is fp32 too. Gemma's RMSNorm casts its output back to the input dtype
    (models/gemma modeling_gemma.py `GemmaRMSNorm.forward`: `output.type_as(x)`); LayerNorm runs in fp32 under
    autocast whatever its weight. fms-acceleration's accelerated-peft plugin prepares the model without the upcast
    for this reason (plugins/accelerated-peft framework_plugin_bnb.py `_prepare_model_for_kbit_training`), and peft
    itself casts nothing for GPTQ, AQLM, EETQ, HQQ and torchao models (peft 0.21 utils/other.py: the upcast runs only
    `if not is_gptq_quantized and not is_aqlm_quantized ...`; since peft 0.5 for GPTQ)."""
    return (
        rp.peft == "qlora"
        and bool(rp.quant_bits)
        and rp.kbit_upcast
        and rp.quant_type not in KBIT_KEEPS_DTYPE
        and rp.compute_dtype in ("bf16", "fp16")
        and rp.arch.norm == "rmsnorm"
        and not rp.arch.family.startswith("gemma")
    )


def elementwise_bytes(rp: ResolvedPlan) -> tuple[float, float]:
    """(forward, backward) bytes the memory-bound ops of one block move per token: two norms, two residual adds
    (2 reads + a write each way), the MLP activation, rotary embeddings on q and k. Norms, activation and RoPE run
    fused under torch.compile (Inductor fuses pointwise ops and reductions into one kernel) or when Triton kernels
    replace them (`fused_kernels`: Liger's `apply_liger_kernel_to_*` or unsloth's patches)."""
    arch = rp.arch
    cb = 4 if fp32_activations(rp) else C.DTYPE_BYTES[rp.compute_dtype]
    k = set(rp.fused_kernels)
    tp = max(rp.tensor_parallel, 1)
    if arch.norm == "layernorm":
        norm = _layer_norm_bytes(cb)
    else:
        norm = _rms_norm_bytes(cb, rp.compile or "rms_norm" in k)
    inter = (arch.moe_intermediate or arch.intermediate) * (arch.experts_per_token or 1) / tp
    if arch.mlp in ("swiglu", "geglu"):
        act = _gated_act_bytes(cb, rp.compile or "swiglu" in k)
    else:  # one activation kernel (GELU/ReLU) each way
        act = (2 * cb, 3 * cb)
    rope = (
        (0.0, 0.0)
        if arch.family in NO_ROPE_FAMILIES or arch.block == "encoder"
        else _rope_bytes(cb, rp.compile or "rope" in k)
    )
    qk = (arch.q_dim + arch.kv_dim) / tp
    return tuple(2 * norm[i] * arch.hidden + 2 * 3 * cb * arch.hidden + act[i] * inter + rope[i] * qk for i in (0, 1))


def loss_bytes_per_logit(rp: ResolvedPlan) -> float:
    """Bytes the loss moves per logit beyond the head GEMM: transformers' loss upcasts the logits to fp32
    (loss/loss_utils.py `logits.float()`), log-softmaxes them and writes the fp32 gradient back as 16-bit —
    2·cb + 3·4; a Triton cross-entropy kernel (unsloth/kernels/cross_entropy_loss.py, liger_kernel/ops/
    cross_entropy.py) reads the 16-bit logits and writes their gradient in place — 3·cb; a fused linear
    cross-entropy (Liger, cut-cross-entropy) never writes the logits whole — 4 for its chunk."""
    cb = C.DTYPE_BYTES[rp.compute_dtype]
    if rp.loss_impl == "fused":
        return 4
    if "cross_entropy" in rp.fused_kernels or rp.loss_impl == "xentropy" or (rp.compile and rp.compile_loss):
        return 3 * cb  # flash-attn's xentropy kernel too: reads the 16-bit logits, writes their 16-bit gradient
    return 2 * cb + 3 * 4


def float8_peak(rp: ResolvedPlan) -> float | None:
    """The fp8 dense tensor-core rate when the blocks' linears run in float8 (torchao Float8Linear): twice the
    bf16 rate on GPUs with fp8 units (H100 SXM datasheet: 1,979 vs 989 dense TFLOPS; Ada: L40S 733 vs 362); None
    otherwise (torchao refuses float8 below sm89)."""
    if not rp.float8_linears or not rp.gpu.fp8 or not rp.gpu.tflops_bf16:
        return None
    return 2 * rp.gpu.tflops_bf16 * 1e12


def _float8_cast_bytes(rp: ResolvedPlan, work: list[Matmul], cb: int) -> float:
    """torchao's dynamic float8 scaling (torchao/float8/float8_linear.py): every operand of the three GEMMs of a
    linear — input and weight forward, the output gradient, the input and weight again (transposed) backward — is
    read for its amax, read again and written as fp8: 2·cb + 1 bytes per element."""
    # a run's `bytes` are its input, output and weight in the compute dtype: about the operands each pass casts
    return sum(
        (w.forward + w.recompute + w.backward) * w.bytes / cb * (2 * cb + 1)
        for w in work
        if w.part == "matmuls" and w.name not in ("lm_head", "score")
    )


def _objective_seconds(rp: ResolvedPlan, clock: _Clock, T: int, policy_flops: float) -> float:
    """Extra seconds per micro-step for what the objective adds beside the policy's step."""
    extra = 0.0
    fwd_flops = policy_flops / 3  # one forward of the policy (policy_flops ≈ fwd + 2 × bwd)
    weights = C.model_weights(rp, rp.arch)

    def forward_of(flops: float, weight_bytes: float, label: str) -> None:
        nonlocal extra
        t = max(flops / (clock.peak * MATMUL_EFFICIENCY), weight_bytes / (clock.bw * MEMORY_EFFICIENCY))
        clock.add(label, t)
        extra += t

    if rp.reference != "none":
        forward_of(fwd_flops, weights, "objective: reference forward")
    if rp.reward_model:
        forward_of(fwd_flops, weights, "objective: reward model")
    if rp.value_model:  # trained: forward and backward like the policy
        forward_of(3 * fwd_flops, 3 * weights, "objective: value model")
    if rp.teacher is not None:
        ratio = C.model_weights(rp, rp.teacher) / max(weights, 1)
        forward_of(fwd_flops * ratio, C.model_weights(rp, rp.teacher), "objective: teacher forward")
    if rp.generation in ("generate", "vllm-colocate") and C.rollout_sequences(rp):
        # decoding is bandwidth-bound: every new token reads the weights once for the whole batch, plus the
        # KV cache; vLLM's kernels and scheduling do it at about the roofline, HF generate() far below it
        new_tokens = rp.logits_tokens or rp.generation_len // 2  # the completion
        kv = C.kv_cache(rp)
        per_token_s = (weights + kv / 2) / (clock.bw * MEMORY_EFFICIENCY)
        efficiency = 1.0 if rp.generation == "vllm-colocate" else 0.3
        t = new_tokens * per_token_s / efficiency / max(rp.grad_accum, 1)  # one generation per optimizer step
        clock.add("objective: generation", t)
        extra += t
    return extra


def _optimizer_seconds(rp: ResolvedPlan, p: C.Params) -> tuple[float, str]:
    """The optimizer step's seconds, and where it runs ("gpu" or "cpu")."""
    opt = rp.optimizer
    shard = C.shard_factor(rp, "optimizer")
    n = p.trainable * shard
    wb = p.trainable_dtype_bytes
    state_b = opt.state_bytes if opt.state_bytes is not None else wb
    per_param = 2 * wb + wb + 2 * opt.states * state_b  # weight read + written, gradient read, states read + written
    if rp.master_weights:
        per_param += 2 * 4 + 2 * 4  # fp32 master read + written, fp32 gradient
    if rp.offload_optimizer:
        # gradients down and weights up over PCIe, the update in host memory (DeepSpeed CPUAdam)
        return n * 2 * wb / (PCIE_OFFLOAD_GBS * 1e9) + n * per_param / (CPU_ADAM_GBS * 1e9), "cpu"
    if opt.states == 0 and opt.family == "lomo":
        return 0.0, "gpu"
    traffic = n * per_param
    projected = _projected(rp)
    if projected:
        # the projected matrices: weight read + written and the projected-back update read (`p.add_(norm_grad)`),
        # the states only on their rank-r side (the projections themselves: `_low_rank_seconds`)
        covered = sum(elems for elems, _, _, _ in projected) * shard
        states = sum(state_elems for _, state_elems, _, _ in projected) * shard
        traffic -= covered * (per_param - 3 * wb)
        traffic += states * 2 * state_b
    return traffic / (rp.gpu.memory_gbs * 1e9 * MEMORY_EFFICIENCY), "gpu"


# galore_torch galore_projector.py `GaLoreProjector(update_proj_gap=200)`; transformers' GaLore `optim_args`
# (update_proj_gap=200) and LLaMA-Factory `galore_update_interval: 200` keep that default
PROJECTION_UPDATE_GAP = 200


def _projected(rp: ResolvedPlan) -> list[tuple[float, float, int, int]]:
    """GaLore/APOLLO (full fine-tuning with a known rank): for each targeted matrix kind, (trained elements, state
    elements per state on the rank-r side, long side, short side), instances included."""
    if not (rp.optimizer.low_rank and rp.peft == "none" and rp.low_rank > 0):
        return []
    out = []
    for lin in targeted(rp.arch, rp.low_rank_targets or ("all-linear",)):
        n = lin.count * C.weight_grad_share(rp, lin.name)
        if not n:
            continue
        long_side, short_side = max(lin.in_features, lin.out_features), min(lin.in_features, lin.out_features)
        r = min(rp.low_rank, short_side)
        out.append((n * lin.in_features * lin.out_features, n * r * long_side, long_side, short_side))
    return out


def _low_rank_seconds(rp: ResolvedPlan, p: C.Params) -> float:
    """Per optimizer step, what GaLore/APOLLO add to the update of each targeted m×n matrix (long side M, short
    side S, rank r): GaLore projects the gradient onto rank r and the update back (two 2·r·M·S-FLOP GEMMs, the
    first reading the full gradient, the second writing the full update, in the gradient's dtype; Zhao et al.,
    arXiv:2403.03507, Algorithm 2), and every `update_proj_gap` steps takes
    `torch.linalg.svd(grad.float(), full_matrices=False)` for a new projection (galore_torch galore_projector.py
    `get_orthogonal_matrix`): Golub & Van Loan's R-SVD count for Σ, U₁, V,
    6·M·S² + 20·S³ FLOPs (Matrix Computations, 4th ed., §8.6.3, Fig. 8.6.1) at the fp32 CUDA-core rate, and the
    matrix-vector half of its bidiagonalisation reads the trailing S×S fp32 matrix twice per column (≈ 8/3·S³
    bytes) — a lower bound, as cuSOLVER's SVD rarely reaches the GEMM rate. APOLLO projects once with a random
    matrix it regenerates cheaply and scales the gradient channel-wise (Zhu et al., arXiv:2412.05270, Algorithm 1):
    one GEMM and no SVD."""
    projected = _projected(rp)
    if not projected or rp.offload_optimizer:
        return 0.0
    g = rp.gpu
    bw = g.memory_gbs * 1e9 * MEMORY_EFFICIENCY
    gb = p.trainable_dtype_bytes
    rate = (g.tflops_bf16 if gb == 2 else g.tflops_fp32) or g.tflops_fp32 or 0.0
    fp32 = (g.tflops_fp32 or 0.0) * 1e12 * MATMUL_EFFICIENCY
    gemms = 1 if rp.optimizer.family == "apollo" else 2
    shard = C.shard_factor(rp, "optimizer")
    seconds = 0.0
    for elems, _, long_side, short_side in projected:
        elems *= shard
        r = min(rp.low_rank, short_side)
        flops = 2 * r * elems * gemms
        t = max(flops / (rate * 1e12 * MATMUL_EFFICIENCY) if rate else 0.0, 2 * elems * gb / bw)
        if rp.optimizer.family == "galore" and fp32:
            matrices = elems / (long_side * short_side)
            svd_flops = 6 * long_side * short_side**2 + 20 * short_side**3
            svd_bytes = 8 / 3 * short_side**3 + 2 * 4 * long_side * short_side
            t += matrices * max(svd_flops / fp32, svd_bytes / bw) / PROJECTION_UPDATE_GAP
        seconds += t
    return seconds


def _communication_seconds(rp: ResolvedPlan, p: C.Params) -> tuple[float, float]:
    """(collective seconds per optimizer step, the part that cannot overlap with compute)."""
    world = max(rp.world_size, 1)
    if rp.strategy == "none" or world == 1:
        return 0.0, 0.0
    link = rp.gpu.link_gbs or 32.0
    per_direction = link / 2
    # the data-parallel group crosses nodes once the run (its tensor- and context-parallel ranks inside each
    # data-parallel rank) needs more GPUs than a node has. NCCL then builds one ring per network port, each crossing
    # between nodes through its own port, and splits the collective over them through NVLink (NCCL's maintainer in
    # NVIDIA/nccl#601: "creates 4 rings, each using a different NIC"; "we can use NVLink to split the operations in
    # N parts then balance the traffic onto the N NICs"): the group's ranks in a node move data over as many ports
    # at once, so a rank's share is the ports its group uses in the node, capped by its own NVLink. ZeRO and FSDP
    # shard over the data- and context-parallel ranks together, which `world_size` already counts
    # (vramlens.resolve.distribution `shard_ranks`; torchtitan parallelisms/parallel_dims.py `dp_shard_cp`)
    sharded = rp.strategy in ("deepspeed", "fsdp")
    inner = max(rp.tensor_parallel, 1) * (1 if sharded else max(rp.context_parallel, 1))
    node = max(rp.gpu_count, 1)
    if world * inner > node:
        ranks_per_node = max(min(node // inner, world), 1)
        per_direction = min(per_direction, network_gbs(rp) * ranks_per_node)
    bw = per_direction * 1e9 * LINK_EFFICIENCY
    ring = (world - 1) / world
    accum = max(rp.grad_accum, 1)
    # a tensor-parallel rank holds, reduces and gathers only its slice of the weights (`C.shard_factor`)
    tp = max(rp.tensor_parallel, 1)
    grads = p.trainable * (4 if rp.master_weights else p.trainable_dtype_bytes) / tp
    if rp.strategy == "ddp" or (rp.strategy == "deepspeed" and rp.zero_stage == 0):
        moved = 2 * ring * grads  # all-reduce once per optimizer step
    elif rp.strategy == "deepspeed" and rp.zero_stage in (1, 2):
        moved = ring * grads * accum + ring * p.trainable * p.trainable_dtype_bytes / tp  # reduce-scatter, all-gather
    else:  # ZeRO-3 / FSDP full shard: parameters gathered
        weights = p.total * C.DTYPE_BYTES[rp.compute_dtype] / tp  # forward and backward, gradients reduce-scattered
        if rp.float8_linears and rp.float8_all_gather:
            # torchao float8/fsdp_utils.py `WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`: each Float8Linear
            # weight cast to fp8 on its shard and gathered at 1 byte (the embedding and LM head stay 16-bit)
            fp8_params = sum(lin.params for lin in shapes(rp.arch).linears) / tp
            weights -= fp8_params * (C.DTYPE_BYTES[rp.compute_dtype] - 1)
        moved = accum * (2 * ring * weights + ring * grads)
    total = moved / bw
    layers = max(rp.arch.layers, 1)
    return total, total / layers / accum
