"""Megatron-SWIFT's vision tower: the Hugging Face modules on the first pipeline stage, whole on every
tensor-parallel rank (ms-swift v4.0.0 swift/megatron/model/mm_gpt_model.py `MultimodalGPTModel.__init__`,
mm_gpts/utils.py `HuggingFaceModule`), trained in full training unless `--freeze_vit` (megatron_args.py
`_init_multimodal_full`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_megatron_layouts import gpt, plan
from vramlens.analysis import analyze
from vramlens.estimate import components as C
from vramlens.estimate.components.megatron import megatron_reference_bytes
from vramlens.settings import Settings

VISION = 600_000_000  # a tower + projector of the size of Qwen3-VL-8B's (576M)


def vlm():
    return gpt().model_copy(update={"vision_params": VISION})


def state(**kw) -> tuple[int, int, int]:
    rp = plan(vlm(), **kw)
    return C.megatron_state_bytes(rp, C.stages(rp)[0])


def test_frozen_tower_is_held_whole_on_every_tensor_parallel_rank():
    """A frozen tower adds its 16-bit weights to the first stage, not divided by TP; no gradients, no states."""
    for tp in (1, 2, 4):
        w, g, o = state(tp=tp, dp=2, dist_opt=True, vision_frozen=True)
        w0, g0, o0 = C.megatron_state_bytes(plan(gpt(), tp=tp, dp=2, dist_opt=True), C.stages(plan(gpt(), tp=tp))[0])
        assert w - w0 == VISION * 2
        assert (g, o) == (g0, o0)


def test_trained_tower_gets_fp32_gradients_and_sharded_dense_states():
    w, g, o = state(tp=2, dp=4, dist_opt=True, vision_frozen=False)
    w0, g0, o0 = state(tp=2, dp=4, dist_opt=True, vision_frozen=True)
    assert w == w0
    assert g - g0 == VISION * 4  # Megatron's fp32 gradient buffer
    assert o - o0 == pytest.approx(VISION * 12 / 4, rel=1e-6)  # fp32 main copy + two Adam states over DP 4


def test_tower_is_on_the_first_stage_only():
    rp = plan(vlm(), pp=2, dp=2, m=4, vision_frozen=True)
    first, last = C.stages(rp)
    assert (first.vision_params, last.vision_params) == (VISION, 0)


def test_full_dpo_reference_copy_holds_the_tower():
    rp = plan(vlm(), tp=2, dp=2, reference="copy", vision_frozen=True)
    no_tower = plan(gpt(), tp=2, dp=2, reference="copy")
    st, st0 = C.stages(rp)[0], C.stages(no_tower)[0]
    assert megatron_reference_bytes(rp, st) - megatron_reference_bytes(no_tower, st0) == VISION * 2


MCORE_FULL = (
    Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "v4.0.0" / "megatron_step" / "mcore_full.sh"
)


def resolved(text: str, tmp_path: Path):
    path = tmp_path / "mcore_full.sh"
    path.write_text(text)
    a = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False))
    assert a.resolution is not None, a.error
    return a.resolution.resolved


def test_megatron_swift_full_training_keeps_the_tower_frozen_unless_freeze_vit_false(tmp_path):
    """ms-swift v4.0.0 examples/models/qwen3_vl/mcore_full.sh sets no `--freeze_vit`: the tower stays frozen
    (megatron_args.py `freeze_vit: bool = True`); `--freeze_vit false` trains it."""
    text = MCORE_FULL.read_text()
    rp = resolved(text, tmp_path)
    assert (rp.strategy, rp.peft, rp.vision_frozen) == ("megatron", "none", True)
    unfrozen = text.replace("    --sequence_parallel true", "    --sequence_parallel true \\\n    --freeze_vit false")
    assert resolved(unfrozen, tmp_path).vision_frozen is False
