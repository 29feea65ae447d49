"""The concept registry: each setting of a `TrainingPlan` declared once, with every argument name that means it.

A reader of a framework's arguments, or of a custom training script's own argument definitions, asks `match(name,
type)` which plan concept an argument sets. Spellings are the argument names the frameworks themselves define (their
dumped schemas under `frameworks/schemas/`, and the readers in `formats/`): written without dashes, lower case; a
dotted spelling (`train.micro_batch_size`, OpenRLHF's and torchtitan's nested arguments) matches as written, and any
dotted name is also tried by each shorter dotted suffix down to its last part (`actor.lora.rank` as `lora.rank`).

`METHOD_SWITCHES` are flags that set a concept to a fixed value when true (`--use_lora`, `--load_in_4bit`, `--bf16`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vramlens.plan import PLAN_CONCEPTS


@dataclass(frozen=True)
class Concept:
    name: str  # the TrainingPlan field, e.g. "micro_batch"
    type: str  # "int" | "float" | "bool" | "str" | "list" | "dtype" | "model"
    title: str  # "micro-batch size per GPU"
    memory: bool  # changes memory
    speed: bool  # changes speed
    spellings: tuple[str, ...]  # argument names that mean it, without dashes


_C = Concept
_ALL: tuple[Concept, ...] = (
    # model
    _C(
        "model_id",
        "model",
        "model",
        True,
        True,
        (
            "model_name_or_path",
            "model_id_or_path",
            "pretrained_model_name_or_path",
            "model_name",
            "model_id",
            "base_model",
            "base_model_config",
            "model",
            "pretrain",
            "model.model_name_or_path",
            "model.name",
            "model.hf_assets_path",
            "model.pretrained_model_name_or_path",
            "config_name",
            "model_path",
            "actor_rollout_ref.model.path",
            "model.path",
            "model_type",
        ),
    ),
    _C(
        "weight_dtype",
        "dtype",
        "weight dtype",
        True,
        True,
        (
            "torch_dtype",
            "dtype",
            "model_dtype",
            "param_dtype",
            "infer_dtype",
            "mixed_precision_param",
            "training.mixed_precision_param",
            "model.param_dtype",
            "train.param_dtype",
        ),
    ),
    _C(
        "amp_dtype",
        "dtype",
        "mixed-precision compute dtype",
        True,
        True,
        ("precision", "mixed_precision", "amp_dtype", "train.precision"),
    ),
    # batch and sequence
    _C(
        "micro_batch",
        "int",
        "micro-batch size per GPU",
        True,
        True,
        (
            "per_device_train_batch_size",
            "per_gpu_train_batch_size",
            "micro_batch_size",
            "micro_train_batch_size",
            "train_micro_batch_size_per_gpu",
            "batch_size",
            "train_batch_size_per_device",
            "train.micro_batch_size",
            "training.local_batch_size",
            "training.batch_size",
            "train.micro_train_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "micro_batch_size_per_device",
            "train_micro_batch_size",
            "micro_batch_size_per_gpu",
            "local_batch_size",
            "step_scheduler.local_batch_size",
            "ppo_micro_batch_size",
        ),
    ),
    _C(
        "grad_accum",
        "int",
        "gradient accumulation steps",
        False,
        True,
        (
            "gradient_accumulation_steps",
            "gradient_accumulation",
            "accumulate_grad_batches",
            "grad_accum",
            "gradient_accumulation_iters",
        ),
    ),
    _C(
        "global_batch",
        "int",
        "global batch size",
        False,
        True,
        (
            "train_batch_size",
            "global_batch_size",
            "train.batch_size",
            "train.train_batch_size",
            "training.global_batch_size",
            "total_batch_size",
        ),
    ),
    _C(
        "seq_len",
        "int",
        "sequence length",
        True,
        True,
        (
            "max_seq_length",
            "max_length",
            "max_len",
            "max_seq_len",
            "seq_length",
            "seq_len",
            "sequence_len",
            "sequence_length",
            "cutoff_len",
            "model_max_length",
            "block_size",
            "max_source_length",
            "max_model_len",
            "training.seq_len",
            "data.max_len",
            "dataset.seq_len",
            "packing_length",
            "max_packed_sequence_len",
            "packed_sequence_size",
            "context_length",
        ),
    ),
    _C(
        "packing",
        "bool",
        "sequence packing",
        True,
        True,
        (
            "packing",
            "padding_free",
            "neat_packing",
            "sample_packing",
            "packing_samples",
            "ds.packing_samples",
            "data.packing_samples",
            "pack_sequence",
            "packed",
            "packed_sequence",
        ),
    ),
    _C(
        "eval_batch",
        "int",
        "evaluation batch size per GPU",
        True,
        True,
        ("per_device_eval_batch_size", "per_gpu_eval_batch_size", "eval_batch_size", "micro_eval_batch_size"),
    ),
    # activations
    _C(
        "grad_checkpointing",
        "bool",
        "activation (gradient) checkpointing",
        True,
        True,
        (
            "gradient_checkpointing",
            "enable_activation_checkpointing",
            "activation_checkpointing",
            "use_unsloth_gc",
            "train.gradient_checkpointing",
            "enable_gradient_checkpointing",
            "grad_checkpointing",
            "activation_checkpoint.mode",
            "gradient_checkpointing_enable",
        ),
    ),
    _C(
        "ckpt_reentrant",
        "bool",
        "reentrant activation checkpointing",
        True,
        True,
        (
            "use_reentrant",
            "use_reentrant_gc",
            "gradient_checkpointing_use_reentrant",
            "train.gradient_checkpointing_use_reentrant",
            "gradient_checkpointing_reentrant",
        ),
    ),
    _C(
        "activation_offload",
        "bool",
        "activation offloading",
        True,
        True,
        ("activation_offloading", "enable_activation_offloading", "offload_activations", "enable_activation_offload"),
    ),
    _C(
        "attn_impl",
        "str",
        "attention implementation",
        True,
        True,
        (
            "attn_implementation",
            "attn_impl",
            "flash_attn",
            "attention_implementation",
            "attn_type",
            "model.attn_implementation",
        ),
    ),
    _C(
        "trust_remote_code",
        "bool",
        "the model repository's own modeling code (config.json `auto_map`) in place of transformers' class",
        True,
        True,
        ("trust_remote_code", "model.trust_remote_code"),
    ),
    _C(
        "compile",
        "bool",
        "torch.compile",
        True,
        True,
        (
            "torch_compile",
            "compile",
            "use_torch_compile",
            "training.compile",
            "compile.enable",
            "torch_compile_mode",
            "torch_compile_backend",
        ),
    ),
    _C("loss_impl", "str", "loss implementation (chunked or fused cross-entropy)", True, True, ("loss", "loss_impl")),
    _C(
        "fused_kernels",
        "list",
        "fused Triton kernels (RMSNorm, RoPE, SwiGLU; Liger's keep each norm's input and 1/rms, the MLP's gate and up)",
        True,
        True,
        ("liger_rms_norm", "liger_rope", "liger_glu_activation", "liger_swiglu", "liger_layer_norm"),
    ),
    _C("float8_linears", "list", "float8 linears (torchao Float8Linear)", True, True, ("model.converters",)),
    _C("qat", "str", "quantization-aware training (torchao fake-quantized linears)", True, True, ("qat",)),
    _C(
        "float8_all_gather",
        "bool",
        "float8 all-gather of FSDP2 weights (torchao)",
        False,
        True,
        ("enable_fsdp_float8_all_gather", "quantize.linear.float8.enable_fsdp_float8_all_gather"),
    ),
    # optimizer
    _C(
        "optimizer",
        "str",
        "optimizer",
        True,
        True,
        ("optim", "optimizer", "optimizer._component_", "optimizer.name", "optimizer_type", "optim_type"),
    ),
    _C(
        "optimizer_impl",
        "str",
        "optimizer implementation (foreach, fused)",
        True,
        True,
        ("fused_optimizer", "optimizer.implementation", "optimizer_impl"),
    ),
    _C(
        "optimizer_in_bwd",
        "bool",
        "optimizer step in the backward pass",
        True,
        True,
        ("optimizer_in_bwd", "optimizer_in_backward", "optimizer.early_step_in_backward"),
    ),
    _C("zero_grad_set_to_none", "bool", "gradients freed after each step", True, False, ("set_to_none",)),
    # PEFT
    _C(
        "peft_method",
        "str",
        "fine-tuning method (full, LoRA, QLoRA, freeze, ...)",
        True,
        True,
        (
            "finetuning_type",
            "sft_type",
            "tuner_type",
            "train_type",
            "adapter",
            "peft_type",
            "peft_method",
            "peft.peft_type",
        ),
    ),
    _C(
        "lora_r",
        "int",
        "LoRA rank",
        True,
        False,
        (
            "lora_r",
            "lora_rank",
            "lora_dim",
            "vera_rank",
            "peft.lora_rank",
            "model.lora_rank",
            "adapter_rank",
            "lora.rank",
        ),
    ),
    _C(
        "lora_alpha",
        "float",
        "LoRA alpha",
        False,
        False,
        ("lora_alpha", "peft.lora_alpha", "model.lora_alpha", "lora.alpha"),
    ),
    _C(
        "lora_dropout",
        "float",
        "LoRA dropout",
        True,
        True,
        ("lora_dropout", "lora_dropout_p", "vera_dropout", "peft.lora_dropout", "model.lora_dropout", "lora.dropout"),
    ),
    _C(
        "lora_targets",
        "list",
        "LoRA target modules",
        True,
        True,
        (
            "lora_target_modules",
            "target_modules",
            "lora_target",
            "lora_attn_modules",
            "lora_modules",
            "peft.target_modules",
            "model.target_modules",
            "lora.target_modules",
            "lora_target_linear",
            "target_regex",  # ms-swift: replaces target_modules (formats/shell.py `_swift_target_regex`)
            "lora_target_regex",  # ms-swift 2.x's spelling of it
            # ms-swift 1.x/2.x's targets of its other tuners (v2.6.1 swift/llm/utils/argument.py: each sets
            # target_modules, lora_target_modules last)
            "ia3_target_modules",
            "vera_target_modules",
            "boft_target_modules",
        ),
    ),
    _C(
        "feedforward_targets",
        "list",
        "IA3 feed-forward modules",
        False,
        False,
        ("feedforward_modules", "ia3_feedforward_modules"),
    ),
    _C(
        "modules_to_save",
        "list",
        "fully trained extra modules",
        True,
        True,
        ("modules_to_save", "lora_modules_to_save", "additional_target", "additional_trainable_parameters"),
    ),
    _C(
        "trained_layers",
        "int",
        "trained decoder layers (freeze tuning, LLaMA-Pro, LISA)",
        True,
        True,
        (
            "freeze_trainable_layers",
            "num_layer_trainable",
            "lisa_activated_layers",
            "lisa_n_layers",
            "lisa_layers",
        ),
    ),
    _C(
        "trained_modules",
        "list",
        "trained modules inside the trained layers",
        True,
        True,
        ("freeze_trainable_modules", "trainable_modules", "name_module_trainable"),
    ),
    _C(
        "trained_extra",
        "list",
        "trained modules outside the layers",
        True,
        True,
        ("freeze_extra_modules", "trainable_parameters", "unfrozen_parameters"),
    ),
    _C("trained_where", "str", "which layers train", False, False, ("badam_mode",)),
    _C(
        "frozen_share",
        "float",
        "share of the parameters frozen, first ones first",
        True,
        True,
        ("freeze_parameters_ratio",),
    ),
    _C(
        "trainable_fp32",
        "bool",
        "trainable weights upcast to fp32",
        True,
        True,
        ("upcast_layernorm", "upcast_lmhead_output"),
    ),
    _C(
        "optimizer_rank",
        "int",
        "GaLore/APOLLO projection rank",
        True,
        True,
        ("galore_rank", "apollo_rank", "optim_args"),
    ),
    _C(
        "optimizer_targets",
        "list",
        "matrices with projected optimizer states",
        True,
        True,
        ("galore_target", "galore_target_modules", "apollo_target", "optim_target_modules"),
    ),
    _C(
        "optimizer_proj_bits", "int", "Q-GaLore projection bits", True, False, ("galore_proj_bits", "qgalore_proj_bits")
    ),
    _C(
        "added_layers",
        "int",
        "decoder blocks added to the model (LLaMA-Pro)",
        True,
        True,
        ("llamapro_num_new_blocks", "num_new_blocks"),
    ),
    _C("task_head", "str", "model head", True, True, ("task_type", "lora_task_type", "problem_type", "num_labels")),
    # quantization
    _C(
        "quant_bits",
        "int",
        "weight quantization bits",
        True,
        True,
        ("quantization_bit", "quant_bits", "bits", "quantization_bits", "load_in_kbit"),
    ),
    _C(
        "quant_type",
        "str",
        "quantization type (nf4, fp4, ...)",
        True,
        True,
        (
            "bnb_4bit_quant_type",
            "quantization_type",
            "quant_type",
            "quant_method",
            "quantization_method",
            "bnb_4bit_quant_type",
        ),
    ),
    _C(
        "quant_double",
        "bool",
        "double quantization",
        True,
        False,
        (
            "bnb_4bit_use_double_quant",
            "use_bnb_nested_quant",
            "double_quantization",
            "double_quant",
            "use_nested_quant",
        ),
    ),
    _C(
        "quant_storage_dtype",
        "dtype",
        "quantized weight storage dtype",
        True,
        False,
        ("bnb_4bit_quant_storage", "quant_storage", "bnb_4bit_quant_storage_dtype"),
    ),
    _C(
        "quant_compute_dtype",
        "dtype",
        "quantized compute dtype",
        True,
        True,
        ("bnb_4bit_compute_dtype", "compute_dtype", "bnb_4bit_comp_dtype"),
    ),
    _C(
        "experts_quantized",
        "bool",
        "MoE experts' fused weights quantized on load",
        True,
        True,
        ("quantize_moe_experts",),
    ),
    _C(
        "embeddings_skip_upcast",
        "bool",
        "the k-bit preparation leaves the embeddings and LM head in 16 bits",
        True,
        False,
        ("embeddings_skip_upcast",),
    ),
    _C(
        "expert_targets",
        "list",
        "LoRA on MoE expert parameters",
        True,
        True,
        ("lora_target_parameters", "target_parameters"),
    ),
    # distribution
    _C(
        "dist_strategy",
        "str",
        "distribution (DDP, DeepSpeed, FSDP)",
        True,
        True,
        (
            "deepspeed",
            "fsdp",
            "strategy",
            "distributed_type",
            "dist_strategy",
            "ds_config",
            "deepspeed_config",
            "parallelism.data_parallel_shard_degree",
            "fsdp_sharding_strategy",
            "data_parallel_sharding_strategy",
        ),
    ),
    _C(
        "zero_stage",
        "int",
        "ZeRO stage",
        True,
        True,
        ("zero_stage", "ds.zero_stage", "zero_optimization.stage", "deepspeed.zero_stage"),
    ),
    _C(
        "offload_optimizer",
        "bool",
        "optimizer state offloading",
        True,
        True,
        (
            "adam_offload",
            "offload_optimizer",
            "ds.adam_offload",
            "cpu_offload",
            "optimizer_offload",
            "fsdp_offload_params",
            "training.enable_cpu_offload",
            "enable_cpu_offload",
            "offload",
        ),
    ),
    _C(
        "offload_params",
        "bool",
        "parameter offloading",
        True,
        True,
        ("offload_params", "offload_param", "param_offload", "fsdp_cpu_offload", "fsdp_cpu_ram_efficient_loading"),
    ),
    # verl's between-update offloads (formats/verl.py `_distribution`): the actor's and the SFT engine's
    _C(
        "offload_params_idle",
        "bool",
        "parameters offloaded between updates",
        True,
        True,
        ("actor.fsdp_config.param_offload", "actor.megatron.param_offload", "engine.param_offload"),
    ),
    _C(
        "offload_optimizer_idle",
        "bool",
        "optimizer state offloaded between updates",
        True,
        True,
        (
            "actor.fsdp_config.optimizer_offload",
            "actor.megatron.optimizer_offload",
            "engine.optimizer_offload",
            "deepspeed_enable_sleep",
        ),
    ),
    # DeepSpeed ZeRO's buffer sizes (https://www.deepspeed.ai/docs/config-json/, `zero_optimization`)
    _C("zero_reduce_bucket", "int", "ZeRO reduce bucket (elements)", True, True, ("reduce_bucket_size",)),
    _C("zero_overlap_comm", "bool", "ZeRO reduction overlapped with the backward", True, True, ("overlap_comm",)),
    _C(
        "zero3_prefetch_bucket",
        "int",
        "ZeRO-3 prefetch bucket (elements)",
        True,
        True,
        ("stage3_prefetch_bucket_size",),
    ),
    _C(
        "zero3_persistence_threshold",
        "int",
        "ZeRO-3 parameters kept whole up to this size (elements)",
        True,
        True,
        ("stage3_param_persistence_threshold",),
    ),
    _C(
        "zero3_max_live_params",
        "int",
        "ZeRO-3 gathered-parameter limit (elements)",
        True,
        True,
        ("stage3_max_live_parameters",),
    ),
    _C(
        "zero3_max_reuse_distance",
        "int",
        "ZeRO-3 reuse distance (elements)",
        True,
        True,
        ("stage3_max_reuse_distance",),
    ),
    _C("world_size", "int", "world size (all GPUs)", True, True, ("world_size", "num_processes", "nproc_per_node")),
    _C(
        "tensor_parallel",
        "int",
        "tensor parallel size",
        True,
        True,
        (
            "tensor_parallel_size",
            "tensor_model_parallel_size",
            "tp_size",
            "tp",
            "ds_tensor_parallel_size",
            "parallelism.tensor_parallel_degree",
            "training.tensor_parallel_degree",
            "ds.tensor_parallel_size",
            "deepspeed_autotp_size",
        ),
    ),
    _C(
        "context_parallel",
        "int",
        "context (sequence) parallel size",
        True,
        True,
        (
            "context_parallel_size",
            "sequence_parallel_size",
            "sequence_parallel_degree",
            "ring_attn_size",
            "cp_size",
            "parallelism.context_parallel_degree",
            "ds.ring_attn_size",
            "ulysses_sequence_parallel_size",
        ),
    ),
    _C(
        "pipeline_parallel",
        "int",
        "pipeline parallel size",
        True,
        True,
        (
            "pipeline_model_parallel_size",
            "pipeline_parallel_size",
            "pp_size",
            "pp",
            "parallelism.pipeline_parallel_degree",
            "experimental.pipeline_parallel_degree",
            "training.pipeline_parallel_degree",
        ),
    ),
    _C(
        "virtual_pipeline",
        "int",
        "model chunks per pipeline stage (interleaved schedule)",
        True,
        True,
        ("virtual_pipeline_model_parallel_size",),
    ),
    _C(
        "pipeline_schedule",
        "str",
        "pipeline schedule (torch's pipelining: 1F1B, GPipe, Interleaved1F1B, ZBVZeroBubble, …)",
        True,
        True,
        ("pipeline_parallel_schedule",),
    ),
    _C(
        "expert_parallel",
        "int",
        "expert parallel size",
        True,
        True,
        ("expert_model_parallel_size", "expert_parallel_degree", "expert_parallel_size"),
    ),
    _C(
        "expert_tensor_parallel",
        "int",
        "expert tensor parallel size",
        True,
        True,
        ("expert_tensor_parallel_size", "expert_tensor_parallel_degree"),
    ),
    _C(
        "ep_dispatch",
        "str",
        "expert-parallel token dispatcher (all-gather, DeepEP or HybridEP)",
        True,
        True,
        ("dispatcher",),
    ),
    _C("sequence_parallel", "bool", "Megatron sequence parallelism", True, True, ("sequence_parallel",)),
    _C(
        "recompute_modules",
        "list",
        "Megatron selective recompute modules",
        True,
        True,
        ("recompute_modules",),
    ),
    _C("distributed_optimizer", "bool", "Megatron distributed optimizer", True, True, ("use_distributed_optimizer",)),
    _C(
        "cross_entropy_fusion",
        "bool",
        "Megatron fused vocab-parallel cross-entropy",
        True,
        True,
        ("cross_entropy_loss_fusion",),
    ),
    _C(
        "logprob_micro_batch",
        "int",
        "sequences per GPU in an online-RL log-prob forward",
        True,
        True,
        ("log_prob_micro_batch_size_per_gpu",),
    ),
    _C(
        "grad_buffer_dtype",
        "dtype",
        "Megatron gradient buffer dtype",
        True,
        True,
        ("main_grads_dtype",),
    ),
    _C(
        "precision_aware_optimizer",
        "bool",
        "Megatron's precision-aware optimizer (Transformer Engine's FusedAdam)",
        True,
        True,
        ("use_precision_aware_optimizer",),
    ),
    _C(
        "main_params_dtype",
        "dtype",
        "master weight dtype (precision-aware optimizer)",
        True,
        True,
        ("main_params_dtype",),
    ),
    _C("exp_avg_dtype", "dtype", "Adam first moment dtype (precision-aware optimizer)", True, True, ("exp_avg_dtype",)),
    _C("fp8_recipe", "str", "Transformer Engine FP8 recipe (Megatron)", True, True, ("fp8_recipe",)),
    _C(
        "exp_avg_sq_dtype",
        "dtype",
        "Adam second moment dtype (precision-aware optimizer)",
        True,
        True,
        ("exp_avg_sq_dtype",),
    ),
    _C(
        "optimizer_offload_fraction",
        "float",
        "share of the optimizer offloaded to the CPU (Megatron hybrid optimizer)",
        True,
        True,
        ("optimizer_offload_fraction",),
    ),
    _C(
        "first_stage_layers",
        "int",
        "layers on the first pipeline stage (uneven pipeline)",
        True,
        True,
        ("decoder_first_pipeline_num_layers",),
    ),
    _C(
        "last_stage_layers",
        "int",
        "layers on the last pipeline stage (uneven pipeline)",
        True,
        True,
        ("decoder_last_pipeline_num_layers",),
    ),
    _C(
        "stage_input_weight",
        "int",
        "layers the first pipeline stage's embeddings count as in the stage split (torchtitan)",
        True,
        True,
        ("pipeline_parallel_first_stage_less_layers",),
    ),
    _C(
        "stage_output_weight",
        "int",
        "layers the last pipeline stage's norm and output count as in the stage split (torchtitan)",
        True,
        True,
        ("pipeline_parallel_last_stage_less_layers",),
    ),
    _C(
        "layers_per_stage",
        "int",
        "decoder layers per pipeline stage (torch's pipelining: the count of stages)",
        True,
        True,
        ("pipeline_parallel_layers_per_stage", "layers_per_stage"),
    ),
    _C(
        "critic_micro_batch",
        "int",
        "the critic's micro-batch per GPU (a value model trained in its own step)",
        True,
        True,
        ("critic.ppo_micro_batch_size_per_gpu",),
    ),
    _C(
        "fused_lora",
        "bool",
        "fused LoRA autograd kernels on the attention and the MLP (unsloth's, axolotl's lora_*_kernel)",
        True,
        True,
        ("lora_qkv_kernel", "lora_o_kernel", "lora_mlp_kernel"),
    ),
    _C(
        "teacher_sharding",
        "str",
        "the distillation teacher's own DeepSpeed setup",
        True,
        True,
        ("teacher_deepspeed",),
    ),
    _C(
        "critic_grad_checkpointing",
        "bool",
        "the critic's activation checkpointing, set apart from the actor's",
        True,
        True,
        ("critic.model.enable_gradient_checkpointing",),
    ),
    _C(
        "stage_count_rounding",
        "str",
        "the stage count layers_per_stage gives, rounded up or down to a multiple of the pipeline size",
        True,
        True,
        ("round_virtual_stages_to_pp_multiple",),
    ),
    _C(
        "stage_boundaries",
        "list",
        "the decoder layers where each pipeline stage after the first begins (torchtitan's split points)",
        True,
        True,
        ("pipeline_parallel_split_points",),
    ),
    _C(
        "stage_layers",
        "list",
        "the modules of each pipeline stage, given outright (torch's pipelining)",
        True,
        True,
        ("module_fqns_per_model_part",),
    ),
    _C(
        "recompute_method",
        "str",
        "full recompute method (uniform, block)",
        True,
        True,
        ("recompute_method", "activations_checkpoint_method"),
    ),
    _C(
        "recompute_layers",
        "int",
        "layers recomputed per unit",
        True,
        True,
        ("recompute_num_layers", "activations_checkpoint_num_layers"),
    ),
    _C(
        "checkpoint_every",
        "int",
        "every n-th block checkpointed",
        True,
        True,
        ("selective_ac_option", "activation_checkpoint.selective_ac_option"),
    ),
    _C(
        "selective_recompute",
        "str",
        "selective activation recompute",
        True,
        True,
        ("recompute_granularity", "activations_checkpoint_granularity"),
    ),
    _C("loss_parallel", "bool", "loss parallel over the tensor-parallel ranks", True, True, ("loss_parallel",)),
    _C("compile_loss", "list", "the loss compiled with the model", True, True, ("compile.components",)),
    _C("fsdp_state_dict_type", "str", "FSDP state-dict type", False, True, ("fsdp_state_dict_type",)),
    _C("fsdp_version", "int", "FSDP version", True, True, ("fsdp_version",)),
    _C(
        "fsdp_mixed_precision",
        "str",
        "FSDP mixed-precision policy",
        True,
        True,
        ("mixed_precision_policy", "fsdp_config.mixed_precision_policy", "fsdp_config.mixed_precision"),
    ),
    # environment and hardware
    _C("alloc_conf", "str", "PYTORCH_CUDA_ALLOC_CONF", True, False, ("pytorch_cuda_alloc_conf",)),
    _C("gpu_name", "str", "GPU", True, True, ("gpu", "gpu_name")),
    _C(
        "gpu_count",
        "int",
        "GPU count",
        True,
        True,
        ("gpu_count", "num_gpus", "n_gpus", "num_gpus_per_node", "actor_num_gpus_per_node", "gpus", "n_gpus_per_node"),
    ),
    _C(
        "dp_replicas",
        "int",
        "data-parallel replicas of a hybrid-sharded run (HSDP: FSDP shards within each)",
        True,
        True,
        ("dp_replicate_size", "data_parallel_replicate_degree"),
    ),
    # a reader sets it where a run states its nodes and not its GPUs per node (NeMo AutoModel `benchmark.num_nodes`)
    _C("node_count", "int", "nodes (machines) of the run", True, True, ("num_nodes", "nnodes")),
    # objective
    _C(
        "objective",
        "str",
        "training objective (SFT, DPO, GRPO, ...)",
        True,
        True,
        ("stage", "rlhf_type", "rl", "objective", "trainer_type", "algorithm.adv_estimator"),
    ),
    _C("reference_free", "bool", "reference-free loss", True, True, ("reference_free",)),
    _C(
        "precompute_ref",
        "bool",
        "reference log-probs precomputed",
        True,
        True,
        ("precompute_ref_log_probs", "precompute_ref_batch_size"),
    ),
    _C(
        "ref_model_id",
        "model",
        "reference model",
        True,
        True,
        (
            "ref_model",
            "ref_model_name_or_path",
            "ref_model_id",
            "ref_model_id_or_path",
            "ref_pretrain",
            "ref.model_name_or_path",
        ),
    ),
    _C(
        "ref_dtype",
        "dtype",
        "reference model weight dtype",
        True,
        False,
        ("ref.fsdp_config.model_dtype", "ref.fsdp_config.dtype", "ref.megatron.dtype", "ref_model_dtype"),
    ),
    _C(
        "ref_offload",
        "bool",
        "reference model offloading",
        True,
        True,
        (
            "ref_offload",
            "ref.offload",
            "ref.param_offload",
            "ref.fsdp_config.param_offload",
            "ref.megatron.param_offload",
        ),
    ),
    _C(
        "prompt_len",
        "int",
        "prompt length",
        True,
        True,
        ("max_prompt_length", "prompt_max_len", "max_prompt_len", "data.max_prompt_length", "generate.prompt_max_len"),
    ),
    _C(
        "completion_len",
        "int",
        "completion length",
        True,
        True,
        (
            "max_completion_length",
            "max_new_tokens",
            "generate_max_len",
            "max_response_length",
            "response_length",
            "generate.max_new_tokens",
            "data.max_response_length",
            "max_target_length",
        ),
    ),
    _C(
        "num_generations",
        "int",
        "completions per prompt",
        True,
        True,
        (
            "num_generations",
            "n_samples_per_prompt",
            "rloo_k",
            "rollout.n",
            "rollout.n_samples_per_prompt",
            "num_return_sequences",
        ),
    ),
    # torchtune's PPO and GRPO recipes generate `forward_batch_size` prompts at a time (formats/objective.py)
    _C("generation_batch", "int", "sequences generated at once per GPU", True, True, ("forward_batch_size",)),
    _C("generation", "str", "generation backend (vLLM)", True, True, ("vllm_mode", "use_vllm", "rollout.name")),
    _C(
        "vllm_memory_share",
        "float",
        "vLLM GPU memory share",
        True,
        False,
        (
            "vllm_gpu_memory_utilization",
            "gpu_memory_utilization",
            "vllm.gpu_memory_utilization",
            "vllm_gpu_memory_util",
        ),
    ),
    _C(
        "generation_sleeps",
        "bool",
        "rollout engine released while the policy trains (sleep mode)",
        True,
        True,
        (
            "vllm_enable_sleep",
            "vllm_enable_sleep_mode",
            "enable_sleep",
            "vllm.enable_sleep",
            "free_cache_engine",
            "rollout.free_cache_engine",
            "sleep_level",
        ),
    ),
    _C(
        "generation_eager",
        "bool",
        "rollout engine without CUDA graphs (vLLM enforce_eager)",
        True,
        True,
        ("enforce_eager", "vllm_enforce_eager", "vllm.enforce_eager", "rollout.enforce_eager"),
    ),
    _C(
        "models_apart",
        "list",
        "models on GPUs of their own (OpenRLHF's Ray actor groups, from the --colocate_* flags absent)",
        True,
        True,
        ("colocate_actor_ref", "colocate_critic_reward", "colocate_all_models", "colocate_all"),
    ),
    _C(
        "reward_model_id",
        "model",
        "reward model",
        True,
        True,
        (
            "reward_model",
            "reward_model_path",
            "reward_pretrain",
            "reward_model_name_or_path",
            "reward_model_id",
            "reward.model_name_or_path",
            "reward_model_id_or_path",
        ),
    ),
    _C("value_model", "bool", "PPO value model", True, True, ("value_model", "critic_pretrain", "value_model_path")),
    _C(
        "teacher_model_id",
        "model",
        "distillation teacher",
        True,
        True,
        ("teacher_model", "teacher_model_name_or_path", "teacher_model_id_or_path"),
    ),
    _C(
        "teacher_dtype",
        "dtype",
        "distillation teacher weight dtype",
        True,
        False,
        ("teacher_model_init_kwargs",),
    ),
)

CONCEPTS: dict[str, Concept] = {c.name: c for c in _ALL}

# Flags that, when true, set a concept to a fixed value: spelling -> (concept, value when true).
METHOD_SWITCHES: dict[str, tuple[str, Any]] = {
    # adapters
    "use_lora": ("peft_method", "lora"),
    "use_peft": ("peft_method", "lora"),
    "lora_enable": ("peft_method", "lora"),
    "use_peft_lora": ("peft_method", "lora"),
    "peft": ("peft_method", "lora"),
    "lora": ("peft_method", "lora"),
    "q_lora": ("peft_method", "qlora"),
    "use_qlora": ("peft_method", "qlora"),
    "qlora": ("peft_method", "qlora"),
    "use_dora": ("peft_method", "dora"),
    "peft_use_dora": ("peft_method", "dora"),
    "dora": ("peft_method", "dora"),
    "use_llama_pro": ("trained_where", "spread"),
    "use_galore": ("optimizer", "galore_adamw"),
    "use_apollo": ("optimizer", "apollo_adamw"),
    "use_badam": ("optimizer", "badam"),
    "use_adam_mini": ("optimizer", "adam_mini"),
    "use_muon": ("optimizer", "muon"),
    "lisa": ("trained_where", "rotating"),
    "use_lisa": ("trained_where", "rotating"),
    # quantization
    "load_in_4bit": ("quant_bits", 4),
    "load_in_8bit": ("quant_bits", 8),
    "use_4bit": ("quant_bits", 4),
    "use_8bit": ("quant_bits", 8),
    "4bit": ("quant_bits", 4),
    "8bit": ("quant_bits", 8),
    "use_8bit_quantization": ("quant_bits", 8),
    "use_4bit_quantization": ("quant_bits", 4),
    # precision
    "bf16": ("amp_dtype", "bf16"),
    "fp16": ("amp_dtype", "fp16"),
    "half": ("amp_dtype", "fp16"),
    "bf16_full_eval": ("amp_dtype", "bf16"),
    "pure_bf16": ("weight_dtype", "bf16"),
    "ds.bf16": ("amp_dtype", "bf16"),
    "fp8": ("amp_dtype", "fp8"),
    # activations, kernels, attention
    "disable_gradient_checkpointing": ("grad_checkpointing", False),
    "use_flash_attention_2": ("attn_impl", "flash_attention_2"),
    "use_flash_attn": ("attn_impl", "flash_attention_2"),
    # LLaMA-Factory ≤ 0.6 `flash_attn: bool` (llmtuner 0.6.3 hparams/model_args.py); a string from 0.7.0
    "flash_attn": ("attn_impl", "flash_attention_2"),
    "flash_attention": ("attn_impl", "flash_attention_2"),
    "use_flash_attention": ("attn_impl", "flash_attention_2"),
    "ds.flash_attn": ("attn_impl", "flash_attention_2"),
    "model.flash_attn": ("attn_impl", "flash_attention_2"),
    "chunked_cross_entropy": ("loss_impl", "chunked"),
    "cut_cross_entropy": ("loss_impl", "fused"),
    "liger_fused_linear_cross_entropy": ("loss_impl", "fused"),
    "sdp_attention": ("attn_impl", "sdpa"),
    "xformers_attention": ("attn_impl", "xformers"),
    "use_liger_kernel": ("loss_impl", "fused"),
    "use_liger": ("loss_impl", "fused"),
    "enable_liger_kernel": ("loss_impl", "fused"),
    "liger_kernel": ("loss_impl", "fused"),
    # distribution
    "adam_offload": ("offload_optimizer", True),
    "ds.adam_offload": ("offload_optimizer", True),
    # Megatron's distributed optimizer shards the fp32 main weights and optimizer states over the data-parallel ranks,
    # not the gradients (megatron/core/optimizer/distrib_optimizer.py): its own concept, not ZeRO-1
    "use_distributed_optimizer": ("distributed_optimizer", True),
    "disable_loss_parallel": ("loss_parallel", False),
    "fused": ("optimizer_impl", "fused"),
    "foreach": ("optimizer_impl", "foreach"),
    "lora_target_linear": ("lora_targets", ["all-linear"]),
    # objective
    "use_vllm": ("generation", "generate"),
}


def normalize(arg_name: str) -> str:
    """`--Train.Micro-Batch-Size` → `train.micro_batch_size`."""
    return arg_name.strip().lstrip("-").replace("-", "_").lower()


_SCALAR = {"int", "float", "bool", "str", "dtype", "model"}


def _kinds(type_hint: str) -> set[str] | None:
    """The coarse kinds of value a type annotation can hold ("int", "float", "bool", "str", "list", "dict"), or
    None when it says nothing usable (Any, an unknown class, a missing hint)."""
    t = type_hint.replace(" ", "").lower()
    t = re.sub(r"^(typing\.)?(optional|annotated)\[", "", t)
    for _ in range(8):  # a container's own type counts, not its items': list[int] is a list
        t, n = re.subn(r"(list|tuple|sequence|set|dict|mapping)\[[^\[\]]*\]", r"\1", t)
        if not n:
            break
    kinds: set[str] = set()
    for part in re.split(r"[|,\[\]]", t):
        part = part.removeprefix("typing.")
        if part in ("bool",):
            kinds.add("bool")
        elif part in ("int", "positiveint", "conint", "nonnegativeint"):
            kinds.add("int")
        elif part in ("float", "positivefloat", "confloat"):
            kinds.add("float")
        elif part in ("str", "literal", "dtype", "torch.dtype", "path", "pathlike"):
            kinds.add("str")
        elif part in ("list", "tuple", "sequence", "set"):
            kinds.add("list")
        elif part in ("dict", "mapping"):
            kinds.add("dict")
        elif part.startswith(("'", '"')) or part.lstrip("-").isdigit() or part in ("true", "false"):
            kinds.add("str" if part.startswith(("'", '"')) else "int" if part.lstrip("-").isdigit() else "bool")
        elif part in ("", "none", "nonetype"):
            continue
        elif part == "any" or part == "union":
            return None if part == "any" else kinds or None
        else:
            return None  # a class or an enum we do not know: no opinion
    return kinds or None


# which value kinds each concept type can hold
_ACCEPTS = {
    "int": {"int", "str", "float"},
    "float": {"float", "int", "str"},
    "bool": {"bool", "str", "int"},
    "str": {"str", "list", "dict"},  # a dict: a DeepSpeed/FSDP config given inline
    "list": {"list", "str"},
    "dtype": {"str"},
    "model": {"str"},
}


def _fits(concept_type: str, type_hint: str | None) -> bool:
    if not type_hint:
        return True
    kinds = _kinds(type_hint)
    if kinds is None:
        return True
    if concept_type == "int" and kinds == {"str"}:
        return True  # "auto", "${BS}"; a string-typed int argument is common in CLIs
    if concept_type != "bool" and kinds == {"bool"}:
        return False  # a bool flag is not a batch size, nor a model
    return bool(kinds & _ACCEPTS[concept_type])


_INDEX: dict[str, list[Concept]] = {}
for _c in _ALL:
    for _s in _c.spellings:
        _INDEX.setdefault(normalize(_s), []).append(_c)


def _candidates(name: str) -> list[str]:
    """The name, then its dotted suffixes, longest first: `actor.lora.rank`, `lora.rank`, `rank`."""
    parts = name.split(".")
    return [".".join(parts[i:]) for i in range(len(parts))]


# Flags that add to a list concept when true, read by their framework's reader: torchtune's LoRA builders add the
# MLP's and the output projection's adapters to `lora_attn_modules`' targets (torchtune/models/llama3/
# _component_builders.py `lora_llama3`, read in formats/torchtune.py)
LIST_SWITCHES: dict[str, str] = {
    "apply_lora_to_mlp": "lora_targets",
    "apply_lora_to_output": "lora_targets",
    # axolotl's Liger plugin switches (integrations/liger/args.py `LigerArgs`), the fused-kernel concept's spellings:
    # each true switch adds its kernel
    **dict.fromkeys(CONCEPTS["fused_kernels"].spellings, "fused_kernels"),
    # OpenRLHF's placement switches: the models they leave on GPUs of their own (formats/objective.py
    # `_openrlhf_groups`)
    **dict.fromkeys(
        ("colocate_actor_ref", "colocate_critic_reward", "colocate_all_models", "colocate_all"), "models_apart"
    ),
}


def switch(arg_name: str) -> tuple[str, Any] | None:
    """`use_lora` → ("peft_method", "lora"): the concept a true flag sets, and to what."""
    for n in _candidates(normalize(arg_name)):
        if n in METHOD_SWITCHES:
            return METHOD_SWITCHES[n]
    return None


def match(arg_name: str, type_hint: str | None = None) -> Concept | None:
    """The plan concept an argument of this name (and type annotation, when known) sets, or None."""
    for n in _candidates(normalize(arg_name)):
        if n in METHOD_SWITCHES or n in LIST_SWITCHES:
            if type_hint is None or _fits("bool", type_hint):
                return CONCEPTS[METHOD_SWITCHES[n][0] if n in METHOD_SWITCHES else LIST_SWITCHES[n]]
            continue
        for c in _INDEX.get(n, ()):
            if _fits(c.type, type_hint):
                return c
    return None


# TrainingPlan fields that are not settings of a config: what the file is for, and the reader's bookkeeping
NOT_SETTINGS: dict[str, str] = {
    "purpose": "what a file launches other than training (formats.purpose); no argument sets it",
    "devices_per_process": "the GPUs one process spreads the model over (device_map), derived from the visible GPUs "
    'per process (ms-swift `is_mp`) or `device_map="auto"`; no argument of its own sets it',
    "critic_group": "the models that share the critic's GPUs (OpenRLHF's --colocate_critic_reward), set by the "
    "OpenRLHF reader",
    "offload_idle_scope": "how long a framework's offloads between updates last (the generation alone, or from one "
    "update to the next): the framework's, set by its reader",
    "critic_model_id": "the critic's checkpoint, set by the OpenRLHF and verl readers (`--critic_pretrain`, "
    "`critic.model.path`, whose spelling also says a critic trains: `value_model`)",
}

assert set(CONCEPTS) <= set(PLAN_CONCEPTS), set(CONCEPTS) - set(PLAN_CONCEPTS)
assert all(v[0] in CONCEPTS for v in METHOD_SWITCHES.values())
