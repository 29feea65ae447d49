"""The axolotl key table: every key the reader reads, with how a fix writes its concept and what its JSON Schema
says. The reader's dispatch (`dialect.apply`), the fixes' writer (`formats.render_yaml`) and the schema
(`formats.schemas`) are generated from it (`frameworks.keys`).

Keys and meanings: axolotl `src/axolotl/utils/schemas/config.py` (`AxolotlInputConfig`) and its `integrations/`
at axolotl 067b021c (docs/config-sources.md); deprecated spellings axolotl still accepts (with a warning) are read
too: boolean attention flags, `fsdp: [full_shard, ...]`, `base_model_config`, `sequence_parallel_degree`.
"""

from __future__ import annotations

from typing import Literal, Union

from vramlens.formats import hf
from vramlens.formats.vocab import AXOLOTL_ATTENTION
from vramlens.frameworks.axolotl import readers as r
from vramlens.frameworks.axolotl import writers as w
from vramlens.frameworks.keys import ALLOC_NOTE, Key, NotHere, Table, Through, flag, not_here, whole
from vramlens.knowledge import optimizers

Num = Union[int, float, str]  # YAML 1.1 reads `2e-5` as text; axolotl's schema converts it
GE1 = {"ge": 1}


def _legacy(name: str, impl: str) -> Key:
    return Key(
        (name,),
        "attn_impl",
        r.legacy_flag,
        type=bool,
        description=f"Legacy switch for {impl} (use `attn_implementation`).",
    )


def _not_modelled(name: str, what: str, consequence: str, description: str, read=None) -> Key:
    return Key((name,), None, read, type=bool, description=description, unmodelled=(what, consequence))


KEYS: Table = (
    # model
    Key(
        ("base_model",),
        "model_id",
        hf._model,
        type=str,
        description="The model (hub id or path): parameter count and shapes set every memory term.",
    ),
    Key(
        ("base_model_config",),
        "model_id",
        hf._model,
        type=str,
        description="Where the model's config is read (legacy; `base_model` wins when both are set).",
    ),
    Key(
        ("trust_remote_code",),
        "trust_remote_code",
        flag("trust_remote_code"),
        type=bool,
        description="Build the checkpoint's own modeling code (its config.json `auto_map`) instead of transformers' "
        "class; needed for a model transformers does not ship.",
    ),
    Key(
        ("type_of_model",),
        "task_head",
        r.model_class,
        type=str,
        description="The transformers class the model is loaded with; a classification head has no vocabulary logits.",
    ),
    Key(
        ("model_type",),
        "task_head",
        r.model_class,
        type=str,
        description="Old name of `type_of_model`.",
    ),
    Key(("num_labels",), "task_head", hf._num_labels, type=int, description="Classes of a classification head."),
    # batch and sequence
    Key(
        ("micro_batch_size",),
        "micro_batch",
        whole("micro_batch"),
        write=True,
        after=("gradient_accumulation_steps",),
        type=int,
        description="Samples per GPU per step (default 1). Activations grow linearly.",
        schema=GE1,
    ),
    Key(
        ("gradient_accumulation_steps",),
        "grad_accum",
        whole("grad_accum"),
        write=True,
        after=("micro_batch_size",),
        type=int,
        description="Micro-batches per optimizer step (default 1).",
        schema=GE1,
    ),
    Key(
        ("batch_size",),
        "global_batch",
        r.global_batch,
        type=int,
        description="Total batch (all GPUs × accumulation); accumulation is derived from it.",
        schema=GE1,
    ),
    Key(
        ("eval_batch_size",),
        "eval_batch",
        whole("eval_batch"),
        write=True,
        after=("micro_batch_size",),
        type=int,
        description="Evaluation batch (default = micro_batch_size).",
        schema=GE1,
    ),
    Key(
        ("sequence_len",),
        "seq_len",
        whole("seq_len"),
        write=True,
        after=("output_dir",),
        type=int,
        description="Maximum tokens per sample (default 512). Activations grow linearly, eager attention "
        "quadratically.",
        schema=GE1,
    ),
    Key(
        ("sample_packing",),
        "packing",
        flag("packing"),
        write=True,
        after=("sequence_len",),
        type=bool,
        description="Pack samples to `sequence_len`: every row is full length.",
    ),
    Key(("pad_to_sequence_len",), type=bool, description="Pad every row to `sequence_len`: every row costs it."),
    Key(("eval_sample_packing",), type=bool, description="Pack the evaluation samples too."),
    Key(("sample_packing_eff_est",), type=Num, description="Packing efficiency estimate (batching only)."),
    Key(("num_epochs",), type=Num, description="Passes over the data. No memory effect."),
    # activations
    Key(
        ("gradient_checkpointing",),
        "grad_checkpointing",
        r.gradient_checkpointing,
        write=w.grad_checkpointing,
        type=Union[bool, Literal["offload", "offload_disk"]],
        description="Recompute activations in backward (default false); `offload` also moves the checkpoints to CPU.",
    ),
    Key(
        ("gradient_checkpointing_kwargs",),
        "ckpt_reentrant",
        section=hf._ckpt_kwargs,
        type=dict,
        description="Options of checkpointing: `use_reentrant: false` checkpoints with autograd's saved-tensor hooks.",
    ),
    Key(
        ("gradient_checkpointing_kwargs", "use_reentrant"),
        "ckpt_reentrant",
        write=True,
        after=("gradient_checkpointing",),
        type=bool,
        description="Re-entrant checkpointing (torch's old default): breaks with FSDP and frozen inputs.",
    ),
    Key(
        ("activation_offloading",),
        "activation_offload",
        r.activation_offloading,
        write=True,
        after=("gradient_checkpointing",),
        type=Union[bool, Literal["legacy", "disk", "hidden_states"]],
        description="Move saved activations off the GPU.",
    ),
    # attention
    Key(
        ("attn_implementation",),
        "attn_impl",
        r.attn,
        write=w.attn,
        type=str,
        description="Attention kernel (eager materialises the score matrix). Short forms like `flash` are rejected.",
        schema={"json_schema_extra": {"examples": list(AXOLOTL_ATTENTION)}},
    ),
    _legacy("flash_attention", "flash_attention_2"),
    _legacy("xformers_attention", "xformers"),
    _legacy("sdp_attention", "sdpa (PyTorch scaled_dot_product_attention)"),
    _legacy("flex_attention", "flex_attention"),
    _legacy("sage_attention", "SageAttention"),
    _legacy("eager_attention", "eager attention (materialises the score matrix)"),
    # optimizer
    Key(
        ("optimizer",),
        "optimizer",
        r.optimizer,
        write=True,
        after=("num_epochs", "micro_batch_size"),
        type=str,
        description="Optimizer (default adamw_torch_fused): 8-bit ones keep ~2 bytes of state per parameter "
        "instead of ~8.",
        schema={"json_schema_extra": {"examples": list(optimizers.axolotl_names())}},
    ),
    Through("optimizer_impl", w.optimizer_impl),
    # what trains
    Key(
        ("adapter",),
        "peft_method",
        r.adapter,
        write=w.peft,
        type=Literal["lora", "qlora"],
        description="Train adapters instead of the full model (qlora: 4-bit base).",
    ),
    Key(("peft_use_dora",), "peft_method", hf._dora, type=bool, description="DoRA: LoRA plus a magnitude vector."),
    Key(
        ("lora_r",),
        "lora_r",
        whole("lora_r"),
        write=True,
        after=("lora_model_dir", "adapter"),
        type=int,
        description="LoRA rank: adapter size grows linearly.",
        schema=GE1,
    ),
    Key(
        ("lora_alpha",),
        "lora_alpha",
        hf._float("lora_alpha"),
        write=True,
        after=("lora_r",),
        type=Num,
        description="LoRA scaling. No memory effect.",
    ),
    Key(
        ("lora_dropout",),
        "lora_dropout",
        hf._float("lora_dropout"),
        write=True,
        after=("lora_alpha",),
        type=Num,
        description="LoRA dropout: > 0 keeps a copy of each adapted input.",
    ),
    Key(
        ("lora_target_linear",),
        "lora_targets",
        r.target_linear,
        type=bool,
        description="Adapters on every linear layer.",
    ),
    Key(
        ("lora_target_modules",),
        "lora_targets",
        r.targets,
        write=w.targets,
        type=Union[list, str],
        description="Layers that get adapters (list or regular expression).",
    ),
    Key(
        ("lora_target_parameters",),
        "expert_targets",
        r.lora_target_parameters,
        type=list,
        description="Parameters (not modules) that get adapters: a MoE model's fused expert weights "
        "(`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`), every expert at rank r.",
    ),
    Key(
        ("experts_implementation",),
        None,
        r.experts_implementation,
        type=str,
        description="transformers' implementation of a MoE model's routed experts (`grouped_mm`, `batched_mm`, "
        "`eager`); the estimate models grouped_mm and names the others.",
    ),
    Key(
        ("lora_modules_to_save",),
        "modules_to_save",
        hf._targets_handler("modules_to_save"),
        type=Union[list, str],
        description="Modules trained in full next to the adapters (embeddings, lm_head can be large).",
    ),
    Key(
        ("unfrozen_parameters",),
        "peft_method",
        r.unfrozen,
        type=list,
        description="Only the parameters matching these patterns train: gradients and states for those only.",
    ),
    Key(
        ("lisa_n_layers",),
        "trained_layers",
        hf._lisa_layers,
        type=int,
        description="LISA: this many randomly chosen layers train at a time.",
    ),
    # quantization
    Key(
        ("load_in_4bit",),
        "quant_bits",
        hf._load_in(4),
        write=w.quant,
        type=bool,
        description="4-bit NF4 base weights (~0.5 byte per parameter).",
    ),
    Key(
        ("load_in_8bit",),
        "quant_bits",
        r.load_in_8bit,
        type=bool,
        description="8-bit base weights (~1 byte per parameter).",
    ),
    Key(
        ("quantize_moe_experts",),
        "experts_quantized",
        r.quantize_moe_experts,
        type=bool,
        description="Quantize a MoE model's fused 3-D expert weights on load (4-bit NF4 with `load_in_4bit`, row-wise "
        "int8 with `load_in_8bit`); without it transformers 5 leaves them in bf16.",
    ),
    Key(
        ("embeddings_skip_upcast",),
        "embeddings_skip_upcast",
        r.embeddings_skip_upcast,
        type=bool,
        description="Keep the embeddings and LM head in 16 bits when a k-bit model is prepared for adapters (peft "
        "upcasts them to fp32 otherwise): about 2 bytes less per embedding parameter.",
    ),
    Key(("gptq",), "quant_bits", r.gptq, type=bool, description="GPTQ pre-quantized 4-bit base weights."),
    Key(("model_quantization_config",), type=str, description="Quantization config class of the base model."),
    # precision
    Key(
        ("bf16",),
        "amp_dtype",
        hf._amp("bf16"),
        write=w.amp,
        type=Union[bool, Literal["auto", "full"]],
        description="bf16 training (default auto): the model is loaded in bf16, so weights take 2 bytes per parameter.",
    ),
    Key(("fp16",), "amp_dtype", hf._amp("fp16"), type=bool, description="fp16 mixed precision."),
    Key(
        ("fp8",),
        "amp_dtype",
        r.fp8,
        type=bool,
        description="torchao float8 training: fp8 matrix multiplications.",
    ),
    Key(
        ("qat",),
        None,
        r.qat,
        type=dict,
        description="Quantization-aware training: torchao fake-quantizes the linears' weights (and activations) in "
        "the forward; the weights train in full precision.",
    ),
    Key(("bfloat16",), "weight_dtype", r.dtype_flag("bf16"), type=bool, description="Load the model in bf16."),
    Key(("float16",), "weight_dtype", r.dtype_flag("fp16"), type=bool, description="Load the model in fp16."),
    Key(
        ("torch_dtype",),
        "weight_dtype",
        hf._dtype,
        type=str,
        description="dtype the weights are loaded in: float32 takes 4 bytes per parameter, bfloat16 2.",
    ),
    Key(("tf32",), type=Union[bool, str], description="TF32 matrix multiplications. No memory effect."),
    *not_here("weight_dtype", "quant_compute_dtype"),
    # distribution
    Key(
        ("deepspeed",),
        "dist_strategy",
        section=hf._deepspeed,
        type=Union[str, dict],
        description="DeepSpeed config (path or inline): ZeRO sharding and CPU offload. "
        "axolotl's zero2.json already offloads the optimizer.",
    ),
    Key(
        ("fsdp",),
        "dist_strategy",
        hf._fsdp,
        type=Union[str, list, bool],
        description="Legacy FSDP options (`full_shard auto_wrap`, `offload`): shards weights, gradients and "
        "optimizer states.",
    ),
    Key(
        ("fsdp_version",),
        "fsdp_version",
        r.fsdp_version,
        type=int,
        description="FSDP version (2 = per-parameter sharding).",
    ),
    Key(
        ("fsdp_config",),
        "dist_strategy",
        section=hf._fsdp_config,
        type=dict,
        description="FSDP settings: `offload_params`, `reshard_after_forward` (false ≈ ZeRO-2), "
        "`activation_checkpointing`, `state_dict_type`.",
    ),
    NotHere("fsdp_state_dict_type"),
    # compile and kernels
    Key(
        ("plugins",),
        "loss_impl",
        r.plugins,
        type=list[str],
        description="Plugins; CutCrossEntropyPlugin / LigerPlugin remove the full logits tensor.",
    ),
    Key(
        ("torch_compile",),
        "compile",
        r.compile_,
        write=True,
        after=("gradient_checkpointing",),
        type=Union[bool, Literal["auto"]],
        description="torch.compile: usually lower activation memory.",
    ),
    Key(
        ("torch_compile_mode",),
        "compile",
        hf._compile_mode,
        type=str,
        description="torch.compile mode; set, it turns compilation on.",
    ),
    Key(
        ("liger_fused_linear_cross_entropy",),
        "loss_impl",
        r.liger_flce,
        write=w.loss,
        type=bool,
        description="Liger plugin: fused linear cross-entropy, no full [tokens × vocabulary] logits tensor.",
    ),
    Key(
        ("cut_cross_entropy",),
        "loss_impl",
        r.cce_switch,
        type=bool,
        description="Cut Cross-Entropy plugin switch: no full logits tensor.",
    ),
    Key(
        ("chunked_cross_entropy",),
        "loss_impl",
        r.chunked_ce,
        type=bool,
        description="Cross-entropy over chunks of the sequence: the fp32 logits are never all upcast at once.",
    ),
    Key(
        ("liger_rms_norm",),
        None,
        r.liger_kernel,
        type=bool,
        description="Liger plugin: Liger's RMSNorm kernel; it saves its input and the fp32 1/rms, no fp32 copy.",
    ),
    Key(
        ("liger_glu_activation",),
        None,
        r.liger_kernel,
        type=bool,
        description="Liger plugin: Liger's SwiGLU/GeGLU kernel; it saves the gate's and up's outputs, no act(gate).",
    ),
    Key(
        ("liger_swiglu",),
        None,
        r.liger_kernel,
        type=bool,
        # integrations/liger/args.py `check_deprecated_swiglu`: moved to `liger_glu_activation`
        description="Liger plugin: the older spelling of `liger_glu_activation`.",
    ),
    Key(
        ("liger_rope",),
        None,
        r.liger_kernel,
        type=bool,
        description="Liger plugin: Liger's RoPE kernel, in place; it saves cos and sin, as transformers' RoPE does.",
    ),
    Key(
        ("liger_layer_norm",),
        None,
        None,
        type=bool,
        # liger_kernel 0.8.2 ops/layer_norm.py `LigerLayerNormFunction.forward`: save_for_backward(X, W, B, Mean, RSTD),
        # the input and one mean and 1/std per row, as torch's native_layer_norm keeps
        description="Liger plugin: Liger's LayerNorm kernel (models with LayerNorm); it keeps the input and per-row "
        "statistics, as PyTorch's LayerNorm does.",
    ),
    _not_modelled(
        "tiled_mlp",
        "TiledMLP, the MLP run over sequence tiles",
        "estimated with the whole sequence through the MLP",
        "Run the MLP over tiles of the sequence: its intermediate activations shrink.",
    ),
    # read together (readers.lora_kernels): all three on, without LoRA dropout, are unsloth's fused LoRA step
    Key(
        ("lora_mlp_kernel",),
        None,
        r.remember,
        type=bool,
        description="axolotl's fused LoRA MLP kernel: saves the input and the gate and up outputs, recomputes the rest",
    ),
    Key(
        ("lora_qkv_kernel",),
        None,
        r.remember,
        type=bool,
        description="axolotl's fused LoRA QKV kernel: saves the input once for q, k and v.",
    ),
    Key(
        ("lora_o_kernel",),
        None,
        r.remember,
        type=bool,
        description="axolotl's fused LoRA output-projection kernel: saves its input.",
    ),
    _not_modelled(
        "use_kernels",
        "kernels from the Hugging Face kernels hub",
        "estimated with transformers' own layers",
        "Kernels from the Hugging Face kernels hub in place of transformers' layers.",
    ),
    Key(
        ("context_parallel_size",),
        "context_parallel",
        whole("context_parallel"),
        spellings=(("sequence_parallel_degree",),),
        type=int,
        description="GPUs that split each sequence: activations divide by it.",
        schema=GE1,
    ),
    Key(
        ("tensor_parallel_size",),
        "tensor_parallel",
        whole("tensor_parallel"),
        type=int,
        description="GPUs that split each layer: weights and activations divide by it.",
        schema=GE1,
    ),
    # read together with the other parallel sizes by `dialect.data_parallel`
    Key(("dp_shard_size",), type=int, description="GPUs each FSDP shard group spans (the FSDP shard degree)."),
    Key(("dp_replicate_size",), type=int, description="Replicas of the sharded model (HSDP)."),
    Key(
        ("experimental_skip_move_to_device",),
        type=bool,
        description="Load the model without moving it to the GPU first (lower loading peak).",
    ),
    Key(("low_cpu_mem_usage",), type=bool, description="Load the weights without a full CPU copy."),
    Key(("gpu_memory_limit",), type=Union[int, str], description="Memory cap per GPU for loading the model."),
    Key(("max_memory",), type=dict, description="Memory per device for `device_map` placement."),
    Key(("device_map",), type=Union[str, dict], description="Where the model's layers are placed when loading."),
    # objective and data
    Key(
        ("rl",),
        type=str,
        description="Preference or RL method (dpo, kto, orpo, grpo, ...): a reference model or "
        "generation may add memory.",
    ),
    Through("precompute_ref", w.objective("precompute_ref")),
    Through("vllm_memory_share", w.objective("vllm_memory_share")),
    Through("generation", w.objective("generation")),
    Through("num_generations", w.objective("num_generations")),
    Through("completion_len", w.objective("completion_len")),
    Through("ref_model_id", w.objective("ref_model_id")),
    Key(("is_llama_derived_model",), type=bool, description="Legacy hint that the model is a Llama."),
    Key(("processor_type",), type=str, description="Processor class of a multimodal model."),
    Key(("image_size",), type=Union[int, list], description="Image size of a multimodal model: vision tokens."),
    Key(("image_resize_algorithm",), type=str, description="How images are resized."),
    # axolotl cloud (`axolotl train --cloud`)
    Key(
        ("gpu",),
        "gpu_name",
        r.gpu,
        type=str,
        description="Cloud GPU type (cloud configs), e.g. h100, a100-80gb, l40s.",
    ),
    Key(
        ("gpu_count",),
        "gpu_count",
        whole("gpu_count"),
        type=int,
        description="GPUs per node (cloud configs).",
        schema=GE1,
    ),
    Key(("node_count",), type=int, description="Machines (cloud configs)."),
    NotHere("alloc_conf", ALLOC_NOTE),
)
