"""ms-swift's `--freeze_parameters_ratio`: the first share of the parameters, in the order transformers registers
them, stops training. The estimate trains what is left, counted by whole layers (the layer the boundary falls in
counted whole), and says so; with an adapter ms-swift ignores it."""

from __future__ import annotations

import json
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path

import pytest
from vramlens.analysis import Settings, analyze
from vramlens.estimate import estimate

QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _swift_trainable(sizes: list[int], ratio: float) -> int:
    """ms-swift v4.4.3 swift/utils/transformers_utils.py `freeze_parameters`, on a list of tensor sizes."""
    n_freeze = int(sum(sizes) * ratio)
    idx = bisect_right(list(accumulate(sizes)), n_freeze)
    return sum(sizes[idx:])


def _estimate(tmp_path: Path, config: dict, ratio: float, tuner: str = "full"):
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    text = (
        f"swift sft --model ./m --tuner_type {tuner} --per_device_train_batch_size 1 --max_length 512 "
        f"--freeze_parameters_ratio {ratio}\n"
    )
    (tmp_path / "run.sh").write_text(text, encoding="utf-8")
    analysis = analyze(text, str(tmp_path / "run.sh"), Settings(workspace=tmp_path, model_lookup=False, gpu="H100"))
    return analysis.resolution.resolved


@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.5, 0.77, 0.9])
def test_the_trained_parameters_are_those_ms_swift_leaves_trainable_to_one_layer(tmp_path, ratio):
    """The parameter tensors in the order transformers registers them (the model built on the meta device), frozen
    as ms-swift freezes them: the estimate trains that, up to one decoder layer more (the layer the boundary falls in,
    counted whole) and the final norm's weights less (not among the layers counted)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**QWEN2))
    sizes = [p.numel() for p in model.parameters()]
    per_layer = sum(p.numel() for p in model.model.layers[0].parameters())
    exact = _swift_trainable(sizes, ratio)

    rp = _estimate(tmp_path, QWEN2, ratio)
    trained = estimate(rp).params_trainable
    assert exact - QWEN2["hidden_size"] <= trained <= exact + per_layer, (exact, trained, per_layer)
    assert rp.trained_where == "last" and "lm_head" in rp.trained_extra
    assert any("freeze_parameters_ratio" in r and "in the model's order" in r for r in rp.approximate)


def test_a_share_smaller_than_the_embedding_freezes_nothing(tmp_path):
    """The token embedding is the first tensor: a share below its size freezes no tensor at all."""
    rp = _estimate(tmp_path, QWEN2, 0.05)
    assert rp.trained_layers is None
    est = estimate(rp)
    assert est.params_trainable == est.params_total


def test_freezing_lowers_the_peak_and_an_adapter_run_ignores_it(tmp_path):
    full = estimate(_estimate(tmp_path, QWEN2, 0.05)).allocated_bytes
    half = estimate(_estimate(tmp_path, QWEN2, 0.5)).allocated_bytes
    assert half < full
    lora = _estimate(tmp_path, QWEN2, 0.5, tuner="lora")
    assert lora.trained_layers is None
    assert not any("freeze_parameters_ratio" in r for r in lora.approximate)
