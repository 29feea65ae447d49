"""torchtitan v0.2.0 job configs whose flavors have no published twin (llama4's interleaved MoE, qwen3's MoE debug
model) are estimated from the model torchtitan builds from the flavor's fields; a diffusion model says so."""

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.formats.torchtitan import flavor_args, llama4_expert_hidden
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan" / "v0.2.0"


def run(name: str):
    path = FIXTURES / name
    return analyze(path.read_text(), str(path), Settings(workspace=FIXTURES, model_lookup=False))


def llama4_params(a: dict) -> int:
    """torchtitan's llama4 built from the flavor (torchtitan/models/llama4/model/model.py at v0.2.0): GQA attention,
    two RMSNorms a layer, every `interleave_moe_layer_step`-th layer routed experts + one shared FFN of
    hidden × num_shared + a router, the others a FeedForward of 4 × dim; embedding, final norm, untied output."""
    d, heads, kv = a["dim"], a["n_heads"], a["n_kv_heads"]
    hd = d // heads
    attention = 2 * d * heads * hd + 2 * d * kv * hd
    e = llama4_expert_hidden(a)
    moe = (a["num_experts"] + a["num_shared_experts"]) * 3 * d * e + d * a["num_experts"]
    dense_hidden = int(a["ffn_dim_multiplier"] * int(2 * 4 * d / 3))
    dense_hidden += -dense_hidden % a["multiple_of"]
    moe_layers = a["n_layers"] // a["interleave_moe_layer_step"]
    return (
        2 * a["vocab_size"] * d
        + d
        + a["n_layers"] * (attention + 2 * d)
        + moe_layers * moe
        + (a["n_layers"] - moe_layers) * 3 * d * dense_hidden
    )


def test_llama4_17bx16e_is_estimated():
    """Llama 4 Scout's shapes (16 experts of 8192, a shared one, every layer MoE), its parameter count that of the
    model torchtitan builds, TP 8 and the file's batch and sequence."""
    args, _ = flavor_args("llama4", "17bx16e")
    a = run("llama4_17bx16e.toml")
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert llama4_expert_hidden(args) == 8192 and arch.moe_intermediate == 8192
    assert arch.num_experts == 16 and arch.dense_layers == 0
    from vramlens.knowledge.models import param_count

    assert param_count(arch) == llama4_params(args)
    assert a.plan.tensor_parallel.value == 8 and a.plan.seq_len.value == 8192


def test_qwen3_moe_debug_is_estimated():
    args, _ = flavor_args("qwen3", "debugmodel_moe")
    a = run("qwen3_moe_debug.toml")
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert (arch.num_experts, arch.experts_per_token, arch.moe_intermediate) == (
        args["num_experts"],
        args["top_k"],
        args["moe_inter_dim"],
    )


def test_flux_says_it_is_a_diffusion_model():
    a = run("flux_dev_model.toml")
    assert a.estimate is None and a.error.startswith("training of a diffusion model")
    assert "flux-dev" in a.error
