"""A model named by a catalog series and a size the catalog does not hold, with the Hub off: shapes estimated from
the series' catalog models (`models.series_by_name`), said so in every view, refused with a reason where a name
alone cannot give them, and measured leave-one-out over the catalog (benchmarks/by_name_vs_catalog.py)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.knowledge import models

REPO = Path(__file__).resolve().parents[2]
BENCHMARK = REPO / "benchmarks" / "by_name_vs_catalog.py"


@pytest.mark.parametrize(
    ("name", "series", "size"),
    [
        ("stabilityai/stablelm-2-1_6b", "stablelm2", 1600.0),  # an underscore between digits is a decimal point
        ("Qwen/Qwen-1_8B-Chat", "qwen", 1800.0),
        ("OpenGVLab/InternVL3_5-8B-HF", "internvl3.5", 8000.0),
        ("open_llama_3b_v2", "openllama", 3000.0),  # an underscore between words stays a separator
    ],
)
def test_a_size_written_with_an_underscore_for_its_decimal_point_is_read(name, series, size):
    assert models._series_size(name) == (series, size)


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("allenai/Olmo-3-7B-Instruct-SFT", "allenai/Olmo-3-7B-Instruct"),
        ("openlm-research/open_llama_3b_v2", "openlm-research/open_llama_3b"),
    ],
)
def test_a_catalog_id_with_a_suffix_is_a_model_named_after_it_not_a_typo(name, base):
    found = models.find_model(name, by_name=True)
    assert found.where == "catalog (by name)" and found.arch is not None and found.arch.id == base
    assert models.catalog_by_name("Qwen/Qwen2.5-0.5B-Instrukt") is None  # a typo stays one


def test_a_size_the_catalog_lacks_is_estimated_from_its_series_and_labelled():
    name = "Qwen/Qwen-14B-Chat"
    assert models.find_model(name).arch is None  # only when asked for (the estimate asks)
    found = models.find_model(name, by_name=True)
    assert found.where == "catalog (by series)" and found.arch is not None
    members = ", ".join(m.id for _, m in models._series_members()["qwen"])
    assert found.assumed == (
        f"shapes of `{name}` estimated from the qwen series ({members}) at the 14B its name states; the Hub is off"
    )
    arch = found.arch
    assert arch.id == name and arch.params_total == 0 and not arch.hf_config_json
    qwen_7b, qwen_72b = models.lookup_model("Qwen/Qwen-7B"), models.lookup_model("Qwen/Qwen-72B")
    assert qwen_7b is not None and qwen_72b is not None
    assert qwen_7b.layers < arch.layers < qwen_72b.layers and qwen_7b.hidden < arch.hidden < qwen_72b.hidden
    assert (arch.family, arch.vocab, arch.d_head) == (qwen_7b.family, qwen_7b.vocab, qwen_7b.d_head)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("Qwen/Qwen3.5-397B-A17B", "a mixture of experts"),
        ("acme/Qwen3-14B-16E-upcycled", "a mixture of experts"),
        ("google/gemma-4-E4B-it", "states no size"),
        ("acme/xgen-13b-8k-base", "one dense catalog model of the xgen series"),  # Salesforce/xgen-7b-8k-base
        ("acme/Llama-3.2-20B-sft", "of different architectures"),  # Llama-3.2 1B/3B and 11B-Vision
        ("acme/SmolLM2-20B", "too far beyond"),  # SmolLM2 135M to 1.7B
        ("Qwen/Qwen-14B-Chat-Int4", "quantized"),
        ("nvidia/Nemotron-H-20B-Base", "read from a config.json"),
        ("acme/Notaseries-7B", "no dense catalog model of a series `notaseries`"),
    ],
)
def test_no_shapes_are_estimated_where_the_name_cannot_give_them_and_it_says_why(name, reason):
    found = models.find_model(name, by_name=True)
    assert found.arch is None
    assert reason in found.not_by_name


def _estimate(config: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "cache"), VRAMLENS_CALIBRATION="off")
    cmd = [sys.executable, "-m", "vramlens", "estimate", str(config), "--format", "json"]
    return subprocess.run(cmd, cwd=config.parent, capture_output=True, text=True, timeout=180, env=env)


def test_the_estimate_says_the_shapes_are_estimated_and_a_refusal_says_why(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen-14B-Chat\nper_device_train_batch_size: 1\nbf16: true\n")
    out = _estimate(config, tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    result = result[0] if isinstance(result, list) else result
    said = [a for a in result["approximate_reasons"] if "estimated from the qwen series" in a]
    assert said and "at the 14B its name states" in said[0]
    config.write_text("model_name_or_path: Qwen/Qwen3.5-397B-A17B\nper_device_train_batch_size: 1\nbf16: true\n")
    out = _estimate(config, tmp_path)
    assert "not estimated from its name: a mixture of experts" in out.stdout + out.stderr


def _leave_one_out() -> tuple[dict[str, list[float]], list[str]]:
    sys.path.insert(0, str(BENCHMARK.parent))
    try:
        import by_name_vs_catalog
    finally:
        sys.path.remove(str(BENCHMARK.parent))
    _, errors, refused = by_name_vs_catalog.measure()
    return errors, refused


def test_leave_one_out_over_the_catalog_the_estimate_stays_close():
    """Every catalog model with a stated size in a series of at least two other sizes, hidden and estimated from the
    others: the median error of the parameter count and of both plans' peaks within 10 %, and most within 10 %."""
    errors, _ = _leave_one_out()
    assert len(errors["params"]) >= 40
    for measure in ("params", "lora", "full"):
        absolute = [abs(e) for e in errors[measure]]
        assert statistics.median(absolute) <= 0.10, measure
        assert sum(e <= 0.10 for e in absolute) >= 0.7 * len(absolute), measure


def test_entries_with_and_without_the_counts_built_from_their_shapes_have_the_same_shapes():
    """A table giving shapes alone (litgpt's) and a config.json built by transformers (`_by_construction`) name one
    model the same: the by-name reading is not refused as ambiguous between them."""
    plain = models.lookup_model("Qwen/Qwen2.5-7B")
    assert plain is not None
    built = plain.model_copy(update={"id": "x/y", "params_total": 7, "layer_kinds": (("attention", plain.layers),)})
    assert models._same_shapes([plain.model_copy(update={"params_total": 0, "layer_kinds": ()}), built])
    assert not models._same_shapes([built, built.model_copy(update={"intermediate": plain.intermediate + 1})])
    assert not models._same_shapes([built, built.model_copy(update={"layer_kinds": (("attention", 1),)})])
