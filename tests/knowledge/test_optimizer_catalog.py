"""Optimizer catalog: every spelling used by the supported frameworks resolves to a state-memory model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vramlens.knowledge.optimizers import (
    all_optimizer_names,
    all_optimizers,
    axolotl_names,
    class_path,
    eight_bit_variant,
    hf_names,
    lookup_optimizer,
    optimizer_by_name,
    suggest_optimizer,
)

# transformers `OptimizerNames`, complete (src/transformers/training_args.py at 00349ae8).
HF_OPTIMIZER_NAMES = [
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_torch_xla",
    "adamw_torch_npu_fused",
    "adamw_apex_fused",
    "adafactor",
    "adamw_anyprecision",
    "adamw_torch_4bit",
    "adamw_torch_8bit",
    "ademamix",
    "sgd",
    "adagrad",
    "adamw_bnb_8bit",
    "adamw_8bit",
    "ademamix_8bit",
    "lion_8bit",
    "lion_32bit",
    "paged_adamw_32bit",
    "paged_adamw_8bit",
    "paged_ademamix_32bit",
    "paged_ademamix_8bit",
    "paged_lion_32bit",
    "paged_lion_8bit",
    "rmsprop",
    "rmsprop_bnb",
    "rmsprop_bnb_8bit",
    "rmsprop_bnb_32bit",
    "galore_adamw",
    "galore_adamw_8bit",
    "galore_adafactor",
    "galore_adamw_layerwise",
    "galore_adamw_8bit_layerwise",
    "galore_adafactor_layerwise",
    "lomo",
    "adalomo",
    "grokadamw",
    "schedule_free_radam",
    "schedule_free_adamw",
    "schedule_free_sgd",
    "apollo_adamw",
    "apollo_adamw_layerwise",
    "stable_adamw",
]
# axolotl CustomSupportedOptimizers (src/axolotl/utils/schemas/enums.py), LLaMA-Factory switches
# (src/llamafactory/hparams/finetuning_args.py), legacy and other frameworks' names.
OTHER_SPELLINGS = [
    "optimi_adamw",
    "ao_adamw_4bit",
    "ao_adamw_8bit",
    "ao_adamw_fp8",
    "adopt_adamw",
    "came_pytorch",
    "muon",
    "dion",
    "sinkgd",
    "flash_adamw",
    "flash_adam",
    "flash_sgd",
    "flash_sgdw",
    "flash_lion",
    "q_galore_adamw8bit",
    "galore",
    "apollo",
    "badam",
    "adam_mini",
    "adamw_hf",
    "adam_8bit",
    "lorap",
    "lion",
    "sm3",
    "madgrad_wd",
    "adam",
]


@pytest.mark.parametrize("name", HF_OPTIMIZER_NAMES)
def test_every_transformers_optimizer_name_is_known(name: str) -> None:
    spec = lookup_optimizer(name)
    assert spec is not None
    assert spec.source


@pytest.mark.parametrize("name", OTHER_SPELLINGS)
def test_framework_specific_names_are_known(name: str) -> None:
    assert lookup_optimizer(name) is not None


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        # torchtune `_component_` class paths (torchtune recipes/configs/)
        ("torch.optim.AdamW", "adamw_torch"),
        ("bitsandbytes.optim.PagedAdamW8bit", "paged_adamw_8bit"),
        ("bitsandbytes.optim.PagedAdamW", "paged_adamw_32bit"),
        ("torchao.prototype.low_bit_optim.AdamW8bit", "adamw_torch_8bit"),
        ("torchao.optim.AdamW8bit", "adamw_torch_8bit"),
        ("torchao.prototype.low_bit_optim.CPUOffloadOptimizer", "ao_cpu_offload"),
        # bitsandbytes class names, litgpt bare names, axolotl aliases
        ("AdamW8bit", "adamw_bnb_8bit"),
        ("PagedAdamW8bit", "paged_adamw_8bit"),
        ("Lion8bit", "lion_8bit"),
        ("AdamW", "adamw_torch"),
        ("adamw_8bit", "adamw_bnb_8bit"),
        ("ao_adamw_4bit", "adamw_torch_4bit"),
        # case, "-" and "_" do not matter
        ("ADAMW_TORCH_FUSED", "adamw_torch_fused"),
        ("Paged-AdamW-8bit", "paged_adamw_8bit"),
    ],
)
def test_aliases_resolve_to_the_canonical_optimizer(spelling: str, canonical: str) -> None:
    spec = lookup_optimizer(spelling)
    assert spec is not None and spec.name == canonical


@pytest.mark.parametrize(
    "ds_type",
    [
        "AdamW",
        "Adam",
        "OneBitAdam",
        "ZeroOneAdam",
        "Lamb",
        "OneBitLamb",
        "Lion",
        "Adagrad",
        "MuAdam",
        "MuAdamW",
        "MuSGD",
        "CPUAdam",
    ],
)
def test_deepspeed_types_resolve_to_deepspeed_optimizers_with_fp32_state(ds_type: str) -> None:
    spec = lookup_optimizer(ds_type, context="deepspeed")
    assert spec is not None
    assert spec.library == "deepspeed"
    assert spec.state_bytes == 4


def test_bare_adamw_outside_deepspeed_is_torch_adamw() -> None:
    assert lookup_optimizer("AdamW").library == "torch"
    assert lookup_optimizer("adamw_torch", context="deepspeed").name == "adamw_torch"


def test_state_memory_models_distinguish_the_common_choices() -> None:
    def state_bytes_per_param(name: str, param_bytes: float) -> float:
        spec = optimizer_by_name(name)
        assert spec is not None
        return spec.states * (spec.state_bytes if spec.state_bytes is not None else param_bytes)

    # AdamW keeps two moments in the parameter dtype: 8 B on fp32 weights, 4 B on bf16 weights.
    assert state_bytes_per_param("adamw_torch", 4) == 8
    assert state_bytes_per_param("adamw_torch", 2) == 4
    # bitsandbytes 8-bit: ~2 B whatever the weights; paged keeps the size but may page out.
    assert state_bytes_per_param("adamw_bnb_8bit", 4) == pytest.approx(
        2 * (1 + 4 / 256), abs=1e-3
    )  # fp32 absmax per 256
    assert optimizer_by_name("paged_adamw_8bit").paged
    assert state_bytes_per_param("paged_adamw_32bit", 2) == 8
    assert state_bytes_per_param("adafactor", 4) < 1
    assert state_bytes_per_param("sgd", 4) == 0
    assert optimizer_by_name("galore_adamw").low_rank
    assert optimizer_by_name("galore_adamw_layerwise").layerwise
    assert optimizer_by_name("adamw_torch_fused").default_impl == "fused"
    assert optimizer_by_name("adamw_torch").default_impl == "foreach"


def test_did_you_mean_for_misspelled_names() -> None:
    assert lookup_optimizer("adamw_8bit_bnb") is None
    assert suggest_optimizer("adamw_8bit_bnb")[0] == "adamw_bnb_8bit"
    assert suggest_optimizer("adamw_troch")[0] == "adamw_torch"
    assert lookup_optimizer("") is None


def test_catalog_names_are_unique_and_sourced() -> None:
    names = all_optimizer_names()
    assert len(names) == len(set(names)) == len(all_optimizers())
    assert all(spec.source for spec in all_optimizers())


# The catalog is the one table of optimizer names: what each format accepts, what the fixes write, and the
# JSON Schemas' suggestions all come from it.


def test_the_catalog_says_which_names_transformers_accepts_exactly():
    assert sorted(hf_names()) == sorted(HF_OPTIMIZER_NAMES)
    assert set(hf_names()) < set(axolotl_names())
    for name in axolotl_names():
        assert lookup_optimizer(name) is not None, name


def test_every_class_path_a_fix_writes_reads_back_as_the_same_state_model():
    for name in hf_names():
        cls = class_path(name)
        if cls is None:
            continue
        spec, back = lookup_optimizer(name), lookup_optimizer(cls)
        assert back is not None, (name, cls)
        assert (back.states, back.state_bytes, back.paged, back.library) == (
            spec.states,
            spec.state_bytes,
            spec.paged,
            spec.library,
        ), (name, cls, back.name)
    assert class_path("paged_adamw_8bit") == "bitsandbytes.optim.PagedAdamW8bit"
    assert class_path("adamw_8bit") == "bitsandbytes.optim.AdamW8bit"
    assert class_path("adamw_torch_fused") == "torch.optim.AdamW"  # written with `fused: True`


def test_the_8bit_fix_names_a_catalog_optimizer_transformers_accepts():
    plain, paged = eight_bit_variant("adamw", False), eight_bit_variant("adamw", True)
    assert plain.name == "adamw_bnb_8bit" and paged.name == "paged_adamw_8bit"
    assert plain.eight_bit and paged.paged and {plain.name, paged.name} <= set(hf_names())


def test_the_json_schemas_suggest_the_catalog_names():
    root = Path(__file__).resolve().parents[2] / "schemas"
    hf = json.loads((root / "hf.schema.json").read_text(encoding="utf-8"))
    axolotl = json.loads((root / "axolotl.schema.json").read_text(encoding="utf-8"))
    assert hf["properties"]["optim"]["examples"] == list(hf_names())
    assert axolotl["properties"]["optimizer"]["examples"] == list(axolotl_names())
