"""Framework arguments that look as if they changed memory or speed, and what vramlens does about them.

`judged(name)` is the rule that decides which dumped arguments must be accounted for: an argument whose name has a
word of `WORDS` (batch, seq/len, lora, target, quant, bits, dtype, precision, bf16/fp16, checkpointing, offload,
zero, fsdp, parallel, optim, galore, lisa, packing, attn, flash, compile, liger, kernel, gradient, accumulation, ...).
"checkpoint" alone is not such a word: it names saved files (`resume_from_checkpoint`); the activation kind is
"checkpointing" or "recompute". Each such
argument of every dumped schema (`frameworks/schemas/`) either maps to a plan concept (`concepts.match`), or is
listed here: in `IRRELEVANT` with a one-line reason why it does not change training memory or speed as estimated,
or in `NOT_MODELLED` with what it is and what the estimate does instead (the text a reader passes to
`PlanBuilder.unmodelled`). `tests/frameworks/test_schema_coverage.py` holds every dump to this.

Names are written as the frameworks spell them, without dashes; a dotted name (`actor.lora_rank`) is also looked up
by its last part, and then by each shorter dotted suffix.
"""

from __future__ import annotations

import re

# Words (whole parts of a name split at `_`, `.` and `-`) that mark an argument as possibly changing memory or speed.
WORDS = re.compile(
    r"""^(
    batch|micro|mbs|bsz|bs|seq|len|length|cutoff|
    lora|qlora|dora|peft|adapters?|tuner|target|targets|regex|
    freeze|frozen|trainable|unfrozen|galore|apollo|badam|lisa|llamapro|rslora|
    quant|quantization|quantize|bits?|\dbit|bnb|gptq|awq|hqq|eetq|
    dtype|precision|bf16|fp16|fp8|fp32|amp|mixed|
    checkpointing|recompute|reentrant|activations?|
    offload|offloading|zero|fsdp|fsdp2|deepspeed|ds|sharding|shard|parallel|parallelism|tp|pp|cp|ulysses|ring|
    optim|optimizer|optimizers|
    packing|pack|packed|padding_free|
    attn|attention|flash|sdpa|xformers|flex|
    compile|liger|kernel|kernels|fused|fuse|chunked|chunk|tiled|
    gradient|gradients|grad|accumulation|accum|
    vllm|generations|memory|gpu|gpus|unsloth|
    colocate|bucket|cache|experts|wake|sleep|empty|float8|summon
)$""",
    re.VERBOSE,
)


def judged(name: str) -> bool:
    """Whether an argument's name says it may change memory or speed (the rule above). A nested argument is judged
    by its last two parts (`fsdp_config.param_offload`): the outer sections of a config tree (verl's
    `actor_rollout_ref`) name where a setting lives, not what it does."""
    tail = ".".join(name.lower().split(".")[-2:])
    return any(WORDS.match(part) for part in re.split(r"[._\-]", tail) if part)


def lookup(table: dict, name: str):
    """`table[name]`, else by the last part of a dotted name, then by each shorter dotted suffix."""
    name = name.lstrip("-").replace("-", "_")
    if name in table:
        return table[name]
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        key = ".".join(parts[i:])
        if key in table:
            return table[key]
    return None


def _names(entry, names: str) -> dict:
    """The same entry for each of the space-separated names."""
    return {n: entry for n in names.split()}


# name -> why it does not change training memory or speed as estimated
IRRELEVANT: dict[str, str] = {
    **_names(
        "a target value of the RL loss (the adaptive KL controller's or an entropy bonus's aim), not a module",
        "kl_target algo.kl.target algorithm.kl_ctrl.target_kl ppo_target entropy_target trl.entropy_target "
        # TRL 0.8 PPOConfig `target` / `target_kl` (the adaptive KL controller's target, early stopping)
        "target target_kl",
    ),
    **_names(
        "AdaLoRA's mean rank after pruning: its matrices are allocated at the initial rank and masked, not shrunk "
        "(peft 0.21.2 tuners/adalora/layer.py `RankAllocator.mask_to_budget`)",
        "adalora_target_r",
    ),
    **_names("a regular expression vLLM's structured outputs constrain generation with", "structured_outputs_regex"),
    **_names(
        "a private field Megatron-SWIFT sets itself (whether the teacher is the policy's base model with its adapters "
        "off: ms-swift v4.6.0 swift/megatron/arguments/megatron_args.py), not a command-line choice",
        "_teacher_use_disable_adapter",
    ),
    **_names(
        "a checkpoint of adapter weights to start from (Megatron-SWIFT `adapter_load`, `mcore_adapter`): the "
        "adapters' size is the LoRA rank's",
        "adapter_load mcore_adapter",
    ),
    **_names(
        "how many times TRL's on-policy trainers generate sample completions to log during training, not samples "
        'per prompt (trl v0.19.1 trainer/utils.py `OnPolicyConfig.num_sample_generations`: "Number of debugging '
        'samples generations")',
        "num_sample_generations",
    ),
    **_names(
        "computed by TRL's PPO/RLOO trainer from the batch and num_mini_batches, a value set is overwritten (trl "
        "v0.19.1 trainer/ppo_trainer.py `args.local_mini_batch_size = exact_div(args.local_batch_size, "
        "args.num_mini_batches, …)`); its micro-batches are per_device_train_batch_size",
        "local_mini_batch_size",
    ),
    **_names(
        "how LLaMA-Factory ≤ 0.7 splits `cutoff_len` between prompt and response when truncating (tokens kept for "
        "the label, llmtuner 0.7.0 hparams/data_args.py): the sequence is still at most `cutoff_len` long",
        "reserved_label_len",
    ),
    **_names(
        "declared but not read: LLaMA-Factory's OFT takes its targets from lora_target (v0.9.5 and 2026 HEAD "
        "src/llamafactory/model/adapter.py `_setup_lora_tuning`)",
        "oft_target",
    ),
    **_names(
        "the class a NeMo AutoModel section builds, read as text by formats/nemo_automodel.py (nothing imported)",
        "model._target_",
    ),
    **_names(
        "ms-swift builds one GaLore optimizer per parameter and steps them all together at the optimizer step, "
        "as one optimizer would (swift/optimizers/galore/utils.py, v2.0 to v4.5.2): the memory of galore_adamw",
        "galore_optim_per_parameter",
    ),
    **_names(
        "a mapping of options whose entries are read (or listed) one by one under their own names",
        "fsdp_config galore_config liger_kernel_config parallelism_config bnb_config_kwargs vllm_engine_kwargs "
        "vllm_config model_quantization_config_kwargs hyper_parallel_args flex_attn_compile_kwargs kw_args "
        "activation_checkpointing_kwargs gradient_checkpointing_kwargs lora_loftq_config vllm_speculative_config "
        "override_optimizer_config freeze_config teacher_freeze_config torch_compile_options engine_kwargs.vllm "
        "quantization model_quantization_config deepspeed_config_path "
        "quantization_config_file hqq_dynamic_config_path lora_model_dir  "
        "tensor_parallel_plan._component_ fp8_config.recipe tensor_parallel_plan",
    ),
    **_names(
        "optimizer hyper-parameter or schedule: changes the result, not memory or step time",
        "lr min_lr min_lr_ratio lr_decay_steps lr_decay_style lr_scheduler_type lr_warmup_init lr_warmup_steps "
        "lr_warmup_steps_ratio lr_wsd_decay_steps lr_wsd_decay_style warmup_style weight_decay "
        "weight_decay_incr_style beta1 beta2 betas eps num_cycles clip_grad clip_grad_norm grad_clip max_grad_norm "
        "max_norm clip_grad_norm.backend unbiased_gradient use_policy_gradient lora_lr_ratio "
        "use_checkpoint_opt_param_scheduler total_training_steps",
    ),
    **_names(
        "adapter initialisation or scaling: the same parameters and activations whatever its value",
        "init_lora_weights peft_init_lora_weights lora_A_init_method lora_B_init_method lora_ga_direction "
        "lora_ga_iters lora_ga_scale lora_ga_stable_gamma lora_ga_batch_size lora_ga_max_length use_rslora "
        "peft_use_rslora lora_alpha_pattern lora_fan_in_fan_out alpha create_new_adapter "
        "peft_ensure_weight_tying dropout attn_dropout dropout_position",
    ),
    **_names(
        "where adapters or weights are saved, loaded or named: no effect on the training step",
        "adapter_name_or_path adapter_path adapter_folder adapter_checkpoint lora_adapter_path model_adapter_name "
        "ref_adapter_name merge_lora save_adapter_weights_only dist_checkpointing_path dist_checkpointing_prefix "
        "use_dist_checkpointing use_ds_universal_ckpt use_universal_ckpt use_flash_ckpt disable_ds_ckpt "
        "enable_async_checkpointing final_state_dict_type fsdp_final_state_dict_type state_dict_type "
        "max_shard_size num_shards offload_folder value_head_prefix save_sliding_window "
        "selective_checkpointing.save use_swift_lora dist_ckpt_optim_fully_reshardable "
        "distrib_optim_fully_reshardable_mem_efficient enable_hf_state_dict_adapter",
    ),
    **_names(
        "evaluation, validation or logging only: not part of the training step's peak",
        "eval_accumulation_steps eval_packing eval_sample_packing eval_sequence_len batch_eval_metrics "
        "val_batch_size val_generations_to_log_to_wandb log_val_generations num_generations_eval fp16_full_eval "
        "log_peak_memory_stats profile_memory profiler_profile_memory skip_memory_metrics enable_memory_snapshot "
        "save_memory_snapshot_folder trace_alloc_max_entries visualize_memory_budget_pareto cuda_memory_usage "
        "torch_memory.context torch_memory.stacks torch_memory.name stacks stack_depth with_memory "
        "memory_estimation.enable precision_debugger.name precision_debugger.config_path precision_debugger.stages "
        "precision_debugger.steps precision_debugger.strict memory_snapshot_num_steps "
        "memory_estimation.enabled activation_checkpoint.debug determinism_check full_determinism "
        "length_column_name group_by_length",
    ),
    **_names(
        "data preparation outside the training step (tokenising, packing bins, loading)",
        "dataset_batch_size preprocessing_batch_size packing_num_proc packing_strategy sample_packing_bin_size "
        "sample_packing_eff_est sample_packing_group_size sample_packing_mp_start_method "
        "sample_packing_sequentially dataset_keep_in_memory dataset_shard_idx dataset_shard_num "
        "dataloader_pin_memory pin_memory cpu_offload_pin_memory train_dataset_mix_ds excess_length_strategy "
        "min_sample_len streaming_partial_batch balance_batch pad_to_sequence_len seed fsdp_config.seed "
        "preserve_rng_state pose_max_context_len",
    ),
    **_names(
        "reward shaping or loss weighting of RL/preference objectives: the same tensors whatever its value",
        "cosine_max_len cosine_max_len_value_correct cosine_max_len_value_wrong cosine_min_len_value_correct "
        "cosine_min_len_value_wrong overlong_buffer_len soft_cache_length soft_max_length length_penalty "
        "completion_length_limit_scope min_response_length max_tool_response_length max_parallel_calls "
        "skip_zero_advantage_batches rollout_is_batch_normalize replay_recompute_logps seq_kd "
        "gt_length_multiplier",
    ),
    **_names(
        "inference-server plumbing (vLLM/SGLang addresses, timeouts, sampling, sync): no training memory",
        "vllm.host vllm.port vllm.device vllm_server_base_url vllm_server_group_port vllm_server_host "
        "vllm_server_pass_dataset vllm_server_port vllm_server_timeout vllm_group_port vllm_sync_backend "
        "vllm_sync_interval vllm_sync_frequency vllm_sync_with_ray vllm_lora_sync vllm_guided_decoding_regex "
        "vllm_structured_outputs_regex vllm_reasoning_parser vllm_importance_sampling_cap "
        "vllm_importance_sampling_clip_max vllm_importance_sampling_clip_min vllm_importance_sampling_correction "
        "vllm_importance_sampling_mode vllm_is_correction_type vllm_is_truncated_threshold "
        "enable_vllm_is_correction vllm_use_async_engine vllm_model_impl vllm_limit_mm_per_prompt "
        "vllm_mm_processor_cache_gb disable_mm_preprocessor_cache vllm_disable_custom_all_reduce "
        "vllm_disable_cascade_attn vllm_device vllm_generate_batch_size vllm_max_num_seqs vllm_enable_prefix_caching "
        "vllm_enable_lora vllm_max_lora_rank vllm_quantization sglang_lora_backend "
        "worker_extension_cls sync_backend sync_with_ray serve_module reasoning_parser enable_reasoning",
    ),
    **_names(
        "a launcher or device-placement detail that the GPU count and strategy already describe",
        "_n_gpu device actor_init_on_gpu quantization_device_map device_max_memory max_memory gpu_memory_limit "
        "gpu_memory_fraction memory_limit_mb disable_ds disable_fake_mode ds.zpg zpg",
    ),
    **_names(
        "export or merge of a trained model, not training",
        "export_dtype export_quantization_bit "
        "export_quantization_dataset export_quantization_maxlen export_quantization_nsamples",
    ),
    **_names(
        "FSDP wrapping and resharding details: the same sharded states per GPU (the estimate takes whole "
        "decoder layers as units)",
        "auto_wrap_policy fsdp_min_num_params min_num_params fsdp_transformer_layer_cls_to_wrap "
        "transformer_layer_cls_to_wrap fsdp_num fsdp_size "
        "forward_prefetch use_orig_params sync_module_states memory_efficient_fsdp_wrap "
        "cpu_ram_efficient_loading qlora_sharded_model_loading "
        "enable_fsdp_optimizations",
    ),
    **_names(
        "whether FSDP reshards each unit after its forward: not a plan concept of its own (no ZeRO stage is spelled "
        "as a flag); the readers of the frameworks that set it take it as the ZeRO stage, 2 when the parameters "
        "stay gathered from forward to backward and 3 otherwise (torchtune, torchtitan, NeMo AutoModel, the "
        "Hugging Face / accelerate / axolotl `fsdp_config`)",
        "fsdp_reshard_after_forward reshard_after_forward",
    ),
    **_names(
        "which modules of a multi-modal model are frozen: the estimate covers the language model",
        "freeze_aligner freeze_language_model freeze_llm freeze_mm_modules freeze_multi_modal_projector "
        "freeze_vision_model freeze_vision_projection freeze_vision_tower freeze_visual_encoder freeze_vit "
        "vit_gradient_checkpointing vit_gradient_checkpointing_kwargs vit_attn_impl decoder_trainable "
        "encoder_trainable fusion_trainable "
        "vae_encode_micro_batch_size limit_images",
    ),
    **_names(
        "the choice of a kernel library or backend name; its effect is read from the setting it selects",
        "attention_backend attn backend.attn compile.backend impl_backend fp16_backend half_precision_backend "
        "fp8_backend fp16_opt_level sdpa_method gemma4_hybrid_attn_impl "
        "lora_embedding_kernel tuner_backend mxfp8_dim1_cast_kernel_choice lora.type parallel_method "
        "ring_attn_func",
    ),
    **_names(
        "a GPU-count or placement setting of another role (reference, reward, critic) in RL launchers",
        "ref_num_gpus_per_node reward_num_gpus_per_node critic_num_gpus_per_node num_engines",
    ),
    **_names(
        "a per-sample batching control whose peak the micro-batch and sequence length bound",
        "auto_find_batch_size use_dynamic_batch use_dynamic_bsz dynamic_batch_enable log_prob_use_dynamic_bsz "
        "group_size batch_flattening max_token_len_per_gpu",
    ),
    **_names(
        "sampling or sequence bookkeeping of online RL that the completion length and generations count bound",
        "prompt_length",
    ),
    # LLaMA-Factory v0.9.5 src/llamafactory/hparams/finetuning_args.py `badam_verbose` ("0 for no print, 1 for print
    # the block prefix, 2 for print trainable parameters"), passed to BAdam's BlockOptimizer as `verbose`
    "badam_verbose": "BAdam's logging level (what it prints about the active block), not what it trains",
    "ddp_bucket_cap_mb": "DDP's buckets together hold every trainable gradient whatever their size (the cap sets how "
    "many): counted as the communication buffers",
    **_names(
        "where downloads, datasets or logs are kept on disk",
        # ms-swift 3.0-3.3 `enable_cache` (load the dataset from its cache file), 3.5-3.6 `packing_cache` (the
        # folder of the packed dataset): swift/llm/argument/base_args/data_args.py, argument/train_args.py
        "cache_dir model_cache_dir load_from_cache_file overwrite_cache trackio_bucket_id enable_cache packing_cache",
    ),
    # ms-swift 3.2-3.12 swift/trainers/arguments.py GRPOArgumentsMixin: `gc.collect()` after the rollout offloads the
    # model and optimizer (grpo_trainer.py `offload_context`)
    "gc_collect_after_offload": "Python's garbage collection after the rollout offloads the model and optimizer: "
    "host-side cleanup; what is offloaded is read from the offload settings",
    "use_cache": "the K and V a training forward returns are the tensors it keeps for backward anyway (transformers "
    "turns the cache off under gradient checkpointing)",
    **_names(
        "the rollout's KV cache, which the generation phase counts",
        "enable_kv_cache use_kv_cache",
    ),
    **_names(
        "vLLM's scheduler limits: the engine's memory is its gpu_memory_utilization share, which the estimate counts",
        "max_num_batched_tokens max_num_seqs",
    ),
    "disable_ignore_empty_think": "a chat-template rule for empty reasoning blocks",
    "liger_use_token_scaling": "weights each token's loss by its detached predicted probability inside Liger's fused "
    "loss: the same tensors",
    "lm_eval_batch_size": "axolotl's lm-eval plugin runs the harness after training has ended",
    "torch_empty_cache_steps": "torch.cuda.empty_cache every N steps returns the allocator's cached blocks between "
    "steps; the peak inside a step is the same",
    **_names(
        "the learning-rate or weight-decay schedule, or how the optimizer numbers its steps: the same states",
        "decay_type min_lr_factor init_lr_ratio wd_incr_style zero_indexed_step",
    ),
    # verl 0.8.0-0.9.1 optim/megatron.yaml: Muon's own settings, read only when `optim.optimizer` names Muon, an
    # optimizer the reader names as not modelled then
    **_names(
        "Muon's own hyperparameters (momentum, Newton-Schulz steps and precision, scaling, QKV and tensor-parallel "
        "split), read only when the optimizer is Muon, which is named as not modelled",
        "muon_coefficient_type muon_extra_scale_factor muon_fp32_matmul_prec muon_match_adamw_update_rms "
        "muon_momentum muon_nesterov muon_num_ns_steps muon_scalar_optimizer muon_scale_mode muon_split_qkv "
        "muon_tp_mode",
    ),
    # verl 0.8.0 ppo_trainer.yaml `data.gen_batch_size` (DAPO's dynamic sampling: prompts generated per round) and
    # `trainer.v1.colocate_async.num_warmup_batches` (batches before rollout and training overlap)
    **_names(
        "how many prompts an RL rollout round generates, or how many batches run before rollout and training "
        "overlap: the rollout engine's share and the training micro-batch bound the memory",
        "gen_batch_size num_warmup_batches",
    ),
    # verl 0.9.1 verl/workers/engine_workers.py `update_weights`: with `model.lora.merge` the adapter is merged into
    # the base weights only to send them to the rollout engine
    # TRL 0.8 PPOConfig: sizes `__post_init__` derives from mini_batch_size and accumulation, a flag it sets itself,
    # and `optimize_cuda_cache` / `optimize_device_cache` (gc and torch.cuda.empty_cache after each step)
    **_names(
        "a value TRL derives itself from the batch settings read elsewhere",
        "backward_batch_size global_backward_batch_size is_peft_model",
    ),
    **_names(
        "the allocator's cache emptied after each step: the peak inside a step is the same",
        "optimize_cuda_cache optimize_device_cache",
    ),
    # LLaMA-Factory 0.9.4-0.9.5 src/llamafactory/hparams/model_args.py KTransformersArguments
    **_names(
        "a KTransformers setting, read only with `use_kt` (named as not modelled then)",
        "chunk_size cpu_infer kt_force_think kt_maxlen kt_mode kt_optimize_rule kt_use_cuda_graph",
    ),
    "lora.merge": "the adapter merged into the base weights to send them to the rollout engine, between steps",
}

# name -> (what it is, what the estimate does instead)
NOT_MODELLED: dict[str, tuple[str, str]] = {
    # axolotl's Liger plugin (integrations/liger/args.py `LigerArgs`, axolotl 0.19.0) beyond the switches read
    "liger_cross_entropy": (
        "Liger's cross-entropy kernel (it writes the logits' gradient in place during the forward)",
        "estimated with the standard cross-entropy over the full logits",
    ),
    "liger_rms_norm_gated": (
        "Liger's fused gated RMSNorm kernel (the linear-attention layers of Qwen3.5 and Qwen3-Next)",
        "estimated with transformers' gated RMSNorm",
    ),
    "liger_kernel_impl": (
        "another backend for Liger's kernels (cuTile, CuTe DSL)",
        "estimated with Liger's Triton kernels",
    ),
    # read by formats/moe_experts.py `read_experts_implementation` where a reader hands it over (axolotl, ms-swift,
    # OpenRLHF); grouped_mm, transformers 5's fused kernel, is the one modelled
    **_names(
        ("an implementation of the routed experts other than grouped_mm", "estimated as grouped_mm"),
        "experts_implementation experts_impl",
    ),
    "llama4_linearized_experts": (
        "Llama-4's routed experts as separate linear layers (axolotl's linearized experts, for adapters on them)",
        "estimated with the fused experts",
    ),
    "cache_implementation": (
        "the KV cache implementation of transformers' generate (static, offloaded, quantized …)",
        "estimated with the dynamic cache",
    ),
    **_names(
        (
            "how the rollout engine's weights are synced (layer by layer, weights before the KV cache, the sync's "
            "bucket size)",
            "the weight-sync moment is not a phase of the estimate",
        ),
        # Megatron-SWIFT's `offload_bridge`: the exported weights kept in CPU memory during the sync (ms-swift v4.6.0
        # swift/megatron/trainers/rollout_mixin.py)
        "layered_summon multi_stage_wake_up update_weights_bucket_megabytes offload_bridge",
    ),
    **_names(
        (
            "a float8 recipe or emulation setting of torchao",
            "estimated at the fp8 rate with a bf16 linear's saved tensors",
        ),
        "float8.emulate float8.recipe_name linear.float8.emulate linear.float8.recipe_name",
    ),
    **_names(
        (
            "linears or expert GEMMs picked out by name for float8 (`filter_fqns`, `fqns`)",
            "estimated as the converters say for every block linear",
        ),
        "float8.filter_fqns linear.float8.filter_fqns grouped_mm.float8.fqns",
    ),
    **_names(
        ("Unsloth kernels and offloaded checkpointing", "estimated as standard Hugging Face training"),
        "use_unsloth unsloth_cross_entropy_loss unsloth_lora_mlp unsloth_lora_o unsloth_lora_qkv "
        "unsloth_rms_norm unsloth_rope",
    ),
    **_names(
        ("GaLore/APOLLO/BAdam/LISA tuning detail", "estimated from the projection rank and trained layers alone"),
        "galore_cos_threshold galore_gamma_proj galore_layerwise "
        "galore_proj_group_size galore_proj_quant galore_proj_type galore_quantization galore_queue_size "
        "galore_scale galore_update_interval galore_update_proj_gap galore_with_embedding  "
        "qgalore_proj_quant apollo_layerwise apollo_proj apollo_proj_type apollo_scale apollo_scale_front "
        "apollo_scale_type apollo_update_interval badam_mask_mode badam_start_block badam_switch_interval "
        "badam_switch_block_every "
        "badam_switch_mode badam_update_ratio lisa_layers_attribute lisa_step_interval "
        "llamapro_num_groups",
    ),
    **_names(
        (
            "LoRA variant or placement detail (bias, dtype, layer patterns, MoE experts, CPU placement)",
            "estimated as plain LoRA on the named targets",
        ),
        "lora_bias lora_bias_trainable lora_dtype lora_layers_pattern lora_layers_to_transform "
        "lora_rank_pattern lora_on_cpu peft_layers_pattern "
        "peft_layers_to_transform peft_layer_replication peft_trainable_token_indices "
        "peft_autocast_adapter_dtype kt_lora_expert_intermediate_size kt_lora_expert_num kt_use_lora_experts "
        "exclude_modules trainable_parameters_regex "
        "freeze_parameters_regex freeze_moe_router adapter_act adapter_length loftq_bits "
        "adapters ref_adapters ref_model_adapters reward_adapters reward_model_adapters teacher_adapters",
    ),
    **_names(
        ("fused or chunked kernels (cross-entropy, MLP, QKV, RMSNorm, RoPE)", "estimated with the standard kernels"),
        "flash_attn_cross_entropy flash_attn_fuse_mlp flash_attn_fuse_qkv flash_attn_rms_norm flash_optimum "
        "fuse_qkv_projections compact_fused_qkv_projections fused_attn_kernel use_fused_kernels use_kernels "
        "use_v1_kernels use_liger_loss dpo_use_liger_kernel chunked_cross_entropy_num_chunks "
        "entropy_from_logits_with_chunking entropy_from_logits_chunk_size entropy_checkpointing tiled_mlp "
        "tiled_mlp_num_shards "
        "tiled_mlp_use_original_mlp tiled_mlp.enabled use_fp8_dim1_cast_triton_kernel "
        "optimize_hunyuan_flash_varlen_mask flash_attn_d512 large_head_attention",
    ),
    **_names(
        (
            "an attention variant (shifted sparse, S2, Sage, xformers, block-diagonal, variable length)",
            "estimated with the attention implementation read elsewhere (default: the framework's)",
        ),
        "shift_attn s2_attention sage_attention eager_attention "
        "flex_attention block_diag_attn sdpa_varlen pretrain_multipack_attn",
    ),
    **_names(
        (
            "how context-parallel ranks exchange keys and values (ring attention's K/V head stride: ring_flash_attn's"
            " `heads_k_stride`; torchtitan's load balancer and K/V rotation)",
            "estimated with each rank's share of the sequence; the exchange's own buffers not counted",
        ),
        "ring_attn_head_stride ring_head_stride context_parallel_load_balancer context_parallel_rotate_method",
    ),
    **_names(
        (
            "Megatron/torchtitan recompute or pipeline-schedule detail",
            ("estimated with full activation checkpointing when it is on, and the pipeline size alone"),
        ),
        "recompute_layer_types "
        "per_op_sac_force_recompute_mm_shapes_by_fqns force_recompute_fp8_weight_in_bwd "
        "memory_budget pipeline_parallel_expert_parallel_overlap "
        "pipeline_parallel_microbatch_size pipeline_parallel_schedule_csv "
        "pp_microbatch_size num_layers_per_virtual_pipeline_stage "
        "early_stop ",
    ),
    **_names(
        (
            "expert-parallel communication, data-replicate or hybrid parallelism",
            ("estimated with the parallel sizes read elsewhere; data parallel from the GPU count"),
        ),
        "expert_parallel_comm_backend "
        "data_parallel_shard_degree data_parallel_size dp_shard_size zero_hpz_partition_size "
        "enable_async_tensor_parallel tensor_parallel_dim use_hyper_parallel "
        "a2a_experimental",
    ),
    **_names(
        ("FP8 training (Transformer Engine, torchao float8)", "estimated in the 16-bit compute dtype"),
        "transformer_engine_fp8 transformer_engine_fp8_amax_compute_algo transformer_engine_fp8_amax_history_len "
        "transformer_engine_fp8_recipe fp8_enable_fsdp_float8_all_gather "
        "precompute_float8_dynamic_scale_for_fsdp fake_quant_after_n_steps quantize_base quantize_embedding "
        "should_quantize gptq hqq_axis",
    ),
    # axolotl 067b021c src/axolotl/utils/quantization.py `prepare_model_for_qat`: torchao `quantize_(model,
    # QATConfig(...))` swaps the linears (and with `quantize_embedding` the embedding) for fake-quantized ones; the
    # weights stay in full precision and train as usual (utils/schemas/quantization.py `QATConfig`)
    **_names(
        (
            "quantization-aware training (torchao fake-quantizes the linears' weights, and their inputs when "
            "`activation_dtype` is set, to the low-bit grid in every forward)",
            "estimated as 16-bit training: the fake-quantized copies each linear makes are not counted",
        ),
        "qat.activation_dtype qat.weight_dtype qat.group_size qat.fake_quant_after_n_steps qat.quantize_embedding "
        # verl 0.8+ `qat:` of each engine (verl/workers/config/engine.py QATEngineConfig; engine/fsdp/
        # transformer_impl.py `_apply_qat`)
        "qat.enable qat.mode qat.activation_observer qat.quantization_config_path qat.ignore_patterns",
    ),
    **_names(
        (
            "a precision detail (fp32 norms, fp32 loss, lm-head upcast, gradient-accumulation dtype, reduce dtype)",
            "estimated with the weight and compute dtypes read elsewhere",
        ),
        "fp32_norm_classes fp32_norms compute_fp32_loss compute_fp32_loss_enable cast_lm_head_to_fp32 "
        "grad_accum_dtype mixed_precision_reduce activation_dtype weight_dtype",
    ),
    **_names(
        (
            "offloading of another model or of layers (reference, reward, teacher, per-layer)",
            ("estimated with those weights on the GPU"),
        ),
        "ref_reward_offload offload_model offload_teacher_model layer_offloading grad_offload "
        "relora_cpu_offload offload_policy ple_cpu_offload",
    ),
    # ms-swift 3.1-3.4 swift/trainers/arguments.py GRPOArgumentsMixin, passed to LMDeploy's engine
    # (`cache_max_entry_count=args.lmdeploy_cache_max_entry_count`, default 0.8; `session_len`) for `use_lmdeploy`
    **_names(
        (
            "the LMDeploy rollout engine's KV-cache share and session length (ms-swift 3.1-3.4 GRPO `use_lmdeploy`)",
            "LMDeploy's engine is not counted: the rollout is estimated as the run's other settings describe it",
        ),
        "lmdeploy_cache_max_entry_count lmdeploy_session_len",
    ),
    "freeze_parameters": (
        "parameters frozen by name or by share (ms-swift `freeze_parameters`)",
        "estimated from the trained layers and modules read elsewhere, else as a full fine-tune",
    ),
    **_names(
        ("a quantized reference or reward model", "estimated with those models in the weight dtype"),
        "ref_model_quantization_bit reward_model_quantization_bit",
    ),
    **_names(
        (
            "a separate batch size of one RL phase (log-prob forward, rollout, PPO mini-batch, generation)",
            "estimated with the training micro-batch",
        ),
        "forward_micro_batch_size forward_micro_batch_size_per_gpu forward_only "
        "forward_max_token_len_per_gpu log_prob_micro_batch_size "
        "log_prob_max_token_len_per_gpu ppo_batch_size ppo_max_token_len_per_gpu ppo_mini_batch_size mini_batch_size "
        "rollout_batch_size micro_rollout_batch_size local_rollout_forward_batch_size generation_batch_size "
        "max_tokens_per_gpu rollout_max_tokens_per_gpu train_max_tokens_per_gpu "
        "chord_sft_per_device_train_batch_size generation_max_length",
    ),
    **_names(
        (
            "the inference engine's own parallelism and memory (vLLM/SGLang)",
            ("estimated from its GPU memory share alone"),
        ),
        "vllm_tensor_parallel_size vllm_pipeline_parallel_size vllm_data_parallel_size "
        "vllm_enable_expert_parallel vllm_max_model_len vllm_max_model_length vllm_maxlen "
        "vllm_gpu_util "
        "sglang_tp_size enable_chunked_prefill enable_prefix_caching swap_space "
        "disaggregation.decode_tensor_model_parallel_size vllm_dtype",
    ),
    "vllm_num_engines": (
        "vLLM engines of an OpenRLHF run, on GPUs of their own",
        ("estimated for the training GPUs only"),
    ),
    **_names(
        ("DeepSpeed's compiler or compiled autograd", "estimated without compilation"),
        "deepcompile enable_compiled_autograd",
    ),
    # verl 0.9.1 verl/workers/config/engine.py FSDPEngineConfig / McoreEngineConfig (`pad_to_length`: "round every
    # packed micro-batch up to a multiple of pad_to_length_bucket tokens … they still cost a full forward pass")
    **_names(
        (
            "every packed micro-batch padded up to a multiple of a token bucket",
            "estimated at the micro-batch's own token count",
        ),
        "pad_to_length pad_to_length_bucket",
    ),
    # verl 0.9.1 FSDPEngineConfig `use_no_sync_for_gradient_accumulation` ("disabling this reduces peak memory by
    # synchronizing and resharding gradients after every micro-batch"); NeMo Automodel's `defer_fsdp_grad_sync`
    **_names(
        (
            "FSDP's gradient reduction deferred to the last micro-batch (each rank keeps unsharded gradients "
            "between micro-batches)",
            "estimated with gradients reduce-scattered after every micro-batch",
        ),
        "use_no_sync_for_gradient_accumulation defer_fsdp_grad_sync",
    ),
    # verl 0.9.1 fsdp_config.turbo_config, read by engine/fsdp/fsdp_turbo_impl.py (the fsdp_turbo package) when
    # `fsdp_config.strategy: fsdp_turbo`
    **_names(
        (
            "FSDP-Turbo's own parallel plan (shard, expert-shard and Ulysses sizes, prefetch depth, dtypes)",
            "estimated as verl's FSDP engine with the sizes read elsewhere",
        ),
        "distributed.fully_shard_parallel_size distributed.expert_fully_shard_parallel_size "
        "distributed.ulysses_parallel_size fsdp_plan.fsdp_implementation fsdp_plan.num_to_backward_prefetch "
        "fsdp_plan.num_to_forward_prefetch fsdp_plan.output_dtype fsdp_plan.reduce_dtype",
    ),
    # verl 0.8.0-0.9.1 engine/megatron.yaml (McoreEngineConfig)
    **_names(
        (
            "Megatron's dynamic context parallelism (a context-parallel size chosen per batch under a per-rank "
            "sequence cap)",
            "estimated with the context-parallel size read elsewhere",
        ),
        "dynamic_context_parallel max_seqlen_per_dp_cp_rank",
    ),
    # Megatron-SWIFT (ms-swift v4.6.0 swift/megatron/arguments/megatron_args.py, swift/megatron/utils/utils.py
    # `prepare_adapter`: `model.add_adapter('ref_adapter', lora_config)`, frozen)
    **_names(
        (
            "a second, frozen set of LoRA adapters the reference model runs with (Megatron-SWIFT `ref_adapter`)",
            "its weights (the size of the policy's adapters) are not counted",
        ),
        "mcore_ref_adapter ref_adapter_load ref_adapters",
    ),
    "sequence_packing_scheduler": (
        "Megatron's dynamic context parallelism or data-parallel balancing of packed sequences (Megatron-SWIFT "
        "`sequence_packing_scheduler`)",
        "estimated with the context-parallel size and sequence length read elsewhere",
    ),
    "optimizer_cuda_graph": (
        "the optimizer step captured in a CUDA graph (its static buffers)",
        "not counted",
    ),
    **_names(
        (
            "DeepSeek-V3.2/V4 kernels and layers (sparse-attention indexer fusion, manifold-constrained "
            "hyper-connections and their recompute)",
            "estimated with the model's layers as vramlens counts them",
        ),
        "apply_dsa_kernel_fusion use_fused_mhc mhc_recompute_layer_num",
    ),
    "use_kt": (
        "KTransformers (LLaMA-Factory `use_kt`: the MoE experts computed on the CPU by KTransformers' kernels)",
        "estimated with every expert on the GPU",
    ),
    "use_megatron_fsdp": (
        "Megatron-FSDP (Megatron-Core's parameters, gradients and optimizer states sharded ZeRO-3 style)",
        "estimated with Megatron's distributed optimizer alone",
    ),
    "use_layer_wise_distributed_optimizer": (
        "Megatron's layer-wise distributed optimizer",
        "estimated with the distributed optimizer's even split of the states",
    ),
}
