"""The memory figures framework repositories state beside their configs (benchmarks/held_out_memory.py): which
comment lines are read as a measured figure and how ("N * X GiB" is X per GPU on N GPUs, GB as 10^9 bytes, Ascend
figures kept apart, sentences about hardware not read), and a Megatron-SWIFT 4.x LoRA run whose figure exposed that
`--tuner_type lora` was not read."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


@pytest.fixture(scope="module")
def memory():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import held_out_memory

        yield held_out_memory
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def one(memory, line: str):
    figures = memory.comment_figures(line)
    assert len(figures) == 1, figures
    return figures[0]


@pytest.mark.parametrize(
    "line, per_gpu, gpus, unit",
    [
        ("# 22GiB", 22 * GIB, None, "GiB"),
        ("# 4 * 80GiB", 80 * GIB, 4, "GiB"),  # ms-swift examples/train/multi-gpu/*: X per GPU on N GPUs
        ("# 60GiB * 4", 60 * GIB, 4, "GiB"),
        ("# 2*76GB GPU memory", 76 * 10**9, 2, "GB"),  # ms-swift 2.x: GB as written
        ("# 30GB GPU memory (use flash_attn)", 30 * 10**9, None, "GB"),
        ("# GPU Memory: 8 * 40GiB, Training Speed 26s/it", 40 * GIB, 8, "GiB"),
        ("# ZeRO3: 3.5s/it; 4 * 60GiB", 60 * GIB, 4, "GiB"),
    ],
)
def test_a_comment_stating_memory_is_read_per_gpu(memory, line, per_gpu, gpus, unit):
    f = one(memory, line)
    assert (f.per_gpu, f.gpus, f.unit, f.ascend) == (per_gpu, gpus, unit, False)


def test_figures_measured_on_ascend_are_marked_and_a_labelled_variant_keeps_its_label(memory):
    assert one(memory, "# 16 * 64GiB Ascend A3").ascend
    assert memory.comment_figures("# 2 * 50GiB", 1, "examples/ascend/train/qwen3/lora.sh")[0].ascend
    assert one(memory, "# lora: 2 * 14GiB 0.45s/it").label == "lora"


@pytest.mark.parametrize(
    "line",
    [
        "# If you're doing full-parameter training, you'll need 64 × 80 GiB of GPU memory",
        "# Assume we have two nodes, one with 8 GPUs of 80GB each (8 80G) and another with 2 GPUs of 80GB each",
        "--max_memory 80GiB",
        "# 1.5s/it",
    ],
)
def test_a_sentence_about_hardware_or_code_is_not_a_measured_figure(memory, line):
    assert memory.comment_figures(line) == []


README = """\
```bash
# LoRA SFT linear layers (1x48GB @ ~44GiB)
axolotl train examples/gpt-oss/gpt-oss-20b-sft-lora-singlegpu.yaml

# FFT SFT with offloading (2x24GB @ ~21GiB/GPU)
axolotl train examples/gpt-oss/gpt-oss-20b-fft-fsdp2-offload.yaml

# FFT SFT (8x48GB @ ~36GiB/GPU or 4x80GB @ ~46GiB/GPU)
axolotl train examples/gpt-oss/gpt-oss-20b-fft-fsdp2.yaml
```

Note: Memory usage taken from `device_mem_reserved(gib)` from logs.
"""  # axolotl-ai-cloud/axolotl examples/gpt-oss/README.md (main, 2026)


def test_an_axolotl_readme_pairs_each_figure_with_the_command_below_it_and_names_the_level(memory):
    pairs = memory.readme_figures(README)
    assert [(c, f.per_gpu, f.gpus) for c, f in pairs] == [
        ("examples/gpt-oss/gpt-oss-20b-sft-lora-singlegpu.yaml", 44 * GIB, 1),
        ("examples/gpt-oss/gpt-oss-20b-fft-fsdp2-offload.yaml", 21 * GIB, 2),
    ]  # the line stating two set-ups ("… or …") is left out
    assert memory.readme_level(README) == "reserved"
    one_config = (
        "```bash\naxolotl train examples/arcee/afm-4.5b-qlora.yaml\n```\n\nThis config uses about 7.8GiB VRAM.\n"
    )
    assert [(c, f.per_gpu) for c, f in memory.readme_figures(one_config)] == [
        ("examples/arcee/afm-4.5b-qlora.yaml", int(7.8 * GIB))
    ]
    assert memory.readme_level(one_config) == "device"


def test_megatron_swift_4_tuner_type_lora_is_read_as_lora():
    # ms-swift v4.0.0 examples/megatron/lora/moe.sh states "# 2 * 62GiB": `megatron sft --tuner_type lora` on
    # Qwen3-30B-A3B with expert parallelism 2. Read as a full fine-tune it was estimated at ~280 GiB per GPU, with
    # AdamW states for all 30B parameters
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    os.environ["HF_HUB_OFFLINE"] = "1"
    path = ROOT / "tests" / "fixtures" / "ms-swift" / "v4.0.0" / "megatron_lora" / "moe.sh"
    a = analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, model_lookup=False))
    assert a.plan is not None and a.estimate is not None
    assert a.plan.peft_method is not None and a.plan.peft_method.value == "lora"
    assert a.plan.peft_method.key == "tuner_type"
    assert a.plan.lora_r is not None and a.plan.lora_r.value == 8
    # LoRA's optimizer states are a small fraction of the frozen weights, not twice their size
    assert a.estimate.components["optimizer"] < a.estimate.components["weights"] / 10
