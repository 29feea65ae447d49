"""The torchtune backend: one step of a torchtune recipe on torchtune's own model, adapters and loss, under fake
tensors.

A torchtune config builds its model with one of torchtune's builders (`model: _component_:
torchtune.models.llama3_2.lora_llama3_2_1b`), which call the family's component builder with the model's shapes
(`torchtune.models.llama3_2._component_builders.lora_llama3_2`). This backend calls the same component builder with
the plan's shapes, so the traced model is torchtune's: its attention (grouped K/V expanded to every head before SDPA,
modules/attention.py), its RMSNorm, its RoPE cache (one module shared by every layer), its `LoRALinear` /
`DoRALinear` and `TiedLinear`. The step follows `recipes/lora_finetune_single_device.py` and
`full_finetune_single_device.py` (torchtune 0.6.1): the model is built under `training.set_default_dtype(dtype)` (every
weight and adapter in the config's `dtype`: torchtune has no mixed precision), adapters alone are trainable
(`set_trainable_params(model, get_adapter_params(model))`), activation checkpointing wraps each
`TransformerSelfAttentionLayer` (`training.set_activation_checkpointing`: torch's `apply_activation_checkpointing` with
a `ModuleWrapPolicy` of that class, non-reentrant `checkpoint_wrapper`s), the chunked loss is
`CEWithChunkedOutputLoss` with `model.set_num_output_chunks(...)`, and `_loss_step` shifts the labels with
`torch.hstack((labels[..., 1:], ignore_labels_cache))`.

Shims (each checked fake == real on CPU tensors in tests/trace/test_torchtune_backend.py):
- RoPE: the recipes call `rope_init()` after building on `meta`; Llama-3.1's scaled RoPE (`Llama3ScaledRoPE.
  apply_scaling`) compares frequencies in Python, which a fake tensor cannot answer. The cache is computed on real
  CPU tensors and copied into fake buffers of the same shape and dtype (what the recipe allocates).
- `torchtune.training` is not imported: torchtune 0.6.1's imports names torchao 0.16 removed
  (`quantization.int4_weight_only`), while the peft this extra pairs with refuses a torchao older than 0.16. The two
  functions of it the recipes call here are reproduced as they are written: `set_default_dtype` (torch's default dtype
  for the duration, torchtune 0.6.1 training/precision.py) and `set_activation_checkpointing` (training/memory.py).
- QLoRA: the QLoRA builders quantize at construction, which `meta` cannot run; the model is built unquantized and its
  block linears' weights are converted with torchao's `to_nf4` once they exist (`quantize_base`), as the builders
  hold them. torchao's NF4Tensor is a wrapper subclass: the tracker counts the tensors it holds, not its nominal
  16-bit storage (tracker.py).
- SDPA and dropout as on CUDA: `hf.install_sdpa_as_cuda_kernel` (torchtune calls SDPA itself) and
  `hf.dropouts_as_cuda` (LoRA dropout keeps a 1-byte mask, as CUDA's `native_dropout` does).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata as md

import torch
from torch import nn

from vramlens.trace.config import StepConfig
from vramlens.trace.hf import dropouts_as_cuda, install_sdpa_as_cuda_kernel, tick_at_blocks
from vramlens.trace.model import DTYPES, init_real_

# Component builders of torchtune 0.6.1 by architecture family (torchtune/models/*/_component_builders.py: module,
# full-weight builder, LoRA builder). Llama 3.1/3.2/3.3 use `llama3_2`'s (Llama-3.1 scaled RoPE, tied or untied head);
# Qwen2 and Qwen2.5 `qwen2`'s.
BUILDERS = {
    "llama": ("torchtune.models.llama3_2._component_builders", "llama3_2", "lora_llama3_2"),
    "mistral": ("torchtune.models.mistral._component_builders", "mistral", "lora_mistral"),
    "qwen2": ("torchtune.models.qwen2._component_builders", "qwen2", "lora_qwen2"),
}
# Llama 3's and Llama 2's LoRA builders give every layer its own RoPE module (knowledge/frameworks.py
# `torchtune_rope_caches`): the plan's `rope_caches` > 1 picks Llama 3's builder (untied head)
PER_LAYER_ROPE_LLAMA = ("torchtune.models.llama3._component_builders", "llama3", "lora_llama3")
TIES = {"llama3_2", "qwen2"}  # builders with a `tie_word_embeddings` argument
# torchtune's LoRA target names (lora_attn_modules) for the canonical block linears
ATTN_TARGETS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "output_proj"}
MLP_TARGETS = ("gate", "up", "down")
CHUNKS = 8  # CEWithChunkedOutputLoss(num_output_chunks=8), every torchtune config's value
IGNORE_INDEX = -100


def version() -> str | None:
    try:
        return md.version("torchtune")
    except md.PackageNotFoundError:
        return None


def unsupported(cfg: StepConfig) -> str | None:
    """Why this step cannot run on torchtune's own code here (None: it can)."""
    if version() is None:
        return "torchtune is not installed in the trace interpreter"
    if cfg.arch.family not in BUILDERS or cfg.arch.block != "decoder" or cfg.arch.is_moe:
        return f"architecture family `{cfg.arch.family}` has no torchtune component builder mapped here"
    if cfg.arch.head_dim and cfg.arch.head_dim * cfg.arch.heads != cfg.arch.hidden:
        return "a head dimension other than hidden ÷ heads (torchtune's builders of these families derive it)"
    if cfg.quant_bits is not None and (cfg.quant_bits != 4 or cfg.param_dtype != "bf16"):
        return "k-bit base weights other than torchtune's NF4 over bf16 (QLoRA builders)"
    if cfg.peft not in ("none", "lora", "dora", "qlora"):
        return f"torchtune has no `{cfg.peft}` adapter"
    if cfg.peft != "none" and {"embed"} & set(cfg.lora_targets):
        return "LoRA on the embeddings (torchtune has no such adapter)"
    if cfg.loss not in ("standard", "chunked"):
        return f"loss `{cfg.loss}` is not one of torchtune's"
    if cfg.autocast or cfg.master_weights:
        return "mixed precision (torchtune trains in one dtype)"
    if cfg.padded:
        return "a padding mask (torchtune's recipes pass none: padded positions are masked by the labels only)"
    return None


def _targets(cfg: StepConfig) -> tuple[list[str], bool, bool]:
    every = "all-linear" in cfg.lora_targets
    attn = [name for canon, name in ATTN_TARGETS.items() if every or canon in cfg.lora_targets]
    mlp = every or any(t in cfg.lora_targets for t in MLP_TARGETS)
    return attn, mlp, "lm_head" in cfg.lora_targets


def builder(cfg: StepConfig) -> tuple[str, str, str]:
    """(module, full-weight builder, LoRA builder) for the plan's family."""
    if cfg.arch.family == "llama" and cfg.peft != "none" and cfg.rope_caches > 1:
        return PER_LAYER_ROPE_LLAMA
    return BUILDERS[cfg.arch.family]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """torchtune 0.6.1 training/precision.py `set_default_dtype`."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def set_activation_checkpointing(model: nn.Module, classes: set) -> None:
    """torchtune 0.6.1 training/memory.py `set_activation_checkpointing` with a set of module classes."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    apply_activation_checkpointing(model, auto_wrap_policy=ModuleWrapPolicy(classes))


def build_model(cfg: StepConfig) -> nn.Module:
    """torchtune's TransformerDecoder of the plan's shapes (LoRA/DoRA when the plan has adapters), on `meta`."""
    a = cfg.arch
    module, base, lora = builder(cfg)
    builders = importlib.import_module(module)
    kw = dict(
        vocab_size=a.vocab,
        num_layers=a.layers,
        num_heads=a.heads,
        num_kv_heads=a.kv_heads,
        embed_dim=a.hidden,
        intermediate_dim=a.intermediate,
        max_seq_len=a.max_position or cfg.seq_len,
    )
    if base in TIES:
        kw["tie_word_embeddings"] = a.tied_embeddings
    with default_dtype(DTYPES[cfg.param_dtype]), torch.device("meta"):
        if cfg.peft == "none":
            return getattr(builders, base)(**kw)
        attn, mlp, output = _targets(cfg)
        return getattr(builders, lora)(
            attn,
            apply_lora_to_mlp=mlp,
            apply_lora_to_output=output,
            lora_rank=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            use_dora=cfg.peft == "dora",
            **kw,
        )


class TuneStep(nn.Module):
    """torchtune's model and loss, called like `SyntheticModel`: `mark("loss")` when the final norm's output reaches
    the output projection, `mark("bwd")` when backward leaves it."""

    def __init__(self, cfg: StepConfig):
        super().__init__()
        from torchtune import modules
        from torchtune.modules.loss import CEWithChunkedOutputLoss
        from torchtune.modules.peft import get_adapter_params, set_trainable_params

        self.cfg = cfg
        install_sdpa_as_cuda_kernel()
        model = build_model(cfg)
        if cfg.peft != "none":
            set_trainable_params(model, get_adapter_params(model))
        if cfg.checkpointing:
            set_activation_checkpointing(model, {modules.TransformerSelfAttentionLayer})
        if cfg.loss == "chunked":
            self.loss_fn = CEWithChunkedOutputLoss(num_output_chunks=CHUNKS, ignore_index=IGNORE_INDEX)
            model.set_num_output_chunks(CHUNKS)
        else:
            self.loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
        self.model = model
        self.tick = lambda: None
        tick_at_blocks(self, [m for m in model.modules() if isinstance(m, modules.TransformerSelfAttentionLayer)])
        self._mark = None
        model.norm.register_forward_hook(self._norm_out)

    def _norm_out(self, module, args, out):
        mark = self._mark
        if mark is not None:
            mark("loss")
            if out.requires_grad:
                out.register_hook(lambda g: mark("bwd"))

    def forward(self, ids, labels, mark=None, attention_mask=None):
        self._mark = mark
        try:
            logits = self.model(ids)
        finally:
            self._mark = None
        # recipes/lora_finetune_single_device.py `_loss_step`: labels shifted left, an ignored label appended
        ignore = torch.full((labels.shape[0], 1), IGNORE_INDEX, dtype=labels.dtype, device=labels.device)
        labels = torch.hstack((labels[..., 1:], ignore))
        if not isinstance(logits, list):
            labels = labels.reshape(-1)
            logits = logits.reshape(-1, logits.size(-1))
        return {"loss": self.loss_fn(logits, labels), "logits": logits}


# -- construction for the engine --------------------------------------------------------------------------


def build_meta(cfg: StepConfig) -> TuneStep:
    return TuneStep(cfg)


def materialize(step: TuneStep, device, real: bool) -> TuneStep:
    """Allocate every parameter on `device` (fake or real) and build the RoPE caches as the recipes do
    (`rope_init()` after building on `meta`)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    step = step.to_empty(device=device)
    for m in step.modules():
        if hasattr(m, "rope_init"):
            with unset_fake_temporarily():
                m.rope_init()  # real CPU tensors (module docstring)
                cache = {n: b for n, b in m.named_buffers(recurse=False)}
            for n, b in cache.items():
                fake = torch.empty(b.shape, dtype=b.dtype, device=device)
                fake.copy_(b)
                m.register_buffer(n, fake, persistent=False)
    if real:
        with torch.no_grad():
            init_real_(step.named_parameters(), False)
    if step.cfg.quant_bits == 4:
        quantize_base(step.model, device)
    dropouts_as_cuda(step.model)
    step.train()
    return step


def quantize_base(model: nn.Module, device) -> None:
    """The QLoRA builders' base weights (torchtune 0.6.1 models/*/_component_builders.py with `quantize_base=True`):
    every linear of the transformer layers in torchao's NF4 — an adapted one as `LoRALinear(quantize_base=True)` holds
    it (`to_nf4` of its weight, run through `linear_nf4`), an untargeted one as `FrozenNF4Linear`; the output projection
    stays as it is ("quantize_base is not applied to final output_proj currently"). Built unquantized on `meta` (where
    `to_nf4` cannot run), quantized here on the fake (or real) device: `to_nf4` and `linear_nf4` have no data-dependent
    step."""
    from torchao.dtypes.nf4tensor import to_nf4
    from torchtune.modules.low_precision import FrozenNF4Linear
    from torchtune.modules.peft import DoRALinear, LoRALinear

    for layer in model.layers:
        for parent in list(layer.modules()):
            if isinstance(parent, (LoRALinear, DoRALinear)):
                with torch.no_grad():
                    parent.weight = nn.Parameter(to_nf4(parent.weight.detach()), requires_grad=False)
                parent._quantize_base = True
                continue
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear and not (isinstance(parent, (LoRALinear, DoRALinear))):
                    frozen = FrozenNF4Linear(
                        child.in_features, child.out_features, bias=False, device=device, dtype=child.weight.dtype
                    )
                    setattr(parent, name, frozen)


def param_count(step: TuneStep) -> int:
    return sum(
        p.numel()
        for n, p in step.model.named_parameters()
        if not any(k in n for k in ("lora_a", "lora_b", "magnitude"))
    )


def quant_constants(step: TuneStep) -> list[torch.Tensor]:
    """The NF4 weights' scalers, quantization factors and lookup table (all but the packed 4-bit data)."""
    from torchao.dtypes.nf4tensor import NF4Tensor

    from vramlens.trace.tracker import inner_tensors

    return [
        t
        for p in step.model.parameters()
        if isinstance(p, NF4Tensor)  # a Parameter of one is one
        for t in inner_tensors(p)
        if t is not p.quantized_data
    ]


def make_batch(cfg: StepConfig, device, real: bool) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, cfg.arch.vocab, (cfg.micro_batch, cfg.seq_len), device=device)
    return {"ids": ids, "labels": ids}


def description(cfg: StepConfig) -> list[str]:
    module, base, lora = builder(cfg)
    built = f"{module}.{lora if cfg.peft != 'none' else base}"
    loss = (
        f"CEWithChunkedOutputLoss ({CHUNKS} output chunks, each upcast to fp32)"
        if cfg.loss == "chunked"
        else "torch.nn.CrossEntropyLoss on the whole logits"
    )
    return [
        f"traced on torchtune {version()}: the model from `{built}` with the plan's shapes, {loss}, "
        "torchtune's SDPA attention (grouped K/V expanded to every head), the step of its single-device recipes"
    ]
