"""torchrun's own flags read as torchrun defines them (torch 2.13 torch/distributed/run.py `get_args_parser`): a flag
that takes a value keeps it (`--tee 3`, `-r 3`), one that takes none does not eat the script. Read through the public
parser, as the editor and the CLI read a launch script."""

from __future__ import annotations

import pytest
from vramlens.formats import parse_document
from vramlens.formats.shell import _TORCHRUN_BARE, _TORCHRUN_VALUED

HF_ARGS = "train.py --model_name_or_path meta-llama/Llama-3.1-8B --per_device_train_batch_size 3 --bf16"


@pytest.mark.parametrize(
    "flags",
    [
        "--tee 3",
        "-t 3",
        "--redirects 3",
        "-r 3",
        "--tee=3 --redirects 3",
        "--tee 3 --log-dir logs",
        "--local-ranks-filter 0 --role rank --tee 3",
        "--master-port 29500 --tee 3 --max-restarts 0",
    ],
)
def test_value_flags_keep_their_value(flags):
    text = f"torchrun --nproc_per_node 4 {flags} {HF_ARGS}\n"
    plan = parse_document(text, "/w/launch.sh").plan
    assert plan is not None and plan.micro_batch is not None and plan.micro_batch.value == 3
    assert plan.model_id.value == "meta-llama/Llama-3.1-8B"
    assert plan.gpu_count.value == 4


@pytest.mark.parametrize("flags", ["--standalone", "--no-python", "--run-path", "--virtual-local-rank"])
def test_bare_flags_take_no_value(flags):
    plan = parse_document(f"torchrun --nproc_per_node 2 {flags} {HF_ARGS}\n", "/w/launch.sh").plan
    assert plan is not None and plan.micro_batch.value == 3 and plan.gpu_count.value == 2


def test_flag_tables_follow_torchruns_parser():
    """Every torchrun flag in torch's own parser is in exactly one table: `check_env` flags bare, the rest valued."""
    run = pytest.importorskip("torch.distributed.run", reason="torch not installed (the trace extra)")
    parser = run.get_args_parser()
    for action in parser._actions:
        names = [o.lstrip("-").replace("-", "_") for o in action.option_strings]
        if not names or "help" in names:
            continue
        table = _TORCHRUN_BARE if action.nargs == 0 else _TORCHRUN_VALUED
        assert all(n in table for n in names), (names, action.nargs)


@pytest.mark.parametrize(
    "flags", ["--tee 3", "-t 3", "--redirects 3", "-r 3 --tee 3", "--local-ranks-filter 0 --tee 3"]
)
def test_script_after_a_value_flag_is_the_one_launched(flags):
    """The program torchrun runs is found after `--tee 3`: Megatron's pretrain_gpt.py (its layout read) and axolotl's
    trainer module (before, `3` was taken for the script and both were read as a plain transformers launch)."""
    megatron = parse_document(
        f"torchrun --nproc_per_node 4 {flags} pretrain_gpt.py --tensor-model-parallel-size 2 "
        f"--micro-batch-size 2 --seq-length 2048\n",
        "/w/launch.sh",
    ).plan
    assert megatron.dist_strategy.value == "megatron" and megatron.tensor_parallel.value == 2
    axolotl = parse_document(f"torchrun --nproc_per_node 4 {flags} -m axolotl.cli.train cfg.yml\n", "/w/launch.sh").plan
    assert axolotl.framework == "axolotl"
