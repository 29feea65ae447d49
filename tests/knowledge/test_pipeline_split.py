"""knowledge.pipelining.stage_split held to torchtitan's `_generate_llm_fqn_per_model_part` (torchtitan b5bcd76
torchtitan/distributed/pipeline_parallel.py, copied unchanged under tests/fixtures/torchtitan/main-b5bcd76c66): the
layer counts its module lists give, on examples computed with the upstream function, and on a grid against the
function itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vramlens.knowledge.pipelining import rank_stage_ids, stage_split

UPSTREAM = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "torchtitan"
    / "main-b5bcd76c66"
    / "torchtitan"
    / "distributed"
    / "pipeline_parallel.py"
)


@pytest.mark.parametrize(
    "stages, layers, input_weight, output_weight, counts",
    [
        (2, 8, 1, 1, (4, 4)),
        (4, 8, 1, 1, (2, 3, 2, 1)),
        (8, 8, 1, 1, (1, 2, 1, 1, 1, 1, 1, 0)),
        (4, 32, 1, 1, (8, 9, 8, 7)),
        (4, 32, 2, 1, (7, 9, 9, 7)),
        (12, 32, 1, 1, (2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1)),
        (4, 30, 0, 0, (8, 8, 7, 7)),  # NeMo AutoModel's split: no weights
        (1, 32, 1, 1, (32,)),
    ],
)
def test_split_is_torchtitans(stages, layers, input_weight, output_weight, counts):
    assert stage_split(layers, stages, input_weight, output_weight) == counts


def test_refused_where_torchtitan_refuses():
    with pytest.raises(ValueError):
        stage_split(4, 8)  # more stages than the 6 weighted layers
    with pytest.raises(ValueError):
        stage_split(8, 4, input_weight=4)  # 13 weighted layers, 3 a stage: below the embeddings' weight


def test_v_and_looped_placement():
    assert rank_stage_ids("Interleaved1F1B", 4, 2, 3) == (3, 7)
    assert rank_stage_ids("ZBVZeroBubble", 4, 2, 0) == (0, 7)
    assert rank_stage_ids("1F1B", 4, 1, 2) == (2,)


def _upstream():
    """torchtitan's own `_generate_llm_fqn_per_model_part`, run from its source (the function uses no import)."""
    src = UPSTREAM.read_text(encoding="utf-8")
    start = src.index("def _generate_llm_fqn_per_model_part")
    end = src.index("\ndef ", start + 1)
    ns: dict = {}
    exec(src[start:end], ns)
    return ns["_generate_llm_fqn_per_model_part"]


def test_split_equals_the_upstream_function_on_a_grid():
    upstream = _upstream()
    wrong = []
    for layers in range(1, 40):
        for stages in range(1, 17):
            for iw in range(4):
                for ow in range(4):
                    try:
                        parts = upstream(stages, layers, iw, ow)
                        theirs = tuple(sum(1 for n in p if re.fullmatch(r"layers\.\d+", n)) for p in parts)
                    except ValueError:
                        theirs = None
                    try:
                        ours = stage_split(layers, stages, iw, ow)
                    except ValueError:
                        ours = None
                    if theirs != ours:
                        wrong.append((layers, stages, iw, ow, theirs, ours))
    assert not wrong, wrong[:5]
