"""The schema loader picks the dump of the right version, with that version's names and defaults; the concept
registry maps argument names across frameworks and refuses a type that cannot hold the value."""

from __future__ import annotations

import pytest
from vramlens.frameworks import concepts, schemas


def test_version_order():
    k = schemas.version_key
    assert k("0.9.10") < k("0.10.1") < k("0.10.2")
    assert k("3.0.0rc1") < k("3.0.0") < k("3.0.0.post1") < k("3.0.1")
    assert k("1.0") == k("1.0.0") and k("v2.6.1") == k("2.6.1")


@pytest.mark.parametrize(
    "asked,picked",
    [
        ("1.7.3", "1.7.3"),
        ("1.8.0", "1.7.3"),
        ("2.9", "2.6.1"),
        # the last release of each 3.x/4.x minor is dumped: a release is described by its own minor's
        ("3.5.0", "3.5.3"),
        ("3.0.0", "3.0.3"),
        ("3.12.6", "3.12.6"),
        ("3.13.0", "3.12.6"),
        ("4.0.0", "4.0.4"),  # `--tuner_type` is an argument from 4.1 on: `--train_type` until 4.0.4
        ("9.0", "4.6.0"),
        (None, "4.6.0"),
        ("0.1", "1.7.3"),
    ],
)
def test_the_dump_of_the_same_major_release_nearest_the_version(asked, picked):
    assert schemas.pick_version("ms-swift", asked) == picked
    assert schemas.schema("ms-swift", asked)["version"] == picked


def test_with_no_dump_of_its_own_minor_a_release_is_described_by_its_own_major(monkeypatch):
    # 3.0 renamed `--sft_type`, `--model_type`, …: with only 2.6.1 and 3.12.6 dumped, 3.5.0 is read as 3.12.6
    monkeypatch.setattr(schemas, "versions", lambda framework: ("1.7.3", "2.6.1", "3.12.6", "4.6.0"))
    assert schemas.pick_version("ms-swift", "3.5.0") == "3.12.6"
    assert schemas.pick_version("ms-swift", "4.0.0") == "4.6.0"
    assert schemas.pick_version("ms-swift", "3.13.1") == "3.12.6"
    # before 1.0 too a release is read at its own minor's dump (LLaMA-Factory is dumped at every 0.8/0.9 release)
    monkeypatch.setattr(schemas, "versions", lambda framework: ("0.7.0", "0.8.3", "0.9.5"))
    assert schemas.pick_version("llamafactory", "0.9.1") == "0.9.5"
    assert schemas.pick_version("llamafactory", "0.8.0") == "0.8.3"
    monkeypatch.undo()
    assert schemas.pick_version("llamafactory", "0.9.1") == "0.9.1"


def test_ms_swift_batch_size_names_by_version():
    # 1.x (swift/llm/utils/argument.py SftArguments): --batch_size, --sft_type, --model_id_or_path
    assert schemas.argument("ms-swift", "--batch_size", "1.7.3")["default"] == 1
    # ... and per_device_train_batch_size only as an unset compatibility field
    assert schemas.default("ms-swift", "per_device_train_batch_size", "1.7.3") is None
    assert schemas.default("ms-swift", "sft_type", "1.7.3") == "lora"
    assert schemas.argument("ms-swift", "model_id_or_path", "1.7.3") is not None
    # 3.x: transformers' names, --train_type; 4.x: --tuner_type
    assert schemas.argument("ms-swift", "batch_size", "3.12.6") is None
    assert schemas.argument("ms-swift", "per_device_train_batch_size", "3.12.6")["default"] == 1
    assert schemas.default("ms-swift", "train_type", "3.12.6") == "lora"
    assert schemas.argument("ms-swift", "tuner_type", "3.12.6") is None
    assert schemas.default("ms-swift", "tuner_type", "4.6.0") == "lora"
    for v in ("1.7.3", "3.12.6", "4.6.0"):
        for a in schemas.schema("ms-swift", v)["arguments"]:
            if a["name"] in ("batch_size", "per_device_train_batch_size"):
                assert concepts.match(a["name"], a["type"]).name == "micro_batch"


def test_defaults_that_changed_between_versions():
    # LLaMA-Factory DataArguments.cutoff_len: 1024 up to 0.9.0, 2048 from the 0.9.1 patch release on
    assert schemas.default("llamafactory", "cutoff_len", "0.8.3") == 1024
    assert schemas.default("llamafactory", "cutoff_len", "0.9.0") == 1024
    assert schemas.default("llamafactory", "cutoff_len", "0.9.1") == 2048
    assert schemas.default("llamafactory", "cutoff_len", "0.9.5") == 2048
    # torchtune's recipes: 0.1.1 reads cfg.enable_activation_checkpointing with no default (the config must set
    # it); 0.6.1 reads cfg.get("enable_activation_checkpointing", False)
    old = schemas.argument("torchtune", "enable_activation_checkpointing", "0.1.1", owner="full_finetune_distributed")
    new = schemas.argument("torchtune", "enable_activation_checkpointing", "0.6.1", owner="full_finetune_distributed")
    assert old["default"] is None and new["default"] is False
    # TRL SFTConfig: max_seq_length (None: min(tokenizer limit, 1024)) in 0.12, max_length 1024 in 1.x
    assert schemas.argument("trl", "max_seq_length", "0.12.2", owner="SFTConfig")["default"] is None
    assert schemas.argument("trl", "max_length", "1.16.0", owner="SFTConfig")["default"] == 1024


def test_inherited_arguments_are_found_through_the_class_bases():
    """An inherited argument is recorded once, under the class that defines it; the dump's `bases` lead a
    reader from the config class to it (trl 0.19.1: PPOConfig's response_length is OnPolicyConfig's)."""
    assert schemas.lineage("trl", "PPOConfig", "0.19.1") == ("PPOConfig", "OnPolicyConfig")
    assert schemas.lineage("trl", "GKDConfig", "1.16.0") == ("GKDConfig", "SFTConfig", "_BaseConfig")
    assert schemas.lineage("trl", "NoSuchConfig", "1.16.0") == ("NoSuchConfig",)
    assert schemas.default("trl", "response_length", "0.19.1", owner="OnPolicyConfig") == 53
    # a class TRL no longer ships is read from the newest release that has it
    assert schemas.newest_defining("trl", "PPOConfig", "1.16.0") == "1.12.0"  # trl/experimental/ppo until 1.12
    assert schemas.newest_defining("trl", "PPOConfig", "0.19.1") == "0.19.1"
    assert schemas.newest_defining("trl", "GRPOConfig", "0.12.2") == "0.14.0"  # older than every dump that has it
    assert schemas.newest_defining("trl", "NoSuchConfig") is None


def test_openrlhf_dotted_command_line_from_0_10_2():
    assert schemas.argument("openrlhf", "--pretrain", "0.10.1") is not None
    assert schemas.argument("openrlhf", "--model.model_name_or_path", "0.10.1") is None
    assert schemas.argument("openrlhf", "--model.model_name_or_path", "0.10.2") is not None
    assert schemas.argument("openrlhf", "--pretrain", "0.10.2") is None
    assert schemas.default("openrlhf", "--train.micro_batch_size", "0.11.2", owner="train_sft") == 8
    for name, concept in (
        ("--model.model_name_or_path", "model_id"),
        ("--train.micro_batch_size", "micro_batch"),
        ("--ds.zero_stage", "zero_stage"),
        ("--ds.packing_samples", "packing"),
    ):
        a = schemas.argument("openrlhf", name, "0.11.2")
        assert concepts.match(name, a["type"]).name == concept


def test_arguments_by_alias_and_dashes_and_owner():
    assert schemas.argument("transformers", "--per-device-train-batch-size", "4.46.3")["default"] == 8
    owners = {a["owner"] for a in schemas.arguments("trl", "beta", "1.16.0")}
    assert {"DPOConfig", "GRPOConfig"} <= owners
    assert schemas.argument("trl", "beta", "1.16.0", owner="NoSuchConfig") is None
    assert schemas.schema("no-such-framework") is None and schemas.argument("no-such-framework", "x") is None


def test_dumps_are_small_and_sorted():
    for fw in schemas.frameworks():
        for v in schemas.versions(fw):
            d = schemas.schema(fw, v)
            keys = [(a["name"], a["owner"]) for a in d["arguments"]]
            if fw != "verl":  # verl's dump comes from its own script, in its config's order
                assert keys == sorted(keys), (fw, v)
                # a package archive's hash, or the commit of a repository's release tag (Megatron-LM)
                assert d["source"][0].get("sha256") or len(d["source"][0]["commit"]) == 40
                assert d["version"] == v
            assert all(len(a.get("help") or "") <= 200 for a in d["arguments"])


@pytest.mark.parametrize(
    "name,type_hint,concept",
    [
        ("per_device_train_batch_size", "int", "micro_batch"),
        ("--micro-train-batch-size", "int", "micro_batch"),
        ("train_micro_batch_size_per_gpu", None, "micro_batch"),
        ("train.micro_batch_size", "int", "micro_batch"),
        ("Batch_Size", "Optional[int]", "micro_batch"),
        ("actor.ppo_micro_batch_size_per_gpu", "int", "micro_batch"),
        ("use_lora", "bool", "peft_method"),
        ("q_lora", "bool", "peft_method"),
        ("sft_type", "str", "peft_method"),
        ("tuner_type", "str", "peft_method"),
        ("finetuning_type", "Literal['lora', 'full']", "peft_method"),
        ("load_in_4bit", "bool", "quant_bits"),
        ("quantization_bit", "Optional[int]", "quant_bits"),
        ("actor.lora.rank", "int", "lora_r"),
        ("lora_target_modules", "list[str]", "lora_targets"),
        ("stage", "Literal['sft', 'dpo']", "objective"),
        ("zero_optimization.stage", "int", "zero_stage"),
        ("config_name", "str", "model_id"),
        ("deepspeed", "Union[dict, str]", "dist_strategy"),
    ],
)
def test_match(name, type_hint, concept):
    assert concepts.match(name, type_hint).name == concept


@pytest.mark.parametrize(
    "name,type_hint",
    [
        ("batch_size", "bool"),
        ("per_device_train_batch_size", "list[int]"),
        ("model_name_or_path", "bool"),
        ("lora_r", "dict"),
        ("use_lora", "list[str]"),
        ("lora_target_modules", "int"),
        ("logging_steps", "int"),
        ("seed", None),
        ("load_in_4bit", "float"),
    ],
)
def test_match_refuses(name, type_hint):
    assert concepts.match(name, type_hint) is None


def test_switches_and_registry():
    assert concepts.switch("--use-lora") == ("peft_method", "lora")
    assert concepts.switch("q_lora") == ("peft_method", "qlora")
    assert concepts.switch("load_in_4bit") == ("quant_bits", 4)
    assert concepts.switch("disable_gradient_checkpointing") == ("grad_checkpointing", False)
    assert concepts.switch("per_device_train_batch_size") is None
    from vramlens.plan import PLAN_CONCEPTS

    assert set(concepts.CONCEPTS) <= set(PLAN_CONCEPTS)
    for c in concepts.CONCEPTS.values():
        assert c.type in ("int", "float", "bool", "str", "list", "dtype", "model") and c.title and c.spellings


def test_enum_member_defaults_are_resolved_from_the_enum_that_defines_them():
    # axolotl `optimizer: OptimizerNames.ADAMW_HF.value` (transformers' enum), LLaMA-Factory
    # `quantization_method: QuantizationMethod.BNB` (its own extras/constants.py), TRL `FDivergenceType.REVERSE_KL`
    hf = schemas.argument("axolotl", "optimizer", "0.6.0")
    assert (hf["default"], hf["default_text"]) == ("adamw_hf", "OptimizerNames.ADAMW_HF.value")
    assert schemas.default("axolotl", "optimizer", "0.8.1") == "adamw_torch_fused"
    assert schemas.default("llamafactory", "quantization_method", "0.9.5") == "bnb"
    assert schemas.default("trl", "f_divergence_type", "0.19.1") == "reverse_kl"
