"""Which of a model's modules Liger-Kernel swaps for its Triton kernels, per model type.

Read from linkedin/Liger-Kernel ead96b6 (liger-kernel 0.8.2) src/liger_kernel/transformers/monkey_patch.py:
`MODEL_TYPE_TO_APPLY_LIGER_FN` maps a config's `model_type` to its `apply_liger_kernel_to_<model>`, which the
frameworks call with its defaults (transformers' Trainer `use_liger_kernel`: `_apply_liger_kernel_to_instance`; ms-swift
and LLaMA-Factory through it) or with the switches a config names (axolotl's Liger plugin). A model type missing from
the map gets no kernel at all ("There are currently no Liger kernels supported for model type").
"""

from __future__ import annotations

LIGER_VERSION = "0.8.2"
LIGER_SOURCE = "linkedin/Liger-Kernel ead96b6 (liger-kernel 0.8.2)"

# The kernels an `apply_liger_kernel_to_<model>()` with its defaults swaps in besides the fused loss (`rope=True,
# rms_norm=True, swiglu=True`): what `use_liger_kernel` / `enable_liger_kernel` switch on, as the plan names them
DEFAULT_KERNELS = ("rms_norm", "rope", "swiglu")
DEFAULT_KERNELS_NOTE = "Liger's RMSNorm, RoPE and SwiGLU kernels"

# Model types whose `apply_liger_kernel_to_<model>` swaps the decoder layers' RMSNorms for `LigerRMSNorm`
# (`rms_norm=True` by default in every one of them; `_patch_rms_norm_module` on `input_layernorm`,
# `post_attention_layernorm` — and Gemma-2/3's and GLM-4's extra ones — and on the final `norm`).
RMS_NORM_MODEL_TYPES = frozenset(
    {
        "deepseek_v4",
        "exaone4",
        "falcon_h1",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma4",
        "gemma4_text",
        "glm4",
        "glm4v",
        "glm4v_moe",
        "gpt_oss",
        "granite",
        "hunyuan_v1_dense",
        "hunyuan_v1_moe",
        "llama",
        "llama4",
        "llama4_text",
        "ministral",
        "mistral",
        "mixtral",
        "mllama",
        "mllama_text_model",
        "olmo2",
        "olmo3",
        "paligemma",
        "phi3",
        "pixtral",
        "qwen2",
        "qwen2_5_vl",
        "qwen2_5_vl_text",
        "qwen2_vl",
        "qwen2_vl_text",
        "qwen3",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "qwen3_5_text",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen3_vl_moe_text",
        "qwen3_vl_text",
        "smollm3",
    }
)

# Model types whose `apply_liger_kernel_to_<model>` swaps the dense gated MLP by default (`swiglu=True` /
# `geglu=True`): `LigerSwiGLUMLP` (llama, mistral, qwen2, qwen3, …), `LigerPhi3SwiGLUMLP` (phi3, glm4: one fused
# gate_up projection), `LigerGEGLUMLP` (gemma family), `LigerQwen3MoeSwiGLUMLP` (qwen3_next, qwen3_5 dense MLPs),
# `LigerFalconH1SwiGLUMLP`, `LigerHunyuanV1SwiGLUMLP`. Not in it: qwen3_vl, gpt_oss and deepseek_v4
# (`swiglu=False` by default), and the model types whose function patches no MLP.
GLU_MODEL_TYPES = frozenset(
    {
        "exaone4",
        "falcon_h1",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma4",
        "gemma4_text",
        "glm4",
        "glm4v",
        "granite",
        "hunyuan_v1_dense",
        "llama",
        "ministral",
        "mistral",
        "mllama",
        "mllama_text_model",
        "olmo2",
        "olmo3",
        "paligemma",
        "phi3",
        "pixtral",
        "qwen2",
        "qwen2_5_vl",
        "qwen2_5_vl_text",
        "qwen2_vl",
        "qwen2_vl_text",
        "qwen3",
        "qwen3_5",
        "qwen3_5_text",
        "smollm3",
    }
)


def liger_rms_norm(family: str) -> bool:
    """Whether Liger swaps this model type's RMSNorms (`RMS_NORM_MODEL_TYPES`)."""
    return family in RMS_NORM_MODEL_TYPES


def liger_glu(family: str) -> bool:
    """Whether Liger swaps this model type's dense gated MLP by default (`GLU_MODEL_TYPES`)."""
    return family in GLU_MODEL_TYPES
