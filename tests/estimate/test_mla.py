"""DeepSeek's multi-head latent attention (MLA) by construction: the projections transformers builds
(q_a/q_b or q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj), the LoRA targets that reach them, and what one real
`DeepseekV3Attention` keeps for backward as the estimate counts it (before, MLA was sized as multi-head attention
over v_head_dim-wide heads: q, k, v, o linears that do not exist, a third of the attention's saved bytes missing)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
from vramlens.estimate import components as C
from vramlens.estimate.shapes import shapes, targeted
from vramlens.knowledge.models import arch_from_hf_config, param_count
from vramlens.resolve.adapters import normalize_targets

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from tiny_configs import TINY_CONFIGS  # noqa: E402
from trace_plans import plan  # noqa: E402

LORA = dict(peft="lora", lora_r=8, lora_alpha=16.0, lora_dropout=0.0)


def mla_config(**changes) -> dict:
    return {**TINY_CONFIGS["deepseek_v3"], **changes}


def arch(**changes):
    return arch_from_hf_config(mla_config(**changes), "tiny-mla")


@pytest.mark.parametrize("q_lora_rank", [64, None])
def test_the_attention_linears_are_mla_s_own(q_lora_rank):
    """q_a and q_b (or one q_proj without q_lora_rank), kv_a, kv_b and o with transformers' shapes: no k or v linear,
    and the linears, norms and embeddings add up to the count transformers builds."""
    a = arch(q_lora_rank=q_lora_rank)
    h, heads = a.hidden, a.heads
    attention = {l.name: (l.in_features, l.out_features) for l in shapes(a).linears if l.name not in C.MLP_LINEARS}
    q = {"q_a": (h, 64), "q_b": (64, heads * (32 + 16))} if q_lora_rank else {"q": (h, heads * (32 + 16))}
    assert attention == {**q, "kv_a": (h, 32 + 16), "kv_b": (32, heads * (32 + 32)), "o": (heads * 32, h)}
    torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
    from transformers import AutoConfig, AutoModelForCausalLM

    keys = {k: v for k, v in mla_config(q_lora_rank=q_lora_rank).items() if k != "model_type"}
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("deepseek_v3", **keys))
    assert param_count(a.model_copy(update={"params_total": 0})) == sum(p.numel() for p in model.parameters())


def test_lora_targets_reach_mla_s_modules_by_their_names():
    """peft's module names map to MLA's linears; q, k, v, o reach o alone when q is low-rank (no q_proj, k_proj or
    v_proj exists), all-linear reaches every one of them."""
    a = arch()
    names, unknown = normalize_targets(["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"], a)
    assert not unknown
    assert {l.name for l in targeted(a, names)} == {"q_a", "q_b", "kv_a", "kv_b", "o"}
    assert {l.name for l in targeted(a, ("q", "k", "v", "o"))} == {"o"}
    assert {l.name for l in targeted(a, ("all-linear",)) if l.name not in C.MLP_LINEARS} == {
        "q_a",
        "q_b",
        "kv_a",
        "kv_b",
        "o",
    }


def test_moe_lora_adapts_the_experts_not_the_dense_mlps():
    """peft 0.21.2 moves gate_proj/up_proj/down_proj to the fused experts' parameters on DeepSeek-V3: the dense
    layer's MLP and the shared experts get no adapter. The count is the one peft makes."""
    need_peft = pytest.importorskip("peft", reason="peft not installed (the trace extra)")
    torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
    from transformers import AutoConfig, AutoModelForCausalLM

    keys = {k: v for k, v in mla_config().items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("deepseek_v3", **keys))
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        lc = need_peft.LoraConfig(r=8, lora_alpha=16, target_modules=targets, task_type="CAUSAL_LM")
        model = need_peft.get_peft_model(model, lc)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    del torch
    rp = plan(arch=arch(), lora_targets=("q", "k", "v", "o", "gate", "up", "down"), **LORA)
    assert C.params(rp).adapter_params == trainable


def saved_bytes(fn, module, skip=()) -> int:
    """Bytes of the distinct storages autograd saves while `fn` runs, parameters and `skip` excluded."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    params |= {t.untyped_storage().data_ptr() for t in skip}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


@pytest.mark.parametrize("q_lora_rank", [64, None])
@pytest.mark.parametrize("mode", ["full", "frozen"])
@pytest.mark.parametrize("shape", [(2, 32), (1, 64)])
def test_mla_keeps_what_the_estimate_says(mode, shape, q_lora_rank):
    """A real `DeepseekV3Attention` in bf16, its SDPA call run as CUDA runs it (the memory-efficient kernel: value
    heads narrower than q/k heads), keeps the linears' inputs (trained), the latent norms' inputs, q, K, kv_b's
    output (V's storage), the kernel's output and logsumexp: the estimate's attention + linear inputs, per token, at
    several shapes; frozen (LoRA on o alone, whose lora_A reads the kernel's output), no linear input. RoPE's cos and
    sin are made once per step, not per layer: left out."""
    torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
    pytest.importorskip("transformers", reason="transformers not installed (the trace extra)")
    from transformers import AutoConfig, AutoModelForCausalLM
    from vramlens.trace import hf

    keys = {k: v for k, v in mla_config(q_lora_rank=q_lora_rank).items() if k != "model_type"}
    config = AutoConfig.for_model("deepseek_v3", **keys)
    config._attn_implementation = "sdpa"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    attention = model.model.layers[0].self_attn
    for p in model.parameters():
        p.requires_grad_(mode == "full")
    batch, positions = shape
    x = torch.randn(batch, positions, keys["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(positions)[None].expand(batch, positions))

    def run():
        with hf.BiasGradAsCuda():
            attention(x, (cos, sin), None)

    real = saved_bytes(run, attention, skip=(cos, sin))
    rp = plan(
        arch=arch(q_lora_rank=q_lora_rank),
        seq_len=positions,
        micro_batch=batch,
        **({} if mode == "full" else dict(LORA, lora_targets=("o",), adapter_fp32=False)),
    )
    lin = C.linear_inputs_per_token(rp)
    per_token = C.attention_per_token(rp) + lin.qkv + lin.o
    # the kernel's logsumexp is padded to a multiple of 32 positions (`efficient_attention_cpu`)
    lse = 4 * rp.arch.heads
    per_token += lse * (-(-positions // 32) * 32 / positions - 1)
    # and its philox seed and offset, two int64 scalars per call
    assert per_token * batch * positions + 2 * 8 == pytest.approx(real, rel=1e-6)


def test_mla_is_not_labelled_multi_head_attention():
    """The estimate no longer sizes MLA as multi-head attention, and says so no more."""
    assert "multi-head attention" not in arch().approximate
