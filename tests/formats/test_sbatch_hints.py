"""The GPUs a Slurm batch script asks for (`#SBATCH` directives before its first command) are the run's GPU count
where the launch itself does not state one; a count the parallel layout cannot use is not taken."""

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

SC21 = Path(__file__).resolve().parents[1] / "fixtures" / "megatron" / "Megatron-LM-core_v0.13.0" / "sc21"

PRETRAIN = (
    "srun python -u pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
    "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 512 "
    "--bf16 --tensor-model-parallel-size {tp}\n"
)


def run(tmp_path: Path, header: str, tp: int = 2, body: str = PRETRAIN):
    p = tmp_path / "job.sh"
    p.write_text("#!/bin/bash\n" + header + "\n" + body.format(tp=tp))
    return analyze(p.read_text(), str(p), Settings(workspace=tmp_path, model_lookup=False)).plan


def test_srun_ranks_from_ntasks_per_node_and_nodes(tmp_path):
    """Megatron's sc21 SRUN.sh header (core_v0.13.0), on 2 nodes: srun starts one rank per task."""
    header = SC21.joinpath("SRUN.sh").read_text().splitlines()[2] + "\n#SBATCH --nodes=2"
    assert "--ntasks-per-node=8" in header
    plan = run(tmp_path, header)
    assert plan.gpu_count.value == 16 and plan.world_size.value == 16
    assert plan.gpu_count.key == "#SBATCH" and "2 nodes" in plan.gpu_count.note
    assert plan.gpu_count.span.start_line == 1  # the line that asks for the tasks


def test_gres_gives_count_and_gpu_type(tmp_path):
    plan = run(tmp_path, "#SBATCH -N 4\n#SBATCH --gres=gpu:h100:8")
    assert plan.gpu_count.value == 32 and plan.world_size.value == 32
    assert plan.gpu_name.value.startswith("H100") and plan.gpu_name.key == "#SBATCH"


def test_gpus_per_task_times_tasks(tmp_path):
    """torchtitan's multinode_trainer.slurm asks `--ntasks=4 --nodes=4 --gpus-per-task=8`."""
    plan = run(tmp_path, "#SBATCH --ntasks=4\n\n#SBATCH --nodes=4\n\n#SBATCH --gpus-per-task=8")
    assert plan.gpu_count.value == 32


def test_job_total_gpus(tmp_path):
    assert run(tmp_path, "#SBATCH --nodes=2 --gpus=a100:12").gpu_count.value == 12


def test_directives_after_the_first_command_are_not_read(tmp_path):
    """sbatch stops reading #SBATCH lines at the first command (https://slurm.schedmd.com/sbatch.html)."""
    plan = run(tmp_path, "export X=1\n#SBATCH --nodes=4 --gres=gpu:8")
    assert plan.gpu_count.key != "#SBATCH"


def test_ntasks_without_srun_is_not_a_rank_count(tmp_path):
    body = PRETRAIN.replace("srun python -u", "python -u")
    plan = run(tmp_path, "#SBATCH --nodes=2 --ntasks-per-node=8", body=body)
    assert plan.gpu_count.key != "#SBATCH"


def test_a_count_the_layout_cannot_use_is_not_taken(tmp_path):
    """TP 8 needs a multiple of 8 GPUs; 4 is not."""
    plan = run(tmp_path, "#SBATCH --gres=gpu:4", tp=8)
    assert plan.gpu_count.value == 8 and plan.gpu_count.key != "#SBATCH"


def test_a_launch_that_states_its_gpus_wins(tmp_path):
    body = "torchrun --nproc_per_node 2 train.py --model_name_or_path meta-llama/Llama-3.1-8B --bf16\n"
    plan = run(tmp_path, "#SBATCH --gres=gpu:8", body=body)
    assert plan.gpu_count.value == 2
