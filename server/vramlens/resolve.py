"""resolve: TrainingPlan → ResolvedPlan. Fills what the file leaves out with the framework's defaults,
looks up the model, GPU and optimizer, and records every choice it had to make.

The result keeps provenance beside the numbers (`Resolution.sources`), so the surfaces can say
"micro batch 8 — transformers default", while the estimator only ever sees the `ResolvedPlan`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vramlens import environment
from vramlens.knowledge import frameworks, peft_methods, versions
from vramlens.knowledge.schema import GpuSpec, ModelArch
from vramlens.plan import Origin, Sourced, TrainingPlan
from vramlens.resolved import ResolvedPlan, unmodelled_text
from vramlens.settings import Settings

DEFAULT_GPU = "A100-80GB"
# The Triton kernels a run can swap in for transformers' own (ResolvedPlan.fused_kernels)
FUSED_KERNELS = ("rms_norm", "rope", "swiglu", "cross_entropy")
# The sequence length assumed when neither the file nor its framework gives one (a plain Trainer script tokenizes
# its data itself): a common training length, never more than the model's positions.
ASSUMED_SEQ_LEN = 2048
# How a user names the GPU when none was named (shown wherever the assumed one is).
CHOOSE_GPU = (
    "choose one with `--gpu`, the `gpu` setting (`.vramlens.toml`, `[tool.vramlens]` or the editor's "
    "`vramlens.gpu`) or a `# vramlens: gpu=…` comment in the file"
)


def no_bf16_note(gpu_name: str) -> str:
    """What every view says when bf16 is asked for on a GPU without it (the CLI's assumptions, the hover).

    PyTorch 2.3 and later count emulated bf16 as supported: `torch.cuda.is_bf16_supported()` tries to create a bf16
    tensor when the compute capability is below 8.0 (torch/cuda/__init__.py, pytorch/pytorch#115924), so
    transformers' `bf16=True` check passes (training_args.py `is_torch_bf16_gpu_available`, transformers 5.x) and
    the run computes bf16 in fp32 arithmetic without tensor cores. The memory is that of bf16 (2 bytes per value);
    the speed is estimated at the GPU's fp32 rate (estimate/throughput.py `compute_rate_dtype`)."""
    return (
        f"{gpu_name} has no bf16: PyTorch emulates it (fp32 arithmetic, no tensor cores) and older versions "
        "refuse it; estimated as bf16 at the fp32 rate — fp16 runs at the fp16 tensor-core rate"
    )


def shown_compute_dtype(compute_dtype: str, gpu_bf16: bool) -> str:
    """The compute dtype as the run has it: bf16 on a GPU without bf16 units is emulated."""
    return "bf16 (emulated)" if compute_dtype == "bf16" and not gpu_bf16 else compute_dtype


class ResolveError(ValueError):
    """The plan cannot be estimated (e.g. unknown model); `concept` names the culprit."""

    def __init__(self, message: str, concept: str | None = None, suggestion: str | None = None):
        super().__init__(message)
        self.concept = concept
        self.suggestion = suggestion


class Approximate(str):
    """An assumption that makes the figure approximate (a value guessed, or a setting estimated as something it is
    not): listed with the other assumptions, and collected into `ResolvedPlan.approximate`, which every view shows.
    An assumed GPU is not one of them: the figure is exact for the GPU it names, and every view says it is assumed."""


def approximate_reasons(plan: TrainingPlan, assumptions: list[str]) -> tuple[str, ...]:
    """Why the estimate is approximate: each setting read and not modelled, then each `Approximate` assumption."""
    reasons = [unmodelled_text(u) for u in plan.unmodelled]
    reasons += [str(a) for a in assumptions if isinstance(a, Approximate)]
    return tuple(dict.fromkeys(reasons))


# Pre-quantized checkpoints whose layers are not bitsandbytes': the weights and constants are counted as stored
# (estimate/components.py `quantized_bytes_per_param`), the rest of the step as a bitsandbytes 4-bit layer's.
PREQUANTIZED_NOTES = {
    "gptq": "pre-quantized GPTQ checkpoint: packed weights and group constants counted as stored; its kernels' "
    "activations and workspace estimated as bitsandbytes 4-bit's",
    "awq": "pre-quantized AWQ checkpoint: packed weights and group constants counted as stored; its kernels' "
    "activations and workspace estimated as bitsandbytes 4-bit's",
    "aqlm": "pre-quantized AQLM checkpoint (2-bit codebooks): its weights estimated at 8 bits per parameter, its "
    "kernels as bitsandbytes'",
}


@dataclass
class Resolution:
    resolved: ResolvedPlan
    sources: dict[str, Sourced]  # concept → where its value came from (file, default, ...)
    assumptions: list[str] = field(default_factory=list)

    @property
    def gpu_assumed(self) -> bool:
        """No setting, config key, `# vramlens: gpu=…` directive or detection named the GPU: it is DEFAULT_GPU or
        one a comment mentions, an assumption every view names as such (`gpu_assumption`)."""
        source = self.sources.get("gpu_name")
        return source is not None and source.origin == Origin.ASSUMED

    @property
    def gpu_assumption(self) -> str | None:
        """Why the GPU is assumed, in the words every view uses; None when it was named."""
        return gpu_assumption(self.sources)


def gpu_assumption(sources: dict[str, Sourced], short: bool = False, escape=str) -> str | None:
    """Why the GPU of a resolution (its `sources`) is assumed, in the words every view uses — in a few words with
    `short` (a code lens title); None when a setting, a config key, a directive or detection named it. `escape`
    is applied to the words quoted from the file (Markdown views escape them)."""
    source = sources.get("gpu_name")
    if source is None or source.origin != Origin.ASSUMED:
        return None
    if source.key == "comment":
        return (
            "assumed from a comment"
            if short
            else f"{escape(comment_gpu_phrase(source))}, which is not a setting — {CHOOSE_GPU}"
        )
    return "assumed: no GPU named" if short else f"no GPU named — {CHOOSE_GPU}"


def comment_gpu_phrase(source: Sourced) -> str:
    """ "taken from the comment `tested on an A100 80GB` (line 3)" for a GPU read from a comment."""
    line = f" (line {source.span.start_line + 1})" if source.span is not None else ""
    note = source.note or "from a comment"
    return f"taken {note}{line}"


LORA_NAME_MAP = {
    "q_proj": ("q",),
    "k_proj": ("k",),
    "v_proj": ("v",),
    "o_proj": ("o",),
    "out_proj": ("o",),
    "output_proj": ("o",),
    "dense": ("o",),
    "query": ("q",),
    "key": ("k",),
    "value": ("v",),
    "c_attn": ("q", "k", "v"),
    "qkv_proj": ("q", "k", "v"),
    "qkv": ("q", "k", "v"),
    "wqkv": ("q", "k", "v"),
    "query_key_value": ("q", "k", "v"),
    "proj": ("o",),
    "attn.proj": ("o",),
    "gate_proj": ("gate",),
    "up_proj": ("up",),
    "down_proj": ("down",),
    "gate_up_proj": ("gate", "up"),
    "w1": ("gate",),
    "w3": ("up",),
    "w2": ("down",),
    "fc_1": ("gate",),
    "fc_2": ("up",),
    "c_fc": ("fc1",),
    "fc1": ("fc1",),
    "fc2": ("fc2",),
    "fc_in": ("fc1",),
    "fc_out": ("fc2",),
    "dense_h_to_4h": ("fc1",),
    "dense_4h_to_h": ("fc2",),
    "wi": ("fc1",),
    "wo": ("down",),
    "wi_0": ("gate",),
    "wi_1": ("up",),  # T5 v1.1 / Flan-T5 gated-gelu; `wo` is fc2 when ungated
    "mlp": ("gate", "up", "down", "fc1", "fc2"),
    "q": ("q",),
    "k": ("k",),
    "v": ("v",),
    "o": ("o",),
    "gate": ("gate",),
    "up": ("up",),
    "down": ("down",),
    "lm_head": ("lm_head",),
    "output": ("lm_head",),
    "head": ("lm_head",),
    "embed_tokens": ("embed",),
    "wte": ("embed",),
    "tok_embeddings": ("embed",),
    "embed": ("embed",),
}


def _vector_adapter_targets(
    plan: TrainingPlan, peft: str, arch: ModelArch, assumptions: list[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(targets, IA3 feedforward targets) of an IA3 or VeRA adapter: the config's, else peft's defaults for the
    family (knowledge/peft_methods.py: peft 0.21.2 utils/constants.py), never the frameworks' LoRA defaults. IA3's
    feedforward modules default to the family's among the targets (peft `_prepare_adapter_config`)."""
    defaults = peft_methods.default_targets(peft, arch.family)
    name = "IA3" if peft == "ia3" else "VeRA"
    targets: tuple[str, ...] = ()
    if plan.lora_targets is not None:
        targets, unknown = normalize_targets(list(plan.lora_targets.value), arch)
        if unknown:
            assumptions.append(Approximate(f"{name} targets not recognised and ignored: {', '.join(unknown)}"))
    if not targets:
        if defaults is None:
            assumptions.append(
                Approximate(
                    f"peft has no default {name} targets for `{arch.family}` (it asks for "
                    f"target_modules): assumed q and v"
                )
            )
            targets = ("q", "v")
        else:
            targets = defaults[0]
    feedforward: tuple[str, ...] = ()
    if peft == "ia3":
        if plan.feedforward_targets is not None:
            feedforward, _ = normalize_targets(list(plan.feedforward_targets.value), arch)
        elif defaults is not None:
            feedforward = defaults[1]
        feedforward = tuple(t for t in feedforward if t in targets or "all-linear" in targets)
    return targets, feedforward


def _adapter_rank(plan: TrainingPlan, peft: str, val) -> int:
    """LoRA/DoRA rank (the framework's default when unset); VeRA's rank of its shared projections, peft's 256
    (VeraConfig.r, ms-swift `vera_rank`) unless the config sets it; 0 without a rank."""
    if peft == "vera":
        return int(plan.lora_r.value) if plan.lora_r is not None and plan.lora_r.value else peft_methods.VERA_DEFAULT_R
    if peft in ("none", "ia3"):
        return 0
    return int(val("lora_r") or 8)


def normalize_targets(names: list[str], arch: ModelArch) -> tuple[tuple[str, ...], list[str]]:
    """Framework module names → canonical targets; returns (targets, names not understood)."""
    out: list[str] = []
    unknown: list[str] = []
    for raw in names:
        n = str(raw).strip().strip("'\"")
        low = n.lower()
        if low in ("all-linear", "all_linear", "all", "linear"):
            return ("all-linear",), []
        key = low.split(".")[-1]
        mapped = LORA_NAME_MAP.get(key) or LORA_NAME_MAP.get(low)
        if mapped is None:
            unknown.append(n)
            continue
        gated = arch.mlp in ("swiglu", "geglu")
        for m in mapped:
            if m in ("gate", "up", "down") and not gated:
                m = {"gate": "fc1", "up": "fc1", "down": "fc2"}[m]
            elif m in ("fc1", "fc2") and gated and key in ("mlp",):
                continue
            if m not in out:
                out.append(m)
    return tuple(out), unknown


def expanded_arch(arch: ModelArch, added: int) -> ModelArch:
    """The model with `added` copies of its decoder block inserted (LLaMA-Pro's block expansion, arXiv:2401.02415;
    ms-swift v4.5.2 swift/tuners/llamapro.py `LLaMAPro.prepare_model` deep-copies every (L/n)-th block into the
    module list and sets `num_hidden_layers` to the new depth): every per-layer count grows with the depth."""
    from vramlens.knowledge.models import param_count

    bare = arch.model_copy(update={"params_total": 0})
    grown = arch.layers + added
    update: dict = {"layers": grown}
    if arch.params_total:
        update["params_total"] = (
            arch.params_total + param_count(bare.model_copy(update={"layers": grown})) - param_count(bare)
        )
    if arch.layer_kinds:
        update["layer_kinds"] = tuple((kind, round(n * grown / arch.layers)) for kind, n in arch.layer_kinds)
    return arch.model_copy(update=update)


def _value(plan: TrainingPlan, concept: str, defaults: dict, fw_label: str, sources: dict):
    s = getattr(plan, concept, None)
    if s is not None:
        sources[concept] = s
        return s.value
    if concept in defaults:
        v = defaults[concept]
        sources[concept] = Sourced(
            value=v, origin=Origin.DEFAULT, framework=getattr(defaults, "labels", {}).get(concept, fw_label)
        )
        return v
    return None


def resolve(plan: TrainingPlan, settings: Settings | None = None) -> Resolution:
    from vramlens.knowledge import optimizers

    settings = settings or Settings()
    fw_key, fw_label, defaults = frameworks.defaults_for(
        plan.framework, plan.objective.value if plan.objective is not None else None, settings
    )
    behaviour = frameworks.BEHAVIOUR[fw_key]
    sources: dict[str, Sourced] = {}
    assumptions: list[str] = list(plan.read_notes)

    def val(concept: str):
        return _value(plan, concept, defaults, fw_label, sources)

    # model
    if plan.model_id is None:
        arch = arch_from_sizes(plan)
        if arch is None:
            raise ResolveError(no_model_message(plan), "model_id")
        vocab_note = (
            ""
            if _size(plan, "vocab_size", "padded_vocab_size")
            else f"; vocabulary assumed {arch.vocab:,} (GPT-2's, padded as GPT-NeoX pads it)"
        )
        note = f"model given by its sizes: {arch.layers} layers, hidden {arch.hidden}, {arch.heads} heads{vocab_note}"
        assumptions.append(Approximate(note) if vocab_note else note)
    else:
        arch = _model(plan.model_id.value, settings, assumptions)
    if plan.model_id is not None:
        sources["model_id"] = plan.model_id
    positions = _extra_value(plan, "torchtune_max_seq_len")
    if fw_key == "torchtune" and isinstance(positions, int) and arch.max_position != positions:
        arch = arch.model_copy(update={"max_position": positions})  # the builder's RoPE positions
    added = val("added_layers")
    if isinstance(added, int) and added > 0:
        arch = expanded_arch(arch, added)
        assumptions.append(f"{added} decoder block(s) added to the model: {arch.layers} layers")
    as_run = frameworks.arch_as_run(fw_key, arch)
    if as_run is not arch:
        arch = as_run
        assumptions.append(
            f"{fw_label} keeps the LM head apart from the token embedding: {arch.vocab:,} × "
            f"{arch.hidden} more weights than the tied checkpoint"
        )

    # GPU: settings win, then the file, then a default
    gpu, count, count_given = _gpu(plan, settings, sources, assumptions)

    # precision
    amp_dtype = val("amp_dtype") or "none"
    weight_dtype = val("weight_dtype") or "auto"
    if weight_dtype == "auto":
        weight_dtype = arch.stored_dtype if arch.stored_dtype in ("fp32", "bf16", "fp16") else "bf16"
        sources["weight_dtype"] = Sourced(
            value=weight_dtype,
            origin=Origin.DERIVED,
            note="dtype auto → the checkpoint's stored dtype",
            framework=fw_label,
        )
    if weight_dtype not in ("fp32", "bf16", "fp16"):
        weight_dtype = "bf16"
    if amp_dtype in ("bf16", "fp16") and plan.framework in ("axolotl",) and plan.weight_dtype is None:
        weight_dtype = amp_dtype  # axolotl loads the model in the training dtype
    if fw_key == "ms-swift" and plan.amp_dtype is None:
        # ms-swift 4.x swift/llm/argument/base_args/model_args.py `_init_mixed_precision`: bf16 weights → `bf16=True`,
        # fp16/fp32 weights → `fp16=True` (autocast over the loaded dtype; DeepSpeed keeps fp32 master weights)
        amp_dtype = "bf16" if weight_dtype == "bf16" else "fp16"
        sources["amp_dtype"] = Sourced(
            value=amp_dtype,
            origin=Origin.DERIVED,
            framework=fw_label,
            note=f"ms-swift turns torch_dtype {weight_dtype} into `{amp_dtype}: true`",
        )
    if amp_dtype == "bf16" and not gpu.bf16:
        assumptions.append(no_bf16_note(gpu.name))
    amp = weight_dtype == "fp32" and amp_dtype in ("bf16", "fp16", "fp8")
    compute = weight_dtype if not amp else ("fp16" if amp_dtype == "fp16" else "bf16")
    if compute == "fp16" and amp_dtype == "bf16":
        compute = "bf16"

    # quantization / PEFT
    quant_bits = val("quant_bits")
    peft = val("peft_method") or "none"
    if quant_bits and peft in ("none", "freeze", "other"):
        peft = "lora"
        assumptions.append(Approximate("quantized base weights train only through adapters: assumed LoRA"))
    if quant_bits == 4 and peft == "lora":
        peft = "qlora"
    partial = _partial_training(plan, peft, val, sources, assumptions)
    if peft == "freeze":
        peft = "none"
    if peft not in ("none", "lora", "qlora", "dora", "ia3", "vera"):
        assumptions.append(Approximate(f"PEFT method `{peft}` estimated as full fine-tuning"))
        peft = "none"
    targets: tuple[str, ...] = ()
    feedforward: tuple[str, ...] = ()
    if peft in ("ia3", "vera"):
        targets, feedforward = _vector_adapter_targets(plan, peft, arch, assumptions)
    elif peft != "none":
        raw = val("lora_targets") or ["q", "v"]
        targets, unknown = normalize_targets(list(raw), arch)
        if unknown:
            assumptions.append(Approximate(f"LoRA targets not recognised and ignored: {', '.join(unknown)}"))
        if not targets:
            targets = ("q", "v")
    modules_to_save, _ = normalize_targets(list(val("modules_to_save") or []), arch)

    head = str(val("task_head") or "causal-lm")
    if head != "causal-lm":
        assumptions.append(f"{head} head: no LM head and no vocabulary logits (a hidden × labels output layer)")

    # optimizer
    opt_text = val("optimizer") or "adamw_torch"
    opt = optimizers.lookup_optimizer(str(opt_text))
    if opt is None:
        opt = optimizers.lookup_optimizer("adamw_torch")
        assumptions.append(Approximate(f"unknown optimizer `{opt_text}`: estimated as AdamW"))
    impl = val("optimizer_impl") or (opt.default_impl if opt.default_impl != "none" else "fused")
    low_rank, low_rank_targets = 0, ()
    if opt.low_rank:
        # transformers trainer.py (GaLore/APOLLO optim_args): rank 128 unless `optim_args` says `rank=`;
        # LLaMA-Factory hparams/finetuning_args.py: galore_rank 16 / apollo_rank 16, galore_target "all"
        low_rank = int(val("optimizer_rank") or (16 if fw_key == "llamafactory" else 128))
        # transformers `optim_target_modules` names modules or patterns ("attn", "mlp", r".*.attn.*")
        named = []
        for name in val("optimizer_targets") or ["all-linear"]:
            words = set(re.split(r"[^a-z_]+", str(name).lower()))
            if words & {"attn", "self_attn", "attention", "self_attention"}:
                named += ["q_proj", "k_proj", "v_proj", "o_proj"]
            elif words & {"mlp", "feed_forward", "ffn"}:
                named.append("mlp")
            else:
                named.append(str(name))
        low_rank_targets, _ = normalize_targets(named, arch)
        low_rank_targets = low_rank_targets or ("all-linear",)
    proj_bits = val("optimizer_proj_bits") if opt.low_rank else None
    if (
        fw_key in ("transformers", "trl", "axolotl", "llamafactory", "unsloth")
        and opt.name == "adamw_torch"
        and plan.optimizer_impl is None
    ):
        impl = "foreach"

    # distribution
    strategy = val("dist_strategy") or "none"
    zero = val("zero_stage") or 0
    world, count = _world(plan, settings, count, count_given, sources)
    tp = val("tensor_parallel") or 1
    cp = val("context_parallel") or 1
    pp = val("pipeline_parallel") or 1
    dp = max(1, int(world) // max(1, int(tp) * int(cp) * int(pp)))
    if strategy == "none" and dp > 1:
        strategy = "ddp"
    # FSDP2 shards over the data-parallel and context-parallel ranks together: the context-parallel ranks compute
    # gradients of the same weights, so the sharding mesh folds them in (torchtitan v0.2.2
    # torchtitan/distributed/parallel_dims.py `build_mesh`: "fsdp: ... This includes dp_shard and cp", used by
    # models/llama3/infra/parallelize.py `apply_fsdp`; NeMo AutoModel v0.5.0 components/distributed/mesh_utils.py
    # `get_fsdp_dp_mesh` → the `dp_shard_cp` mesh; accelerate 1.15 parallelism_config.py `fsdp_dim_names` →
    # `dp_shard_cp`). Megatron's distributed optimizer folds them in itself (components.megatron_dp); DeepSpeed's
    # ZeRO shards over its data-parallel group.
    shard_ranks = dp * int(cp) if strategy == "fsdp" else dp
    if strategy in ("deepspeed", "fsdp") and int(zero or 0) > 0 and shard_ranks == 1:
        assumptions.append(
            f"{'ZeRO' if strategy == 'deepspeed' else 'FSDP'} sharding with one GPU shards nothing: "
            "set the GPU count (launcher flag, `# vramlens: gpu=... count=N`, or --num-gpus)"
        )
    adapter_fp32 = behaviour["adapter_fp32"]
    trainable_fp32 = False
    upcast = val("trainable_fp32")
    if upcast and strategy == "megatron":
        upcast = False  # LLaMA-Factory's Megatron workflow (mcore_adapter) casts itself
    if upcast and not quant_bits and ((strategy == "deepspeed" and int(zero or 0) >= 3) or strategy == "fsdp"):
        # LLaMA-Factory 01d87b82 src/llamafactory/model/adapter.py `init_adapter`: "ZeRO3 / FSDP detected, remaining
        # trainable params in float32" — no upcast; the sharding engine keeps the fp32 copy
        upcast = False
    if upcast is not None and fw_key == "llamafactory":
        adapter_fp32 = bool(upcast)  # pure_bf16 (or ZeRO-3/FSDP without quantization): 16-bit adapters
    if upcast and peft == "none":
        if partial["trained_layers"] is None:
            weight_dtype = "fp32"  # every weight trains: fp32 weights under autocast
            amp = amp_dtype in ("bf16", "fp16", "fp8")
            compute = ("fp16" if amp_dtype == "fp16" else "bf16") if amp else "fp32"
        elif weight_dtype != "fp32":
            trainable_fp32 = True  # the trained layers in fp32, the frozen rest as loaded
        assumptions.append(
            f"{fw_label} upcasts the trainable weights to fp32 (no `pure_bf16`): "
            f"{'fp32 weights' if partial['trained_layers'] is None else 'fp32 trained layers'}"
            f"{', bf16 autocast' if amp_dtype == 'bf16' else ''}"
        )
    master = strategy == "deepspeed" and amp_dtype in ("bf16", "fp16") and peft == "none"
    if master:
        weight_dtype, compute, amp = (
            ("fp16" if amp_dtype == "fp16" else "bf16"),
            ("fp16" if amp_dtype == "fp16" else "bf16"),
            False,
        )
    if opt.name == "badam" and peft == "none" and strategy != "deepspeed" and weight_dtype != "fp32":
        # BAdam (Ledzy/BAdam bf989dcb src/badam/block_optim.py `switch_trainable_params`, `step_single_gpu`): the
        # active block's 16-bit weights get an fp32 copy (`param.clone().float()`) that Adam updates with fp32 states,
        # copied back to the 16-bit weights after each step (under ZeRO-3 DeepSpeed keeps that copy instead)
        master = True

    seq = val("seq_len")
    objective = plan.objective.value if plan.objective is not None else "sft"
    if seq is None and objective in ("dpo", "kto", "orpo", "cpo", "simpo", "rm") and fw_key in ("trl", "axolotl"):
        seq = 1024  # trl 1.16.0 dpo_config.py (and KTO/ORPO/CPO/Reward configs): max_length=1024
        sources["seq_len"] = Sourced(
            value=seq,
            origin=Origin.DEFAULT,
            framework="trl 1.16",
            note="TRL's preference configs truncate to max_length=1024",
        )
    if seq is None and objective not in ("ppo", "grpo", "rloo", "online-dpo"):
        seq = ASSUMED_SEQ_LEN
        why = (
            f"{fw_label} has no sequence-length setting (the script's tokenization decides)"
            if "seq_len" not in defaults
            else "sequence length not set"
        )
        taken = f"{seq} tokens"
        if arch.max_position and arch.max_position < seq:
            seq = arch.max_position
            taken = f"the model's max_position_embeddings, {seq} tokens"
        sources["seq_len"] = Sourced(value=seq, origin=Origin.ASSUMED, note=f"{why}; {taken}")
        assumptions.append(Approximate(f"{why}: assumed {taken}"))
    alloc = val("alloc_conf") or ""
    attn = val("attn_impl") or "sdpa"
    micro = int(val("micro_batch") or 1)
    ga = int(val("grad_accum") or 1)
    if plan.global_batch is not None and plan.grad_accum is None:
        ga = max(1, plan.global_batch.value // max(1, micro * dp))
        sources["grad_accum"] = Sourced(value=ga, origin=Origin.DERIVED, note="global batch ÷ (micro batch × GPUs)")
    # the quantization settings (and their framework defaults: axolotl's and LLaMA-Factory's double quantization)
    # only for a quantized model: a 16-bit run has none to list
    qval = val if quant_bits else (lambda concept: None)
    storage = qval("quant_storage_dtype")
    bnb_pinned = environment.workspace_pins(settings.workspace).get("bitsandbytes")
    bnb_version = (
        settings.framework_versions.get("bitsandbytes")
        or (bnb_pinned.version if bnb_pinned else None)
        or frameworks.BITSANDBYTES.get(fw_key)
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

    env = environment.versions(settings)
    tv = env["transformers"].version if fw_key in frameworks.HF_MODEL_FRAMEWORKS else None
    masked = not bool(val("packing")) and behaviour.get("attn_mask", True)
    hf_model = fw_key in frameworks.HF_MODEL_FRAMEWORKS
    loss_impl = val("loss_impl") or "standard"
    run = versions.as_run(arch.family, attn, tv, hf_model=hf_model, masked=masked, loss_impl=loss_impl)
    if hf_model:
        t_label = f"transformers {env['transformers'].version} ({env['transformers'].source})"
        if run.attention != attn and arch.family in versions.OWN_EAGER_ATTENTION:
            assumptions.append(
                f"{t_label}: {arch.family} writes its attention out in its modelling code: "
                f"eager attention whatever attn_implementation says"
            )
        elif run.attention != attn:
            assumptions.append(f"{t_label}: Gemma-2 has no SDPA path (`_supports_sdpa = False`): eager attention")
        if run.attention == "sdpa" and not versions.sdpa_repeats_kv(tv, masked):
            assumptions.append(f"{t_label}: SDPA reads grouped K/V natively without a mask (no repeat_kv)")
        if run.loss_shifted_copy:
            assumptions.append(
                f"{t_label}: the loss keeps a shifted fp32 copy of the logits (ForCausalLMLoss before 4.49)"
            )
        elif loss_impl == "standard":
            assumptions.append(f"{t_label}: the loss shifts the labels, not the logits (no fp32 copy of them)")
        if run.attention == "sdpa" and masked and versions.sdpa_repeats_kv(tv, False) and arch.n_kv_heads < arch.heads:
            assumptions.append(f"{t_label}: SDPA repeats grouped K/V to every head (repeat_kv before 4.54)")
    attn = run.attention
    keeps_block_grads = _fsdp_keeps_block_grads(plan, val, arch.family, fw_key, strategy, peft, tv)
    if keeps_block_grads:
        assumptions.append(
            f"transformers {env['transformers'].version} ({env['transformers'].source}) checkpoints "
            "each layer around its FSDP unit (reentrant): FSDP1 keeps every layer's checkpointed input "
            "and its gradient until the backward ends"
        )

    kbit_upcast, kbit_embeddings_16bit = behaviour["kbit_upcast"], False
    if fw_key == "trl" and quant_bits and peft != "none" and objective == "sft":
        sharded = strategy == "fsdp" or (strategy == "deepspeed" and int(zero or 0) >= 3)
        prep = versions.trl_sft_kbit(env["trl"].version, bf16=compute == "bf16", sharded=sharded)
        kbit_upcast, kbit_embeddings_16bit, adapter_fp32 = prep
        trl_label = f"TRL {env['trl'].version} ({env['trl'].source}) SFTTrainer"
        if prep.upcast:
            assumptions.append(
                f"{trl_label}: prepare_model_for_kbit_training puts every weight that is not {quant_bits}-bit "
                f"in fp32{', then the embeddings and LM head back in bf16' if prep.embeddings_16bit else ''}"
            )
        elif not sharded:
            assumptions.append(f"{trl_label}: no k-bit preparation (from 0.26); the adapters train in bf16")
        else:
            assumptions.append(f"{trl_label}: sharded k-bit model: no k-bit preparation, 16-bit adapters")

    rp = ResolvedPlan(
        arch=arch,
        framework=fw_key,
        weight_dtype=weight_dtype,
        compute_dtype=compute,
        amp=amp,
        fsdp_mixed_precision=amp and strategy == "fsdp" and bool(val("fsdp_mixed_precision")),
        micro_batch=micro,
        grad_accum=ga,
        seq_len=int(seq or 2048),
        packing=bool(val("packing")),
        eval_batch=int(val("eval_batch") or micro),
        grad_checkpointing=bool(val("grad_checkpointing")),
        activation_offload=bool(val("activation_offload")),
        attn_impl=attn
        if attn in ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention", "xformers")
        else "other",
        repeat_kv=run.repeat_kv,
        loss_shifted_copy=run.loss_shifted_copy,
        versions=tuple((k, v.version, v.source) for k, v in env.items()),
        attn_mask=not bool(val("packing")) and behaviour.get("attn_mask", True),
        compile=bool(val("compile")),
        rope_caches=frameworks.torchtune_rope_caches(
            _extra_value(plan, "torchtune_builder"), arch.family, peft, arch.layers
        )
        if fw_key == "torchtune"
        else 1,
        loss_impl=val("loss_impl") or "standard",
        keep_logits=behaviour["keep_logits"],
        fused_kernels=tuple(k for k in val("fused_kernels") or () if k in FUSED_KERNELS),
        float8_linears=bool(val("float8_linears")),
        optimizer=opt,
        optimizer_impl=impl if impl in ("foreach", "fused", "forloop") else "fused",
        optimizer_in_bwd=bool(val("optimizer_in_bwd")),
        set_to_none=bool(val("zero_grad_set_to_none") if val("zero_grad_set_to_none") is not None else True),
        master_weights=master,
        peft=peft,
        lora_r=_adapter_rank(plan, peft, val),
        lora_alpha=float(val("lora_alpha") or 16) if peft not in ("none", "ia3", "vera") else 0.0,
        lora_dropout=(
            float(val("lora_dropout") or 0.0)
            if peft not in ("none", "ia3", "vera")
            else float(plan.lora_dropout.value or 0.0)
            if peft == "vera" and plan.lora_dropout
            else 0.0
        ),
        lora_targets=targets,
        feedforward_targets=feedforward,
        modules_to_save=modules_to_save,
        adapter_fp32=adapter_fp32,
        kbit_upcast=kbit_upcast,
        kbit_embeddings_16bit=kbit_embeddings_16bit,
        trainable_fp32=trainable_fp32,
        low_rank=low_rank,
        low_rank_targets=low_rank_targets,
        low_rank_proj_quant=isinstance(proj_bits, int) and proj_bits < 16,
        **partial,
        quant_bits=quant_bits,
        quant_type=str(qval("quant_type") or "nf4"),
        quant_double=bool(qval("quant_double")),
        quant_storage=storage if storage in ("bf16", "fp16", "fp32") else "uint8",
        quant_keeps_input=keeps_input,
        **frameworks.step_flags(fw_key),
        strategy=strategy,
        zero_stage=int(zero) if strategy in ("deepspeed", "fsdp") else 0,
        world_size=shard_ranks,
        offload_optimizer=bool(val("offload_optimizer")),
        offload_params=bool(val("offload_params")),
        tensor_parallel=int(tp),
        context_parallel=int(cp),
        pipeline_parallel=int(pp),
        **_megatron_layout(val),
        **_partial_checkpointing(val),
        fsdp_full_state_dict=str(val("fsdp_state_dict_type") or "").upper().startswith("FULL"),
        fsdp_keeps_block_grads=keeps_block_grads,
        scalar_head=head != "causal-lm",
        gpu=gpu,
        gpu_count=count,
        expandable_segments="expandable_segments:true" in alloc.replace(" ", "").lower(),
        headroom=settings.headroom,
    )
    if arch.vision_params:
        frozen = peft != "none" or fw_key in frameworks.FREEZES_VISION
        told = plan.extra.get("freeze_vision_tower") or plan.extra.get("freeze_vit")  # LLaMA-Factory / ms-swift
        if told is not None and peft == "none" and str(told.value).strip().lower() in ("false", "0", "no"):
            frozen = False
            sources["vision_frozen"] = told
        images, why, said = images_per_sequence(plan, arch)
        if said is not None:
            sources["images_per_sequence"] = said
        budget, patches = _image_budget(plan, arch, fw_key)
        if images and patches and arch.family in DYNAMIC_RESOLUTION:
            rp = rp.with_changes(arch=arch.model_copy(update={"image_patches": patches, "image_tokens": patches // 4}))
            arch = rp.arch
            sources["image_patches"] = budget
        rp = rp.with_changes(vision_frozen=frozen, images_per_sequence=images)
        if images and arch.family == "gemma3_text" and not masked and run.attention == "sdpa":
            # Gemma-3's image batches carry token_type_ids, from which the model builds explicit masks for every layer
            # (estimate/components.py `image_block_mask`): grouped K/V as under a padding mask
            rp = rp.with_changes(
                repeat_kv=versions.as_run(
                    arch.family, attn, tv, hf_model=hf_model, masked=True, loss_impl=loss_impl
                ).repeat_kv
            )
        if images:
            batches = f"one image of {arch.image_patches:,} patches per sequence ({why})"
        else:
            batches = (
                f"text-only batches ({why}): the tower runs on no image, so its weights get no gradient or "
                f"optimizer state and it saves no activations"
            )
        assumptions.append(
            f"vision tower: {arch.vision_params / 1e9:.2f} B parameters, "
            + ("frozen" if rp.vision_frozen else "trained")
            + f"; {batches}"
        )
    if quant_bits and rp.quant_type in PREQUANTIZED_NOTES:
        assumptions.append(Approximate(PREQUANTIZED_NOTES[rp.quant_type]))
    rp = rp.with_changes(**objective_fields(plan, rp, fw_key, settings, sources, assumptions))
    rp = rp.with_changes(unmodelled=tuple(plan.unmodelled), approximate=approximate_reasons(plan, assumptions))
    return Resolution(rp, sources, assumptions)  # uncalibrated: `calibration.calibrate` is the next stage


# Vision-language families whose model is also what a text fine-tune loads: transformers 5.24
# models/auto/modeling_auto.py maps `gemma3` in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES to Gemma3ForConditionalGeneration, so
# AutoModelForCausalLM (TRL's SFTTrainer, axolotl, run_clm) builds the vision tower of a Gemma-3 4B/12B/27B checkpoint
# and trains it on text. The other VLMs in the catalog (Qwen-VL, LLaVA) have no causal-LM mapping: they are loaded as
# image-text-to-text models, for image data.
TEXT_PATH_VLM_FAMILIES = frozenset({"gemma3_text"})
# VLMs whose image processor resizes to a pixel budget instead of a fixed size (Qwen2-VL, Qwen2.5-VL, Qwen3-VL:
# transformers 5.24 models/qwen2_vl/image_processing_qwen2_vl.py `smart_resize`, `max_pixels`)
DYNAMIC_RESOLUTION = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl_text"})


def _image_budget(plan: TrainingPlan, arch: ModelArch, fw_key: str) -> tuple[Any, int | None]:
    """The setting that caps a Qwen-VL image and the patches it allows, or (None, None). Qwen-VL resizes each image to
    at most a pixel budget (LLaMA-Factory `image_max_pixels`; ms-swift `--max_pixels`, which rescales before the
    processor, and `MAX_PIXELS` in the environment) cut into patches of vision_patch², 2 × 2 of them merged into one
    token; ms-swift's `IMAGE_MAX_TOKEN_NUM` caps those tokens (qwen-vl-utils 0.0.14 vision_process.py: max_pixels =
    IMAGE_MAX_TOKEN_NUM × (patch × merge)²). Where several are set, the tightest holds."""
    if not arch.vision_patch:
        return None, None
    pixel_keys = ("image_max_pixels", "max_pixels") + (("MAX_PIXELS",) if fw_key == "ms-swift" else ())
    token_keys = ("IMAGE_MAX_TOKEN_NUM",) if fw_key == "ms-swift" else ()
    caps = []
    for key in pixel_keys + token_keys:
        said = plan.extra.get(key)
        n = _whole(said.value) if said is not None else None
        if n:
            caps.append((4 * n if key in token_keys else max(1, n // arch.vision_patch**2), said))
    if not caps:
        return None, None
    patches, said = min(caps, key=lambda c: c[0])
    return said, patches


def _extra_value(plan: TrainingPlan, key: str) -> Any:
    said = plan.extra.get(key)
    return None if said is None else said.value


def _whole(value) -> int | None:
    """A positive whole number written as one (262144, "262144", "512*512"), else None."""
    text = str(value).replace("_", "").strip()
    try:
        parts = [int(p) for p in text.split("*")] if text else []
    except ValueError:
        return None
    out = 1
    for p in parts:
        out *= p
    return out if parts and 0 < out < 2**40 else None


# LLaMA-Factory templates of multimodal models (src/llamafactory/data/template.py: templates registered with an
# `mm_plugin`) that only vision-language checkpoints use; `gemma3`, `llama4` and `mistral_small` also format those
# families' text fine-tunes, so they say nothing about images
MLLM_TEMPLATES = frozenset(
    {
        "qwen2_vl",
        "qwen3_vl",
        "qwen3_vl_nothink",
        "llava",
        "llava_next",
        "llava_next_video",
        "mllama",
        "paligemma",
        "pixtral",
        "minicpm_v",
        "intern_vl",
        "glm4v",
        "kimi_vl",
        "video_llava",
        "qwen2_omni",
    }
)
IMAGE_KEYS = (
    "image_max_pixels",
    "image_min_pixels",
    "image_resolution",
    "processor_type",
    "image_size",
    "image_resize_algorithm",
    "max_pixels",
    "min_pixels",
    "MAX_PIXELS",
    "IMAGE_MAX_TOKEN_NUM",
)
IMAGE_TEXT_LOADERS = ("AutoModelForImageTextToText", "AutoModelForVision2Seq", "FastVisionModel")
_SKIP_PREPARE = re.compile(r"skip_prepare_dataset['\"]?\s*[:=]\s*(?:True|true|1)\b")


def images_per_sequence(plan: TrainingPlan, arch: ModelArch) -> tuple[int, str, Any]:
    """Images per sequence in a VLM's batches (0 or 1), why, and the setting that says so (or None). One image where
    the config shows image data: LLaMA-Factory's image resolution keys or a multimodal template (`template:
    qwen2_vl`), axolotl's `processor_type` / `image_size`, ms-swift's `max_pixels` (flag or environment) and
    `IMAGE_MAX_TOKEN_NUM`, TRL's VLM recipe
    (`dataset_kwargs: {skip_prepare_dataset: true}`, AutoModelForImageTextToText in its vision scripts); none where a
    Gemma-3 checkpoint is fine-tuned through the text path (AutoModelForCausalLM on a text dataset); one for the VLMs
    loaded only as image-text-to-text models."""
    for key in IMAGE_KEYS:
        said = plan.extra.get(key)
        if said is not None and said.value not in (None, "", False):
            return 1, f"`{key}` sets up the image processor", said
    said = plan.extra.get("template")
    if said is not None and str(said.value).strip().lower() in MLLM_TEMPLATES:
        return 1, f"the multimodal template `{said.value}`", said
    said = plan.extra.get("model_class")
    if said is not None and str(said.value) in IMAGE_TEXT_LOADERS:
        return 1, f"the model is loaded with `{said.value}` for image-text data", said
    said = plan.extra.get("dataset_kwargs")
    if said is not None and _SKIP_PREPARE.search(str(said.value)):
        return 1, "`skip_prepare_dataset`: the vision collator builds the batches", said
    if arch.family in TEXT_PATH_VLM_FAMILIES:
        return (
            0,
            (
                "a Gemma-3 multimodal checkpoint fine-tuned as a causal LM with nothing in the config pointing "
                "at image data"
            ),
            None,
        )
    return 1, f"a {arch.family} vision-language model is trained on image data", None


def _megatron_layout(val) -> dict:
    """The Megatron-core layout settings of the plan, as ResolvedPlan fields (their defaults when unset)."""
    out = {
        "virtual_pipeline": int(val("virtual_pipeline") or 1),
        "expert_parallel": int(val("expert_parallel") or 1),
        "sequence_parallel": bool(val("sequence_parallel")),
        "distributed_optimizer": bool(val("distributed_optimizer")),
        "recompute_layers": int(val("recompute_layers") or 1),
    }
    if val("expert_tensor_parallel"):
        out["expert_tensor_parallel"] = int(val("expert_tensor_parallel"))
    if val("recompute_method") in ("uniform", "block"):
        out["recompute_method"] = val("recompute_method")
    return out


def _partial_checkpointing(val) -> dict:
    """Checkpointing of some blocks or some ops, the vocabulary-parallel loss and whether a compiled model's loss is
    compiled too, as ResolvedPlan fields."""
    every = val("checkpoint_every")
    mode = val("selective_recompute")
    return {
        "checkpoint_every": int(every) if isinstance(every, int) and every >= 1 else 1,
        "selective_recompute": mode if mode in ("op", "core_attention") else "none",
        "loss_parallel": bool(val("loss_parallel")),
        "compile_loss": val("compile_loss") is not False,
    }


def _fsdp_keeps_block_grads(
    plan: TrainingPlan, val, family: str, fw_key: str, strategy: str, peft: str, transformers: str | None
) -> bool:
    """FSDP1 + the Trainer's reentrant checkpointing around each unit + LoRA (knowledge/versions.py)."""
    if strategy != "fsdp" or not val("grad_checkpointing") or fw_key not in frameworks.HF_TRAINER_FRAMEWORKS:
        return False
    reentrant = val("ckpt_reentrant")
    return versions.fsdp1_keeps_block_grads(
        family,
        transformers,
        fsdp_version=int(val("fsdp_version") or 1),
        reentrant=True if reentrant is None else bool(reentrant),
        lora=peft in ("lora", "qlora", "dora"),
    )


def _partial_training(plan: TrainingPlan, peft: str, val, sources: dict, assumptions: list[str]) -> dict:
    """Which weights a partial full fine-tune trains (freeze tuning, LLaMA-Pro, LISA): `trained_layers` of the
    decoder layers, `trained_modules` inside them and `trained_extra` outside them (components.trained_params)."""
    out = {"trained_layers": None, "trained_modules": (), "trained_extra": (), "trained_where": "last"}
    if peft != "freeze" and plan.trained_layers is None:
        return out
    layers = val("trained_layers")
    if layers is None:
        assumptions.append(Approximate("which layers train is not known: estimated as a full fine-tune"))
        return out
    modules = [str(m).strip().lower() for m in (val("trained_modules") or [])]
    canon: list[str] = []
    for m in modules:
        if m in ("all", ""):
            canon = []
            break
        if m in ("self_attn", "attn", "attention", "self_attention"):
            canon.append("attn")
        elif m in ("mlp", "feed_forward", "ffn", "block_sparse_moe"):
            canon.append("mlp")
    extra = []
    for m in val("trained_extra") or []:
        low = str(m).strip().lower()
        if low in ("embed_tokens", "wte", "embed", "tok_embeddings", "word_embeddings"):
            extra.append("embed")
        elif low in ("lm_head", "output", "head"):
            extra.append("lm_head")
    where = str(val("trained_where") or "last")
    out.update(
        trained_layers=abs(int(layers)),
        trained_modules=tuple(dict.fromkeys(canon)),
        trained_extra=tuple(dict.fromkeys(extra)),
        trained_where=where if where in ("last", "first", "spread", "rotating") else "last",
    )
    assumptions.append(
        f"partial fine-tuning: {abs(int(layers))} layer(s) train"
        + (f" ({', '.join(out['trained_modules'])})" if out["trained_modules"] else "")
        + (f" with {', '.join(out['trained_extra'])}" if out["trained_extra"] else "")
        + "; gradients and optimizer states only for those, activations only for the layers the "
        "backward runs through (from the lowest trained one up)"
    )
    return out


PAIRED = ("dpo", "orpo", "simpo", "cpo", "rm")
ONLINE = ("ppo", "grpo", "rloo", "online-dpo")


def objective_fields(
    plan: TrainingPlan, rp: ResolvedPlan, fw_key: str, settings: Settings, sources: dict, assumptions: list[str]
) -> dict:
    """What the objective changes in the step: paired sequences, the reference model, generation,
    reward/value models, the teacher. Semantics from trl 1.16.0 (trainer/dpo_trainer.py `_compute_loss`: chosen
    and rejected concatenated into one batch, the reference forward under no_grad after the policy's; with a
    PEFT model and no `ref_model` the adapters are disabled instead of loading a copy; `precompute_ref_log_probs`
    drops the reference; grpo_config.py `beta=0.0` loads no reference, rloo_config.py `beta=0.05` does;
    `generation_batch_size = per_device_train_batch_size × steps_per_generation`, `steps_per_generation` defaulting
    to `gradient_accumulation_steps`; vLLM colocated with `vllm_gpu_memory_utilization=0.3`)."""
    from vramlens.knowledge import models

    obj = plan.objective.value if plan.objective is not None else "sft"
    if plan.objective is not None:
        sources["objective"] = plan.objective
    else:
        sources["objective"] = Sourced(
            value="sft",
            origin=Origin.DEFAULT,
            framework=fw_key,
            note="no preference, RL or distillation setting: supervised fine-tuning",
        )
    out: dict = {"objective": obj}
    if obj == "sft" or obj == "pretrain":
        return out

    def src(name: str):
        s = getattr(plan, name)
        if s is not None:
            sources[name] = s
            return s.value
        return None

    if obj in PAIRED:
        out["sequences_per_example"] = 2  # chosen + rejected in one concatenated forward
    if obj == "rm":
        out["scalar_head"] = True  # AutoModelForSequenceClassification: a 1-wide score head
    ref_free = src("reference_free")
    if ref_free is None:
        # TRL GRPO's KL coefficient defaults to 0.0 (no reference); RLOO's to 0.05; other frameworks keep one
        ref_free = obj == "grpo" and fw_key in ("trl", "axolotl", "transformers", "unsloth")
        if obj == "grpo" and ref_free:
            assumptions.append("GRPO with TRL's default beta=0.0: no reference model is loaded")
    needs_ref = (
        obj in ("dpo", "kto", "online-dpo", "ppo", "grpo", "rloo")
        and not ref_free
        and obj not in ("orpo", "simpo", "cpo", "rm")
    )
    if needs_ref and src("precompute_ref") and obj not in ONLINE:
        needs_ref = False
    if needs_ref:
        named = src("ref_model_id")
        out["reference"] = "adapters-off" if rp.peft != "none" and not named else "copy"
        if out["reference"] == "copy":
            dtype = src("ref_dtype")
            if dtype in ("fp32", "bf16", "fp16"):
                out["reference_dtype"] = dtype
            out["reference_offloaded"] = bool(src("ref_offload"))
    if obj in ONLINE:
        prompt = src("prompt_len")
        completion = src("completion_len")
        if prompt is None and plan.seq_len is not None and fw_key in ("torchtune", "llamafactory"):
            # torchtune's tokenizer max_seq_len / LLaMA-Factory's cutoff_len bound the prompt of a rollout
            prompt = int(plan.seq_len.value)
        if prompt is None:
            prompt = 512
            assumptions.append(
                Approximate("prompt length not set: assumed 512 tokens (TRL GRPO does not truncate prompts)")
            )
        if completion is None:
            completion = 512 if fw_key in ("trl", "axolotl", "transformers", "ms-swift", "unsloth") else 256
            sources["completion_len"] = Sourced(
                value=completion, origin=Origin.DEFAULT, framework="trl 1.16", note="max_completion_length=512"
            )
        gen = src("generation") or "generate"
        # samples per prompt: TRL's group size is inside its per-device batch (below); others default to one
        groups = src("num_generations") or 1
        if obj == "online-dpo":
            # trl 1.16.0 experimental/online_dpo/online_dpo_trainer.py: two completions per prompt
            # (`prompt_ids.repeat(2, 1)`), both through the policy in one forward
            gen_seqs = 2 * rp.micro_batch
            out["sequences_per_example"] = 2
        elif fw_key in ("trl", "axolotl", "transformers", "ms-swift", "unsloth"):
            # completions, not prompts, in the batch of TRL's GRPOTrainer (ms-swift's and axolotl's subclass it)
            gen_seqs = rp.micro_batch * max(rp.grad_accum, 1)  # generation_batch_size per device
        else:
            gen_seqs = rp.micro_batch * int(groups)
        share = src("vllm_memory_share")
        if gen == "vllm-colocate" and share is None:
            share = 0.3
            sources["vllm_memory_share"] = Sourced(
                value=share, origin=Origin.DEFAULT, framework="trl 1.16", note="vllm_gpu_memory_utilization=0.3"
            )
        out.update(
            seq_len=int(prompt) + int(completion),
            logits_tokens=int(completion),
            generation=gen,
            generations_per_example=int(gen_seqs) // max(rp.micro_batch, 1),
            generation_len=int(prompt) + int(completion),
            vllm_memory_share=float(share or 0.0) if gen == "vllm-colocate" else 0.0,
            generation_sleeps=gen == "vllm-colocate" and bool(src("generation_sleeps")),
        )
        if obj == "ppo":
            value = src("value_model")
            out["value_model"] = True if value is None else bool(value)
            out["reward_model"] = fw_key not in frameworks.REWARD_MODEL_WHEN_NAMED or src("reward_model_id") is not None
        elif src("reward_model_id") is not None:
            out["reward_model"] = True
    if obj in ("gkd", "kd"):
        tid = src("teacher_model_id")
        teacher = (
            models.find_model(tid, settings.workspace, hub_lookup(settings), settings.any_model_folder).arch
            if tid
            else None
        )
        if teacher is None:
            teacher = rp.arch
            assumptions.append(
                Approximate(
                    f"teacher model {'`' + tid + '` unknown' if tid else 'not named'}: assumed the size of the student"
                )
            )
        out["teacher"] = teacher
    return out


def hub_lookup(settings: Settings):
    """How this run asks the Hub for a config.json: None when the `model_lookup` setting turns it off."""
    from vramlens.knowledge import hub

    if not settings.model_lookup:
        return None
    return settings.hub_lookup or hub.fetch_config


def _model(name: str, settings: Settings, assumptions: list[str]) -> ModelArch:
    """The named model's architecture (`models.find_model`), or a ResolveError saying why there is none."""
    from vramlens.knowledge import models

    found = models.find_model(name, settings.workspace, hub_lookup(settings), settings.any_model_folder)
    if found.arch is not None:
        if found.where in ("local folder", "hub cache", "hub"):
            assumptions.append(f"model shapes from `{name}`'s config.json ({found.where})")
        elif found.where.startswith("the base model"):
            assumptions.append(f"model shapes of `{found.arch.id}`, {found.where}")
        if found.arch.approximate and found.arch.params_total:  # built by construction, partly generic
            assumptions.append(Approximate(f"approximate: `{found.arch.family}`: {found.arch.approximate}"))
        elif found.arch.approximate:
            assumptions.append(
                Approximate(
                    f"approximate: `{found.arch.family}` has no dedicated model in vramlens; "
                    f"estimated generically from its config's sizes ({found.arch.approximate})"
                )
            )
        return found.arch
    if problem := models.local_config_problem(name, settings.workspace, settings.any_model_folder):
        raise ResolveError(problem, "model_id")
    if (missing := _missing_path(name, settings)) is not None:
        raise ResolveError(f"model `{name}`: a local path, and {missing} does not exist", "model_id")
    if found.pending:
        raise ResolveError(f"looking up `{name}` on the Hugging Face Hub (its config.json only)…", "model_id")
    hints = models.suggest_model(name)
    hint = hints[0] if hints else None
    if not settings.model_lookup:
        hub_text = (
            "not looked up on the Hugging Face Hub (the `model_lookup` setting or --offline turns it off, "
            "and the editor asks the Hub only in a trusted workspace)"
        )
    elif found.problem:
        hub_text = found.problem
    else:
        hub_text = "not a Hugging Face Hub id"
    raise ResolveError(
        f"unknown model `{name}`: not in the catalog, not a local folder with config.json, not in "
        f"the local Hugging Face cache; {hub_text}" + (f" — did you mean `{hint}`?" if hint else ""),
        "model_id",
        hint,
    )


def _missing_path(name: str, settings: Settings) -> str | None:
    """The folder a path-like model name (`./models/x`, `/data/x`, `~/x`) points at when it does not exist."""
    from pathlib import Path

    from vramlens.file_access import expand_user

    n = name.strip()
    if not n.startswith(("/", "~", "./", "../")):
        return None
    path = expand_user(n)
    if not path.is_absolute() and settings.workspace is not None:
        path = Path(settings.workspace) / path
    return None if path.exists() else f"`{path}`"


_QUOTED_KEY = re.compile(r"`([^`]+)`")
NO_MODEL = "the config does not name a model"  # and gives no value for one: a partial config (DeepSpeed JSON)


def no_model_message(plan: TrainingPlan) -> str:
    """Why a plan has no model, naming the value the file gave for one when it gave one that could not be used
    (a `$MODEL` only known when the script runs, a value of the wrong type): the reader's own words for it."""
    for issue in plan.issues:
        m = _QUOTED_KEY.match(issue.message)
        key = m.group(1).lower().lstrip("-") if m else ""
        names_model = "model" in key.replace("model_max_length", "") or key.endswith("from_pretrained")
        if names_model and not key.startswith(("ref", "reward", "teacher")):
            line = f" (line {issue.span.start_line + 1})" if issue.span is not None else ""
            why = issue.message.split("; it is not read")[0]
            return f"the config does not name a model vramlens can use: {why}{line}"
    return NO_MODEL


def _size(plan: TrainingPlan, *keys: str):
    for k in keys:
        s = plan.extra.get(f"arch.{k}")
        if s is not None and isinstance(s.value, (int, float)) and not isinstance(s.value, bool) and s.value > 0:
            return int(s.value)
    return None


def arch_from_sizes(plan: TrainingPlan) -> ModelArch | None:
    """A model given by its sizes instead of a hub id (GPT-NeoX `num_layers`/`hidden_size`/…, nanoGPT
    `n_layer`/`n_head`/`n_embd`): a GELU MLP of 4h and LayerNorm unless the config says SwiGLU/RMSNorm."""
    layers = _size(plan, "num_layers", "n_layer")
    hidden = _size(plan, "hidden_size", "n_embd")
    heads = _size(plan, "num_attention_heads", "n_head")
    if not (layers and hidden and heads) or hidden % heads or max(layers, hidden, heads) > 1_000_000:
        return None

    def text(key: str) -> str:
        s = plan.extra.get(f"arch.{key}")
        return str(s.value).lower() if s is not None else ""

    gated = "glu" in text("activation")
    inter = _size(plan, "intermediate_size") or (int(8 * hidden / 3) if gated else 4 * hidden)
    if gated and inter > 4 * hidden:
        inter = inter // 3  # GPT-NeoX's SwiGLU intermediate_size is not the per-branch width
    untied = plan.extra.get("arch.no_weight_tying")
    return ModelArch(
        id=f"custom-{layers}L-{hidden}h",
        family="gpt_neox" if plan.extra.get("arch.num_layers") else "gpt2",
        mlp="swiglu" if gated else "gelu",
        norm="rmsnorm" if "rms" in text("norm") else "layernorm",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=_size(plan, "num_kv_heads"),
        intermediate=inter,
        vocab=_size(plan, "vocab_size", "padded_vocab_size") or 50304,
        tied_embeddings=not (untied is not None and bool(untied.value)),
        max_position=_size(plan, "max_position_embeddings", "block_size"),
        source="sizes read from the config file",
    )


def _gpu(plan: TrainingPlan, settings: Settings, sources: dict, assumptions: list[str]) -> tuple[GpuSpec, int]:
    from vramlens.knowledge import gpus

    count = None
    spec = None
    if settings.gpu:
        found = gpus.lookup_gpu(settings.gpu)
        if found is None:
            hints = gpus.suggest_gpu(settings.gpu)
            hint = hints[0] if hints else None
            raise ResolveError(
                f"unknown GPU `{settings.gpu}`" + (f" — did you mean `{hint}`?" if hint else ""), "gpu_name", hint
            )
        spec, count = found[0], found[1]
        sources["gpu_name"] = Sourced(value=spec.name, origin=Origin.SETTING)
    elif plan.gpu_name is not None:
        found = gpus.lookup_gpu(plan.gpu_name.value)
        if found is not None:
            spec, count = found[0], found[1]
            sources["gpu_name"] = plan.gpu_name
            if plan.gpu_name.origin == Origin.ASSUMED and plan.gpu_name.key == "comment":
                assumptions.append(
                    f"GPU {spec.name} {comment_gpu_phrase(plan.gpu_name)}: a comment is not a setting — {CHOOSE_GPU}"
                )
    if spec is None:
        spec, count = gpus.lookup_gpu(DEFAULT_GPU)[:2]
        sources["gpu_name"] = Sourced(value=spec.name, origin=Origin.ASSUMED, note=f"no GPU named; {CHOOSE_GPU}")
        assumptions.append(
            f"no GPU named in the config or settings (and none detected): assumed {spec.name} — {CHOOSE_GPU}"
        )
    if sources["gpu_name"].origin == Origin.ASSUMED or not count or count <= 1:
        given = None  # a GPU name without a count ("A100", not "8xA100")
    else:
        given = "setting" if sources["gpu_name"].origin == Origin.SETTING else "file"
    if settings.gpu_count:
        count = settings.gpu_count
        given = "setting"
        sources["gpu_count"] = Sourced(value=count, origin=Origin.SETTING)
    elif plan.gpu_count is not None and given != "setting":
        count = plan.gpu_count.value
        given = "file"
        sources["gpu_count"] = plan.gpu_count
    elif given is None and settings.machine_gpu_count and plan.world_size is None:
        count = settings.machine_gpu_count
        sources["gpu_count"] = Sourced(value=count, origin=Origin.SETTING, note="GPUs on this machine (nvidia-smi)")
    count = max(1, int(count or 1))
    return spec, count, given


def _world(
    plan: TrainingPlan, settings: Settings, count: int, count_given: str | None, sources: dict
) -> tuple[int, int]:
    """(processes in the run, GPUs per node). The settings' count (`--num-gpus`, `gpu = "8xH100"`) wins over
    what the file's launcher says, keeping its number of machines; a process count from the file (accelerate
    `num_processes`, `torchrun --nproc_per_node`, `deepspeed --num_gpus`, `CUDA_VISIBLE_DEVICES`) with no GPU
    count of its own is taken as that many GPUs on one machine."""
    world_file = plan.world_size.value if plan.world_size is not None else None
    if count_given == "setting":
        nodes = 1
        if world_file and plan.gpu_count is not None and plan.gpu_count.value:
            nodes = max(1, int(world_file) // int(plan.gpu_count.value))
        world = count * nodes
        if world_file and world != world_file:
            sources["world_size"] = Sourced(
                value=world, origin=Origin.SETTING, note=f"{count} GPUs per node from the settings × {nodes} node(s)"
            )
        return world, count
    if world_file:
        sources["world_size"] = plan.world_size
        if count_given is None:
            count = int(world_file)
            sources["gpu_count"] = Sourced(
                value=count, origin=Origin.DERIVED, note="the launcher's process count, on one machine"
            )
        return int(world_file), count
    return count, count
