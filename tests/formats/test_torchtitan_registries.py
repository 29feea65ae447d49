"""torchtitan main's config registries that build on another registry of the checkout, or on their own subclass of
`Trainer.Config` (fixtures copied from pytorch/torchtitan at b5bcd76c66, paths kept: see the SOURCE note)."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.formats import parse_document
from vramlens.formats.torchtitan import flavor_args
from vramlens.settings import Settings

MAIN = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan" / "main-b5bcd76c66"
GRAPH_LLAMA3 = MAIN / "torchtitan" / "experiments" / "graph_trainer" / "llama3" / "config_registry.py"
KIMI = MAIN / "torchtitan" / "models" / "kimi_k2_7" / "config_registry.py"


def value(plan, concept: str):
    s = getattr(plan, concept)
    return None if s is None else s.value


def test_a_graph_trainer_config_reads_the_registry_it_imports():
    # `config = to_graph_trainer_config(llama3_debugmodel(), model_registry)`, llama3_debugmodel imported from
    # torchtitan.models.llama3.config_registry: that config's model and batch, then `config.compile =
    # GraphTrainerCompileConfig(enable=True)`
    p = parse_document(GRAPH_LLAMA3.read_text(encoding="utf-8"), str(GRAPH_LLAMA3), workspace=MAIN).plan
    assert p is not None and p.format == "torchtitan"
    args, _ = flavor_args("llama3", "debugmodel")
    assert int(p.extra["arch.n_embd"].value) == args["dim"] and int(p.extra["arch.n_layer"].value) == args["n_layers"]
    assert value(p, "micro_batch") == 8 and value(p, "seq_len") == 2048
    assert value(p, "compile") is True
    assert [i.message for i in p.issues if i.kind.value == "not-read"] == []
    assert any("torchtitan/models/llama3/config_registry.py" in n for n in p.read_notes)


def test_a_graph_trainer_launch_takes_the_base_config_with_its_checkpointing_made_selective(tmp_path):
    # graph_trainer_llama3_70b wraps llama3_70b (TP 8, FullAC): to_graph_trainer_config replaces any enabled
    # activation checkpointing with `SelectiveAC.Config()` (torchtitan/experiments/graph_trainer/configs.py)
    script = tmp_path / "launch.sh"
    script.write_text(
        f"#!/bin/bash\nNGPU=8 MODULE=graph_trainer.llama3 CONFIG=graph_trainer_llama3_70b {MAIN}/run_train.sh\n"
    )
    p = parse_document(script.read_text(), str(script), workspace=MAIN).plan
    assert value(p, "model_id") == "meta-llama/Llama-3.1-70B"
    assert value(p, "tensor_parallel") == 8 and value(p, "micro_batch") == 8
    assert value(p, "grad_checkpointing") is False and value(p, "selective_recompute") == "op"


def test_a_registry_of_its_own_trainer_config_class_is_read_and_says_why_it_is_not_estimated():
    # kimi_k2_7 returns `_KimiTrainerConfig(...)`, a subclass of Trainer.Config in the same file: its model is read
    # (the debug flavor of a model with a vision encoder), and the message says why there is no estimate
    a = analyze(KIMI.read_text(encoding="utf-8"), str(KIMI), Settings(workspace=MAIN, model_lookup=False))
    assert a.estimate is None
    assert "torchtitan kimi_k2_7 `debugmodel`" in a.error and "vision encoder" in a.error
    assert not any("the returned config" in i.message for i in a.plan.issues)


def test_main_states_the_pipeline_micro_batch_count(tmp_path):
    # main's ParallelismConfig `num_pp_microbatches` (default 1) is the schedule's count; each micro-batch is the
    # token-form micro batch (torchtitan/config/configs.py at b5bcd76c66)
    script = tmp_path / "launch.sh"
    base = f"#!/bin/bash\nNGPU=8 MODULE=llama3 CONFIG=llama3_8b {MAIN}/run_train.sh"
    base += " --parallelism.pipeline_parallel_degree 2"
    script.write_text(base + " --parallelism.num_pp_microbatches 4\n")
    p = parse_document(script.read_text(), str(script), workspace=MAIN).plan
    assert value(p, "pipeline_parallel") == 2 and value(p, "grad_accum") == 4
    script.write_text(base + "\n")
    p = parse_document(script.read_text(), str(script), workspace=MAIN).plan
    assert value(p, "grad_accum") == 1 and p.grad_accum.framework is not None
