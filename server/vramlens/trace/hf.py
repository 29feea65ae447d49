"""The real-library backend: one training step of `transformers`' own model, real `peft` adapters and
bitsandbytes 4-bit layers, the model's own loss and torch's optimizers, under fake tensors.

The model is built with `AutoModelForCausalLM.from_config` on the `meta` device from a `config.json`-shaped
configuration of the plan's architecture, then moved with `to_empty()` into the fake mode (the engine does
that). It has the same interface as `model.SyntheticModel` for the engine: `model(ids, labels, mark=...)`
returns {"loss", "logits"}, `mark("loss")` fires when the LM head starts and `mark("bwd")` when backward
leaves it.

Shims (each checked fake == real on CPU tensors in tests/trace/test_hf_shims.py):
- packed-sequence detection: transformers' `masking_utils.find_packed_sequence_indices` treats any fake tensor
  as "tracing" and returns a packed-sequence mask (transformers 5.x `masking_utils.py`), which makes the
  attention mask explicit. For the batch traced here (position ids 0..s-1 in every row) a real tensor gives
  `None`; `real_packed_sequence_indices` answers that without reading data.
- dropout: `F.dropout` on CPU keeps a mask in the input's dtype (aten `native_dropout`'s CPU kernel), CUDA
  keeps a 1-byte bool mask (`aten/src/ATen/native/cuda/Dropout.cu`). `cuda_dropout` is an autograd function
  that keeps a bool mask, as `native_dropout` on CUDA does.
- tied embeddings: `to_empty()` gives each module a new Parameter, so `tie_weights()` is called again.
- flash_attention_2 / flash_attention_3 have no CPU kernel: `flash_stand_in` is registered in
  `AttentionInterface` under a name of its own and keeps what flash-attn keeps (q, k, v, output and an fp32
  logsumexp) by calling SDPA's CPU flash kernel with native grouped K/V.
- SDPA called directly by the modelling code (Falcon), outside `AttentionInterface`: the CPU's kernel
  choice can differ from CUDA's (dropout sends the CPU to math, CUDA's fused kernels drop inside);
  `sdpa_as_cuda_kernel` runs the kernel CUDA's dispatcher would pick (`cuda_sdpa_backend`). Falcon-7B's call
  (multi-query K/V without `enable_gqa`, an explicit mask) takes math on both.
- value heads of another size than the query heads (MLA: DeepSeek-V2/V3), through `AttentionInterface` or not: the
  CPU runs math (the s×s probabilities per head), CUDA its memory-efficient kernel; `efficient_attention_as_cuda`
  runs that kernel's own aten op, given a CPU kernel (`install_efficient_attention_on_cpu`).
- grouped_mm in fp32/fp16 (a MoE model's experts under AMP, whose weights stay fp32: grouped_mm is no autocast op,
  and transformers casts the input to the weight's dtype, 5.24 integrations/moe.py `_grouped_mm`): CUDA runs it
  (torch aten/src/ATen/native/cuda/GroupedBlas.cpp `_grouped_mm_cuda`: the CUTLASS kernel for bf16, else
  `_grouped_mm_fallback`, one mm per group into the output, in the inputs' dtype), but torch 2.13's meta function
  (`_meta_registrations.py` `_meta_grouped_mm_common`) accepts bf16 only. `install_grouped_mm_as_cuda` gives the
  fake mode the output CUDA's fallback returns for other dtypes (`_create_grouped_mm_output_tensor`, the meta
  function's own).
- bitsandbytes 4-bit: `Params4bit` cannot wrap a fake tensor; `replace_with_bnb_linear` runs on the meta model
  and `quantize_4bit_fake` keeps the packed weight as a plain Parameter carrying `.quant_state` (see there).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata as md
import math
import os
import sys
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from vramlens.knowledge.models import BUILT_AS_WRITTEN
from vramlens.trace.config import StepConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# Families whose Hugging Face config takes the Llama-style keys below (model_type = family).
DECODER_FAMILIES = {
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "olmo2",
    "phi3",
    "mixtral",
    "qwen3_moe",
    "gpt2",
    "gpt_neox",
    "falcon",
    "phi",
    "gpt_bigcode",
    "bloom",
    "glm",
    "glm4",
}
# Encoder families built as transformers' `AutoModelForSequenceClassification` (the head a `block: encoder` plan
# estimates: no vocabulary logits, a hidden × labels classifier; `task_head` sequence-classification).
ENCODER_FAMILIES = {"bert", "roberta", "deberta-v2"}
# config.json keys of the encoder families beyond the shapes `ModelArch` holds. type_vocab_size: BERT 2, RoBERTa 1
# (hf bert-base-uncased / roberta-base config.json); DeBERTa-v3 (hf microsoft/deberta-v3-base config.json):
# relative attention over 256 log buckets with shared keys, content→position and position→content terms, a
# LayerNorm on the relative embeddings, no absolute positions, no token types, a GELU context pooler.
ENCODER_CONFIG = {
    "bert": {"type_vocab_size": 2},
    "roberta": {"type_vocab_size": 1},
    "deberta-v2": {
        "type_vocab_size": 0,
        "relative_attention": True,
        "position_buckets": 256,
        "max_relative_positions": -1,
        "share_att_key": True,
        "pos_att_type": ["p2c", "c2p"],
        "norm_rel_ebd": "layer_norm",
        "position_biased_input": False,
        "pooler_hidden_size": None,
        "pooler_dropout": 0,
        "pooler_hidden_act": "gelu",
        "layer_norm_eps": 1e-7,
    },
}
# Module names of the encoder blocks' linears (a full-name regex each: BERT/RoBERTa's attention output and MLP
# output are both `output.dense`, which a name suffix cannot tell apart): transformers 5.24 models/bert/
# modeling_bert.py (BertSelfAttention query/key/value, BertSelfOutput, BertIntermediate, BertOutput), roberta the
# same, deberta_v2 (DisentangledSelfAttention query_proj/key_proj/value_proj).
ENCODER_LINEAR = {
    "q": r"attention\.self\.(query|query_proj)",
    "k": r"attention\.self\.(key|key_proj)",
    "v": r"attention\.self\.(value|value_proj)",
    "o": r"attention\.output\.dense",
    "fc1": r"intermediate\.dense",
    "fc2": r"layer\.\d+\.output\.dense",
}
# Encoder-decoder families built as transformers' sequence-to-sequence LM (`AutoModelForSeq2SeqLM`): T5 and Flan-T5
# (transformers 5.24 models/t5/modeling_t5.py T5ForConditionalGeneration)
SEQ2SEQ_FAMILIES = {"t5"}
# MoE families whose transformers 5 experts run with grouped_mm (the eager per-expert loop is data-dependent);
# Llama-4's `Llama4TextExperts` (transformers 5.24 models/llama4/modeling_llama4.py) runs every expert on every token
# with bmm, which is not data-dependent either
MOE_FAMILIES = {
    *("mixtral", "qwen3_moe", "jamba", "qwen3_next", "qwen3_5_moe_text", "gpt_oss", "deepseek_v3", "llama4_text"),
    "lfm2_moe",
}
# Families built from the config.json the plan keeps (`ModelArch.hf_config_json`) with transformers' own config class:
# their layer patterns and mixer sizes are in no other field (knowledge/models.py `BUILT_AS_WRITTEN`)
AS_WRITTEN_FAMILIES = BUILT_AS_WRITTEN
HF_LINEAR = {
    "q": "q_proj",
    "k": "k_proj",
    "v": "v_proj",
    "o": "o_proj",
    "gate": "gate_proj",
    "up": "up_proj",
    "down": "down_proj",
    "lm_head": "lm_head",
    "embed": "embed_tokens",
}
PHI3_LINEAR = {
    "q": "qkv_proj",
    "k": "qkv_proj",
    "v": "qkv_proj",
    "o": "o_proj",
    "gate": "gate_up_proj",
    "up": "gate_up_proj",
    "down": "down_proj",
    "lm_head": "lm_head",
    "embed": "embed_tokens",
}
# Module names of the GPT-2/NeoX/Falcon/Phi-2/BLOOM families (peft matches a target against the end of a module's name):
# transformers 5.24 models/gpt2 (Conv1D c_attn = q|k|v, c_proj twice), gpt_neox and falcon (query_key_value,
# dense, dense_h_to_4h, dense_4h_to_h), phi (q/k/v_proj, dense, fc1, fc2).
# GLM and GLM-4 (transformers 5.24 models/glm/modeling_glm.py, models/glm4/modeling_glm4.py): separate q/k/v/o,
# Phi-3's fused gate_up_proj
GLM_LINEAR = {**HF_LINEAR, "gate": "gate_up_proj", "up": "gate_up_proj"}
FAMILY_LINEAR = {
    "phi3": PHI3_LINEAR,
    "glm": GLM_LINEAR,
    "glm4": GLM_LINEAR,
    "gpt2": {
        "q": "c_attn",
        "k": "c_attn",
        "v": "c_attn",
        "o": "attn.c_proj",
        "fc1": "c_fc",
        "fc2": "mlp.c_proj",
        "lm_head": "lm_head",
        "embed": "wte",
    },
    "gpt_neox": {
        "q": "query_key_value",
        "k": "query_key_value",
        "v": "query_key_value",
        "o": "attention.dense",
        "fc1": "dense_h_to_4h",
        "fc2": "dense_4h_to_h",
        "lm_head": "embed_out",
        "embed": "embed_in",
    },
    "falcon": {
        "q": "query_key_value",
        "k": "query_key_value",
        "v": "query_key_value",
        "o": "self_attention.dense",
        "fc1": "dense_h_to_4h",
        "fc2": "dense_4h_to_h",
        "lm_head": "lm_head",
        "embed": "word_embeddings",
    },
    "phi": {
        "q": "q_proj",
        "k": "k_proj",
        "v": "v_proj",
        "o": "self_attn.dense",
        "fc1": "fc1",
        "fc2": "fc2",
        "lm_head": "lm_head",
        "embed": "embed_tokens",
    },
    # models/t5: T5Attention q, k, v, o (self-attention and the decoder's cross-attention alike), T5DenseActDense
    # wi → wo (relu) or T5DenseGatedActDense wi_0 (gelu_new) · wi_1 → wo (gated-gelu), the embedding `shared`
    "t5": {
        "q": "q",
        "k": "k",
        "v": "v",
        "o": "o",
        "gate": "wi_0",
        "up": "wi_1",
        "down": "wo",
        "fc1": "wi",
        "fc2": "wo",
        "lm_head": "lm_head",
        "embed": "shared",
    },
    # models/bloom: query_key_value (q|k|v interleaved per head), self_attention.dense, dense_h_to_4h, dense_4h_to_h
    "bloom": {
        "q": "query_key_value",
        "k": "query_key_value",
        "v": "query_key_value",
        "o": "self_attention.dense",
        "fc1": "dense_h_to_4h",
        "fc2": "dense_4h_to_h",
        "lm_head": "lm_head",
        "embed": "word_embeddings",
    },
    # models/mamba2 (transformers 5.24 modeling_mamba2.py `Mamba2Mixer`): in_proj, out_proj and nothing else; peft
    # 0.21.2 refuses LoRA on out_proj (src/peft/tuners/tuners_utils.py `_check_lora_target_modules_mamba`)
    "mamba2": {"in_proj": "in_proj", "lm_head": "lm_head", "embed": "embeddings"},
    # models/lfm2 (transformers 5.24 modeling_lfm2.py): Lfm2Attention q_proj, k_proj, v_proj, out_proj; Lfm2MLP
    # w2(silu(w1(x)) * w3(x)); the short convolutions' in_proj / out_proj are no canonical target (LFM2-MoE's dense
    # `Lfm2MoeMLP` the same names)
    **dict.fromkeys(
        ("lfm2", "lfm2_moe"),
        {
            "q": "q_proj",
            "k": "k_proj",
            "v": "v_proj",
            "o": "self_attn.out_proj",
            "gate": "w1",
            "up": "w3",
            "down": "w2",
            "lm_head": "lm_head",
            "embed": "embed_tokens",
        },
    ),
    # models/granitemoehybrid (transformers 5.24 modeling_granitemoehybrid.py): GraniteMoeHybridAttention q_proj,
    # k_proj, v_proj, o_proj; the shared MLP `GraniteMoeHybridMLP` input_linear (gate|up, chunked) → output_linear;
    # the Mamba-2 mixers' in_proj / out_proj are no canonical target
    "granitemoehybrid": {
        "q": "q_proj",
        "k": "k_proj",
        "v": "v_proj",
        "o": "o_proj",
        "gate": "input_linear",
        "up": "input_linear",
        "down": "output_linear",
        "lm_head": "lm_head",
        "embed": "embed_tokens",
    },
    # models/gpt_bigcode: nn.Linear c_attn = q|k|v (one K/V head under multi-query), c_proj twice, c_fc
    "gpt_bigcode": {
        "q": "c_attn",
        "k": "c_attn",
        "v": "c_attn",
        "o": "attn.c_proj",
        "fc1": "c_fc",
        "fc2": "mlp.c_proj",
        "lm_head": "lm_head",
        "embed": "wte",
    },
    # models/nemotron_h (transformers 5.24 modeling_nemotron_h.py): NemotronHAttention q_proj, k_proj, v_proj, o_proj;
    # the ungated NemotronHMLP (and a MoE's shared expert) up_proj → relu² → down_proj; the Mamba-2 mixers' in_proj
    # (peft refuses out_proj); a latent MoE's fc1_latent_proj / fc2_latent_proj; the embedding `embeddings`
    "nemotron_h": {
        "q": "q_proj",
        "k": "k_proj",
        "v": "v_proj",
        "o": "o_proj",
        "fc1": "up_proj",
        "fc2": "down_proj",
        "in_proj": "in_proj",
        "fc1_latent": "fc1_latent_proj",
        "fc2_latent": "fc2_latent_proj",
        "lm_head": "lm_head",
        "embed": "embeddings",
    },
    # models/nemotron (modeling_nemotron.py): q_proj, k_proj, v_proj, o_proj; the ungated NemotronMLP up_proj → relu²
    # → down_proj
    "nemotron": {
        "q": "q_proj",
        "k": "k_proj",
        "v": "v_proj",
        "o": "o_proj",
        "fc1": "up_proj",
        "fc2": "down_proj",
        "lm_head": "lm_head",
        "embed": "embed_tokens",
    },
}
DISTRIBUTIONS = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "trl", "torchtune")


def versions() -> dict[str, str | None]:
    """Installed versions in this interpreter, from the distributions' metadata (nothing imported)."""
    out: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def unsupported(cfg: StepConfig) -> str | None:
    """Why this step cannot run on the real libraries here (None: it can)."""
    v = versions()
    if v["transformers"] is None:
        return "transformers is not installed in the trace interpreter"
    if cfg.peft in ("lora", "dora", "qlora", "ia3", "vera") and v["peft"] is None:
        return "peft is not installed in the trace interpreter"
    if cfg.quant_bits is not None and (cfg.quant_bits != 4 or v["bitsandbytes"] is None):
        return (
            "bitsandbytes is not installed in the trace interpreter"
            if v["bitsandbytes"] is None
            else "8-bit base weights (LLM.int8 outlier handling is data-dependent)"
        )
    if not (
        cfg.arch.family in AS_WRITTEN_FAMILIES
        and bool(cfg.arch.hf_config_json)
        or cfg.arch.family in DECODER_FAMILIES
        and cfg.arch.block == "decoder"
        or cfg.arch.family in ENCODER_FAMILIES
        and cfg.arch.block == "encoder"
        or cfg.arch.family in SEQ2SEQ_FAMILIES
        and cfg.arch.block == "encoder-decoder"
    ):
        return f"architecture `{cfg.arch.family}` has no real-library mapping"
    if cfg.quant_bits is not None and cfg.arch.block == "encoder":
        # from_pretrained quantizes a *ForSequenceClassification's classifier too (transformers 5.24
        # quantizers/base.py `get_keys_to_not_convert` names `classifier.bias`, which matches no module), and peft's
        # SEQ_CLS task deep-copies it into modules_to_save: a Params4bit copy, which cannot be made of a meta tensor
        return "4-bit encoders (peft copies the quantized classifier into modules_to_save)"
    if cfg.arch.is_moe and cfg.arch.family not in MOE_FAMILIES:
        return f"MoE family `{cfg.arch.family}` (only grouped_mm experts are traced)"
    if cfg.litgpt:
        return "litgpt's model is not transformers' model"
    if cfg.loss == "litgpt" or cfg.loss == "fused":
        return f"loss `{cfg.loss}` has no importable implementation here"
    if cfg.loss == "chunked" and is_seq2seq(cfg):
        # trl 1.16 trainer/utils.py `add_fused_lm_head`: the patched forward calls the backbone with the input ids
        # alone and shifts the labels by one (a causal LM's loss); T5's decoder gets no input ids that way
        return f"TRL's fused LM head (loss_type nll) is for causal LMs, not `{cfg.arch.family}`'s encoder-decoder"
    if cfg.loss == "chunked" and v["trl"] is None:
        return "TRL's chunked loss: trl is not installed in the trace interpreter"
    if cfg.quant_keeps_input or cfg.quant_from_fp16 or cfg.quant_lm_head:
        return "bitsandbytes/Lightning variant without a real implementation here"
    if cfg.master_weights:
        return "fp32 master weights (DeepSpeed/Megatron optimizer) are not in transformers"
    return None


def hf_config(cfg: StepConfig):
    """The transformers config of the plan's architecture: the shapes the plan resolved from the model's
    config.json (`ModelArch`), every other key at the family's config defaults (`AutoConfig.for_model`), so the
    model class, its attention, norms, RoPE and soft-capping are the family's own."""
    from transformers import AutoConfig

    a = cfg.arch
    if is_encoder(cfg):
        return encoder_config(cfg)
    if is_seq2seq(cfg):
        return t5_config(cfg)
    if a.family in AS_WRITTEN_FAMILIES and a.hf_config_json:
        import json

        written = {k: v for k, v in json.loads(a.hf_config_json).items() if k != "model_type"}
        written.update(use_cache=False)
        return AutoConfig.for_model(a.family, **written)
    kw = dict(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.n_kv_heads,
        head_dim=a.d_head,
        tie_word_embeddings=a.tied_embeddings,
        use_cache=False,
        max_position_embeddings=max(a.max_position or 0, cfg.seq_len),
    )
    if a.family not in ("phi3", "gpt2", "gpt_neox", "falcon", "phi", "gpt_bigcode", "bloom"):
        kw["attention_bias"] = a.attn_bias
    if a.family in ("llama", "olmo2"):
        kw["mlp_bias"] = a.mlp_bias
    if a.family in ("gpt2", "gpt_bigcode"):
        kw["n_inner"] = a.intermediate  # GPT2Config's MLP width (attribute_map covers the rest)
    if a.family == "gpt_bigcode":
        kw["multi_query"] = a.n_kv_heads == 1  # GPTBigCodeConfig: one K/V head or all of them
    if a.family == "falcon":
        # falcon-7b: multi-query (one K/V head), parallel attention + MLP; the 40B/180B layout for grouped K/V
        kw.update(
            num_kv_heads=a.n_kv_heads,
            multi_query=a.n_kv_heads == 1,
            new_decoder_architecture=a.n_kv_heads not in (1, a.heads),
            bias=a.attn_bias,
        )
        # FalconConfig.head_dim is a read-only property (hidden_size // num_attention_heads, transformers 5.24
        # models/falcon/configuration_falcon.py): setting it raises
        kw.pop("head_dim")
    if a.family == "bloom":
        # BloomConfig (transformers 5.24 models/bloom/configuration_bloom.py): n_layer / n_head through its
        # attribute_map, no intermediate_size (the MLP is 4 × hidden), no head_dim or K/V head count, ALiBi positions
        for key in ("intermediate_size", "num_key_value_heads", "head_dim", "max_position_embeddings"):
            kw.pop(key)
    if a.is_moe:
        kw.update(num_local_experts=a.num_experts, num_experts=a.num_experts, num_experts_per_tok=a.experts_per_token)
        if a.family == "mixtral" and a.moe_intermediate:
            kw["intermediate_size"] = a.moe_intermediate
        elif a.moe_intermediate:
            kw["moe_intermediate_size"] = a.moe_intermediate
    if is_vlm(cfg):
        return vlm_config(cfg, kw)
    return AutoConfig.for_model(a.family, **kw)


# Vision-language models the real backend builds whole: Gemma-3 4B/12B/27B, whose config AutoModelForCausalLM maps to
# Gemma3ForConditionalGeneration (transformers 5.24 models/auto/modeling_auto.py), SigLIP tower + projector included
VLM_FAMILIES = {"gemma3_text": "gemma3"}


def is_vlm(cfg: StepConfig) -> bool:
    return bool(cfg.arch.vision_params) and cfg.arch.family in VLM_FAMILIES


def image_side(cfg: StepConfig) -> int:
    """The image's side in pixels (square images of `image_patches` patches)."""
    return math.isqrt(cfg.arch.image_patches) * cfg.arch.vision_patch


def image_token_id(cfg: StepConfig) -> int:
    """Gemma-3's image soft token (config.json `image_token_index` 262144, inside the 262 208-row vocabulary);
    the vocabulary's last id for smaller vocabularies."""
    return 262144 if cfg.arch.vocab > 262144 else cfg.arch.vocab - 1


def vlm_config(cfg: StepConfig, text: dict):
    """Gemma3Config (transformers 5.24 models/gemma3/configuration_gemma3.py) of the plan's architecture: the language
    model's keys as `text_config`, the SigLIP tower (models/siglip/configuration_siglip.py, no pooling head) as
    `vision_config`, `mm_tokens_per_image` tokens per image after the projector's average pool."""
    from transformers import AutoConfig

    a = cfg.arch
    vision = dict(
        model_type="siglip_vision_model",
        hidden_size=a.vision_hidden,
        intermediate_size=a.vision_intermediate,
        num_hidden_layers=a.vision_layers,
        num_attention_heads=a.vision_heads,
        patch_size=a.vision_patch,
        image_size=image_side(cfg),
        vision_use_head=False,
    )
    return AutoConfig.for_model(
        VLM_FAMILIES[a.family],
        text_config=dict(model_type=a.family, **text),
        vision_config=vision,
        mm_tokens_per_image=a.image_tokens,
        image_token_index=image_token_id(cfg),
        tie_word_embeddings=a.tied_embeddings,
    )


def is_encoder(cfg: StepConfig) -> bool:
    return cfg.arch.block == "encoder"


def is_seq2seq(cfg: StepConfig) -> bool:
    return cfg.arch.family in SEQ2SEQ_FAMILIES


def encoder_config(cfg: StepConfig):
    """An encoder's transformers config: the shapes of `ModelArch`, the family's keys (`ENCODER_CONFIG`), two labels
    and single-label classification (what `*ForSequenceClassification` infers from integer labels on its first call;
    stated up front, DeBERTa's inference selects the labelled rows with a data-dependent `nonzero`)."""
    from transformers import AutoConfig

    a = cfg.arch
    kw = dict(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        max_position_embeddings=max(a.max_position or 0, cfg.seq_len),
        num_labels=2,
        problem_type="single_label_classification",
    )
    kw.update(ENCODER_CONFIG[a.family])
    if "pooler_hidden_size" in kw:
        kw["pooler_hidden_size"] = a.hidden
    return AutoConfig.for_model(a.family, **kw)


def t5_config(cfg: StepConfig):
    """T5Config of the plan's architecture (transformers 5.24 models/t5/configuration_t5.py): d_model, d_ff, d_kv,
    num_heads, num_layers (the encoder's) and num_decoder_layers, feed_forward_proj "relu" (T5 v1.0) or "gated-gelu"
    (T5 v1.1, Flan-T5: gelu_new). `tie_word_embeddings` as in the model's config.json: T5Config keeps it only as
    `scale_decoder_outputs` and always ties encoder and decoder embeddings to `shared`; whether the LM head shares
    it too is decided when the weights load (`untie_t5_head`). Dropout stays at the config's default 0.1, as in the
    published configs, as is `decoder_start_token_id` 0 (the pad token), which `_shift_right` reads."""
    from transformers import AutoConfig

    a = cfg.arch
    gated = a.mlp in ("geglu", "swiglu")
    return AutoConfig.for_model(
        a.family,
        vocab_size=a.vocab,
        d_model=a.hidden,
        d_ff=a.intermediate,
        d_kv=a.d_head,
        num_heads=a.heads,
        num_layers=a.encoder_layers or a.layers,
        num_decoder_layers=a.layers,
        feed_forward_proj="gated-gelu" if gated else "relu",
        tie_word_embeddings=a.tied_embeddings,
        decoder_start_token_id=0,
        use_cache=False,
    )


def untie_t5_head(model) -> None:
    """T5 v1.1 / Flan-T5 checkpoints hold `lm_head.weight` beside `shared.weight` with other values, and
    `from_pretrained` then does not tie them (transformers 5.24 modeling_utils.py `PreTrainedModel.tie_weights`:
    "both are present in the checkpoints with different values, so we will NOT tie them", dropping the pair from
    `all_tied_weights_keys`); T5Config itself always asks for the tie. The model built from the config gets the
    head of its own the loaded model has."""
    model.all_tied_weights_keys.pop("lm_head.weight", None)
    w = model.lm_head.weight
    model.lm_head.weight = nn.Parameter(torch.empty(w.shape, dtype=w.dtype, device=w.device))


# What transformers builds for each kind of model: its auto class, that class's model mapping, and peft's task type
# (an encoder's sequence classification is "SEQ_CLS": peft's PeftModelForSequenceClassification trains the
# `classifier` / `score` head in full beside the adapters, peft 0.21 peft_model.py)
MODEL_KINDS = {
    "classifier": ("AutoModelForSequenceClassification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING", "SEQ_CLS"),
    "seq2seq": ("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING", "SEQ_2_SEQ_LM"),
    "causal": ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING", "CAUSAL_LM"),
}


def model_kind(cfg: StepConfig) -> str:
    return "classifier" if is_encoder(cfg) else "seq2seq" if is_seq2seq(cfg) else "causal"


def model_mapping(cfg: StepConfig):
    """transformers' auto mapping of the family's model class (`MODEL_KINDS`)."""
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, MODEL_KINDS[model_kind(cfg)][1])


def model_class(cfg: StepConfig):
    import transformers

    return getattr(transformers, MODEL_KINDS[model_kind(cfg)][0])


def peft_task(cfg: StepConfig) -> str:
    return MODEL_KINDS[model_kind(cfg)][2]


FLASH_STAND_IN = "vramlens_fa_stand_in"  # no "flash" in it: transformers would look for a flash kernel


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def supports_sdpa(cfg: StepConfig) -> bool:
    """Whether the family's model class runs SDPA (transformers 5 Gemma-2 does not: `_supports_sdpa = False`
    for its attention soft-capping; DeBERTa-v2's disentangled attention is its own code and the class leaves
    `_supports_sdpa` at PreTrainedModel's False). Without it, transformers' default is eager attention."""
    cls = model_mapping(cfg).get(type(hf_config(cfg)), None)
    return bool(getattr(cls, "_supports_sdpa", True))


def attn_implementation(cfg: StepConfig, rp_attn: str) -> str:
    """The name the model is built with; flash attention is switched to the stand-in after construction on
    transformers 4.x (`use_flash_stand_in_4x`); SDPA becomes eager where the model class has no SDPA path."""
    if rp_attn in ("flash_attention_2", "flash_attention_3"):
        if transformers_major() < 5:
            return "sdpa"
        register_flash_stand_in()
        return FLASH_STAND_IN
    if rp_attn == "eager" or not supports_sdpa(cfg):
        return "eager"
    return "sdpa"


def use_flash_stand_in_4x(model) -> None:
    """transformers 4.4x: `ALL_ATTENTION_FUNCTIONS` is a plain dict and `_update_causal_mask` passes no mask to
    "flash_attention_2" when nothing is padded (e.g. transformers 4.48 `models/mistral/modeling_mistral.py`): the
    stand-in takes that entry and the model's config is switched to it after construction (building with it
    would look for the flash-attn package)."""
    from transformers import modeling_utils

    modeling_utils.ALL_ATTENTION_FUNCTIONS["flash_attention_2"] = flash_stand_in
    model.config._attn_implementation = "flash_attention_2"


# -- shims --------------------------------------------------------------------------------------------

# The `install_*` shims below patch a library for the whole process, and every model build calls them.
# `once_per_process` runs each the first time and keeps what it returns: the `torch.library.Library` holding a
# kernel registration (torch 2.13 torch/library.py: a finalizer deregisters its kernels when it is collected).
_INSTALLED: dict[str, object] = {}


def once_per_process(install: Callable[[], object]) -> Callable[[], None]:
    @functools.wraps(install)
    def once() -> None:
        if install.__name__ not in _INSTALLED:
            _INSTALLED[install.__name__] = install()

    return once


def real_packed_sequence_indices(position_ids: torch.Tensor):
    """What `find_packed_sequence_indices` returns for a real tensor of position ids 0..s-1 in every row
    (the batch this backend traces): None, i.e. no packed sequences."""
    return None


@once_per_process
def install_packed_sequence_shim() -> None:
    try:
        from transformers import masking_utils
    except ImportError:  # transformers < 4.53: no packed-sequence detection
        return

    original = masking_utils.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids):
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(position_ids, FakeTensor):
            return real_packed_sequence_indices(position_ids)
        return original(position_ids)

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices


class CudaDropout(torch.autograd.Function):
    """`native_dropout` as on CUDA: the output plus a 1-byte bool mask saved for backward."""

    @staticmethod
    def forward(ctx, x, p: float):
        mask = torch.empty(x.shape, dtype=torch.bool, device=x.device).bernoulli_(1.0 - p)
        ctx.save_for_backward(mask)
        ctx.scale = 1.0 / (1.0 - p)
        # one output tensor, scaled in place: CUDA's fused kernel writes the output and the mask and allocates
        # nothing else (`x * mask * scale` would hold an output-sized temporary beside them)
        return (x * mask).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask * ctx.scale, None


def cuda_dropout(x, p: float = 0.5, training: bool = True, inplace: bool = False):
    if not training or p == 0.0:
        return x
    return CudaDropout.apply(x, p)


class _DropoutAsCuda(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        return cuda_dropout(x, self.p, self.training)


def dropouts_as_cuda(model: nn.Module) -> int:
    """Replace every `nn.Dropout` with p > 0 by the CUDA-sized dropout; returns how many."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout and child.p > 0:
                setattr(parent, name, _DropoutAsCuda(child.p))
                n += 1
    return n


class NewGeluAsCuda(nn.Module):
    """transformers' NewGELUActivation (`0.5 * x * (1 + tanh(√(2/π) · (x + 0.044715 · pow(x, 3))))`, transformers
    5.24 activations.py) under CUDA's autocast, which runs `pow` in fp32 (torch 2.13 aten/src/ATen/autocast_mode.h
    `AT_FORALL_FP32`: `pow`); CPU autocast leaves it in 16-bit. The cube, and what follows from it, is fp32 under
    autocast on CPU as on CUDA; outside autocast the module is upstream's."""

    def forward(self, x):
        cube_in = (
            x.float() if torch.is_autocast_enabled(x.device.type) and x.dtype in (torch.bfloat16, torch.float16) else x
        )
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(cube_in, 3.0))))


def activations_as_cuda(model: nn.Module) -> int:
    """Replace every NewGELUActivation by `NewGeluAsCuda`; returns how many."""
    from transformers.activations import NewGELUActivation

    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is NewGELUActivation:
                setattr(parent, name, NewGeluAsCuda())
                n += 1
    return n


def flash_stand_in(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """flash_attention_2 on CPU: SDPA's flash kernel (saves q, k, v, output and an fp32 logsumexp, like
    flash-attn's `_flash_attn_forward`), causal, grouped K/V read natively; output in (b, s, h, d)."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    rep = query.shape[1] // key.shape[1]
    out = F.scaled_dot_product_attention(
        query, key, value, dropout_p=dropout, scale=scaling, is_causal=causal, enable_gqa=rep > 1
    )
    return out.transpose(1, 2).contiguous(), None


@once_per_process
def install_sdpa_dropout_as_cuda() -> None:
    """SDPA with attention dropout (GPT-2's `attn_pdrop` 0.1) on CPU takes the math kernel, which materialises the
    attention probabilities and a dropout mask per layer; on CUDA the flash and memory-efficient kernels apply the
    dropout inside and save only q, k, v, the output, the logsumexp and an RNG seed/offset
    (aten `_scaled_dot_product_flash_attention` / `_efficient_attention` with `dropout_p`). The wrapper registered for
    "sdpa" in the trace worker calls transformers' SDPA with dropout 0 when the model asks for dropout: the same
    saved tensors as CUDA's kernels (the values differ, which the byte count does not read). transformers before
    4.50 has no `AttentionInterface` to register it with: nothing is installed there (the families traced on those
    releases run SDPA without attention dropout)."""
    try:
        from transformers import AttentionInterface
    except ImportError:
        return
    from transformers.integrations import sdpa_attention

    original = sdpa_attention.sdpa_attention_forward

    def sdpa_as_cuda(module, query, key, value, attention_mask, dropout=0.0, **kwargs):
        with BiasGradAsCuda():
            return original(module, query, key, value, attention_mask, dropout=0.0, **kwargs)

    AttentionInterface.register("sdpa", sdpa_as_cuda)


@once_per_process
def install_autocast_softmax_as_cuda() -> torch.library.Library:
    """CUDA's autocast runs `softmax` in fp32 (the "ops that can autocast to float32" list, `fp32_set_opt_dtype`:
    a 16-bit input without an explicit dtype gets dtype=float32, aten/src/ATen/autocast_mode.cpp, torch 2.13); CPU's
    autocast leaves it in the input's dtype. Attention that takes its softmax without an upcast (BERT's eager path,
    DeBERTa-v2's disentangled attention) then keeps an fp32 softmax output on CUDA under AMP and a 16-bit one in a
    CPU trace. This registers CUDA's policy for `aten::softmax.int` under the AutocastCPU key (outside autocast
    nothing changes)."""
    lib = torch.library.Library("aten", "IMPL")

    def softmax_as_cuda_autocast(x, dim, dtype=None):
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
            if dtype is None and x.dtype in (torch.float16, torch.bfloat16):
                dtype = torch.float32
            return torch.ops.aten.softmax.int(x, dim, dtype)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU autocast's own fallthrough for softmax is replaced
        lib.impl("softmax.int", softmax_as_cuda_autocast, "AutocastCPU")
    return lib


class EfficientAttentionWithBias(torch.autograd.Function):
    """SDPA with an additive mask that requires grad, as CUDA's memory-efficient kernel runs it: saves q, k, v, the
    (broadcast) bias, the output and an fp32 logsumexp (aten `_scaled_dot_product_efficient_attention`, its
    derivative in tools/autograd/derivatives.yaml); its backward allocates the bias gradient at the expanded
    (batch, heads, q, k) shape (aten/src/ATen/native/transformers/cuda/attention_backward.cu
    `_efficient_attention_backward`: `grad_bias = at::empty(sz, bias->options())`), which the expand's backward then
    sums to the bias's own shape. On CPU it runs SDPA's flash kernel with the bias (which saves the same tensors); the
    bias gradient's values are zeros, which the byte count does not read."""

    @staticmethod
    def forward(ctx, q, k, v, bias, scale, is_causal):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, attn_mask=bias, scale=scale
        )
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale, ctx.is_causal = scale, is_causal
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, bias, out, lse = ctx.saved_tensors
        gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            g.contiguous(), q, k, v, out, lse, 0.0, ctx.is_causal, attn_mask=bias, scale=ctx.scale
        )
        gb = None
        if ctx.needs_input_grad[3]:
            full = torch.zeros((q.shape[0], q.shape[1], q.shape[2], k.shape[2]), dtype=bias.dtype, device=bias.device)
            gb = full.sum_to_size(bias.shape)
        return gq, gk, gv, gb, None, None


class BiasGradAsCuda(torch.overrides.TorchFunctionMode):
    """Routes `scaled_dot_product_attention` with a floating-point mask that requires grad (T5's relative position
    bias, transformers 5.24 integrations/sdpa_attention.py `create_position_bias_mask`) to
    `EfficientAttentionWithBias`: on CPU such a call takes the math kernel, which keeps the attention probabilities;
    CUDA's flash kernel takes no mask and the memory-efficient one, which takes a bias and returns its gradient
    (torch 2.13 aten/src/ATen/native/transformers/cuda/sdp_utils.cpp `can_use_mem_efficient_attention`), runs it.
    Under autocast the arguments are cast as autocast casts SDPA's (a lower-precision op). Dropout is applied inside
    CUDA's kernel (`sdpa_as_cuda` passes 0). Calls whose value heads differ in size from the query heads (MLA) take
    CUDA's memory-efficient kernel too (`efficient_attention_as_cuda`)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention or func is getattr(F.scaled_dot_product_attention, "original", None):
            q, k, v = args[:3]
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            if (
                isinstance(mask, torch.Tensor)
                and mask.is_floating_point()
                and mask.requires_grad
                and torch.is_grad_enabled()
                and not kwargs.get("enable_gqa", False)
            ):
                if torch.is_autocast_enabled(q.device.type):
                    dt = torch.get_autocast_dtype(q.device.type)
                    q, k, v, mask = (t.to(dt) for t in (q, k, v, mask))
                return EfficientAttentionWithBias.apply(
                    q, k, v, mask.to(q.dtype), kwargs.get("scale"), bool(kwargs.get("is_causal", False))
                )
            out = efficient_attention_as_cuda(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


def _attention_probs(query, key, value, attn_bias, is_causal: bool, scale: float | None):
    """Scaled scores and softmax in fp32, torch's own math (`_scaled_dot_product_attention_math`: causal is the
    top-left lower triangle). Only called inside the CPU kernels below, whose temporaries the trace never sees."""
    s = (query.float() @ key.float().transpose(-2, -1)) * (query.shape[-1] ** -0.5 if scale is None else scale)
    if attn_bias is not None:
        s = s + attn_bias.float()
    if is_causal:
        keep = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s, torch.softmax(s, dim=-1)


def efficient_attention_cpu(
    query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, scale=None
):
    """CPU kernel of `aten::_scaled_dot_product_efficient_attention` (CUDA only in torch): returns what the CUDA
    kernel returns, in its shapes and layout (torch 2.13 torch/_meta_registrations.py
    `meta__scaled_dot_product_efficient_attention`, the fake mode's kernel): the output allocated as (B, M, H, Kv)
    and transposed, an fp32 logsumexp of (B, H, ceil(M/32)·32) when `compute_log_sumexp` (none otherwise), a seed
    and an offset. Its temporaries (scores, probabilities) run below the trace's dispatch mode, as the CUDA kernel
    keeps them on chip. Dropout is not applied (values only; the saved tensors are the same)."""
    b, h, m, _ = query.shape
    out = torch.empty(b, m, h, value.shape[-1], dtype=query.dtype, device=query.device).transpose(1, 2)
    lse = torch.empty(b, h, math.ceil(m / 32) * 32 if compute_log_sumexp else 0, dtype=torch.float, device=query.device)
    s, p = _attention_probs(query, key, value, attn_bias, is_causal, scale)
    out.copy_(p @ value.float())
    if compute_log_sumexp:
        lse[..., :m].copy_(torch.logsumexp(s, dim=-1))
    seed = torch.empty((), dtype=torch.long, device=query.device)
    offset = torch.empty((), dtype=torch.long, device=query.device)
    return out, lse, seed, offset


def efficient_attention_backward_cpu(
    grad_out,
    query,
    key,
    value,
    attn_bias,
    out,
    logsumexp,
    philox_seed,
    philox_offset,
    dropout_p,
    grad_input_mask,
    is_causal=False,
    scale=None,
):
    """CPU kernel of `aten::_scaled_dot_product_efficient_attention_backward`: q, k, v (and bias) gradients in
    the layouts CUDA's kernel allocates (`meta__scaled_dot_product_efficient_backward`: (B, M, H, D) storage,
    permuted; the bias gradient's last dim padded to 16), from torch's math derivative."""
    b, h, m, d = query.shape
    n, dv = key.shape[-2], value.shape[-1]
    sc = d**-0.5 if scale is None else scale

    def grad(shape, like):
        return torch.empty_permuted(shape, (0, 2, 1, 3), dtype=like.dtype, device=like.device)

    gq, gk, gv = grad((b, h, m, d), query), grad((b, h, n, d), key), grad((b, h, n, dv), value)
    _, p = _attention_probs(query, key, value, attn_bias, is_causal, scale)
    g = grad_out.float()
    gv.copy_(p.transpose(-2, -1) @ g)
    dp = g @ value.float().transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    gq.copy_(ds @ key.float() * sc)
    gk.copy_(ds.transpose(-2, -1) @ query.float() * sc)
    gb = None
    if attn_bias is not None and grad_input_mask[3]:
        last = attn_bias.shape[-1]
        gb = torch.empty((*attn_bias.shape[:-1], -(-last // 16) * 16), dtype=attn_bias.dtype, device=attn_bias.device)[
            ..., :last
        ]
        gb.copy_(ds.sum_to_size(attn_bias.shape))
    return gq, gk, gv, gb


@once_per_process
def install_efficient_attention_on_cpu() -> torch.library.Library:
    """Register `efficient_attention_cpu` and its backward as the CPU kernels of CUDA's memory-efficient attention
    ops, so a CPU trace can call the op CUDA's SDPA calls (torch 2.13 aten/src/ATen/native/transformers/
    attention.cpp `scaled_dot_product_attention`, `case SDPBackend::efficient_attention`) and autograd saves what
    its derivative saves (tools/autograd/derivatives.yaml `_scaled_dot_product_efficient_attention`: query, key,
    value, attn_bias, output, log_sumexp, philox_seed, philox_offset). Fake tensors take torch's meta kernels."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_dot_product_efficient_attention", efficient_attention_cpu, "CPU")
    lib.impl("_scaled_dot_product_efficient_attention_backward", efficient_attention_backward_cpu, "CPU")
    return lib


def efficient_attention_as_cuda(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
) -> torch.Tensor | None:
    """SDPA with value heads of another size than query/key heads (MLA: DeepSeek-V2/V3 `v_head_dim` ≠
    `qk_nope_head_dim + qk_rope_head_dim`), as CUDA runs it, or None for every other call. CUDA's flash kernel
    wants equal head sizes, the memory-efficient kernel only equal q/k head sizes, each a multiple of 8 in
    16-bit, of 4 in fp32 (torch 2.13 aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    `check_head_dim_size_flash`, `check_head_dim_size_mem_efficient`), so CUDA takes the memory-efficient kernel,
    which saves its output and an fp32 logsumexp for backward. The CPU, whose flash kernel also wants equal head
    sizes (`check_head_dim_size_cpp`), takes math and keeps the s×s probabilities per head instead. Here the call
    runs `aten::_scaled_dot_product_efficient_attention` itself (`install_efficient_attention_on_cpu`), with the
    logsumexp computed when autograd needs it (attention.cpp `should_compute_logsumexp`). Only calls without a mask
    (causal or not) are taken: with a mask CUDA first converts and pads it (attention.cpp `preprocess_mask`).
    Under autocast q, k, v are cast as autocast casts SDPA's; dropout is applied inside CUDA's kernel (not here)."""
    if attn_mask is not None or query.shape[-1] == value.shape[-1]:
        return None
    if torch.is_autocast_enabled(query.device.type):
        dt = torch.get_autocast_dtype(query.device.type)
        query, key, value = (t.to(dt) for t in (query, key, value))
    if cuda_sdpa_backend(query, key, value, None, dropout_p, is_causal, enable_gqa) != "efficient":
        return None
    install_efficient_attention_on_cpu()
    grads = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, None, grads, 0.0, bool(is_causal), scale=scale
    )[0]


def cuda_sdpa_backend(
    query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False
) -> str:
    """The kernel torch's CUDA dispatcher picks for a dense `scaled_dot_product_attention` call on an sm80+ GPU with
    every backend enabled (torch 2.13: `select_sdp_backend`, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp,
    its checks in include/ATen/native/transformers/sdp_utils_cpp.h): "flash", "efficient" or "math". Only the
    checks that shapes, dtypes, masks and dropout decide are modelled (not the GPU's own limits).
    - every fused kernel: 4-D q, k, v, equal batch sizes, non-empty sequences, last-dim stride 1 (the mask's too on
      the GPU), and equal query and K/V head counts unless `enable_gqa` is set (`check_batch_size_and_num_heads_dense`;
      with it, only flash reads grouped K/V up to torch 2.13: the `F.scaled_dot_product_attention` docstring, "GQA ...
      works only for Flash_attention and math kernel on CUDA tensor"; the memory-efficient kernel too from
      `MEM_EFFICIENT_GQA_FROM`, judged by the torch this runs on);
    - flash: no mask (`check_for_attn_mask`), fp16/bf16, equal head dims of at most 256 (padded to a multiple of 8
      inside), causal only with equal query and key lengths;
    - memory-efficient: fp16/bf16/fp32, q and k head dims equal and a multiple of 8 (4 in fp32), a mask that
      broadcasts to (b, h, s_q, s_k);
    - dropout is no obstacle on CUDA (both fused kernels drop inside), unlike on the CPU, whose flash kernel takes
      no dropout."""
    q, k, v = query, key, value
    if not (q.dim() == k.dim() == v.dim() == 4) or not (q.shape[0] == k.shape[0] == v.shape[0]):
        return "math"
    if 0 in (q.shape[-2], k.shape[-2]) or q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        return "math"
    if attn_mask is not None and attn_mask.stride(-1) != 1:
        return "math"
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    same_heads = hq == hk == hv
    gqa = enable_gqa and hk == hv and hq % hk == 0
    d = q.shape[-1]
    if (
        attn_mask is None
        and (same_heads or gqa)
        and q.dtype in (torch.float16, torch.bfloat16)
        and d == k.shape[-1] == v.shape[-1]
        and d <= 256
        and not (is_causal and q.shape[-2] != k.shape[-2])
    ):
        return "flash"
    align = 4 if q.dtype == torch.float32 else 8
    mask_ok = (
        attn_mask is None
        or attn_mask.dim() == 2
        or (attn_mask.dim() == 4 and attn_mask.shape[0] in (1, q.shape[0]) and attn_mask.shape[1] in (1, hq))
    )
    if (
        (same_heads or (gqa and _mem_efficient_reads_gqa()))
        and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and d == k.shape[-1]
        and d % align == 0
        and v.shape[-1] % align == 0
        and mask_ok
    ):
        return "efficient"
    return "math"


def _mem_efficient_reads_gqa() -> bool:
    """Whether this torch's CUDA memory-efficient kernel takes grouped K/V (`enable_gqa`)."""
    from vramlens.knowledge import versions

    return versions.at_least(torch.__version__, versions.MEM_EFFICIENT_GQA_FROM, "torch")


# Callers whose SDPA calls pass through `sdpa_as_cuda_kernel` to the kernel the CPU picks unless CUDA would run math:
# transformers' `AttentionInterface` SDPA (integrations/sdpa_attention.py, shimmed by `install_sdpa_dropout_as_cuda`)
# and this module's flash stand-in. Where CUDA takes a fused kernel the CPU's flash keeps what it keeps; fp32 q/k/v
# with grouped K/V (`enable_gqa`: a pure fp32 step, QLoRA without autocast) take the CPU's flash kernel, while CUDA's
# flash takes only 16-bit and its memory-efficient kernel no grouped K/V before torch 2.14, so CUDA runs math there.
INTERFACE_CALLERS = ("transformers.integrations.", "vramlens.")


def sdpa_as_cuda_kernel(original):
    """`F.scaled_dot_product_attention` as the CUDA dispatcher would run it, for models that call it themselves
    (Falcon: transformers 5.24 models/falcon/modeling_falcon.py; calls from `INTERFACE_CALLERS` pass through): where
    CUDA takes the math kernel (`cuda_sdpa_backend`), the call runs under `sdpa_kernel(MATH)`, the same composite
    kernel on CPU; where CUDA takes a fused kernel, it runs with dropout 0 so that the CPU takes its flash kernel
    (which keeps q, k, v, the output and the logsumexp, as CUDA's flash and memory-efficient kernels do, less
    their RNG seed and offset) instead of falling back to math for the dropout; value heads of another size than
    the query heads take the memory-efficient kernel (`efficient_attention_as_cuda`). Where the CPU and CUDA agree
    the call is unchanged."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        kw = dict(attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        backend = cuda_sdpa_backend(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        if sys._getframe(1).f_globals.get("__name__", "").startswith(INTERFACE_CALLERS):
            if backend == "math" and query.dtype == torch.float32 and enable_gqa:
                with sdpa_kernel([SDPBackend.MATH]):
                    return original(query, key, value, dropout_p=dropout_p, **kw)
            return original(query, key, value, dropout_p=dropout_p, **kw)
        if backend == "math":
            with sdpa_kernel([SDPBackend.MATH]):
                return original(query, key, value, dropout_p=dropout_p, **kw)
        out = efficient_attention_as_cuda(query, key, value, dropout_p=dropout_p, **kw)
        if out is not None:
            return out
        return original(query, key, value, dropout_p=0.0, **kw)

    sdpa.original = original
    return sdpa


@once_per_process
def install_sdpa_as_cuda_kernel() -> None:
    """Route `torch.nn.functional.scaled_dot_product_attention` through `sdpa_as_cuda_kernel` (the modelling code
    looks the function up on the module at each call)."""
    F.scaled_dot_product_attention = sdpa_as_cuda_kernel(F.scaled_dot_product_attention)


@once_per_process
def install_grouped_mm_as_cuda() -> torch.library.Library | None:
    """The fake (meta) kernel of `aten::_grouped_mm` for non-bf16 inputs as CUDA computes them (module docstring);
    bf16 inputs keep torch's own meta function."""
    if not hasattr(torch.ops.aten, "_grouped_mm"):
        return None
    import torch._meta_registrations as meta_registrations

    original = getattr(meta_registrations, "meta_grouped_mm", None)
    make_output = getattr(meta_registrations, "_create_grouped_mm_output_tensor", None)
    if original is None or make_output is None:
        return None

    def grouped_mm_meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        if mat_a.dtype == torch.bfloat16 and mat_b.dtype == torch.bfloat16:
            return original(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
        torch._check(
            mat_a.dtype == mat_b.dtype, lambda: f"grouped_mm inputs differ in dtype: {mat_a.dtype} and {mat_b.dtype}"
        )
        return make_output(mat_a, mat_b, offs, out_dtype)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_grouped_mm", grouped_mm_meta, "Meta", allow_override=True)
    return lib


@once_per_process
def install_trl_tiles_as_cuda() -> None:
    """TRL's fused LM head (trl 1.16 `trl/kernels/chunked_logprob.py` `ChunkedLogProbFunction`) folds each
    [4096 tokens × 32768 vocabulary] tile of logits with Triton kernels on CUDA (`_forward_kernel`,
    `_backward_kernel`: per-token statistics in registers, the gradient written over the tile in place) and
    accumulates the fp32 gradients with `torch.addmm(..., out_dtype=torch.float32, out=acc)`. Without Triton (the
    CPU the trace runs on) it folds the whole tile in torch ops — `tile.float()`, exp, the softmax and its gradient,
    each a tile-sized fp32 temporary — and casts both factors to fp32 before `addmm_`. The stand-ins below allocate
    what the CUDA path allocates (nothing tile-sized beyond the tile itself; values differ, which the byte count does
    not read). The tile buffer, the saved hidden states, log Z and entropy, and the fp32 gradient accumulators are
    TRL's own."""
    from trl.kernels import chunked_logprob as K

    def forward_tile(tile, tile_stride, targets, running_max, *args, **kwargs):
        running_max.copy_(torch.maximum(running_max, tile.amax(-1).float()))

    def backward_tile(tile, tile_stride, targets, log_z, *args, **kwargs):
        tile.sub_(log_z.unsqueeze(-1).to(tile.dtype))

    original_addmm = K._addmm_fp32

    def addmm_fp32(acc, a, b):
        if a.dtype in (torch.float16, torch.bfloat16):  # CUDA: addmm with out_dtype=float32 into acc
            acc.add_((a[:1, :1].float() @ b[:1, :1].float()).sum())
            return
        original_addmm(acc, a, b)

    K._forward_tile, K._backward_tile, K._addmm_fp32 = forward_tile, backward_tile, addmm_fp32


def register_flash_stand_in() -> None:
    """Register the stand-in under its own name (transformers refuses `flash_attention_2` without flash-attn),
    with flash attention's mask function (a 2-D padding mask or none: transformers `masking_utils`)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    AttentionInterface.register(FLASH_STAND_IN, flash_stand_in)
    ALL_MASK_ATTENTION_FUNCTIONS.register(FLASH_STAND_IN, flash_stand_in_mask(flash_attention_mask))


def real_padding_mask(attention_mask: torch.Tensor, kv_length: int) -> torch.Tensor:
    """What transformers' `flash_attention_mask` returns for the padded batch this backend traces (a padding
    token in the first row, `make_batch`): the 2-D mask itself, sliced to the last `kv_length` positions. Reading
    `attention_mask.all()` is data-dependent under fake tensors, so the answer is given without reading data."""
    return attention_mask[:, -kv_length:]


def flash_stand_in_mask(original):
    """transformers' flash-attention mask function, answering for a fake mask as it does for the real padded one
    (`real_padding_mask`); real tensors go to the original. The stand-in attention runs causal whatever the mask
    (flash-attn's varlen path on the unpadded rows saves the same q, k, v, output and logsumexp sizes less the
    padding)."""

    def mask(
        batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None, attention_mask=None, **kwargs
    ):
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(attention_mask, FakeTensor):
            return real_padding_mask(attention_mask, kv_length)
        kw = {} if mask_function is None else {"mask_function": mask_function}
        return original(
            batch_size, q_length, kv_length, q_offset, kv_offset, attention_mask=attention_mask, **kw, **kwargs
        )

    return mask


# -- the model ----------------------------------------------------------------------------------------


class HFStep(nn.Module):
    """transformers' causal LM (peft-wrapped when the plan has adapters), called like `SyntheticModel`."""

    mesh: Any = None  # the device mesh FSDP2 shards over (trace.sharded)
    params_total: int = 0  # parameters counted before sharding (trace.sharded)

    def __init__(self, cfg: StepConfig, attn: str):
        super().__init__()
        self.cfg = cfg
        seq2seq = is_seq2seq(cfg)
        install_packed_sequence_shim()
        install_sdpa_dropout_as_cuda()
        install_autocast_softmax_as_cuda()
        install_sdpa_as_cuda_kernel()
        if cfg.arch.is_moe:
            install_grouped_mm_as_cuda()
        impl = attn_implementation(cfg, attn)
        dtype = DTYPES[cfg.param_dtype]
        hc = hf_config(cfg)
        dtype_kw = {"dtype": dtype} if transformers_major() >= 5 else {"torch_dtype": dtype}
        with torch.device("meta"):
            model = model_class(cfg).from_config(hc, attn_implementation=impl, **dtype_kw)
            if seq2seq and not cfg.arch.tied_embeddings:
                untie_t5_head(model)
        if attn in ("flash_attention_2", "flash_attention_3") and transformers_major() < 5:
            use_flash_stand_in_4x(model)
        self.trl_fused = cfg.loss == "chunked"
        if self.trl_fused:
            # TRL ≥ 1.7 SFTTrainer: loss_type "nll" (formerly "chunked_nll") through `add_fused_lm_head`
            # (trl/trainer/sft_trainer.py `__init__` and `compute_loss`), added before PEFT wraps the model
            from trl.trainer.utils import add_fused_lm_head

            install_trl_tiles_as_cuda()
            add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
        self.quantized = cfg.quant_bits == 4
        if self.quantized:
            model = replace_4bit(model, cfg)
        if cfg.checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.peft != "none":
            model = apply_peft(model, cfg)
        self.model = model
        self.tick = lambda: None
        classes = tuple(block_classes(model))
        tick_at_blocks(self, [m for m in model.modules() if isinstance(m, classes)])
        self._mark = None
        if self.trl_fused or is_encoder(cfg):
            # TRL's fused head reads lm_head.weight directly, an encoder's head is pooler + classifier: the
            # backbone's output marks where the head starts
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            body = getattr(base, base.base_model_prefix).encoder if is_encoder(cfg) else base.get_decoder()
            body.register_forward_hook(self._backbone_out)
        else:
            model.get_output_embeddings().register_forward_pre_hook(self._head_pre)

    def _head_pre(self, module, args):
        self._enter_head(args[0])

    def _backbone_out(self, module, args, out):
        self._enter_head(out[0] if isinstance(out, tuple) else out.last_hidden_state)

    def _enter_head(self, x) -> None:
        mark = self._mark
        if mark is not None:
            mark("loss")
            if x.requires_grad:
                x.register_hook(lambda g: mark("bwd"))

    def forward(self, ids, labels, mark=None, attention_mask=None, **images):
        self._mark = mark
        try:
            if self.trl_fused:  # trl SFTTrainer.compute_loss, loss_type "nll"
                out = self.model(
                    input_ids=ids, labels=labels, attention_mask=attention_mask, use_cache=False, fused_lm_head=True
                )
                num_tokens = out.label_mask.sum()
                loss = (-out.log_probs).sum() / torch.as_tensor(num_tokens).clamp(min=1)
                return {"loss": loss, "logits": None}
            cache = {} if is_encoder(self.cfg) else {"use_cache": False}
            with image_checks_off(images):
                out = self.model(input_ids=ids, labels=labels, attention_mask=attention_mask, **cache, **images)
        finally:
            self._mark = None
        return {"loss": out.loss, "logits": out.logits}


def linear_targets(cfg: StepConfig) -> list[str] | str:
    names = FAMILY_LINEAR.get(cfg.arch.family, HF_LINEAR)
    if "all-linear" in cfg.lora_targets:
        return "all-linear"
    if is_encoder(cfg):  # one full-match regex over module names (peft: a str target is re.fullmatch-ed)
        picked = [ENCODER_LINEAR[t] for t in cfg.lora_targets if t in ENCODER_LINEAR]
        return r".*\.(" + "|".join(f"(?:{p})" for p in picked) + ")"
    # canonical MLP names exist in gated (gate, up, down) or ungated (fc1, fc2) blocks only: T5's `wo` is `down` in
    # gated-gelu blocks and `fc2` in relu ones
    absent = ("fc1", "fc2") if cfg.arch.mlp in ("swiglu", "geglu") else ("gate", "up", "down")
    return sorted(
        {names[t] for t in cfg.lora_targets if t in names and t not in ("lm_head", "embed") and t not in absent}
    )


def apply_peft(model, cfg: StepConfig):
    import peft
    from peft import IA3Config, LoraConfig, VeraConfig, get_peft_model, prepare_model_for_kbit_training

    from vramlens.knowledge import peft_methods

    if cfg.quant_bits == 4:
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=cfg.checkpointing, gradient_checkpointing_kwargs={"use_reentrant": False}
        )
        if not cfg.upcast_non_quantized:
            for p in model.parameters():
                if p.dtype == torch.float32 and not hasattr(p, "quant_state"):
                    p.data = p.data.to(DTYPES[cfg.param_dtype])
    names = FAMILY_LINEAR.get(cfg.arch.family, HF_LINEAR)
    save = sorted({names[m] for m in cfg.modules_to_save if m in names}) or None
    if cfg.peft == "ia3":
        # peft 0.21.2 tuners/ia3: a learned vector scales each target's output, or its input for feedforward modules
        names_ff = sorted({names[t] for t in cfg.feedforward_targets if t in names})
        targets = linear_targets(cfg)
        ic = IA3Config(
            target_modules=targets, feedforward_modules=names_ff, modules_to_save=save, task_type=peft_task(cfg)
        )
        return get_peft_model(model, ic, autocast_adapter_dtype=cfg.adapter_fp32)
    if cfg.adapter_method in peft_methods.PEFT_CONFIGS:
        # peft's own method (knowledge.peft_methods.PEFT_CONFIGS), with the sizes the plan read
        cls_name, params = peft_methods.PEFT_CONFIGS[cfg.adapter_method]
        shape = dict(cfg.adapter_shape)
        sizes = {params[k]: v for k, v in shape.items() if k in params}
        if cfg.adapter_method == "adalora":
            sizes["total_step"] = 1_000  # peft requires the schedule's length; the step's memory does not depend on it
            sizes["lora_dropout"] = cfg.lora_dropout
        if cfg.adapter_method == "oft":
            sizes["r"] = 0  # the block size decides (peft: r or oft_block_size, not both)
        conf = getattr(peft, cls_name)(
            target_modules=linear_targets(cfg), modules_to_save=save, task_type=peft_task(cfg), **sizes
        )
        model = get_peft_model(model, conf, autocast_adapter_dtype=cfg.adapter_fp32)
        if cfg.adapter_method in ("loha", "lokr"):
            _lycoris_without_module_dropout(model)
        return model
    if cfg.peft == "vera":
        # peft 0.21.2 tuners/vera: frozen shared projections vera_A (r × largest in) and vera_B (largest out × r),
        # trainable vectors lambda_d (r) and lambda_b (out) per adapted linear
        vc = VeraConfig(
            r=cfg.lora_r,
            target_modules=linear_targets(cfg),
            vera_dropout=cfg.lora_dropout,
            modules_to_save=save,
            task_type=peft_task(cfg),
        )
        return get_peft_model(model, vc, autocast_adapter_dtype=cfg.adapter_fp32)
    lc = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=linear_targets(cfg),
        modules_to_save=save,
        use_dora=cfg.peft == "dora",
        task_type=peft_task(cfg),
    )
    model = get_peft_model(model, lc, autocast_adapter_dtype=cfg.adapter_fp32)
    if cfg.embeddings_16bit:
        embeddings_back_to_16bit(model, DTYPES[cfg.param_dtype])
    return model


def _lycoris_without_module_dropout(model) -> None:
    """peft's LyCORIS layers (LoHa, LoKr) draw `torch.rand(1) > module_dropout` in every training forward (peft
    0.21.2 tuners/loha/layer.py, lokr/layer.py `forward`), a value fake tensors do not have. With module and rank
    dropout at 0 (peft's defaults, which the plans use) the layer computes the same in eval mode, so these layers stay
    in it: their `train` leaves them as they are."""
    from peft.tuners.lycoris_utils import LycorisLayer

    for module in model.modules():
        if isinstance(module, LycorisLayer):
            module.eval()
            module.train = lambda mode=True, _m=module: _m


def embeddings_back_to_16bit(model, dtype) -> None:
    """TRL's SFTTrainer before 0.26 with `bf16` on an unsharded k-bit model (trl 0.25.1 trl/models/utils.py
    `peft_module_casting_to_bf16`, called after `get_peft_model`): modules named like a norm go to fp32, and the
    embeddings and LM head (`lm_head`, `embed_tokens`, `wte`, `wpe`) whose weight is fp32 back to bf16."""
    for name, module in model.named_modules():
        if isinstance(module, nn.LayerNorm) or "norm" in name:
            module.to(torch.float32)
        elif any(x in name for x in ("lm_head", "embed_tokens", "wte", "wpe")):
            weight = getattr(module, "weight", None)
            if isinstance(weight, torch.Tensor) and weight.dtype == torch.float32:
                module.to(dtype)


# -- bitsandbytes 4-bit ---------------------------------------------------------------------------------


# Linears whose model code reads their weight directly, which a packed 4-bit weight cannot serve: Gemma-3n's AltUp
# clamps its coefficient weights in training (transformers 5.24 models/gemma3n/modeling_gemma3n.py
# `Gemma3nTextAltUp.predict`: `self.prediction_coefs.weight.data.clamp_(...)`; `correct`:
# `self.correction_coefs.weight.clamp(...)` into `F.linear`; `altup_coef_clip` defaults to 120.0), which fails on
# the uint8 storage. A user leaves them unquantized with `BitsAndBytesConfig(llm_int8_skip_modules=[...])`
# (transformers 5.24 utils/quantization_config.py: "the modules that we do not want to convert"); the trace does
# the same and says so (trace/config.py `step_config`).
KBIT_UNQUANTIZABLE: dict[str | None, tuple[str, ...]] = {
    "gemma3n_text": ("correction_coefs", "prediction_coefs"),
}


def replace_4bit(model, cfg: StepConfig):
    """transformers' own `replace_with_bnb_linear` on the meta model: its `Linear4bit` modules."""
    from transformers import BitsAndBytesConfig, PreTrainedModel
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear

    qc = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=cfg.quant_type,
        bnb_4bit_use_double_quant=cfg.quant_double,
        bnb_4bit_compute_dtype=DTYPES[cfg.compute_dtype],
        bnb_4bit_quant_storage=DTYPES.get(cfg.quant_storage, torch.uint8),
    )
    # the quantizer leaves the model's `_keep_in_fp32_modules` unquantized too (transformers 5.24
    # quantizers/quantizer_bnb_4bit.py `_process_model_before_weight_loading` → base.py `get_modules_to_not_convert`):
    # T5's `wo` (models/t5/modeling_t5.py T5PreTrainedModel)
    skip = ["lm_head"] + sorted(getattr(model, "_keep_in_fp32_modules", None) or [])
    skip += sorted(KBIT_UNQUANTIZABLE.get(getattr(model.config, "model_type", None), ()))
    model = replace_with_bnb_linear(model, modules_to_not_convert=skip, quantization_config=qc)
    # what the quantizer sets after loading (quantizers/base.py `postprocess_model` → `_assign_is_quantized`), which
    # model code reads: Jamba's mixer then calls dt_proj as a module, not its weight (models/jamba/modeling_jamba.py
    # `JambaMambaMixer.forward`: `if hasattr(self.config, "_is_quantized")`)
    for module in model.modules():
        if isinstance(module, PreTrainedModel):
            module.config._is_quantized = True
    model.is_loaded_in_4bit = True
    model.hf_quantizer = None
    return model


def quantize_4bit_fake(model, cfg: StepConfig) -> None:
    """Quantize every `bnb.nn.Linear4bit` in place (fake or real): `bitsandbytes.functional.quantize_4bit`
    has a fake kernel; the packed weight stays a plain frozen Parameter carrying `.quant_state`, which is what
    `bnb.matmul_4bit` and peft's `Linear4bit` read (`Params4bit` cannot wrap a fake tensor)."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as BF

    storage = DTYPES.get(cfg.quant_storage, torch.uint8)
    for m in model.modules():
        if isinstance(m, bnb.nn.Linear4bit):
            w = torch.empty(m.out_features, m.in_features, dtype=DTYPES[cfg.compute_dtype], device="cpu")
            packed, state = BF.quantize_4bit(
                w, blocksize=64, compress_statistics=cfg.quant_double, quant_type=cfg.quant_type, quant_storage=storage
            )
            p = nn.Parameter(packed, requires_grad=False)
            p.quant_state = state
            p.bnb_quantized = True
            p.quant_type = cfg.quant_type
            p.compress_statistics = cfg.quant_double
            p.blocksize = 64
            p.module = m
            m._parameters["weight"] = p
            m.quant_state = state


def quant_constants(model) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for p in model.parameters():
        st = getattr(p, "quant_state", None)
        if st is None:
            continue
        out += [st.absmax, getattr(st, "code", None)]
        if getattr(st, "state2", None) is not None:
            out += [st.state2.absmax, st.state2.code, getattr(st, "offset", None)]
    return [t for t in out if isinstance(t, torch.Tensor)]


# -- construction for the engine --------------------------------------------------------------------------


def block_classes(model: nn.Module) -> set[type]:
    """The classes of the model's decoder blocks: `_no_split_modules`, what accelerate's TRANSFORMER_BASED_WRAP
    wraps by default (accelerate 1.15 utils/dataclasses.py `FullyShardedDataParallelPlugin.set_auto_wrap_policy`)."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    return {type(m) for m in base.modules() if type(m).__name__ in names}


def tick_at_blocks(owner: Any, blocks: list[nn.Module]) -> None:
    """Call `owner.tick()` after each block's forward and when its output's gradient arrives in backward: the
    points where a trace can stop (raising from inside an op can abort the process when C++ called the op)."""

    def after(module, args, out):
        owner.tick()
        x = out[0] if isinstance(out, tuple) else out
        if isinstance(x, torch.Tensor) and x.requires_grad:
            x.register_hook(lambda grad: owner.tick())

    for block in blocks:
        block.register_forward_hook(after)


def build_meta(cfg: StepConfig) -> HFStep:
    return HFStep(cfg, cfg.attn_impl)


def _shared_parameters(model) -> list[list[tuple[object, str]]]:
    """The parameters held by more than one module (tied weights): for each, every (module, attribute) holding it."""
    holders: dict[int, list[tuple[object, str]]] = {}
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                holders.setdefault(id(p), []).append((module, name))
    return [h for h in holders.values() if len(h) > 1]


def materialize(step: HFStep, device, real: bool) -> HFStep:
    """Allocate every parameter on `device` (fake or real), re-tie the embeddings, quantize 4-bit linears,
    make dropout keep a CUDA-sized mask. Real tensors get small random values."""
    # rotary inverse frequencies are computed at construction; keep them across to_empty()
    bufs = {n: b.detach().clone() for n, b in step.named_buffers() if b is not None and b.device.type != "meta"}
    copied = [m for m in step.modules() if type(m).__name__ == "ModulesToSaveWrapper"]
    ties = _shared_parameters(step) if copied else []
    step = step.to_empty(device=device)
    inner = step.model.get_base_model() if hasattr(step.model, "get_base_model") else step.model
    if copied:
        # peft's modules_to_save wrap the tied head and embeddings: `tie_weights()` cannot set `lm_head.weight` on
        # the wrapper, so the ties the built model had (the originals', not the trained copies') are restored
        for (first, first_name), *rest in ties:
            for module, name in rest:
                module._parameters[name] = first._parameters[first_name]
    elif is_seq2seq(step.cfg):
        inner.tie_weights(recompute_mapping=False)  # the ties the built model keeps (`untie_t5_head`)
    elif step.cfg.arch.tied_embeddings:
        inner.tie_weights()
    with torch.no_grad():
        for n, b in step.named_buffers():
            if n in bufs:
                b.copy_(bufs[n])
            elif "inv_freq" in n:
                _init_rope(step, n, b)
            elif n.endswith("position_ids"):  # encoders' absolute position ids (0..max-1)
                b.copy_(torch.arange(b.shape[-1], device=b.device).expand_as(b))
            elif n.endswith("token_type_ids"):
                b.zero_()
        if step.quantized:
            quantize_4bit_fake(step.model, step.cfg)
        if real:
            from vramlens.trace.model import init_real_

            init_real_(step.named_parameters(), step.cfg.gemma)
    dropouts_as_cuda(step.model)
    activations_as_cuda(step.model)
    step.train()
    return step


def _init_rope(step: nn.Module, name: str, buf: torch.Tensor) -> None:
    rot = step.get_submodule(name.rsplit(".", 1)[0])
    fn = getattr(rot, "rope_init_fn", None)
    if fn is not None:
        inv, _ = fn(rot.config, buf.device)
        buf.copy_(inv.to(buf.dtype))
    else:
        buf.fill_(1.0)


def param_count(step: HFStep) -> int:
    total = 0
    for n, p in step.model.named_parameters():
        if any(k in n for k in ("lora_", "ia3_l", "vera_lambda", "original_module")):
            continue
        st = getattr(p, "quant_state", None)
        total += int(torch.Size(st.shape).numel()) if st is not None else p.numel()
    return total


def make_batch(cfg: StepConfig, device, real: bool) -> dict[str, torch.Tensor]:
    """Token ids as labels; with `padded`, an attention mask whose first row ends in one padding token (a real
    padded batch: transformers then keeps the mask, as it does for any fake mask)."""
    ids = torch.randint(0, cfg.arch.vocab, (cfg.micro_batch, cfg.seq_len), device=device)
    batch = {"ids": ids, "labels": ids}
    if is_encoder(cfg):  # one class label per sequence (two labels: `encoder_config`)
        batch["labels"] = torch.randint(0, 2, (cfg.micro_batch,), device=device)
    if cfg.padded:
        mask = torch.ones((cfg.micro_batch, cfg.seq_len), dtype=torch.long, device=device)
        if real:
            mask[0, -1] = 0
        batch["attention_mask"] = mask
    if cfg.images and is_vlm(cfg):
        batch.update(image_batch(cfg, ids, device))
    return batch


def image_batch(cfg: StepConfig, ids: torch.Tensor, device) -> dict[str, torch.Tensor]:
    """One image per sequence as Gemma3Processor (transformers 5.24 models/gemma3/processing_gemma3.py) hands it to the
    model: `pixel_values` of the image processor's size (896 × 896, float32: Gemma3ImageProcessor's output dtype),
    `mm_tokens_per_image` image soft tokens in `input_ids` after <start_of_image>, `token_type_ids` 1 on them (the
    bidirectional block over the image the model builds its masks from). Labels are the ids with the image tokens
    set to -100, as TRL's DataCollatorForVisionLanguageModeling does; text ids stay below the image token."""
    n, tokens, side = cfg.micro_batch * cfg.images, cfg.arch.image_tokens, image_side(cfg)
    image = image_token_id(cfg)
    ids.remainder_(image)  # text ids never collide with the image token
    ids[:, 2 : 2 + tokens] = image  # <bos> <start_of_image> then the soft tokens
    types = torch.zeros_like(ids)
    types[:, 2 : 2 + tokens] = 1
    labels = ids.masked_fill(types.bool(), -100)
    pixels = torch.rand((n, 3, side, side), dtype=torch.float32, device=device)
    return {"labels": labels, "pixel_values": pixels, "token_type_ids": types}


@contextlib.contextmanager
def image_checks_off(images: dict):
    """Gemma3Model.get_placeholder_mask checks the image token count against the image features with
    `torch_compilable_check` (transformers 5.24 utils/import_utils.py), which reads a tensor's value: a fake tensor
    has none. The batch places exactly `mm_tokens_per_image` tokens per image (`image_batch`); the check is switched
    off with transformers' own TRANSFORMERS_DISABLE_TORCH_CHECK while the model runs (it allocates a scalar)."""
    if not images:
        yield
        return
    before = os.environ.get("TRANSFORMERS_DISABLE_TORCH_CHECK")
    os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRANSFORMERS_DISABLE_TORCH_CHECK", None)
        else:
            os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = before


def description(cfg: StepConfig) -> list[str]:
    v = versions()
    parts = [f"{k} {v[k]}" for k in ("transformers", "peft", "bitsandbytes", "trl") if v.get(k)]
    loss = (
        "TRL's fused LM head and per-token loss (SFTTrainer, loss_type nll)"
        if cfg.loss == "chunked"
        else "the model's own loss"
    )
    attn = cfg.attn_impl
    if attn not in ("eager", "flash_attention_2", "flash_attention_3") and not supports_sdpa(cfg):
        attn = f"eager (this transformers' {cfg.arch.family} has no SDPA path; the plan said {cfg.attn_impl})"
    if attn in ("flash_attention_2", "flash_attention_3"):
        attn = f"{attn} (CPU stand-in keeping q, k, v, output and an fp32 logsumexp, grouped K/V read natively)"
    out = [
        f"traced on the real libraries ({', '.join(parts)}): transformers' model built from the config, {loss}, "
        f"{attn} attention"
    ]
    if cfg.loss == "chunked":
        out.append(
            "TRL's fused LM head with its tile folds and fp32 accumulation allocating what the CUDA kernels "
            "allocate (trl/kernels/chunked_logprob.py: Triton folds in registers, addmm with out_dtype); "
            "every position scored, as CUDA does when every label is valid"
        )
    if cfg.quant_bits == 4:
        out.append(
            "4-bit base weights: transformers' replace_with_bnb_linear, weights packed by "
            "bitsandbytes.functional.quantize_4bit, peft prepare_model_for_kbit_training"
        )
    return out
