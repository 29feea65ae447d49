"""Typed records of the knowledge base. The data lives in `knowledge/data/*.yaml`, each entry with a source."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ModelArch(BaseModel):
    """Architecture facts of one model, as in its public `config.json`."""

    model_config = ConfigDict(frozen=True)

    id: str  # canonical HF hub id, e.g. "meta-llama/Meta-Llama-3-8B"
    aliases: tuple[str, ...] = ()  # other hub ids / short names with the same shapes
    family: str  # "llama", "mistral", "mixtral", "qwen2", "gemma2", "gpt2", "bert", "t5", ...
    block: Literal["decoder", "encoder", "encoder-decoder"] = "decoder"
    mlp: Literal["swiglu", "geglu", "gelu", "relu"] = "swiglu"  # swiglu/geglu = gated (3 matrices)
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    hidden: int
    layers: int  # decoder layers (encoder layers for encoders)
    encoder_layers: int = 0  # encoder-decoder only: encoder depth (layers = decoder depth)
    heads: int
    kv_heads: int | None = None  # None = heads (MHA)
    head_dim: int | None = None  # None = hidden // heads
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    attn_bias: bool = False  # q/k/v (and o) projections carry biases
    mlp_bias: bool = False
    num_experts: int = 0  # MoE: routed experts per MoE layer (0 = dense)
    experts_per_token: int = 0
    moe_intermediate: int | None = None  # per-expert intermediate size (None = intermediate)
    shared_experts: int = 0  # always-on experts (DeepSeek, Qwen2-MoE)
    shared_expert_intermediate: int | None = None
    dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    # DeepSeek multi-head latent attention (MLA; transformers DeepseekV3Config): the latent ranks of K/V and of q (None:
    # q is one full-rank q_proj), the per-head q/k widths without and with RoPE (None: head_dim and 64); the value
    # heads are head_dim wide (v_head_dim)
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    max_position: int | None = None
    stored_dtype: str = "bf16"  # dtype of the published checkpoint (transformers v5 "auto")
    params_b: float | None = None  # published total parameter count, billions (cross-check)
    source: str = ""  # where the numbers come from
    approximate: str = ""  # non-empty: what is still generic or unknown, and why
    # By construction (knowledge/inventory.py: transformers' own classes, scaled to this config): total parameters
    # (0: not built), parameters by kind (attention, state-space, linear-attention, short-conv, moe-experts, mlp,
    # embedding, lm-head, norm, ...) and decoder layers by kind (a hybrid layer counts under each of its kinds)
    params_total: int = 0
    params_by_kind: tuple[tuple[str, int], ...] = ()
    layer_kinds: tuple[tuple[str, int], ...] = ()
    # Mamba (selective state-space) mixers, as transformers' MambaConfig names them: state_size, intermediate_size
    # (expand · hidden), conv_kernel, time_step_rank (0: no such mixer)
    ssm_state: int = 0
    ssm_inner: int = 0
    ssm_conv: int = 0
    ssm_dt_rank: int = 0
    # Vision-language models: the vision tower (+ projector) beside the language model above
    vision_params: int = 0  # vision encoder + multimodal projector parameters
    vision_hidden: int = 0
    vision_layers: int = 0
    vision_intermediate: int = 0
    image_patches: int = 0  # patches of one image through the vision encoder
    vision_heads: int = 0
    vision_patch: int = 0  # patch side, pixels
    vision_gated: bool = False  # gated (SwiGLU) vision MLP: Qwen2.5-VL
    image_tokens: int = 0  # positions one image takes in the language model's sequence
    # The config.json the shapes were read from (JSON, keys sorted), for the architectures the real-library trace
    # builds with transformers' own config class rather than from the fields above (`knowledge.models.BUILT_AS_WRITTEN`:
    # layer patterns and mixer sizes no field holds). Not serialised.
    hf_config_json: str = Field("", exclude=True, repr=False)
    # The model class the checkpoint's own code defines (config.json `auto_map`, e.g. "modeling_deepseek.
    # DeepseekV2ForCausalLM"): transformers builds it instead of its own class when a run passes trust_remote_code
    remote_code: str = ""

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.d_head

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.d_head

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def mla_head_dims(self) -> tuple[int, int, int]:
        """MLA's per-head widths (q/k without RoPE, q/k with RoPE, v); qk_rope_head_dim is 64 in every DeepSeek-V2/V3
        config (transformers DeepseekV3Config)."""
        return (self.qk_nope_head_dim or self.d_head, self.qk_rope_head_dim or 64, self.d_head)


class GpuSpec(BaseModel):
    """One GPU model."""

    model_config = ConfigDict(frozen=True)

    name: str  # canonical short name, e.g. "A100-40GB"
    aliases: tuple[str, ...] = ()  # other spellings, incl. the exact nvidia-smi name
    vendor: Literal["nvidia", "amd", "intel", "google"] = "nvidia"
    memory_gib: float  # total device memory as the driver reports it (GiB = 2^30 B)
    usable_gib: float  # what a process can allocate: total minus driver-reserved memory
    bf16: bool
    fp8: bool = False
    compute_capability: str | None = None  # "8.0"
    source: str = ""
    # Speed (tokens per second). Dense tensor-core throughput in TFLOPS (no 2:4 sparsity; fp16/bf16 with
    # fp32 accumulation, which is what training runs: GeForce cards run it at half their fp16-accumulate rate);
    # fp32 is the plain CUDA-core rate. None: the card has no such unit (bf16 before Ampere).
    tflops_bf16: float | None = None
    tflops_fp16: float | None = None
    tflops_fp32: float | None = None
    tops_int8: float | None = None
    memory_gbs: float | None = None  # device memory bandwidth, GB/s (10^9 B/s)
    link_gbs: float | None = None  # GPU-to-GPU bandwidth, GB/s both directions together (NVLink, or the
    # PCIe slot when the card has no NVLink in common servers)
    speed_source: str = ""
    # GPUs of one node of the vendor's reference system for the card (DGX H100: 8; a GB200 NVL72 compute tray: 4),
    # taken for a run that states its node count and not its GPUs per node; None where servers differ (PCIe cards)
    node_gpus: int | None = None
    node_source: str = ""
    # GPUs that reach each other's memory over NVLink across nodes (a multi-node NVLink system: GB200 NVL72's 72);
    # None: NVLink stops at the node
    nvlink_domain_gpus: int | None = None


class OptimizerSpec(BaseModel):
    """How an optimizer keeps state, per trainable parameter."""

    model_config = ConfigDict(frozen=True)

    name: str  # canonical name (the HF `OptimizerNames` value where one exists)
    aliases: tuple[str, ...] = ()  # every other spelling: LLaMA-Factory, DeepSpeed, bare class names, ...
    # Where each spelling is written (optimizers.yaml): not part of what the estimate models, so not serialised
    # with a resolved plan.
    hf_names: tuple[str, ...] = Field((), exclude=True)  # TrainingArguments `optim` values
    axolotl_names: tuple[str, ...] = Field((), exclude=True)  # values only axolotl's `optimizer` accepts
    class_paths: tuple[str, ...] = Field((), exclude=True)  # torchtune/litgpt class paths, the written one first
    family: Literal[
        "adamw",
        "adam",
        "sgd",
        "lion",
        "adafactor",
        "rmsprop",
        "adagrad",
        "ademamix",
        "galore",
        "apollo",
        "lomo",
        "other",
    ] = "adamw"
    # State size: `states` tensors per trainable param, each `state_bytes` bytes; None = the param dtype
    # (torch optimizers keep state in the param dtype).
    states: float = 2
    state_bytes: float | None = None
    paged: bool = False  # bitsandbytes paged: states live in CUDA unified memory
    low_rank: bool = False  # GaLore/APOLLO: states are rank-r projections
    layerwise: bool = False  # per-layer step in backward (no full gradient buffer)
    default_impl: Literal["foreach", "fused", "forloop", "none"] = "foreach"
    library: Literal["torch", "bitsandbytes", "torchao", "deepspeed", "transformers", "apex", "other"] = "torch"
    source: str = ""

    @property
    def eight_bit(self) -> bool:
        """States quantized to 8 bits (or fewer) per element, block scales aside."""
        return self.state_bytes is not None and self.state_bytes < 1.5

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every spelling besides the name, wherever it is written."""
        return (*self.hf_names, *self.axolotl_names, *self.class_paths, *self.aliases)
