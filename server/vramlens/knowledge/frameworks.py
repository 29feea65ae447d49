"""Framework defaults for the settings a config leaves out, with the version they belong to.

Sources: defaults read from each project's source at the commits in docs/config-sources.md (its "Version drift"
table lists the changes between versions). A value here is what the framework does when the key is absent.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from vramlens.knowledge.versions import parse

# framework -> (version the defaults were read at, {concept: value})
DEFAULTS: dict[str, tuple[str, dict]] = {
    "transformers": (
        "transformers 5.x",
        {
            "micro_batch": 8,
            "grad_accum": 1,
            "eval_batch": 8,
            "optimizer": "adamw_torch_fused",  # adamw_torch_fused when torch >= 2.8
            "grad_checkpointing": False,
            "amp_dtype": "none",
            "weight_dtype": "auto",  # v5 loads the stored dtype
            # no "seq_len": Trainer/TrainingArguments have no sequence length (the script's tokenization decides;
            # resolve assumes one and says so)
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "zero_grad_set_to_none": True,
            "lora_r": 8,
            "lora_alpha": 8,
            "lora_dropout": 0.0,
            "lora_targets": ["q", "v"],
        },
    ),
    "trl": (
        "TRL 1.x",
        {  # defaults_for names the objective's config class
            "micro_batch": 8,
            "grad_accum": 1,
            "eval_batch": 8,
            "optimizer": "adamw_torch_fused",
            "grad_checkpointing": True,  # since TRL 0.22
            "amp_dtype": "bf16",  # bf16 unless fp16, since TRL 0.19
            "weight_dtype": "fp32",  # ModelConfig.dtype help: default "float32"
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "chunked",  # loss_type None -> "chunked_nll" since TRL 1.7
            "packing": False,
            "seq_len": 1024,  # max_length default 1024
            "zero_grad_set_to_none": True,
            "lora_r": 16,
            "lora_alpha": 32,
            "lora_dropout": 0.05,
            "lora_targets": ["q", "v"],
        },
    ),
    "axolotl": (
        "axolotl 2026-07",
        {
            "micro_batch": 1,
            "grad_accum": 1,
            "optimizer": "adamw_torch_fused",
            "grad_checkpointing": False,
            "amp_dtype": "bf16",
            "weight_dtype": "bf16",  # bf16: auto → model loaded in bf16
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "seq_len": 512,
            "zero_grad_set_to_none": True,
            "lora_r": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_targets": ["q", "v"],
            "quant_double": True,
            "quant_storage_dtype": "bf16",
        },
    ),
    "llamafactory": (
        "LLaMA-Factory 2026-08",
        {
            "micro_batch": 8,
            "grad_accum": 1,
            "eval_batch": 8,
            "optimizer": "adamw_torch_fused",
            "grad_checkpointing": True,  # on unless disable_gradient_checkpointing
            "amp_dtype": "none",
            "weight_dtype": "auto",
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "seq_len": 2048,  # cutoff_len (1024 before 2024-11)
            "zero_grad_set_to_none": True,
            "peft_method": "lora",
            "lora_r": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_targets": ["all-linear"],
            "quant_double": True,
            # src/llamafactory/model/adapter.py (01d87b82) `init_adapter`: trainable params upcast to fp32 unless
            # pure_bf16 / use_badam (or ZeRO-3/FSDP without quantization); hparams/finetuning_args.py:
            # freeze_trainable_layers=2 (the last two), freeze_trainable_modules="all"
            "trainable_fp32": True,
            "trained_layers": 2,
        },
    ),
    "torchtune": (
        "torchtune 2026-04",
        {
            "micro_batch": 1,
            "grad_accum": 1,
            "optimizer": "torch.optim.AdamW",
            "grad_checkpointing": False,
            "amp_dtype": "none",
            "weight_dtype": "bf16",
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "seq_len": 2048,
            "zero_grad_set_to_none": True,
            "lora_r": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_targets": ["q", "v"],
        },
    ),
    "litgpt": (
        "litgpt 2026 (config_hub)",
        {
            # train.micro_batch_size 4; accumulation comes from global_batch_size (64) ÷ (devices × micro)
            "micro_batch": 4,
            "grad_accum": 1,
            "optimizer": "torch.optim.AdamW",
            "grad_checkpointing": False,  # on automatically under FSDP (full fine-tune, >1 device)
            "amp_dtype": "bf16",
            "weight_dtype": "fp32",  # precision None → "bf16-mixed" when training
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "chunked",  # finetune scripts use chunked_cross_entropy (chunk 128)
            "packing": False,
            "seq_len": 2048,
            "zero_grad_set_to_none": True,
            "lora_r": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.05,
            "lora_targets": ["q", "v"],
        },
    ),
    "ms-swift": (
        "ms-swift 4.x",
        {
            "micro_batch": 1,
            "grad_accum": 16,  # None → ceil(16 / micro batch / world size)
            "eval_batch": 1,
            "optimizer": "adamw_torch_fused",
            "grad_checkpointing": True,
            "amp_dtype": "none",
            "weight_dtype": "auto",  # torch_dtype None → model config
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "seq_len": 2048,
            "zero_grad_set_to_none": True,
            "lora_r": 8,
            "lora_alpha": 32,
            "lora_dropout": 0.05,
            "lora_targets": ["all-linear"],
            "quant_double": True,
        },
    ),
    # openrlhf/cli/train_sft.py (OpenRLHF f2afba47) and openrlhf/models/actor.py (01b8a23d): without `--bf16` the
    # model loads in the checkpoint's dtype and DeepSpeed runs in fp32; without `--flash_attn`, eager attention;
    # DeepSpeed's FusedAdam (fp32 states)
    "openrlhf": (
        "OpenRLHF 0.5–0.8 (openrlhf/cli entry points, DeepSpeed strategy)",
        {
            "micro_batch": 8,
            "grad_accum": 1,
            "optimizer": "adamw_torch_fused",
            "grad_checkpointing": False,
            "amp_dtype": "none",
            "weight_dtype": "auto",
            "attn_impl": "eager",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "seq_len": 2048,
            "zero_grad_set_to_none": True,
            "lora_r": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_targets": ["all-linear"],
            "quant_double": True,  # `--load_in_4bit`: BitsAndBytesConfig(bnb_4bit_use_double_quant=True), actor.py
            # the DeepSpeed config it builds writes "auto" for these and hands it to `deepspeed.initialize` as it
            # is (openrlhf/utils/deepspeed/deepspeed_utils.py `get_train_ds_config`, v0.6.0 and 3c3be623)
            "zero_reduce_bucket": "auto",
            "zero3_prefetch_bucket": "auto",
            "zero3_persistence_threshold": "auto",
            "zero3_max_live_params": "auto",
            "zero3_max_reuse_distance": "auto",
        },
    ),
    # unsloth (unslothai/unsloth 0050c73e unsloth/models/loader.py): FastLanguageModel/FastModel.from_pretrained
    # max_seq_length=2048, load_in_4bit=True, use_gradient_checkpointing="unsloth" (checkpointed hidden states offloaded
    # to the CPU: unsloth/models/_utils.py `Unsloth_Offloaded_Gradient_Checkpointer`), return_logits=False (the loss is
    # computed from the hidden states in chunks, the full logits never exist); get_peft_model r=16, lora_alpha=16,
    # lora_dropout=0 on q,k,v,o,gate,up,down; the trainer is TRL's SFTTrainer
    "unsloth": (
        "unsloth 2026 (FastLanguageModel)",
        {
            "micro_batch": 8,
            "grad_accum": 1,
            "eval_batch": 8,
            "optimizer": "adamw_torch_fused",
            "grad_checkpointing": True,
            "activation_offload": True,
            "amp_dtype": "bf16",
            "weight_dtype": "auto",
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "fused",
            "packing": False,
            "seq_len": 2048,
            "zero_grad_set_to_none": True,
            "lora_r": 16,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_targets": ["q", "k", "v", "o", "gate", "up", "down"],
            "quant_double": True,
            "quant_type": "nf4",
        },
    ),
    # open-instruct finetune.py / dpo_tune*.py (allenai/open-instruct 00f6b60c FlatArguments; the precision and
    # ZeRO stage of the documented `accelerate launch --mixed_precision bf16 --use_deepspeed
    # --deepspeed_config_file configs/ds_configs/stage3_no_offloading_accelerate.conf`, docs/tulu3.md)
    "open-instruct": (
        "open-instruct 2025 (finetune.py)",
        {
            "micro_batch": 8,
            "grad_accum": 1,
            "optimizer": "adamw_torch_fused",
            "grad_checkpointing": False,
            "amp_dtype": "bf16",
            "weight_dtype": "bf16",  # torch_dtype=torch.bfloat16
            "attn_impl": "flash_attention_2",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "seq_len": 2048,
            "zero_grad_set_to_none": True,
            "dist_strategy": "deepspeed",
            "zero_stage": 3,
            "lora_r": 64,
            "lora_alpha": 16,
            "lora_dropout": 0.1,
            "lora_targets": ["q", "k", "v", "o", "gate", "up", "down"],
        },
    ),
    # verl's PPO trainer (volcengine/verl verl/workers/fsdp_workers.py, v0.4.1 and v0.7.0): the actor in fp32 under FSDP
    # mixed precision bf16, FlashAttention-2, torch.optim.AdamW, FULL_SHARD over every GPU; the per-key defaults of
    # each release are read from frameworks/schemas/verl/ by formats/verl.py, these only fill what it leaves open
    "verl": (
        "verl (ppo_trainer.yaml)",
        {
            "micro_batch": 1,
            "grad_accum": 1,
            "eval_batch": 1,
            "optimizer": "torch.optim.AdamW",
            "grad_checkpointing": True,
            "amp_dtype": "bf16",
            "weight_dtype": "fp32",
            "attn_impl": "flash_attention_2",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "zero_grad_set_to_none": True,
            "dist_strategy": "fsdp",
            "zero_stage": 3,
            "lora_r": 0,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_targets": ["all-linear"],
        },
    ),
    # torchtitan's JobConfig (pytorch/torchtitan torchtitan/config/job_config.py at v0.2.2, 73a0e697; the same values
    # in torchtitan/config_manager.py at v0.1.0): training.local_batch_size 8, seq_len 2048, mixed_precision_param
    # "bfloat16" over the fp32 parameters it builds (FSDP2 MixedPrecisionPolicy, no autocast), optimizer "AdamW" with
    # implementation "fused", compile.enable False, activation_checkpoint mode "selective" with selective_ac_option
    # "2" (every second block checkpointed); its datasets fill every sample to seq_len and its Llama attention is
    # causal SDPA; train.py computes the loss on the logits and deletes them before backward ("del pred")
    "torchtitan": (
        "torchtitan 0.1–0.2 (JobConfig)",
        {
            "micro_batch": 8,
            "grad_accum": 1,
            "seq_len": 2048,
            "optimizer": "torch.optim.AdamW",
            "optimizer_impl": "fused",
            "grad_checkpointing": True,  # of every second block: formats/torchtitan.py sets how many
            "amp_dtype": "bf16",
            "weight_dtype": "fp32",
            "fsdp_mixed_precision": True,
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": True,
            "zero_grad_set_to_none": True,
            "objective": "pretrain",
        },
    ),
    # Megatron-LM's own defaults for pretrain_*.py (NVIDIA/Megatron-LM core_v0.15.0 0d7e02bd megatron/training/
    # arguments.py): no --bf16/--fp16 trains in fp32 (`args.params_dtype = torch.float`); `--optimizer adam` is
    # Transformer Engine's (or apex's) FusedAdam in AdamW mode (megatron/core/optimizer/__init__.py); recompute,
    # sequence parallelism and the distributed optimizer are off; `--attention-backend auto` picks a fused kernel;
    # the global batch defaults to micro batch × DP (no accumulation). `--micro-batch-size` and `--seq-length` have
    # no default (validate_args asserts them: formats/megatron.py says so); 1 stands for the first
    "megatron": (
        "Megatron-LM core_v0.15.0 (arguments.py)",
        {
            "micro_batch": 1,
            "grad_accum": 1,
            "optimizer": "adamw_apex_fused",
            "grad_checkpointing": False,
            "amp_dtype": "none",
            "weight_dtype": "fp32",
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "zero_grad_set_to_none": True,
            "dist_strategy": "megatron",
            "distributed_optimizer": False,
            "sequence_parallel": False,
            "cross_entropy_fusion": False,
            "objective": "pretrain",
        },
    ),
    # Megatron-SWIFT's `megatron sft|pt|rlhf` (modelscope/ms-swift v3.12.6 8773ecd0 swift/megatron/argument/
    # megatron_args.py; the same values in v4.5.2 ff512877 swift/megatron/arguments/): micro_batch_size 1,
    # global_batch_size 16 (formats/megatron.py), recompute_granularity "selective" of `core_attn`,
    # attention_backend "flash", optimizer "adam", use_distributed_optimizer True, cross_entropy_loss_fusion True
    # (False before 4.0: the release's own dump, DUMPED_DEFAULTS); bf16/fp16 None → ms-swift's
    # `_init_mixed_precision`: bf16 for a bf16 checkpoint (fp16 for fp16/fp32 ones); LoRA rank 8, alpha 32, dropout
    # 0.05 on all-linear
    "megatron-swift": (
        "ms-swift 3.12–4.5 Megatron-SWIFT (megatron_args.py)",
        {
            "micro_batch": 1,
            "optimizer": "adamw_apex_fused",
            "grad_checkpointing": False,
            "selective_recompute": "core_attention",
            "amp_dtype": "bf16",
            "weight_dtype": "bf16",
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "zero_grad_set_to_none": True,
            "dist_strategy": "megatron",
            "distributed_optimizer": True,
            "sequence_parallel": False,
            "cross_entropy_fusion": True,
            "lora_r": 8,
            "lora_alpha": 32,
            "lora_dropout": 0.05,
            "lora_targets": ["all-linear"],
        },
    ),
    "custom": (
        "plain PyTorch loop",
        {
            "micro_batch": 1,
            "grad_accum": 1,
            "optimizer": "torch.optim.AdamW",
            "grad_checkpointing": False,
            "amp_dtype": "none",
            "weight_dtype": "bf16",
            "attn_impl": "sdpa",
            "compile": False,
            "loss_impl": "standard",
            "packing": False,
            "zero_grad_set_to_none": True,  # no "seq_len": the loop's data decides (as transformers)
            "lora_r": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_targets": ["q", "v"],
        },
    ),
}

# Whether a framework asks transformers for the checkpoint's own code (`trust_remote_code`) when the config says
# nothing; a framework that builds its own model (torchtune, torchtitan, Megatron, LitGPT) never loads it, and one not
# listed is not assumed either way: a script of its own (a Trainer script, a custom loop) passes what its
# `from_pretrained` call says (read where the script is), NeMo AutoModel asks its own allowlist.
REMOTE_CODE_DEFAULTS: dict[str, bool] = {
    # TRL ModelConfig and LLaMA-Factory BaseModelArguments `False` (their dumped defaults replace these); axolotl 0.18
    # src/axolotl/loaders/model.py passes `trust_remote_code=self.cfg.trust_remote_code or False`; verl's
    # `model.trust_remote_code` defaults to false
    "trl": False,
    "axolotl": False,
    "llamafactory": False,
    "verl": False,
    # ms-swift v4.4.3 (3602360a) swift/model/register.py: `ModelLoader.default_trust_remote_code = True`, passed to
    # `from_pretrained` (a few loaders of models transformers ships set it False)
    "ms-swift": True,
    # OpenRLHF v0.11.0 (3c3be623) openrlhf/models/actor.py: `model_class.from_pretrained(..., trust_remote_code=True)`
    "openrlhf": True,
}

# How each framework runs the step, beyond defaults of keys.
BEHAVIOUR: dict[str, dict] = {
    "transformers": {"adapter_fp32": True, "kbit_upcast": True, "keep_logits": False},
    "trl": {"adapter_fp32": True, "kbit_upcast": True, "keep_logits": False},
    "axolotl": {"adapter_fp32": True, "kbit_upcast": True, "keep_logits": False},
    "llamafactory": {"adapter_fp32": True, "kbit_upcast": True, "keep_logits": False},
    # torchtune's collate passes no attention mask (torchtune 0.6.1 data/_collate.py `padded_collate_sft` returns
    # tokens and labels; padded positions are ignored through the labels), so SDPA runs causal without one
    "torchtune": {"adapter_fp32": False, "kbit_upcast": False, "keep_logits": False, "attn_mask": False},
    # litgpt: Fabric's BitsandbytesPrecision swaps every nn.Linear for a 4-bit one, the LM head included
    # (lightning/fabric/plugins/precision/bitsandbytes.py, `_ClassReplacementContextManager`), quantizing each from
    # an fp16 copy (`weight.contiguous().to(device, dtype=torch.half)`); its GPT keeps the LM head apart from the
    # token embedding (litgpt/model.py; convert_hf_checkpoint copies a tied embedding into `lm_head.weight`) and
    # computes q, k, v with one linear (`CausalSelfAttention.qkv`, LoRA: `LoRAQKVLinear` with `zero_pad`), runs
    # attention without a mask (causal SDPA), and Fabric hands the (chunked) logits back cast to fp32
    # (`_FabricModule.forward` → `precision.convert_output`: float outputs to `torch.get_default_dtype()`)
    "litgpt": {
        "adapter_fp32": False,
        "kbit_upcast": False,
        "keep_logits": False,
        "attn_mask": False,
        "quant_lm_head": True,
        "separate_lm_head": True,
        "quant_dequant_fp16": True,
        "fused_qkv": True,
        "logits_fp32": True,
    },
    # ms-swift never calls peft's prepare_model_for_kbit_training (no call under swift/ at v1.5.0, v2.4.0, v3.5.0,
    # v4.0.0 or main 3602360a); a 4-bit load keeps the embedding, norms and LM head in the load dtype
    "ms-swift": {"adapter_fp32": True, "kbit_upcast": False, "keep_logits": False},
    # OpenRLHF never calls prepare_model_for_kbit_training; under 4-bit it casts the LoRA layers to bf16 (actor.py)
    "openrlhf": {"adapter_fp32": True, "kbit_upcast": False, "keep_logits": False},
    # unsloth's own prepare_model_for_kbit_training (unsloth/models/_utils.py) casts only the LoRA weights to fp32 and
    # leaves the embedding, norms and LM head in the 16-bit load dtype; its attention runs causal kernels without a
    # materialised 4-D mask (unsloth/models/llama.py `LlamaAttention_fast_forward`); its LoRA kernels
    # (unsloth/kernels/fast_lora.py `LoRA_MLP`, `LoRA_QKV`, `LoRA_W`) keep only the 16-bit inputs and the gate/up
    # outputs
    "unsloth": {
        "adapter_fp32": True,
        "kbit_upcast": False,
        "keep_logits": False,
        "attn_mask": False,
        "fused_lora": True,
    },
    # open-instruct's accelerate loop holds `outputs` (the logits) until the next step
    "open-instruct": {"adapter_fp32": True, "kbit_upcast": True, "keep_logits": True},
    "custom": {"adapter_fp32": True, "kbit_upcast": True, "keep_logits": True},
    "verl": {"adapter_fp32": True, "kbit_upcast": False, "keep_logits": False},
    # torchtitan builds its own models (torchtitan/models/*) and trains without adapters or k-bit weights; its causal
    # SDPA takes no mask
    "torchtitan": {"adapter_fp32": False, "kbit_upcast": False, "keep_logits": False, "attn_mask": False},
    # Megatron-core builds its own GPTModel (Megatron-SWIFT converts the checkpoint into it) with adapters in the
    # parameter dtype: the mixed-precision optimizer keeps their fp32 main copy (megatron/core/optimizer/optimizer.py
    # `Float16OptimizerWithFloat16Params`, counted by estimate.components.megatron_state_bytes); causal fused
    # attention without a mask tensor
    "megatron": {"adapter_fp32": False, "kbit_upcast": False, "keep_logits": False, "attn_mask": False},
    "megatron-swift": {"adapter_fp32": False, "kbit_upcast": False, "keep_logits": False, "attn_mask": False},
}

# Frameworks whose PPO holds a reward model only when one is named: LLaMA-Factory's default reward is an adapter on
# the policy (`reward_model_type: lora`); verl's is a function unless `reward_model.enable` (ppo_trainer.yaml)
REWARD_MODEL_WHEN_NAMED = frozenset({"llamafactory", "verl"})


# TRL's config class of each objective (trl 1.16: trl/trainer/*_config.py; ORPO, CPO, PPO, online DPO and GKD in
# trl/experimental/): the label of the defaults applied names the objective's own class
TRL_CONFIG_CLASSES = {
    "sft": "SFTConfig",
    "pretrain": "SFTConfig",
    "dpo": "DPOConfig",
    "kto": "KTOConfig",
    "orpo": "ORPOConfig",
    "cpo": "CPOConfig",
    "simpo": "CPOConfig",
    "rm": "RewardConfig",
    "ppo": "PPOConfig",
    "grpo": "GRPOConfig",
    "rloo": "RLOOConfig",
    "online-dpo": "OnlineDPOConfig",
    "gkd": "GKDConfig",
    "kd": "GKDConfig",
}


# Defaults read from the framework's own argument definitions at the version the run uses (frameworks/schemas/, dumped
# from each release's wheel by scripts/dump_framework_schemas.py): concept -> the argument names holding it, first
# defined wins. A literal default there replaces the hand-written one above; an argument whose default is computed at
# run time (None in the dump: TRL 0.12's `max_seq_length`, ms-swift 3.x's `max_length`) keeps the hand-written value.
DUMPED_DEFAULTS: dict[str, dict[str, tuple[str, ...]]] = {
    "transformers": {
        "micro_batch": ("per_device_train_batch_size",),
        "eval_batch": ("per_device_eval_batch_size",),
        "grad_accum": ("gradient_accumulation_steps",),
        "grad_checkpointing": ("gradient_checkpointing",),
        # adamw_torch (foreach) up to 4.53; from 4.54 adamw_torch_fused when torch >= 2.8 (its `default_when`)
        "optimizer": ("optim",),
    },
    "trl": {
        "trust_remote_code": ("trust_remote_code",),
        "optimizer": ("optim",),  # transformers' TrainingArguments (TRL's configs do not redefine it)
        "seq_len": ("max_length", "max_seq_length"),
        "grad_checkpointing": ("gradient_checkpointing",),
        "packing": ("packing",),
        "micro_batch": ("per_device_train_batch_size",),
        "eval_batch": ("per_device_eval_batch_size",),
        "grad_accum": ("gradient_accumulation_steps",),
        # online RL (resolve/objective.py): the rollout's prompt truncation and completion length, the KL
        # coefficient (0.0: no reference model) and colocated vLLM's share of the GPU
        "prompt_len": ("max_prompt_length",),
        "completion_len": ("max_completion_length", "response_length", "max_new_tokens"),
        "kl_beta": ("beta", "kl_coef"),
        "vllm_memory_share": ("vllm_gpu_memory_utilization",),
    },
    "llamafactory": {
        "trust_remote_code": ("trust_remote_code",),
        "seq_len": ("cutoff_len",),
        "lora_r": ("lora_rank",),
        "lora_dropout": ("lora_dropout",),
        "trained_layers": ("freeze_trainable_layers", "num_layer_trainable"),  # the second: ≤ 0.7
        "optimizer": ("optim",),  # transformers' Seq2SeqTrainingArguments
    },
    "axolotl": {
        "seq_len": ("sequence_len",),
        "micro_batch": ("micro_batch_size",),
        "grad_accum": ("gradient_accumulation_steps",),
        # transformers' OptimizerNames.ADAMW_HF up to 0.7 (transformers' own AdamW), ADAMW_TORCH_FUSED from 0.8
        "optimizer": ("optimizer",),
    },
    "ms-swift": {
        "seq_len": ("max_length",),
        # 1.x/2.x: `batch_size` (their `per_device_train_batch_size` defaults to None and is set from it)
        "micro_batch": ("batch_size", "per_device_train_batch_size"),
        "optimizer": ("optim",),  # 1.x/2.x SftArguments define it; 3.x/4.x take transformers' TrainingArguments
        "lora_r": ("lora_rank",),
        "lora_alpha": ("lora_alpha",),
        "lora_dropout": ("lora_dropout",),
    },
    # Megatron-LM's own command line (frameworks/schemas/megatron/, every megatron-core minor from 0.4)
    "megatron": {
        "cross_entropy_fusion": ("cross_entropy_loss_fusion",),
        "distributed_optimizer": ("use_distributed_optimizer",),
        "sequence_parallel": ("sequence_parallel",),
    },
    # Megatron-SWIFT's own argument classes (frameworks/schemas/megatron-swift/): the fused cross-entropy is off
    # up to 3.12 and on from 4.0 (`cross_entropy_loss_fusion`), LoRA's arguments arrive in 3.7
    "megatron-swift": {
        "micro_batch": ("micro_batch_size",),
        "cross_entropy_fusion": ("cross_entropy_loss_fusion",),
        "distributed_optimizer": ("use_distributed_optimizer",),
        "sequence_parallel": ("sequence_parallel",),
        # 1 from 3.9: each expert whole on a tensor-parallel rank; None before, Megatron-LM's own (the TP size)
        "expert_tensor_parallel": ("expert_tensor_parallel_size",),
        "lora_r": ("lora_rank",),
        "lora_alpha": ("lora_alpha",),
        "lora_dropout": ("lora_dropout",),
        "lora_targets": ("target_modules",),
    },
}


class Defaults(dict):
    """A framework's defaults by concept, with where each came from when not the framework's label, the release
    of the framework the run uses (`run_version`; None: the newest dumped) and the library versions of the run
    they were read for (`run_environment`)."""

    def __init__(self, values: dict, labels: dict[str, str], release: str | None, env: dict):
        super().__init__(values)
        self.labels = labels
        self.release = release
        self.env = env


def run_version(framework: str, settings=None, implied: str | None = None, installs=None) -> str | None:
    """The version of `framework` a run uses: the frameworkVersions setting, the release the file itself installs
    (`installs`: `TrainingPlan.installs`), the workspace's pin, the installed distribution (transformers, TRL), else
    the release the file's own arguments belong to (`implied`: `TrainingPlan.framework_release`), else None (the
    newest dump is then read)."""
    from vramlens import environment
    from vramlens.frameworks import recognise

    dist = recognise.DISTRIBUTIONS.get(framework)
    if settings is None or dist is None:
        return implied
    pin = recognise.pinned_release(framework, settings.workspace, installs, settings.framework_versions)
    if pin is not None:
        return pin.version
    if dist in environment.PACKAGES:
        found = environment.versions(settings).get(dist)
        if found is not None:
            return found.version
    return implied


def release_requires(framework: str | None, release: str | None):
    """What `release` of `framework` (the one the run uses, `run_version`; None: the newest dumped) requires of the
    libraries, as `environment.Requirements`: its package metadata's `Requires-Dist`, read for every release
    published on PyPI (`schemas.release_requirements`); None for a framework or release not published there."""
    from vramlens import environment
    from vramlens.frameworks import recognise, schemas

    if framework is None:
        return None
    run = release or schemas.pick_version(framework)
    found = schemas.release_requirements(framework, run) if run is not None else None
    if not found or not found[1]:
        return None
    release, specs = found
    title = recognise.TITLES.get(framework, framework)
    return environment.Requirements(f"{title} {release}", specs, {p: tuple(schemas.versions(p)) for p in specs})


def run_environment(framework: str | None, settings, release: str | None = None, installs=None) -> dict:
    """`environment.versions` of the run: what the file installs (`TrainingPlan.installs`) after the setting, and
    what nothing names is what the framework's `release` (`run_version`) allows."""
    from vramlens import environment

    return environment.versions(settings, release_requires(framework, release), installs)


def _dumped(
    framework: str, objective: str | None, version: str | None, hand: dict, env: dict
) -> tuple[dict, dict[str, str]]:
    """The literal defaults the framework's dump at `version` holds for DUMPED_DEFAULTS, with their provenance text
    ("TRL 1.16.0 (SFTConfig.max_length)"); `env`: the run's library versions (`run_environment`)."""
    from vramlens.frameworks import recognise, schemas

    dumped = schemas.pick_version(framework, version)
    extends_transformers = framework == "trl" or any(
        e.startswith("transformers ") for e in (schemas.schema(framework, version) or {}).get("extends", ())
    )
    owners: tuple[str | None, ...] = (None,)
    if framework == "trl":
        # the objective's config class and the classes it inherits from (trl 1.x trainer/base_config.py
        # `_BaseConfig`; 0.x trainer/utils.py `OnPolicyConfig`), at the newest release that still defines it
        cls = TRL_CONFIG_CLASSES.get(objective or "sft", "SFTConfig")
        dumped = schemas.newest_defining(framework, cls, version) or dumped
        owners = schemas.lineage(framework, cls, dumped)
    if dumped is None:
        return {}, {}
    # TRL's, LLaMA-Factory's and ms-swift's arguments extend transformers' TrainingArguments: what they do not
    # redefine keeps transformers' default
    base = schemas.pick_version("transformers", env["transformers"].version) if extends_transformers else None
    values, labels = {}, {}
    for concept, names in DUMPED_DEFAULTS.get(framework, {}).items():
        where = [(framework, dumped, o) for o in owners]
        if base is not None:
            where.append(("transformers", base, None))
        for fw, v, owner in where:
            a = next((a for n in names if (a := schemas.argument(fw, n, v, owner)) is not None), None)
            if a is None:
                continue
            value, why = _default_at(a, env)
            if _same_kind(value, hand.get(concept)):
                values[concept] = value
                labels[concept] = f"{recognise.TITLES[fw]} {v} ({a.get('owner')}.{a['name']}{why})"
            break
    return values, labels


def _default_at(argument: dict, env: dict) -> tuple[Any, str]:
    """A dumped argument's default for the run, and what decided it when the dump records a default that depends on
    a condition (`default_when`: transformers 4.54+'s `optim` is adamw_torch_fused when torch >= 2.8): each
    condition is judged against the run's torch (`run_environment`: settings, pins, installed, what the
    framework's release allows, else the newest release known); one vramlens cannot judge is named, and the
    unconditional default kept."""
    value, why = argument.get("default"), ""
    torch = env["torch"]
    for condition, alternative in argument.get("default_when") or ():
        holds = _holds(condition, parse(torch.version))
        if holds is None:
            why += f"; {alternative} instead when `{condition}`, which vramlens does not judge"
        elif holds:
            value, why = alternative, f": `{condition}` holds for torch {torch.version} ({torch.source})"
        elif not why:
            why = f": `{condition}` does not hold for torch {torch.version} ({torch.source})"
    return value, why


_TORCH_FLAG = re.compile(r"is_torch_greater_or_equal_than_(\d+)_(\d+)(?:_(\d+))?")


def _holds(condition: str, torch: tuple[int, int, int] | None) -> bool | None:
    """Whether a dumped default's condition (Python source) holds for that torch: `and`, `or`, `not`,
    `is_torch_available()`, `is_torch_greater_or_equal_than_2_8`, `is_torch_greater_or_equal("2.8")`; None when
    any other term decides it."""
    try:
        tree = ast.parse(condition, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _judge(tree, torch)


def _judge(node: ast.expr, torch: tuple[int, int, int] | None) -> bool | None:
    if isinstance(node, ast.BoolOp):
        found = [_judge(v, torch) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if False in found else None if None in found else True
        return True if True in found else None if None in found else False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _judge(node.operand, torch)
        return None if inner is None else not inner
    floor = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id == "is_torch_available" and not node.args:
            return True  # a training run has torch
        arg = node.args[0] if len(node.args) == 1 else None
        if node.func.id == "is_torch_greater_or_equal" and isinstance(arg, ast.Constant):
            floor = parse(str(arg.value))
    elif isinstance(node, ast.Name) and (m := _TORCH_FLAG.fullmatch(node.id)):
        floor = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if floor is None or torch is None:
        return None
    return torch >= floor


def _same_kind(value, hand) -> bool:
    """Whether a dumped default can stand for the hand-written one (a bool for a bool, a number for a number)."""
    if value is None or hand is None:
        return value is not None and hand is None and isinstance(value, (int, float))
    if isinstance(value, bool) or isinstance(hand, bool):
        return isinstance(value, bool) and isinstance(hand, bool)
    if isinstance(hand, float):
        return isinstance(value, (int, float))
    return type(value) is type(hand)


def defaults_for(
    framework: str | None, objective: str | None, settings, implied: str | None = None, installs=None
) -> tuple[str, str, Defaults]:
    """(framework key, version label, defaults) — unknown frameworks get the transformers defaults. TRL's label
    names the objective's config class ("TRL 1.x (DPOConfig/ModelConfig)"). With the run's `settings`, the
    library versions of the run are read (`run_environment`, kept as `Defaults.env`) and the
    defaults its framework's argument dump holds at the version the run uses (`run_version`) replace the
    hand-written ones, each labelled with that version and argument. `implied`: the release of `framework` the
    file's own arguments belong to (`run_version`); `installs`: what the file itself installs
    (`TrainingPlan.installs`)."""
    key = framework if framework in DEFAULTS else "transformers"
    implied = implied if key == framework else None
    version, values = DEFAULTS[key]
    if key in REMOTE_CODE_DEFAULTS:
        values = {**values, "trust_remote_code": REMOTE_CODE_DEFAULTS[key]}
    run = run_version(key, settings, implied, installs)
    if key == "trl":
        from vramlens.frameworks import schemas

        cls = TRL_CONFIG_CLASSES.get(objective or "sft", "SFTConfig")
        dumped_trl = schemas.pick_version("trl", run)
        older = schemas.newest_defining("trl", cls, dumped_trl)
        # a config class TRL no longer ships (PPOConfig after 1.12) is named with the release that last had it
        version = (
            f"TRL 1.x ({cls}/ModelConfig)"
            if older in (None, dumped_trl)
            else f"TRL 1.x (ModelConfig; {cls} of {older})"
        )
    if implied is not None and run == implied:
        from vramlens.frameworks import recognise

        version = f"{version}, the file read as {recognise.TITLES.get(key, key)} {implied}"
    env = run_environment(key, settings, run, installs)
    dumped, labels = _dumped(key, objective, run, values, env)
    if key == "llamafactory":
        release = parse(run)
        if release is not None and release < LLAMAFACTORY_TRUST_SETTING_FROM:
            dumped["trust_remote_code"] = True
            labels["trust_remote_code"] = f"LLaMA-Factory {'.'.join(map(str, release))} (model/loader.py)"
    return key, version, Defaults({**values, **dumped}, labels, run, env)


# LLaMA-Factory passes `trust_remote_code=True` to every load before 0.9.2 (v0.8.3 … v0.9.1
# src/llamafactory/model/loader.py `_get_init_kwargs`: `"trust_remote_code": True`) and its `trust_remote_code`
# argument (default False, hparams/model_args.py) from 0.9.2
LLAMAFACTORY_TRUST_SETTING_FROM = (0, 9, 2)


# Frameworks whose step runs transformers' own model classes and loss (their version-dependent choices apply:
# knowledge/versions.py); torchtune, litgpt, torchtitan and Megatron build their own models.
HF_MODEL_FRAMEWORKS = frozenset(
    k for k in BEHAVIOUR if k not in ("torchtune", "litgpt", "torchtitan", "megatron", "megatron-swift")
)

# The model_types NeMo AutoModel builds with its own classes instead of transformers' (nemo_automodel/_transformers/
# registry.py at main 36044ad3: the text architectures it maps to nemo_automodel.components.models.<x>.model, each
# architecture's model_type as transformers 5.24's auto mapping names it); their attention is the run's
# `model.backend.attn` (formats/nemo_automodel.py `OWN_ATTENTION`), not transformers' choice for that class
NEMO_OWN_MODEL_ATTENTION = "nemo_automodel.own_model_attention"  # the plan's `extra` key the reader keeps it under
# verl's Megatron critic builds its own Megatron-Core model by `critic.megatron.*` (verl main
# verl/workers/megatron_workers.py `CriticWorker`): its (TP, PP, CP, EP, expert TP) under this `extra` key
VERL_CRITIC_LAYOUT = "verl.critic_megatron_layout"
NEMO_OWN_MODELS = frozenset(
    {
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_v4",
        "ernie4_5_moe",
        "glm4_moe",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "gpt_oss",
        "hy_v3",
        "laguna",
        "llama",
        "mimo_v2_flash",
        "minimax_m2",
        "ministral3",
        "mistral4",
        "nemotron_h",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
    }
)

# Frameworks whose step is transformers' Trainer (or a subclass): under FSDP it wraps a LoRA model's adapter linears
# in units of their own (transformers trainer.py `_fsdp_qlora_plugin_updates`: peft `fsdp_auto_wrap_policy`) and
# enables the model's gradient checkpointing itself (`use_reentrant=True` unless the kwargs say otherwise)
HF_TRAINER_FRAMEWORKS = frozenset({"transformers", "trl", "axolotl", "llamafactory", "ms-swift"})


# Frameworks that freeze a vision-language model's vision tower unless told otherwise: LLaMA-Factory
# (hparams/model_args.py `freeze_vision_tower: bool = True`), ms-swift (`freeze_vit: bool = True`, swift/llm/
# argument/tuner_args.py; Megatron-SWIFT the same, v4.0.0 swift/megatron/arguments/megatron_args.py), torchtune
# (llama3_2_vision configs `encoder_trainable: False`). transformers / TRL / axolotl train every parameter in a full
# fine-tune.
FREEZES_VISION = frozenset({"llamafactory", "ms-swift", "megatron-swift", "torchtune"})


# Plan fields (ResolvedPlan booleans of the same names) that say how a framework's step allocates.
STEP_FLAGS = ("quant_lm_head", "quant_dequant_fp16", "fused_qkv", "logits_fp32", "fused_lora")


def step_flags(framework: str) -> dict[str, bool]:
    """The STEP_FLAGS plan fields for a framework's step (all False for frameworks that set none)."""
    behaviour = BEHAVIOUR.get(framework, {})
    return {flag: bool(behaviour.get(flag)) for flag in STEP_FLAGS}


def arch_as_run(framework: str, arch):
    """The architecture as the framework builds it: litgpt keeps a separate LM head for a tied checkpoint."""
    if BEHAVIOUR.get(framework, {}).get("separate_lm_head") and arch.tied_embeddings and arch.block != "encoder":
        return arch.model_copy(update={"tied_embeddings": False})
    return arch


# The bitsandbytes release a framework runs with when the settings name none (absent: a current release).
# litgpt's finetune scripts warn "LitGPT only supports bitsandbytes v0.42.0" for any other version
# (litgpt/finetune/lora.py, 2024–2026).
BITSANDBYTES: dict[str, str] = {"litgpt": "0.42.0"}


def bnb_keeps_4bit_input(version: str | None) -> bool:
    """Whether this bitsandbytes keeps the input of every 4-bit matmul for backward. Up to 0.43.1
    `MatMul4Bit.forward` stored `ctx.tensors = (A, B)` although backward never uses A; bitsandbytes PR #1270
    (merged 2024-07-16, released in 0.43.2) stores `(None, B)`. Unknown or unparsable versions: a current one."""
    v = parse(version)
    return v is not None and v < (0, 43, 2)


# torchtune's LoRA/QLoRA/DoRA component builders build each layer's attention with its own RoPE module (torchtune 0.6.1
# models/llama2, llama3, mistral, qwen2, gemma, gemma2, phi3 `_component_builders.py`: `lora_*_self_attention` creates
# the positional embeddings it is given none of), except Llama 3.1/3.2/3.3's, which create one and pass it to every
# layer (models/llama3_1 and llama3_2 `lora_llama3_1` / `lora_llama3_2`; llama3_3 uses llama3_1's). Full-weight
# builders share one in every family. Each RoPE module holds an fp32 cache of every position up to the builder's
# max_seq_len (modules/position_embeddings.py `build_rope_cache`).
TORCHTUNE_SHARED_ROPE_LORA = frozenset({"llama3_1", "llama3_2", "llama3_3"})


def torchtune_rope_caches(builder_package: str | None, family: str, peft: str, layers: int) -> int:
    """RoPE caches a torchtune model allocates, from its builder's package (`torchtune.models.<package>.…`; None:
    not named: Llama 3.2's for the llama family, the family's own otherwise) and adapter method."""
    if peft not in ("lora", "qlora", "dora"):
        return 1
    package = builder_package or ("llama3_2" if family == "llama" else family)
    return 1 if package in TORCHTUNE_SHARED_ROPE_LORA else max(layers, 1)


# ms-swift 1.x/2.x name a model by `--model_type` (`qwen-7b-chat`): the registry in swift/llm/utils/model.py, dumped
# with its ModelScope id, the `hf_model_id` 2.x adds and the default LoRA targets (`--lora_target_modules DEFAULT`)
# by scripts/dump_swift_model_types.py (ms-swift v1.7.3 bbcd13a9 and v2.6.1 ab38bff0) into
# data/ms_swift_model_types.json
_SWIFT_MODEL_TYPES: dict | None = None


def swift_model_type(name: str) -> dict | None:
    """{"model_id", "hf_model_id", "lora_targets", "tag"} of an ms-swift 1.x/2.x `--model_type`, or None."""
    global _SWIFT_MODEL_TYPES
    if _SWIFT_MODEL_TYPES is None:
        import json
        from pathlib import Path

        path = Path(__file__).with_name("data") / "ms_swift_model_types.json"
        types = json.loads(path.read_text(encoding="utf-8"))["types"]
        _SWIFT_MODEL_TYPES = {k.lower(): v for k, v in types.items()}  # ms-swift compares them as written
    return _SWIFT_MODEL_TYPES.get(name.strip().lower()) if isinstance(name, str) else None


_SWIFT_BY_MODEL_ID: dict[str, dict] | None = None


def swift_model_entry(model_id: str) -> dict | None:
    """The registry entry whose ModelScope or Hub id is `model_id` (ms-swift 1.x infers `--model_type` from
    `--model_id_or_path` this way), the first registered when several share it."""
    global _SWIFT_BY_MODEL_ID
    if _SWIFT_BY_MODEL_ID is None:
        swift_model_type("")
        _SWIFT_BY_MODEL_ID = {}
        for entry in _SWIFT_MODEL_TYPES.values():
            for key in (entry.get("model_id"), entry.get("hf_model_id")):
                if key:
                    _SWIFT_BY_MODEL_ID.setdefault(key, entry)
    return _SWIFT_BY_MODEL_ID.get(model_id) if isinstance(model_id, str) else None


def swift_hub_id(modelscope_id: str) -> str | None:
    """The Hugging Face id ms-swift's registry pairs with a ModelScope id (`qwen/Qwen-7B-Chat` → `Qwen/Qwen-7B-Chat`),
    or None when it registers none or it is the same."""
    entry = swift_model_entry(modelscope_id)
    hub = entry.get("hf_model_id") if entry is not None and entry.get("model_id") == modelscope_id else None
    return hub if hub != modelscope_id else None


# torchtune up to 0.2.x truncates in the dataset builder, whose `max_seq_len` defaults differ by builder (torchtune
# v0.1.1 02847ec4 and v0.2.1 83557aa9 torchtune/datasets/_alpaca.py `alpaca_dataset(max_seq_len=512)` and
# `alpaca_cleaned_dataset = partial(alpaca_dataset, …)`, _slimorca.py 1024, _stack_exchanged_paired.py 1024; grammar
# and samsum build an InstructDataset with `max_seq_len=None`: no truncation). From 0.3.0 the length is the
# tokenizer's `max_seq_len` and these components moved from `torchtune.utils.` to `torchtune.training.`
# (v0.3.0 651a7300 recipes/configs: `torchtune.training.FullModelHFCheckpointer`).
TORCHTUNE_02_DATASET_SEQ_LEN = {
    "alpaca_dataset": 512,
    "alpaca_cleaned_dataset": 512,
    "slimorca_dataset": 1024,
    "stack_exchanged_paired_dataset": 1024,
}
TORCHTUNE_02_LABEL = "torchtune 0.1–0.2 (v0.1.1 02847ec4, v0.2.1 83557aa9)"


def torchtune_dataset_seq_len(component: str, version: str | None) -> int | None:
    """The sequence length a torchtune ≤ 0.2 dataset builder truncates to by default (None: not one of them, or a
    later torchtune)."""
    v = parse(version)
    if v is None or v >= (0, 3, 0):
        return None
    return TORCHTUNE_02_DATASET_SEQ_LEN.get(component.rsplit(".", 1)[-1])
