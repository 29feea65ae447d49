"""A VLM's vision tower: its linears, the LoRA adapters on them, and what it keeps for backward."""

from __future__ import annotations

import math

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.resolved import ResolvedPlan

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
    if (rp.vision_frozen and rp.framework in FREEZES_VISION) or rp.vision_full or not rp.tower_adapters:
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
    trained = (rp.peft == "none" or rp.vision_full) and not rp.vision_frozen and vision_gets_gradients(rp)
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
