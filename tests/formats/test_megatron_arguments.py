"""Megatron-LM `pretrain_*.py` and Megatron-SWIFT `megatron sft|pt|rlhf` launch lines read with Megatron's own
arguments and defaults: the examples of Megatron-LM core_v0.15.0 and ms-swift v3.12.6 through the CLI, the
recompute and vocabulary flags in their spellings, and every memory- or speed-relevant argument of Megatron-LM's
arguments.py accounted for."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats import megatron
from vramlens.frameworks import argdefs, irrelevant, schemas

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "megatron"
LM = FIXTURES / "Megatron-LM-core_v0.15.0"
SWIFT = FIXTURES / "ms-swift-v3.12.6"


def run(command: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", command, "--format", "json", "--offline", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def estimate(path: Path) -> dict:
    data = run("estimate", path)
    return data[0] if isinstance(data, list) else data


def source(d: dict, concept: str):
    s = d["sources"].get(concept)
    return None if s is None else s["value"] if isinstance(s, dict) else s


def framework_of(d: dict, concept: str) -> str:
    """Where a value came from, as the JSON view says it ("default of Megatron-LM core_v0.15.0 (arguments.py)")."""
    s = d["sources"][concept]
    return s.get("from") or "" if isinstance(s, dict) else ""


def unmodelled(d: dict) -> dict[str, str]:
    return {u["key"]: u["what"] for u in d["unmodelled"]}


def launch(tmp_path: Path, *flags: str, name: str = "train.sh") -> Path:
    path = tmp_path / name
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n    " + " \\\n    ".join(flags) + "\n")
    return path


SHAPES = (
    "--num-layers 4",
    "--hidden-size 1024",
    "--num-attention-heads 16",
    "--seq-length 2048",
    "--micro-batch-size 1",
)


# --- Megatron-LM's examples ---------------------------------------------------------------------------------


def test_gpt3_175b_example_takes_megatron_defaults(tmp_path):
    d = estimate(LM / "train_gpt3_175b_distributed.sh")
    assert d["objective"] == "pretrain"
    assert source(d, "objective") == "pretrain"
    # Megatron-LM's own defaults, labelled with the version they were read at, not transformers'
    assert source(d, "optimizer") == "adamw_apex_fused" and "Megatron-LM" in framework_of(d, "optimizer")
    assert source(d, "distributed_optimizer") is False and "Megatron-LM" in framework_of(d, "distributed_optimizer")
    assert not any("transformers" in framework_of(d, c) for c in d["sources"])
    assert source(d, "amp_dtype") == "fp16"
    # GPT-2's 50,257 tokens padded to a multiple of 128 × TP 8 = 1,024: 51,200 rows of 12,288 (against the same
    # example with a vocabulary of 10,000 given)
    text = (LM / "train_gpt3_175b_distributed.sh").read_text()
    given = tmp_path / "given.sh"
    given.write_text(text.replace("--num-layers 96", "--num-layers 96 --padded-vocab-size 10000"))
    assert d["model"]["params"] - estimate(given)["model"]["params"] == (51200 - 10000) * 12288
    assert any("51,200" in a for a in d["approximate_reasons"])
    # --fp16 without --accumulate-allreduce-grads-in-fp32 keeps fp16 gradient buffers (megatron/training/arguments.py
    # turns the fp32 accumulation on for bf16 only)
    assert source(d, "grad_buffer_dtype") == "fp16"
    assert "fp16" not in unmodelled(d)


def test_llama3_8b_example_reads_quoted_arguments_and_pads_the_vocabulary():
    d = estimate(LM / "train_llama3_8b_h100_fp8.sh")
    assert d["objective"] == "pretrain"
    # "--vocab-size 128256" (one quoted array element, split by the unquoted ${ARR[@]}) with the NullTokenizer's
    # end-of-document token: 128,257 padded to 128,384; Llama-3-8B's shapes otherwise
    assert d["model"]["params"] == pytest.approx(8.03e9 + (128384 - 128256) * 4096 * 2, rel=1e-3)
    got = unmodelled(d)
    assert {"fp8-format", "fp8-param-gather", "empty-unused-memory-level"} <= set(got)
    # --bf16 --grad-reduce-in-bf16: bf16 gradient buffers (arguments.py leaves the fp32 accumulation off)
    assert source(d, "grad_buffer_dtype") == "bf16" and "grad-reduce-in-bf16" not in got
    assert source(d, "distributed_optimizer") is True and source(d, "sequence_parallel") is True


# --- flags in each spelling ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ("--recompute-activations",),
        ("--recompute_activations",),
        ("--recompute-activations", "--tensor-model-parallel-size 2"),
        ("--recompute-granularity selective",),
    ],
)
def test_recompute_activations_is_selective_recompute(tmp_path, flags):
    d = estimate(launch(tmp_path, *SHAPES, *flags))
    assert source(d, "selective_recompute") == "core_attention"
    assert source(d, "grad_checkpointing") is False


def test_without_recompute_flags_nothing_is_recomputed(tmp_path):
    d = estimate(launch(tmp_path, *SHAPES))
    assert source(d, "selective_recompute") in (None, "none")
    assert source(d, "grad_checkpointing") is False
    assert "Megatron-LM" in framework_of(d, "grad_checkpointing")


@pytest.mark.parametrize(
    "flags, vocab",
    [
        (("--vocab-size 32000",), 32000),  # a multiple of 128
        (("--vocab-size 32001",), 32128),  # padded up to 128
        (("--vocab-size 32001", "--tensor-model-parallel-size 4"), 32256),  # … to 128 × TP 4
        (("--vocab_size=32001", "--make-vocab-size-divisible-by 64", "--tensor-model-parallel-size 2"), 32128),
        (("--vocab-size 32000", "--tokenizer-type NullTokenizer"), 32128),  # + the end-of-document token
        (("--padded-vocab-size 50000", "--tensor-model-parallel-size 4"), 50000),  # as given
        (("--tensor-model-parallel-size 2",), 50432),  # GPT-2's 50,257, padded to 256
    ],
)
def test_vocabulary_flags_and_megatron_padding(tmp_path, flags, vocab):
    base = estimate(launch(tmp_path, *SHAPES, "--padded-vocab-size 10000", name="base.sh"))
    d = estimate(launch(tmp_path, *SHAPES, *flags))
    # tied embeddings: each vocabulary row is one hidden-size row of the embedding
    assert d["model"]["params"] - base["model"]["params"] == (vocab - 10000) * 1024


def test_query_groups_count_only_with_group_query_attention(tmp_path):
    mha = estimate(launch(tmp_path, *SHAPES, "--num-query-groups 4", name="mha.sh"))
    gqa = estimate(launch(tmp_path, *SHAPES, "--group-query-attention", "--num-query-groups 4", name="gqa.sh"))
    mqa = estimate(launch(tmp_path, *SHAPES, "--group-query-attention", name="mqa.sh"))

    def kv(groups: int) -> int:
        # 4 layers × (K and V) × (hidden + the bias Megatron's linear layers carry unless `--disable-bias-linear`)
        # × head size × groups
        return 4 * 2 * (1024 + 1) * 64 * groups

    assert mha["model"]["params"] - gqa["model"]["params"] == kv(16) - kv(4)
    assert gqa["model"]["params"] - mqa["model"]["params"] == kv(4) - kv(1)


def test_required_arguments_and_flags_megatron_refuses_are_named(tmp_path):
    path = launch(
        tmp_path, "--num-layers 4", "--hidden-size 1024", "--num-attention-heads 16", "--checkpoint-activations"
    )
    messages = [f["message"] for f in run("check", path)["files"][0]["findings"]]
    assert any("`--micro-batch-size`" in m and "stops" in m for m in messages)
    assert any("`--seq-length`" in m and "stops" in m for m in messages)
    assert any("--checkpoint-activations" in m and "--recompute-activations" in m for m in messages)


@pytest.mark.parametrize(
    "flag, key",
    [
        ("--optimizer muon", "optimizer"),
        ("--tp-comm-overlap", "tp-comm-overlap"),
        ("--recompute-modules core_attn layernorm", "recompute-modules"),
        ("--use-torch-fsdp2", "use-torch-fsdp2"),
    ],
)
def test_settings_not_modelled_are_named(tmp_path, flag, key):
    d = estimate(launch(tmp_path, *SHAPES, flag))
    assert key in unmodelled(d)


def test_defaults_of_megatron_flags_are_not_named(tmp_path):
    d = estimate(
        launch(
            tmp_path,
            *SHAPES,
            "--optimizer adam",
            "--main-params-dtype fp32",
            "--kv-channels 64",
            "--recompute-modules core_attn",
            "--empty-unused-memory-level 0",
        )
    )
    assert d["unmodelled"] == []
    assert source(d, "optimizer") == "adamw_apex_fused"


@pytest.mark.parametrize("element", ['"--vocab-size 32001"', "'--vocab-size 32001'", '--vocab-size" "32001'])
def test_unquoted_array_expansion_splits_elements_quoted_keeps_them_whole(tmp_path, element):
    """bash splits each element of an unquoted `${A[@]}` at blanks, and keeps it one word in `"${A[@]}"`."""
    line = (
        "A=(--seq-length 2048 {element})\ntorchrun pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
        "--num-attention-heads 16 --micro-batch-size 1 {use}\n"
    )
    path = tmp_path / "split.sh"
    path.write_text(line.format(element=element, use="${A[@]}"))
    split = estimate(path)
    path.write_text(line.format(element=element, use='"${A[@]}"'))
    whole = estimate(path)
    assert split["model"]["params"] - whole["model"]["params"] == (32128 - 50304) * 1024
    assert source(split, "seq_len") == source(whole, "seq_len") == 2048


# --- Megatron-SWIFT ---------------------------------------------------------------------------------------------


def test_megatron_swift_pretrain_example():
    d = estimate(SWIFT / "pretrain.sh")
    assert d["objective"] == "pretrain"
    assert source(d, "tensor_parallel") == 4 and source(d, "sequence_parallel") is True
    assert source(d, "amp_dtype") == "bf16" and "Megatron-SWIFT" in framework_of(d, "amp_dtype")
    assert source(d, "distributed_optimizer") is True and "Megatron-SWIFT" in framework_of(d, "distributed_optimizer")


def test_megatron_swift_lora_sft_example_trains_in_bf16():
    d = estimate(SWIFT / "lora_dense.sh")
    assert d["objective"] == "sft"
    assert source(d, "amp_dtype") == "bf16" and source(d, "weight_dtype") == "bf16"
    assert source(d, "lora_r") == 8 and source(d, "peft_method") == "lora"
    assert not any("transformers" in framework_of(d, c) for c in d["sources"])


def test_megatron_swift_rlhf_objective(tmp_path):
    assert estimate(SWIFT / "lora_dpo.sh")["objective"] == "dpo"
    path = tmp_path / "rlhf.sh"
    path.write_text(
        "NPROC_PER_NODE=2 megatron rlhf --model Qwen/Qwen2.5-7B-Instruct --micro_batch_size 1 --max_length 1024\n"
    )
    d = estimate(path)
    assert d["objective"] == "dpo" and "Megatron-SWIFT" in framework_of(d, "objective")
    # without --global_batch_size: Megatron-SWIFT's 16, over micro batch 1 × 2 ranks
    assert source(d, "grad_accum") == 8


# --- every argument of Megatron-LM's arguments.py that may change memory or speed ---------------------------------


def test_every_relevant_megatron_argument_is_read_or_listed():
    """megatron/training/arguments.py at core_v0.15.0: each argument `irrelevant.judged` picks (by a name or an
    alias) is read by formats/megatron.py or listed in its IRRELEVANT table with why (every dumped release is held
    to the same rule by tests/frameworks/test_schema_coverage.py)."""
    module = argdefs.read_module((LM / "arguments.py").read_text(encoding="utf-8"), "arguments.py")
    defined = list(argdefs.iter_arguments(module))
    assert len(defined) > 500
    names = {a.name: {a.name, *(x.lstrip("-").replace("-", "_") for x in a.aliases)} for a in defined}
    missing = [
        n
        for n, spellings in names.items()
        if irrelevant.judged(n) and not spellings & (set(megatron.HANDLERS) | set(megatron.IRRELEVANT))
    ]
    assert missing == []


def test_the_megatron_list_names_only_arguments_some_release_defines():
    """A name in the Megatron reader's IRRELEVANT table that no dumped megatron-core release (0.4 to 0.19) defines
    would hide nothing and say something false."""
    every = set()
    for v in schemas.versions("megatron"):
        for a in schemas.schema("megatron", v)["arguments"]:
            every |= {a["name"], *(schemas.argument_name(x) for x in a.get("aliases") or ())}
    assert {"0.4.0", "0.15.3", "0.19.0"} <= set(schemas.versions("megatron"))
    stale = [n for n in megatron.IRRELEVANT if n not in every]
    assert stale == []


# --- the flex token dispatcher (formats/megatron.py `flex_dispatcher`) -------------------------------------------

MOE = (*SHAPES, "--num-experts 16", "--moe-router-topk 2", "--moe-ffn-hidden-size 512")


@pytest.mark.parametrize(
    ("flags", "dispatch", "named"),
    [
        ((), "all_gather", None),  # Megatron-LM's default dispatcher gathers the group's tokens
        (("--moe-token-dispatcher-type allgather",), "all_gather", None),
        (("--moe-token-dispatcher-type alltoall",), None, None),
        (("--moe-token-dispatcher-type flex",), "deepep", None),  # the backend's default
        (("--moe-token-dispatcher-type flex", "--moe-enable-deepep"), "deepep", None),
        (("--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend hybridep"), "hybridep", None),
        (("--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend ncclep"), None, "`ncclep` flex"),
        (("--moe-token-dispatcher-type flex", "--moe-deepep-num-sms 32"), "deepep", "for 32 SMs"),
    ],
)
def test_flex_dispatcher_backends_are_read(tmp_path, flags, dispatch, named):
    from vramlens.formats import parse_document

    path = launch(tmp_path, *MOE, "--expert-model-parallel-size 8", *flags)
    plan = parse_document(path.read_text(), str(path)).plan
    assert (plan.ep_dispatch.value if plan.ep_dispatch else None) == dispatch
    whats = [u.what for u in plan.unmodelled]
    assert any(named in w for w in whats) if named else not any("dispatch" in w or "DeepEP" in w for w in whats)


def test_flex_dispatcher_spans_expert_tensor_and_expert_parallel_ranks(tmp_path):
    """MoEFlexTokenDispatcher exchanges tokens over the expert-TP × EP group (token_dispatcher.py `tp_ep_group`):
    EP 8 with expert TP 2 is DeepEP's 16-rank configuration, over two 8-GPU nodes — its NVSHMEM heap named."""
    from vramlens.formats import parse_document

    flags = (*MOE, "--expert-model-parallel-size 8", "--expert-tensor-parallel-size 2")
    path = launch(tmp_path, *flags, "--moe-token-dispatcher-type flex", "--moe-enable-deepep")
    plan = parse_document(path.read_text(), str(path)).plan
    assert plan.ep_dispatch is not None and plan.ep_dispatch.value == "deepep"
    assert any("NVSHMEM's symmetric heap" in u.what and "16-GPU" in u.what for u in plan.unmodelled)


# --- Megatron-LM's flags held to its own releases (frameworks/schemas/megatron/) ----------------------------------


def _gpt(tmp_path: Path, *flags: str) -> Path:
    path = tmp_path / "train.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n    " + " \\\n    ".join((*SHAPES, *flags)) + "\n")
    return path


def _notes(path: Path) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", "--format", "json", "--offline", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode in (0, 1), out.stderr
    return [f["message"] for f in json.loads(out.stdout)["files"][0]["findings"]]


def test_a_flag_no_megatron_release_defines_is_said_not_read(tmp_path):
    """Megatron-LM's parse_args stops on a flag it does not define (unless the script adds it): a misspelt flag is
    named as not read, with the nearest flag in the file's own spelling, instead of being dropped without a word."""
    messages = _notes(_gpt(tmp_path, "--recompute-granularty full"))
    said = [m for m in messages if "`recompute-granularty` is not an argument of Megatron-LM" in m]
    assert said and "extra_args_provider" in said[0] and "`--recompute-granularity`" in said[0], messages
    assert not any("micro-batch-size" in m and "not an argument" in m for m in messages)


def test_a_flag_an_older_release_defines_is_read_as_that_release(tmp_path):
    """`--retro-add-retriever` is an argument up to megatron-core 0.15 (Retro left in 0.16): unpinned, the file is
    read as the release it is written for; pinned to 0.19.0 the flag is pointed out."""
    path = _gpt(tmp_path, "--retro-add-retriever")
    assert not any("retro-add-retriever" in m and "not an argument" in m for m in _notes(path))
    (tmp_path / "requirements.txt").write_text("megatron-core==0.19.0\n")
    assert any("`retro-add-retriever` is not an argument of Megatron-LM 0.19.0:" in m for m in _notes(path))


def test_layers_per_virtual_stage_set_the_interleaved_schedule(tmp_path):
    """`--num-layers-per-virtual-pipeline-stage 2` with 16 layers over PP 4: 16 ÷ 4 ÷ 2 = 2 model chunks per stage
    (arguments.py `validate_args`), as `--num-virtual-stages-per-pipeline-rank 2` says directly; the interleaved
    schedule keeps more micro-batches in flight on the first stage than plain 1F1B."""
    base = ("--num-layers 16", "--hidden-size 1024", "--num-attention-heads 16", "--seq-length 2048")
    base += ("--micro-batch-size 1", "--global-batch-size 64", "--pipeline-model-parallel-size 4")
    per_chunk = estimate(launch(tmp_path, *base, "--num-layers-per-virtual-pipeline-stage 2", name="a.sh"))
    stages = estimate(launch(tmp_path, *base, "--num-virtual-stages-per-pipeline-rank 2", name="b.sh"))
    plain = estimate(launch(tmp_path, *base, name="c.sh"))
    assert source(per_chunk, "virtual_pipeline") == source(stages, "virtual_pipeline") == 2
    assert "num-layers-per-virtual-pipeline-stage" not in unmodelled(per_chunk)
    assert per_chunk["peak"]["allocated_gib"] == stages["peak"]["allocated_gib"] > plain["peak"]["allocated_gib"]
