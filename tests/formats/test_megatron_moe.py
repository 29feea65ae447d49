"""Megatron-LM models with routed experts given by flags (`--num-experts`, `--moe-ffn-hidden-size`,
`--moe-router-topk`, `--moe-layer-freq`, …) are estimated as MoE models, with expert parallelism dividing the
experts' weights; and a file that only keeps Megatron flags in variables for a launch script to `source` is read
(CLI as a subprocess, as a user runs it)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats.megatron import moe_layer_pattern

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "megatron" / "Megatron-LM-d98e8a64"
GIB = 2**30


def estimate(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def flag(text: str, name: str) -> int:
    return int(re.search(rf"--{name}[ =](\d+)", text).group(1))


def test_mixtral_example_is_estimated_as_moe_with_experts_split_by_ep(tmp_path):
    """Megatron-LM examples/mixtral/train_mixtral_8x7b_distributed.sh: 8 experts of 14336, top-2, PP 4, EP 8.
    Mixtral 8x7B has 46.7B parameters (Mistral AI, "Mixtral of experts", https://mistral.ai/news/mixtral-of-experts/:
    "46.7B total parameters"); the vocabulary the script leaves to its tokenizer is assumed GPT-2's, well within 1 %."""
    script = FIXTURES / "train_mixtral_8x7b_distributed.sh"
    d = estimate(script)
    assert d["model"]["params"] == pytest.approx(46.7e9, rel=0.01)
    assert not any(u["key"] == "num-experts" for u in d["unmodelled"])
    assert not any("dense model" in u["consequence"] for u in d["unmodelled"])
    assert any("8 routed experts (2 per token)" in a for a in d["assumptions"])
    assert d["sources"]["expert_parallel"]["value"] == 8

    # the same run without expert parallelism: each pipeline rank holds all its layers' experts
    text = script.read_text()
    one = tmp_path / "ep1.sh"
    one.write_text(text.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 1"))
    d1 = estimate(one)
    layers, hidden, ffn, experts = (
        flag(text, n) for n in ("num-layers", "hidden-size", "ffn-hidden-size", "num-experts")
    )
    pp, ep = flag(text, "pipeline-model-parallel-size"), flag(text, "expert-model-parallel-size")
    expert_weights = experts * 3 * hidden * ffn * (layers // pp) * 2  # gated experts, bf16, one stage's layers
    saved = d1["components_gib"]["weights"] - d["components_gib"]["weights"]
    assert saved == pytest.approx(expert_weights * (1 - 1 / ep) / GIB, rel=0.02)


def test_qwen3_moe_flags_kept_in_variables_are_read():
    """Megatron-LM examples/rl/model_configs/qwen3_30b_a3b_moe.sh runs no command: its MODEL_OPTIONS and
    ENV_DEPENDENT hold the flags train_rl.py is launched with. Qwen3-30B-A3B has 30.5B parameters (Qwen/Qwen3-30B-A3B
    model card: "Number of Parameters: 30.5B in total and 3.3B activated"); its head size (`--kv-channels 128`, not
    hidden ÷ heads = 64) is part of that."""
    d = estimate(FIXTURES / "qwen3_30b_a3b_moe.sh")
    assert d["model"]["params"] == pytest.approx(30.5e9, rel=0.01)
    assert any("MODEL_OPTIONS" in a and "source" in a for a in d["assumptions"])
    assert d["sources"]["tensor_parallel"]["value"] == 4  # TP=${TP:-4}
    assert d["sources"]["expert_parallel"]["value"] == 2
    assert d["sources"]["micro_batch"]["value"] == 1 and d["sources"]["seq_len"]["value"] == 8192
    assert not any(u["key"] in ("kv-channels", "num-experts") for u in d["unmodelled"])


def test_sizes_only_known_at_run_time_are_named():
    """sc21/CONFIG.sh keeps `--num-layers ${NLS}` … for the run_figure_*.sh scripts to set: no estimate, and the
    message names a size the model needs, not the tensor-parallel size."""
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--offline", str(FIXTURES / "CONFIG.sh")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert "`num-layers` is set from a value only known when the script runs" in text
    assert "tensor-model-parallel-size" not in text


def test_moe_layer_freq_dense_layers_count(tmp_path):
    """`--moe-layer-freq ([0]*4+[1]*12)`: four leading dense layers of `--ffn-hidden-size`, fewer weights than
    sixteen MoE layers by four layers' experts less one dense MLP each."""
    base = (
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 16 --hidden-size 1024 --num-attention-heads 16 "
        "--ffn-hidden-size 4096 --swiglu --normalization RMSNorm --num-experts 8 --moe-ffn-hidden-size 512 "
        "--moe-router-topk 2 --vocab-size 32000 --micro-batch-size 1 --seq-length 2048 --bf16 {extra}\n"
    )
    every = tmp_path / "every.sh"
    every.write_text(base.format(extra=""))
    some = tmp_path / "some.sh"
    some.write_text(base.format(extra='--moe-layer-freq "([0]*4+[1]*12)"'))
    p_every, p_some = estimate(every)["model"]["params"], estimate(some)["model"]["params"]
    moe_mlp = 8 * 3 * 1024 * 512 + 1024 * 8  # experts + router
    dense_mlp = 3 * 1024 * 4096
    assert p_every - p_some == 4 * (moe_mlp - dense_mlp)


@pytest.mark.parametrize(
    "value,layers,pattern",
    [
        ("1", 3, [1, 1, 1]),
        ("2", 5, [1, 0, 1, 0, 1]),
        ("([0]+[1]*3)", 4, [0, 1, 1, 1]),
        ("([1]*3+[0]*2)*2", 10, [1, 1, 1, 0, 0, 1, 1, 1, 0, 0]),
        ("[1,0]", 2, [1, 0]),
        ("__import__('os').system('true')", 4, None),  # read with ast, never run
        ("[2]*3", 3, None),
        ("[1]*10**9", 3, None),
    ],
)
def test_moe_layer_pattern(value, layers, pattern):
    assert moe_layer_pattern(value, layers) == pattern
