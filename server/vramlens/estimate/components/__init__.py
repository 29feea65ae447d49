"""One function per memory component of a training step, each with its formula and its source.

All results are bytes on one GPU (one rank). Sources: the upstream code and papers named at each
function, and traces of HF-style modelling code made with `vramlens.trace` (docs/memory-model.md says how,
and lists the figures); DeepSpeed's `estimate_zero*_model_states_mem_needs` (DS).

One module per component, and per sub-layer of a block:
  common         bytes per dtype, canonical linears, how the step runs them (autocast, compile, fused linears)
  trained        which layers train (partial fine-tuning) and how far backward reaches
  parameters     parameter counts and bytes on a rank (`Params`, `params`)
  weights        resident weights and the model's buffers
  weight_copies  dequantized and autocast copies of weights
  gradients      gradients
  optimizer      optimizer state and the step's temporaries (low-rank projections included)
  sharding       tensor-parallel, ZeRO/FSDP and pipeline shares
  buffers        ZeRO/FSDP gathered parameters and communication buffers
  norms          a block's norms and the final norm
  attention      a block's attention (and a decoder's cross-attention), the padding mask
  mlp            a block's MLP (dense or routed experts)
  experts        routed experts: how they run, the expert parameters peft adapts
  linears        what a block's linears and LoRA adapters keep of their inputs
  adapters       IA3, VeRA and DoRA
  ssm            Mamba blocks
  vision         a VLM's vision tower
  t5             transformers' T5
  activations    one block's saved activations (its sub-layers summed) and the stack's
  peaks          peaks inside one block beyond what it keeps (checkpointed backward, attention backward)
  checkpointing  what the blocks keep under activation checkpointing
  logits         the LM head and the loss
  objectives     objectives beyond SFT (reference models, rollouts, value model)
  pipeline       pipeline stages
  megatron       Megatron-core layouts

Callers use the names re-exported here (`from vramlens.estimate import components as C`; `C.params(rp)`).
"""

from __future__ import annotations

from vramlens.estimate.components.activations import (
    RESIDUAL_DROPOUTS,
    activations_per_token,
    residual_dropouts_per_token,
)
from vramlens.estimate.components.adapters import (
    VECTOR_METHODS,
    dora_per_token,
    dora_recomputes_base,
    dora_targets,
    dora_version_notes,
    dora_weight_copies,
    dora_weight_norm_transient,
    vector_adapter_params,
    vector_adapter_per_token,
    vera_projection_params,
)
from vramlens.estimate.components.attention import (
    ATTENTION_DROPOUTS,
    DIRECT_SDPA_FAMILIES,
    DISENTANGLED_ATTENTION,
    SOFTMAX_IN_INPUT_DTYPE,
    attention_mask_bytes,
    attention_per_token,
    cross_attention_per_token,
    disentangled_per_token,
    kept_kv_width,
    sdpa_math,
    sdpa_math_backward_per_token,
)
from vramlens.estimate.components.buffers import (
    fsdp_backward_working_set,
    fsdp_root_unsharded,
    fsdp_unit_bytes,
    gathered_layer_bytes,
    zero3_persistent_gradients,
    zero_buffers,
    zero_step_grad_copy,
)
from vramlens.estimate.components.checkpointing import (
    block_input_per_token,
    checkpoint_per_token,
    checkpointed_blocks,
    fsdp_kept_block_grads,
    layers_keeping_everything,
    op_saved_mms,
    op_saved_per_token,
    recomputes,
    saved_per_token,
)
from vramlens.estimate.components.common import (
    ATTN_LINEARS,
    DTYPE_BYTES,
    HF_C_ATTN_FAMILIES,
    HF_FUSED_FAMILIES,
    HF_ONE_QKV_LINEAR,
    MLP_LINEARS,
    OWN_LINEAR_FAMILIES,
    amp_fp32_stream,
    as_loaded,
    compiled_block,
    fp32_residual,
    has_linear,
    hf_fused_groups,
    linear_in_features,
    linear_out_features,
    mlp_bytes,
    unsloth_kernels,
)
from vramlens.estimate.components.experts import (
    ExpertParam,
    expert_adapter_notes,
    expert_bytes,
    expert_loop,
    expert_parameters,
    expert_weight_copies,
    expert_weight_grad,
    experts_adaptable,
    fused_experts,
)
from vramlens.estimate.components.gradients import gradients
from vramlens.estimate.components.linears import (
    LinearInputs,
    adapter_input,
    amp_input_casts,
    linear_inputs_per_token,
    o_input_per_token,
    o_keeps_attention_output,
)
from vramlens.estimate.components.logits import (
    TORCHTUNE_CE_CHUNKS,
    TRL_TOKEN_TILE,
    TRL_VOCAB_TILE,
    chunked_ce_per_logit,
    chunked_head_backward_bytes,
    eager_chunked_ce,
    head_loss_bytes,
    head_trains,
    logits_per_token,
    loss_forward_per_token,
    loss_parallel_per_token,
    trl_fused_head,
)
from vramlens.estimate.components.megatron import (
    MEGATRON_EMBED_INPUT_BYTES,
    expert_tp,
    megatron_activations,
    megatron_core_attention_per_token,
    megatron_dp,
    megatron_head_per_token,
    megatron_layer_per_token,
    megatron_state_bytes,
    megatron_step,
)
from vramlens.estimate.components.mixers import deltanet_bytes, deltanet_per_token, deltanet_sizes, short_conv_per_token
from vramlens.estimate.components.mlp import GELU_TANH_FAMILIES, dense_layer_plan, mlp_keeps_per_token, mlp_per_token
from vramlens.estimate.components.norms import (
    FP32_NORM_WEIGHT_FAMILIES,
    SHARED_NORM_INPUT,
    final_norm_per_token,
    first_block_input_frozen,
    fp32_norm_weights,
    norms_per_token,
    parallel_block,
)
from vramlens.estimate.components.objectives import (
    kv_cache,
    model_weights,
    no_grad_forward,
    value_model,
    value_model_paged_state,
)
from vramlens.estimate.components.optimizer import (
    QGALORE_GROUP,
    low_rank_int8_params,
    low_rank_linears,
    low_rank_projection_bytes,
    low_rank_state,
    low_rank_svd_transient,
    optimizer_state,
    optimizer_temporaries,
)
from vramlens.estimate.components.parameters import (
    GPTQ_GROUP,
    Params,
    head_quantized,
    params,
    quantized_bytes_per_param,
)
from vramlens.estimate.components.peaks import (
    attention_backward_freed,
    backward_block_per_token,
    disentangled_attention_peak,
    disentangled_forward_per_token,
    math_attention_block_per_token,
)
from vramlens.estimate.components.pipeline import (
    Stage,
    device_map_devices,
    device_map_note,
    device_map_phases,
    in_flight_microbatches,
    pipeline_stage_share,
    stage_layers,
    stages,
)
from vramlens.estimate.components.sharding import (
    fsdp_gather_bytes,
    fsdp_gathers_16bit,
    fsdp_sharded,
    shard_factor,
    zero_shard_factor,
)
from vramlens.estimate.components.ssm import (
    jamba_mixer_bytes,
    jamba_mixer_per_token,
    mamba2_layer_flags,
    mamba2_mixer_bytes,
    mamba2_mixer_per_token,
    mamba2_sizes,
    mamba_backward_per_token,
    mamba_layer_bytes,
    mamba_layer_per_token,
    ssd_chunk_scan_bytes,
)
from vramlens.estimate.components.t5 import (
    hf_t5,
    keep_in_fp32_params,
    t5_bias_bytes,
    t5_block_extras,
    t5_cross_attention_per_token,
    t5_global_per_token,
    t5_loss_per_token,
)
from vramlens.estimate.components.trained import backward_layers, counted_layers, trained_params, weight_grad_share
from vramlens.estimate.components.vision import (
    QWEN_VL_FAMILIES,
    image_block_mask,
    vision_activations,
    vision_adapted,
    vision_adapter_params,
    vision_gets_gradients,
    vision_linear_params,
    vision_linears,
)
from vramlens.estimate.components.weight_copies import (
    NF4_DEQUANT_PEAK_BYTES,
    autocast_forward_cache,
    autocast_weight_cache,
    dequantized_head,
    nf4_dequant_transient,
    recompute_weight_copies,
)
from vramlens.estimate.components.weights import (
    TORCHTUNE_FULL_WIDTH_ROPE,
    model_buffers,
    torchtune_rope_cache_bytes,
    weights,
)
from vramlens.estimate.shapes import shapes

__all__ = [
    "ATTENTION_DROPOUTS",
    "ATTN_LINEARS",
    "DIRECT_SDPA_FAMILIES",
    "DISENTANGLED_ATTENTION",
    "DTYPE_BYTES",
    "FP32_NORM_WEIGHT_FAMILIES",
    "GELU_TANH_FAMILIES",
    "GPTQ_GROUP",
    "HF_C_ATTN_FAMILIES",
    "HF_FUSED_FAMILIES",
    "HF_ONE_QKV_LINEAR",
    "MEGATRON_EMBED_INPUT_BYTES",
    "MLP_LINEARS",
    "NF4_DEQUANT_PEAK_BYTES",
    "OWN_LINEAR_FAMILIES",
    "QGALORE_GROUP",
    "QWEN_VL_FAMILIES",
    "RESIDUAL_DROPOUTS",
    "SHARED_NORM_INPUT",
    "SOFTMAX_IN_INPUT_DTYPE",
    "TORCHTUNE_CE_CHUNKS",
    "TORCHTUNE_FULL_WIDTH_ROPE",
    "TRL_TOKEN_TILE",
    "TRL_VOCAB_TILE",
    "VECTOR_METHODS",
    "ExpertParam",
    "LinearInputs",
    "Params",
    "Stage",
    "device_map_devices",
    "device_map_note",
    "device_map_phases",
    "activations_per_token",
    "adapter_input",
    "amp_fp32_stream",
    "amp_input_casts",
    "as_loaded",
    "attention_backward_freed",
    "attention_mask_bytes",
    "attention_per_token",
    "autocast_forward_cache",
    "autocast_weight_cache",
    "backward_block_per_token",
    "backward_layers",
    "block_input_per_token",
    "checkpoint_per_token",
    "checkpointed_blocks",
    "chunked_ce_per_logit",
    "chunked_head_backward_bytes",
    "compiled_block",
    "counted_layers",
    "cross_attention_per_token",
    "dequantized_head",
    "disentangled_attention_peak",
    "disentangled_forward_per_token",
    "disentangled_per_token",
    "dora_per_token",
    "dora_recomputes_base",
    "dora_targets",
    "dora_version_notes",
    "dora_weight_copies",
    "dora_weight_norm_transient",
    "eager_chunked_ce",
    "expert_adapter_notes",
    "expert_bytes",
    "expert_loop",
    "expert_parameters",
    "expert_tp",
    "expert_weight_copies",
    "expert_weight_grad",
    "experts_adaptable",
    "final_norm_per_token",
    "first_block_input_frozen",
    "fp32_norm_weights",
    "fp32_residual",
    "fsdp_backward_working_set",
    "fsdp_gather_bytes",
    "fsdp_gathers_16bit",
    "fsdp_kept_block_grads",
    "fsdp_root_unsharded",
    "fsdp_sharded",
    "fsdp_unit_bytes",
    "fused_experts",
    "gathered_layer_bytes",
    "gradients",
    "has_linear",
    "head_loss_bytes",
    "head_quantized",
    "head_trains",
    "hf_fused_groups",
    "hf_t5",
    "image_block_mask",
    "in_flight_microbatches",
    "keep_in_fp32_params",
    "kept_kv_width",
    "kv_cache",
    "layers_keeping_everything",
    "linear_in_features",
    "linear_inputs_per_token",
    "linear_out_features",
    "logits_per_token",
    "loss_forward_per_token",
    "loss_parallel_per_token",
    "low_rank_int8_params",
    "low_rank_linears",
    "low_rank_projection_bytes",
    "low_rank_state",
    "low_rank_svd_transient",
    "mamba_backward_per_token",
    "short_conv_per_token",
    "deltanet_bytes",
    "deltanet_per_token",
    "deltanet_sizes",
    "mamba_layer_bytes",
    "mamba_layer_per_token",
    "mamba2_mixer_bytes",
    "jamba_mixer_bytes",
    "jamba_mixer_per_token",
    "mamba2_layer_flags",
    "dense_layer_plan",
    "mlp_keeps_per_token",
    "mamba2_mixer_per_token",
    "mamba2_sizes",
    "ssd_chunk_scan_bytes",
    "math_attention_block_per_token",
    "megatron_activations",
    "megatron_core_attention_per_token",
    "megatron_dp",
    "megatron_head_per_token",
    "megatron_layer_per_token",
    "megatron_state_bytes",
    "megatron_step",
    "mlp_bytes",
    "mlp_per_token",
    "model_buffers",
    "model_weights",
    "nf4_dequant_transient",
    "no_grad_forward",
    "norms_per_token",
    "o_input_per_token",
    "o_keeps_attention_output",
    "op_saved_mms",
    "op_saved_per_token",
    "optimizer_state",
    "optimizer_temporaries",
    "parallel_block",
    "params",
    "pipeline_stage_share",
    "quantized_bytes_per_param",
    "recompute_weight_copies",
    "recomputes",
    "residual_dropouts_per_token",
    "saved_per_token",
    "sdpa_math",
    "sdpa_math_backward_per_token",
    "shapes",
    "shard_factor",
    "stage_layers",
    "stages",
    "t5_bias_bytes",
    "t5_block_extras",
    "t5_cross_attention_per_token",
    "t5_global_per_token",
    "t5_loss_per_token",
    "torchtune_rope_cache_bytes",
    "trained_params",
    "trl_fused_head",
    "unsloth_kernels",
    "value_model",
    "value_model_paged_state",
    "vector_adapter_params",
    "vector_adapter_per_token",
    "vera_projection_params",
    "vision_activations",
    "vision_adapted",
    "vision_adapter_params",
    "vision_gets_gradients",
    "vision_linear_params",
    "vision_linears",
    "weight_grad_share",
    "weights",
    "zero3_persistent_gradients",
    "zero_buffers",
    "zero_step_grad_copy",
    "zero_shard_factor",
]
