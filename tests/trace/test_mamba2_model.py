"""A pure Mamba-2 model (transformers 5.24 models/mamba2/modeling_mamba2.py `Mamba2ForCausalLM`) against the real
library at small shapes: its linears are the mixers' in_proj and out_proj only, LoRA reaches what peft can adapt
(in_proj: peft 0.21.2 has no default targets for mamba2 and refuses out_proj), the parameter count is the build's,
and the real-library grid's checkpointed rows. Skips with a reason where torch, transformers or peft are not
installed."""

from __future__ import annotations

import warnings

import pytest
from tiny_configs import TINY_CONFIGS
from trace_plans import assert_estimate_matches_trace, need
from vramlens.analysis import analyze
from vramlens.estimate import components as C
from vramlens.estimate.shapes import shapes, targeted
from vramlens.knowledge.models import arch_from_hf_config
from vramlens.settings import Settings

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
need("transformers")
need("peft")


def test_mamba2_linears_are_its_mixers():
    """The linears a Mamba-2 model holds are in_proj and out_proj in every layer (before: q, k, v, o, gate, up and
    down of a stand-in attention + MLP block, which counted 1.9 times the parameters transformers builds), and
    LoRA's targets reach in_proj alone, as peft does."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = TINY_CONFIGS["mamba2"]
    arch = arch_from_hf_config(config, "tiny-mamba2")
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("mamba2", **keys))
    linears = {
        (name.rsplit(".", 1)[-1], m.in_features, m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name != "lm_head"
    }
    assert {(l.name, l.in_features, l.out_features) for l in shapes(arch).linears} == linears
    assert shapes(arch).total == sum(p.numel() for p in model.parameters())
    assert [l.name for l in targeted(arch, ("all-linear",))] == ["in_proj"]


def test_lora_on_a_mamba2_model_adapts_in_proj(tmp_path):
    """A config that names attention targets for a Mamba-2 model is estimated with LoRA on in_proj, what peft can
    adapt in it, and says so; before, no adapter was counted and nothing trained."""
    import json

    folder = tmp_path / "tiny-mamba2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIGS["mamba2"]))
    text = (
        "model_name_or_path: ./tiny-mamba2\n"
        "finetuning_type: lora\nlora_target: q_proj,v_proj\nstage: sft\ncutoff_len: 512\n"
        "per_device_train_batch_size: 1\nbf16: true\n"
    )
    (tmp_path / "train.yaml").write_text(text)
    result = analyze(text, str(tmp_path / "train.yaml"), Settings(workspace=tmp_path, model_lookup=False))
    assert result.resolution is not None
    rp = result.resolution.resolved
    assert rp.arch.family == "mamba2"
    assert rp.lora_targets == ("in_proj",)
    assert C.params(rp).adapter_params == rp.lora_r * (128 + 584) * 2  # in_proj 128 → 584, two layers
    assert any("in_proj" in str(a) for a in result.resolution.assumptions)


# rows of the hybrids grid (benchmarks/trace_vs_estimate.py --grid hybrids), checkpointed: full (before: 1.17 of the
# real-library trace) and LoRA on in_proj (before: not traced, the grid asked for q_proj… which a Mamba-2 model has
# not)
ROWS = [("full", True), ("lora", True)]


@pytest.mark.parametrize("mode,ckpt", ROWS, ids=["full-ckpt", "lora-ckpt"])
def test_estimate_follows_the_real_library_trace(mode, ckpt):
    from test_new_architectures import row_plan

    rp = row_plan("mamba2", mode, ckpt)
    if mode == "lora":
        rp = rp.model_copy(update={"lora_targets": ("in_proj",)})
    traced = assert_estimate_matches_trace(rp)
    assert C.params(rp).total == traced["params_total"]
    if mode == "lora":
        assert C.params(rp).adapter_params == traced["params_trainable"]
