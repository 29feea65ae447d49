"""Launch scripts as people write them: option-parsing loops whose defaults hold when the script runs without
arguments, bash arrays of arguments, quoted argument lists split by an unquoted `$X`, `bash -c "…"` under
`srun`, and `srun torchrun …` — read from the real example scripts (Qwen, OpenRLHF) and from variations of each
idiom, as `vramlens plan` / `vramlens estimate` show them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_hub import FakeHub
from vramlens import formats
from vramlens.formats import shell
from vramlens.formats.settings import PlanBuilder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QWEN = FIXTURES / "qwen" / "2df8e8ac"
OPENRLHF = FIXTURES / "openrlhf" / "v0.11.0"

# Qwen/Qwen-7B's config.json (the keys vramlens reads)
QWEN_7B = {
    "architectures": ["QWenLMHeadModel"],
    "model_type": "qwen",
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "vocab_size": 151936,
    "kv_channels": 128,
    "seq_length": 8192,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}


def plan_json(path: Path, cwd: Path | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "plan", str(path), "--format", "json", "--no-resolve"],
        cwd=cwd or path.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def values(data: dict) -> dict:
    return {k: v["value"] for k, v in data.get("settings", {}).items()}


def script(tmp_path: Path, text: str, name: str = "train.sh") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def notes(path: Path) -> list[str]:
    return formats.parse_document(path.read_text(encoding="utf-8"), str(path)).plan.read_notes


# --- option-parsing loops ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, model, method, micro, seq",
    [
        ("finetune_lora_single_gpu.sh", "Qwen/Qwen-7B", "lora", 2, 512),
        ("finetune_qlora_single_gpu.sh", "Qwen/Qwen-7B-Chat-Int4", "qlora", 2, 512),
        ("finetune_ds.sh", "Qwen/Qwen-7B", None, 1, 512),
    ],
)
def test_qwen_finetune_scripts_keep_the_default_model_of_their_option_loop(name, model, method, micro, seq):
    data = plan_json(QWEN / "finetune" / name, cwd=QWEN)  # run from the repository root, as its README says
    got = values(data)
    assert got["model_id"] == model
    assert got["micro_batch"] == micro and got["seq_len"] == seq
    assert got.get("peft_method") == method
    assert not any(
        "only known when the script runs" in i["message"] and "model" in i["message"] for i in data["issues"]
    ), data["issues"]


def test_qwen_estimate_names_the_default_it_assumed(tmp_path):
    hub = FakeHub({"Qwen/Qwen-7B": QWEN_7B})
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
        env.update(hub.env(tmp_path), VRAMLENS_CALIBRATION="off")
        out = subprocess.run(
            [sys.executable, "-m", "vramlens", "estimate", "finetune/finetune_lora_single_gpu.sh", "--format", "json"],
            cwd=QWEN,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        hub.close()
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    result = result[0] if isinstance(result, list) else result
    assert result["model"]["id"] == "Qwen/Qwen-7B"
    assert "MODEL=Qwen/Qwen-7B, the script's default; `-m` or `--model` overrides it" in result["assumptions"]


def test_getopts_loop_keeps_defaults_and_names_each_option(tmp_path):
    path = script(
        tmp_path,
        """
        MODEL=meta-llama/Meta-Llama-3-8B
        BS=4
        while getopts "m:b:h" opt; do
          case $opt in
            m) MODEL=$OPTARG ;;
            b) BS="${OPTARG}" ;;
            h) echo usage; exit 0 ;;
          esac
        done
        torchrun --nproc_per_node 2 train.py --model_name_or_path $MODEL --per_device_train_batch_size $BS \\
            --max_seq_length 1024 --use_peft
        """,
    )
    got = values(plan_json(path))
    assert (got["model_id"], got["micro_batch"], got["seq_len"], got["peft_method"]) == (
        "meta-llama/Meta-Llama-3-8B",
        4,
        1024,
        "lora",
    )
    assert notes(path) == [
        "MODEL=meta-llama/Meta-Llama-3-8B, the script's default; `-m` overrides it",
        "BS=4, the script's default; `-b` overrides it",
    ]


@pytest.mark.parametrize(
    "override",
    [
        'for arg in "$@"; do\n  case $arg in\n    --model=*) MODEL="${arg#*=}" ;;\n  esac\ndone',
        '[ -n "$1" ] && MODEL=$1',
        'if [ "$#" -gt 0 ]; then MODEL=${1}; fi',
        'while [ $# -gt 0 ]; do case "$1" in --model) MODEL="$2"; shift 2 ;; *) shift ;; esac; done',
    ],
)
def test_other_option_idioms_keep_the_default(tmp_path, override):
    path = script(
        tmp_path,
        'MODEL="Qwen/Qwen2.5-7B"\n' + override + "\n"
        'accelerate launch train.py --model_name_or_path "$MODEL" --per_device_train_batch_size 2\n',
    )
    got = values(plan_json(path))
    assert got["model_id"] == "Qwen/Qwen2.5-7B" and got["micro_batch"] == 2
    assert any(n.startswith("MODEL=Qwen/Qwen2.5-7B, the script's default;") for n in notes(path))


def test_an_unconditional_assignment_from_the_arguments_is_still_unknown(tmp_path):
    path = script(
        tmp_path,
        'MODEL="Qwen/Qwen2.5-7B"\nMODEL=$1\n'
        'accelerate launch train.py --model_name_or_path "$MODEL" --per_device_train_batch_size 2\n',
    )
    data = plan_json(path)
    assert "model_id" not in values(data)
    assert any("only known when the script runs" in i["message"] for i in data["issues"])


# --- bash arrays ---------------------------------------------------------------------------------------------


def test_openrlhf_argument_arrays_are_read():
    got = values(plan_json(OPENRLHF / "train_reinforce_baseline_hybrid_engine.sh"))
    assert got["model_id"] == "Qwen/Qwen3-4B-Thinking-2507"  # `${MODEL_PATH}` inside CKPT_ARGS=( … )
    assert (got["micro_batch"], got["seq_len"], got["zero_stage"], got["context_parallel"]) == (1, 74240, 3, 2)
    assert got["grad_checkpointing"] is True and got["gpu_count"] == 4


@pytest.mark.parametrize("use", ['"${ARGS[@]}"', "${ARGS[@]}", "${ARGS[*]}"])
def test_array_appends_and_expansions(tmp_path, use):
    path = script(
        tmp_path,
        f"""
        MODEL=meta-llama/Meta-Llama-3-8B
        declare -a ARGS=(
          --pretrain "$MODEL"   # the base model
          --micro_train_batch_size 2
        )
        ARGS+=(--max_len 4096 --zero_stage 2)
        ARGS+=( --bf16 --lora_rank 16 )
        MODEL=other/model
        deepspeed --module openrlhf.cli.train_sft {use} --train_batch_size 64
        """,
    )
    got = values(plan_json(path))
    # elements are expanded when the array is assigned: the later MODEL= does not change them
    assert (got["model_id"], got["micro_batch"], got["seq_len"], got["peft_method"], got["zero_stage"]) == (
        "meta-llama/Meta-Llama-3-8B",
        2,
        4096,
        "lora",
        2,
    )
    script_, _ = shell.analyze(path.read_text(encoding="utf-8"), str(path))
    micro = next(vals for name, _, vals in shell.collect_args(script_).flags if name == "micro_train_batch_size")
    assert path.read_text()[micro[0].word.start : micro[0].word.end] == "2"  # placed in the array, for hovers


def test_a_flag_whose_values_come_from_two_expansions_is_placed_at_its_own_words(tmp_path):
    """`"${ARGS[@]}" ${ARGS[*]}`: the first expansion's last flag takes its value and then the next expansion's first
    word, which is written above it. Its span still runs forward, over the words that follow the flag; the flag given
    again by the second expansion is the one argparse keeps."""
    text = (
        "ARGS=( 1024 --pretrain m/x\n --micro_train_batch_size 2\n)\nARGS+=(--max_len 512)\n"
        'deepspeed --module openrlhf.cli.train_sft "${ARGS[@]}" ${ARGS[*]}\n'
    )
    path = script(tmp_path, text)
    plan = formats.parse_document(text, str(path)).plan
    assert plan.seq_len.value == 512
    for sp in [i.span for i in plan.issues if i.span] + [plan.seq_len.span, plan.seq_len.value_span]:
        assert (sp.start_line, sp.start_col) <= (sp.end_line, sp.end_col)
    assert any("`max_len` is given 2 times" in n for n in plan.read_notes)
    # the first `--max_len`'s value words, spanned forward only
    script_, _ = shell.analyze(text, str(path))
    flags = [(flag, vals) for name, flag, vals in shell.collect_args(script_).flags if name == "max_len"]
    reader = shell._Reader(script_, PlanBuilder(str(path), "shell", None))
    first = shell._flag_setting(reader, "max_len", *flags[0])
    assert [w.text for w in flags[0][1]] == ["512", "1024"]
    assert text.splitlines()[3][first.value_span.start_col : first.value_span.end_col] == "512"
    assert (first.span.start_line, first.span.end_line) == (3, 3)


def test_a_quoted_array_star_is_one_word(tmp_path):
    path = script(
        tmp_path,
        'ARGS=(--micro_train_batch_size 2)\ndeepspeed --module openrlhf.cli.train_sft --pretrain m/x "${ARGS[*]}"\n',
    )
    assert "micro_batch" not in values(plan_json(path))


# --- word splitting of a quoted list -------------------------------------------------------------------------


def test_quoted_argument_lists_split_where_used_unquoted(tmp_path):
    path = script(
        tmp_path,
        """
        DIST="--nproc_per_node 4 --nnodes 1"
        TRAIN="--model_name_or_path meta-llama/Meta-Llama-3-8B
               --per_device_train_batch_size 5"
        ALL="$DIST train.py $TRAIN"
        torchrun $ALL --bf16 True --max_seq_length 777
        """,
    )
    got = values(plan_json(path))
    assert (got["model_id"], got["micro_batch"], got["gpu_count"], got["seq_len"]) == (
        "meta-llama/Meta-Llama-3-8B",
        5,
        4,
        777,
    )


def test_a_list_whose_variables_changed_is_not_split_with_new_values(tmp_path):
    path = script(
        tmp_path,
        'N=4\nDIST="--nproc_per_node $N"\nN=8\n'
        "torchrun $DIST train.py --model_name_or_path meta-llama/Meta-Llama-3-8B\n",
    )
    assert values(plan_json(path)).get("gpu_count") != 8


# --- bash -c and srun ----------------------------------------------------------------------------------------


def test_openrlhf_slurm_script_runs_its_ray_job_inside_bash_c():
    got = values(plan_json(OPENRLHF / "train_ppo_ray_slurm.sh"))
    assert got["model_id"] == "OpenRLHF/Llama-3-8b-sft-mixture"
    assert (got["micro_batch"], got["seq_len"], got["zero_stage"], got["objective"]) == (8, 2048, 3, "ppo")


@pytest.mark.parametrize(
    "wrap",
    [
        'srun --container-image=x bash -c "cd /w; pip install . ; torchrun \\\n'
        '--nproc_per_node $GPUS_PER_NODE --nnodes 1 -m ${training_commands}" &>> log',
        "nohup bash -lc 'torchrun --nproc_per_node 8 -m $training_commands' > log 2>&1 &",
        "bash -c 'sh -c \"torchrun --nproc_per_node $GPUS_PER_NODE -m $training_commands\"'",
    ],
)
def test_bash_c_strings_are_read_where_they_stand(tmp_path, wrap):
    path = script(
        tmp_path,
        "read -r -d '' training_commands <<EOF\n"
        "openrlhf.cli.train_sft \\\n   --max_len 2048 \\\n   --micro_train_batch_size 4 \\\n"
        "   --pretrain meta-llama/Meta-Llama-3-8B \\\n   --zero_stage 2 --bf16\nEOF\n"
        "GPUS_PER_NODE=8\n" + wrap + "\n",
    )
    got = values(plan_json(path))
    assert (got["model_id"], got["micro_batch"], got["seq_len"], got["gpu_count"], got["objective"]) == (
        "meta-llama/Meta-Llama-3-8B",
        4,
        2048,
        8,
        "sft",
    )


def test_srun_in_front_of_a_launcher(tmp_path):
    path = script(
        tmp_path,
        "srun -N 2 --ntasks-per-node=1 -w node1 torchrun --nproc_per_node 4 train.py "
        "--model_name_or_path meta-llama/Meta-Llama-3-8B --per_device_train_batch_size 3 --bf16 True\n",
    )
    got = values(plan_json(path))
    assert (got["model_id"], got["micro_batch"], got["gpu_count"]) == ("meta-llama/Meta-Llama-3-8B", 3, 4)


# --- arithmetic expansion ------------------------------------------------------------------------------------


def test_arithmetic_lengths_of_verl_scripts_are_worked_out(tmp_path):
    # the idiom of verl's examples/grpo_trainer/run_qwen3moe-30b_megatron_96gb.sh
    path = script(
        tmp_path,
        """
        max_prompt_length=$((1024 * 2))
        max_response_length=$((1024 * 8))
        actor_ppo_max_token_len=$(((max_prompt_length + max_response_length)))
        python3 -m verl.trainer.main_ppo \\
            data.max_prompt_length=${max_prompt_length} \\
            data.max_response_length=${max_response_length} \\
            actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B-Base \\
            actor_rollout_ref.actor.use_dynamic_bsz=True \\
            actor_rollout_ref.actor.ppo_max_token_len_per_gpu=${actor_ppo_max_token_len} \\
            trainer.n_gpus_per_node=8
        """,
    )
    got = values(plan_json(path))
    assert (got["prompt_len"], got["completion_len"]) == (2048, 8192)


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("1024 * 2", "2048"),
        ("(A + B) / 3", "4"),
        ("$A*2-${B}", "0"),
        ("-7 / 2", "-3"),
        ("-7 % 2", "-1"),
        ("2 ** 10", "1024"),
        ("2 ** 64", None),
        ("9223372036854775807 + 1", None),
        ("1 / 0", None),
        ("X + 1", None),
        ("1 << 2", None),
        ("3 -", None),
        ("(" * 70 + "1" + ")" * 70, None),
        ("1+" * 600 + "1", None),
    ],
)
def test_arithmetic_expansion_is_exact_or_unknown(expr, expected):
    env = {"A": shell.Var("4"), "B": shell.Var("8"), "X": shell.Var("not a number")}
    assert shell.arithmetic(expr, env) == expected


@pytest.mark.parametrize(
    "line, concept, expected",
    [
        (
            "accelerate launch train.py --model_name_or_path m/x --per_device_train_batch_size 4 "
            "--max_seq_length 1024 --per_device_train_batch_size 8",
            "micro_batch",
            8,
        ),
        # OpenRLHF's flat and dotted spellings of one argument: the later one
        (
            "deepspeed --module openrlhf.cli.train_sft --pretrain m/x --micro_train_batch_size 4 --max_len 512 "
            "--micro_train_batch_size 2",
            "micro_batch",
            2,
        ),
        (
            "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
            "--micro-batch-size 1 --seq-length 2048 --seq-length 4096",
            "seq_len",
            4096,
        ),
    ],
)
def test_a_flag_given_twice_keeps_its_last_value(tmp_path, line, concept, expected):
    """argparse stores each occurrence over the one before, so an override appended to a script's arguments is the
    value the run uses; the plan says the flag was given twice."""
    got = values(plan_json(script(tmp_path, line + "\n")))
    assert got[concept] == expected
    assert any("is given 2 times: argparse keeps the last" in n for n in notes(tmp_path / "train.sh"))


def test_an_override_given_twice_keeps_its_last_value(tmp_path):
    """LLaMA-Factory hands `key=value` words to OmegaConf.from_cli (src/llamafactory/hparams/parser.py `read_args`),
    which keeps a key's last value."""
    line = (
        "llamafactory-cli train per_device_train_batch_size=2 model_name_or_path=meta-llama/Meta-Llama-3-8B "
        "stage=sft finetuning_type=lora per_device_train_batch_size=4\n"
    )
    path = script(tmp_path, line)
    assert values(plan_json(path))["micro_batch"] == 4
    assert any("is given 2 times: OmegaConf keeps the last" in n for n in notes(path))


def test_a_one_value_option_takes_one_word_and_the_leftovers_are_said(tmp_path):
    """argparse gives `--packing` (a bool) and `--per_device_train_batch_size` (an int) their next word; the words
    after it are not theirs, and HfArgumentParser stops on them. TRL v0.21.0 examples/scripts/sft_gpt_oss.py writes
    `--packing true packing_strategy wrapped`. A list option (`--lora_target_modules`) keeps all its words."""
    path = script(
        tmp_path,
        "accelerate launch train.py --model_name_or_path m/x --packing true packing_strategy wrapped "
        "--per_device_train_batch_size 4 8 --use_peft --lora_target_modules q_proj v_proj\n",
    )
    got = values(plan_json(path))
    assert got["packing"] is True and got["micro_batch"] == 4
    assert got["lora_targets"] == ["q_proj", "v_proj"]
    plan = formats.parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    said = [i.message for i in plan.issues]
    assert any("`--packing` takes one value: `packing_strategy wrapped`" in m for m in said)
    assert any("`--per_device_train_batch_size` takes one value: `8`" in m for m in said)
