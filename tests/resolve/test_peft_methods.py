"""PEFT methods beyond LoRA/DoRA/IA3/VeRA: read by name, estimated as what they train (a frozen base under the
method's own parameters, counted as peft builds them), and named as approximate and unmodelled where their kept
tensors are not modelled exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.estimate import estimate
from vramlens.estimate.components.adapters import method_adapter_params
from vramlens.formats import parse_file
from vramlens.knowledge.models import arch_from_hf_config
from vramlens.resolve import Settings, resolve

TUNERS = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "v4.0.0" / "tuners"


def _resolved(name: str):
    plan = parse_file(TUNERS / f"{name}.sh").plan
    return plan, resolve(plan, Settings(gpu="A100-80GB")).resolved


@pytest.mark.parametrize("method", ["adalora", "adapter", "boft"])
def test_ms_swift_tuner_examples_train_only_their_adapters(method):
    plan, rp = _resolved(method)
    est = estimate(rp)
    # the base is frozen: gradients and optimizer states for the method's parameters, not for 7.6 B weights
    assert est.params_trainable < 0.01 * est.params_total
    assert est.components.get("gradients", 0) < 0.01 * est.components["weights"]
    assert rp.adapter_method == method
    assert not any("full fine-tuning" in r for r in rp.approximate)
    assert any(u.key == "tuner_type" and u.value == method for u in rp.unmodelled)


def _tiny_arch():
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 256,
        "torch_dtype": "bfloat16",
    }
    return config, arch_from_hf_config(config, "tiny/llama")


@pytest.mark.parametrize(
    ("method", "shape", "peft_config"),
    [
        ("adalora", {"r": 12}, ("AdaLoraConfig", {"init_r": 12, "total_step": 10})),
        ("loha", {"r": 8}, ("LoHaConfig", {"r": 8})),
        ("lokr", {"r": 8}, ("LoKrConfig", {"r": 8})),
        ("boft", {"block": 4, "factors": 1}, ("BOFTConfig", {"boft_block_size": 4, "boft_n_butterfly_factor": 1})),
        ("oft", {"block": 32}, ("OFTConfig", {"r": 0, "oft_block_size": 32})),
        ("fourierft", {"frequencies": 100}, ("FourierFTConfig", {"n_frequency": 100})),
    ],
)
def test_method_parameters_match_peft(method, shape, peft_config):
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    config, arch = _tiny_arch()
    # in bf16, as training loads it: peft moves each new adapter to the base layer's dtype and device (on a GPU,
    # from the CPU it is made on), which re-wraps AdaLoRA's `ranknum` as a trainable parameter
    torch = pytest.importorskip("torch")
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).to(torch.bfloat16)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    cls, kwargs = peft_config
    wrapped = peft.get_peft_model(model, getattr(peft, cls)(target_modules=targets, **kwargs))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)

    plan = parse_file(TUNERS / "adalora.sh").plan
    rp = resolve(plan, Settings(gpu="A100-80GB")).resolved
    rp = rp.with_changes(
        arch=arch, lora_targets=("all-linear",), adapter_method=method, adapter_shape=tuple(sorted(shape.items()))
    )
    assert method_adapter_params(rp) == trainable
