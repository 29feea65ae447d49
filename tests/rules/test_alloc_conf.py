"""The PYTORCH_CUDA_ALLOC_CONF grammar: what PyTorch accepts passes, what it rejects is reported with a place."""

from __future__ import annotations

import pytest
from vramlens.rules.alloc_conf import check, expandable_segments_on, repaired, with_expandable_segments


@pytest.mark.parametrize(
    "conf",
    [
        "expandable_segments:True",
        "expandable_segments:False",
        "max_split_size_mb:128,garbage_collection_threshold:0.6",
        " expandable_segments : True , max_split_size_mb:512 ",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        "backend:cudaMallocAsync",
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
        "release_lock_on_cudamalloc:True",
        "",
    ],
)
def test_valid_values(conf):
    assert check(conf) == []


@pytest.mark.parametrize(
    "conf, fragment, replacement",
    [
        ("expandable_segment:True", "expandable_segment", "expandable_segments"),
        ("expandable_segments:yes", "yes", "True"),
        ("max_split_size_mb:16", "16", None),
        ("max_split_size_mb:big", "big", None),
        ("garbage_collection_threshold:1.5", "1.5", None),
        ("roundup_power2_divisions:3", "3", None),
        ("backend:cudamallocasync", "cudamallocasync", "cudaMallocAsync"),
        ("pinned_num_register_threads:256", "256", None),
        ("max_split_size_mb=128", "max_split_size_mb=128", "max_split_size_mb:128"),
        ("expandable_segments", "expandable_segments", None),
    ],
)
def test_errors_point_at_the_option(conf, fragment, replacement):
    errors = check(conf)
    assert len(errors) == 1
    e = errors[0]
    assert conf[e.start : e.end] == fragment
    assert e.replacement == replacement


def test_only_the_bad_option_of_several():
    conf = "max_split_size_mb:128,expandable_segmentz:True"
    (e,) = check(conf)
    assert conf[e.start : e.end] == "expandable_segmentz"
    assert repaired(conf) == "max_split_size_mb:128,expandable_segments:True"


def test_adding_expandable_segments_keeps_other_options():
    assert with_expandable_segments(None) == "expandable_segments:True"
    merged = with_expandable_segments("max_split_size_mb:128,expandable_segments:False")
    assert expandable_segments_on(merged) and "max_split_size_mb:128" in merged and check(merged) == []
