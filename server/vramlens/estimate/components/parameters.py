"""Parameter counts and the bytes they take on a rank (`Params`): the base model, quantized weights, adapters, a
vision tower."""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimate.components.adapters import (
    VECTOR_METHODS,
    method_adapter_params,
    method_frozen_bytes,
    vector_adapter_params,
    vera_projection_params,
)
from vramlens.estimate.components.common import DTYPE_BYTES, fused_groups
from vramlens.estimate.components.experts import (
    expert_parameters,
    experts_adaptable,
    fused_experts,
    kbit_experts,
    lora_linears,
)
from vramlens.estimate.components.optimizer import QGALORE_GROUP, low_rank_int8_params
from vramlens.estimate.components.quant import mixer_linear_params
from vramlens.estimate.components.t5 import keep_in_fp32_params
from vramlens.estimate.components.trained import trained_params
from vramlens.estimate.components.vision import vision_adapter_params, vision_gets_gradients, vision_linear_params
from vramlens.estimate.shapes import shapes, targeted
from vramlens.resolved import ResolvedPlan


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
    if rp.quant_type in ("gptq", "awq") and rp.quant_bits in (4, 8):
        # an 8-bit GPTQ checkpoint (`-GPTQ-Int8`) packs bytes the same way, with an 8-bit zero point per group
        return rp.quant_bits / 8, (2 + rp.quant_bits / 8) / GPTQ_GROUP
    if rp.quant_type == "fp8" and rp.quant_bits == 8:
        # transformers' fine-grained FP8 checkpoints (quantizers/quantizer_finegrained_fp8.py): a byte per weight
        # and an fp32 scale per 128 × 128 block
        return 1.0, 4 / (128 * 128)
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
    elif rp.adapter_method:
        adapter = method_adapter_params(rp)  # AdaLoRA, LoHa, LoKr, OFT, BOFT, FourierFT, Bone, adapters, ReFT
    elif not full:
        # LoRA: r·(in + out) per targeted linear (DoRA adds a magnitude vector of `out`); where the modelling code
        # computes q|k|v (Phi-3: also gate|up) with one linear, the targets among them are one adapter over it
        fused = fused_groups(rp)
        done: set[tuple[str, ...]] = set()
        for lin in lora_linears(rp):
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
    if rp.quant_bits and fused_experts(rp) and not kbit_experts(rp):
        # transformers 5 quantizes nn.Linear modules only (5.24 integrations/bitsandbytes.py
        # `replace_with_bnb_linear`, quantizers/quantizer_bnb_4bit.py `param_needs_quantization`): the 3-D routed
        # experts stay in the weight dtype, and prepare_model_for_kbit_training upcasts them to fp32 with the rest
        # (unless they are quantized on load: `kbit_experts`, packed and with constants as a 4/8-bit linear's)
        linear_params -= sum(l.params for l in s.linears if l.expert)
    if rp.quant_bits:
        linear_params += mixer_linear_params(rp)  # mixers' nn.Linear modules the block shapes do not list
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
        # modules_to_save: PEFT deep-copies each named module and trains the copy, the original kept beside it
        # (peft 0.21.2 src/peft/utils/other.py `ModulesToSaveWrapper.update` → `copy.deepcopy(self.original_module)`).
        # The copy has the original's dtype when it is wrapped (`autocast_adapter_dtype` upcasts adapter layers
        # only): the weight dtype, or fp32 after prepare_model_for_kbit_training's upcast, which TRL casts back to
        # 16-bit for embeddings and heads (`kbit_embeddings_16bit`). A head tied to the embeddings is copied too: the
        # copy of `lm_head` holds its own vocabulary × hidden weight, no longer tied.
        copy_b = 4 if rp.quant_bits and rp.kbit_upcast and not rp.kbit_embeddings_16bit else wb
        for name in rp.modules_to_save:
            n = (s.lm_head_params or s.embed_params) if name == "lm_head" else s.embed_params if name == "embed" else 0
            saved += n
            saved_bytes += n * copy_b

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
                (l.in_features * rp.lora_r * adapter_b for l in lora_linears(rp)),
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
        if rp.adapter_method:
            adapted = max(len(targeted(arch, rp.lora_targets, experts_adaptable(rp))), 1)
            largest = max(saved_bytes, adapter * adapter_b // (adapted * max(arch.layers, 1)))
            frozen_bytes += method_frozen_bytes(rp)  # BOFT's permutations, AdaLoRA's rank allocator
    if arch.vision_params:  # a VLM's vision tower + projector, beside the language model
        total += arch.vision_params
        grads = vision_gets_gradients(rp)
        if (full or rp.vision_full) and not rp.vision_frozen and grads:
            # beside LoRA (ms-swift `lora_llm`) the tower keeps the loaded weight dtype: only adapter layers are
            # upcast (peft 0.21.2 `autocast_adapter_dtype`)
            trainable += arch.vision_params
            trainable_bytes += arch.vision_params * (tb if full else wb)
        elif rp.quant_bits:
            # transformers' bitsandbytes quantizer converts every nn.Linear but the LM head (5.24 quantizers/base.py
            # `get_keys_to_not_convert`): the tower's linears are 4-bit too; the rest follows the k-bit upcast
            tower_linears = vision_linear_params(arch)
            packed, consts = quantized_bytes_per_param(rp)
            quantized += int(tower_linears * packed)
            quant_consts += int(tower_linears * consts)
            frozen_bytes += (arch.vision_params - tower_linears) * (4 if rp.kbit_upcast else wb)
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


def head_quantized(rp: ResolvedPlan) -> bool:
    """The LM head is a 4/8-bit linear: the plan quantizes it (litgpt) and it is not the tied embedding."""
    return bool(rp.quant_bits and rp.quant_lm_head and shapes(rp.arch).lm_head_params)
