"""The synthetic model has the architecture's parameters: the same count as the knowledge base's
`param_count` (the figure the estimator uses), for catalog models of every family the builder covers."""

from __future__ import annotations

import pytest
from trace_plans import ARCHS, need, plan


def _catalog_models():
    from vramlens.knowledge.models import all_models

    picked, seen = [], set()
    for arch in all_models():
        if arch.kv_lora_rank or arch.block == "encoder-decoder":  # MLA is traced as GQA; T5's position bias not built
            continue
        if arch.approximate:
            continue  # a generic reading of an architecture the catalog has no exact model of
        key = (arch.family, arch.block, arch.is_moe)
        if key in seen:
            continue
        seen.add(key)
        picked.append(arch)
    return picked


@pytest.mark.parametrize("arch", _catalog_models(), ids=lambda a: a.id)
def test_parameter_count_matches_the_catalog(arch):
    need("torch")
    from vramlens.estimate.shapes import QK_NORM_FAMILIES
    from vramlens.knowledge.models import param_count
    from vramlens.trace import model as M
    from vramlens.trace.config import step_config

    cfg = step_config(plan(arch=arch))
    built = M.param_count(M.build_meta(cfg))
    expected = param_count(arch)
    extra = 0
    if arch.family in QK_NORM_FAMILIES and not arch.params_total:
        # per-head q/k norm weights, which a count from the shapes leaves out (transformers' own count has them)
        extra = arch.layers * 2 * arch.d_head
    if arch.block == "encoder":
        extra = 2 * arch.hidden + 2  # the 2-label classifier head
    assert built == expected + extra


@pytest.mark.parametrize("name", list(ARCHS))
def test_every_family_traces_and_trains_only_what_peft_says(name):
    need("torch")
    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    full = engine.run(step_config(plan(arch=ARCHS[name])))
    assert full["params_trainable"] >= full["params_total"]  # full fine-tuning (the BERT head adds a little)
    lora = engine.run(
        step_config(plan(arch=ARCHS[name], peft="lora", lora_r=4, lora_alpha=8.0, lora_targets=("q", "v")))
    )
    assert 0 < lora["params_trainable"] < 0.2 * lora["params_total"]
    assert "adapters" in lora["persistent"] and "gradients" not in lora["persistent"]
