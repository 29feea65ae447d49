"""What ms-swift example scripts run, read from ms-swift's own code (tests/fixtures/ms-swift/<tag>/, each with its
SOURCE): the 2.x model types whose registered checkpoints are stored quantized (GPTQ, bitsandbytes), the sizes of
the PEFT methods beyond LoRA (`--boft_block_size`, `--adalora_init_r`, ...), the checkpointing an `accelerate launch`
config applies, and the memory benchmark's handling of figures that state the card rather than a measurement."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.estimate.shapes import shapes
from vramlens.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "ms-swift"


def analysed(path: Path, text: str | None = None, **settings):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    text = path.read_text(encoding="utf-8") if text is None else text
    a = analyze(text, str(path), Settings(model_lookup=False, **settings))
    assert a.estimate is not None and a.resolution is not None, a.error
    return a


@pytest.mark.parametrize(
    "name, bits, method",
    [
        # swift/llm/utils/model.py at v2.4.0: `register_model(ModelType.qwen_7b_chat_int4, 'qwen/Qwen-7B-Chat-Int4',
        # …, requires=['auto_gptq>=0.5'], function_kwargs={'gptq_bits': 4})`
        ("qwen_7b_chat_int4_qlora_sft.sh", 4, "gptq"),
        # `ModelType.baichuan2_7b_chat_int4, 'baichuan-inc/Baichuan2-7B-Chat-4bits', …,
        # requires=['bitsandbytes<0.41.2', 'accelerate<0.26']`
        ("baichuan2_7b_chat_int4_qlora_ddp_ds_sft.sh", 4, "nf4"),
    ],
)
def test_a_registered_quantized_checkpoint_loads_its_stored_weights(name, bits, method):
    a = analysed(FIXTURES / "v2.4.0" / "prequantized" / name, framework_versions={"ms-swift": "2.4.0"})
    rp = a.resolution.resolved
    assert (rp.quant_bits, rp.quant_type) == (bits, method)
    # the frozen base is held packed: well under half its 16-bit size
    assert a.estimate.components["weights"] < 0.4 * shapes(rp.arch).total * 2
    assert any("ms-swift's model registry" in str(x) for x in a.resolution.assumptions)


BOFT = FIXTURES / "v3.5.0" / "tuners" / "boft_train.sh"


def test_boft_sizes_written_on_the_command_line_size_its_adapters():
    plain = analysed(BOFT)
    assert dict(plain.resolution.resolved.adapter_shape) == {"block": 4, "factors": 1}  # tuner_args.py defaults
    text = BOFT.read_text(encoding="utf-8").replace(
        "--train_type boft \\", "--train_type boft \\\n    --boft_block_size 8 \\\n    --boft_n_butterfly_factor 2 \\"
    )
    told = analysed(BOFT, text)
    assert dict(told.resolution.resolved.adapter_shape) == {"block": 8, "factors": 2}
    # peft's boft_R is factors × in/block × block × block per adapted linear: twice the factors, twice the block
    assert told.estimate.components["adapters"] > 3 * plain.estimate.components["adapters"]


def test_adalora_initial_rank_on_the_command_line_sizes_its_adapters():
    text = BOFT.read_text(encoding="utf-8").replace("--train_type boft", "--train_type adalora --adalora_init_r 48")
    a = analysed(BOFT, text)
    assert dict(a.resolution.resolved.adapter_shape) == {"r": 48}


@pytest.fixture(scope="module")
def memory():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import held_out_memory

        yield held_out_memory
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_figures_that_state_the_card_are_set_apart_with_their_reason(memory):
    torchacc = "examples/pytorch/llm/scripts/torchacc/qwen2_72b_chat/swift_lora_ds.sh"
    text = (FIXTURES / "v2.4.0" / "card" / "torchacc_qwen2_72b_chat_swift_lora_ds.sh").read_text(encoding="utf-8")
    assert "USE_TORCH_XLA=0" in text  # runs on CUDA, yet its figure is the A100's size
    (figure,) = memory.script_figures(text, torchacc)
    assert "A100" in memory.card_statement(torchacc, figure.text)

    fsdp = "examples/train/multi-gpu/fsdp_qlora/train.sh"
    (figure,) = memory.script_figures((FIXTURES / "v4.0.0" / "card" / "fsdp_qlora_train.sh").read_text(), fsdp)
    assert "ce2403719" in memory.card_statement(fsdp, figure.text)
    # the same script before that commit states what it measured, and is compared
    (before,) = memory.script_figures("# 14GiB * 2\nnproc_per_node=2\n", fsdp)
    assert memory.card_statement(fsdp, before.text) is None


def test_each_release_is_estimated_with_its_own_version(memory):
    if not (memory.MIRRORS / "modelscope+ms-swift").exists():
        pytest.skip("no ms-swift mirror")
    by_rev = {ms.source.revision: memory.framework_version(ms) for ms in memory.SOURCES if ms.name == "ms-swift"}
    assert by_rev["v3.5.0"] == {"ms-swift": "3.5.0"} and by_rev["v2.4.0"] == {"ms-swift": "2.4.0"}


def test_megatron_optimizer_offloaded_to_the_cpu_keeps_no_optimizer_state_on_the_gpu():
    # examples/megatron/dense/72b_offload.sh (v4.0.0): `--optimizer_cpu_offload true --use_precision_aware_optimizer
    # true`; megatron-core's HybridDeviceOptimizer moves (offload fraction 1.0) the optimizer's parameters and states
    # to the CPU, the weights and the gradient buffers stay
    from vramlens.estimate import components as C

    a = analysed(FIXTURES / "v4.0.0" / "megatron_offload" / "72b_offload.sh")
    rp = a.resolution.resolved
    assert rp.tensor_parallel == 8 and rp.distributed_optimizer and rp.offload_optimizer
    assert a.plan.offload_optimizer is not None and a.plan.offload_optimizer.key == "optimizer_cpu_offload"
    assert not any(u.key == "optimizer_cpu_offload" for u in a.estimate.unmodelled)
    offloaded = C.megatron_step(rp)["forward-backward"]
    on_gpu = C.megatron_step(rp.model_copy(update={"offload_optimizer": False}))["forward-backward"]
    assert on_gpu["optimizer"] > 0 and offloaded["optimizer"] == 0
    assert (offloaded["weights"], offloaded["gradients"]) == (on_gpu["weights"], on_gpu["gradients"])


def test_megatron_optimizer_partly_offloaded_keeps_the_rest_on_the_gpu(tmp_path):
    # megatron-core's HybridDeviceOptimizer (`_get_sub_optimizer_param_groups`) moves `--optimizer_offload_fraction`
    # of the optimizer's parameters to the CPU; the others keep fp32 copies and Adam states on the GPU
    from vramlens.estimate import components as C

    text = (FIXTURES / "v4.0.0" / "megatron_offload" / "72b_offload.sh").read_text()
    path = tmp_path / "72b_offload.sh"
    path.write_text(text.replace("--optimizer_offload_fraction 1 ", "--optimizer_offload_fraction 0.5 "))
    a = analysed(path)
    rp = a.resolution.resolved
    assert rp.offload_optimizer and rp.optimizer_offload_fraction == 0.5
    assert not any("optimizer_offload_fraction" in u.key for u in a.estimate.unmodelled)
    # the hybrid optimizer's GPU share is torch-style fp32 states and copies, whatever the precision-aware dtypes
    whole = rp.model_copy(update={"offload_optimizer": False, "precision_aware_optimizer": False})
    on_gpu = C.megatron_step(whole)["forward-backward"]["optimizer"]
    assert C.megatron_step(rp)["forward-backward"]["optimizer"] == pytest.approx(on_gpu / 2, rel=0.01)


ATTENTION = FIXTURES / "v2.4.0" / "attention"


def test_use_flash_attn_false_in_2_x_loads_eager_attention():
    # swift/llm/utils/model.py at v2.4.0, `get_model_tokenizer_with_flash_attn`: `elif use_flash_attn is False:
    # model_config._attn_implementation = 'eager'`; absent, transformers' default (SDPA) stays
    script = ATTENTION / "phi3_4b_4k_instruct_lora_sft.sh"
    told = analysed(script)
    assert told.resolution.resolved.attn_impl == "eager"
    absent = analysed(script, script.read_text(encoding="utf-8").replace("--use_flash_attn false", ""))
    assert absent.resolution.resolved.attn_impl == "sdpa"
    # eager attention holds the scores and their softmax: the same run peaks higher
    assert told.estimate.allocated_bytes > absent.estimate.allocated_bytes


def test_qwen_1_remote_code_runs_torch_sdpa_when_flash_attention_is_off():
    # Qwen-1's own modeling_qwen.py: `if not self.use_cache_quantization and SUPPORT_TORCH2:` calls
    # F.scaled_dot_product_attention; ms-swift 2.x passes `use_flash_attn` into its config, not attn_implementation
    a = analysed(ATTENTION / "qwen_7b_chat_lora_sft.sh")
    assert a.plan.attn_impl.value == "eager"  # what the script asks
    assert a.resolution.resolved.attn_impl == "sdpa"  # what Qwen-1's code runs
    said = " ".join(str(x) for x in a.resolution.assumptions)
    assert "scaled_dot_product_attention" in said
    assert not any("Gemma-2" in str(x) for x in a.resolution.assumptions)


SEQUENCE_PARALLEL = FIXTURES / "v4.0.0" / "sequence_parallel"


def test_zero3_shards_over_the_sequence_parallel_ranks_too():
    """`--sequence_parallel_size 4` on 4 GPUs under `--deepspeed zero3`: DeepSpeed's ZeRO partitions over the data-
    and sequence-parallel ranks together (deepspeed/utils/groups.py `_get_sequence_data_parallel_group`), so each GPU
    keeps a quarter of the weights, gradients and optimizer state, not all of them."""
    path = SEQUENCE_PARALLEL / "sequence_parallel_dpo.sh"
    sp = analysed(path)
    rp = sp.resolution.resolved
    assert rp.context_parallel == 4 and rp.world_size == 4
    # the same 4 GPUs without sequence parallelism: 4 data-parallel ranks, the same quarter on each
    no_sp = analysed(path, path.read_text(encoding="utf-8").replace("--sequence_parallel_size 4", ""))
    for part in ("weights", "optimizer"):
        assert sp.estimate.components[part] == pytest.approx(no_sp.estimate.components[part], rel=0.02)


def test_the_sequence_parallel_loss_runs_on_16_bit_logits_in_chunks():
    """ms-swift's SFT loss under sequence parallelism is its own cross-entropy on the bf16 logits
    (swift/trainers/utils.py `per_token_loss_func_sp`), chunked by `CELOSS_PARALLEL_SIZE=2048` with each chunk's
    gradient written over the saved logits (`ChunkedCrossEntropyLoss`): about one bf16 copy of the rank's logits,
    not the fp32 log-softmax and gradients of transformers' loss."""
    path = SEQUENCE_PARALLEL / "sequence_parallel.sh"
    a = analysed(path)
    rp = a.resolution.resolved
    assert rp.context_parallel == 8 and rp.loss_16bit and rp.loss_chunk_tokens == 2048
    tokens = rp.micro_batch * rp.seq_len // 8
    one_copy = tokens * rp.arch.vocab * 2
    logits = a.estimate.components["logits"]
    assert one_copy <= logits < 1.25 * one_copy
    unchunked = analysed(path, path.read_text(encoding="utf-8").replace("CELOSS_PARALLEL_SIZE=2048 \\\n", ""))
    assert unchunked.resolution.resolved.loss_chunk_tokens == 0
    assert unchunked.estimate.components["logits"] >= 3 * one_copy > logits
    # read from the trainer's code, not checked against a trace: every view says the figure is approximate
    assert any("sequence-parallel loss" in r for r in rp.approximate)


LORA_LLM = FIXTURES / "v4.0.0" / "lora_llm_full_vit" / "sft.sh"


def test_lora_llm_trains_lora_on_the_language_model_and_the_vision_tower_in_full():
    """ms-swift 4.x `--tuner_type lora_llm` (swift/tuner_plugin/lora_llm.py at v4.0.0): LoRA on the language model's
    linears, the vision tower and aligner `requires_grad_(True)` — not a full fine-tune of the language model."""
    a = analysed(LORA_LLM, framework_versions={"ms-swift": "4.0.0"})
    rp, est = a.resolution.resolved, a.estimate
    assert rp.peft == "lora" and rp.lora_r == 16
    assert rp.vision_full and not rp.vision_frozen
    assert not any("lora_llm" in f.message for f in a.findings)  # a known tuner, not an unknown value
    arch = rp.arch
    lm = shapes(arch).total
    # what trains: the whole tower beside adapters that are a small fraction of the language model
    assert arch.vision_params < est.params_trainable < arch.vision_params + 0.02 * lm
    # the tower gets gradients and AdamW states (fp32 master + 2 states under DeepSpeed's bf16 ZeRO-2, 4 ranks)
    assert est.components["optimizer"] >= 12 * arch.vision_params / 4
    # the same run with the tower frozen (plain LoRA) keeps less for backward in the tower
    plain = analysed(LORA_LLM, LORA_LLM.read_text(encoding="utf-8").replace("lora_llm", "lora"))
    assert not plain.resolution.resolved.vision_full
    assert est.components["activations"] > plain.estimate.components["activations"]
    assert est.components["optimizer"] > 5 * plain.estimate.components["optimizer"]


DPO_FULL = FIXTURES / "v3.5.0" / "dpo_full" / "full.sh"


def _swift_dpo_head(logits_fn, labels, is_ref):
    """ms-swift's DPO scoring (v4.0.0 swift/rlhf_trainers/dpo_trainer.py `concatenated_forward`, rlhf_mixin.py
    `get_per_token_logps`) with TRL's `selective_log_softmax` for 16-bit logits (trl 0.15–0.28 trainer/utils.py)."""
    import torch
    import torch.nn.functional as F

    logits = logits_fn()
    loss_mask = labels != -100
    labels = labels.clone()
    labels[~loss_mask] = 0
    reduce_logits = logits.mean(-1)
    rows = [F.log_softmax(r, dim=-1).gather(dim=-1, index=i.unsqueeze(-1)).squeeze(-1) for r, i in zip(logits, labels)]
    logps = torch.stack(rows)
    logps[~loss_mask] = 0
    reduce_logits[~loss_mask] = 0
    n = max(labels.shape[0] // 2, 1)
    nll = None if is_ref else -logps[:n][loss_mask[:n]].mean()
    return logps.sum(-1), nll


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_swift_dpo_head_bytes_match_a_live_trace_of_its_code(rows):
    import torch
    from vramlens.estimate.components.logits import swift_dpo_per_logit, swift_dpo_rows
    from vramlens.trace.tracker import LiveBytes

    rp = analysed(DPO_FULL).resolution.resolved
    rp = rp.with_changes(micro_batch=max(rows // 2, 1), packing=rows == 1)
    assert swift_dpo_rows(rp) == rows
    torch.manual_seed(0)
    T, d, V = 256, 4, 32768  # a 4-wide hidden state: the head's weight is negligible beside the logits
    h = torch.randn(rows, T, d, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(V, d, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (rows, T))
    n = rows * T * V
    tr = LiveBytes()
    with tr:
        logps, nll = _swift_dpo_head(lambda: h @ w.t(), labels, False)
        held = tr.cur
        tr.reset_peak()
        with torch.no_grad():
            ref, _ = _swift_dpo_head(lambda: h.detach() @ w.detach().t(), labels, True)
        reference = tr.peak - held
        del ref
        tr.reset_peak()
        k = max(rows // 2, 1)
        ((logps[:k] - logps[rows - k :]).sum() + 0.1 * nll).backward()
        backward = tr.peak
    for phase, traced in (("held", held), ("reference", reference), ("backward", backward)):
        assert swift_dpo_per_logit(rp, phase) == pytest.approx(traced / n, rel=0.03), phase


def test_full_dpo_keeps_16_bit_logits_not_the_sft_losss_fp32_copies():
    """ms-swift's full-parameter DPO under ZeRO-3 (examples/train/rlhf/dpo/full.sh): the policy's head holds 16-bit
    log-softmax rows while the ZeRO-3-sharded reference runs, not transformers' fp32 loss temporaries."""
    from vramlens.estimate import _phases
    from vramlens.estimate import components as C

    a = analysed(DPO_FULL, framework_versions={"ms-swift": "3.5.0"})
    rp = a.resolution.resolved
    assert rp.objective == "dpo" and rp.reference == "copy" and rp.zero_stage == 3
    logits = 2 * rp.seq_len * rp.arch.vocab  # chosen + rejected, one of each
    _, phases, _, _ = _phases(rp)
    ref = phases["reference-forward"]
    assert ref["logits"] <= 2.05 * logits  # every row's bf16 log-softmax, no fp32 copy
    _, one_block = C.activations_per_token(rp)
    # the reference's bf16 logits and one row's log-softmax, beside one block's no-grad working set
    assert ref["temporaries"] <= one_block * 2 * rp.seq_len + 3.05 * logits
    assert a.estimate.components["logits"] <= 4.05 * logits  # backward: log-softmax + the logits' gradient


FSDP2_LORA = FIXTURES / "v4.0.0" / "fsdp2_lora"
FSDP2_LORA_SCRIPT = Path("examples") / "train" / "multi-gpu" / "fsdp2_lora" / "train.sh"


def test_accelerate_fsdp_activation_checkpointing_holds_over_gradient_checkpointing_false(tmp_path):
    """examples/train/multi-gpu/fsdp2_lora/train.sh (v4.0.0): `accelerate launch --config_file fsdp2.json` with
    `"fsdp_activation_checkpointing": true`, and `--gradient_checkpointing false` on the command line. accelerate
    wraps the layers itself (accelerate 1.15 accelerator.py `_prepare_fsdp2` → `fsdp2_apply_ac`), whatever the
    trainer's `gradient_checkpointing` says; ms-swift's own FSDP2 config asks for exactly that (v4.0.0
    swift/config/fsdp2.json: "do NOT use --gradient_checkpointing, use activation_checkpointing in fsdp_config")."""
    script = FSDP2_LORA / FSDP2_LORA_SCRIPT
    assert "--gradient_checkpointing false" in script.read_text(encoding="utf-8")
    a = analysed(script, workspace=FSDP2_LORA, framework_versions={"ms-swift": "4.0.0"})
    rp = a.resolution.resolved
    assert rp.strategy == "fsdp" and rp.fsdp_version == 2 and rp.world_size == 2
    assert rp.grad_checkpointing and a.plan.ckpt_reentrant.value is False
    assert a.plan.grad_checkpointing.key == "fsdp_activation_checkpointing"
    # the same run under a config without activation checkpointing: the command line's false holds, and every
    # layer keeps its activations
    shutil.copytree(FSDP2_LORA / "examples", tmp_path / "examples")
    config = tmp_path / FSDP2_LORA_SCRIPT.parent / "fsdp2.json"
    config.write_text(config.read_text(encoding="utf-8").replace('"fsdp_activation_checkpointing": true', '"x": 0'))
    off = analysed(tmp_path / FSDP2_LORA_SCRIPT, workspace=tmp_path, framework_versions={"ms-swift": "4.0.0"})
    assert not off.resolution.resolved.grad_checkpointing
    assert a.estimate.components["activations"] < 0.1 * off.estimate.components["activations"]


def test_swift_fsdp2_preset_shards_with_fsdp2_and_checkpoints_the_layers(tmp_path):
    """The same run as its script's NOTE offers it for ms-swift 3.12+: `swift sft ... --fsdp fsdp2` in place of
    `accelerate launch --config_file fsdp2.json`. The name is ms-swift's preset (v3.12.0 swift/llm/argument/
    train_args.py `_init_fsdp`, swift/llm/fsdp_config/fsdp2.json): FSDP2, full shard, sharded state dict and
    accelerate's activation checkpointing, which holds over `--gradient_checkpointing false`."""
    text = (FSDP2_LORA / FSDP2_LORA_SCRIPT).read_text(encoding="utf-8")
    assert "# NOTE: for swift>=3.12, you can use --fsdp fsdp2 instead of accelerate launch" in text
    launch = (
        'accelerate launch --config_file "./examples/train/multi-gpu/fsdp2_lora/fsdp2.json" \\\n    swift/cli/sft.py'
    )
    assert launch in text
    script = tmp_path / "train.sh"
    script.write_text(
        text.replace(launch, "NPROC_PER_NODE=$nproc_per_node \\\nswift sft").replace(
            "--gradient_checkpointing false", "--gradient_checkpointing false \\\n    --fsdp fsdp2"
        )
    )
    a = analysed(script, framework_versions={"ms-swift": "4.0.0"})
    rp = a.resolution.resolved
    assert rp.strategy == "fsdp" and rp.zero_stage == 3 and rp.fsdp_version == 2 and rp.world_size == 2
    assert rp.grad_checkpointing and a.plan.ckpt_reentrant.value is False
    assert a.plan.fsdp_state_dict_type.value == "SHARDED_STATE_DICT"
    assert not any("fsdp2" in i.message for i in a.plan.issues)  # a preset, not an unknown FSDP option
    # the accelerate-launched original reads the same
    launched = analysed(FSDP2_LORA / FSDP2_LORA_SCRIPT, workspace=FSDP2_LORA, framework_versions={"ms-swift": "4.0.0"})
    assert a.estimate.components["activations"] == launched.estimate.components["activations"]
