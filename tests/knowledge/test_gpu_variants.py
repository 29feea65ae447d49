"""GPU catalog variants chosen by the memory a name states: "H100 SXM 96GB" is the 96 GB card, not the 80 GB SXM
default of its family; the cards the frameworks' benchmark pages name are known."""

import pytest
from cli_json import estimate_json
from vramlens.knowledge.gpus import all_gpus, lookup_gpu_detail


@pytest.mark.parametrize(
    "name, card, memory",
    [
        # the memory in the name picks the variant, whatever else the name says
        ("H100 SXM 96GB", "H100-96GB", 96),
        ("NVIDIA H100 96GB", "H100-96GB", 96),
        ("H100 SXM5 96GB", "H100-96GB", 96),
        ("h100-sxm-96gb", "H100-96GB", 96),
        ("H100 96 GB HBM3", "H100-96GB", 96),
        ("H100 SXM 80GB", "H100-SXM", 80),
        ("H100 94GB", "H100-NVL", 94),
        ("H100 NVL", "H100-NVL", 94),
        ("H100 SXM", "H100-SXM", 80),
        ("H100 PCIe 80GB", "H100-PCIe", 80),
        ("A100 SXM4 80GB", "A100-80GB", 80),
        ("A100-40GB", "A100-40GB", 40),
        ("A100 PCIe 80GB", "A100-80GB-PCIe", 80),
        ("GH200 144GB", "GH200-144GB", 144),
        # the cards torchtitan's and the frameworks' benchmark pages name
        ("H200", "H200", 141),
        ("NVIDIA H200 141GB", "H200", 141),
        ("B200", "B200", 180),
        ("GB200", "GB200", 186),
        ("AMD Instinct MI300X", "MI300X", 192),
        ("MI300X 192GB", "MI300X", 192),
        ("MI325X", "MI325X", 256),
        ("AMD Instinct MI325X 256GB", "MI325X", 256),
        ("TITAN RTX", "Titan RTX", 24),
        ("Titan RTX 24GB", "Titan RTX", 24),
        ("L40S", "L40S", 48),
        ("RTX 6000 Ada", "RTX 6000 Ada", 48),
    ],
)
def test_variant_by_stated_memory(name, card, memory):
    match = lookup_gpu_detail(name)
    assert match is not None, name
    assert (match.spec.name, match.spec.memory_gib) == (card, memory)
    assert match.note is None  # the name says which card it is: nothing assumed


@pytest.mark.parametrize("name, count", [("8x H100 SXM 96GB", 8), ("H100 96GB x 4", 4), ("2 * MI325X", 2)])
def test_counted_variants(name, count):
    match = lookup_gpu_detail(name)
    assert match.count == count and match.spec.name in ("H100-96GB", "MI325X")


def test_unknown_memory_falls_back_with_a_note():
    """A memory no variant has: the family default, with a note naming the card used."""
    match = lookup_gpu_detail("H100 SXM 120GB")
    assert match.spec.name == "H100-SXM"
    assert "120" in match.note and "H100-SXM" in match.note


def test_every_card_found_by_its_own_memory():
    """Each catalog card's name with its memory appended resolves to a card of that memory (the stated memory wins)."""
    for spec in all_gpus():
        if spec.name.startswith("TPU"):
            continue
        text = spec.name if "GB" in spec.name.upper() else f"{spec.name} {spec.memory_gib:g}GB"
        match = lookup_gpu_detail(text)
        assert match is not None and match.spec.memory_gib == spec.memory_gib, spec.name


def test_cli_gpu_setting_reads_96gb(tmp_path):
    """`vramlens estimate --gpu "H100 SXM 96GB"` estimates against the 96 GB card's usable memory."""
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        "model_name_or_path: meta-llama/Llama-3.2-1B\nper_device_train_batch_size: 1\nbf16: true\n"
        "gradient_checkpointing: true\n"
    )
    for gpu, usable in (("H100 SXM 96GB", 94.85), ("H100 SXM 80GB", 79.11), ("MI325X", 252.93)):
        data = estimate_json(cfg, "--gpu", gpu)
        assert data["gpu"]["usable_gib"] == pytest.approx(usable), gpu


@pytest.mark.parametrize(
    "comment",
    ['# vramlens: gpu="H100 SXM 96GB" count=8', "# vramlens: gpu=H100-SXM-96GB count=8", "# Ran on 8x H100 SXM 96GB"],
)
def test_file_comment_reads_96gb(tmp_path, comment):
    """A directive or an author's comment that states 96GB picks that card too."""
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        f"{comment}\nmodel_name_or_path: meta-llama/Llama-3.2-1B\nper_device_train_batch_size: 1\nbf16: true\n"
    )
    data = estimate_json(cfg.name, cwd=tmp_path)
    assert data["gpu"]["name"] == "H100-96GB" and data["gpu"]["count"] == 8
