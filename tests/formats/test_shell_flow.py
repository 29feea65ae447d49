"""`if`/`elif`/`else` read as bash runs them: a condition the script's own values decide runs that branch only; one
that is not known before the script runs is read as the first launch sees it (the value set before the `if` stays;
a value only a branch sets comes from the first branch, with a note naming the others)."""

import shutil
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.formats.shell import Var, decide
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPENRLHF = FIXTURES / "openrlhf" / "v0.9.0"
SC21 = FIXTURES / "megatron" / "Megatron-LM-core_v0.13.0"


def run(path: Path, workspace: Path):
    return analyze(path.read_text(), str(path), Settings(workspace=workspace, model_lookup=False))


def value(plan, concept):
    s = getattr(plan, concept)
    return None if s is None else s.value


@pytest.mark.parametrize("name", ["train_rejection_sampling_llama.sh", "train_iterative_dpo_llama.sh"])
def test_openrlhf_iteration_loop_trains_the_first_model(name, tmp_path):
    """`iter=0; if [ -f $ITER_LOG_PATH ]; then iter=$(cat …); fi; while …; do if ((iter > 0)); then
    POLICY_MODEL_PATH=$MODEL_OUTPUT_PATH; fi; … --pretrain $POLICY_MODEL_PATH`: the first iteration trains the SFT
    model, not the checkpoint a later iteration writes."""
    path = tmp_path / name
    shutil.copy(OPENRLHF / name, path)
    plan = run(path, tmp_path).plan
    assert plan is not None and plan.framework == "openrlhf"
    assert value(plan, "model_id") == "OpenRLHF/Llama-3-8b-sft-mixture"
    assert not any("checkpoint/llama-3-8b" in i.message for i in plan.issues)


def test_megatron_sc21_table_runs_the_chosen_model_size(tmp_path):
    """run_table_1.sh sets MODEL_SIZE=1.7B, then `if [ ${MODEL_SIZE} == "1.7B" ]; then TP=1 … MBS=16 … elif … 1T
    … TP=8, PP=64, MBS=1`: the 1.7B branch is the one that runs."""
    folder = tmp_path / "sc21"
    shutil.copytree(SC21 / "sc21", folder)
    shutil.copy(SC21 / "sc21_table_1" / "run_table_1.sh", folder / "run_table_1.sh")
    plan = run(folder / "run_table_1.sh", tmp_path).plan
    assert plan is not None and plan.framework == "megatron"
    assert value(plan, "tensor_parallel") == 1
    assert value(plan, "pipeline_parallel") == 1
    assert value(plan, "micro_batch") == 16


def test_unknown_condition_takes_the_first_branch_and_says_so(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(
        'if [ "$SIZE" = big ]; then\n  MODEL=Qwen/Qwen2.5-7B\nelse\n  MODEL=Qwen/Qwen2.5-0.5B\nfi\n'
        "BS=4\nif [ -f resume.flag ]; then BS=1; fi\n"
        "torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL --per_device_train_batch_size $BS "
        "--bf16 True\n"
    )
    plan = run(path, tmp_path).plan
    assert value(plan, "model_id") == "Qwen/Qwen2.5-7B"
    assert value(plan, "micro_batch") == 4
    notes = " ".join(plan.read_notes)
    assert "MODEL=Qwen/Qwen2.5-7B" in notes and "Qwen/Qwen2.5-0.5B" in notes
    assert "BS=4, its value before" in notes


def test_elif_chain_of_unknown_outcome_names_every_other_branch(tmp_path):
    """`if … elif … else`: the first branch is read, and the note names what the `elif` and `else` would set."""
    path = tmp_path / "train.sh"
    path.write_text(
        'if [ "$SIZE" = big ]; then\n  MODEL=Qwen/Qwen2.5-7B\nelif [ "$SIZE" = mid ]; then\n  MODEL=Qwen/Qwen2.5-3B\n'
        "else\n  MODEL=Qwen/Qwen2.5-0.5B\nfi\n"
        "torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL --bf16 True\n"
    )
    plan = run(path, tmp_path).plan
    assert value(plan, "model_id") == "Qwen/Qwen2.5-7B"
    notes = " ".join(plan.read_notes)
    assert "MODEL=Qwen/Qwen2.5-7B, from the first branch" in notes
    assert "Qwen/Qwen2.5-3B" in notes and "Qwen/Qwen2.5-0.5B" in notes


def test_elif_after_a_known_false_condition_is_decided_by_its_own(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(
        'SIZE=mid\nif [ "$SIZE" = big ]; then\n  MODEL=Qwen/Qwen2.5-7B\nelif [ "$SIZE" = mid ]; then\n'
        "  MODEL=Qwen/Qwen2.5-3B\nelse\n  MODEL=Qwen/Qwen2.5-0.5B\nfi\n"
        "torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL --bf16 True\n"
    )
    plan = run(path, tmp_path).plan
    assert value(plan, "model_id") == "Qwen/Qwen2.5-3B"
    assert not any("MODEL=" in n for n in plan.read_notes)


@pytest.mark.parametrize(
    "cond, env, expected",
    [
        ('[ -z "$X" ]', {"X": ""}, True),
        ('[ -z "$X" ]', {"X": "a"}, False),
        ('[ -z "$X" ]', {}, None),
        ('[[ "$X" == "1.7B" ]]', {"X": "1.7B"}, True),
        ("[ $N -gt 2 ] && [ $N -lt 4 ]", {"N": "3"}, True),
        ("((N > 0))", {"N": "0"}, False),
        ("(( N * 2 >= 4 ))", {"N": "2"}, True),
        ("! [ -n $X ]", {"X": "a"}, False),
        ("[ -f $X ]", {"X": "a"}, None),
        ("grep -q x file", {}, None),
        ("[[ $X == *B ]]", {"X": "1B"}, None),
    ],
)
def test_decide(cond, env, expected):
    assert decide(cond, {k: Var(v) for k, v in env.items()}) is expected


VERL_MAIN = FIXTURES / "verl" / "main-2026-01-29"


def test_verl_sapo_joined_config_lists_are_split_into_overrides(tmp_path):
    """run_qwen30b_sapo.sh builds `ACTOR_CONFIG="$ACTOR_CONFIG $ACTOR_FSDP_CONFIG"` and passes `$ACTOR_CONFIG`
    unquoted: bash splits the joined value into its `key=value` words, so the model path it names is read."""
    path = tmp_path / "run_qwen30b_sapo.sh"
    shutil.copy(VERL_MAIN / "sapo_trainer" / "run_qwen30b_sapo.sh", path)
    plan = run(path, tmp_path).plan
    assert plan is not None and plan.framework == "verl"
    assert value(plan, "model_id") == "Qwen/Qwen3-30B-A3B-Base"
    assert not any("actor_rollout_ref.model.path` is not set" in i.message for i in plan.issues)


def test_verl_gspo_unknown_part_stays_in_its_own_word(tmp_path):
    """run_qwen30b_gspo.sh: `actor_model_path=$HDFS_ROOT/model/…` with HDFS_ROOT unset, inside the joined
    `ACTOR_CONFIG`: only that word is unknown (and the message names it); the other words, the Megatron
    parallel sizes the `megatron` branch adds, are read."""
    path = tmp_path / "run_qwen30b_gspo.sh"
    shutil.copy(VERL_MAIN / "gspo_trainer" / "run_qwen30b_gspo.sh", path)
    plan = run(path, tmp_path).plan
    assert plan is not None and plan.framework == "verl"
    assert value(plan, "tensor_parallel") == 2
    messages = " ".join(i.message for i in plan.issues)
    assert "`actor_rollout_ref.model.path` is set from `$actor_model_path`" in messages
    assert "$HDFS_ROOT/model/Qwen3-30B-A3B-Base" in messages


def test_case_on_a_known_value_runs_its_arm_only():
    """Megatron-LM examples/mamba/train.sh: `MODEL_SCALE="800M"; case "${MODEL_SCALE}" in "800M") … ;; "8B") … ;;
    *) … esac`: the 800M arm's sizes are the ones the launch line uses, not the last arm's."""
    from vramlens.formats.shell import analyze as read_shell

    path = FIXTURES / "megatron" / "Megatron-LM-d98e8a64" / "mamba" / "train.sh"
    script, _ = read_shell(path.read_text(), str(path))
    assert script.launch is not None
    args = [a.value for a in script.launch.args]
    at = args.index("--tensor-model-parallel-size")
    assert args[at + 1] == "1"
    assert args[args.index("--hidden-size") + 1] == "1024"
    assert args[args.index("--global-batch-size") + 1] == "32"


def test_case_of_unknown_value_takes_the_first_arm_and_says_so(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(
        'case "$SIZE" in\n  small|s) MODEL=Qwen/Qwen2.5-0.5B ;;\n  big)\n    MODEL=Qwen/Qwen2.5-7B\n    ;;\nesac\n'
        "BS=4\ncase $MODE in\n  fast) BS=8 ;;\n  *) BS=1 ;;\nesac\n"
        "torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL --per_device_train_batch_size $BS "
        "--bf16 True\n"
    )
    plan = run(path, tmp_path).plan
    assert value(plan, "model_id") == "Qwen/Qwen2.5-0.5B"
    assert value(plan, "micro_batch") == 4
    notes = " ".join(plan.read_notes)
    assert 'MODEL=Qwen/Qwen2.5-0.5B, from the first arm of `case "$SIZE" in`' in notes and "Qwen/Qwen2.5-7B" in notes
    assert "BS=4, its value before `case $MODE in`" in notes


@pytest.mark.parametrize(
    "size, model", [("big", "Qwen/Qwen2.5-7B"), ("s", "Qwen/Qwen2.5-0.5B"), ("x", "Qwen/Qwen3-8B")]
)
def test_case_on_a_known_value_matches_patterns_in_order(size, model, tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(
        f"SIZE={size}\n"
        'case "$SIZE" in\n  small|s) MODEL=Qwen/Qwen2.5-0.5B ;;\n  b*) MODEL=Qwen/Qwen2.5-7B ;;\n'
        "  *) MODEL=Qwen/Qwen3-8B ;;\nesac\n"
        "torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL --bf16 True\n"
    )
    plan = run(path, tmp_path).plan
    assert value(plan, "model_id") == model
    assert not any("case" in n for n in plan.read_notes)
