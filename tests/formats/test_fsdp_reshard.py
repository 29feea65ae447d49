"""FSDP2 `reshard_after_forward` where a framework sets it: False keeps each unit's parameters gathered from its
forward to its backward (torch distributed/fsdp/_fully_shard/_fully_shard.py `fully_shard`), read as ZeRO stage 2
(SHARD_GRAD_OP-like) with a higher per-GPU estimate than stage 3; a setting the estimate cannot follow is named as not
modelled. torchtitan `[parallelism] fsdp_reshard_after_forward` ("default" is "never" under pipeline parallelism),
NeMo AutoModel `distributed.reshard_after_forward` / `distributed.moe.reshard_after_forward`, Megatron-LM
`--torch-fsdp2-no-reshard-after-forward`."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens.estimate import estimate
from vramlens.formats import parse_document
from vramlens.resolve import Settings, resolve

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TITAN_TOML = FIXTURES / "torchtitan" / "v0.2.2" / "llama3_8b.toml"
TITAN_MAIN = FIXTURES / "torchtitan" / "main-b5bcd76c66"
TITAN_REGISTRY = TITAN_MAIN / "torchtitan" / "models" / "llama3" / "config_registry.py"
AUTOMODEL = FIXTURES / "nemo_automodel" / "v0.1.0" / "llama3_2_1b_squad.yaml"


def plan_of(text: str, path: str, workspace: Path | None = None):
    plan = parse_document(text, path, workspace=workspace).plan
    assert plan is not None
    return plan


def per_gpu(plan, gpus: int = 8) -> int:
    rp = resolve(plan, Settings(gpu="H100-80GB", gpu_count=gpus)).resolved
    return estimate(rp, limits=False).device_bytes


def zero_stage(plan):
    return None if plan.zero_stage is None else plan.zero_stage.value


# --- torchtitan ------------------------------------------------------------------------------------------------


def titan(pp: int = 1, reshard: str | None = None):
    """llama3_8b.toml (v0.2.2) with a pipeline degree and a reshard policy written into `[parallelism]`."""
    line = "pipeline_parallel_degree = 1\n"
    text = TITAN_TOML.read_text(encoding="utf-8")
    assert line in text
    extra = f'fsdp_reshard_after_forward = "{reshard}"\n' if reshard is not None else ""
    return plan_of(text.replace(line, f"pipeline_parallel_degree = {pp}\n{extra}"), "/run/llama3_8b.toml")


def test_torchtitan_never_keeps_parameters_gathered():
    always, never, default = titan(reshard="always"), titan(reshard="never"), titan()
    assert zero_stage(always) == zero_stage(default) == 3
    assert zero_stage(never) == 2
    assert never.zero_stage.key == "fsdp_reshard_after_forward"
    assert "SHARD_GRAD_OP" in never.zero_stage.note
    assert per_gpu(never) > per_gpu(always) == per_gpu(default)


def test_torchtitan_default_under_pipeline_parallelism_keeps_parameters_gathered():
    """`reshard_after_forward = not pp_enabled` for "default" (models/llama3/infra/parallelize.py `apply_fsdp`,
    v0.2.0); "always" still reshards with pipeline parallelism."""
    default, always = titan(pp=2), titan(pp=2, reshard="always")
    assert zero_stage(default) == 2 and "pipeline" in default.zero_stage.note
    assert zero_stage(always) == 3
    assert per_gpu(default) > per_gpu(always)


def test_torchtitan_unknown_policy_is_reported():
    p = titan(reshard="sometimes")
    assert zero_stage(p) == 3
    assert any("fsdp_reshard_after_forward" in i.message and "sometimes" in i.message for i in p.issues)


def test_torchtitan_python_config_never():
    """torchtitan main's Python config: `ParallelismConfig(fsdp_reshard_after_forward="never")`."""
    text = TITAN_REGISTRY.read_text(encoding="utf-8")
    old = 'parallelism=ParallelismConfig(pipeline_parallel_schedule="Interleaved1F1B"),'
    assert text.count(old) == 1
    new = old.replace('"Interleaved1F1B")', '"Interleaved1F1B", fsdp_reshard_after_forward="never")')
    never = plan_of(text.replace(old, new), str(TITAN_REGISTRY), TITAN_MAIN)
    default = plan_of(text, str(TITAN_REGISTRY), TITAN_MAIN)
    assert zero_stage(never) == 2 and zero_stage(default) == 3


# --- NeMo AutoModel --------------------------------------------------------------------------------------------


def automodel(**distributed) -> object:
    """llama3_2_1b_squad.yaml (v0.1.0) with `strategy: fsdp2` and these entries added to `distributed`."""
    text = AUTOMODEL.read_text(encoding="utf-8")
    head = "distributed:\n  _target_: nemo_automodel.components.distributed.fsdp2.FSDP2Manager\n"
    assert head in text
    lines = []
    for key, value in distributed.items():
        if isinstance(value, dict):
            lines.append(f"  {key}:\n" + "".join(f"    {k}: {str(v).lower()}\n" for k, v in value.items()))
        else:
            lines.append(f"  {key}: {str(value).lower()}\n")
    return plan_of(text.replace(head, "distributed:\n  strategy: fsdp2\n" + "".join(lines)), "/run/recipe.yaml")


def test_automodel_reshard_after_forward_false():
    """FSDP2Config.reshard_after_forward (distributed/config.py, v0.5.0)."""
    off, on, unset = automodel(reshard_after_forward=False), automodel(reshard_after_forward=True), automodel()
    assert zero_stage(off) == 2 and zero_stage(on) == zero_stage(unset) == 3
    assert off.zero_stage.key == "reshard_after_forward"
    assert per_gpu(off) > per_gpu(on) == per_gpu(unset)


def test_automodel_pipeline_keeps_layers_gathered():
    """No override and pp_size > 1: `layer_reshard_after_forward = False` (distributed/parallelizer.py
    `apply_fsdp2_sharding_recursively`, v0.4.0 and v0.5.0)."""
    default = automodel(pp_size=2, pipeline={"pp_microbatch_size": 1})
    forced = automodel(pp_size=2, pipeline={"pp_microbatch_size": 1}, reshard_after_forward=True)
    assert zero_stage(default) == 2 and zero_stage(forced) == 3
    assert per_gpu(default) > per_gpu(forced)


@pytest.mark.parametrize("moe, stage", [(None, 2), (False, 2), (True, 3)])
def test_automodel_expert_parallel_reads_the_moe_setting(moe, stage):
    """ep_size > 1: the MoE parallelizer's MoEParallelizerConfig.reshard_after_forward (default False) decides,
    not FSDP2Config's (moe/parallelizer.py `apply_fsdp`, v0.3.0–v0.5.0: the one flag for every block, its experts
    and the root); expert parallelism is modelled (each rank gathers its own experts), so the layers kept gathered
    are counted, not named."""
    extra = {} if moe is None else {"moe": {"reshard_after_forward": moe}}
    p = automodel(ep_size=2, reshard_after_forward=True, **extra)
    assert zero_stage(p) == stage
    assert p.expert_parallel is not None and p.expert_parallel.value == 2
    assert not any("reshard" in u.key or u.key == "ep_size" for u in p.unmodelled)


def test_automodel_v020_parallelizer_section_sets_the_moe_reshard():
    """v0.2.0 recipes pass the MoE parallelizer's arguments in a top-level `parallelizer:` section (recipes/llm/
    train_ft.py at v0.2.0; examples/benchmark/configs/gptoss_120b_te_deepep.yaml: `reshard_after_forward: true`)."""
    text = AUTOMODEL.read_text(encoding="utf-8").replace(
        "distributed:\n  _target_: nemo_automodel.components.distributed.fsdp2.FSDP2Manager\n",
        "parallelizer:\n  _target_: nemo_automodel.components.moe.parallelizer.parallelize_model\n"
        "  reshard_after_forward: true\n"
        "distributed:\n  _target_: nemo_automodel.components.distributed.fsdp2.FSDP2Manager\n  ep_size: 2\n",
    )
    p = plan_of(text, "/run/recipe.yaml")
    assert zero_stage(p) == 3 and "parallelizer.reshard_after_forward" in p.zero_stage.note


# --- Megatron-LM -----------------------------------------------------------------------------------------------


def test_megatron_torch_fsdp2_no_reshard_is_named_as_not_modelled():
    """`--torch-fsdp2-no-reshard-after-forward` ("Set to enable FSDP ZeRO-2", megatron/training/arguments.py): the
    torch FSDP2 path is not modelled, and this setting of it is named too, not dropped."""
    text = (
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
        "--seq-length 2048 --micro-batch-size 1 --use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward\n"
    )
    p = plan_of(text, "/run/train.sh")
    keys = {u.key for u in p.unmodelled}
    assert "use_torch_fsdp2" in {k.replace("-", "_").lstrip("_") for k in keys}
    assert any("reshard" in k for k in keys)


# --- verl --------------------------------------------------------------------------------------------------------

VERL_PPO = FIXTURES / "verl" / "main-2026-01-29" / "ppo_trainer" / "run_deepseek7b_llm_pfppo.sh"


def verl_plan(tmp_path: Path, *overrides: str, version: str | None = None):
    """verl's PPO launch with overrides, in a workspace that pins verl at `version` (requirements.txt)."""
    from vramlens.analysis import analyze

    head = "python3 -m verl.trainer.main_ppo \\\n"
    # the fixture's own command ends at its `\  # [...]` comment line: the model is given ahead of it
    overrides = ("actor_rollout_ref.model.path=deepseek-ai/deepseek-llm-7b-chat", *overrides)
    text = VERL_PPO.read_text(encoding="utf-8").replace(head, head + "".join(f"    {o} \\\n" for o in overrides))
    if version:
        (tmp_path / "requirements.txt").write_text(f"verl=={version}\n")
    script = tmp_path / VERL_PPO.name
    script.write_text(text)
    a = analyze(text, str(script), Settings(model_lookup=False, workspace=tmp_path))
    assert a.plan is not None
    return a.plan


@pytest.mark.parametrize(
    "strategy, version, stage",
    [("fsdp2", "0.6.1", 2), ("fsdp2", None, 2), ("fsdp", None, 2), ("fsdp", "0.6.1", 3)],
)
def test_verl_actor_reshard_after_forward_false(tmp_path, strategy, version, stage):
    """`actor_rollout_ref.actor.fsdp_config.reshard_after_forward=False`: FSDP2's fully_shard gets it from v0.4.0;
    the PPO workers' FSDP1 turns it into SHARD_GRAD_OP from v0.7.0 (verl/workers/fsdp_workers.py
    `fsdp_enable_zero3`), FULL_SHARD before."""
    s = f"actor_rollout_ref.actor.strategy={strategy}"
    off = verl_plan(tmp_path, s, "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=False", version=version)
    on = verl_plan(tmp_path, s, version=version)
    assert zero_stage(off) == stage and zero_stage(on) == 3
    if stage == 2:
        assert off.zero_stage.key == "actor_rollout_ref.actor.fsdp_config.reshard_after_forward"
        # the actor's training step holds more (the vLLM engine beside it can still set the device's peak)
        assert step_bytes(off) > step_bytes(on)
    assert not any("reshard" in u.key for u in off.unmodelled)


def step_bytes(plan, gpus: int = 8) -> int:
    rp = resolve(plan, Settings(gpu="H100-80GB", gpu_count=gpus)).resolved
    return estimate(rp, limits=False).phases["forward-backward"]
