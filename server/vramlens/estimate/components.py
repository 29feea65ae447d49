"""One function per memory component of a training step, each with its formula and its source.

All results are bytes on one GPU (one rank). Sources: the upstream code and papers named at each
function, and traces of HF-style modelling code made with `vramlens.trace` (docs/memory-model.md says how,
and lists the figures); DeepSpeed's `estimate_zero*_model_states_mem_needs` (DS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramlens.estimate.shapes import QK_NORM_FAMILIES, is_mamba, shapes, targeted
from vramlens.knowledge import versions
from vramlens.knowledge.frameworks import HF_MODEL_FRAMEWORKS
from vramlens.knowledge.models import norms_per_layer
from vramlens.resolved import ResolvedPlan

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "uint8": 1}


@dataclass(frozen=True, slots=True)
class Params:
    """Parameter counts and the bytes they take on this rank."""

    total: int
    trainable: int
    frozen_bytes: int  # frozen, non-quantized weights (base model under LoRA)
    quantized_bytes: int  # packed 4/8-bit weights
    quant_constants: int  # absmax / scales of the quantized weights
    trainable_bytes: int  # weights that get gradients (full model, adapters, modules_to_save)
    trainable_dtype_bytes: int  # bytes per trainable param (2 or 4)
    adapter_params: int
    largest_param_bytes: int  # largest single trainable tensor (for-loop optimizer temporaries)
    layer_bytes: int  # one block's weights in the compute dtype (FSDP/ZeRO-3 working set)


def quantized_bytes_per_param(rp: ResolvedPlan) -> tuple[float, float]:
    """(packed bytes, constants bytes) per quantized parameter. bitsandbytes NF4/FP4: 4 bits, blocksize 64,
    absmax fp32 per block, or with double quantization uint8 absmax + fp32 per 256 blocks (QLoRA, arXiv:2305.14314 §2;
    `quantize_4bit` in bitsandbytes/functional.py);
    LLM.int8: 1 byte + fp32 row scale (negligible).
    Pre-quantized GPTQ/AWQ checkpoints as stored: 4-bit weights packed into int32, and per group of GPTQ_GROUP input
    rows of each output column an fp16 scale and a 4-bit zero point packed into int32 — AutoAWQ 0.2
    awq/modules/linear/gemm.py `WQLinear_GEMM` (qweight, qzeros, scales), AutoGPTQ 0.7
    auto_gptq/nn_modules/qlinear/qlinear_cuda.py `QuantLinear` (the same, plus an int32 `g_idx` per input row,
    4 / out_features bytes per parameter: left out)."""
    if rp.quant_bits == 4 and rp.quant_type in ("gptq", "awq"):
        return 0.5, (2 + 0.5) / GPTQ_GROUP
    if rp.quant_bits == 4:
        consts = (1 / 64 + 4 / (64 * 256)) if rp.quant_double else 4 / 64
        return 0.5, consts
    return 1.0, 0.0


# AutoGPTQ `BaseQuantizeConfig.group_size` and AutoAWQ `q_group_size` default: 128 (the published checkpoints' usual)
GPTQ_GROUP = 128


def params(rp: ResolvedPlan) -> Params:
    arch = rp.arch
    s = shapes(arch)
    wb = DTYPE_BYTES[rp.weight_dtype]
    full = rp.peft == "none"
    # a task head (sequence/token classification, regression, reward score) replaces the LM head: h × labels
    # weights instead of V × h (transformers `*ForSequenceClassification.score`, `*ForTokenClassification.classifier`)
    total = s.total - (s.lm_head_params if rp.scalar_head else 0)

    adapter = 0
    if rp.peft in VECTOR_METHODS:
        adapter = vector_adapter_params(rp)
    elif not full:
        # LoRA: r·(in + out) per targeted linear (DoRA adds a magnitude vector of `out`); where the modelling code
        # computes q|k|v (Phi-3: also gate|up) with one linear, the targets among them are one adapter over it
        fused = hf_fused_groups(rp)
        done: set[str] = set()
        for lin in targeted(arch, rp.lora_targets, experts_adaptable(rp)):
            group = next((g for g in fused if lin.name in g), None)
            if group is not None:
                if group in done:
                    continue
                done.add(group)
                members = [l for l in shapes(arch).linears if l.name in group and l.count == lin.count]
                out_f = sum(l.out_features for l in members)
                adapter += lin.count * rp.lora_r * (lin.in_features + out_f)
                if rp.peft == "dora":
                    adapter += lin.count * out_f
                continue
            adapter += lin.count * rp.lora_r * (lin.in_features + lin.out_features)
            if rp.peft == "dora":
                adapter += lin.count * lin.out_features
        # routed experts' fused parameters peft adapts on transformers 5 (`expert_parameters`)
        adapter += sum(e.adapter_params for e in expert_parameters(rp))
    adapter_b = 4 if (rp.adapter_fp32 or rp.weight_dtype == "fp32") else DTYPE_BYTES[rp.compute_dtype]

    linear_params = s.linear_params + (s.lm_head_params if head_quantized(rp) else 0) - keep_in_fp32_params(rp)
    if rp.quant_bits and fused_experts(rp):
        # transformers 5 quantizes nn.Linear modules only (5.24 integrations/bitsandbytes.py
        # `replace_with_bnb_linear`, quantizers/quantizer_bnb_4bit.py `param_needs_quantization`): the 3-D routed
        # experts stay in the weight dtype, and prepare_model_for_kbit_training upcasts them to fp32 with the rest
        linear_params -= sum(l.params for l in s.linears if l.expert)
    non_linear = total - linear_params  # embeddings, lm_head (unless quantized), norms, routers
    quantized = quant_consts = 0
    if rp.quant_bits:
        packed, consts = quantized_bytes_per_param(rp)
        quantized = int(linear_params * packed)
        quant_consts = int(linear_params * consts)
        # QLoRA: non-quantized parts are upcast to fp32 by prepare_model_for_kbit_training
        # (peft src/peft/utils/other.py)
        other_b = 4 if rp.kbit_upcast else wb
        frozen_bytes = non_linear * other_b
        if rp.kbit_upcast and rp.kbit_embeddings_16bit:
            # TRL's peft_module_casting_to_bf16 (trl 0.11.4 trl/trainer/utils.py, called by SFTTrainer when bf16 and
            # 4-bit) returns embed_tokens and lm_head to bf16 after the upcast; norms and routers stay fp32
            head16 = s.embed_params + (0 if head_quantized(rp) or rp.scalar_head else s.lm_head_params)
            frozen_bytes = head16 * 2 + (non_linear - head16) * 4
    else:
        frozen_bytes = total * wb if not full else 0

    saved = 0
    saved_bytes = 0
    if not full:
        for name in rp.modules_to_save:  # fully trained copies (PEFT keeps the original too)
            n = s.lm_head_params if name == "lm_head" else s.embed_params if name == "embed" else 0
            saved += n
            saved_bytes += n * (4 if rp.adapter_fp32 else wb)

    if full:
        trainable, largest_params = trained_params(rp)
        tb = 4 if rp.trainable_fp32 else wb
        trainable_bytes = trainable * tb
        frozen_bytes = (total - trainable) * wb
        largest = largest_params * tb
        int8 = low_rank_int8_params(rp)
        if int8:
            # Q-GaLore's INT8 block linears: a byte per weight, a 16-bit scale and zero point per 256 of them
            trainable_bytes -= int8 * (tb - 1)
            quant_consts += int(int8 * 2 * tb / QGALORE_GROUP)
    else:
        trainable = adapter + saved
        tb = adapter_b
        trainable_bytes = adapter * adapter_b + saved_bytes
        largest = max(
            saved_bytes,
            max(
                (l.in_features * rp.lora_r * adapter_b for l in targeted(arch, rp.lora_targets, experts_adaptable(rp))),
                default=0,
            ),
            max(
                (max(e.in_features, e.out_features) * e.rank * e.experts * adapter_b for e in expert_parameters(rp)),
                default=0,
            ),
        )
        if rp.peft in VECTOR_METHODS:
            largest = max(
                saved_bytes,
                max(
                    (
                        max(l.in_features, l.out_features) * adapter_b
                        for l in targeted(arch, rp.lora_targets, experts_adaptable(rp))
                    ),
                    default=0,
                ),
            )
            # VeRA's shared random projections: frozen buffers in the adapters' dtype (peft's cast_adapter_dtype
            # upcasts BufferDict entries with the adapter weights)
            frozen_bytes += vera_projection_params(rp) * adapter_b
    if arch.vision_params:  # a VLM's vision tower + projector, beside the language model
        total += arch.vision_params
        grads = vision_gets_gradients(rp)
        if full and not rp.vision_frozen and grads:
            trainable += arch.vision_params
            trainable_bytes += arch.vision_params * tb
        elif rp.quant_bits:
            # transformers' bitsandbytes quantizer converts every nn.Linear but the LM head (5.24 quantizers/base.py
            # `get_keys_to_not_convert`): the tower's linears are 4-bit too; the rest follows the k-bit upcast
            lin = vision_linear_params(arch)
            packed, consts = quantized_bytes_per_param(rp)
            quantized += int(lin * packed)
            quant_consts += int(lin * consts)
            frozen_bytes += (arch.vision_params - lin) * (4 if rp.kbit_upcast else wb)
        else:
            frozen_bytes += arch.vision_params * wb
        tower = vision_adapter_params(rp)
        if tower:
            adapter += tower
            if grads:
                trainable += tower
                trainable_bytes += tower * adapter_b
            else:  # adapters the step never reaches: weights without gradients or states
                frozen_bytes += tower * adapter_b
    cb = DTYPE_BYTES[rp.compute_dtype]
    return Params(
        total=total,
        trainable=trainable,
        frozen_bytes=frozen_bytes,
        quantized_bytes=quantized,
        quant_constants=quant_consts,
        trainable_bytes=trainable_bytes,
        trainable_dtype_bytes=tb,
        adapter_params=adapter,
        largest_param_bytes=largest,
        layer_bytes=s.layer_params * cb,
    )


ATTN_LINEARS = ("q", "k", "v", "o")


def trained_params(rp: ResolvedPlan) -> tuple[int, int]:
    """(trainable parameters, the largest trainable tensor's parameters) of a full-precision run: every weight, or
    with `trained_layers` set only those layers (their `trained_modules`: attention and/or MLP linears, else the whole
    layer with its norms) plus the `trained_extra` embedding / LM head. Freeze tuning and LLaMA-Pro
    (LLaMA-Factory 01d87b82 src/llamafactory/model/adapter.py `_setup_freeze_tuning`: `freeze_trainable_layers`
    layers, `freeze_trainable_modules`, `freeze_extra_modules`) and LISA (LMFlow / axolotl: `lisa_activated_layers`
    / `lisa_n_layers` layers at a time, the embedding and LM head outside `model.layers` stay trainable)."""
    s = shapes(rp.arch)
    head = 0 if rp.scalar_head else s.lm_head_params
    total = s.total - (s.lm_head_params - head)
    biggest_linear = s.largest_linear
    if rp.trained_layers is None:
        return total, max(s.embed_params, head, biggest_linear)
    layers = counted_layers(rp)
    n = max(0, min(int(rp.trained_layers), layers))
    if rp.trained_modules:
        names = set()
        if "attn" in rp.trained_modules:
            names.update(ATTN_LINEARS)
        if "mlp" in rp.trained_modules:
            names.update(("gate", "up", "down", "fc1", "fc2"))
        per_layer = sum(l.params for l in s.linears if l.name in names) / layers
        largest = max((l.in_features * l.out_features for l in s.linears if l.name in names), default=0)
    else:
        per_layer = (s.linear_params + s.other_params) / layers  # linears, norms and biases of one layer
        largest = biggest_linear
    trainable = int(n * per_layer)
    if "embed" in rp.trained_extra:
        trainable += s.embed_params
        largest = max(largest, s.embed_params)
    if "lm_head" in rp.trained_extra and head:
        trainable += head
        largest = max(largest, head)
    return min(trainable, total), (largest if n or trainable else 0)


def counted_layers(rp: ResolvedPlan) -> int:
    """The layers `trained_layers` counts (as in `trained_params`): the decoder's, and an encoder-decoder's both."""
    return max(rp.arch.layers + (rp.arch.encoder_layers or 0 if rp.arch.block == "encoder-decoder" else 0), 1)


def backward_layers(rp: ResolvedPlan, worst: bool = False) -> float:
    """How many layers the backward pass runs through: on average over the run, or with `worst` at the step that
    reaches deepest (what the activations' peak follows: nothing below it is saved). Autograd stops below the lowest
    layer with a trainable weight when nothing beneath it trains (LLaMA-Factory 01d87b82
    src/llamafactory/model/model_utils/checkpointing.py `get_custom_gradient_checkpointing_func`: "Only applies
    gradient checkpointing to trainable layers", so frozen blocks are neither recomputed nor back-propagated).
    Where the trained layers sit (`trained_where`): the last n → n layers; the first n → all of them; LLaMA-Pro's
    expanded blocks (every L/n-th, the lowest at L/n − 1) → L − L/n + 1; a window that moves (BAdam's one block
    in turn, LISA's n sampled layers: the lowest of n uniform draws sits at (L − n)/(n + 1) on average) →
    L − (L − n)/(n + 1). A trained embedding (LISA) or vision tower needs every layer's backward."""
    layers = counted_layers(rp)
    if (
        rp.peft != "none"
        or rp.trained_layers is None
        or "embed" in rp.trained_extra
        or (rp.arch.vision_params and not rp.vision_frozen)
    ):
        return float(layers)
    n = max(0, min(int(rp.trained_layers), layers))
    if n == 0:
        return 0.0
    where = rp.trained_where
    if where == "first":
        return float(layers)
    if where == "spread":
        return float(layers - layers // n + 1)
    if where == "rotating":
        return float(layers) if worst else layers - (layers - n) / (n + 1)
    return float(n)


def weight_grad_share(rp: ResolvedPlan, linear: str) -> float:
    """Share of a block linear's instances whose weight trains (its weight-gradient GEMM runs): all of them in a
    full fine-tune, none under PEFT (the adapters have their own), `trained_layers` of the layers when only those
    (and, with `trained_modules`, only their attention or MLP linears) train."""
    if rp.peft != "none":
        return 0.0
    if rp.trained_layers is None:
        return 1.0
    if rp.trained_modules:
        names = (ATTN_LINEARS if "attn" in rp.trained_modules else ()) + (
            ("gate", "up", "down", "fc1", "fc2") if "mlp" in rp.trained_modules else ()
        )
        if linear not in names:
            return 0.0
    layers = counted_layers(rp)
    return max(0, min(int(rp.trained_layers), layers)) / layers


def head_quantized(rp: ResolvedPlan) -> bool:
    """The LM head is a 4/8-bit linear: the plan quantizes it (litgpt) and it is not the tied embedding."""
    return bool(rp.quant_bits and rp.quant_lm_head and shapes(rp.arch).lm_head_params)


# torchao 0.15–0.17 dtypes/nf4tensor.py `NF4Tensor.get_original_weight`, which `linear_nf4` runs for every forward and
# backward of a torchtune QLoRA linear (`LinearNF4`: `weight.to(input.dtype)`): both 4-bit halves unpacked to int64
# (8 bytes per weight together), looked up to 16-bit, scaled and stacked, all alive until it returns: 14 bytes per
# weight at its peak, 2 kept (the 16-bit weight). Traced under fake tensors (tests/trace/test_torchtune_backend.py).
NF4_DEQUANT_PEAK_BYTES = 14


def nf4_dequant_transient(rp: ResolvedPlan) -> int:
    """The peak of torchao's eager NF4 dequantization of the largest block linear in a torchtune QLoRA step (0 for
    other steps, or when torchtune compiles the model)."""
    if not (rp.framework == "torchtune" and rp.quant_bits == 4) or rp.compile:
        return 0
    return int(NF4_DEQUANT_PEAK_BYTES * shapes(rp.arch).largest_linear / max(rp.tensor_parallel, 1))


def dequantized_head(rp: ResolvedPlan) -> int:
    """A quantized LM head is dequantized to the compute dtype on every call (bitsandbytes `matmul_4bit`:
    `dequantize_4bit(B)` then a 16-bit matmul); the copy exists while the head runs, in forward and again in
    its backward, when every saved activation and the logits are still held: V·h·2 bytes at the peak, twice
    that when the weight was quantized from fp16 (dequantized to fp16, then cast)."""
    if not head_quantized(rp):
        return 0
    per = DTYPE_BYTES[rp.compute_dtype if rp.compute_dtype != "fp32" else "bf16"]
    if rp.quant_dequant_fp16 and rp.compute_dtype != "fp16":
        per += 2  # quantized from fp16: dequantized to fp16, then cast (both alive in the cast)
    return shapes(rp.arch).lm_head_params * per


def shard_factor(rp: ResolvedPlan, what: str) -> float:
    """Fraction of `what` ("weights", "gradients", "optimizer") kept on this rank: tensor parallelism splits the
    weights over its ranks (and with them their gradients and optimizer state: Megatron-LM's column- and row-parallel
    linears and vocabulary-parallel embedding; torch's `parallelize_module` with a model's plan, e.g. torchtune 0.6.1
    models/llama3/_parallelism.py `base_llama_tp_plan`, embeddings and output included; the norms it leaves whole
    are not counted apart), then ZeRO/FSDP shard what each rank holds over the data-parallel ranks. A pipeline rank
    holds its stage's share (`pipeline_stage_share`)."""
    return zero_shard_factor(rp, what) * pipeline_stage_share(rp) / max(rp.tensor_parallel, 1)


def zero_shard_factor(rp: ResolvedPlan, what: str) -> float:
    """Fraction of `what` kept on this rank by ZeRO/FSDP over the data-parallel ranks (`world_size`)."""
    if rp.strategy not in ("deepspeed", "fsdp") or rp.world_size <= 1:
        return 1.0
    stage = rp.zero_stage
    needed = {"optimizer": 1, "gradients": 2, "weights": 3}[what]
    if rp.strategy == "fsdp" and what == "weights":
        # SHARD_GRAD_OP shards the parameters at rest too, gathering them from a unit's forward to its backward
        # (`fsdp_root_unsharded`; torch FSDP docs, ShardingStrategy.SHARD_GRAD_OP)
        needed = 2
    return 1.0 / rp.world_size if stage >= needed else 1.0


def weights(rp: ResolvedPlan, p: Params) -> int:
    """Resident weights on this rank: frozen + quantized + trainable, sharded under ZeRO-3/FSDP FULL_SHARD,
    gone to the CPU with parameter offload (the working set is counted in `buffers`)."""
    if rp.offload_params:
        return 0
    return int((p.frozen_bytes + p.quantized_bytes + p.trainable_bytes) * shard_factor(rp, "weights")) + model_buffers(
        rp
    )


def model_buffers(rp: ResolvedPlan) -> int:
    """Buffers the modelling code registers beside the weights, on every rank: GPT-BigCode's causal mask, a
    max_positions × max_positions bool tensor (transformers 5.24 models/gpt_bigcode/modeling_gpt_bigcode.py
    GPTBigCodeModel `self.bias = nn.Buffer(torch.tril(torch.ones((max_positions, max_positions),
    dtype=torch.bool)), persistent=False)`; 64 MiB at StarCoder's 8192 positions)."""
    if rp.arch.family == "gpt_bigcode" and rp.framework in HF_MODEL_FRAMEWORKS and rp.arch.max_position:
        return rp.arch.max_position**2
    if rp.framework == "torchtune" and rp.arch.block == "decoder" and rp.arch.max_position:
        return rp.rope_caches * torchtune_rope_cache_bytes(rp.arch)
    return 0


# torchtune 0.6.1 RoPE modules whose cache holds cos and sin over the whole head dimension (models/qwen2
# `Qwen2RotaryPositionalEmbeddings`, models/phi3 `Phi3RotaryPositionalEmbeddings`: [max_seq_len, 2 × head_dim]); the
# others (modules/position_embeddings.py `RotaryPositionalEmbeddings`, llama3_1 `Llama3ScaledRoPE`) over half of it,
# [max_seq_len, head_dim / 2, 2]
TORCHTUNE_FULL_WIDTH_ROPE = frozenset({"qwen2", "phi3"})


def torchtune_rope_cache_bytes(arch) -> int:
    """One torchtune RoPE module's fp32 cache (and its fp32 frequencies) for the model's max_position."""
    head_dim = arch.head_dim or arch.hidden // arch.heads
    width = 2 * head_dim if arch.family in TORCHTUNE_FULL_WIDTH_ROPE else head_dim
    return 4 * (arch.max_position * width + head_dim // 2)


def gradients(rp: ResolvedPlan, p: Params) -> int:
    """One gradient per trainable parameter in the parameter's dtype (docs/memory-model.md); sharded from ZeRO-2."""
    if rp.optimizer_in_bwd or rp.optimizer.layerwise:
        return 0  # the step runs per parameter inside backward
    if rp.strategy == "deepspeed" and rp.offload_optimizer:
        return 0  # ZeRO-Offload moves gradients to the CPU as they are reduced
    return int(p.trainable * p.trainable_dtype_bytes * shard_factor(rp, "gradients"))


def optimizer_state(rp: ResolvedPlan, p: Params) -> int:
    """Optimizer state per trainable parameter (knowledge/optimizers: states × bytes, None = param dtype:
    `_init_group` in torch/optim/adam.py). DeepSpeed mixed precision keeps fp32 master weights + fp32 states
    (DS: 12 B/param; ZeRO, arXiv:1910.02054 §3.1)."""
    if rp.offload_optimizer:
        return 0
    opt = rp.optimizer
    state_b = opt.state_bytes if opt.state_bytes is not None else p.trainable_dtype_bytes
    per_param = opt.states * state_b
    if rp.master_weights:
        per_param = 4 + opt.states * (opt.state_bytes if opt.state_bytes is not None else 4)
    if opt.paged:
        pass  # same size; lives in CUDA unified memory outside the allocator
    if opt.low_rank and rp.peft == "none":
        return int(low_rank_state(rp, p, per_param, state_b) * shard_factor(rp, "optimizer"))
    return int(p.trainable * per_param * shard_factor(rp, "optimizer"))


def low_rank_state(rp: ResolvedPlan, p: Params, per_param: float, state_b: float) -> float:
    """GaLore (Zhao et al. 2024, arXiv:2403.03507 §4; galore_torch/galore_projector.py `GaLoreProjector.project`):
    the gradient of a targeted m×n matrix is projected onto rank r on its shorter side, so the optimizer's states
    hold r·max(m, n) elements each, plus the projection matrix r·min(m, n); every other trainable parameter
    (embeddings, norms, LM head, untargeted linears) keeps full states. APOLLO's states are projected the same way
    (arXiv:2412.05270). Targets default to every linear of the blocks (LLaMA-Factory `galore_target: all`)."""
    if rp.low_rank <= 0:
        return p.trainable * per_param * 0.25  # rank unknown: a quarter of the full states
    r = rp.low_rank
    proj_b = low_rank_projection_bytes(rp, p)
    projected = full_covered = 0
    for lin in low_rank_linears(rp):
        long_side, short_side = max(lin.in_features, lin.out_features), min(lin.in_features, lin.out_features)
        rank = min(r, short_side)
        projected += lin.count * (rp.optimizer.states * rank * long_side * state_b + rank * short_side * proj_b)
        full_covered += lin.count * lin.in_features * lin.out_features
    return projected + max(p.trainable - full_covered, 0) * per_param


def low_rank_linears(rp: ResolvedPlan) -> list:
    """The block linears whose optimizer states GaLore/APOLLO project (none in a partial run, whose states keep the
    conservative full count)."""
    if rp.trained_layers is not None or not rp.optimizer.low_rank or rp.peft != "none":
        return []
    return list(targeted(rp.arch, rp.low_rank_targets or ("all-linear",)))


# Q-GaLore (VITA-Group/Q-GaLore 5bd2f1c5 q_galore_torch/q_galore_projector.py `_quantize`, utils/quantization.py
# `_quantize_tensor_int8`): quantized values are stored one per uint8 element, with a scale and a zero point in the
# tensor's 16-bit dtype per group of 256 elements (`proj_group_size`, `weight_group_size` default 256)
QGALORE_GROUP = 256


def low_rank_projection_bytes(rp: ResolvedPlan, p: Params) -> float:
    """Bytes per element of a GaLore projection matrix: the gradient's dtype (galore_torch galore_projector.py
    `get_orthogonal_matrix` casts the fp32 SVD factor back to it), or Q-GaLore's quantized projection (a uint8 per
    element, INT4 values by default, plus the group's 16-bit scale and zero point)."""
    grad_b = DTYPE_BYTES[rp.compute_dtype] if rp.low_rank_int8_weights else p.trainable_dtype_bytes
    if rp.low_rank_proj_quant:
        return 1 + 2 * grad_b / QGALORE_GROUP
    return grad_b


def low_rank_int8_params(rp: ResolvedPlan) -> int:
    """Q-GaLore's INT8 weights (VITA-Group/Q-GaLore 5bd2f1c5 utils/quantization.py `prepare_model_for_int8_training`:
    every q/k/v/o/gate/up/down linear becomes a `QGaLoreLinear` with a uint8 weight, updated by stochastic rounding
    in q_galore_adamw8bit.py): the parameters held that way."""
    if not rp.low_rank_int8_weights:
        return 0
    return sum(lin.params for lin in low_rank_linears(rp))


def low_rank_svd_transient(rp: ResolvedPlan, p: Params) -> int:
    """The projection update of the largest targeted m×n gradient (every `update_proj_gap` steps, the first one
    included): galore_torch galore_projector.py `get_orthogonal_matrix` (ms-swift v4.5.2
    swift/optimizers/galore/galore_projector.py, Q-GaLore's the same) copies the gradient to fp32 and runs
    `torch.linalg.svd(matrix, full_matrices=False)`; torch's cuSOLVER drivers work on a column-major clone of their
    input (pytorch v2.5 aten/src/ATen/native/cuda/linalg/BatchLinearAlgebraLib.cpp `apply_svd_lib_gesvdj`:
    `cloneBatchedColumnMajor`) and return U (m×k), S and Vh (k×n) in fp32, k = min(m, n). cuSOLVER's own workspace
    is left out."""
    grad_b = DTYPE_BYTES[rp.compute_dtype] if rp.low_rank_int8_weights else p.trainable_dtype_bytes
    worst = 0
    for lin in low_rank_linears(rp):
        m, n = lin.out_features, lin.in_features
        k = min(m, n)
        copies = 1 if grad_b == 4 else 2  # an fp32 gradient is decomposed as it is
        worst = max(worst, 4 * (copies * m * n + m * k + k * n + k))
    return worst


def optimizer_temporaries(rp: ResolvedPlan, p: Params) -> int:
    """Transient memory inside `optimizer.step()`: foreach AdamW makes one state-sized temporary
    (`_foreach_sqrt(exp_avg_sq)` in torch/optim/adam.py; traced 8B pure bf16 foreach 74.79 GiB = W+G+O+14.96,
    docs/memory-model.md); fused ≈ 0;
    for-loop ≈ 2 × the largest parameter; 8-bit and offloaded optimizers work in place."""
    opt = rp.optimizer
    if rp.offload_optimizer or opt.library in ("bitsandbytes", "torchao") or opt.family in ("lomo",):
        return 0
    if opt.low_rank:
        # galore_torch's optimizers step one parameter at a time (project, update, project back) whatever the
        # implementation asked for: a for-loop step, and now and then the projection's SVD of the largest gradient
        return max(2 * p.largest_param_bytes, low_rank_svd_transient(rp, p))
    if rp.optimizer_impl == "fused":
        return 0
    if rp.optimizer_impl == "forloop":
        return 2 * p.largest_param_bytes
    state_b = opt.state_bytes if opt.state_bytes is not None else p.trainable_dtype_bytes
    if opt.states == 0:
        return 0
    return int(p.trainable * state_b * shard_factor(rp, "optimizer"))


def activations_per_token(rp: ResolvedPlan, kept: dict | None = None) -> tuple[float, float]:
    """Saved activations per token: (all layers without checkpointing, one layer), in bytes. `kept`, when given,
    receives "down_input": what one layer keeps of the down projection's input (for `backward_block_per_token`).

    HF Llama-style block in 16-bit with SDPA/flash (traced; docs/memory-model.md, "Activations"):
      norms: each RMSNorm keeps its fp32 input (4h) and the normalised 16-bit value (2h); its weighted
             output (2h) is the input of the following linears;
      attention: q after RoPE (2q), K and V (2·kv_eff each, kv_eff = q with repeat_kv), SDPA output (2q),
             fp32 logsumexp (4·heads); eager adds fp32 softmax + 16-bit probabilities (6·heads·s);
      gated MLP: gate, up, act(gate) (2I each) and the product, the input of down (2I).
    GELU MLP blocks (GPT-2/BERT/T5): LayerNorm keeps its 16-bit input; fc1 output and GELU output (2I each).
    Linear inputs are kept only when the linear has a trainable weight or a LoRA adapter in the same dtype;
    a PEFT fp32 adapter keeps its own fp32 copy of the input instead (`_cast_input_dtype` in
    peft src/peft/tuners/lora/layer.py: +4·in per target). LoRA dropout
    keeps a dropped copy of each targeted linear's input plus a 1-byte mask (`lora_dropout`
    in the same `forward`). bitsandbytes < 0.43.2
    keeps the input of every 4-bit linear as well (`quant_keeps_input`). A fused q|k|v linear (litgpt,
    `fused_qkv`) has one adapter and one dropout, `zero_pad` keeps the adapter output when only some of q, k, v
    adapt, and under MHA the value is a view that keeps the whole q|k|v output (benchmarks/litgpt_vs_estimate.py).
    """
    arch = rp.arch
    if is_mamba(arch):
        one = mamba_layer_per_token(rp)
        if kept is not None:
            kept.update(down_input=0.0, through_attention=one, down_adapter_copy=0.0, mlp=0.0, after_attention=0.0)
        return arch.layers * one, one
    h, q, heads = arch.hidden, arch.q_dim, arch.heads
    kv_eff = q if (rp.repeat_kv and rp.attn_impl in ("sdpa", "eager")) else arch.kv_dim
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    s = rp.seq_len // max(rp.context_parallel, 1)

    gated = arch.mlp in ("swiglu", "geglu")
    m = mlp_bytes(rp)
    compiled = compiled_block(rp)
    # AMP over fp32 weights (autocast, not compiled): the residual stream, the norms and their weights are fp32;
    # only the autocast ops (matmuls, SDPA) run in 16-bit, each casting its own fp32 input (`amp_fp32_stream`)
    amp = rp.amp and c == 2 and not compiled
    # RMSNorm upcasts: its fp32 input (4h) is kept; the normalised 16-bit value (c·h) only when the norm's
    # weight trains (full fine-tuning; traced: LoRA keeps 4h less per layer than full FT, docs/memory-model.md).
    # Under AMP the input is already fp32 and the normalised value stays fp32 (`hidden_states.to(input_dtype)` is
    # a no-op, transformers 5.24 models/llama/modeling_llama.py LlamaRMSNorm): the weight's gradient keeps 4h.
    # Families whose norm multiplies by the weight in fp32 keep the fp32 normalised value in any dtype
    # (`FP32_NORM_WEIGHT_FAMILIES`).
    fp32_norm_weight = fp32_norm_weights(rp)
    norm_trains = (4 if amp or fp32_norm_weight else c) if full else 0
    # q/k norms read the 16-bit q and k projections even under AMP: their normalised value is 16-bit unless the
    # family multiplies by the weight in fp32
    qk_norm_trains = (4 if fp32_norm_weight else c) if full else 0
    if compiled:
        # the partitioner keeps each norm's 16-bit input and its fp32 1/rms (LayerNorm: mean and 1/std) and
        # recomputes the upcast and the normalised value in backward
        stats = 4 if arch.norm == "rmsnorm" else 8
        norm_keep = norms_per_layer(arch) * (c * h + stats)
    elif arch.norm == "rmsnorm":
        n_norms = norms_per_layer(arch)
        norm_keep = n_norms * ((4 + norm_trains) if c == 2 else 8) * h
    else:
        # LayerNorm keeps its input: the fp32 residual stream under AMP (layer_norm is an fp32 autocast op) and in a
        # k-bit model whose stream prepare_model_for_kbit_training made fp32 (each norm reads its own fp32 tensor,
        # except where a parallel block feeds both of its norms the same one: `SHARED_NORM_INPUT`)
        if amp:
            norm_keep = norms_per_layer(arch) * 4 * h
        elif fp32_residual(rp):
            norm_keep = (1 if arch.family in SHARED_NORM_INPUT else norms_per_layer(arch)) * 4 * h
        else:
            norm_keep = norms_per_layer(arch) * c * h
    if arch.family in QK_NORM_FAMILIES:
        if compiled:
            norm_keep += c * (q + arch.kv_dim) + 4 * (heads + arch.n_kv_heads)
        else:
            norm_keep += (4 + qk_norm_trains) * (q + arch.kv_dim)

    attn = c * q + 2 * c * kv_eff + c * q + 4 * heads
    mha = arch.kv_dim == q
    hf_fused = rp.arch.family in HF_FUSED_FAMILIES and rp.framework in HF_MODEL_FRAMEWORKS
    hf_c_attn = rp.arch.family in HF_C_ATTN_FAMILIES and rp.framework in HF_MODEL_FRAMEWORKS
    hf_one_qkv = rp.arch.family in HF_ONE_QKV_LINEAR and rp.framework in HF_MODEL_FRAMEWORKS
    # a k-bit model's linears return fp32 (their input's dtype, `mlp_bytes`): autocast then hands SDPA 16-bit copies
    # of q, k and v (scaled_dot_product_attention is an autocast op), and no view of the fused output reaches it
    qkv_fp32 = m == 4 and c == 2
    if (rp.fused_qkv or hf_fused) and mha and not qkv_fp32:
        attn += c * (q + arch.kv_dim)  # V is a view of the fused q|k|v output, which SDPA keeps whole
    if rp.attn_impl == "eager":
        # fp32 softmax output + 16-bit probabilities (`eager_attention_forward`, transformers modeling_llama.py).
        # BERT/RoBERTa/DeBERTa-v2 take the softmax in the scores' own dtype and drop the probabilities: the softmax
        # output (c; fp32 under autocast, where softmax is an fp32 op) and the dropped copy the matmul keeps (c)
        upcast = arch.family not in SOFTMAX_IN_INPUT_DTYPE or amp
        attn += ((4 if upcast else c) + c) * heads * s
        if arch.family == "gemma2":
            # attention soft-capping before the softmax: tanh keeps its 16-bit output (transformers 5.24
            # models/gemma2/modeling_gemma2.py eager_attention_forward: `/ softcap`, `tanh`, `* softcap`)
            attn += c * heads * s
        if arch.family in ATTENTION_DROPOUTS and rp.framework in HF_MODEL_FRAMEWORKS:
            # dropout on the probabilities keeps its 1-byte mask (CUDA native_dropout); its output is what the
            # probability-times-V matmul keeps, counted above (SDPA drops inside the kernel and keeps no mask)
            attn += heads * s
    elif sdpa_math(rp):
        # SDPA's math kernel (no fused kernel takes the call, `sdpa_math`): q, K and V upcast to fp32 (intermediates
        # in fp32 unless torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp), K and V broadcast over the query
        # heads by `matmul` (a copy each), the fp32 probabilities, and the 16-bit output, which the kernel itself
        # does not keep: o's matmul keeps it for its weight's gradient (below: not when o is frozen)
        # (torch aten/src/ATen/native/transformers/attention.cpp `_scaled_dot_product_attention_math`)
        attn = 4 * q + 2 * 4 * q + 4 * heads * s + c * q

    # linear-input groups: (input width, member linears)
    expert_down_in = 0.0
    if arch.is_moe:
        k = max(arch.experts_per_token, 1)
        inter = arch.moe_intermediate or arch.intermediate
        # each expert's gate, up and act(gate) (an ungated one's act input) in the MLP's dtype (`mlp_bytes`: fp32
        # out of 4-bit linears fed fp32), and h-sized pieces around it
        mlp_internal = k * ((3 if gated else 1) * m * inter + 3 * c * h) + 4 * arch.num_experts
        eb = expert_bytes(rp)
        if not full and not experts_adaptable(rp):
            # frozen experts run by grouped_mm keep their gate|up output, act(gate) and the down output (scaled
            # by the routing weights), not their gathered inputs (transformers 5.24 integrations/moe.py), in the
            # experts' dtype (`expert_bytes`)
            mlp_internal = k * (((3 if gated else 2) * inter + h) * eb) + 4 * arch.num_experts
        adapted = {e.name for e in expert_parameters(rp)}
        # an adapted expert parameter's W' needs a gradient, so its grouped_mm also keeps its input: the gathered
        # tokens for gate|up, the act(gate)·up product for down (torch derivatives.yaml `_grouped_mm`)
        if "gate_up" in adapted:
            mlp_internal += k * h * eb
        if "down" in adapted:
            mlp_internal += k * inter * eb
            expert_down_in = k * inter * eb
        if arch.shared_experts:
            si = (arch.shared_expert_intermediate or inter) * arch.shared_experts
            mlp_internal += (6 if gated else 2) * si
        down_in = c * inter * k
    else:
        inter = arch.intermediate
        # gate, up and act(gate); compiled, act(gate) is recomputed from the gate output
        mlp_internal = (3 if gated and not compiled else 2 if gated else 1) * m * inter
        if arch.family in GELU_TANH_FAMILIES and not gated and rp.framework in HF_MODEL_FRAMEWORKS and not compiled:
            # gelu_new written out in torch ops keeps x, tanh(...), 0.5·x and 1 + tanh(...): three more than GELU
            mlp_internal += 3 * m * inter
        down_in = c * inter
    groups = [
        (c * h, ("q", "k", "v")),
        (c * h, ("gate", "up", "fc1")),
        (down_in, ("down", "fc2")),
    ]
    autocast = fp32_residual(rp)
    # PEFT casts each adapter's input to the adapter dtype in every module (`_cast_input_dtype`); under autocast
    # lora_A then runs in 16-bit and keeps its own 16-bit cast of that input (one per module, activations are not
    # in autocast's cache), so the bytes kept per element are c, not 4
    adapter_fp32 = (rp.adapter_fp32 and c == 2) or autocast
    a = c if autocast else (4 if adapter_fp32 else c)  # bytes per element of the adapter's kept input
    dropout = not full and rp.lora_dropout > 0
    keeps_quant_input = rp.quant_bits == 4 and rp.quant_keeps_input
    targets = set(rp.lora_targets)
    all_lin = "all-linear" in targets
    linear_inputs = 0.0
    expert_mlp = arch.is_moe and not full and not experts_adaptable(rp)
    down_input = down_copy = mlp_inputs = 0.0
    qkv_in = 0.0
    group_inputs: dict[str, float] = {}
    for size, members in groups:
        before = linear_inputs
        mlp_group = members[0] != "q"
        if members[0] == "gate":
            qkv_in = before  # what the q/k/v group keeps (the groups run in order)
        present = [m for m in members if _has(arch, m)]
        if expert_mlp and members[0] != "q":
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
        if hf_fused and members[0] == "gate" and hit:
            hit = ["gate_up"]  # Phi-3's gate_up_proj: one adapter for gate and up
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
    # o's input is SDPA's output, which attention keeps anyway (eager's is a fresh reshape)
    o_extra = 0.0
    if not full and (all_lin or "o" in targets):
        if dropout:
            o_extra = (a + 1) * q
        elif adapter_fp32:
            o_extra = a * q
    linear_inputs += o_extra
    o_keeps_output = (all_lin or "o" in targets) and o_extra == 0 or keeps_quant_input
    if sdpa_math(rp) and not full and not o_keeps_output:
        # the math kernel keeps q, K, V and the probabilities, not its output (fused kernels keep it for their own
        # backward): a frozen o keeps nothing (a 4-bit one of bitsandbytes < 0.43.2 keeps its input), and o's
        # adapter keeps its own cast of the output (`o_extra`), so SDPA's 16-bit output is freed (traced: Falcon-7B's
        # LoRA/QLoRA blocks keep 2·h bytes a token less)
        attn -= c * q
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
        mlp_internal = 2 * c * inter
        linear_inputs = (
            c
            * h
            * sum(1 for members in (("q", "k", "v"), ("gate", "up")) if any(all_lin or m in targets for m in members))
        )
        down_input = down_copy = 0.0
    if arch.family in DISENTANGLED_ATTENTION and rp.framework in HF_MODEL_FRAMEWORKS:
        attn += disentangled_per_token(rp, c, amp)
    if rp.peft in VECTOR_METHODS:
        # IA3 / VeRA: the frozen base linears keep nothing; each adapter keeps what its own products need
        linear_inputs, down_input, down_copy = vector_adapter_per_token(rp)
    per_layer = norm_keep + attn + mlp_internal + linear_inputs + dora_per_token(rp)
    # residual dropouts the family's config enables by default, each keeping a 1-byte mask (CUDA native_dropout)
    per_layer += (RESIDUAL_DROPOUTS.get(arch.family, 0) * h) if rp.framework in HF_MODEL_FRAMEWORKS else 0
    if arch.block == "encoder-decoder" and hf_t5(rp):
        enc = arch.encoder_layers or arch.layers
        one_norm = norm_keep / max(norms_per_layer(arch), 1)
        enc_layer = per_layer + t5_block_extras(rp, norms=2)
        # the decoder's cross-attention sublayer: its norm, attention over the encoder's output, the q/k/v linears'
        # inputs as the self-attention's keep them (k and v read the encoder's output: `t5_global_per_token` counts
        # it once where they share it), o's, DoRA's on q, k, v, o, and the residual dropout's mask
        cross = (
            one_norm
            + attn
            + group_inputs.get("q", 0.0)
            + o_extra
            + dora_per_token(rp, ATTN_LINEARS)
            + h
            + t5_block_extras(rp, norms=1, mlp=False)
        )
        per_layer = enc_layer + cross  # the decoder's block, the largest one
        total_layers = enc * enc_layer + arch.layers * per_layer
    elif arch.block == "encoder-decoder":
        enc = arch.encoder_layers or arch.layers
        cross = c * q + 2 * c * kv_eff + c * q + 4 * heads + (4 + c) * h
        total_layers = enc * per_layer + arch.layers * (per_layer + cross)
    else:
        total_layers = arch.layers * per_layer
        if first_block_input_frozen(rp) and amp:
            # the first block's norm reads the frozen embeddings' output: it keeps no fp32 input
            total_layers -= (2 if arch.family in SHARED_NORM_INPUT else 1) * 4 * h
    tp = max(rp.tensor_parallel, 1)
    if kept is not None:
        kept["down_input"] = down_input / tp
        kept["through_attention"] = (qkv_in + attn) / tp  # what a block keeps up to its attention's output
        kept["down_adapter_copy"] = down_copy / tp
        kept["mlp"] = (mlp_internal + mlp_inputs + dora_per_token(rp, MLP_LINEARS)) / tp
        # what a block keeps past its attention's output (o's adapter input, the MLP, a second norm): freed by the
        # block's backward before its attention's own backward runs
        kept["after_attention"] = max(per_layer - qkv_in - attn - norm_keep / max(norms_per_layer(arch), 1), 0) / tp
    return total_layers / tp, per_layer / tp


def _mamba_adapter_keeps(rp: ResolvedPlan, name: str, width: int) -> float:
    """What a LoRA adapter on a Mamba mixer's linear keeps per token: its input (in the adapter's dtype: PEFT casts
    it, `_cast_input_dtype` in peft src/peft/tuners/lora/layer.py; a dropped copy and a 1-byte mask under
    lora_dropout) and lora_A's output, which lora_B keeps. 0 when the linear is not adapted."""
    if rp.peft == "none" or not any(l.name == name for l in targeted(rp.arch, rp.lora_targets)):
        return 0.0
    c = 2 if rp.compute_dtype != "fp32" else 4
    a = 4 if rp.adapter_fp32 else c
    return (a + 1 if rp.lora_dropout > 0 else a) * width + a * rp.lora_r


def mamba_layer_bytes(rp: ResolvedPlan, kernels: bool = True) -> tuple[float, float, float]:
    """What one Mamba block (transformers 5.24 models/mamba/modeling_mamba.py `MambaBlock`) keeps for backward, in
    16-bit: (bytes per token, per sequence, per layer).

    Both take the block's RMSNorm (fp32 input and 1/rms; the normalised 16-bit value when its weight trains) and
    in_proj's input (when in_proj trains or is adapted). Then, with I the mixer width, N the state size, R the
    time-step rank, K the conv kernel:
    - `kernels` (transformers' training path when mamba_ssm is installed: `MambaMixer.forward` calls
      `mamba_inner_fn`, mamba_ssm/ops/selective_scan_interface.py `MambaInnerFn.forward`, checkpoint_lvl 1, which
      recomputes the conv output and Δ in backward): xz (2I), x_dbl (R + 2N), contiguous B and C (2N), the scan
      output (I), and the scan's fp32 chunk states (2N·I per 2048 positions of each sequence). x_proj, dt_proj and
      out_proj run from their raw weights inside the kernel: adapters on them are never called.
    - the torch path (`MambaMixer.forward` without mamba_ssm, `mamba_selective_scan`'s recurrent loop; measured with
      saved-tensor hooks, tests/trace/test_hybrid_layers.py): in_proj's output (2I), the padded conv output
      (I·(L + K − 1)/L), its SiLU output twice (x_proj's flattened input; the `hidden_states * D` operand when D
      trains), x_proj's output (R + 2N), dt_proj's output and its softplus (2I), fp32 copies of x (4I) and B (4N),
      the fp32 discretised A and B (8·I·N), every step's state in fp32 (saved by the next step) and 16-bit (saved
      by the output matmul) (4 + 2)·I·N, silu(z) (I), the fp32 scan output (4I) and out_proj's input (I, when
      out_proj trains); dt_proj is applied as `dt_proj.weight @ time_step`, so its adapter is never called.
    Per layer: the fp32 A = −exp(A_log) (4·I·N, and exp's output again when A_log trains) and D (4I); the kernel
    also keeps Δ's fp32 bias (4I)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    h, i, n, r, k = arch.hidden, arch.ssm_inner, arch.ssm_state, arch.ssm_dt_rank, arch.ssm_conv
    full = rp.peft == "none"
    norm = 4 * h + 4 + (c * h if full else 0)
    in_proj = c * h if full else _mamba_adapter_keeps(rp, "in_proj", h)
    per_layer = 4 * i * n + 4 * i + (4 * i * n if full else 0)
    if kernels:
        chunks = math.ceil(rp.seq_len / 2048)
        return norm + in_proj + c * (3 * i + r + 4 * n), 8 * i * n * chunks, per_layer + 4 * i  # + Δ's fp32 bias
    # x_proj's input is the SiLU output flattened to (B·L, I): a copy, but a view of it in a micro-batch of one
    # sequence, where it is the same storage as D's operand
    x_proj = (c * i if rp.micro_batch != 1 else 0) if full else _mamba_adapter_keeps(rp, "x_proj", i)
    per_token = (
        norm
        + in_proj
        + x_proj
        + c * (6 * i + r + 2 * n)
        + 8 * i
        + 4 * n
        + (12 + c) * i * n
        + (2 * c * i if full else 0)
    )  # D's operand and out_proj's input
    return per_token, c * i * (k - 1) + (c - 4) * i * n, per_layer


def mamba_layer_per_token(rp: ResolvedPlan, kernels: bool = True) -> float:
    """`mamba_layer_bytes` spread over the micro-batch's tokens."""
    per_token, per_seq, per_layer = mamba_layer_bytes(rp, kernels)
    s = max(rp.seq_len, 1)
    return per_token + per_seq / s + per_layer / (s * max(rp.micro_batch, 1))


def mamba_backward_per_token(rp: ResolvedPlan) -> float:
    """The backward temporaries of one Mamba mixer per token, 16-bit, as mamba_ssm's `MambaInnerFn.backward` makes
    them (mamba_ssm/ops/selective_scan_interface.py): the recomputed conv output and Δ (2I), dxz (2I), dout_y (I),
    the scan's dconv1d_out, dΔ and out_z (3I) and dx_dbl (R + 2N)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    return c * (8 * arch.ssm_inner + arch.ssm_dt_rank + 2 * arch.ssm_state)


def sdpa_math(rp: ResolvedPlan) -> bool:
    """Whether the model's SDPA call runs torch's math kernel on CUDA. Falcon calls
    `torch.nn.functional.scaled_dot_product_attention` itself (transformers 5.24 models/falcon/modeling_falcon.py
    `FalconAttention.forward`), with the always-built causal mask and, under multi-query attention (falcon-7b:
    one K/V head, `new_decoder_architecture` off), K and V of one head and no `enable_gqa`. Every fused kernel then
    declines: flash takes no mask (`check_for_attn_mask`), and flash, memory-efficient and cuDNN all require equal
    query and K/V head counts unless `enable_gqa` is set (`check_batch_size_and_num_heads_dense`, torch 2.13
    include/ATen/native/transformers/sdp_utils_cpp.h), so `select_sdp_backend` falls back to math (torch
    aten/src/ATen/native/transformers/cuda/sdp_utils.cpp). The 40B/180B layout broadcasts K/V to every head first
    and keeps a fused kernel."""
    a = rp.arch
    return (
        rp.attn_impl == "sdpa"
        and rp.framework in HF_MODEL_FRAMEWORKS
        and a.family in DIRECT_SDPA_FAMILIES
        and a.n_kv_heads == 1 < a.heads
    )


def sdpa_math_backward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token live at the backward of one attention on the math kernel besides its saved tensors: the
    gradient of the fp32 probabilities and the softmax backward's output (two query-heads × s fp32 matrices)."""
    if not sdpa_math(rp):
        return 0.0
    return 2 * 4 * rp.arch.heads * (rp.seq_len // max(rp.context_parallel, 1)) / max(rp.tensor_parallel, 1)


def attention_backward_freed(rp: ResolvedPlan, tokens: int) -> int:
    """Bytes the forward-backward set no longer holds when the last block's math-kernel attention runs its backward
    in an adapter model. Autograd runs the nodes created last first: the loss, the LM head (its 16-bit copy under
    autocast), the final norm, then the last block's o projection and MLP (created after the attention in the
    forward, in a sequential block and in Falcon's parallel one, whose `mlp_output += attention_output` adds the
    attention output after the MLP ran; transformers 5.24 models/falcon/modeling_falcon.py FalconDecoderLayer), and
    each node frees what it saved once it ran. Under AMP the frozen o and MLP weights' 16-bit casts, which their
    matmuls kept for the input gradient, go with them. The base weights are frozen, so this backward creates no
    weight-sized gradient in their place (full fine-tuning creates the head's and the MLP's gradients there: not
    counted)."""
    if rp.peft == "none" or not sdpa_math(rp) or rp.grad_checkpointing:
        return 0
    kept: dict = {}
    activations_per_token(rp, kept)
    freed = (kept["after_attention"] + final_norm_per_token(rp)) * tokens
    s = shapes(rp.arch)
    if rp.amp:
        after = [lin for lin in s.linears if lin.name in ("o",) + MLP_LINEARS and not lin.expert]
        freed += sum(lin.params for lin in after) * 2 / max(rp.arch.layers, 1)
    if rp.amp or fp32_residual(rp) and not rp.kbit_embeddings_16bit:
        freed += (s.lm_head_params or s.embed_params) * 2  # the head's copy (`autocast_weight_cache`)
    return int(freed)


def as_loaded(rp: ResolvedPlan) -> ResolvedPlan:
    """The plan as transformers loads it. From transformers 5, `replace_with_bnb_linear` swaps only modules whose type
    is exactly `nn.Linear` (or GPT-2's Conv1D) for bitsandbytes layers (transformers 5.24
    integrations/bitsandbytes.py: `isinstance(module, Conv1D) or type(module) is nn.Linear`; 4.x tested
    `isinstance(module, nn.Linear)`): Falcon's `FalconLinear(nn.Linear)` stays 16-bit, no weight is 4-bit, and
    peft's `prepare_model_for_kbit_training` then casts every 16-bit parameter to fp32 (peft 0.21.2
    src/peft/utils/other.py), so the model trains as LoRA over fp32 weights. The Trainer's 16-bit autocast still
    runs the step (bf16/fp16 training arguments: transformers 5.24 trainer.py hands `mixed_precision` to accelerate,
    whose `prepare_model` wraps the model's forward in `get_mixed_precision_context_manager`, accelerate 1.15
    accelerator.py): `FalconLinear.forward`'s `input @ self.weight.T` is an autocast
    matmul, so each linear casts its fp32 input and its frozen fp32 weight to 16 bits and returns 16 bits, while the
    LayerNorm output and the residual stream stay fp32 (layer_norm runs in fp32 under autocast, and `dropout_add`
    adds the 16-bit attention + MLP sum to the fp32 residual): the step is LoRA under AMP, not a pure fp32 step."""
    tv = rp.version_of("transformers")
    if not (
        rp.quant_bits == 4
        and rp.framework in HF_MODEL_FRAMEWORKS
        and rp.arch.family in OWN_LINEAR_FAMILIES
        and versions.at_least(tv[0] if tv else None, (5, 0, 0))
    ):
        return rp
    changes: dict = {"quant_bits": None, "peft": "lora" if rp.peft == "qlora" else rp.peft}
    if rp.kbit_upcast:
        # 16-bit compute: autocast over the upcast weights (AMP); fp32 compute: a plain fp32 step
        changes.update(weight_dtype="fp32", amp=rp.compute_dtype != "fp32")
    return rp.with_changes(**changes)


# Families whose linears are an `nn.Linear` subclass of their own (transformers 5.24 models/falcon/modeling_falcon.py
# `class FalconLinear(nn.Linear)`), which transformers 5's bitsandbytes integration does not quantize (`as_loaded`)
OWN_LINEAR_FAMILIES = {"falcon"}

# Families whose transformers modelling code calls SDPA directly with K/V of fewer heads and no `enable_gqa`
# (`sdpa_math`); grep of transformers 5.24 models/ for `scaled_dot_product_attention(`: of the causal LMs only Falcon
DIRECT_SDPA_FAMILIES = {"falcon"}
MLP_LINEARS = ("gate", "up", "down", "fc1", "fc2")

# Families whose RMSNorm multiplies the normalised value by its weight in fp32 and casts afterwards (transformers
# 5.24 models/gemma/modeling_gemma.py, gemma2, gemma3 `output * (1.0 + self.weight.float())` then
# `output.type_as(x)`; models/olmo2/modeling_olmo2.py, olmo3, gpt_oss `(self.weight * hidden_states).to(input_dtype)`;
# qwen3_next and vaultgemma as Gemma;
# Llama instead casts first: `self.weight * hidden_states.to(input_dtype)`): a trained norm weight's gradient
# keeps the fp32 normalised value (4 bytes per element, not the 16-bit 2).
FP32_NORM_WEIGHT_FAMILIES = {
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "olmo2",
    "olmo3",
    "gpt_oss",
    "qwen3_next",
    "vaultgemma",
}


def fp32_norm_weights(rp: ResolvedPlan) -> bool:
    """Whether the model's RMSNorm applies its weight in fp32 (`FP32_NORM_WEIGHT_FAMILIES`). torchtune's own
    `RMSNorm` does for every family: `F.rms_norm(x.float(), ..., weight=self.scale).to(x.dtype)` (torchtune 0.6.1
    modules/rms_norm.py), and an fp32 input with a 16-bit weight cannot take torch's fused kernel on any device
    (torch 2.13 aten/src/ATen/native/layer_norm.cpp `rms_norm_symint`: "Mismatch dtype between input and weight ...
    Cannot dispatch to fused implementation"), so the composite runs and keeps the fp32 normalised value for the
    weight's gradient."""
    return rp.arch.family in FP32_NORM_WEIGHT_FAMILIES or (rp.framework == "torchtune" and rp.arch.norm == "rmsnorm")


# Families whose block feeds its two norms the same input (transformers 5.24 models/gpt_neox/modeling_gpt_neox.py
# GPTNeoXLayer.forward with `use_parallel_residual`: `self.input_layernorm(hidden_states)` and
# `self.post_attention_layernorm(hidden_states)`): one copy of it is kept for both.
SHARED_NORM_INPUT = {"gpt_neox"}

# Families whose transformers modelling code computes q|k|v with one linear (besides HF_FUSED_FAMILIES and
# HF_C_ATTN_FAMILIES): transformers 5.24 models/falcon/modeling_falcon.py, models/gpt_neox/modeling_gpt_neox.py and
# models/bloom/modeling_bloom.py `query_key_value`.
HF_ONE_QKV_LINEAR = {"falcon", "gpt_neox", "bloom"}


def amp_input_casts(rp: ResolvedPlan, group: str, present: list[str]) -> int:
    """16-bit copies kept of one fp32 input under AMP: autocast casts an activation for each linear that reads it
    (only leaf weights go into autocast's cache: `cached_cast` in aten/src/ATen/autocast_mode.cpp, torch 2.13,
    caches `arg.requires_grad() && arg.is_leaf()` tensors), and each matmul keeps its cast for the weight's
    gradient. q, k and v read the attention norm's fp32 output (three copies), gate and up the MLP norm's (two);
    a fused q|k|v or gate|up linear reads it once; down reads the 16-bit act(gate)·up product, no cast."""
    if group == "down" or rp.arch.is_moe and group != "q":
        return 1
    fused = rp.fused_qkv or (
        rp.framework in HF_MODEL_FRAMEWORKS
        and rp.arch.family in HF_FUSED_FAMILIES | HF_C_ATTN_FAMILIES | HF_ONE_QKV_LINEAR
    )
    if group == "q" and fused or group == "gate" and rp.arch.family in HF_FUSED_FAMILIES:
        return 1
    return max(len(present), 1)


def compiled_block(rp: ResolvedPlan) -> bool:
    """The blocks run under torch.compile: AOTAutograd's min-cut partitioner (`min_cut_rematerialization_partition`
    in torch/_functorch/partitioners.py, the partitioner inductor uses) decides what the forward keeps. It never
    recomputes matmuls or attention, so their outputs that backward needs stay; pointwise work between them (norm
    upcasts and normalisation, activation functions, casts) is recomputed from those and from each block's input,
    and identical casts of one tensor are computed once. Checked against the partitioner on transformers' Llama
    layer (tests/trace/test_compile_partitioner.py). unsloth's LoRA kernels are autograd functions of their own and
    keep what they save either way."""
    return rp.compile and not unsloth_kernels(rp)


# Families whose default activation is transformers' NewGELUActivation ("gelu_new": `0.5 * x * (1 + tanh(√(2/π) ·
# (x + 0.044715 · x³)))` in separate torch ops, transformers 5.24 activations.py; GPT2Config.activation_function and
# PhiConfig.hidden_act default to it).
GELU_TANH_FAMILIES = {"gpt2", "phi"}
# Residual dropouts per block on by default (GPT2Config and GPTBigCodeConfig resid_pdrop = 0.1: after attention and
# after the MLP).
RESIDUAL_DROPOUTS = {"gpt2": 2, "gpt_bigcode": 2, "bert": 2, "roberta": 2, "deberta-v2": 2, "t5": 2}
# BertConfig and RobertaConfig also drop attention probabilities by default (hidden_dropout_prob and
# attention_probs_dropout_prob = 0.1, transformers models/bert/configuration_bert.py, models/roberta/
# configuration_roberta.py; BertSelfOutput and BertOutput drop after their dense layers).
ATTENTION_DROPOUTS = {"bert", "roberta", "deberta-v2"}
# Families whose eager attention takes the softmax in the scores' dtype, with no fp32 upcast (transformers 5.24
# models/bert/modeling_bert.py `eager_attention_forward`: `nn.functional.softmax(attn_weights, dim=-1)`; roberta the
# same; models/deberta_v2/modeling_deberta_v2.py DisentangledSelfAttention.forward).
SOFTMAX_IN_INPUT_DTYPE = {"bert", "roberta", "deberta-v2"}
# DeBERTa-v2/v3 disentangled attention (transformers 5.24 models/deberta_v2/modeling_deberta_v2.py, run eager: the
# class has no SDPA path): family -> relative-position buckets of the catalog's configs (microsoft/deberta-v3-*
# config.json `position_buckets` 256, so 2 × 256 relative embeddings are attended).
DISENTANGLED_ATTENTION = {"deberta-v2": 256}


def disentangled_forward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token the forward holds at its peak beyond every block's saved activations (no checkpointing), for
    DeBERTa-v2 (transformers 5.24 models/deberta_v2/modeling_deberta_v2.py). The peak is in the last block's
    attention, with the rest of that block (output projection, norms, MLP) not made yet, at one of two points:
      - in `disentangled_attention_bias`, at `score += p2c_att / scale`: the content scores, the gathered c2p scores
        and the bias so far, the gathered p2c scores and their scaled copy are alive (5 × c·heads·s; the
        probabilities, their mask and the attention output not made yet);
      - at the probabilities' matmul: `DisentangledSelfAttention.forward` still holds the masked scores and the
        relative bias `rel_att` in its locals (2 × c·heads·s; under autocast also the fp32 dropped probabilities
        before their 16-bit cast, 4·heads·s) and the boolean mask (s).
    Through the whole forward the encoder holds its fp32 (b, 1, s, s) attention mask (`get_attention_mask` of the
    all-ones mask `DebertaV2Model.forward` makes) and the int64 relative positions (s² for the batch).
    `DebertaV2Model.forward` asks its encoder for every layer's output (`output_hidden_states=True`) and holds the
    list until it returns: under autocast each is an fp32 LayerNorm output no 16-bit linear keeps (4h per layer),
    under PEFT one the frozen linears do not keep (c·h per layer)."""
    arch = rp.arch
    if arch.family not in DISENTANGLED_ATTENTION or rp.grad_checkpointing or rp.framework not in HF_MODEL_FRAMEWORKS:
        return 0.0
    c = 2 if rp.compute_dtype != "fp32" else 4
    amp = rp.amp and c == 2 and not compiled_block(rp)
    _, one_layer = activations_per_token(rp)
    outputs = arch.layers * (4 * arch.hidden if amp else c * arch.hidden if rp.peft != "none" else 0)
    return disentangled_attention_peak(rp) - one_layer + outputs


def disentangled_attention_peak(rp: ResolvedPlan) -> float:
    """Bytes per token a DeBERTa-v2 block holds at its attention's peak while it runs forward (in the forward, or
    recomputed under checkpointing): what it keeps through its attention, the larger of the two transient sets
    (`disentangled_forward_per_token`), and the encoder's fp32 attention mask and int64 relative positions (a
    checkpointed block's inputs, held by the checkpoint through backward)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    amp = rp.amp and c == 2 and not compiled_block(rp)
    s = rp.seq_len // max(rp.context_parallel, 1)
    heads = arch.heads
    kept: dict = {}
    activations_per_token(rp, kept)
    through = kept["through_attention"]
    probabilities = ((4 if amp else c) + c + 1) * heads * s + s  # softmax output, dropped copy, masks
    at_bias = through - probabilities - c * arch.q_dim + 5 * c * heads * s
    at_matmul = through + (2 * c + (4 if amp else 0)) * heads * s
    masks = 4 * s + 8 * s / max(rp.micro_batch, 1)
    return max(at_bias, at_matmul) + masks


def disentangled_per_token(rp: ResolvedPlan, c: int, amp: bool) -> float:
    """What DeBERTa-v2's `DisentangledSelfAttention` keeps per token beyond a BERT block's eager attention, in bytes
    (transformers 5.24 models/deberta_v2/modeling_deberta_v2.py, share_att_key and pos_att_type c2p|p2c as in the
    DeBERTa-v3 configs):
      - the key both as itself (the p2c product's input) and scaled (`key_layer.transpose(-1, -2) / scale`, the q·kᵀ
        product's input): one more key-sized copy, c·h;
      - the c2p and p2c scores against the 2·buckets relative positions, before `torch.gather` picks the s × s
        entries: gather keeps its source for backward (torch 2.13 tools/autograd/derivatives.yaml `gather`:
        `gather_backward(grad, self, dim, index, sparse_grad)`), 2 × c·heads·2·buckets;
      - the relative-position keys and queries (`query_proj`/`key_proj` of the relative embeddings, repeated over
        the batch for `torch.bmm`), 2 × c·h·2·buckets per sequence: ÷ s per token;
      - the inverted boolean mask `masked_fill` keeps, b·s² bytes: s per token.
    Per layer, not per token: the two int64 gather indices (s² each, clamped relative positions shared by the
    batch) and the dropped relative embeddings `pos_dropout` makes (1-byte mask + the copy the projections read:
    c, or under autocast one 16-bit cast per projection of the fp32 LayerNorm output), spread over the tokens."""
    arch = rp.arch
    h, heads = arch.hidden, arch.heads
    s = max(rp.seq_len // max(rp.context_parallel, 1), 1)
    span2 = 2 * DISENTANGLED_ATTENTION[arch.family]
    tokens = max(rp.micro_batch * s, 1)
    per_token = c * arch.kv_dim + 2 * c * heads * span2 + 2 * c * h * span2 / s + s
    per_layer = 2 * 8 * s * s + (1 + (2 * c if amp else c)) * span2 * h
    return per_token + per_layer / tokens


# Families whose transformers modelling code computes q|k|v with one linear and gate|up with another
# (transformers 5.24 models/phi3/modeling_phi3.py: `qkv_proj`, `gate_up_proj`, q/k/v and gate/up sliced from
# their outputs): a LoRA target among q, k, v (or gate, up) adapts the whole fused linear, and V is a view of the
# q|k|v output, so what attention keeps holds all of it.
HF_FUSED_FAMILIES = {"phi3"}
# Families whose q|k|v come from one `c_attn` linear with no rotary embedding (transformers 5.24 models/gpt2 Conv1D
# `c_attn`, models/gpt_bigcode nn.Linear `c_attn`, h → h + 2·kv): one LoRA adapter (one cast or dropout of the
# input) for q, k and v; q, k and v stay views of its output, which attention keeps anyway.
HF_C_ATTN_FAMILIES = {"gpt2", "gpt_bigcode"}


def hf_fused_groups(rp: ResolvedPlan) -> tuple[tuple[str, ...], ...]:
    """Canonical linears transformers' modelling code computes with one nn.Linear (or Conv1D) in this family: q|k|v
    (`HF_C_ATTN_FAMILIES`, `HF_ONE_QKV_LINEAR`, `HF_FUSED_FAMILIES`) and Phi-3's gate|up; a LoRA target among them
    adapts the whole fused linear (one lora_A of in × r, one lora_B of r × the fused width)."""
    if rp.framework not in HF_MODEL_FRAMEWORKS:
        return ()
    family = rp.arch.family
    out: tuple[tuple[str, ...], ...] = ()
    if family in HF_C_ATTN_FAMILIES | HF_ONE_QKV_LINEAR | HF_FUSED_FAMILIES:
        out += (("q", "k", "v"),)
    if family in HF_FUSED_FAMILIES:
        out += (("gate", "up"),)
    return out


def experts_adaptable(rp: ResolvedPlan) -> bool:
    """Whether LoRA wraps a MoE model's routed experts as nn.Linear modules (transformers 4.x builds each expert of
    them: "all-linear" wraps them; the canonical gate/up/down names do too except in Mixtral, whose experts name them
    w1/w3/w2, 4.57 `MixtralBlockSparseTop2MLP`). transformers 5 keeps them as 3-D parameters run with grouped_mm
    (models/mixtral/modeling_mixtral.py `MixtralExperts`, qwen3_moe likewise) that no target module reaches; peft
    may adapt those parameters instead (`expert_parameters`)."""
    if not rp.arch.is_moe or _expert_lora(rp) != "modules":
        return False
    return "all-linear" in rp.lora_targets or rp.arch.family != "mixtral"


def fused_experts(rp: ResolvedPlan) -> bool:
    """A MoE model whose routed experts are 3-D parameters run with grouped_mm (transformers ≥ 5 modelling code)."""
    if not rp.arch.is_moe or rp.framework not in HF_MODEL_FRAMEWORKS:
        return False
    tv = rp.version_of("transformers")
    return versions.at_least(tv[0] if tv else None, versions.FUSED_EXPERTS_FROM)


def expert_loop(rp: ResolvedPlan) -> bool:
    """A MoE model whose routed experts are modules run one after another: transformers 4.x (4.45.2 models/mixtral/
    modeling_mixtral.py `MixtralSparseMoeBlock.forward`: for each expert, its tokens through its MLP, `index_add_`
    into the output) and litgpt (model.py `LLaMAMoE.forward`). Autograd runs the later expert's nodes first (higher
    sequence numbers), so each expert's backward finishes before the previous one's starts."""
    return rp.arch.is_moe and not fused_experts(rp) and rp.framework != "torchtune"


def expert_bytes(rp: ResolvedPlan) -> int:
    """Bytes per element of fused routed experts' weights and of what they compute. grouped_mm is no autocast op, and
    transformers casts its input to the weight's dtype (5.24 integrations/moe.py `_grouped_mm`), so the experts
    compute in their weights' dtype: fp32 under AMP, and in a k-bit model, whose experts bitsandbytes leaves
    unquantized, fp32 once prepare_model_for_kbit_training has upcast them (peft 0.21.2 utils/other.py: every
    16-bit parameter that is not `Params4bit`). Experts built of nn.Linear modules (`expert_loop`) return what any
    MLP linear returns (`mlp_bytes`: fp32 out of a 4-bit linear fed the fp32 residual)."""
    if not fused_experts(rp):
        return mlp_bytes(rp)
    if rp.weight_dtype == "fp32" or rp.quant_bits and rp.kbit_upcast:
        return 4
    return DTYPE_BYTES[rp.weight_dtype]


def _expert_lora(rp: ResolvedPlan) -> str | None:
    tv, pv = rp.version_of("transformers"), rp.version_of("peft")
    return versions.moe_expert_lora(rp.arch.family, tv[0] if tv else None, pv[0] if pv else None)


@dataclass(frozen=True, slots=True)
class ExpertParam:
    """A routed-expert parameter peft adapts with a `lora.ParamWrapper`: `experts` stacked in × out matrices, rank
    `rank` per expert, in each of `layers` blocks."""

    name: str
    experts: int
    in_features: int
    out_features: int
    rank: int
    layers: int

    @property
    def adapter_params(self) -> int:
        return self.layers * self.experts * self.rank * (self.in_features + self.out_features)

    @property
    def weight_params(self) -> int:
        """One block's stacked weight (what the adapted copy W + BA has, per forward)."""
        return self.experts * self.in_features * self.out_features


def expert_parameters(rp: ResolvedPlan) -> list[ExpertParam]:
    """The routed-expert parameters LoRA adapts on transformers 5 with peft ≥ 0.19 (knowledge/versions.py
    `moe_expert_lora`): `gate_up_proj` when both gate and up are targeted (rank and alpha doubled: peft 0.21.2
    utils/transformers_weight_conversion.py `_convert_peft_config_moe`; one of the two alone makes peft raise),
    `down_proj` when down is, and under "all-linear" the router's weight (one h × E matrix). Mixtral's experts answer
    to w1/w3/w2, which the canonical names do not tell apart from gate_proj/up_proj/down_proj: only "all-linear"
    reaches them here."""
    arch = rp.arch
    if rp.peft == "none" or not arch.is_moe or _expert_lora(rp) != "parameters" or arch.mlp not in ("swiglu", "geglu"):
        return []
    targets = set(rp.lora_targets)
    all_lin = "all-linear" in targets
    by_name = versions.MOE_CONVERSION_PATTERN[arch.family] == "qwen2_moe"
    h, E, r = arch.hidden, arch.num_experts, rp.lora_r
    inter = arch.moe_intermediate or arch.intermediate
    moe_layers = arch.layers - arch.dense_layers
    out: list[ExpertParam] = []
    if all_lin or by_name and {"gate", "up"} <= targets:
        out.append(ExpertParam("gate_up", E, h, 2 * inter, 2 * r, moe_layers))
    if all_lin or by_name and "down" in targets:
        out.append(ExpertParam("down", E, inter, h, r, moe_layers))
    if all_lin:
        out.append(ExpertParam("router", 1, h, E, r, moe_layers))
    return out


def expert_adapter_notes(rp: ResolvedPlan) -> list[str]:
    """What the estimate says about LoRA on fused expert parameters: that it trains every expert, and that peft's
    `lora.ParamWrapper` refuses DoRA and LoRA dropout (peft 0.21.2 tuners/lora/layer.py `ParamWrapper.__init__`:
    `ValueError` "lora.ParamWrapper does not work with use_dora=True" / "with lora_dropout != 0"), so such a run
    stops in `get_peft_model`."""
    params = [e for e in expert_parameters(rp) if e.name != "router"]
    if not params:
        return []
    tv, pv = rp.version_of("transformers"), rp.version_of("peft")
    with_versions = (
        f"peft {pv[0] if pv else versions.NEWEST['peft']} on transformers "
        f"{tv[0] if tv else versions.NEWEST['transformers']}"
    )
    names = " and ".join(f"{e.name}_proj" for e in params)
    out = [
        f"LoRA on the routed experts: {with_versions} adapts the fused {names} parameters of every expert "
        f"(rank {rp.lora_r} per expert{', gate_up at ' + str(2 * rp.lora_r) if any(e.name == 'gate_up' for e in params) else ''}), "
        f"and each block keeps its adapted expert weights for backward"
    ]
    refused = [what for what, on in (("use_dora", rp.peft == "dora"), ("lora_dropout", rp.lora_dropout > 0)) if on]
    if refused:
        out.append(
            f"{' and '.join(refused)} on the routed experts: {with_versions} wraps them in lora.ParamWrapper, "
            f"which raises ValueError for {' and '.join(refused)} — the run stops in get_peft_model; target "
            f"only the attention, or set {'use_dora: false' if rp.peft == 'dora' else 'lora_dropout: 0'}"
        )
    return out


def expert_weight_copies(rp: ResolvedPlan) -> int:
    """Bytes per MoE block that adapted expert parameters keep for backward (peft 0.21.2 tuners/lora/layer.py
    `ParamWrapper._activate_lora`): the parametrization makes W' = W + scaling·BA, a new tensor of the whole expert
    stack in the weight's dtype, and grouped_mm saves it for the input's gradient (transformers 5.24
    integrations/moe.py `grouped_mm_experts_forward`). From peft 0.21 W' comes from one `baddbmm(W, lhs, rhs)` over
    the factors cast to the weight's dtype, which baddbmm saves for their gradients; 0.19–0.20 compute the delta
    from the fp32 factors themselves (`get_delta_weight`). The router's adapted weight is h × E: left out."""
    wb = expert_bytes(rp)
    pv = rp.version_of("peft")
    factors = versions.peft_folds_expert_factors(pv[0] if pv else None)
    out = 0
    for e in expert_parameters(rp):
        if e.name == "router":
            continue
        out += e.weight_params * wb
        if factors:
            out += e.experts * e.rank * (e.in_features + e.out_features) * wb
    return out


def expert_weight_grad(rp: ResolvedPlan) -> int:
    """Bytes the backward of one MoE block with adapted expert parameters makes beyond what it keeps: grouped_mm's
    weight gradient is a whole expert stack (torch derivatives.yaml `_grouped_mm`: mat2's gradient is
    `_grouped_mm(self.t(), grad)`), made while W' is still saved; the down projection's runs first with both
    stacks alive, the gate|up one's after the down stack is freed."""
    wb = expert_bytes(rp)
    stacks = {e.name: e.weight_params * wb for e in expert_parameters(rp) if e.name != "router"}
    gu, down = stacks.get("gate_up", 0), stacks.get("down", 0)
    return max(down, gu - down)


def mlp_bytes(rp: ResolvedPlan) -> int:
    """Bytes per element of the MLP's hidden activations. A k-bit model whose norms prepare_model_for_kbit_training
    upcast to fp32 feeds fp32 into its 4-bit linears, and bitsandbytes returns the input's dtype
    (bitsandbytes 0.50 `nn/modules.py` Linear4bit.forward: `matmul_4bit(...).to(inp_dtype)`): gate, up and
    act(gate) are fp32. AMP's nn.Linear returns 16-bit under autocast."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    if rp.quant_bits and rp.kbit_upcast and not rp.amp and c == 2:
        return 4
    return c


def _out_features(arch, name: str) -> int:
    return {
        "q": arch.q_dim,
        "k": arch.kv_dim,
        "v": arch.kv_dim,
        "o": arch.hidden,
        "gate": arch.intermediate,
        "up": arch.intermediate,
        "fc1": arch.intermediate,
        "down": arch.hidden,
        "fc2": arch.hidden,
    }.get(name, 0)


def _in_features(arch, name: str) -> int:
    return {"o": arch.q_dim, "down": arch.intermediate, "fc2": arch.intermediate}.get(name, arch.hidden)


# Adapter methods that train vectors, not low-rank matrices (peft IA3, VeRA).
VECTOR_METHODS = ("ia3", "vera")


def _vector_targets(rp: ResolvedPlan):
    return [l for l in targeted(rp.arch, rp.lora_targets, experts_adaptable(rp)) if l.name not in ("lm_head", "embed")]


def vector_adapter_params(rp: ResolvedPlan) -> int:
    """Trainable parameters of IA3 and VeRA. IA3 (peft 0.21.2 `tuners/ia3/layer.py` IA3Layer.update_layer): one
    vector per targeted linear, of its input width for a feedforward module (`feedforward_modules`), else of its
    output width. VeRA (peft 0.21.2 `tuners/vera/layer.py` VeraLayer.update_layer): `vera_lambda_d` (r) and
    `vera_lambda_b` (out features) per targeted linear."""
    out = 0
    for lin in _vector_targets(rp):
        if rp.peft == "ia3":
            out += lin.count * (lin.in_features if lin.name in rp.feedforward_targets else lin.out_features)
        else:
            out += lin.count * (rp.lora_r + lin.out_features)
    return out


def vera_projection_params(rp: ResolvedPlan) -> int:
    """VeRA's frozen random projections, shared by every adapted linear: `vera_A` (r × the largest input width) and
    `vera_B` (the largest output width × r) (peft 0.21.2 `tuners/vera/model.py` `_find_dim`, `_init_vera_A_vera_B`);
    each layer slices them."""
    if rp.peft != "vera":
        return 0
    lins = _vector_targets(rp)
    if not lins:
        return 0
    return rp.lora_r * (max(l.in_features for l in lins) + max(l.out_features for l in lins))


def vector_adapter_per_token(rp: ResolvedPlan) -> tuple[float, float, float]:
    """(bytes kept per token and layer, of them the down projection's input, the adapter's own copy of it) under
    IA3 or VeRA. The base linears are frozen, so they keep nothing of their input; the adapters' products keep the
    operand the vector's gradient needs.
    IA3 (peft 0.21.2 `tuners/ia3/layer.py` Linear.forward): a feedforward module computes
    `(x.to(ia3_l.dtype) * ia3_l)` before the base layer, so the product keeps the input cast to the vector's dtype
    (fp32 under peft's default `autocast_adapter_dtype`); any other computes `base_layer(x) * ia3_l`, keeping the
    base output (the activations' dtype).
    VeRA (peft 0.21.2 `tuners/vera/layer.py` Linear.forward): `lambda_b * F.linear(lambda_d * F.linear(x, A), B)`
    with x cast to the vectors' dtype and A, B frozen: lambda_d's product keeps x·Aᵀ (r wide) and lambda_b's keeps
    the B projection (out wide), in the vectors' dtype, or 16-bit under autocast (F.linear returns it); the casts of
    x feed only frozen matmuls and are not kept. Dropout keeps its 1-byte mask."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    av = 4 if (rp.adapter_fp32 or rp.weight_dtype == "fp32" or c == 4) else c
    layers = max(arch.layers, 1)
    total = down = 0.0
    for lin in _vector_targets(rp):
        per = lin.count / layers
        if rp.peft == "ia3":
            kept = av * lin.in_features if lin.name in rp.feedforward_targets else c * lin.out_features
        else:
            width = c if rp.amp and c == 2 else av
            kept = width * (rp.lora_r + lin.out_features) + (lin.in_features if rp.lora_dropout > 0 else 0)
        total += per * kept
        if lin.name in ("down", "fc2") and rp.peft == "ia3" and lin.name in rp.feedforward_targets:
            down += per * kept
    copy = down if (rp.peft == "ia3" and av != c) else 0.0
    return total, down, copy


def dora_targets(rp: ResolvedPlan) -> list[str]:
    """The block linears a DoRA adapter wraps (the dense ones: MoE experts are not nn.Linear modules here)."""
    if rp.peft != "dora":
        return []
    arch = rp.arch
    names = ("q", "k", "v", "o") + (() if arch.is_moe else ("gate", "up", "down", "fc1", "fc2"))
    all_lin = "all-linear" in rp.lora_targets
    return [n for n in names if _has(arch, n) and (all_lin or n in rp.lora_targets)]


def _dora_dtypes(rp: ResolvedPlan) -> tuple[int, int, bool]:
    c = 2 if rp.compute_dtype != "fp32" else 4
    autocast = fp32_residual(rp)
    a = c if autocast else (4 if (rp.adapter_fp32 and c == 2) else c)
    return c, a, autocast


def dora_recomputes_base(rp: ResolvedPlan) -> bool:
    """Whether DoRA computes its own F.linear(x, weight.to(x.dtype)) in the adapter's input dtype rather than reuse
    the base layer's output: with dropout (any peft: the dropped input differs from the base layer's), and always
    before peft 0.14.0, whose `Linear.forward` never passes `base_result` (peft 0.13.2 `tuners/lora/layer.py`,
    `tuners/lora/dora.py`; `knowledge/versions.peft_dora_reuses_base_result`)."""
    if rp.lora_dropout > 0:
        return True
    pv = rp.version_of("peft")
    return not versions.peft_dora_reuses_base_result(pv[0] if pv else None)


def dora_version_notes(rp: ResolvedPlan) -> list[str]:
    """What the plan's peft version changes in DoRA's kept tensors (empty when nothing does)."""
    if not dora_targets(rp) or rp.lora_dropout > 0 or not dora_recomputes_base(rp):
        return []
    pv = rp.version_of("peft")
    copies = dora_weight_copies(rp)
    kept = f"; each block also keeps a {copies / 2**20:,.0f} MiB cast of its adapted weights" if copies else ""
    return [
        f"DoRA on peft {pv[0] if pv else versions.NEWEST['peft']}: every adapted linear recomputes x @ W in the "
        f"adapter's dtype instead of reusing the base layer's output (peft reuses it from 0.14.0) and keeps that "
        f"product for backward{kept}"
    ]


def dora_per_token(rp: ResolvedPlan, only: tuple[str, ...] | None = None) -> float:
    """What DoRA keeps per token beyond LoRA (peft 0.21.2 `tuners/lora/dora.py` DoraLinearLayer.forward):
    `result_dora = (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling` — the two products
    keep `base_result` and `lora_result` (out features each) for the magnitude's gradient. Without dropout
    `base_result` is the base layer's output (its dtype: 16-bit, fp32 from a k-bit linear fed fp32); with dropout,
    and with any peft before 0.14 (`dora_recomputes_base`), it is recomputed as F.linear(dropout(x), weight) in
    the adapter's input dtype (16-bit under autocast)."""
    names = [n for n in dora_targets(rp) if only is None or n in only]
    if not names:
        return 0.0
    c, a, autocast = _dora_dtypes(rp)
    base_b = a if dora_recomputes_base(rp) else (4 if mlp_bytes(rp) == 4 else c)
    return float(sum(_out_features(rp.arch, n) * (base_b + a) for n in names))


def dora_weight_copies(rp: ResolvedPlan) -> int:
    """Bytes per block that DoRA keeps for backward whatever the tokens: with dropout (and with any peft before
    0.14, `dora_recomputes_base`), F.linear(dropout(x), weight.to(x.dtype)) keeps the weight it multiplies by, a
    fresh copy when the base weight is quantized (`dequantize_module_weight`), cast to another dtype, or cast by
    autocast (peft 0.21.2 `dora.py`; the same line in peft 0.13.2)."""
    names = dora_targets(rp)
    if not names or not dora_recomputes_base(rp):
        return 0
    c, a, autocast = _dora_dtypes(rp)
    wb = DTYPE_BYTES[rp.weight_dtype]
    fresh = autocast or bool(rp.quant_bits) or a != wb
    if not fresh:
        return 0
    b = c if autocast else a
    return sum(_in_features(rp.arch, n) * _out_features(rp.arch, n) * b for n in names)


def dora_weight_norm_transient(rp: ResolvedPlan) -> int:
    """Bytes DoRA allocates for a moment in every adapted linear's forward to get the weight norm (peft 0.21.2
    `dora.py`): `get_lora_weight` runs lora_B(lora_A(eye(in))) — an in × in identity and the in × out product in
    the adapter dtype — then `get_weight_norm` adds `scaling * lora_weight` to a copy of the weight in the input's
    dtype (weight copy when the dtype differs or the weight is dequantized, scaled product and sum: 2–3 × in × out).
    The identity stays alive meanwhile: lora_A saved it for its weight's gradient, and lora_weight's graph holds
    that node until the forward drops lora_weight (traced with the real libraries, Mistral-7B DoRA checkpointed:
    the down projection's 14336² fp32 identity is live at the recompute peak beside the weight-sized tensors).
    The largest linear's counts."""
    names = dora_targets(rp)
    if not names:
        return 0
    c, a, autocast = _dora_dtypes(rp)
    aw = 4 if (rp.adapter_fp32 or rp.weight_dtype == "fp32") else c
    copies = 3 if (rp.quant_bits or a != DTYPE_BYTES[rp.weight_dtype]) else 2
    arch = rp.arch
    return max(
        _in_features(arch, n) ** 2 * aw + _in_features(arch, n) * _out_features(arch, n) * (aw + copies * a)
        for n in names
    )


def backward_block_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token of one checkpointed block at its backward peak: its recomputed activations plus the gradients
    of the gated MLP's hidden state (the product's gradient and one for each factor, in the MLP's dtype; two for
    an ungated MLP). Traced with the real libraries (Mistral-7B QLoRA, checkpointed): the live set at the peak is
    these, the block's incoming gradient already consumed by the down projection's backward — which has also
    freed what the down projection kept of its input (autograd frees a node's saved tensors when it runs; seen in
    the real trace at 2 × 2048: the adapter's 16-bit cast of the product is gone at the peak). An adapter that
    keeps its own copy of the product in another dtype (fp32 adapters outside autocast) peaks inside the down
    projection's backward instead: its input copy is still held while the product's gradient is made in the copy's
    dtype, cast back and added to the base layer's (traced at small shapes, tests/trace/
    test_real_library_estimate.py). Under DoRA the block peaks earlier, while the down projection's weight norm is
    recomputed (its `eye`-sized temporaries, `dora_weight_norm_transient`) with the product still alive."""
    arch = rp.arch
    kept: dict = {}
    _, one_layer = activations_per_token(rp, kept)
    if is_mamba(arch):
        return one_layer + mamba_backward_per_token(rp)
    tp = max(rp.tensor_parallel, 1)
    inter = (arch.moe_intermediate or arch.intermediate) * (max(arch.experts_per_token, 1) if arch.is_moe else 1)
    gated = arch.mlp in ("swiglu", "geglu")
    m = mlp_bytes(rp)
    # routed experts run one after another (`expert_loop`): the MLP's backward temporaries are one expert's, for its
    # share of the token-expert pairs (1/E of them with balanced routing)
    share = 1 / arch.num_experts if expert_loop(rp) else 1.0
    temps = (3 if gated else 2) * m * inter * share
    if fused_experts(rp):
        # a grouped_mm MoE block's backward starts with token-expert-pair-sized gradients (k·h each, the experts'
        # dtype): the per-token sum's gradient expanded into a copy, and the un-permute's backward (`index`'s
        # backward: zeros, then index_put), before any expert's backward runs (transformers 5.24 integrations/moe.py
        # `grouped_mm_experts_forward`: `weighted_out[inv_perm]`, `.view(num_tokens, num_top_k, hidden_dim).sum(1)`)
        temps = max(temps, 3 * max(arch.experts_per_token, 1) * arch.hidden * expert_bytes(rp))
    if unsloth_kernels(rp):
        # unsloth/kernels/fast_lora.py LoRA_MLP.backward: DW = dY·Wᵀ is the one new MLP-wide tensor; the SwiGLU
        # backward kernel (kernels/swiglu.py `swiglu_DWf_DW_dfg_kernel`) writes h, df and de over DW, e and g
        temps = (2 if rp.compute_dtype != "fp32" else 4) * inter
    # DeBERTa-v2: the recomputed block's attention holds its score-sized temporaries (`disentangled_attention_peak`)
    recomputed = (
        disentangled_attention_peak(rp) / tp
        if arch.family in DISENTANGLED_ATTENTION and rp.framework in HF_MODEL_FRAMEWORKS
        else 0.0
    )
    if rp.peft == "dora" or unsloth_kernels(rp):
        return max(one_layer + temps / tp, recomputed)
    after_down = max(one_layer - kept["down_input"] + temps / tp, recomputed)
    copy = kept["down_adapter_copy"]
    # inside the down projection's backward: the product's gradient from the base layer (m·I), and from an adapter
    # with its own copy, that copy's gradient and its cast back to the product's dtype
    at_down = one_layer + (m * inter + (copy + m * inter if copy else 0.0)) * share / tp
    return max(after_down, at_down)


def math_attention_block_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token of one checkpointed block inside its attention's backward on SDPA's math kernel (0 when the
    attention runs a fused kernel): the recomputed block less what its MLP kept (the MLP's backward ran first and
    freed it), plus the backward's two fp32 probability-sized temporaries (`sdpa_math_backward_per_token`)."""
    if not sdpa_math(rp):
        return 0.0
    kept: dict = {}
    _, one_layer = activations_per_token(rp, kept)
    return one_layer - kept["mlp"] + sdpa_math_backward_per_token(rp)


def unsloth_kernels(rp: ResolvedPlan) -> bool:
    """Whether unsloth's fused LoRA autograd functions run the block (unsloth/kernels/fast_lora.py, applied by
    FastLanguageModel.get_peft_model to gated MLPs when LoRA has no dropout)."""
    return (
        rp.fused_lora
        and rp.peft != "none"
        and rp.lora_dropout <= 0
        and rp.arch.mlp in ("swiglu", "geglu")
        and not rp.arch.is_moe
    )


# Vision towers whose attention is one fused qkv linear and an output `proj` (transformers 5.24 models/qwen2_vl,
# qwen2_5_vl, qwen3_vl `VisionAttention`); SigLIP / CLIP (Gemma-3, LLaVA) have q_proj, k_proj, v_proj, out_proj
QWEN_VL_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl_text", "qwen2_vl_text", "qwen2_5_vl_text"})


def vision_linears(arch) -> list[tuple[str, int, int]]:
    """(name, in, out) of one vision block's linears. The names are the plan's canonical LoRA target names they
    answer to (peft matches the end of a module's name): SigLIP/CLIP's q_proj/k_proj/v_proj are "q", "k", "v",
    their out_proj is no canonical target ("o" is o_proj); MLPs fc1/fc2, Qwen2.5-VL's gated gate/up/down_proj.
    Qwen-VL's fused `qkv` and `proj`, and Qwen3-VL's linear_fc1/2, only all-linear reaches (named apart here)."""
    d, inter = arch.vision_hidden, arch.vision_intermediate
    if arch.family in QWEN_VL_FAMILIES:
        attn = [("vision qkv", d, 3 * d), ("vision proj", d, d)]
        if arch.vision_gated:
            mlp = [("gate", d, inter), ("up", d, inter), ("down", inter, d)]
        elif arch.family == "qwen3_vl_text":
            mlp = [("vision fc1", d, inter), ("vision fc2", inter, d)]
        else:
            mlp = [("fc1", d, inter), ("fc2", inter, d)]
        return attn + mlp
    return [("q", d, d), ("k", d, d), ("v", d, d), ("vision out", d, d), ("fc1", d, inter), ("fc2", inter, d)]


def vision_linear_params(arch) -> int:
    """Weights of the tower's block linears (what 4-bit quantization packs; projectors and mergers aside)."""
    return arch.vision_layers * sum(i * o for _, i, o in vision_linears(arch))


def vision_adapted(rp: ResolvedPlan) -> list[tuple[str, int, int]]:
    """The tower's block linears that carry LoRA adapters: those the targets name (peft suffix matching: a VLM's
    q_proj targets reach the SigLIP tower's q_proj too) or all of them under all-linear (peft 0.21.2
    tuners/tuners_utils.py `_maybe_include_all_linear_layers`: every nn.Linear but the output layer). LLaMA-Factory
    and ms-swift keep a frozen tower out of the targets (LLaMA-Factory 01d87b82 model/model_utils/visual.py
    `patch_target_modules`, ms-swift `freeze_vit`)."""
    from vramlens.knowledge.frameworks import FREEZES_VISION

    arch = rp.arch
    if not arch.vision_params or rp.peft not in ("lora", "qlora", "dora") or not arch.vision_hidden:
        return []
    if rp.vision_frozen and rp.framework in FREEZES_VISION:
        return []
    every = "all-linear" in rp.lora_targets
    return [lin for lin in vision_linears(arch) if every or lin[0] in rp.lora_targets]


def vision_adapter_params(rp: ResolvedPlan) -> int:
    """LoRA parameters on the tower's linears: r·(in + out) each (DoRA: + out)."""
    per = sum(rp.lora_r * (i + o) + (o if rp.peft == "dora" else 0) for _, i, o in vision_adapted(rp))
    return rp.arch.vision_layers * per


def vision_gets_gradients(rp: ResolvedPlan) -> bool:
    """Whether the tower's trainable weights get gradients (and so optimizer state): only when images run through
    it. On text-only batches a trained tower's parameters keep `.grad = None`, and torch's optimizers skip them
    (torch 2.13 optim/adamw.py `_init_group`: state is made for `p.grad is not None` only). DeepSpeed ZeRO and FSDP
    flatten parameters into buffers with gradients for every one of them."""
    return rp.images_per_sequence > 0 or rp.strategy in ("deepspeed", "fsdp")


def image_block_mask(rp: ResolvedPlan) -> bool:
    """Batches with images give Gemma-3 `token_type_ids`, and the model builds explicit masks for every layer from
    them (bidirectional attention inside each image's block; transformers 5.24 models/gemma3/modeling_gemma3.py
    `create_masks_for_vision_model`): SDPA then gets a mask, as under padding."""
    return rp.images_per_sequence > 0 and bool(rp.arch.vision_params) and rp.arch.family == "gemma3_text"


def vision_activations(rp: ResolvedPlan, seqs: int) -> int:
    """What the vision tower keeps for backward over the micro batch's images (`images_per_sequence` per sequence;
    nothing on text-only batches), traced on transformers 5.24 Gemma-3's SigLIP tower (models/siglip/
    modeling_siglip.py `SiglipEncoderLayer`: LayerNorm → q, k, v → SDPA → out_proj, LayerNorm → fc1 → GELU →
    fc2),
    per block and patch, in the compute dtype unless said:
    - always, once anything in the tower trains: both LayerNorms' inputs, q, k, v and the SDPA output (whose
      storage out_proj reads: flash attention writes it (b, s, h, d)), its fp32 logsumexp (4 B per head), fc1's
      output (GELU's input);
    - a trained tower: the inputs of the q/k/v linears (one tensor), of fc1 and of fc2 (16·d + 4·I bytes in bf16);
    - LoRA on some of them instead: each adapter's input cast to the adapter dtype (peft 0.21.2 tuners/lora/
      layer.py `Linear.forward` `_cast_input_dtype`: an fp32 copy per adapter over bf16 activations, one shared
      16-bit input when the adapters are 16-bit) and its lora_A output (r); the first block's input needs no
      gradient then (the frozen patch embedding), so its LayerNorm keeps nothing;
    - QLoRA with the k-bit upcast: fp32 LayerNorm weights under autocast give fp32 LayerNorm outputs, and the 4-bit
      linears return their input's dtype (bitsandbytes Linear4bit.forward), so the residual stream, the LayerNorm
      outputs and fc1's output are fp32; SDPA takes autocast's 16-bit copies of q, k, v;
    - checkpointed (transformers' gradient checkpointing covers SiglipEncoderLayer): each block's input only;
    plus the post-LayerNorm's input and the projector's pool input per patch, and the float32 `pixel_values`."""
    arch = rp.arch
    images = rp.images_per_sequence * seqs
    if not images or not arch.vision_params or not arch.vision_hidden:
        return 0
    d, inter, heads = arch.vision_hidden, arch.vision_intermediate, max(arch.vision_heads, 1)
    side = math.isqrt(arch.image_patches) * (arch.vision_patch or 14)
    pixels = images * 3 * side * side * 4
    trained = rp.peft == "none" and not rp.vision_frozen and vision_gets_gradients(rp)
    adapted = vision_adapted(rp)
    if not trained and not adapted:
        return pixels
    cb = DTYPE_BYTES[rp.compute_dtype]
    upcast = bool(rp.quant_bits and rp.kbit_upcast and cb < 4)
    rb = 4 if upcast else cb  # residual stream and LayerNorm outputs
    patches = images * arch.image_patches
    if rp.grad_checkpointing:
        per_layer = rb * d
        first = 0
    else:
        per_layer = 2 * rb * d + 4 * cb * d + 4 * heads + 16 + (4 if upcast else cb) * inter
        if trained:
            per_layer += 2 * cb * d + cb * inter
            first = 0
        else:
            ab = 4 if (rp.adapter_fp32 or rp.weight_dtype == "fp32") else cb
            inputs = {
                "q": d,
                "k": d,
                "v": d,
                "vision qkv": d,
                "vision out": 0,
                "vision proj": 0,
                "fc1": d,
                "vision fc1": d,
                "gate": d,
                "up": d,
                "down": inter,
                "fc2": inter,
                "vision fc2": inter,
            }
            shared_attn = False
            for name, i, _ in adapted:
                width = inputs.get(name, i)
                if upcast:
                    # under autocast peft's bnb Linear4bit leaves the input uncast (peft 0.21.2 tuners/lora/bnb.py
                    # `requires_conversion = not torch.is_autocast_enabled()`) and lora_A's matmul keeps autocast's
                    # 16-bit copy of it, one per adapter (autocast caches weight casts only); out_proj's input is
                    # SDPA's 16-bit output, kept already
                    per_layer += rp.lora_r * cb + cb * width
                    continue
                per_layer += rp.lora_r * ab
                if ab != cb:
                    per_layer += ab * (width or i)
                elif name in ("q", "k", "v", "vision qkv"):
                    if not shared_attn:
                        per_layer += cb * d
                        shared_attn = True
                else:
                    per_layer += cb * width
            first = rb * d  # the first LayerNorm's input needs no gradient
    tail = 2 * cb * d  # post_layernorm's input, the projector's pooled input
    return int(patches * (arch.vision_layers * per_layer - first + tail)) + pixels


def hf_t5(rp: ResolvedPlan) -> bool:
    """The step runs transformers' T5 (T5ForConditionalGeneration, transformers 5.24 models/t5/modeling_t5.py)."""
    return rp.arch.family == "t5" and rp.arch.block == "encoder-decoder" and rp.framework in HF_MODEL_FRAMEWORKS


def t5_block_extras(rp: ResolvedPlan, norms: int, mlp: bool = True) -> float:
    """Bytes per token a T5 block keeps beyond the Llama-style count (transformers 5.24 models/t5/modeling_t5.py):
    - T5LayerNorm computes `hidden_states * torch.rsqrt(variance)` from its 16-bit input (the fp32 upcast only feeds
      the variance), so the input is kept too (c·h per norm) unless the residual stream is fp32 already;
    - T5LayerFF's dropout (config `dropout_rate` 0.1) between the activation and `wo`: a 1-byte mask of d_ff;
    - gated-gelu (T5 v1.1, Flan-T5) is gelu_new written out in torch ops (activations.py NewGELUActivation): 0.5·x,
      tanh(…) and 1 + tanh(…) are kept besides x and the activation. Under AMP CUDA's autocast runs its `pow` in fp32
      (autocast_mode.h `AT_FORALL_FP32`), so x's fp32 cast, tanh, 1 + tanh and the activation are fp32 (4·d_ff each,
      replacing 16-bit x and the activation) beside the 16-bit 0.5·x.
    The residual dropouts' masks are `RESIDUAL_DROPOUTS` (two per encoder block; the cross-attention adds one)."""
    arch = rp.arch
    c = 2 if rp.compute_dtype != "fp32" else 4
    out = float(norms * c * arch.hidden) if c == 2 and not fp32_residual(rp) else 0.0
    if mlp:
        inter = arch.intermediate
        out += inter
        if arch.mlp in ("geglu", "swiglu"):
            m = mlp_bytes(rp)
            out += ((16 - m) if rp.amp and m == 2 else 3 * m) * inter
    return out


def t5_global_per_token(rp: ResolvedPlan) -> float:
    """What T5 keeps per token outside its blocks (transformers 5.24 models/t5/modeling_t5.py T5Stack): each stack's
    embedding dropout (a 1-byte mask; its output is the first norm's input, counted there) and final
    T5LayerNorm + dropout: the norm's fp32 upcast, its 16-bit input (16-bit residual), its normalised value when its
    weight trains, the dropout's mask, and the dropout's output where a linear keeps it — the encoder's, read by
    every cross-attention's k and v (once, where their weights train or 16-bit adapters keep it; fp32 or autocast
    adapters keep casts of their own, counted in the blocks), the decoder's, the LM head's input when the head
    trains."""
    arch = rp.arch
    h = arch.hidden
    c = 2 if rp.compute_dtype != "fp32" else 4
    full = rp.peft == "none"
    sixteen = c == 2 and not fp32_residual(rp)
    trains = (4 if rp.amp else c) if full else 0
    per_norm = 4 * h + (c * h if sixteen else 0) + trains * h + h
    targets = set(rp.lora_targets)
    kv_adapted = "all-linear" in targets or bool(targets & {"k", "v"})
    shared = not full and not rp.adapter_fp32 and not fp32_residual(rp) and rp.lora_dropout <= 0 and kv_adapted
    enc_out = c * h if (full and not rp.amp) or shared else 0
    head_in = c * h if full or "lm_head" in rp.modules_to_save else 0
    return 2 * h + 2 * per_norm + enc_out + head_in


def t5_bias_bytes(rp: ResolvedPlan) -> int:
    """Bytes of T5's relative position bias the step keeps, whatever the batch (transformers 5.24: the first block of
    each stack computes `position_bias` (1, heads, q, k) and every block reuses it; integrations/sdpa_attention.py
    `create_position_bias_mask` makes a contiguous copy per self-attention call, causal-masked with `torch.where` in
    the decoder, which SDPA keeps as its additive mask (CUDA's memory-efficient kernel saves `attn_bias`); the
    cross-attention's bias is one zeros tensor in the query's dtype). A trained bias embedding keeps its bucket
    indices (int64, per stack) and the decoder's `where` its causal condition. A padded batch's mask is merged into
    the bias with `torch.where` (boolean (batch, 1, q, k) masks from `create_bidirectional_mask`, kept once each):
    the encoder's self-attentions and every cross-attention then keep a (batch, heads, q, k) bias each. Checkpointed,
    the blocks keep none of these: the two stacks' bias tensors (weight dtype, fp32 when upcast), the zeros and the
    boolean masks stay referenced instead."""
    if not hf_t5(rp):
        return 0
    arch = rp.arch
    s2 = rp.seq_len**2
    c = 2 if rp.compute_dtype != "fp32" else 4
    enc = arch.encoder_layers or arch.layers
    b = rp.micro_batch * rp.sequences_per_example
    padded = rp.attn_mask and not rp.packing
    masks = 2 * b * s2 if padded else 0
    if rp.grad_checkpointing:
        pb = 4 if fp32_residual(rp) or rp.weight_dtype == "fp32" else c
        return 2 * arch.heads * s2 * pb + arch.heads * s2 * c + masks
    if padded:
        out = (enc * b + arch.layers + arch.layers * b) * arch.heads * s2 * c + masks
    else:
        out = (enc + arch.layers + 1) * arch.heads * s2 * c
    if rp.peft == "none":
        out += 2 * 8 * s2 + arch.layers * s2
    return out


def keep_in_fp32_params(rp: ResolvedPlan) -> int:
    """Parameters of linears a quantized model keeps unquantized: transformers' bitsandbytes quantizer leaves the
    model's `_keep_in_fp32_modules` out (quantizers/base.py `get_modules_to_not_convert`, transformers 5.24): T5's
    `wo` (T5PreTrainedModel `_keep_in_fp32_modules = ["wo"]`), which prepare_model_for_kbit_training then upcasts
    with the other unquantized weights."""
    if not rp.quant_bits or not hf_t5(rp):
        return 0
    return sum(lin.params for lin in shapes(rp.arch).linears if lin.name in ("down", "fc2"))


def fp32_residual(rp: ResolvedPlan) -> bool:
    """Whether the residual stream between blocks is fp32 while the matmuls run in 16-bit: AMP over fp32
    weights, or a k-bit model whose embeddings and norms prepare_model_for_kbit_training upcast to fp32."""
    if rp.compute_dtype == "fp32":
        return False
    return rp.amp or bool(rp.quant_bits and rp.kbit_upcast)


def _has(arch, name: str) -> bool:
    gated = arch.mlp in ("swiglu", "geglu")
    if name in ("gate", "up", "down"):
        return gated
    if name in ("fc1", "fc2"):
        return not gated
    return True


def block_input_per_token(rp: ResolvedPlan) -> float:
    """What a checkpointed block keeps of its input on this rank: 2h (4h in an fp32 residual stream, which FSDP's
    MixedPrecision never has: it gathers the parameters in the compute dtype and casts the forward's inputs to it,
    torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_api.py `MixedPrecisionPolicy.param_dtype`,
    `cast_forward_inputs`), divided over the tensor-parallel ranks under sequence parallelism (the block's input is
    sharded along the sequence: torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py `apply_tp`,
    `SequenceParallel()` on the norms and `output_layouts=Shard(1)` on wo and w2; Korthikanti et al. 2022 §4.2.2)."""
    fp32 = rp.compute_dtype == "fp32" or (fp32_residual(rp) and not rp.fsdp_mixed_precision)
    sp = max(rp.tensor_parallel, 1) if rp.sequence_parallel else 1
    return (4 if fp32 else 2) * rp.arch.hidden / sp


def checkpoint_per_token(rp: ResolvedPlan) -> float:
    """With gradient checkpointing of every block, each keeps only its input (`block_input_per_token`)."""
    layers = rp.arch.layers + (rp.arch.encoder_layers if rp.arch.block == "encoder-decoder" else 0)
    return layers * block_input_per_token(rp)


def recomputes(rp: ResolvedPlan) -> bool:
    """Whether backward recomputes blocks: whole-block checkpointing (of every block or every n-th) or op-level
    selective checkpointing, which wraps every block in a checkpoint that keeps only some ops' outputs. Every n-th
    block with n above the block count checkpoints none."""
    return (rp.grad_checkpointing and checkpointed_blocks(rp) > 0) or rp.selective_recompute == "op"


def checkpointed_blocks(rp: ResolvedPlan) -> int:
    """How many blocks are wrapped in a whole-block checkpoint: all of them, or under `checkpoint_every` n the
    n-th, 2n-th, … (torchtitan v0.2.2 torchtitan/distributed/activation_checkpoint.py `_apply_layer_sac`: a
    running count of the blocks, checkpointed where `count % ac_freq == 0`), so ⌊L / n⌋ of L."""
    layers = counted_layers(rp)
    if not rp.grad_checkpointing:
        return 0
    return layers // max(rp.checkpoint_every, 1)


# The ops whose outputs torchtitan's op-level selective checkpointing saves (torchtitan v0.2.2, commit 73a0e697,
# torchtitan/models/llama3/infra/parallelize.py `_op_sac_save_list`): aten.mm, the SDPA kernels (flash, efficient,
# cuDNN, math, fused-overrideable), flex attention, varlen attention, _c10d_functional.reduce_scatter_tensor,
# aten.max (no outputs in a 16-bit run) and compiled regions. Its policy (torchtitan/distributed/
# activation_checkpoint.py `_apply_op_sac`, `_custom_policy`) saves every listed op's output except every second
# mm: a block's mms are counted in forward order and the 2nd, 4th, … are recomputed. Everything else (norms,
# RoPE, activation functions, products, casts, all-gathers) is recomputed from those and the block's input.
def op_saved_mms(rp: ResolvedPlan) -> list[tuple[str, int, bool]]:
    """One block's matmuls in forward order as (name, output width, row-parallel): q, k, v (one q|k|v linear where
    the model fuses them), o, then the MLP's gate, up, down (fc1, fc2 ungated). torchtitan's FeedForward computes
    `w2(F.silu(w1(x)) * w3(x))`: w1 (gate), then w3 (up), then w2 (down) (torchtitan v0.2.2
    torchtitan/models/llama3/model/model.py). A mixture-of-experts block contributes its router's matmul and its
    shared experts'; the routed experts run `_grouped_mm`, which is not in the save list."""
    arch = rp.arch
    q, kv, h = arch.q_dim, arch.kv_dim, arch.hidden
    fused = rp.fused_qkv or (
        rp.framework in HF_MODEL_FRAMEWORKS
        and arch.family in (HF_FUSED_FAMILIES | HF_C_ATTN_FAMILIES | HF_ONE_QKV_LINEAR)
    )
    mms = [("qkv", q + 2 * kv, False)] if fused else [("q", q, False), ("k", kv, False), ("v", kv, False)]
    mms.append(("o", h, True))
    gated = arch.mlp in ("swiglu", "geglu")
    if arch.is_moe:
        mms.append(("router", arch.num_experts, False))
        inter = (arch.shared_expert_intermediate or arch.moe_intermediate or arch.intermediate) * arch.shared_experts
        if not inter:
            return mms
    else:
        inter = arch.intermediate
    mms += [("gate", inter, False), ("up", inter, False)] if gated else [("fc1", inter, False)]
    mms.append(("down", h, True))
    return mms


def op_saved_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token one block keeps under op-level selective checkpointing, on this rank: the block's input (kept
    by the checkpoint), the outputs of its odd-numbered matmuls (`op_saved_mms`), the attention kernel's outputs
    (its output and fp32 logsumexp: `_scaled_dot_product_flash_attention` returns both; eager attention runs bmm and
    softmax, neither listed), and under sequence parallelism the reduce-scatter outputs after o and down.
    Column-parallel outputs are a tensor-parallel shard each; a row-parallel matmul's output is its rank's partial
    sum over the whole hidden width, before the reduce-scatter."""
    arch = rp.arch
    c = DTYPE_BYTES[rp.compute_dtype]
    tp = max(rp.tensor_parallel, 1)
    out = block_input_per_token(rp)
    for n, (_, width, row) in enumerate(op_saved_mms(rp), start=1):
        if n % 2 == 1:
            out += c * width / (1 if row else tp)
        if row and tp > 1 and rp.sequence_parallel:
            out += c * width / tp
    if rp.attn_impl != "eager":
        out += (c * arch.q_dim + 4 * arch.heads) / tp
    return out


def saved_per_token(rp: ResolvedPlan) -> tuple[float, float, float]:
    """What the blocks keep for backward per token under the plan's checkpointing, on this rank, as (every block at
    the end of the forward, while the highest recomputed block is recomputed, while the lowest one is). The two
    recompute figures leave out what the block being recomputed keeps beyond its input: its recompute
    (`backward_block_per_token`) counts it. Every block checkpointed: L inputs, L and 1 while recomputing. Every n-th
    (`checkpointed_blocks`): those keep their input, the others everything (`activations_per_token`); the blocks
    above the highest checkpointed one have run their backward before it is recomputed, and below the lowest one
    (the n-th) n − 1 blocks still hold everything. Op-level (`op_saved_per_token`): every block keeps its saved ops."""
    layers = counted_layers(rp)
    inp = block_input_per_token(rp)
    if rp.selective_recompute == "op" and not rp.grad_checkpointing:
        one = op_saved_per_token(rp)
        return layers * one, layers * one - one + inp, inp
    if not rp.grad_checkpointing:
        total = activations_per_token(rp)[0]
        return total, total, total
    k = checkpointed_blocks(rp)
    if k == layers:
        total = layers * inp
        return total, total, inp
    _, one_layer = activations_per_token(rp)
    n = max(rp.checkpoint_every, 1)
    total = k * inp + (layers - k) * one_layer
    above = layers - k * n
    return total, total - above * one_layer, (n - 1) * one_layer + inp


def layers_keeping_everything(rp: ResolvedPlan) -> int:
    """Blocks that keep all their activations (no checkpoint around them)."""
    if rp.selective_recompute == "op" and not rp.grad_checkpointing:
        return 0
    return counted_layers(rp) - checkpointed_blocks(rp) if rp.grad_checkpointing else counted_layers(rp)


def fsdp_kept_block_grads(rp: ResolvedPlan, saved: int) -> int:
    """Bytes FSDP1 keeps beyond the checkpoints when it holds every block's checkpointed input and that input's
    gradient until the backward ends (`rp.fsdp_keeps_block_grads`; knowledge/versions.py `fsdp1_keeps_block_grads`).
    At the first block's backward all L checkpoints are held with L − 1 input gradients, one of which is the gradient
    flowing in that any backward holds: L − 2 block-input-sized tensors more (measured on CPU: FSDP1 over LoRA layers
    under transformers 4.45.2 with reentrant checkpointing, 4 and 8 layers)."""
    if not (rp.fsdp_keeps_block_grads and rp.grad_checkpointing and saved):
        return 0
    n = counted_layers(rp)
    return int(saved * max(n - 2, 0) / n)


def final_norm_per_token(rp: ResolvedPlan) -> float:
    """The final norm before the LM head (one RMSNorm: 8sbh; docs/memory-model.md). Compiled, its 16-bit input and
    fp32 1/rms (`compiled_block`)."""
    if rp.arch.block == "encoder":
        return 0
    if hf_t5(rp):
        return t5_global_per_token(rp)
    if compiled_block(rp):
        return (2 if rp.compute_dtype != "fp32" else 4) * rp.arch.hidden + 4
    return 8 * rp.arch.hidden


def logits_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token held by the LM head and the loss at the start of backward.

    Standard HF loss (transformers ≥ 4.46 upcasts inside the loss): fp32 log-softmax output plus the
    NLL and log-softmax gradients = 12 bytes per logit, +2 if the 16-bit logits stay referenced
    (`ForCausalLMLoss`, src/transformers/loss/loss_utils.py; traced, docs/memory-model.md).
    Chunked CE (torchtune, TRL chunked_nll): 16-bit logits + one fp32 chunk ≈ 4; litgpt (128-token chunks, the
    chunk list held through backward, Fabric casting it to fp32): fp32 logits + their log-softmax = 8. Fused linear-CE
    (Liger, Cut-Cross-Entropy): no full logits ≈ 0 (a few MiB of chunk buffers).
    """
    V = rp.arch.vocab
    if rp.arch.block == "encoder":
        return 0.0
    if rp.loss_impl == "fused":
        return 0.0
    if eager_chunked_ce(rp):
        return chunked_ce_per_logit(rp) * V
    if rp.loss_impl == "chunked":
        # the held logits and their log-softmax (or gradients): 2 × 2 bytes, 2 × 4 when the loop gets fp32 logits;
        # + Gemma-2's soft-capping, applied per chunk in 16-bit: tanh keeps its output
        held = 8.0 if rp.logits_fp32 else 4.0
        return (held + (2.0 if rp.arch.family == "gemma2" else 0.0)) * V
    if hf_t5(rp) and rp.loss_impl == "standard" and not compiled_block(rp):
        return t5_loss_per_token(rp, backward=True)
    if compiled_block(rp) and rp.compile_loss:
        # the loss compiled with the model (transformers computes it inside the model's forward): the partitioner
        # keeps the fp32 log-softmax (4 bytes per logit, tests/trace/test_compile_partitioner.py) and backward writes
        # the logits' gradient in one fused kernel (2, or 4 in fp32), with no fp32 gradients in between
        if rp.compute_dtype == "fp32":
            return 8.0 * V
        return (6.0 + (2.0 if rp.keep_logits else 0.0)) * V
    per = 12.0 + (2.0 if rp.keep_logits else 0.0)
    if rp.compute_dtype == "fp32":
        per = 12.0
    if rp.loss_shifted_copy:
        # transformers < 4.49 ForCausalLMLoss: while the loss runs, the 16-bit logits, their fp32 upcast, the shifted
        # contiguous fp32 copy and the fp32 log-softmax are all alive (loss/loss_utils.py of 4.48.3)
        per = max(per, (4.0 if rp.compute_dtype == "fp32" else 6.0) + 8.0)
    if rp.arch.family == "gemma2":
        per += 2.0  # final_logit_softcapping: tanh(logits / cap) keeps its 16-bit output
    return per * V


def loss_parallel_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token a vocabulary-parallel cross-entropy holds at its peak on one tensor-parallel rank (`loss_parallel`:
    torchtitan's `F.cross_entropy(pred.float(), …)` under `loss_parallel()` over logits sharded along the vocabulary).
    Run eagerly, DTensor's own kernels compute it (torch 2.13 torch/distributed/tensor/parallel/loss.py): `_log_softmax`
    keeps its fp32 output, and the backward `_nll_loss_and_log_softmax_backward` computes
    `(zeros_like(x) + exp(x)) * grad_output` beside it, 4 fp32 logit-sized tensors at once: 16 bytes per logit of the
    rank's shard. A compiled loss (`compile_loss`) is counted as `logits_per_token`'s, over the shard."""
    tp = max(rp.tensor_parallel, 1)
    if compiled_block(rp) and rp.compile_loss:
        return logits_per_token(rp) / tp
    return 16.0 * rp.arch.vocab / tp


# torchtune 0.6.1 modules/loss/ce_chunked_output_loss.py `CEWithChunkedOutputLoss(num_output_chunks=8)`, the value
# every torchtune config keeps
TORCHTUNE_CE_CHUNKS = 8


def eager_chunked_ce(rp: ResolvedPlan) -> bool:
    """torchtune's CEWithChunkedOutputLoss run eagerly: its recipes compile `compute_cross_entropy` only with
    `compile: True` (torchtune 0.6.1 training/_compile.py `compile_loss`)."""
    return rp.loss_impl == "chunked" and rp.framework == "torchtune" and not rp.compile


def chunked_ce_per_logit(rp: ResolvedPlan) -> float:
    """Bytes per logit torchtune's chunked loss holds at its peak (traced on torchtune 0.6.1 under fake tensors,
    benchmarks/results/trace_real_torchtune_vs_estimate.txt). The model returns its logits as 8 chunks in the
    compute dtype; `compute_cross_entropy` runs `F.cross_entropy(chunk.float(), ...)` per chunk, whose log-softmax
    keeps its fp32 output for backward. While the loss runs: every chunk's logits (c), every chunk's fp32
    log-softmax (4) and the fp32 upcast of the chunk in flight (4 ÷ 8; none when the logits are fp32, `.float()`
    returning them as they are). Backward runs every chunk's loss before the output projection's: the first one
    (the last chunk) holds the log-softmax outputs (4) and that chunk's two fp32 gradients (8 ÷ 8); the recipe has
    dropped the logits by then (`del logits` in `_loss_step`). The larger of the two."""
    c = DTYPE_BYTES[rp.compute_dtype]
    forward = c + 4.0 + (4.0 if c != 4 else 0.0) / TORCHTUNE_CE_CHUNKS
    backward = 4.0 + 8.0 / TORCHTUNE_CE_CHUNKS
    return max(forward, backward) + (2.0 if rp.arch.family == "gemma2" else 0.0)


def chunked_head_backward_bytes(rp: ResolvedPlan, tokens: int) -> int:
    """What the LM head's backward holds after torchtune's chunked loss has run its backward (every chunk's loss runs
    first: torch's autograd takes the ready node created last, and the head's per-chunk matmuls were created before
    the loss): the logits' gradients in the compute dtype, less the chunks already through the head, and, when the
    head trains, three head-weight-sized tensors while each chunk's weight gradient is accumulated into the sum of
    the chunks before it (traced on real CPU tensors and under fake tensors alike: c × (N − 2) ÷ N bytes per logit
    + 3 × the head weight's gradient, tests/trace/test_torchtune_backend.py)."""
    arch = rp.arch
    c = DTYPE_BYTES[rp.compute_dtype]
    n = TORCHTUNE_CE_CHUNKS
    out = tokens * arch.vocab * c * (n - 2) / n
    if head_trains(rp):
        out += 3 * arch.vocab * arch.hidden * DTYPE_BYTES[rp.weight_dtype]
    return int(out)


def t5_loss_per_token(rp: ResolvedPlan, backward: bool) -> float:
    """T5ForConditionalGeneration's loss, `CrossEntropyLoss()(lm_logits.view(-1, V), labels.view(-1))` on the LM
    head's output as it is (transformers 5.24 models/t5/modeling_t5.py; no fp32 upcast as in ForCausalLMLoss): the
    log-softmax output, then in backward the NLL's gradient and the logits' gradient, 3 × 2 bytes per logit in
    16-bit. Under autocast (AMP, or a k-bit model's fp32 head) CUDA runs the log-softmax with an fp32 output
    (autocast_mode.h `AT_FORALL_FP32_SET_OPT_DTYPE`) and its backward writes the 16-bit gradient directly
    (`half_to_float`): 4 + 4 + 2. In the forward: the logits and the log-softmax output. + the logits when the loop
    keeps them."""
    c = 2 if rp.compute_dtype != "fp32" else 4
    lsm = 4 if c == 2 and (rp.amp or fp32_residual(rp)) else c
    per = (2 * lsm + c) if backward else (c + lsm)
    if backward and rp.keep_logits:
        per += c
    return per * rp.arch.vocab


def trl_fused_head(rp: ResolvedPlan) -> bool:
    """TRL's chunked `nll` loss: SFTTrainer (trl ≥ 1.7, `loss_type` "nll", formerly "chunked_nll", the default) adds
    a fused LM head to the model (trl 1.16 trl/trainer/utils.py `add_fused_lm_head`) that never materialises the
    logits (`head_loss_bytes`). SFTTrainer's alone: the preference and RL trainers compute their own losses."""
    return (
        rp.loss_impl == "chunked"
        and rp.framework == "trl"
        and rp.objective == "sft"
        and rp.arch.block != "encoder"
        and not rp.scalar_head
    )


# trl 1.16 trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE; trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
TRL_TOKEN_TILE, TRL_VOCAB_TILE = 4096, 32768


def head_loss_bytes(rp: ResolvedPlan, tokens: int, backward: bool = True) -> int:
    """Bytes the LM head and the loss hold at the start of backward for `tokens` scored positions:
    `logits_per_token` per token, or under TRL's fused head (`trl_fused_head`) what its backward holds
    (trl 1.16 trl/kernels/chunked_logprob.py `ChunkedLogProbFunction`): one [4096 tokens × 32768 vocabulary] tile
    in the compute dtype (`mm_buf`, reused for every tile; the CUDA kernels fold it in place), the hidden states it
    saved (a contiguous copy of the shifted backbone output), fp32 accumulators for the hidden states' gradient and,
    when the head trains, for the head weight's gradient, each cast to its tensor's dtype on return (a second copy
    while the fp32 one is alive; none when the tensor is fp32), and per-token fp32 log Z, entropy and log-probs.
    A chunk of hidden states and the head's weight tile are cast to the compute dtype when they are in fp32 under
    autocast. With `backward` False, what its forward holds: the tile, the casts, the saved hidden states and the
    per-token statistics, no gradient accumulators."""
    if eager_chunked_ce(rp):
        return max(int(tokens * logits_per_token(rp)), chunked_head_backward_bytes(rp, tokens))
    if not trl_fused_head(rp):
        return int(tokens * logits_per_token(rp))
    arch = rp.arch
    h, V = arch.hidden, arch.vocab
    c = DTYPE_BYTES[rp.compute_dtype]
    hb = 4 if (fp32_residual(rp) or c == 4) else c  # the backbone output's dtype
    hw = 4 if (rp.amp or rp.weight_dtype == "fp32") else DTYPE_BYTES[rp.weight_dtype]  # the head weight's dtype
    tile_tokens = min(tokens, TRL_TOKEN_TILE)
    out = tile_tokens * min(V, TRL_VOCAB_TILE) * c
    if hb != c:
        out += tile_tokens * h * c  # hidden_chunk.to(compute_dtype)
    if hw != c:
        out += min(V, TRL_VOCAB_TILE) * h * c  # weight[start:end].to(compute_dtype)
    if not backward:
        return int(out + tokens * (hb * h + 7 * 4))  # running max, sums, target logit, log Z, entropy
    out += tokens * (hb * h + 4 * h + (hb * h if hb != 4 else 0) + 3 * 4)
    if head_trains(rp):
        out += V * h * (4 + (hw if hw != 4 else 0))
    return int(out)


def head_trains(rp: ResolvedPlan) -> bool:
    """Whether the LM head's weight gets a gradient."""
    arch = rp.arch
    return (
        rp.peft == "none"
        and (
            rp.trained_layers is None
            or "lm_head" in rp.trained_extra
            or (arch.tied_embeddings and "embed" in rp.trained_extra)
        )
    ) or "lm_head" in rp.modules_to_save


def attention_mask_bytes(rp: ResolvedPlan) -> tuple[int, int]:
    """(once per step, saved per layer) bytes of the padding/causal mask.

    HF builds one 4-D mask when the batch is padded: boolean for SDPA (b·s² bytes), additive 16-bit for eager.
    SDPA turns a boolean mask into an additive one in the query dtype on every call, and the memory-efficient
    kernel saves it for backward: 2·b·s² bytes per layer (trace_vs_estimate note 4). Packing and flash
    attention pass no mask."""
    if not image_block_mask(rp) and (rp.packing or not rp.attn_mask) or rp.attn_impl not in ("eager", "sdpa"):
        return 0, 0
    bss = rp.micro_batch * rp.seq_len**2
    if rp.attn_impl == "eager":
        return 2 * bss, 0
    if not rp.repeat_kv:
        return 0, 0
    return bss, 2 * bss


def parallel_block(arch) -> bool:
    """Attention and MLP read the same normalised input (one shared norm: phi, falcon-7b; or two norms of the same
    input: `SHARED_NORM_INPUT`)."""
    return norms_per_layer(arch) == 1 or arch.family in SHARED_NORM_INPUT


def first_block_input_frozen(rp: ResolvedPlan) -> bool:
    """Whether the first block's input needs no gradient under AMP over fp32 weights: an adapter model whose
    embeddings are frozen and not checkpointed (transformers' `enable_input_require_grads` is called for
    checkpointing only: the Trainer's `gradient_checkpointing_enable` and peft 0.21.2 utils/other.py
    `prepare_model_for_kbit_training` under `use_gradient_checkpointing`). Autograd saves nothing for an op none of
    whose inputs needs a gradient: the first norm keeps no input, and a frozen linear reading its output keeps no
    16-bit cast of its weight (`mm` saves the weight only for the input's gradient, torch 2.13
    tools/autograd/derivatives.yaml). The adapters' own matmuls keep their inputs as in every block."""
    if rp.peft == "none" or rp.grad_checkpointing or not rp.amp or rp.compute_dtype == "fp32":
        return False
    trained = set(rp.modules_to_save) | set(rp.lora_targets) | set(rp.trained_extra)
    return "embed" not in trained and rp.arch.block == "decoder"


def autocast_weight_cache(rp: ResolvedPlan, p: Params) -> int:
    """16-bit copies of fp32 weights that autocast makes in forward and backward keeps.

    AMP over fp32 weights: every linear weight (traced: ~15 GiB of the 30.5 GiB AMP activations of an 8B
    model); inside checkpointed blocks the copies are rebuilt during recompute, but the LM head is outside them.
    A k-bit model under autocast: only the LM head is an fp32 nn.Linear (the quantized linears dequantize
    themselves) — its 16-bit copy (V·h·2 bytes) is kept by the frozen head's backward (trace rows 22–35)."""
    s = shapes(rp.arch)
    head = (s.lm_head_params or s.embed_params) * 2 if rp.arch.block != "encoder" else 0
    if fsdp_gathers_16bit(rp):
        return 0  # the weights reach autocast already in the compute dtype
    if rp.amp:
        blocks = 0 if rp.grad_checkpointing else s.linear_params * 2
        if first_block_input_frozen(rp):
            # the first block's linears that read its norm's output keep no copy (`first_block_input_frozen`)
            reads_norm = ("q", "k", "v") + (("gate", "up", "fc1") if parallel_block(rp.arch) else ())
            blocks -= (
                sum(lin.params for lin in s.linears if lin.name in reads_norm and not lin.expert)
                * 2
                // max(rp.arch.layers, 1)
            )
        return int(blocks + head)
    if fp32_residual(rp):
        # a head TRL cast back to bf16 (kbit_embeddings_16bit) needs no 16-bit copy
        return 0 if rp.kbit_embeddings_16bit else int(head)
    return 0


def autocast_forward_cache(rp: ResolvedPlan) -> int:
    """16-bit copies of the checkpointed blocks' fp32 linear weights that autocast's cache holds until the forward
    ends. Autocast caches every cast of a leaf weight that requires grad (`cached_cast`, aten/src/ATen/
    autocast_mode.cpp, torch 2.13) and clears the cache only when the outermost autocast context exits
    (`torch.clear_autocast_cache()` in `autocast.__exit__`, torch/amp/autocast_mode.py). The Trainer's autocast
    wraps the model's forward, and transformers computes the loss inside it (`ForCausalLMLoss`), so the copies are
    alive through the LM head and the loss even though checkpointed blocks save none of them for backward.
    Frozen weights (a PEFT base model, layers `trained_layers` leaves out) are cast afresh at each use and not
    cached; trainable adapters are, but they are small. Under FSDP's mixed precision nothing is cached
    (`fsdp_gathers_16bit`)."""
    if (
        not (rp.amp and rp.grad_checkpointing and rp.compute_dtype != "fp32")
        or compiled_block(rp)
        or fsdp_gathers_16bit(rp)
    ):
        return 0
    trained = sum(lin.params * weight_grad_share(rp, lin.name) for lin in shapes(rp.arch).linears)
    return int(trained * DTYPE_BYTES[rp.compute_dtype])


def fsdp_gathers_16bit(rp: ResolvedPlan) -> bool:
    """FSDP's MixedPrecision(param_dtype=bf16) over fp32 parameters: each unit's fp32 shard is cast to a
    low-precision shard and all-gathered in param_dtype, the module computes on that, and the unsharded copy is
    freed after the unit's forward and again after its backward (torch 2.13 torch/distributed/fsdp/_flat_param.py
    `_use_low_precision_shard`, `_free_low_precision_sharded_param`, _runtime_utils.py `_post_forward_reshard`;
    FSDP2: _fully_shard/_fsdp_param.py `all_gather_inputs` casts the shard to `param_dtype`). That 16-bit working
    set is the two gathered units of `zero_buffers` and the root of `fsdp_root_unsharded`. Autocast, if it runs
    too (verl's dp_actor.py wraps the forward in `torch.autocast(dtype=torch.bfloat16)`), meets 16-bit weights and
    caches no copies: it caches casts of fp32 leaf tensors only (aten/src/ATen/autocast_mode.cpp `cached_cast`)."""
    return rp.fsdp_mixed_precision


def recompute_weight_copies(rp: ResolvedPlan) -> int:
    """The 16-bit copies of one block's trainable weights while that block is recomputed and back-propagated under
    AMP: torch.utils.checkpoint re-enters autocast for the recompute (torch 2.13 torch/utils/checkpoint.py
    `_checkpoint_without_reentrant_generator`: `device_autocast_ctx`, with the cache setting of the forward), and
    the block's matmuls keep their casts for its backward."""
    return autocast_forward_cache(rp) // max(rp.arch.layers, 1)


def loss_forward_per_token(rp: ResolvedPlan) -> float:
    """Bytes per token the LM head and the standard loss hold while the loss's forward runs: the 16-bit logits,
    their fp32 upcast and the fp32 log-softmax (transformers 5.24 loss/loss_utils.py ForCausalLMLoss:
    `logits = logits.float()`, then `cross_entropy`), + the shifted fp32 copy before 4.49 and Gemma-2's
    soft-capping output. Other losses: what they hold at the start of backward (`logits_per_token`)."""
    if rp.arch.block == "encoder" or rp.loss_impl != "standard" or compiled_block(rp):
        return logits_per_token(rp)  # (TRL's fused head: `head_loss_bytes`, at the phase's call)
    if hf_t5(rp):
        return t5_loss_per_token(rp, backward=False)
    c = DTYPE_BYTES[rp.compute_dtype]
    per = c + 4.0 + (4.0 if c != 4 else 0.0) + (4.0 if rp.loss_shifted_copy else 0.0)
    if rp.arch.family == "gemma2":
        per += c  # final_logit_softcapping: tanh(logits / cap) keeps its output
    return per * rp.arch.vocab


def gathered_layer_bytes(rp: ResolvedPlan, p: Params) -> int:
    """Bytes of one block's parameters as FSDP / ZeRO-3 gather them. A 4-bit model keeps its quantized weights
    packed in the storage dtype (`bnb_4bit_quant_storage`), and the gather moves that storage as it is: the
    packed payload and its constants, not a 16-bit copy (bitsandbytes docs/source/fsdp_qlora.md, "Quantized data
    storage"; the weights are dequantized one linear at a time inside `Linear4bit.forward`)."""
    if not rp.quant_bits:
        return int(p.layer_bytes / max(rp.tensor_parallel, 1))
    s = shapes(rp.arch)
    norms = norms_per_layer(rp.arch) * rp.arch.hidden
    packed, consts = quantized_bytes_per_param(rp)
    cb = DTYPE_BYTES[rp.compute_dtype]
    return int((s.layer_params - norms) * (packed + consts) + norms * cb)


def fsdp_gather_bytes(rp: ResolvedPlan) -> int:
    """Bytes per parameter of FSDP's unsharded copies: the mixed-precision `param_dtype` (the compute dtype) when the
    plan gathers 16-bit weights (`fsdp_gathers_16bit`), else the parameters' own dtype (torch 2.13
    distributed/fsdp/_fully_shard/_fsdp_param.py `init_dtype_attrs`: no param_dtype, no cast). The unsharded
    gradients autograd makes are in that dtype too."""
    return DTYPE_BYTES[rp.compute_dtype if fsdp_gathers_16bit(rp) else rp.weight_dtype]


def fsdp_sharded(rp: ResolvedPlan) -> bool:
    """FULL_SHARD (stage 3) or SHARD_GRAD_OP (stage 2) across ranks: parameters, gradients and optimizer state all
    sharded at rest (`zero_shard_factor`)."""
    return rp.strategy == "fsdp" and rp.world_size > 1 and rp.zero_stage >= 2 and not rp.offload_params


def fsdp_root_unsharded(rp: ResolvedPlan) -> int:
    """FSDP's unsharded parameters at the end of the forward, held into the backward.

    The root unit's: FULL_SHARD frees every other unit after its forward but not the root's ("Do not free the root's
    parameters in the post-forward for `FULL_SHARD` with the intention that they are immediately used for backward
    computation", torch 2.4 torch/distributed/fsdp/_runtime_utils.py `_post_forward_reshard`; FSDP2 likewise: "For
    the root, do not reshard after forward", torch 2.13 distributed/fsdp/_fully_shard/_fsdp_state.py `_lazy_init`).
    With transformer-layer auto-wrap the root holds the token embeddings, the final norm and the LM head. A trained
    LM head's unsharded gradient stays too: the root's gradients are reduce-scattered when the whole root unit's
    backward has run, after the embedding's (FSDP2 `FSDPParamGroup.post_backward` from the root's
    `RegisterPostBackwardFunction`; FSDP1 `_post_backward_hook` on the flat parameter's AccumulateGrad).
    SHARD_GRAD_OP keeps every block's unsharded parameters from its forward to its backward (FSDP1
    `_should_free_in_backward`/no post-forward reshard; FSDP2 `reshard_after_forward=False`); under FULL_SHARD the
    root's own pre-backward, when the loss's backward starts, prefetches the last block (torch 2.13
    distributed/fsdp/_fully_shard/_fsdp_param_group.py `pre_backward` → `_backward_prefetch`, the group that ran
    its forward last; FSDP1 _runtime_utils.py `_pre_backward_hook` → `_prefetch_handle`, BACKWARD_PRE).
    Measured against the sharded trace (trace.sharded, tests/trace/test_sharded_trace.py)."""
    if not fsdp_sharded(rp):
        return 0
    s = shapes(rp.arch)
    pg = fsdp_gather_bytes(rp)
    head = 0 if rp.scalar_head else s.lm_head_params
    out = (s.embed_params + head) * pg
    if rp.peft == "none" and rp.trained_layers is None:
        out += (head or s.embed_params) * pg  # the LM head's (or the tied embedding's) gradient
    blocks = counted_layers(rp) if rp.zero_stage < 3 else 1
    return int(out + blocks * fsdp_unit_bytes(rp))


def fsdp_unit_bytes(rp: ResolvedPlan) -> float:
    """One block's unsharded parameters as FSDP gathers them: in `fsdp_gather_bytes`, or a 4-bit model's packed
    storage (`gathered_layer_bytes`)."""
    if rp.quant_bits:
        return gathered_layer_bytes(rp, params(rp))
    return shapes(rp.arch).layer_params * fsdp_gather_bytes(rp) / max(rp.tensor_parallel, 1)


def fsdp_backward_working_set(rp: ResolvedPlan, p: Params) -> int:
    """What a block's backward adds under FSDP beyond `fsdp_root_unsharded`: its gathered parameters, the next
    unit's, prefetched (BACKWARD_PRE, the default: torch 2.13 distributed/fsdp/_fully_shard/_fsdp_state.py
    `_pre_backward` → `FSDPParamGroup._backward_prefetch`; FSDP1 `_prefetch_handle`), and its unsharded gradients;
    then, after the block is resharded, the reduce-scatter: the unsharded gradients copied into a reduce-dtype
    input of the whole unit (fp32 under mixed precision) and its output shard (FSDP2 _fsdp_collectives.py
    `foreach_reduce`: `reduce_scatter_input` allocated before `unsharded_grads.clear()`, then `reduce_output`;
    FSDP1 _runtime_utils.py `_reduce_grad`: `unsharded_grad.to(reduce_dtype)`, `new_sharded_grad`). The larger of
    the two moments. The prefetched unit, and SHARD_GRAD_OP's gathered blocks, are in `fsdp_root_unsharded`."""
    if not fsdp_sharded(rp):
        return 0
    s = shapes(rp.arch)
    pg = fsdp_gather_bytes(rp)
    rb = 4 if rp.fsdp_mixed_precision else pg
    unit = fsdp_unit_bytes(rp)
    full = rp.peft == "none" and rp.trained_layers is None
    grads = (s.layer_params if full else p.trainable / max(counted_layers(rp), 1)) * pg
    reduce_in = grads / pg * rb * (1 + 1 / rp.world_size)
    if rp.zero_stage >= 3:
        return int(max(unit + grads, grads + reduce_in))
    return int(max(grads, grads + reduce_in - unit))


def zero_buffers(rp: ResolvedPlan, p: Params) -> int:
    """Communication buffers and the unsharded working set held through the step.

    FSDP keeps no buffer of its own between units: its unsharded parameters and reduce-scatter buffers are made per
    unit (`fsdp_root_unsharded`, `fsdp_backward_working_set`), and NCCL's buffers are outside torch's allocator
    (the device level: estimate/allocator.py). With parameter offload FSDP gathers one block (plus one prefetched).
    DeepSpeed reduce/all-gather buckets default to 5e8 elements; HF "auto" sets reduce_bucket_size to h²
    and stage3_prefetch_bucket_size to 0.9·h²
    (`trainer_config_finalize` in src/transformers/integrations/deepspeed.py). DDP keeps a 25 MiB bucket view of
    gradients (`bucket_cap_mb`)."""
    if rp.world_size <= 1 and not rp.offload_params:
        return 0
    h2 = rp.arch.hidden**2
    layer_bytes = gathered_layer_bytes(rp, p)
    if rp.strategy == "fsdp":
        return 2 * layer_bytes if rp.offload_params else 0
    if rp.strategy == "deepspeed":
        out = 2 * h2 * 2  # reduce bucket (auto = h²), 16-bit, double-buffered
        if rp.zero_stage >= 3 or rp.offload_params:
            out += 2 * layer_bytes + int(0.9 * h2) * 2
        return out
    if rp.strategy in ("ddp", "none") and rp.world_size > 1:
        return 25 * 2**20 * 2
    return 0


# --- objectives beyond SFT ---------------------------------------------------------------------------------------


def model_weights(rp: ResolvedPlan, arch) -> int:
    """A frozen, non-quantized copy of a model in the weight dtype on this rank: a DPO/KTO reference, a reward model,
    a distillation teacher. TRL prepares these with DeepSpeed/FSDP in evaluation mode (trl 1.16.0 dpo_trainer.py
    `prepare_deepspeed`/`prepare_fsdp`), so ZeRO-3/FULL_SHARD shard them like the policy."""
    if rp.offload_params:
        return 0
    return int(shapes(arch).total * DTYPE_BYTES[rp.weight_dtype] * shard_factor(rp, "weights"))


def no_grad_forward(rp: ResolvedPlan, tokens: int, arch=None) -> int:
    """Transient memory of a forward under torch.no_grad (reference log-probs, teacher logits): nothing is saved for
    backward, so about one block's activations are alive at a time, plus the logits and their fp32 log-softmax
    (16-bit logits + fp32 = 6 bytes per logit; a chunked or fused head keeps only a chunk)."""
    arch = arch or rp.arch
    _, one_layer = (
        activations_per_token(rp.with_changes(arch=arch)) if arch is not rp.arch else activations_per_token(rp)
    )
    head = {"fused": 0.0, "chunked": 2.0}.get(rp.loss_impl, 6.0) * arch.vocab
    return int(tokens * (one_layer + head))


def kv_cache(rp: ResolvedPlan) -> int:
    """The KV cache of `generate()` for the rollout batch: sequences × (prompt + completion) × layers × K and V ×
    kv_dim in the compute dtype, plus one decoding step's fp32 logits per sequence."""
    arch = rp.arch
    cb = DTYPE_BYTES[rp.compute_dtype]
    per_token = arch.layers * 2 * arch.kv_dim * cb
    tp = max(rp.tensor_parallel, 1)
    sequences = rp.micro_batch * rp.generations_per_example
    return int(sequences * (rp.generation_len * per_token / tp + 4 * arch.vocab))


def value_model(rp: ResolvedPlan, p: Params) -> int:
    """PPO's value model: a policy-sized backbone with a scalar head that trains like the policy (its weights,
    gradients and optimizer state; torchtune ppo_full_finetune_single_device.py, TRL PPOTrainer). The policy's
    optimizer settings apply to it: torchtune builds one optimizer over both models' parameters and, with
    `optimizer_in_bwd`, registers the per-parameter step on both (`_setup_optimizer`, recipes/
    ppo_full_finetune_single_device.py at 010eab0), so no gradient stays resident; paged states are outside the
    allocator (`value_model_paged_state`)."""
    w = model_weights(rp, rp.arch)
    if rp.peft != "none":
        return w + int(p.trainable_bytes * 3)  # adapters, their gradients, states in the same order
    n = shapes(rp.arch).total
    grads = 0.0 if rp.optimizer_in_bwd else DTYPE_BYTES[rp.weight_dtype] * shard_factor(rp, "gradients")
    return w + int(n * grads) + (0 if rp.optimizer.paged else _value_state(rp, n))


def value_model_paged_state(rp: ResolvedPlan) -> int:
    """The value model's optimizer states when the optimizer is a paged one (unified memory, like the policy's)."""
    if not rp.value_model or rp.peft != "none" or not rp.optimizer.paged:
        return 0
    return _value_state(rp, shapes(rp.arch).total)


def _value_state(rp: ResolvedPlan, n: int) -> int:
    opt = rp.optimizer
    state_b = opt.state_bytes if opt.state_bytes is not None else DTYPE_BYTES[rp.weight_dtype]
    return int(n * opt.states * state_b * shard_factor(rp, "optimizer"))


# --- parallel layouts: pipeline stages, expert parallelism, Megatron-core ---------------------------------------
# Megatron-LM 00caa53a megatron/training/theoretical_memory_usage.py (`compute_weight_and_optimizer_memory`,
# `compute_activation_memory`, `compute_activation_memory_without_sp`) and Korthikanti et al. 2022, "Reducing
# Activation Recomputation in Large Transformer Models" (arXiv:2205.05198, Table 2 and §4-5), generalised to grouped
# K/V, gated MLPs and routed experts; tests/estimate/test_megatron_layouts.py re-implements that file and checks the
# two agree on the layouts it covers.

MEGATRON_EMBED_INPUT_BYTES = 8  # int64 token ids of a micro-batch held by the first stage (theoretical_memory_usage)


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline rank: what it holds of the model and how many micro-batches' activations are in flight."""

    name: str  # "first", "last" or "only"
    dense_params: int  # non-expert parameters on this rank, before tensor parallelism
    expert_params: int  # routed-expert parameters on this rank, before expert parallelism
    layers: int  # decoder layers on this rank
    in_flight: float  # micro-batches whose activations it holds at once (1F1B / interleaved)
    embedding: bool
    head: bool


def stage_layers(rp: ResolvedPlan) -> int:
    """Decoder layers on one pipeline rank: an even split (Megatron-core requires layers divisible by PP unless the
    first/last stage are sized apart, `--decoder-first-pipeline-num-layers`)."""
    return math.ceil(rp.arch.layers / max(rp.pipeline_parallel, 1))


def in_flight_microbatches(rp: ResolvedPlan, rank: int) -> float:
    """Micro-batches whose activations pipeline rank `rank` holds at its peak. 1F1B (megatron/core/pipeline_parallel/
    schedules.py `forward_backward_pipelining_without_interleaving`: `num_warmup_microbatches = pp - rank - 1`, then one
    more forward before the first backward): min(M, pp − rank). Interleaved with V chunks per rank
    (`forward_backward_pipelining_with_interleaving`: `(pp - rank - 1) * 2 + (V - 1) * pp` warm-up chunk forwards + 1),
    each chunk 1/V of the rank's layers; for rank 0 that is pp·(1 + (pp − 1)/(pp·V)), theoretical_memory_usage's
    `interleaved_schedule_memory_penalty`. M = micro-batches per step (gradient accumulation)."""
    pp = max(rp.pipeline_parallel, 1)
    m = max(rp.grad_accum, 1)
    if pp == 1:
        return 1.0
    v = max(rp.virtual_pipeline, 1)
    if v == 1:
        return float(min(m, pp - rank))
    chunks = min(m * v, (pp - rank - 1) * 2 + (v - 1) * pp + 1)
    return chunks / v


def stages(rp: ResolvedPlan) -> list[Stage]:
    """The first and the last pipeline rank (the middle ones hold less than the first: the same layers, fewer
    micro-batches in flight, no embedding). The first holds the word embeddings, the last the output layer and the
    final norm; with tied embeddings the last keeps its own copy of the embedding for the output layer
    (megatron/core/models/common/language_module/language_module.py `setup_embeddings_and_output_layer`)."""
    s = shapes(rp.arch)
    arch = rp.arch
    expert_total = sum(l.params for l in s.linears if l.expert)
    per_layer_dense = (s.total - s.embed_params - s.lm_head_params - expert_total) / max(arch.layers, 1)
    per_layer_expert = expert_total / max(arch.layers - arch.dense_layers, 1) if expert_total else 0
    pp = max(rp.pipeline_parallel, 1)
    n = stage_layers(rp)
    scalar = rp.scalar_head
    head = 0 if scalar else s.embed_params if arch.tied_embeddings else s.lm_head_params
    moe_first = min(max(n - arch.dense_layers, 0), n) if expert_total else 0
    moe_last = min(n, arch.layers - arch.dense_layers) if expert_total else 0
    first = Stage(
        "only" if pp == 1 else "first",
        int(n * per_layer_dense + s.embed_params + (s.lm_head_params if pp == 1 and not scalar else 0)),
        int(moe_first * per_layer_expert),
        n,
        in_flight_microbatches(rp, 0),
        True,
        pp == 1,
    )
    if pp == 1:
        return [first]
    last = Stage(
        "last",
        int(n * per_layer_dense + head),
        int(moe_last * per_layer_expert),
        n,
        in_flight_microbatches(rp, pp - 1),
        False,
        True,
    )
    return [first, last]


def pipeline_stage_share(rp: ResolvedPlan) -> float:
    """The busiest pipeline rank's share of the model's parameters (1 without pipeline parallelism)."""
    if rp.pipeline_parallel <= 1:
        return 1.0
    total = max(shapes(rp.arch).total, 1)
    return min(max(st.dense_params + st.expert_params for st in stages(rp)) / total, 1.0)


def expert_tp(rp: ResolvedPlan) -> int:
    return max(rp.expert_tensor_parallel or rp.tensor_parallel, 1)


def megatron_dp(rp: ResolvedPlan) -> tuple[int, int]:
    """(ranks the dense weights' optimizer state is sharded over, ranks the experts' is): the distributed optimizer
    shards over the data-parallel group with context parallelism folded in (megatron/core/parallel_state.py
    `get_data_parallel_group(with_context_parallel=True)`) and the experts' over the expert data-parallel group,
    world ÷ (expert TP × EP × PP) (`get_expert_data_parallel_group`)."""
    dp = max(rp.world_size, 1) * max(rp.context_parallel, 1)
    world = dp * max(rp.tensor_parallel, 1) * max(rp.pipeline_parallel, 1)
    edp = max(world // (expert_tp(rp) * max(rp.expert_parallel, 1) * max(rp.pipeline_parallel, 1)), 1)
    return dp, edp


def megatron_state_bytes(rp: ResolvedPlan, st: Stage) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) of a pipeline rank under Megatron-core. 16-bit weights with fp32 gradient
    buffers (Megatron-LM megatron/training/arguments.py: bf16 turns on `accumulate_allreduce_grads_in_fp32`; the
    buffers of megatron/core/distributed/param_and_grad_buffer.py stay allocated through the step) and an fp32 main
    copy + Adam's two fp32 states in the optimizer: 18 bytes per parameter, or 6 + 12/DP with the distributed
    optimizer (theoretical_memory_usage `num_bytes_per_parameter`). fp32 training keeps no main copy. Adapters
    (LoRA through Megatron-SWIFT) train alone over frozen 16-bit weights."""
    tp = max(rp.tensor_parallel, 1)
    dense = st.dense_params / tp
    experts = st.expert_params / (expert_tp(rp) * max(rp.expert_parallel, 1))
    wb = DTYPE_BYTES[rp.weight_dtype]
    weights = (dense + experts) * wb
    opt = rp.optimizer
    per_state = 4 * opt.states + (4 if wb < 4 else 0)  # fp32 states (+ the fp32 main weights)
    dp, edp = megatron_dp(rp) if rp.distributed_optimizer else (1, 1)
    if rp.peft != "none":
        share = (dense + experts) / max(shapes(rp.arch).total, 1)
        trained = params(rp).trainable * share
        weights += trained * (4 if rp.adapter_fp32 else wb)
        return int(weights), int(trained * 4), int(trained * per_state / dp)
    grads = (dense + experts) * 4
    return int(weights), int(grads), int(dense * per_state / dp + experts * per_state / edp)


def megatron_core_attention_per_token(rp: ResolvedPlan, recomputed: bool = False) -> float:
    """Bytes per token one layer's core attention keeps beyond Q, K, V and its output (split over the tensor-parallel
    ranks): with an unfused kernel (Megatron's own DotProductAttention, `--attention-backend local`/`unfused`), the
    16-bit softmax output, the dropout mask and the dropped probabilities, 5·a·s per token (Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models", §4.1: 5as²b per layer); none with flash or
    cuDNN fused attention, which keep only their output and softmax statistics. Selective recompute
    (`--recompute-granularity selective`, `selective_recompute` "core_attention") checkpoints the core attention
    (megatron/core/transformer/attention.py `_checkpointed_attention_forward`): its scores are not stored, and in
    backward one layer's are rebuilt at a time (`recomputed`: the size of that working set)."""
    if rp.attn_impl != "eager":
        return 0.0
    scores = 5.0 * rp.arch.heads * (rp.seq_len // max(rp.context_parallel, 1))
    if rp.selective_recompute == "core_attention":
        return scores if recomputed else 0.0
    return 0.0 if recomputed else scores


def megatron_layer_per_token(rp: ResolvedPlan, moe: bool) -> tuple[float, float]:
    """Bytes one layer saves per token of a micro-batch, as (split over the tensor-parallel ranks, replicated over them
    unless sequence parallelism splits it too). Korthikanti et al. Table 2 counts a GPT layer as
    sbh(10 + 24/t) without sequence parallelism and 34·sbh/t with it: the two norms' inputs (4h), the QKV and MLP
    inputs (2h each) and the two 1-byte dropout masks (2h) are replicated; Q, K, V and the attention output (8h),
    the MLP's first projection output and its activation (16h at ffn = 4h) are split (theoretical_memory_usage:
    `18 + 4 * ffn / h` with SP). Grouped K/V and a gated MLP (twice as wide a first projection) are counted at their
    widths; attention scores are not stored (Megatron-core's fused/flash attention keeps only its output and
    softmax statistics). A routed-expert layer keeps, per token and chosen expert, the permuted input and the
    unpermuted output (2h each) with the experts' first projection and activation, and the router's fp32 logits."""
    arch = rp.arch
    h = arch.hidden
    replicated = 4 * h + 2 * h + 2 * h + 2 * h
    attention = (
        2 * arch.q_dim + 2 * arch.kv_dim + 2 * arch.kv_dim + 2 * arch.q_dim + megatron_core_attention_per_token(rp)
    )
    gated = arch.mlp in ("swiglu", "geglu")

    def inner(width: int) -> float:
        return (6 if gated else 4) * width

    if not moe:
        return attention + inner(arch.intermediate), replicated
    f = arch.moe_intermediate or arch.intermediate
    k = max(arch.experts_per_token, 1)
    per_expert = k * (2 * h + inner(f) / expert_tp(rp) * max(rp.tensor_parallel, 1) + 2 * h)
    shared = arch.shared_experts * inner(arch.shared_expert_intermediate or f)
    return attention + shared + per_expert, replicated + 4 * arch.num_experts


def megatron_activations(rp: ResolvedPlan, st: Stage) -> tuple[int, int]:
    """(activations held, MoE all-to-all buffers) on a pipeline rank at its peak: every micro-batch in flight keeps
    the saved activations of the rank's layers (full recompute: their checkpointed inputs, plus one group recomputed
    in the backward), the first rank also its embedding's input ids and dropout mask. Tokens per micro-batch are
    divided by context parallelism."""
    tp = max(rp.tensor_parallel, 1)
    sp = tp if rp.sequence_parallel else 1
    h = rp.arch.hidden
    tokens = rp.micro_batch * rp.sequences_per_example * (rp.seq_len // max(rp.context_parallel, 1))
    moe_layers = min(st.layers, max(rp.arch.layers - rp.arch.dense_layers, 0)) if rp.arch.num_experts else 0
    split_d, repl_d = megatron_layer_per_token(rp, moe=False)
    split_m, repl_m = megatron_layer_per_token(rp, moe=True) if moe_layers else (0.0, 0.0)
    dense_layer = split_d / tp + repl_d / sp
    moe_layer = split_m / tp + repl_m / sp
    full = (st.layers - moe_layers) * dense_layer + moe_layers * moe_layer
    biggest = max(dense_layer, moe_layer)
    if rp.grad_checkpointing:
        ckpt = 2 * h / sp  # a recomputed layer keeps only its input (Korthikanti: 2sbh)
        n = max(min(rp.recompute_layers, st.layers), 1)
        if rp.recompute_method == "block":
            # the first n layers of each chunk recomputed, the rest keep everything (transformer_block.py `_checkpointed_forward`)
            per_mb = n * ckpt + full * (st.layers - n) / max(st.layers, 1)
            working = biggest
        else:
            per_mb = math.ceil(st.layers / n) * ckpt
            working = n * biggest  # one group of n layers recomputed for one micro-batch
    else:
        per_mb, working = full, 0.0
    # selective recompute: one layer's core attention rebuilt in backward (megatron_core_attention_per_token)
    working = max(working, megatron_core_attention_per_token(rp, recomputed=True) / tp)
    if st.embedding:
        per_mb += (MEGATRON_EMBED_INPUT_BYTES + h) / sp
    a2a = 0
    if moe_layers:
        # the token dispatcher's all-to-all: a micro-batch's chosen-expert tokens sent and received for one layer
        # (megatron/core/transformer/moe/token_dispatcher.py `MoEAlltoAllTokenDispatcher`)
        a2a = int(2 * max(rp.arch.experts_per_token, 1) * 2 * h * tokens / tp)
    return int(tokens * (per_mb * st.in_flight + working)), a2a


def megatron_head_per_token(rp: ResolvedPlan) -> float:
    """The output layer and the loss on the last rank: the final norm's and the output projection's inputs and the
    fp32 logits, 4sbh/t·(1 + V/h) (Korthikanti et al. §4.4; theoretical_memory_usage with PP = 1)."""
    if rp.scalar_head:
        return 0.0
    tp = max(rp.tensor_parallel, 1)
    sp = tp if rp.sequence_parallel else 1
    return 4 * rp.arch.hidden / sp + 4 * rp.arch.vocab / tp


def megatron_step(rp: ResolvedPlan) -> dict[str, dict[str, int]]:
    """The phases of one Megatron-core step on its busiest pipeline rank, by component. Gradient buffers and
    optimizer state are resident through the step, so the forward-backward is the peak; the optimizer step (fused
    Adam, in place) adds nothing."""
    best: dict[str, dict[str, int]] | None = None
    for st in stages(rp):
        w, g, o = megatron_state_bytes(rp, st)
        acts, a2a = megatron_activations(rp, st)
        tokens = rp.micro_batch * rp.sequences_per_example * (rp.seq_len // max(rp.context_parallel, 1))
        logits = int(tokens * megatron_head_per_token(rp)) if st.head else 0
        fb = {"weights": w, "gradients": g, "optimizer": o, "activations": acts, "logits": logits, "temporaries": a2a}
        if best is None or sum(fb.values()) > sum(best["forward-backward"].values()):
            best = {
                "forward-backward": fb,
                "optimizer-step": {
                    "weights": w,
                    "gradients": g,
                    "optimizer": o,
                    "activations": 0,
                    "logits": 0,
                    "temporaries": 0,
                },
            }
    return best
