"""NeMo AutoModel recipe YAML (examples/llm_finetune/ at v0.1.0 and v0.5.0) read into the model, GPU count,
parallel layout and memory settings (CLI as a subprocess; `_target_` values read as text, never imported)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_automodel"


def estimate(path: Path, *extra: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", *extra, path.name],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=path.parent,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def source(d: dict, concept: str):
    s = d["sources"].get(concept)
    return None if s is None else s["value"]


def test_full_finetune_v010():
    """v0.1.0 llama3_2_1b_squad.yaml: Llama 3.2 1B, FSDP2 over the 8 GPUs of its header's torchrun line, local batch 8
    of a global 64 (no accumulation), Adam, the checkpoint's dtype."""
    d = estimate(FIXTURES / "v0.1.0" / "llama3_2_1b_squad.yaml")
    assert d["format"] == "nemo-automodel" and d["model"]["id"] == "meta-llama/Llama-3.2-1B"
    assert d["gpu"]["count"] == 8
    assert source(d, "dist_strategy") == "fsdp" and source(d, "zero_stage") == 3
    assert source(d, "micro_batch") == 8 and source(d, "grad_accum") == 1
    assert source(d, "optimizer") == "torch.optim.Adam" and source(d, "weight_dtype") == "bf16"
    assert source(d, "compile") is False and source(d, "grad_checkpointing") is False


def test_qlora_v010():
    """v0.1.0 llama3_1_8b_squad_qlora.yaml: 4-bit NF4 (double quant, bf16 storage) under LoRA r16/α32 on every
    linear, one GPU (its header runs `--nproc-per-node=1`): accumulation 32 / 4 = 8."""
    d = estimate(FIXTURES / "v0.1.0" / "llama3_1_8b_squad_qlora.yaml")
    assert d["model"]["id"] == "meta-llama/Llama-3.1-8B"
    assert source(d, "peft_method") == "qlora" and source(d, "quant_bits") == 4
    assert source(d, "lora_r") == 16 and source(d, "lora_alpha") == 32 and source(d, "lora_targets") == ["all-linear"]
    assert source(d, "micro_batch") == 4 and source(d, "grad_accum") == 8
    assert d["components_gib"]["adapters"] > 0


@pytest.mark.parametrize(
    "version, name", [("v0.1.0", "llama3_2_1b_hellaswag_peft.yaml"), ("v0.5.0", "llama3_2_1b_squad_peft.yaml")]
)
def test_lora_both_versions(version, name):
    """`match_all_linear: True` (v0.1.0) and `target_modules: '*_proj'` (v0.5.0) both adapt every projection."""
    d = estimate(FIXTURES / version / name)
    assert source(d, "peft_method") == "lora" and source(d, "lora_r") == 8 and source(d, "lora_alpha") == 32
    assert source(d, "lora_targets") == ["all-linear"]
    assert d["gpu"]["count"] == 8


def test_tensor_parallel_layout_v050():
    """v0.5.0 customizer_llama_3_1_8b_full_sft_tp.yaml: dp 4 × tp 2 = 8 GPUs, local batch 1 of 8 → 2 accumulation
    steps, sequences of 2048 (the dataset's seq_length)."""
    d = estimate(FIXTURES / "v0.5.0" / "customizer_llama_3_1_8b_full_sft_tp.yaml")
    assert d["model"]["id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert source(d, "world_size") == 8 and source(d, "tensor_parallel") == 2
    assert source(d, "micro_batch") == 1 and source(d, "grad_accum") == 2 and source(d, "seq_len") == 2048
    assert source(d, "attn_impl") == "sdpa"


def test_pipeline_schedule_read_and_what_is_not_named():
    """v0.5.0 llama3_1_8b_hellaswag_pp.yaml: `distributed.pipeline.pp_schedule: interleaved1f1b` is torch's
    Interleaved1F1B, estimated stage by stage; its stages per rank (`layers_per_stage`) and the micro-batch split
    (`pp_microbatch_size: 4` of the local batch) are named as not modelled."""
    d = estimate(FIXTURES / "v0.5.0" / "llama3_1_8b_hellaswag_pp.yaml")
    assert source(d, "pipeline_parallel") == 2 and d["gpu"]["count"] == 8
    assert source(d, "pipeline_schedule") == "Interleaved1F1B" and source(d, "virtual_pipeline") == 2
    assert {u["key"] for u in d["unmodelled"]} == {"pp_schedule", "pp_microbatch_size"}


def test_hsdp_named_as_not_modelled():
    d = estimate(FIXTURES / "v0.1.0" / "llama3_2_1b_hellaswag_hsdp.yaml")
    assert {u["key"] for u in d["unmodelled"]} == {"dp_replicate_size"}


def test_activation_checkpointing_and_eager_attention():
    """v0.5.0 gemma_2_9b_it_squad.yaml: `distributed.activation_checkpointing: true`, `attn_implementation: eager`."""
    d = estimate(FIXTURES / "v0.5.0" / "gemma_2_9b_it_squad.yaml")
    assert d["model"]["id"] == "google/gemma-2-9b-it"
    assert source(d, "grad_checkpointing") is True and source(d, "attn_impl") == "eager"
    assert source(d, "micro_batch") == 4 and source(d, "grad_accum") == 2


def test_packed_sequence_and_fp8():
    """v0.5.0 falcon3_7b_instruct_hellaswag_fp8.yaml: packed to 8192 tokens; fp8 linears read (counted as the bf16
    linears whose saved tensors they keep)."""
    path = FIXTURES / "v0.5.0" / "falcon3_7b_instruct_hellaswag_fp8.yaml"
    plan = parse_document(path.read_text(), str(path)).plan
    assert plan.format == "nemo-automodel" and plan.model_id.value == "tiiuae/Falcon3-7B-Instruct"
    assert plan.seq_len.value == 8192 and plan.packing.value is True
    assert plan.weight_dtype.value == "bf16"
    assert plan.float8_linears.value is True and plan.unmodelled == []


@pytest.mark.parametrize(
    "target", ["os.system", "builtins.eval", "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained"]
)
def test_targets_are_text(target):
    """A `_target_` is read as text: nothing named there is imported or called."""
    text = (
        f"step_scheduler:\n  local_batch_size: 2\n  global_batch_size: 2\nmodel:\n  _target_: {target}\n"
        f"  pretrained_model_name_or_path: meta-llama/Llama-3.2-1B\ndistributed:\n  strategy: fsdp2\n  tp_size: 1\n"
        f"dist_env:\n  backend: nccl\nloss_fn:\n  _target_: {target}\noptimizer:\n  _target_: {target}\n"
    )
    plan = parse_document(text, "/w/recipe.yaml").plan
    assert plan.format == "nemo-automodel" and plan.micro_batch.value == 2
    assert plan.model_id.value == "meta-llama/Llama-3.2-1B"


def test_bad_values_are_reported():
    text = (
        "step_scheduler:\n  local_batch_size: lots\n  global_batch_size: 8\nmodel:\n"
        "  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: meta-llama/Llama-3.2-1B\n  torch_dtype: bfloat17\n"
        "distributed:\n  strategy: fsdp2\n  tp_size: two\n"
    )
    plan = parse_document(text, "/w/recipe.yaml").plan
    messages = " ".join(i.message for i in plan.issues)
    assert "local_batch_size" in messages and "bfloat17" in messages and "tp_size" in messages
    assert plan.tensor_parallel is None
