"""NeMo AutoModel main (36044ad3) recipes that build their model from the file's fields, train another kind of model,
or train nothing: read as their recipes define them (nemo_automodel/recipes/ at that commit)."""

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_automodel" / "main-36044ad3"


def run(name: str):
    path = FIXTURES / name
    return analyze(path.read_text(), str(path), Settings(workspace=FIXTURES, model_lookup=False))


def test_inline_config_builds_the_model():
    """`NeMoAutoModelForCausalLM.from_config` with an inline Qwen3MoeConfig (2 layers, 4 experts of 1024, top-2):
    estimated as that model, its experts counted, with the file's local batch."""
    a = run("qwen3_moe_2layer_proxy_torch_sdpa.yaml")
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert (arch.layers, arch.hidden, arch.num_experts, arch.experts_per_token) == (2, 2048, 4, 2)
    assert arch.moe_intermediate == 1024 and arch.vocab == 151936
    assert a.plan.micro_batch.value == 4


def test_builder_sizes_build_the_model():
    """`build_gpt2_model(n_layer=12, n_embd=768, n_head=12, vocab_size=50258)`: a 12-layer GPT-2 of 768, estimated."""
    a = run("nanogpt_pretrain.yaml")
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert (arch.layers, arch.hidden, arch.heads, arch.vocab) == (12, 768, 12, 50258)


def test_speculative_draft_training_says_so():
    """An EAGLE-3 recipe trains a draft network beside its frozen target: one message naming that kind and the
    target, not "not a config"."""
    a = run("qwen3_eagle3_perfectblend.yaml")
    assert a.plan is not None and a.estimate is None
    assert "speculative-decoding draft model" in a.error and "Qwen/Qwen3-8B" in a.error
    assert "TrainEagle3Recipe" in a.error


def test_diffusion_training_says_so():
    a = run("flux_t2i_flow.yaml")
    assert a.plan is not None and a.estimate is None
    assert a.error.startswith("training of a diffusion model") and "black-forest-labs/FLUX.1-dev" in a.error
    assert a.plan.model_id is None


def test_generation_config_is_not_training():
    a = run("not_training/generate_flux.yaml")
    assert a.plan is None and any(f.rule_id == "VL018" for f in a.findings)
    assert "generation" in next(f.message for f in a.findings if f.rule_id == "VL018")
