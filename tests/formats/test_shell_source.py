"""Shell scripts that `source` their settings or run another workspace script (`. \\`pwd\\`/CONFIG.sh`, `sbatch
SRUN.sh`): the files are read, never run, with the variables set so far, and what comes from them names them;
Megatron's world size implied by its parallel layout; Megatron models given by sizes keep their bias flags and
SwiGLU's default width."""

import shutil
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.settings import Settings

SC21 = Path(__file__).resolve().parents[1] / "fixtures" / "megatron" / "Megatron-LM-core_v0.13.0" / "sc21"


def run(path: Path, workspace: Path):
    return analyze(path.read_text(), str(path), Settings(workspace=workspace, model_lookup=False))


@pytest.fixture
def sc21(tmp_path) -> Path:
    folder = tmp_path / "examples" / "academic_paper_scripts" / "sc21"
    shutil.copytree(SC21, folder)
    return folder


def value(plan, concept):
    s = getattr(plan, concept)
    return None if s is None else s.value


def test_run_figure_reads_sourced_config_and_the_script_sbatch_runs(sc21, tmp_path):
    """run_figure_11.sh sets TP=8, PP=1, NLS=3*PP, HS=20480; `. \\`pwd\\`/CONFIG.sh` builds MEGATRON_PARAMS from them;
    `. \\`pwd\\`/SBATCH.sh` runs `sbatch … SRUN.sh`, whose `srun … sh -c "${CMD}"` runs pretrain_gpt.py."""
    a = run(sc21 / "run_figure_11.sh", tmp_path)
    plan = a.plan
    assert plan is not None and plan.purpose is None
    assert plan.framework == "megatron"
    assert value(plan, "tensor_parallel") == 8
    assert value(plan, "pipeline_parallel") == 1
    assert value(plan, "micro_batch") == 1 and value(plan, "global_batch") == 8
    assert value(plan, "seq_len") == 2048
    assert value(plan, "amp_dtype") == "fp16"
    assert plan.extra["arch.num_layers"].value == 3 and plan.extra["arch.hidden_size"].value == 20480
    # the flag is written in CONFIG.sh: its span names that file
    assert plan.tensor_parallel.span.file.endswith("CONFIG.sh")
    notes = " ".join(plan.read_notes)
    assert "sc21/CONFIG.sh`, which this script sources (line 36)" in notes
    assert "sc21/SRUN.sh`, which examples/academic_paper_scripts/sc21/SBATCH.sh runs (line 4)" in notes
    assert a.estimate is not None
    assert a.resolution.resolved.arch.layers == 3 and a.resolution.resolved.arch.hidden == 20480


def test_sourced_values_follow_the_calling_script(sc21, tmp_path):
    """run_figure_13.sh: PP=2, TP=$((64/PP)), NLS=32 — CONFIG.sh's `${TP}` is the caller's value; 64 GPUs implied."""
    plan = run(sc21 / "run_figure_13.sh", tmp_path).plan
    assert value(plan, "tensor_parallel") == 32 and value(plan, "pipeline_parallel") == 2
    assert plan.extra["arch.num_layers"].value == 32
    assert value(plan, "gpu_count") == 64


def test_megatron_world_size_implied_by_layout(sc21, tmp_path):
    """No launcher count: the least world size megatron-core accepts (TP 8 × PP 1), said in a note."""
    plan = run(sc21 / "run_figure_11.sh", tmp_path).plan
    assert value(plan, "gpu_count") == 8 and value(plan, "world_size") == 8
    assert "megatron-core" in plan.gpu_count.note


def test_launcher_count_wins_over_implied_world_size(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text(
        "torchrun --nproc_per_node 16 pretrain_gpt.py --tensor-model-parallel-size 4 "
        "--pipeline-model-parallel-size 2 --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
        "--micro-batch-size 1 --global-batch-size 32 --seq-length 1024\n"
    )
    plan = run(p, tmp_path).plan
    assert value(plan, "gpu_count") == 16


def test_implied_world_size_with_context_and_expert_parallel(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text(
        "python pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
        "--context-parallel-size 2 --expert-model-parallel-size 4 --num-experts 8 --num-layers 8 "
        "--hidden-size 1024 --num-attention-heads 16 --micro-batch-size 1 --global-batch-size 32 --seq-length 1024\n"
    )
    plan = run(p, tmp_path).plan
    # lcm(TP·PP·CP = 8, ETP·EP·PP = 16) = 16
    assert value(plan, "gpu_count") == 16


def test_source_outside_the_workspace_is_not_read(tmp_path):
    outside = tmp_path / "outside.sh"
    outside.write_text("TP=4\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    p = ws / "train.sh"
    p.write_text(
        "source ../outside.sh\n"
        "python pretrain_gpt.py --tensor-model-parallel-size ${TP:-1} --num-layers 8 --hidden-size 1024 "
        "--num-attention-heads 16 --micro-batch-size 1 --global-batch-size 32 --seq-length 1024\n"
    )
    plan = run(p, ws).plan
    assert value(plan, "tensor_parallel") == 1
    assert not any("outside.sh" in n for n in plan.read_notes)


def test_source_cycle_and_dirname_idiom(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "a.sh").write_text('source "$(dirname "${BASH_SOURCE[0]}")/b.sh"\nTP=2\n')
    (tmp_path / "conf" / "b.sh").write_text('source "$(dirname "${BASH_SOURCE[0]}")/a.sh"\nPP=2\n')
    p = tmp_path / "train.sh"
    p.write_text(
        'SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"\n'
        'source "${SCRIPT_DIR}/conf/a.sh"\n'
        "python pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP "
        "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --micro-batch-size 1 --global-batch-size 32 "
        "--seq-length 1024\n"
    )
    plan = run(p, tmp_path).plan
    assert value(plan, "tensor_parallel") == 2 and value(plan, "pipeline_parallel") == 2


def test_child_script_variables_do_not_leak_back(tmp_path):
    (tmp_path / "child.sh").write_text("TP=8\n")
    p = tmp_path / "train.sh"
    p.write_text(
        "TP=2\nbash child.sh\n"
        "python pretrain_gpt.py --tensor-model-parallel-size $TP --num-layers 8 --hidden-size 1024 "
        "--num-attention-heads 16 --micro-batch-size 1 --global-batch-size 32 --seq-length 1024\n"
    )
    assert value(run(p, tmp_path).plan, "tensor_parallel") == 2


def _arch(tmp_path, flags: str):
    p = tmp_path / "train.sh"
    p.write_text(
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 16 --hidden-size 2048 --num-attention-heads 32 "
        f"--micro-batch-size 1 --global-batch-size 32 --seq-length 1024 --bf16 {flags}\n"
    )
    return run(p, tmp_path).resolution.resolved.arch


def test_megatron_bias_flags_and_swiglu_default_width(tmp_path):
    """megatron/training/arguments.py (core_v0.13.0): linear biases on unless `--disable-bias-linear`;
    `--add-qkv-bias` for QKV only; `--swiglu` without `--ffn-hidden-size`: int((4·h·2/3)/64)·64."""
    plain = _arch(tmp_path, "")
    assert plain.attn_bias and plain.mlp_bias
    no_bias = _arch(tmp_path, "--disable-bias-linear")
    assert not no_bias.attn_bias and not no_bias.mlp_bias
    qkv = _arch(tmp_path, "--disable-bias-linear --add-qkv-bias")
    assert qkv.attn_bias and not qkv.mlp_bias
    swiglu = _arch(tmp_path, "--swiglu --disable-bias-linear")
    assert swiglu.mlp == "swiglu" and swiglu.intermediate == int((4 * 2048 * 2 / 3) / 64) * 64 == 5440
