"""TRL's training scripts whose model is a command-line argument: the usage example their docstring shows is read,
and a script with none says which argument names the model (fixtures copied from huggingface/trl at their
versions; the SOURCE note beside them names the commit and path)."""

from __future__ import annotations

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

TRL = Path(__file__).resolve().parents[1] / "fixtures" / "trl"


def _analyze(path: Path, root: Path):
    return analyze(path.read_text(encoding="utf-8"), str(path), Settings(workspace=root, model_lookup=False))


def test_a_script_without_usage_names_the_argument_that_gives_its_model():
    # TRL main trl/scripts/grpo.py: `GRPOTrainer(model=model_args.model_name_or_path, …)`, model_args parsed by
    # `TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig))`; its docstring shows no command
    root = TRL / "f2cd5771"
    a = _analyze(root / "trl" / "scripts" / "grpo.py", root)
    assert a.estimate is None
    assert a.error.startswith("the config does not name a model vramlens can use")
    assert "`--model_name_or_path`" in a.error and "`ModelConfig`" in a.error


def test_a_usage_example_missing_a_line_continuation_is_read_as_the_command_it_shows():
    # TRL v0.19.1 examples/scripts/sft_vlm.py: its docstring's `accelerate launch` line lacks the `\` before the
    # indented `--config_file=… \` lines that follow; the example is read as the one command it shows
    root = TRL / "v0.19.1"
    a = _analyze(root / "examples" / "scripts" / "sft_vlm.py", root)
    plan = a.plan
    assert plan is not None and plan.model_id is not None
    assert plan.model_id.value == "llava-hf/llava-1.5-7b-hf"
    assert plan.micro_batch.value == 8 and plan.grad_accum.value == 8
    assert any("usage example in the module docstring" in n for n in plan.read_notes)


def test_a_stable_diffusion_trainer_is_named_not_read_as_its_reward_scorer():
    # TRL v0.12.2 examples/scripts/ddpo.py trains `DefaultDDPOStableDiffusionPipeline(script_args.pretrained_model)`
    # with `DDPOTrainer`; the `CLIPModel.from_pretrained("openai/clip-vit-large-patch14")` it loads is the aesthetic
    # scorer that rewards the images, not the model trained
    root = TRL / "v0.12.2"
    a = _analyze(root / "examples" / "scripts" / "ddpo.py", root)
    assert a.plan is not None and a.plan.model_id is None
    assert a.estimate is None
    assert a.error.startswith("training of a diffusion model") and "`DDPOTrainer`" in a.error
