"""GPU catalog: the GPU strings found in real configs resolve to the right card, count and assumption."""

from __future__ import annotations

import pytest
from vramlens.knowledge.gpus import all_gpus, gpu_by_name, lookup_gpu, lookup_gpu_detail, suggest_gpu

# GPU strings as the projects' configs, READMEs and nvidia-smi write them (docs/config-sources.md, "GPU names"),
# with the card each must resolve to and the count.
VOCABULARY_STRINGS = [
    ("A100", "A100-40GB", 1),
    ("T4", "T4", 1),
    ("H100", "H100-SXM", 1),
    ("1xA10G", "A10G", 1),
    ("1 x A100", "A100-40GB", 1),
    ("B200", "B200", 1),
    ("2 x A100", "A100-40GB", 2),
    ("L40S", "L40S", 1),
    ("NVIDIA L40S", "L40S", 1),
    ("A10", "A10", 1),
    ("H200", "H200", 1),
    ("4090", "RTX 4090", 1),
    ("RTX 4090", "RTX 4090", 1),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 1),
    ("V100", "V100-16GB", 1),
    ("A800", "A800-40GB", 1),
    ("3090", "RTX 3090", 1),
    ("RTX 3090", "RTX 3090", 1),
    ("Tesla T4", "T4", 1),
    ("NVIDIA H100 80GB HBM3", "H100-SXM", 1),
    ("L4", "L4", 1),
    ("8xA100", "A100-40GB", 8),
    ("GB200", "GB200", 1),
    ("A10G", "A10G", 1),
    ("A100 80GB", "A100-80GB", 1),
    ("4 * A100", "A100-40GB", 4),
    ("2xB200", "B200", 2),
    ("A6000", "RTX A6000", 1),
    ("NVIDIA RTX A6000", "RTX A6000", 1),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB", 1),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB", 1),
    ("A100 40GB", "A100-40GB", 1),
    ("8xH100", "H100-SXM", 8),
    ("8x H100", "H100-SXM", 8),
    ("4xL40S", "L40S", 4),
    ("1x 4090", "RTX 4090", 1),
    ("a10g", "A10G", 1),
    ("a100-80gb", "A100-80GB", 1),
    ("a100-40gb", "A100-40GB", 1),
    ("TPU v4", "TPU v4", 1),
    ("RTX 6000", "Quadro RTX 6000", 1),
    ("rtx 6000 ada", "RTX 6000 Ada", 1),
    ("RTX 5060 Ti", "RTX 5060 Ti 8GB", 1),
    ("MI300X", "MI300X", 1),
    ("MI250X", "MI250X", 1),
    ("H800", "H800", 1),
    ("H20", "H20", 1),
    ("8xH20", "H20", 8),
    ("A40", "A40", 1),
    ("8 * A100", "A100-40GB", 8),
    ("8X A100 40GB", "A100-40GB", 8),
    ("1x A6000", "RTX A6000", 1),
    ("GH200", "GH200-96GB", 1),
    # exact nvidia-smi names from the same section
    ("Tesla V100-SXM2-16GB", "V100-16GB", 1),
    ("Tesla V100-SXM2-32GB", "V100-32GB", 1),
    ("Tesla V100-PCIE-16GB", "V100-16GB", 1),
    ("NVIDIA A10G", "A10G", 1),
    ("NVIDIA A10", "A10", 1),
    ("NVIDIA L4", "L4", 1),
    ("NVIDIA GeForce RTX 3090", "RTX 3090", 1),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 1),
    ("NVIDIA A40", "A40", 1),
    ("NVIDIA A100-PCIE-40GB", "A100-40GB-PCIe", 1),
    ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe", 1),
    ("NVIDIA A800-SXM4-80GB", "A800-80GB", 1),
    ("NVIDIA H100 PCIe", "H100-PCIe", 1),
    ("NVIDIA H100 NVL", "H100-NVL", 1),
    ("NVIDIA H800", "H800", 1),
    ("NVIDIA H20", "H20", 1),
    ("NVIDIA H200", "H200", 1),
    ("NVIDIA GH200 480GB", "GH200-96GB", 1),
    ("NVIDIA B200", "B200", 1),
    ("AMD Instinct MI250X", "MI250X", 1),
    ("AMD Instinct MI300X", "MI300X", 1),
    # shapes named in the task
    ("A100-40GB", "A100-40GB", 1),
    ("a100 40gb", "A100-40GB", 1),
    ("A100 * 4", "A100-40GB", 4),
]


@pytest.mark.parametrize(("text", "name", "count"), VOCABULARY_STRINGS)
def test_vocabulary_gpu_strings_resolve(text: str, name: str, count: int) -> None:
    spec, got_count = lookup_gpu(text)
    assert (spec.name, got_count) == (name, count)


def test_catalog_is_large_and_consistent() -> None:
    gpus = all_gpus()
    assert len(gpus) >= 30
    assert len({g.name for g in gpus}) == len(gpus)
    for gpu in gpus:
        assert 0 < gpu.usable_gib < gpu.memory_gib, gpu.name
        assert gpu.source, gpu.name


def test_forty_gigabyte_cards_report_less_than_forty_gib() -> None:
    spec, _ = lookup_gpu("NVIDIA A100-SXM4-40GB")
    assert spec.memory_gib == 40
    assert 39.0 < spec.usable_gib < 40


@pytest.mark.parametrize(
    ("name", "bf16", "fp8"),
    [
        ("T4", False, False),
        ("V100-32GB", False, False),
        ("A100-80GB", True, False),
        ("RTX 3090", True, False),
        ("RTX 4090", True, True),
        ("L40S", True, True),
        ("H100-SXM", True, True),
        ("B200", True, True),
    ],
)
def test_precision_support_follows_the_architecture(name: str, bf16: bool, fp8: bool) -> None:
    spec = gpu_by_name(name)
    assert spec is not None
    assert (spec.bf16, spec.fp8) == (bf16, fp8)


def test_bare_ambiguous_name_picks_the_smaller_card_and_says_so() -> None:
    match = lookup_gpu_detail("2 x A100")
    assert match is not None
    assert (match.spec.name, match.count) == ("A100-40GB", 2)
    assert match.note and "A100 80GB" in match.note
    explicit = lookup_gpu_detail("A100 80GB")
    assert explicit is not None and explicit.note is None


def test_memory_only_string_gives_a_generic_gpu_of_that_size() -> None:
    match = lookup_gpu_detail("80GiB * 4")
    assert match is not None
    assert match.count == 4
    assert match.spec.memory_gib == 80
    assert match.spec.usable_gib < 80
    assert match.note


def test_model_names_ending_in_digits_are_not_read_as_counts() -> None:
    spec, count = lookup_gpu("RTX 3090")
    assert (spec.name, count) == ("RTX 3090", 1)
    spec, count = lookup_gpu("3090 x 2")
    assert (spec.name, count) == ("RTX 3090", 2)


def test_unknown_gpu_returns_none_with_suggestions() -> None:
    assert lookup_gpu("Voodoo 5500") is None
    assert lookup_gpu("") is None
    assert "A100-40GB" in suggest_gpu("A1OO 40GB")
    assert "RTX 4090" in suggest_gpu("RTX 4009")
