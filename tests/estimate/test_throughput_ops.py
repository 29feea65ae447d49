"""The step's launch floor and GPTQ Q-LoRA: what a small model at short sequences or a GPTQ checkpoint costs per
micro-step before any arithmetic, counted as the libraries run it."""

from __future__ import annotations

import collections

import pytest
from vramlens.estimate.shapes import shapes
from vramlens.estimate.throughput import (
    OPS_GPTQ_DEQUANT,
    gptq_dequant_bytes,
    launch_ops,
    throughput,
)
from vramlens.knowledge.gpus import gpu_by_name
from vramlens.knowledge.models import lookup_model
from vramlens.knowledge.optimizers import lookup_optimizer
from vramlens.knowledge.schema import ModelArch
from vramlens.resolved import ResolvedPlan

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
HF_NAMES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _tiny_arch(layers: int) -> ModelArch:
    return ModelArch(
        id="tiny-llama",
        family="llama",
        mlp="swiglu",
        norm="rmsnorm",
        hidden=64,
        layers=layers,
        heads=4,
        n_kv_heads=4,
        intermediate=172,
        vocab=128,
        source="test",
    )


def _tiny_plan(layers: int, lora: bool, dropout: float, ckpt: bool) -> ResolvedPlan:
    kw: dict = {}
    if lora:
        kw = {"peft": "lora", "lora_r": 4, "lora_alpha": 16, "lora_dropout": dropout, "lora_targets": LORA_TARGETS}
    return ResolvedPlan(
        arch=_tiny_arch(layers),
        framework="transformers",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=1,
        seq_len=16,
        grad_checkpointing=ckpt,
        attn_impl="sdpa",
        optimizer=lookup_optimizer("adamw_torch"),
        gpu=gpu_by_name("A100-80GB"),
        **kw,
    )


def _dispatched_per_layer(lora: bool, dropout: float, ckpt: bool) -> float:
    """Ops the dispatcher runs per decoder layer in one forward + backward of transformers' Llama (bf16, SDPA),
    LoRA through peft, reentrant checkpointing as transformers' Trainer enables it: 3 layers minus 1, halved."""
    torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
    transformers = pytest.importorskip("transformers", reason="transformers not installed (the trace extra)")
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    def count(layers: int) -> int:
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(
            hidden_size=64,
            intermediate_size=172,
            num_attention_heads=4,
            num_key_value_heads=4,
            num_hidden_layers=layers,
            vocab_size=128,
            attn_implementation="sdpa",
        )
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
        if lora:
            peft = pytest.importorskip("peft", reason="peft not installed (the trace extra)")
            model = peft.get_peft_model(
                model, peft.LoraConfig(r=4, lora_alpha=16, lora_dropout=dropout, target_modules=HF_NAMES)
            )
        model.train()
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
            if lora:
                model.enable_input_require_grads()
        ids = torch.randint(0, 128, (1, 16))
        model(input_ids=ids, labels=ids).loss.backward()  # first step: lazy initialisation out of the count
        counter = Count()
        with counter:
            model(input_ids=ids, labels=ids).loss.backward()
        return counter.n

    return (count(3) - count(1)) / 2


@pytest.mark.parametrize(
    "lora,dropout,ckpt",
    [(False, 0.0, False), (False, 0.0, True), (True, 0.0, True), (True, 0.05, True), (True, 0.05, False)],
)
def test_launch_floor_counts_the_ops_transformers_and_peft_dispatch_per_layer(lora, dropout, ckpt):
    counted = _dispatched_per_layer(lora, dropout, ckpt)
    estimated = (launch_ops(_tiny_plan(3, lora, dropout, ckpt)) - launch_ops(_tiny_plan(1, lora, dropout, ckpt))) / 2
    assert estimated == pytest.approx(counted, rel=0.05)


def _qwen_plan(method: str, seq: int) -> ResolvedPlan:
    kw: dict = {"peft": "lora", "lora_r": 64, "lora_alpha": 16, "lora_dropout": 0.05, "lora_targets": LORA_TARGETS}
    if method == "gptq":
        kw |= {"peft": "qlora", "quant_bits": 4, "quant_type": "gptq"}
    return ResolvedPlan(
        arch=lookup_model("Qwen/Qwen2.5-7B"),
        framework="transformers",
        weight_dtype="fp16",
        compute_dtype="fp16",
        micro_batch=1,
        seq_len=seq,
        grad_checkpointing=True,
        attn_impl="flash_attention_2",
        attn_mask=False,
        optimizer=lookup_optimizer("adamw_torch"),
        gpu=gpu_by_name("A100-80GB"),
        **kw,
    )


def test_gptq_dequantisation_bytes_are_the_torch_ops_auto_gptq_runs():
    """auto-gptq qlinear_cuda_old.py `QuantLinear.forward` (torch path, 4 bits, group 128), the weight's ops, each
    op's inputs and outputs counted once (a broadcast input by its storage)."""
    torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
    from torch.utils._python_dispatch import TorchDispatchMode

    moved = collections.Counter()

    class Bytes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func._schema.returns and any(r.alias_info is not None for r in func._schema.returns):
                return out  # a view moves nothing
            for a in list(args) + [out]:
                if isinstance(a, torch.Tensor):
                    moved["bytes"] += a.untyped_storage().nbytes()
            return out

    k, n, bits, group = 1024, 512, 4, 128
    qweight = torch.randint(0, 2**31 - 1, (k * bits // 32, n), dtype=torch.int32)
    wf = torch.tensor(list(range(0, 32, bits)), dtype=torch.int32).unsqueeze(0)
    scales = torch.rand(k // group, 1, n, dtype=torch.float16)
    zeros = torch.randint(0, 15, (k // group, 1, n), dtype=torch.int8)
    with Bytes():
        weight = torch.bitwise_right_shift(torch.unsqueeze(qweight, 1).expand(-1, 32 // bits, -1), wf.unsqueeze(-1))
        weight = weight.to(torch.int8)
        weight = torch.bitwise_and(weight, (2**bits) - 1)
        weight = weight.reshape(-1, group, weight.shape[2])
        weight = scales * (weight - zeros)
    per_element = moved["bytes"] / (k * n)
    assert per_element == pytest.approx(gptq_dequant_bytes(bits), rel=0.03)


def test_gptq_qlora_pays_its_dequantisation_once_per_forward_pass_and_keeps_16_bit_activations():
    # short sequences: the whole-weight dequantisation is a fixed cost per micro-step a LoRA step does not have
    lora, gptq = throughput(_qwen_plan("lora", 512)), throughput(_qwen_plan("gptq", 512))
    assert gptq.step_s > 1.3 * lora.step_s
    quant = sum(lin.params for lin in shapes(lookup_model("Qwen/Qwen2.5-7B")).linears)
    bw = gpu_by_name("A100-80GB").memory_gbs * 1e9 * 0.8
    # forward and the checkpointed recompute; the saved dequantised weight serves the input gradient
    assert gptq.parts_s["dequantize"] == pytest.approx(2 * quant * gptq_dequant_bytes(4) / bw, rel=0.01)
    # peft's prepare_model_for_kbit_training casts nothing on a GPTQ model: its norms and activations stay 16-bit
    assert gptq.parts_s["elementwise"] == pytest.approx(lora.parts_s["elementwise"], rel=0.01)


def _qwen1_plan(method: str) -> ResolvedPlan:
    """Qwen-1 7B (QwenLM/Qwen finetune.py LoRA targets c_attn, c_proj, w1, w2) as the plan sees it: q, k and v one
    linear (`fused_qkv`)."""
    arch = ModelArch(
        id="Qwen/Qwen-7B",
        family="qwen",
        mlp="swiglu",
        norm="rmsnorm",
        hidden=4096,
        layers=32,
        heads=32,
        intermediate=11008,
        vocab=151936,
        tied_embeddings=False,
        source="Qwen/Qwen-7B config.json",
    )
    return _qwen_plan(method, 512).model_copy(update={"arch": arch, "fused_qkv": True})


def test_gptq_unpacks_each_quantized_module_once_per_pass_a_fused_qkv_one_module():
    """A Qwen-1 block has five GPTQ QuantLinear modules (modeling_qwen.py `QWenAttention.c_attn`, `c_proj`;
    `QWenMLP.w1`, `w2`, `c_proj`), not seven: the dequantisation's ops run five times per block and pass (forward and
    the checkpointed recompute)."""
    lora, gptq = _qwen1_plan("lora"), _qwen1_plan("gptq")
    assert launch_ops(gptq) - launch_ops(lora) == 32 * 5 * OPS_GPTQ_DEQUANT * 2
