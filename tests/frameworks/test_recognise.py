"""Settings held to the framework's own arguments at the version the workspace runs (frameworks/recognise.py), the
concept registry kept in step with the plan, and defaults taken from the dump of the version a run uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document
from vramlens.frameworks import concepts
from vramlens.plan import PLAN_CONCEPTS, IssueKind, Severity
from vramlens.resolve import resolve
from vramlens.settings import Settings

LF = "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\noutput_dir: out\n"


def _plan(text: str, name: str, workspace: Path | None = None):
    path = str((workspace or Path("/nonexistent")) / name)
    return parse_document(text, path, workspace=workspace).plan


def _issues(plan, kind):
    return [i for i in plan.issues if i.kind == kind]


def _pin(tmp_path: Path, *pins: str) -> Path:
    (tmp_path / "requirements.txt").write_text("\n".join(pins) + "\n")
    return tmp_path


def test_every_plan_field_is_a_concept_or_declared_not_a_setting():
    missing = set(PLAN_CONCEPTS) - set(concepts.CONCEPTS) - set(concepts.NOT_SETTINGS)
    assert not missing, f"TrainingPlan fields with no Concept in frameworks/concepts.py: {sorted(missing)}"
    assert not set(concepts.NOT_SETTINGS) & set(concepts.CONCEPTS)


@pytest.mark.parametrize(
    "name,concept",
    [
        ("use_distributed_optimizer", "distributed_optimizer"),
        ("actor.megatron.use_distributed_optimizer", "distributed_optimizer"),
        ("vllm_enable_sleep_mode", "generation_sleeps"),
        ("actor_rollout_ref.rollout.free_cache_engine", "generation_sleeps"),
        ("selective_ac_option", "checkpoint_every"),
        ("recompute_granularity", "selective_recompute"),
        ("ref_offload", "ref_offload"),
        ("expert_model_parallel_size", "expert_parallel"),
        ("galore_proj_bits", "optimizer_proj_bits"),
        ("llamapro_num_new_blocks", "added_layers"),
        ("parallelism.disable_loss_parallel", "loss_parallel"),
    ],
)
def test_modelled_settings_map_to_their_concept(name, concept):
    assert concepts.match(name).name == concept
    assert concepts.switch("use_distributed_optimizer") == ("distributed_optimizer", True)  # not ZeRO-1


@pytest.mark.parametrize(
    "typo,meant",
    [
        ("cutof_len", "cutoff_len"),
        ("lora_rnak", "lora_rank"),
        ("per_device_train_batchsize", "per_device_train_batch_size"),
    ],
)
def test_llamafactory_key_it_does_not_define_is_named_with_did_you_mean(typo, meant):
    plan = _plan(LF + f"{typo}: 8\n", "lf.yaml")
    found = [i for i in _issues(plan, IssueKind.UNKNOWN_VALUE) if f"`{typo}`" in i.message]
    assert len(found) == 1 and "not an argument of LLaMA-Factory 0.9.5" in found[0].message
    assert found[0].suggestion == meant
    assert not [i for i in plan.issues if "not an argument" in i.message and f"`{typo}`" not in i.message]


def test_key_of_a_newer_release_is_unknown_at_the_pinned_one(tmp_path):
    text = LF + "apollo_rank: 16\n"  # LLaMA-Factory adds APOLLO after 0.8.3
    assert not [i for i in _plan(text, "lf.yaml").issues if "not an argument" in i.message]
    old = _plan(text, "lf.yaml", _pin(tmp_path, "llamafactory==0.8.3"))
    assert any("`apollo_rank` is not an argument of LLaMA-Factory 0.8.3" in i.message for i in old.issues)


def test_axolotl_unknown_key_is_named_as_dropped_and_an_error_only_in_strict_mode():
    text = "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nsequence_len: 1024\nmicro_batch_size: 1\nsequnce_len: 2\n"
    # axolotl's config model drops a key it does not define: the run goes on without it, and the user is told
    (dropped,) = [i for i in _plan(text, "ax.yaml").issues if "not an argument" in i.message]
    assert dropped.kind is IssueKind.NOT_READ and dropped.severity is Severity.INFO
    assert "axolotl drops keys" in dropped.message and dropped.suggestion == "sequence_len"
    strict = _plan(text + "strict: true\n", "ax.yaml")
    found = [i for i in strict.issues if "not an argument of axolotl" in i.message]
    assert [(i.kind, i.suggestion) for i in found] == [(IssueKind.UNKNOWN_VALUE, "sequence_len")]


AX = "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_target_linear: true\nmicro_batch_size: 1\nbf16: true\n"
LIGER = "axolotl.integrations.liger.LigerPlugin"


def test_axolotl_plugin_switch_without_its_plugin_is_dropped_and_not_estimated():
    # integrations/config.py merge_input_args: a plugin's arguments join the config model only when it is listed
    bare = _plan(AX + "liger_rms_norm: true\nliger_fused_linear_cross_entropy: true\n", "ax.yaml")
    found = {i.message.split("`")[1]: i for i in _issues(bare, IssueKind.NOT_READ)}
    assert set(found) == {"liger_rms_norm", "liger_fused_linear_cross_entropy"}
    assert all(i.suggestion == LIGER for i in found.values())
    assert bare.loss_impl is None and bare.fused_kernels is None
    listed = _plan(
        AX + f"plugins:\n  - {LIGER}\nliger_rms_norm: true\nliger_fused_linear_cross_entropy: true\n", "ax.yaml"
    )
    assert not _issues(listed, IssueKind.NOT_READ)
    assert listed.loss_impl.value == "fused" and "rms_norm" in listed.fused_kernels.value


def test_axolotl_plugin_the_estimate_does_not_model_is_named_with_what_it_sets():
    kernels = "axolotl.integrations.kernels.KernelsPlugin"
    plan = _plan(AX + f"plugins:\n  - {kernels}\nuse_scattermoe: true\nuse_sonicmoe: false\n", "ax.yaml")
    assert [(u.key, u.what) for u in plan.unmodelled] == [("use_scattermoe", "an argument of axolotl's KernelsPlugin")]
    # listed with nothing set: the plugin itself is named
    plan = _plan(AX + "plugins:\n  - axolotl.integrations.diffusion.DiffusionPlugin\n", "ax.yaml")
    assert [u.what for u in plan.unmodelled] == ["axolotl's DiffusionPlugin, listed in `plugins`"]
    # a plugin that does not change the step (a logger) is not named
    plan = _plan(AX + "plugins:\n  - axolotl.integrations.swanlab.SwanLabPlugin\nswanlab_project: x\n", "ax.yaml")
    assert not plan.unmodelled and not _issues(plan, IssueKind.NOT_READ)


@pytest.mark.parametrize(
    "pin,extra,fused",
    [
        ("axolotl==0.19.0", "", True),  # CutCrossEntropyArgs.cut_cross_entropy defaults to True
        ("axolotl==0.6.0", "", False),  # ... and to None in 0.6.0: the plugin patches nothing without the switch
        ("axolotl==0.6.0", "cut_cross_entropy: true\n", True),
        ("axolotl==0.19.0", "cut_cross_entropy: false\n", False),
    ],
)
def test_axolotl_cut_cross_entropy_plugin_follows_its_switch_at_the_version(tmp_path, pin, extra, fused):
    cce = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
    plan = _plan(AX + f"plugins:\n  - {cce}\n" + extra, "ax.yaml", _pin(tmp_path, pin))
    assert (plan.loss_impl is not None and plan.loss_impl.value == "fused") is fused


def test_axolotl_section_of_dotted_arguments_is_an_argument():
    plan = _plan(AX + "strict: true\nspecial_tokens:\n  pad_token: x\n", "ax.yaml")
    assert not [i for i in plan.issues if "special_tokens" in i.message]


@pytest.mark.parametrize(
    "flag,chain",
    [
        (
            "--sft_type",
            "`sft_type` → `train_type` between 2.6.1 and 3.0.3, then `train_type` → `tuner_type` between "
            "4.0.4 and 4.1.3",
        ),
        ("--train_type", "`train_type` → `tuner_type` between 4.0.4 and 4.1.3"),
    ],
)
def test_swift_renamed_flag_names_the_versions(flag, chain):
    plan = _plan(f"swift sft --model Qwen/Qwen2.5-7B-Instruct {flag} lora --per_device_train_batch_size 2\n", "r.sh")
    found = [i for i in _issues(plan, IssueKind.NOT_READ) if "not an argument of ms-swift 4.6.0" in i.message]
    assert len(found) == 1 and chain in found[0].message and found[0].suggestion == "--tuner_type"


def test_swift_renamed_flag_is_fine_at_a_version_that_has_it(tmp_path):
    ws = _pin(tmp_path, "ms-swift==2.6.1")
    plan = _plan("swift sft --model_type qwen-7b-chat --sft_type lora --batch_size 2\n", "r.sh", ws)
    assert not [i for i in plan.issues if "not an argument" in i.message]


def test_unknown_flag_of_a_strict_cli_through_the_cli(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("swift sft --model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --lorra_rank 8\n")
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "plan", str(script)], capture_output=True, text=True, timeout=300
    )
    assert "`lorra_rank` is not an argument of ms-swift 4.6.0" in out.stdout and "`--lora_rank`" in out.stdout


def test_a_custom_script_is_not_held_to_the_framework_arguments():
    plan = _plan(
        "torchrun train.py --model_name_or_path gpt2 --per_device_train_batch_size 2 --my_flag 3 "
        "--max_seq_length 512\n",
        "r.sh",
    )
    assert not [i for i in plan.issues if "not an argument" in i.message]


@pytest.mark.parametrize(
    "key,value,recorded",
    [
        ("galore_proj_type", "left", True),
        ("galore_proj_type", "std", False),  # std: the 0.9.5 default
        ("shift_attn", "true", True),
        ("shift_attn", "false", False),
        ("apollo_update_interval", 50, True),
    ],
)
def test_not_modelled_argument_of_the_version_is_named(key, value, recorded):
    plan = _plan(LF + f"{key}: {value}\n", "lf.yaml")
    assert (key in [u.key for u in plan.unmodelled]) is recorded


def _trl_sources(tmp_path: Path, *pins: str) -> dict:
    tmp_path.mkdir()
    ws = _pin(tmp_path, *pins)
    text = (
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: trl-lib/Capybara\nlearning_rate: 2.0e-5\n"
        "per_device_train_batch_size: 2\noutput_dir: out\n"
    )
    plan = _plan(text, "sft.yaml", ws)
    assert plan.framework == "trl"
    return resolve(plan, Settings(workspace=ws)).sources


def test_trl_defaults_follow_the_pinned_version(tmp_path):
    new = _trl_sources(tmp_path / "a", "trl==1.16.0")
    old = _trl_sources(tmp_path / "b", "trl==0.12.2", "transformers==4.46.3")
    assert (new["seq_len"].value, new["seq_len"].framework) == (1024, "TRL 1.16.0 (SFTConfig.max_length)")
    assert new["grad_checkpointing"].value is True
    assert new["grad_checkpointing"].framework == "TRL 1.16.0 (_BaseConfig.gradient_checkpointing)"
    # TRL 0.12.2 defines no gradient_checkpointing of its own: transformers' TrainingArguments default (off)
    assert old["grad_checkpointing"].value is False
    assert old["grad_checkpointing"].framework == "transformers 4.46.3 (TrainingArguments.gradient_checkpointing)"
    # its max_seq_length is None (computed by the trainer): the hand-written default stays, under its own label
    assert old["seq_len"].value == 1024 and "0.12.2" not in (old["seq_len"].framework or "")


def test_llamafactory_cutoff_len_default_by_version(tmp_path):
    def seq(*pins):
        (tmp_path / pins[0]).mkdir()
        ws = _pin(tmp_path / pins[0], *pins)
        return resolve(_plan(LF, "lf.yaml", ws), Settings(workspace=ws)).sources["seq_len"]

    old, new = seq("llamafactory==0.8.3"), seq("llamafactory==0.9.5")
    assert (old.value, old.framework) == (1024, "LLaMA-Factory 0.8.3 (DataArguments.cutoff_len)")
    assert (new.value, new.framework) == (2048, "LLaMA-Factory 0.9.5 (DataArguments.cutoff_len)")


def test_trl_renamed_key_names_the_versions_between():
    plan = _plan(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: x\nmax_seq_length: 2048\noutput_dir: o\n", "sft.yaml"
    )
    found = [i for i in plan.issues if "`max_seq_length` is not an argument of TRL 1.16.0" in i.message]
    assert len(found) == 1 and "between 0.19.1 and 0.20.0" in found[0].message


def test_llamafactory_megatron_config_is_not_held_to_the_dumped_arguments():
    plan = _plan(LF + "tensor_model_parallel_size: 2\nbias_activation_fusion: true\n", "lf.yaml")
    assert not [i for i in plan.issues if "not an argument" in i.message]


def test_torchtune_lora_placement_switches_are_read_not_flagged():
    """torchtune's `apply_lora_to_mlp` / `apply_lora_to_output` add the MLP's and the output's adapters (its LoRA
    builders, e.g. torchtune/models/llama3/_component_builders.py `lora_llama3`): they are read into the targets and
    never named as not modelled."""
    text = (
        "model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n"
        "  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']\n  apply_lora_to_mlp: True\n"
        "  apply_lora_to_output: False\n  lora_rank: 8\n  lora_alpha: 16\nbatch_size: 2\n"
        "dataset:\n  _component_: torchtune.datasets.alpaca_cleaned_dataset\n"
        "optimizer:\n  _component_: torch.optim.AdamW\n  lr: 3e-4\n"
    )
    plan = _plan(text, "lora.yaml")
    assert {"gate_proj", "up_proj", "down_proj", "q_proj", "v_proj"} <= set(plan.lora_targets.value)
    assert [u.key for u in plan.unmodelled] == []


def test_axolotl_optimizer_default_by_release(tmp_path):
    # axolotl's config model defaults `optimizer` to a member of transformers' OptimizerNames, resolved by the dump:
    # ADAMW_HF (transformers' own loop AdamW) up to 0.7, ADAMW_TORCH_FUSED from 0.8
    config = "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nmicro_batch_size: 2\n"

    def optimizer(pin):
        (tmp_path / pin).mkdir()
        ws = _pin(tmp_path / pin, pin)
        return resolve(_plan(config, "cfg.yaml", ws), Settings(workspace=ws)).sources["optimizer"]

    old, new = optimizer("axolotl==0.6.0"), optimizer("axolotl==0.9.2")
    assert (old.value, old.framework) == ("adamw_hf", "axolotl 0.6.0 (HyperparametersConfig.optimizer)")
    assert (new.value, new.framework) == ("adamw_torch_fused", "axolotl 0.9.2 (HyperparametersConfig.optimizer)")
