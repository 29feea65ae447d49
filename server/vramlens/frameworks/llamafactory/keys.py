"""The LLaMA-Factory key tables — the classic hparams (`KEYS`) and the v1 layout (`KEYS_V1`): every key the reader
reads, with how a fix writes its concept and what its JSON Schema says. The readers' dispatch (`dialect`), the
fixes' writers (`formats.render_yaml`) and the schemas (`formats.schemas`) are generated from them
(`frameworks.keys`).

Keys and meanings: `src/llamafactory/hparams/` (model_args.py, data_args.py, finetuning_args.py) at LLaMA-Factory
ff6d4d12 (docs/config-sources.md); the classic file also holds HF `Seq2SeqTrainingArguments` keys, read by the HF
reader (`read_by="hf"`); the Megatron keys are mcore_adapter's (LLaMA-Factory examples/megatron/*.yaml). The v1
layout: LLaMA-Factory `examples/v1/` (`model`, `micro_batch_size`, `*_config: {name: ...}` blocks).
"""

from __future__ import annotations

from typing import Literal, Union

from vramlens.formats import hf
from vramlens.frameworks.keys import ALLOC_NOTE, Key, NotHere, Table, flag, not_here, whole
from vramlens.frameworks.llamafactory import readers as r
from vramlens.frameworks.llamafactory import writers as w
from vramlens.knowledge import optimizers

Num = Union[int, float, str]  # YAML 1.1 reads `2e-5` as text; LLaMA-Factory converts it
GE1 = {"ge": 1}
HF = "hf"  # read by formats.hf's TrainingArguments reader, to which LLaMA-Factory passes the keys it does not read

# (key, what it does) of the optimizer switches (finetuning_args.py); each replaces the trainer's optimizer
_SWITCHES = {
    "use_galore": "GaLore: low-rank optimizer states.",
    "use_apollo": "APOLLO: low-rank optimizer states.",
    "use_badam": "BAdam: optimizer states for one block of layers at a time.",
    "use_adam_mini": "Adam-mini: one second moment per block instead of per parameter.",
    "use_muon": "Muon for the matrices: one momentum buffer instead of two Adam states.",
}
_MEGATRON = {
    "tensor_model_parallel_size": "Tensor-parallel GPUs: weights and activations divide by it.",
    "pipeline_model_parallel_size": "Pipeline stages: layers divide by it.",
    "virtual_pipeline_model_parallel_size": "Interleaved pipeline chunks per stage.",
    "context_parallel_size": "GPUs that split each sequence: activations divide by it.",
    "expert_model_parallel_size": "GPUs the experts are spread over.",
    "expert_tensor_parallel_size": "Tensor-parallel GPUs within each expert.",
    "sequence_parallel": "Shard the activations outside attention and MLP over the tensor-parallel GPUs.",
    "use_distributed_optimizer": "Shard fp32 main weights and optimizer states over the data-parallel GPUs.",
    "recompute_method": "Recompute `uniform` (groups of layers) or `block` (the first layers of each stage).",
    "recompute_num_layers": "Layers recomputed (per group or per stage).",
}
_MEGATRON_TYPES = {"int": int, "bool": bool, "choice": Literal["uniform", "block"]}

# Every concept a fix may change that the classic file cannot hold, or only in a way the writer does not write
_NOT_CLASSIC = not_here(
    "weight_dtype",
    "quant_compute_dtype",
    "fsdp_state_dict_type",
    "precompute_ref",
    "vllm_memory_share",
    "generation",
    "num_generations",
    "completion_len",
    "ref_model_id",
)

KEYS: Table = (
    Key(
        ("model_name_or_path",),
        "model_id",
        hf._model,
        type=str,
        description="The model: parameter count and shapes set every memory term.",
    ),
    Key(("stage",), type=str, description="pt, sft, rm, ppo, dpo, kto: `pt` packs by default; ppo/dpo add models."),
    Key(("template",), type=str, description="Chat template. No memory effect."),
    Key(
        ("finetuning_type",),
        "peft_method",
        r.finetuning_type,
        write=w.peft,
        type=Literal["lora", "oft", "freeze", "full"],
        description="What trains (default lora!). Full fine-tuning needs gradients and optimizer states for every "
        "weight.",
    ),
    Key(
        ("lora_rank",),
        "lora_r",
        whole("lora_r"),
        write=True,
        after=("finetuning_type",),
        type=int,
        description="LoRA rank (default 8).",
        schema=GE1,
    ),
    Key(
        ("lora_alpha",),
        "lora_alpha",
        hf._float("lora_alpha"),
        write=True,
        after=("lora_rank",),
        type=Num,
        description="LoRA scaling (default 2 × rank). No memory effect.",
    ),
    Key(
        ("lora_dropout",),
        "lora_dropout",
        hf._float("lora_dropout"),
        write=True,
        after=("lora_alpha", "lora_rank"),
        type=Num,
        description="LoRA dropout (default 0).",
    ),
    Key(
        ("lora_target",),
        "lora_targets",
        r.lora_target,
        write=w.targets,
        type=Union[str, list],
        description="Layers with adapters: `all` (default) or `q_proj,v_proj`.",
    ),
    Key(
        ("additional_target",),
        "modules_to_save",
        hf._targets_handler("modules_to_save"),
        type=Union[str, list],
        description="Modules trained in full next to the adapters (embeddings, lm_head can be large).",
    ),
    Key(("use_dora",), "peft_method", hf._dora, type=bool, description="DoRA: LoRA plus a magnitude vector."),
    Key(("use_rslora",), type=bool, description="Rank-stabilised LoRA scaling. No memory effect."),
    Key(("pissa_init",), type=bool, description="PiSSA initialisation of the adapters (an SVD at start-up)."),
    Key(
        ("freeze_trainable_layers",),
        "trained_layers",
        r.freeze_layers,
        spellings=(("num_layer_trainable",),),  # LLaMA-Factory ≤ 0.7 (llmtuner 0.7.0 hparams/finetuning_args.py)
        type=int,
        description="Freeze tuning: the last n (negative: first n) layers train.",
    ),
    Key(
        ("freeze_trainable_modules",),
        "trained_modules",
        r.freeze_list("trained_modules"),
        spellings=(("name_module_trainable",),),  # LLaMA-Factory ≤ 0.7 (llmtuner 0.7.0 hparams/finetuning_args.py)
        type=Union[str, list],
        description="Freeze tuning: the modules of the trained layers that train (`all`).",
    ),
    Key(
        ("freeze_extra_modules",),
        "trained_extra",
        r.freeze_list("trained_extra"),
        type=Union[str, list],
        description="Freeze tuning: modules outside the layers that also train.",
    ),
    Key(
        ("use_llama_pro",),
        "peft_method",
        r.llama_pro,
        type=bool,
        description="LLaMA-Pro: only the expanded blocks train.",
    ),
    Key(("freeze_vision_tower",), type=bool, description="Keep the vision tower frozen (multimodal models)."),
    Key(
        ("quantization_bit",),
        "quant_bits",
        r.quant_bit,
        write=w.quant,
        type=Literal[2, 3, 4, 8],
        description="Quantize the base model: 4 bits ≈ 0.5 byte per parameter.",
    ),
    Key(
        ("quantization_method",),
        "quant_type",
        hf.quant_method,
        type=str,
        description="bnb (default), hqq, eetq, gptq, awq, ...",
    ),
    Key(
        ("quantization_type",),
        "quant_type",
        r.quant_type,
        type=Literal["nf4", "fp4"],
        description="bitsandbytes 4-bit data type (default nf4).",
    ),
    Key(
        ("double_quantization",),
        "quant_double",
        flag("quant_double"),
        type=bool,
        description="Quantize the 4-bit scales too: saves ~0.4 bit per parameter.",
    ),
    Key(
        ("cutoff_len",),
        "seq_len",
        whole("seq_len"),
        write=True,
        after=("template", "dataset"),
        type=int,
        description="Maximum tokens per sample (default 2048; 1024 before 2024-11). Activations grow linearly.",
        schema=GE1,
    ),
    Key(
        ("packing",),
        "packing",
        flag("packing"),
        write=True,
        after=("cutoff_len",),
        type=bool,
        description="Pack samples into full rows (default on for stage pt).",
    ),
    Key(("neat_packing",), "packing", flag("packing"), type=bool, description="Packing without cross-attention."),
    Key(
        ("per_device_train_batch_size",),
        "micro_batch",
        read_by=HF,
        write=True,
        after=("gradient_accumulation_steps",),
        type=int,
        description="Samples per GPU per step (HF default 8).",
        schema=GE1,
    ),
    Key(
        ("gradient_accumulation_steps",),
        "grad_accum",
        read_by=HF,
        write=True,
        after=("per_device_train_batch_size",),
        type=int,
        description="Micro-batches per optimizer step.",
        schema=GE1,
    ),
    Key(
        ("per_device_eval_batch_size",),
        "eval_batch",
        read_by=HF,
        write=True,
        after=("per_device_train_batch_size",),
        type=int,
        description="Samples per GPU in evaluation (HF default 8).",
        schema=GE1,
    ),
    Key(
        ("disable_gradient_checkpointing",),
        "grad_checkpointing",
        r.disable_gc,
        write=w.grad_checkpointing,
        type=bool,
        description="LLaMA-Factory checkpoints by default; true turns it off and stores every layer's activations.",
    ),
    Key(
        ("use_reentrant_gc",),
        "ckpt_reentrant",
        flag("ckpt_reentrant"),
        write=True,
        after=("gradient_accumulation_steps",),
        type=bool,
        description="Re-entrant checkpointing (default true).",
    ),
    Key(
        ("flash_attn",),
        "attn_impl",
        r.flash_attn,
        write=w.attn,
        type=Literal["auto", "disabled", "sdpa", "fa2", "fa3"],
        description="Attention kernel (disabled = eager, which materialises the score matrix).",
    ),
    Key(("shift_attn",), type=bool, description="Shift short attention (LongLoRA)."),
    Key(
        ("enable_liger_kernel",),
        "loss_impl",
        r.liger,
        write=w.loss,
        type=bool,
        description="Liger kernels: fused linear cross-entropy without the logits tensor.",
    ),
    Key(
        ("use_unsloth",),
        type=bool,
        description="Load and train through unsloth: offloaded checkpointing of every layer, Triton kernels.",
    ),
    Key(("use_unsloth_gc",), type=bool, description="unsloth's offloaded checkpoint function."),
    Key(
        ("pure_bf16",),
        "weight_dtype",
        r.pure_bf16,
        type=bool,
        description="bf16 weights and optimizer states without autocast: no fp32 copy.",
    ),
    # src/llamafactory/model/model_utils/checkpointing.py (ff6d4d12): `upcast_layernorm` casts the norms' weights to
    # fp32 (`prepare_model_for_training`); `upcast_lmhead_output` hooks the LM head to return `output.to(float32)`
    Key(
        ("upcast_layernorm",),
        type=bool,
        description="Layer norms in fp32.",
        unmodelled=("the layer norms' weights cast to fp32 (`upcast_layernorm`)", "estimated with 16-bit norms"),
    ),
    Key(
        ("upcast_lmhead_output",),
        type=bool,
        description="The LM head's output in fp32: a full fp32 logits tensor.",
        unmodelled=(
            "the LM head's output cast to fp32 (`upcast_lmhead_output`): a full fp32 logits tensor",
            "estimated with the logits in the compute dtype",
        ),
    ),
    Key(
        ("bf16",),
        "amp_dtype",
        read_by=HF,
        write=w.amp,
        type=bool,
        description="bf16 mixed precision.",
    ),
    Key(("fp16",), "amp_dtype", read_by=HF, type=bool, description="fp16 mixed precision."),
    Key(
        ("fp8",),
        "float8_linears",
        type=bool,
        # read with `fp8_backend` by dialect._fp8
        description="FP8 training through accelerate: torchao's float8 linears (rowwise), or Transformer Engine's "
        "with `fp8_backend: te`.",
    ),
    Key(("fp8_backend",), type=str, description="`auto`/`torchao`: torchao float8 linears; `te`: Transformer Engine."),
    Key(
        ("torch_compile",),
        "compile",
        read_by=HF,
        write=True,
        after=("bf16",),
        type=bool,
        description="torch.compile the model: usually less activation memory, with a compile-time peak.",
    ),
    Key(
        ("deepspeed",),
        "dist_strategy",
        read_by=HF,
        type=str,
        description="DeepSpeed JSON (resolved against the working directory): ZeRO sharding/offload.",
    ),
    *(
        Key(
            (name,),
            "optimizer",
            r.optimizer_switch(r.OPTIMIZER_SWITCHES[name]),
            type=bool,
            description=description,
        )
        for name, description in _SWITCHES.items()
    ),
    Key(
        ("optim",),
        "optimizer",
        read_by=HF,
        write=w.optimizer,
        type=str,
        description="HF optimizer name (8-bit ones keep ~2 bytes of state per parameter).",
        schema={"json_schema_extra": {"examples": list(optimizers.hf_names())}},
    ),
    NotHere("optimizer_impl", "LLaMA-Factory chooses the optimizer implementation through `optim` only"),
    Key(("galore_rank",), "optimizer_rank", whole("optimizer_rank"), type=int, description="GaLore rank (16)."),
    Key(("apollo_rank",), "optimizer_rank", whole("optimizer_rank"), type=int, description="APOLLO rank (16)."),
    Key(
        ("galore_target",),
        "optimizer_targets",
        hf._targets_handler("optimizer_targets"),
        type=Union[str, list],
        description="Modules whose gradients GaLore projects (`all`).",
    ),
    Key(
        ("apollo_target",),
        "optimizer_targets",
        hf._targets_handler("optimizer_targets"),
        type=Union[str, list],
        description="Modules whose gradients APOLLO projects (`all`).",
    ),
    Key(("galore_layerwise",), type=bool, description="GaLore with a per-layer step: no full gradient buffer."),
    Key(("apollo_layerwise",), type=bool, description="APOLLO with a per-layer step: no full gradient buffer."),
    Key(("badam_mode",), type=str, description="BAdam `layer` (one decoder layer at a time) or `ratio`."),
    Key(("ref_model",), type=str, description="Reference model of dpo/kto/ppo: a second model in memory."),
    Key(("image_max_pixels",), type=int, description="Largest image (pixels): the vision tokens per image."),
    Key(("image_min_pixels",), type=int, description="Smallest image (pixels)."),
    Key(("image_resolution",), type=int, description="Image resolution (older name of `image_max_pixels`)."),
    Key(
        ("recompute_granularity",),
        "grad_checkpointing",
        r.recompute,
        type=Literal["full", "selective"],
        description="Megatron recompute: `full` whole layers, `selective` only the core attention.",
    ),
    *(
        Key(
            (name,),
            concept,
            r.megatron(concept, kind),
            type=_MEGATRON_TYPES[kind],
            description=_MEGATRON[name],
        )
        for name, (concept, kind) in r.MEGATRON_KEYS.items()
    ),
    NotHere("alloc_conf", ALLOC_NOTE),
    *_NOT_CLASSIC,
)

KEYS_V1: Table = (
    Key(("model",), "model_id", hf._model, type=str, description="The model."),
    Key(
        ("micro_batch_size",),
        "micro_batch",
        whole("micro_batch"),
        write=True,
        after=("output_dir",),
        type=int,
        description="Samples per GPU per step.",
        schema=GE1,
    ),
    Key(
        ("cutoff_len",),
        "seq_len",
        whole("seq_len"),
        write=True,
        after=("micro_batch_size",),
        type=int,
        description="Maximum tokens per sample.",
        schema=GE1,
    ),
    Key(
        ("peft_config",),
        "peft_method",
        section=r.v1_section(r.v1_peft),
        write=w.v1_peft,
        type=dict,
        description="`{name: lora, r, lora_alpha, target_modules}`; absent = full fine-tuning.",
    ),
    Key(("peft_config", "r"), "lora_r", write=True, type=int, description="LoRA rank."),
    Key(
        ("quant_config",),
        "quant_bits",
        section=r.v1_section(r.v1_quant),
        write=w.v1_quant,
        type=dict,
        description="`{name: bnb|auto, quantization_bit}`: quantized base weights.",
    ),
    Key(
        ("dist_config",),
        "dist_strategy",
        section=r.v1_section(r.v1_dist),
        type=dict,
        description="`{name: fsdp2|deepspeed, config_file}`: sharding across GPUs.",
    ),
    Key(
        ("kernel_config",),
        "loss_impl",
        section=r.v1_section(r.v1_kernel),
        write=w.v1_loss,
        type=dict,
        description="`{name: auto|liger_kernel}`: Liger removes the logits tensor.",
    ),
    Key(
        ("gradient_accumulation_steps",),
        "grad_accum",
        whole("grad_accum"),
        type=int,
        description="Micro-batches per optimizer step.",
        schema=GE1,
    ),
    Key(("bf16",), "amp_dtype", hf.HANDLERS["bf16"], type=bool, description="bf16 mixed precision."),
    Key(("fp16",), "amp_dtype", hf.HANDLERS["fp16"], type=bool, description="fp16 mixed precision."),
    Key(("model_class",), type=str, description="The model class (llm, vlm, ...)."),
    Key(("train_dataset",), type=str, description="The training data."),
    NotHere("alloc_conf", ALLOC_NOTE),
    *not_here(
        "grad_accum",
        "eval_batch",
        "grad_checkpointing",
        "ckpt_reentrant",
        "optimizer",
        "optimizer_impl",
        "attn_impl",
        "lora_alpha",
        "lora_dropout",
        "lora_targets",
        "amp_dtype",
        "weight_dtype",
        "quant_compute_dtype",
        "fsdp_state_dict_type",
        "precompute_ref",
        "vllm_memory_share",
        "generation",
        "num_generations",
        "completion_len",
        "ref_model_id",
    ),
)
