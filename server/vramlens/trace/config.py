"""ResolvedPlan → what the synthetic model and its step look like. Pure Python (no torch).

One place decides how each plan setting is reproduced by the traced (and probed) step, and says so:
`assumptions` lists the choices a reader should know about, `not_traced` lists plan features the step
does not reproduce (the report is then marked `exact: false`).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimate.components.sharding import fsdp_version
from vramlens.estimate.shapes import QK_NORM_FAMILIES
from vramlens.knowledge.models import LEARNED_POSITIONS, norms_per_layer
from vramlens.knowledge.schema import ModelArch
from vramlens.resolved import ResolvedPlan

# Families whose blocks normalise after attention and MLP only (OLMo-2).
POST_NORM_ONLY_FAMILIES = {"olmo2", "olmo3"}
# Gemma scales the token embeddings by sqrt(hidden) and applies RMSNorm weights as (1 + w) in fp32.
GEMMA_FAMILIES = {"gemma", "gemma2", "gemma3", "gemma3_text"}
# Final-logit soft-capping in the public configs (Gemma-2: final_logit_softcapping = 30.0).
LOGIT_SOFTCAP = {"gemma2": 30.0}
# Attention-logit soft-capping (Gemma-2: attn_logit_softcapping = 50.0). litgpt then leaves SDPA for its eager
# path (litgpt/model.py `CausalSelfAttention.scaled_dot_product_attention`).
ATTN_SOFTCAP = {"gemma2": 50.0}


@dataclass(frozen=True)
class StepConfig:
    """Everything the torch side needs to build the model and run one step."""

    arch: ModelArch
    # precision
    param_dtype: str  # dtype of non-quantized weights: "fp32" | "bf16" | "fp16"
    compute_dtype: str  # activations' dtype
    autocast: bool  # run the forward under torch.autocast(compute_dtype)
    upcast_non_quantized: bool  # QLoRA: embeddings, norms, lm_head in fp32 (prepare_model_for_kbit_training)
    # batch
    micro_batch: int
    seq_len: int
    grad_accum: int
    # activations
    checkpointing: bool
    attention: str  # "sdpa" | "eager"
    repeat_kv: bool  # materialise full-head K/V copies (HF repeat_kv)
    mask: str  # "none" | "bool" (SDPA with a mask) | "float" (eager additive mask)
    loss: str  # "standard" | "chunked" (torchtune) | "litgpt" | "fused"
    keep_logits: bool
    # PEFT and quantization
    peft: str  # "none" | "lora" | "dora" | "qlora" | "ia3" | "vera"
    lora_r: int
    lora_alpha: float
    lora_dropout: float
    lora_targets: tuple[str, ...]
    modules_to_save: tuple[str, ...]
    adapter_fp32: bool
    quant_bits: int | None
    quant_type: str
    quant_double: bool
    quant_storage: str
    quant_lm_head: bool  # the LM head is a 4/8-bit linear too (litgpt's Fabric BitsandbytesPrecision)
    quant_keeps_input: bool  # bitsandbytes < 0.43.2: every 4-bit matmul keeps its input for backward
    # optimizer
    optimizer_name: str
    optimizer_family: str
    optimizer_library: str
    optimizer_states: float
    optimizer_state_bytes: float | None
    optimizer_paged: bool
    optimizer_impl: str
    master_weights: bool
    set_to_none: bool
    # notes
    assumptions: tuple[str, ...] = ()
    feedforward_targets: tuple[str, ...] = ()  # IA3: targets whose input is scaled
    # a PEFT method beyond LoRA/DoRA/IA3/VeRA (knowledge.peft_methods.OTHER_METHODS) and its sizes: the real-library
    # backend builds peft's own adapters (trace.hf `apply_peft`), the synthetic model LoRA's
    adapter_method: str = ""
    adapter_shape: tuple[tuple[str, int], ...] = ()
    not_traced: tuple[str, ...] = ()
    # architecture details derived from the family
    qk_norm: bool = False
    four_norms: bool = False
    parallel_block: bool = False  # phi/falcon: attention and MLP read the same normalised input
    post_norm_only: bool = False
    gemma: bool = False
    logit_softcap: float | None = None
    learned_positions: bool = False
    token_types: int = 0
    litgpt: bool = False  # litgpt's attention: fused qkv linear, RoPE through torch.cat, no mask
    attn_softcap: float | None = None  # litgpt's eager soft-capped attention (Gemma-2)
    attn_impl: str = "sdpa"  # the plan's attention implementation (the real backend runs it by name)
    padded: bool = False  # a padding mask reaches attention (padded batches, no packing)
    embeddings_16bit: bool = False  # after that upcast the embeddings and LM head go back to 16-bit (TRL < 0.26)
    fabric_fp32_outputs: bool = False  # Lightning Fabric casts the model's outputs to fp32 (litgpt's loop)
    quant_from_fp16: bool = False  # 4-bit weights quantized from an fp16 copy (Lightning Fabric): dequantized to
    # fp16, then cast to the compute dtype
    images: int = 0  # images per sequence through a VLM's vision tower (real backend: Gemma-3)
    framework: str = ""  # the plan's framework (torchtune configs run on torchtune's own model)
    rope_caches: int = 1  # torchtune: RoPE modules (one per layer in most of its LoRA builders)
    # FSDP across ranks (the sharded backend traces rank 0: trace.sharded)
    world_size: int = 1
    fsdp_version: int = 0  # 0: not FSDP; 1: FullyShardedDataParallel; 2: fully_shard
    reshard_after_forward: bool = True  # FULL_SHARD; False: SHARD_GRAD_OP
    fsdp_mixed_precision: bool = False  # units gathered in the compute dtype, gradients reduced in fp32
    tensor_parallel: int = 1  # tensor-parallel ranks under FSDP2 (a dp × tp mesh: trace.sharded)
    sequence_parallel: bool = False  # with tensor_parallel: norms and residual split along the sequence
    loss_parallel: bool = False  # with tensor_parallel: logits and loss sharded over the vocabulary
    # DeepSpeed ZeRO's sizes in elements (trace.zero; None: as the HF Trainer fills "auto", DeepSpeed's defaults)
    zero_reduce_bucket: int | None = None
    zero3_prefetch_bucket: int | None = None
    zero3_persistence_threshold: int | None = None
    zero3_max_live_params: int | None = None
    zero3_max_reuse_distance: int | None = None
    zero_overlap_comm: bool | None = None  # None: DeepSpeed's default (on for ZeRO-3 only)

    @property
    def full_finetune(self) -> bool:
        return self.peft == "none"

    @property
    def holds_logits(self) -> bool:
        """The loop still references the logits during backward: `keep_logits`, or litgpt's loop, whose
        `logits` list stays bound while `fabric.backward(loss)` runs (litgpt/finetune/lora.py `fit`)."""
        return self.keep_logits or self.loss == "litgpt"

    def targets(self, name: str) -> bool:
        """Whether the block linear `name` (canonical) carries a LoRA adapter."""
        if self.peft == "none":
            return False
        if "all-linear" in self.lora_targets:
            return name not in ("lm_head", "embed")
        return name in self.lora_targets


STAND_IN_OBJECTIVES = ("sft", "pretrain")  # what the traced step computes: next-token cross-entropy


def objective_not_traced(rp: ResolvedPlan) -> str | None:
    """What the traced step (one supervised step) leaves out of the plan's objective, in words; None when the
    objective is the one traced. benchmarks/dpo_trace_vs_estimate.py traces DPO's own step."""
    if rp.objective in STAND_IN_OBJECTIVES:
        return None
    from vramlens.report import OBJECTIVE_NAMES

    parts = []
    if rp.sequences_per_example == 2:
        parts.append("chosen/rejected pair")
    if rp.reference == "copy":
        parts.append("reference model")
    elif rp.reference == "adapters-off":
        parts.append("reference forward (the PEFT base, adapters disabled)")
    if rp.generation != "none":
        parts.append("generation")
    if rp.reward_model:
        parts.append("reward model")
    if rp.value_model:
        parts.append("value model")
    if rp.teacher is not None:
        parts.append("teacher model")
    parts = parts or ["loss"]
    what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    name = OBJECTIVE_NAMES.get(rp.objective, rp.objective)
    return f"SFT step only — the {name} objective's {what} {'was' if len(parts) == 1 else 'were'} not traced"


def step_config(rp: ResolvedPlan) -> StepConfig:
    arch = rp.arch
    assumptions: list[str] = []
    not_traced: list[str] = []

    param_dtype = "fp32" if rp.amp else rp.weight_dtype
    compute = rp.compute_dtype
    quantized = rp.quant_bits in (4, 8)
    upcast = bool(quantized and rp.kbit_upcast)
    autocast = rp.amp
    if upcast and compute != "fp32" and not autocast:
        autocast = True
        assumptions.append(
            "quantized model with fp32 embeddings/norms (prepare_model_for_kbit_training): "
            f"forward traced under {compute} autocast, as the Trainer runs it"
        )
    if rp.master_weights:
        assumptions.append(
            "fp32 master weights: the optimizer keeps an fp32 copy of each parameter, fp32 states "
            "and fp32 gradient copies during the step (Megatron/DeepSpeed-style)"
        )

    litgpt = rp.framework == "litgpt" and arch.block == "decoder"
    if litgpt:
        # litgpt/model.py: F.scaled_dot_product_attention(..., attn_mask=None, is_causal=True) in training, K/V of
        # grouped queries expanded with repeat_interleave; an attention soft-cap takes its eager path instead
        attention, repeat, mask = "sdpa", True, "none"
        assumptions.append(
            "litgpt's attention traced as litgpt computes it: one fused qkv linear (one LoRA branch "
            "and one dropout for the q/k/v it adapts, LoRAQKVLinear), q/k/v as views of its output, "
            "RoPE with an fp32 cache and torch.cat, K/V repeated with repeat_interleave, SDPA with "
            "is_causal and no mask"
            + (" (eager soft-capped scores for this family)" if arch.family in ATTN_SOFTCAP else "")
        )
        assumptions.append(
            "litgpt's MLP, norms and LoRALinear traced in the Hugging Face layout: they keep the same "
            "tensors (RMSNorm as litgpt ≥ 2024 computes it, in fp32; RoPE on the whole head)"
        )
        if arch.is_moe:
            assumptions.append("litgpt's MoE block traced as the Hugging Face sparse block")
    elif rp.attn_impl == "eager":
        attention, repeat, mask = "eager", rp.repeat_kv, ("float" if rp.attn_mask and not rp.packing else "none")
    else:
        attention = "sdpa"
        repeat = rp.repeat_kv and rp.attn_impl == "sdpa"
        mask = "bool" if (repeat and rp.attn_mask and not rp.packing) else "none"
        if rp.attn_impl not in ("sdpa",):
            assumptions.append(
                f"attention `{rp.attn_impl}` traced as SDPA flash attention with native GQA "
                "(same saved tensors: output and fp32 logsumexp)"
            )
    if arch.block == "encoder":
        mask = "none"  # no padding: bidirectional attention without a mask

    loss = rp.loss_impl
    if rp.loss_impl == "chunked" and litgpt:
        loss = "litgpt"
        assumptions.append(
            "litgpt's chunked head and loss: the LM head on 128-token chunks, cast to fp32 by Lightning "
            "Fabric's output conversion (a list held through backward), cross-entropy per chunk in "
            "fp32"
        )
    elif rp.loss_impl == "chunked":
        assumptions.append(
            "chunked cross-entropy traced as torchtune's CEWithChunkedOutputLoss (8 chunks, fp32 upcast per chunk)"
        )
    elif rp.loss_impl == "fused":
        assumptions.append(
            "fused linear cross-entropy traced with a stand-in that allocates what Liger's "
            "kernel allocates (gradients computed in the forward, logits one chunk at a time)"
        )

    if rp.quant_bits == 4 and arch.family == "gemma3n_text":
        # trace/hf.py `KBIT_UNQUANTIZABLE`: the model code clamps these weights, which 4-bit storage cannot serve
        assumptions.append(
            "Gemma-3n's AltUp correction_coefs and prediction_coefs left unquantized "
            "(llm_int8_skip_modules): its code clamps their weights in training, which a 4-bit weight cannot serve"
        )
    if arch.is_moe:
        assumptions.append("MoE routing assumed perfectly balanced (tokens × top-k spread evenly over experts)")
    if arch.kv_lora_rank:
        assumptions.append("multi-head latent attention traced as GQA with the same head counts")
    if arch.block == "encoder-decoder":
        assumptions.append(
            "decoder (target) length = encoder (input) length; the synthetic model leaves out T5's "
            "relative position bias and dropout (transformers' T5 keeps both)"
        )
    if arch.norm == "layernorm" or arch.mlp in ("gelu", "relu"):
        assumptions.append("dropout off; GELU as the tanh approximation kernel")
    if quantized and rp.quant_bits == 8:
        assumptions.append("LLM.int8 without outlier decomposition (threshold 0): outliers are data-dependent")
    quant_head = bool(quantized and rp.quant_lm_head and not arch.tied_embeddings and arch.block != "encoder")
    if quant_head:
        assumptions.append(f"the LM head is a {rp.quant_bits}-bit linear like the blocks' linears")
    from_fp16 = bool(rp.quant_bits == 4 and rp.quant_dequant_fp16)
    if from_fp16 and compute != "fp16":
        assumptions.append(
            "4-bit weights quantized from an fp16 copy (Lightning Fabric's BitsandbytesPrecision): "
            f"each dequantization makes an fp16 weight, then a {compute} copy"
        )
    keeps_input = bool(rp.quant_bits == 4 and rp.quant_keeps_input)
    if keeps_input:
        assumptions.append(
            "bitsandbytes < 0.43.2 traced: each 4-bit matmul dequantizes its weight with "
            "F.linear and keeps its input for backward (MatMul4Bit before bitsandbytes PR #1270)"
        )
    if rp.peft in ("ia3", "vera"):
        not_traced.append(
            f"{rp.peft.upper() if rp.peft == 'ia3' else 'VeRA'} adapters in the synthetic model (the "
            "real-library backend runs peft's own)"
        )
    if rp.adapter_method:
        from vramlens.knowledge.peft_methods import OTHER_METHODS, PEFT_CONFIGS

        name = OTHER_METHODS[rp.adapter_method][0]
        not_traced.append(
            f"{name} adapters in the synthetic model (LoRA's there"
            + ("; the real-library backend runs peft's own)" if rp.adapter_method in PEFT_CONFIGS else ")")
        )
    if rp.peft != "none" and "embed" in rp.lora_targets:
        not_traced.append("LoRA on the embedding layer")
    if rp.experts_kbit:
        # the trace builds fused experts as transformers loads them; axolotl's on-load quantization is its own patch
        not_traced.append(f"MoE experts quantized on load to {rp.quant_bits} bits (traced unquantized)")

    if rp.grad_accum > 2:
        assumptions.append(
            f"gradient accumulation {rp.grad_accum}: 2 micro-batches run (every later one repeats "
            "the second: gradients already exist)"
        )
    if rp.world_size > 1:
        not_traced.append(replica_note(rp.strategy, rp.world_size))
    if rp.tensor_parallel > 1 or rp.context_parallel > 1:
        not_traced.append(PARALLELISM_NOTE)
    if (gap := objective_not_traced(rp)) is not None:
        not_traced.append(gap)
    if rp.offload_optimizer or rp.offload_params:
        not_traced.append("CPU offload of optimizer states/parameters")
    if rp.activation_offload:
        not_traced.append("activation offloading")
    if rp.compile:
        not_traced.append("torch.compile (eager mode traced)")
    if rp.optimizer_in_bwd or rp.optimizer.layerwise:
        not_traced.append("optimizer step inside backward")
    if rp.optimizer.low_rank or rp.optimizer.family in ("galore", "apollo", "lomo", "other"):
        not_traced.append(f"optimizer `{rp.optimizer.name}` (its states are allocated, its step is not run)")

    return StepConfig(
        arch=arch,
        param_dtype=param_dtype,
        compute_dtype=compute,
        autocast=autocast,
        upcast_non_quantized=upcast,
        micro_batch=rp.micro_batch,
        seq_len=rp.seq_len,
        grad_accum=min(max(1, rp.grad_accum), 2),
        checkpointing=rp.grad_checkpointing,
        attention=attention,
        repeat_kv=repeat,
        mask=mask,
        loss=loss,
        keep_logits=rp.keep_logits,
        peft="qlora" if (rp.peft == "lora" and rp.quant_bits == 4) else rp.peft,
        lora_r=rp.lora_r,
        lora_alpha=rp.lora_alpha or float(rp.lora_r or 1),
        lora_dropout=rp.lora_dropout,
        lora_targets=rp.lora_targets,
        modules_to_save=rp.modules_to_save,
        adapter_fp32=rp.adapter_fp32,
        feedforward_targets=rp.feedforward_targets,
        adapter_method=rp.adapter_method,
        adapter_shape=tuple(rp.adapter_shape),
        quant_bits=rp.quant_bits if quantized else None,
        quant_type=rp.quant_type,
        quant_double=rp.quant_double,
        quant_storage=rp.quant_storage,
        quant_lm_head=quant_head,
        quant_keeps_input=keeps_input,
        quant_from_fp16=from_fp16,
        optimizer_name=rp.optimizer.name,
        optimizer_family=rp.optimizer.family,
        optimizer_library=rp.optimizer.library,
        optimizer_states=rp.optimizer.states,
        optimizer_state_bytes=rp.optimizer.state_bytes,
        optimizer_paged=rp.optimizer.paged,
        optimizer_impl=rp.optimizer_impl,
        master_weights=rp.master_weights,
        set_to_none=rp.set_to_none,
        assumptions=tuple(assumptions),
        not_traced=tuple(not_traced),
        qk_norm=arch.family in QK_NORM_FAMILIES,
        four_norms=norms_per_layer(arch) == 4,
        parallel_block=norms_per_layer(arch) == 1,
        post_norm_only=arch.family in POST_NORM_ONLY_FAMILIES,
        gemma=arch.family in GEMMA_FAMILIES,
        logit_softcap=LOGIT_SOFTCAP.get(arch.family),
        learned_positions=arch.family in LEARNED_POSITIONS and bool(arch.max_position),
        token_types=LEARNED_POSITIONS.get(arch.family, 0),
        litgpt=litgpt,
        attn_softcap=ATTN_SOFTCAP.get(arch.family) if litgpt else None,
        fabric_fp32_outputs=loss == "litgpt" and rp.logits_fp32,
        attn_impl=rp.attn_impl,
        padded=bool(rp.attn_mask and not rp.packing and arch.block != "encoder"),
        embeddings_16bit=upcast and rp.kbit_embeddings_16bit,
        images=rp.images_per_sequence if arch.vision_params else 0,
        framework=rp.framework or "",
        rope_caches=rp.rope_caches,
        world_size=rp.world_size,
        fsdp_version=fsdp_version(rp),  # the FSDP the estimate takes the plan to run
        reshard_after_forward=rp.zero_stage >= 3,
        fsdp_mixed_precision=rp.fsdp_mixed_precision,
        # context parallelism is not traced: with it the ranks run FSDP over one replica as before
        tensor_parallel=max(rp.tensor_parallel, 1) if rp.context_parallel <= 1 else 1,
        sequence_parallel=rp.sequence_parallel,
        loss_parallel=rp.loss_parallel,
        zero_reduce_bucket=rp.zero_reduce_bucket,
        zero3_prefetch_bucket=rp.zero3_prefetch_bucket,
        zero3_persistence_threshold=rp.zero3_persistence_threshold,
        zero3_max_live_params=rp.zero3_max_live_params,
        zero3_max_reuse_distance=rp.zero3_max_reuse_distance,
        zero_overlap_comm=rp.zero_overlap_comm,
    )


PARALLELISM_NOTE = "tensor/context parallelism"  # the sharded backend traces FSDP2 + tensor parallelism


def replica_note(strategy: str, world_size: int) -> str:
    """What a single-replica trace leaves out of a plan across ranks (the sharded backend traces it for FSDP)."""
    return f"{strategy} across {world_size} ranks (one unsharded replica traced)"
