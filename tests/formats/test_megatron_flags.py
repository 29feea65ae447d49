"""Megatron-LM launch flags (pretrain_gpt.py through torchrun) and Megatron-SWIFT's `megatron sft`, read from the
command line into the parallel layout the estimate models (CLI as a subprocess)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "megatron"


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


def source(d: dict, concept: str):
    s = d["sources"].get(concept)
    return None if s is None else s["value"] if isinstance(s, dict) else s


def test_megatron_swift_sft_layout():
    """ms-swift examples/megatron/sft.sh: TP 2 with sequence parallelism, full uniform recompute, 2 GPUs."""
    d = estimate(FIXTURES / "ms-swift-62768ed8" / "sft.sh")
    assert d["model"]["id"] == "Qwen/Qwen2.5-7B-Instruct"
    assert d["gpu"]["count"] == 2
    assert source(d, "dist_strategy") == "megatron"
    assert source(d, "tensor_parallel") == 2
    assert source(d, "sequence_parallel") is True
    assert source(d, "grad_checkpointing") is True
    assert source(d, "micro_batch") == 16 and source(d, "seq_len") == 2048
    # TP 2 holds half the model: 18 bytes per parameter (16-bit weights, fp32 gradients, fp32 main + Adam) / 2
    per_rank = d["components_gib"]["weights"] + d["components_gib"]["gradients"] + d["components_gib"]["optimizer"]
    assert per_rank == pytest.approx(7.6156e9 * 18 / 2 / 2**30, rel=0.02)


@pytest.mark.parametrize("spelling", ["-", "_", "="])
def test_pretrain_gpt_flags_give_model_and_layout(tmp_path, spelling):
    def flag(name: str, value=None) -> str:
        name = name.replace("-", "_") if spelling == "_" else name
        if value is None:
            return f"--{name}"
        return f"--{name}={value}" if spelling == "=" else f"--{name} {value}"

    args = [
        flag("num-layers", 32),
        flag("hidden-size", 4096),
        flag("ffn-hidden-size", 14336),
        flag("num-attention-heads", 32),
        flag("group-query-attention"),
        flag("num-query-groups", 8),
        flag("seq-length", 4096),
        flag("swiglu"),
        flag("untie-embeddings-and-output-weights"),
        flag("vocab-size", 128256),
        flag("micro-batch-size", 1),
        flag("global-batch-size", 64),
        flag("bf16"),
        flag("tensor-model-parallel-size", 2),
        flag("pipeline-model-parallel-size", 4),
        flag("sequence-parallel"),
        flag("use-distributed-optimizer"),
        flag("recompute-granularity", "selective"),
    ]
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\\n    " + " \\\n    ".join(args) + "\n")
    d = estimate(script)
    assert d["model"]["params"] == pytest.approx(8.03e9, rel=0.01)  # Llama-3-8B's shapes
    assert source(d, "pipeline_parallel") == 4 and source(d, "tensor_parallel") == 2
    assert source(d, "distributed_optimizer") is True
    assert source(d, "grad_checkpointing") is False  # selective: no layer checkpoints
    # 16 GPUs = TP 2 × PP 4 × DP 2: a stage holds about an eighth of the model in 16-bit
    assert d["components_gib"]["weights"] < 8.03e9 * 2 / 8 * 1.3 / 2**30
    # the distributed optimizer shards the 12 bytes of main weights and Adam states over DP 2
    assert d["components_gib"]["optimizer"] == pytest.approx(d["components_gib"]["weights"] * 3, rel=0.02)
