"""How the Hugging Face keys are read: `TrainingArguments` (transformers `training_args.py`), TRL's configs and
`ModelConfig` (trl `trl/trainer/*_config.py`, `trl/trainer/model_config.py`), and the spellings of the scripts that
pass their arguments on to them. The key table (`keys.py`) says which key each reader serves; axolotl's and
LLaMA-Factory's tables reuse these readers for the keys they share.

Each reader is (builder, setting) -> None; a section reader of a dict-valued argument also takes the nested entries
by top-level key (`formats.hf.nested_index`).
"""

from __future__ import annotations

from typing import Callable

from vramlens.formats.settings import PlanBuilder, Setting, is_auto, to_bool, to_int
from vramlens.formats.vocab import HF_ATTENTION, check_optimizer
from vramlens.knowledge.liger import DEFAULT_KERNELS as LIGER_KERNELS
from vramlens.knowledge.liger import DEFAULT_KERNELS_NOTE as LIGER_KERNELS_NOTE
from vramlens.plan import IssueKind, Origin, Severity

DTYPE_WORDS = {
    "float32": "fp32",
    "fp32": "fp32",
    "torch.float32": "fp32",
    "float": "fp32",
    "32": "fp32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "torch.bfloat16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "16": "fp16",
    "float8": "fp8",
    "fp8": "fp8",
    "auto": "auto",
}

ATTN_WORDS = {
    "eager": "eager",
    "sdpa": "sdpa",
    "sdp": "sdpa",
    "flash_attention_2": "flash_attention_2",
    "flash_attn": "flash_attention_2",
    "fa2": "flash_attention_2",
    "flash": "flash_attention_2",
    "flash_attention_3": "flash_attention_3",
    "fa3": "flash_attention_3",
    "flex_attention": "flex_attention",
    "flex": "flex_attention",
    "xformers": "xformers",
    "kernels-community/flash-attn2": "flash_attention_2",
    "kernels-community/flash-attn3": "flash_attention_3",
    "kernels-community/vllm-flash-attn3": "flash_attention_3",
}

FSDP_WORDS = {"full_shard": 3, "shard_grad_op": 2, "hybrid_shard": 3, "hybrid_shard_zero2": 2, "no_shard": 0}
# accelerate's fsdp_sharding_strategy also takes the enum's integer (1..5)
FSDP_STRATEGIES = {
    "FULL_SHARD": 3,
    "SHARD_GRAD_OP": 2,
    "NO_SHARD": 0,
    "HYBRID_SHARD": 3,
    "HYBRID_SHARD_ZERO2": 2,
    "1": 3,
    "2": 2,
    "3": 0,
    "4": 3,
    "5": 2,
}


def normalize_dtype(value) -> str | None:
    if value is None:
        return None
    return DTYPE_WORDS.get(str(value).strip().lower())


def normalize_attn(value) -> str | None:
    if value is None:
        return None
    w = str(value).strip()
    return ATTN_WORDS.get(w.lower(), "other" if "/" in w else None)


def _targets(value) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip().strip("'\"") for p in value.strip("[]").replace(";", ",").split(",")]
        parts = [p for p in parts if p]
        if len(parts) == 1 and parts[0].lower() in ("all", "all-linear", "all_linear"):
            return ["all-linear"]
        return parts
    if isinstance(value, (list, tuple)):
        # module names only: PEFT's `target_modules` is a name or a list of names (peft 0.21.2 `LoraConfig`), so a
        # nested list or mapping is not one (and is never turned into text: an alias can make it huge)
        names = (str(v).strip() for v in value if isinstance(v, (str, int, float)))
        return [n for n in names if n]
    return None


def _as_dict(value, b: PlanBuilder | None = None, s: Setting | None = None) -> dict | None:
    """Dict-valued arguments also come as JSON text (`--fsdp_config '{"...": ...}'`), which transformers reads
    with `json.loads` (transformers 5.24 `TrainingArguments.__post_init__`, `_VALID_DICT_FIELDS`). Read with the
    bounded loader (`formats.yaml_doc.load_value`); text it does not read is not read here either, and with a
    builder a VL015 on the setting says why."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        from vramlens.formats.yaml_doc import YamlError, load_value

        try:
            d = load_value(value, json=True)
        except YamlError as exc:
            if b is not None and s is not None:
                b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` is not read: {exc}", s)
            return None
        return d if isinstance(d, dict) else None
    return None


def kids(s: Setting, nested: dict[str, list[Setting]] | None, b: PlanBuilder | None = None) -> list[Setting]:
    """The entries of a dict-valued setting: real nested entries when the reader made them, else
    entries synthesized from the dict (pointing at the whole argument). With a builder, JSON text that is not
    read gets a VL015 (`_as_dict`)."""
    if nested is not None and s.key in nested and isinstance(s.value, dict):
        return nested[s.key]
    d = _as_dict(s.value, b, s)
    return [s.child(k, v) for k, v in d.items()] if d else []


# --- handlers: (builder, setting) -> None ------------------------------------------------------


def _model(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        b.set("model_id", s.value.strip(), s)


def _dtype(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    d = normalize_dtype(s.value)
    if d is None:
        return b.unknown(s, "dtype", ("bfloat16", "float16", "float32", "auto"))
    b.set("weight_dtype", d, s)


def _amp(dtype: str) -> Callable[[PlanBuilder, Setting], None]:
    def handler(b: PlanBuilder, s: Setting) -> None:
        if s.value is None:
            return
        v = to_bool(s.value)
        if v is None:
            if is_auto(s.value):
                return b.set("amp_dtype", dtype, s, note=f"`{s.key}: auto` → {dtype} where the GPU supports it")
            if str(s.value).strip().lower() == "full":  # axolotl: bf16 also for eval
                return b.set("amp_dtype", dtype, s, note=f"`{s.key}: full` → {dtype}, also in evaluation")
            return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be true or false, got {s.value!r}", s)
        if v:
            if b.plan.amp_dtype is not None and b.plan.amp_dtype.value not in ("none", dtype):
                b.issue(
                    IssueKind.PRECISION_CONFLICT,
                    f"both `{b.plan.amp_dtype.key}` and `{s.key}` are on: a run fails with both fp16 and bf16",
                    s,
                    severity=Severity.ERROR,
                )
            b.set("amp_dtype", dtype, s, override=b.plan.amp_dtype is not None and b.plan.amp_dtype.value == "none")
        elif b.plan.amp_dtype is None:
            b.set("amp_dtype", "none", s)

    return handler


def _seq(b: PlanBuilder, s: Setting) -> None:
    b.set_int("seq_len", s, minimum=1)


def _block_size(b: PlanBuilder, s: Setting) -> None:
    """`block_size` (transformers examples/pytorch/language-modeling/run_clm.py): `group_texts` concatenates the
    tokenized dataset and cuts it into blocks of this length, so every sequence is full and none is padded."""
    if b.set_int("seq_len", s, minimum=1) is not None:
        b.set(
            "packing",
            True,
            s,
            origin=Origin.DERIVED,
            note="run_clm.py's group_texts cuts the concatenated texts into full blocks: no padding",
        )


def _attn(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    w = str(s.value).strip()
    if w in HF_ATTENTION:
        return b.set("attn_impl", w, s)
    a = normalize_attn(w)
    if a == "other" or (a is not None and "/" in w):
        return b.set("attn_impl", a, s, note=f"hub kernel `{w}`")
    if a is not None:  # a short form transformers rejects
        b.unknown(s, "attention implementation", suggestion=a if a in HF_ATTENTION else None)
        return b.set("attn_impl", a, s)
    b.unknown(s, "attention implementation", HF_ATTENTION)


def _flash2(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("attn_impl", "flash_attention_2", s)


def _use_peft(b: PlanBuilder, s: Setting) -> None:
    if s.value is None:
        return
    v = to_bool(s.value)
    if v is None:
        return b.issue(IssueKind.INVALID_VALUE, f"`{s.key}` should be true or false, got {s.value!r}", s)
    b.set("peft_method", "lora" if v else "none", s)


def _dora(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("peft_method", "dora", s, override=True)


def _targets_handler(concept: str) -> Callable[[PlanBuilder, Setting], None]:
    def handler(b: PlanBuilder, s: Setting) -> None:
        t = _targets(s.value)
        if t:
            b.set(concept, t, s)

    return handler


def _load_in(bits: int) -> Callable[[PlanBuilder, Setting], None]:
    def handler(b: PlanBuilder, s: Setting) -> None:
        if to_bool(s.value):
            b.set("quant_bits", bits, s)
            b.set("quant_type", "nf4" if bits == 4 else "int8", s)

    return handler


# The quantization backends a framework's `quant_method`/`quantization_method` names (LLaMA-Factory
# src/llamafactory/extras/constants.py `QuantizationMethod`, ms-swift swift/arguments/base_args/quant_args.py
# `quant_method`): each is a transformers quantizer config
QUANT_METHODS = ("bnb", "hqq", "eetq", "gptq", "awq", "aqlm", "quanto", "mxfp4", "fp8")


def quant_method(b: PlanBuilder, s: Setting) -> None:
    """`quant_method: hqq` → the layout the estimate sizes (resolve: bitsandbytes' unless the method has its own)."""
    if s.value is None:
        return
    w = str(s.value).strip().lower()
    if w not in QUANT_METHODS:
        return b.unknown(s, "quantization method", QUANT_METHODS)
    if w != "bnb":
        b.set("quant_type", w, s, override=True)
    else:
        b.remember(s)


def _quant_type(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        t = s.value.strip().lower()
        if t not in ("nf4", "fp4"):
            return b.unknown(s, "4-bit quantization type", ("nf4", "fp4"))
        b.set("quant_type", t, s, override=True)


def _quant_storage(b: PlanBuilder, s: Setting) -> None:
    d = normalize_dtype(s.value)
    if d:
        b.set("quant_storage_dtype", d, s)
    elif s.value is not None and str(s.value).strip():
        b.unknown(s, "dtype", sorted(set(DTYPE_WORDS)))


def _quant_compute(b: PlanBuilder, s: Setting) -> None:
    d = normalize_dtype(s.value)
    if d:
        b.set("quant_compute_dtype", d, s)


def _optim(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        check_optimizer(b, s)
        b.set("optimizer", s.value.strip(), s)
    elif s.value not in (None, "") and not isinstance(s.value, str):
        check_optimizer(b, s)  # a number or a list where a name goes: VL015, not silence


def _deepspeed(b: PlanBuilder, s: Setting, nested=None) -> None:
    if s.value in (None, "", False):
        return
    b.set("dist_strategy", "deepspeed", s)
    d = _as_dict(s.value, b, s)
    if d is not None:
        from vramlens.formats import deepspeed

        entries = [x for x in (nested or {}).get("__all__", []) if x.path[:1] == (s.key,) and len(x.path) > 1]
        if entries and isinstance(s.value, dict):
            deepspeed.apply(b, entries, prefix=(s.key,))
        else:
            b.inline_deepspeed(d, s)
    elif isinstance(s.value, str):
        b.reference("deepspeed", s.value.strip(), s)


def _fsdp(b: PlanBuilder, s: Setting) -> None:
    v = s.value
    if v in (None, "", False, []):
        return
    words = v.split() if isinstance(v, str) else [str(x) for x in v] if isinstance(v, (list, tuple)) else []
    words = [w.strip().lower() for w in words]
    if not words or words == ["false"]:
        return
    b.set("dist_strategy", "fsdp", s)
    for w in words:
        if w in FSDP_WORDS:
            b.set("zero_stage", FSDP_WORDS[w], s)
        elif w == "offload":
            b.set("offload_params", True, s)
            b.set("offload_optimizer", True, s)
        elif w not in ("auto_wrap", "true"):
            b.unknown(
                s,
                "FSDP option",
                suggestion=None,
                hint="expected full_shard, shard_grad_op, hybrid_shard, "
                "hybrid_shard_zero2, no_shard, offload, auto_wrap",
            )
    if b.plan.zero_stage is None and not any(w in FSDP_WORDS for w in words):
        b.set("zero_stage", 3, s, note="`fsdp` without a sharding strategy → FULL_SHARD")


def fsdp_config_entry(b: PlanBuilder, e: Setting) -> bool:
    """One `fsdp_config` entry (HF, axolotl and accelerate spell them with or without `fsdp_`)."""
    key = str(e.key).removeprefix("fsdp_")
    v = e.value
    if v is None:
        return True
    if key in ("offload_params", "cpu_offload"):
        on = to_bool(v)
        if on is not None:
            b.set("offload_params", on, e)
            b.set(
                "offload_optimizer",
                on,
                e,
                note="FSDP CPU offload also runs the optimizer step on the CPU" if on else None,
            )
        return True
    if key == "state_dict_type" and isinstance(v, str):
        b.set("fsdp_state_dict_type", v.strip().upper(), e)
        return True
    if key == "activation_checkpointing":
        b.set_bool("grad_checkpointing", e)
        if to_bool(v):
            # accelerate applies it with torch's non-reentrant wrapper inside each unit (accelerator.py
            # `prepare_model`: `checkpoint_wrapper(..., checkpoint_impl=CheckpointImpl.NO_REENTRANT)`)
            b.set("ckpt_reentrant", False, e, note="FSDP's activation checkpointing is non-reentrant")
        return True
    if key == "sharding_strategy":
        stage = FSDP_STRATEGIES.get(str(v).strip().upper())
        if stage is None:
            b.unknown(e, "FSDP sharding strategy", [k for k in FSDP_STRATEGIES if not k.isdigit()])
        else:
            b.set("zero_stage", stage, e, override=True)
            b.set("dist_strategy", "fsdp", e)
        return True
    if key == "reshard_after_forward":
        flag = to_bool(v)
        if flag is not None:
            b.set(
                "zero_stage",
                3 if flag else 2,
                e,
                override=True,
                note="reshard_after_forward " + ("on → FULL_SHARD-like" if flag else "off → SHARD_GRAD_OP-like"),
            )
        elif str(v).strip().upper() in FSDP_STRATEGIES:
            b.set("zero_stage", FSDP_STRATEGIES[str(v).strip().upper()], e, override=True)
        b.set("dist_strategy", "fsdp", e)
        return True
    if key == "version":
        b.set("dist_strategy", "fsdp", e)
        if str(v).strip() in ("1", "2"):
            b.set("fsdp_version", int(str(v).strip()), e)
        else:
            b.remember(e)
        return True
    return False


def _fsdp_config(b: PlanBuilder, s: Setting, nested=None) -> None:
    for e in kids(s, nested, b):
        if not fsdp_config_entry(b, e) and nested is not None:
            b.remember(e)


def _ckpt_kwargs(b: PlanBuilder, s: Setting, nested=None) -> None:
    """`gradient_checkpointing_kwargs` / `activation_checkpointing_kwargs`: `use_reentrant` for torch's checkpoint;
    in transformers 5 (modeling_utils.py `activation_checkpointing_enable(kwargs, every_n_layers, offload)`)
    `every_n_layers` checkpoints only every n-th decoder layer and `offload` holds the checkpointed layers' inputs in
    pinned host memory (`torch.autograd.graph.save_on_cpu` around each checkpoint)."""
    for e in kids(s, nested, b):
        if e.key == "use_reentrant":
            b.set_bool("ckpt_reentrant", e)
        elif e.key == "every_n_layers":
            b.set_int("checkpoint_every", e, minimum=1)
        elif e.key == "offload":
            b.set_bool("activation_offload", e, note="checkpointed layers' inputs held in pinned host memory")


def _liger(b: PlanBuilder, s: Setting) -> None:
    if to_bool(s.value):
        b.set("loss_impl", "fused", s, note="Liger fused linear cross-entropy")
        # transformers trainer.py (`use_liger_kernel`): `_apply_liger_kernel_to_instance` also swaps RMSNorm, RoPE
        # and SwiGLU for Liger's kernels (liger_kernel/transformers/monkey_patch.py), which save other activations:
        # their speed (estimate/throughput.py `elementwise_bytes`) and what they save (estimate/components/liger.py)
        b.set("fused_kernels", list(LIGER_KERNELS), s, note=LIGER_KERNELS_NOTE)


def _loss_type(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and "chunk" in s.value.lower():
        b.set("loss_impl", "chunked", s)
    elif isinstance(s.value, str) and s.value.strip().lower() == "nll":
        b.set("loss_impl", "standard", s)


def _model_init_kwargs(b: PlanBuilder, s: Setting, nested=None) -> None:
    for e in kids(s, nested, b):
        if e.key in ("dtype", "torch_dtype"):
            _dtype(b, e)
        elif e.key == "attn_implementation":
            _attn(b, e)
        elif e.key in ("load_in_4bit", "load_in_8bit"):
            _load_in(4 if e.key == "load_in_4bit" else 8)(b, e)


def _teacher_init_kwargs(b: PlanBuilder, s: Setting, nested=None) -> None:
    """TRL's `teacher_model_init_kwargs` (GKDConfig, GOLDConfig, DistillationConfig): the keyword arguments of the
    teacher's `from_pretrained` when the trainer loads it from its id; its `dtype` / `torch_dtype` is the teacher's
    weight dtype (trl v0.12.2 to v1.9.0 trainer/gkd_trainer.py, experimental/gkd/gkd_trainer.py)."""
    for e in kids(s, nested, b):
        if e.key in ("dtype", "torch_dtype") and e.value is not None:
            d = normalize_dtype(e.value)
            if d is None:
                b.unknown(e, "dtype", ("bfloat16", "float16", "float32", "auto"))
            else:
                b.set("teacher_dtype", d, e)


def _env(b: PlanBuilder, s: Setting, nested=None) -> None:
    for e in kids(s, nested, b):
        if str(e.key) in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF") and e.value is not None:
            b.set("alloc_conf", str(e.value), e)


def _int(concept: str, minimum: int = 0):
    return lambda b, s: b.set_int(concept, s, minimum=minimum)


def _bool(concept: str, invert: bool = False):
    return lambda b, s: b.set_bool(concept, s, invert=invert)


def _float(concept: str):
    return lambda b, s: b.set_float(concept, s)


def _compile_mode(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip():
        b.set("compile", True, s, note=f"`{s.key}` set → torch.compile is on")


# The model's head (transformers AutoModelFor*; PEFT `TaskType`; ms-swift `--task_type`): a task head has no vocabulary
# logits. ms-swift 4.x swift/llm/argument/base_args/model_args.py `task_type`: causal_lm | seq_cls | embedding |
# reranker | generative_reranker; PEFT 0.x peft/utils/peft_types.py `TaskType`: SEQ_CLS, TOKEN_CLS, CAUSAL_LM, …
TASK_TYPES = {
    "seq_cls": "sequence-classification",
    "sequence_classification": "sequence-classification",
    "token_cls": "token-classification",
    "token_classification": "token-classification",
    "causal_lm": "causal-lm",
    "reranker": "sequence-classification",
    "regression": "regression",
}


def task_head_of_class(name: str) -> str | None:
    """`AutoModelForSequenceClassification` / `LlamaForTokenClassification` → the task head (None: another class)."""
    if name.endswith("ForSequenceClassification"):
        return "sequence-classification"
    if name.endswith("ForTokenClassification"):
        return "token-classification"
    return None


def _task_type(b: PlanBuilder, s: Setting) -> None:
    if not isinstance(s.value, str) or not s.value.strip():
        return
    head = TASK_TYPES.get(s.value.strip().lower())
    if head is None:
        return b.remember(s)
    b.set("task_head", head, s)


def _problem_type(b: PlanBuilder, s: Setting) -> None:
    if isinstance(s.value, str) and s.value.strip().lower() == "regression":
        b.set("task_head", "regression", s, override=True, note="`problem_type: regression`: one scalar output")
    else:
        b.remember(s)


def _num_labels(b: PlanBuilder, s: Setting) -> None:
    n = to_int(s.value)
    if n is not None and n >= 1 and b.plan.task_head is None:
        b.set("task_head", "sequence-classification", s, note=f"`num_labels: {n}`: a {n}-wide classification head")
    b.remember(s)


def _optim_args(b: PlanBuilder, s: Setting) -> None:
    """transformers `optim_args` ("rank=64, update_proj_gap=200, scale=0.25"): the GaLore/APOLLO rank."""
    b.remember(s)
    if not isinstance(s.value, str):
        return
    for part in s.value.replace(";", ",").split(","):
        key, _, value = part.partition("=")
        if key.strip().lower() == "rank" and to_int(value.strip()):
            b.set("optimizer_rank", to_int(value.strip()), s)


def _lisa_layers(b: PlanBuilder, s: Setting) -> None:
    """LISA (arXiv:2403.17919): `lisa_activated_layers` (LMFlow finetuner args) / `lisa_n_layers` (axolotl) decoder
    layers train at a time; the embedding and LM head stay trainable (LMFlow `DynamicLayerActivationCallback` and
    axolotl's LISA callback freeze only `model.layers`)."""
    n = to_int(s.value)
    if n is None or n < 1:
        return b.remember(s)
    b.set("peft_method", "freeze", s, note=f"LISA: {n} randomly chosen layer(s) train at a time")
    b.set("trained_layers", n, s)
    b.set("trained_where", "rotating", s, origin=Origin.DERIVED, note="LISA samples new layers every interval")
    b.set(
        "trained_extra",
        ["embed", "lm_head"],
        s,
        origin=Origin.DERIVED,
        note="LISA keeps the embedding and the LM head trainable",
    )
