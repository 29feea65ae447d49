"""torch.compile's saved activations: the estimator's compiled block against AOTAutograd's own partitioner.

Under `torch.compile` the forward and backward are one graph that AOTAutograd splits with its min-cut partitioner
(`torch._functorch.partitioners.min_cut_rematerialization_partition`, the partitioner inductor uses): pointwise work
(RMSNorm's upcast and normalisation, SiLU, casts) is recomputed in backward from what it keeps, and identical casts
are computed once. These tests run transformers' own Llama decoder layer (and peft's LoRA on it) through that
partitioner on CPU with real tiny tensors, sum the bytes the compiled backward keeps, and compare them with the
estimator's compiled per-layer activations for the same shapes; the eager layer, measured with saved-tensor hooks,
is checked against the eager formula the same way.
"""

from __future__ import annotations

import pytest
from trace_plans import LORA, TINY_LLAMA, need, plan
from vramlens.estimate import components as C

BATCH, SEQ = 2, 128


def _layer(lora: bool, dtype_name: str):
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    arch = TINY_LLAMA
    cfg = LlamaConfig(
        hidden_size=arch.hidden,
        intermediate_size=arch.intermediate,
        num_attention_heads=arch.heads,
        num_key_value_heads=arch.kv_heads,
        num_hidden_layers=1,
        vocab_size=arch.vocab,
        attention_dropout=0.0,
    )
    cfg._attn_implementation = "sdpa"
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, 0).to(dtype)
    module = layer
    if lora:
        from peft import LoraConfig, get_peft_model

        class Wrapper(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layer = layer

            def forward(self, *args, **kwargs):
                return self.layer(*args, **kwargs)

        names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        module = get_peft_model(
            Wrapper(),
            LoraConfig(r=LORA["lora_r"], lora_alpha=LORA["lora_alpha"], target_modules=names, lora_dropout=0.0),
        )
    x = torch.randn(BATCH, SEQ, arch.hidden, dtype=dtype, requires_grad=True)
    positions = torch.arange(SEQ)[None].expand(BATCH, SEQ)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, positions)
    cos, sin = cos.to(dtype), sin.to(dtype)

    def run():
        out = module(x, attention_mask=None, position_embeddings=(cos, sin), position_ids=positions)
        return out[0] if isinstance(out, tuple) else out

    outside = {p.untyped_storage().data_ptr() for p in module.parameters()}
    outside |= {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
    return run, outside, x


def _eager_bytes_per_token(lora: bool, dtype_name: str) -> float:
    import torch

    run, outside, x = _layer(lora, dtype_name)
    outside.add(x.untyped_storage().data_ptr())  # eager keeps the norm's upcast copy, never the input itself
    kept: dict[int, int] = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(n for ptr, n in kept.items() if ptr not in outside) / (BATCH * SEQ)


def _compiled_bytes_per_token(lora: bool, dtype_name: str) -> float:
    import torch
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    run, outside, _ = _layer(lora, dtype_name)

    def backend(gm, example_inputs):
        return aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=lambda g, _: g,
            bw_compiler=lambda g, _: g,
            partition_fn=min_cut_rematerialization_partition,
        )

    torch._dynamo.reset()
    out = torch.compile(run, backend=backend, fullgraph=False)()
    kept = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for fn in _functions(out.grad_fn)
        for t in (getattr(fn, "saved_tensors", ()) or ())
        if isinstance(t, torch.Tensor)
    }
    outside.add(out.untyped_storage().data_ptr())
    return sum(n for ptr, n in kept.items() if ptr not in outside) / (BATCH * SEQ)


CASES = [
    pytest.param(False, "bfloat16", dict(), id="full-bf16"),
    pytest.param(True, "bfloat16", dict(LORA), id="lora-bf16-fp32-adapters"),
]


def _needs(lora: bool) -> None:
    for module in ("torch", "transformers") + (("peft",) if lora else ()):
        need(module)


def _estimated(compiled: bool, extra: dict) -> float:
    rp = plan(compile=compiled, repeat_kv=False, attn_mask=False, seq_len=SEQ, micro_batch=BATCH, **extra)
    return C.activations_per_token(rp)[1]


@pytest.mark.parametrize("lora, dtype_name, extra", CASES)
def test_the_compiled_block_keeps_what_the_partitioner_keeps(lora, dtype_name, extra):
    _needs(lora)
    measured = _compiled_bytes_per_token(lora, dtype_name)
    estimated = _estimated(True, extra)
    assert estimated == pytest.approx(measured, rel=0.03), (estimated, measured)


@pytest.mark.parametrize("lora, dtype_name, extra", CASES)
def test_compile_keeps_less_than_eager_by_what_it_recomputes(lora, dtype_name, extra):
    _needs(lora)
    eager, compiled = _eager_bytes_per_token(lora, dtype_name), _compiled_bytes_per_token(lora, dtype_name)
    assert _estimated(False, extra) == pytest.approx(eager, rel=0.03)
    assert compiled < 0.8 * eager
    assert _estimated(True, extra) / _estimated(False, extra) == pytest.approx(compiled / eager, abs=0.03)


def test_the_compiled_loss_keeps_one_fp32_log_softmax_of_the_logits():
    """transformers' causal-LM loss compiled with the LM head: what the forward keeps for backward is the input of
    the head (16-bit), the labels and one fp32 vocabulary-wide tensor per token (the log-softmax) — not the fp32
    upcast, the shifted copy and the log-softmax of eager. The estimator charges that 4 bytes per logit plus the
    16-bit gradient backward writes."""
    need("torch")
    need("transformers")
    import torch
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from transformers.loss.loss_utils import ForCausalLMLoss

    vocab, hidden = TINY_LLAMA.vocab, TINY_LLAMA.hidden
    torch.manual_seed(0)
    head = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(BATCH, SEQ, hidden, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (BATCH, SEQ))

    def run():
        logits = torch.nn.functional.linear(x, head)
        return ForCausalLMLoss(logits, labels, vocab)

    def backend(gm, example_inputs):
        return aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=lambda g, _: g,
            bw_compiler=lambda g, _: g,
            partition_fn=min_cut_rematerialization_partition,
        )

    torch._dynamo.reset()
    loss = torch.compile(run, backend=backend)()
    wide = [
        t
        for fn in _functions(loss.grad_fn)
        for t in (getattr(fn, "saved_tensors", ()) or ())
        if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == vocab
    ]
    assert [(t.dtype, t.numel()) for t in wide] == [(torch.float32, BATCH * SEQ * vocab)]

    rp = plan(compile=True, seq_len=SEQ, micro_batch=BATCH)
    assert C.logits_per_token(rp) == (4 + 2) * vocab
    assert C.logits_per_token(plan(seq_len=SEQ, micro_batch=BATCH)) == 12 * vocab


def _functions(fn):
    pending, seen = [fn], set()
    while pending:
        fn = pending.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        yield fn
        pending.extend(next_fn for next_fn, _ in fn.next_functions)
