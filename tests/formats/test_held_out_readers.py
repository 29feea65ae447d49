"""Frameworks' own example configs at their versions, read as the framework reads them (fixtures copied from each
repository at that version; the SOURCE note next to each names the repository, commit and path)."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _analyze(path: Path):
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=path.parent, model_lookup=False))


def test_torchtune_component_builder_with_sizes_is_estimated_from_them():
    # torchtune main: `_component_: torchtune.models.llama2.llama2` with num_layers 22, embed_dim 2048, num_heads 32,
    # num_kv_heads 4 (TinyLlama) names no checkpoint: the model is the one those sizes build
    a = _analyze(FIXTURES / "torchtune" / "bd2a0fc7" / "llama2_1B_qat_single_device.yaml")
    assert a.estimate is not None, a.error
    arch = a.resolution.resolved.arch
    assert (arch.layers, arch.hidden, arch.heads, arch.kv_heads, arch.vocab) == (22, 2048, 32, 4, 32000)
    # torchtune's llama2 builder: MLP width scale_hidden_dim_for_mlp(2048) = 5632, SwiGLU, untied output projection
    assert arch.intermediate == 5632 and arch.mlp == "swiglu" and not arch.tied_embeddings


def test_trl_usage_in_a_string_after_the_imports_is_the_command_line():
    # TRL v0.19.1 examples/scripts/ppo/ppo.py keeps its usage in a bare string after the imports, not in the
    # module docstring: its command line names the policy model and the batch
    a = _analyze(FIXTURES / "trl" / "v0.19.1" / "examples" / "scripts" / "ppo" / "ppo.py")
    plan = a.plan
    assert plan is not None and plan.model_id is not None
    assert plan.model_id.value == "EleutherAI/pythia-1b-deduped"
    # one of its two examples, whole: `python -i …` (batch 64, accumulation 1) or `accelerate launch …` (1, 16)
    assert plan.micro_batch is not None and plan.grad_accum is not None
    assert (plan.micro_batch.value, plan.grad_accum.value) in ((64, 1), (1, 16))
    assert any("string at module level" in n for n in plan.read_notes)


def test_markdown_page_whose_run_is_a_python_block():
    # TRL main docs/source/sft_trainer.md "Quick start": a ```python block `SFTTrainer(model="Qwen/Qwen3-0.6B", ...)`
    # and no shell command; the page is that run (a trainer given a model id loads it in fp32 at TRL main,
    # trl/trainer/utils.py `create_model_from_path`)
    path = FIXTURES / "trl" / "f2cd5771" / "docs_source_sft_trainer.md"
    a = _analyze(path)
    plan = a.plan
    assert plan is not None and plan.format == "markdown"
    assert plan.model_id is not None and plan.model_id.value == "Qwen/Qwen3-0.6B"
    line = path.read_text(encoding="utf-8").splitlines()[plan.model_id.span.start_line]
    assert 'model="Qwen/Qwen3-0.6B"' in line  # the span is the page's own line
    assert plan.objective is not None and plan.objective.value == "sft"


def test_trl_experimental_config_and_trainer_classes_are_read():
    # TRL main examples/scripts/async_grpo.py: `AsyncGRPOConfig(per_device_train_batch_size=16, ...)` and
    # `AsyncGRPOTrainer(model="Qwen/Qwen3-0.6B", ...)` from trl.experimental.async_grpo: a TRL config (it extends
    # TrainingArguments) and a TRL trainer, whose objective is GRPO's
    a = _analyze(FIXTURES / "trl" / "f2cd5771" / "examples" / "scripts" / "async_grpo.py")
    plan = a.plan
    assert plan is not None and plan.framework == "trl"
    assert plan.model_id is not None and plan.model_id.value == "Qwen/Qwen3-0.6B"
    assert plan.micro_batch is not None and plan.micro_batch.value == 16
    assert plan.completion_len is not None and plan.completion_len.value == 1024
    assert plan.objective is not None and plan.objective.value == "grpo"


def test_trl_method_without_a_modelled_objective_is_named_not_modelled():
    # TRL main examples/scripts/tpo.py: `TPOTrainer` (trl.experimental.tpo) trains with its own objective, which the
    # estimate does not model: it is estimated, and says so, instead of passing for plain SFT
    a = _analyze(FIXTURES / "trl" / "f2cd5771" / "examples" / "scripts" / "tpo.py")
    assert a.plan is not None and a.plan.framework == "trl"
    assert a.plan.model_id is not None and a.plan.model_id.value == "Qwen/Qwen3-0.6B"
    named = [u for u in a.plan.unmodelled if "TPO" in u.what]
    assert len(named) == 1 and "supervised fine-tuning" in named[0].consequence


def test_mdx_docs_page_is_read_as_markdown():
    # TRL v0.12.2 docs are MDX (docs/source/dpo_trainer.mdx): Markdown's fenced blocks, here a ```python block that
    # loads Qwen/Qwen2-0.5B-Instruct and trains it with DPOConfig/DPOTrainer
    a = _analyze(FIXTURES / "trl" / "v0.12.2" / "docs_source_dpo_trainer.mdx")
    plan = a.plan
    assert plan is not None and plan.format == "markdown"
    assert plan.model_id is not None and plan.model_id.value == "Qwen/Qwen2-0.5B-Instruct"
    assert plan.objective is not None and plan.objective.value == "dpo"


def test_cli_walk_finds_mdx_pages(tmp_path):
    from vramlens.cli.paths import iter_config_files

    (tmp_path / "dpo_trainer.mdx").write_text("x", encoding="utf-8")
    assert [p.name for p in iter_config_files([tmp_path])] == ["dpo_trainer.mdx"]


def test_script_run_alone_takes_its_own_argument_defaults():
    # TRL main examples/scripts/openenv/echo.py: `parser.add_argument("--model", type=str, default="Qwen/Qwen3-0.6B")`
    # and `GRPOTrainer(model=args.model, ...)`; its usage example runs it with no arguments
    path = FIXTURES / "trl" / "f2cd5771" / "examples" / "scripts" / "openenv" / "echo.py"
    a = _analyze(path)
    plan = a.plan
    assert plan is not None and plan.model_id is not None
    assert plan.model_id.value == "Qwen/Qwen3-0.6B"
    line = path.read_text(encoding="utf-8").splitlines()[plan.model_id.span.start_line + 1]
    assert '"--model"' in line  # where the default is defined
    assert plan.objective is not None and plan.objective.value == "grpo"
