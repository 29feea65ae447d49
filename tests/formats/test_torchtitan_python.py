"""torchtitan main's Python configs (`config_registry.py` functions returning `Trainer.Config`, chosen with
`--module … --config …`), read with `ast` into the model, micro batch, sequence length, parallel layout and
activation checkpointing, as torchtitan's TOML job configs are."""

from pathlib import Path

import pytest
from cli_json import estimate_json
from vramlens.formats import parse_document
from vramlens.formats.torchtitan import ffn_hidden, flavor_args

MAIN = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan" / "main-b5bcd76c66"
LLAMA3 = MAIN / "torchtitan" / "models" / "llama3" / "config_registry.py"
QWEN3 = MAIN / "torchtitan" / "models" / "qwen3" / "config_registry.py"


def plan_of(path: Path, text: str | None = None):
    text = path.read_text(encoding="utf-8") if text is None else text
    return parse_document(text, str(path), workspace=MAIN).plan


def launch(tmp_path: Path, line: str):
    """A launch script written inside the fixture's checkout layout (so `--module` finds the registry)."""
    script = tmp_path / "launch.sh"
    script.write_text("#!/bin/bash\n" + line + "\n", encoding="utf-8")
    return parse_document(script.read_text(), str(script), workspace=MAIN).plan


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


def not_read(plan) -> list[str]:
    return [i.message for i in plan.issues if i.kind.value == "not-read"]


def test_registry_file_reads_its_first_config():
    """llama3/config_registry.py read alone: its first config (llama3_debugmodel) — the debug flavor's shapes, 8 rows
    of 2048 tokens (`num_tokens_per_microbatch_per_dp_rank=8 * 2048`, `max_context_length=2048`), SelectiveAC
    (op-level), AdamW; the other configs are named for `--config`."""
    p = plan_of(LLAMA3)
    assert p is not None and p.format == "torchtitan"
    args, _ = flavor_args("llama3", "debugmodel")
    assert int(p.extra["arch.n_embd"].value) == args["dim"] == 256
    assert int(p.extra["arch.n_layer"].value) == args["n_layers"]
    assert int(p.extra["arch.intermediate_size"].value) == ffn_hidden(args)
    assert value(p, "micro_batch") == 8 and value(p, "seq_len") == 2048
    assert value(p, "grad_checkpointing") is False and value(p, "selective_recompute") == "op"
    assert value(p, "optimizer") == "torch.optim.AdamW"
    assert any("llama3_8b" in n and "llama3_70b" in n for n in p.read_notes)
    assert not_read(p) == []


@pytest.mark.parametrize(
    "config, model, micro, seq, tp, full_ac",
    [
        ("llama3_8b", "meta-llama/Llama-3.1-8B", 1, 8192, None, False),
        ("llama3_70b", "meta-llama/Llama-3.1-70B", 8, 8192, 8, True),
        ("llama3_405b", "meta-llama/Llama-3.1-405B", 2, 8192, 8, True),
    ],
)
def test_run_train_selects_a_config_function(tmp_path, config, model, micro, seq, tp, full_ac):
    """`MODULE=llama3 CONFIG=<fn> ./run_train.sh` (run_train.sh at main passes `--module ${MODULE} --config
    ${CONFIG}`): the selected function's model, rows × context, tensor parallel degree and checkpointing."""
    p = launch(tmp_path, f"NGPU=8 MODULE=llama3 CONFIG={config} {MAIN}/run_train.sh")
    assert p.format == "torchtitan"
    assert value(p, "model_id") == model
    assert value(p, "micro_batch") == micro and value(p, "seq_len") == seq
    assert value(p, "tensor_parallel") == tp and value(p, "world_size") == 8
    assert value(p, "grad_checkpointing") is full_ac
    # data_parallel_shard_degree -1 fills the GPUs TP leaves: 8 shards at TP 1, none at TP 8
    assert value(p, "dist_strategy") == ("fsdp" if tp is None else "none")
    assert any(config in n for n in p.read_notes)


def test_405b_float8_converter_and_compile(tmp_path):
    """llama3_405b builds its model with `Float8LinearConverter` and `CompileConfig(enable=True)`: fp8 linears (their
    saved tensors a bf16 linear's: resolve.assemble `_float8_linears`), compiled."""
    p = launch(tmp_path, f"NGPU=8 MODULE=llama3 CONFIG=llama3_405b {MAIN}/run_train.sh")
    assert value(p, "float8_linears") is True and value(p, "compile") is True
    assert not any(u.key == "model.converters" for u in p.unmodelled)


def test_derived_config_keeps_its_base_and_changes(tmp_path):
    """`config = llama3_8b(); config.compile = CompileConfig(enable=True, components=["model"]); config.model_spec =
    model_registry("8B", converters=[MXFP8LinearConverter.Config(...)])`: the 8B run, compiled, MX linears."""
    p = launch(tmp_path, f"NGPU=8 MODULE=llama3 CONFIG=llama3_8b_mxfp8 {MAIN}/run_train.sh")
    assert value(p, "model_id") == "meta-llama/Llama-3.1-8B"
    assert value(p, "micro_batch") == 1 and value(p, "seq_len") == 8192
    assert value(p, "compile") is True and value(p, "float8_linears") is True


def test_torchrun_module_launch_with_overrides(tmp_path):
    """`torchrun … -m torchtitan.train --module qwen3 --config qwen3_32b` with command-line overrides: Qwen3 32B, the
    override's tensor parallel degree and context length win over the function's."""
    p = launch(
        tmp_path,
        "torchrun --nproc_per_node 8 -m torchtitan.train --module qwen3 --config qwen3_32b "
        "--parallelism.tensor_parallel_degree 2 --training.max_context_length 8192",
    )
    assert value(p, "model_id") == "Qwen/Qwen3-32B"
    assert value(p, "tensor_parallel") == 2 and value(p, "world_size") == 8
    # qwen3_32b: num_tokens_per_microbatch_per_dp_rank=2 * 4096 over a context of 8192 → one row
    assert value(p, "seq_len") == 8192 and value(p, "micro_batch") == 1
    assert value(p, "grad_checkpointing") is True


def test_constructs_not_read_are_named(tmp_path):
    """A LoRA converter and a helper given the config are not silently dropped: each is named as not read."""
    p = launch(tmp_path, f"NGPU=8 MODULE=llama3 CONFIG=llama3_debugmodel_float8_emulate_lora {MAIN}/run_train.sh")
    assert any("LoRAConverter" in m for m in not_read(p))
    text = LLAMA3.read_text(encoding="utf-8").replace(
        "def llama3_debugmodel() -> Trainer.Config:",
        "def llama3_tuned() -> Trainer.Config:\n    config = llama3_8b()\n    tune(config)\n    return config\n\n\n"
        "def llama3_debugmodel() -> Trainer.Config:",
        1,
    )
    p = plan_of(LLAMA3, text)
    assert any("tune(config)" in m for m in not_read(p))


def test_missing_function_is_reported(tmp_path):
    p = launch(tmp_path, f"NGPU=8 MODULE=llama3 CONFIG=llama3_no_such {MAIN}/run_train.sh")
    assert any("llama3_no_such" in i.message for i in p.issues)
    assert value(p, "model_id") is None


def test_other_python_is_not_a_torchtitan_config():
    text = "from transformers import TrainingArguments\nargs = TrainingArguments(per_device_train_batch_size=4)\n"
    p = parse_document(text, "train.py").plan
    assert p is None or p.format != "torchtitan"


def test_estimate_from_the_command_line(tmp_path):
    """The CLI estimates a main-branch launch (as a user runs it): Llama 3.1 70B over 8 GPUs with TP 8."""
    script = tmp_path / "launch.sh"
    script.write_text(f"NGPU=8 MODULE=llama3 CONFIG=llama3_70b {MAIN}/run_train.sh\n", encoding="utf-8")
    d = estimate_json(script, cwd=MAIN)
    assert d["model"]["id"] == "meta-llama/Llama-3.1-70B"
    assert d["gpu"]["count"] == 8
    # fp32 parameters and two fp32 AdamW states, split the same way over the TP ranks
    parts = d["components_gib"]
    assert parts["weights"] > 0 and parts["optimizer"] == pytest.approx(2 * parts["weights"], rel=0.02)
