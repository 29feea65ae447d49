"""The resolved plan: every value the estimator needs, concrete, with no text and no provenance.

`resolve.resolve()` builds it from a `TrainingPlan` (values read from a file) by applying the
framework's defaults, looking up the model architecture, the GPU and the optimizer. The estimator
and the trace worker take only this.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from vramlens.knowledge.schema import GpuSpec, ModelArch, OptimizerSpec
from vramlens.plan import Unmodelled
from vramlens.settings import DEFAULT_HEADROOM

# Canonical LoRA target names (HF Llama spelling without "_proj"); formats map their own names here.
LINEAR_NAMES = ("q", "k", "v", "o", "gate", "up", "down", "fc1", "fc2", "lm_head", "embed")


class Calibration(BaseModel):
    """The local measurement behind a plan's `correction` (vramlens.calibration), for every view to name."""

    model_config = ConfigDict(frozen=True)

    factor: float  # measured ÷ estimated allocated bytes, bounded
    source: str  # "trace" (an exact one) or "probe"
    recorded: str | None = None  # when it was measured (ISO 8601)
    key: str | None = None  # the record's key in `vramlens calibration list`


_PLAIN_ON = ("true", "1", "yes", "on")


def unmodelled_text(u: Unmodelled) -> str:
    """How every view names a setting the estimate does not model: "not modelled: --use_galore (GaLore) — estimated
    as full AdamW"; the value is shown unless it merely switches the setting on (`optim=galore_adamw`)."""
    value = u.value.strip() if u.value is not None else ""
    shown = u.key if not value or value.lower() in _PLAIN_ON else f"{u.key}={value}"
    return f"not modelled: {shown} ({u.what}) — {u.consequence}"


class ResolvedPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    arch: ModelArch
    framework: str = "transformers"  # whose code runs the step: "transformers", "trl", "axolotl",
    # "llamafactory", "torchtune", "deepspeed", "custom"
    # the checkpoint's own modeling code (config.json `auto_map`, `arch.remote_code`): "built" when the run trusts it
    # and transformers builds it, "refused" when transformers ships no class for the model and the run does not trust
    # it (loading stops), "" otherwise
    remote_code: Literal["", "built", "refused"] = ""
    # precision
    weight_dtype: Literal["fp32", "bf16", "fp16"] = "bf16"  # dtype of non-quantized weights on the GPU
    compute_dtype: Literal["fp32", "bf16", "fp16"] = "bf16"  # activations' dtype
    amp: bool = False  # autocast over fp32 weights (fp32 master = the weights)
    fsdp_mixed_precision: bool = False  # with amp: FSDP's MixedPrecision gathers each unit's parameters in
    # the compute dtype, so autocast finds no fp32 weight to cast and
    # caches no copies (verl's FSDP workers)
    # batch
    micro_batch: int = 1
    grad_accum: int = 1
    seq_len: int = 2048
    packing: bool = False
    eval_batch: int = 1
    evaluation: bool = False  # the trainer evaluates during training (resolve/evaluation.py): one no-grad
    # forward at eval_batch beside the training state
    # the gradients are still allocated then (FrameworkHooks.evaluates_with_gradients)
    eval_with_gradients: bool = False
    eval_loss_impl: Literal["standard", "chunked", "fused"] | None = None  # the loss the evaluation forward
    # runs (None: loss_impl; Liger's fused loss computes full logits there)
    # activations
    grad_checkpointing: bool = False
    checkpoint_every: int = 1  # with grad_checkpointing: every n-th block is checkpointed, the others
    # keep everything (torchtitan selective_ac_option n)
    # Megatron's selective recompute (`selective_recompute` "core_attention"): the modules it checkpoints, of those the
    # estimate models (megatron/core/transformer/transformer_config.py `recompute_modules`, default core_attn)
    recompute_modules: tuple[str, ...] = ("core_attn",)
    selective_recompute: Literal["none", "op", "core_attention"] = "none"  # without grad_checkpointing: "op", each
    # block keeps only the outputs of the ops in a save list (torchtitan's
    # op-level selective AC); "core_attention", Megatron's selective
    # recompute of the attention scores, softmax and dropout
    loss_parallel: bool = False  # with tensor_parallel: logits and loss sharded over the vocabulary
    activation_offload: bool = False
    attn_impl: Literal[
        "eager",
        "sdpa",
        "flash_attention_2",
        "flash_attention_3",
        "flex_attention",
        "xformers",
        "flash_attention_triton",  # the Triton FlashAttention kernel (flash-attn flash_attn_triton.py; llm-foundry
        # `attn_impl: triton`)
        "other",
    ] = "sdpa"
    repeat_kv: bool = True  # SDPA/eager with a mask materialise full-head K/V for GQA
    attn_mask: bool = True  # a 4-D padding mask reaches attention (padded batches, no packing)
    compile: bool = False
    compile_loss: bool = True  # with compile: the loss is compiled too (torchtitan's
    # compile.components without "loss" leaves it eager)
    rope_caches: int = 1  # torchtune: RoPE modules, each with an fp32 cos/sin cache of every
    # position (1: one shared by every layer; components.model_buffers)
    loss_impl: Literal["standard", "chunked", "fused", "xentropy"] = "standard"  # xentropy: a softmax
    # cross-entropy CUDA kernel over the compute-dtype logits (flash-attn's CrossEntropyLoss; llm-foundry's
    # `loss_fn: fused_crossentropy`)
    liger_loss: bool = False  # the fused loss is Liger's fused linear cross-entropy (its gradients computed in forward)
    # the fused loss is verl's log-prob/entropy head: "torch" (FusedLinearForPPO, by chunks of tokens) or "triton"
    # (linear_cross_entropy, by splits of the vocabulary; the Megatron workers' only path); "" when it is not
    verl_fused_head: str = ""
    loss_16bit: bool = False  # the cross-entropy runs on the compute-dtype logits, no fp32 upcast (ms-swift's
    # sequence-parallel loss); with loss_chunk_tokens, chunk by chunk, its gradient written over the saved logits
    loss_chunk_tokens: int = 0
    fused_kernels: tuple[str, ...] = ()  # Triton kernels swapped in for speed (Liger, unsloth, fms-acceleration
    # foak): "rms_norm", "rope", "swiglu", "cross_entropy"
    liger_kernels: bool = False  # the fused_kernels are Liger's (their saved tensors: estimate/components/liger.py)
    # torchao fake-quantized linears (knowledge/qat.py SAVED): the layout, and its weight group size (0: none)
    qat: str = ""
    qat_group: int = 0
    float8_linears: bool = False  # torchao Float8Linear: the blocks' linears run at the fp8 rate
    float8_all_gather: bool = False  # with float8_linears under FSDP2: their weights all-gathered in fp8 (torchao
    # `enable_fsdp_float8_all_gather`)
    keep_logits: bool = False  # the loop keeps `out.logits` referenced through backward
    logits_fp32: bool = False  # the loop receives the logits in fp32 (Lightning Fabric casts module
    # outputs to the default dtype) and computes the loss on them
    loss_shifted_copy: bool = False  # transformers < 4.49: the loss makes a shifted fp32 copy of the logits
    versions: tuple[tuple[str, str, str], ...] = ()  # (package, version, where it came from) the step assumes
    # optimizer
    optimizer: OptimizerSpec
    optimizer_impl: Literal["foreach", "fused", "forloop"] = "fused"
    optimizer_in_bwd: bool = False
    set_to_none: bool = True
    master_weights: bool = False  # DeepSpeed/Megatron-style fp32 master copy in the optimizer
    # PEFT
    peft: Literal["none", "lora", "qlora", "dora", "ia3", "vera"] = "none"
    lora_r: int = 0  # LoRA/DoRA rank; VeRA's rank of the shared projections
    lora_alpha: float = 0.0
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ()  # canonical names from LINEAR_NAMES (the adapted linears of any method)
    feedforward_targets: tuple[str, ...] = ()  # IA3: the targets whose input is scaled (peft `feedforward_modules`);
    # the other IA3 targets scale their output
    # a PEFT method beyond these (knowledge/peft_methods.OTHER_METHODS: AdaLoRA, LoHa, LoKr, OFT, BOFT, FourierFT,
    # Bone, adapters, ReFT): `peft` is then "lora" (a frozen base under trained adapters on `lora_targets`) and
    # the method's own parameters and kept tensors are counted from its hyperparameters
    adapter_method: str = ""
    adapter_shape: tuple[tuple[str, int], ...] = ()
    modules_to_save: tuple[str, ...] = ()  # canonical names ("lm_head", "embed")
    adapter_fp32: bool = True  # PEFT autocast_adapter_dtype=True keeps adapters in fp32
    kbit_upcast: bool = True  # prepare_model_for_kbit_training upcasts non-quantized params to fp32
    # a k-bit MoE model's fused 3-D expert weights quantized on load too (axolotl `quantize_moe_experts`)
    experts_kbit: bool = False
    # fused expert parameters LoRA adapts as named (peft `target_parameters`): "gate_up", "down", "router"
    expert_targets: tuple[str, ...] = ()
    kbit_embeddings_16bit: bool = False  # after that upcast, TRL's SFTTrainer (bf16, before 1.0) casts the embeddings
    # and LM head back to bf16 (trl/trainer/utils.py `peft_module_casting_to_bf16`);
    # the norms stay fp32, so the residual stream stays fp32
    # partial full fine-tuning (peft "none" with only some weights trainable: freeze tuning, LLaMA-Pro, LISA)
    trained_layers: int | None = None  # decoder layers whose weights train; None = every layer
    trained_modules: tuple[str, ...] = ()  # inside them: "attn" and/or "mlp"; () = the whole layer
    trained_extra: tuple[str, ...] = ()  # outside the layers, with trained_layers set: "embed", "lm_head"
    trained_where: str = "last"  # which layers train: "last", "first", "spread" (LLaMA-Pro), "rotating"
    trainable_fp32: bool = False  # trainable weights kept in fp32 while frozen ones stay 16-bit
    # GaLore / APOLLO: optimizer states of the targeted matrices are rank-r projections
    low_rank: int = 0  # projection rank (0: the optimizer keeps full states)
    low_rank_targets: tuple[str, ...] = ()  # canonical linear names, or ("all-linear",)
    low_rank_proj_quant: bool = False  # Q-GaLore: projections quantized (a uint8 per element + group scales)
    low_rank_int8_weights: bool = False  # Q-GaLore: the targeted linears' weights held as INT8 + group scales
    # quantization of the base linears
    quant_bits: int | None = None  # 4 or 8
    quant_type: str = "nf4"
    quant_double: bool = False
    quant_storage: Literal["uint8", "bf16", "fp16", "fp32"] = "uint8"
    quant_lm_head: bool = False  # the LM head is quantized too (litgpt's Fabric BitsandbytesPrecision
    # replaces every nn.Linear); otherwise it stays in 16/32-bit
    quant_keeps_input: bool = False  # bitsandbytes < 0.43.2: every 4-bit linear keeps its input for
    # backward (MatMul4Bit `ctx.tensors = (A, B)`, removed in PR #1270)
    quant_dequant_fp16: bool = False  # 4-bit weights quantized from an fp16 copy (Lightning Fabric): each
    # call dequantizes to fp16, then casts to the compute dtype
    fused_lora: bool = False  # unsloth's LoRA autograd kernels (fast_lora.py): LoRA_QKV and LoRA_MLP keep
    # their 16-bit input once, LoRA_MLP also the gate and up outputs (h is
    # recomputed in backward), no fp32 adapter-input copies; dropout 0 only
    fused_qkv: bool = False  # one q|k|v linear (litgpt): one LoRA adapter and dropout for all three,
    # zero-padding that keeps the adapter output when only some adapt,
    # and with MHA the value is a view that keeps the whole q|k|v output
    # distribution (per-rank estimate)
    strategy: Literal["none", "ddp", "deepspeed", "fsdp", "megatron"] = "none"
    zero_stage: int = 0
    world_size: int = 1  # data-parallel ranks that shard (ZeRO/FSDP; FSDP with the context-
    # parallel ones) or replicate (DDP)
    shard_group: int = 0  # HSDP: the ranks FSDP shards over, world_size ÷ replicas (0: all world_size ranks)
    offload_optimizer: bool = False
    offload_params: bool = False
    # offloaded to the CPU only between updates (plan.offload_params_idle / offload_optimizer_idle): the update phase
    # holds them on the GPU, the rollout phases do not
    offload_params_idle: bool = False
    offload_optimizer_idle: bool = False
    offload_idle_scope: str = "update"  # "rollout": the offloads last only while the engine generates
    critic_micro_batch: int = 0  # > 0: the value model trains in a step of its own, at this micro-batch
    critic_grad_checkpointing: bool | None = None  # the critic's own checkpointing in that step (None: the actor's)
    # the teacher's own DeepSpeed setup (ms-swift `teacher_deepspeed`): "whole" (ZeRO-0/1/2 keep it unsharded),
    # "zero3" (sharded like ZeRO-3 weights), "zero3_offload" (on the CPU); None: prepared as the student is
    teacher_sharding: str | None = None
    # models on GPUs of their own, not the policy's ("reference", "reward_model", "value_model"), and the models that
    # share the critic's GPUs beside it ("reward_model"): the critic's step is estimated on those GPUs
    models_apart: tuple[str, ...] = ()
    critic_group: tuple[str, ...] = ()
    # DeepSpeed ZeRO's sizes in elements (components.buffers); None: as the HF Trainer fills "auto" (reduce bucket h²,
    # prefetch bucket 0.9·h², persistence threshold 10·h) and DeepSpeed's defaults for the live limit and the reuse
    # distance (1e9)
    zero_reduce_bucket: int | None = None
    zero3_prefetch_bucket: int | None = None
    zero3_persistence_threshold: int | None = None
    zero3_max_live_params: int | None = None
    zero3_max_reuse_distance: int | None = None
    # `overlap_comm`: ZeRO-1/2 reduce through two buckets instead of one; None: DeepSpeed's default, on for ZeRO-3 only
    # (deepspeed 0.19.8 runtime/zero/config.py `overlap_comm_valid`)
    zero_overlap_comm: bool | None = None
    tensor_parallel: int = 1
    context_parallel: int = 1
    # Megatron-core layouts (components.megatron_step); pipeline_parallel also splits the weights of other engines
    pipeline_parallel: int = 1  # pipeline stages, each holding its share of the layers
    devices_per_process: int = 1  # GPUs one process spreads the model's layers over (accelerate's device_map,
    # naive model parallelism: one device at a time); gpu_count counts them all, world_size the processes
    virtual_pipeline: int = 1  # model chunks per stage (interleaved 1F1B when > 1)
    # torch.distributed.pipelining's schedule (components.pipeline.TORCH_SCHEDULES); "1F1B" with virtual_pipeline > 1
    # is Megatron-core's interleaved schedule
    pipeline_schedule: str = "1F1B"
    expert_parallel: int = 1  # ranks the routed experts are divided over
    expert_tensor_parallel: int | None = None  # tensor parallelism inside each expert (None: tensor_parallel)
    # how expert parallelism moves each MoE layer's tokens (components.dispatch): "all_gather" (NeMo AutoModel's torch
    # dispatcher with grouped GEMMs), "all_gather_loop" (the same with its per-expert loop), "deepep"; "" when not
    # counted
    ep_dispatch: str = ""
    sequence_parallel: bool = False  # norm/dropout activations split over the tensor-parallel ranks
    distributed_optimizer: bool = False  # fp32 main weights and optimizer states sharded over data parallel
    cross_entropy_fusion: bool = False  # Megatron's fused cross-entropy (components.megatron_head_per_token)
    # the dtype of Megatron-core's gradient buffers (`DistributedDataParallelConfig.grad_reduce_in_fp32`: fp32, else
    # the parameters' dtype; components.megatron_state_bytes)
    grad_buffer_dtype: str = "fp32"
    optimizer_offload_fraction: float = 1.0  # with offload_optimizer under Megatron: the share on the CPU
    # Megatron's precision-aware optimizer: Transformer Engine's FusedAdam holds the master weights and Adam's states
    # in these dtypes (components.megatron `megatron_state_bytes`)
    precision_aware_optimizer: bool = False
    main_params_dtype: str = "fp32"
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    fp8_recipe: str = ""  # an FP8 Megatron run's recipe ("delayed", "tensorwise", "blockwise", "mxfp8"); "" for none
    first_stage_layers: int | None = None  # uneven pipeline stages (None: an even split)
    last_stage_layers: int | None = None
    # torch's pipelining: the decoder layers of every pipeline stage in model order, as the framework cuts the model
    # (knowledge.pipelining.stage_split; empty: an even split, stage_layer_counts)
    stage_split: tuple[int, ...] = ()
    recompute_method: Literal["uniform", "block"] = "uniform"  # Megatron full recompute (grad_checkpointing)
    recompute_layers: int = 1  # uniform: layers per checkpointed group; block: layers recomputed
    fsdp_full_state_dict: bool = False
    fsdp_keeps_block_grads: bool = False  # FSDP1 keeps every block's checkpointed input and its gradient to the end
    # of backward (frozen layer units under a reentrant checkpoint around
    # the unit: knowledge/versions.py `fsdp1_keeps_block_grads`)
    fsdp_version: int = 0  # the FSDP the config names: 1 (FlatParameter units), 2 (`fully_shard`), 0 unstated
    # objective: preference losses, online RL, distillation
    objective: Literal[
        "sft", "dpo", "kto", "orpo", "simpo", "cpo", "rm", "ppo", "grpo", "rloo", "online-dpo", "gkd", "kd", "pretrain"
    ] = "sft"
    sequences_per_example: int = 1  # sequences through the policy per micro-batch example (2: chosen +
    # rejected in one concatenated forward)
    reference: Literal["none", "copy", "adapters-off"] = "none"  # a frozen second copy, or the PEFT base model
    reference_dtype: Literal["fp32", "bf16", "fp16"] | None = None  # a copy's weight dtype (None: the policy's)
    reference_arch: ModelArch | None = None  # a named reference's own shapes (None: the policy's)
    reference_offloaded: bool = False  # the copy's weights live on the CPU (FSDP CPU offload), gathered to
    # the GPU one unit at a time for its forward
    vision_frozen: bool = True  # a VLM's vision tower gets no gradients (adapters only, or the
    # framework freezes it by default)
    vision_full: bool = False  # under LoRA, the tower and its projector train in full beside the adapters
    tower_adapters: bool = True  # LoRA's targets reach the vision tower's linears by name (a regular expression
    # over the language model's module paths leaves them out)
    images_per_sequence: int = 0  # images through a VLM's vision tower per sequence (0: text-only batches)
    scalar_head: bool = False  # reward/value model: a 1-wide score head instead of vocabulary logits
    logits_tokens: int | None = None  # tokens per sequence whose logits are computed (None: all);
    # online RL keeps only the completion's (TRL `logits_to_keep`)
    generation: Literal["none", "generate", "vllm-colocate", "vllm-server"] = "none"
    generations_per_example: int = 0  # sequences generated at once per micro-batch example on this rank
    # (TRL: steps_per_generation; elsewhere: samples per prompt)
    generation_batch: int = 0  # sequences generated at once on this rank where the framework sizes the rollout
    # apart from the update (torchtune's `forward_batch_size`); 0: micro_batch × generations_per_example
    generation_len: int = 0  # prompt + completion tokens held in the KV cache per sequence
    logprob_micro_batch: int | None = None  # sequences per no-grad log-prob forward (None: the micro-batch)
    vllm_memory_share: float = 0.0  # vLLM gpu_memory_utilization when colocated
    generation_sleeps: bool = False  # the colocated engine releases its share while the policy trains
    # (vLLM sleep mode, SGLang release_memory_occupation): the share is
    # held in the generation phase only
    reward_model: bool = False  # a frozen reward model is resident, with a one-wide score head
    reward_arch: ModelArch | None = None  # a named reward model's own shapes (None: the policy's backbone)
    value_model: bool = False  # PPO's trained value model (a policy-sized copy with a scalar head)
    value_arch: ModelArch | None = None  # a named critic's own shapes (None: the policy's backbone)
    # a Megatron critic's own layout, (TP, PP, CP, EP, expert TP), where it is not the policy's (None: the policy's)
    critic_layout: tuple[int, int, int, int, int] | None = None
    teacher: ModelArch | None = None  # the distillation teacher
    teacher_dtype: Literal["fp32", "bf16", "fp16"] | None = None  # its weight dtype (None: the policy's)
    # the distillation loss when it is a framework's own over the full logits (`FrameworkHooks.distill_loss`):
    # "" (the student's loss counted as cross-entropy, the teacher's logits beside it), or ms-swift's chunked JSD
    # as its code stands from ms-swift 3.12.0 ("swift-jsd-3.12") or 4.3.0 ("swift-jsd-4.3")
    distill_loss: str = ""
    distill_beta: float = 0.5  # its interpolation: 0 forward KL, 1 reverse KL, between them the JSD mixture
    distill_sft: bool = False  # the student's cross-entropy is added to it (ms-swift `sft_alpha` > 0)
    # hardware and allocator
    gpu: GpuSpec
    gpu_count: int = 1
    expandable_segments: bool = False
    headroom: float = DEFAULT_HEADROOM  # fraction of usable memory to keep free before calling a fit "tight"
    correction: float = 1.0  # measured ÷ estimated allocated bytes from local traces/probes
    # of the same architecture (vramlens.calibration); 1 = none
    calibration: Calibration | None = None  # the record `correction` came from
    # honesty: settings read that the estimate does not model, and every reason the figure is approximate (each
    # unmodelled setting among them); every view shows these, none derives them again
    unmodelled: tuple[Unmodelled, ...] = ()
    approximate: tuple[str, ...] = ()

    def with_changes(self, **changes) -> "ResolvedPlan":
        return self.model_copy(update=changes)

    def version_of(self, package: str) -> tuple[str, str] | None:
        """(version, where it came from) of `package` as the step assumes it; None when the plan names none."""
        return next(((v, src) for name, v, src in self.versions if name == package), None)
