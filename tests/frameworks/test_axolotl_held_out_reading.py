"""axolotl examples at 067b021c read by axolotl's own meanings: `dp_shard_size` as the FSDP shard degree, `qat` as
quantization-aware training and `quantize_moe_experts` as quantized MoE experts (fixtures and their SOURCE in
tests/fixtures/axolotl/067b021c)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.formats import parse_document
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "axolotl" / "067b021c"


def _analysis(name: str):
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = FIXTURES / name
    return analyze(path.read_text(), str(path), Settings(workspace=FIXTURES, model_lookup=False))


def _plan(name: str):
    path = FIXTURES / name
    return parse_document(path.read_text(), str(path), workspace=FIXTURES).plan


def _unmodelled(plan) -> dict:
    return {u.key: u for u in plan.unmodelled}


def test_dp_shard_size_is_the_fsdp_shard_degree():
    # dp_shard_size 2 × tensor parallel 2 × context parallel 2: eight GPUs, FSDP over the shard × context ranks
    a = _analysis("qwen3-8b-fsdp-tp-cp.yaml")
    plan = a.plan
    assert plan.world_size is not None and plan.world_size.value == 8
    assert plan.world_size.key == "dp_shard_size"
    assert plan.dist_strategy.value == "fsdp"
    assert "dp_shard_size" not in _unmodelled(plan)
    assert a.estimate is not None


def test_dp_replicate_size_is_hsdp():
    """dp_shard_size 4 × dp_replicate_size 2 × tensor parallel 2: FSDP shards within 4 ranks and replicates across
    2 groups (accelerate ParallelismConfig's `dp_replicate` mesh dimension), so each GPU keeps a quarter of the
    weights, not an eighth."""
    a = _analysis("llama-3_1-8b-hsdp-tp.yaml")
    plan = a.plan
    assert plan.world_size.value == 4 * 2 * 2
    found = _unmodelled(plan)
    assert "dp_shard_size" not in found and "dp_replicate_size" not in found
    assert plan.dp_replicas.value == 2
    assert a.resolution.resolved.world_size == 8 and a.resolution.resolved.shard_group == 4
    assert any("HSDP: FSDP shards over 4 GPU(s)" in x for x in a.resolution.assumptions)
    # the same 16 GPUs sharded as one group of 8
    path = FIXTURES / "llama-3_1-8b-hsdp-tp.yaml"
    text = path.read_text().replace("dp_shard_size: 4", "dp_shard_size: 8").replace("dp_replicate_size: 2\n", "")
    flat = analyze(text, str(path), Settings(workspace=FIXTURES, model_lookup=False))
    assert flat.resolution.resolved.shard_group == 0 and flat.resolution.resolved.world_size == 8
    assert flat.estimate.components["weights"] < a.estimate.components["weights"]


def test_dp_shard_size_without_fsdp_is_an_error():
    text = "base_model: Qwen/Qwen3-8B\nmicro_batch_size: 1\nsequence_len: 2048\ndp_shard_size: 2\nnum_epochs: 1\n"
    plan = parse_document(text, "/nonexistent/cfg.yaml").plan
    assert any("without FSDP" in i.message for i in plan.issues)


def test_qat_is_read_as_quantization_aware_training_not_a_precision_detail():
    """int8 activations with int4 weights: the layout whose saved copies are measured (knowledge/qat.py), read; a
    layout that is not (fp8 weights) is named as quantization-aware training with its dtypes, its entries covered by
    the section and never listed as precision details of their own."""
    plan = _plan("3b-qat-fsdp2.yaml")
    assert plan.qat is not None and plan.qat.value == "int8-dynamic-int4:32"
    assert not _unmodelled(plan)
    text = (FIXTURES / "3b-qat-fsdp2.yaml").read_text(encoding="utf-8")
    other = parse_document(
        text.replace("activation_dtype: int8", "activation_dtype: fp8").replace(
            "weight_dtype: int4", "weight_dtype: fp8"
        ),
        str(FIXTURES / "fp8-qat.yaml"),
        workspace=FIXTURES,
    ).plan
    found = _unmodelled(other)
    assert "qat" in found and other.qat is None
    assert "quantization-aware training" in found["qat"].what
    assert "weights fp8" in found["qat"].what and "activations fp8" in found["qat"].what
    assert "activation_dtype" not in found and "weight_dtype" not in found
    assert not any("precision detail" in u.what for u in other.unmodelled)


def test_quantize_moe_experts_is_read_as_quantized_experts():
    plan = _plan("glm-45-air-qlora.yaml")
    assert plan.experts_quantized is not None and plan.experts_quantized.value is True
    assert "quantize_moe_experts" not in _unmodelled(plan)


def _analysis_of(name: str, text: str):
    os.environ["HF_HUB_OFFLINE"] = "1"
    return analyze(text, str(FIXTURES / name), Settings(workspace=FIXTURES, model_lookup=False))


def test_quantize_moe_experts_sizes_the_experts_in_4_bit():
    """GLM-4.5-Air QLoRA (axolotl's example): with `quantize_moe_experts` its routed experts, nearly all of its
    parameters, are NF4 and nothing is upcast to fp32 (axolotl skips prepare_model_for_kbit_training), so the whole
    step takes under a byte per parameter; without it transformers 5 leaves them 16-bit and peft's k-bit preparation
    upcasts them to fp32."""
    text = (FIXTURES / "glm-45-air-qlora.yaml").read_text()
    assert "quantize_moe_experts: true" in text
    quantized = _analysis_of("glm-45-air-qlora.yaml", text)
    on = quantized.estimate
    off = _analysis_of(
        "glm-45-air-qlora.yaml", text.replace("quantize_moe_experts: true", "quantize_moe_experts: false")
    ).estimate
    assert on is not None and off is not None
    assert on.params_total == off.params_total
    assert on.allocated_bytes < on.params_total
    assert off.allocated_bytes > 2 * off.params_total
    assert quantized.resolution is not None
    assert any("prepare_model_for_kbit_training is skipped" in a for a in quantized.resolution.assumptions)


def test_lora_target_parameters_put_adapters_on_the_expert_stacks():
    """The example's commented `lora_target_parameters` ("Uncomment to also target MoE expert weights"): once on,
    every expert of gate_up_proj and down_proj trains, which the trainable count and the estimate show."""
    text = (FIXTURES / "glm-45-air-qlora.yaml").read_text()
    on_text = text.replace("# lora_target_parameters:", "lora_target_parameters:").replace(
        "#   - mlp.experts.", "  - mlp.experts."
    )
    assert on_text != text
    plan = parse_document(on_text, str(FIXTURES / "glm-45-air-qlora.yaml"), workspace=FIXTURES).plan
    assert plan.expert_targets is not None and plan.expert_targets.value == ["gate_up", "down"]
    assert "lora_target_parameters" not in _unmodelled(plan)
    on = _analysis_of("glm-45-air-qlora.yaml", on_text).estimate
    off = _analysis_of("glm-45-air-qlora.yaml", text).estimate
    assert on is not None and off is not None
    assert on.params_trainable > 10 * off.params_trainable
    assert on.allocated_bytes > off.allocated_bytes


def test_lora_target_parameters_off_the_experts_are_named_as_not_modelled():
    text = (
        "base_model: zai-org/GLM-4.5-Air\nadapter: qlora\nload_in_4bit: true\nquantize_moe_experts: true\n"
        "lora_r: 16\nlora_target_modules: [q_proj]\nlora_target_parameters: [self_attn.sinks]\n"
        "micro_batch_size: 1\nsequence_len: 1024\nnum_epochs: 1\n"
    )
    plan = parse_document(text, "/nonexistent/cfg.yaml").plan
    assert plan.expert_targets is None
    assert "self_attn.sinks" in _unmodelled(plan)["lora_target_parameters"].what


def test_a_trace_of_quantized_experts_says_they_were_traced_unquantized():
    """The trace builds fused experts as transformers loads them; axolotl's on-load quantization is not run there,
    so its report names that instead of passing the step off as the quantized run."""
    pytest.importorskip("torch")
    from vramlens.trace.config import step_config

    text = (FIXTURES / "glm-45-air-qlora.yaml").read_text()
    rp = _analysis_of("glm-45-air-qlora.yaml", text).resolution.resolved
    assert rp.experts_kbit
    assert any("quantized on load to 4 bits" in n for n in step_config(rp).not_traced)


# axolotl v0.9.2 examples/llama-3/lora-1b-kernels.yml, without checkpointing (the kernels' effect shows)
KERNELS = """
base_model: NousResearch/Llama-3.2-1B
load_in_8bit: false
load_in_4bit: false
adapter: lora
lora_r: 16
lora_alpha: 32
lora_target_linear: true
{dropout}lora_mlp_kernel: true
lora_qkv_kernel: true
lora_o_kernel: {o}
sequence_len: 2048
micro_batch_size: 2
gradient_accumulation_steps: 1
bf16: auto
gradient_checkpointing: false
"""


def _kernels(tmp_path, **kw):
    path = tmp_path / "lora-1b-kernels.yml"
    path.write_text(KERNELS.format(**{"dropout": "", "o": "true", **kw}), encoding="utf-8")
    return analyze(path.read_text(), str(path), Settings(workspace=tmp_path, model_lookup=False, gpu="A10G"))


def test_axolotl_lora_kernels_keep_what_unsloths_keep(tmp_path):
    """All three of axolotl's LoRA kernels (src/axolotl/kernels/lora.py: LoRA_QKV, LoRA_O, LoRA_MLP, after unsloth's)
    save what unsloth's fused LoRA functions save: no fp32 copies of the adapted inputs, the MLP's activation
    recomputed. They were named as not modelled and estimated as PEFT's LoRA layers."""
    with_kernels = _kernels(tmp_path)
    assert with_kernels.plan.fused_lora.value is True and with_kernels.plan.unmodelled == []
    rp = with_kernels.resolution.resolved
    assert rp.fused_lora
    from vramlens.estimate import estimate

    peft_layers = estimate(rp.with_changes(fused_lora=False), limits=False)
    assert with_kernels.estimate.components["activations"] < 0.7 * peft_layers.components["activations"]


@pytest.mark.parametrize("kw", [{"o": "false"}, {"dropout": "lora_dropout: 0.05\n"}], ids=["some", "dropout"])
def test_axolotl_lora_kernels_on_some_linears_or_with_dropout_are_named(tmp_path, kw):
    a = _kernels(tmp_path, **kw)
    assert a.plan.fused_lora is None
    assert {"lora_mlp_kernel", "lora_qkv_kernel"} <= set(_unmodelled(a.plan))


def test_axolotl_lora_kernels_on_a_mixture_of_experts_are_named(tmp_path):
    path = tmp_path / "moe-kernels.yml"
    path.write_text(
        KERNELS.format(dropout="", o="true").replace("NousResearch/Llama-3.2-1B", "Qwen/Qwen3-30B-A3B"),
        encoding="utf-8",
    )
    a = analyze(path.read_text(), str(path), Settings(workspace=tmp_path, model_lookup=False, gpu="H100"))
    assert not a.resolution.resolved.fused_lora
    assert any("routed experts" in u.what for u in a.plan.unmodelled)
