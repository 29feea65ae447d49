"""Megatron-LM main's examples/post_training/modelopt scripts and the model files its launch scripts source, read
as they run (fixtures copied from NVIDIA/Megatron-LM at d98e8a64, paths kept: see the SOURCE note beside them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.settings import Settings

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "megatron" / "Megatron-LM-d98e8a64"
# the scripts that do not train (and finetune.sh, beside the helper they all source) under not_training/
MODELOPT = ROOT / "not_training" / "examples" / "post_training" / "modelopt"
RL = ROOT / "examples" / "rl" / "model_configs"


def _analyze(path: Path):
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=ROOT, model_lookup=False))


def _not_training(a) -> str:
    notes = [f.message for f in a.findings if f.rule_id == "VL018"]
    assert notes, (a.error, [f.message for f in a.findings])
    return notes[0]


@pytest.mark.parametrize(
    "script, runs",
    [("convert.sh", "convert_model.py"), ("mmlu.sh", "mmlu.py")],
)
def test_modelopt_scripts_that_do_not_train_say_what_they_run(script: str, runs: str):
    # `${LAUNCH_SCRIPT} ${SCRIPT_DIR}/<script>.py …`, LAUNCH_SCRIPT="torchrun --nproc_per_node=$((…))" from the
    # sourced conf/arguments.sh: checkpoint conversion and MMLU evaluation, not training
    a = _analyze(MODELOPT / script)
    assert a.estimate is None
    assert f"`{runs}`" in _not_training(a)


def test_combining_a_language_and_a_vision_checkpoint_is_not_training():
    # examples/multimodal/combine_lm_vision_checkpoints.sh runs `python examples/multimodal/combine_state_dicts.py`
    a = _analyze(ROOT / "not_training" / "examples" / "multimodal" / "combine_lm_vision_checkpoints.sh")
    assert a.estimate is None and "`combine_state_dicts.py`" in _not_training(a)


def test_modelopt_finetune_names_the_run_time_value_its_model_comes_from():
    # finetune.sh runs `finetune.py ${MODEL_ARGS}`; MODEL_ARGS is set in conf/${MLM_MODEL_CFG}.sh, which
    # conf/arguments.sh sources, and MLM_MODEL_CFG=${1} is the script's first argument
    a = _analyze(MODELOPT / "finetune.sh")
    assert a.estimate is None
    assert not any(f.rule_id == "VL018" for f in a.findings)
    assert "does not name a model vramlens can use" in a.error
    assert "conf/${MLM_MODEL_CFG}.sh" in a.error and "MLM_MODEL_CFG=${1}" in a.error
    assert "command-line argument `$1`" in a.error


def test_a_hybrid_mamba_model_definition_is_a_model_definition_not_a_run():
    # conf/nvidia/Nemotron-H-8B-Base-8K.sh only sets MODEL_ARGS, with `--hybrid-layer-pattern M-M-M-M*-…` in place
    # of `--num-layers`: the file is recognised, and says why there is no estimate
    a = _analyze(MODELOPT / "conf" / "nvidia" / "Nemotron-H-8B-Base-8K.sh")
    assert a.estimate is None
    note = _not_training(a)
    assert "model definition (`MODEL_ARGS`)" in note and "`--hybrid-layer-pattern`" in note
    # … while a transformer's definition beside it (conf/Qwen/Qwen3-8B.sh, `--num-layers 36`) is estimated
    a = _analyze(ROOT / "examples" / "post_training" / "modelopt" / "conf" / "Qwen" / "Qwen3-8B.sh")
    assert a.estimate is not None, a.error
    assert a.resolution.resolved.arch.layers == 36


def test_rl_model_options_whose_quotes_close_and_reopen_are_read():
    # MODEL_OPTIONS="… --tokenizer-model "unsloth/Qwen2.5-Math-7B" \ --lr … ": one value whose quotes close and
    # reopen around the tokenizer name; bash splits it into the same flags
    a = _analyze(RL / "qwen_2p5_math_7b.sh")
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert (arch.layers, arch.hidden, arch.heads) == (28, 3584, 28)
    assert a.plan.micro_batch.value == 2 and a.plan.seq_len.value == 4096


def test_a_hybrid_layer_pattern_run_is_estimated_as_its_layers_not_as_transformer_layers():
    # examples/mamba/train.sh: `torchrun … pretrain_hybrid.py` with `--hybrid-layer-pattern`, no `--num-layers`: the
    # pattern's Mamba, attention and MLP layers, each its own layer (tests/formats/test_megatron_hybrid.py)
    a = _analyze(ROOT / "mamba" / "train.sh")
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert arch.family == "nemotron_h" and arch.layers == 48
    assert dict(arch.layer_kinds)["attention"] == 4


def test_a_launch_whose_flags_come_from_its_caller_names_that_variable():
    # sc21/SRUN.sh: `CMD="python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS}"; srun … sh -c "${CMD}"`,
    # MEGATRON_PARAMS exported by SBATCH.sh, built in CONFIG.sh: not set in this script
    a = _analyze(ROOT / "examples" / "academic_paper_scripts" / "sc21" / "SRUN.sh")
    assert a.estimate is None
    assert "does not name a model vramlens can use" in a.error and "`${MEGATRON_PARAMS}`" in a.error


def test_t5_pretraining_is_named_as_an_encoder_decoder_run():
    a = _analyze(ROOT / "examples" / "t5" / "train_t5_220m_distributed.sh")
    assert a.estimate is None
    assert a.error.startswith("training of an encoder-decoder (T5) model")
    assert "`--encoder-num-layers 12`" in a.error


def test_a_uv_run_module_launch_with_megatron_flags_is_a_megatron_run():
    # `uv run --extra ssm python -m torch.distributed.run … -m examples.mimo.pretrain_mimo --num-layers 20
    # --hybrid-layer-pattern "MEMEM*EMEMEM*EMEMEM*" …`: Megatron's training loop, of a hybrid Mamba model
    a = _analyze(ROOT / "examples" / "mimo" / "scripts" / "run_hetero_nemotron_20l_mock_train.sh")
    assert a.plan is not None and a.plan.framework == "megatron"
    assert a.estimate is None
    assert a.error.startswith("training of a hybrid Mamba/attention model")
