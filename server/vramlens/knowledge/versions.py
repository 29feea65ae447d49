"""What a training step allocates that depends on the installed library versions, each with its source.

Pure data and comparisons: no import of the libraries themselves. The versions come from
`vramlens.environment` (settings, workspace pins, the trace interpreter's metadata, else `NEWEST`).
Each choice read from the transformers releases' own source (the wheels on PyPI):
- `loss/loss_utils.py` ForCausalLMLoss up to 4.48.x: `logits = logits.float()` then
  `shift_logits = logits[..., :-1, :].contiguous()` — a second fp32 copy of the logits while the loss runs;
  from 4.49.0 the labels are padded and shifted instead (`labels = nn.functional.pad(labels, (0, 1), ...)`).
- `integrations/sdpa_attention.py`: up to 4.53.x SDPA always calls `repeat_kv` for grouped K/V; from 4.54.0
  `use_gqa_in_sdpa` passes grouped K/V natively (`enable_gqa`) when no mask is given (torch ≥ 2.5).
- `models/gemma2/modeling_gemma2.py`: `_supports_sdpa = True` up to 4.57.x, `False` in 5.x ("sdpa does not
  support softcapping"): the model runs eager attention.
From TRL's SFTTrainer (the k-bit model preparation), read from the wheels on PyPI:
- up to 0.25.x `trl/models/utils.py` `prepare_peft_model`: a 4-/8-bit model that is not sharded (FSDP/ZeRO-3 leave its
  4-bit weights on the CPU or meta device) goes through peft's `prepare_model_for_kbit_training` (every weight that
  is not k-bit to fp32), and with `bf16` `peft_module_casting_to_bf16` puts the embeddings and the LM head back in
  bf16 (norms stay fp32); a sharded one gets `get_peft_model(..., autocast_adapter_dtype=False)`: 16-bit adapters.
- from 0.26.0 `trl/trainer/sft_trainer.py` `__init__` (huggingface/trl PR #4577 "Clean up model preparation"): no
  k-bit preparation; on a quantized model every trainable parameter but DoRA's magnitude vector goes to bf16.
Where transformers' gradient checkpointing wraps a decoder layer, and what FSDP then keeps:
- up to 4.51.x the model's loop checkpoints each layer from outside, `self._gradient_checkpointing_func(
  decoder_layer.__call__, ...)` (4.45.2 models/llama/modeling_llama.py `LlamaModel.forward`), with
  `use_reentrant=True` unless told otherwise (modeling_utils.py `gradient_checkpointing_enable`); from 4.52.0 (the
  families in `CKPT_IN_LAYER_EARLY_FAMILIES`) and 4.53.0 (every other one, huggingface/transformers PR #38913) the
  layer is a `GradientCheckpointingLayer` (modeling_layers.py) that checkpoints inside its own `__call__`.
- torch FSDP1 (torch 2.13 distributed/fsdp/_runtime_utils.py `_register_post_backward_reshard_only_hook`;
  (the same registration in the earlier 2.x sources) gives a unit whose flat parameter needs no gradient (a
  LoRA model's layer: the HF Trainer wraps each adapter linear in a unit of its own, `_fsdp_qlora_plugin_updates`
  with peft's `fsdp_auto_wrap_policy`) a multi-grad hook on the unit's inputs when it runs with gradients on.
  Under a reentrant checkpoint around the unit that happens in the recompute, on the checkpoint's detached input
  leaf; the hook (autograd/graph.py `register_multi_grad_hook` keeps the leaf's AccumulateGrad node, and so the
  leaf with its `.grad`) lives on the flat parameter until `_finalize_params` at the end of backward. Each block's
  checkpointed input and its input gradient then stay until the backward ends (measured on CPU with FSDP1: L − 2 more
  hidden-sized tensors than without FSDP at the first block's backward; none under transformers 5, whose checkpoint
  runs inside the unit).
And one from torch: from 1.13 `torch.cuda` sets `CUDA_MODULE_LOADING=LAZY` unless the user set it (pytorch/pytorch
PR #86509, "[1.13] Sets CUDA_MODULE_LOADING to LAZY when not set by the user"); before, every kernel of torch's
CUDA libraries is loaded when the context is created, which makes the context itself much larger.
And the LoRA of a Mixture-of-Experts model's routed experts, from peft's and transformers' own source:
- transformers 5 stores a MoE block's routed experts as 3-D parameters (`gate_up_proj` E × 2I × h, `down_proj`
  E × h × I) run with grouped_mm (5.24 models/qwen3_moe/modeling_qwen3_moe.py, integrations/moe.py); 4.x builds
  each expert of nn.Linear modules, which target names reach like any linear.
- peft from 0.19.0 on transformers 5 (`is_transformers_ge_v5` in tuners/tuners_utils.py `inject_adapter`) rewrites
  a LoRA config for families whose checkpoint conversion follows Qwen2-MoE or Mixtral
  (utils/transformers_weight_conversion.py `_convert_peft_config_moe`; the families: transformers 5.24
  conversion_mapping.py `_MODEL_TO_CONVERSION_PATTERN`): the v4 expert targets `gate_proj` + `up_proj` (Mixtral `w1`
  + `w3`) become `target_parameters` on `gate_up_proj` with rank and alpha doubled, `down_proj` (`w2`) on
  `down_proj`, and "all-linear" adds the router `gate.weight` too. Each becomes a `lora.ParamWrapper`
  (tuners/lora/layer.py): rank r per expert (lora_A in × r·E, lora_B r·E × out), no dropout, no DoRA (its
  constructor raises ValueError for either). peft 0.17–0.18 leave the 3-D experts alone.
- peft from 0.21.0 folds a single adapter into the experts' weight with one `baddbmm(W, lhs, rhs)` over the
  factors cast to the weight's dtype (`_LoraFactorsProxy`); 0.19–0.20 add the delta, materialised from the fp32
  factors with an einsum, to W (`_LoraParameterProxy`).
"""

from __future__ import annotations

from typing import NamedTuple

# The newest releases this knowledge was checked against: what an unpinned environment is assumed to run.
NEWEST = {
    "transformers": "5.24.0",
    "peft": "0.21.2",
    "trl": "1.16.0",
    "bitsandbytes": "0.50.2",
    "accelerate": "1.15.0",
    "torch": "2.13.0",
}

SHIFTED_LOGITS_UNTIL = (4, 49, 0)  # ForCausalLMLoss keeps a shifted fp32 copy below this
NATIVE_GQA_FROM = (4, 54, 0)  # SDPA without a mask reads grouped K/V natively from this
GEMMA2_EAGER_FROM = (5, 0, 0)  # Gemma-2 has no SDPA path from this
LAZY_CUDA_MODULES_FROM = (1, 13, 0)  # torch loads CUDA kernels lazily from this
TRL_BF16_KBIT_ADAPTERS_FROM = (0, 26, 0)  # SFTTrainer: no k-bit preparation, bf16 adapters on k-bit models from this
# GRPOTrainer's per-device batch holds completions (trl 0.15.0 trainer/grpo_trainer.py: a `RepeatRandomSampler`
# repeats each prompt num_generations times into the batch) from this; in 0.14.0 each prompt of the batch is
# generated for num_generations times (`torch.repeat_interleave(prompt_inputs["input_ids"], self.num_generations)`)
TRL_GRPO_BATCH_OF_COMPLETIONS_FROM = (0, 15, 0)
CKPT_IN_LAYER_FROM = (4, 53, 0)  # every decoder layer checkpoints inside its own __call__ from this
# torch from which CUDA's memory-efficient SDPA kernel reads grouped K/V (`enable_gqa`): pytorch/pytorch PR #191085
# ("[SDPA] Add memory-efficient GQA and vmap backward support", in torch 2.14: its `supports_mqa` parameter of
# `check_batch_size_and_num_heads_dense` is in 2.14.1's include/ATen/native/transformers/sdp_utils_cpp.h). Before it
# `can_use_mem_efficient_attention` checks `check_batch_size_and_num_heads_dense<false /*supports_gqa*/>` (torch 2.13
# aten/src/ATen/native/transformers/cuda/sdp_utils.cpp), and the `F.scaled_dot_product_attention` docstring says GQA
# "works only for Flash_attention and math kernel on CUDA tensor"
MEM_EFFICIENT_GQA_FROM = (2, 14, 0)
CKPT_IN_LAYER_EARLY = (4, 52, 0)  # ... these families from this (the 4.52.1 wheel's GradientCheckpointingLayer users)
CKPT_IN_LAYER_EARLY_FAMILIES = {
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "olmo",
    "olmo2",
    "gemma",
    "cohere",
    "cohere2",
    "granite",
    "granitemoe",
    "glm",
    "glm4",
    "starcoder2",
    "helium",
    "deepseek_v3",
    "diffllama",
    "bitnet",
}
# families whose modelling code writes attention out (no attention interface), whatever is asked
OWN_EAGER_ATTENTION = {"bloom", "deberta-v2", "deberta"}
# Remote-code families whose modelling code picks its attention itself: with FlashAttention off it calls
# `F.scaled_dot_product_attention` under torch 2, never the written-out product (Qwen/Qwen-7B on the Hub,
# modeling_qwen.py `QWenAttention.forward`: `if not self.use_cache_quantization and SUPPORT_TORCH2:`)
OWN_SDPA_ATTENTION = {
    "qwen": "Qwen-1's modeling_qwen.py runs torch's scaled_dot_product_attention when FlashAttention is off "
    "(SUPPORT_TORCH2), not eager attention",
}
# Families whose model class has no SDPA path (`_supports_sdpa = False`): transformers runs eager attention instead.
# gpt-oss's attention sinks (transformers 5.24 models/gpt_oss/modeling_gpt_oss.py `GptOssPreTrainedModel`)
NO_SDPA = {"gpt_oss"}
FUSED_EXPERTS_FROM = (5, 0, 0)  # transformers keeps routed experts as 3-D parameters from this
PEFT_EXPERT_PARAMETERS_FROM = (0, 19, 0)  # peft adapts those parameters for the v4 expert targets from this
PEFT_EXPERT_FACTORS_FROM = (0, 21, 0)  # peft folds the expert delta from its factors (baddbmm) from this
# DoRA reuses the base layer's output (`base_result`) when the adapter has no dropout from this; before it,
# `DoraLinearLayer.forward` always recomputes F.linear(x, weight.to(x.dtype)) (peft 0.13.2 tuners/lora/dora.py;
# peft 0.14.0 tuners/lora/layer.py `Linear.forward` passes `base_result=result` when dropout is nn.Identity)
PEFT_DORA_BASE_RESULT_FROM = (0, 14, 0)

# transformers 5.24 conversion_mapping.py `_MODEL_TO_CONVERSION_PATTERN` (families in the catalog or close to it),
# with peft 0.21.2's own "mixtral" entry: the pattern peft's `_MOE_TARGET_MODULE_MAPPING` rewrites targets by
# (Qwen2-MoE itself names the pattern but is no key of the mapping, so peft leaves its config alone)
MOE_CONVERSION_PATTERN = {
    "mixtral": "mixtral",
    "minimax": "mixtral",
    "minimax_m2": "mixtral",
    "qwen3_moe": "qwen2_moe",
    "qwen3_next": "qwen2_moe",
    "olmoe": "qwen2_moe",
    "deepseek_v2": "qwen2_moe",
    "deepseek_v3": "qwen2_moe",
    "glm4_moe": "qwen2_moe",
    "ernie4_5_moe": "qwen2_moe",
    "hunyuan_v1_moe": "qwen2_moe",
    "dots1": "qwen2_moe",
    "flex_olmo": "qwen2_moe",
}


def parse(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string such as "4.48.1", "v5.0", "==0.13.2", "4.57.0.dev0"; None when
    it has no leading number."""
    if not version:
        return None
    parts: list[int] = []
    for piece in str(version).strip().lstrip("v=<>~^! ").split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        return None
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def at_least(version: str | None, floor: tuple[int, int, int], package: str = "transformers") -> bool:
    """Whether `version` of `package` is at or above `floor`; an unknown version counts as the newest known."""
    v = parse(version) or parse(NEWEST[package])
    return v is not None and v >= floor  # NEWEST holds release numbers, which always parse


def loss_keeps_shifted_logits(transformers: str | None) -> bool:
    return not at_least(transformers, SHIFTED_LOGITS_UNTIL)


def sdpa_repeats_kv(transformers: str | None, masked: bool) -> bool:
    """Whether transformers' SDPA path materialises full-head K/V for grouped-query attention."""
    return masked or not at_least(transformers, NATIVE_GQA_FROM)


def cuda_modules_load_eagerly(torch: str | None) -> bool:
    """Whether torch loads every CUDA kernel when it creates the context (before 1.13; unknown counts as newest)."""
    return not at_least(torch, LAZY_CUDA_MODULES_FROM, "torch")


def attention_as_run(family: str, requested: str, transformers: str | None) -> str:
    """The attention the model runs: Gemma-2 in transformers 5 has no SDPA path (eager instead); BLOOM computes its
    ALiBi attention itself whatever is requested (transformers 5.24 models/bloom/modeling_bloom.py
    `BloomAttention.forward`: `alibi.baddbmm`, an fp32 softmax cast back, `torch.bmm`), as eager attention does;
    DeBERTa-v2's disentangled attention is its own code in every version (models/deberta_v2/modeling_deberta_v2.py:
    no attention interface, `_supports_sdpa` left False)."""
    if family in OWN_EAGER_ATTENTION:
        return "eager"
    if family in NO_SDPA and requested == "sdpa":
        return "eager"
    if family == "gemma2" and requested == "sdpa" and at_least(transformers, GEMMA2_EAGER_FROM):
        return "eager"
    if family in OWN_SDPA_ATTENTION and requested == "eager":
        return "sdpa"
    return requested


def attention_reason(family: str) -> str:
    """Why `attention_as_run` runs another attention than the one asked for `family`."""
    if family in OWN_EAGER_ATTENTION:
        return (
            f"{family} writes its attention out in its modelling code: "
            "eager attention whatever attn_implementation says"
        )
    if family in OWN_SDPA_ATTENTION:
        return OWN_SDPA_ATTENTION[family]
    if family in NO_SDPA:
        return f"{family} has no SDPA path (`_supports_sdpa = False`): eager attention"
    return "Gemma-2 has no SDPA path (`_supports_sdpa = False`): eager attention"


class AttentionAndLoss(NamedTuple):
    """The version-dependent choices of a step's attention and loss (`as_run`)."""

    attention: str  # the attention the model runs
    repeat_kv: bool  # full-head K/V materialised for grouped-query attention
    loss_shifted_copy: bool  # the loss keeps a shifted fp32 copy of the logits


def as_run(
    family: str, requested: str, transformers: str | None, *, hf_model: bool, masked: bool, loss_impl: str = "standard"
) -> AttentionAndLoss:
    """What a step of `family` runs for the attention `requested`, under `transformers` (None: the newest known).
    `hf_model`: transformers' own modelling code runs the model (not torchtune's or litgpt's, which expand grouped
    K/V to every head before SDPA whatever the version: torchtune modules/attention.py
    `k.unsqueeze(2).expand(...).flatten(1, 2)`, litgpt model.py `k.expand(...)` then `reshape`, which copies).
    `masked`: the batch carries a padding mask. Eager attention always repeats grouped K/V."""
    if not hf_model:
        return AttentionAndLoss(requested, requested in ("eager", "sdpa"), False)
    attention = attention_as_run(family, requested, transformers)
    repeat = attention == "eager" or (attention == "sdpa" and sdpa_repeats_kv(transformers, masked))
    return AttentionAndLoss(attention, repeat, loss_impl == "standard" and loss_keeps_shifted_logits(transformers))


class KbitPreparation(NamedTuple):
    """How a trainer prepares a k-bit model for adapters (`trl_sft_kbit`)."""

    upcast: bool  # every weight that is not k-bit goes to fp32
    embeddings_16bit: bool  # ... then the embeddings and LM head back to 16-bit
    adapter_fp32: bool  # the adapters train in fp32


# quantization methods whose models peft's `prepare_model_for_kbit_training` leaves in 16 bits (peft 0.21.2
# utils/other.py: `if not is_gptq_quantized and not is_aqlm_quantized and not is_eetq_quantized and not
# is_hqq_quantized and not is_torchao_quantized:` guards the cast to fp32)
KBIT_NOT_UPCAST = frozenset({"gptq", "aqlm", "eetq", "hqq", "torchao"})


def trl_sft_kbit(trl: str | None, *, bf16: bool, sharded: bool) -> KbitPreparation:
    """TRL SFTTrainer's preparation of a 4-/8-bit model under `trl` (None: the newest known); `sharded`: FSDP or
    ZeRO-3 hold the k-bit weights."""
    if sharded or at_least(trl, TRL_BF16_KBIT_ADAPTERS_FROM, "trl"):
        return KbitPreparation(upcast=False, embeddings_16bit=False, adapter_fp32=False)
    return KbitPreparation(upcast=True, embeddings_16bit=bf16, adapter_fp32=True)


def trl_grpo_batch_of_completions(trl: str | None) -> bool:
    """Whether TRL GRPOTrainer's per-device batch counts completions under `trl` (None: the newest known)."""
    return at_least(trl, TRL_GRPO_BATCH_OF_COMPLETIONS_FROM, "trl")


def moe_expert_lora(family: str, transformers: str | None, peft: str | None) -> str | None:
    """How LoRA target names reach a MoE model's routed experts: "modules" (transformers 4.x: each expert's
    nn.Linear modules), "parameters" (transformers 5 with peft ≥ 0.19 for a family peft converts: a
    `lora.ParamWrapper` on the fused expert parameters), None (transformers 5 otherwise: no target reaches them)."""
    if not at_least(transformers, FUSED_EXPERTS_FROM):
        return "modules"
    if family in MOE_CONVERSION_PATTERN and at_least(peft, PEFT_EXPERT_PARAMETERS_FROM, "peft"):
        return "parameters"
    return None


def checkpoint_wraps_layer_call(family: str, transformers: str | None) -> bool:
    """Whether transformers checkpoints a decoder layer from the model's loop, around whatever wraps the layer
    (before `GradientCheckpointingLayer`), rather than inside the layer's own call."""
    floor = CKPT_IN_LAYER_EARLY if family in CKPT_IN_LAYER_EARLY_FAMILIES else CKPT_IN_LAYER_FROM
    return not at_least(transformers, floor)


def fsdp1_keeps_block_grads(
    family: str, transformers: str | None, *, fsdp_version: int, reentrant: bool, lora: bool
) -> bool:
    """Whether FSDP1 keeps every block's checkpointed input and its gradient until the end of backward: LoRA layers
    (frozen layer units) under a reentrant checkpoint that transformers puts around the FSDP unit (module docstring)."""
    return fsdp_version == 1 and reentrant and lora and checkpoint_wraps_layer_call(family, transformers)


def peft_dora_reuses_base_result(peft: str | None) -> bool:
    """Whether DoRA without dropout takes the base layer's output instead of recomputing x @ W (peft ≥ 0.14.0)."""
    return at_least(peft, PEFT_DORA_BASE_RESULT_FROM, "peft")


def peft_folds_expert_factors(peft: str | None) -> bool:
    """Whether peft applies an expert adapter with one baddbmm over its factors (≥ 0.21.0), not an einsum delta."""
    return at_least(peft, PEFT_EXPERT_FACTORS_FROM, "peft")
