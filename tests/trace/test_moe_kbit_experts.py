"""MoE experts quantized on load (axolotl `quantize_moe_experts`) against the real libraries at small shapes on CPU.

axolotl 067b021c src/axolotl/monkeypatch/moe_quant.py `patch_moe_quantization_on_load` runs bitsandbytes'
`replace_parameter_4bit` on every 3-D parameter with "expert" in its name as transformers loads it. Here a tiny
Qwen3-MoE (transformers 5 fused experts, the same `grouped_mm` experts as GLM-4.5/4.7) is built in bf16 and its
experts are quantized the same way: the packed weights with their constants, and what a forward keeps for backward
(the dequantized stacks) are compared with the estimate. Skips with a reason where torch/transformers/bitsandbytes
are missing (CI installs the trace extra)."""

from __future__ import annotations

import pytest
from trace_plans import QWEN3_MOE_BLOCK, need, plan
from vramlens.estimate import components as C
from vramlens.estimate.components.experts import expert_bytes, kbit_experts

pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("bitsandbytes")

import torch  # noqa: E402
import transformers  # noqa: E402

MOE = QWEN3_MOE_BLOCK
# axolotl's GLM QLoRA examples: attention-only LoRA, experts quantized on load, no k-bit upcast (axolotl skips
# prepare_model_for_kbit_training once the experts are quantized: src/axolotl/loaders/model.py)
QLORA_EXPERTS = dict(
    peft="qlora",
    quant_bits=4,
    quant_double=True,
    lora_r=8,
    lora_alpha=16.0,
    lora_targets=("q", "k", "v", "o"),
    weight_dtype="bf16",
    compute_dtype="bf16",
    experts_kbit=True,
    kbit_upcast=False,
)


def _model(quantize: bool):
    cfg = transformers.Qwen3MoeConfig(
        hidden_size=MOE.hidden,
        num_hidden_layers=MOE.layers,
        num_attention_heads=MOE.heads,
        num_key_value_heads=MOE.kv_heads,
        head_dim=MOE.head_dim,
        intermediate_size=MOE.intermediate,
        moe_intermediate_size=MOE.moe_intermediate,
        num_experts=MOE.num_experts,
        num_experts_per_tok=MOE.experts_per_token,
        vocab_size=MOE.vocab,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.requires_grad_(False)
    if quantize:
        from bitsandbytes.nn.parametrize import replace_parameter_4bit

        # what axolotl's `_patched_set_param_for_module` does to each loaded expert parameter
        for name, p in list(model.named_parameters()):
            if p.ndim >= 3 and "expert" in name.lower():
                mod_path, _, pname = name.rpartition(".")
                replace_parameter_4bit(model.get_submodule(mod_path), pname, compress_statistics=True, quant_type="nf4")
    return model


def _expert_bytes_real(model) -> int:
    """Bytes the quantized expert parameters hold: packed data and every tensor of their quant states."""
    seen: dict[int, int] = {}
    for mod in model.modules():
        plist = getattr(mod, "parametrizations", None)
        if plist is None:
            continue
        for entry in plist.values():
            seen[entry.original.data_ptr()] = entry.original.nbytes
            qs = entry[0].quant_state
            for t in (
                qs.absmax,
                qs.code,
                qs.offset,
                getattr(qs.state2, "absmax", None),
                getattr(qs.state2, "code", None),
            ):
                if isinstance(t, torch.Tensor):
                    seen[t.data_ptr()] = t.nbytes
    return sum(seen.values())


def test_experts_quantized_on_load_weigh_what_bitsandbytes_stores():
    """4-bit packed experts with their double-quantized absmax: the estimate's k-bit bytes grow by what bitsandbytes
    stores for the experts, and its 16-bit frozen bytes shrink by the experts' bf16 size."""
    rp = plan(arch=MOE, **QLORA_EXPERTS)
    assert kbit_experts(rp)
    on, off = C.params(rp), C.params(rp.with_changes(experts_kbit=False))
    real_kbit = _expert_bytes_real(_model(quantize=True))
    bf16 = _model(quantize=False)
    real_bf16 = sum(p.nbytes for n, p in bf16.named_parameters() if p.ndim >= 3 and "expert" in n)
    est_kbit = (on.quantized_bytes + on.quant_constants) - (off.quantized_bytes + off.quant_constants)
    assert est_kbit / real_kbit == pytest.approx(1.0, abs=0.03)
    assert off.frozen_bytes - on.frozen_bytes == real_bf16


def _saved_outside_weights(model, tokens: int) -> int:
    """Bytes of the distinct storages a forward saves for backward, the model's own parameters and buffers apart."""
    own = {p.data_ptr() for p in model.parameters()} | {b.data_ptr() for b in model.buffers()}
    storages: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in own:
            storages[s.data_ptr()] = s.nbytes()
        return t

    ids = torch.randint(0, MOE.vocab, (1, tokens))
    emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(inputs_embeds=emb).logits.float().sum()
    return sum(storages.values())


def test_a_forward_keeps_each_blocks_dequantized_expert_stacks():
    """Each MoE block's experts are dequantized on read and grouped_mm keeps the bf16 stacks for the input's gradient:
    a forward keeps one block's worth of expert weights per block beyond what the 16-bit model keeps (whose saved
    weights are its parameters). The estimate's per-block copies are those stacks."""
    rp = plan(arch=MOE, **QLORA_EXPERTS)
    tokens = 64
    extra = _saved_outside_weights(_model(quantize=True), tokens) - _saved_outside_weights(
        _model(quantize=False), tokens
    )
    per_block = C.expert_weight_copies(rp)
    assert per_block > 0
    assert extra / (per_block * (MOE.layers - MOE.dense_layers)) == pytest.approx(1.0, abs=0.03)


def test_dequantized_experts_compute_in_the_loaded_dtype():
    """bitsandbytes' 4-bit parametrization returns the dtype the experts were loaded in: bf16, not the fp32 that
    peft's k-bit preparation gives unquantized experts; the estimate sizes expert activations by it."""
    model = _model(quantize=True)
    experts = next(m for m in model.modules() if getattr(m, "parametrizations", None) is not None)
    name = next(iter(experts.parametrizations.keys()))
    assert getattr(experts, name).dtype == torch.bfloat16
    rp = plan(arch=MOE, **QLORA_EXPERTS)
    assert expert_bytes(rp) == 2
    assert expert_bytes(rp.with_changes(experts_kbit=False, kbit_upcast=True)) == 4


def test_lora_target_parameters_adapt_every_expert_at_rank_r():
    """axolotl's `lora_target_parameters` (peft `target_parameters`) on the fused stacks: peft wraps each in a
    `lora.ParamWrapper` of rank r per expert; the estimate counts the parameters peft creates."""
    need("peft")
    import peft

    model = _model(quantize=False)
    config = peft.LoraConfig(
        r=8,
        lora_alpha=16,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    )
    trainable = sum(p.numel() for p in peft.get_peft_model(model, config).parameters() if p.requires_grad)
    rp = plan(arch=MOE, **dict(QLORA_EXPERTS, expert_targets=("gate_up", "down")))
    assert C.params(rp).adapter_params == trainable
    assert C.params(rp.with_changes(expert_targets=())).adapter_params < trainable / 10


def test_int8_experts_dequantize_to_fp32():
    """With `load_in_8bit` axolotl quantizes the stacks row-wise (bitsandbytes `int8_vectorwise_quant`) and its
    parametrization returns `int8_vectorwise_dequant`'s fp32: the experts then compute, and keep their stacks, in
    fp32 (transformers casts grouped_mm's input to the weight's dtype)."""
    import bitsandbytes as bnb

    stack = torch.randn(4, 64, 32, dtype=torch.bfloat16)
    data, stats, _ = bnb.functional.int8_vectorwise_quant(stack.reshape(-1, 32).to(torch.float16))
    assert data.dtype == torch.int8
    assert bnb.functional.int8_vectorwise_dequant(data, stats).dtype == torch.float32
    rp = plan(arch=MOE, **dict(QLORA_EXPERTS, peft="lora", quant_bits=8, quant_double=False))
    assert kbit_experts(rp) and expert_bytes(rp) == 4
    assert C.expert_weight_copies(rp) == 4 * sum(lin.params for lin in C.shapes(MOE).linears if lin.expert) // (
        MOE.layers - MOE.dense_layers
    )
