"""The normalized training plan: every memory-relevant setting of a config, with where it came from.

A parser turns text into a `TrainingPlan`. Each field holds a `Sourced` value: the value itself plus
its provenance — the exact range of text it was read from, or the fact that it is a framework
default (and which framework's), or that it was derived from other values or given by the user's
settings. Fields that the file does not mention stay `None`; `resolve` fills them with defaults.

Spans are 0-based lines and columns (LSP style), end exclusive; columns count characters of the
line as Python sees them. The LSP layer converts to the client's position encoding.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")


class Origin(str, Enum):
    FILE = "file"  # read from the document (or a file it references)
    DEFAULT = "default"  # a framework default; `framework` says whose
    DERIVED = "derived"  # computed from other values (e.g. grad_accum from a global batch)
    SETTING = "setting"  # the user's editor/CLI settings (e.g. --gpu)
    ASSUMED = "assumed"  # vramlens had to assume it; always listed in the estimate's assumptions


# Lines and line breaks are decided in one place (`vramlens.text`); parsers import them from here too.
from vramlens.text import LINE_BREAK, iter_text_lines, text_lines  # noqa: E402,F401


class Span(BaseModel):
    """A range of text in one file (0-based, end exclusive)."""

    model_config = ConfigDict(frozen=True)

    file: str
    start_line: int
    start_col: int
    end_line: int
    end_col: int

    def contains(self, line: int, col: int) -> bool:
        if (line, col) < (self.start_line, self.start_col):
            return False
        return (line, col) <= (self.end_line, self.end_col)


class Sourced(BaseModel, Generic[T]):
    """One setting's value and its provenance."""

    model_config = ConfigDict(frozen=True)

    value: T
    origin: Origin = Origin.FILE
    key: str | None = None  # spelling in the source, e.g. "per_device_train_batch_size"
    span: Span | None = None  # range of the whole `key: value` (or `--flag value`) entry
    value_span: Span | None = None  # range of just the value text, for edits
    framework: str | None = None  # whose default/derivation, e.g. "transformers 4.57"
    note: str | None = None  # a short human explanation, e.g. "bf16: auto → bf16 on this GPU"
    # a count read from a token budget (verl `ppo_max_token_len_per_gpu`, OpenRLHF `--train.max_tokens_per_gpu`):
    # the sequences of `per_unit` tokens the `budget` holds; a fix writes the budget back as value × per_unit
    per_unit: int | None = None
    budget: int | None = None


def read(
    value: Any, key: str, span: Span | None = None, value_span: Span | None = None, note: str | None = None
) -> Sourced:
    return Sourced(value=value, origin=Origin.FILE, key=key, span=span, value_span=value_span, note=note)


def default(value: Any, framework: str, note: str | None = None) -> Sourced:
    return Sourced(value=value, origin=Origin.DEFAULT, framework=framework, note=note)


def derived(value: Any, note: str, framework: str | None = None, span: Span | None = None) -> Sourced:
    return Sourced(value=value, origin=Origin.DERIVED, note=note, framework=framework, span=span)


def assumed(value: Any, note: str) -> Sourced:
    return Sourced(value=value, origin=Origin.ASSUMED, note=note)


# Vocabularies of normalized values (what parsers must produce).
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "nf4", "fp4"]
AmpDtype = Literal["bf16", "fp16", "fp8", "none"]
AttnImpl = Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention", "xformers", "other"]
PeftMethod = Literal["none", "lora", "qlora", "dora", "ia3", "vera", "galore", "freeze", "other"]
DistStrategy = Literal["none", "ddp", "deepspeed", "fsdp", "megatron"]
LossImpl = Literal["standard", "chunked", "fused"]  # fused = linear+CE fused (Liger, CCE)
OptimizerImpl = Literal["foreach", "fused", "forloop"]
# What the step optimises: supervised fine-tuning, a preference loss, online RL or distillation.
Objective = Literal[
    "sft", "dpo", "kto", "orpo", "simpo", "cpo", "rm", "ppo", "grpo", "rloo", "online-dpo", "gkd", "kd", "pretrain"
]
OBJECTIVES: tuple[str, ...] = (
    "sft",
    "dpo",
    "kto",
    "orpo",
    "simpo",
    "cpo",
    "rm",
    "ppo",
    "grpo",
    "rloo",
    "online-dpo",
    "gkd",
    "kd",
    "pretrain",
)
TaskHead = Literal["causal-lm", "sequence-classification", "token-classification", "regression"]
GenerationMode = Literal["none", "generate", "vllm-colocate", "vllm-server"]


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class IssueKind(str, Enum):
    """What a parse issue is. Each kind is owned by exactly one rule (`Rule.owns`, checked when the rule
    set loads), which turns the issues of its kinds into findings: parsers say what they found, rules say
    how it is reported."""

    UNREADABLE = "unreadable"  # a syntax error, a document too large or too deep (VL016)
    NOT_TRAINING = "not-training"  # an inference, evaluation, merge or export file: no estimate (VL018)
    REFERENCE = "reference"  # a referenced file missing or unreadable (VL014)
    PRECISION_CONFLICT = "precision-conflict"  # fp16 and bf16 both on (VL006)
    UNKNOWN_VALUE = "unknown-value"  # a name the framework does not know, e.g. an optimizer (VL015)
    INVALID_VALUE = "invalid-value"  # a value of the wrong type or out of range (VL015)
    DUPLICATE_KEY = "duplicate-key"  # a key written twice in one mapping (VL019)
    CONFLICTING_SETTINGS = "conflicting-settings"  # settings the framework refuses together (VL020)
    NOT_READ = "not-read"  # a setting that neither vramlens nor the run reads (VL021)
    ASSUMED = "assumed"  # the file leaves a value open that the estimate depends on (VL022)


class ParseIssue(BaseModel):
    """Something the parser wants the user to know (a missing referenced file, an unknown value)."""

    message: str
    kind: IssueKind
    span: Span | None = None
    severity: Severity = Severity.WARNING
    suggestion: str | None = None  # "did you mean" replacement text, if any


class Reference(BaseModel):
    """Another file the config points at (a DeepSpeed JSON, an accelerate config, a base config)."""

    kind: str  # "deepspeed", "accelerate", "base", "torchtune-config", ...
    target: str  # the text as written
    resolved_path: str | None = None  # absolute path when found
    span: Span | None = None


class Unmodelled(BaseModel):
    """A setting the reader recognised that changes memory or speed but that the estimate does not model.
    Named in every view ("not modelled: --use_galore (GaLore) — estimated as full AdamW")."""

    model_config = ConfigDict(frozen=True)

    key: str  # as written, e.g. "use_galore", "--tuner_type"
    value: str | None = None  # the value as written (text), when it has one
    what: str  # what it is, e.g. "GaLore (gradient low-rank projection)"
    consequence: str  # how the estimate treats it, e.g. "estimated as full AdamW"
    span: Span | None = None


class TrainingPlan(BaseModel):
    """Every memory-relevant concept a training config can set, as read from one document."""

    model_config = ConfigDict(validate_assignment=False)

    source_file: str = ""
    format: str = "unknown"  # detected format: "hf", "trl", "axolotl", "llamafactory", "torchtune", ...
    framework: str | None = None  # whose defaults apply: "transformers", "trl", "axolotl", ...
    # the release of `framework` the file's own arguments belong to, where the newest release vramlens has the
    # arguments of does not define them all and the workspace pins none (`frameworks.recognise.implied_version`)
    framework_release: str | None = None
    # libraries the file itself installs at a version (a launch script's `pip install "transformers==4.51.*"`):
    # package → (version, where), for `environment.versions`
    installs: dict[str, tuple[str, str]] = Field(default_factory=dict)

    # model
    model_id: Sourced[str] | None = None
    model_span_hint: Span | None = None  # where the model is named, for code lenses when model_id is derived
    weight_dtype: Sourced[str] | None = None  # Dtype: what the non-quantized weights are stored in
    amp_dtype: Sourced[str] | None = None  # AmpDtype: autocast compute dtype, "none" for pure
    # the model repository's own code (config.json `auto_map`) is built in place of transformers' class
    trust_remote_code: Sourced[bool] | None = None
    # batch and sequence
    micro_batch: Sourced[int] | None = None
    grad_accum: Sourced[int] | None = None
    global_batch: Sourced[int] | None = None
    seq_len: Sourced[int] | None = None
    packing: Sourced[bool] | None = None
    eval_batch: Sourced[int] | None = None
    # activations
    grad_checkpointing: Sourced[bool] | None = None
    ckpt_reentrant: Sourced[bool] | None = None
    activation_offload: Sourced[bool] | None = None
    attn_impl: Sourced[str] | None = None  # AttnImpl
    compile: Sourced[bool] | None = None
    loss_impl: Sourced[str] | None = None  # LossImpl
    fused_kernels: Sourced[list[str]] | None = None  # Triton kernels swapped in (Liger, unsloth): "rms_norm", "rope",
    # "swiglu", "cross_entropy"
    float8_linears: Sourced[bool] | None = None  # torchao Float8Linear: the blocks' linears run in float8
    float8_all_gather: Sourced[bool] | None = None  # FSDP2 gathers the float8 linears' weights in fp8 (torchao)
    qat: Sourced[str] | None = None  # torchao fake quantization of the linears: "<layout>:<group>" (knowledge/qat.py)
    # optimizer
    optimizer: Sourced[str] | None = None  # as written (normalized by knowledge.optimizers)
    optimizer_impl: Sourced[str] | None = None  # OptimizerImpl
    optimizer_in_bwd: Sourced[bool] | None = None
    zero_grad_set_to_none: Sourced[bool] | None = None
    # PEFT
    peft_method: Sourced[str] | None = None  # PeftMethod
    lora_r: Sourced[int] | None = None
    lora_alpha: Sourced[float] | None = None
    lora_dropout: Sourced[float] | None = None
    lora_targets: Sourced[list[str]] | None = None  # module names, or ["all-linear"]
    feedforward_targets: Sourced[list[str]] | None = None  # IA3 `feedforward_modules`: targets whose input is scaled
    modules_to_save: Sourced[list[str]] | None = None
    # partial full fine-tuning (freeze tuning, LLaMA-Pro, LISA) and low-rank optimizer states (GaLore)
    trained_layers: Sourced[int] | None = None  # decoder layers whose own weights train (the rest frozen)
    trained_modules: Sourced[list[str]] | None = None  # inside those layers: "attn", "mlp" (absent: all)
    trained_extra: Sourced[list[str]] | None = None  # outside the layers: "embed", "lm_head" (absent: none)
    trained_where: Sourced[str] | None = None  # which layers: "last", "first", "spread" (LLaMA-Pro), "rotating"
    frozen_share: Sourced[float] | None = None  # the share of the parameters frozen in the model's order (ms-swift)
    # (LISA, BAdam: a different window in turn); absent: "last"
    trainable_fp32: Sourced[bool] | None = None  # trainable weights upcast to fp32 over 16-bit frozen ones
    optimizer_rank: Sourced[int] | None = None  # GaLore/APOLLO projection rank
    optimizer_targets: Sourced[list[str]] | None = None  # the matrices with projected states
    optimizer_proj_bits: Sourced[int] | None = None  # Q-GaLore: projection matrices quantized to this many bits
    added_layers: Sourced[int] | None = None  # decoder blocks the method adds to the loaded model (LLaMA-Pro)
    # the model's head: "causal-lm" (vocabulary logits), or a small task head with no vocabulary logits
    task_head: Sourced[str] | None = None  # TaskHead
    # quantization
    quant_bits: Sourced[int] | None = None  # 4 or 8 (None: not quantized)
    quant_type: Sourced[str] | None = None  # "nf4", "fp4", "int8", "gptq", ...
    quant_double: Sourced[bool] | None = None
    quant_storage_dtype: Sourced[str] | None = None
    quant_compute_dtype: Sourced[str] | None = None
    # a MoE model's fused 3-D expert weights quantized on load with the base (axolotl `quantize_moe_experts`)
    experts_quantized: Sourced[bool] | None = None
    # the k-bit preparation leaves the embeddings (and LM head) in 16 bits (axolotl `embeddings_skip_upcast`)
    embeddings_skip_upcast: Sourced[bool] | None = None
    # a MoE model's fused expert parameters LoRA adapts by name: "gate_up", "down", "router" (peft target_parameters)
    expert_targets: Sourced[list[str]] | None = None
    # distribution
    dist_strategy: Sourced[str] | None = None  # DistStrategy
    zero_stage: Sourced[int] | None = None  # 0–3 (FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2, NO_SHARD = 0)
    offload_optimizer: Sourced[bool] | None = None
    offload_params: Sourced[bool] | None = None
    # moved to the CPU only between training updates (verl's `param_offload` / `optimizer_offload`): on the GPU while
    # the policy trains, in host memory while it generates (the optimizer state also while it scores log-probs)
    offload_params_idle: Sourced[bool] | None = None
    offload_optimizer_idle: Sourced[bool] | None = None
    # "rollout": those offloads last only while the engine generates (ms-swift's offload_model/offload_optimizer, the
    # reference model with the policy); absent: from one update to the next (verl, OpenRLHF)
    offload_idle_scope: Sourced[str] | None = None
    # sequences per micro-batch of a critic that trains in a step of its own (verl, OpenRLHF), beside the policy's
    critic_micro_batch: Sourced[int] | None = None
    critic_grad_checkpointing: Sourced[bool] | None = None
    fused_lora: Sourced[bool] | None = None  # fused LoRA autograd kernels on q/k/v, o and the MLP (axolotl's)
    teacher_sharding: Sourced[str] | None = None  # "whole", "zero3" or "zero3_offload": the teacher's own DeepSpeed
    # models on GPUs of their own, not the policy's ("reference", "reward_model", "value_model": OpenRLHF's Ray actor
    # groups without --colocate_*), and those that share the critic's GPUs ("reward_model")
    models_apart: Sourced[list[str]] | None = None
    critic_group: Sourced[list[str]] | None = None
    # ZeRO's buffer sizes in elements as a DeepSpeed config writes them: a number, or "auto" (what fills it decides:
    # resolve.distribution.zero_sizes)
    zero_reduce_bucket: Sourced[int | str] | None = None  # reduce_bucket_size
    zero3_prefetch_bucket: Sourced[int | str] | None = None  # stage3_prefetch_bucket_size
    zero3_persistence_threshold: Sourced[int | str] | None = None  # stage3_param_persistence_threshold
    zero3_max_live_params: Sourced[int | str] | None = None  # stage3_max_live_parameters
    zero3_max_reuse_distance: Sourced[int | str] | None = None  # stage3_max_reuse_distance
    zero_overlap_comm: Sourced[bool] | None = None  # overlap_comm: ZeRO-1/2's double reduce bucket
    world_size: Sourced[int] | None = None
    tensor_parallel: Sourced[int] | None = None
    context_parallel: Sourced[int] | None = None
    pipeline_parallel: Sourced[int] | None = None
    devices_per_process: Sourced[int] | None = None  # GPUs one process spreads the model over (device_map)
    virtual_pipeline: Sourced[int] | None = None  # model chunks per pipeline stage (interleaved schedule)
    pipeline_schedule: Sourced[str] | None = None  # torch.distributed.pipelining schedule name (torchtitan)
    expert_parallel: Sourced[int] | None = None
    expert_tensor_parallel: Sourced[int] | None = None
    ep_dispatch: Sourced[str] | None = None  # expert-parallel token dispatch (ResolvedPlan.ep_dispatch)
    sequence_parallel: Sourced[bool] | None = None  # Megatron sequence parallelism (with tensor parallelism)
    distributed_optimizer: Sourced[bool] | None = None  # Megatron's distributed optimizer
    cross_entropy_fusion: Sourced[bool] | None = None  # Megatron's `--cross-entropy-loss-fusion`
    grad_buffer_dtype: Sourced[str] | None = None  # Megatron's gradient buffers (fp32 unless told otherwise)
    # Megatron's precision-aware optimizer (Transformer Engine's FusedAdam): the master weights' and Adam's states'
    # dtypes ("fp32", "fp16", "bf16", "fp8")
    precision_aware_optimizer: Sourced[bool] | None = None
    main_params_dtype: Sourced[str] | None = None
    exp_avg_dtype: Sourced[str] | None = None
    exp_avg_sq_dtype: Sourced[str] | None = None
    fp8_recipe: Sourced[str] | None = None  # Transformer Engine's FP8 recipe of an FP8 Megatron run (`--fp8-format`)
    optimizer_offload_fraction: Sourced[float] | None = None  # Megatron's hybrid optimizer: share on the CPU
    first_stage_layers: Sourced[int] | None = None  # Megatron uneven pipeline: layers on the first stage
    last_stage_layers: Sourced[int] | None = None  # Megatron uneven pipeline: layers on the last stage
    # torch's pipelining, the framework's split of the decoder layers over the stages (knowledge.pipelining
    # `stage_split`): the layers the first stage's embeddings and the last stage's output modules count as
    # (torchtitan), the layers per stage (sets the stage count), or the layers of each stage given outright
    stage_input_weight: Sourced[int] | None = None
    stage_output_weight: Sourced[int] | None = None
    layers_per_stage: Sourced[int] | None = None
    stage_count_rounding: Sourced[str] | None = None  # "up" / "down": the stage count rounded to a multiple of pp
    stage_layers: Sourced[list[int]] | None = None
    # the first decoder layer of each stage after the first (torchtitan v0.1.0 `pipeline_parallel_split_points`)
    stage_boundaries: Sourced[list[int]] | None = None
    recompute_method: Sourced[str] | None = None  # Megatron full recompute: "uniform" or "block"
    recompute_layers: Sourced[int] | None = None  # Megatron `--recompute-num-layers`
    checkpoint_every: Sourced[int] | None = None  # with grad_checkpointing: every n-th block checkpointed (absent: 1)
    recompute_modules: Sourced[list] | None = None  # Megatron's selective recompute modules (`--recompute-modules`)
    selective_recompute: Sourced[str] | None = None  # "op" (torchtitan op-level SAC), "core_attention" (Megatron)
    loss_parallel: Sourced[bool] | None = None  # logits and loss sharded over the tensor-parallel ranks
    compile_loss: Sourced[bool] | None = None  # with compile: whether the loss is compiled too (absent: yes)
    fsdp_state_dict_type: Sourced[str] | None = None
    fsdp_version: Sourced[int] | None = None  # 1 (FlatParameter units) or 2 (`fully_shard`)
    fsdp_mixed_precision: Sourced[bool] | None = None  # FSDP's MixedPrecision gathers the parameters in the
    # compute dtype (no autocast weight copies)
    # environment and hardware
    alloc_conf: Sourced[str] | None = None  # PYTORCH_CUDA_ALLOC_CONF value
    gpu_name: Sourced[str] | None = None
    gpu_count: Sourced[int] | None = None
    dp_replicas: Sourced[int] | None = None  # HSDP: FSDP shards within dp ÷ replicas ranks, replicated across them
    node_count: Sourced[int] | None = None  # machines of a run that states them and not its GPUs per node
    # objective: preference optimisation, online RL, distillation (formats.objective reads every spelling)
    objective: Sourced[str] | None = None  # Objective
    reference_free: Sourced[bool] | None = None  # the loss needs no reference model (ORPO, SimPO, CPO, KL coef 0)
    precompute_ref: Sourced[bool] | None = None  # reference log-probs computed once before training
    ref_model_id: Sourced[str] | None = None  # a reference model named apart from the policy
    ref_dtype: Sourced[str] | None = None  # the reference model's weight dtype when not the policy's
    ref_offload: Sourced[bool] | None = None  # the reference's weights live on the CPU, gathered per unit
    prompt_len: Sourced[int] | None = None  # max_prompt_length
    completion_len: Sourced[int] | None = None  # max_completion_length / max_new_tokens
    num_generations: Sourced[int] | None = None  # completions sampled per prompt (GRPO/RLOO group size)
    # sequences per GPU in a no-grad log-prob forward of online RL (the old policy's and the reference's), when
    # the framework sizes it apart from the training micro-batch (verl `log_prob_micro_batch_size_per_gpu`)
    logprob_micro_batch: Sourced[int] | None = None
    generation_batch: Sourced[int] | None = None  # sequences generated at once per GPU, where sized apart
    generation: Sourced[str] | None = None  # GenerationMode
    vllm_memory_share: Sourced[float] | None = None  # vLLM gpu_memory_utilization when colocated
    # the colocated engine runs eagerly, capturing no CUDA graphs (vLLM `enforce_eager`)
    generation_eager: Sourced[bool] | None = None
    generation_sleeps: Sourced[bool] | None = None  # the colocated engine releases its memory while the policy
    # trains (vLLM sleep mode, verl free_cache_engine)
    reward_model_id: Sourced[str] | None = None  # a reward model held during online RL
    value_model: Sourced[bool] | None = None  # PPO's trained value (critic) model
    critic_model_id: Sourced[str] | None = None  # the critic's checkpoint where the config names one
    teacher_model_id: Sourced[str] | None = None  # the distillation teacher
    # the teacher's weight dtype where its loading sets one apart from the student's ("auto": its stored dtype)
    teacher_dtype: Sourced[str] | None = None

    references: list[Reference] = Field(default_factory=list)
    purpose: Sourced[str] | None = None
    """Set when the file launches something other than training (inference, merge, export, ...): what it is,
    where it says so. Such a plan is not estimated (`formats.purpose`)."""
    issues: list[ParseIssue] = Field(default_factory=list)
    # settings the parser recognised but vramlens does not model (key -> span), for hovers
    extra: dict[str, Sourced[Any]] = Field(default_factory=dict)
    # what the reader took from elsewhere than the settings themselves (e.g. the command line from a usage
    # example in the docstring); listed with the estimate's assumptions
    read_notes: list[str] = Field(default_factory=list)
    # settings read that change memory or speed and are not modelled (`PlanBuilder.unmodelled`)
    unmodelled: list[Unmodelled] = Field(default_factory=list)
    # keys a reader read into a concept (`PlanBuilder.set`, also when an earlier key had set it) or read together
    # with another key (the larger of two phases' batch sizes): read, so never named as not read or not modelled
    # (`frameworks.recognise`)
    read_alongside: list[str] = Field(default_factory=list)

    def settings(self) -> dict[str, Sourced]:
        """The concept fields that are set, by concept name."""
        out = {}
        for name in PLAN_CONCEPTS:
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        return out


PLAN_CONCEPTS: tuple[str, ...] = tuple(
    name
    for name, f in TrainingPlan.model_fields.items()
    if name
    not in {
        "source_file",
        "format",
        "framework",
        "framework_release",
        "installs",
        "model_span_hint",
        "references",
        "issues",
        "extra",
        "read_notes",
        "unmodelled",
        "read_alongside",
    }
)
