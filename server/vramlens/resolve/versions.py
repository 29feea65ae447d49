"""Versions stage: what the library versions the run uses change — bitsandbytes' 4-bit input, transformers' attention
and loss paths (knowledge/versions.py), FSDP1's checkpointed blocks, and the trainer's k-bit preparation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vramlens import environment
from vramlens.knowledge import frameworks, models, versions
from vramlens.knowledge.schema import ModelArch
from vramlens.plan import TrainingPlan
from vramlens.resolve.common import Context

if TYPE_CHECKING:
    from vramlens.resolve.adapters import AdapterPart
    from vramlens.resolve.distribution import DistributionPart
    from vramlens.resolve.precision import TrainedPrecisionPart
    from vramlens.resolve.sequence import SequencePart


@dataclass(frozen=True)
class VersionsPart:
    env: dict  # package → its version and where that came from (environment.versions)
    tv: str | None  # transformers' version where the step runs its model classes
    hf_model: bool
    masked: bool  # attention under a padding mask
    loss_impl: str
    run: Any  # versions.as_run: the attention, repeat_kv and loss copy as that transformers runs them
    storage: Any  # bitsandbytes' quant storage dtype
    keeps_input: bool  # bitsandbytes keeps each 4-bit linear's input
    keeps_block_grads: bool
    kbit_upcast: bool
    kbit_embeddings_16bit: bool
    adapter_fp32: bool


def resolve_versions(
    ctx: Context,
    arch: ModelArch,
    adapters: AdapterPart,
    dist: DistributionPart,
    weights: TrainedPrecisionPart,
    sequence: SequencePart,
) -> VersionsPart:
    plan, settings, val, assumptions, hooks = ctx.plan, ctx.settings, ctx.val, ctx.assumptions, ctx.hooks
    fw_label, quant_bits, peft, strategy = ctx.fw_label, adapters.quant_bits, adapters.peft, dist.strategy
    attn = sequence.attn
    # the quantization settings (and their framework defaults: axolotl's and LLaMA-Factory's double quantization)
    # only for a quantized model: a 16-bit run has none to list
    qval = val if quant_bits else (lambda concept: None)
    storage = qval("quant_storage_dtype")
    bnb_pinned = environment.workspace_pins(settings.workspace).get("bitsandbytes")
    bnb_version = (
        settings.framework_versions.get("bitsandbytes")
        or (bnb_pinned.version if bnb_pinned else None)
        or hooks.bitsandbytes
    )
    keeps_input = quant_bits == 4 and frameworks.bnb_keeps_4bit_input(bnb_version)
    if keeps_input:
        told = (
            "set"
            if settings.framework_versions.get("bitsandbytes")
            else bnb_pinned.source
            if bnb_pinned
            else f"the release {fw_label} supports"
        )
        assumptions.append(
            f"bitsandbytes {bnb_version} ({told}): every 4-bit linear keeps its input for backward (fixed in 0.43.2)"
        )

    env = ctx.defaults.env
    assert env is not None  # read by defaults_for with the settings resolve() always has
    hf_model = hooks.hf_model
    tv = env["transformers"].version if hf_model else None
    masked = not bool(val("packing")) and hooks.behaviour.get("attn_mask", True)
    loss_impl = val("loss_impl") or "standard"
    run = versions.as_run(arch.family, attn, tv, hf_model=hf_model, masked=masked, loss_impl=loss_impl)
    own = plan.extra.get(frameworks.NEMO_OWN_MODEL_ATTENTION)
    own_class = own is not None and arch.family in frameworks.NEMO_OWN_MODELS
    if own is not None and own_class:
        # NeMo AutoModel's own class of the model: its backend's attention, grouped K/V read as they are
        # (`enable_gqa`, Transformer Engine's `num_gqa_groups`), whatever transformers' class would run
        run = run._replace(attention=str(own.value), repeat_kv=False)
        ctx.sources["attn_impl"] = own
        assumptions.append(f"NeMo AutoModel runs its own {arch.family} class: {own.note}")
    if run.attention != "eager" and arch.family in models.EAGER_ATTENTION_NOTES:
        # the model stage's note on eager attention's masks does not apply to the attention the run has
        said = f"approximate: `{arch.family}`: {models.NOT_MODELLED_LAYERS[arch.family]}"
        assumptions[:] = [a for a in assumptions if a != said]
    if hf_model:
        t_label = f"transformers {env['transformers'].version} ({env['transformers'].source})"
        if run.attention != attn and not own_class:
            assumptions.append(f"{t_label}: {versions.attention_reason(arch.family)}")
        if run.attention == "sdpa" and not own_class and not versions.sdpa_repeats_kv(tv, masked):
            assumptions.append(f"{t_label}: SDPA reads grouped K/V natively without a mask (no repeat_kv)")
        if run.loss_shifted_copy:
            assumptions.append(
                f"{t_label}: the loss keeps a shifted fp32 copy of the logits (ForCausalLMLoss before 4.49)"
            )
        elif loss_impl == "standard":
            assumptions.append(f"{t_label}: the loss shifts the labels, not the logits (no fp32 copy of them)")
        if (
            run.attention == "sdpa"
            and not own_class
            and masked
            and versions.sdpa_repeats_kv(tv, False)
            and arch.n_kv_heads < arch.heads
        ):
            assumptions.append(f"{t_label}: SDPA repeats grouped K/V to every head (repeat_kv before 4.54)")
    keeps_block_grads = _fsdp_keeps_block_grads(plan, val, arch.family, hooks.hf_trainer, strategy, peft, tv)
    if keeps_block_grads:
        assumptions.append(
            f"transformers {env['transformers'].version} ({env['transformers'].source}) checkpoints "
            "each layer around its FSDP unit (reentrant): FSDP1 keeps every layer's checkpointed input "
            "and its gradient until the backward ends"
        )

    kbit_upcast, kbit_embeddings_16bit, adapter_fp32 = hooks.behaviour["kbit_upcast"], False, weights.adapter_fp32
    sharded = strategy == "fsdp" or (strategy == "deepspeed" and int(dist.zero or 0) >= 3)
    prep = hooks.kbit_preparation(
        env, quant_bits=quant_bits, peft=peft, objective=sequence.objective, compute=weights.compute, sharded=sharded
    )
    if prep is not None:
        kbit_upcast, kbit_embeddings_16bit, adapter_fp32 = (
            prep.kbit_upcast,
            prep.kbit_embeddings_16bit,
            prep.adapter_fp32,
        )
        assumptions.append(prep.note)
    if weights.deepspeed_casts and quant_bits and (kbit_upcast or adapter_fp32):
        # deepspeed 0.19.8 runtime/engine.py `_cast_module_mixed_precision`: the engine casts what the preparation
        # upcast to fp32 back to its 16-bit dtype (not the 4-bit weights, stored as uint8)
        kbit_upcast, adapter_fp32 = False, False
        assumptions.append(
            f"DeepSpeed's {weights.compute} engine casts the fp32 weights of the k-bit preparation back to "
            f"{weights.compute}"
        )
    if kbit_upcast and qval("experts_quantized") and arch.is_moe and versions.at_least(tv, versions.FUSED_EXPERTS_FROM):
        # axolotl 067b021c src/axolotl/loaders/model.py `_prepare_model_for_quantization`: once its load-time patch
        # has quantized the fused experts (`_moe_experts_quantized`), prepare_model_for_kbit_training is skipped
        # ("Parametrized expert tensors dequantize on access — would OOM"): nothing is upcast to fp32
        kbit_upcast, kbit_embeddings_16bit = False, False
        assumptions.append(
            "quantize_moe_experts: the experts are quantized on load and prepare_model_for_kbit_training is "
            "skipped, so the unquantized parameters stay in the weight dtype"
        )
    if kbit_upcast and not kbit_embeddings_16bit and qval("embeddings_skip_upcast"):
        # axolotl `embeddings_skip_upcast` (readers.embeddings_skip_upcast): the norms go to fp32, the embeddings and
        # LM head stay in the load dtype
        kbit_embeddings_16bit = True
        assumptions.append("embeddings_skip_upcast: the k-bit preparation leaves the embeddings and LM head in 16 bits")
    quant_type = adapters.plan_fields.get("quant_type") or qval("quant_type")
    if kbit_upcast and quant_type in versions.KBIT_NOT_UPCAST:
        # peft 0.21.2 utils/other.py `prepare_model_for_kbit_training`: the fp32 cast of the 16-bit parameters is
        # skipped for GPTQ (and AQLM, EETQ, HQQ, torchao) models
        kbit_upcast, kbit_embeddings_16bit = False, False
        assumptions.append(
            f"peft prepares a {str(quant_type).upper()} model without casting its 16-bit parameters to fp32"
        )
    return VersionsPart(
        env,
        tv,
        hf_model,
        masked,
        loss_impl,
        run,
        storage,
        keeps_input,
        keeps_block_grads,
        kbit_upcast,
        kbit_embeddings_16bit,
        adapter_fp32,
    )


def _fsdp_keeps_block_grads(
    plan: TrainingPlan, val, family: str, hf_trainer: bool, strategy: str, peft: str, transformers: str | None
) -> bool:
    """FSDP1 + the Trainer's reentrant checkpointing around each unit + LoRA (knowledge/versions.py)."""
    if strategy != "fsdp" or not val("grad_checkpointing") or not hf_trainer:
        return False
    reentrant = val("ckpt_reentrant")
    return versions.fsdp1_keeps_block_grads(
        family,
        transformers,
        fsdp_version=int(val("fsdp_version") or 1),
        reentrant=True if reentrant is None else bool(reentrant),
        lora=peft in ("lora", "qlora", "dora"),
    )
